"""Which parser reads fetched record sets, the native decoder or aiokafka's, for every reader.

The readers of fetched records — the fetcher (``fetcher.py``, which hands record batches to the
streams), the streams' iterators (``stream.py``: ``async for``, ``batches()``, and Arrow columns
through ``columns.py``), ``SimpleConsumer``'s ``parse_records`` and the Spark executors
(``spark/columns.py``) — decode through this module only:

- :func:`read_record_set` parses a partition's record set into record batches: the native
  decoder's (``native.py``, C) when it is in use and the set holds magic-2 batches only, else
  aiokafka's (``MemoryRecords``: without the extension, with ``AIOZKCONSUMER_NATIVE=0``, for a
  batch of magic 0/1 or a malformed header), with the CRCs checked either way (``check.crcs``);
- the native take loops read native batches, many records per call, with no Python call per
  record: :data:`take_messages` into ``MessageAndMetadata`` tuples, :data:`take_columns` into the
  Arrow buffers of :func:`native_columns`. Each returns an :class:`Outcome` value saying why it
  stopped, and stops at an item it does not read: :func:`decompress_at` makes a compressed native
  batch readable; anything else (an aiokafka batch, a stand-in for a skipped or aborted one) the
  reader reads record by record;
- :func:`append_messages` reads one batch of either parser whole (readers without a gate);
- :func:`mark_aborted`, :func:`unsupported_codec_error` and :func:`malformed_error` take a batch
  of either parser, so that no reader tests which parser made it.

The per-record loops over aiokafka's records stay in the readers, where they are hot.
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple, NoReturn

from aiokafka.record.memory_records import MemoryRecords

from ..errors import CorruptRecordError
from ..records import MessageAndMetadata, TopicPartition
from . import native
from .crc import corrupt_batches
from .native import NativeBatch, NativeColumns, Outcome, malformed_error, unsupported_codec_error
from .transactions import AbortedBatch

__all__ = [
    "NativeColumns",
    "Outcome",
    "RecordSet",
    "append_messages",
    "batch_larger_than",
    "decompress_at",
    "malformed_error",
    "mark_aborted",
    "native_columns",
    "read_record_set",
    "read_record_sets",
    "reads_natively",
    "take_columns",
    "take_messages",
    "unsupported_codec_error",
]


class RecordSet(NamedTuple):
    """A partition's fetched record set, parsed by :func:`read_record_set` (one per fetch).

    Attributes:
        batches: its complete record batches in offset order (a trailing partial batch left
            out): the native decoder's, or aiokafka's, parsed as they are iterated
            (aiokafka's parse errors, ``kafka.errors.RECORD_PARSE_ERRORS``, come then).
        corrupt: with ``check_crcs``, the batches whose CRC does not match, keyed by their
            ``next_offset``: the ``CorruptRecordError`` naming each; empty without.
        native_batches: when the native decoder parsed it, its batches (the list
            ``batches`` is), for the take loops; ``None`` when aiokafka's parser did.
    """

    batches: list[Any] | Iterator[Any]
    corrupt: dict[int, CorruptRecordError]
    native_batches: list[Any] | None


def read_record_set(data: Any, tp: TopicPartition, check_crcs: bool) -> RecordSet:
    """Parse a partition's record set from a fetch response, with the parser that can read it.

    Args:
        data: the partition's ``records`` bytes (``bytes``, ``bytearray`` or a memoryview; may
            end with a partial batch).
        tp: the partition (for the errors).
        check_crcs: compute and compare each batch's CRC (``check.crcs``).

    Returns:
        The :class:`RecordSet`.
    """
    parsed = native.parse_record_set(data, tp, check_crcs)
    if parsed is not None:
        return RecordSet(parsed[0], parsed[1], parsed[0])
    corrupt = corrupt_batches(data, tp) if check_crcs else {}
    return RecordSet(_aiokafka_batches(data), corrupt, None)


def read_record_sets(response: Any, check_crcs: bool) -> None:
    """Parse a fetch response's record sets ahead, into ``response.record_sets``.

    For the fetch connection's I/O thread (its ``after`` step): the native decoder's header
    pass and the CRCs (computed with the GIL released) run there, and the event loop gets
    each partition's :class:`RecordSet` ready. Only with the native decoder: without it
    aiokafka's batches are parsed as they are read, on the loop, and nothing is done here.

    Args:
        response: a ``fetch_response.FetchResponse``.
        check_crcs: compute and compare each batch's CRC (``check.crcs``).
    """
    if not native.AVAILABLE:
        return
    parsed = response.record_sets
    for topic, parts in response.topics:
        for part in parts:
            data = part[-1]
            if data:
                tp = TopicPartition(topic, part[0])
                record_set = native.parse_record_set(data, tp, check_crcs)
                if record_set is not None:
                    parsed[tp] = RecordSet(record_set[0], record_set[1], record_set[0])


def _aiokafka_batches(data: Any) -> Iterator[Any]:
    """aiokafka's batches of a record set, in order (a trailing partial batch left out)."""
    records = MemoryRecords(bytes(data))
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            return
        yield batch


def reads_natively(batches: list[Any]) -> bool:
    """Whether a fetched chunk's batches go to the native take loops (it holds a native one).

    One call per chunk; the reader then calls the take loops between batches.
    """
    native_batch = NativeBatch
    for batch in batches:  # the first is native in all but a chunk after a skipped batch
        if type(batch) is native_batch:
            return True
    return False


def native_columns(include_headers: bool) -> NativeColumns | None:
    """Arrow buffers for :data:`take_columns`; ``None`` when the native decoder is not in use.

    Args:
        include_headers: gather the ``headers`` column too.
    """
    if not native.AVAILABLE:
        return None
    return NativeColumns(include_headers)


def _not_built(*args: object) -> NoReturn:
    raise RuntimeError("the native record decoder is not in use (kafka.native.AVAILABLE)")


# The native take loops, called by the readers directly (no Python frame in between: the
# iterator's ``__anext__`` calls take_messages once per record). Both read batches[index:]
# batch after batch, step over control batches and those marked aborted, skip records below
# min_offset, and stop with an ``Outcome`` (see ``_native.c`` for the full contract):
#   take_messages(batches, index, out, MessageAndMetadata, topic, partition, min_offset, limit,
#                 gate_deadline) -> (appended, index, outcome, consumed)
#   take_columns(batches, index, columns, min_offset, limit[, end_offset])
#       -> (added, index, outcome, consumed, timestamp_type)
# ``consumed`` is the offset after the last record taken or batch stepped over (-1: none). A
# record that does not parse raises ``ValueError`` (turn it into the partition's error with
# :func:`malformed_error`) when nothing was taken in the call, else the call ends with
# ``Outcome.ERROR`` and the next one raises. Only native batches and columns reach them, which
# exist only while the decoder is in use.
if native.AVAILABLE:
    take_messages = native.native.take_messages_from
    take_columns = native.native.take_columns_from
else:
    take_messages = take_columns = _not_built


def decompress_at(batches: list[Any], index: int, topic: str, partition: int) -> bool:
    """Make ``batches[index]`` readable by the take loops, if it is a native batch.

    A compressed native batch is replaced by itself over its decompressed records (as
    aiokafka's batches decompress when first read); the take loops read it next.

    Args:
        batches: a fetched chunk's batches.
        index: the item the take loop stopped at (``Outcome.FOREIGN``).
        topic: the partition's topic (for the errors).
        partition: the partition.

    Returns:
        ``True`` for a native batch (now decompressed); ``False`` for any other item (an
        aiokafka batch, a stand-in): the reader reads it record by record.

    Raises:
        UnsupportedCodecError: its codec cannot be decompressed here (``cramjam`` missing).
        CorruptRecordError: its records do not decompress, or its codec id is unknown.
        RuntimeError: it is a native batch that is not compressed (the take loops read those).
    """
    batch = batches[index]
    if type(batch) is not NativeBatch:
        return False
    if not batch.compression:
        raise RuntimeError(f"{batch!r} is not compressed: the native take loops read it")
    batches[index] = _decompressed(batch, topic, partition)
    return True


def _decompressed(batch: Any, topic: str, partition: int) -> Any:
    try:
        return native.decompressed(batch)
    except ValueError as e:
        raise malformed_error(topic, partition, batch, e) from e


def mark_aborted(batch: Any) -> Any:
    """What stands in a fetched chunk for a batch of an aborted transaction (read_committed).

    Readers step over it as over a control batch, so the consumed offset moves past it.

    Returns:
        A native batch itself, marked (the take loops step over it); for an aiokafka batch,
        an :class:`~aiozkconsumer.kafka.transactions.AbortedBatch`.
    """
    if type(batch) is NativeBatch:
        batch.mark_aborted()
        return batch
    return AbortedBatch(batch.base_offset, batch.next_offset, batch.producer_id)


def append_messages(
    batch: Any, out: list[MessageAndMetadata], topic: str, partition: int, min_offset: int
) -> None:
    """Append the records of one batch of either parser to ``out``, one call per batch.

    For readers without an ownership gate (``SimpleConsumer.parse_records``): a native batch
    goes through the take loop (decompressed first), an aiokafka batch record by record.

    Args:
        batch: a data batch (not a control batch, not one of an aborted transaction).
        out: where the ``MessageAndMetadata`` tuples go.
        topic: the partition's topic.
        partition: the partition.
        min_offset: records at lower offsets are left out.

    Raises:
        CorruptRecordError: a record of a native batch does not parse (the records before it
            are appended first), or the batch does not decompress.
        UnsupportedCodecError: the batch's codec cannot be decompressed here.
        (aiokafka's batches raise ``kafka.errors.RECORD_PARSE_ERRORS`` as they are read.)
    """
    if type(batch) is NativeBatch:
        if batch.compression:
            batch = _decompressed(batch, topic, partition)
        status: int = Outcome.ERROR
        try:
            while status == Outcome.ERROR:  # the records before a bad one, then it raises
                _, _, status, _ = take_messages(
                    [batch],
                    0,
                    out,
                    MessageAndMetadata,
                    topic,
                    partition,
                    min_offset,
                    sys.maxsize,
                    math.inf,
                )
        except ValueError as e:
            raise malformed_error(topic, partition, batch, e) from e
        return
    # aiokafka's records, as the iterator's plain loop in ``stream.py`` builds them (inline
    # there, between gate checks); tuple.__new__ skips NamedTuple's Python-level __new__.
    new, mam = tuple.__new__, MessageAndMetadata
    out.extend(
        new(
            mam,
            (
                topic,
                partition,
                offset,
                record.key,
                record.value,
                -1 if (timestamp := record.timestamp) is None else timestamp,
                -1 if (timestamp_type := record.timestamp_type) is None else timestamp_type,
                tuple(headers) if (headers := record.headers) else (),
            ),
        )
        for record in batch
        if (offset := record.offset) >= min_offset
    )


_BATCH_HEAD = struct.Struct(">qi")
"""A record batch (or legacy message) starts with its offset and the length of the rest."""


def batch_larger_than(data: Any, fetch_size: int) -> bool:
    """Whether a record set without a complete batch starts with one larger than
    ``fetch_size`` bytes (it can never be fetched at that size), rather than with one the
    response's ``max_bytes`` cut.

    Args:
        data: a partition's record set holding no complete batch.
        fetch_size: the partition's fetch size (``fetch.message.max.bytes``).
    """
    if len(data) < _BATCH_HEAD.size:
        return len(data) >= fetch_size
    _, length = _BATCH_HEAD.unpack_from(data)
    return bool(_BATCH_HEAD.size + length > fetch_size)
