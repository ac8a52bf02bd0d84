"""Where brokers, partitions and leaders come from.

Two sources, as the original used both: ZooKeeper (``/brokers/ids/*`` for the broker list and
``/brokers/topics/<t>`` for a topic's partitions — what the assignment is computed from), and
Kafka metadata through aiokafka's ``AIOKafkaClient`` (leaders, as the original's
``LeaderFinderThread`` asked brokers with a ``TopicMetadataRequest``). ``KafkaClient`` is the
Kafka adapter's (``kafka/client.py``), re-exported here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal, TypeVar

import anyio

from .errors import ConsumerClosedError, MalformedZookeeperDataError, NoBrokersError
from .kafka.client import EARLIEST, LATEST, KafkaClient
from .security import KafkaSecurity
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


def bootstrap_from_brokers(
    brokers: Iterable[layout.BrokerInfo], security_protocol: str = "PLAINTEXT"
) -> str:
    """A ``bootstrap.servers`` string from the brokers' endpoints of ``security_protocol``.

    Raises:
        InvalidConfigError: a broker has no endpoint of that protocol (``security.protocol``
            names one it does not offer).
        MalformedZookeeperDataError: a broker's endpoint does not parse.
    """
    addrs = [b.address_for(security_protocol) for b in brokers]
    return ",".join(f"{host}:{port}" for host, port in addrs)


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
        zk: the ZooKeeper session (started by the owner); ``None`` for a cluster known only
            through Kafka (a Kafka-coordinated group): metadata then always comes from Kafka.
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
        zk: ZkClient | None,
        *,
        source: str = "auto",
        bootstrap_servers: str | None = None,
        client_id: str = "aiozkconsumer",
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 200,
        retry: Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]] | None = None,
        security: KafkaSecurity | None = None,
    ) -> None:
        self.zk = zk
        self.security = security or KafkaSecurity()
        self.source = source
        self.bootstrap_servers = bootstrap_servers or None
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._retry = retry
        self._from_kafka: bool | None = None
        self._kafka: KafkaClient | None = None
        self._kafka_lock = anyio.Lock()
        self._closes = 0  # close() calls so far: a start that a close overtook is undone

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
            zk = self.zk
            if zk is None:
                self._from_kafka = True
                return True
            exists = await self._zk_step(
                f"reading {layout.BROKER_IDS_PATH}",
                lambda: zk.exists(layout.BROKER_IDS_PATH),
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
        if self.zk is None:
            return []
        return await read_brokers(self.zk)

    async def kafka(self, brokers: Iterable[layout.BrokerInfo] | None = None) -> KafkaClient:
        """The Kafka client, started on first use (one, however many tasks ask at once).

        Args:
            brokers: brokers already read from ZooKeeper, to bootstrap from when
                ``bootstrap_servers`` is unset (read afresh when ``None``).

        Raises:
            NoBrokersError: no ``bootstrap_servers`` and no broker under ``/brokers/ids``.
            KafkaConnectionError: no broker answered.
            ConsumerClosedError: :meth:`close` ran while the client started (it is closed).
        """
        async with self._kafka_lock:
            if self._kafka is None:
                closes = self._closes
                servers = self.bootstrap_servers
                if not servers:
                    found = list(brokers) if brokers is not None else await self.brokers()
                    if not found:
                        raise NoBrokersError(
                            f"no brokers found in ZooKeeper under {layout.BROKER_IDS_PATH} "
                            "and bootstrap.servers is not set"
                        )
                    servers = bootstrap_from_brokers(found, self.security.security_protocol)
                kafka = KafkaClient(
                    servers,
                    client_id=self.client_id,
                    request_timeout_ms=self.request_timeout_ms,
                    retry_backoff_ms=self.retry_backoff_ms,
                    security=self.security,
                )
                try:
                    await kafka.start()
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await kafka.close()
                    raise
                if closes != self._closes:
                    # close() ran while this client started: it never saw it, so nobody would.
                    with anyio.CancelScope(shield=True):
                        await kafka.close()
                    raise ConsumerClosedError(
                        "the Kafka client was closed while it started (the owner closed)"
                    )
                self._kafka = kafka
            return self._kafka

    async def all_topics(self) -> list[str]:
        """Every topic of the cluster, sorted (``/brokers/topics`` or Kafka metadata).

        Raises:
            NoBrokersError, KafkaConnectionError: Kafka metadata was needed and unavailable.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        if await self.metadata_from_kafka() or self.zk is None:
            return sorted(await (await self.kafka()).all_topics())
        return sorted(await self.zk.get_children(layout.BROKER_TOPICS_PATH) or [])

    async def partitions_for_topics(self, topics: Iterable[str]) -> dict[str, tuple[int, ...]]:
        """The sorted partition ids of each topic; an unknown topic has none.

        Raises:
            MalformedZookeeperDataError: a topic node does not parse.
            NoBrokersError, KafkaConnectionError: Kafka metadata was needed and unavailable.
        """
        topics = sorted(set(topics))
        if await self.metadata_from_kafka() or self.zk is None:
            return await (await self.kafka()).partitions_for_topics(topics)
        return await read_partitions_for_topics(self.zk, topics)

    async def close(self) -> None:
        """Close the Kafka client, if started (bounded; never raises).

        A client still starting (:meth:`kafka` in another task) is closed when its start ends,
        and that :meth:`kafka` raises ``ConsumerClosedError``. A later :meth:`kafka` starts a
        new client.
        """
        self._closes += 1
        kafka, self._kafka = self._kafka, None
        if kafka is not None:
            with anyio.CancelScope(shield=True):
                await kafka.close()

    def __repr__(self) -> str:
        source = {None: "undecided", True: "kafka", False: "zookeeper"}[self._from_kafka]
        return f"<ClusterView [{source}] kafka={self._kafka!r}>"
