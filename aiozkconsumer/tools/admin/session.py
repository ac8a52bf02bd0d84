"""The group tools' session: one ZooKeeper session, one cluster view, and the reads they share.

:class:`AdminSession` opens and closes the ZooKeeper session and the
:class:`~aiozkconsumer.cluster.ClusterView` over it (with its Kafka client, started on first
need), and reads what every group tool needs: the brokers, topics and partitions, the
partitions' earliest / latest offsets, and a group's members, owner and offset nodes. The
tools themselves (describe, offsets, reset, delete) extend it, and
:class:`~aiozkconsumer.tools.GroupAdmin` joins them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal, TypeVar

import anyio

from aiozkconsumer._resource import AsyncService

from ..._concurrency import gather
from ...cluster import ClusterView
from ...errors import MalformedZookeeperDataError, NoBrokersError
from ...kafka.client import EARLIEST, LATEST, KafkaClient
from ...kafka.stable_offsets import leader_offsets
from ...kafka.transactions import READ_COMMITTED, READ_UNCOMMITTED
from ...offsets import KafkaOffsetStore
from ...records import TopicPartition
from ...security import KafkaSecurity, ZookeeperSecurity
from ...zk import layout
from ...zk.client import ZkClient
from .errors import UnknownGroupError
from .judges import no_brokers_reason
from .nodes import MalformedNode, MemberInfo

__all__ = ["AdminSession", "leader_offsets"]

_V = TypeVar("_V")


_CLOSE_STEP_LIMIT_S = 5.0  # each step of AdminSession.close, in seconds


class AdminSession(AsyncService):
    """One ZooKeeper session and its cluster view, with the reads the group tools share.

    An async context manager; its arguments and attributes are
    :class:`~aiozkconsumer.tools.GroupAdmin`'s, the class to use.
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

    async def aclose(self) -> None:
        """Leaving ``async with``: :meth:`close`."""
        await self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.zk!r} {self.cluster!r}>"

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

    async def no_brokers_error(self, give: str = "its bootstrap servers") -> NoBrokersError:
        """The error for a ZooKeeper that names no broker, saying why (all down, a mistyped
        chroot, a KRaft cluster: :func:`~.judges.no_brokers_reason`).

        Args:
            give: how the user gives the brokers instead (``"--bootstrap-server"``).

        Raises:
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        ids, brokers, consumers = await gather(
            self.zk.exists(path)
            for path in (layout.BROKER_IDS_PATH, "/brokers", layout.CONSUMERS_PATH)
        )
        return NoBrokersError(
            no_brokers_reason(
                ids_exists=bool(ids),
                brokers_exists=bool(brokers),
                consumers_exists=bool(consumers),
                chroot=self.zk.chroot,
                give=give,
            )
        )

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
                raise await self.no_brokers_error()
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
                raise await self.no_brokers_error()
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
        self,
        tps: Iterable[TopicPartition],
        which: Literal["earliest", "latest"],
        *,
        isolation_level: str = "read_uncommitted",
    ) -> dict[TopicPartition, int]:
        """Ask each partition's leader for its earliest or latest (log end) offset.

        Args:
            tps: the partitions.
            which: ``"earliest"`` (log start offset) or ``"latest"`` (log end offset).
            isolation_level: ``"read_uncommitted"`` (default: ``"latest"`` is the high
                watermark) or ``"read_committed"`` (``"latest"`` is the last stable offset,
                as a ``read_committed`` consumer's lag is measured; ListOffsets v2+).

        Returns:
            ``{tp: offset}`` for the partitions whose leader answered.

        Raises:
            NoBrokersError: no broker is known or none answered a metadata request.
            KafkaConnectionError: no bootstrap broker answered.
            BrokerNotAvailableError: a partition has no leader, or its leader is unreachable.
        """
        return await self._list_offsets(
            tps,
            EARLIEST if which == "earliest" else LATEST,
            READ_COMMITTED if isolation_level == "read_committed" else READ_UNCOMMITTED,
        )

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
        self, tps: Iterable[TopicPartition], timestamp: int, isolation: int = READ_UNCOMMITTED
    ) -> dict[TopicPartition, int]:
        tps = sorted(set(tps))
        if not tps:
            return {}
        return await leader_offsets(await self.kafka(), tps, timestamp, isolation)

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

    # -- Kafka-stored offsets ------------------------------------------------------------

    def _kafka_offset_store(self, group: str) -> KafkaOffsetStore:
        """A store of the group's Kafka offsets, committing as a simple consumer (generation
        -1, member id ``""``), as a ZooKeeper-coordinated group with ``offsets.storage=kafka``."""
        return KafkaOffsetStore(
            self.kafka, group, backoff_ms=200, socket_timeout_ms=self.request_timeout_ms
        )
