"""Group administration over ZooKeeper: the old consumer's group and offset tools (Kafka 0.10.2.1).

:class:`GroupAdmin` holds one ZooKeeper session and one
:class:`~aiozkconsumer.cluster.ClusterView` (brokers, topics, partitions and, when needed, a
Kafka client) for: listing, describing and deleting groups (``ConsumerGroupCommand
--zookeeper``), the offset checker's view (``ConsumerOffsetChecker``), offset export / import /
update (``ExportZkOffsets``, ``ImportZkOffsets``, ``UpdateOffsetsInZK``) and the rebalance check
(``VerifyConsumerRebalance``, whose rules are the pure :func:`check_ownership`).

Whether topics and partitions come from ZooKeeper's ``/brokers/topics`` or from Kafka metadata
is decided by the view (:func:`~aiozkconsumer.cluster.metadata_source`, as the connector's
``cluster.metadata.source=auto``): Kafka when ZooKeeper has no ``/brokers/ids`` (a KRaft
cluster) and ``bootstrap_servers`` is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, TypeVar

import anyio

from .._concurrency import gather
from ..cluster import ClusterView
from ..errors import (
    BrokerNotAvailableError,
    ConsumerError,
    NoBrokersError,
    UnknownTopicError,
)
from ..kafka.client import EARLIEST, LATEST, KafkaClient
from ..offsets import NO_OFFSET, KafkaOffsetStore
from ..records import TopicPartition
from ..subscription import construct_topic_count
from ..zk import layout
from ..zk.client import ZkClient
from .offsets_file import OffsetEntry

_V = TypeVar("_V")

__all__ = [
    "GroupActiveError",
    "GroupAdmin",
    "GroupDescription",
    "MemberInfo",
    "OffsetsStorage",
    "PartitionOffsetState",
    "RebalanceVerification",
    "UnknownGroupError",
    "check_ownership",
    "owner_consumer_id",
]

OffsetsStorage = Literal["zookeeper", "kafka"]
"""Where :meth:`GroupAdmin.describe_group` reads committed offsets (``offsets.storage``)."""

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
class GroupDescription:
    """What ``groups describe`` shows of a group.

    Attributes:
        group: the group id.
        partitions: every partition of the group's topics, sorted by topic and partition.
        members: the live members, sorted by consumer id.
    """

    group: str
    partitions: tuple[PartitionOffsetState, ...]
    members: tuple[MemberInfo, ...]

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
    ) -> None:
        self.zookeeper_connect = zookeeper_connect
        self.bootstrap_servers = bootstrap_servers or None
        self.request_timeout_ms = request_timeout_ms
        self.client_id = client_id
        self.zk = ZkClient(
            zookeeper_connect,
            session_timeout_ms=session_timeout_ms,
            connection_timeout_ms=connection_timeout_ms,
        )
        self.cluster = ClusterView(
            self.zk,
            bootstrap_servers=self.bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
        )
        self._metadata_checked = False

    async def start(self) -> None:
        """Open the ZooKeeper session.

        Raises:
            ZookeeperConnectionError: ZooKeeper did not answer within
                ``connection_timeout_ms``.
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
        tps = sorted(set(tps))
        if not tps:
            return {}
        kafka = await self.kafka()
        if not await kafka.refresh_metadata({tp.topic for tp in tps}):
            raise NoBrokersError(f"no broker of {kafka.bootstrap_servers!r} answered")
        timestamp = EARLIEST if which == "earliest" else LATEST
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
        self, directory: str, decode: Callable[[bytes, str], _V]
    ) -> dict[int, _V]:
        """Partition -> decoded data of the numbered children of ``directory``, read at once."""
        children = [c for c in await self.zk.get_children(directory) or [] if c.isdigit()]
        paths = [f"{directory}/{c}" for c in children]
        datas = await gather(self.zk.get_data(path) for path in paths)
        return {
            int(child): decode(data, path)
            for child, path, data in zip(children, paths, datas, strict=True)
            if data is not None
        }

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
            The description.

        Raises:
            UnknownGroupError: ``/consumers/<group>`` does not exist.
            NoBrokersError, KafkaConnectionError, BrokerNotAvailableError: the log end offsets
                (or Kafka-stored offsets) could not be read.
            OffsetFetchError: Kafka-stored offsets could not be read.
            MalformedZookeeperDataError: a node of the group does not parse.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        await self._require_group(group)
        members = await self.members(group)
        wanted = sorted(set(topics)) if topics is not None else await self.group_topics(group)
        partitions = await self.partitions_for(wanted)
        tps: list[TopicPartition] = []
        owners: dict[TopicPartition, str] = {}
        offsets: dict[TopicPartition, int] = {}
        for topic in wanted:
            committed = await self.zookeeper_offsets(group, topic)
            topic_owners = await self.owners(group, topic)
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
        )

    async def delete_group(self, group: str) -> None:
        """Delete ``/consumers/<group>`` and everything below it, if no member is live.

        As ``AdminUtils.deleteConsumerGroupInZK`` (0.10.2). The check and the deletion are not
        atomic (as in the original): a member joining in between is not noticed.

        Raises:
            UnknownGroupError: the group does not exist.
            GroupActiveError: the group has live members.
        """
        await self._require_group(group)
        members = await self.member_ids(group)
        if members:
            raise GroupActiveError(
                group,
                members,
                f"Delete for group '{group}' failed because its consumers are still active.",
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
