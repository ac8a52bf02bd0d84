"""``ZookeeperConsumerConnector``: lifecycle, task group and wiring of one consumer.

The asyncio counterpart of ``ZookeeperConsumerConnector.scala`` (0.10.2). One anyio task group
per connector owns every background task — the ZooKeeper watches, the rebalance worker, the
auto-commit task and the fetcher — so nothing is fire-and-forget and a background failure
reaches the owner of the ``async with`` block.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import re
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, TypeVar

import anyio

from .cluster import KafkaClient, bootstrap_from_brokers, read_brokers
from .config import ConsumerConfig
from .errors import (
    BrokerNotAvailableError,
    CommitFencedError,
    ConsumerClosedError,
    ConsumerError,
    ConsumerRebalanceFailedError,
    InvalidConfigError,
    MalformedZookeeperDataError,
    MessageStreamsExistError,
    NoBrokersError,
    OffsetStorageError,
    ZookeeperConnectionError,
    ZookeeperError,
    ZookeeperSessionExpiredError,
)
from .fetcher import FetcherManager
from .metrics import ConsumerMetrics
from .offsets import OffsetStore, ZookeeperOffsetStore, make_offset_store
from .rebalance import Rebalancer, RebalanceRecord
from .records import OwnershipGate, PartitionTopicInfo, TopicPartition
from .stream import SHUTDOWN_COMMAND, ChunkQueue, Decoder, KafkaStream
from .subscription import (
    ConsumerThreadId,
    StaticTopicCount,
    TopicCount,
    TopicFilter,
    WildcardTopicCount,
)
from .zk import layout
from .zk.client import ZkClient

__all__ = [
    "ConnectorState",
    "ConnectorStatistics",
    "ConsumerRebalanceListener",
    "ZookeeperConsumerConnector",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

_CONNECTION_RETRY_PAUSE_S = 0.5
"""Pause before retrying a ZooKeeper step after connection loss (once connected again)."""


class ConnectorState(enum.Enum):
    """Where a connector is in its life, and what it may do there.

    - ``NEW``: constructed, not started. No session; fetches, commits and hands out nothing.
    - ``CONNECTED``: ZooKeeper session open, no streams yet. Not registered, owns nothing.
    - ``REBALANCING``: registered; computing and applying a new assignment. Partitions that
      stay with this member keep being fetched and handed out; partitions that move are no
      longer handed out, their queued chunks are dropped and their consumed offsets committed
      once, before their owner nodes are released.
    - ``RUNNING``: owns its assignment; fetches, auto-commits and hands records to the streams.
    - ``REBALANCE_FAILED``: registered but owns nothing after ``rebalance.max.retries`` failed
      attempts (the original stayed idle silently; here the state and ``last_error`` say so).
      The next trigger (a member change, a new session) rebalances again.
    - ``SUSPENDED``: the ZooKeeper connection is lost and the session may be expiring, so
      another member may take the partitions: records are held back and nothing is
      committed; fetching may go on. Back to the previous state when the same session
      returns; a new session (expiry) leads to a rebalance. The original kept delivering.
    - ``CLOSING``: shutting down: fetchers stopped, final commit, session closing.
    - ``CLOSED``: done; streams have ended. Nothing more happens.
    """

    NEW = "new"
    CONNECTED = "connected"
    REBALANCING = "rebalancing"
    RUNNING = "running"
    REBALANCE_FAILED = "rebalance_failed"
    SUSPENDED = "suspended"
    CLOSING = "closing"
    CLOSED = "closed"


class ConsumerRebalanceListener(Protocol):
    """Hooks around a rebalance (``kafka.javaapi.consumer.ConsumerRebalanceListener``, 0.9+).

    Both run in the rebalance task under the rebalance lock, on every attempt; an exception
    fails the attempt.
    """

    async def before_releasing_partitions(self, partition_ownership: dict[str, set[int]]) -> None:
        """Called after fetchers stopped, before owner nodes are deleted.

        Args:
            partition_ownership: ``{topic: {partition, ...}}`` owned until now.
        """

    async def before_starting_fetchers(
        self, consumer_id: str, global_partition_assignment: dict[str, dict[int, ConsumerThreadId]]
    ) -> None:
        """Called after owner nodes were written, before fetchers start.

        Args:
            consumer_id: this consumer's id string.
            global_partition_assignment: ``{topic: {partition: owner thread id}}`` of the
                whole group, for the topics this consumer subscribes to.
        """


@dataclass(frozen=True)
class ConnectorStatistics:
    """A snapshot of a connector's state (``connector.statistics()``).

    Attributes:
        state: the lifecycle state.
        consumer_id: the consumer id string (``<group>_<consumer.id>``).
        owned_partitions: partitions owned now, sorted.
        consumed_offsets: next offset to hand out, per owned partition.
        committed_offsets: the last offset committed (or read at claim time), per owned
            partition.
        lag: per owned partition, the high watermark of the last fetch response minus the
            consumed offset (records not yet handed out); absent before the first fetch.
        generation: successful rebalances so far.
        rebalances: every rebalance so far, oldest first.
        failed_rebalance_attempts: attempts that failed (a conflict, an error) so far.
        session_id: the ZooKeeper session id (``None`` before the first session).
        zookeeper_commits: offset nodes written to ZooKeeper so far.
        kafka_commits: partition offsets Kafka accepted so far.
        last_error: the last rebalance failure, if the state is ``REBALANCE_FAILED``.
    """

    state: ConnectorState
    consumer_id: str
    owned_partitions: tuple[TopicPartition, ...]
    consumed_offsets: Mapping[TopicPartition, int]
    committed_offsets: Mapping[TopicPartition, int]
    lag: Mapping[TopicPartition, int]
    generation: int
    rebalances: tuple[RebalanceRecord, ...]
    failed_rebalance_attempts: int
    session_id: int | None
    zookeeper_commits: int
    kafka_commits: int
    last_error: BaseException | None


LEASE_FRACTION = 0.8
"""Share of the session timeout a successful ZooKeeper round trip extends the lease by."""

METADATA_REFRESH_MS = 5000
"""How often a consumer on a KRaft cluster (metadata from Kafka) re-reads topics and partition
counts; ZooKeeper-mode clusters are followed with watches instead."""

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def _check_topic_name(topic: str) -> None:
    if not isinstance(topic, str) or not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise InvalidConfigError(
            "topic_count_map",
            f"illegal topic name {topic!r}: 1-249 of ASCII alphanumerics, '.', '_' and '-'",
        )


def generate_consumer_id() -> str:
    """``<hostname>-<epoch ms>-<first 8 hex digits of a random UUID>``, as the original."""
    return f"{socket.gethostname()}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"


class ZookeeperConsumerConnector:
    """A member of a ZooKeeper-coordinated consumer group.

    Use as an async context manager, entered and left in one task::

        async with ZookeeperConsumerConnector(config) as connector:
            streams = await connector.create_message_streams({"payments": 2})
            async for msg in streams["payments"][0]:
                ...

    Entering opens the ZooKeeper session; leaving stops fetchers, ends the streams, commits
    consumed offsets (auto-commit on), and closes the session, so the group's other members
    rebalance at once (``shutdown``, 0.10.2 order).

    Args:
        config: the consumer configuration.
        fetch: ``False`` makes a member that takes part in the group (registration,
            rebalances, owner nodes, offsets) but fetches nothing: whoever owns it reads the
            owned partitions itself (the Spark source plans offset ranges for them) and commits
            with ``commit_offsets(offsets)``. Its streams stay empty.

    Raises:
        ZookeeperConnectionError: (on entering) ZooKeeper did not answer within
            ``zookeeper.connection.timeout.ms``.
    """

    def __init__(self, config: ConsumerConfig, *, fetch: bool = True) -> None:
        self.config = config
        self.fetch_enabled = fetch
        self.consumer_id_string = (
            f"{config.group_id}_{config.consumer_id or generate_consumer_id()}"
        )
        self.zk = ZkClient(
            config.zookeeper_connect,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.effective_zookeeper_connection_timeout_ms,
        )
        self.kafka: KafkaClient | None = None
        self.offset_store: OffsetStore = make_offset_store(config, self.zk, self.ensure_kafka)
        self.metrics = ConsumerMetrics(config.effective_client_id, config.group_id)
        """The original's metrics (``snapshot()``, ``collector()`` for Prometheus)."""
        self.fetcher: FetcherManager = FetcherManager(None, config, self.metrics)  # type: ignore[arg-type]
        self.topic_registry: dict[TopicPartition, PartitionTopicInfo] = {}
        self.committed_offsets: dict[TopicPartition, int] = {}
        self._owned_gauges: dict[str, Any] = {}
        self.listener: ConsumerRebalanceListener | None = None
        self.closing = False
        self._state = ConnectorState.NEW
        self._state_changed = anyio.Event()
        self._last_error: BaseException | None = None
        self._topic_count: TopicCount | None = None
        self._streams: dict[str, list[KafkaStream]] = {}
        self._queues: dict[tuple[str, ConsumerThreadId], ChunkQueue] = {}
        self._rebalancer = Rebalancer(self)
        self._rebalance_lock = anyio.Lock()
        self._rebalance_requested = anyio.Event()
        self._pending_reason = ""
        self._tg: Any = None
        self.gate = OwnershipGate()
        self._wildcard_queues: list[ChunkQueue] = []
        self._watched_topics: set[str] = set()
        self._registered_session: int | None = None
        self._session_replaced = False
        self._metadata_from_kafka: bool | None = None
        self._watching_broker_ids = False
        self._kafka_lock = anyio.Lock()
        self._state_before_suspend = ConnectorState.RUNNING
        self._bg_tg: Any = None
        self._bg_scope: anyio.CancelScope | None = None
        self._bg_done: anyio.Event | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def state(self) -> ConnectorState:
        """The lifecycle state (see ``ConnectorState`` for what each allows)."""
        return self._state

    def _set_state(self, state: ConnectorState) -> None:
        self._state = state
        self._state_changed.set()
        self._state_changed = anyio.Event()

    async def wait_for_state_change(self) -> ConnectorState:
        """Wait until the lifecycle state changes (or is set again, e.g. after a rebalance).

        Returns:
            The new state.
        """
        await self._state_changed.wait()
        return self._state

    @property
    def rebalance_pending(self) -> bool:
        """Whether a rebalance was requested and has not started yet."""
        return self._rebalance_requested.is_set()

    @property
    def task_group(self) -> Any:
        """The task group owning this connector's background tasks."""
        if self._bg_tg is None:
            raise ConsumerClosedError("the connector is not started")
        return self._bg_tg

    async def __aenter__(self) -> ZookeeperConsumerConnector:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            await self.shutdown()
        finally:
            tg, self._tg = self._tg, None
        if tg is None:
            return None
        try:
            return await tg.__aexit__(exc_type, exc, tb)  # type: ignore[no-any-return]
        except BaseExceptionGroup as group:
            # The block's own exception comes out as itself, as from any `async with`; so
            # does a single background failure. Only several failures stay a group.
            if exc is not None and all(e is exc for e in group.exceptions):
                raise exc from None
            if len(group.exceptions) == 1 and isinstance(group.exceptions[0], ConsumerError):
                raise group.exceptions[0] from group
            raise

    async def start(self) -> None:
        """Open the ZooKeeper session and start the connector's task group.

        Prefer ``async with``: the task group encloses the block, so a failure of a background
        task (a watch, the rebalance worker, a fetch loop) cancels the block and is raised
        when it exits. Without ``async with``, call ``start`` and then ``__aexit__`` in the
        same task.

        Raises:
            ConsumerClosedError: already started or closed.
            ZookeeperConnectionError: ZooKeeper did not answer within
                ``zookeeper.connection.timeout.ms``.
        """
        if self._state is not ConnectorState.NEW:
            raise ConsumerClosedError(f"connector already {self._state.value}")
        await self.zk.start()
        self.metrics.max_lag()
        self.metrics.min_fetch_rate()
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            await tg.start(self._supervise)
            self._bg_tg.start_soon(self._renew_lease)
            self._bg_tg.start_soon(self._watch_connection)
        except BaseException:
            self._tg = None
            await tg.__aexit__(None, None, None)
            await self.zk.close()
            raise
        self._set_state(ConnectorState.CONNECTED)

    async def _supervise(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Host of every background task, in a cancel scope ``shutdown`` can cancel."""
        done = self._bg_done = anyio.Event()
        try:
            with anyio.CancelScope() as scope:
                self._bg_scope = scope
                async with anyio.create_task_group() as tg:
                    self._bg_tg = tg
                    task_status.started()
                    await anyio.sleep_forever()
        finally:
            self._bg_tg = None
            done.set()

    async def shutdown(self) -> None:
        """Stop fetching, end every stream, commit, release ownership, close the session.

        As ``shutdown`` (0.10.2 order): fetchers stop, every stream gets the shutdown
        sentinel (iteration ends after the records already handed out), consumed offsets are
        committed (auto-commit on), and the ZooKeeper session is closed, which deletes the
        registration and owner nodes at once so the other members rebalance. Idempotent;
        may be awaited from any task; cleanup is shielded from cancellation and bounded.
        """
        if self._state in (ConnectorState.CLOSING, ConnectorState.CLOSED, ConnectorState.NEW):
            return
        self.closing = True
        self._set_state(ConnectorState.CLOSING)
        try:
            with anyio.CancelScope(shield=True):
                await self.fetcher.stop_connections()
                if self._bg_scope is not None:
                    self._bg_scope.cancel()
                    if self._bg_done is not None:
                        with anyio.move_on_after(30):
                            await self._bg_done.wait()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(30):
                await self._final_cleanup()
            self._set_state(ConnectorState.CLOSED)

    async def _final_cleanup(self) -> None:
        for queue in self.queues():
            while not queue.empty():
                queue.get_nowait()
            queue.put_nowait(SHUTDOWN_COMMAND)
        if self.config.auto_commit_enable and self.topic_registry:
            try:
                await self.commit_offsets()
            except (ZookeeperError, OffsetStorageError) as e:
                log.error("[%s] final offset commit failed: %s", self.consumer_id_string, e)
        for pti in self.topic_registry.values():
            pti.active = False
        await self.offset_store.close()
        self.metrics.remove_all()
        await self.zk.close()
        if self.kafka is not None:
            await self.kafka.close()

    # -- streams -------------------------------------------------------------------------

    def set_consumer_rebalance_listener(self, listener: ConsumerRebalanceListener) -> None:
        """Set the rebalance listener (0.9+).

        Raises:
            MessageStreamsExistError: streams were already created (as the original).
        """
        if self._topic_count is not None:
            raise MessageStreamsExistError(
                "set the rebalance listener before creating message streams"
            )
        self.listener = listener

    async def create_message_streams(
        self,
        topic_count_map: Mapping[str, int],
        *,
        key_decoder: Decoder | None = None,
        value_decoder: Decoder | None = None,
    ) -> dict[str, list[KafkaStream]]:
        """Subscribe to topics and return their streams, after the first rebalance.

        As ``createMessageStreams`` (0.10.2): registers at
        ``/consumers/<group>/ids/<consumer id>``, watches the group and the topics, and runs
        the first rebalance before returning.

        Args:
            topic_count_map: ``{topic: number of streams}``; each count >= 1. An empty map
                registers a member that subscribes to nothing (and so takes nothing).
            key_decoder: applied to each non-null key as a record is handed out.
            value_decoder: applied to each non-null value likewise.

        Returns:
            ``{topic: [KafkaStream, ...]}``, one stream per thread index.

        Raises:
            MessageStreamsExistError: streams were already created on this connector.
            InvalidConfigError: a count below 1, or an illegal topic name.
            ConsumerClosedError: the connector is not started or is closed.
            ConsumerRebalanceFailedError: the first rebalance failed
                ``rebalance.max.retries`` times.
            ZookeeperNodeExistsError: another live session registered the same consumer id.
            ZookeeperConnectionError: ZooKeeper became unreachable.
        """
        self._check_can_subscribe()
        for topic in topic_count_map:
            _check_topic_name(topic)
        topic_count = StaticTopicCount(self.consumer_id_string, dict(topic_count_map))
        self._topic_count = topic_count
        for topic, ids in sorted(topic_count.get_consumer_thread_ids_per_topic().items()):
            streams = []
            for tid in sorted(ids, key=lambda t: t.thread_id):
                queue = self._new_queue(topic, tid.thread_id)
                self._queues[(topic, tid)] = queue
                streams.append(
                    self._new_stream(queue, f"{topic}-{tid.thread_id}", key_decoder, value_decoder)
                )
            self._streams[topic] = streams
        await self._subscribe(sorted(topic_count_map))
        return {topic: list(streams) for topic, streams in self._streams.items()}

    async def create_message_streams_by_filter(
        self,
        topic_filter: TopicFilter,
        num_streams: int = 1,
        *,
        key_decoder: Decoder | None = None,
        value_decoder: Decoder | None = None,
    ) -> list[KafkaStream]:
        """Subscribe to every topic a ``Whitelist`` / ``Blacklist`` allows, now and later.

        As ``createMessageStreamsByFilter`` (0.10.2, ``WildcardStreamsHandler``): the
        ``num_streams`` streams are shared by all matching topics (thread ``i`` of every topic
        feeds stream ``i``); ``/brokers/topics`` is watched, and a new matching topic is
        consumed without a restart (each member sees it through its own watch, as the
        original). Internal topics are left out while ``exclude.internal.topics`` is true.

        Args:
            topic_filter: ``Whitelist(regex)`` or ``Blacklist(regex)``.
            num_streams: streams to create, >= 1.
            key_decoder: applied to each non-null key as a record is handed out.
            value_decoder: applied to each non-null value likewise.

        Returns:
            The ``num_streams`` streams.

        Raises:
            MessageStreamsExistError: streams were already created on this connector.
            InvalidConfigError: ``num_streams`` < 1.
            ConsumerClosedError, ConsumerRebalanceFailedError, ZookeeperNodeExistsError,
            ZookeeperConnectionError: as ``create_message_streams``.
        """
        self._check_can_subscribe()
        all_topics = await self._all_topics()
        topic_count = WildcardTopicCount(
            self.consumer_id_string,
            topic_filter,
            num_streams,
            all_topics,
            self.config.exclude_internal_topics,
        )
        self._topic_count = topic_count
        streams = []
        for i in range(num_streams):
            queue = self._new_queue(str(topic_filter), i)
            self._wildcard_queues.append(queue)
            streams.append(
                self._new_stream(queue, f"{topic_filter}-{i}", key_decoder, value_decoder)
            )
        self._streams[str(topic_filter)] = streams
        await self._subscribe(topic_count.allowed_topics(), wildcard=True)
        return list(streams)

    def _check_can_subscribe(self) -> None:
        if self._topic_count is not None:
            raise MessageStreamsExistError("can create message streams at most once")
        if self._state is not ConnectorState.CONNECTED:
            raise ConsumerClosedError(f"cannot create streams: connector is {self._state.value}")

    def _new_queue(self, topic: str, thread_id: int) -> ChunkQueue:
        queue: ChunkQueue = ChunkQueue(maxsize=self.config.queued_max_message_chunks)
        self.metrics.fetch_queue_size(topic, thread_id, lambda: float(queue.qsize()))
        return queue

    def _new_stream(
        self,
        queue: ChunkQueue,
        name: str,
        key_decoder: Decoder | None,
        value_decoder: Decoder | None,
    ) -> KafkaStream:
        cfg = self.config
        return KafkaStream(
            queue,
            cfg.consumer_timeout_ms,
            cfg.effective_client_id,
            name,
            key_decoder,
            value_decoder,
        )

    async def _subscribe(self, topics: Iterable[str], *, wildcard: bool = False) -> None:
        """Register, start the watches, run the first rebalance, start the workers."""
        await self.retry_across_connection_loss("registration", self._register)
        tg = self.task_group
        await tg.start(self._watch_group)
        for topic in topics:
            await self._start_topic_watch(topic)
        if wildcard:
            await tg.start(self._watch_topic_list)
        if await self.metadata_from_kafka():
            tg.start_soon(self._watch_partitions_by_metadata)
        tg.start_soon(self._watch_session)
        await self._run_rebalance("initial subscription", raise_on_failure=True)
        tg.start_soon(self._rebalance_worker)
        if self.config.auto_commit_enable:
            tg.start_soon(self._auto_commit)

    def streams(self) -> list[KafkaStream]:
        """Every stream created so far."""
        return [s for streams in self._streams.values() for s in streams]

    def queues(self) -> list[ChunkQueue]:
        """Every stream queue (distinct)."""
        return list(self._queues.values()) + list(self._wildcard_queues)

    def queue_for(self, topic: str, thread_id: ConsumerThreadId) -> ChunkQueue:
        """The queue of a (topic, thread id); a wildcard's thread ``i`` feeds stream ``i``."""
        if self._wildcard_queues:
            return self._wildcard_queues[thread_id.thread_id]
        return self._queues[(topic, thread_id)]

    @property
    def topic_count(self) -> TopicCount | None:
        """This member's subscription (``None`` before streams exist)."""
        return self._topic_count

    async def register(self) -> None:
        """Write this member's registration node again (used by the rebalancer)."""
        await self._register()

    async def _register(self) -> None:
        """Write our registration node (``registerConsumerInZK``), as a checked ephemeral."""
        assert self._topic_count is not None
        data = self._topic_count.encode_registration(int(time.time() * 1000))
        path = layout.ids_path(self.config.group_id, self.consumer_id_string)
        await self.zk.create_ephemeral_checked(path, data)
        self._registered_session = self.zk.session_id
        log.info("[%s] registered at %s", self.consumer_id_string, path)

    async def _all_topics(self) -> list[str]:
        """Topic names from ``/brokers/topics``, or from Kafka metadata on a KRaft cluster."""
        if await self.metadata_from_kafka():
            kafka = await self.ensure_kafka()
            return sorted(await kafka.all_topics())
        return sorted(await self.zk.get_children(layout.BROKER_TOPICS_PATH) or [])

    async def metadata_from_kafka(self) -> bool:
        """Whether brokers and partitions come from Kafka metadata (``cluster.metadata.source``).

        ``auto`` picks Kafka metadata when ZooKeeper has no registered broker (a KRaft
        cluster) and ``bootstrap.servers`` is set.
        """
        source = self.config.cluster_metadata_source
        if source != "auto":
            return source == "kafka"
        if self._metadata_from_kafka is None:
            # A ZooKeeper-mode cluster keeps /brokers/ids even while every broker is down
            # (restarting); a KRaft cluster never creates it.
            zk_mode = await self.retry_across_connection_loss(
                f"reading {layout.BROKER_IDS_PATH}",
                lambda: self.zk.exists(layout.BROKER_IDS_PATH),
            )
            self._metadata_from_kafka = not zk_mode and bool(self.config.bootstrap_servers)
        return self._metadata_from_kafka

    # -- kafka ---------------------------------------------------------------------------

    async def ensure_kafka(self, brokers: Iterable[layout.BrokerInfo] | None = None) -> KafkaClient:
        """The Kafka client, started on first use from ``bootstrap.servers`` or the brokers in
        ZooKeeper.

        Raises:
            NoBrokersError: no broker is registered and ``bootstrap.servers`` is not set.
            KafkaConnectionError: no broker answered.
        """
        async with self._kafka_lock:  # one client, however many tasks ask at once
            return await self._ensure_kafka(brokers)

    async def _ensure_kafka(self, brokers: Iterable[layout.BrokerInfo] | None) -> KafkaClient:
        if self.kafka is None:
            servers = self.config.bootstrap_servers
            if not servers:
                brokers = list(brokers) if brokers is not None else await read_brokers(self.zk)
                if not brokers:
                    raise NoBrokersError("no brokers found in ZooKeeper under /brokers/ids")
                servers = bootstrap_from_brokers(brokers)
            kafka = KafkaClient(
                servers,
                client_id=self.config.effective_client_id,
                request_timeout_ms=self.config.socket_timeout_ms,
                retry_backoff_ms=self.config.refresh_leader_backoff_ms,
            )
            try:
                await kafka.start()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await kafka.close()
                raise
            self.kafka = kafka
            self.fetcher.kafka = kafka
        return self.kafka

    # -- rebalance -----------------------------------------------------------------------

    def request_rebalance(self, reason: str) -> None:
        """Ask for a rebalance; bursts of requests coalesce into one (KAFKA-265)."""
        if not self._pending_reason:
            self._pending_reason = reason
        self._rebalance_requested.set()

    async def _run_rebalance(self, reason: str, *, raise_on_failure: bool) -> None:
        async with self._rebalance_lock:
            if self.closing:
                return
            self._set_state(ConnectorState.REBALANCING)
            try:
                if self._session_replaced:
                    await self._handle_new_session()
                await self._rebalancer.synced_rebalance(reason)
            except (ConsumerRebalanceFailedError, ZookeeperError) as e:
                self._last_error = e
                self._set_state(ConnectorState.REBALANCE_FAILED)
                if raise_on_failure:
                    raise
                log.error("[%s] %s", self.consumer_id_string, e)
                return
            if not self.closing:
                self._last_error = None
                self._set_state(ConnectorState.RUNNING)

    async def handle_new_session_if_needed(self) -> None:
        """Before a rebalance attempt: if the session was replaced, drop and re-register."""
        if self._session_replaced:
            await self._handle_new_session()

    async def _handle_new_session(self) -> None:
        """After an expiry: drop ownership without committing, register again.

        As ``ZKSessionExpireListener.handleNewSession`` (0.10.2): the old session's ephemeral
        nodes are gone, so another member may own our partitions already; offsets consumed
        since the last commit are not committed (the original's ``resetState``).
        """
        await self.fetcher.stop_connections()
        for pti in self.topic_registry.values():
            pti.active = False
        self.offset_store.forget(self.topic_registry)
        self.topic_registry = {}
        for queue in self.queues():
            while not queue.empty():
                queue.get_nowait()
        for stream in self.streams():
            stream.clear()
        await self._register()
        self._session_replaced = False
        self.gate.reopen()

    async def _rebalance_worker(self) -> None:
        while True:
            await self._rebalance_requested.wait()
            self._rebalance_requested = anyio.Event()
            reason, self._pending_reason = self._pending_reason, ""
            await self._run_rebalance(reason or "triggered", raise_on_failure=False)

    def rebalance_attempt_failed(self) -> None:
        """Called by the rebalancer after a failed attempt: wakes ``wait_for_state_change``."""
        self._set_state(self._state)

    def owned_partitions_changed(self) -> None:
        """Keep the ``OwnedPartitionsCount`` gauges (all topics, and per owned topic) in step.

        Called by the rebalancer after the registry changed.
        """
        m = self.metrics
        m.owned_partitions_count(None, lambda: float(len(self.topic_registry)))
        topics = {tp.topic for tp in self.topic_registry}
        for topic in topics - self._owned_gauges.keys():
            self._owned_gauges[topic] = m.owned_partitions_count(topic, self._owned_in(topic))
        for topic in set(self._owned_gauges) - topics:
            m.remove(self._owned_gauges.pop(topic))

    def _owned_in(self, topic: str) -> Callable[[], float]:
        def count() -> float:
            return float(sum(1 for tp in self.topic_registry if tp.topic == topic))

        return count

    def message_meters(self, topic: str) -> tuple[Any, Any]:
        """The ``MessagesPerSec`` meters (topic, all topics) a partition's records mark."""
        return (self.metrics.messages_per_sec(topic), self.metrics.messages_per_sec())

    async def _resilient(self, what: str, body: Callable[[], Awaitable[None]]) -> None:
        """Run a watch loop, restarting it after ZooKeeper connection loss or expiry."""
        while True:
            try:
                await body()
                return
            except ZookeeperError as e:
                log.info(
                    "[%s] %s interrupted (%s); resuming when connected",
                    self.consumer_id_string,
                    what,
                    e,
                )
                await self.zk.wait_for_state("connected")

    @property
    def connection_retry_window_s(self) -> float:
        """How long a ZooKeeper step is retried across connection loss, in seconds.

        ``2 * zookeeper.session.timeout.ms + zookeeper.connection.timeout.ms``: long enough
        for the session to expire and a new one to be opened once the server is reachable
        again. The original's ZkClient retried for ever (``retryUntilConnected``).
        """
        cfg = self.config
        return (
            2 * cfg.zookeeper_session_timeout_ms + cfg.effective_zookeeper_connection_timeout_ms
        ) / 1000

    async def retry_across_connection_loss(self, what: str, op: Callable[[], Awaitable[_T]]) -> _T:
        """Run a ZooKeeper step; after connection loss or session expiry, run it again.

        As the original's ZkClient (``retryUntilConnected``), which blocked a call until
        the connection was back rather than failing it: the step is retried once the
        session is connected again, for up to :attr:`connection_retry_window_s`. Only for
        steps that are safe to repeat.

        Args:
            what: the step, for the log.
            op: makes and awaits the step.

        Returns:
            What ``op`` returned.

        Raises:
            ZookeeperConnectionError, ZookeeperSessionExpiredError: still failing at the end
                of the window (or the connector is closing).
            ZookeeperError: any other ZooKeeper failure, at once.
        """
        deadline = anyio.current_time() + self.connection_retry_window_s
        while True:
            try:
                return await op()
            except (ZookeeperConnectionError, ZookeeperSessionExpiredError) as e:
                remaining = deadline - anyio.current_time()
                if remaining <= 0 or self.closing:
                    raise
                log.warning(
                    "[%s] %s: %s; retrying when ZooKeeper is back (for up to %.0f s)",
                    self.consumer_id_string,
                    what,
                    e,
                    remaining,
                )
                with anyio.move_on_after(remaining):
                    await self.zk.wait_for_state("connected")
                    # The state may still say connected while requests time out.
                    await anyio.sleep(min(_CONNECTION_RETRY_PAUSE_S, remaining))

    async def _watch_group(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch ``/consumers/<group>/ids`` (``ZKRebalancerListener.handleChildChange``)."""
        path = layout.ids_dir(self.config.group_id)
        last: list[str] | None = None
        started = False

        async def body() -> None:
            nonlocal last, started
            async for children in self.zk.watch_children(path):
                members = sorted(children or [])
                if not started:
                    started = True
                    task_status.started()
                elif members != last:
                    self.request_rebalance(f"group members changed ({len(members)} now)")
                last = members

        await self._resilient(f"watch of {path}", body)

    def watch_broker_ids(self) -> None:
        """Rebalance when brokers register, after a rebalance found none (as the original)."""
        if self._watching_broker_ids:
            return
        self._watching_broker_ids = True

        async def watch() -> None:
            async def body() -> None:
                async for children in self.zk.watch_children(layout.BROKER_IDS_PATH):
                    if children:
                        self.request_rebalance(f"brokers registered ({len(children)})")
                        return

            await self._resilient("watch of /brokers/ids", body)
            self._watching_broker_ids = False

        self.task_group.start_soon(watch)

    async def _start_topic_watch(self, topic: str) -> None:
        if topic in self._watched_topics or await self.metadata_from_kafka():
            return
        self._watched_topics.add(topic)
        await self.task_group.start(self._watch_topic, topic)

    async def _watch_topic(
        self, topic: str, *, task_status: Any = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Watch ``/brokers/topics/<t>`` (``ZKTopicPartitionChangeListener``)."""
        path = layout.topic_path(topic)
        last: frozenset[int] | None = None
        started = False

        async def body() -> None:
            nonlocal last, started
            async for data in self.zk.watch_data(path):
                try:
                    parts = (
                        frozenset(layout.decode_topic_partitions(data, path))
                        if data
                        else frozenset()
                    )
                except MalformedZookeeperDataError as e:
                    log.error("[%s] ignoring topic node: %s", self.consumer_id_string, e)
                    parts = last or frozenset()
                if not started:
                    started = True
                    task_status.started()
                elif parts != last:
                    self.request_rebalance(f"partitions of {topic} changed ({len(parts)} now)")
                last = parts

        await self._resilient(f"watch of {path}", body)

    async def _watch_topic_list(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Follow the topic list for a wildcard subscription (``ZookeeperTopicEventWatcher``).

        On ZooKeeper-mode clusters a watch on ``/brokers/topics``; on KRaft clusters Kafka
        metadata is read every ``METADATA_REFRESH_MS``.
        """
        started = False

        async def on_topics(all_topics: Iterable[str]) -> None:
            nonlocal started
            tc = self._topic_count
            assert isinstance(tc, WildcardTopicCount)
            updated = tc.with_topics(all_topics)
            added = set(updated.allowed_topics()) - set(tc.allowed_topics())
            removed = set(tc.allowed_topics()) - set(updated.allowed_topics())
            if not started:
                started = True
                task_status.started()
            if added or removed:
                # Deleted topics stay out of the plan; the original kept them (a TODO there).
                self._topic_count = updated
                for topic in sorted(added):
                    await self._start_topic_watch(topic)
                self.request_rebalance(
                    f"topics matching {tc.topic_filter} changed (+{len(added)} -{len(removed)})"
                )

        if await self.metadata_from_kafka():
            while True:
                try:
                    kafka = await self.ensure_kafka()
                    topics = await kafka.all_topics()
                except (BrokerNotAvailableError, NoBrokersError) as e:
                    log.info("[%s] topic list refresh failed: %s", self.consumer_id_string, e)
                else:
                    await on_topics(topics)
                await anyio.sleep(METADATA_REFRESH_MS / 1000)

        async def body() -> None:
            async for children in self.zk.watch_children(layout.BROKER_TOPICS_PATH):
                await on_topics(children or [])

        await self._resilient("watch of /brokers/topics", body)

    async def _watch_partitions_by_metadata(self) -> None:
        """On KRaft clusters, detect partition-count changes by refreshing Kafka metadata."""
        last: dict[str, int] | None = None
        while True:
            tc = self._topic_count
            topics = sorted(tc.get_consumer_thread_ids_per_topic()) if tc else []
            try:
                kafka = await self.ensure_kafka()
                counts = await kafka.partition_counts(topics)
            except (BrokerNotAvailableError, NoBrokersError) as e:
                # Brokers down or restarting: the fetchers retry on their own; look again later.
                log.info("[%s] metadata refresh failed: %s", self.consumer_id_string, e)
            else:
                if last is not None and counts != last:
                    self.request_rebalance("partition counts changed (Kafka metadata)")
                last = counts
            await anyio.sleep(METADATA_REFRESH_MS / 1000)

    async def _renew_lease(self) -> None:
        """Keep the gate's lease: each ZooKeeper round trip proves the session alive.

        The server cannot expire the session sooner than one (negotiated) session timeout
        after it heard from us, so a round trip started at ``t0`` extends the lease to
        ``t0 + 0.8 x timeout``. A process paused past that (or cut off) finds its lease over
        when it wakes up, and hands out nothing until the session is confirmed again.
        """
        while True:
            t0 = time.monotonic()
            timeout_s = self.zk.negotiated_timeout_s
            try:
                with anyio.fail_after(timeout_s / 2):
                    await self.zk.exists("/")
            except (ZookeeperError, TimeoutError) as e:
                # No proof the session lives: hold records back until a round trip succeeds.
                log.debug("[%s] lease renewal failed: %r", self.consumer_id_string, e)
                self.gate.extend(min(self.gate.deadline, time.monotonic()))
            else:
                self.gate.extend(t0 + LEASE_FRACTION * timeout_s)
            await anyio.sleep(timeout_s / 4)

    async def _watch_connection(self) -> None:
        """End the lease the moment the ZooKeeper connection drops.

        aiozk notices a connection the server closed (for example because it expired the
        session) only at the next request; until then the session state still says
        connected. Watching the connection's read loop ends the lease at once, so no record
        is handed out until a round trip proves the session alive again.
        """
        dead: Any = None
        while True:
            conn = getattr(self.zk.raw.session, "conn", None) if self.zk.raw else None
            task = getattr(conn, "read_loop_task", None)
            if conn is None or conn is dead or task is None:
                await anyio.sleep(0.05)  # aiozk offers no event for a new connection
                continue
            await asyncio.wait({task})
            dead = conn
            if not self.closing:
                log.info("[%s] ZooKeeper connection dropped", self.consumer_id_string)
                self.gate.extend(min(self.gate.deadline, time.monotonic()))

    async def _watch_session(self) -> None:
        """Follow the session: hold records back while suspended; re-register after expiry.

        Connection loss shorter than the session timeout keeps the session and its ephemeral
        nodes: records flow again when it is back, without a rebalance. A new session (the old
        one expired) triggers ``_handle_new_session`` and a rebalance.
        """
        async for state, session_id in self.zk.session_events():
            if state != "connected":
                log.warning(
                    "[%s] ZooKeeper session %s: holding records back",
                    self.consumer_id_string,
                    state,
                )
                self.gate.close()
                if self._state is not ConnectorState.SUSPENDED:
                    self._state_before_suspend = self._state
                    self._set_state(ConnectorState.SUSPENDED)
                continue
            if session_id is not None and session_id != self._registered_session:
                log.warning(
                    "[%s] ZooKeeper session expired; a new session 0x%x re-registers",
                    self.consumer_id_string,
                    session_id,
                )
                self._session_replaced = True
                self.request_rebalance("new ZooKeeper session")
            else:
                log.info("[%s] ZooKeeper session resumed", self.consumer_id_string)
                self.gate.reopen()
                if self._state is ConnectorState.SUSPENDED:
                    self._set_state(self._state_before_suspend)

    # -- offsets -------------------------------------------------------------------------

    async def commit_offsets(
        self,
        offsets: Mapping[TopicPartition, int] | None = None,
        *,
        retry_on_failure: bool = True,
    ) -> int:
        """Commit offsets to the group's offset storage (``offsets.storage``).

        As ``commitOffsets`` (0.10.2): with no argument, the consumed offset ("next offset to
        read") of every owned partition; with ``offsets``, exactly those (the selective commit
        MirrorMaker used, 0.9+) — of partitions this member owns: another member's are
        refused (``CommitFencedError``; operators set offsets with the CLI). ZooKeeper storage
        writes only offsets that changed; Kafka storage always commits in full (KAFKA-1510);
        dual commit does both. Every commit is fenced: it is refused for a partition another
        member claimed since this one did (a member that was paused past its session timeout
        cannot move the new owner's offset back).

        The original's ``retryOnFailure`` was inverted (a single attempt when ``True``); here
        ``True`` means what it says: ``1 + offsets.commit.max.retries`` attempts, with
        ``offsets.channel.backoff.ms`` between them.

        Args:
            offsets: ``{TopicPartition: next offset to read}``; ``None`` = consumed offsets.
            retry_on_failure: retry failed Kafka commits (ZooKeeper writes are not retried).

        Returns:
            The number of partitions written.

        Raises:
            ZookeeperConnectionError: the ZooKeeper session is suspended (nothing is committed
                while another member may own the partitions) or ZooKeeper is unreachable.
            OffsetCommitError: Kafka refused some offsets after every attempt.
            CommitFencedError: some partitions are not (or no longer) owned by this member;
                the others were committed, the fenced ones dropped and a rebalance requested.
        """
        if not self.gate.passable():
            raise ZookeeperConnectionError(
                "the ZooKeeper session is suspended: not committing while another member may "
                "own the partitions"
            )
        if offsets is None:
            offsets = {tp: pti.consumed_offset for tp, pti in self.topic_registry.items()}
        retries = self.config.offsets_commit_max_retries if retry_on_failure else 0
        return await self.store_commit(offsets, retries)

    async def store_commit(self, offsets: Mapping[TopicPartition, int], retries: int) -> int:
        """Commit through the offset store, fenced, counting the writes in the commit meters.

        Owned partitions are committed only while their fencing token is unchanged: in the
        same ZooKeeper multi-op with ZooKeeper storage, by a check just before with Kafka
        storage. A partition found fenced is dropped from this member (another one owns it
        now) and a rebalance is requested.

        Raises:
            CommitFencedError: some partitions were fenced (the others were committed).
            ZookeeperConnectionError, OffsetCommitError: as ``commit_offsets``.
        """
        store = self.offset_store
        registry = self.topic_registry
        # Only what this member owns now: a partition it lost (session expiry, fencing) is
        # someone else's to commit.
        fenced: set[TopicPartition] = {tp for tp in offsets if tp not in registry}
        offsets = {tp: o for tp, o in offsets.items() if tp in registry}
        fences = {
            tp: registry[tp].fence for tp in offsets if tp in registry and registry[tp].fence >= 0
        }
        if fences and not isinstance(store, ZookeeperOffsetStore):
            fenced |= await self._fenced(fences)
            offsets = {tp: o for tp, o in offsets.items() if tp not in fenced}
        zk_before, kafka_before = store.zookeeper_commits, store.kafka_commits
        try:
            written = await store.commit(offsets, retries=retries, fences=fences)
        except CommitFencedError as e:
            fenced |= e.fenced
            written = 0
        finally:
            if store.zookeeper_commits > zk_before:
                self.metrics.zookeeper_commits_per_sec().mark(store.zookeeper_commits - zk_before)
            if store.kafka_commits > kafka_before:
                self.metrics.kafka_commits_per_sec().mark(store.kafka_commits - kafka_before)
            self.committed_offsets.update(
                {
                    tp: o
                    for tp, o in offsets.items()
                    if o >= 0 and tp in self.topic_registry and tp not in fenced
                }
            )
        if fenced:
            self._drop_fenced(fenced)
            raise CommitFencedError(self.config.group_id, fenced)
        return written

    async def _fenced(self, fences: Mapping[TopicPartition, int]) -> set[TopicPartition]:
        """Partitions whose fencing node moved past the token we hold."""
        fenced = set()
        for tp, token in fences.items():
            got = await self.zk.get(
                layout.fencing_path(self.config.group_id, tp.topic, tp.partition)
            )
            if got is None or got[1].version != token:
                fenced.add(tp)
        return fenced

    def _drop_fenced(self, fenced: Iterable[TopicPartition]) -> None:
        """Stop handing out and fetching partitions another member claimed since."""
        fenced = [tp for tp in fenced if tp in self.topic_registry]
        if not fenced:
            return
        log.warning(
            "[%s] %d partition(s) were claimed by another member since this one claimed them "
            "(it was paused or lost its session?): dropping %s",
            self.consumer_id_string,
            len(fenced),
            ", ".join(map(str, sorted(fenced))),
        )
        for tp in fenced:
            self.topic_registry[tp].active = False
        self.fetcher.remove_partitions(fenced)
        self.topic_registry = {tp: p for tp, p in self.topic_registry.items() if tp not in fenced}
        self.offset_store.forget(fenced)
        self.owned_partitions_changed()
        self.request_rebalance("commit fenced")

    async def _auto_commit(self) -> None:
        interval = self.config.auto_commit_interval_ms / 1000
        while True:
            await anyio.sleep(interval)
            if not self.gate.passable():
                continue  # the session is in doubt: another member may own the partitions
            try:
                await self.commit_offsets()
            except (ZookeeperError, OffsetStorageError) as e:
                log.warning("[%s] auto-commit failed: %s", self.consumer_id_string, e)

    # -- introspection -------------------------------------------------------------------

    def statistics(self) -> ConnectorStatistics:
        """A frozen snapshot of the connector's state."""
        return ConnectorStatistics(
            state=self._state,
            consumer_id=self.consumer_id_string,
            owned_partitions=tuple(sorted(self.topic_registry)),
            consumed_offsets={tp: p.consumed_offset for tp, p in self.topic_registry.items()},
            committed_offsets={
                tp: o for tp, o in self.committed_offsets.items() if tp in self.topic_registry
            },
            lag={
                tp: max(0, hw - self.topic_registry[tp].consumed_offset)
                for tp, hw in self.fetcher.highwater.items()
                if tp in self.topic_registry and self.topic_registry[tp].consumed_offset >= 0
            },
            generation=sum(1 for r in self._rebalancer.history if r.succeeded),
            rebalances=tuple(self._rebalancer.history),
            failed_rebalance_attempts=self._rebalancer.failed_attempts,
            session_id=self.zk.session_id,
            zookeeper_commits=self.offset_store.zookeeper_commits,
            kafka_commits=self.offset_store.kafka_commits,
            last_error=self._last_error,
        )

    def __repr__(self) -> str:
        return (
            f"<ZookeeperConsumerConnector {self.consumer_id_string} [{self._state.value}, "
            f"{len(self.topic_registry)} partitions]>"
        )
