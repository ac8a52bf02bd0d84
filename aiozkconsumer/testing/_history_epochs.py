"""The history checker's records (pure): a partition's produced log indexed for deliveries,
the ownership epochs and when each holds its partition, member incarnations, deliveries.

The vocabulary (incarnation, ownership epoch, index, holding) is defined in
:mod:`aiozkconsumer.testing.history`'s docstring; :class:`Epoch.hold_end` is its *holding*
rule. The checker (:mod:`aiozkconsumer.testing._history_checker`) builds and updates these
records as it replays a history.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiozkconsumer.testing._history_files import TopicPartitionKey

__all__ = [
    "Delivery",
    "Epoch",
    "Incarnation",
    "PartitionLog",
    "partition_entries",
]

_LOST_REASONS = frozenset({"session_lost", "crashed", "restarted", "lost"})
"""Epoch ends that do not say when ownership really ended (an expiry somewhere before; for
``lost``, a Kafka member that learnt of its expiry when the coordinator fenced it)."""


@dataclass(eq=False)
class PartitionLog:
    """The produced log of one partition, indexed."""

    offsets: list[int]
    values: list[str]
    index: dict[int, int]
    deliveries: list[int]
    last_epoch: list[int]
    last_ts: list[float]
    """When each record was last handed out (``last_epoch`` did it)."""
    max_delivered: int = -1

    @classmethod
    def build(cls, pairs: Sequence[tuple[int, str]]) -> PartitionLog:
        offsets = [o for o, _ in pairs]
        return cls(
            offsets=offsets,
            values=[v for _, v in pairs],
            index={o: i for i, o in enumerate(offsets)},
            deliveries=[0] * len(offsets),
            last_epoch=[-1] * len(offsets),
            last_ts=[math.nan] * len(offsets),
        )

    def first_index_at_or_after(self, offset: int) -> int:
        return bisect_left(self.offsets, offset)

    def records_between(self, low: int, high: int) -> list[int]:
        """Produced offsets in ``[low, high)``."""
        return self.offsets[bisect_left(self.offsets, low) : bisect_left(self.offsets, high)]


@dataclass(eq=False)
class Epoch:
    id: int
    member: str
    incarnation: int
    session: Any
    generation: Any
    tp: TopicPartitionKey
    start: float
    claim_offset: int
    group_commit: int
    end: float = math.inf
    end_reason: str = ""
    last_index: int | None = None
    delivered_any: bool = False
    last_delivery_ts: float | None = None
    superseded: bool = False
    """Another incarnation was assigned the partition while this epoch was open."""

    @property
    def hold_end(self) -> float:
        """Until when the epoch holds the partition, for judging other members' deliveries."""
        if self.end_reason in _LOST_REASONS or self.superseded:
            last = self.last_delivery_ts if self.last_delivery_ts is not None else self.start
            return min(self.end, max(self.start, last))
        return self.end


@dataclass(eq=False)
class Incarnation:
    member: str
    number: int
    first_ts: float
    last_ts: float
    session: Any = None
    suspended_since: float | None = None
    shut_down: bool = False
    open: dict[TopicPartitionKey, Epoch] = field(default_factory=dict)


@dataclass(eq=False)
class Delivery:
    ts: float
    epoch: Epoch
    member: str
    first: int
    last: int


def partition_entries(event: Mapping[str, Any], key: str) -> list[tuple[TopicPartitionKey, int]]:
    """``[((topic, partition), offset)]`` of an event's list field (offset -1 if absent)."""
    entries = []
    for entry in event.get(key) or ():
        offset = entry.get("offset")
        entries.append(
            ((str(entry["topic"]), int(entry["partition"])), -1 if offset is None else int(offset))
        )
    return entries
