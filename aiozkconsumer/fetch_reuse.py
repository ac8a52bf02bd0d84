"""An idle fetch loop's request, asked again without work per partition.

A fetch loop (``fetcher.py``) plans each request from its partitions and its streams' queues
(``fetch_plan.py``). While nothing that plan depends on changed, the next request would be the
very same, so the loop sends the same :class:`PlannedRequest` again: an idle member's fetch,
every ``fetch.wait.max.ms``, then costs no work per owned partition, and the fetch session
(``kafka/fetch_session.py``) knows the very same tuple of partitions without comparing it.

What a plan depends on: each partition's fetch offset, leader epoch and pause (counted by
:func:`~.records.note_fetch_change` where they change), the loop's partitions and the chunks
waiting for room (:class:`CountedPartitions` counts every change to those dictionaries,
whoever makes it), and the free room of the queues the plan looked at (compared). A response
for a partition whose position moved while the fetch was in flight is discarded by the loop as
before, so a stale plan could only delay a fetch, never hand out wrong records;
:data:`PLAN_REUSE_LIMIT_S` bounds even that.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .fetch_plan import FetchPlan
from .kafka.fetch_request import FetchPartition
from .queues import ChunkQueue
from .records import PartitionTopicInfo, TopicPartition, fetch_changes, note_fetch_change

__all__ = ["PLAN_REUSE_LIMIT_S", "CountedPartitions", "PlannedRequest", "plan_request"]

PLAN_REUSE_LIMIT_S = 10.0
"""How long, in seconds, a fetch loop reuses one planned request at most while nothing it
depends on was counted as changed (a safety net: every change is counted)."""


class CountedPartitions(dict[TopicPartition, PartitionTopicInfo]):
    """A fetch loop's partitions (or its chunks waiting for room): every change is counted
    (:func:`~.records.note_fetch_change`), whoever makes it."""

    __slots__ = ()

    def __setitem__(self, key: TopicPartition, value: PartitionTopicInfo) -> None:
        note_fetch_change()
        super().__setitem__(key, value)

    def __delitem__(self, key: TopicPartition) -> None:
        note_fetch_change()
        super().__delitem__(key)

    def pop(self, key: TopicPartition, *default: Any) -> Any:
        note_fetch_change()
        return super().pop(key, *default)

    def popitem(self) -> tuple[TopicPartition, PartitionTopicInfo]:
        note_fetch_change()
        return super().popitem()

    def clear(self) -> None:
        note_fetch_change()
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        note_fetch_change()
        super().update(*args, **kwargs)

    def setdefault(self, key: TopicPartition, default: Any = None) -> Any:
        note_fetch_change()
        return super().setdefault(key, default)


@dataclass
class PlannedRequest:
    """A fetch loop's planned request, reused while nothing it depends on changed.

    Attributes:
        plan: the plan (partitions, reserved queue slots, ``max_bytes``).
        partitions: the request's partitions in order (a tuple: the fetch session knows the
            very same request again without comparing it).
        offsets: ``{partition: the fetch offset asked for}``.
        changes: :func:`~.records.fetch_changes` when planned.
        queues: the stream queues the plan looked at (reserved or blocked).
        free: their free slots then.
        until: ``time.monotonic()`` after which the loop plans afresh.
    """

    plan: FetchPlan
    partitions: tuple[FetchPartition, ...]
    offsets: dict[TopicPartition, int]
    changes: int
    queues: tuple[ChunkQueue, ...]
    free: tuple[int, ...]
    until: float

    def still_current(self, free_slots: Callable[[ChunkQueue], int]) -> bool:
        """Whether the loop would plan this very request again now: no change counted since,
        the same free room in its queues (``free_slots``), and within its time limit."""
        return (
            self.changes == fetch_changes()
            and self.free == tuple(map(free_slots, self.queues))
            and time.monotonic() < self.until
        )


def plan_request(plan: FetchPlan, free_slots: Callable[[ChunkQueue], int]) -> PlannedRequest:
    """The request of ``plan`` (each partition's fetch offset, size and leader epoch), with
    what it depends on, for :meth:`PlannedRequest.still_current`."""
    offsets: dict[TopicPartition, int] = {}
    partitions: list[FetchPartition] = []
    for pti in plan.fetch:
        tp = pti.tp
        # CurrentLeaderEpoch (KIP-320): a broker that is not the leader of this epoch
        # answers FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH instead of stale data.
        partitions.append(
            FetchPartition(
                tp.topic, tp.partition, pti.fetched_offset, pti.fetch_size, pti.leader_epoch
            )
        )
        offsets[tp] = pti.fetched_offset
    queues = tuple(q for q, _ in plan.slots.values()) + tuple(plan.blocked.values())
    return PlannedRequest(
        plan=plan,
        partitions=tuple(partitions),
        offsets=offsets,
        changes=fetch_changes(),
        queues=queues,
        free=tuple(map(free_slots, queues)),
        until=time.monotonic() + PLAN_REUSE_LIMIT_S,
    )
