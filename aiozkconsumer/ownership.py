"""One member's ownership state: what it owns, how far it got, where records go.

What aiokafka's ``SubscriptionState`` is to its consumer: the connector owns one
``OwnershipState``; the rebalance worker, the fetcher manager, the fenced committer and the
streams are given it. It holds

- the topic registry (``{TopicPartition: PartitionTopicInfo}``, the original's
  ``topicRegistry``): the partitions owned now, each with its consumed and fetched offsets;
- the committed offsets (the last committed, or read at claim time) of owned partitions;
- the ownership gate (records are held back while the ZooKeeper session is in doubt);
- the stream queues, by ``(topic, thread id)`` or, for a wildcard subscription, by thread
  index.

It never awaits: every method is synchronous and never blocks. The registry mapping is
replaced (not mutated) on every change, so a caller iterating a snapshot is never disturbed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import MappingProxyType

from .config import ConsumerConfig
from .errors import ConsumerError
from .metrics import ConsumerMetrics
from .queues import SHUTDOWN_COMMAND, ChunkQueue
from .records import OwnershipGate, PartitionTopicInfo, TopicPartition
from .subscription import ConsumerThreadId

__all__ = ["OwnershipState", "call_listener", "partition_info", "partitions_by_topic"]


async def call_listener(call: Awaitable[None]) -> None:
    """Await a rebalance listener hook; any exception it raises fails the rebalance attempt.

    As the original, where the listener ran inside the attempt's ``try``; shared by the
    ZooKeeper rebalancer and both Kafka coordinators.

    Raises:
        ConsumerError: the hook raised (a ``ConsumerError`` as itself, anything else wrapped).
    """
    try:
        await call
    except ConsumerError:
        raise
    except Exception as e:
        raise ConsumerError(f"the rebalance listener raised {e!r}") from e


def partitions_by_topic(tps: Iterable[TopicPartition]) -> dict[str, set[int]]:
    """``{topic: {partition, ...}}`` of ``tps``: the shape ``before_releasing_partitions``
    takes."""
    out: dict[str, set[int]] = {}
    for tp in tps:
        out.setdefault(tp.topic, set()).add(tp.partition)
    return out


def partition_info(
    config: ConsumerConfig,
    metrics: ConsumerMetrics,
    gate: OwnershipGate,
    tp: TopicPartition,
    queue: ChunkQueue,
    offset: int,
) -> PartitionTopicInfo:
    """The state of a freshly acquired partition, starting at ``offset`` (its committed
    offset, or -1: none yet, ``auto.offset.reset`` decides at the first fetch)."""
    return PartitionTopicInfo(
        topic=tp.topic,
        partition=tp.partition,
        queue=queue,
        meters=(metrics.messages_per_sec(tp.topic), metrics.messages_per_sec()),
        consumed_offset=offset,
        fetched_offset=offset,
        fetch_size=config.fetch_message_max_bytes,
        client_id=config.effective_client_id,
        gate=gate,
    )


class OwnershipState:
    """The partitions one member owns, their offsets, its gate and its stream queues.

    Args:
        queue_size: ``queued.max.message.chunks``, the chunk bound of each stream queue (0:
            none).
        gate: the ownership gate; a new open one by default.
        queue_bytes: each stream queue's byte budget (``queued.max.messages.kbytes`` x 1024;
            ``None``: none).
        slot_bytes: ``fetch.message.max.bytes``, the most one chunk holds.
    """

    def __init__(
        self,
        queue_size: int,
        gate: OwnershipGate | None = None,
        *,
        queue_bytes: int | None = None,
        slot_bytes: int = 1,
    ) -> None:
        self.queue_size = queue_size
        self.queue_bytes = queue_bytes
        self.slot_bytes = slot_bytes
        self.gate = gate if gate is not None else OwnershipGate()
        self._registry: dict[TopicPartition, PartitionTopicInfo] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._queues: dict[tuple[str, ConsumerThreadId], ChunkQueue] = {}
        self._wildcard_queues: list[ChunkQueue] = []
        self._listeners: list[Callable[[], None]] = []

    # -- the registry --------------------------------------------------------------------

    @property
    def registry(self) -> Mapping[TopicPartition, PartitionTopicInfo]:
        """The owned partitions (a read-only view of the current registry)."""
        return MappingProxyType(self._registry)

    def owned(self) -> tuple[TopicPartition, ...]:
        """The owned partitions, sorted."""
        return tuple(sorted(self._registry))

    def __contains__(self, tp: object) -> bool:
        return tp in self._registry

    def __len__(self) -> int:
        return len(self._registry)

    def owned_streams(self) -> dict[TopicPartition, ChunkQueue | None]:
        """``{tp: queue it feeds}``; ``None`` for a partition already inactive.

        The input of ``plan.plan_moves``: a partition is kept only if it still feeds the
        stream the new plan gives it.
        """
        return {tp: (p.queue if p.active else None) for tp, p in self._registry.items()}

    def consumed_offsets(self) -> dict[TopicPartition, int]:
        """``{tp: next offset to hand out}`` of every owned partition."""
        return {tp: p.consumed_offset for tp, p in self._registry.items()}

    def fences(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The fencing tokens held for those of ``tps`` that are owned and fenced."""
        reg = self._registry
        return {tp: reg[tp].fence for tp in tps if tp in reg and reg[tp].fence >= 0}

    def acquire(self, ptis: Iterable[PartitionTopicInfo]) -> None:
        """Add freshly claimed partitions to the registry."""
        added = {p.tp: p for p in ptis}
        if added:
            self._registry = {**self._registry, **added}
            self._changed()

    def release(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionTopicInfo]:
        """Remove partitions: they are marked inactive at once (no record of them is handed
        out any more; queued chunks of them are dropped by the iterators).

        Returns:
            The removed ``{tp: PartitionTopicInfo}`` (only those that were owned).
        """
        removed = {tp: self._registry[tp] for tp in tps if tp in self._registry}
        if not removed:
            return {}
        for pti in removed.values():
            pti.active = False
        self._registry = {tp: p for tp, p in self._registry.items() if tp not in removed}
        for tp in removed:
            self._committed.pop(tp, None)
        self._changed()
        return removed

    def deactivate(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionTopicInfo]:
        """Mark partitions inactive while keeping them registered (a release in progress).

        Returns:
            The affected ``{tp: PartitionTopicInfo}``.
        """
        found = {tp: self._registry[tp] for tp in tps if tp in self._registry}
        for pti in found.values():
            pti.active = False
        return found

    def release_all(self) -> dict[TopicPartition, PartitionTopicInfo]:
        """Remove every owned partition (see :meth:`release`)."""
        return self.release(list(self._registry))

    # -- committed offsets ---------------------------------------------------------------

    @property
    def committed(self) -> Mapping[TopicPartition, int]:
        """``{tp: last committed offset}`` of owned partitions (a read-only view)."""
        return MappingProxyType(self._committed)

    def record_committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Remember committed (or claimed-at) offsets of owned partitions; ``-1`` is ignored."""
        self._committed.update(
            {tp: o for tp, o in offsets.items() if o >= 0 and tp in self._registry}
        )

    # -- stream queues -------------------------------------------------------------------

    def new_queue(self) -> ChunkQueue:
        """A chunk queue bounded by ``queue_size`` chunks and ``queue_bytes`` (not yet
        attached to a stream key)."""
        return ChunkQueue(
            maxsize=self.queue_size, max_bytes=self.queue_bytes, slot_bytes=self.slot_bytes
        )

    def add_queue(self, topic: str, thread_id: ConsumerThreadId, queue: ChunkQueue) -> None:
        """Attach the queue of a static subscription's ``(topic, thread id)``."""
        self._queues[(topic, thread_id)] = queue

    def add_wildcard_queue(self, queue: ChunkQueue) -> None:
        """Attach the queue of a wildcard subscription's next thread index."""
        self._wildcard_queues.append(queue)

    def queue_for(self, topic: str, thread_id: ConsumerThreadId) -> ChunkQueue:
        """The queue of a (topic, thread id); a wildcard's thread ``i`` feeds stream ``i``.

        Raises:
            KeyError: no such stream.
        """
        if self._wildcard_queues:
            return self._wildcard_queues[thread_id.thread_id]
        return self._queues[(topic, thread_id)]

    def queues(self) -> list[ChunkQueue]:
        """Every stream queue (distinct)."""
        return list(self._queues.values()) + list(self._wildcard_queues)

    def clear_queues(self) -> None:
        """Drop every queued chunk (after a session expiry: none may be handed out)."""
        for queue in self.queues():
            while not queue.empty():
                queue.get_nowait()

    def end_streams(self) -> None:
        """Drop queued chunks and put the shutdown sentinel in every queue (shutdown)."""
        for queue in self.queues():
            while not queue.empty():
                queue.get_nowait()
            queue.put_nowait(SHUTDOWN_COMMAND)

    # -- change notification -------------------------------------------------------------

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (synchronously) after every change of the owned set."""
        self._listeners.append(callback)

    def _changed(self) -> None:
        for callback in self._listeners:
            callback()

    def __repr__(self) -> str:
        return (
            f"<OwnershipState [{len(self._registry)} partitions, "
            f"gate {'open' if self.gate.passable() else 'closed'}]>"
        )
