"""The hand-over: the one sequence that gives partitions up and the one that takes them.

Every coordinator moves partitions through here: the ZooKeeper rebalancer
(``zkgroup``-style owner nodes plug in as a step), the classic Kafka member (eager: it gives
everything up before it rejoins) and the consumer-protocol member (incremental: only what the
broker took away). The order is what keeps delivery at-least-once, so it is written once:

Giving up (the original's ``closeFetchersForQueues`` + ``releasePartitionOwnership``, the
Java client's ``onPartitionsRevoked`` path):

1. the partitions are marked inactive: no record of them is handed out any more, and queued
   chunks of them are dropped by the iterators;
2. their fetching stops;
3. their consumed offsets are committed while the member still owns them (auto-commit on);
4. the listener's ``before_releasing_partitions`` sees them;
5. the coordinator's own step (the ZooKeeper owner nodes are deleted);
6. the offset store forgets them and the ownership state drops them.

Taking (``addPartitionTopicInfo`` + ``updateFetcher``, ``onPartitionsAssigned``):

1. the partition states are built at their committed offsets (and fencing tokens) and owned;
2. the listener's ``before_starting_fetchers`` sees the assignment;
3. fetching starts for everything owned that is not fetched yet.

A partition another member claimed since (a fenced commit) is *dropped*: steps 1, 2 and 6
only, since its commit would be refused and the listener's hand-over no longer applies.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from anyio.abc import TaskGroup

from .cluster import ClusterView
from .config import ConsumerConfig
from .errors import ConsumerError
from .fetcher import FetcherManager
from .metrics import ConsumerMetrics
from .offsets import OffsetStore
from .ownership import OwnershipState, call_listener, partition_info, partitions_by_topic
from .queues import ChunkQueue
from .records import PartitionTopicInfo, RebalanceRecord, TopicPartition
from .subscription import ConsumerThreadId, TopicCount

__all__ = ["Coordinator", "Handover", "Lap", "MemberParts", "ReleaseStep", "StreamView"]

log = logging.getLogger(__name__)

Lap = Callable[[str], None]
"""Marks the end of a named phase (the ZooKeeper rebalancer's phase clock)."""

ReleaseStep = Callable[[Mapping[TopicPartition, PartitionTopicInfo]], Awaitable[None]]
"""A coordinator's own step after the listener saw the released partitions."""

StreamView = dict[str, dict[int, ConsumerThreadId]]
"""``{topic: {partition: thread id}}``: what ``before_starting_fetchers`` is given."""


def _no_lap(_phase: str) -> None:
    pass


class Handover:
    """Gives partitions up and takes them, in the order that keeps delivery at-least-once.

    Args:
        config: the consumer configuration (``auto.commit.enable``, fetch sizes).
        consumer_id: the member's consumer id string (log lines, the listener's argument).
        ownership: the member's ownership state.
        fetcher: the fetcher manager.
        offset_store: forgets released partitions.
        metrics: the meters a new partition state counts its records in.
        cluster: gives the Kafka client the fetchers use.
        commit: commits consumed offsets (``{partition: next offset}``); a
            :class:`~aiozkconsumer.errors.ConsumerError` it raises is logged, not raised:
            the partitions are given up all the same, and their records after the last
            commit arrive again at their next owner.
        task_group: returns the task group owning the fetcher tasks.
        fetch_enabled: whether this member fetches what it owns.

    Attributes:
        listener: the rebalance listener (``before_releasing_partitions``,
            ``before_starting_fetchers``), or ``None``.
    """

    def __init__(
        self,
        *,
        config: ConsumerConfig,
        consumer_id: str,
        ownership: OwnershipState,
        fetcher: FetcherManager,
        offset_store: OffsetStore,
        metrics: ConsumerMetrics,
        cluster: ClusterView,
        commit: Callable[[Mapping[TopicPartition, int]], Awaitable[Any]],
        task_group: Callable[[], TaskGroup],
        fetch_enabled: bool = True,
    ) -> None:
        self.config = config
        self.consumer_id = consumer_id
        self.ownership = ownership
        self.fetcher = fetcher
        self.offset_store = offset_store
        self.metrics = metrics
        self.cluster = cluster
        self.commit = commit
        self.task_group = task_group
        self.fetch_enabled = fetch_enabled
        self.listener: Any = None

    async def release(
        self,
        tps: Iterable[TopicPartition],
        *,
        commit: bool = True,
        step: ReleaseStep | None = None,
        lap: Lap = _no_lap,
    ) -> dict[TopicPartition, PartitionTopicInfo]:
        """Give ``tps`` up (those owned; the others are ignored).

        Args:
            tps: the partitions to give up.
            commit: commit their consumed offsets first (with ``auto.commit.enable`` on);
                ``False`` where the commit would be refused (the member was fenced).
            step: the coordinator's own step, after the listener and before the ownership
                state drops them (the ZooKeeper owner nodes' deletes).
            lap: marks ``release_commit``, ``release_listener`` and ``release_delete``.

        Returns:
            The released partitions' states, ``{}`` when none of ``tps`` was owned.

        Raises:
            ConsumerError: the listener raised (the partitions stay inactive and owned: the
                attempt fails and the next one releases them again), or ``step`` did.
        """
        own = self.ownership
        released = own.deactivate(tps)
        if not released:
            return released
        self.fetcher.remove_partitions(released)
        if commit and self.config.auto_commit_enable:
            try:
                await self.commit({tp: p.consumed_offset for tp, p in released.items()})
            except ConsumerError as e:
                log.warning(
                    "[%s] commit before releasing %d partition(s) failed: %s",
                    self.consumer_id,
                    len(released),
                    e,
                )
        lap("release_commit")
        if self.listener is not None:
            await call_listener(
                self.listener.before_releasing_partitions(partitions_by_topic(released))
            )
            lap("release_listener")
        if step is not None:
            await step(released)
        self.offset_store.forget(released)
        own.release(released)
        lap("release_delete")
        return released

    def drop(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionTopicInfo]:
        """Drop ``tps`` at once, without a commit or the listener (another member owns them
        now: a fenced commit). Returns the dropped partitions' states."""
        own = self.ownership
        dropped = own.deactivate(tps)
        self.fetcher.remove_partitions(dropped)
        own.release(dropped)
        self.offset_store.forget(dropped)
        return dropped

    def acquire(
        self,
        queues: Mapping[TopicPartition, ChunkQueue],
        offsets: Mapping[TopicPartition, int],
        fences: Mapping[TopicPartition, int] | None = None,
    ) -> dict[TopicPartition, PartitionTopicInfo]:
        """Own the partitions of ``queues``, each feeding its queue from its committed offset.

        Args:
            queues: ``{partition: the stream queue it feeds}``.
            offsets: ``{partition: committed offset}`` for every partition of ``queues``
                (-1: none yet, ``auto.offset.reset`` decides at the first fetch); other
                entries are recorded as committed but not owned.
            fences: the ZooKeeper fencing tokens of the claims, if any.

        Returns:
            The new partitions' states.

        Raises:
            KeyError: a partition of ``queues`` has no entry in ``offsets``.
        """
        own = self.ownership
        new = {
            tp: partition_info(self.config, self.metrics, own.gate, tp, queue, offsets[tp])
            for tp, queue in queues.items()
        }
        if fences is not None:
            for tp, pti in new.items():
                pti.fence = fences[tp]
        own.acquire(new.values())
        own.record_committed(offsets)
        return new

    async def start(
        self,
        new: Mapping[TopicPartition, PartitionTopicInfo],
        view: StreamView | None,
        *,
        lap: Lap = _no_lap,
    ) -> None:
        """Tell the listener the assignment, then fetch every owned partition.

        Args:
            new: the partitions just acquired (their fetch starts at their offset).
            view: what ``before_starting_fetchers`` is given; ``None``: the listener is not
                called (nothing moved).
            lap: marks ``start_listener`` and ``start_fetchers``.

        Raises:
            ConsumerError: the listener raised; or the Kafka client could not start
                (``KafkaConnectionError``).
        """
        if self.listener is not None and view is not None:
            await call_listener(self.listener.before_starting_fetchers(self.consumer_id, view))
            lap("start_listener")
        own = self.ownership
        if self.fetch_enabled and len(own):
            self.fetcher.kafka = await self.cluster.kafka()
            # Everything owned, not only what is new: an attempt that failed once its
            # partitions were owned (a broker was unreachable) left some unfetched.
            await self.fetcher.ensure_fetching(
                own.registry.values(), new.values(), self.task_group()
            )
            lap("start_fetchers")

    def __repr__(self) -> str:
        return f"<Handover {self.consumer_id} owns={len(self.ownership)}>"


@dataclass(frozen=True, kw_only=True)
class MemberParts:
    """What the connector gives every coordinator (ZooKeeper rebalancer, Kafka members).

    Attributes:
        config: the consumer configuration.
        consumer_id: the member's consumer id string (stream thread ids, log lines).
        cluster: metadata (brokers, topics, partition counts) and the Kafka client.
        offset_store: reads the committed offsets of acquired partitions.
        fetcher: the fetcher manager.
        ownership: the member's ownership state.
        metrics: the member's metrics (``RebalanceRateAndTime``).
        handover: gives partitions up and takes them.
        topic_count: returns the subscription (``None`` before ``create_message_streams``).
        task_group: returns the task group owning the fetcher tasks.
        is_closing: whether the member is shutting down.
        fetch_enabled: whether this member fetches what it owns.
        on_attempt_failed: called after each failed attempt.
    """

    config: ConsumerConfig
    consumer_id: str
    cluster: ClusterView
    offset_store: OffsetStore
    fetcher: FetcherManager
    ownership: OwnershipState
    metrics: ConsumerMetrics
    handover: Handover
    topic_count: Callable[[], TopicCount | None]
    task_group: Callable[[], TaskGroup]
    is_closing: Callable[[], bool]
    fetch_enabled: bool = True
    on_attempt_failed: Callable[[], None] = lambda: None


class Coordinator(Protocol):
    """What a connector holds of its coordinator, whichever it is: the ZooKeeper rebalancer
    (``rebalance.Rebalancer``), the classic member (``group.classic``) or the KIP-848 member
    (``group.consumer_protocol``). Each moves partitions through one :class:`Handover`."""

    listener: Any
    """The rebalance listener, or ``None``."""
    history: deque[RebalanceRecord]
    """The last ``HISTORY_LIMIT`` rebalances, oldest first."""
    completed: int
    """Rebalances that ended owning their assignment, all time."""
    failed_attempts: int
    """Attempts that failed, all time."""

    async def rebalance(self, reason: str) -> None:
        """Take the group's current assignment (one serialized rebalance)."""
        ...

    async def leave(self) -> None:
        """Leave the group so that it rebalances at once (never raises)."""
        ...
