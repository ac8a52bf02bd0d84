"""``aiozkconsumer groups list|describe --coordinator kafka``: Kafka-coordinated groups.

Members of ours (``group.coordinator=kafka``) join on both session clusters (Kafka 3.9 with
ZooKeeper, Kafka 4 KRaft); the CLI reads them back from the brokers' group coordinators and
must report exactly what the members know of themselves: member ids, assignments, committed
offsets and lag. The CLI runs its own event loop (``asyncio.run``), so it is invoked through
click's ``CliRunner`` in a worker thread while the test's loop runs the connectors. The
argument checks and the translation of the coordinator's answers run without servers.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from aiokafka import errors as aiokafka_errors
from click.testing import CliRunner, Result

from aiozkconsumer import (
    BrokerNotAvailableError,
    ConnectorState,
    ConsumerConfig,
    GroupCoordinatorError,
    TopicPartition,
    create_connector,
)
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.cli import cli
from aiozkconsumer.kafka.group import encode_assignment
from aiozkconsumer.kafka.group_admin import ConsumerGroupDescribeRequest, DescribeGroupsRequest
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.tools import (
    KafkaGroupAdmin,
    KafkaGroupDescription,
    MemberAssignmentState,
    PartitionAssignmentState,
    UnknownGroupError,
)

pytestmark = pytest.mark.integration

HEADERS = [
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
]


def invoke(*args: str) -> Result:
    """Run the CLI in-process; an exception other than the exit itself fails the test."""
    result = CliRunner().invoke(cli, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


async def ainvoke(*args: str) -> Result:
    """``invoke`` from an async test: in a worker thread, off the test's event loop."""
    return await anyio.to_thread.run_sync(lambda: invoke(*args))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def kafka_config(cluster: LocalCluster, group: str, **kw: Any) -> ConsumerConfig:
    kw.setdefault("auto_commit_enable", False)  # only the test's commits: exact offsets
    kw.setdefault("session_timeout_ms", 10000)
    kw.setdefault("heartbeat_interval_ms", 1000)
    return ConsumerConfig(
        group_id=group,
        group_coordinator="kafka",
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        **kw,
    )


async def _consume(connector: ConsumerConnector, topic: str, count: int) -> None:
    streams = await connector.create_message_streams({topic: 1})
    seen = 0
    with anyio.fail_after(60):
        async for _ in streams[topic][0]:
            seen += 1
            if seen == count:
                return


async def _until(c: ConsumerConnector, predicate: Any, limit_s: float = 60) -> None:
    with anyio.fail_after(limit_s):
        while not predicate():
            await c.wait_for_state_change()


def _by_topic(tps: Sequence[TopicPartition]) -> dict[str, list[int]]:
    result: dict[str, list[int]] = {}
    for tp in tps:
        result.setdefault(tp.topic, []).append(tp.partition)
    return result


# ---- a group with one member ----------------------------------------------------------------


async def test_describe_and_list_report_the_member_its_offsets_and_lag(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group, bootstrap = unique_topic, unique_group_id, any_cluster.bootstrap_servers
    await any_cluster.create_topic(topic, 3)
    sizes = {0: 5, 1: 10, 2: 15}
    await any_cluster.produce_to_partitions(
        topic, {p: [(b"k", b"v%d" % i) for i in range(n)] for p, n in sizes.items()}
    )
    kafka = ("--coordinator", "kafka", "--bootstrap-server", bootstrap)
    async with create_connector(kafka_config(any_cluster, group)) as c:
        await _consume(c, topic, sum(sizes.values()))
        assert await c.commit_offsets() == 3
        # Records the member has not read: partition 1 lags by exactly 7.
        await any_cluster.produce_to_partitions(topic, {1: [(b"k", b"late")] * 7})
        ends = await any_cluster.log_end_offsets(topic)
        stats = c.statistics()

        as_json = await ainvoke("groups", "describe", "-g", group, *kafka, "-o", "json")
        text = await ainvoke("groups", "describe", "--group", group, *kafka)
        listed = await ainvoke("groups", "list", *kafka)
        listed_json = await ainvoke("groups", "list", *kafka, "--output", "json")
        # --bootstrap-server alone means the Kafka coordinators (no ZooKeeper is dialled).
        alone = await ainvoke("groups", "list", "--bootstrap-server", bootstrap)
        described_alone = await ainvoke(
            "groups", "describe", "-g", group, "--bootstrap-server", bootstrap, "-o", "json"
        )
        # offsets check of a Kafka group: from its coordinator, with --bootstrap-server alone
        # or --offsets-storage kafka for a group ZooKeeper does not know.
        checked = await ainvoke("offsets", "check", "-g", group, "--bootstrap-server", bootstrap)
        checked_storage = await ainvoke(
            "offsets", "check", "-g", group, "--offsets-storage", "kafka",
            "--zookeeper", any_cluster.zookeeper_connect, "--bootstrap-server", bootstrap,
            "-o", "json",
        )  # fmt: skip

    assert ends == {0: 5, 1: 17, 2: 15}
    member_id = stats.member_id
    assert member_id is not None
    assert stats.owned_partitions == tuple(TopicPartition(topic, p) for p in range(3))

    assert as_json.exit_code == 0, as_json.output
    described = json.loads(as_json.stdout)
    assert alone.exit_code == 0, alone.output
    assert group in alone.stdout.split()
    assert described_alone.exit_code == 0, described_alone.output
    assert checked.exit_code == 0, checked.output
    assert [line.split() for line in checked.stdout.splitlines()] == [
        ["Group", "Topic", "Pid", "Offset", "logSize", "Lag", "Owner"],
        [group, topic, "0", "5", "5", "0", member_id],
        [group, topic, "1", "10", "17", "7", member_id],
        [group, topic, "2", "15", "15", "0", member_id],
    ]
    assert checked_storage.exit_code == 0, checked_storage.output
    assert [
        (p["pid"], p["offset"], p["log_size"], p["owner"])
        for p in json.loads(checked_storage.stdout)["partitions"]
    ] == [(0, 5, 5, member_id), (1, 10, 17, member_id), (2, 15, 15, member_id)]
    assert json.loads(described_alone.stdout)["coordinator"] == described["coordinator"]
    assert described["group"] == group
    assert described["state"] == "Stable"
    assert described["protocol_type"] == "consumer"
    assert described["assignor"] == "range"
    assert described["coordinator"]["address"] in bootstrap.split(",")
    [member] = described["members"]
    assert member["consumer_id"] == member_id
    assert member["client_id"] == group  # client.id defaults to group.id
    assert member["host"].endswith("127.0.0.1")
    assert member["assignment"] == _by_topic(stats.owned_partitions)
    assert described["members_without_partitions"] == []
    assert described["partitions"] == [
        {
            "topic": topic,
            "partition": p,
            "current_offset": sizes[p],
            "log_end_offset": ends[p],
            "lag": ends[p] - sizes[p],
            "consumer_id": member_id,
            "host": member["host"],
            "client_id": group,
        }
        for p in range(3)
    ]
    assert [p["lag"] for p in described["partitions"]] == [0, 7, 0]

    assert text.exit_code == 0, text.output
    assert text.stderr == ""
    lines = text.stdout.splitlines()
    assert lines[0].split() == HEADERS
    assert lines[0].index("PARTITION") == max(30, len(topic)) + 1  # "%-30s " widened
    host = member["host"]
    assert [line.split() for line in lines[1:]] == [
        [topic, "0", "5", "5", "0", member_id, host, group],
        [topic, "1", "10", "17", "7", member_id, host, group],
        [topic, "2", "15", "15", "0", member_id, host, group],
    ]

    assert listed.exit_code == 0, listed.output
    assert group in listed.stdout.splitlines()
    listings = json.loads(listed_json.stdout)
    assert group in listings["groups"]
    listing = {"group": group, "state": "Stable", "protocol_type": "consumer", "type": "classic"}
    assert listing in listings["listings"]

    # The member left (LeaveGroup): the group is Empty, its offsets stay, nobody owns them.
    empty = await ainvoke("groups", "describe", "-g", group, *kafka, "-o", "json")
    empty_text = await ainvoke("groups", "describe", "-g", group, *kafka)
    after = json.loads(empty.stdout)
    assert after["state"] == "Empty"
    assert after["assignor"] is None
    assert after["members"] == []
    assert [(p["current_offset"], p["lag"], p["consumer_id"]) for p in after["partitions"]] == [
        (5, 0, None),
        (10, 7, None),
        (15, 0, None),
    ]
    assert empty_text.exit_code == 0
    assert empty_text.stderr == f"Consumer group '{group}' has no active members.\n"
    assert empty_text.stdout.splitlines()[2].split() == [topic, "1", "10", "17", "7", "-", "-", "-"]
    again = json.loads((await ainvoke("groups", "list", *kafka, "-o", "json")).stdout)
    empty_listing = {"group": group, "state": "Empty", "protocol_type": "consumer"}
    assert {**empty_listing, "type": "classic"} in again["listings"]


async def test_a_member_without_partitions_gets_a_row_of_its_own(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = unique_topic, unique_group_id
    await any_cluster.create_topic(topic, 1)
    await any_cluster.produce_to_partitions(topic, {0: [(b"k", b"v")] * 4})
    config = kafka_config(any_cluster, group)
    async with create_connector(config) as a, create_connector(config) as b:
        await a.create_message_streams({topic: 1})
        await b.create_message_streams({topic: 1})

        def settled() -> bool:
            sa, sb = a.statistics(), b.statistics()
            return (
                a.state is ConnectorState.RUNNING
                and b.state is ConnectorState.RUNNING
                and sa.group_generation == sb.group_generation
                and len(sa.owned_partitions) + len(sb.owned_partitions) == 1
            )

        await _until(a, settled)
        owner, idle = (a, b) if a.statistics().owned_partitions else (b, a)
        owner_id, idle_id = owner.statistics().member_id, idle.statistics().member_id
        args = ("-g", group, "--coordinator", "kafka", "--bootstrap-server")
        as_json = await ainvoke(
            "groups", "describe", *args, any_cluster.bootstrap_servers, "-o", "json"
        )
        text = await ainvoke("groups", "describe", *args, any_cluster.bootstrap_servers)

    described = json.loads(as_json.stdout)
    assert described["state"] == "Stable"
    assert sorted(m["consumer_id"] for m in described["members"]) == sorted([owner_id, idle_id])
    assignments = {m["consumer_id"]: m["assignment"] for m in described["members"]}
    assert assignments == {owner_id: {topic: [0]}, idle_id: {}}
    assert described["members_without_partitions"] == [idle_id]
    # Nothing committed yet (auto-commit off): no offset, no lag, but the owner and the end.
    assert described["partitions"][0]["consumer_id"] == owner_id
    assert described["partitions"][0]["log_end_offset"] == 4
    assert described["partitions"][0]["current_offset"] is None
    assert described["partitions"][0]["lag"] is None

    rows = [line.split() for line in text.stdout.splitlines()[1:]]
    assert rows[0][:6] == [topic, "0", "-", "4", "-", owner_id]
    assert rows[1][:6] == ["-", "-", "-", "-", "-", idle_id]
    assert len(rows) == 2


async def test_an_unknown_group_exits_4(any_cluster: LocalCluster, unique_group_id: str) -> None:
    group = unique_group_id
    kafka = ("--coordinator", "kafka", "--bootstrap-server", any_cluster.bootstrap_servers)
    for extra in ((), ("-o", "json")):
        result = await ainvoke("groups", "describe", "-g", group, *kafka, *extra)
        assert result.exit_code == 4, result.output
        assert result.stderr == f"Error: Consumer group '{group}' does not exist.\n"
        assert result.stdout == ""
    listed = await ainvoke("groups", "list", *kafka)
    assert listed.exit_code == 0
    assert group not in listed.stdout.splitlines()


async def test_the_admin_describes_a_group_by_its_topics(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    other = f"{unique_topic}-other"
    for t in (unique_topic, other):
        await any_cluster.create_topic(t, 2)
        await any_cluster.produce_to_partitions(t, {0: [(b"k", b"v")] * 3})
    async with create_connector(kafka_config(any_cluster, unique_group_id)) as c:
        streams = await c.create_message_streams({unique_topic: 1, other: 1})
        with anyio.fail_after(60):
            for t in (unique_topic, other):
                seen = 0
                async for _ in streams[t][0]:
                    seen += 1
                    if seen == 3:
                        break
        await c.commit_offsets()
        async with KafkaGroupAdmin(any_cluster.bootstrap_servers) as admin:
            whole = await admin.describe_group(unique_group_id)
            one = await admin.describe_group(unique_group_id, topics=[other])
            with pytest.raises(UnknownGroupError):
                await admin.describe_group(f"{unique_group_id}-nosuch")
    assert {p.topic for p in whole.partitions} == {unique_topic, other}
    assert [(p.topic, p.partition, p.offset, p.lag) for p in one.partitions] == [
        (other, 0, 3, 0),
        (other, 1, 0, 0),
    ]
    assert one.members == whole.members  # the filter is of partitions, not of members


# ---- without servers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["groups", "describe", "-g", "g", "--coordinator", "kafka"], "needs --bootstrap-server"),
        (["groups", "list", "--coordinator", "kafka"], "needs --bootstrap-server"),
        (
            [
                "groups",
                "describe",
                "-g",
                "g",
                "--coordinator",
                "kafka",
                "--bootstrap-server",
                "b:1",
                "--zookeeper",
                "z:2181",
            ],
            "--zookeeper is not used with --coordinator kafka",
        ),
        (
            [
                "groups",
                "list",
                "--coordinator",
                "kafka",
                "--bootstrap-server",
                "b:1",
                "--connect-timeout-ms",
                "100",
            ],
            "--connect-timeout-ms is not used with --coordinator kafka",
        ),
        (
            [
                "groups",
                "describe",
                "-g",
                "g",
                "--coordinator",
                "kafka",
                "--bootstrap-server",
                "b:1",
                "--offsets-storage",
                "kafka",
            ],
            "--offsets-storage is not used with --coordinator kafka",
        ),
        (["groups", "describe", "-g", "g", "--coordinator", "broker"], "'broker' is not one of"),
        (["groups", "describe", "-g", "a/b"], "cannot be a ZooKeeper path element"),
    ],
)
def test_argument_errors_exit_2(args: list[str], message: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.output


def test_the_bootstrap_server_may_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Set, but unreachable: past the argument checks, to the connection (status 3).
    monkeypatch.setenv("AIOZKCONSUMER_BOOTSTRAP_SERVER", f"127.0.0.1:{_free_port()}")
    monkeypatch.setenv("AIOZKCONSUMER_ZOOKEEPER", "ignored:2181")  # the environment is no error
    result = invoke("groups", "list", "--coordinator", "kafka")
    assert result.exit_code == 3, result.output


@pytest.mark.parametrize(
    "args", [["groups", "list"], ["groups", "describe", "-g", "g", "-o", "json"]], ids=str
)
def test_unreachable_brokers_exit_3_with_one_line(args: list[str]) -> None:
    bootstrap = f"127.0.0.1:{_free_port()}"
    result = invoke(*args, "--coordinator", "kafka", "--bootstrap-server", bootstrap)
    assert result.exit_code == 3, result.output
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(f"Error: could not reach any Kafka broker of '{bootstrap}'")


def test_help_explains_both_coordinators() -> None:
    for command in (["groups"], ["groups", "list"], ["groups", "describe"]):
        text = invoke(*command, "--help").stdout
        assert "--coordinator" in text and "zookeeper" in text and "kafka" in text
        assert "--bootstrap-server" in text


def test_the_description_renders_as_the_tool_did() -> None:
    member = MemberAssignmentState("m-1", "client", "/10.0.0.1", (TopicPartition("t", 0),))
    idle = MemberAssignmentState("m-2", "client", "/10.0.0.2", ())
    description = KafkaGroupDescription(
        group="g",
        state="Stable",
        protocol_type="consumer",
        assignor="range",
        coordinator_id=1,
        coordinator="broker1:9092",
        members=(member, idle),
        partitions=(
            PartitionAssignmentState("t", 0, 40, 50, "m-1", "/10.0.0.1", "client"),
            PartitionAssignmentState("t", 1, None, 7),
        ),
    )
    assert description.members_without_partitions == ("m-2",)
    assert description.partitions[0].lag == 10
    assert description.partitions[1].lag is None
    assert description.to_json()["members"][0] == {
        "consumer_id": "m-1",
        "group_instance_id": None,
        "client_id": "client",
        "host": "/10.0.0.1",
        "assignment": {"t": [0]},
    }
    assert description.to_json()["partitions"][1] == {
        "topic": "t",
        "partition": 1,
        "current_offset": None,
        "log_end_offset": 7,
        "lag": None,
        "consumer_id": None,
        "host": None,
        "client_id": None,
    }


# The coordinator's answers, from a stand-in for aiokafka's AIOKafkaAdminClient.


class _Groups:
    """A DescribeGroups v5 answer of one group: ``(code, group, state, protocol type,
    protocol, members)``, each member ``(member id, client id, host, metadata, assignment)``
    as DescribeGroups v0-v3 had them (no instance id: ``None`` is put in)."""

    def __init__(self, code: int, group: str, state: str, ptype: str, proto: str, members: Any):
        v5_members = [(m[0], None, *m[1:], {}) for m in members]
        self.groups = [(code, group, state, ptype, proto, v5_members, 0, {})]


class FakeAdminClient:
    """A stand-in for aiokafka's admin client (coordinator lookup, OffsetFetch) and the
    project's Kafka client (``raw.send`` of DescribeGroups), answering from a script."""

    def __init__(self, describe: list[Any], offsets: dict[Any, Any] | None = None) -> None:
        self.describe = describe  # per call: an answer (a tuple) or an exception to raise
        self.offsets = offsets or {}
        self.calls = 0

    async def find_coordinator(self, group: str) -> int:
        return 0

    async def send(self, node: int, request: Any) -> Any:
        if isinstance(request, ConsumerGroupDescribeRequest):
            raise aiokafka_errors.IncompatibleBrokerVersion("no consumer groups here")
        assert isinstance(request, DescribeGroupsRequest)
        self.calls += 1
        answer = self.describe.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return _Groups(*answer)

    async def list_consumer_group_offsets(self, group: str) -> dict[Any, Any]:
        return self.offsets

    async def close(self) -> None:
        pass


class FakeKafka:
    def __init__(self, raw: FakeAdminClient) -> None:
        self.raw = raw

    async def partitions_for_topics(self, topics: Any) -> dict[str, tuple[int, ...]]:
        return dict.fromkeys(topics, (0,))

    async def log_end_offsets(
        self, tps: Any, isolation_level: int = 0
    ) -> dict[TopicPartition, int]:
        return dict.fromkeys(tps, 9)

    def broker_address(self, node: int) -> str:
        return f"broker{node}:9092"

    async def close(self) -> None:
        pass


def _admin(fake: FakeAdminClient, timeout_ms: int = 5000) -> KafkaGroupAdmin:
    admin = KafkaGroupAdmin("fake:9092", request_timeout_ms=timeout_ms)
    admin._admin = fake  # type: ignore[assignment]
    admin._kafka = FakeKafka(fake)  # type: ignore[assignment]
    return admin


async def test_retriable_answers_are_retried_then_decoded() -> None:
    assignment = encode_assignment([TopicPartition("t", 0)])
    fake = FakeAdminClient(
        [
            aiokafka_errors.CoordinatorNotAvailableError("not yet"),
            (14, "g", "", "", "", []),  # COORDINATOR_LOAD_IN_PROGRESS
            (0, "g", "Stable", "consumer", "range", [("m", "c", "/h", b"", assignment)]),
        ]
    )
    description = await _admin(fake).describe_group("g")
    assert fake.calls == 3
    assert description.coordinator == "broker0:9092"
    assert description.members == (
        MemberAssignmentState("m", "c", "/h", (TopicPartition("t", 0),)),
    )
    assert description.partitions == (PartitionAssignmentState("t", 0, None, 9, "m", "/h", "c"),)


@pytest.mark.parametrize(
    ("answer", "error", "match"),
    [
        ((0, "g", "Dead", "", "", []), UnknownGroupError, "Consumer group 'g' does not exist."),
        ((69, "g", "", "", "", []), UnknownGroupError, "does not exist"),  # GROUP_ID_NOT_FOUND
        ((0, "g", "Stable", "connect", "default", []), UnknownGroupError, "not a consumer group"),
        ((30, "g", "", "", "", []), GroupCoordinatorError, "GROUP_AUTHORIZATION_FAILED"),
        (aiokafka_errors.KafkaConnectionError("refused"), BrokerNotAvailableError, "no answer"),
    ],
    ids=["dead", "not-found", "connect", "authorization", "no-answer"],
)
async def test_answers_are_translated(answer: Any, error: type[Exception], match: str) -> None:
    fake = FakeAdminClient([answer] * 50)
    with pytest.raises(error, match=match):
        await _admin(fake, timeout_ms=300).describe_group("g")
