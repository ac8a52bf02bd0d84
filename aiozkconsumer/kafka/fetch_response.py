"""Decoding a FetchResponse as it arrives (v4–v18), without I/O: :class:`FetchResponseParser`.

The push parser of the fetch loops' own connection (``fetch_connection.py``): header fields are
decoded in a small read-ahead buffer, and each partition's record set is received straight into
a buffer of its own size, which the native decoder reads in place. Flexible versions (v12+,
compact arrays, tagged fields) and topic ids (v13+) are read here too.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..records import TopicPartition
from . import native
from .fetch_request import FlexibleReader, decode_uvarint

__all__ = [
    "MAX_NON_FLEXIBLE",
    "MAX_VERSION",
    "MIN_VERSION",
    "READ_AHEAD",
    "FetchResponse",
    "FetchResponseParser",
    "PartitionData",
]

_alloc: Callable[[int], bytearray] = native.native.alloc if native.AVAILABLE else bytearray
"""A buffer to receive a record set into (the native one is not zero-filled first)."""

READ_AHEAD = 16 * 1024
"""Bytes a receive may bring ahead of the field being parsed (header fields only)."""
MIN_VERSION = 4
MAX_VERSION = 18
"""The FetchResponse layouts :class:`FetchResponseParser` decodes: v4-v11, and the flexible
v12-v18 (``FetchResponse.json`` of Kafka 4.3: v17 and v18 answer as v16)."""
MAX_NON_FLEXIBLE = 11
"""The newest non-flexible version: the newest aiokafka 0.14 builds a FetchRequest for."""

_FIELD = 0  # the next n bytes, decoded in the read-ahead buffer
_RECORDS = 1  # a record set of n bytes, received into a buffer of its own
_VARINT = 2  # an unsigned varint, whatever its length (1-5 bytes)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_TOP_V7 = struct.Struct(">iihii")  # correlation id, throttle, error code, session id, topics
_TOP_V1 = struct.Struct(">iii")  # correlation id, throttle, topics
_PART_V4 = struct.Struct(">ihqqi")  # partition, error, high watermark, last stable, aborted
_PART_V5 = struct.Struct(">ihqqqi")  # ... + log start offset
_ABORTED = struct.Struct(">qq")
_TOP_V12 = struct.Struct(">ihi")  # throttle, error code, session id
_PART_V12 = struct.Struct(">ihqqqB")  # partition, error, high watermark, last stable, log
# start offset, the first byte of the aborted transactions' compact array length
_ABORTED_V12 = struct.Struct(">qqB")  # producer id, first offset, tagged fields (first byte)
_REPLICA_V12 = struct.Struct(">iB")  # preferred read replica, first byte of the records length
_DIVERGING = struct.Struct(">iq")  # DivergingEpoch: epoch, end offset
_LEADER = struct.Struct(">ii")  # CurrentLeader: leader id, leader epoch

PartitionData = tuple[
    int, int, int, int, int, "list[tuple[int, int]] | None", "bytes | bytearray | None"
]
"""``(partition, error code, high watermark, last stable offset, log start offset (-1 before
v5), aborted transactions, records)``: the leading fields and the last one where aiokafka's
decoded ``FetchResponse`` has them, so the fetcher reads either the same way."""


@dataclass(slots=True)
class FetchResponse:
    """A decoded FetchResponse (the parts of aiokafka's the fetcher reads, then the rest).

    Only the first four attributes are in aiokafka's decoded responses too (the fetcher reads
    either); the others are this parser's, and the dictionaries hold only partitions whose
    value is not the default.

    Attributes:
        throttle_time_ms: the broker's throttle time.
        error_code: the top-level error (v7+; 0 before).
        topics: ``[(topic, [PartitionData, ...])]`` in response order; from v13 on topics are
            named from their ids (see ``topic_names`` of :class:`FetchResponseParser`).
        size: bytes of the response after its length prefix.
        session_id: the fetch session's id (v7+; 0 none).
        preferred_read_replicas: v11+: partition -> the replica to fetch from next (KIP-392),
            for partitions the broker named one for.
        diverging_epochs: v12+: partition -> ``(epoch, end offset)`` of the ``DivergingEpoch``
            tagged field (the log diverged from ``LastFetchedEpoch``).
        current_leaders: v12+: partition -> ``(leader id, leader epoch)`` of the
            ``CurrentLeader`` tagged field (sent with ``NOT_LEADER_OR_FOLLOWER`` and
            ``FENCED_LEADER_EPOCH``, KIP-951).
        node_endpoints: v16+: ``[(node id, host, port, rack)]`` of those leaders.
        topic_ids: v13+: the id of each topic in the response, in order.
        unknown_topic_ids: v13+: ids no name was known for; their partitions are left out
            of ``topics``.
        record_sets: partition -> its record set already parsed (a ``records.RecordSet``:
            batch headers read, CRCs checked), when the fetch connection's I/O thread did
            it (``records.read_record_sets``); empty otherwise.
    """

    throttle_time_ms: int = 0
    error_code: int = 0
    topics: list[tuple[str, list[PartitionData]]] = field(default_factory=list)
    size: int = 0
    session_id: int = 0
    preferred_read_replicas: dict[TopicPartition, int] = field(default_factory=dict)
    diverging_epochs: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    current_leaders: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    node_endpoints: list[tuple[int, str, int, str | None]] = field(default_factory=list)
    topic_ids: list[bytes] = field(default_factory=list)
    unknown_topic_ids: list[bytes] = field(default_factory=list)
    record_sets: dict[TopicPartition, Any] = field(default_factory=dict)


class FetchResponseParser:
    """Decodes one FetchResponse as it arrives, without I/O (a push parser).

    :meth:`buffer` is where the next bytes go; :meth:`filled` says how many went there.
    Header fields are received into a small read-ahead buffer (up to :data:`READ_AHEAD` bytes,
    never past the response's end) and decoded in place, so one receive brings a partition's
    header and the start of its record set; a record set is then received whole into a buffer
    of its own size (what the read-ahead already holds of it copied in first). ``done`` is
    set, and ``response`` holds the result, once the length prefix's bytes have all come.

    The flexible versions (v12+) put varints (compact array and string lengths, tagged-field
    counts) between the fixed fields: a varint is decoded where it lies in the read-ahead
    buffer, whatever its length, and the usual one-byte ones are read together with the
    fixed fields before them, so a partition still takes four steps (header, replica and
    record set length, record set, tagged fields).

    Args:
        version: the FetchRequest's API version (:data:`MIN_VERSION` .. :data:`MAX_VERSION`).
        correlation_id: the request's correlation id.
        topic_names: v13+: topic id -> name, for the topics the request may be answered
            with (a fetch session's); a topic whose id is not there is left out of
            ``response.topics`` and listed in ``response.unknown_topic_ids``.

    Raises:
        ValueError: ``version`` is not parsed here.

    Raises (from :meth:`filled`):
        ValueError: the bytes do not form the expected response (wrong correlation id, a
            length beyond the response's end); the connection is out of sync.
    """

    def __init__(
        self, version: int, correlation_id: int, topic_names: Mapping[bytes, str] | None = None
    ) -> None:
        if not MIN_VERSION <= version <= MAX_VERSION:
            raise ValueError(f"FetchResponse v{version} is not parsed here")
        self.version = version
        self.correlation_id = correlation_id
        self._topic_names: Mapping[bytes, str] = topic_names or {}
        self.response = FetchResponse()
        self.done = False
        self.bytes_copied = 0
        """Record bytes copied from the receive buffers into ``bytes`` (one copy each)."""
        self._ahead = memoryview(bytearray(READ_AHEAD))
        self._start = self._end = 0  # the unparsed bytes in the read-ahead buffer
        self._unreceived = 4  # bytes of the response not received yet (the prefix first)
        self._record: memoryview | None = None  # the record set being received
        self._record_pos = 0
        self._steps = self._parse() if version <= MAX_NON_FLEXIBLE else self._parse_flexible()
        self._need = next(self._steps)

    def buffer(self) -> memoryview:
        """Where the next received bytes go (never empty while not ``done``)."""
        if self._record is not None:
            return self._record[self._record_pos :]
        return self._ahead[self._end : min(len(self._ahead), self._end + self._unreceived)]

    def filled(self, nbytes: int) -> None:
        """Account for ``nbytes`` received into :meth:`buffer`; parse what is complete."""
        self._unreceived -= nbytes
        if self._record is not None:
            self._record_pos += nbytes
        else:
            self._end += nbytes
        self._advance()
        if not self.done and self._record is None and self._unreceived <= 0:
            raise ValueError("FetchResponse ended inside a field")

    def _advance(self) -> None:
        while not self.done:
            if self._record is not None:
                if self._record_pos < len(self._record):
                    return  # more of the record set to come
                value, self._record = self._record, None
            else:
                n, kind = self._need
                have = self._end - self._start
                if kind == _RECORDS:
                    record = _alloc(n)
                    take = min(have, n)
                    record[:take] = self._ahead[self._start : self._start + take]
                    self._start += take
                    self._record, self._record_pos = memoryview(record), take
                    continue
                if kind == _VARINT:
                    n = self._varint_length()
                    if not n:
                        return  # its end has not come yet
                if have < n:
                    self._make_room(n)
                    return
                value = self._ahead[self._start : self._start + n]
                self._start += n
            try:
                self._need = self._steps.send(value)
            except StopIteration:
                self.done = True

    def _varint_length(self) -> int:
        """Bytes of the varint at the parse position, or 0 (room made) if not all here."""
        ahead, start = self._ahead, self._start
        end = min(self._end, start + 5)
        for i in range(start, end):
            if ahead[i] < 0x80:
                return i + 1 - start
        if end - start >= 5:
            raise ValueError("unsigned varint longer than 5 bytes")
        self._make_room(5)
        return 0

    def _make_room(self, n: int) -> None:
        """Move the unparsed bytes to the front, in a bigger buffer if ``n`` needs it."""
        have = self._end - self._start
        if n > len(self._ahead):  # a long topic name or many aborted transactions
            bigger = memoryview(bytearray(n))
            bigger[:have] = self._ahead[self._start : self._end]
            self._ahead = bigger
        elif self._start:
            self._ahead[:have] = self._ahead[self._start : self._end]
        self._start, self._end = 0, have

    def _parse(self) -> Generator[tuple[int, int], memoryview, None]:
        # yield (n, kind): the next n bytes of the response (a view, read at once).
        v = self.version
        resp = self.response
        (size,) = _I32.unpack((yield 4, _FIELD))
        if size < 0:
            raise ValueError(f"FetchResponse length {size}")
        self._unreceived += size
        left = size
        top = _TOP_V7 if v >= 7 else _TOP_V1
        if left < top.size:
            raise ValueError(f"FetchResponse of {size} bytes is too short")
        left -= top.size
        if v >= 7:
            corr, resp.throttle_time_ms, resp.error_code, resp.session_id, n_topics = top.unpack(
                (yield top.size, _FIELD)
            )
        else:
            corr, resp.throttle_time_ms, n_topics = top.unpack((yield top.size, _FIELD))
        if corr != self.correlation_id:
            raise ValueError(f"correlation id {corr}, expected {self.correlation_id}")
        part = _PART_V5 if v >= 5 else _PART_V4
        tail = 8 if v >= 11 else 4  # (preferred read replica,) records length
        for _ in range(max(n_topics, 0)):
            left -= 2
            (name_len,) = _I16.unpack((yield 2, _FIELD))
            left -= name_len + 4
            if left < 0 or name_len < 0:
                raise ValueError("topic name beyond the response")
            head = yield name_len + 4, False
            topic = str(head[:name_len], "utf-8")
            (n_parts,) = _I32.unpack_from(head, name_len)
            parts: list[PartitionData] = []
            for _ in range(max(n_parts, 0)):
                left -= part.size
                if left < 0:
                    raise ValueError("partition header beyond the response")
                if v >= 5:
                    head = yield part.size, False
                    partition, error, hw, lso, log_start, n_aborted = part.unpack(head)
                else:
                    partition, error, hw, lso, n_aborted = part.unpack((yield part.size, _FIELD))
                    log_start = -1
                aborted: list[tuple[int, int]] | None = None
                if n_aborted >= 0:
                    left -= n_aborted * _ABORTED.size
                    if left < 0:
                        raise ValueError("aborted transactions beyond the response")
                    raw = (
                        (yield n_aborted * _ABORTED.size, _FIELD) if n_aborted else memoryview(b"")
                    )
                    aborted = [
                        _ABORTED.unpack_from(raw, i * _ABORTED.size) for i in range(n_aborted)
                    ]
                left -= tail
                if left < 0:
                    raise ValueError("record set length beyond the response")
                tail_view = yield tail, _FIELD
                (length,) = _I32.unpack_from(tail_view, tail - 4)
                if tail == 8:
                    (replica,) = _I32.unpack_from(tail_view)
                    if replica >= 0:
                        resp.preferred_read_replicas[TopicPartition(topic, partition)] = replica
                records: bytes | bytearray | None = None
                if length >= 0:
                    left -= length
                    if left < 0:
                        raise ValueError("record set beyond the response")
                    if not length:
                        records = b""
                    elif native.AVAILABLE:
                        # The native decoder reads the receive buffer itself: no copy.
                        received = (yield length, _RECORDS).obj
                        assert isinstance(received, bytearray)
                        records = received
                    else:
                        # The one copy into the bytes MemoryRecords takes (it refuses buffers).
                        records = bytes((yield length, _RECORDS))
                        self.bytes_copied += length
                parts.append((partition, error, hw, lso, log_start, aborted, records))
            resp.topics.append((topic, parts))
        if left:
            raise ValueError(f"{left} bytes left over at the end of a FetchResponse")
        resp.size = size

    def _parse_flexible(self) -> Generator[tuple[int, int], memoryview, None]:
        # FetchResponse v12+ (FetchResponse.json): header v1, compact arrays and strings,
        # tagged fields closing every struct. ``left``: bytes of the response not yet asked
        # for, so that no length read from the wire reaches past its end.
        v = self.version
        resp = self.response
        names = self._topic_names
        native_records = native.AVAILABLE
        (size,) = _I32.unpack((yield 4, _FIELD))
        if size < 0:
            raise ValueError(f"FetchResponse length {size}")
        self._unreceived += size
        left = size - 4 - _TOP_V12.size
        if left < 2:  # + the header's tagged fields and the topics' length, one byte each
            raise ValueError(f"FetchResponse of {size} bytes is too short")
        (corr,) = _I32.unpack((yield 4, _FIELD))
        if corr != self.correlation_id:
            raise ValueError(f"correlation id {corr}, expected {self.correlation_id}")
        left = yield from self._tagged_fields(left, None)  # the response header's
        resp.throttle_time_ms, resp.error_code, resp.session_id = _TOP_V12.unpack(
            (yield _TOP_V12.size, _FIELD)
        )
        n_topics, left = yield from self._varint(left)
        for _ in range(n_topics - 1):
            if v >= 13:
                left -= 16
                if left < 0:
                    raise ValueError("topic id beyond the response")
                topic_id = bytes((yield 16, _FIELD))
                resp.topic_ids.append(topic_id)
                name = names.get(topic_id)
                if name is None:
                    resp.unknown_topic_ids.append(topic_id)
            else:
                length, left = yield from self._varint(left)
                left -= length - 1
                if length < 1 or left < 0:
                    raise ValueError("topic name beyond the response")
                name = str((yield length - 1, _FIELD), "utf-8") if length > 1 else ""
            n_parts, left = yield from self._varint(left)
            parts: list[PartitionData] = []
            for _ in range(n_parts - 1):
                left -= _PART_V12.size
                if left < 0:
                    raise ValueError("partition header beyond the response")
                partition, error, hw, lso, log_start, b = _PART_V12.unpack(
                    (yield _PART_V12.size, _FIELD)
                )
                if b & 0x80:  # a varint of 2+ bytes: 127 aborted transactions or more
                    rest, left = yield from self._varint(left)
                    b = (b & 0x7F) | (rest << 7)
                aborted: list[tuple[int, int]] | None = None
                if b:
                    aborted = []
                    for _ in range(b - 1):
                        left -= _ABORTED_V12.size
                        if left < 0:
                            raise ValueError("aborted transactions beyond the response")
                        pid, first, tags = _ABORTED_V12.unpack((yield _ABORTED_V12.size, _FIELD))
                        aborted.append((pid, first))
                        if tags:
                            left = yield from self._more_tagged_fields(tags, left, None)
                left -= _REPLICA_V12.size
                if left < 0:
                    raise ValueError("record set length beyond the response")
                replica, b = _REPLICA_V12.unpack((yield _REPLICA_V12.size, _FIELD))
                if b & 0x80:
                    rest, left = yield from self._varint(left)
                    b = (b & 0x7F) | (rest << 7)
                records: bytes | bytearray | None = None
                if b:
                    length = b - 1
                    left -= length
                    if left < 0:
                        raise ValueError("record set beyond the response")
                    if not length:
                        records = b""
                    elif native_records:
                        # The native decoder reads the receive buffer itself: no copy.
                        received = (yield length, _RECORDS).obj
                        assert isinstance(received, bytearray)
                        records = received
                    else:
                        records = bytes((yield length, _RECORDS))
                        self.bytes_copied += length
                left -= 1
                if left < 0:
                    raise ValueError("tagged fields beyond the response")
                tags = (yield 1, _FIELD)[0]
                tp = None
                if name is not None:
                    if replica >= 0:
                        tp = TopicPartition(name, partition)
                        resp.preferred_read_replicas[tp] = replica
                    parts.append((partition, error, hw, lso, log_start, aborted, records))
                if tags:
                    if name is not None and tp is None:
                        tp = TopicPartition(name, partition)
                    left = yield from self._more_tagged_fields(tags, left, tp)
            left = yield from self._tagged_fields(left, None)  # the topic's
            if name is not None:
                resp.topics.append((name, parts))
        left = yield from self._tagged_fields(left, None, top=True)
        if left:
            raise ValueError(f"{left} bytes left over at the end of a FetchResponse")
        resp.size = size

    def _varint(self, left: int) -> Generator[tuple[int, int], memoryview, tuple[int, int]]:
        """An unsigned varint and the bytes left after it."""
        if left < 1:
            raise ValueError("varint beyond the response")
        raw = yield 5, _VARINT
        left -= len(raw)
        if left < 0:
            raise ValueError("varint beyond the response")
        return decode_uvarint(raw), left

    def _tagged_fields(
        self, left: int, tp: TopicPartition | None, *, top: bool = False
    ) -> Generator[tuple[int, int], memoryview, int]:
        """A tagged-field section; returns the bytes left after it."""
        count, left = yield from self._varint(left)
        if count:
            left = yield from self._fields(count, left, tp, top)
        return left

    def _more_tagged_fields(
        self, first: int, left: int, tp: TopicPartition | None
    ) -> Generator[tuple[int, int], memoryview, int]:
        """A partition's tagged fields whose count's first byte ``first`` was read already."""
        count = first
        if first & 0x80:
            rest, left = yield from self._varint(left)
            count = (first & 0x7F) | (rest << 7)
        return (yield from self._fields(count, left, tp, False))

    def _fields(
        self, count: int, left: int, tp: TopicPartition | None, top: bool
    ) -> Generator[tuple[int, int], memoryview, int]:
        """``count`` tagged fields: the ones known here decoded, the others skipped."""
        resp = self.response
        for _ in range(count):
            tag, left = yield from self._varint(left)
            length, left = yield from self._varint(left)
            left -= length
            if left < 0:
                raise ValueError("tagged field beyond the response")
            raw = (yield length, _FIELD) if length else memoryview(b"")
            if top:
                if tag == 0 and self.version >= 16:  # NodeEndpoints
                    resp.node_endpoints.extend(_node_endpoints(raw))
            elif tp is not None:
                if tag == 0 and length >= _DIVERGING.size:  # DivergingEpoch
                    resp.diverging_epochs[tp] = _DIVERGING.unpack_from(raw)
                elif tag == 1 and length >= _LEADER.size:  # CurrentLeader
                    resp.current_leaders[tp] = _LEADER.unpack_from(raw)
                # 2: SnapshotId, for followers fetching the metadata log: not kept.
        return left


def _node_endpoints(raw: memoryview) -> list[tuple[int, str, int, str | None]]:
    """The ``NodeEndpoints`` tagged field (v16+): ``[(node id, host, port, rack)]``."""
    r = FlexibleReader(raw)
    endpoints: list[tuple[int, str, int, str | None]] = []
    for _ in range(r.compact_length()):
        node_id = r.i32()
        host = r.compact_string() or ""
        port = r.i32()
        rack = r.compact_string()
        r.skip_tagged_fields()
        endpoints.append((node_id, host, port, rack))
    return endpoints
