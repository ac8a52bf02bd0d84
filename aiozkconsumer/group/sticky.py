"""The sticky assignors of the Java ``KafkaConsumer`` (KIP-54, KIP-429): pure functions.

A port of kafka-clients' ``AbstractStickyAssignor`` (3.5+, with its KIP-881 rack awareness)
and of the two assignors built on it: ``StickyAssignor`` (``"sticky"``, eager: members revoke
everything before they join and send what they owned in the subscription's user data) and
``CooperativeStickyAssignor`` (``"cooperative-sticky"``, KIP-429: members keep fetching what
they own through the rebalance and send it in the subscription's ``owned_partitions`` field
with their generation; a partition that moves between two members is first only revoked by
its owner and is given to the new owner in the follow-up rebalance, ``adjustAssignment``).

Both aim for (1) a balanced assignment (members with the same subscription get partition
counts differing by at most one) and (2) as few moves as possible from what the members
owned before. When every member subscribes to the same topics the constrained algorithm
(``ConstrainedAssignmentBuilder``) runs: each member keeps up to its quota of what it owned,
the rest goes round robin. Otherwise the general one (``GeneralAssignmentBuilder``): keep
what is still valid, hand out the rest to the least loaded eligible member, then move
partitions towards balance, keeping the move only if the balance score improves.

Determinism: the Java code iterates some ``HashMap`` s of member ids, and the result depends
on their order (which member keeps a surplus partition). This port iterates them in the
order a ``HashMap`` of those ids has (bucket by ``String.hashCode``, see
:func:`_hash_map_order`), so it reaches Java's answers, except that ids in the same bucket
go by string order (Java's order there is the insertion order) and a reverse move picks the
lowest partition of those Java's ``HashSet`` would pick from. Either way every member of ours
computes the same plan from the same input.

The wire encodings of the assignors' user data (``StickyAssignorUserData`` v0/v1 and the
cooperative assignor's generation) are here too; the subscription's own fields are
:mod:`aiozkconsumer.kafka.group`'s.
"""

from __future__ import annotations

import bisect
import logging
import struct
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from aiozkconsumer.records import TopicPartition

__all__ = [
    "DEFAULT_GENERATION",
    "MemberData",
    "StickyResult",
    "cooperative_sticky_assign",
    "decode_cooperative_user_data",
    "decode_sticky_user_data",
    "encode_cooperative_user_data",
    "encode_sticky_user_data",
    "is_sticky",
    "member_data",
    "sticky_assign",
]

log = logging.getLogger(__name__)

DEFAULT_GENERATION = -1
"""``AbstractStickyAssignor.DEFAULT_GENERATION``: no generation known."""


def _jkey(s: str) -> bytes:
    # Java's String.compareTo (UTF-16 code units), as group.assignors._java_key.
    return s.encode("utf-16-be", "surrogatepass")


def _java_hash(s: str) -> int:
    """``String.hashCode`` (over UTF-16 code units, 32-bit)."""
    h = 0
    raw = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(raw), 2):
        h = (31 * h + (raw[i] << 8 | raw[i + 1])) & 0xFFFFFFFF
    return h


def _hash_map_order(keys: Iterable[str]) -> list[str]:
    """The iteration order of a ``java.util.HashMap`` of these string keys built by puts:
    by bucket (``(h ^ h >>> 16) & (capacity - 1)``, the table doubling from 16 while the
    size exceeds 3/4 of it), then by Java string order within a bucket (Java's is insertion
    order there, which the leader's map of JoinGroup members does not make reproducible)."""
    names = list(keys)
    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2

    def bucket(s: str) -> int:
        h = _java_hash(s)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(names, key=lambda s: (bucket(s), _jkey(s)))


def _tp_key(tp: TopicPartition) -> tuple[bytes, int]:
    return _jkey(tp.topic), tp.partition


@dataclass(frozen=True)
class MemberData:
    """What the leader knows of one member (``AbstractStickyAssignor.MemberData`` plus the
    subscription fields the algorithm reads besides).

    Attributes:
        topics: the member's subscribed topics.
        partitions: what it says it owned (``MemberData.partitions``: the sticky assignor's
            user data, the cooperative assignor's ``owned_partitions``).
        generation: the generation of that ownership (``MemberData.generation``), ``None``
            when the member sent none.
        subscription_generation: the subscription's ``generation_id`` field (v2+), ``None``
            for earlier versions; ``allSubscriptionsEqual`` compares a rival claimant's by it.
        owned_partitions: the subscription's ``owned_partitions`` field (v1+), which the
            cooperative assignor's general path compares the result with.
        rack: its ``client.rack`` (v3+), ``None`` or ``""`` for none.
    """

    topics: frozenset[str]
    partitions: tuple[TopicPartition, ...] = ()
    generation: int | None = None
    subscription_generation: int | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    rack: str | None = None


@dataclass
class StickyResult:
    """What :func:`sticky_assign` computed.

    Attributes:
        assignment: member id -> its partitions (sorted by topic, partition).
        transferring: partition -> the member it moves to from another member that owned it
            (``partitionsTransferringOwnership``), ``None`` when the general path ran (the
            cooperative assignor then computes it from the owned partitions).
        max_generation: the highest generation a member reported.
        sticky: whether no partition moved back and forth between two members within one
            topic (``PartitionMovements.isSticky``; always ``True`` on the constrained path).
    """

    assignment: dict[str, list[TopicPartition]]
    transferring: dict[TopicPartition, str] | None
    max_generation: int
    sticky: bool = True


# -- rack information (AbstractStickyAssignor.RackInfo) -----------------------------------


class _RackInfo:
    def __init__(
        self,
        partitions_per_topic: Mapping[str, int],
        members: Mapping[str, MemberData],
        partition_racks: Mapping[str, Sequence[Collection[str]]] | None,
    ) -> None:
        consumers_by_rack: dict[str, list[str]] = {}
        for member in sorted(members, key=_jkey):
            rack = members[member].rack
            if rack:
                consumers_by_rack.setdefault(rack, []).append(member)
        racks_of: dict[TopicPartition, frozenset[str]] = {}
        if consumers_by_rack:
            known = partition_racks or {}
            for topic, count in partitions_per_topic.items():
                replicas = known.get(topic) or ()
                for p in range(count):
                    racks_of[TopicPartition(topic, p)] = (
                        frozenset(replicas[p]) if p < len(replicas) else frozenset()
                    )
        all_partition_racks = frozenset().union(*racks_of.values()) if racks_of else frozenset()
        member_racks = set(consumers_by_rack)
        # AbstractPartitionAssignor.useRackAwareAssignment (preferRackAwareLogic off).
        use = (
            bool(member_racks)
            and not member_racks.isdisjoint(all_partition_racks)
            and not all(r == all_partition_racks for r in racks_of.values())
        )
        self.consumer_racks: dict[str, str] = {}
        self.partition_racks: dict[TopicPartition, frozenset[str]] = {}
        if use:
            self.consumer_racks = {c: r for r, cs in consumers_by_rack.items() for c in cs}
            self.partition_racks = racks_of
        # Computed from the replica racks even when rack-aware assignment is off, as Java's.
        self.consumers_by_partition = {
            tp: sum(len(consumers_by_rack.get(r, ())) for r in racks)
            for tp, racks in racks_of.items()
        }

    def mismatch(self, consumer: str, tp: TopicPartition) -> bool:
        """``racksMismatch``: the consumer has a rack and no replica of ``tp`` is on it."""
        rack = self.consumer_racks.get(consumer)
        if rack is None:
            return False
        racks = self.partition_racks.get(tp)
        return racks is None or rack not in racks

    def sort_partitions(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """``sortPartitionsByRackConsumers``: fewest same-rack consumers first (stable)."""
        if not self.consumers_by_partition:
            return partitions
        return sorted(partitions, key=lambda tp: self.consumers_by_partition.get(tp, 0))

    def next_rack_consumer(self, tp: TopicPartition, consumers: list[str], first: int) -> int:
        """``nextRackConsumer``: index of the first consumer from ``first`` (circularly) on a
        rack with a replica of ``tp``, -1 for none."""
        racks = self.partition_racks.get(tp)
        if not racks:
            return -1
        n = len(consumers)
        for i in range(n):
            index = (first + i) % n
            rack = self.consumer_racks.get(consumers[index])
            if rack is not None and rack in racks:
                return index
        return -1


# -- the leader's view of previous ownership (allSubscriptionsEqual) ----------------------


def _owned_and_equal(
    all_topics: Collection[str],
    members: Mapping[str, MemberData],
    owned: dict[str, list[TopicPartition]],
    multiple_owners: set[TopicPartition],
) -> tuple[bool, int]:
    """``allSubscriptionsEqual``: whether every member subscribes to the same topics; fills
    ``owned`` with each member's still-subscribed previous partitions, resolving a partition
    claimed by two members: the higher generation keeps it; in the same generation neither
    does (it goes into ``multiple_owners``). Returns ``(equal, max generation)``."""
    first: frozenset[str] | None = None
    equal = True
    max_generation = DEFAULT_GENERATION
    previous_owner: dict[TopicPartition, str] = {}
    for consumer in _hash_map_order(members):
        data = members[consumer]
        if first is None:
            first = data.topics
        elif data.topics != first:
            equal = False
        generation = DEFAULT_GENERATION if data.generation is None else data.generation
        max_generation = max(max_generation, generation)
        mine: list[TopicPartition] = []
        owned[consumer] = mine
        for tp in data.partitions:
            if tp.topic not in all_topics:
                continue
            other = previous_owner.get(tp)
            if other is None:
                mine.append(tp)
                previous_owner[tp] = consumer
                continue
            other_generation = members[other].subscription_generation
            if other_generation is None:
                other_generation = DEFAULT_GENERATION
            if generation == other_generation:
                log.error(
                    "found members %s and %s claiming %s in the same generation %d: it is "
                    "taken from both",
                    consumer,
                    other,
                    tp,
                    generation,
                )
                multiple_owners.add(tp)
                if tp in owned[other]:
                    owned[other].remove(tp)
                previous_owner[tp] = consumer
            elif generation > other_generation:
                mine.append(tp)
                if tp in owned[other]:
                    owned[other].remove(tp)
                previous_owner[tp] = consumer
            # else: the other member, of a later generation, keeps it
    return equal, max_generation


# -- the constrained path (ConstrainedAssignmentBuilder) ---------------------------------


def _all_partitions(
    topics: Iterable[str], partitions_per_topic: Mapping[str, int]
) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])]


def _constrained(
    partitions_per_topic: Mapping[str, int],
    racks: _RackInfo,
    owned: dict[str, list[TopicPartition]],
    multiple_owners: set[TopicPartition],
) -> tuple[dict[str, list[TopicPartition]], dict[TopicPartition, str]]:
    """Every member subscribes to the same topics: keep owned partitions up to the quotas,
    fill the rest round robin (rack-matched first). Returns the assignment and the partitions
    transferring ownership."""
    total = sum(partitions_per_topic.values())
    n = len(owned)
    min_quota, extra = divmod(total, n)
    max_quota = min_quota + (1 if extra else 0)
    expected_over = extra  # members that end with max_quota (0 when the quotas are equal)
    over = 0
    assignment: dict[str, list[TopicPartition]] = {c: [] for c in owned}
    assigned: set[TopicPartition] = set()
    maybe_revoked: dict[TopicPartition, str] = {}
    transferring: dict[TopicPartition, str] = {}
    under_min: list[str] = []
    exactly_min: list[str] = []

    # assignOwnedPartitions
    for consumer in _hash_map_order(owned):
        kept = []
        for tp in owned[consumer]:
            if racks.mismatch(consumer, tp):
                maybe_revoked[tp] = consumer
            else:
                kept.append(tp)
        kept.sort(key=lambda tp: (tp.partition, _jkey(tp.topic)))
        kept = [tp for tp in kept if tp not in multiple_owners]
        mine = assignment[consumer]
        if len(kept) < min_quota:
            mine.extend(kept)
            assigned.update(kept)
            under_min.append(consumer)
        elif len(kept) >= max_quota and over < expected_over:
            over += 1
            if over == expected_over:
                exactly_min.clear()
            mine.extend(kept[:max_quota])
            assigned.update(kept[:max_quota])
            for tp in kept[max_quota:]:
                maybe_revoked[tp] = consumer
        else:
            mine.extend(kept[:min_quota])
            assigned.update(kept[:min_quota])
            for tp in kept[min_quota:]:
                maybe_revoked[tp] = consumer
            if over < expected_over:
                exactly_min.append(consumer)

    topics = sorted(partitions_per_topic, key=_jkey)
    unassigned = [tp for tp in _all_partitions(topics, partitions_per_topic) if tp not in assigned]
    under_min.sort(key=_jkey)
    exactly_min.sort(key=_jkey)
    unassigned = racks.sort_partitions(unassigned)

    def give(tp: TopicPartition, consumer: str) -> int:
        mine = assignment[consumer]
        mine.append(tp)
        # Every owned partition that could stay did: this one is new to the member, and
        # moves from another member if one owned it (assignNewPartition).
        if (tp in maybe_revoked and maybe_revoked[tp] != consumer) or tp in multiple_owners:
            transferring[tp] = consumer
        return len(mine)

    # assignRackAwareRoundRobin
    if racks.consumer_racks:
        next_index = 0
        left: list[TopicPartition] = []
        for tp in unassigned:
            taker: str | None = None
            index = racks.next_rack_consumer(tp, under_min, next_index)
            if index >= 0:
                taker = under_min[index]
                count = len(assignment[taker]) + 1
                if count >= min_quota:
                    under_min.remove(taker)
                    if count < max_quota and over < expected_over:
                        exactly_min.append(taker)
                else:
                    index += 1
                next_index = index % len(under_min) if under_min else 0
            elif exactly_min:
                first = racks.next_rack_consumer(tp, exactly_min, 0)
                if first >= 0:
                    taker = exactly_min[first]
                    if len(assignment[taker]) + 1 == max_quota:
                        del exactly_min[first]
                        over += 1
                        if over == expected_over:
                            exactly_min.clear()
            if taker is not None:
                give(tp, taker)
            else:
                left.append(tp)
        unassigned = left

    # assignRoundRobin: under-min members in turn, then exactly-min ones up to max_quota.
    it = 0  # the iterator over under_min (Java's unfilledConsumerIter)
    for tp in unassigned:
        if it < len(under_min):
            consumer = under_min[it]
            it += 1
        elif not under_min and not exactly_min:
            raise AssertionError(f"no member left to take {tp} (a bug in the sticky assignor)")
        elif not under_min:
            consumer = exactly_min.pop(0)
            it = 0
        else:
            it = 0
            consumer = under_min[it]
            it += 1
        count = give(tp, consumer)
        if count == min_quota and consumer in under_min:
            # unfilledConsumerIter.remove(): the member just returned by the iterator.
            under_min.remove(consumer)
            it -= 1
            exactly_min.append(consumer)
        elif count == max_quota:
            over += 1

    # verifyUnfilledMembers
    for consumer in under_min:
        if over != expected_over or len(assignment[consumer]) != min_quota:
            raise AssertionError(
                f"member {consumer} did not reach its quota {min_quota} (a bug in the sticky "
                "assignor)"
            )
    return assignment, transferring


# -- the general path (GeneralAssignmentBuilder) -----------------------------------------


class _SortedMembers:
    """``sortedCurrentSubscriptions``: members by (assignment size, member id)."""

    def __init__(self, assignment: Mapping[str, list[TopicPartition]]) -> None:
        self._assignment = assignment
        self._entries: list[tuple[int, bytes, str]] = []
        self._at: dict[str, tuple[int, bytes, str]] = {}

    def add(self, member: str) -> None:
        entry = (len(self._assignment[member]), _jkey(member), member)
        bisect.insort(self._entries, entry)
        self._at[member] = entry

    def discard(self, member: str) -> None:
        entry = self._at.pop(member, None)
        if entry is not None:
            self._entries.pop(bisect.bisect_left(self._entries, entry))

    def first(self) -> str:
        return self._entries[0][2]

    def last(self) -> str:
        return self._entries[-1][2]

    def __iter__(self) -> Iterator[str]:
        return iter([e[2] for e in self._entries])


@dataclass
class _Movements:
    """``PartitionMovements``: where each partition moved from and to in this assignment."""

    by_topic: dict[str, dict[tuple[str, str], set[TopicPartition]]] = field(default_factory=dict)
    moves: dict[TopicPartition, tuple[str, str]] = field(default_factory=dict)

    def _remove(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self.moves.pop(tp)
        topic = self.by_topic[tp.topic]
        topic[pair].discard(tp)
        if not topic[pair]:
            del topic[pair]
        if not topic:
            del self.by_topic[tp.topic]
        return pair

    def _add(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self.moves[tp] = pair
        self.by_topic.setdefault(tp.topic, {}).setdefault(pair, set()).add(tp)

    def move(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self.moves:
            src, _dst = self._remove(tp)
            if src != new:  # not moving back where it came from
                self._add(tp, (src, new))
        else:
            self._add(tp, (old, new))

    def actual_partition(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        """``getTheActualPartitionToBeMoved``: rather than move ``tp`` from ``old`` to
        ``new``, move back one of the topic's partitions that went from ``new`` to ``old``."""
        topic = self.by_topic.get(tp.topic)
        if topic is None:
            return tp
        if tp in self.moves:
            old = self.moves[tp][0]
        reverse = topic.get((new, old))
        if not reverse:
            return tp
        return min(reverse, key=_tp_key)

    def is_sticky(self) -> bool:
        """No topic has partitions that moved both ways between two members (a cycle of
        length 2, ``hasCycles``)."""
        for pairs in self.by_topic.values():
            for src, dst in pairs:
                if (dst, src) in pairs:
                    log.error("stickiness is violated: %s and %s swap partitions", src, dst)
                    return False
        return True


def _general(
    partitions_per_topic: Mapping[str, int],
    racks: _RackInfo,
    owned: dict[str, list[TopicPartition]],
    members: Mapping[str, MemberData],
    max_generation: int,
) -> tuple[dict[str, list[TopicPartition]], bool]:
    """Members subscribe to different topics: keep what stays valid, give the rest to the
    least loaded eligible member, then move partitions towards balance. Returns the
    assignment and whether it is sticky."""
    topic_consumers: dict[str, list[str]] = {t: [] for t in partitions_per_topic}
    consumer_topics: dict[str, set[str]] = {}
    current: dict[str, list[TopicPartition]] = {c: list(tps) for c, tps in owned.items()}
    for consumer in sorted(members, key=_jkey):
        topics = {t for t in members[consumer].topics if t in partitions_per_topic}
        consumer_topics[consumer] = topics
        for t in sorted(topics, key=_jkey):
            topic_consumers[t].append(consumer)
        current.setdefault(consumer, [])
    partition_consumer = {tp: c for c, tps in current.items() for tp in tps}

    def topic_order(t: str) -> tuple[int, bytes]:  # TopicComparator
        return len(topic_consumers[t]), _jkey(t)

    def partition_order(tp: TopicPartition) -> tuple[int, bytes, int]:  # PartitionComparator
        return len(topic_consumers[tp.topic]), _jkey(tp.topic), tp.partition

    sorted_all = _all_partitions(sorted(topic_consumers, key=topic_order), partitions_per_topic)

    # prepopulateCurrentAssignments: the previous owner of each partition from an earlier
    # generation (the highest generation below the latest).
    previous: dict[TopicPartition, tuple[str, int]] = {}
    for consumer in _hash_map_order(members):
        data = members[consumer]
        if data.generation is not None and data.generation < max_generation:
            generation = data.generation
        elif data.generation is None and max_generation > DEFAULT_GENERATION:
            generation = DEFAULT_GENERATION
        else:
            continue
        for tp in data.partitions:
            if tp not in previous or generation > previous[tp][1]:
                previous[tp] = (consumer, generation)

    # assignOwnedPartitions
    revocation_required = False
    assigned_owned: list[TopicPartition] = []
    for consumer in sorted(current, key=_jkey):
        if consumer not in members:
            for tp in current.pop(consumer):
                partition_consumer.pop(tp, None)
            continue
        keep = []
        for tp in current[consumer]:
            if tp.topic not in topic_consumers:
                partition_consumer.pop(tp, None)
            elif tp.topic not in members[consumer].topics or racks.mismatch(consumer, tp):
                revocation_required = True
            else:
                keep.append(tp)
                assigned_owned.append(tp)
        current[consumer] = keep
    taken = set(assigned_owned)
    unassigned = [tp for tp in sorted_all if tp not in taken]

    by_size = _SortedMembers(current)
    for consumer in current:
        by_size.add(consumer)
    movements = _Movements()

    def max_size(consumer: str) -> int:  # getMaxAssignmentSize
        return sum(partitions_per_topic[t] for t in consumer_topics[consumer])

    def is_balanced() -> bool:
        low = len(current[by_size.first()])
        high = len(current[by_size.last()])
        if low >= high - 1:
            return True
        owner = {tp: c for c, tps in current.items() for tp in tps}
        for consumer in by_size:
            mine = current[consumer]
            if len(mine) == max_size(consumer):
                continue
            have = set(mine)
            for topic in consumer_topics[consumer]:
                for p in range(partitions_per_topic[topic]):
                    tp = TopicPartition(topic, p)
                    other = owner.get(tp)
                    if tp not in have and other is not None and len(mine) + 1 < len(current[other]):
                        return False
        return True

    def balance_score(assignment: Mapping[str, list[TopicPartition]]) -> int:
        sizes = [len(v) for v in assignment.values()]
        return sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1 :])

    def assign_one(tp: TopicPartition, rack_match: bool) -> bool:  # maybeAssignPartition
        for consumer in by_size:
            if tp.topic in consumer_topics[consumer] and not (
                rack_match and racks.mismatch(consumer, tp)
            ):
                by_size.discard(consumer)
                current[consumer].append(tp)
                partition_consumer[tp] = consumer
                by_size.add(consumer)
                return True
        return False

    def topic_movable(topic: str) -> bool:  # canTopicParticipateInReassignment
        return len(topic_consumers[topic]) >= 2

    def consumer_movable(consumer: str) -> bool:  # canConsumerParticipateInReassignment
        mine = current[consumer]
        if len(mine) < max_size(consumer):
            return True
        return any(topic_movable(tp.topic) for tp in mine)

    def process_move(tp: TopicPartition, new: str) -> None:  # processPartitionMovement
        old = partition_consumer[tp]
        by_size.discard(old)
        by_size.discard(new)
        movements.move(tp, old, new)
        current[old].remove(tp)
        current[new].append(tp)
        partition_consumer[tp] = new
        by_size.add(new)
        by_size.add(old)

    def reassign(tp: TopicPartition, new: str | None = None) -> None:  # reassignPartition
        if new is None:
            new = next(c for c in by_size if tp.topic in consumer_topics[c])
        old = partition_consumer[tp]
        process_move(movements.actual_partition(tp, old, new), new)

    def perform(partitions: list[TopicPartition]) -> bool:  # performReassignments
        performed = False
        while True:
            modified = False
            for tp in partitions:
                if is_balanced():
                    break
                consumer = partition_consumer[tp]
                prev = previous.get(tp)
                # (Java also moves it to a previous owner that no longer takes part or no
                # longer subscribes to the topic; that would assign an unsubscribed topic.)
                if (
                    prev is not None
                    and prev[0] in current
                    and tp.topic in consumer_topics[prev[0]]
                    and len(current[consumer]) > len(current[prev[0]]) + 1
                ):
                    reassign(tp, prev[0])
                    performed = modified = True
                    continue
                found = False
                rack = racks.consumer_racks.get(consumer)
                tp_racks = racks.partition_racks.get(tp, frozenset())
                if rack is not None and rack in tp_racks:
                    for other in topic_consumers[tp.topic]:
                        other_rack = racks.consumer_racks.get(other)
                        if other_rack is None or other_rack not in tp_racks:
                            continue
                        if len(current[consumer]) > len(current[other]) + 1:
                            reassign(tp)
                            performed = modified = found = True
                            break
                if not found:
                    for other in topic_consumers[tp.topic]:
                        if len(current[consumer]) > len(current[other]) + 1:
                            reassign(tp)
                            performed = modified = True
                            break
            if not modified:
                return performed

    # balance
    initializing = not current[by_size.last()] if current else True
    to_assign = unassigned
    if racks.consumer_racks:
        to_assign = [tp for tp in unassigned if not assign_one(tp, True)]
    for tp in to_assign:
        if topic_consumers[tp.topic]:
            assign_one(tp, False)

    fixed_partitions = {
        TopicPartition(t, p)
        for t in topic_consumers
        if not topic_movable(t)
        for p in range(partitions_per_topic[t])
    }
    sorted_all = [tp for tp in sorted_all if tp not in fixed_partitions]
    unassigned = [tp for tp in unassigned if tp not in fixed_partitions]
    fixed: dict[str, list[TopicPartition]] = {}
    for consumer in sorted(consumer_topics, key=_jkey):
        if not consumer_movable(consumer):
            by_size.discard(consumer)
            fixed[consumer] = current.pop(consumer)

    before = {c: list(tps) for c, tps in current.items()}
    before_owner = dict(partition_consumer)
    if not revocation_required:
        perform(unassigned)
    performed = perform(sorted_all)
    if not initializing and performed and balance_score(current) >= balance_score(before):
        current.clear()
        current.update(before)
        partition_consumer.clear()
        partition_consumer.update(before_owner)
    for consumer, tps in fixed.items():
        current[consumer] = tps
        by_size.add(consumer)
    return current, movements.is_sticky()


# -- the assignors -----------------------------------------------------------------------


def sticky_assign(
    members: Mapping[str, MemberData],
    partitions_per_topic: Mapping[str, int],
    partition_racks: Mapping[str, Sequence[Collection[str]]] | None = None,
) -> StickyResult:
    """The sticky assignment of ``AbstractStickyAssignor.assignPartitions`` (3.5+).

    Args:
        members: member id -> what it subscribes to and owned (:class:`MemberData`).
        partitions_per_topic: topic -> partition count; topics nobody subscribes to and
            topics with no (or 0) partitions are left out, as ``AbstractPartitionAssignor``.
        partition_racks: topic -> per partition the racks of its replicas, for KIP-881
            rack-aware assignment when members have racks (``RackInfo``).

    Returns:
        A :class:`StickyResult`; every member has an entry in its assignment.

    Raises:
        AssertionError: the constrained path's own consistency checks failed (Java's
            ``IllegalStateException``: a bug, not bad input).
    """
    subscribed = set[str]().union(*(m.topics for m in members.values())) if members else set()
    counts = {t: n for t, n in partitions_per_topic.items() if t in subscribed and n > 0}
    racks = _RackInfo(counts, members, partition_racks)
    owned: dict[str, list[TopicPartition]] = {}
    multiple: set[TopicPartition] = set()
    equal, max_generation = _owned_and_equal(counts, members, owned, multiple)
    if not members:
        return StickyResult({}, {}, max_generation)
    if equal:
        assignment, transferring = _constrained(counts, racks, owned, multiple)
        result = StickyResult(assignment, transferring, max_generation)
    else:
        assignment, sticky = _general(counts, racks, owned, members, max_generation)
        result = StickyResult(assignment, None, max_generation, sticky)
    for consumer in members:
        result.assignment.setdefault(consumer, [])
    for tps in result.assignment.values():
        tps.sort(key=_tp_key)
    return result


def cooperative_sticky_assign(
    members: Mapping[str, MemberData],
    partitions_per_topic: Mapping[str, int],
    partition_racks: Mapping[str, Sequence[Collection[str]]] | None = None,
) -> StickyResult:
    """``CooperativeStickyAssignor.assignPartitions``: the sticky assignment, minus every
    partition that moves from one member to another (``adjustAssignment``): its owner is
    told to revoke it (it is no longer in the owner's assignment) and rejoins, and the
    follow-up rebalance gives it to its new owner (KIP-429).

    Args and Raises: as :func:`sticky_assign`.

    Returns:
        A :class:`StickyResult` whose ``assignment`` leaves the moving partitions out and
        whose ``transferring`` names them with the member they go to next.
    """
    result = sticky_assign(members, partitions_per_topic, partition_racks)
    transferring = result.transferring
    if transferring is None:
        # computePartitionsTransferringOwnership: added to one member, revoked from another.
        added: dict[TopicPartition, str] = {}
        revoked: set[TopicPartition] = set()
        for consumer, assigned in result.assignment.items():
            mine = set(members[consumer].owned_partitions) if consumer in members else set()
            now = set(assigned)
            for tp in assigned:
                if tp not in mine:
                    added[tp] = consumer
            revoked.update(tp for tp in mine if tp not in now)
        transferring = {tp: c for tp, c in added.items() if tp in revoked}
    for tp, consumer in transferring.items():
        if tp in result.assignment.get(consumer, ()):
            result.assignment[consumer].remove(tp)
    result.transferring = transferring
    return result


def is_sticky(result: StickyResult) -> bool:
    """Whether the assignment moved no partition both ways between two members (see
    :attr:`StickyResult.sticky`)."""
    return result.sticky


# -- user data ----------------------------------------------------------------------------


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int | None) -> bytes:
    """``StickyAssignor.serializeTopicPartitionAssignment``: ``StickyAssignorUserData`` v1
    (``previous_assignment``: array of (topic, array of int32); ``generation``: int32), or v0
    without a generation.

    Args:
        partitions: what the member owned after its last assignment.
        generation: the generation of that assignment; ``None`` for v0.

    Returns:
        The user data bytes of a ``"sticky"`` subscription.
    """
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(set(partitions), key=_tp_key):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    parts = [struct.pack(">i", len(by_topic))]
    for topic, ps in by_topic.items():
        parts.append(_string(topic))
        parts.append(struct.pack(f">i{len(ps)}i", len(ps), *ps))
    if generation is not None:
        parts.append(struct.pack(">i", generation))
    return b"".join(parts)


def decode_sticky_user_data(data: bytes | None) -> tuple[list[TopicPartition], int | None]:
    """``StickyAssignor.memberData``: ``(previous assignment, generation)`` from a
    ``"sticky"`` member's user data (v1, else v0 without a generation). Null or empty user
    data is ``([], None)``; bytes that are neither version are ``([], -1)``, as Java ignores
    a previous assignment it cannot parse. Never raises."""
    if not data:
        return [], None
    try:
        at = 0
        (n,) = struct.unpack_from(">i", data, at)
        at += 4
        partitions: list[TopicPartition] = []
        for _ in range(n):
            (length,) = struct.unpack_from(">h", data, at)
            at += 2
            if length < 0 or at + length > len(data):
                raise ValueError("bad topic")
            topic = data[at : at + length].decode("utf-8")
            at += length
            (count,) = struct.unpack_from(">i", data, at)
            at += 4
            if count < 0:
                raise ValueError("bad partitions")
            ps = struct.unpack_from(f">{count}i", data, at)
            at += 4 * count
            partitions.extend(TopicPartition(topic, p) for p in ps)
        generation: int | None = None
        if len(data) - at >= 4:
            (generation,) = struct.unpack_from(">i", data, at)
        return partitions, generation
    except (struct.error, ValueError, UnicodeDecodeError):
        return [], DEFAULT_GENERATION


def encode_cooperative_user_data(generation: int) -> bytes:
    """``CooperativeStickyAssignor.subscriptionUserData``: the member's last generation
    (int32), for leaders that read a v0/v1 subscription (before ``generation_id``, v2)."""
    return struct.pack(">i", generation)


def decode_cooperative_user_data(data: bytes | None) -> int | None:
    """The generation in a ``"cooperative-sticky"`` member's user data: ``None`` for none,
    -1 for bytes that do not hold one (as ``CooperativeStickyAssignor.memberData``). Never
    raises."""
    if data is None:
        return None
    if len(data) < 4:
        return DEFAULT_GENERATION
    value: int = struct.unpack_from(">i", data)[0]
    return value


def member_data(
    strategy: str,
    topics: Iterable[str],
    *,
    user_data: bytes | None,
    owned_partitions: Iterable[TopicPartition],
    generation_id: int | None,
    rack: str | None = None,
) -> MemberData:
    """What the leader's sticky assignor reads from one member's subscription.

    ``"sticky"`` (``StickyAssignor.memberData``): the previous assignment and generation from
    the user data, always (an eager member owns nothing when it joins). ``"cooperative-sticky"``
    (``CooperativeStickyAssignor.memberData``): the subscription's ``owned_partitions`` with its
    ``generation_id`` (v2+), or, from an older member, with the generation in its user data.

    Args:
        strategy: ``"sticky"`` or ``"cooperative-sticky"``.
        topics: the subscription's topics.
        user_data: its user data (``None``: null).
        owned_partitions: its ``owned_partitions`` (v1+; empty before).
        generation_id: its ``generation_id`` (v2+; ``None`` before).
        rack: its ``rack_id`` (v3+).

    Returns:
        The member's :class:`MemberData`.

    Raises:
        ValueError: ``strategy`` is not a sticky assignor's name.
    """
    owned = tuple(owned_partitions)
    partitions: tuple[TopicPartition, ...]
    generation: int | None
    if strategy == "sticky":
        previous, generation = decode_sticky_user_data(user_data)
        partitions = tuple(previous)
    elif strategy == "cooperative-sticky":
        partitions = owned
        if generation_id is not None:
            generation = generation_id
        else:
            generation = decode_cooperative_user_data(user_data)
    else:
        raise ValueError(f"{strategy!r} is not a sticky assignor")
    return MemberData(
        topics=frozenset(topics),
        partitions=partitions,
        generation=generation,
        subscription_generation=generation_id,
        owned_partitions=owned,
        rack=rack or None,
    )
