"""FetchRequest v12-v18 encoding (``kafka/fetch_request.py``), the flexible FetchResponse parser
(``kafka/fetch_connection.py``) and the topic-id MetadataRequest (``kafka/topic_ids.py``).

Unit tests compare encoded requests with byte layouts written out field by field from
``FetchRequest.json`` / ``MetadataRequest.json``, and feed the push parser synthetic v12+
responses laid out from ``FetchResponse.json`` in pieces of every size. An integration test
(it needs Java and the Kafka jars the test kit provisions) hands our bytes to Kafka 4.3's own
generated serializers (``FetchRequestData``, ``MetadataRequestData``: decoded, then encoded
again, they must give the same bytes) and parses responses those serializers wrote.
"""

from __future__ import annotations

import random
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiozkconsumer.kafka import native
from aiozkconsumer.kafka.fetch_connection import FetchResponseParser, PartitionData
from aiozkconsumer.kafka.fetch_request import (
    ZERO_UUID,
    FetchPartition,
    FlexibleFetchRequest,
    FlexibleReader,
    compact_string,
    decode_uvarint,
    topic_id_str,
    uvarint,
)
from aiozkconsumer.kafka.topic_ids import decode_metadata_response, encode_metadata_request
from aiozkconsumer.records import TopicPartition

# -- varints and strings --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16383, "ff7f"),
        (16384, "808001"),
        (2**32 - 1, "ffffffff0f"),
    ],
)
def test_unsigned_varints_are_protobufs(value: int, encoded: str) -> None:
    assert uvarint(value).hex() == encoded
    assert decode_uvarint(bytes.fromhex(encoded)) == value


@given(st.integers(0, 2**32 - 1))
def test_unsigned_varints_round_trip(value: int) -> None:
    raw = uvarint(value)
    assert decode_uvarint(raw) == value
    assert FlexibleReader(raw).uvarint() == value
    assert len(raw) == max(1, (value.bit_length() + 6) // 7)


@pytest.mark.parametrize("bad", ["", "80", "8080808080", "0000", "ffffffffff01"])
def test_a_malformed_varint_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        decode_uvarint(bytes.fromhex(bad))


def test_negative_and_oversized_varints_are_refused() -> None:
    with pytest.raises(ValueError):
        uvarint(-1)
    with pytest.raises(ValueError):
        uvarint(2**32)


def test_compact_strings() -> None:
    assert compact_string(None) == b"\x00"
    assert compact_string("") == b"\x01"
    assert compact_string("ü") == b"\x03\xc3\xbc"
    assert compact_string("x" * 200) == b"\xc9\x01" + b"x" * 200


def test_topic_ids_print_as_kafka_prints_them() -> None:
    # Uuid.toString: URL-safe base64 without padding ("AAAAAAAAAAAAAAAAAAAAAA" is ZERO_UUID).
    assert topic_id_str(ZERO_UUID) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert topic_id_str(bytes(range(16))) == "AAECAwQFBgcICQoLDA0ODw"


# -- FetchRequest layouts -------------------------------------------------------------------

ID_T = bytes.fromhex("0123456789abcdef0123456789abcdef")
ID_U = bytes.fromhex("fedcba9876543210fedcba9876543210")


def _request(version: int) -> FlexibleFetchRequest:
    return FlexibleFetchRequest(
        version,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=1,
        session_id=77,
        session_epoch=3,
        partitions=[
            FetchPartition("t", 0, 10, 1000, current_leader_epoch=4, last_fetched_epoch=3),
            FetchPartition("t", 1, 11, 1000),
        ],
        topic_ids={"t": ID_T},
        forgotten=[("u", 2, ID_U)],
        rack_id="r1",
    )


# Field by field from FetchRequest.json (3.9 / 4.3), header from RequestHeader.json v2.
_HEADER = (
    "0001"  # RequestApiKey 1 (Fetch)
    "{version:04x}"  # RequestApiVersion
    "0000002a"  # CorrelationId 42
    "0001"
    "63"  # ClientId "c": INT16 length even in header v2 ("flexibleVersions": "none")
    "00"  # header tagged fields
)
_TOP_REPLICA_ID = "ffffffff"  # ReplicaId -1, versions 0-14 (a tagged ReplicaState from 15)
_TOP = (
    "000001f4"  # MaxWaitMs 500
    "00000001"  # MinBytes 1
    "00100000"  # MaxBytes 1 MiB
    "01"  # IsolationLevel read_committed
    "0000004d"  # SessionId 77
    "00000003"  # SessionEpoch 3
)
_PARTITIONS = (
    "03"  # Partitions: compact array of 2
    # Partition, CurrentLeaderEpoch, FetchOffset, LastFetchedEpoch, LogStartOffset,
    # PartitionMaxBytes, tagged fields
    "00000000"
    "00000004"
    "000000000000000a"
    "00000003"
    "ffffffffffffffff"
    "000003e8"
    "00"
    "00000001"
    "ffffffff"
    "000000000000000b"
    "ffffffff"
    "ffffffffffffffff"
    "000003e8"
    "00"
    "00"  # FetchTopic tagged fields
)
_TAIL = (
    "03"
    "7231"  # RackId "r1" (compact string)
    "00"  # request tagged fields (ClusterId, ReplicaState left at their defaults)
)


def test_v12_names_topics() -> None:
    expected = (
        _HEADER.format(version=12)
        + _TOP_REPLICA_ID
        + _TOP
        + "02"  # Topics: one
        + "0274"  # Topic "t" (compact string)
        + _PARTITIONS
        + "02"  # ForgottenTopicsData: one
        + "0275"  # Topic "u"
        + "02"
        + "00000002"  # Partitions [2] (compact array of INT32)
        + "00"  # tagged fields
        + _TAIL
    )
    assert _request(12).encode(42, "c").hex() == expected


@pytest.mark.parametrize("version", [13, 14])
def test_v13_and_v14_name_topics_by_id(version: int) -> None:
    expected = (
        _HEADER.format(version=version)
        + _TOP_REPLICA_ID
        + _TOP
        + "02"
        + ID_T.hex()  # TopicId (uuid: 16 bytes)
        + _PARTITIONS
        + "02"
        + ID_U.hex()
        + "02"
        + "00000002"
        + "00"
        + _TAIL
    )
    assert _request(version).encode(42, "c").hex() == expected


@pytest.mark.parametrize("version", [15, 16, 17, 18])
def test_v15_on_drop_the_replica_id(version: int) -> None:
    # ReplicaId (0-14) became the tagged ReplicaState (KIP-903), not sent at its default;
    # ReplicaDirectoryId (17+) and the replica's HighWatermark (18+) are tagged, not sent.
    expected = (
        _HEADER.format(version=version)
        + _TOP
        + "02"
        + ID_T.hex()
        + _PARTITIONS
        + "02"
        + ID_U.hex()
        + "02"
        + "00000002"
        + "00"
        + _TAIL
    )
    assert _request(version).encode(42, "c").hex() == expected


def test_the_frame_has_the_size_prefix() -> None:
    request = _request(13)
    frame = request.frame(7, "client")
    assert frame[4:] == request.encode(7, "client")
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    assert request.API_VERSION == 13


def test_consecutive_partitions_share_a_topic_and_forgotten_ones_are_grouped() -> None:
    # FetchRequest.Builder.build: one FetchTopic per run of one topic, in request order.
    request = FlexibleFetchRequest(
        12,
        0,
        0,
        0,
        partitions=[
            FetchPartition("a", 0, 0, 1),
            FetchPartition("a", 1, 0, 1),
            FetchPartition("b", 0, 0, 1),
            FetchPartition("a", 2, 0, 1),
        ],
        forgotten=[("x", 1, ZERO_UUID), ("y", 0, ZERO_UUID), ("x", 3, ZERO_UUID)],
    )
    r = FlexibleReader(request.encode(1, ""))
    r.take(2 + 2 + 4 + 2 + 1 + 4 + 4 + 4 + 4 + 1 + 4 + 4)
    topics = []
    for _ in range(r.compact_length()):
        name = r.compact_string()
        parts = []
        for _ in range(r.compact_length()):
            parts.append(r.i32())
            r.take(4 + 8 + 4 + 8 + 4)
            r.skip_tagged_fields()
        r.skip_tagged_fields()
        topics.append((name, parts))
    assert topics == [("a", [0, 1]), ("b", [0]), ("a", [2])]
    forgotten = []
    for _ in range(r.compact_length()):
        name = r.compact_string()
        forgotten.append((name, [r.i32() for _ in range(r.compact_length())]))
        r.skip_tagged_fields()
    assert forgotten == [("x", [1, 3]), ("y", [0])]
    assert r.compact_string() == ""  # no rack
    r.skip_tagged_fields()
    assert r.pos == len(r.data)


@pytest.mark.parametrize("version", [4, 11, 19])
def test_only_flexible_versions_are_encoded(version: int) -> None:
    with pytest.raises(ValueError, match="flexible"):
        _request(version).encode(1, "c")


def test_v13_needs_every_topic_id() -> None:
    partitions = [FetchPartition("t", 0, 0, 1)]
    for ids in ({}, {"t": ZERO_UUID}):
        request = FlexibleFetchRequest(13, 0, 0, 0, partitions=partitions, topic_ids=ids)
        with pytest.raises(ValueError, match="topic id"):
            request.encode(1, "c")
    FlexibleFetchRequest(12, 0, 0, 0, partitions=partitions).encode(1, "c")  # fine


# -- MetadataRequest / MetadataResponse (topic ids) --------------------------------------------


@pytest.mark.parametrize("version", [10, 11, 12, 13])
def test_metadata_request_layout(version: int) -> None:
    expected = (
        "0003"
        + f"{version:04x}"
        + "00000005"
        + "0001"
        + "63"
        + "00"  # header v2
        + "03"  # Topics: compact array of 2
        + "00" * 16
        + "0261"
        + "00"  # TopicId zero, Name "a", tagged fields
        + "00" * 16
        + "0362"
        "63"
        + "00"  # "bc"
        + "00"  # AllowAutoTopicCreation false
        + ("00" if version == 10 else "")  # IncludeClusterAuthorizedOperations (8-10)
        + "00"  # IncludeTopicAuthorizedOperations
        + "00"  # tagged fields
    )
    assert encode_metadata_request(version, 5, "c", ["a", "bc"]).hex() == expected
    with pytest.raises(ValueError):
        encode_metadata_request(9, 5, "c", ["a"])


def _metadata_response(version: int, correlation_id: int) -> bytes:
    body = struct.pack(">i", correlation_id) + b"\x00"  # header v1
    body += struct.pack(">i", 0)  # ThrottleTimeMs
    body += uvarint(2) + struct.pack(">i", 1) + compact_string("h1") + struct.pack(">i", 9092)
    body += compact_string(None) + b"\x00"  # one broker, no rack
    body += compact_string("cluster") + struct.pack(">i", 1)  # ClusterId, ControllerId
    body += uvarint(3)  # two topics
    body += struct.pack(">h", 0) + compact_string("alpha") + ID_T + b"\x00"  # not internal
    body += uvarint(2) + struct.pack(">hiii", 0, 0, 1, 7)  # one partition: leader 1, epoch 7
    body += uvarint(3) + struct.pack(">ii", 1, 2) + uvarint(2) + struct.pack(">i", 1) + uvarint(1)
    body += b"\x00"  # partition tagged fields
    body += struct.pack(">i", -(2**31)) + b"\x00"  # TopicAuthorizedOperations, tagged fields
    body += struct.pack(">h", 3) + compact_string("gone") + ZERO_UUID + b"\x00" + uvarint(1)
    body += struct.pack(">i", -(2**31)) + b"\x00"
    if version == 10:
        body += struct.pack(">i", -(2**31))  # ClusterAuthorizedOperations
    if version >= 13:
        body += struct.pack(">h", 0)  # ErrorCode
    return body + b"\x00"


@pytest.mark.parametrize("version", [10, 11, 12, 13])
def test_metadata_response_gives_topic_ids(version: int) -> None:
    error, answers = decode_metadata_response(version, 9, _metadata_response(version, 9))
    assert error == 0
    assert [(a.name, a.error_code, a.topic_id) for a in answers] == [
        ("alpha", 0, ID_T),
        ("gone", 3, ZERO_UUID),
    ]
    with pytest.raises(ValueError, match="correlation"):
        decode_metadata_response(version, 8, _metadata_response(version, 9))
    with pytest.raises(ValueError):
        decode_metadata_response(version, 9, _metadata_response(version, 9)[:-3])
    with pytest.raises(ValueError, match="left over"):
        decode_metadata_response(version, 9, _metadata_response(version, 9) + b"\x00")


# -- FetchResponse v12+: synthetic responses laid out from FetchResponse.json ---------------


def _tags(fields: dict[int, bytes]) -> bytes:
    out = uvarint(len(fields))
    for tag, raw in sorted(fields.items()):
        out += uvarint(tag) + uvarint(len(raw)) + raw
    return out


def _records(data: bytes | None) -> bytes:
    return b"\x00" if data is None else uvarint(len(data) + 1) + data


# (partition, error, hw, lso, log start, aborted | None, replica, records | None, tags)
Part = tuple[
    int, int, int, int, int, "list[tuple[int, int]] | None", int, "bytes | None", "dict[int, bytes]"
]


def _flexible_response(
    version: int,
    correlation_id: int,
    topics: list[tuple[str | bytes, list[Part]]],
    *,
    session_id: int = 0,
    error_code: int = 0,
    header_tags: dict[int, bytes] | None = None,
    top_tags: dict[int, bytes] | None = None,
) -> bytes:
    out = struct.pack(">i", correlation_id) + _tags(header_tags or {})
    out += struct.pack(">ihi", 25, error_code, session_id)
    out += uvarint(len(topics) + 1)
    for topic, parts in topics:
        out += topic if isinstance(topic, bytes) else compact_string(topic)
        out += uvarint(len(parts) + 1)
        for partition, error, hw, lso, start, aborted, replica, records, tags in parts:
            out += struct.pack(">ihqqq", partition, error, hw, lso, start)
            if aborted is None:
                out += b"\x00"
            else:
                out += uvarint(len(aborted) + 1)
                for pid, first in aborted:
                    out += struct.pack(">qq", pid, first) + b"\x00"
            out += struct.pack(">i", replica) + _records(records) + _tags(tags)
        out += b"\x00"
    out += _tags(top_tags or {})
    return struct.pack(">i", len(out)) + out


def _feed(parser: FetchResponseParser, data: bytes, rng: random.Random) -> None:
    pos = 0
    while not parser.done:
        buf = parser.buffer()
        assert len(buf) > 0
        n = min(len(buf), len(data) - pos, rng.choice([1, 2, 3, 5, 17, 64, 4096, 1 << 20]))
        buf[:n] = data[pos : pos + n]
        parser.filled(n)
        pos += n
    assert pos == len(data)


DIVERGING = struct.pack(">iq", 5, 4242) + b"\x00"  # EpochEndOffset + its tagged fields
LEADER = struct.pack(">ii", 3, 17) + b"\x00"  # LeaderIdAndEpoch
SNAPSHOT = struct.pack(">qi", 77, 4) + b"\x00"  # SnapshotId
MANY_ABORTED = [(1000 + i, 10 * i) for i in range(200)]  # a two-byte varint count
BIG = bytes(range(256)) * 300  # a three-byte varint length


def _parts() -> list[Part]:
    return [
        (0, 0, 1000, 900, 10, [(7, 100), (8, 200)], 2, b"x" * 300, {}),
        (1, 6, -1, -1, -1, None, -1, b"", {1: LEADER}),
        (2, 0, 5000, 5000, 0, [], -1, None, {0: DIVERGING, 2: SNAPSHOT, 9: b"future"}),
        (3, 0, 99999, 99000, 5, MANY_ABORTED, -1, BIG, {}),
    ]


def _expected(parts: list[Part]) -> list[PartitionData]:
    return [(p, e, hw, lso, s, ab, rec) for p, e, hw, lso, s, ab, _, rec, _ in parts]


@pytest.mark.parametrize("version", [12, 13, 16, 18])
@pytest.mark.parametrize("seed", range(4))
def test_the_parser_decodes_flexible_responses_in_any_pieces(version: int, seed: int) -> None:
    by_id = version >= 13
    gamma_id = bytes([9] * 16)
    topics: list[tuple[str | bytes, list[Part]]] = [
        (ID_T if by_id else "alpha", _parts()),
        (ID_U if by_id else "beta-ü", [(0, 0, 5, 5, 0, None, -1, b"12345", {})]),
        (gamma_id if by_id else "gamma", [(4, 0, 1, 1, 0, None, -1, b"g" * 20, {})]),
        (bytes([8] * 16) if by_id else "", []),
    ]
    endpoints = uvarint(3) + (
        struct.pack(">i", 3)
        + compact_string("broker3")
        + struct.pack(">i", 9093)
        + compact_string("rack-a")
        + b"\x00"
        + struct.pack(">i", 4)
        + compact_string("h4")
        + struct.pack(">i", 9094)
        + compact_string(None)
        + b"\x00"
    )
    data = _flexible_response(
        version,
        42,
        topics,
        session_id=123456,
        header_tags={5: b"ignored"},
        top_tags={0: endpoints} if version >= 16 else {},
    )
    names = {ID_T: "alpha", ID_U: "beta-ü"}
    parser = FetchResponseParser(version, 42, names if by_id else None)
    _feed(parser, data, random.Random(seed))
    resp = parser.response
    assert (resp.throttle_time_ms, resp.error_code, resp.session_id) == (25, 0, 123456)
    assert resp.size == len(data) - 4
    expected: list[tuple[str, list[PartitionData]]] = [
        ("alpha", _expected(_parts())),
        ("beta-ü", [(0, 0, 5, 5, 0, None, b"12345")]),
    ]
    if by_id:
        # A topic id the request did not name cannot be named: left out, listed.
        assert resp.unknown_topic_ids == [gamma_id, bytes([8] * 16)]
        assert resp.topic_ids == [ID_T, ID_U, gamma_id, bytes([8] * 16)]
    else:
        expected += [("gamma", [(4, 0, 1, 1, 0, None, b"g" * 20)]), ("", [])]
        assert resp.unknown_topic_ids == [] and resp.topic_ids == []
    assert resp.topics == expected
    # The PartitionData the fetcher reads: seven fields, the record set last, received
    # straight into its own buffer (a bytearray with the native decoder).
    for _, parts in resp.topics:
        for part in parts:
            assert len(part) == 7
            if part[-1]:
                assert type(part[-1]) is (bytearray if native.AVAILABLE else bytes)
    tp = TopicPartition
    assert resp.preferred_read_replicas == {tp("alpha", 0): 2}
    assert resp.current_leaders == {tp("alpha", 1): (3, 17)}
    assert resp.diverging_epochs == {tp("alpha", 2): (5, 4242)}
    if version >= 16:
        assert resp.node_endpoints == [(3, "broker3", 9093, "rack-a"), (4, "h4", 9094, None)]
    else:
        assert resp.node_endpoints == []
    copied = 0 if native.AVAILABLE else sum(len(p[-1] or b"") for _, ps in expected for p in ps)
    assert parser.bytes_copied == copied


_part = st.tuples(
    st.integers(0, 2**31 - 1),  # partition
    st.sampled_from([0, 0, 0, 1, 6, 74]),  # error code
    st.integers(-1, 2**63 - 1),  # high watermark
    st.integers(-1, 2**63 - 1),  # last stable offset
    st.integers(-1, 2**63 - 1),  # log start offset
    st.none()
    | st.lists(st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)), max_size=140),
    st.integers(-1, 5),  # preferred read replica
    st.none() | st.binary(max_size=300) | st.just(BIG[:20000]),
    st.dictionaries(
        st.sampled_from([0, 1, 2, 7, 200]), st.binary(min_size=12, max_size=20), max_size=3
    ),
)


@given(
    version=st.integers(12, 18),
    topics=st.lists(
        st.tuples(st.text(max_size=30), st.lists(_part, max_size=4)),
        max_size=4,
        unique_by=lambda t: t[0],
    ),
    seed=st.integers(0, 2**16),
)
def test_any_flexible_response_parses_in_any_pieces(
    version: int, topics: list[tuple[str, list[Part]]], seed: int
) -> None:
    by_id = version >= 13
    ids = {name: struct.pack(">QQ", i + 1, 99) for i, (name, _) in enumerate(topics)}
    wire: list[tuple[str | bytes, list[Part]]] = [
        (ids[name] if by_id else name, parts) for name, parts in topics
    ]
    data = _flexible_response(version, 3, wire, session_id=seed)
    parser = FetchResponseParser(version, 3, {i: n for n, i in ids.items()})
    _feed(parser, data, random.Random(seed))
    resp = parser.response
    assert resp.session_id == seed and resp.size == len(data) - 4
    assert resp.topics == [(name, _expected(parts)) for name, parts in topics]
    tp = TopicPartition
    assert resp.preferred_read_replicas == {
        tp(name, p[0]): p[6] for name, parts in topics for p in parts if p[6] >= 0
    }
    assert resp.diverging_epochs == {
        tp(name, p[0]): struct.unpack_from(">iq", p[8][0])
        for name, parts in topics
        for p in parts
        if 0 in p[8]
    }
    assert resp.current_leaders == {
        tp(name, p[0]): struct.unpack_from(">ii", p[8][1])
        for name, parts in topics
        for p in parts
        if 1 in p[8]
    }


def test_an_empty_flexible_response() -> None:
    data = _flexible_response(13, 1, [], error_code=70)
    parser = FetchResponseParser(13, 1, {})
    _feed(parser, data, random.Random(0))
    assert parser.response.topics == [] and parser.response.error_code == 70


def test_tagged_fields_of_aborted_transactions_are_skipped() -> None:
    part = struct.pack(">ihqqq", 0, 0, 10, 10, 0) + uvarint(2)
    part += struct.pack(">qq", 7, 3) + _tags({4: b"abc"})  # an AbortedTransaction with a tag
    part += struct.pack(">i", -1) + _records(b"r") + b"\x00"
    body = struct.pack(">i", 3) + b"\x00" + struct.pack(">ihi", 0, 0, 0)
    body += uvarint(2) + compact_string("t") + uvarint(2) + part + b"\x00" + b"\x00"
    parser = FetchResponseParser(12, 3)
    _feed(parser, struct.pack(">i", len(body)) + body, random.Random(1))
    assert parser.response.topics == [("t", [(0, 0, 10, 10, 0, [(7, 3)], b"r")])]


def _framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _bad_responses() -> Iterator[tuple[str, bytes, int]]:
    good = _flexible_response(12, 5, [("t", _parts())])[4:]
    yield "wrong correlation id", _framed(good), 6
    yield "a byte left over", _framed(good + b"\x00"), 5
    yield "ends inside a field", _framed(good[:-1]), 5
    small = _flexible_response(12, 5, [("t", [(0, 0, 1, 1, 0, None, -1, b"ab", {})])])[4:]
    i = small.index(b"\x03ab")
    # Refused before a buffer of that size is made for it.
    yield "record set beyond the response", _framed(small[:i] + uvarint(2**31) + small[i + 1 :]), 5
    yield "a varint of 6 bytes", _framed(small[:i] + b"\xff" * 5 + b"\x01" + small[i + 1 :]), 5
    yield "negative length", struct.pack(">i", -1), 5


@pytest.mark.parametrize(
    ("data", "correlation_id"),
    [pytest.param(d, c, id=what) for what, d, c in _bad_responses()],
)
def test_malformed_flexible_responses_are_refused(data: bytes, correlation_id: int) -> None:
    parser = FetchResponseParser(12, correlation_id)
    with pytest.raises(ValueError):
        pos = 0
        while not parser.done and pos < len(data):
            buf = parser.buffer()
            n = min(len(buf), len(data) - pos)
            buf[:n] = data[pos : pos + n]
            parser.filled(n)
            pos += n


# -- against Kafka's own serializers (Java) ------------------------------------------------

JAVA_SOURCE = Path(__file__).resolve().parents[1] / "_kafka_wire.java"


def _uuid(n: int) -> bytes:
    # KafkaWire.id(n): new Uuid(0x1111222233334444L * n, 0x5555666677778888L + n)
    hi = (0x1111222233334444 * n) & (2**64 - 1)
    return struct.pack(">QQ", hi, 0x5555666677778888 + n)


class _KafkaWire:
    """Kafka 4.3's generated message classes behind a line protocol (``_kafka_wire.java``)."""

    def __init__(self) -> None:
        from aiozkconsumer.testing import provision_kafka

        libs = provision_kafka(flavour="kraft", quiet=True) / "libs"
        self.proc = subprocess.Popen(
            ["java", "-cp", f"{libs}/*", str(JAVA_SOURCE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        assert answer.startswith("OK "), answer
        return answer[3:]

    def close(self) -> None:
        self.proc.communicate(timeout=30)  # closes stdin (the program ends) and stdout


@pytest.fixture(scope="module")
def kafka_wire() -> Iterator[_KafkaWire]:
    wire = _KafkaWire()
    try:
        yield wire
    finally:
        wire.close()


@pytest.mark.integration
@pytest.mark.parametrize("version", range(12, 19))
def test_kafka_reads_our_fetch_requests_as_written(kafka_wire: _KafkaWire, version: int) -> None:
    request = FlexibleFetchRequest(
        version,
        500,
        1,
        1 << 20,
        1,
        77,
        3,
        [
            FetchPartition("alpha", 0, 10, 1000, 4, 3),
            FetchPartition("alpha", 1, 11, 1000),
            FetchPartition("beta-ü", 0, 12, 2000, 9),
            FetchPartition("alpha", 7, 13, 300),
        ],
        {"alpha": _uuid(1), "beta-ü": _uuid(2)},
        [("gamma", 1, _uuid(3)), ("gamma", 2, _uuid(3)), ("alpha", 9, _uuid(1))],
        "rack-1",
    )
    ours = request.encode(42, "client-ü")
    again, _, described = kafka_wire.ask(f"fetchreq {version} {ours.hex()}").partition(" ")
    assert again == ours.hex()  # decoded by FetchRequestData and encoded again: the same
    for field in (
        f"requestApiVersion={version}",
        "correlationId=42",
        "clientId='client-ü'",
        "maxWaitMs=500",
        "isolationLevel=1",
        "sessionId=77",
        "sessionEpoch=3",
        "currentLeaderEpoch=4",
        "lastFetchedEpoch=3",
        "rackId='rack-1'",
    ):
        assert field in described
    assert ("topic='beta-ü'" in described) == (version == 12)


@pytest.mark.integration
@pytest.mark.parametrize("version", range(10, 14))
def test_kafka_reads_our_metadata_requests_as_written(kafka_wire: _KafkaWire, version: int) -> None:
    ours = encode_metadata_request(version, 5, "cid", ["alpha", "b"])
    again, _, described = kafka_wire.ask(f"metareq {version} {ours.hex()}").partition(" ")
    assert again == ours.hex()
    assert "allowAutoTopicCreation=false" in described and "name='alpha'" in described
    error, answers = decode_metadata_response(
        version, 5, bytes.fromhex(kafka_wire.ask(f"metaresp {version} 5"))
    )
    assert error == 0
    assert [(a.name, a.error_code, a.topic_id) for a in answers] == [
        ("alpha", 0, _uuid(1)),
        ("missing", 3, ZERO_UUID),
    ]


@pytest.mark.integration
@pytest.mark.parametrize("version", range(12, 19))
def test_we_read_the_fetch_responses_kafka_writes(kafka_wire: _KafkaWire, version: int) -> None:
    raw = bytes.fromhex(kafka_wire.ask(f"fetchresp {version} 7"))
    parser = FetchResponseParser(version, 7, {_uuid(1): "alpha", _uuid(2): "beta-ü"})
    _feed(parser, struct.pack(">i", len(raw)) + raw, random.Random(version))
    resp = parser.response

    def records(n: int, seed: int) -> bytes:
        return bytes((i * 31 + seed) & 0xFF for i in range(n))

    many = [(1000 + i, 10 * i) for i in range(200)]
    expected: list[tuple[str, list[Any]]] = [
        (
            "alpha",
            [
                (0, 0, 1000, 900, 10, [(7, 100), (8, 200)], records(300, 1)),
                # AbortedTransactions unset: Java writes an empty array, not null.
                (1, 6, -1, -1, -1, [], b""),
                (2, 0, 5000, 5000, 0, [], None),
                (3, 0, 99999, 99000, 5, many, records(70000, 3)),
            ],
        ),
        ("beta-ü", [(0, 0, 5, 5, 0, [], records(5, 9))]),
    ]
    if version == 12:
        expected.append(("gamma", [(4, 0, 1, 1, 0, [], records(20, 5))]))
    else:
        assert resp.unknown_topic_ids == [_uuid(3)]
    assert resp.topics == expected
    assert (resp.throttle_time_ms, resp.error_code, resp.session_id) == (12, 0, 123456)
    tp = TopicPartition
    assert resp.preferred_read_replicas == {tp("alpha", 0): 2}
    assert resp.current_leaders == {tp("alpha", 1): (3, 17)}
    assert resp.diverging_epochs == {tp("alpha", 2): (5, 4242)}
    expected_endpoints = [(3, "broker3.example", 9093, "rack-a"), (4, "h4", 9094, None)]
    assert resp.node_endpoints == (expected_endpoints if version >= 16 else [])
