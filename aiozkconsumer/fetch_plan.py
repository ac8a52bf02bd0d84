"""Which partitions a fetch loop asks for next, and how many bytes: pure decisions.

:func:`plan_fetch` looks at a loop's partitions and its streams' queues (room, chunks waiting)
and returns a :class:`FetchPlan`; :func:`fetcher_id_for` spreads partitions over
``num.consumer.fetchers`` loops as the original's ``AbstractFetcherManager`` does. No I/O: the
fetch loops in ``fetcher.py`` perform what these return.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .assignors import java_string_hash
from .queues import ChunkQueue
from .records import FetchedDataChunk, PartitionTopicInfo, TopicPartition

__all__ = ["FetchPlan", "chunk_continues", "fetcher_id_for", "plan_fetch"]


def fetcher_id_for(tp: TopicPartition, num_fetchers: int) -> int:
    """The fetcher a partition goes to: ``abs(31 * topic.hashCode + partition) % n``.

    As ``AbstractFetcherManager.getFetcherId`` (Java ``String.hashCode``, 32-bit overflow).
    """
    v = (31 * java_string_hash(tp.topic) + tp.partition) & 0xFFFFFFFF
    v = v - (1 << 32) if v >= (1 << 31) else v
    return abs(v) % num_fetchers


@dataclass
class FetchPlan:
    """What one fetch request asks for, decided from the partitions and their queues' room.

    Attributes:
        fetch: the partitions to fetch, in request order.
        reset: partitions without a valid fetch offset (``auto.offset.reset`` first).
        slots: ``{id(queue): (queue, slots)}``: the slots of each stream queue the request
            may fill (its free slots, at most one per partition of the request on it: a
            response brings one chunk per partition); they stay reserved while it is in
            flight.
        max_bytes: the request's ``max_bytes``: ``fetch.max.bytes``, capped at the reserved
            slots times the fetch size.
        blocked: the queues of partitions left out for want of room.
    """

    fetch: list[PartitionTopicInfo] = field(default_factory=list)
    reset: list[PartitionTopicInfo] = field(default_factory=list)
    slots: dict[int, tuple[ChunkQueue, int]] = field(default_factory=dict)
    max_bytes: int = 0
    blocked: dict[int, ChunkQueue] = field(default_factory=dict)


def plan_fetch(
    partitions: Iterable[PartitionTopicInfo],
    delivering: Mapping[TopicPartition, PartitionTopicInfo],
    free_slots: Callable[[ChunkQueue], int],
    fetch_max_bytes: int,
) -> FetchPlan:
    """Decide the next fetch request of a fetch loop (no I/O).

    A partition is fetched when it is not paused (``KafkaConsumer.pause``: a paused one is
    neither fetched nor reset, and takes none of its queue's room), no chunk of it waits for
    room and its stream queue has a free slot (``free_slots``: capacity, plus one chunk
    waiting, minus the chunks queued, waiting and in flight). The response is capped at the
    free slots of the queues involved times their partitions' fetch size, so the bytes in
    flight never exceed the room left for them, however many partitions share a stream; the
    per-partition ``maxBytes`` stays ``fetch.message.max.bytes``. A request reserves no more
    slots of a queue than it has partitions on it (one chunk each): the fetch loops of other
    brokers whose partitions share the stream keep the rest. Reserving every free slot let
    one broker's loop, long-polling an idle partition, hold a shared queue's whole room and
    starve another broker's partitions of that stream.

    Args:
        partitions: the loop's partitions, in the order to ask for them.
        delivering: ``{partition: its PartitionTopicInfo}`` whose last chunk still waits
            for room in its queue. Only that very ``PartitionTopicInfo`` is held back: a
            partition released and taken again onto another stream while a chunk of its old
            one waits is fetched for the new one at once (the old chunk is dropped by the
            iterator). Keyed by the partition alone, it stalled until the old stream's
            reader made room, or forever if that stream was no longer read.
        free_slots: the free slots of a stream queue.
        fetch_max_bytes: ``fetch.max.bytes``.

    Returns:
        The plan; ``fetch`` is empty when nothing can be fetched now.
    """
    plan = FetchPlan()
    per_queue_bytes: dict[int, int] = {}
    per_queue_count: dict[int, int] = {}
    for pti in partitions:
        if pti.paused or delivering.get(pti.tp) is pti:
            continue
        if pti.fetched_offset < 0:
            plan.reset.append(pti)
            continue
        key = id(pti.queue)
        if key in plan.blocked:
            continue
        if key not in plan.slots:
            free = free_slots(pti.queue)
            if free <= 0:
                plan.blocked[key] = pti.queue
                continue
            plan.slots[key] = (pti.queue, free)
        plan.fetch.append(pti)
        per_queue_bytes[key] = max(per_queue_bytes.get(key, 0), pti.fetch_size)
        per_queue_count[key] = per_queue_count.get(key, 0) + 1
    for key, (queue, free) in plan.slots.items():
        plan.slots[key] = (queue, min(free, per_queue_count[key]))
    room = sum(per_queue_bytes[k] * n for k, (_, n) in plan.slots.items())
    plan.max_bytes = max(1, min(fetch_max_bytes, room))
    return plan


def chunk_continues(pti: PartitionTopicInfo, chunk: FetchedDataChunk) -> bool:
    """Whether ``chunk``, just put in its queue, continues ``pti``'s fetch position, so that
    the next fetch starts after it: the partition is owned, its position was not moved since
    the chunk was fetched (no seek, pause or truncation: ``truncations`` unchanged) and is
    where the chunk was fetched from. A seek back to that very offset while the chunk waited
    for room voids the chunk, and the partition is fetched from the offset again."""
    return (
        pti.active
        and pti.truncations == chunk.truncations
        and pti.fetched_offset == chunk.fetch_offset
    )
