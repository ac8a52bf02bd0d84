"""Partition assignment strategies of the old consumer: ``range`` and ``roundrobin``.

Pure functions over an :class:`AssignmentContext` (the group's members, their threads per
topic and the topics' partitions), reproducing ``PartitionAssignor.scala`` of Kafka 0.10.2
decision for decision, so that every member -- ours or an original Java consumer -- computes
the same global plan from the same ZooKeeper view. The caller reads ZooKeeper, builds the
context with :meth:`AssignmentContext.build` and claims the owner nodes of its own share.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import cycle
from types import MappingProxyType
from typing import Final

from aiozkconsumer.errors import InvalidConfigError
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.subscription import ConsumerThreadId, TopicCount

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "AssignmentContext",
    "Assignor",
    "get_assignor",
    "java_string_hash",
    "range_assign",
    "roundrobin_assign",
]

logger = logging.getLogger(__name__)

Assignment = dict[str, dict[TopicPartition, ConsumerThreadId]]
"""A global plan: consumer id -> {partition: owning thread}; every member has an entry."""

Assignor = Callable[["AssignmentContext"], Assignment]
"""An assignment strategy."""

_SUPPORTED_VERSIONS: Final = ((0, 8, 2), (0, 9, 0), (0, 10, 0), (0, 10, 1), (0, 10, 2))


def _parse_version(version: str) -> tuple[int, int, int]:
    try:
        numbers = tuple(int(p) for p in version.split("."))
    except ValueError:
        numbers = ()
    if len(numbers) < 3 or numbers[:3] not in _SUPPORTED_VERSIONS:
        supported = ", ".join(".".join(map(str, v)) for v in _SUPPORTED_VERSIONS)
        raise ValueError(f"unsupported Kafka version {version!r}; expected one of {supported}")
    return numbers[0], numbers[1], numbers[2]


@dataclass(frozen=True)
class AssignmentContext:
    """What an assignor sees: the original's ``AssignmentContext`` (0.10.2), read up front.

    Construction normalises the collections (sorted tuples, read-only mappings) and checks
    that they are consistent.

    Attributes:
        group: the ``group.id``.
        consumer_id: the member computing the plan.
        my_topic_thread_ids: the computing member's threads per topic.
        consumers_for_topic: topic -> every member's threads subscribed to it, sorted by
            :func:`str` (``ZkUtils.getConsumersPerTopic``).
        partitions_for_topic: topic -> partition ids, sorted numerically; a topic without a
            node has none.
        consumers: the members (children of ``/consumers/<group>/ids``), sorted.

    Raises:
        ValueError: a topic of ``my_topic_thread_ids`` or ``partitions_for_topic`` has no
            threads in ``consumers_for_topic``, or a thread of ours is missing there.
    """

    group: str
    consumer_id: str
    my_topic_thread_ids: Mapping[str, frozenset[ConsumerThreadId]]
    consumers_for_topic: Mapping[str, tuple[ConsumerThreadId, ...]]
    partitions_for_topic: Mapping[str, tuple[int, ...]]
    consumers: tuple[str, ...]

    def __post_init__(self) -> None:
        mine = {t: frozenset(ids) for t, ids in sorted(self.my_topic_thread_ids.items())}
        per_topic = {t: tuple(sorted(ids)) for t, ids in sorted(self.consumers_for_topic.items())}
        partitions = {
            t: tuple(sorted(set(ps))) for t, ps in sorted(self.partitions_for_topic.items())
        }
        for topic, threads in per_topic.items():
            if not threads:
                raise ValueError(f"topic {topic!r} is listed with no consumer threads")
        for topic, my_threads in mine.items():
            if not my_threads <= set(per_topic.get(topic, ())):
                raise ValueError(
                    f"consumers_for_topic[{topic!r}] lacks threads of {self.consumer_id!r}"
                )
        for topic in partitions:
            if topic not in per_topic:
                raise ValueError(f"topic {topic!r} has partitions but no consumer threads")
        object.__setattr__(self, "my_topic_thread_ids", MappingProxyType(mine))
        object.__setattr__(self, "consumers_for_topic", MappingProxyType(per_topic))
        object.__setattr__(self, "partitions_for_topic", MappingProxyType(partitions))
        object.__setattr__(self, "consumers", tuple(sorted(set(self.consumers))))

    @classmethod
    def build(
        cls,
        group: str,
        consumer_id: str,
        registrations: Mapping[str, TopicCount],
        partitions_for_topic: Mapping[str, Iterable[int]],
        version: str = "0.10.2",
    ) -> AssignmentContext:
        """Build the context from the group's registrations and the topics' partitions.

        As the ``AssignmentContext`` constructor with ``ZkUtils.getConsumersPerTopic`` and
        ``getPartitionsForTopics`` (0.10.2): every member's threads are grouped per topic and
        sorted by string. Wildcard members must already be evaluated against the computing
        member's topic list (:func:`~aiozkconsumer.subscription.construct_topic_count`).

        Args:
            group: the ``group.id``.
            consumer_id: the member computing the plan; must be in ``registrations``.
            registrations: every member (child of ``/consumers/<group>/ids``) -> its topic
                count.
            partitions_for_topic: topic -> partition ids, as read from ``/brokers/topics``;
                topics missing here have no partitions, topics no member consumes are ignored.
            version: the Kafka behaviour to reproduce. From ``"0.10.2"`` (the default) the
                context holds the partitions of every topic any member consumes (needed by
                roundrobin since KAFKA-2434); ``"0.8.2"`` to ``"0.10.1"`` hold only the
                computing member's topics. Nothing else depends on it.

        Returns:
            The context.

        Raises:
            KeyError: ``consumer_id`` has no registration (the original fails reading its
                own node).
            ValueError: a topic count's ``consumer_id`` differs from its key, or ``version``
                is not one of 0.8.2, 0.9.0, 0.10.0, 0.10.1, 0.10.2.
        """
        all_group_topics = _parse_version(version) >= (0, 10, 2)
        if consumer_id not in registrations:
            raise KeyError(f"consumer {consumer_id!r} has no registration in group {group!r}")
        threads_per_topic: dict[str, set[ConsumerThreadId]] = {}
        for member, topic_count in registrations.items():
            if topic_count.consumer_id != member:
                raise ValueError(
                    f"registration of {member!r} belongs to {topic_count.consumer_id!r}"
                )
            for topic, threads in topic_count.get_consumer_thread_ids_per_topic().items():
                threads_per_topic.setdefault(topic, set()).update(threads)
        mine = registrations[consumer_id].get_consumer_thread_ids_per_topic()
        scope = threads_per_topic.keys() if all_group_topics else mine.keys()
        return cls(
            group=group,
            consumer_id=consumer_id,
            my_topic_thread_ids=mine,
            consumers_for_topic={t: tuple(ids) for t, ids in threads_per_topic.items()},
            partitions_for_topic={t: tuple(partitions_for_topic.get(t, ())) for t in scope},
            consumers=tuple(registrations),
        )


def java_string_hash(s: str) -> int:
    """Return Java's ``String.hashCode`` of ``s``.

    ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units (a character outside the BMP
    counts as its two surrogates), in signed 32-bit arithmetic.

    Args:
        s: the string.

    Returns:
        The hash, in ``[-2**31, 2**31 - 1]``; e.g. ``"hello"`` -> ``99162322``.
    """
    h = 0
    units = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def _finish(ctx: AssignmentContext, plan: Assignment) -> Assignment:
    # getAndMaybePut(consumerId) for every member: everyone gets an entry, possibly empty.
    for consumer in ctx.consumers:
        plan.setdefault(consumer, {})
    return {c: dict(sorted(plan[c].items())) for c in sorted(plan)}


def range_assign(ctx: AssignmentContext) -> Assignment:
    """Assign partitions by ranges, as ``RangeAssignor`` in ``PartitionAssignor.scala``, 0.10.2.

    For each topic the computing member consumes, partitions in numeric order are cut into
    contiguous ranges over that topic's threads in string order; the first
    ``len(P) % len(C)`` threads get one extra partition. The result covers every thread of
    those topics (the global map since 0.9), not only the computing member's.

    Example (the original's javadoc): two members with two streams each and five partitions
    give p0, p1 -> C1-0; p2 -> C1-1; p3 -> C2-0; p4 -> C2-1.

    Args:
        ctx: the assignment context.

    Returns:
        Consumer id -> its partitions and their threads, for every member.
    """
    plan: Assignment = {}
    for topic in sorted(ctx.my_topic_thread_ids):
        threads = ctx.consumers_for_topic[topic]
        partitions = ctx.partitions_for_topic.get(topic, ())
        per_thread, extra = divmod(len(partitions), len(threads))
        for position, thread in enumerate(threads):
            start = per_thread * position + min(position, extra)
            count = per_thread + (1 if position < extra else 0)
            if count <= 0:
                logger.warning(
                    "No broker partitions consumed by consumer thread %s for topic %s",
                    thread,
                    topic,
                )
                continue
            owned = plan.setdefault(thread.consumer, {})
            for partition in partitions[start : start + count]:
                owned[TopicPartition(topic, partition)] = thread
    return _finish(ctx, plan)


def roundrobin_assign(ctx: AssignmentContext) -> Assignment:
    """Deal partitions round-robin, as ``RoundRobinAssignor`` in ``PartitionAssignor.scala``.

    The 0.10.2 algorithm (after KAFKA-2434, which dropped the identical-subscription rule):
    all threads of all topics, deduplicated and sorted by string, form a circular list; all
    partitions of all topics are sorted by Java ``String.hashCode`` of ``"[topic,partition]"``
    (a stable sort); each partition goes to the next thread in the circle that subscribes to
    its topic. Threads skipped on the way are *consumed* (Scala's ``dropWhile`` on the shared
    iterator), so the next partition continues after the chosen thread.

    Hash ties: the original's stable sort keeps tied partitions in the iteration order of a
    Scala ``HashMap`` of topics, which depends on insertion history and cannot be reproduced;
    here tied partitions keep topic-name order, then partition order. Only partitions of
    different topics can tie (e.g. ``"[ab,1]"`` and ``"[bC,1]"``), and only then may a plan
    differ from a Java member's.

    Args:
        ctx: the assignment context (built for version 0.10.2, so that it holds the
            partitions of every topic the group consumes).

    Returns:
        Consumer id -> its partitions and their threads, for every member.
    """
    plan: Assignment = {}
    if ctx.consumers_for_topic:
        all_threads = sorted({t for ts in ctx.consumers_for_topic.values() for t in ts})
        circle = cycle(all_threads)
        subscribers = {topic: frozenset(ts) for topic, ts in ctx.consumers_for_topic.items()}
        all_partitions = sorted(
            (
                TopicPartition(topic, partition)
                for topic, partitions in sorted(ctx.partitions_for_topic.items())
                for partition in partitions
            ),
            key=lambda tp: java_string_hash(str(tp)),
        )
        for tp in all_partitions:
            # The context guarantees a subscriber, so this ends within one turn.
            thread = next(circle)
            while thread not in subscribers[tp.topic]:
                thread = next(circle)
            plan.setdefault(thread.consumer, {})[tp] = thread
    return _finish(ctx, plan)


ASSIGNORS: Final[Mapping[str, Assignor]] = MappingProxyType(
    {"range": range_assign, "roundrobin": roundrobin_assign}
)
"""``partition.assignment.strategy`` values and their assignors."""


def get_assignor(name: str) -> Assignor:
    """Return the assignor for a ``partition.assignment.strategy`` value.

    Validated as since 0.9.0 (KAFKA-2032); 0.8.2 fell back to range silently.

    Args:
        name: ``"range"`` or ``"roundrobin"`` (case-sensitive, as the original).

    Returns:
        The assignor.

    Raises:
        InvalidConfigError: ``name`` is not a known strategy.
    """
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise InvalidConfigError(
            "partition.assignment.strategy",
            f"Wrong value {name} of partition.assignment.strategy in consumer config; "
            "Valid values are 'range' and 'roundrobin'",
        ) from None
