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

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

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
from ..kafka.client import KafkaClient, aiokafka_security_kwargs
from ..kafka.errors import AiokafkaError, IncompatibleBrokerVersion, error_name, is_retriable
from ..kafka.group import PROTOCOL_TYPE, decode_assignment
from ..kafka.transactions import READ_COMMITTED, READ_UNCOMMITTED
from ..records import TopicPartition
from ..security import KafkaSecurity
from .admin import UnknownGroupError

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

_REBALANCING = frozenset({"PreparingRebalance", "CompletingRebalance"})
_CONSUMER_PROTOCOL_TYPES = frozenset({PROTOCOL_TYPE, ""})
"""Protocol types of consumer groups: ``consumer``, and ``""`` for groups that only commit
offsets (no member ever joined), as Java's ``Admin.listConsumerGroups`` filters."""

# Error codes (org.apache.kafka.common.protocol.Errors) this module treats specially.
_REQUEST_TIMED_OUT = 7
_GROUP_ID_NOT_FOUND = 69

_BACKOFF_S = 0.1
_MAX_BACKOFF_S = 1.0
_DESCRIBE_CONCURRENCY = 8  # DescribeGroups requests in flight while listing
_CLOSE_STEP_LIMIT_S = 5.0  # each step of KafkaGroupAdmin.close, in seconds


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
    """

    group: str
    state: str
    protocol_type: str

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"group": self.group, "state": self.state, "protocol_type": self.protocol_type}


@dataclass(frozen=True)
class MemberAssignmentState:
    """A member of a Kafka-coordinated group (``MemberAssignmentState`` of Kafka 2.x's command).

    Attributes:
        member_id: the member id the coordinator gave (the tool's ``CONSUMER-ID``).
        client_id: the member's ``client.id``.
        host: the address the coordinator saw the member connect from, e.g. ``/127.0.0.1``.
        assignment: the partitions the group's leader assigned it, sorted; empty while the
            group rebalances.
    """

    member_id: str
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: the member id as ``consumer_id`` (the key of ZooKeeper groups'
        members too) and the assignment as ``{topic: [partition, ...]}``."""
        by_topic: dict[str, list[int]] = {}
        for tp in self.assignment:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return {
            "consumer_id": self.member_id,
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
    """

    group: str
    state: str
    protocol_type: str
    assignor: str | None
    coordinator_id: int
    coordinator: str
    members: tuple[MemberAssignmentState, ...]
    partitions: tuple[PartitionAssignmentState, ...]

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

        As ``kafka-consumer-groups.sh --bootstrap-server --list`` (``--state`` in Kafka 2.6+):
        ListGroups to every broker, keeping the groups of protocol type ``consumer`` or ``""``
        (offsets only), then DescribeGroups for each one's state. A group that died in between
        is left out.

        Returns:
            The listings.

        Raises:
            BrokerNotAvailableError: a broker or coordinator did not answer in time.
            GroupCoordinatorError: a broker answered with an error (e.g.
                ``CLUSTER_AUTHORIZATION_FAILED``), or kept answering a retriable one.
        """
        admin = self._started()[0]
        listed: list[tuple[str, str]] = await self._retrying(
            "ListGroups", None, admin.list_consumer_groups
        )
        groups = sorted(
            {g for g, protocol_type in listed if protocol_type in _CONSUMER_PROTOCOL_TYPES}
        )
        limiter = anyio.CapacityLimiter(_DESCRIBE_CONCURRENCY)

        async def state_of(group: str) -> KafkaGroupListing:
            async with limiter:
                _, described = await self._describe(group)
            return KafkaGroupListing(group, str(described[2]), str(described[3]))

        listings = await gather(state_of(g) for g in groups)
        return [g for g in listings if g.state != "Dead"]

    async def describe_group(
        self,
        group: str,
        *,
        topics: Iterable[str] | None = None,
        isolation_level: str = "read_uncommitted",
    ) -> KafkaGroupDescription:
        """Describe a group: its state and members, per partition offset, log end offset, lag.

        As ``kafka-consumer-groups.sh --bootstrap-server --describe`` (0.10.2): the members
        and their assignments from DescribeGroups, the committed offsets from OffsetFetch (all
        the group has), the log end offsets from each partition's leader.

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
        admin, kafka = self._started()
        coordinator_id, described = await self._describe(group)
        _, _, state, protocol_type, protocol, raw_members = described[:6]
        if state == "Dead":
            raise UnknownGroupError(group, f"Consumer group '{group}' does not exist.")
        if protocol_type not in _CONSUMER_PROTOCOL_TYPES:
            raise UnknownGroupError(
                group,
                f"Group '{group}' is not a consumer group (protocol type '{protocol_type}').",
            )
        members = sorted(
            (self._member(group, raw) for raw in raw_members), key=lambda m: m.member_id
        )
        committed: dict[Any, Any] = await self._retrying(
            "OffsetFetch", group, lambda: admin.list_consumer_group_offsets(group)
        )
        offsets = {
            TopicPartition(tp.topic, tp.partition): int(meta.offset)
            for tp, meta in committed.items()
            if meta.offset >= 0
        }
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
            state=str(state),
            protocol_type=str(protocol_type),
            assignor=str(protocol) or None,
            coordinator_id=coordinator_id,
            coordinator=kafka.broker_address(coordinator_id),
            members=tuple(members),
            partitions=tuple(_partition_state(tp, offsets, log_end, owners) for tp in tps),
        )

    # -- requests ------------------------------------------------------------------------

    def _started(self) -> tuple[AIOKafkaAdminClient, KafkaClient]:
        if self._admin is None or self._kafka is None:
            raise ConsumerError("KafkaGroupAdmin is not started")
        return self._admin, self._kafka

    async def _describe(self, group: str) -> tuple[int, Sequence[Any]]:
        """``(coordinator id, the group of the DescribeGroups answer)``.

        One group per request: aiokafka decodes DescribeGroups v3 answers with the v2 schema,
        which leaves out each group's authorized operations — harmless only after the last one.
        """
        admin = self._started()[0]

        async def once() -> tuple[int, Sequence[Any]]:
            node = int(await admin.find_coordinator(group))
            (response,) = await admin.describe_consumer_groups([group], group_coordinator_id=node)
            (described,) = response.groups
            if described[0]:
                raise _ErrorCode(int(described[0]))
            return node, described

        return await self._retrying("DescribeGroups", group, once)

    @staticmethod
    def _member(group: str, raw: Sequence[Any]) -> MemberAssignmentState:
        member_id, client_id, host, _metadata, assignment = raw[:5]
        try:
            tps = decode_assignment(bytes(assignment))
        except ValueError as e:
            # Another client's protocol under type "consumer": show the member, not its share.
            log.warning("group %r: member %s: %s", group, member_id, e)
            tps = []
        return MemberAssignmentState(str(member_id), str(client_id), str(host), tuple(tps))

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
