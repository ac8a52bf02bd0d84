"""Client-side assignors of the Java ``KafkaConsumer`` for the classic group protocol.

When the group coordinator elects one of our members leader, that member must compute the
assignment for the whole group. These pure functions reproduce kafka-clients'
``RangeAssignor`` (``"range"``) and ``RoundRobinAssignor`` (``"roundrobin"``) decision for
decision, so that a mixed group ends up with the same assignment whichever member -- ours or
a Java consumer -- leads it. They take the members' subscriptions and the topics' partition
counts and return the assignment; reading metadata and sending SyncGroup is the caller's job.

Rack-aware range assignment (KIP-881, kafka-clients 3.5+) is reproduced too: when members
send ``client.rack`` and some partition has replicas on only some of the racks, the range
assignor first gives each member partitions with a replica on its rack (keeping each topic's
balance and the co-partitioning of topics with the same partition count and subscribers),
then the rest by plain ranges, as ``RangeAssignor.assignPartitions``. The round-robin
assignor has no rack-aware form (neither has Java's).

The sticky assignors (``"sticky"``, ``"cooperative-sticky"``) are :mod:`.sticky`'s port of
``AbstractStickyAssignor``; their wrappers here take what members owned before
(``member_data``) besides the subscriptions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Final, Protocol

from aiozkconsumer.errors import InvalidConfigError
from aiozkconsumer.records import TopicPartition

from .sticky import MemberData, cooperative_sticky_assign, sticky_assign

__all__ = [
    "SUPPORTED_STRATEGIES",
    "GroupAssignment",
    "COOPERATIVE_STRATEGIES",
    "GroupAssignor",
    "MemberData",
    "PartitionRacks",
    "CooperativeStickyAssignor",
    "StickyAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "assign",
]

GroupAssignment = dict[str, list[TopicPartition]]
"""Member id -> its partitions, sorted by topic then partition; every member has an entry."""

PartitionRacks = Mapping[str, Sequence[Collection[str]]]
"""Topic -> per partition (index = partition id) the racks of its replicas (all replicas, as
the Java assignor counts them, offline or not in the ISR included); brokers without a rack
add none."""

SUPPORTED_STRATEGIES: Final = ("range", "roundrobin", "sticky", "cooperative-sticky")
"""The ``partition.assignment.strategy`` names (the assignors' ``name()``) implemented here."""

COOPERATIVE_STRATEGIES: Final = frozenset({"cooperative-sticky"})
"""The assignors whose ``supportedProtocols()`` include ``COOPERATIVE`` (KIP-429): a member
whose configured assignors are all cooperative rebalances incrementally
(``ConsumerCoordinator``'s protocol selection)."""


def _java_key(s: str) -> bytes:
    # Java's String.compareTo orders by UTF-16 code units, Python's str by code points; the
    # two disagree when a character above U+FFFF meets one in U+E000..U+FFFF. Big-endian
    # UTF-16 bytes compare exactly as the code units do.
    return s.encode("utf-16-be", "surrogatepass")


def _member_info_key(member_id: str, group_instance_id: str | None) -> tuple[int, bytes, bytes]:
    # AbstractPartitionAssignor.MemberInfo.compareTo: static members (with a
    # group.instance.id) first, by instance id; then dynamic members by member id. The broker
    # keeps instance ids unique; should two collide anyway, the member id decides instead of
    # the input order (where Java's stable sort would leave them).
    if group_instance_id is not None:
        return 0, _java_key(group_instance_id), _java_key(member_id)
    return 1, b"", _java_key(member_id)


class _Group:
    """The validated inputs: members in ``MemberInfo`` order and their topic sets."""

    __slots__ = ("members", "partitions_per_topic", "subscriptions", "topics")

    def __init__(
        self,
        subscriptions: Mapping[str, Collection[str]],
        partitions_per_topic: Mapping[str, int],
        group_instance_ids: Mapping[str, str | None] | None,
    ) -> None:
        instance_ids = dict(group_instance_ids or {})
        unknown = sorted(set(instance_ids) - set(subscriptions))
        if unknown:
            raise ValueError(f"group_instance_ids names members without a subscription: {unknown}")
        subs: dict[str, frozenset[str]] = {}
        for member, topics in subscriptions.items():
            # A bare string is a Collection[str] too: "t0" would subscribe to "t" and "0".
            if isinstance(topics, str):
                raise TypeError(f"subscription of {member!r} is a string, not a collection")
            subs[member] = frozenset(topics)
        for topic, count in partitions_per_topic.items():
            if count < 0:
                raise ValueError(f"topic {topic!r} has a negative partition count: {count}")
        self.subscriptions = subs
        self.partitions_per_topic = partitions_per_topic
        self.members = sorted(subs, key=lambda m: _member_info_key(m, instance_ids.get(m)))
        # The TreeSet of every subscribed topic (RoundRobinAssignor.allPartitionsSorted);
        # range is per topic, so its order there only fixes the order lists are built in.
        self.topics = sorted(set[str]().union(*subs.values()), key=_java_key)

    def empty_assignment(self) -> GroupAssignment:
        return {member: [] for member in self.members}


class GroupAssignor(Protocol):
    """An assignment strategy of the classic consumer group protocol."""

    @property
    def name(self) -> str:
        """The protocol name sent in JoinGroup, as the Java assignor's ``name()``."""
        ...

    def assign(
        self,
        subscriptions: Mapping[str, Collection[str]],
        partitions_per_topic: Mapping[str, int],
        group_instance_ids: Mapping[str, str | None] | None = None,
        *,
        member_racks: Mapping[str, str | None] | None = None,
        partition_racks: PartitionRacks | None = None,
        member_data: Mapping[str, MemberData] | None = None,
    ) -> GroupAssignment:
        """Compute the group's assignment; see :func:`assign`."""
        ...


class RangeAssignor:
    """Contiguous ranges per topic, as kafka-clients' ``RangeAssignor`` (name ``"range"``).

    For each topic, its partitions in numeric order are split over the members subscribed to
    it, sorted as ``AbstractPartitionAssignor.MemberInfo`` (group instance id first when
    present, else member id): each gets ``n // m`` partitions and the first ``n % m`` one
    more. With two members C0, C1 and topics t0, t1 of 3 partitions, C0 gets
    ``[t0p0, t0p1, t1p0, t1p1]`` and C1 ``[t0p2, t1p2]``.

    With racks (KIP-881) and some partition on a subset of the members' racks, partitions with
    a replica on a member's rack go to it first, within the same per-topic quotas (see
    :func:`_rack_aware_ranges`).
    """

    name: Final = "range"

    def assign(
        self,
        subscriptions: Mapping[str, Collection[str]],
        partitions_per_topic: Mapping[str, int],
        group_instance_ids: Mapping[str, str | None] | None = None,
        *,
        member_racks: Mapping[str, str | None] | None = None,
        partition_racks: PartitionRacks | None = None,
        member_data: Mapping[str, MemberData] | None = None,
    ) -> GroupAssignment:
        """Compute the group's assignment by ranges; arguments and errors as :func:`assign`.

        Returns:
            Member id -> its partitions, sorted; an entry for every member.
        """
        del member_data  # not sticky
        group = _Group(subscriptions, partitions_per_topic, group_instance_ids)
        racks = {m: r for m, r in (member_racks or {}).items() if r}
        if racks:
            return _rack_aware_ranges(group, racks, partition_racks or {})
        assignment = group.empty_assignment()
        # Topics in sorted order and partitions ascending keep every list sorted as built.
        for topic in group.topics:
            n = partitions_per_topic.get(topic)
            if not n:  # no metadata, or no partitions: AbstractPartitionAssignor skips it
                continue
            consumers = [m for m in group.members if topic in group.subscriptions[m]]
            per_consumer, with_extra = divmod(n, len(consumers))
            for i, member in enumerate(consumers):
                start = per_consumer * i + min(i, with_extra)
                length = per_consumer + (1 if i < with_extra else 0)
                assignment[member].extend(
                    TopicPartition(topic, p) for p in range(start, start + length)
                )
        return assignment


class RoundRobinAssignor:
    """One partition at a time around the members, as kafka-clients' ``RoundRobinAssignor``.

    Name ``"roundrobin"``. Every partition of every subscribed topic, sorted by topic then
    partition, goes to the next member of a circle (``MemberInfo`` order) that subscribes to
    its topic; members that do not are skipped. With identical subscriptions the counts differ
    by at most one; with C0 on t0, C1 on t0, t1 and C2 on t0, t1, t2 (1, 2 and 3 partitions),
    C0 gets ``[t0p0]``, C1 ``[t1p0]`` and C2 ``[t1p1, t2p0, t2p1, t2p2]``.
    """

    name: Final = "roundrobin"

    def assign(
        self,
        subscriptions: Mapping[str, Collection[str]],
        partitions_per_topic: Mapping[str, int],
        group_instance_ids: Mapping[str, str | None] | None = None,
        *,
        member_racks: Mapping[str, str | None] | None = None,
        partition_racks: PartitionRacks | None = None,
        member_data: Mapping[str, MemberData] | None = None,
    ) -> GroupAssignment:
        """Compute the group's assignment round robin; arguments and errors as :func:`assign`.

        Returns:
            Member id -> its partitions, sorted; an entry for every member.
        """
        del member_racks, partition_racks, member_data  # no rack-aware form, not sticky
        group = _Group(subscriptions, partitions_per_topic, group_instance_ids)
        assignment = group.empty_assignment()
        circle = group.members
        at = 0  # CircularIterator position: the member peek() returns
        for topic in group.topics:
            n = partitions_per_topic.get(topic)
            if n is None:
                continue
            for partition in range(n):
                # Terminates: topic came from a subscription, so some member takes it.
                while topic not in group.subscriptions[circle[at]]:
                    at = (at + 1) % len(circle)
                assignment[circle[at]].append(TopicPartition(topic, partition))
                at = (at + 1) % len(circle)
        return assignment


class _TopicState:
    """``RangeAssignor.TopicAssignmentState``: one topic's quotas and what is left of it."""

    def __init__(
        self,
        topic: str,
        count: int,
        consumers: list[str],
        consumer_racks: Mapping[str, str],
        replica_racks: Sequence[Collection[str]] | None,
    ) -> None:
        self.topic = topic
        self.consumers = [(c, consumer_racks.get(c)) for c in consumers]
        self.racks_of = dict(self.consumers)
        self.unassigned = list(range(count))  # the LinkedHashSet, in partition order
        self.assigned = dict.fromkeys(consumers, 0)
        self.per_consumer = count // len(consumers) if consumers else 0
        self.with_extra = count % len(consumers) if consumers else 0
        member_racks = {consumer_racks[c] for c in consumers if c in consumer_racks}
        self.partition_racks: dict[int, frozenset[str]] = {}
        if member_racks:
            known = replica_racks or ()
            self.partition_racks = {
                p: frozenset(known[p]) if p < len(known) else frozenset() for p in range(count)
            }
        all_partition_racks = frozenset().union(*self.partition_racks.values())
        # AbstractPartitionAssignor.useRackAwareAssignment (preferRackAwareLogic off).
        self.needs_rack_aware = (
            bool(member_racks)
            and not member_racks.isdisjoint(all_partition_racks)
            and not all(r == all_partition_racks for r in self.partition_racks.values())
        )

    def racks_match(self, consumer: str, partition: int) -> bool:
        rack = self.racks_of[consumer]
        return rack is None or rack in self.partition_racks.get(partition, frozenset())

    def max_assignable(self, consumer: str) -> int:
        quota = self.per_consumer + (1 if self.with_extra > 0 else 0)
        return max(0, quota - self.assigned[consumer])

    def on_assigned(self, consumer: str, partitions: list[int]) -> None:
        self.assigned[consumer] += len(partitions)
        if self.assigned[consumer] > self.per_consumer:
            self.with_extra -= 1
        taken = set(partitions)
        self.unassigned = [p for p in self.unassigned if p not in taken]


def _give(
    consumer: str, partitions: list[int], state: _TopicState, assignment: GroupAssignment
) -> None:
    assignment[consumer].extend(TopicPartition(state.topic, p) for p in partitions)
    state.on_assigned(consumer, partitions)


def _assign_ranges(
    state: _TopicState, may_assign: Callable[[str, int], bool], assignment: GroupAssignment
) -> None:
    """``RangeAssignor.assignRanges``: each consumer in turn takes the first unassigned
    partitions it may, up to its quota."""
    for consumer, _ in state.consumers:
        if not state.unassigned:
            break
        fitting = [p for p in state.unassigned if may_assign(consumer, p)]
        chosen = fitting[: state.max_assignable(consumer)]
        if chosen:
            _give(consumer, chosen, state, assignment)


def _assign_co_partitioned(
    consumers: list[str], count: int, states: list[_TopicState], assignment: GroupAssignment
) -> None:
    """``RangeAssignor.assignCoPartitionedWithRackMatching``: partition p of every topic of
    the set goes to the first remaining consumer whose rack matches p in all of them."""
    remaining = list(consumers)
    for p in range(count):
        match = next(
            (
                c
                for c in remaining
                if all(t.racks_match(c, p) and t.max_assignable(c) > 0 for t in states)
            ),
            None,
        )
        if match is None:
            continue
        for t in states:
            _give(match, [p], t, assignment)
        if not any(t.max_assignable(match) > 0 for t in states):
            remaining.remove(match)
            if not remaining:
                break


def _rack_aware_ranges(
    group: _Group, consumer_racks: Mapping[str, str], partition_racks: PartitionRacks
) -> GroupAssignment:
    """``RangeAssignor.assignPartitions`` with members' racks (kafka-clients 3.5+, KIP-881).

    When some topic needs it (members and replicas have racks in common, and not every
    partition is on every rack), topics with the same subscribers and partition count are
    matched together partition by partition (co-partitioning before rack alignment), a topic
    alone by ranges over the partitions on each consumer's rack; then every topic's leftover
    partitions go by plain ranges. The order of topics does not change the result (each
    topic's quotas are its own), so the Java code's hash-map order needs no reproducing.
    """
    states = []
    for topic in group.topics:
        count = group.partitions_per_topic.get(topic)
        if not count:
            continue
        consumers = [m for m in group.members if topic in group.subscriptions[m]]
        states.append(
            _TopicState(topic, count, consumers, consumer_racks, partition_racks.get(topic))
        )
    assignment = group.empty_assignment()
    if any(t.needs_rack_aware for t in states):
        by_set: dict[tuple[tuple[tuple[str, str | None], ...], int], list[_TopicState]] = {}
        for t in states:
            by_set.setdefault((tuple(t.consumers), len(t.partition_racks)), []).append(t)
        for (members, count), same in by_set.items():
            if len(same) > 1:
                _assign_co_partitioned([c for c, _ in members], count, same, assignment)
            elif same[0].needs_rack_aware:
                _assign_ranges(same[0], same[0].racks_match, assignment)
    for t in states:
        _assign_ranges(t, lambda _c, _p: True, assignment)
    for partitions in assignment.values():
        partitions.sort(key=lambda tp: (_java_key(tp.topic), tp.partition))
    return assignment


class _StickyBase:
    """What the two sticky assignors share: the inputs gathered for :mod:`.sticky`."""

    name: str = ""
    _cooperative = False

    def assign(
        self,
        subscriptions: Mapping[str, Collection[str]],
        partitions_per_topic: Mapping[str, int],
        group_instance_ids: Mapping[str, str | None] | None = None,
        *,
        member_racks: Mapping[str, str | None] | None = None,
        partition_racks: PartitionRacks | None = None,
        member_data: Mapping[str, MemberData] | None = None,
    ) -> GroupAssignment:
        """Compute the group's sticky assignment; arguments and errors as :func:`assign`.

        Returns:
            Member id -> its partitions, sorted; an entry for every member, in
            ``MemberInfo`` order.
        """
        group = _Group(subscriptions, partitions_per_topic, group_instance_ids)
        known = member_data or {}
        racks = member_racks or {}
        members = {
            m: dataclasses.replace(
                known.get(m) or MemberData(frozenset()),
                topics=group.subscriptions[m],
                rack=racks.get(m) or None,
            )
            for m in group.members
        }
        run = cooperative_sticky_assign if self._cooperative else sticky_assign
        result = run(members, partitions_per_topic, partition_racks)
        return {
            m: sorted(result.assignment[m], key=lambda tp: (_java_key(tp.topic), tp.partition))
            for m in group.members
        }


class StickyAssignor(_StickyBase):
    """Kafka-clients' ``StickyAssignor`` (KIP-54, name ``"sticky"``, eager): balanced, and
    keeping as much of what each member owned as balance allows (the previous assignment and
    its generation come in each member's user data, ``StickyAssignorUserData``). With C0 and
    C1 on t0, t1 of 3 partitions: C0 ``[t0p0, t0p2, t1p1]``, C1 ``[t0p1, t1p0, t1p2]``; when
    C2 joins, C0 and C1 each give one up (C0 keeps ``[t0p0, t1p1]``, C1 ``[t0p1, t1p0]``) and
    C2 gets ``[t0p2, t1p2]`` (:func:`.sticky.sticky_assign`).
    """

    name: Final = "sticky"


class CooperativeStickyAssignor(_StickyBase):
    """Kafka-clients' ``CooperativeStickyAssignor`` (KIP-429, name ``"cooperative-sticky"``):
    the sticky assignment, less what moves between members (revoked first, given in the
    follow-up rebalance); members send what they own in the subscription's
    ``owned_partitions`` with their generation (:func:`.sticky.cooperative_sticky_assign`).
    """

    name: Final = "cooperative-sticky"
    _cooperative = True


_ASSIGNORS: Final[Mapping[str, GroupAssignor]] = {
    RangeAssignor.name: RangeAssignor(),
    RoundRobinAssignor.name: RoundRobinAssignor(),
    StickyAssignor.name: StickyAssignor(),
    CooperativeStickyAssignor.name: CooperativeStickyAssignor(),
}


def assign(
    strategy: str,
    subscriptions: Mapping[str, Collection[str]],
    partitions_per_topic: Mapping[str, int],
    group_instance_ids: Mapping[str, str | None] | None = None,
    *,
    member_racks: Mapping[str, str | None] | None = None,
    partition_racks: PartitionRacks | None = None,
    member_data: Mapping[str, MemberData] | None = None,
) -> GroupAssignment:
    """Compute the group leader's assignment with the strategy the coordinator chose.

    The same inputs give the same result whatever the order of the mappings and collections,
    as the Java assignors sort everything they iterate.

    Args:
        strategy: the protocol name from the JoinGroup response, one of
            :data:`SUPPORTED_STRATEGIES`.
        subscriptions: member id -> the topics it subscribes to (from its ``Subscription``).
        partitions_per_topic: topic -> its partition count. Subscribed topics missing here
            (no metadata) or with 0 partitions are skipped, as
            ``AbstractPartitionAssignor.assign``; topics nobody subscribes to are ignored.
        group_instance_ids: member id -> its ``group.instance.id``, or ``None`` (the
            default, as a missing entry) for a dynamic member; it orders members as
            ``MemberInfo.compareTo``.
        member_racks: member id -> its ``client.rack`` (from its subscription, v3), ``None``
            or ``""`` for none. Default: no racks (plain assignment).
        partition_racks: topic -> per partition the racks of its replicas
            (:data:`PartitionRacks`), for the rack-aware forms (KIP-881) of the range and
            sticky assignors.
        member_data: (sticky assignors) member id -> what it owned before and in which
            generation (:class:`~aiozkconsumer.group.sticky.MemberData`; its ``topics`` and
            ``rack`` are taken from ``subscriptions`` and ``member_racks``); a member
            missing here owned nothing. Range and roundrobin ignore it.

    Returns:
        Member id -> its partitions, sorted by topic then partition; every member of
        ``subscriptions`` has an entry, possibly empty.

    Raises:
        InvalidConfigError: ``strategy`` is not supported (key
            ``"partition.assignment.strategy"``).
        TypeError: a subscription is a ``str`` rather than a collection of topics.
        ValueError: a partition count is negative, or ``group_instance_ids`` names a member
            absent from ``subscriptions``.
    """
    assignor = _ASSIGNORS.get(strategy)
    if assignor is None:
        raise InvalidConfigError(
            "partition.assignment.strategy",
            f"unsupported assignor {strategy!r}; expected one of {', '.join(SUPPORTED_STRATEGIES)}",
        )
    return assignor.assign(
        subscriptions,
        partitions_per_topic,
        group_instance_ids,
        member_racks=member_racks,
        partition_racks=partition_racks,
        member_data=member_data,
    )
