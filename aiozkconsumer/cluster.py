"""Where brokers, partitions and leaders come from.

Two sources, as the original used both: ZooKeeper (``/brokers/ids/*`` for the broker list and
``/brokers/topics/<t>`` for a topic's partitions — what the assignment is computed from), and
Kafka metadata through aiokafka's ``AIOKafkaClient`` (leaders, as the original's
``LeaderFinderThread`` asked brokers with a ``TopicMetadataRequest``). ``KafkaClient`` wraps
``AIOKafkaClient`` and translates its errors; nothing of ``aiokafka.errors`` escapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar

import anyio
from aiokafka import errors as kafka_errors
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from .errors import (
    BrokerNotAvailableError,
    KafkaConnectionError,
    MalformedZookeeperDataError,
    NoBrokersError,
    UnknownTopicError,
)
from .records import TopicPartition
from .zk import layout
from .zk.client import ZkClient

__all__ = [
    "EARLIEST",
    "LATEST",
    "ClusterView",
    "KafkaClient",
    "metadata_source",
    "read_brokers",
    "read_partitions_for_topics",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

EARLIEST = -2
"""ListOffsets timestamp asking for the log start offset (``OffsetRequest.EarliestTime``)."""
LATEST = -1
"""ListOffsets timestamp asking for the log end offset (``OffsetRequest.LatestTime``)."""


async def read_brokers(zk: ZkClient) -> list[layout.BrokerInfo]:
    """Read every registered broker from ``/brokers/ids`` (``ZkUtils.getAllBrokersInCluster``).

    Returns:
        The brokers sorted by id; empty when none is registered. A broker whose node vanishes
        between listing and reading is left out.

    Raises:
        MalformedZookeeperDataError: a broker node holds JSON that is not a broker registration.
        ZookeeperConnectionError: ZooKeeper is unreachable.
    """
    ids = await zk.get_children(layout.BROKER_IDS_PATH) or []
    brokers = []
    for name in ids:
        path = layout.broker_path(int(name)) if name.isdigit() else None
        if path is None:
            raise MalformedZookeeperDataError(
                f"{layout.BROKER_IDS_PATH}/{name}", None, "broker id is not an integer"
            )
        data = await zk.get_data(path)
        if data is not None:
            brokers.append(layout.decode_broker(int(name), data, path))
    return sorted(brokers, key=lambda b: b.broker_id)


async def read_partitions_for_topics(
    zk: ZkClient, topics: Iterable[str]
) -> dict[str, tuple[int, ...]]:
    """Read the partition ids of each topic from ``/brokers/topics/<t>``.

    As ``ZkUtils.getPartitionsForTopics``: a missing topic node gives an empty tuple.

    Returns:
        ``{topic: sorted partition ids}``.

    Raises:
        MalformedZookeeperDataError: a topic node does not hold the expected JSON.
    """
    result: dict[str, tuple[int, ...]] = {}
    for topic in sorted(set(topics)):
        path = layout.topic_path(topic)
        data = await zk.get_data(path)
        result[topic] = (
            () if data is None else tuple(sorted(layout.decode_topic_partitions(data, path)))
        )
    return result


def bootstrap_from_brokers(brokers: Iterable[layout.BrokerInfo]) -> str:
    """A ``bootstrap.servers`` string from the brokers' PLAINTEXT endpoints."""
    addrs = [b.plaintext_address() for b in brokers]
    return ",".join(f"{host}:{port}" for host, port in addrs)


class KafkaClient:
    """Kafka protocol access through aiokafka's ``AIOKafkaClient``.

    Args:
        bootstrap_servers: ``host:port[,host:port]``.
        client_id: ``client.id`` sent with every request.
        request_timeout_ms: ``socket.timeout.ms``.
        retry_backoff_ms: ``refresh.leader.backoff.ms``.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 200,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._client = AIOKafkaClient(
            bootstrap_servers=bootstrap_servers.split(","),
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
        )
        self._started = False

    @property
    def raw(self) -> AIOKafkaClient:
        """The underlying ``AIOKafkaClient``."""
        return self._client

    async def start(self) -> None:
        """Connect and read the cluster metadata.

        Raises:
            KafkaConnectionError: no bootstrap broker answered.
        """
        try:
            await self._client.bootstrap()
        except kafka_errors.KafkaError as e:
            await self.close()
            raise KafkaConnectionError(
                f"could not reach any Kafka broker of {self.bootstrap_servers!r}: {e}"
            ) from e
        self._started = True

    async def close(self) -> None:
        """Close every connection and aiokafka's metadata task (never raises)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._client.close(), 5)

    async def refresh_metadata(self, topics: Iterable[str]) -> bool:
        """Track ``topics`` and refresh metadata now. Returns ``False`` if no broker answered."""
        wanted = set(topics)
        tracked = set(self._client._topics)
        if not wanted <= tracked:
            self._client.set_topics(tracked | wanted)
        return bool(await self._client.force_metadata_update())

    async def all_topics(self) -> set[str]:
        """Every topic in the cluster, from a fresh metadata request.

        Raises:
            NoBrokersError: no broker answered.
        """
        try:
            md = await self._client.fetch_all_metadata()
        except kafka_errors.KafkaError as e:
            raise NoBrokersError(
                f"no broker of {self.bootstrap_servers!r} answered a metadata request: {e}"
            ) from e
        return set(md.topics())

    async def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """Number of partitions of each topic (0 for an unknown topic), from fresh metadata.

        Raises:
            NoBrokersError: no broker answered.
        """
        topics = sorted(set(topics))
        if topics and not await self.refresh_metadata(topics):
            raise NoBrokersError(f"no broker of {self.bootstrap_servers!r} answered")
        return {t: len(self.partitions_for(t) or ()) for t in topics}

    async def partitions_for_topics(self, topics: Iterable[str]) -> dict[str, tuple[int, ...]]:
        """Sorted partition ids of each topic (empty for an unknown topic), from fresh metadata.

        Raises:
            NoBrokersError: no broker answered.
        """
        topics = sorted(set(topics))
        if topics and not await self.refresh_metadata(topics):
            raise NoBrokersError(f"no broker of {self.bootstrap_servers!r} answered")
        return {t: tuple(sorted(self.partitions_for(t) or ())) for t in topics}

    def leader_for(self, tp: TopicPartition) -> int | None:
        """The leader's broker id, or ``None`` when unknown or unavailable."""
        leader = self._client.cluster.leader_for_partition(
            KafkaTopicPartition(tp.topic, tp.partition)
        )
        return None if leader is None or leader < 0 else int(leader)

    def partitions_for(self, topic: str) -> set[int] | None:
        """Partition ids of ``topic`` from Kafka metadata, or ``None`` if unknown."""
        parts = self._client.cluster.partitions_for_topic(topic)
        return None if parts is None else set(parts)

    def broker_address(self, node_id: int) -> str:
        """``host:port`` of a broker, for messages and metrics."""
        md = self._client.cluster.broker_metadata(node_id)
        return f"{md.host}:{md.port}" if md is not None else f"broker {node_id}"

    async def send(self, node_id: int, request: Any) -> Any:
        """Send a request to a broker and return its response.

        Raises:
            BrokerNotAvailableError: the broker could not be reached or timed out.
        """
        try:
            return await self._client.send(node_id, request)
        except kafka_errors.KafkaError as e:
            raise BrokerNotAvailableError(
                f"request to {self.broker_address(node_id)} failed: {e!r}"
            ) from e

    async def list_offsets(
        self, node_id: int, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """Ask one broker (the partitions' leader) for offsets by timestamp (ListOffsets).

        Args:
            node_id: the leader of every partition in ``timestamps``.
            timestamps: ``{tp: EARLIEST | LATEST | epoch ms}``.

        Returns:
            ``{tp: offset}`` for the partitions the broker answered without error.

        Raises:
            BrokerNotAvailableError: the broker could not be reached.
            UnknownTopicError: the broker does not know a partition's topic.
        """
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for tp, ts in timestamps.items():
            by_topic.setdefault(tp.topic, []).append((tp.partition, ts))
        response = await self.send(node_id, OffsetRequest(-1, 0, list(by_topic.items())))
        result: dict[TopicPartition, int] = {}
        for topic, parts in response.topics:
            for partition, error_code, *info in parts:
                err = kafka_errors.for_code(error_code)
                if err is kafka_errors.NoError:
                    offset = info[-1] if response.API_VERSION >= 1 else (info[0] or [-1])[0]
                    result[TopicPartition(topic, partition)] = int(offset)
                elif err is kafka_errors.UnknownTopicOrPartitionError:
                    raise UnknownTopicError(topic, f"broker {node_id} does not know {topic!r}")
                else:
                    log.debug("ListOffsets for [%s,%s] failed: %s", topic, partition, err)
        return result

    async def log_end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Log end offsets of partitions, asking each partition's leader.

        Raises:
            NoBrokersError: metadata could not be refreshed from any broker.
            BrokerNotAvailableError: a leader could not be reached.
        """
        tps = list(tps)
        if not await self.refresh_metadata({tp.topic for tp in tps}):
            raise NoBrokersError(f"no broker of {self.bootstrap_servers!r} answered")
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp in tps:
            leader = self.leader_for(tp)
            if leader is None:
                raise BrokerNotAvailableError(f"partition {tp} has no leader")
            by_leader.setdefault(leader, {})[tp] = LATEST
        result: dict[TopicPartition, int] = {}
        for leader, ts in by_leader.items():
            result.update(await self.list_offsets(leader, ts))
        return result

    def __repr__(self) -> str:
        return f"<KafkaClient {self.bootstrap_servers} [{'started' if self._started else 'new'}]>"


def metadata_source(
    configured: str, broker_ids_exists: bool, bootstrap_servers: str | None
) -> Literal["zookeeper", "kafka"]:
    """Where topics, partitions and brokers come from: the one rule (pure).

    Args:
        configured: ``cluster.metadata.source``: ``"zookeeper"``, ``"kafka"`` or ``"auto"``.
        broker_ids_exists: whether ``/brokers/ids`` exists in ZooKeeper. A ZooKeeper-mode
            cluster keeps that node even while every broker is down (restarting); a KRaft
            cluster never creates it. Its children are *not* the test: they vanish while the
            brokers restart, and a ZooKeeper-mode cluster must not be switched to Kafka
            metadata then.
        bootstrap_servers: ``bootstrap.servers`` (``None`` or empty when unset).

    Returns:
        ``"kafka"`` when configured so, or with ``auto`` on a cluster without
        ``/brokers/ids`` when ``bootstrap.servers`` is set; ``"zookeeper"`` otherwise.
    """
    if configured in ("zookeeper", "kafka"):
        return configured  # type: ignore[return-value]
    return "kafka" if not broker_ids_exists and bootstrap_servers else "zookeeper"


class ClusterView:
    """One view of the cluster: brokers, topics and partitions, and the Kafka client.

    Used by the connector, the tools and the Spark source alike, so that the decision
    "metadata from ZooKeeper ``/brokers`` or from Kafka" (:func:`metadata_source`) is made in
    one place, once per view. The Kafka client is started on first need, from
    ``bootstrap_servers`` or else from the brokers registered in ZooKeeper.

    Args:
        zk: the ZooKeeper session (started by the owner).
        source: ``cluster.metadata.source`` (``auto``, ``zookeeper`` or ``kafka``).
        bootstrap_servers: ``bootstrap.servers``, ``host:port[,...]``, or ``None``.
        client_id: ``client.id`` of Kafka requests.
        request_timeout_ms: ``socket.timeout.ms`` of Kafka requests.
        retry_backoff_ms: ``refresh.leader.backoff.ms``.
        retry: runs a ZooKeeper step, retrying it across connection loss (the connector's
            ``retry_across_connection_loss``); default: run it once.
    """

    def __init__(
        self,
        zk: ZkClient,
        *,
        source: str = "auto",
        bootstrap_servers: str | None = None,
        client_id: str = "aiozkconsumer",
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 200,
        retry: Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]] | None = None,
    ) -> None:
        self.zk = zk
        self.source = source
        self.bootstrap_servers = bootstrap_servers or None
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._retry = retry
        self._from_kafka: bool | None = None
        self._kafka: KafkaClient | None = None
        self._kafka_lock = anyio.Lock()

    @property
    def kafka_client(self) -> KafkaClient | None:
        """The Kafka client if started, else ``None`` (never starts one)."""
        return self._kafka

    async def _zk_step(self, what: str, op: Callable[[], Awaitable[_T]]) -> _T:
        if self._retry is None:
            return await op()
        result: _T = await self._retry(what, op)
        return result

    async def metadata_from_kafka(self) -> bool:
        """Whether topics and partitions come from Kafka metadata (decided once).

        Raises:
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        if self._from_kafka is None:
            exists = await self._zk_step(
                f"reading {layout.BROKER_IDS_PATH}",
                lambda: self.zk.exists(layout.BROKER_IDS_PATH),
            )
            self._from_kafka = (
                metadata_source(self.source, exists, self.bootstrap_servers) == "kafka"
            )
        return self._from_kafka

    async def brokers(self) -> list[layout.BrokerInfo]:
        """The brokers registered in ZooKeeper, sorted by id (empty on a KRaft cluster).

        Raises:
            MalformedZookeeperDataError: a broker node does not parse.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        return await read_brokers(self.zk)

    async def kafka(self, brokers: Iterable[layout.BrokerInfo] | None = None) -> KafkaClient:
        """The Kafka client, started on first use (one, however many tasks ask at once).

        Args:
            brokers: brokers already read from ZooKeeper, to bootstrap from when
                ``bootstrap_servers`` is unset (read afresh when ``None``).

        Raises:
            NoBrokersError: no ``bootstrap_servers`` and no broker under ``/brokers/ids``.
            KafkaConnectionError: no broker answered.
        """
        async with self._kafka_lock:
            if self._kafka is None:
                servers = self.bootstrap_servers
                if not servers:
                    found = list(brokers) if brokers is not None else await self.brokers()
                    if not found:
                        raise NoBrokersError(
                            f"no brokers found in ZooKeeper under {layout.BROKER_IDS_PATH} "
                            "and bootstrap.servers is not set"
                        )
                    servers = bootstrap_from_brokers(found)
                kafka = KafkaClient(
                    servers,
                    client_id=self.client_id,
                    request_timeout_ms=self.request_timeout_ms,
                    retry_backoff_ms=self.retry_backoff_ms,
                )
                try:
                    await kafka.start()
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await kafka.close()
                    raise
                self._kafka = kafka
            return self._kafka

    async def all_topics(self) -> list[str]:
        """Every topic of the cluster, sorted (``/brokers/topics`` or Kafka metadata).

        Raises:
            NoBrokersError, KafkaConnectionError: Kafka metadata was needed and unavailable.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        if await self.metadata_from_kafka():
            return sorted(await (await self.kafka()).all_topics())
        return sorted(await self.zk.get_children(layout.BROKER_TOPICS_PATH) or [])

    async def partitions_for_topics(self, topics: Iterable[str]) -> dict[str, tuple[int, ...]]:
        """The sorted partition ids of each topic; an unknown topic has none.

        Raises:
            MalformedZookeeperDataError: a topic node does not parse.
            NoBrokersError, KafkaConnectionError: Kafka metadata was needed and unavailable.
        """
        topics = sorted(set(topics))
        if await self.metadata_from_kafka():
            return await (await self.kafka()).partitions_for_topics(topics)
        return await read_partitions_for_topics(self.zk, topics)

    async def close(self) -> None:
        """Close the Kafka client, if started (bounded; never raises)."""
        kafka, self._kafka = self._kafka, None
        if kafka is not None:
            with anyio.CancelScope(shield=True):
                await kafka.close()

    def __repr__(self) -> str:
        source = {None: "undecided", True: "kafka", False: "zookeeper"}[self._from_kafka]
        return f"<ClusterView [{source}] kafka={self._kafka!r}>"
