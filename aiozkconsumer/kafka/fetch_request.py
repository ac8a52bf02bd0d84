"""FetchRequest v12-v18 (the flexible versions) encoded here; aiokafka 0.14 builds v1-v11 only.

What a fetch loop asks of a broker, field by field as ``FetchRequest.json`` (Kafka 3.9 and
4.3, ``clients/src/main/resources/common/message/``) lays it out, with every field the Java
consumer's request carries: ``IsolationLevel``, ``SessionId``/``SessionEpoch`` and
``ForgottenTopicsData`` (fetch sessions, KIP-227), per partition ``CurrentLeaderEpoch``
(KIP-320), ``LastFetchedEpoch``, ``LogStartOffset`` and ``PartitionMaxBytes``, and ``RackId``
(KIP-392). Pure: it takes data and returns bytes; ``fetch_connection.py`` sends them and
``fetch_session.py`` decides which partitions a request carries.

The flexible layouts (v12+): request header v2 (its ``ClientId`` still an INT16-length string:
``RequestHeader.json`` says ``"flexibleVersions": "none"`` for it), compact arrays and strings
(unsigned varint length + 1), a tagged-field section closing every struct. Topics are named by
their id (a 16-byte UUID) from v13 on (KIP-516). The tagged fields a consumer leaves at their
defaults are not sent (``ClusterId``, ``ReplicaState`` v15+, ``ReplicaDirectoryId`` v17+, the
replica's ``HighWatermark`` v18+), so every tagged-field section here is empty.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "FETCH_API_KEY",
    "MAX_VERSION",
    "MIN_VERSION",
    "TOPIC_ID_VERSION",
    "ZERO_UUID",
    "FetchPartition",
    "FlexibleReader",
    "FlexibleFetchRequest",
    "compact_string",
    "decode_uvarint",
    "request_header_v2",
    "topic_id_str",
    "uvarint",
]

FETCH_API_KEY = 1
MIN_VERSION = 12
"""The first flexible FetchRequest version (``"flexibleVersions": "12+"``)."""
MAX_VERSION = 18
"""The newest FetchRequest version encoded here (Kafka 4.1+; Kafka 3.9 offers up to 17)."""
TOPIC_ID_VERSION = 13
"""From this version on topics are named by id (KIP-516); v12 is the newest with names."""
ZERO_UUID = bytes(16)
"""Kafka's ``Uuid.ZERO_UUID``: no topic id known."""

_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_TOP_V12 = struct.Struct(">iiiibii")  # replica id, max wait, min bytes, max bytes, isolation,
# session id, session epoch
_TOP_V15 = struct.Struct(">iiibii")  # the same without the replica id (a tagged field v15+)
_PARTITION = struct.Struct(">iiqiqiB")  # partition, current leader epoch, fetch offset,
# last fetched epoch, log start offset, partition max bytes, empty tagged fields
_I32 = struct.Struct(">i")
_SMALL = [bytes((n,)) for n in range(128)]


class FetchPartition(NamedTuple):
    """One partition of a FetchRequest, as the Java client's ``FetchRequest.PartitionData``.

    A named tuple, not a dataclass: a fetch session compares every partition of every
    request with the one it sent before (``FetchSessionHandler.Builder.build``), and tuple
    equality runs in C.

    Attributes:
        topic: the topic's name.
        partition: the partition index.
        fetch_offset: the offset to fetch from.
        partition_max_bytes: ``PartitionMaxBytes``: at most this many bytes of the partition
            (the first batch is returned whole even if larger, KIP-74).
        current_leader_epoch: ``CurrentLeaderEpoch`` (KIP-320): the leader epoch the client
            knows, so a stale leader answers ``FENCED_LEADER_EPOCH``; -1 unknown (no check).
        last_fetched_epoch: ``LastFetchedEpoch``: the epoch of the last record fetched, for
            the broker to detect a diverging log; -1 none (what the Java consumer sends).
        log_start_offset: ``LogStartOffset``: a follower's; -1 from a consumer.
    """

    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


def uvarint(value: int) -> bytes:
    """An unsigned varint (protobuf's base-128 encoding, ``ByteUtils.writeUnsignedVarint``).

    Raises:
        ValueError: ``value`` is negative or above 2**32 - 1 (an unsigned int32).
    """
    if 0 <= value < 128:
        return _SMALL[value]
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"{value} is not an unsigned varint")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_uvarint(data: bytes | memoryview) -> int:
    """The unsigned varint that ``data`` holds exactly (its last byte ends it).

    Raises:
        ValueError: ``data`` is empty, longer than 5 bytes, or not one varint.
    """
    if not 0 < len(data) <= 5:
        raise ValueError(f"an unsigned varint of {len(data)} bytes")
    value = 0
    for i, b in enumerate(data):
        if (b < 0x80) != (i == len(data) - 1):
            raise ValueError("not one unsigned varint")
        value |= (b & 0x7F) << (7 * i)
    return value


def compact_string(value: str | None) -> bytes:
    """A COMPACT_(NULLABLE_)STRING: varint length + 1 (0 for null), then UTF-8."""
    if value is None:
        return b"\x00"
    raw = value.encode()
    return uvarint(len(raw) + 1) + raw


def request_header_v2(api_key: int, api_version: int, correlation_id: int, client_id: str) -> bytes:
    """RequestHeader v2 (the flexible requests'): the client id keeps its INT16 length."""
    raw = client_id.encode()
    return _HEADER.pack(api_key, api_version, correlation_id, len(raw)) + raw + b"\x00"


def topic_id_str(topic_id: bytes) -> str:
    """A topic id as Kafka prints it (``Uuid.toString``: URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(topic_id).rstrip(b"=").decode()


@dataclass(frozen=True, slots=True)
class FlexibleFetchRequest:
    """A FetchRequest at a flexible version (v12-v18), ready to encode.

    The Java consumer's request (``FetchRequest.Builder.forConsumer(...).isolationLevel(...)
    .setMaxBytes(...).metadata(...).removed(...).replaced(...).rackId(...)``, built by
    ``AbstractFetch.createFetchRequest``): replica id -1, the session's id and epoch, the
    partitions to send in the order given (consecutive partitions of one topic share one
    ``FetchTopic``, as ``FetchRequest.Builder.build`` groups them), the partitions to forget
    grouped by topic.

    Attributes:
        version: the API version, :data:`MIN_VERSION` .. :data:`MAX_VERSION`.
        max_wait_ms: ``MaxWaitMs``: how long the broker may hold the request for
            ``min_bytes`` to arrive.
        min_bytes: ``MinBytes``.
        max_bytes: ``MaxBytes``: the response's limit (KIP-74).
        isolation_level: ``IsolationLevel``: 0 read_uncommitted, 1 read_committed.
        session_id: ``SessionId`` (0: none).
        session_epoch: ``SessionEpoch`` (0 creates a session, -1 none / closes it).
        partitions: the partitions to send, in order.
        topic_ids: topic -> id, used from v13 on (every topic sent must have one then); the
            name is sent before.
        forgotten: ``[(topic, partition, topic id)]``: ``ForgottenTopicsData``.
        rack_id: ``RackId``: the consumer's ``client.rack`` ("" none).
    """

    version: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int = 0
    session_id: int = 0
    session_epoch: int = -1
    partitions: Sequence[FetchPartition] = ()
    topic_ids: Mapping[str, bytes] = field(default_factory=dict)
    forgotten: Sequence[tuple[str, int, bytes]] = ()
    rack_id: str = ""

    @property
    def API_VERSION(self) -> int:
        """The API version (the name the fetch connection reads from any request)."""
        return self.version

    def encode(self, correlation_id: int, client_id: str) -> bytes:
        """The request with its header, without the size prefix.

        Args:
            correlation_id: the request header's correlation id.
            client_id: ``client.id``.

        Raises:
            ValueError: the version is not flexible or not encoded here, or (v13+) a topic
                has no id (:data:`ZERO_UUID`): such a request must be sent as v12, as
                ``AbstractFetch.createFetchRequest`` caps it when ``canUseTopicIds`` is false.
        """
        v = self.version
        if not MIN_VERSION <= v <= MAX_VERSION:
            raise ValueError(f"FetchRequest v{v} is not a flexible version encoded here")
        by_id = v >= TOPIC_ID_VERSION
        out = [request_header_v2(FETCH_API_KEY, v, correlation_id, client_id)]
        if v >= 15:
            # ReplicaId moved into the ReplicaState tagged field (KIP-903), default -1.
            out.append(
                _TOP_V15.pack(
                    self.max_wait_ms,
                    self.min_bytes,
                    self.max_bytes,
                    self.isolation_level,
                    self.session_id,
                    self.session_epoch,
                )
            )
        else:
            out.append(
                _TOP_V12.pack(
                    -1,
                    self.max_wait_ms,
                    self.min_bytes,
                    self.max_bytes,
                    self.isolation_level,
                    self.session_id,
                    self.session_epoch,
                )
            )
        # Topics: consecutive partitions of one topic under one FetchTopic.
        groups: list[tuple[bytes, list[bytes]]] = []
        last_topic: str | None = None
        pack = _PARTITION.pack
        current: list[bytes] = []
        ids = self.topic_ids
        for (
            topic,
            partition,
            offset,
            max_bytes,
            leader_epoch,
            fetched_epoch,
            start,
        ) in self.partitions:
            if topic != last_topic:
                last_topic = topic
                current = []
                topic_id = ids.get(topic, ZERO_UUID)
                groups.append((self._topic_key(topic, topic_id, by_id), current))
            current.append(
                pack(partition, leader_epoch, offset, fetched_epoch, start, max_bytes, 0)
            )
        out.append(uvarint(len(groups) + 1))
        for key, parts in groups:
            out.append(key)
            out.append(uvarint(len(parts) + 1))
            out.extend(parts)
            out.append(b"\x00")  # the FetchTopic's tagged fields
        # ForgottenTopicsData, grouped by topic (FetchRequest.Builder's forgottenTopicMap).
        forgotten: dict[str, tuple[bytes, list[int]]] = {}
        for topic, partition, topic_id in self.forgotten:
            entry = forgotten.get(topic)
            if entry is None:
                entry = forgotten[topic] = (self._topic_key(topic, topic_id, by_id), [])
            entry[1].append(partition)
        out.append(uvarint(len(forgotten) + 1))
        for key, partitions in forgotten.values():
            out.append(key)
            out.append(uvarint(len(partitions) + 1))
            out.append(struct.pack(f">{len(partitions)}i", *partitions))
            out.append(b"\x00")
        out.append(compact_string(self.rack_id))
        out.append(b"\x00")  # the request's tagged fields
        return b"".join(out)

    @staticmethod
    def _topic_key(topic: str, topic_id: bytes, by_id: bool) -> bytes:
        if not by_id:
            return compact_string(topic)
        if len(topic_id) != 16 or topic_id == ZERO_UUID:
            raise ValueError(f"topic {topic!r} has no topic id: FetchRequest v13+ needs one")
        return topic_id

    def frame(self, correlation_id: int, client_id: str) -> bytes:
        """:meth:`encode` with its INT32 size prefix: the bytes to write.

        Raises:
            ValueError: as :meth:`encode`.
        """
        message = self.encode(correlation_id, client_id)
        return _I32.pack(len(message)) + message


class FlexibleReader:
    """Reads a flexible-version message front to back (its INT, BOOLEAN and NULLABLE_STRING
    reads serve the non-flexible versions too).

    Every method raises ``ValueError`` when the field would run past the end of the data.

    Args:
        data: the message.
    """

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        """The next ``n`` bytes."""
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise ValueError("the message ended inside a field")
        view = self.data[self.pos : end]
        self.pos = end
        return view

    def i16(self) -> int:
        """An INT16."""
        return int(_I16.unpack(self.take(2))[0])

    def i32(self) -> int:
        """An INT32."""
        return int(_I32.unpack(self.take(4))[0])

    def i64(self) -> int:
        """An INT64."""
        return int(_I64.unpack(self.take(8))[0])

    def uvarint(self) -> int:
        """An unsigned varint (at most 5 bytes)."""
        value = shift = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ValueError("unsigned varint longer than 5 bytes")

    def boolean(self) -> bool:
        """A BOOLEAN."""
        return self.take(1)[0] != 0

    def string(self) -> str | None:
        """A NULLABLE_STRING of the non-flexible versions (INT16 length; ``None`` for null)."""
        n = self.i16()
        return None if n < 0 else str(self.take(n), "utf-8")

    def compact_string(self) -> str | None:
        """A COMPACT_NULLABLE_STRING (``None`` for null)."""
        n = self.uvarint()
        return None if n == 0 else str(self.take(n - 1), "utf-8")

    def skip_tagged_fields(self) -> None:
        """Step over a tagged-field section."""
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())

    def compact_length(self) -> int:
        """A COMPACT_ARRAY's length (0 for null)."""
        n = self.uvarint()
        return max(n - 1, 0)
