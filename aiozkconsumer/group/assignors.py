"""Client-side assignors of the Java ``KafkaConsumer`` for the classic group protocol.

When the group coordinator elects one of our members leader, that member must compute the
assignment for the whole group. These pure functions reproduce kafka-clients'
``RangeAssignor`` (``"range"``) and ``RoundRobinAssignor`` (``"roundrobin"``) decision for
decision, so that a mixed group ends up with the same assignment whichever member -- ours or
a Java consumer -- leads it. They take the members' subscriptions and the topics' partition
counts and return the assignment; reading metadata and sending SyncGroup is the caller's job.

Rack-aware assignment (KIP-881, kafka-clients 3.5+, only when members send ``client.rack``)
is not reproduced: the members' racks are not an input here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Final, Protocol

from aiozkconsumer.errors import InvalidConfigError
from aiozkconsumer.records import TopicPartition

__all__ = [
    "SUPPORTED_STRATEGIES",
    "GroupAssignment",
    "GroupAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "assign",
]

GroupAssignment = dict[str, list[TopicPartition]]
"""Member id -> its partitions, sorted by topic then partition; every member has an entry."""

SUPPORTED_STRATEGIES: Final = ("range", "roundrobin")
"""The ``partition.assignment.strategy`` names (the assignors' ``name()``) implemented here."""


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
    """

    name: Final = "range"

    def assign(
        self,
        subscriptions: Mapping[str, Collection[str]],
        partitions_per_topic: Mapping[str, int],
        group_instance_ids: Mapping[str, str | None] | None = None,
    ) -> GroupAssignment:
        """Compute the group's assignment by ranges; arguments and errors as :func:`assign`.

        Returns:
            Member id -> its partitions, sorted; an entry for every member.
        """
        group = _Group(subscriptions, partitions_per_topic, group_instance_ids)
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
    ) -> GroupAssignment:
        """Compute the group's assignment round robin; arguments and errors as :func:`assign`.

        Returns:
            Member id -> its partitions, sorted; an entry for every member.
        """
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


_ASSIGNORS: Final[Mapping[str, GroupAssignor]] = {
    RangeAssignor.name: RangeAssignor(),
    RoundRobinAssignor.name: RoundRobinAssignor(),
}


def assign(
    strategy: str,
    subscriptions: Mapping[str, Collection[str]],
    partitions_per_topic: Mapping[str, int],
    group_instance_ids: Mapping[str, str | None] | None = None,
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
    return assignor.assign(subscriptions, partitions_per_topic, group_instance_ids)
