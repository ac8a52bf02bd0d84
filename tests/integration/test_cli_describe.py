"""``aiozkconsumer groups describe --members|--state|--all-groups``, malformed nodes, and
``groups delete --force-malformed``, for ZooKeeper-coordinated groups.

Most groups here are written by hand into ZooKeeper (registrations, owner and offset nodes,
and bad bytes where a tool must cope), under a chroot of the test's own so that
``--all-groups`` sees exactly them; their topics' partitions then come from Kafka metadata
(``--bootstrap-server``, as on a cluster without ``/brokers``). One group is run by real
connectors, to check that what the tools infer (host, assignment strategy) matches what the
consumer did. The pure judgements (:func:`group_state`, :func:`consumer_id_host`) are tested
without servers.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from _support import config_for, wait_settled
from click.testing import CliRunner, Result

from aiozkconsumer import ZookeeperConsumerConnector
from aiozkconsumer.cli import cli
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.tools import consumer_id_host, group_state
from aiozkconsumer.zk import layout

integration = pytest.mark.integration

PARTITIONS = 4
STAMP = 1700000000000


def invoke(*args: str) -> Result:
    """Run the CLI in-process; an exception other than the exit itself fails the test."""
    result = CliRunner().invoke(cli, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


async def ainvoke(*args: str) -> Result:
    """``invoke`` from an async test: in a worker thread, off the test's event loop."""
    return await anyio.to_thread.run_sync(lambda: invoke(*args))


# ---- the pure judgements -----------------------------------------------------------------------


def test_hosts_come_from_generated_consumer_ids_only() -> None:
    assert consumer_id_host("g", "g_web-1.example-1700000000000-1a2b3c4d") == "web-1.example"
    assert consumer_id_host("g_x", "g_x_h-1700000000000-00000000") == "h"
    assert consumer_id_host("g", "g_two") is None  # consumer.id set by hand
    assert consumer_id_host("g", "g_h-17-1a2b3c4d") is None
    assert consumer_id_host("g", "other_h-1700000000000-1a2b3c4d") is None


def test_a_group_is_stable_when_every_subscribed_partition_has_a_live_owner() -> None:
    partitions = {"t": [0, 1, 2]}
    owners = {"t": {0: "g_a-0", 1: "g_a-1", 2: "g_b-0"}}
    assert group_state(["g_a", "g_b"], partitions, owners) == ("Stable", [])
    assert group_state([], partitions, owners) == ("Empty", [])
    assert group_state(["g_a"], partitions, {"t": {0: "g_a-0"}}) == (
        "Rebalancing",
        [(TopicPartition("t", 1), None), (TopicPartition("t", 2), None)],
    )
    assert group_state(["g_a", "g_c"], partitions, owners) == (
        "Rebalancing",
        [(TopicPartition("t", 2), "g_b-0")],
    )


# ---- hand-written groups -----------------------------------------------------------------------

BAD_REGISTRATION = b"not json"
BAD_REGISTRATION_REASON = (
    "not valid JSON (consumer registration): Expecting value: line 1 column 1 (char 0) "
    "(data: b'not json')"
)
BAD_OFFSET_REASON = "offset is not a non-negative decimal number (data: b'abc')"


@pytest.fixture
async def topic(zk_kafka_cluster: LocalCluster, unique_topic: str) -> str:
    """A topic of 4 partitions; partition ``p`` holds ``5 * (p + 1)`` records."""
    await zk_kafka_cluster.create_topic(unique_topic, PARTITIONS)
    await zk_kafka_cluster.produce_to_partitions(
        unique_topic, {p: [(b"k", b"v")] * (5 * (p + 1)) for p in range(PARTITIONS)}
    )
    return unique_topic


class Chroot:
    """Writes a group's nodes by hand under a chroot of the test's own."""

    def __init__(self, zk_client: Any, root: str, cluster: LocalCluster) -> None:
        self.zk = zk_client
        self.root = root
        self.connect = ["--zookeeper", f"{cluster.zookeeper_connect}{root}"]
        self.cluster = ["--bootstrap-server", cluster.bootstrap_servers, *self.connect]

    async def put(self, path: str, data: bytes) -> None:
        full = f"{self.root}{path}"
        await self.zk.ensure_path(full.rsplit("/", 1)[0])
        if await self.zk.exists(full):
            await self.zk.set_data(full, data)
        else:
            await self.zk.create(full, data)

    async def delete(self, path: str) -> None:
        await self.zk.delete(f"{self.root}{path}")

    async def exists(self, path: str) -> bool:
        return bool(await self.zk.exists(f"{self.root}{path}"))

    async def member(self, group: str, consumer_id: str, subscription: dict[str, int]) -> None:
        data = layout.encode_registration(subscription, "static", STAMP)
        await self.put(layout.ids_path(group, consumer_id), data)

    async def owners(self, group: str, topic: str, owners: dict[int, str]) -> None:
        for partition, owner in owners.items():
            await self.put(layout.owner_path(group, topic, partition), owner.encode())


@pytest.fixture
async def chroot(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_group_id: str
) -> AsyncIterator[Chroot]:
    root = f"/{unique_group_id}"
    await zk_client.ensure_path(root)
    yield Chroot(zk_client, root, zk_kafka_cluster)
    await zk_client.deleteall(root)


def _ids(group: str) -> tuple[str, str]:
    """A member with a generated consumer id (host ``host-a.example``) and one with
    ``consumer.id=two``."""
    return f"{group}_host-a.example-{STAMP}-1a2b3c4d", f"{group}_two"


async def _healthy_group(chroot: Chroot, group: str, topic: str) -> tuple[str, str]:
    """Two members, 2 + 1 streams, owning the 4 partitions as range assigns them."""
    generated, fixed = _ids(group)
    await chroot.member(group, generated, {topic: 2})
    await chroot.member(group, fixed, {topic: 1})
    # Threads by string order: generated-0, generated-1, two-0; 4 partitions over 3 threads.
    await chroot.owners(
        group,
        topic,
        {0: f"{generated}-0", 1: f"{generated}-0", 2: f"{generated}-1", 3: f"{fixed}-0"},
    )
    return generated, fixed


async def _group_with_bad_nodes(chroot: Chroot, group: str, topic: str) -> tuple[str, str, str]:
    """The healthy group, plus a registration and an offset node written by hand, badly."""
    generated, fixed = await _healthy_group(chroot, group, topic)
    bad = f"{group}_bad"
    await chroot.put(layout.ids_path(group, bad), BAD_REGISTRATION)
    await chroot.put(layout.offset_path(group, topic, 0), b"2")
    await chroot.put(layout.offset_path(group, topic, 1), b"abc")
    await chroot.put(layout.offset_path(group, topic, 2), b"15")
    return generated, fixed, bad


def _member_json(consumer_id: str, host: str | None, streams: dict[str, int], owned: Any) -> Any:
    return {
        "consumer_id": consumer_id,
        "host": host,
        "client_id": None,
        "pattern": "static",
        "streams": streams,
        "assignment": owned,
    }


@integration
async def test_a_malformed_registration_and_offset_are_reported_beside_the_rest(
    chroot: Chroot, topic: str
) -> None:
    group = "g"
    generated, fixed, bad = await _group_with_bad_nodes(chroot, group, topic)
    bad_path = f"/consumers/{group}/ids/{bad}"
    offset_path = f"/consumers/{group}/offsets/{topic}/1"

    text = await ainvoke("groups", "describe", *chroot.cluster, "-g", group)
    assert text.exit_code == 0, text.output
    assert text.stderr.splitlines() == [
        f"Malformed node {bad_path}: {BAD_REGISTRATION_REASON}",
        f"Malformed node {offset_path}: {BAD_OFFSET_REASON}",
    ]
    assert [line.split() for line in text.stdout.splitlines()][1:] == [
        [topic, "0", "2", "5", "3", generated],
        [topic, "1", "-", "10", "-", generated],
        [topic, "2", "15", "15", "0", generated],
        [topic, "3", "-", "20", "-", fixed],
    ]

    as_json = json.loads(
        (await ainvoke("groups", "describe", *chroot.cluster, "-g", group, "-o", "json")).stdout
    )
    assert [m["consumer_id"] for m in as_json["members"]] == [generated, fixed]
    assert as_json["partitions"][1]["current_offset"] is None
    assert as_json["malformed"] == [
        {"path": bad_path, "reason": BAD_REGISTRATION_REASON},
        {"path": offset_path, "reason": BAD_OFFSET_REASON},
    ]

    members = await ainvoke(
        "groups", "describe", *chroot.connect, "-g", group, "--members", "-o", "json"
    )
    assert members.exit_code == 0, members.output
    assert json.loads(members.stdout) == {
        "group": group,
        "members": [
            _member_json(generated, "host-a.example", {topic: 2}, {topic: [0, 1, 2]}),
            _member_json(fixed, None, {topic: 1}, {topic: [3]}),
        ],
        "malformed": [{"path": bad_path, "reason": BAD_REGISTRATION_REASON}],
    }
    assert members.stderr == f"Malformed node {bad_path}: {BAD_REGISTRATION_REASON}\n"

    state = await ainvoke(
        "groups", "describe", *chroot.cluster, "-g", group, "--state", "-o", "json"
    )
    assert state.exit_code == 0, state.output
    assert json.loads(state.stdout) == {
        "group": group,
        "state": "Stable",
        "assignment_strategy": None,  # not judged while a registration does not parse
        "members": [bad, generated, fixed],
        "partitions_without_live_owner": [],
        "malformed": [{"path": bad_path, "reason": BAD_REGISTRATION_REASON}],
    }

    checked = await ainvoke("offsets", "check", *chroot.cluster, "-g", group)
    assert checked.exit_code == 0, checked.output
    assert f"Malformed node {offset_path}: {BAD_OFFSET_REASON}" in checked.stderr.splitlines()
    assert checked.stdout.splitlines()[2].split()[3:6] == ["unknown", "10", "unknown"]

    # verify-rebalance: the malformed registration is reported, the rest checked, and the
    # verification fails (it cannot vouch for that member).
    verified = await ainvoke("verify-rebalance", *chroot.cluster, "-g", group)
    assert verified.exit_code == 1, verified.output
    assert verified.stderr.splitlines() == [f"Malformed node {bad_path}: {BAD_REGISTRATION_REASON}"]
    assert verified.stdout.splitlines()[-1] == "Rebalance operation failed !"
    verified_json = await ainvoke("verify-rebalance", *chroot.cluster, "-g", group, "-o", "json")
    assert json.loads(verified_json.stdout)["malformed"] == [
        {"path": bad_path, "reason": BAD_REGISTRATION_REASON}
    ]

    # offsets export: the malformed offset node is reported and left out, the rest exported.
    exported = await ainvoke("offsets", "export", *chroot.connect, "-g", group, "-f", "-")
    assert exported.exit_code == 0, exported.output
    assert exported.stderr.splitlines() == [
        f"Malformed node {offset_path}: {BAD_OFFSET_REASON}",
        "exported 2 offsets of 1 groups to -",
    ]
    assert exported.stdout.splitlines() == [
        f"/consumers/{group}/offsets/{topic}/0:2",
        f"/consumers/{group}/offsets/{topic}/2:15",
    ]
    exported_json = await ainvoke(
        "offsets", "export", *chroot.connect, "-g", group, "-f", "-", "-o", "json"
    )
    assert exported_json.exit_code == 0, exported_json.output
    summary = json.loads(exported_json.stdout)
    assert summary["malformed"] == [{"path": offset_path, "reason": BAD_OFFSET_REASON}]
    assert [(o["partition"], o["offset"]) for o in summary["offsets"]] == [(0, 2), (2, 15)]


@integration
async def test_members_and_state_in_text(chroot: Chroot, topic: str) -> None:
    group = "h"
    generated, fixed = await _healthy_group(chroot, group, topic)
    members = await ainvoke("groups", "describe", *chroot.connect, "-g", group, "--members")
    assert members.exit_code == 0, members.output
    assert [line.split() for line in members.stdout.splitlines()] == [
        ["CONSUMER-ID", "HOST", "CLIENT-ID", "STREAMS", "#PARTITIONS", "ASSIGNMENT"],
        [generated, "host-a.example", "-", f"{topic}:2", "3", f"{topic}(0,1,2)"],
        [fixed, "-", "-", f"{topic}:1", "1", f"{topic}(3)"],
    ]
    assert members.stderr == ""
    state = await ainvoke("groups", "describe", *chroot.cluster, "-g", group, "--state")
    assert state.exit_code == 0, state.output
    assert [line.split() for line in state.stdout.splitlines()] == [
        ["GROUP", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
        [group, "range", "Stable", "2"],
    ]


@integration
async def test_state_is_rebalancing_without_a_live_owner(chroot: Chroot, topic: str) -> None:
    group = "h"
    generated, fixed = await _healthy_group(chroot, group, topic)
    args = ["groups", "describe", *chroot.cluster, "-g", group, "--state", "-o", "json"]
    stable = json.loads((await ainvoke(*args)).stdout)
    assert (stable["state"], stable["assignment_strategy"]) == ("Stable", "range")

    await chroot.delete(layout.owner_path(group, topic, 3))
    await chroot.put(layout.owner_path(group, topic, 2), f"{group}_gone-0".encode())
    result = await ainvoke(*args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "group": group,
        "state": "Rebalancing",
        "assignment_strategy": None,
        "members": [generated, fixed],
        "partitions_without_live_owner": [
            {"topic": topic, "partition": 2, "owner": f"{group}_gone-0"},
            {"topic": topic, "partition": 3, "owner": None},
        ],
        "malformed": [],
    }
    text = await ainvoke(*args[:-2])
    assert text.stdout.splitlines()[1].split() == [group, "-", "Rebalancing", "2"]
    assert text.stderr.splitlines() == [
        f"Partition [{topic},2]: owner {group}_gone-0 is no live member",
        f"Partition [{topic},3]: no owner",
    ]

    await chroot.delete(layout.ids_path(group, generated))
    await chroot.delete(layout.ids_path(group, fixed))
    empty = json.loads((await ainvoke(*args)).stdout)
    assert (empty["state"], empty["members"]) == ("Empty", [])


@integration
async def test_all_groups_describes_every_group(chroot: Chroot, topic: str) -> None:
    g_gen, g_fixed, g_bad = await _group_with_bad_nodes(chroot, "g", topic)
    h_gen, h_fixed = await _healthy_group(chroot, "h", topic)
    await chroot.put(layout.offset_path("idle", topic, 0), b"1")  # a group without members

    members = await ainvoke(
        "groups", "describe", *chroot.connect, "--all-groups", "--members", "-o", "json"
    )
    assert members.exit_code == 0, members.output
    assert json.loads(members.stdout) == {
        "groups": [
            {
                "group": "g",
                "members": [
                    _member_json(g_gen, "host-a.example", {topic: 2}, {topic: [0, 1, 2]}),
                    _member_json(g_fixed, None, {topic: 1}, {topic: [3]}),
                ],
                "malformed": [
                    {"path": f"/consumers/g/ids/{g_bad}", "reason": BAD_REGISTRATION_REASON}
                ],
            },
            {
                "group": "h",
                "members": [
                    _member_json(h_gen, "host-a.example", {topic: 2}, {topic: [0, 1, 2]}),
                    _member_json(h_fixed, None, {topic: 1}, {topic: [3]}),
                ],
                "malformed": [],
            },
            {"group": "idle", "members": [], "malformed": []},
        ]
    }

    state = await ainvoke(
        "groups", "describe", *chroot.cluster, "--all-groups", "--state", "-o", "json"
    )
    assert [
        (g["group"], g["state"], g["assignment_strategy"], g["members"])
        for g in json.loads(state.stdout)["groups"]
    ] == [
        ("g", "Stable", None, [g_bad, g_gen, g_fixed]),
        ("h", "Stable", "range", [h_gen, h_fixed]),
        ("idle", "Empty", None, []),
    ]

    offsets = await ainvoke("groups", "describe", *chroot.cluster, "--all-groups", "-o", "json")
    described = json.loads(offsets.stdout)["groups"]
    assert [d["group"] for d in described] == ["g", "h", "idle"]
    assert [p["current_offset"] for p in described[0]["partitions"]] == [2, None, 15, None]
    assert [len(d["malformed"]) for d in described] == [2, 0, 0]
    ends = {0: 5, 1: 10, 2: 15, 3: 20}
    assert described[2]["partitions"] == [
        {
            "topic": topic,
            "partition": p,
            "current_offset": 1 if p == 0 else None,
            "log_end_offset": ends[p],
            "lag": 4 if p == 0 else None,
            "consumer_id": None,
            "owner": None,
        }
        for p in range(PARTITIONS)
    ]

    text = await ainvoke("groups", "describe", *chroot.connect, "--all-groups", "--members")
    lines = text.stdout.splitlines()
    assert [line for line in lines if line.startswith("GROUP ")] == [
        "GROUP g",
        "GROUP h",
        "GROUP idle",
    ]
    assert lines.count("") == 2  # a blank line between groups


@integration
async def test_force_malformed_deletes_only_a_group_of_malformed_registrations(
    chroot: Chroot, topic: str
) -> None:
    await chroot.put(layout.ids_path("m", "m_left-by-hand"), BAD_REGISTRATION)
    await chroot.put(layout.offset_path("m", topic, 0), b"3")
    await _group_with_bad_nodes(chroot, "g", topic)
    h_gen, h_fixed = await _healthy_group(chroot, "h", topic)
    delete = ["groups", "delete", *chroot.connect]

    plain = await ainvoke(*delete, "-g", "m")
    assert plain.exit_code == 1
    assert plain.stderr == (
        "Error: Delete for group 'm' failed because its consumers are still active. Its only "
        "live members are malformed registration nodes (/consumers/m/ids/m_left-by-hand): "
        "--force-malformed deletes the group.\n"
    )
    assert await chroot.exists("/consumers/m")

    forced = await ainvoke(*delete, "-g", "m", "--force-malformed")
    assert forced.exit_code == 0, forced.output
    assert forced.stdout == "Deleted all consumer group information for group 'm' in zookeeper.\n"
    assert not await chroot.exists("/consumers/m")

    healthy = await ainvoke(*delete, "-g", "h", "--force-malformed")
    assert healthy.exit_code == 1
    assert healthy.stderr == (
        "Error: Delete for group 'h' failed because its consumers are still active. "
        "--force-malformed only deletes a group whose live members are all malformed "
        f"registrations; these parse: {h_gen}, {h_fixed}.\n"
    )
    mixed = await ainvoke(*delete, "-g", "g", "--force-malformed", "-o", "json")
    assert mixed.exit_code == 1
    assert json.loads(mixed.stdout)["results"][0]["deleted"] is False
    assert await chroot.exists("/consumers/h") and await chroot.exists("/consumers/g")


# ---- a group of real connectors ------------------------------------------------------------------


@integration
async def test_a_running_group_is_described_as_its_members_run_it(
    zk_kafka_cluster: LocalCluster, topic: str, unique_group_id: str
) -> None:
    zk = ["--zookeeper", zk_kafka_cluster.zookeeper_connect]
    group = unique_group_id
    config = config_for(
        zk_kafka_cluster,
        group,
        auto_commit_enable=False,
        partition_assignment_strategy="roundrobin",
    )
    async with (
        ZookeeperConsumerConnector(config.replace(consumer_id="a")) as a,
        ZookeeperConsumerConnector(config) as b,  # a generated consumer id: host-ms-uuid
    ):
        await a.create_message_streams({topic: 1})
        await b.create_message_streams({topic: 1})
        await wait_settled([a, b])
        state = await ainvoke("groups", "describe", *zk, "-g", group, "--state", "-o", "json")
        members = await ainvoke("groups", "describe", *zk, "-g", group, "--members", "-o", "json")
        refused = await ainvoke("groups", "delete", *zk, "-g", group, "--force-malformed")
        ids = sorted([a.consumer_id_string, b.consumer_id_string])
        owned = {
            c.consumer_id_string: sorted(tp.partition for tp in c.statistics().owned_partitions)
            for c in (a, b)
        }

    assert state.exit_code == 0, state.output
    assert json.loads(state.stdout) == {
        "group": group,
        "state": "Stable",
        "assignment_strategy": "roundrobin",
        "members": ids,
        "partitions_without_live_owner": [],
        "malformed": [],
    }
    hosts = {f"{group}_a": None, b.consumer_id_string: socket.gethostname()}
    assert json.loads(members.stdout) == {
        "group": group,
        "members": [_member_json(cid, hosts[cid], {topic: 1}, {topic: owned[cid]}) for cid in ids],
        "malformed": [],
    }
    assert refused.exit_code == 1
    assert "--force-malformed only deletes a group whose live members are all malformed" in (
        refused.stderr
    )


# ---- usage ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--members", "--state", "-g", "g"], "give --members or --state, not both"),
        (["--all-groups", "-g", "g"], "give --group or --all-groups, not both"),
        ([], "Missing option '--group'"),
        (["-g", "g", "--members", "--topic", "t"], "--topic narrows the offsets view"),
        (
            ["-g", "g", "--members", "--state", "--coordinator", "kafka", "--bootstrap-server"]
            + ["x:1"],
            "give --members or --state, not both",
        ),
        (
            ["--all-groups", "--coordinator", "kafka", "--bootstrap-server", "x:1"],
            "--all-groups is not used with --coordinator kafka",
        ),
    ],
)
def test_describe_usage_errors_exit_2(args: list[str], message: str) -> None:
    result = invoke("groups", "describe", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_force_malformed_needs_whole_groups() -> None:
    result = invoke("groups", "delete", "--topic", "t", "--force-malformed")
    assert result.exit_code == 2
    assert "--force-malformed deletes whole groups" in result.stderr
