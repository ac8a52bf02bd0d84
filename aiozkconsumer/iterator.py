"""``ConsumerIterator``: a stream's one asynchronous iterator (``async for msg in stream``).

It takes the ``FetchedDataChunk`` objects of a stream's bounded queue and hands their records
out one by one (``__anext__``), in batches (``next_batch``) or as columns (``next_columns``).
Semantics follow ``ConsumerIterator.scala`` (0.10.2): the consumed offset advances when a
record is handed out; records below the consumed offset in a chunk are skipped;
``consumer.timeout.ms`` raises ``ConsumerTimeoutError`` and leaves the iterator usable; the
shutdown sentinel ends iteration. Each record goes out under its partition's ownership gate
(session and lease). ``stream.py``'s ``KafkaStream`` owns one.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable, Iterator
from time import monotonic as _monotonic
from typing import TYPE_CHECKING, Any

from .errors import (
    ConsumerTimeoutError,
    CorruptRecordError,
    MessageSizeTooLargeError,
    UnsupportedCodecError,
)
from .kafka.records import (
    Outcome,
    decompress_at,
    malformed_error,
    reads_natively,
    take_messages,
)
from .queues import ChunkQueue, _ShutdownCommand
from .records import FetchedDataChunk, MessageAndMetadata, PartitionTopicInfo

if TYPE_CHECKING:
    from .columns import ColumnBuilder

__all__ = [
    "NATIVE_HAND_OUT",
    "READ_AHEAD_BYTES",
    "READ_AHEAD_RECORDS",
    "ConsumerIterator",
    "Decoder",
]


Decoder = Callable[[bytes], Any]

# The take loop's outcomes that _poll tests after each call, bound once here as plain ints:
# looking a member up on its IntEnum class costs about 0.1 us (Python 3.11), and comparing an
# int with a member a subclass check.
_GATE, _FULL, _ERROR = int(Outcome.GATE), int(Outcome.FULL), int(Outcome.ERROR)

READ_AHEAD_RECORDS = 128
"""The most records ``async for`` decodes ahead of the reader, from one chunk at a time."""
READ_AHEAD_BYTES = 256 * 1024
"""About the most value bytes it decodes ahead: fewer records when they are large (sized from
the last record read ahead)."""


def _gate_closed(pti: PartitionTopicInfo) -> bool:
    """Whether ``pti``'s gate holds records back now (session in doubt, lease run out)."""
    gate = pti.gate
    return not gate.open or _monotonic() >= gate.deadline


class _ReadAhead:
    """``ConsumerIterator``'s base where the native hand-out (``_handout.c``) is not built or
    is disabled (``AIOZKCONSUMER_NATIVE=0``): the same ``__anext__`` in Python, a coroutine
    per record."""

    __slots__ = ("_ahead", "_ahead_end", "_ahead_pti", "_ahead_truncations", "_polled_at")

    _ahead: list[MessageAndMetadata]
    _ahead_pti: PartitionTopicInfo | None
    _ahead_end: int
    _ahead_truncations: int
    _polled_at: float

    async def __anext__(self) -> MessageAndMetadata:
        now = _monotonic()
        self._polled_at = now  # the reader asks: poll liveness's clock starts anew
        ahead = self._ahead
        if ahead:
            # The hand-out of a record read ahead: the gate and the partition's ownership
            # checked, the consumed offset set, as for a record taken now.
            pti: Any = self._ahead_pti
            gate = pti.gate
            if (
                gate.open
                and now < gate.deadline
                and pti.active
                and pti.truncations == self._ahead_truncations
            ):
                msg = ahead.pop()
                if ahead:
                    pti.consumed_offset = msg[2] + 1
                else:
                    pti.consumed_offset = self._ahead_end
                    self._end_ahead()
                return msg
        return await self._next_record()

    async def _next_record(self) -> MessageAndMetadata:
        raise NotImplementedError

    def _end_ahead(self) -> None:
        raise NotImplementedError


if TYPE_CHECKING:
    _HandOut = _ReadAhead
else:
    try:
        if os.environ.get("AIOZKCONSUMER_NATIVE", "1") == "0":
            raise ImportError("disabled by AIOZKCONSUMER_NATIVE=0")
        from ._handout import ReadAhead as _HandOut
    except ImportError:
        _HandOut = _ReadAhead

NATIVE_HAND_OUT: bool = _HandOut is not _ReadAhead
"""Whether ``async for`` hands out a record read ahead in C (``_handout.c``): built, and not
disabled by ``AIOZKCONSUMER_NATIVE=0``."""


class ConsumerIterator(_HandOut):
    """The asynchronous iterator of one ``KafkaStream`` (``ConsumerIterator.scala``).

    ``await it.__anext__()`` returns the next ``MessageAndMetadata``.

    Args:
        queue: the stream's chunk queue.
        consumer_timeout_ms: ``consumer.timeout.ms``; negative waits forever.
        key_decoder: applied to non-null keys when a record is handed out (default: bytes
            kept); a null key stays ``None`` without calling it, as the original.
        value_decoder: likewise for values.

    Raises (from ``__anext__``):
        ConsumerTimeoutError: no record within ``consumer.timeout.ms`` (when >= 0). The
            iterator stays usable: iterate again to keep waiting (KAFKA-241).
        MessageSizeTooLargeError: a record batch at the fetch offset is larger than
            ``fetch.message.max.bytes``. The partition does not advance; raise the fetch size.
            The iterator stays usable for the stream's other partitions.
        CorruptRecordError: a fetched record batch's CRC does not match (``check.crcs``,
            ``crc.error.action=raise``; the original's ``ensureValid()`` in
            ``ConsumerIterator.makeNext``). Nothing of the batch is handed out, the consumed
            offset stays before it and the partition is not fetched further until the next
            rebalance. The iterator stays usable for the stream's other partitions (the
            original's iterator failed for good).
        UnsupportedCodecError: a fetched record batch is compressed with a codec this
            installation cannot decompress (``cramjam`` missing). As for a corrupt batch,
            nothing of it is handed out, the partition stops before it until the next
            rebalance, and the iterator stays usable for the stream's other partitions.
        StopAsyncIteration: the connector shut down (the shutdown sentinel arrived).
        Exception: a key or value decoder's own error. The record it refused counts as
            consumed as its error is raised; the iterator stays usable, and the records
            after it follow (``next_batch``: the records before it go out first, in a batch
            of their own).

    While the ZooKeeper session is suspended (connection lost, session maybe expiring), records
    of the partitions it owns are held back: the iterator waits (within
    ``consumer.timeout.ms``) until the session is back, or drops them if the partitions were
    released meanwhile. The original kept handing them out (§10.5 of the reference).

    ``async for`` reads ahead: up to ``READ_AHEAD_RECORDS`` records of one chunk (fewer when
    large, about ``READ_AHEAD_BYTES`` of values) are decoded in one call and handed out one
    by one (in C where the extension was built, :data:`NATIVE_HAND_OUT`: no coroutine per
    record). Each is handed out as a record taken then would be: the gate checked, its
    offset counted as consumed (and in the meters) only then; records read ahead of a
    partition released, seeked or paused meanwhile are dropped. ``next_batch`` and
    ``next_columns`` hand out what was read ahead first. A stream with a key or value
    decoder reads one record at a time, so a decoder's error comes with its record.

    Poll liveness (``max.poll.interval.ms``, Kafka-coordinated members): each ask for records
    stores a monotonic timestamp (:meth:`held_since`), the only per-record cost; a member whose
    reader holds what it was handed past the interval leaves its group
    (``GroupMember.poll_liveness_loop``). A reader waiting inside ``__anext__`` is polling.
    """

    __slots__ = (
        "_ahead_limit",
        "_ahead_n",
        "_batches",
        "_count",
        "_index",
        "_deferred",
        "_done",
        "_key_decoder",
        "_native",
        "_overlap",
        "_pending",
        "_poll_listener",
        "_pti",
        "_queue",
        "_recs",
        "_timeout_s",
        "_timestamp_type",
        "_truncations",
        "_undecoded",
        "_undecoded_end",
        "_value_decoder",
        "_waiting",
    )

    def __init__(
        self,
        queue: ChunkQueue,
        consumer_timeout_ms: int,
        key_decoder: Decoder | None = None,
        value_decoder: Decoder | None = None,
    ) -> None:
        self._queue = queue
        self._timeout_s = consumer_timeout_ms / 1000 if consumer_timeout_ms >= 0 else None
        # The chunk being iterated: its partition, its remaining record batches, and the
        # records left in the current batch.
        self._pti: PartitionTopicInfo | None = None
        self._truncations = 0  # the current chunk's: a seek or pause since voids the rest
        self._batches: list[Any] | None = None
        self._index = 0  # the next batch of _batches to read
        self._native = False  # the chunk holds native batches: the take loop reads them
        self._recs: Iterator[Any] | None = None  # the records left in an aiokafka batch
        self._timestamp_type: int | None = None  # of the current batch; None: per record
        self._overlap = False  # the current batch starts below the consumed offset
        self._pending: Any = None  # a record held back while the gate is closed
        # Records a native take read after the one a decoder refused: not handed out yet,
        # not decoded yet (oldest first), and the consumed offset once they are out.
        self._undecoded: list[MessageAndMetadata] = []
        self._undecoded_end = 0
        self._count = 0  # records handed out of the current chunk, not yet in the meters
        self._done = False
        self._deferred: BaseException | None = None
        self._key_decoder = key_decoder
        self._value_decoder = value_decoder
        # Poll liveness (max.poll.interval.ms): when the reader last asked for records (0.0:
        # never), whether it waits for records now, and who is told when it starts waiting.
        self._polled_at = 0.0
        self._waiting = False
        self._poll_listener: Any = None
        # ``async for``'s read-ahead: records decoded from one chunk and not handed out yet,
        # in reverse order (the next one last: pop() hands it out), _ahead_n of them read,
        # of _ahead_pti (read under _ahead_truncations); _ahead_end is the consumed offset
        # once all are handed out. Their offsets count as consumed only as each goes out.
        self._ahead: list[MessageAndMetadata] = []
        self._ahead_n = 0
        self._ahead_pti: PartitionTopicInfo | None = None
        self._ahead_end = 0
        self._ahead_truncations = 0
        self._ahead_limit = 1  # sized from the first record read

    def __aiter__(self) -> ConsumerIterator:
        return self

    def held_since(self) -> float | None:
        """Monotonic seconds of the reader's last ask for records (``__anext__``,
        ``next_batch``, ``next_columns``) or of its last wait's end, while it is not waiting
        for records: what it was handed it holds since then. ``None`` while it waits for
        records (it is polling, as a Java consumer inside ``poll()``) and before its first
        ask."""
        if self._waiting or not self._polled_at:
            return None
        return self._polled_at

    def wake_on_poll(self, listener: Any) -> None:
        """``listener.set()`` each time the reader starts waiting for records (``None``:
        nobody is told)."""
        self._poll_listener = listener

    async def _wait(self, awaitable: Any) -> Any:
        # The one place the reader waits for records: it is polling meanwhile.
        self._waiting = True
        listener = self._poll_listener
        if listener is not None:
            listener.set()
        try:
            if self._timeout_s is None:
                return await awaitable
            try:
                return await asyncio.wait_for(awaitable, self._timeout_s)
            except TimeoutError:
                raise ConsumerTimeoutError(
                    f"no record within consumer.timeout.ms={int(self._timeout_s * 1000)}"
                ) from None
        finally:
            self._waiting = False
            self._polled_at = _monotonic()

    def _take_chunk(self, chunk: FetchedDataChunk | _ShutdownCommand) -> None:
        """Make ``chunk`` current (or note the end of the stream)."""
        if isinstance(chunk, _ShutdownCommand):
            self._done = True
            return
        pti = chunk.topic_info
        if not pti.active:
            return  # released by a rebalance while queued
        if chunk.truncations != pti.truncations:
            # Fetched before a log truncation (the fetcher warned), a seek or a pause moved
            # the position: stale.
            return
        if chunk.too_large:
            raise MessageSizeTooLargeError(
                "Found a message larger than the maximum fetch size of this consumer "
                f"on topic {pti.topic} partition {pti.partition} at fetch offset "
                f"{chunk.fetch_offset}. Increase the fetch size "
                f"(fetch.message.max.bytes={pti.fetch_size}), or decrease the maximum "
                "message size the broker will allow."
            )
        if chunk.error is not None:
            raise chunk.error  # e.g. CorruptRecordError: the partition stops before the batch
        if pti.consumed_offset < chunk.fetch_offset:
            # After an offset reset the chunk starts past what was consumed.
            pti.consumed_offset = chunk.fetch_offset
        self._pti = pti
        self._truncations = chunk.truncations
        batches = chunk.batches
        self._batches = batches if type(batches) is list else list(batches)
        self._native = reads_natively(self._batches)
        self._index = 0
        self._recs = None

    def _next_batch_records(self) -> bool:
        """Step to the batch at ``_index`` the native loops did not read.

        A control batch (or a skipped corrupt one, or one of an aborted transaction under
        read_committed) moves the consumed offset past it; a
        compressed native batch is decompressed in place (the native loop reads it next); an
        aiokafka batch becomes ``_recs``, read record by record. ``False`` when the chunk is
        used up.
        """
        batches = self._batches
        pti = self._pti
        if batches is None or pti is None:
            return False
        index = self._index
        if index >= len(batches):
            self.clear_current_chunk()
            return False
        batch = batches[index]
        if batch.is_control_batch:
            # Transaction markers occupy offsets but are not records: move past them.
            if pti.active and pti.consumed_offset < batch.next_offset:
                pti.consumed_offset = batch.next_offset
            self._index = index + 1
            return True
        try:
            if decompress_at(batches, index, pti.topic, pti.partition):
                return True  # a compressed native batch, decompressed: the take loop reads it
        except (CorruptRecordError, UnsupportedCodecError):
            self.clear_current_chunk()
            raise
        self._index = index + 1
        # A record batch is its own iterator and may be iterated only once (aiokafka's
        # Cython batches assert it): wrap its __next__ in a C iterator that for-loops can
        # resume as often as needed.
        self._recs = iter(iter(batch).__next__, None)
        # Magic 2: one type for the batch; a legacy message set has it per record.
        self._timestamp_type = getattr(batch, "timestamp_type", None)
        self._overlap = getattr(batch, "base_offset", -1) < pti.consumed_offset
        return True

    def _message(self, pti: PartitionTopicInfo, record: Any, offset: int) -> MessageAndMetadata:
        key = record.key
        value = record.value
        if key is not None and self._key_decoder is not None:
            key = self._key_decoder(key)
        if value is not None and self._value_decoder is not None:
            value = self._value_decoder(value)
        timestamp = record.timestamp
        timestamp_type = record.timestamp_type
        headers = record.headers
        return MessageAndMetadata(
            pti.topic,
            pti.partition,
            offset,
            key,
            value,
            -1 if timestamp is None else timestamp,
            -1 if timestamp_type is None else timestamp_type,
            tuple(headers) if headers else (),
        )

    def _released(self, pti: PartitionTopicInfo) -> bool:
        """Whether ``pti`` was released, or its position moved (a seek, a pause), mid-chunk:
        the rest of its chunk is dropped."""
        if pti.active and pti.truncations == self._truncations:
            return False
        self.clear_current_chunk()
        return True

    def _refill(self, new_chunk: bool = True) -> bool:
        """Between record batches: move on to the next batch of the chunk, else (with
        ``new_chunk``) to the next queued chunk. ``False`` when nothing is ready (or the
        stream ended)."""
        if self._pti is not None and self._next_batch_records():
            return True
        if not new_chunk or self._done or self._queue.empty():
            return False
        self._take_chunk(self._queue.get_nowait())
        return True

    def _poll(
        self, out: list[MessageAndMetadata], limit: int, ahead: bool = False
    ) -> PartitionTopicInfo | None:
        """Append up to ``limit`` ready records to ``out`` without waiting.

        The hot path of ``next_batch`` and of ``__anext__``'s read-ahead, written for speed:
        it runs once per record. The gate (session and lease) is checked before every record,
        so a lease that runs out mid-chunk stops delivery at once; the consumed offset
        advances with every record taken.

        With ``ahead`` (the read-ahead), the records come from one chunk only (a new chunk is
        taken only while ``out`` is empty), and the meters are left to the hand-out.

        Returns:
            The ``PartitionTopicInfo`` whose gate is closed (the next record is kept
            pending), or ``None`` when ``out`` is full or a new chunk must be awaited.
        """
        append = out.append
        n = len(out)
        plain = self._key_decoder is None and self._value_decoder is None
        new = tuple.__new__  # MessageAndMetadata without NamedTuple's Python-level __new__
        mam = MessageAndMetadata
        while n < limit:
            pti = self._pti
            if pti is not None and self._released(pti):
                continue
            if self._undecoded and pti is not None:
                # What a take read after a decoder's error goes out before anything new.
                if _gate_closed(pti):
                    return pti
                room = limit - n
                got = self._take_undecoded(pti, out, room)
                if not ahead:
                    self._count += got
                elif got:
                    self._ahead_pti = pti
                n += got
                if got < room and self._undecoded:
                    return None  # a refused record waits for a call with nothing in hand
                continue
            recs = self._recs
            if pti is not None and recs is None and self._native:
                # Between batches: the native decoder reads what it can in one call.
                if _gate_closed(pti):
                    return pti
                got, status = self._take_native(pti, out, limit - n, plain)
                if not ahead:
                    self._count += got
                elif got:
                    self._ahead_pti = pti
                n += got
                if status == _GATE:
                    return pti
                if status == _ERROR:
                    return None  # the records read go out; the next call raises
                if status == _FULL or n >= limit:
                    continue
                # Outcome.DONE or FOREIGN: the Python path takes the next item.
            if pti is None or recs is None:
                if not self._refill(not (ahead and n)):
                    return None
                continue
            if self._released(pti):
                continue
            gate = pti.gate
            topic = pti.topic
            partition = pti.partition
            pending = self._pending
            if pending is not None:
                self._pending = None
                recs = itertools.chain((pending,), recs)
            taken = 0
            for record in recs:
                offset = record.offset
                if offset < pti.consumed_offset:
                    continue  # a compressed batch (or a re-fetch) starts before the position
                if not gate.open or _monotonic() >= gate.deadline:
                    self._pending = record
                    if not ahead:
                        self._count += taken
                    elif taken:
                        self._ahead_pti = pti
                    return pti
                pti.consumed_offset = offset + 1
                if plain:
                    timestamp = record.timestamp
                    timestamp_type = record.timestamp_type
                    headers = record.headers
                    append(
                        new(
                            mam,
                            (
                                topic,
                                partition,
                                offset,
                                record.key,
                                record.value,
                                -1 if timestamp is None else timestamp,
                                -1 if timestamp_type is None else timestamp_type,
                                tuple(headers) if headers else (),
                            ),
                        )
                    )
                else:
                    append(self._message(pti, record, offset))
                taken += 1
                n += 1
                if n >= limit:
                    break
            else:
                self._recs = None
            if not ahead:
                self._count += taken
            elif taken:
                self._ahead_pti = pti
        return None

    def _take_native(
        self,
        pti: PartitionTopicInfo,
        out: list[MessageAndMetadata],
        room: int,
        plain: bool,
    ) -> tuple[int, int]:
        """Records of the current chunk's native batches into ``out`` (at most ``room``).

        The decoder reads batch after batch from ``_index`` on, checks the gate's deadline
        before every record and steps over control batches and those marked aborted.
        Returns ``(appended, outcome)`` (an :class:`~aiozkconsumer.kafka.records.Outcome`
        value); the consumed offset advances past what was read.
        """
        batches = self._batches
        assert batches is not None  # a chunk is current
        target = out if plain else []
        try:
            got, self._index, status, consumed = take_messages(
                batches,
                self._index,
                target,
                MessageAndMetadata,
                pti.topic,
                pti.partition,
                pti.consumed_offset,
                room,
                pti.gate.deadline,
            )
        except ValueError as e:
            batch = batches[self._index] if batches else None
            self.clear_current_chunk()
            raise malformed_error(pti.topic, pti.partition, batch, e) from None
        if not plain:
            got = self._decode_into(pti, target, out, consumed)
            if self._undecoded:
                # A decoder refused a record: those before it go out; the next call meets
                # it first (see _decode_into).
                if got and out[-1].offset + 1 > pti.consumed_offset:
                    pti.consumed_offset = out[-1].offset + 1
                return got, _ERROR
        if consumed > pti.consumed_offset:
            pti.consumed_offset = consumed
        return got, status

    def _decode_into(
        self,
        pti: PartitionTopicInfo,
        taken: list[MessageAndMetadata],
        out: list[MessageAndMetadata],
        end: int,
        room: int | None = None,
    ) -> int:
        """Apply the decoders to the first ``room`` (all by default) of ``taken`` (records
        read, not handed out), appending them to ``out``; returns how many. The rest of
        ``taken`` waits in ``_undecoded`` (``end``: the consumed offset once it is out).

        A record a decoder refuses while records are in hand (in ``out``) stops the call: it
        waits, first in ``_undecoded``, for a call with nothing in hand.

        Raises:
            Exception: a decoder's error on a record met with nothing in hand: that record
                is passed over (counted as consumed, as on the Python path) as its error is
                raised; the records after it wait in ``_undecoded``, so none is lost.
        """
        kd, vd = self._key_decoder, self._value_decoder
        in_hand = len(out) > 0
        count = len(taken) if room is None else min(room, len(taken))
        for i in range(count):
            m = taken[i]
            key, value = m.key, m.value
            try:
                if key is not None and kd is not None:
                    key = kd(key)
                if value is not None and vd is not None:
                    value = vd(value)
            except Exception:
                self._undecoded_end = end
                if i or in_hand:
                    self._undecoded = taken[i:]
                    return i
                self._undecoded = taken[1:]
                if m.offset + 1 > pti.consumed_offset:
                    pti.consumed_offset = m.offset + 1
                raise
            out.append(m._replace(key=key, value=value))
        self._undecoded = taken[count:]
        self._undecoded_end = end
        return count

    def _take_undecoded(
        self, pti: PartitionTopicInfo, out: list[MessageAndMetadata], room: int
    ) -> int:
        """Up to ``room`` of the records waiting in ``_undecoded``, decoded, into ``out``;
        the consumed offset advances past them (to where their take ended, once none
        waits).

        Raises:
            Exception: as :meth:`_decode_into`.
        """
        got = self._decode_into(pti, self._undecoded, out, self._undecoded_end, room)
        if not self._undecoded:
            after = self._undecoded_end
        elif got:
            after = out[-1].offset + 1
        else:
            return 0
        if after > pti.consumed_offset:
            pti.consumed_offset = after
        return got

    def _poll_columns(self, columns: ColumnBuilder, limit: int) -> PartitionTopicInfo | None:
        """As ``_poll``, the records added to ``columns`` (up to ``len(columns) == limit``).

        The gate is checked before each run of records taken from a record batch rather than
        before each record: the records taken in one call are handed out together, so the
        difference is the time one call takes, without awaiting.

        Returns:
            As ``_poll``.
        """
        islice = itertools.islice
        n = len(columns)
        while n < limit:
            pti = self._pti
            if pti is not None and self._released(pti):
                continue
            recs = self._recs
            if pti is not None and recs is None and columns.native_decoder:
                # Between batches: the native decoder reads what it can in one call.
                if _gate_closed(pti):
                    return pti
                assert self._batches is not None
                try:
                    added, self._index, status, consumed = columns.add_native_batches(
                        self._batches,
                        self._index,
                        pti.topic,
                        pti.partition,
                        pti.consumed_offset,
                        limit - n,
                    )
                except ValueError as e:
                    batch = self._batches[self._index]
                    self.clear_current_chunk()
                    raise malformed_error(pti.topic, pti.partition, batch, e) from None
                if consumed > pti.consumed_offset:
                    pti.consumed_offset = consumed
                self._count += added
                n += added
                if status == _ERROR:
                    return None  # the rows read go out; the next call raises
                if status == _FULL or n >= limit:
                    continue
            recs = self._recs
            if pti is None or recs is None:
                if not self._refill():
                    return None
                continue
            if self._released(pti):
                continue
            if _gate_closed(pti):
                return pti
            pending = self._pending
            if pending is not None:
                self._pending = None
                recs = itertools.chain((pending,), recs)
            room = limit - n
            timestamp_type = self._timestamp_type
            if timestamp_type is None:
                added, taken = columns.add_legacy_records(
                    islice(recs, room), pti.topic, pti.partition, pti.consumed_offset
                )
            else:
                added, taken = columns.add_records(
                    islice(recs, room),
                    pti.topic,
                    pti.partition,
                    timestamp_type,
                    # Only a batch that starts before the position needs per-record checks.
                    pti.consumed_offset if self._overlap else 0,
                )
            if added:
                pti.consumed_offset = columns.last_offset + 1
                self._count += added
                n += added
            if taken < room:
                self._recs = None  # the batch is used up
        return None

    async def _next_record(self) -> MessageAndMetadata:
        """``__anext__`` when no record read ahead can go out now: hands out what is read
        ahead once the gate opens (or drops it if its partition was released, or its
        position moved), else reads ahead, waiting for a chunk if none is ready."""
        out: list[MessageAndMetadata] = []
        while True:
            if self._ahead:
                held = self._hand_out_ahead(out, 1)
                if out:
                    return out[0]
                if held is not None:
                    await self._wait(held.gate.wait_open())
                continue
            if self._deferred is not None:  # after the records read before it
                error, self._deferred = self._deferred, None
                raise error
            held = self._read_ahead()
            if self._ahead:
                continue
            if held is not None:
                await self._wait(held.gate.wait_open())
                continue
            if self._done:
                raise StopAsyncIteration
            self._take_chunk(await self._wait(self._queue.get()))

    def _read_ahead(self) -> PartitionTopicInfo | None:
        """Decode up to ``_ahead_limit`` ready records of one chunk into the read-ahead.

        Their partition's consumed offset is set back to the first of them: each counts as
        consumed only when handed out (``__anext__``). An error met after some records
        (a corrupt or undecodable batch further on) is kept for the call after they went
        out, as ``next_batch`` does.

        Returns:
            As ``_poll``.

        Raises:
            MessageSizeTooLargeError, CorruptRecordError, UnsupportedCodecError: met before
                any record was read (any error then, a decoder's too).
        """
        out: list[MessageAndMetadata] = []
        # With decoders, one record at a time: a decoder's error then comes with the record
        # it failed on, as without the read-ahead.
        decoding = self._key_decoder is not None or self._value_decoder is not None
        try:
            held = self._poll(out, 1 if decoding else self._ahead_limit, ahead=True)
        except Exception as e:
            if not out:
                raise
            self._deferred = e  # after the records read before it
            held = None
        if not out:
            return held
        pti = self._ahead_pti  # set by _poll: the one partition the records are of
        assert pti is not None
        self._ahead_end = max(pti.consumed_offset, out[-1][2] + 1)
        # Nothing deliverable lies between the consumed offset before the read and the first
        # record (control batches, aborted or compacted-away offsets, records below it).
        pti.consumed_offset = out[0][2]
        self._ahead_n = len(out)
        out.reverse()
        self._ahead = out
        self._ahead_pti = pti
        self._ahead_truncations = pti.truncations
        value = out[0][4]  # the last one read
        size = len(value) if isinstance(value, (bytes, bytearray, memoryview)) else 0
        self._ahead_limit = max(1, min(READ_AHEAD_RECORDS, READ_AHEAD_BYTES // max(size, 1)))
        return held

    def _hand_out_ahead(
        self, out: list[MessageAndMetadata], limit: int
    ) -> PartitionTopicInfo | None:
        """Hand records read ahead out into ``out`` (up to ``len(out) == limit``), each with
        the gate checked and its offset counted as consumed; drops them all if their
        partition was released or its position moved since.

        Returns:
            The partition whose gate is closed (the rest stays read ahead), else ``None``.
        """
        pti = self._ahead_pti
        assert pti is not None
        ahead = self._ahead
        if not pti.active or pti.truncations != self._ahead_truncations:
            self._end_ahead()
            return None
        gate = pti.gate
        n = len(out)
        while ahead and n < limit:
            if not gate.open or _monotonic() >= gate.deadline:
                return pti
            msg = ahead.pop()
            out.append(msg)
            pti.consumed_offset = msg[2] + 1
            n += 1
        if not ahead:
            pti.consumed_offset = self._ahead_end
            self._end_ahead()
        return None

    def _end_ahead(self) -> None:
        """Empty the read-ahead; the records of it handed out are counted in the meters."""
        pti = self._ahead_pti
        handed_out = self._ahead_n - len(self._ahead)
        if handed_out and pti is not None and pti.meters is not None:
            pti.meters[0].mark(handed_out)
            pti.meters[1].mark(handed_out)
        self._ahead = []
        self._ahead_n = 0
        self._ahead_pti = None

    def drop_read_ahead(self) -> None:
        """Forget the records ``async for`` read ahead (a rebalance cleared the stream);
        their offsets were not counted as consumed."""
        if self._ahead:
            self._end_ahead()

    async def next_batch(self, max_records: int = 500) -> list[MessageAndMetadata]:
        """Wait for at least one record, then take up to ``max_records`` that are ready.

        Never waits for more records once one is in hand, so latency stays that of a single
        record while throughput grows with the batch. Records ``async for`` read ahead go
        out first.

        Raises:
            StopAsyncIteration: the stream ended (shutdown) and nothing is left.
            ConsumerTimeoutError, MessageSizeTooLargeError, CorruptRecordError,
                UnsupportedCodecError: as ``__anext__`` (a record already taken into the batch
                is returned first; the error comes next call).
        """
        batch: list[MessageAndMetadata] = []
        if self._ahead:
            self._polled_at = _monotonic()
            self._hand_out_ahead(batch, max_records)
        if not batch:
            batch.append(await self._first_record())
        if self._ahead:
            self._hand_out_ahead(batch, max_records)
            if self._ahead:
                return batch  # the rest read ahead goes out first next time
        if len(batch) < max_records and self._deferred is None:
            try:
                self._poll(batch, max_records)
            except Exception as e:  # a corrupt batch, a decoder's error: the records in
                self._deferred = e  # hand go out first, the error with the next call
        self._flush_meters()
        return batch

    async def _first_record(self) -> MessageAndMetadata:
        """``next_batch``'s first record: taken alone, waiting for it if needed."""
        self._polled_at = _monotonic()  # the reader asks: poll liveness's clock starts anew
        out: list[MessageAndMetadata] = []
        while True:
            if self._ahead:  # read ahead by __anext__, the gate closed
                held = self._hand_out_ahead(out, 1)
                if out:
                    return out[0]
                if held is not None:
                    await self._wait(held.gate.wait_open())
                continue
            if self._deferred is not None:  # after the records read before it
                error, self._deferred = self._deferred, None
                raise error
            held = self._poll(out, 1)
            if out:
                return out[0]
            if held is not None:
                await self._wait(held.gate.wait_open())
                continue
            if self._done:
                raise StopAsyncIteration
            self._take_chunk(await self._wait(self._queue.get()))

    async def next_columns(self, columns: ColumnBuilder, max_records: int = 10_000) -> None:
        """As ``next_batch``, the records added to ``columns`` instead of returned.

        Waits for at least one record, then adds up to ``max_records`` that are ready; their
        offsets count as consumed when this returns. Keys and values are the records' bytes
        (decoders are not applied).

        Args:
            columns: an empty builder (``aiozkconsumer.columns.ColumnBuilder``).
            max_records: the most records to add, >= 1.

        Raises:
            StopAsyncIteration: the stream ended (shutdown) and nothing is left.
            ConsumerTimeoutError, MessageSizeTooLargeError, CorruptRecordError,
                UnsupportedCodecError: as ``next_batch`` (the records already added go out
                first; the error comes next call).
        """
        self._polled_at = _monotonic()
        start = len(columns)
        while self._ahead:
            # Records ``async for`` read ahead go out first.
            read: list[MessageAndMetadata] = []
            held = self._hand_out_ahead(read, max_records)
            if read:
                columns.add_messages(read)
                if self._ahead or len(read) >= max_records or self._deferred is not None:
                    return
                break
            if held is not None:
                await self._wait(held.gate.wait_open())
        if self._deferred is not None:
            error, self._deferred = self._deferred, None
            raise error
        while True:
            try:
                held = self._poll_columns(columns, start + max_records)
            except (MessageSizeTooLargeError, CorruptRecordError, UnsupportedCodecError) as e:
                if len(columns) == start:
                    raise
                self._deferred = e  # the records in hand go out first
                break
            if len(columns) > start:
                break
            if held is not None:
                await self._wait(held.gate.wait_open())
                continue
            if self._done:
                raise StopAsyncIteration
            self._take_chunk(await self._wait(self._queue.get()))
        self._flush_meters()

    def _flush_meters(self) -> None:
        pti = self._pti
        if self._count and pti is not None and pti.meters is not None:
            pti.meters[0].mark(self._count)
            pti.meters[1].mark(self._count)
        self._count = 0

    def clear_current_chunk(self) -> None:
        """Drop the chunk being iterated (``ConsumerIterator.clearCurrentChunk``)."""
        self._flush_meters()
        self._pti = None
        self._batches = None
        self._native = False
        self._index = 0
        self._recs = None
        self._pending = None
        self._undecoded = []
