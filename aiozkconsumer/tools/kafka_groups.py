"""Kafka-coordinated groups as the brokers' group coordinators know them (``--bootstrap-server``).

:class:`KafkaGroupAdmin` is the ``--bootstrap-server`` side of ``kafka-consumer-groups.sh``
(``ConsumerGroupCommand``'s ``KafkaConsumerGroupService``, 0.10.2): it lists the consumer
groups the coordinators know (ListGroups, then DescribeGroups for their state) and describes one
group: its state, assignor and members (DescribeGroups, each member's assignment decoded from
the ``ConsumerProtocol`` bytes), and per partition the committed offset (OffsetFetch), the log
end offset (ListOffsets to the leader) and the lag. These are the groups of
``group.coordinator=kafka`` (and of any Java, aiokafka or confluent-kafka consumer); the
ZooKeeper-coordinated groups are :class:`~aiozkconsumer.tools.GroupAdmin`'s.

The group requests go through aiokafka's ``AIOKafkaAdminClient``, the log end offsets through
the project's :class:`~aiozkconsumer.kafka.client.KafkaClient`. aiokafka's exceptions and the
coordinators' error codes are translated here, once, into :mod:`aiozkconsumer.errors`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio
from aiokafka.admin import AIOKafkaAdminClient

from .._concurrency import gather
from .._resource import AsyncService
from ..errors import (
    BrokerNotAvailableError,
    ConsumerError,
    GroupCoordinatorError,
    KafkaConnectionError,
)
from ..kafka.client import EARLIEST, LATEST, KafkaClient, aiokafka_security_kwargs
from ..kafka.errors import AiokafkaError, IncompatibleBrokerVersion, error_name, is_retriable
from ..kafka.group import PROTOCOL_TYPE, decode_assignment
from ..kafka.group_admin import (
    ConsumerGroupDescribeRequest,
    DeleteGroupsRequest,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    ListedGroup,
    ListGroupsRequest,
    OffsetDeleteRequest,
    decode_consumer_group_describe,
    decode_describe_groups,
    decode_list_groups,
    offset_delete_errors,
)
from ..kafka.transactions import READ_COMMITTED, READ_UNCOMMITTED
from ..offsets import KafkaOffsetStore
from ..records import TopicPartition
from ..security import KafkaSecurity
from .admin import GroupActiveError, MalformedNode, ResetStorage, UnknownGroupError
from .admin.reset import reset_group_offsets
from .admin.session import leader_offsets
from .offsets_file import OffsetEntry
from .reset import ResetPlan, ResetScope, ResetSpec

__all__ = [
    "GROUP_STATES",
    "KafkaGroupAdmin",
    "KafkaGroupDescription",
    "KafkaGroupListing",
    "MemberAssignmentState",
    "PartitionAssignmentState",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

GROUP_STATES = ("Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead")
"""The states of a classic group the coordinator reports (``GroupState`` of Kafka's
``GroupMetadata``). ``Dead``: the group does not exist (any more)."""

_REBALANCING = frozenset({"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"})
_CONSUMER_PROTOCOL_TYPES = frozenset({PROTOCOL_TYPE, ""})
"""Protocol types of consumer groups: ``consumer``, and ``""`` for groups that only commit
offsets (no member ever joined), as Java's ``Admin.listConsumerGroups`` filters."""

# Error codes (org.apache.kafka.common.protocol.Errors) this module treats specially.
_REQUEST_TIMED_OUT = 7
_UNSUPPORTED_VERSION = 35
_NON_EMPTY_GROUP = 68
_GROUP_ID_NOT_FOUND = 69
_GROUP_SUBSCRIBED_TO_TOPIC = 86  # OffsetDelete of a topic live members read (KIP-496)

_BACKOFF_S = 0.1
_MAX_BACKOFF_S = 1.0
_DESCRIBE_CONCURRENCY = 8  # DescribeGroups requests in flight while listing
_CLOSE_STEP_LIMIT_S = 5.0  # each step of KafkaGroupAdmin.close, in seconds


def _kafka_storage(storage: str) -> None:
    if storage != "kafka":
        raise ValueError(f"a Kafka-coordinated group keeps its offsets in Kafka, not {storage!r}")


def _offset_delete_error(code: int) -> str | None:
    if code == 0:
        return None
    if code == _GROUP_SUBSCRIBED_TO_TOPIC:
        return "GROUP_SUBSCRIBED_TO_TOPIC: the group's live members read this topic"
    return error_name(code)


class _ErrorCode(Exception):
    """An error code in an answer, shaped like aiokafka's exceptions for :func:`_translate`."""

    def __init__(self, code: int) -> None:
        super().__init__(error_name(code))
        self.errno = code
        self.retriable = is_retriable(code)


@dataclass(frozen=True)
class KafkaGroupListing:
    """A consumer group a coordinator knows (``ConsumerGroupListing`` with its state).

    Attributes:
        group: the group id.
        state: one of :data:`GROUP_STATES` but ``Dead`` (a state a newer broker may add is
            passed on as it is).
        protocol_type: ``"consumer"``, or ``""`` for a group that only has committed offsets.
        group_type: ``"classic"`` (JoinGroup/SyncGroup) or ``"consumer"`` (KIP-848's
            protocol, ``group.protocol=consumer``), as ``kafka-consumer-groups.sh --list
            --type``.
    """

    group: str
    state: str
    protocol_type: str
    group_type: str = "classic"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "group": self.group,
            "state": self.state,
            "protocol_type": self.protocol_type,
            "type": self.group_type,
        }


@dataclass(frozen=True)
class MemberAssignmentState:
    """A member of a Kafka-coordinated group (``MemberAssignmentState`` of Kafka 2.x's command).

    Attributes:
        member_id: the member id the coordinator gave (the tool's ``CONSUMER-ID``).
        client_id: the member's ``client.id``.
        host: the address the coordinator saw the member connect from, e.g. ``/127.0.0.1``.
        assignment: the partitions the group's leader (a ``consumer`` group: the
            coordinator) assigned it, sorted; empty while the group rebalances.
        instance_id: its ``group.instance.id`` (static membership, KIP-345); ``None`` for a
            dynamic member.
    """

    member_id: str
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]
    instance_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: the member id as ``consumer_id`` (the key of ZooKeeper groups'
        members too) and the assignment as ``{topic: [partition, ...]}``."""
        by_topic: dict[str, list[int]] = {}
        for tp in self.assignment:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return {
            "consumer_id": self.member_id,
            "group_instance_id": self.instance_id,
            "client_id": self.client_id,
            "host": self.host,
            "assignment": by_topic,
        }


@dataclass(frozen=True)
class PartitionAssignmentState:
    """One partition of a Kafka-coordinated group, as ``kafka-consumer-groups.sh`` shows it.

    Attributes:
        topic: the topic.
        partition: the partition number.
        offset: the committed offset (the next to read), ``None`` when none is committed.
        log_end_offset: the partition's log end offset, ``None`` when the topic no longer has
            the partition.
        member_id: the member the partition is assigned to, ``None`` when none is.
        host: that member's host, ``None`` when unassigned.
        client_id: that member's ``client.id``, ``None`` when unassigned.
    """

    topic: str
    partition: int
    offset: int | None
    log_end_offset: int | None
    member_id: str | None = None
    host: str | None = None
    client_id: str | None = None

    @property
    def lag(self) -> int | None:
        """``log_end_offset - offset``, ``None`` when either is unknown."""
        if self.offset is None or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.offset

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; the owner's member id is ``consumer_id``, as for ZooKeeper groups."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "current_offset": self.offset,
            "log_end_offset": self.log_end_offset,
            "lag": self.lag,
            "consumer_id": self.member_id,
            "host": self.host,
            "client_id": self.client_id,
        }


@dataclass(frozen=True)
class KafkaGroupDescription:
    """What ``groups describe --coordinator kafka`` shows of a group.

    Attributes:
        group: the group id.
        state: one of :data:`GROUP_STATES` but ``Dead``.
        protocol_type: ``"consumer"``, or ``""`` for a group that only has committed offsets.
        assignor: the protocol (assignor) the coordinator chose, e.g. ``"range"``; ``None``
            while the group has none (``Empty``, ``PreparingRebalance``).
        coordinator_id: the broker id of the group's coordinator.
        coordinator: its ``host:port``.
        members: the members, sorted by member id.
        partitions: every partition the group has a committed offset for or a member is
            assigned, sorted by topic and partition.
        group_type: ``"classic"`` or ``"consumer"`` (KIP-848; its states are ``Empty``,
            ``Assigning``, ``Reconciling``, ``Stable``).
    """

    group: str
    state: str
    protocol_type: str
    assignor: str | None
    coordinator_id: int
    coordinator: str
    members: tuple[MemberAssignmentState, ...]
    partitions: tuple[PartitionAssignmentState, ...]
    group_type: str = "classic"

    @property
    def rebalancing(self) -> bool:
        """Whether the group is rebalancing (its members hold no assignment meanwhile)."""
        return self.state in _REBALANCING

    @property
    def members_without_partitions(self) -> tuple[str, ...]:
        """Member ids of the members that own none of :attr:`partitions` (with a topic filter:
        none of the topics shown)."""
        owning = {p.member_id for p in self.partitions}
        return tuple(m.member_id for m in self.members if m.member_id not in owning)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``partitions``, ``members`` and ``members_without_partitions`` as
        for ZooKeeper groups, with the group's state, assignor and coordinator)."""
        return {
            "group": self.group,
            "state": self.state,
            "protocol_type": self.protocol_type,
            "type": self.group_type,
            "assignor": self.assignor,
            "coordinator": {"id": self.coordinator_id, "address": self.coordinator},
            "partitions": [p.to_json() for p in self.partitions],
            "members": [m.to_json() for m in self.members],
            "members_without_partitions": list(self.members_without_partitions),
        }


def _partition_state(
    tp: TopicPartition,
    offsets: dict[TopicPartition, int],
    log_end: dict[TopicPartition, int],
    owners: dict[TopicPartition, MemberAssignmentState],
) -> PartitionAssignmentState:
    owner = owners.get(tp)
    return PartitionAssignmentState(
        tp.topic,
        tp.partition,
        offsets.get(tp),
        log_end.get(tp),
        None if owner is None else owner.member_id,
        None if owner is None else owner.host,
        None if owner is None else owner.client_id,
    )


class KafkaGroupAdmin(AsyncService):
    """The group tools of ``kafka-consumer-groups.sh --bootstrap-server``, over the brokers.

    Use as an async context manager::

        async with KafkaGroupAdmin("127.0.0.1:9092") as admin:
            print(await admin.list_groups())
            description = await admin.describe_group("billing")

    A request that fails in a way retrying may fix (no coordinator yet, the coordinator moved or
    is loading, a broker not answering) is tried again with a short backoff for up to
    ``request_timeout_ms``.

    Args:
        bootstrap_servers: Kafka brokers, ``host:port[,...]``.
        client_id: ``client.id`` of the requests.
        request_timeout_ms: ``request.timeout.ms`` of each request, and how long a request is
            retried.
        security: TLS and SASL of the connections (a ``--command-config`` file's
            ``security.protocol``, ``ssl.*``, ``sasl.*``); default plaintext.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "aiozkconsumer-tools",
        request_timeout_ms: int = 30000,
        security: KafkaSecurity | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.security = security or KafkaSecurity()
        self._admin: AIOKafkaAdminClient | None = None
        self._kafka: KafkaClient | None = None

    async def start(self) -> None:
        """Connect to the brokers and read the cluster metadata.

        Raises:
            KafkaConnectionError: no bootstrap broker answered.
        """
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap_servers.split(","),
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            **aiokafka_security_kwargs(self.security),
        )
        self._admin = admin
        try:
            await admin.start()
        except AiokafkaError as e:
            await self.close()
            raise KafkaConnectionError(
                f"could not reach any Kafka broker of {self.bootstrap_servers!r}: {e}"
            ) from e
        except BaseException:
            await self.close()
            raise
        kafka = KafkaClient(
            self.bootstrap_servers,
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            security=self.security,
        )
        self._kafka = kafka
        try:
            await kafka.start()
        except BaseException:
            await self.close()
            raise

    def brokers(self) -> list[tuple[int, str]]:
        """The cluster's brokers, ``[(id, "host:port")]`` sorted (from the last metadata).

        Raises:
            RuntimeError: the admin is not started.
        """
        if self._kafka is None:
            raise RuntimeError("KafkaGroupAdmin is not started")
        return self._kafka.brokers()

    async def close(self) -> None:
        """Close the admin client, then the Kafka client; never raises.

        Each close is shielded from the caller's cancellation and bounded by 5 s.
        """
        admin, kafka = self._admin, self._kafka
        self._admin = self._kafka = None
        try:
            if admin is not None:
                with anyio.move_on_after(_CLOSE_STEP_LIMIT_S, shield=True):
                    try:
                        await admin.close()
                    except Exception as e:  # closing must not hide the caller's outcome
                        log.debug("closing the admin client failed: %r", e)
        finally:
            if kafka is not None:
                with anyio.move_on_after(_CLOSE_STEP_LIMIT_S, shield=True):
                    await kafka.close()

    async def aclose(self) -> None:
        """Leaving ``async with``: :meth:`close`."""
        await self.close()

    def __repr__(self) -> str:
        state = "started" if self._admin is not None else "closed"
        return f"<KafkaGroupAdmin {self.bootstrap_servers} [{state}]>"

    # -- groups --------------------------------------------------------------------------

    async def list_groups(self) -> list[KafkaGroupListing]:
        """The consumer groups the coordinators know, with their state, sorted by group id.

        As ``kafka-consumer-groups.sh --bootstrap-server --list --state --type`` (Kafka 3.8+):
        ListGroups (v5, else v4) to every broker, keeping the groups of protocol type
        ``consumer`` or ``""`` (offsets only), classic and ``consumer`` (KIP-848) alike.

        Returns:
            The listings.

        Raises:
            BrokerNotAvailableError: a broker did not answer in time.
            GroupCoordinatorError: a broker answered with an error (e.g.
                ``CLUSTER_AUTHORIZATION_FAILED``), kept answering a retriable one, or has no
                ListGroups v4 (Kafka before 2.6).
        """
        kafka = self._started()[1]

        def from_broker(node: int) -> Callable[[], Awaitable[list[ListedGroup]]]:
            async def once() -> list[ListedGroup]:
                code, listed = decode_list_groups(await kafka.raw.send(node, ListGroupsRequest()))
                if code:
                    raise _ErrorCode(code)
                return listed

            return once

        per_broker = await gather(
            self._retrying("ListGroups", None, from_broker(node)) for node, _ in kafka.brokers()
        )
        listings = {
            g.group: KafkaGroupListing(g.group, g.state, g.protocol_type, g.group_type)
            for listed in per_broker
            for g in listed
            if g.protocol_type in _CONSUMER_PROTOCOL_TYPES and g.state != "Dead"
        }
        return [listings[g] for g in sorted(listings)]

    async def member_ids(self, group: str) -> list[str]:
        """The member ids of a group's live members, sorted; empty when it has none or does
        not exist (DescribeGroups, else ConsumerGroupDescribe for a ``consumer`` group).

        Raises:
            BrokerNotAvailableError, GroupCoordinatorError: as :meth:`describe_group`.
        """
        _, described = await self._describe(group)
        return sorted(m.member_id for m in described.members)

    async def describe_group(
        self,
        group: str,
        *,
        topics: Iterable[str] | None = None,
        isolation_level: str = "read_uncommitted",
    ) -> KafkaGroupDescription:
        """Describe a group: its state and members, per partition offset, log end offset, lag.

        As ``kafka-consumer-groups.sh --bootstrap-server --describe``: the members and their
        assignments from DescribeGroups (a ``consumer`` group, KIP-848: ConsumerGroupDescribe,
        as the Java ``Admin`` does), the committed offsets from OffsetFetch (all the group
        has), the log end offsets from each partition's leader.

        Args:
            group: the group id.
            topics: show only these topics; default: every topic the group has a committed
                offset for or a member is assigned.
            isolation_level: ``"read_committed"``: the log end offset is the last stable
                offset (the lag a ``read_committed`` member has left); default the high
                watermark.

        Returns:
            The description.

        Raises:
            UnknownGroupError: the coordinator does not know the group (state ``Dead``), or
                the group is not a consumer group (e.g. Kafka Connect's workers).
            BrokerNotAvailableError: the coordinator or a partition leader did not answer in
                time, or a partition has no leader.
            NoBrokersError: no broker answered a metadata request.
            UnknownTopicError: a leader does not know a partition's topic.
            GroupCoordinatorError: the coordinator answered with an error (e.g.
                ``GROUP_AUTHORIZATION_FAILED``), or kept answering a retriable one.
        """
        kafka = self._started()[1]
        coordinator_id, described = await self._describe(group)
        state, protocol_type = described.state, described.protocol_type
        if state == "Dead":
            raise UnknownGroupError(group, f"Consumer group '{group}' does not exist.")
        if protocol_type not in _CONSUMER_PROTOCOL_TYPES:
            raise UnknownGroupError(
                group,
                f"Group '{group}' is not a consumer group (protocol type '{protocol_type}').",
            )
        members = sorted(
            (self._member(group, raw) for raw in described.members), key=lambda m: m.member_id
        )
        offsets = await self._committed(group)
        owners = {tp: m for m in members for tp in m.assignment}
        tps = sorted(set(offsets) | set(owners))
        if topics is not None:
            wanted = set(topics)
            tps = [tp for tp in tps if tp.topic in wanted]
        log_end: dict[TopicPartition, int] = {}
        if tps:
            partitions = await kafka.partitions_for_topics({tp.topic for tp in tps})
            existing = [tp for tp in tps if tp.partition in partitions.get(tp.topic, ())]
            if existing:
                log_end = await kafka.log_end_offsets(
                    existing,
                    isolation_level=READ_COMMITTED
                    if isolation_level == "read_committed"
                    else READ_UNCOMMITTED,
                )
        return KafkaGroupDescription(
            group=group,
            state=state,
            protocol_type=protocol_type,
            assignor=described.assignor or None,
            coordinator_id=coordinator_id,
            coordinator=kafka.broker_address(coordinator_id),
            members=tuple(members),
            partitions=tuple(_partition_state(tp, offsets, log_end, owners) for tp in tps),
            group_type=described.group_type,
        )

    # -- what the console consumer asks of a cluster -------------------------------------

    async def kafka(self) -> KafkaClient:
        """The started Kafka client (as :meth:`GroupAdmin.kafka
        <aiozkconsumer.tools.GroupAdmin.kafka>`).

        Raises:
            ConsumerError: the admin is not started.
        """
        return self._started()[1]

    async def all_topics(self) -> list[str]:
        """Every topic of the cluster, sorted (Kafka metadata).

        Raises:
            NoBrokersError, KafkaConnectionError: no broker answered.
        """
        return sorted(await self._started()[1].all_topics())

    async def group_exists(self, group: str) -> bool:
        """Whether the coordinator knows the group: it has members or committed offsets.

        Raises:
            BrokerNotAvailableError, GroupCoordinatorError: as :meth:`describe_group`.
        """
        _, described = await self._describe(group)
        return described.state != "Dead" or await self.group_has_offsets(group)

    async def group_has_offsets(self, group: str) -> bool:
        """Whether the group has a committed offset.

        Raises:
            BrokerNotAvailableError, GroupCoordinatorError: as :meth:`describe_group`.
        """
        return bool(await self._committed(group))

    async def delete_group_unchecked(self, group: str) -> None:
        """Delete the group if it exists and is empty; a group that does not exist, or still
        has members (they left a moment ago and the coordinator has not seen it yet: it is
        logged), is left as it is.

        Raises:
            BrokerNotAvailableError, GroupCoordinatorError: as :meth:`delete_group`.
        """
        try:
            await self.delete_group(group)
        except UnknownGroupError:
            pass
        except GroupActiveError as e:
            log.warning("group %r not deleted: %s", group, e)

    # -- offsets (the ResetSource of offsets reset) ----------------------------------------

    async def partitions_for(self, topics: Iterable[str]) -> dict[str, tuple[int, ...]]:
        """The partition ids of each topic (Kafka metadata); an unknown topic has none.

        Raises:
            NoBrokersError: no broker answered a metadata request.
        """
        return await self._started()[1].partitions_for_topics(topics)

    async def list_offsets(
        self,
        tps: Iterable[TopicPartition],
        which: Literal["earliest", "latest"],
        *,
        isolation_level: str = "read_uncommitted",
    ) -> dict[TopicPartition, int]:
        """Each partition's log start (``"earliest"``) or log end (``"latest"``) offset, from
        its leader; as :meth:`GroupAdmin.list_offsets
        <aiozkconsumer.tools.GroupAdmin.list_offsets>`.

        Raises:
            NoBrokersError: no broker answered a metadata request.
            BrokerNotAvailableError: a partition has no leader, or its leader is unreachable.
        """
        isolation = READ_COMMITTED if isolation_level == "read_committed" else READ_UNCOMMITTED
        return await leader_offsets(
            self._started()[1], tps, EARLIEST if which == "earliest" else LATEST, isolation
        )

    async def offsets_for_times(
        self, tps: Iterable[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int]:
        """The first offset at or after ``timestamp_ms`` (epoch ms, >= 0) of each partition,
        ``-1`` where no record is that recent (ListOffsets, as ``offsetsForTimes``).

        Raises:
            NoBrokersError, BrokerNotAvailableError: as :meth:`list_offsets`.
            ValueError: ``timestamp_ms`` is negative.
        """
        if timestamp_ms < 0:
            raise ValueError(f"timestamp_ms must be >= 0, got {timestamp_ms}")
        return await leader_offsets(self._started()[1], tps, timestamp_ms)

    async def committed_offsets(
        self,
        group: str,
        tps: Iterable[TopicPartition] | None = None,
        *,
        storage: ResetStorage = "kafka",
        malformed: list[MalformedNode] | None = None,
    ) -> dict[TopicPartition, int]:
        """A group's committed offsets (OffsetFetch of every partition it has one for).

        Args:
            group: the group id.
            tps: keep only these partitions; ``None``: all.
            storage: must be ``"kafka"`` (the signature of
                :meth:`GroupAdmin.committed_offsets
                <aiozkconsumer.tools.GroupAdmin.committed_offsets>`).
            malformed: unused (Kafka has no malformed nodes).

        Returns:
            ``{tp: offset}`` of the partitions with a committed offset.

        Raises:
            ValueError: ``storage`` is not ``"kafka"``.
            BrokerNotAvailableError, GroupCoordinatorError: as :meth:`describe_group`.
        """
        _kafka_storage(storage)
        offsets = await self._committed(group)
        if tps is None:
            return offsets
        wanted = set(tps)
        return {tp: o for tp, o in offsets.items() if tp in wanted}

    async def write_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int], storage: ResetStorage = "kafka"
    ) -> None:
        """Commit offsets for a group with no live member (OffsetCommit, generation -1 and
        member id ``""``, as ``kafka-consumer-groups.sh`` writes a reset). Live members are
        not checked for here (:meth:`reset_offsets` and :meth:`import_offsets` do): the
        coordinator refuses such a commit while the group has members.

        Raises:
            ValueError: ``storage`` is not ``"kafka"``.
            OffsetCommitError: the coordinator did not accept every offset after 3 attempts.
            KafkaConnectionError: no broker to commit to.
        """
        _kafka_storage(storage)
        if not offsets:
            return
        kafka = self._started()[1]

        async def client() -> KafkaClient:
            return kafka

        store = KafkaOffsetStore(
            client, group, backoff_ms=200, socket_timeout_ms=self.request_timeout_ms
        )
        try:
            await store.commit(offsets, retries=2)
        finally:
            await store.close()

    async def reset_offsets(
        self,
        group: str,
        scope: ResetScope | None,
        spec: ResetSpec,
        *,
        execute: bool = False,
    ) -> ResetPlan:
        """Plan a reset of a group's offsets and, with ``execute``, commit it.

        As ``kafka-consumer-groups.sh --bootstrap-server --reset-offsets``: the same steps and
        plan as :meth:`GroupAdmin.reset_offsets <aiozkconsumer.tools.GroupAdmin.reset_offsets>`
        (``storage="kafka"``), the live members asked of the coordinator (DescribeGroups /
        ConsumerGroupDescribe) before anything is read or written.

        Raises:
            GroupActiveError: ``execute`` and the group has live members.
            UnknownGroupError: ``--all-topics`` and the group has no committed offset.
            UnknownTopicError: a topic of the scope or the file does not exist or lacks a
                partition named.
            ResetPlanError: ``--shift-by`` of a partition without a committed offset.
            BrokerNotAvailableError: a partition's leader gave no log start / end offset, or
                the coordinator did not answer.
            GroupCoordinatorError: the coordinator answered with an error.
            OffsetCommitError: the coordinator refused the commit.
        """
        return await reset_group_offsets(self, group, scope, spec, storage="kafka", execute=execute)

    async def export_offsets(self, groups: Iterable[str] | None = None) -> list[OffsetEntry]:
        """The committed offsets of groups, as ``offsets export`` writes them.

        Args:
            groups: the group ids; ``None``: every consumer group :meth:`list_groups` shows.

        Returns:
            The entries, sorted by group, topic and partition.

        Raises:
            UnknownGroupError: a group named in ``groups`` has no committed offset and no
                member.
            BrokerNotAvailableError, GroupCoordinatorError: as :meth:`describe_group`.
        """
        named = groups is not None
        names = (
            sorted(set(groups))
            if groups is not None
            else [g.group for g in await self.list_groups()]
        )
        entries: list[OffsetEntry] = []
        for group in names:
            offsets = await self._committed(group)
            if not offsets and named and not await self.member_ids(group):
                raise UnknownGroupError(group, f"Consumer group '{group}' does not exist.")
            entries += [
                OffsetEntry(group, tp.topic, tp.partition, o) for tp, o in sorted(offsets.items())
            ]
        return entries

    async def import_offsets(self, entries: Iterable[OffsetEntry]) -> int:
        """Commit the offsets of ``entries``, refusing every group with live members first.

        Unlike ``ImportZkOffsets`` (which wrote over live groups), nothing is written while a
        group of the file has live members: the coordinator would refuse the commit
        (``UNKNOWN_MEMBER_ID``), after some groups had been written.

        Returns:
            How many offsets were committed.

        Raises:
            GroupActiveError: a group of the file has live members (nothing written).
            OffsetCommitError: the coordinator refused a commit.
            BrokerNotAvailableError, GroupCoordinatorError: as :meth:`describe_group`.
        """
        by_group: dict[str, dict[TopicPartition, int]] = {}
        for e in entries:
            by_group.setdefault(e.group, {})[TopicPartition(e.topic, e.partition)] = e.offset
        for group in sorted(by_group):
            members = await self.member_ids(group)
            if members:
                raise GroupActiveError(
                    group,
                    members,
                    f"Group '{group}' has live members ({', '.join(members)}): its "
                    "coordinator refuses offsets from outside the group. Stop them first; "
                    "nothing was imported.",
                )
        for group, offsets in sorted(by_group.items()):
            await self.write_offsets(group, offsets)
        return sum(len(o) for o in by_group.values())

    # -- deletion ------------------------------------------------------------------------

    async def delete_group(self, group: str) -> None:
        """Delete a group with no live member and its committed offsets (DeleteGroups, as
        ``kafka-consumer-groups.sh --bootstrap-server --delete``).

        Raises:
            GroupActiveError: the group has live members (``NON_EMPTY_GROUP``).
            UnknownGroupError: the coordinator does not know the group.
            GroupCoordinatorError: another error (e.g. ``GROUP_AUTHORIZATION_FAILED``).
            BrokerNotAvailableError: the coordinator did not answer.
        """
        admin, kafka = self._started()

        async def once() -> int:
            node = int(await admin.find_coordinator(group))
            response = await kafka.raw.send(node, DeleteGroupsRequest([group]))
            codes = {str(g): int(code) for g, code, *_ in response.results}
            code = codes.get(group, 0)
            if code and code != _NON_EMPTY_GROUP:
                raise _ErrorCode(code)
            return code

        if await self._retrying("DeleteGroups", group, once) == _NON_EMPTY_GROUP:
            members = await self.member_ids(group)
            raise GroupActiveError(
                group,
                members,
                f"Deletion of group '{group}' failed because the group is not empty: it has "
                f"live members ({', '.join(members) or 'joining'}). Stop them first.",
            )

    async def delete_offsets(
        self, group: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, str | None]:
        """Delete a group's committed offsets of some partitions (OffsetDelete, KIP-496, as
        ``kafka-consumer-groups.sh --delete-offsets``).

        Args:
            group: the group id.
            partitions: the partitions.

        Returns:
            ``{tp: None}`` where the offset was deleted (or there was none), else ``{tp: the
            coordinator's error name}`` (``GROUP_SUBSCRIBED_TO_TOPIC``: a live member reads
            the topic).

        Raises:
            UnknownGroupError: the coordinator does not know the group.
            GroupCoordinatorError: a group-level error (e.g. ``NON_EMPTY_GROUP`` is never one;
                ``GROUP_AUTHORIZATION_FAILED`` is).
            BrokerNotAvailableError: the coordinator did not answer.
        """
        admin, kafka = self._started()
        tps = sorted(set(partitions))

        async def once() -> Mapping[TopicPartition, int]:
            node = int(await admin.find_coordinator(group))
            code, per_partition = offset_delete_errors(
                await kafka.raw.send(node, OffsetDeleteRequest(group, tps))
            )
            if code:
                raise _ErrorCode(code)
            return per_partition

        per_partition = await self._retrying("OffsetDelete", group, once)
        return {tp: _offset_delete_error(per_partition.get(tp, 0)) for tp in tps}

    # -- requests ------------------------------------------------------------------------

    def _started(self) -> tuple[AIOKafkaAdminClient, KafkaClient]:
        if self._admin is None or self._kafka is None:
            raise ConsumerError("KafkaGroupAdmin is not started")
        return self._admin, self._kafka

    async def _describe(self, group: str) -> tuple[int, DescribedGroup]:
        """``(coordinator id, the group as its coordinator describes it)``.

        DescribeGroups v5 first; a group it calls ``Dead`` (or ``GROUP_ID_NOT_FOUND``) is
        asked for again with ConsumerGroupDescribe, where the broker has it: a ``consumer``
        group (KIP-848) is not a classic one. A group neither knows comes back ``Dead``.
        """
        admin, kafka = self._started()

        async def once() -> tuple[int, DescribedGroup]:
            node = int(await admin.find_coordinator(group))
            (described,) = decode_describe_groups(
                await kafka.raw.send(node, DescribeGroupsRequest([group]))
            )
            if described.error_code not in (0, _GROUP_ID_NOT_FOUND):
                raise _ErrorCode(described.error_code)
            if described.error_code == 0 and described.state != "Dead":
                return node, described
            try:
                response = await kafka.raw.send(node, ConsumerGroupDescribeRequest([group]))
            except IncompatibleBrokerVersion:  # no consumer groups on this broker
                return node, dataclasses.replace(described, error_code=0, state="Dead")
            (consumer_group,) = decode_consumer_group_describe(response)
            if consumer_group.error_code == 0 and consumer_group.state != "Dead":
                return node, consumer_group
            # UNSUPPORTED_VERSION: a broker that lists the API but runs no consumer groups
            # (Kafka 3.x without the new group coordinator).
            if consumer_group.error_code not in (0, _GROUP_ID_NOT_FOUND, _UNSUPPORTED_VERSION):
                raise _ErrorCode(consumer_group.error_code)
            return node, dataclasses.replace(described, error_code=0, state="Dead")

        return await self._retrying("DescribeGroups", group, once)

    async def _committed(self, group: str) -> dict[TopicPartition, int]:
        """Every committed offset of the group (OffsetFetch of all partitions)."""
        admin = self._started()[0]
        committed: dict[Any, Any] = await self._retrying(
            "OffsetFetch", group, lambda: admin.list_consumer_group_offsets(group)
        )
        return {
            TopicPartition(tp.topic, tp.partition): int(meta.offset)
            for tp, meta in committed.items()
            if meta.offset >= 0
        }

    @staticmethod
    def _member(group: str, raw: DescribedMember) -> MemberAssignmentState:
        if raw.assignment is None:  # a consumer group's member: the coordinator's assignment
            tps = list(raw.partitions)
        else:
            try:
                tps = decode_assignment(raw.assignment) if raw.assignment else []
            except ValueError as e:
                # Another client's protocol under type "consumer": show the member, not its
                # share.
                log.warning("group %r: member %s: %s", group, raw.member_id, e)
                tps = []
        return MemberAssignmentState(
            raw.member_id, raw.client_id, raw.host, tuple(sorted(tps)), raw.instance_id
        )

    async def _retrying(
        self, what: str, group: str | None, request: Callable[[], Awaitable[_T]]
    ) -> _T:
        """Run ``request``, again after a backoff while it fails retriably, within the timeout.

        Args:
            what: the request's name, for messages.
            group: the group it is about; ``None`` for ListGroups (every group).
            request: makes the request; raises aiokafka's exceptions or :class:`_ErrorCode`.

        Raises:
            BrokerNotAvailableError: no answer.
            GroupCoordinatorError: an error code.
            UnknownGroupError: ``GROUP_ID_NOT_FOUND``.
        """
        deadline = anyio.current_time() + self.request_timeout_ms / 1000
        backoff = _BACKOFF_S
        while True:
            try:
                return await request()
            except (AiokafkaError, _ErrorCode) as e:
                retriable = bool(getattr(e, "retriable", False))
                if not retriable or anyio.current_time() + backoff >= deadline:
                    raise self._translate(e, what, group) from e
                log.debug("%s for group %r failed (%r); retrying", what, group, e)
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def _translate(self, error: Exception, what: str, group: str | None) -> ConsumerError:
        code = getattr(error, "errno", None)
        about = "" if group is None else f" for group '{group}'"
        if code == _GROUP_ID_NOT_FOUND and group is not None:
            return UnknownGroupError(group, f"Consumer group '{group}' does not exist.")
        if not isinstance(code, int) or code == _REQUEST_TIMED_OUT:
            if isinstance(error, IncompatibleBrokerVersion):
                reason = f"{what}: the brokers do not support it: {error}"
                return GroupCoordinatorError(group or "*", "unknown", reason)
            return BrokerNotAvailableError(
                f"{what}{about} got no answer from the brokers of {self.bootstrap_servers!r} "
                f"within request.timeout.ms={self.request_timeout_ms}: {error!r}"
            )
        return GroupCoordinatorError(group or "*", "unknown", f"{what}: {error_name(code)}")
