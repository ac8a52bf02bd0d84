"""Group administration over ZooKeeper: the old consumer's group and offset tools (Kafka 0.10.2.1).

:class:`GroupAdmin` holds one ZooKeeper session and one
:class:`~aiozkconsumer.cluster.ClusterView` (brokers, topics, partitions and, when needed, a
Kafka client) for: listing, describing and deleting groups (``ConsumerGroupCommand
--zookeeper``), the offset checker's view (``ConsumerOffsetChecker``), offset export / import /
update (``ExportZkOffsets``, ``ImportZkOffsets``, ``UpdateOffsetsInZK``), the offsets reset of
``kafka-consumer-groups.sh --reset-offsets`` (planned by :mod:`aiozkconsumer.tools.reset`) and the
rebalance check (``VerifyConsumerRebalance``, whose rules are the pure :func:`check_ownership`).
A group's members and state (:meth:`GroupAdmin.describe_members`,
:meth:`GroupAdmin.describe_state`) are judged by the pure :func:`group_state` and
:func:`infer_assignment_strategy`.

A node of a group that does not parse (a registration or offset node written by hand) does not
fail a description: it is reported as a :class:`MalformedNode` beside what did parse.

Whether topics and partitions come from ZooKeeper's ``/brokers/topics`` or from Kafka metadata
is decided by the view (:func:`~aiozkconsumer.cluster.metadata_source`, as the connector's
``cluster.metadata.source=auto``): Kafka when ZooKeeper has no ``/brokers/ids`` (a KRaft
cluster) and ``bootstrap_servers`` is given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Any, Literal, TypeVar

import anyio

from .._concurrency import gather
from ..assignors import ASSIGNORS, AssignmentContext
from ..cluster import ClusterView
from ..errors import (
    BrokerNotAvailableError,
    ConsumerError,
    InvalidConfigError,
    MalformedZookeeperDataError,
    NoBrokersError,
    UnknownTopicError,
)
from ..kafka.client import EARLIEST, LATEST, KafkaClient
from ..offsets import NO_OFFSET, KafkaOffsetStore, dual_fetch_result
from ..records import TopicPartition
from ..security import KafkaSecurity, ZookeeperSecurity
from ..subscription import TopicCount, construct_topic_count
from ..zk import layout
from ..zk.client import ZkClient
from .offsets_file import OffsetEntry
from .reset import (
    AllTopics,
    FromOffsets,
    ResetPlan,
    ResetScope,
    ResetSpec,
    TopicsScope,
    ToTimestamp,
    plan_reset,
    select_partitions,
)

_V = TypeVar("_V")

__all__ = [
    "GROUP_STABILITY",
    "GroupActiveError",
    "GroupAdmin",
    "GroupDescription",
    "GroupMembers",
    "GroupState",
    "MalformedNode",
    "MemberDescription",
    "MemberInfo",
    "OffsetsStorage",
    "PartitionOffsetState",
    "RebalanceVerification",
    "ResetStorage",
    "UnknownGroupError",
    "check_ownership",
    "consumer_id_host",
    "group_state",
    "infer_assignment_strategy",
    "owner_consumer_id",
]

OffsetsStorage = Literal["zookeeper", "kafka"]
"""Where :meth:`GroupAdmin.describe_group` reads committed offsets (``offsets.storage``)."""

ResetStorage = Literal["zookeeper", "kafka", "dual"]
"""Where :meth:`GroupAdmin.reset_offsets` reads and writes offsets: ZooKeeper's offset nodes,
the group's Kafka coordinator (``offsets.storage=kafka``), or both (``dual.commit.enabled``)."""

GROUP_STABILITY = ("Empty", "Rebalancing", "Stable")
"""The states :func:`group_state` tells apart."""

log = logging.getLogger(__name__)

_NO_BROKERS = "No brokers found in ZK. (A KRaft cluster? Give its bootstrap servers.)"

_CLOSE_STEP_LIMIT_S = 5.0  # each step of GroupAdmin.close, in seconds


class UnknownGroupError(ConsumerError, LookupError):
    """A consumer group has no node under ``/consumers``.

    Attributes:
        group: the group id.
    """

    def __init__(self, group: str, message: str | None = None) -> None:
        super().__init__(message or f"consumer group '{group}' does not exist")
        self.group = group


class GroupActiveError(ConsumerError):
    """A group tool refused to change a group that has live members (``/consumers/<g>/ids``).

    Attributes:
        group: the group id.
        members: the live members' consumer ids.
    """

    def __init__(self, group: str, members: Sequence[str], message: str) -> None:
        super().__init__(message)
        self.group = group
        self.members = tuple(members)


_GENERATED_ID_RE = re.compile(r"(?P<host>.+)-[0-9]{10,}-[0-9a-f]{8}")


def consumer_id_host(group: str, consumer_id: str) -> str | None:
    """The host in a generated consumer id, ``<group>_<host>-<epoch ms>-<8 hex digits>``.

    The old consumer names a member ``<group>_<consumer.id>``, and without ``consumer.id``
    generates ``<hostname>-<epoch ms>-<first 8 hex digits of a UUID>``
    (``ZookeeperConsumerConnector``, 0.10.2): the only place ZooKeeper records the host.

    Args:
        group: the group id.
        consumer_id: the member's consumer id.

    Returns:
        The host name, ``None`` when the id is not a generated one (``consumer.id`` set).
    """
    prefix = f"{group}_"
    if not consumer_id.startswith(prefix):
        return None
    match = _GENERATED_ID_RE.fullmatch(consumer_id[len(prefix) :])
    return None if match is None else match["host"]


def group_state(
    live_members: Iterable[str],
    partitions: Mapping[str, Iterable[int]],
    owners: Mapping[str, Mapping[int, str]],
) -> tuple[str, list[tuple[TopicPartition, str | None]]]:
    """Whether a ZooKeeper-coordinated group is stable, from its owner nodes.

    ``"Empty"`` without live members; ``"Rebalancing"`` when some partition the members
    subscribe to has no owner node, or one whose thread id belongs to no live member (the
    members are between releasing and claiming, or one died and the others have not yet
    rebalanced); ``"Stable"`` otherwise.

    Args:
        live_members: the consumer ids under ``/consumers/<g>/ids``.
        partitions: topic -> partition ids, for every topic the members subscribe to.
        owners: topic -> partition -> owner node value.

    Returns:
        The state (one of :data:`GROUP_STABILITY`) and the partitions without a live owner,
        each with its owner node's value (``None``: no owner node), sorted.
    """
    live = set(live_members)
    if not live:
        return "Empty", []
    orphans: list[tuple[TopicPartition, str | None]] = []
    for topic in sorted(partitions):
        for partition in sorted(set(partitions[topic])):
            owner = owners.get(topic, {}).get(partition)
            if owner is None or owner_consumer_id(owner) not in live:
                orphans.append((TopicPartition(topic, partition), owner))
    return ("Rebalancing" if orphans else "Stable"), orphans


@contextlib.contextmanager
def _quiet_assignors() -> Iterator[None]:
    """Silence the assignors' "No broker partitions consumed" warnings: a replay is not a
    rebalance, and its warnings would reach the tools' stderr."""
    logger = logging.getLogger(ASSIGNORS["range"].__module__)
    previous = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = previous


def infer_assignment_strategy(
    group: str,
    topic_counts: Mapping[str, TopicCount],
    partitions: Mapping[str, Iterable[int]],
    owners: Mapping[str, Mapping[int, str]],
) -> str | None:
    """Which ``partition.assignment.strategy`` gave the owner nodes of a group.

    ZooKeeper does not record a member's strategy, so each of ``range`` and ``roundrobin``
    (``PartitionAssignor.scala``, 0.10.2) is replayed on the members' subscriptions and
    compared with the owner nodes of the subscribed partitions.

    Args:
        group: the group id.
        topic_counts: consumer id -> its topic count, for every live member whose
            registration parsed (wildcards evaluated).
        partitions: topic -> partition ids, for every topic the members subscribe to.
        owners: topic -> partition -> owner node value.

    Returns:
        The first of ``"range"``, ``"roundrobin"`` whose plan equals the owner nodes
        (``"range"`` when both would give them); ``None`` when neither does (a rebalance is
        under way, or a member uses a strategy of its own) or there is nothing assigned.
    """
    actual = {
        TopicPartition(topic, p): owner
        for topic, parts in owners.items()
        if topic in partitions
        for p, owner in parts.items()
    }
    if not topic_counts or not actual:
        return None
    for name, assignor in ASSIGNORS.items():
        planned: dict[TopicPartition, str] = {}
        with _quiet_assignors():
            for member in sorted(topic_counts):
                ctx = AssignmentContext.build(group, member, topic_counts, partitions)
                for share in assignor(ctx).values():
                    planned.update((tp, str(thread)) for tp, thread in share.items())
        if planned == actual:
            return name
    return None


def owner_consumer_id(owner: str) -> str:
    """The consumer id of an owner node's value: the thread id without its ``-<index>``.

    As ``ConsumerGroupCommand`` (0.10.2), ``o.substring(0, o.lastIndexOf('-'))``.

    Args:
        owner: the owner node's data, e.g. ``"g_host-1490000000000-1a2b3c4d-0"``.

    Returns:
        The consumer id, e.g. ``"g_host-1490000000000-1a2b3c4d"``; ``owner`` itself when it
        has no ``-``.
    """
    head, dash, _ = owner.rpartition("-")
    return head if dash else owner


def check_ownership(
    partitions: Mapping[str, Sequence[int]],
    owners: Mapping[str, Mapping[int, str]],
    thread_ids: Mapping[str, Iterable[str]],
    group: str,
) -> list[str]:
    """The rules of ``VerifyConsumerRebalance.validateRebalancingOperation`` (0.10.2.1).

    Every partition of every topic the group subscribes to must have an owner node, and its
    value must be one of the thread ids the group's live members have for that topic.

    Args:
        partitions: topic -> its partition ids, for every topic the members subscribe to.
        owners: topic -> partition -> owner node value (absent: no owner node).
        thread_ids: topic -> the valid ``ConsumerThreadId`` strings of the live members.
        group: the group id, for the messages.

    Returns:
        The problems found, in the original's wording (empty: the rebalance succeeded).
    """
    problems: list[str] = []
    for topic in sorted(partitions):
        topic_owners = owners.get(topic, {})
        valid = set(thread_ids.get(topic, ()))
        if not topic_owners:
            problems.append(f"No owners for any partitions for topic {topic}")
        for partition in partitions[topic]:
            owner = topic_owners.get(partition)
            if owner is None:
                problems.append(f"No owner for partition [{topic},{partition}]")
            elif not valid:
                problems.append(f"No consumer ids registered for topic {topic}")
            elif owner not in valid:
                problems.append(
                    f"Owner {owner} for partition [{topic},{partition}] is not a valid member "
                    f"of consumer group {group}"
                )
    return problems


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
class MemberInfo:
    """A live member of a group (``/consumers/<g>/ids/<consumer id>``).

    Attributes:
        consumer_id: the member's consumer id string.
        registration: its decoded registration; ``None`` if the node vanished while read.
    """

    consumer_id: str
    registration: layout.Registration | None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        reg = self.registration
        return {
            "consumer_id": self.consumer_id,
            "pattern": None if reg is None else reg.pattern,
            "subscription": None if reg is None else dict(reg.subscription),
            "timestamp_ms": None if reg is None else reg.timestamp_ms,
        }


@dataclass(frozen=True)
class MalformedNode:
    """A node of a group that does not parse: reported instead of failing the whole group.

    Attributes:
        path: the node's path.
        reason: why it does not parse, with the data read.
    """

    path: str
    reason: str

    @classmethod
    def from_error(cls, error: MalformedZookeeperDataError, path: str) -> MalformedNode:
        """The node an error of :mod:`aiozkconsumer.zk.layout` names, without the error's
        ``malformed data in ZooKeeper node <path>:`` preamble."""
        text = str(error)
        preamble = f"malformed data in ZooKeeper node {error.path}: "
        return cls(path, text[len(preamble) :] if text.startswith(preamble) else text)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"path": self.path, "reason": self.reason}


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
    """

    group: str
    members: tuple[str, ...]
    owners: Mapping[str, Mapping[int, str | None]]
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """Whether every partition has a valid owner."""
        return not self.problems

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
        }


class GroupAdmin:
    """The group and offset tools over one ZooKeeper session.

    Use as an async context manager::

        async with GroupAdmin("127.0.0.1:2181") as admin:
            print(await admin.list_groups())
            description = await admin.describe_group("billing")

    Brokers, topics and partitions come from its :class:`~aiozkconsumer.cluster.ClusterView`
    (:attr:`cluster`), which also starts the Kafka client on first need (log end offsets,
    earliest offsets, Kafka metadata, Kafka-stored offsets), from ``bootstrap_servers`` or else
    from the brokers registered in ZooKeeper.

    Args:
        zookeeper_connect: ``host:port[,host:port...][/chroot]``.
        bootstrap_servers: Kafka brokers, ``host:port[,...]``; default: the PLAINTEXT
            endpoints of the brokers under ``/brokers/ids``. Needed for KRaft clusters.
        connection_timeout_ms: ``zookeeper.connection.timeout.ms``: how long :meth:`start`
            waits for a ZooKeeper session.
        session_timeout_ms: ``zookeeper.session.timeout.ms``; also bounds each ZooKeeper
            request while the connection is down.
        request_timeout_ms: ``socket.timeout.ms`` of Kafka requests.
        client_id: ``client.id`` of Kafka requests.
        zookeeper_security: TLS, credentials and the ACL of the nodes the tools create
            (offsets written by ``offsets import``/``reset``), as
            :func:`~aiozkconsumer.config.zookeeper_security_from_properties` reads them from
            ``--zk-tls-config-file`` / ``--command-config``, or
            :meth:`ZookeeperSecurity.from_config
            <aiozkconsumer.security.ZookeeperSecurity.from_config>`; default none.
        security: TLS and SASL of the Kafka connections (``--command-config``); default
            plaintext.

    Attributes:
        zk: the ZooKeeper session.
        cluster: the view of the cluster over ``zk`` (``cluster.metadata.source=auto``).
    """

    def __init__(
        self,
        zookeeper_connect: str,
        *,
        bootstrap_servers: str | None = None,
        connection_timeout_ms: int = 6000,
        session_timeout_ms: int = 10000,
        request_timeout_ms: int = 30000,
        client_id: str = "aiozkconsumer-tools",
        zookeeper_security: ZookeeperSecurity | None = None,
        security: KafkaSecurity | None = None,
    ) -> None:
        self.zookeeper_connect = zookeeper_connect
        self.bootstrap_servers = bootstrap_servers or None
        self.request_timeout_ms = request_timeout_ms
        self.client_id = client_id
        self.zk = ZkClient(
            zookeeper_connect,
            session_timeout_ms=session_timeout_ms,
            connection_timeout_ms=connection_timeout_ms,
            security=zookeeper_security,
        )
        self.cluster = ClusterView(
            self.zk,
            bootstrap_servers=self.bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=security,
        )
        self._metadata_checked = False

    async def start(self) -> None:
        """Open the ZooKeeper session.

        Raises:
            ZookeeperConnectionError: ZooKeeper did not answer within
                ``connection_timeout_ms``, or (TLS) no server's certificate verifies.
            ZookeeperAuthError: ZooKeeper refused the credentials of ``zookeeper_security``.
        """
        await self.zk.start()

    async def close(self) -> None:
        """Close the Kafka client, then the ZooKeeper session; never raises.

        Each close is shielded from the caller's cancellation and bounded by 5 s.
        """
        try:
            with anyio.move_on_after(_CLOSE_STEP_LIMIT_S, shield=True):
                await self.cluster.close()
        finally:
            with anyio.move_on_after(_CLOSE_STEP_LIMIT_S, shield=True):
                await self.zk.close(timeout_s=_CLOSE_STEP_LIMIT_S)

    async def __aenter__(self) -> GroupAdmin:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<GroupAdmin {self.zk!r} {self.cluster!r}>"

    # -- cluster -------------------------------------------------------------------------

    async def brokers(self) -> list[layout.BrokerInfo]:
        """The brokers registered in ZooKeeper (``/brokers/ids``), sorted by id.

        Returns:
            The registrations; empty on a KRaft cluster, and while every broker of a
            ZooKeeper-mode cluster is down.

        Raises:
            MalformedZookeeperDataError: a broker node does not parse.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        return await self.cluster.brokers()

    async def kafka(self) -> KafkaClient:
        """The Kafka client of :attr:`cluster`, started on first use.

        Returns:
            The started client.

        Raises:
            NoBrokersError: no ``bootstrap_servers`` and no broker under ``/brokers/ids``
                ("No brokers found in ZK.", as the console consumer says).
            KafkaConnectionError: no broker answered.
        """
        if self.cluster.kafka_client is None and self.bootstrap_servers is None:
            brokers = await self.brokers()
            if not brokers:
                raise NoBrokersError(_NO_BROKERS)
            return await self.cluster.kafka(brokers)
        return await self.cluster.kafka()

    async def metadata_from_kafka(self) -> bool:
        """Whether topics and partitions come from Kafka metadata rather than ZooKeeper.

        The rule of :func:`~aiozkconsumer.cluster.metadata_source`
        (``cluster.metadata.source=auto``), decided once by :attr:`cluster`: Kafka when
        ZooKeeper has no ``/brokers/ids`` (a KRaft cluster) and ``bootstrap_servers`` is given.
        A ZooKeeper-mode cluster whose brokers are all down (restarting) keeps
        ``/brokers/ids``, so its metadata stays ZooKeeper's.

        Raises:
            NoBrokersError: ZooKeeper has no ``/brokers/ids`` and no ``bootstrap_servers``
                was given: only Kafka knows the topics, and no broker is known to ask.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        if await self.cluster.metadata_from_kafka():
            return True
        if not self._metadata_checked:
            # Without /brokers/ids (KRaft) only Kafka knows the topics: reading ZooKeeper's
            # /brokers/topics would make every topic look unknown rather than unreachable.
            if self.bootstrap_servers is None and not await self.zk.exists(layout.BROKER_IDS_PATH):
                raise NoBrokersError(_NO_BROKERS)
            self._metadata_checked = True
        return False

    async def all_topics(self) -> list[str]:
        """Every topic of the cluster, sorted (``/brokers/topics`` or Kafka metadata).

        Raises:
            NoBrokersError: as :meth:`metadata_from_kafka`, or Kafka metadata was needed and
                no broker answered.
            KafkaConnectionError: Kafka metadata was needed and unavailable.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        await self.metadata_from_kafka()
        return await self.cluster.all_topics()

    async def partitions_for(self, topics: Iterable[str]) -> dict[str, tuple[int, ...]]:
        """The partition ids of each topic; an unknown topic has none.

        Args:
            topics: topic names.

        Returns:
            ``{topic: sorted partition ids}``.

        Raises:
            MalformedZookeeperDataError: a topic node does not parse.
            NoBrokersError: as :meth:`metadata_from_kafka`, or Kafka metadata was needed and
                no broker answered.
            KafkaConnectionError: Kafka metadata was needed and unavailable.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        await self.metadata_from_kafka()
        return await self.cluster.partitions_for_topics(topics)

    async def list_offsets(
        self, tps: Iterable[TopicPartition], which: Literal["earliest", "latest"]
    ) -> dict[TopicPartition, int]:
        """Ask each partition's leader for its earliest or latest (log end) offset.

        Args:
            tps: the partitions.
            which: ``"earliest"`` (log start offset) or ``"latest"`` (log end offset).

        Returns:
            ``{tp: offset}`` for the partitions whose leader answered.

        Raises:
            NoBrokersError: no broker is known or none answered a metadata request.
            KafkaConnectionError: no bootstrap broker answered.
            BrokerNotAvailableError: a partition has no leader, or its leader is unreachable.
        """
        return await self._list_offsets(tps, EARLIEST if which == "earliest" else LATEST)

    async def offsets_for_times(
        self, tps: Iterable[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int]:
        """Ask each partition's leader for the first offset at or after a time (ListOffsets
        with a timestamp, as ``KafkaConsumer.offsetsForTimes``).

        Args:
            tps: the partitions.
            timestamp_ms: the time, epoch milliseconds (>= 0).

        Returns:
            ``{tp: offset}`` for the partitions whose leader answered: the offset of the
            first record whose timestamp is at or after ``timestamp_ms``, ``-1`` where the
            partition has no such record.

        Raises:
            NoBrokersError: no broker is known or none answered a metadata request.
            KafkaConnectionError: no bootstrap broker answered.
            BrokerNotAvailableError: a partition has no leader, or its leader is unreachable.
            ValueError: ``timestamp_ms`` is negative (those are ListOffsets' special
                values).
        """
        if timestamp_ms < 0:
            raise ValueError(f"timestamp_ms must be >= 0, got {timestamp_ms}")
        return await self._list_offsets(tps, timestamp_ms)

    async def _list_offsets(
        self, tps: Iterable[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        tps = sorted(set(tps))
        if not tps:
            return {}
        kafka = await self.kafka()
        if not await kafka.refresh_metadata({tp.topic for tp in tps}):
            raise NoBrokersError(f"no broker of {kafka.bootstrap_servers!r} answered")
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp in tps:
            leader = kafka.leader_for(tp)
            if leader is None:
                raise BrokerNotAvailableError(f"partition {tp} has no leader")
            by_leader.setdefault(leader, {})[tp] = timestamp
        result: dict[TopicPartition, int] = {}
        for leader, timestamps in sorted(by_leader.items()):
            result.update(await kafka.list_offsets(leader, timestamps))
        return result

    # -- groups --------------------------------------------------------------------------

    async def list_groups(self) -> list[str]:
        """Every group with a node under ``/consumers``, sorted (``--list``).

        Raises:
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        return sorted(await self.zk.get_children(layout.CONSUMERS_PATH) or [])

    async def group_exists(self, group: str) -> bool:
        """Whether ``/consumers/<group>`` exists.

        Raises:
            ValueError: ``group`` cannot be a ZooKeeper path element.
        """
        return await self.zk.exists(layout.group_dir(group))

    async def _require_group(self, group: str) -> None:
        if not await self.group_exists(group):
            raise UnknownGroupError(group, f"Consumer group '{group}' does not exist.")

    async def member_ids(self, group: str) -> list[str]:
        """The live members' consumer ids (children of ``/consumers/<g>/ids``), sorted."""
        return sorted(await self.zk.get_children(layout.ids_dir(group)) or [])

    async def members(self, group: str) -> list[MemberInfo]:
        """The live members and their registrations, sorted by consumer id.

        Raises:
            MalformedZookeeperDataError: a registration does not parse.
        """
        result = []
        for consumer_id in await self.member_ids(group):
            path = layout.ids_path(group, consumer_id)
            data = await self.zk.get_data(path)
            reg = None if data is None else layout.decode_registration(data, path)
            result.append(MemberInfo(consumer_id, reg))
        return result

    async def _read_members(self, group: str) -> tuple[list[MemberInfo], list[MalformedNode]]:
        """:meth:`members`, with the registrations that do not parse set apart.

        Returns:
            The members whose registration parsed (or vanished while read), and the
            malformed registration nodes.
        """
        ids = await self.member_ids(group)
        paths = [layout.ids_path(group, consumer_id) for consumer_id in ids]
        datas = await gather(self.zk.get_data(path) for path in paths)
        members: list[MemberInfo] = []
        malformed: list[MalformedNode] = []
        for consumer_id, path, data in zip(ids, paths, datas, strict=True):
            if data is None:
                members.append(MemberInfo(consumer_id, None))
                continue
            try:
                members.append(MemberInfo(consumer_id, layout.decode_registration(data, path)))
            except MalformedZookeeperDataError as e:
                malformed.append(MalformedNode.from_error(e, path))
        return members, malformed

    async def group_topics(self, group: str) -> list[str]:
        """Topics the group has owner or offset nodes for, sorted.

        ``ConsumerGroupCommand`` (0.10.2) looked at ``owners/`` only; offsets are included
        here so that a group that is not running (or whose offsets were imported) shows.
        """
        owners = await self.zk.get_children(f"{layout.group_dir(group)}/owners") or []
        offsets = await self.zk.get_children(f"{layout.group_dir(group)}/offsets") or []
        return sorted(set(owners) | set(offsets))

    async def owners(self, group: str, topic: str) -> dict[int, str]:
        """Partition -> owner node value of a topic's owned partitions."""
        return await self._partition_nodes(layout.owners_dir(group, topic), layout.decode_owner)

    async def zookeeper_offsets(self, group: str, topic: str) -> dict[int, int]:
        """Partition -> committed offset stored in ZooKeeper for one topic of a group.

        Raises:
            MalformedZookeeperDataError: an offset node does not hold a decimal number.
        """
        return await self._partition_nodes(layout.offsets_dir(group, topic), layout.decode_offset)

    async def _partition_nodes(
        self,
        directory: str,
        decode: Callable[[bytes, str], _V],
        malformed: list[MalformedNode] | None = None,
    ) -> dict[int, _V]:
        """Partition -> decoded data of the numbered children of ``directory``, read at once.

        With ``malformed``, a node that does not parse is appended there and left out;
        without, its :class:`MalformedZookeeperDataError` propagates.
        """
        children = [c for c in await self.zk.get_children(directory) or [] if c.isdigit()]
        paths = [f"{directory}/{c}" for c in children]
        datas = await gather(self.zk.get_data(path) for path in paths)
        result: dict[int, _V] = {}
        for child, path, data in zip(children, paths, datas, strict=True):
            if data is None:
                continue
            try:
                result[int(child)] = decode(data, path)
            except MalformedZookeeperDataError as e:
                if malformed is None:
                    raise
                malformed.append(MalformedNode.from_error(e, path))
        return result

    async def describe_group(
        self,
        group: str,
        *,
        topics: Iterable[str] | None = None,
        offsets_storage: OffsetsStorage = "zookeeper",
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
            store = KafkaOffsetStore(
                self.kafka,
                group,
                backoff_ms=200,
                socket_timeout_ms=self.request_timeout_ms,
            )
            try:
                from_kafka = await store.fetch(tps)
            finally:
                await store.close()
            offsets.update({tp: o for tp, o in from_kafka.items() if o != NO_OFFSET})
        existing = [tp for tp in tps if tp.partition in partitions.get(tp.topic, ())]
        log_end = await self.list_offsets(existing, "latest")
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
        assignment: dict[str, dict[str, list[int]]] = {}
        for topic, owned in owners.items():
            for partition, owner in sorted(owned.items()):
                share = assignment.setdefault(owner_consumer_id(owner), {})
                share.setdefault(topic, []).append(partition)
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
        all_topics: list[str] | None = None
        topic_counts: dict[str, TopicCount] = {}
        for member in members:
            reg = member.registration
            if reg is None:
                continue
            if reg.is_wildcard and all_topics is None:
                all_topics = await self.all_topics()
            path = layout.ids_path(group, member.consumer_id)
            try:
                topic_counts[member.consumer_id] = construct_topic_count(
                    member.consumer_id, reg, all_topics or [], False
                )
            except InvalidConfigError as e:
                malformed.append(MalformedNode(path, str(e)))
        subscribed = sorted(
            {t for tc in topic_counts.values() for t in tc.get_consumer_thread_ids_per_topic()}
        )
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

    async def delete_group(self, group: str, *, force_malformed: bool = False) -> None:
        """Delete ``/consumers/<group>`` and everything below it, if no member is live.

        As ``AdminUtils.deleteConsumerGroupInZK`` (0.10.2). The check and the deletion are not
        atomic (as in the original): a member joining in between is not noticed.

        Args:
            group: the group id.
            force_malformed: also delete the group when every live member's registration
                node is malformed (a node left by hand, which no consumer can have
                written); a member whose registration parses still refuses the deletion.

        Raises:
            UnknownGroupError: the group does not exist.
            GroupActiveError: the group has live members (with ``force_malformed``: a live
                member whose registration parses).
        """
        await self._require_group(group)
        members = await self.member_ids(group)
        if members:
            healthy, malformed = await self._read_members(group)
            live = [m.consumer_id for m in healthy if m.registration is not None]
            message = f"Delete for group '{group}' failed because its consumers are still active."
            if force_malformed and live:
                raise GroupActiveError(
                    group,
                    live,
                    f"{message} --force-malformed only deletes a group whose live members are "
                    f"all malformed registrations; these parse: {', '.join(live)}.",
                )
            if not force_malformed:
                if malformed and not live:
                    paths = ", ".join(m.path for m in malformed)
                    message += (
                        f" Its only live members are malformed registration nodes ({paths}): "
                        "--force-malformed deletes the group."
                    )
                raise GroupActiveError(group, members, message)
            log.info(
                "deleting group %s with malformed registrations: %s",
                group,
                ", ".join(m.path for m in malformed),
            )
        await self.zk.delete_recursive(layout.group_dir(group))

    async def delete_group_topic(self, group: str, topic: str) -> bool:
        """Delete a group's owner and offset nodes of one topic, if no member is live.

        As ``AdminUtils.deleteConsumerGroupInfoForTopicInZK``; when ``topic`` is the group's
        only topic the whole group is deleted.

        Returns:
            ``True`` if the whole group was deleted, ``False`` if only the topic's nodes.

        Raises:
            UnknownGroupError: the group does not exist.
            UnknownTopicError: the group has no owner or offset nodes for ``topic``.
            GroupActiveError: the group has live members.
        """
        await self._require_group(group)
        topics = await self.group_topics(group)
        if topic not in topics:
            raise UnknownTopicError(
                topic, f"Consumer group '{group}' has no information for topic '{topic}'."
            )
        members = await self.member_ids(group)
        if members:
            raise GroupActiveError(
                group,
                members,
                f"Delete for group '{group}' topic '{topic}' failed because its consumers are "
                "still active.",
            )
        if topics == [topic]:
            await self.zk.delete_recursive(layout.group_dir(group))
            return True
        await self.zk.delete_recursive(layout.owners_dir(group, topic))
        await self.zk.delete_recursive(layout.offsets_dir(group, topic))
        return False

    async def delete_topic_from_groups(self, topic: str) -> tuple[list[str], list[str]]:
        """Delete ``topic``'s nodes from every inactive group that has offsets for it.

        As ``AdminUtils.deleteAllConsumerGroupInfoForTopicInZK`` (``--delete --topic t``).

        Returns:
            ``(groups cleaned, active groups skipped)``, each sorted.
        """
        cleaned: list[str] = []
        skipped: list[str] = []
        for group in await self.list_groups():
            if not await self.zk.exists(layout.offsets_dir(group, topic)):
                continue
            try:
                await self.delete_group_topic(group, topic)
            except GroupActiveError:
                skipped.append(group)
            except (UnknownGroupError, UnknownTopicError):
                continue  # deleted meanwhile
            else:
                cleaned.append(group)
        return cleaned, skipped

    async def delete_group_unchecked(self, group: str) -> None:
        """Delete ``/consumers/<group>`` whatever its state (``ZkUtils.maybeDeletePath``).

        What the console consumer does with ``--delete-consumer-offsets`` and with its own
        generated group on exit. Missing nodes are fine.
        """
        await self.zk.delete_recursive(layout.group_dir(group))

    async def group_has_offsets(self, group: str) -> bool:
        """Whether ``/consumers/<group>/offsets`` exists (the console consumer's check)."""
        return await self.zk.exists(f"{layout.group_dir(group)}/offsets")

    # -- offsets -------------------------------------------------------------------------

    async def export_offsets(self, groups: Iterable[str] | None = None) -> list[OffsetEntry]:
        """Read every offset node of the given groups, as ``ExportZkOffsets`` (0.10.2).

        Args:
            groups: group ids; default every group under ``/consumers``. A group without
                offsets contributes nothing.

        Returns:
            The entries sorted by group, topic and partition.

        Raises:
            UnknownGroupError: a group given explicitly does not exist.
            MalformedZookeeperDataError: an offset node does not hold a decimal number.
        """
        if groups is None:
            chosen = await self.list_groups()
        else:
            chosen = sorted(set(groups))
            for group in chosen:
                await self._require_group(group)
        entries: list[OffsetEntry] = []
        for group in chosen:
            topics = await self.zk.get_children(f"{layout.group_dir(group)}/offsets") or []
            for topic in sorted(topics):
                for partition, offset in sorted(
                    (await self.zookeeper_offsets(group, topic)).items()
                ):
                    entries.append(OffsetEntry(group, topic, partition, offset))
        return entries

    async def import_offsets(self, entries: Iterable[OffsetEntry]) -> int:
        """Write offset nodes, creating them where missing (``ImportZkOffsets``).

        As the original, live members are not checked for: a running group overwrites the
        imported offsets with its next commit.

        Returns:
            The number of nodes written.
        """
        n = 0
        for entry in entries:
            await self.zk.set_or_create(entry.path, layout.encode_offset(entry.offset))
            n += 1
        return n

    async def update_offsets(
        self, group: str, topic: str, to: Literal["earliest", "latest"]
    ) -> dict[int, int]:
        """Set a group's offsets of a topic to its earliest or latest offsets.

        As ``UpdateOffsetsInZK`` (0.10.2): for each partition the leader is asked for
        ``OffsetRequest(EarliestTime|LatestTime)`` and the answer is written to
        ``/consumers/<group>/offsets/<topic>/<p>``.

        Args:
            group: the group id (it need not exist yet).
            topic: the topic.
            to: ``"earliest"`` or ``"latest"``.

        Returns:
            Partition -> the offset written.

        Raises:
            UnknownTopicError: the topic does not exist.
            NoBrokersError, KafkaConnectionError, BrokerNotAvailableError: a leader could not
                be asked.
        """
        layout.group_dir(group)
        partitions = (await self.partitions_for([topic])).get(topic, ())
        if not partitions:
            raise UnknownTopicError(topic, f"Topic '{topic}' does not exist.")
        offsets = await self.list_offsets([TopicPartition(topic, p) for p in partitions], to)
        written: dict[int, int] = {}
        for tp, offset in sorted(offsets.items()):
            await self.zk.set_or_create(
                layout.offset_path(group, tp.topic, tp.partition), layout.encode_offset(offset)
            )
            written[tp.partition] = offset
        return written

    def _kafka_offset_store(self, group: str) -> KafkaOffsetStore:
        """A store of the group's Kafka offsets, committing as a simple consumer (generation
        -1, member id ``""``), as a ZooKeeper-coordinated group with ``offsets.storage=kafka``."""
        return KafkaOffsetStore(
            self.kafka, group, backoff_ms=200, socket_timeout_ms=self.request_timeout_ms
        )

    async def committed_offsets(
        self,
        group: str,
        tps: Iterable[TopicPartition] | None = None,
        *,
        storage: ResetStorage = "zookeeper",
        malformed: list[MalformedNode] | None = None,
    ) -> dict[TopicPartition, int]:
        """A group's committed offsets in ZooKeeper, in Kafka, or the larger of both.

        Args:
            group: the group id.
            tps: the partitions; ``None``: every partition the group has an offset for
                (in Kafka: OffsetFetch of all partitions, Kafka 0.10.2+).
            storage: ``"zookeeper"`` (the offset nodes), ``"kafka"`` (the group's
                coordinator) or ``"dual"`` (both; per partition the larger offset, as
                ``fetchOffsets`` with ``dual.commit.enabled``).
            malformed: where to list offset nodes that do not parse (they count as no
                offset); default: such a node raises.

        Returns:
            ``{tp: offset}`` for the partitions that have a committed offset.

        Raises:
            OffsetFetchError: Kafka-stored offsets could not be read.
            NoBrokersError, KafkaConnectionError: no broker to ask for Kafka-stored offsets.
            MalformedZookeeperDataError: an offset node does not parse (without
                ``malformed``).
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        wanted = None if tps is None else sorted(set(tps))
        in_zookeeper: dict[TopicPartition, int] = {}
        in_kafka: dict[TopicPartition, int] = {}
        if storage in ("zookeeper", "dual"):
            if wanted is None:
                topics = await self.zk.get_children(f"{layout.group_dir(group)}/offsets") or []
            else:
                topics = sorted({tp.topic for tp in wanted})
            for topic in sorted(topics):
                nodes = await self._partition_nodes(
                    layout.offsets_dir(group, topic), layout.decode_offset, malformed
                )
                in_zookeeper.update((TopicPartition(topic, p), o) for p, o in nodes.items())
            if wanted is not None:
                keep = set(wanted)
                in_zookeeper = {tp: o for tp, o in in_zookeeper.items() if tp in keep}
        if storage in ("kafka", "dual") and wanted != []:
            await self.kafka()  # unreachable brokers fail here, not after the fetch timeout
            store = self._kafka_offset_store(group)
            try:
                if wanted is None:
                    full = await store.fetch_metadata(None)
                    in_kafka = {tp: o for tp, (o, _) in full.items()}
                else:
                    in_kafka = await store.fetch(wanted)
            finally:
                await store.close()
        return {tp: o for tp, o in dual_fetch_result(in_zookeeper, in_kafka).items() if o >= 0}

    async def write_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int], storage: ResetStorage
    ) -> None:
        """Write a group's offsets to ZooKeeper, Kafka, or both (Kafka first, as
        :class:`~aiozkconsumer.offsets.DualOffsetStore`).

        Live members are not checked for here (:meth:`reset_offsets` does).

        Args:
            group: the group id.
            offsets: ``{tp: next offset to read}``, each >= 0.
            storage: ``"zookeeper"``, ``"kafka"`` (an OffsetCommit to the group's
                coordinator with generation -1) or ``"dual"``.

        Raises:
            OffsetCommitError: the coordinator did not accept every offset after 3 attempts
                (with ``"dual"``, ZooKeeper is then not written).
            NoBrokersError, KafkaConnectionError: no broker to commit to.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        if not offsets:
            return
        if storage in ("kafka", "dual"):
            await self.kafka()
            store = self._kafka_offset_store(group)
            try:
                await store.commit(offsets, retries=2)
            finally:
                await store.close()
        if storage in ("zookeeper", "dual"):
            for tp, offset in sorted(offsets.items()):
                await self.zk.set_or_create(
                    layout.offset_path(group, tp.topic, tp.partition),
                    layout.encode_offset(offset),
                )

    async def reset_offsets(
        self,
        group: str,
        scope: ResetScope | None,
        spec: ResetSpec,
        *,
        storage: ResetStorage = "zookeeper",
        execute: bool = False,
    ) -> ResetPlan:
        """Plan a reset of a group's offsets and, with ``execute``, write it.

        As ``kafka-consumer-groups.sh --reset-offsets`` (``ConsumerGroupCommand``, Kafka 2.x)
        for a ZooKeeper-coordinated group: the partitions of the scope
        (:func:`~aiozkconsumer.tools.reset.select_partitions`), their committed offsets, log
        start and end offsets (and for a time, ListOffsets' answer) are read, the plan made by
        :func:`~aiozkconsumer.tools.reset.plan_reset`, and with ``execute`` written to the
        storage. The group need not exist yet (offsets can be set before its first start).

        Args:
            group: the group id.
            scope: ``--topic`` / ``--all-topics``; ``None`` only with a
                :class:`~aiozkconsumer.tools.reset.FromOffsets` spec.
            spec: the mode (``--to-earliest`` ... ``--from-file``).
            storage: where offsets are read and written (see :meth:`committed_offsets`).
            execute: write the plan; default, a dry run that changes nothing.

        Returns:
            The plan (written when ``execute``). An offset node that does not parse counts
            as no committed offset, with a warning in the plan.

        Raises:
            GroupActiveError: ``execute`` and the group has live members (checked first:
                nothing is read or written then). As the original tools, the check and the
                writes are not atomic.
            UnknownGroupError: ``--all-topics`` and the group has no committed offset in the
                storage.
            UnknownTopicError: a topic of the scope or the file does not exist or lacks a
                partition named.
            ResetPlanError: ``--shift-by`` of a partition without a committed offset.
            BrokerNotAvailableError: a partition's leader gave no log start / end offset.
            OffsetFetchError, OffsetCommitError: Kafka-stored offsets could not be read /
                written.
            NoBrokersError, KafkaConnectionError: no broker answered.
            ZookeeperConnectionError: ZooKeeper is unreachable.
            ValueError: ``group`` cannot be a ZooKeeper path element.
        """
        layout.group_dir(group)
        if execute:
            members = await self.member_ids(group)
            if members:
                raise GroupActiveError(
                    group,
                    members,
                    f"Offsets of group '{group}' can only be reset while it has no live "
                    f"members; live now: {', '.join(members)}. Stop them first (their next "
                    "commit would overwrite the reset).",
                )
        malformed: list[MalformedNode] = []
        committed: dict[TopicPartition, int] = {}
        if isinstance(spec, FromOffsets):
            topics = {tp.topic for tp in spec.offsets}
        elif isinstance(scope, AllTopics):
            committed = await self.committed_offsets(group, storage=storage, malformed=malformed)
            if not committed:
                raise UnknownGroupError(
                    group,
                    f"Consumer group '{group}' has no committed offsets in {storage}: "
                    "nothing to reset with --all-topics.",
                )
            topics = {tp.topic for tp in committed}
        elif isinstance(scope, TopicsScope):
            topics = set(scope.topics)
        else:
            raise ValueError("a reset needs --topic or --all-topics (or --from-file)")
        partitions = await self.partitions_for(topics)
        tps = select_partitions(scope, spec, partitions, committed)
        if not isinstance(scope, AllTopics) or isinstance(spec, FromOffsets):
            committed = await self.committed_offsets(
                group, tps, storage=storage, malformed=malformed
            )
        log_start = await self.list_offsets(tps, "earliest")
        log_end = await self.list_offsets(tps, "latest")
        unanswered = [tp for tp in tps if tp not in log_start or tp not in log_end]
        if unanswered:
            raise BrokerNotAvailableError(
                "no log start / end offset from the leaders of "
                + ", ".join(f"[{tp.topic},{tp.partition}]" for tp in unanswered)
            )
        by_time = None
        if isinstance(spec, ToTimestamp):
            by_time = await self.offsets_for_times(tps, spec.timestamp_ms)
        plan = plan_reset(
            group,
            tps,
            spec,
            current=committed,
            log_start=log_start,
            log_end=log_end,
            by_time=by_time,
        )
        if malformed:
            plan = dataclasses.replace(
                plan,
                warnings=plan.warnings
                + tuple(
                    f"{m.path} does not parse ({m.reason}): counted as no committed offset"
                    for m in malformed
                ),
            )
        if execute:
            await self.write_offsets(group, plan.new_offsets, storage)
        return plan

    # -- rebalance verification ----------------------------------------------------------

    async def verify_rebalance(self, group: str) -> RebalanceVerification:
        """Check that every partition the group subscribes to has a valid owner.

        As ``VerifyConsumerRebalance`` (0.10.2.1, after KAFKA-3952): the topics are those the
        live members' registrations subscribe to (wildcards evaluated against the cluster's
        topics, internal topics included), and each partition's owner node must hold one of
        the thread ids those members have for the topic (:func:`check_ownership`).

        Returns:
            The verification (``ok`` is false when a problem was found).

        Raises:
            UnknownGroupError: the group does not exist.
            MalformedZookeeperDataError: a registration or owner node does not parse.
        """
        await self._require_group(group)
        members = await self.members(group)
        all_topics: list[str] | None = None
        thread_ids: dict[str, set[str]] = {}
        for member in members:
            reg = member.registration
            if reg is None:
                continue
            if reg.is_wildcard and all_topics is None:
                all_topics = await self.all_topics()
            topic_count = construct_topic_count(member.consumer_id, reg, all_topics or [], False)
            for topic, ids in topic_count.get_consumer_thread_ids_per_topic().items():
                thread_ids.setdefault(topic, set()).update(str(t) for t in ids)
        partitions = await self.partitions_for(thread_ids)
        owners = {topic: await self.owners(group, topic) for topic in partitions}
        problems = check_ownership(partitions, owners, thread_ids, group)
        return RebalanceVerification(
            group=group,
            members=tuple(m.consumer_id for m in members),
            owners={
                topic: {p: owners[topic].get(p) for p in parts}
                for topic, parts in partitions.items()
            },
            problems=tuple(problems),
        )
