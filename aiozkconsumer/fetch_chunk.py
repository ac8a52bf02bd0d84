"""From a partition's fetched record set to the chunk its stream gets: batches kept, corrupt
ones stepped over or stopped at, aborted transactions dropped, the too-large case.

The fetch loop (:class:`~aiozkconsumer.fetcher.ConsumerFetcher`) gives each partition's record
set of a fetch response to :func:`chunk_from` and acts on the :class:`ChunkOutcome`: it hands
the chunk over, and stops fetching the partition when the chunk is an error. No I/O here; the
side effects are the log lines and meters of corrupt batches and the partition's batch epochs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from .epochs import batch_epochs
from .errors import CorruptRecordError, UnsupportedCodecError
from .kafka.crc import SkippedBatch
from .kafka.records import (
    RecordSet,
    batch_larger_than,
    mark_aborted,
    read_record_set,
    unsupported_codec_error,
)
from .kafka.transactions import AbortedTransactions
from .records import FetchedDataChunk, PartitionTopicInfo

__all__ = ["ChunkOutcome", "chunk_from"]

log = logging.getLogger("aiozkconsumer.fetcher")


@dataclass(frozen=True)
class ChunkOutcome:
    """What a record set gives its stream.

    Attributes:
        chunk: the chunk to hand over; ``None`` when there is none (no data, or only the
            start of a batch that fits: the response's ``max_bytes`` cut it short).
        next_offset: the partition's fetch position once the chunk is handed over.
        stop: the chunk is an error (a corrupt batch with ``crc.error.action=raise`` first,
            a codec not decompressed here, a batch larger than ``fetch.message.max.bytes``):
            the partition is not fetched any more.
    """

    chunk: FetchedDataChunk | None
    next_offset: int
    stop: bool = False


def chunk_from(
    pti: PartitionTopicInfo,
    fetch_offset: int,
    data: Any,
    aborted: list[tuple[int, int]] | None,
    *,
    config: Any,
    read_committed: bool,
    metrics: Any = None,
    record_set: RecordSet | None = None,
) -> ChunkOutcome:
    """Parse a partition's record set into the chunk for its stream.

    With ``check.crcs``, every batch's CRC is checked here, before the chunk is handed over
    (as the original's iterator checked each message, ``ensureValid()``). A corrupt batch is
    never handed out: with ``crc.error.action=skip`` it is logged, counted and stood in for by
    a :class:`~aiozkconsumer.kafka.crc.SkippedBatch`; with ``raise`` the batches before it are
    handed over and the next fetch starts at it; when it is the first, the iterator gets a
    chunk that raises ``CorruptRecordError`` and the partition stops being fetched (as for a
    batch that is too large). A batch whose codec cannot be decompressed here is handled as a
    corrupt one with ``raise`` (an ``UnsupportedCodecError``, not counted as corrupt).

    Under read_committed, the batches of aborted transactions (``aborted``: the response's
    ``(producer id, first offset)`` list) are dropped: marked (native) or replaced by an
    :class:`~aiozkconsumer.kafka.transactions.AbortedBatch`, which the iterator steps over.

    Args:
        pti: the partition.
        fetch_offset: the offset the fetch asked for.
        data: the partition's record set (bytes-like; empty: nothing).
        aborted: the response's aborted transactions of the partition, or ``None``.
        config: the connector's ``ConsumerConfig`` (``check.crcs``, ``crc.error.action``).
        read_committed: ``isolation.level=read_committed``.
        metrics: the connector's metrics (bytes and corrupt batches are marked), or ``None``.
        record_set: ``data`` already parsed with the same ``check.crcs`` (by the fetch
            connection's I/O thread, ``read_record_sets``); parsed here when ``None``.

    Returns:
        The outcome.
    """
    if not data:
        return ChunkOutcome(None, fetch_offset)
    batches: list[Any] = []
    next_offset = fetch_offset
    corrupt: CorruptRecordError | UnsupportedCodecError | None = None
    transactions = AbortedTransactions(aborted) if aborted and read_committed else None
    if record_set is None:
        record_set = read_record_set(data, pti.tp, config.check_crcs)
    bad = record_set.corrupt
    for batch in record_set.batches:
        if bad and batch.next_offset in bad:
            e = bad[batch.next_offset]
            if not _skip_corrupt(pti, e, next_offset, config, metrics):
                corrupt = e
                break
            batch = SkippedBatch(e.offset, batch.next_offset)
        elif transactions and transactions.aborted(batch):
            batch = mark_aborted(batch)  # readers step over it
        elif not batch.is_control_batch and (
            unsupported := unsupported_codec_error(pti.topic, pti.partition, batch)
        ):
            corrupt = unsupported
            break
        batches.append(batch)
        next_offset = batch.next_offset
    truncations = pti.truncations
    if batches:
        if metrics is not None:
            size = len(data)
            metrics.bytes_per_sec(pti.topic).mark(size)
            metrics.bytes_per_sec().mark(size)
        # The epochs of the batches, for the position's validation and for commits.
        epochs = pti.epochs
        epochs.add(batch_epochs(data, next_offset))
        epochs.prune(pti.consumed_offset)
        return ChunkOutcome(
            FetchedDataChunk(
                batches, pti, fetch_offset, truncations=truncations, size=len(data)
            ),
            next_offset,
        )
    if isinstance(corrupt, UnsupportedCodecError):
        log.error("%s; not delivered, %s stops at offset %s", corrupt, pti.tp, fetch_offset)
        chunk = FetchedDataChunk((), pti, fetch_offset, error=corrupt, truncations=truncations)
        return ChunkOutcome(chunk, fetch_offset, stop=True)
    if corrupt is not None:
        log.error(
            "%s; not delivered, %s stops at offset %s (crc.error.action=raise)",
            corrupt,
            pti.tp,
            fetch_offset,
        )
        _mark_corrupt(pti, metrics)
        chunk = FetchedDataChunk((), pti, fetch_offset, error=corrupt, truncations=truncations)
        return ChunkOutcome(chunk, fetch_offset, stop=True)
    if batch_larger_than(data, pti.fetch_size):
        # A batch larger than fetch.message.max.bytes: it can never be returned. Hand the
        # iterator a chunk that raises MessageSizeTooLargeError and stop fetching it.
        chunk = FetchedDataChunk((), pti, fetch_offset, too_large=True, truncations=truncations)
        return ChunkOutcome(chunk, fetch_offset, stop=True)
    # Only the start of a batch that fits: the response's max_bytes cut it short.
    return ChunkOutcome(None, fetch_offset)


def _skip_corrupt(
    pti: PartitionTopicInfo, error: CorruptRecordError, position: int, config: Any, metrics: Any
) -> bool:
    """Whether to step over a corrupt batch (``crc.error.action=skip``); logs and counts it.

    A batch whose header does not lead past ``position`` (the offset after the batches before
    it) cannot be stepped over: where it ends is itself corrupt. It raises.
    """
    end = error.last_offset
    if config.crc_error_action != "skip" or end is None or end < position:
        return False
    log.error("%s; skipped (crc.error.action=skip)", error)
    _mark_corrupt(pti, metrics)
    return True


def _mark_corrupt(pti: PartitionTopicInfo, metrics: Any) -> None:
    if metrics is not None:
        metrics.corrupt_batches_per_sec(pti.topic).mark()
        metrics.corrupt_batches_per_sec().mark()
