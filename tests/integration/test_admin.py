"""``aiozkconsumer.tools``: the pure helpers, and ``GroupAdmin`` against a real cluster."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from _support import config_for, wait_settled

from aiozkconsumer import ZookeeperConsumerConnector
from aiozkconsumer.errors import (
    InvalidConfigError,
    NoBrokersError,
    UnknownTopicError,
    ZookeeperConnectionError,
)
from aiozkconsumer.records import MessageAndMetadata, TopicPartition
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing._layout import encode_topic_partitions
from aiozkconsumer.tools import (
    GroupActiveError,
    GroupAdmin,
    MessageFormatter,
    OffsetEntry,
    OffsetsFileError,
    UnknownGroupError,
    check_ownership,
    format_offsets_file,
    owner_consumer_id,
    parse_offsets_file,
    parse_properties,
)
from aiozkconsumer.zk import layout

integration = pytest.mark.integration

# ---- pure helpers ----------------------------------------------------------------------------


def test_offsets_file_round_trips_and_keeps_the_originals_format() -> None:
    entries = [OffsetEntry("g", "t", 0, 4711), OffsetEntry("g", "t", 10, 0)]
    text = format_offsets_file(entries)
    assert text == "/consumers/g/offsets/t/0:4711\n/consumers/g/offsets/t/10:0\n"
    assert parse_offsets_file(text.splitlines()) == entries


def test_offsets_file_skips_blank_and_comment_lines() -> None:
    lines = ["# exported", "", "  /consumers/g-1/offsets/t.x/3:12  \r\n"]
    assert parse_offsets_file(lines) == [OffsetEntry("g-1", "t.x", 3, 12)]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("no colon here", "expected '<path>:<offset>'"),
        ("/consumers/g/owners/t/0:5", "not an offset node"),
        ("/consumers/g/offsets/t/x:5", "not an offset node"),
        ("/consumers/g/offsets/t/0:-5", "not a non-negative decimal number"),
        ("/consumers/g/offsets/t/0:five", "not a non-negative decimal number"),
        ("/consumers/g/offsets/t/0:", "not a non-negative decimal number"),
    ],
)
def test_malformed_offsets_lines_name_their_line_number(line: str, reason: str) -> None:
    with pytest.raises(OffsetsFileError, match=reason) as info:
        parse_offsets_file(["/consumers/g/offsets/t/0:1", "", line])
    assert info.value.line_number == 3
    assert str(info.value).startswith("line 3: ")


def test_properties_files_parse_as_java_does() -> None:
    text = (
        "# comment\n"
        "! another\n"
        "group.id = billing\n"
        "zookeeper.connect:127.0.0.1:2181/kafka\n"
        "auto.commit.enable false\n"
        "client.id=a\\\n"
        "    b\n"
        "key\\=with\\:seps=v\\tx\n"
        "empty=\n"
    )
    assert parse_properties(text) == {
        "group.id": "billing",
        "zookeeper.connect": "127.0.0.1:2181/kafka",
        "auto.commit.enable": "false",
        "client.id": "ab",
        "key=with:seps": "v\tx",
        "empty": "",
    }


def test_owner_values_give_consumer_ids() -> None:
    assert owner_consumer_id("g_host-1490000000000-1a2b3c4d-0") == "g_host-1490000000000-1a2b3c4d"
    assert owner_consumer_id("plain") == "plain"


def test_ownership_rules_are_verify_consumer_rebalance_s() -> None:
    parts = {"t": [0, 1]}
    valid = {"t": ["g_a-0", "g_b-0"]}
    assert check_ownership(parts, {"t": {0: "g_a-0", 1: "g_b-0"}}, valid, "g") == []
    assert check_ownership(parts, {"t": {0: "g_a-0"}}, valid, "g") == [
        "No owner for partition [t,1]"
    ]
    assert check_ownership(parts, {"t": {0: "g_a-0", 1: "g_gone-0"}}, valid, "g") == [
        "Owner g_gone-0 for partition [t,1] is not a valid member of consumer group g"
    ]
    assert check_ownership(parts, {}, valid, "g") == [
        "No owners for any partitions for topic t",
        "No owner for partition [t,0]",
        "No owner for partition [t,1]",
    ]
    assert (
        check_ownership(parts, {"t": {0: "x-0", 1: "x-0"}}, {}, "g")
        == ["No consumer ids registered for topic t"] * 2
    )


def _msg(key: bytes | None, value: bytes | None, ts_type: int = 0) -> MessageAndMetadata:
    return MessageAndMetadata("t", 3, 42, key, value, 1490000000000, ts_type, ())


def test_default_formatter_writes_the_value_and_a_newline() -> None:
    assert MessageFormatter().format(_msg(b"k", b"v")) == b"v\n"
    assert MessageFormatter().format(_msg(b"k", None)) == b"null\n"


def test_formatter_properties_add_fields_in_kafkas_order() -> None:
    fmt = MessageFormatter.from_properties(
        {
            "print.key": "true",
            "print.timestamp": " TRUE ",
            "print.partition": "true",
            "print.offset": "true",
            "key.separator": ",",
            "line.separator": "|",
        }
    )
    assert fmt.format(_msg(b"k", b"v")) == b"CreateTime:1490000000000,Partition:3,Offset:42,k,v|"
    assert fmt.format(_msg(None, b"v", 1)).startswith(b"LogAppendTime:1490000000000,")
    assert fmt.format(_msg(None, b"v", -1)) == b"NO_TIMESTAMP,Partition:3,Offset:42,null,v|"
    no_value = MessageFormatter.from_properties({"print.key": "true", "print.value": "false"})
    assert no_value.format(_msg(b"k", b"v")) == b"k\t\n"


def test_unknown_formatter_properties_are_rejected() -> None:
    with pytest.raises(InvalidConfigError, match="print.keys"):
        MessageFormatter.from_properties({"print.keys": "true"})


# ---- GroupAdmin on a real cluster ------------------------------------------------------------

PARTITIONS = 4


@pytest.fixture
async def topic(zk_kafka_cluster: LocalCluster, unique_topic: str) -> str:
    await zk_kafka_cluster.create_topic(unique_topic, PARTITIONS)
    await zk_kafka_cluster.produce_to_partitions(
        unique_topic, {p: [(b"k", b"v")] * (10 * (p + 1)) for p in range(PARTITIONS)}
    )
    return unique_topic


@pytest.fixture
async def admin(zk_kafka_cluster: LocalCluster) -> AsyncIterator[GroupAdmin]:
    async with GroupAdmin(zk_kafka_cluster.zookeeper_connect) as a:
        yield a


async def _set_offsets(zk_client: Any, group: str, topic: str, offsets: dict[int, int]) -> None:
    for p, o in offsets.items():
        path = layout.offset_path(group, topic, p)
        await zk_client.ensure_path(layout.offsets_dir(group, topic))
        if await zk_client.exists(path):
            await zk_client.set_data(path, str(o).encode())
        else:
            await zk_client.create(path, str(o).encode())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@integration
async def test_unreachable_zookeeper_fails_within_the_connection_timeout() -> None:
    with anyio.fail_after(10):
        with pytest.raises(ZookeeperConnectionError, match="within"):
            async with GroupAdmin(f"127.0.0.1:{_free_port()}", connection_timeout_ms=300):
                pass


@integration
async def test_describe_shows_offsets_log_end_lag_and_members(
    zk_kafka_cluster: LocalCluster, admin: GroupAdmin, topic: str, unique_group_id: str
) -> None:
    group = unique_group_id
    # 2 members x 1 stream and a third member with nothing left: 4 partitions, range.
    config = config_for(zk_kafka_cluster, group, auto_commit_enable=False)
    async with (
        ZookeeperConsumerConnector(config.replace(consumer_id="a")) as a,
        ZookeeperConsumerConnector(config.replace(consumer_id="b")) as b,
        ZookeeperConsumerConnector(config.replace(consumer_id="c")) as c,
    ):
        await a.create_message_streams({topic: 2})
        await b.create_message_streams({topic: 2})
        await c.create_message_streams({topic: 1})
        await wait_settled([a, b, c])
        await a.commit_offsets({TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 20})
        description = await admin.describe_group(group)

    ends = await zk_kafka_cluster.log_end_offsets(topic)
    rows = {p.partition: p for p in description.partitions}
    assert sorted(rows) == list(range(PARTITIONS))
    assert [rows[p].log_end_offset for p in range(PARTITIONS)] == [ends[p] for p in range(4)]
    assert (rows[0].offset, rows[0].lag) == (3, ends[0] - 3)
    assert (rows[1].offset, rows[1].lag) == (20, 0)
    assert rows[2].offset is None and rows[2].lag is None
    assert {p.consumer_id for p in rows.values()} == {f"{group}_a", f"{group}_b"}
    assert rows[0].owner == f"{group}_a-0"
    assert [m.consumer_id for m in description.members] == [f"{group}_{x}" for x in "abc"]
    assert description.members_without_partitions == (f"{group}_c",)
    assert description.members[0].registration is not None
    assert dict(description.members[0].registration.subscription) == {topic: 2}
    as_json = description.to_json()
    assert as_json["partitions"][0]["current_offset"] == 3
    assert as_json["members_without_partitions"] == [f"{group}_c"]


@integration
async def test_unknown_group_is_reported(admin: GroupAdmin, unique_group_id: str) -> None:
    with pytest.raises(UnknownGroupError, match="does not exist"):
        await admin.describe_group(unique_group_id)
    with pytest.raises(UnknownGroupError):
        await admin.verify_rebalance(unique_group_id)
    with pytest.raises(UnknownGroupError):
        await admin.export_offsets([unique_group_id])


# ---- where metadata comes from ---------------------------------------------------------------


@pytest.fixture
async def chroot(
    zk_kafka_cluster: LocalCluster, admin: GroupAdmin, unique_group_id: str
) -> AsyncIterator[str]:
    """A ``zookeeper.connect`` with a chroot of its own: a ZooKeeper without ``/brokers``."""
    root = f"/{unique_group_id}"
    yield f"{zk_kafka_cluster.zookeeper_connect}{root}"
    await admin.zk.delete_recursive(root)


@integration
async def test_restarting_brokers_keep_metadata_on_zookeeper(
    zk_kafka_cluster: LocalCluster, chroot: str, topic: str
) -> None:
    # A ZooKeeper-mode cluster while every broker restarts: /brokers/ids has no children.
    # Bootstrap servers are known, but the topics stay ZooKeeper's (2 partitions here; Kafka
    # would say PARTITIONS).
    bootstrap = zk_kafka_cluster.bootstrap_servers
    async with GroupAdmin(chroot, bootstrap_servers=bootstrap) as admin:
        await admin.zk.ensure_path(layout.BROKER_IDS_PATH)
        await admin.zk.create(layout.topic_path(topic), encode_topic_partitions({0: [1], 1: [1]}))
        assert await admin.brokers() == []
        assert await admin.metadata_from_kafka() is False
        assert await admin.partitions_for([topic]) == {topic: (0, 1)}
        assert await admin.all_topics() == [topic]
        assert admin.cluster.kafka_client is None


@integration
async def test_a_cluster_without_broker_ids_takes_metadata_from_kafka(
    zk_kafka_cluster: LocalCluster, chroot: str, topic: str
) -> None:
    # As a KRaft cluster: no /brokers/ids at all.
    bootstrap = zk_kafka_cluster.bootstrap_servers
    async with GroupAdmin(chroot, bootstrap_servers=bootstrap) as admin:
        assert await admin.metadata_from_kafka() is True
        assert await admin.partitions_for([topic]) == {topic: tuple(range(PARTITIONS))}
        assert topic in await admin.all_topics()
        assert admin.cluster.kafka_client is not None
    assert admin.cluster.kafka_client is None  # closed with the admin


@integration
async def test_no_brokers_and_no_bootstrap_servers_is_no_brokers_error(chroot: str) -> None:
    async with GroupAdmin(chroot) as admin:  # as a KRaft cluster: only Kafka knows the topics
        with pytest.raises(NoBrokersError, match="No brokers found in ZK"):
            await admin.partitions_for(["t"])
        with pytest.raises(NoBrokersError, match="No brokers found in ZK"):
            await admin.all_topics()
        with pytest.raises(NoBrokersError, match="No brokers found in ZK") as empty_chroot:
            await admin.kafka()
    # A chroot holding nothing Kafka writes: the message says the chroot may be mistyped.
    assert f"The chroot {admin.zk.chroot!r} holds neither /brokers nor /consumers" in str(
        empty_chroot.value
    )
    async with GroupAdmin(chroot) as admin:  # brokers restarting: ZooKeeper still knows them
        await admin.zk.ensure_path(layout.BROKER_IDS_PATH)
        assert await admin.partitions_for(["t"]) == {"t": ()}
        with pytest.raises(NoBrokersError, match="No brokers found in ZK") as all_down:
            await admin.list_offsets([TopicPartition("t", 0)], "latest")
    assert "/brokers/ids is empty: every broker of this ZooKeeper-mode cluster is down" in str(
        all_down.value
    )


@integration
async def test_export_import_round_trips_offsets_exactly(
    admin: GroupAdmin, zk_client: Any, topic: str, unique_group_id: str
) -> None:
    g1, g2 = f"{unique_group_id}-1", f"{unique_group_id}-2"
    await _set_offsets(zk_client, g1, topic, {0: 1, 1: 2, 2: 30, 3: 2**40})
    await _set_offsets(zk_client, g2, topic, {3: 7})
    exported = await admin.export_offsets([g2, g1])
    assert [e.line() for e in exported] == [
        f"/consumers/{g1}/offsets/{topic}/0:1",
        f"/consumers/{g1}/offsets/{topic}/1:2",
        f"/consumers/{g1}/offsets/{topic}/2:30",
        f"/consumers/{g1}/offsets/{topic}/3:{2**40}",
        f"/consumers/{g2}/offsets/{topic}/3:7",
    ]
    text = format_offsets_file(exported)
    for g in (g1, g2):
        await admin.delete_group(g)
    assert not await admin.group_exists(g1)
    assert await admin.import_offsets(parse_offsets_file(text.splitlines())) == 5
    assert await admin.export_offsets([g1, g2]) == exported
    assert await zk_client.get_data(layout.offset_path(g1, topic, 3)) == str(2**40).encode()


@integration
async def test_update_offsets_to_earliest_and_latest(
    zk_kafka_cluster: LocalCluster, admin: GroupAdmin, topic: str, unique_group_id: str
) -> None:
    latest = await admin.update_offsets(unique_group_id, topic, "latest")
    assert latest == await zk_kafka_cluster.log_end_offsets(topic)
    assert await admin.zookeeper_offsets(unique_group_id, topic) == latest
    earliest = await admin.update_offsets(unique_group_id, topic, "earliest")
    assert (
        earliest
        == await zk_kafka_cluster.beginning_offsets(topic)
        == dict.fromkeys(range(PARTITIONS), 0)
    )
    with pytest.raises(UnknownTopicError):
        await admin.update_offsets(unique_group_id, f"{topic}-missing", "latest")


@integration
async def test_delete_refuses_an_active_group_then_deletes_it(
    zk_kafka_cluster: LocalCluster, admin: GroupAdmin, topic: str, unique_group_id: str
) -> None:
    group = unique_group_id
    config = config_for(zk_kafka_cluster, group)
    async with ZookeeperConsumerConnector(config) as connector:
        await connector.create_message_streams({topic: 1})
        await connector.commit_offsets({TopicPartition(topic, 0): 1})
        with pytest.raises(GroupActiveError, match="consumers are still active") as info:
            await admin.delete_group(group)
        assert info.value.members == (connector.consumer_id_string,)
        with pytest.raises(GroupActiveError):
            await admin.delete_group_topic(group, topic)
        cleaned, skipped = await admin.delete_topic_from_groups(topic)
        assert group in skipped and group not in cleaned
    assert await admin.group_exists(group)
    with pytest.raises(UnknownTopicError):
        await admin.delete_group_topic(group, f"{topic}-other")
    # The group's only topic: the whole group goes.
    assert await admin.delete_group_topic(group, topic) is True
    assert not await admin.group_exists(group)
    with pytest.raises(UnknownGroupError):
        await admin.delete_group(group)


@integration
async def test_delete_of_one_topic_keeps_the_groups_other_topics(
    admin: GroupAdmin, zk_client: Any, unique_group_id: str
) -> None:
    group = unique_group_id
    await _set_offsets(zk_client, group, "t-a", {0: 1})
    await _set_offsets(zk_client, group, "t-b", {0: 2})
    assert await admin.delete_group_topic(group, "t-a") is False
    assert await admin.group_topics(group) == ["t-b"]


@integration
async def test_verify_rebalance_passes_on_a_live_group_and_fails_on_a_broken_owner(
    zk_kafka_cluster: LocalCluster,
    admin: GroupAdmin,
    zk_client: Any,
    topic: str,
    unique_group_id: str,
) -> None:
    group = unique_group_id
    config = config_for(zk_kafka_cluster, group)
    async with (
        ZookeeperConsumerConnector(config) as a,
        ZookeeperConsumerConnector(config) as b,
    ):
        await a.create_message_streams({topic: 1})
        await b.create_message_streams({topic: 2})
        await wait_settled([a, b])
        ok = await admin.verify_rebalance(group)
        assert ok.ok, ok.problems
        assert sorted(ok.members) == sorted([a.consumer_id_string, b.consumer_id_string])
        assert set(ok.owners[topic]) == set(range(PARTITIONS))

        await zk_client.set_data(layout.owner_path(group, topic, 2), b"intruder_x-0")
        await zk_client.delete(layout.owner_path(group, topic, 3), force=True)
        broken = await admin.verify_rebalance(group)
    assert not broken.ok
    assert broken.problems == (
        f"Owner intruder_x-0 for partition [{topic},2] is not a valid member of consumer "
        f"group {group}",
        f"No owner for partition [{topic},3]",
    )
    assert broken.to_json()["ok"] is False
