"""``isolation.level=read_committed``: which fetched record batches belong to aborted transactions.

A transactional producer's records reach the log as they are sent; whether they count is
decided later, by the transaction's marker, a control batch the broker appends for each
partition on commit or abort (KIP-98). A consumer reading ``read_committed`` asks the broker
(FetchRequest ``isolation_level=1``) for data up to the partition's last stable offset (LSO:
the first offset of the oldest transaction still open) and gets with it the list of aborted
transactions that overlap the data, ``(producer id, first offset)`` each. It drops the batches
of those transactions itself, as the Java client's ``CompletedFetch.nextFetchedRecord``
does (Kafka 2.x-4.x), batch by batch:

- before each batch of a producer (producer id >= 0), every aborted transaction whose first
  offset is at or before the batch's last offset moves from the list (ordered by first
  offset) into the set of aborted producers;
- a control batch whose first record is an ABORT marker takes its producer out of the set
  (the transaction ends there; the producer's later batches are a new transaction);
- a transactional data batch of a producer in the set is dropped.

Control batches never reach users on any isolation level (the readers step over them). The
decision is one per batch on header fields, :class:`AbortedTransactions`; the fetched
record sets' readers (the fetcher, ``SimpleConsumer``, the Spark executors) apply it with
:func:`drop_aborted`: a native batch is marked (the native decoder's loops step over it as
over a control batch, no Python object per record), an aiokafka batch is replaced by an
:class:`AbortedBatch`. Either way the consumed offset steps over it, so commits and lag
count it as read.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "ABORT",
    "COMMIT",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "AbortedBatch",
    "AbortedTransactions",
    "control_type",
    "drop_aborted",
    "isolation_level_id",
    "stable_and_aborted",
]

READ_UNCOMMITTED = 0
"""FetchRequest/ListOffsets ``isolation_level`` of ``read_uncommitted``: to the high watermark."""
READ_COMMITTED = 1
"""``isolation_level`` of ``read_committed``: up to the last stable offset."""

ABORT = 0
"""A control record's type (its key: version int16, type int16) for an abort marker."""
COMMIT = 1
"""A control record's type for a commit marker."""

_TRANSACTIONAL = 0x10
_NO_PRODUCER_ID = -1


def isolation_level_id(isolation_level: str) -> int:
    """The protocol's id of an ``isolation.level`` value.

    Args:
        isolation_level: ``"read_uncommitted"`` or ``"read_committed"``.

    Returns:
        :data:`READ_UNCOMMITTED` (0) or :data:`READ_COMMITTED` (1).

    Raises:
        ValueError: another value.
    """
    if isolation_level == "read_uncommitted":
        return READ_UNCOMMITTED
    if isolation_level == "read_committed":
        return READ_COMMITTED
    raise ValueError(
        f"isolation.level must be read_uncommitted or read_committed, not {isolation_level!r}"
    )


def stable_and_aborted(rest: Sequence[Any]) -> tuple[int, list[tuple[int, int]] | None]:
    """A fetch response partition's last stable offset and aborted transactions.

    Args:
        rest: the partition's fields after ``(partition, error code, high watermark)``, as
            aiokafka's decoded responses and the fetch connection's ``PartitionData`` give
            them: v4 ``(last stable offset, aborted, records)``; v5+ ``(last stable offset,
            log start offset, aborted, [preferred read replica (aiokafka's v11),] records)``.

    Returns:
        ``(last stable offset, aborted transactions)``; ``(-1, None)`` before v4.
    """
    if len(rest) < 3:
        return -1, None
    aborted = rest[2] if len(rest) >= 4 else rest[1]
    return int(rest[0]), aborted


class AbortedTransactions:
    """The read_committed state of one partition's fetched data (``CompletedFetch``'s).

    Built from one fetch response's aborted transactions for the partition and fed that
    response's batches in offset order; a new fetch response starts a new one (the broker
    sends the aborted transactions overlapping each response's data).

    Args:
        aborted: the response's ``(producer id, first offset)`` pairs; ``None`` or empty when
            the broker sent none.
    """

    __slots__ = ("_producers", "_queue")

    def __init__(self, aborted: Iterable[tuple[int, int]] | None) -> None:
        # (first offset, producer id): a heap, as the Java client's PriorityQueue by first offset.
        self._queue = [(int(first), int(pid)) for pid, first in aborted or ()]
        heapq.heapify(self._queue)
        self._producers: set[int] = set()

    def __bool__(self) -> bool:
        """Whether a batch may still be dropped (an aborted transaction is known)."""
        return bool(self._queue or self._producers)

    def step(
        self, last_offset: int, producer_id: int, transactional: bool, marker: int | None
    ) -> bool:
        """Account for the next batch; whether it is a batch of an aborted transaction.

        Args:
            last_offset: the batch's last offset (``base offset + last offset delta``).
            producer_id: its producer id (``-1``: none, not idempotent).
            transactional: its attributes' transactional bit.
            marker: for a control batch, the type of its first record (:data:`ABORT`,
                :data:`COMMIT`, ``-1`` unknown); ``None`` for a data batch.

        Returns:
            ``True`` for a transactional data batch of an aborted transaction (to be dropped);
            ``False`` otherwise, control batches included (readers step over those anyway).
        """
        if producer_id == _NO_PRODUCER_ID or producer_id < 0:
            return False
        queue = self._queue
        while queue and queue[0][0] <= last_offset:
            self._producers.add(heapq.heappop(queue)[1])
        if marker is not None:
            if marker == ABORT:
                self._producers.discard(producer_id)
            return False
        return transactional and producer_id in self._producers

    def aborted(self, batch: Any) -> bool:
        """:meth:`step` for a batch of either parser (native, aiokafka's, or legacy).

        A legacy (magic 0/1) batch has no producer and is never aborted.
        """
        producer_id = getattr(batch, "producer_id", _NO_PRODUCER_ID)
        if producer_id is None or producer_id < 0:
            return False
        control = bool(batch.is_control_batch)
        return self.step(
            batch.next_offset - 1,
            producer_id,
            bool(batch.attributes & _TRANSACTIONAL),
            control_type(batch) if control else None,
        )


def control_type(batch: Any) -> int:
    """The marker type of a control batch: :data:`ABORT`, :data:`COMMIT`, or ``-1`` unknown.

    For an aiokafka batch this reads its first record, using the batch's one iteration up:
    call it only on control batches, which are never read for records.
    """
    known = getattr(batch, "control_type", None)
    if isinstance(known, int):  # the native decoder's batch reads it in place
        return known
    try:
        first = next(iter(batch), None)
    except Exception:  # a control batch that does not parse: no marker to act on
        return -1
    key = getattr(first, "key", None)
    if key is None or len(key) < 4:
        return -1
    return int.from_bytes(key[2:4], "big", signed=True)


@dataclass(frozen=True, slots=True)
class AbortedBatch:
    """Stands in a fetched chunk for an aiokafka batch of an aborted transaction.

    It has no records; readers step over it as over a control batch (``is_control_batch``),
    so the consumed offset moves past it and a commit after it does not read it again.

    Attributes:
        base_offset: the dropped batch's first offset.
        next_offset: the offset after its last one.
        producer_id: the producer whose transaction was aborted.
    """

    base_offset: int
    next_offset: int
    producer_id: int
    is_control_batch: ClassVar[bool] = True

    def __iter__(self) -> Iterator[Any]:
        return iter(())


def drop_aborted(batches: MutableSequence[Any], aborted: Iterable[tuple[int, int]] | None) -> int:
    """Drop the batches of aborted transactions from one partition's fetched batches, in place.

    Native batches are marked (``mark_aborted``: the native loops step over them); aiokafka
    batches are replaced by an :class:`AbortedBatch` each.

    Args:
        batches: the batches of one fetch response's record set, in offset order.
        aborted: the response's aborted transactions for the partition, ``(producer id,
            first offset)`` each; ``None`` or empty: nothing is dropped (the markers still
            need no action).

    Returns:
        The number of batches dropped.
    """
    state = AbortedTransactions(aborted)
    if not state:
        return 0
    dropped = 0
    for i, batch in enumerate(batches):
        if state.aborted(batch):
            dropped += 1
            mark = getattr(batch, "mark_aborted", None)
            if mark is not None:
                mark()
            else:
                batches[i] = AbortedBatch(batch.base_offset, batch.next_offset, batch.producer_id)
        elif not state:
            break  # no aborted transaction left to act on
    return dropped
