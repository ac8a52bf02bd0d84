"""``ZookeeperConsumerConnector``: lifecycle, task group and wiring of one consumer.

The asyncio counterpart of ``ZookeeperConsumerConnector.scala`` (0.10.2). One anyio task group
per connector owns every background task — the ZooKeeper watches, the rebalance worker, the
auto-commit task and the fetcher — so nothing is fire-and-forget and a background failure
reaches the owner of the ``async with`` block.
"""

from __future__ import annotations

import enum
import logging
import socket
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

import anyio

from .cluster import KafkaClient, bootstrap_from_brokers, read_brokers
from .config import ConsumerConfig
from .errors import (
    ConsumerClosedError,
    ConsumerError,
    ConsumerRebalanceFailedError,
    InvalidConfigError,
    MessageStreamsExistError,
    NoBrokersError,
    ZookeeperError,
)
from .fetcher import FetcherManager
from .offsets import ZookeeperOffsetStore
from .rebalance import Rebalancer, RebalanceRecord
from .records import PartitionTopicInfo, TopicPartition
from .stream import SHUTDOWN_COMMAND, ChunkQueue, KafkaStream
from .subscription import ConsumerThreadId, StaticTopicCount, TopicCount
from .zk import layout
from .zk.client import ZkClient

__all__ = [
    "ConnectorState",
    "ConnectorStatistics",
    "ConsumerRebalanceListener",
    "ZookeeperConsumerConnector",
]

log = logging.getLogger(__name__)


class ConnectorState(enum.Enum):
    """Where a connector is in its life, and what it may do there.

    - ``NEW``: constructed, not started. No session; fetches, commits and hands out nothing.
    - ``CONNECTED``: ZooKeeper session open, no streams yet. Not registered, owns nothing.
    - ``REBALANCING``: registered; fetchers stopped and queued chunks dropped; partitions being
      released are no longer handed out. Commits consumed offsets once, before releasing.
    - ``RUNNING``: owns its assignment; fetches, auto-commits and hands records to the streams.
    - ``REBALANCE_FAILED``: registered but owns nothing after ``rebalance.max.retries`` failed
      attempts (the original stayed idle silently; here the state and ``last_error`` say so).
      The next trigger (a member change, a new session) rebalances again.
    - ``CLOSING``: shutting down: fetchers stopped, final commit, session closing.
    - ``CLOSED``: done; streams have ended. Nothing more happens.
    """

    NEW = "new"
    CONNECTED = "connected"
    REBALANCING = "rebalancing"
    RUNNING = "running"
    REBALANCE_FAILED = "rebalance_failed"
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
        rebalances: every rebalance so far, oldest first.
        zookeeper_commits: offset nodes written so far.
        last_error: the last rebalance failure, if the state is ``REBALANCE_FAILED``.
    """

    state: ConnectorState
    consumer_id: str
    owned_partitions: tuple[TopicPartition, ...]
    consumed_offsets: Mapping[TopicPartition, int]
    rebalances: tuple[RebalanceRecord, ...]
    zookeeper_commits: int
    last_error: BaseException | None


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

    Raises:
        ZookeeperConnectionError: (on entering) ZooKeeper did not answer within
            ``zookeeper.connection.timeout.ms``.
    """

    def __init__(self, config: ConsumerConfig) -> None:
        self.config = config
        self.consumer_id_string = (
            f"{config.group_id}_{config.consumer_id or generate_consumer_id()}"
        )
        self.zk = ZkClient(
            config.zookeeper_connect,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.effective_zookeeper_connection_timeout_ms,
        )
        self.kafka: KafkaClient | None = None
        self.offset_store = ZookeeperOffsetStore(self.zk, config.group_id)
        self.fetcher: FetcherManager = FetcherManager(None, config)  # type: ignore[arg-type]
        self.topic_registry: dict[TopicPartition, PartitionTopicInfo] = {}
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
            # One background failure: raise it as itself, not wrapped in a group.
            errors = [e for e in group.exceptions if isinstance(e, ConsumerError)]
            if len(group.exceptions) == 1 and errors:
                raise errors[0] from group
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
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            await tg.start(self._supervise)
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
            except ZookeeperError as e:
                log.error("[%s] final offset commit failed: %s", self.consumer_id_string, e)
        for pti in self.topic_registry.values():
            pti.active = False
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
        self, topic_count_map: Mapping[str, int]
    ) -> dict[str, list[KafkaStream]]:
        """Subscribe to topics and return their streams, after the first rebalance.

        As ``createMessageStreams`` (0.10.2): registers at
        ``/consumers/<group>/ids/<consumer id>``, watches the group and the topics, and runs
        the first rebalance before returning.

        Args:
            topic_count_map: ``{topic: number of streams}``; each count >= 1.

        Returns:
            ``{topic: [KafkaStream, ...]}``, one stream per thread index.

        Raises:
            MessageStreamsExistError: streams were already created on this connector.
            InvalidConfigError: an empty map, or a count below 1.
            ConsumerClosedError: the connector is not started or is closed.
            ConsumerRebalanceFailedError: the first rebalance failed
                ``rebalance.max.retries`` times.
            ZookeeperNodeExistsError: another live session registered the same consumer id.
            ZookeeperConnectionError: ZooKeeper became unreachable.
        """
        if self._topic_count is not None:
            raise MessageStreamsExistError("can create message streams at most once")
        if self._state is not ConnectorState.CONNECTED:
            raise ConsumerClosedError(f"cannot create streams: connector is {self._state.value}")
        if not topic_count_map:
            raise InvalidConfigError("topic_count_map", "subscribe to at least one topic")
        topic_count = StaticTopicCount(self.consumer_id_string, dict(topic_count_map))
        self._topic_count = topic_count
        cfg = self.config
        for topic, ids in sorted(topic_count.get_consumer_thread_ids_per_topic().items()):
            streams = []
            for tid in sorted(ids, key=lambda t: t.thread_id):
                queue: ChunkQueue = ChunkQueue(maxsize=cfg.queued_max_message_chunks)
                self._queues[(topic, tid)] = queue
                streams.append(
                    KafkaStream(
                        queue,
                        cfg.consumer_timeout_ms,
                        cfg.effective_client_id,
                        f"{topic}-{tid.thread_id}",
                    )
                )
            self._streams[topic] = streams

        await self._register()
        tg = self.task_group
        await tg.start(self._watch_group)
        for topic in sorted(topic_count_map):
            await tg.start(self._watch_topic, topic)
        tg.start_soon(self._watch_session)
        await self._run_rebalance("initial subscription", raise_on_failure=True)
        tg.start_soon(self._rebalance_worker)
        if cfg.auto_commit_enable:
            tg.start_soon(self._auto_commit)
        return {topic: list(streams) for topic, streams in self._streams.items()}

    def streams(self) -> list[KafkaStream]:
        """Every stream created so far."""
        return [s for streams in self._streams.values() for s in streams]

    def queues(self) -> list[ChunkQueue]:
        """Every stream queue (distinct)."""
        return list(self._queues.values())

    def queue_for(self, topic: str, thread_id: ConsumerThreadId) -> ChunkQueue:
        """The queue of a (topic, thread id)."""
        return self._queues[(topic, thread_id)]

    async def _register(self) -> None:
        assert self._topic_count is not None
        tc = self._topic_count
        data = layout.encode_registration(
            tc.get_topic_count_map(), tc.pattern, int(time.time() * 1000)
        )
        path = layout.ids_path(self.config.group_id, self.consumer_id_string)
        await self.zk.create_ephemeral_checked(path, data)
        log.info("[%s] registered at %s", self.consumer_id_string, path)

    # -- kafka ---------------------------------------------------------------------------

    async def ensure_kafka(self, brokers: Iterable[layout.BrokerInfo] | None = None) -> KafkaClient:
        """The Kafka client, started on first use from ``bootstrap.servers`` or the brokers in
        ZooKeeper.

        Raises:
            NoBrokersError: no broker is registered and ``bootstrap.servers`` is not set.
            KafkaConnectionError: no broker answered.
        """
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
            await kafka.start()
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
                await self._rebalancer.synced_rebalance(reason)
            except ConsumerRebalanceFailedError as e:
                self._last_error = e
                self._set_state(ConnectorState.REBALANCE_FAILED)
                if raise_on_failure:
                    raise
                log.error("[%s] %s", self.consumer_id_string, e)
                return
            if not self.closing:
                self._last_error = None
                self._set_state(ConnectorState.RUNNING)

    async def _rebalance_worker(self) -> None:
        while True:
            await self._rebalance_requested.wait()
            self._rebalance_requested = anyio.Event()
            reason, self._pending_reason = self._pending_reason, ""
            await self._run_rebalance(reason or "triggered", raise_on_failure=False)

    def owned_partitions_changed(self) -> None:
        """Called by the rebalancer after the registry changed (metrics hook)."""

    async def _watch_group(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        path = layout.ids_dir(self.config.group_id)
        started = False
        last: list[str] | None = None
        async for children in self.zk.watch_children(path):
            members = sorted(children or [])
            if not started:
                started = True
                task_status.started()
            elif members != last:
                self.request_rebalance(f"group members changed ({len(members)} now)")
            last = members

    async def _watch_topic(
        self, topic: str, *, task_status: Any = anyio.TASK_STATUS_IGNORED
    ) -> None:
        path = layout.topic_path(topic)
        started = False
        last: frozenset[int] | None = None
        async for data in self.zk.watch_data(path):
            parts = frozenset(layout.decode_topic_partitions(data, path)) if data else frozenset()
            if not started:
                started = True
                task_status.started()
            elif parts != last:
                self.request_rebalance(f"partitions of {topic} changed ({len(parts)} now)")
            last = parts

    async def _watch_session(self) -> None:
        """Re-register and rebalance after a new session (``handleNewSession``)."""
        async for state, session_id in self.zk.session_events():
            if state != "connected":
                log.warning("[%s] ZooKeeper session %s", self.consumer_id_string, state)
                continue
            if session_id is not None and self._registered_session not in (None, session_id):
                log.warning(
                    "[%s] ZooKeeper session expired; re-registering", self.consumer_id_string
                )
                await self._register()
                self.request_rebalance("new ZooKeeper session")
            self._registered_session = session_id

    _registered_session: int | None = None

    # -- offsets -------------------------------------------------------------------------

    async def commit_offsets(self) -> int:
        """Commit the consumed offset of every owned partition to ZooKeeper.

        As ``commitOffsets`` with ZooKeeper storage: only offsets that changed are written.

        Returns:
            The number of offset nodes written.

        Raises:
            ZookeeperConnectionError: ZooKeeper is unreachable; the next commit retries.
        """
        offsets = {tp: pti.consumed_offset for tp, pti in self.topic_registry.items()}
        return await self.offset_store.commit(offsets)

    async def _auto_commit(self) -> None:
        interval = self.config.auto_commit_interval_ms / 1000
        while True:
            await anyio.sleep(interval)
            try:
                await self.commit_offsets()
            except ZookeeperError as e:
                log.warning("[%s] auto-commit failed: %s", self.consumer_id_string, e)

    # -- introspection -------------------------------------------------------------------

    def statistics(self) -> ConnectorStatistics:
        """A frozen snapshot of the connector's state."""
        return ConnectorStatistics(
            state=self._state,
            consumer_id=self.consumer_id_string,
            owned_partitions=tuple(sorted(self.topic_registry)),
            consumed_offsets={tp: p.consumed_offset for tp, p in self.topic_registry.items()},
            rebalances=tuple(self._rebalancer.history),
            zookeeper_commits=self.offset_store.commits,
            last_error=self._last_error,
        )

    def __repr__(self) -> str:
        return (
            f"<ZookeeperConsumerConnector {self.consumer_id_string} [{self._state.value}, "
            f"{len(self.topic_registry)} partitions]>"
        )
