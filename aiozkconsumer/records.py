"""Value types shared across the consumer: partitions, records and fetched chunks.

``MessageAndMetadata`` is what ``async for msg in stream`` yields; ``PartitionTopicInfo`` is the
per-partition bookkeeping a rebalance creates and the fetcher and iterator share (fetch and
consumed offsets), and ``FetchedDataChunk`` is what travels through a stream's bounded queue.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from .epochs import NO_EPOCH, EpochMarks

if TYPE_CHECKING:
    from .queues import ChunkQueue

__all__ = [
    "HISTORY_LIMIT",
    "FetchedDataChunk",
    "OwnershipGate",
    "MessageAndMetadata",
    "PartitionTopicInfo",
    "RebalanceRecord",
    "TopicPartition",
    "describe_partitions",
    "fetch_changes",
    "note_fetch_change",
]


@dataclass(frozen=True, order=True, slots=True)
class TopicPartition:
    """A partition of a topic (the original's ``TopicAndPartition``).

    Ordered by topic, then partition number. ``str()`` gives ``"[topic,partition]"``, the
    original's ``TopicAndPartition.toString``, which the roundrobin assignor hashes.
    """

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"[{self.topic},{self.partition}]"


def describe_partitions(tps: Iterable[TopicPartition], limit: int = 8) -> str:
    """``tps`` sorted for a log line or an error: ``"[t,0], [t,1]"``, and past ``limit`` the
    first ``limit`` then ``"... and N more (M in all)"`` (a member may own thousands)."""
    ordered = sorted(tps)
    shown = ", ".join(map(str, ordered[:limit]))
    if len(ordered) <= limit:
        return shown
    return f"{shown} ... and {len(ordered) - limit} more ({len(ordered)} in all)"


class MessageAndMetadata(NamedTuple):
    """One record handed to the user, as the original's ``MessageAndMetadata`` (0.10.2).

    A named tuple rather than a frozen dataclass: one is built per record on the hot path,
    and a tuple is several times cheaper to create while being just as immutable.

    Attributes:
        topic: the topic's name.
        partition: the partition number.
        offset: the record's offset in its partition; the consumed offset becomes
            ``offset + 1`` when the record is handed out ("next offset to read").
        key: the key bytes, or ``None`` for a null key.
        value: the value bytes, or ``None`` for a null value (a tombstone).
        timestamp: milliseconds since the epoch, ``-1`` when the record has none (magic 0).
        timestamp_type: ``0`` CreateTime, ``1`` LogAppendTime, ``-1`` none (as the Java client).
        headers: the record headers as ``(key, value)`` pairs; empty before magic 2.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    timestamp_type: int
    headers: tuple[tuple[str, bytes], ...]


class OwnershipGate:
    """Open while the ZooKeeper session that claimed the partitions is connected.

    Shared by every ``PartitionTopicInfo`` of one connector. The connector closes it when the
    session is suspended (connection lost: the session may expire and another member may take
    the partitions) and opens it again when the same session is back; iterators hold records
    of partitions behind a closed gate.

    It is also a lease: ``deadline`` (``time.monotonic()`` seconds) is pushed forward by each
    round trip that proves the session alive; past it, the session may have expired without
    this process noticing (it was paused, say), and records are held back too.

    Attributes:
        open: ``False`` while the session is suspended or being replaced.
        deadline: the lease's end; ``inf`` while no lease is kept.
    """

    __slots__ = ("_changed", "deadline", "open")

    def __init__(self) -> None:
        self.open = True
        self.deadline = math.inf
        self._changed = asyncio.Event()

    def passable(self) -> bool:
        """Whether records may be handed out now."""
        return self.open and time.monotonic() < self.deadline

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def close(self) -> None:
        """Hold records back."""
        self.open = False
        self._notify()

    def reopen(self) -> None:
        """Let records through again (within the lease)."""
        self.open = True
        self._notify()

    def extend(self, deadline: float) -> None:
        """Move the lease's end to ``deadline`` (monotonic seconds)."""
        self.deadline = deadline
        self._notify()

    def end_lease(self) -> None:
        """End the lease at once (an earlier end stays): nothing is handed out until the
        next ``extend``."""
        self.extend(min(self.deadline, time.monotonic()))

    async def wait_open(self) -> None:
        """Wait until records may be handed out (returns at once if they may)."""
        while not self.passable():
            await self._changed.wait()

    def __repr__(self) -> str:
        return f"<OwnershipGate {'open' if self.passable() else 'closed'}>"


_ALWAYS_OPEN = OwnershipGate()


_FETCH_CHANGES = [0]


def note_fetch_change() -> None:
    """Count a change to what a fetch loop asks for: a partition's fetch offset, leader
    epoch or pause, a loop's partitions or the chunks waiting for room. A loop reuses its last
    request while the count stands still (``fetcher.py``: an idle fetch costs no work per
    partition); every such change must be counted."""
    _FETCH_CHANGES[0] += 1


def fetch_changes() -> int:
    """How many :func:`note_fetch_change` calls so far (process-wide)."""
    return _FETCH_CHANGES[0]


@dataclass(eq=False, slots=True)
class PartitionTopicInfo:
    """Shared state of one owned partition, as ``PartitionTopicInfo.scala``.

    Created by a rebalance for each partition this consumer claimed, read and advanced by the
    fetcher (``fetched_offset``) and by the stream's iterator (``consumed_offset``), read by
    commits. ``active`` is cleared when the partition is released (rebalance, shutdown,
    session loss): chunks of an inactive partition are dropped by the iterator, so no record
    of a partition another consumer may own is handed out.

    Attributes:
        topic: the topic.
        partition: the partition number.
        queue: the bounded chunk queue of the stream this partition feeds.
        consumed_offset: next offset the user has not yet been given; ``-1`` until the
            starting offset is known (no committed offset and no reset yet).
        fetched_offset: next offset to fetch from the broker; ``-1`` likewise.
        fetch_size: per-partition ``maxBytes`` of each FetchRequest (``fetch.message.max.bytes``).
        client_id: the ``client.id`` used in metrics.
        active: ``False`` once the partition is released.
        gate: the connector's session gate (records are held back while it is closed).
        fence: the fencing token (version of the partition's fencing node) seen when this
            member claimed the partition; commits are refused once it moved on. ``-1``: none.
        meters: the ``MessagesPerSec`` meters (this topic, all topics) marked per record
            handed out, or ``None`` without metrics.
        leader_epoch: the leader epoch the partition is fetched under (KIP-320), from
            metadata; sent as the Fetch's ``CurrentLeaderEpoch``; -1 unknown.
        epochs: the leader epochs of the batches fetched and not yet committed
            (:class:`~aiozkconsumer.epochs.EpochMarks`), set by the fetcher: the epoch of
            the fetch position (checked after a leader change) and of the consumed offset
            (committed with it, :meth:`offset_epoch`).
        truncations: how many times the position was moved under the fetcher's feet: back
            after a log truncation (the fetcher), or by a ``seek`` or ``pause`` (the runtime
            verbs, :meth:`seek`, :meth:`pause`); chunks fetched before the last move carry
            an older count and are dropped by the iterator, queued or half read.
        paused: ``True`` between ``pause`` and ``resume`` (``KafkaConsumer.pause``): the
            partition is not fetched and none of its records is handed out; it stays owned.
            Per assignment: a partition released and taken again starts unpaused.
    """

    topic: str
    partition: int
    queue: ChunkQueue
    consumed_offset: int
    fetched_offset: int
    fetch_size: int
    client_id: str
    active: bool = True
    gate: OwnershipGate = _ALWAYS_OPEN
    meters: tuple[Any, Any] | None = None
    fence: int = -1
    leader_epoch: int = NO_EPOCH
    epochs: EpochMarks = field(default_factory=EpochMarks)
    truncations: int = 0
    paused: bool = False
    tp: TopicPartition = field(init=False)

    def __post_init__(self) -> None:
        self.tp = TopicPartition(self.topic, self.partition)

    def reset_offsets(self, offset: int, epoch: int = NO_EPOCH) -> None:
        """Set both the fetch and the consumed offset (after an offset reset).

        Args:
            offset: the new position.
            epoch: the leader epoch of the record before it, -1 unknown.
        """
        self.fetched_offset = offset
        self.consumed_offset = offset
        self.epochs.reset(offset, epoch)
        note_fetch_change()

    def seek(self, offset: int) -> None:
        """Move the position to ``offset``: the next record handed out is at ``offset`` (or
        the first after it), as ``KafkaConsumer.seek``.

        Every chunk fetched before is voided (``truncations`` moves on: the iterator drops
        queued chunks and the one it is reading; a fetch in flight for the old position is
        discarded by its fetch loop, whose offset no longer matches). The leader epoch of the
        new position is unknown (not validated, as a seek without one in the Java client).

        Args:
            offset: the new position, >= 0.
        """
        self.truncations += 1
        self.reset_offsets(offset)

    def pause(self) -> None:
        """Stop fetching and handing out this partition (``KafkaConsumer.pause``).

        Chunks already fetched are voided as by :meth:`seek` and fetched again from the
        consumed offset after :meth:`resume` (Java's consumer keeps them buffered instead;
        both hand out the same records). A paused partition takes no room in its stream's
        queue. No-op when already paused.
        """
        if self.paused:
            return
        self.paused = True
        self.truncations += 1
        if self.consumed_offset >= 0:
            self.fetched_offset = self.consumed_offset
        note_fetch_change()

    def resume(self) -> None:
        """Fetch and hand out this partition again, from its consumed offset
        (``KafkaConsumer.resume``). No-op when not paused."""
        self.paused = False
        note_fetch_change()

    def offset_epoch(self, offset: int) -> int:
        """The leader epoch of the record before ``offset`` (what a commit of ``offset``
        carries as ``CommittedLeaderEpoch``), -1 when unknown."""
        return self.epochs.epoch_before(offset)

    def __repr__(self) -> str:
        return (
            f"<PartitionTopicInfo {self.tp} fetched={self.fetched_offset} "
            f"consumed={self.consumed_offset}{'' if self.active else ' released'}"
            f"{' paused' if self.paused else ''}>"
        )


@dataclass(frozen=True, slots=True)
class FetchedDataChunk:
    """A fetch response's data for one partition, as ``FetchedDataChunk.scala``.

    Attributes:
        batches: the record batches, in offset order: the native decoder's
            (``kafka.native.NativeBatch``, the records still in the received bytes) or
            aiokafka's (``DefaultRecordBatch`` / ``LegacyRecordBatch``); records are decoded
            by the iterator as they are handed out. A list the iterator may update in place
            (a compressed native batch is replaced by its decompressed self).
        topic_info: the partition the data belongs to.
        fetch_offset: the offset the fetch asked for; records below the consumed offset are
            skipped by the iterator (a compressed batch may start earlier).
        too_large: ``True`` when the broker returned a partial batch larger than the fetch
            size: the iterator raises ``MessageSizeTooLargeError`` for it.
        error: an error the iterator raises instead of handing out records (a
            ``CorruptRecordError`` for a batch at ``fetch_offset`` whose CRC does not match),
            leaving the consumed offset where it is; ``None`` for data.
        truncations: the partition's ``truncations`` when the chunk was fetched; a chunk
            of records fetched before a log truncation, a seek or a pause moved the position
            is dropped.
        size: the bytes of fetched record data the chunk holds (what it counts against its
            queue's ``queued.max.messages.kbytes``); 0 for an error.
    """

    batches: Sequence[Any]
    topic_info: PartitionTopicInfo
    fetch_offset: int
    too_large: bool = False
    error: Exception | None = None
    truncations: int = 0
    size: int = 0


HISTORY_LIMIT = 100
"""How many ``RebalanceRecord``s a member keeps (the most recent ones)."""


@dataclass(frozen=True)
class RebalanceRecord:
    """What one ``syncedRebalance`` did.

    Attributes:
        started_at: wall-clock start, seconds since the epoch.
        duration_s: how long it took, seconds.
        attempts: attempts made (1 when the first succeeded).
        succeeded: whether it ended owning its assignment.
        partitions: the partitions owned afterwards.
        reason: what triggered it.
        members: the group's members (consumer id strings) the last attempt assigned over.
        kept: partitions that stayed with this member and kept fetching throughout.
        released: partitions this member gave up.
        acquired: partitions this member claimed.
    """

    started_at: float
    duration_s: float
    attempts: int
    succeeded: bool
    partitions: tuple[TopicPartition, ...]
    reason: str
    members: tuple[str, ...] = ()
    kept: int = 0
    released: int = 0
    acquired: int = 0
