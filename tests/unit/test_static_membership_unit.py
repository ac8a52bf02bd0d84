"""Static membership (KIP-345, ``group.instance.id``) without servers: the config rule, the
request versions that carry the instance id against their bytes, and the members' Java rules
(no LeaveGroup for a static classic member, epoch -2 for a static KIP-848 member, a fenced
instance id fatal).

The expected bytes are written out from Kafka's message schemas (``common/message/
Heartbeat{Request}.json``, ``LeaveGroupRequest.json``, ``JoinGroupRequest.json``,
``SyncGroupRequest.json``, ``OffsetCommitRequest.json``, ``ConsumerGroupHeartbeatRequest.json``):
a (non-compact) string is an int16 length and its bytes, -1 for null; an array an int32 count;
compact strings of flexible versions carry their length + 1 as an unsigned varint (0: null).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from aiokafka.errors import IncompatibleBrokerVersion

from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.errors import (
    FencedInstanceIdError,
    GroupCoordinatorError,
    InvalidConfigError,
    UnreleasedInstanceIdError,
)
from aiozkconsumer.group.state import MemberEvent, MemberState
from aiozkconsumer.kafka.consumer_group import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequest_v1,
    OffsetCommitRequest_v9,
    OffsetCommitV9Request,
    consumer_error_name,
)
from aiozkconsumer.kafka.group import (
    FENCED_INSTANCE_ID,
    UNRELEASED_INSTANCE_ID,
    GroupRequestError,
    HeartbeatRequest_v3,
    InstanceHeartbeatRequest,
    InstanceJoinGroupRequest,
    InstanceOffsetCommitRequest,
    InstanceSyncGroupRequest,
    LeaveGroupRequest_v3,
    MembersLeaveGroupRequest,
    code_name,
)
from aiozkconsumer.kafka_connector import KafkaConsumerConnector
from aiozkconsumer.records import TopicPartition


def _s(text: str | None) -> bytes:
    """A non-compact (nullable) string."""
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _cs(text: str | None) -> bytes:
    """A compact (nullable) string of a flexible version (lengths below 127 here)."""
    if text is None:
        return b"\x00"
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


def _config(**kw: Any) -> ConsumerConfig:
    kw.setdefault("group_coordinator", "kafka")
    kw.setdefault("bootstrap_servers", "127.0.0.1:9092")
    return ConsumerConfig(group_id="g", **kw)


# -- the config ----------------------------------------------------------------------------


def test_group_instance_id_defaults_to_dynamic_membership() -> None:
    assert _config().group_instance_id is None


@pytest.mark.parametrize("value", ["a", "member-1", "host_7.rack-b", "x" * 249, "..."])
def test_a_legal_group_instance_id_is_kept(value: str) -> None:
    assert _config(group_instance_id=value).group_instance_id == value
    assert _config(group_protocol="consumer", group_instance_id=value).group_instance_id == value


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("", "empty string"),
        (".", "'.' is not allowed"),
        ("..", "'..' is not allowed"),
        ("x" * 250, "longer than the max allowed length 249"),
        ("a b", "characters other than ASCII alphanumerics"),
        ("member/1", "characters other than ASCII alphanumerics"),
        ("caf\u00e9", "characters other than ASCII alphanumerics"),
    ],
)
def test_an_illegal_group_instance_id_is_refused_as_the_java_client(value: str, words: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        _config(group_instance_id=value)
    assert info.value.key == "group.instance.id"
    assert words in str(info.value)


def test_group_instance_id_needs_a_kafka_coordinated_group() -> None:
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig(group_id="g", zookeeper_connect="h:1", group_instance_id="a")
    assert info.value.key == "group.instance.id"
    assert "group.coordinator=kafka" in str(info.value)


def test_group_instance_id_is_a_properties_key() -> None:
    with pytest.raises(InvalidConfigError) as info:
        _config(group_instance_id=7)
    assert info.value.key == "group.instance.id"
    config = ConsumerConfig.from_properties(
        {
            "group.id": "g",
            "group.coordinator": "kafka",
            "bootstrap.servers": "h:1",
            "group.instance.id": "member-1",
        }
    )
    assert config.group_instance_id == "member-1"
    assert config.to_properties()["group.instance.id"] == "member-1"
    assert ConsumerConfig.from_properties(config.to_properties()) == config


# -- the classic protocol's requests -------------------------------------------------------


def test_heartbeat_v3_carries_the_instance_id() -> None:
    request = InstanceHeartbeatRequest("g", 3, "m", "i").prepare({12: (0, 4)})
    assert isinstance(request, HeartbeatRequest_v3)
    assert request.encode() == _s("g") + struct.pack(">i", 3) + _s("m") + _s("i")
    dynamic = InstanceHeartbeatRequest("g", 3, "m", None).prepare({12: (0, 4)})
    assert dynamic.encode() == _s("g") + struct.pack(">i", 3) + _s("m") + _s(None)


def test_an_instance_id_is_never_dropped_for_an_old_broker() -> None:
    old = InstanceHeartbeatRequest("g", 3, "m", None).prepare({12: (0, 1)})
    assert old.API_VERSION == 1 and old.encode() == _s("g") + struct.pack(">i", 3) + _s("m")
    with pytest.raises(IncompatibleBrokerVersion, match="Heartbeat v1 cannot carry"):
        InstanceHeartbeatRequest("g", 3, "m", "i").prepare({12: (0, 1)})
    with pytest.raises(IncompatibleBrokerVersion, match="LeaveGroup v1"):
        MembersLeaveGroupRequest("g", "m", "i").prepare({13: (0, 1)})
    join = InstanceJoinGroupRequest("g", 6000, 300000, "", "i", "consumer", [])
    with pytest.raises(IncompatibleBrokerVersion, match="JoinGroup v2"):
        join.prepare({11: (0, 4)})
    with pytest.raises(IncompatibleBrokerVersion, match="SyncGroup v1"):
        InstanceSyncGroupRequest("g", 1, "m", "i", []).prepare({14: (0, 2)})
    commit = InstanceOffsetCommitRequest("g", 1, "m", [], "i")
    with pytest.raises(IncompatibleBrokerVersion, match="OffsetCommit v6"):
        commit.prepare({8: (2, 6)})
    # Without an instance id, the old versions are fine.
    assert (
        InstanceJoinGroupRequest("g", 6000, 300000, "", None, "consumer", [])
        .prepare({11: (0, 4)})
        .API_VERSION
        == 2
    )
    assert InstanceOffsetCommitRequest("g", 1, "m", [], None).prepare({8: (2, 6)}).API_VERSION == 6


def test_leave_group_v3_sends_the_members_list_with_the_instance_id() -> None:
    request = MembersLeaveGroupRequest("g", "m", "i").prepare({13: (0, 5)})
    assert isinstance(request, LeaveGroupRequest_v3)
    assert request.encode() == _s("g") + struct.pack(">i", 1) + _s("m") + _s("i")
    dynamic = MembersLeaveGroupRequest("g", "m", None).prepare({13: (0, 5)})
    assert dynamic.encode() == _s("g") + struct.pack(">i", 1) + _s("m") + _s(None)


def test_join_group_v5_carries_the_instance_id() -> None:
    request = InstanceJoinGroupRequest(
        "g", 6000, 300000, "", "i", "consumer", [("range", b"x")]
    ).prepare({11: (2, 9)})
    assert request.API_VERSION == 5
    assert request.encode() == (
        _s("g")
        + struct.pack(">ii", 6000, 300000)
        + _s("")
        + _s("i")
        + _s("consumer")
        + struct.pack(">i", 1)
        + _s("range")
        + struct.pack(">i", 1)
        + b"x"
    )


def test_sync_group_v3_carries_the_instance_id() -> None:
    request = InstanceSyncGroupRequest("g", 4, "m", "i", [("m", b"a")]).prepare({14: (0, 5)})
    assert request.API_VERSION == 3
    assert (
        request.encode()
        == (_s("g") + struct.pack(">i", 4) + _s("m") + _s("i") + struct.pack(">i", 1) + _s("m"))
        + struct.pack(">i", 1)
        + b"a"
    )


def test_offset_commit_v7_carries_the_instance_id() -> None:
    topics = [("t", [(0, 5, 2, "")])]
    request = InstanceOffsetCommitRequest("g", 1, "m", topics, "i").prepare({8: (2, 9)})
    assert request.API_VERSION == 7
    assert request.encode() == (
        _s("g")
        + struct.pack(">i", 1)
        + _s("m")
        + _s("i")
        + struct.pack(">i", 1)
        + _s("t")
        + struct.pack(">iiqi", 1, 0, 5, 2)
        + _s("")
    )


# -- the consumer protocol's requests -----------------------------------------------------


def test_consumer_group_heartbeat_leaves_a_static_member_with_epoch_minus_2() -> None:
    request = ConsumerGroupHeartbeatRequest(
        "g", "m", LEAVE_GROUP_STATIC_MEMBER_EPOCH, instance_id="i"
    ).prepare({68: (0, 1)})
    assert isinstance(request, ConsumerGroupHeartbeatRequest_v1)
    assert request.encode() == (
        _cs("g")
        + _cs("m")
        + struct.pack(">i", -2)
        + _cs("i")  # InstanceId
        + _cs(None)  # RackId
        + struct.pack(">i", -1)  # RebalanceTimeoutMs
        + b"\x00"  # SubscribedTopicNames: null
        + _cs(None)  # SubscribedTopicRegex
        + _cs(None)  # ServerAssignor
        + b"\x00"  # TopicPartitions: null
        + b"\x00"  # tagged fields
    )


def test_offset_commit_v9_carries_the_instance_id() -> None:
    request = OffsetCommitV9Request(
        "g", 5, "m", {TopicPartition("t", 0): 7}, group_instance_id="i"
    ).prepare({8: (2, 9)})
    assert isinstance(request, OffsetCommitRequest_v9)
    assert request.encode()[: 2 + 4 + 2 + 2] == _cs("g") + struct.pack(">i", 5) + _cs("m") + _cs(
        "i"
    )
    plain = OffsetCommitV9Request("g", 5, "m", {TopicPartition("t", 0): 7}).prepare({8: (2, 9)})
    assert plain.encode()[: 2 + 4 + 2 + 1] == _cs("g") + struct.pack(">i", 5) + _cs("m") + _cs(None)


# -- the error codes -----------------------------------------------------------------------


def test_the_instance_codes_are_named_and_fatal_not_a_rejoin() -> None:
    assert code_name(FENCED_INSTANCE_ID) == "FENCED_INSTANCE_ID (82)"
    assert code_name(UNRELEASED_INSTANCE_ID) == "UNRELEASED_INSTANCE_ID (111)"
    assert consumer_error_name(82) == "FENCED_INSTANCE_ID (82)"
    e = GroupRequestError("Heartbeat", FENCED_INSTANCE_ID, "group 'g'", fatal=True)
    assert e.instance_error and not e.fenced and "FENCED_INSTANCE_ID (82)" in str(e)
    assert not GroupRequestError("Heartbeat", 25, "").instance_error


def test_the_errors_name_the_instance_id_and_the_group() -> None:
    fenced = FencedInstanceIdError("billing", "h:1", "member-1", "Heartbeat: FENCED_INSTANCE_ID")
    assert isinstance(fenced, GroupCoordinatorError)
    assert fenced.instance_id == "member-1" and fenced.group == "billing"
    assert "'member-1'" in str(fenced) and "'billing'" in str(fenced) and "h:1" in str(fenced)
    unreleased = UnreleasedInstanceIdError("billing", "h:1", "member-1", "x")
    assert isinstance(unreleased, GroupCoordinatorError)
    assert "'member-1'" in str(unreleased) and "'billing'" in str(unreleased)


# -- the members' rules (no servers: the requests are recorded) ----------------------------


class Recorder:
    """Stands in for one request method of a group client, recording its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def __call__(self, *args: Any, **kw: Any) -> None:
        self.calls.append(args)


def _stable(connector: KafkaConsumerConnector) -> None:
    machine = connector.coordinator.machine
    for event in (MemberEvent.JOIN, MemberEvent.JOINED, MemberEvent.SYNCED):
        machine.handle(event)
    assert machine.state is MemberState.STABLE


@pytest.mark.parametrize(("instance_id", "sent"), [("member-1", False), (None, True)])
async def test_a_static_classic_member_sends_no_leave_group(
    instance_id: str | None, sent: bool
) -> None:
    connector = KafkaConsumerConnector(_config(group_instance_id=instance_id))
    assert connector.group.group_instance_id == instance_id
    coordinator = connector.coordinator
    coordinator.member_id = "m"
    coordinator.generation = 3  # type: ignore[misc]
    _stable(connector)
    leave = Recorder()
    connector.group.leave = leave  # type: ignore[method-assign]
    await coordinator.leave()
    assert leave.calls == ([("m",)] if sent else [])
    assert coordinator.machine.state is MemberState.LEFT and coordinator.generation == -1


@pytest.mark.parametrize(("instance_id", "epoch"), [("member-1", -2), (None, -1)])
async def test_a_static_consumer_protocol_member_leaves_with_epoch_minus_2(
    instance_id: str | None, epoch: int
) -> None:
    connector = KafkaConsumerConnector(
        _config(group_protocol="consumer", group_instance_id=instance_id)
    )
    coordinator = connector.coordinator
    coordinator.member_epoch = 5  # type: ignore[attr-defined]
    _stable(connector)
    heartbeat = Recorder()
    connector.group.consumer_heartbeat = heartbeat  # type: ignore[union-attr]
    await coordinator.leave()
    ((request,),) = heartbeat.calls
    assert request.member_epoch == epoch and request.instance_id == instance_id


@pytest.mark.parametrize(
    ("protocol", "code", "kind"),
    [
        ("classic", FENCED_INSTANCE_ID, FencedInstanceIdError),
        ("consumer", FENCED_INSTANCE_ID, FencedInstanceIdError),
        ("consumer", UNRELEASED_INSTANCE_ID, UnreleasedInstanceIdError),
    ],
)
async def test_an_instance_error_ends_the_membership_for_good(
    protocol: str, code: int, kind: type[GroupCoordinatorError]
) -> None:
    connector = KafkaConsumerConnector(
        _config(group_protocol=protocol, group_instance_id="member-1")
    )
    coordinator = connector.coordinator
    _stable(connector)
    error = await coordinator._fail_for_instance(
        GroupRequestError("Heartbeat", code, "group 'g'", fatal=True)
    )
    assert isinstance(error, kind)
    assert error.instance_id == "member-1" and error.group == "g"
    assert coordinator.fatal_error is error
    assert coordinator.machine.state is MemberState.FENCED and coordinator.generation == -1
    assert not connector.ownership.gate.passable()
    # No commit goes out any more, and the heartbeat task fails the connector with it.
    assert connector._gate_closed_error() is error
    with pytest.raises(kind):
        await coordinator.heartbeat_loop()
    # A second answer keeps the first error.
    again = await coordinator._fail_for_instance(
        GroupRequestError("SyncGroup", code, "", fatal=True)
    )
    assert again is error
