"""Unit tests of aiozkconsumer.kafka.consumer_group: the KIP-848 requests against their bytes,
and the member-epoch commit rules of the Kafka offset store.

The expected bytes are written out by hand from the message schemas of Kafka 4.3
(``common/message/ConsumerGroupHeartbeat*.json``, ``OffsetCommit*.json``, ``Metadata*.json``
in kafka-clients): compact strings and arrays carry their length + 1 as an unsigned varint
(0: null), every struct of a flexible version ends with its tagged fields (0: none), a
nullable struct starts with an int8 (-1: null, 1: present).
"""

from __future__ import annotations

import struct
import uuid
from io import BytesIO
from typing import Any

import pytest
from aiokafka.errors import IncompatibleBrokerVersion

from aiozkconsumer.errors import CommitFencedError
from aiozkconsumer.kafka.consumer_group import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequest_v0,
    ConsumerGroupHeartbeatRequest_v1,
    ConsumerGroupHeartbeatResponse_v0,
    ConsumerGroupHeartbeatResponse_v1,
    MetadataResponse_v12,
    NullableStruct,
    OffsetCommitRequest_v9,
    OffsetCommitResponse_v9,
    OffsetCommitV9Request,
    TopicIdsRequest,
    Uuid,
    consumer_error_name,
    decode_heartbeat_response,
    decode_session_timeout,
    new_member_id,
)
from aiozkconsumer.offsets.kafka_store import KafkaOffsetStore
from aiozkconsumer.records import TopicPartition

TOPIC_ID = uuid.UUID("3fd0e952-7c7e-4b0e-9c3a-8f1b3e0a9d11").bytes
ALL_VERSIONS = {68: (0, 1), 8: (2, 10), 3: (0, 13)}


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def cstr(s: str | None) -> bytes:
    """A compact (nullable) string whose length + 1 fits one varint byte."""
    if s is None:
        return b"\x00"
    data = s.encode()
    assert len(data) + 1 < 0x80
    return bytes([len(data) + 1]) + data


def carr(items: list[bytes] | None) -> bytes:
    if items is None:
        return b"\x00"
    return bytes([len(items) + 1]) + b"".join(items)


NO_TAGS = b"\x00"


# -- ConsumerGroupHeartbeat ---------------------------------------------------------------


def test_a_join_encodes_as_version_1_with_the_regex_field() -> None:
    request = ConsumerGroupHeartbeatRequest(
        "g",
        "m1",
        0,
        rebalance_timeout_ms=300000,
        subscribed_topic_names=["a", "b"],
        server_assignor="uniform",
        topic_partitions=[],
    )
    built = request.prepare(ALL_VERSIONS)
    assert isinstance(built, ConsumerGroupHeartbeatRequest_v1)
    assert built.FLEXIBLE_VERSION and built.API_KEY == 68
    assert built.encode() == (
        cstr("g")
        + cstr("m1")
        + i32(0)
        + cstr(None)  # instance id
        + cstr(None)  # rack id
        + i32(300000)
        + carr([cstr("a"), cstr("b")])
        + cstr(None)  # SubscribedTopicRegex (v1+)
        + cstr("uniform")
        + carr([])  # owned partitions: empty (not null) when joining
        + NO_TAGS
    )


def test_version_0_has_no_regex_field_and_refuses_a_regex() -> None:
    request = ConsumerGroupHeartbeatRequest(
        "g", "m1", 3, topic_partitions=[(TOPIC_ID, [2, 0])], subscribed_topic_names=None
    )
    built = request.prepare({68: (0, 0)})
    assert isinstance(built, ConsumerGroupHeartbeatRequest_v0)
    assert built.encode() == (
        cstr("g")
        + cstr("m1")
        + i32(3)
        + cstr(None)
        + cstr(None)
        + i32(-1)  # rebalance timeout unchanged
        + carr(None)  # subscription unchanged
        + cstr(None)
        + carr([TOPIC_ID + carr([i32(2), i32(0)]) + NO_TAGS])
        + NO_TAGS
    )
    with pytest.raises(IncompatibleBrokerVersion):
        ConsumerGroupHeartbeatRequest("g", "m", 0, subscribed_topic_regex="a.*").prepare(
            {68: (0, 0)}
        )


def test_a_broker_without_the_api_cannot_prepare_it() -> None:
    with pytest.raises(IncompatibleBrokerVersion):
        ConsumerGroupHeartbeatRequest("g", "m", 0).prepare({8: (2, 9)})


def test_a_response_with_an_assignment_decodes() -> None:
    data = (
        i32(0)  # throttle
        + i16(0)
        + cstr(None)  # error message
        + cstr("m1")
        + i32(7)
        + i32(5000)
        + i8(1)  # the assignment is present
        + carr([TOPIC_ID + carr([i32(0), i32(3)]) + NO_TAGS])
        + NO_TAGS  # the assignment struct's tagged fields
        + NO_TAGS
    )
    for cls in (ConsumerGroupHeartbeatResponse_v0, ConsumerGroupHeartbeatResponse_v1):
        resp = cls.decode(BytesIO(data))
        code, message, result = decode_heartbeat_response(resp, "sent")
        assert (code, message) == (0, "")
        assert result.member_id == "m1" and result.member_epoch == 7
        assert result.heartbeat_interval_ms == 5000
        assert result.assignment == {TOPIC_ID: (0, 3)}
        assert resp.encode() == data  # and back


def test_a_response_without_an_assignment_or_with_an_error_decodes() -> None:
    data = (
        i32(0)
        + i16(110)
        + cstr("fenced")
        + cstr(None)  # no member id: the one sent is kept
        + i32(-1)
        + i32(0)
        + i8(-1)  # null assignment
        + NO_TAGS
    )
    code, message, result = decode_heartbeat_response(
        ConsumerGroupHeartbeatResponse_v1.decode(BytesIO(data)), "sent"
    )
    assert (code, message) == (110, "fenced")
    assert result.member_id == "sent" and result.assignment is None
    assert consumer_error_name(110) == "FENCED_MEMBER_EPOCH (110)"
    assert consumer_error_name(113) == "STALE_MEMBER_EPOCH (113)"
    assert consumer_error_name(25) == "UNKNOWN_MEMBER_ID (25)"


def test_an_empty_assignment_is_not_a_null_one() -> None:
    data = i32(0) + i16(0) + cstr(None) + cstr("m") + i32(2) + i32(5000) + i8(1)
    data += carr([]) + NO_TAGS + NO_TAGS
    _, _, result = decode_heartbeat_response(
        ConsumerGroupHeartbeatResponse_v0.decode(BytesIO(data)), "m"
    )
    assert result.assignment == {}


def test_uuid_and_nullable_struct_round_trip() -> None:
    assert Uuid.decode(BytesIO(Uuid.encode(TOPIC_ID))) == TOPIC_ID
    assert Uuid.repr(TOPIC_ID) == "3fd0e952-7c7e-4b0e-9c3a-8f1b3e0a9d11"
    with pytest.raises(ValueError):
        Uuid.encode(b"short")
    with pytest.raises(ValueError):
        Uuid.decode(BytesIO(b"\x00" * 15))
    ns = NullableStruct(("a", Uuid))
    assert ns.encode(None) == i8(-1) and ns.decode(BytesIO(i8(-1))) is None
    assert ns.decode(BytesIO(ns.encode((TOPIC_ID,)))) == (TOPIC_ID,)


def test_member_ids_are_distinct_22_character_uuids() -> None:
    ids = {new_member_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 22 for i in ids)


# -- OffsetCommit v9 ----------------------------------------------------------------------


def test_offset_commit_v9_carries_the_member_epoch() -> None:
    request = OffsetCommitV9Request(
        "g",
        5,
        "m1",
        {TopicPartition("t", 1): 42, TopicPartition("t", 0): 7},
        {TopicPartition("t", 0): "x"},
    )
    built = request.prepare(ALL_VERSIONS)
    assert isinstance(built, OffsetCommitRequest_v9) and built.FLEXIBLE_VERSION
    partition = [
        i32(0) + i64(7) + i32(-1) + cstr("x") + NO_TAGS,
        i32(1) + i64(42) + i32(-1) + cstr("") + NO_TAGS,
    ]
    assert built.encode() == (
        cstr("g")
        + i32(5)
        + cstr("m1")
        + cstr(None)  # group instance id
        + carr([cstr("t") + carr(partition) + NO_TAGS])
        + NO_TAGS
    )
    with pytest.raises(NotImplementedError):
        request.prepare({8: (2, 8)})


def test_offset_commit_v9_response_decodes() -> None:
    data = i32(0) + carr([cstr("t") + carr([i32(0) + i16(113) + NO_TAGS]) + NO_TAGS]) + NO_TAGS
    resp = OffsetCommitResponse_v9.decode(BytesIO(data))
    assert [(t, [(p, c) for p, c, _ in parts]) for t, parts, _ in resp.topics] == [
        ("t", [(0, 113)])
    ]


# -- Metadata v12 -------------------------------------------------------------------------


def test_topic_ids_request_and_response() -> None:
    built = TopicIdsRequest(["b", "a"]).prepare(ALL_VERSIONS)
    zero = bytes(16)
    assert built.encode() == (
        carr([zero + cstr("a") + NO_TAGS, zero + cstr("b") + NO_TAGS])
        + b"\x00"  # no auto-creation
        + b"\x00"  # no authorized operations
        + NO_TAGS
    )
    assert TopicIdsRequest(None).prepare(ALL_VERSIONS).encode() == carr(None) + b"\x00\x00\x00"
    partition = i16(0) + i32(0) + i32(1) + i32(0) + carr([i32(1)]) + carr([i32(1)]) + carr([])
    data = (
        i32(0)
        + carr([i32(1) + cstr("h") + i32(9092) + cstr(None) + NO_TAGS])
        + cstr("cluster")
        + i32(1)
        + carr(
            [
                i16(0)
                + cstr("a")
                + TOPIC_ID
                + b"\x00"
                + carr([partition + NO_TAGS])
                + i32(-(2**31))
                + NO_TAGS
            ]
        )
        + NO_TAGS
    )
    resp = MetadataResponse_v12.decode(BytesIO(data))
    assert [(t[1], t[2]) for t in resp.topics] == [("a", TOPIC_ID)]


# -- member-epoch commits over a scripted channel (the answers OffsetCommit v9 would give) --


class ScriptedChannel:
    """Stands in for ``MemberEpochOffsetsChannel``: each commit returns the next answer, after
    running its side effect (a heartbeat answered meanwhile)."""

    def __init__(self, *answers: tuple[dict[TopicPartition, int], Any]) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[int, str]] = []

    async def commit(
        self, offsets: dict[TopicPartition, int], *, generation: int, member_id: str
    ) -> dict[TopicPartition, int]:
        self.sent.append((generation, member_id))
        codes, side_effect = self.answers.pop(0)
        side_effect()
        return codes

    def close(self) -> None:
        pass


T0 = TopicPartition("t", 0)


def _store(channel: ScriptedChannel, epoch: list[int]) -> KafkaOffsetStore:
    async def no_kafka() -> Any:
        raise AssertionError("the scripted channel needs no client")

    return KafkaOffsetStore(
        no_kafka,
        "g",
        backoff_ms=1,
        socket_timeout_ms=1000,
        group_generation=lambda: (epoch[0], "m"),
        channel=channel,  # type: ignore[arg-type]
    )


async def test_a_commit_stale_because_the_epoch_moved_on_is_sent_again() -> None:
    epoch = [3]

    def bump() -> None:
        epoch[0] = 4

    channel = ScriptedChannel(({T0: 113}, bump), ({T0: 0}, lambda: None))
    store = _store(channel, epoch)
    assert await store.commit({T0: 9}, retries=0) == 1
    assert channel.sent == [(3, "m"), (4, "m")]


@pytest.mark.parametrize("code", [113, 110, 25])
async def test_a_commit_of_an_epoch_that_is_over_is_fenced(code: int) -> None:
    channel = ScriptedChannel(({T0: code}, lambda: None))
    store = _store(channel, [3])
    with pytest.raises(CommitFencedError) as info:
        await store.commit({T0: 9}, retries=3)
    assert info.value.fenced == {T0} and channel.sent == [(3, "m")]


def test_the_groups_session_timeout_is_read_from_describe_configs() -> None:
    entry = ("consumer.session.timeout.ms", "6000", False, 4, False, [])
    assert decode_session_timeout([(0, "", 32, "g", [entry])]) == 6000
    assert decode_session_timeout([(29, "denied", 32, "g", [])]) is None  # not authorized
    assert decode_session_timeout([(0, "", 32, "g", [])]) is None
    odd = ("consumer.session.timeout.ms", "six", False, 4, False, [])
    assert decode_session_timeout([(0, "", 32, "g", [odd])]) is None
