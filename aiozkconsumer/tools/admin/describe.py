"""Describing a ZooKeeper-coordinated group and checking its ownership (Kafka 0.10.2.1).

:class:`DescribeTools` reads a group's nodes and hands them to the pure judges of
:mod:`~aiozkconsumer.tools.admin.judges`: per partition its offset, log end offset, lag and
owner (``ConsumerGroupCommand --describe --zookeeper``, the ``ConsumerOffsetChecker`` view),
the members and what each owns (``--members``), whether the group is stable and which
assignment strategy it runs (``--state``), and the rebalance check
(``VerifyConsumerRebalance``, whose rules are :func:`~aiozkconsumer.tools.check_ownership`).
Each answer is a frozen record that turns itself into JSON (``to_json``):
:class:`GroupDescription` of :class:`PartitionOffsetState`, :class:`GroupMembers` of
:class:`MemberDescription`, :class:`GroupState` and :class:`RebalanceVerification`.

A node of a group that does not parse (a registration or offset node written by hand) does not
fail a description: it is reported as a :class:`~aiozkconsumer.tools.MalformedNode` beside
what did parse.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from ...errors import InvalidConfigError
from ...offsets import NO_OFFSET
from ...records import TopicPartition
from ...subscription import TopicCount, construct_topic_count
from ...zk import layout
from .judges import (
    check_ownership,
    consumer_id_host,
    group_state,
    infer_assignment_strategy,
    member_assignments,
    owner_consumer_id,
    subscribed_thread_ids,
)
from .nodes import MalformedNode, MemberInfo
from .session import AdminSession

__all__ = [
    "DescribeTools",
    "GroupDescription",
    "GroupMembers",
    "GroupState",
    "MemberDescription",
    "OffsetsStorage",
    "PartitionOffsetState",
    "RebalanceVerification",
]

OffsetsStorage = Literal["zookeeper", "kafka"]
"""Where :meth:`GroupAdmin.describe_group` reads committed offsets (``offsets.storage``)."""


@dataclass(frozen=True)
class PartitionOffsetState:
    """One partition of a group, as ``ConsumerGroupCommand`` / ``ConsumerOffsetChecker`` show it.

    Attributes:
        topic: the topic.
        partition: the partition number.
        offset: the committed offset (next to read), ``None`` when none is committed.
        log_end_offset: the partition's log end offset, ``None`` when the leader did not
            answer.
        owner: the owner node's value (a thread id), ``None`` when the partition has no owner.
    """

    topic: str
    partition: int
    offset: int | None
    log_end_offset: int | None
    owner: str | None

    @property
    def lag(self) -> int | None:
        """``log_end_offset - offset``, ``None`` when either is unknown."""
        if self.offset is None or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.offset

    @property
    def consumer_id(self) -> str | None:
        """The owning member's consumer id (the owner without ``-<thread>``)."""
        return None if self.owner is None else owner_consumer_id(self.owner)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every field and the derived ones."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "current_offset": self.offset,
            "log_end_offset": self.log_end_offset,
            "lag": self.lag,
            "consumer_id": self.consumer_id,
            "owner": self.owner,
        }


@dataclass(frozen=True)
class GroupDescription:
    """What ``groups describe`` shows of a group.

    Attributes:
        group: the group id.
        partitions: every partition of the group's topics, sorted by topic and partition.
        members: the live members whose registration parsed, sorted by consumer id.
        malformed: the group's registration, owner and offset nodes that do not parse
            (their partition shows no offset / no owner), sorted by path.
    """

    group: str
    partitions: tuple[PartitionOffsetState, ...]
    members: tuple[MemberInfo, ...]
    malformed: tuple[MalformedNode, ...] = ()

    @property
    def members_without_partitions(self) -> tuple[str, ...]:
        """Consumer ids of live members that own no partition."""
        owning = {p.consumer_id for p in self.partitions}
        return tuple(m.consumer_id for m in self.members if m.consumer_id not in owning)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "group": self.group,
            "partitions": [p.to_json() for p in self.partitions],
            "members": [m.to_json() for m in self.members],
            "members_without_partitions": list(self.members_without_partitions),
            "malformed": [m.to_json() for m in self.malformed],
        }


@dataclass(frozen=True)
class MemberDescription:
    """A live member of a ZooKeeper-coordinated group, as ``groups describe --members``
    shows it.

    Attributes:
        consumer_id: the member's consumer id (its registration node's name).
        host: the host in a generated consumer id (:func:`consumer_id_host`); ``None`` for
            a ``consumer.id`` set by hand.
        client_id: always ``None``: ZooKeeper does not record a member's ``client.id``.
        pattern: the registration's ``pattern`` (``static``, ``white_list``,
            ``black_list``); ``None`` if the node vanished while read.
        streams: the registration's subscription: topic (or a wildcard's regex) -> stream
            count.
        assignment: topic -> the partitions whose owner node holds one of the member's
            thread ids, sorted.
    """

    consumer_id: str
    host: str | None
    client_id: str | None
    pattern: str | None
    streams: Mapping[str, int]
    assignment: Mapping[str, tuple[int, ...]]

    def __post_init__(self) -> None:
        object.__setattr__(self, "streams", MappingProxyType(dict(self.streams)))
        object.__setattr__(
            self, "assignment", MappingProxyType(dict(sorted(self.assignment.items())))
        )

    def __hash__(self) -> int:
        return hash((self.consumer_id, frozenset(self.assignment.items())))

    @property
    def partition_count(self) -> int:
        """How many partitions the member owns."""
        return sum(len(ps) for ps in self.assignment.values())

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "consumer_id": self.consumer_id,
            "host": self.host,
            "client_id": self.client_id,
            "pattern": self.pattern,
            "streams": dict(self.streams),
            "assignment": {t: list(ps) for t, ps in self.assignment.items()},
        }


@dataclass(frozen=True)
class GroupMembers:
    """What ``groups describe --members`` shows of a group.

    Attributes:
        group: the group id.
        members: the live members whose registration parsed, sorted by consumer id.
        malformed: the registration and owner nodes that do not parse, sorted by path.
    """

    group: str
    members: tuple[MemberDescription, ...]
    malformed: tuple[MalformedNode, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "group": self.group,
            "members": [m.to_json() for m in self.members],
            "malformed": [m.to_json() for m in self.malformed],
        }


@dataclass(frozen=True)
class GroupState:
    """What ``groups describe --state`` shows of a group (:func:`group_state`).

    Attributes:
        group: the group id.
        state: ``"Empty"``, ``"Rebalancing"`` or ``"Stable"``.
        assignment_strategy: :func:`infer_assignment_strategy`'s answer; ``None`` unless
            the group is stable and every registration parsed.
        members: the live members' consumer ids (malformed registrations included: their
            nodes are live), sorted.
        partitions_without_live_owner: the subscribed partitions with no owner node or an
            owner that is no live member, each with its owner node's value (``None``:
            none), sorted.
        malformed: the registration and owner nodes that do not parse, and wildcard
            registrations whose regex does not compile, sorted by path.
    """

    group: str
    state: str
    assignment_strategy: str | None
    members: tuple[str, ...]
    partitions_without_live_owner: tuple[tuple[TopicPartition, str | None], ...] = ()
    malformed: tuple[MalformedNode, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "group": self.group,
            "state": self.state,
            "assignment_strategy": self.assignment_strategy,
            "members": list(self.members),
            "partitions_without_live_owner": [
                {"topic": tp.topic, "partition": tp.partition, "owner": owner}
                for tp, owner in self.partitions_without_live_owner
            ],
            "malformed": [m.to_json() for m in self.malformed],
        }


@dataclass(frozen=True)
class RebalanceVerification:
    """The outcome of :meth:`GroupAdmin.verify_rebalance`.

    Attributes:
        group: the group id.
        members: the live members' consumer ids.
        owners: topic -> partition -> owner node value, for every subscribed topic's
            partitions (``None``: no owner).
        problems: what is wrong, in the original's wording; empty when the rebalance
            succeeded.
        malformed: the registration and owner nodes that do not parse, sorted by path: left
            out of the check (whose other findings stand), and the verification fails.
    """

    group: str
    members: tuple[str, ...]
    owners: Mapping[str, Mapping[int, str | None]]
    problems: tuple[str, ...] = field(default=())
    malformed: tuple[MalformedNode, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether every partition has a valid owner (and every node parsed)."""
        return not self.problems and not self.malformed

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "group": self.group,
            "ok": self.ok,
            "members": list(self.members),
            "owners": {
                topic: {str(p): o for p, o in sorted(parts.items())}
                for topic, parts in sorted(self.owners.items())
            },
            "problems": list(self.problems),
            "malformed": [m.to_json() for m in self.malformed],
        }


class DescribeTools(AdminSession):
    """``groups describe`` (offsets, ``--members``, ``--state``) and ``verify``."""

    async def describe_group(
        self,
        group: str,
        *,
        topics: Iterable[str] | None = None,
        offsets_storage: OffsetsStorage = "zookeeper",
        isolation_level: str = "read_uncommitted",
    ) -> GroupDescription:
        """Describe a group: per partition its offset, log end offset, lag and owner.

        As ``ConsumerGroupCommand --describe --zookeeper`` (0.10.2), which also backs the
        ``ConsumerOffsetChecker`` view.

        Args:
            group: the group id.
            topics: the topics to show; default: every topic the group has owner or offset
                nodes for.
            offsets_storage: ``"zookeeper"`` reads the offset nodes; ``"kafka"`` asks the
                group's coordinator (OffsetFetch) and falls back to ZooKeeper where Kafka has
                no offset, as the original tools did.
            isolation_level: ``"read_committed"``: the log end offset is the last stable
                offset, so the lag is what a ``read_committed`` member has left to read
                (records of open transactions do not count); default the high watermark.

        Returns:
            The description. A registration, owner or offset node that does not parse is
            listed in its ``malformed`` (its member left out, its partition without an
            owner / offset) rather than failing the whole group.

        Raises:
            UnknownGroupError: ``/consumers/<group>`` does not exist.
            NoBrokersError, KafkaConnectionError, BrokerNotAvailableError: the log end offsets
                (or Kafka-stored offsets) could not be read.
            OffsetFetchError: Kafka-stored offsets could not be read.
            MalformedZookeeperDataError: a topic node of the cluster does not parse.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        await self._require_group(group)
        members, malformed = await self._read_members(group)
        wanted = sorted(set(topics)) if topics is not None else await self.group_topics(group)
        partitions = await self.partitions_for(wanted)
        tps: list[TopicPartition] = []
        owners: dict[TopicPartition, str] = {}
        offsets: dict[TopicPartition, int] = {}
        for topic in wanted:
            committed = await self._partition_nodes(
                layout.offsets_dir(group, topic), layout.decode_offset, malformed
            )
            topic_owners = await self._partition_nodes(
                layout.owners_dir(group, topic), layout.decode_owner, malformed
            )
            # Partitions ZooKeeper knows of for the group but the topic no longer has still show.
            ids = sorted(set(partitions.get(topic, ())) | set(committed) | set(topic_owners))
            for p in ids:
                tp = TopicPartition(topic, p)
                tps.append(tp)
                if p in committed:
                    offsets[tp] = committed[p]
                if p in topic_owners:
                    owners[tp] = topic_owners[p]
        if offsets_storage == "kafka" and tps:
            await self.kafka()  # unreachable brokers fail here, not after the fetch timeout
            store = self._kafka_offset_store(group)
            try:
                from_kafka = await store.fetch(tps)
            finally:
                await store.close()
            offsets.update({tp: o for tp, o in from_kafka.items() if o != NO_OFFSET})
        existing = [tp for tp in tps if tp.partition in partitions.get(tp.topic, ())]
        log_end = await self.list_offsets(existing, "latest", isolation_level=isolation_level)
        return GroupDescription(
            group=group,
            partitions=tuple(
                PartitionOffsetState(
                    tp.topic, tp.partition, offsets.get(tp), log_end.get(tp), owners.get(tp)
                )
                for tp in tps
            ),
            members=tuple(members),
            malformed=tuple(sorted(malformed, key=lambda m: m.path)),
        )

    async def _owners_of(
        self, group: str, topics: Iterable[str], malformed: list[MalformedNode]
    ) -> dict[str, dict[int, str]]:
        """Topic -> partition -> owner node value, for the topics that have owner nodes."""
        result: dict[str, dict[int, str]] = {}
        for topic in sorted(set(topics)):
            owned = await self._partition_nodes(
                layout.owners_dir(group, topic), layout.decode_owner, malformed
            )
            if owned:
                result[topic] = owned
        return result

    async def _topic_counts(
        self,
        group: str,
        members: Iterable[MemberInfo],
        malformed: list[MalformedNode] | None = None,
    ) -> dict[str, TopicCount]:
        """Consumer id -> topic count of each member whose registration was read.

        Wildcards are evaluated against the cluster's topics, read once, at the first
        wildcard. With ``malformed``, a registration whose regex does not compile is appended
        there and left out; without, its :class:`InvalidConfigError` propagates.
        """
        all_topics: list[str] | None = None
        topic_counts: dict[str, TopicCount] = {}
        for member in members:
            reg = member.registration
            if reg is None:
                continue
            if reg.is_wildcard and all_topics is None:
                all_topics = await self.all_topics()
            try:
                topic_counts[member.consumer_id] = construct_topic_count(
                    member.consumer_id, reg, all_topics or [], False
                )
            except InvalidConfigError as e:
                if malformed is None:
                    raise
                malformed.append(MalformedNode(layout.ids_path(group, member.consumer_id), str(e)))
        return topic_counts

    async def describe_members(self, group: str) -> GroupMembers:
        """The live members of a group with what each subscribes to and owns.

        As ``kafka-consumer-groups.sh --describe --members --verbose`` shows a Kafka group,
        from what ZooKeeper holds: the registration nodes (stream counts) and the owner
        nodes (assignment). Needs no broker.

        Returns:
            The members. Registration and owner nodes that do not parse are listed in its
            ``malformed``.

        Raises:
            UnknownGroupError: ``/consumers/<group>`` does not exist.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        await self._require_group(group)
        members, malformed = await self._read_members(group)
        owners_dir = f"{layout.group_dir(group)}/owners"
        owners = await self._owners_of(
            group, await self.zk.get_children(owners_dir) or [], malformed
        )
        assignment = member_assignments(owners)
        return GroupMembers(
            group=group,
            members=tuple(
                MemberDescription(
                    consumer_id=m.consumer_id,
                    host=consumer_id_host(group, m.consumer_id),
                    client_id=None,
                    pattern=None if m.registration is None else m.registration.pattern,
                    streams={} if m.registration is None else m.registration.subscription,
                    assignment={
                        t: tuple(ps) for t, ps in assignment.get(m.consumer_id, {}).items()
                    },
                )
                for m in members
            ),
            malformed=tuple(sorted(malformed, key=lambda m: m.path)),
        )

    async def describe_state(self, group: str) -> GroupState:
        """Whether a group is stable, its members and the assignment strategy it runs.

        As ``kafka-consumer-groups.sh --describe --state`` for a Kafka group. The subscribed
        topics are those of the live members' registrations (wildcards evaluated against the
        cluster's topics, as :meth:`verify_rebalance`); :func:`group_state` judges the owner
        nodes of their partitions and :func:`infer_assignment_strategy` names the strategy
        when the group is stable.

        Returns:
            The state. Registration and owner nodes that do not parse (and wildcard
            registrations whose regex does not compile) are listed in its ``malformed``.

        Raises:
            UnknownGroupError: ``/consumers/<group>`` does not exist.
            NoBrokersError, KafkaConnectionError: the topics' partitions come from Kafka
                metadata (a KRaft cluster) and no broker answered.
            MalformedZookeeperDataError: a topic node of the cluster does not parse.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        await self._require_group(group)
        live = await self.member_ids(group)
        members, malformed = await self._read_members(group)
        topic_counts = await self._topic_counts(group, members, malformed)
        subscribed = sorted(subscribed_thread_ids(topic_counts.values()))
        partitions = await self.partitions_for(subscribed) if subscribed else {}
        owners = await self._owners_of(group, subscribed, malformed)
        state, orphans = group_state(live, partitions, owners)
        strategy = None
        if state == "Stable" and not malformed:
            strategy = infer_assignment_strategy(group, topic_counts, partitions, owners)
        return GroupState(
            group=group,
            state=state,
            assignment_strategy=strategy,
            members=tuple(live),
            partitions_without_live_owner=tuple(orphans),
            malformed=tuple(sorted(malformed, key=lambda m: m.path)),
        )

    async def verify_rebalance(self, group: str) -> RebalanceVerification:
        """Check that every partition the group subscribes to has a valid owner.

        As ``VerifyConsumerRebalance`` (0.10.2.1, after KAFKA-3952): the topics are those the
        live members' registrations subscribe to (wildcards evaluated against the cluster's
        topics, internal topics included), and each partition's owner node must hold one of
        the thread ids those members have for the topic (:func:`check_ownership`).

        A registration or owner node that does not parse is reported in ``malformed`` and
        left out (its member's subscription unknown, its partition unowned); the rest is
        checked, and the verification fails (the original stopped at such a node).

        Returns:
            The verification (``ok`` is false when a problem was found).

        Raises:
            UnknownGroupError: the group does not exist.
        """
        await self._require_group(group)
        members, malformed = await self._read_members(group)
        topic_counts = await self._topic_counts(group, members, malformed)
        thread_ids = subscribed_thread_ids(topic_counts.values())
        partitions = await self.partitions_for(thread_ids)
        owners = {
            topic: await self._partition_nodes(
                layout.owners_dir(group, topic), layout.decode_owner, malformed
            )
            for topic in partitions
        }
        problems = check_ownership(partitions, owners, thread_ids, group)
        return RebalanceVerification(
            group=group,
            members=tuple(m.consumer_id for m in members),
            owners={
                topic: {p: owners[topic].get(p) for p in parts}
                for topic, parts in partitions.items()
            },
            problems=tuple(problems),
            malformed=tuple(sorted(malformed, key=lambda m: m.path)),
        )
