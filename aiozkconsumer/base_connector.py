"""The parts of a consumer connector both coordinators share: lifecycle, streams, commits.

``ConsumerConnector`` is the common base of ``ZookeeperConsumerConnector`` (the original's
ZooKeeper-coordinated group) and ``KafkaConsumerConnector`` (the Java ``KafkaConsumer``'s group
protocol). It owns the ownership state, the fetcher, the streams, the metrics and the task
group; a subclass brings the coordinator — who decides which partitions the member owns — and
what its session needs at start and shutdown. ``aiozkconsumer.create_connector(config)``
returns the kind ``group.coordinator`` names.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

import anyio
from anyio.abc import TaskGroup

from .cluster import ClusterView
from .config import ConsumerConfig
from .errors import (
    CommitFencedError,
    ConsumerClosedError,
    ConsumerError,
    ConsumerRebalanceFailedError,
    InvalidConfigError,
    MessageStreamsExistError,
    OffsetStorageError,
    ZookeeperError,
)
from .fetcher import FetcherManager
from .handover import Coordinator, Handover, MemberParts
from .interceptors import ConsumerInterceptor, Interceptors
from .metrics import ConsumerMetrics
from .offsets import OffsetStore
from .ownership import OwnershipState
from .queues import ChunkQueue
from .records import OwnershipGate, PartitionTopicInfo, RebalanceRecord, TopicPartition
from .stream import Decoder, KafkaStream
from .subscription import (
    ConsumerThreadId,
    StaticTopicCount,
    TopicCount,
    TopicFilter,
    WildcardTopicCount,
)

__all__ = [
    "CLOSE_COMMIT_LIMIT_S",
    "CLOSE_STEP_LIMIT_S",
    "Committer",
    "ConnectorState",
    "ConnectorStatistics",
    "ConsumerConnector",
    "ConsumerRebalanceListener",
    "generate_consumer_id",
]

log = logging.getLogger(__name__)

CLOSE_COMMIT_LIMIT_S = 10.0
"""Time limit of the final offset commit at shutdown, seconds. Past it the commit is given up
(logged; at-least-once: the next owner re-reads from the last commit) and shutdown goes on."""

CLOSE_STEP_LIMIT_S = 5.0
"""Time limit of each other shutdown step, seconds: stopping the background tasks, closing the
offset store, the ZooKeeper session and the Kafka client. Each step has its own limit, so a
slow one never skips the next: ``shutdown()`` ends within
``CLOSE_COMMIT_LIMIT_S + 4 x CLOSE_STEP_LIMIT_S`` (30 s)."""


class ConnectorState(enum.Enum):
    """Where a connector is in its life, and what it may do there.

    - ``NEW``: constructed, not started. No session; fetches, commits and hands out nothing.
    - ``CONNECTED``: ZooKeeper session open (or, with Kafka coordination, the brokers
      reached), no streams yet. Not a group member, owns nothing.
    - ``REBALANCING``: registered; computing and applying a new assignment. Partitions that
      stay with this member keep being fetched and handed out; partitions that move are no
      longer handed out, their queued chunks are dropped and their consumed offsets committed
      once, before their owner nodes are released.
    - ``RUNNING``: owns its assignment; fetches, auto-commits and hands records to the streams.
    - ``REBALANCE_FAILED``: registered but owns nothing after ``rebalance.max.retries`` failed
      attempts (the original stayed idle silently; here the state and ``last_error`` say so).
      The next trigger (a member change, a new session) rebalances again.
    - ``SUSPENDED`` (ZooKeeper coordination only): the ZooKeeper connection is lost and the
      session may be expiring, so another member may take the partitions: records are held
      back and nothing is committed; fetching may go on. Back to the previous state when the
      same session returns; a new session (expiry) leads to a rebalance. The original kept
      delivering. A Kafka-coordinated member whose heartbeats go unanswered stays
      ``RUNNING`` but hands out nothing once its lease (0.8 x ``session.timeout.ms`` after
      the last answered heartbeat) ran out, and rejoins; its commits are fenced by the
      group coordinator (``CommitFencedError``).
    - ``CLOSING``: shutting down: fetchers stopped, final commit, session closing. Hands out
      nothing more; commits only the final commit.
    - ``CLOSED``: done; streams have ended, the ZooKeeper session is closed (its registration
      and owner nodes are gone, unless ZooKeeper was unreachable: then the server expires
      them after the session timeout) and the Kafka client is closed. Nothing more happens.
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
            consumed offset (records not yet handed out); under ``isolation.level=
            read_committed`` its last stable offset instead (records readable now); absent
            before the first fetch.
        completed_rebalances: rebalances that ended owning their assignment, all time (not a
            Kafka group generation: a ZooKeeper-coordinated group has none).
        rebalances: the most recent rebalances (at most ``HISTORY_LIMIT``, 100), oldest
            first.
        failed_rebalance_attempts: attempts that failed (a conflict, an error) so far.
        session_id: the ZooKeeper session id (``None`` before the first session).
        zookeeper_commits: offset nodes written to ZooKeeper so far.
        kafka_commits: partition offsets Kafka accepted so far.
        last_error: the last rebalance failure, if the state is ``REBALANCE_FAILED``.
        group_generation: the Kafka group's generation id (Kafka coordination; ``None`` with
            ZooKeeper coordination, or before the first join).
        member_id: the member id the Kafka group coordinator gave (``None`` likewise).
        unowned_partitions: ``{partition: reason}`` of partitions the group's plan gives this
            member but that it left unclaimed, so that no member consumes them: with ZooKeeper
            coordination, a partition whose offset node does not hold a number (the reason
            names the node and its bytes; see ``offsets.malformed.reset``). Each is tried
            again at every rebalance. Always empty with Kafka coordination.
        seconds_since_fetch: seconds since the last fetch response from any broker (since
            fetching started, before the first); ``None`` while no partition is fetched. A
            fetch is answered within ``fetch.wait.max.ms`` even when no record waits, so a
            value of many seconds means no broker answers (a health check's signal).
        partitions_without_leader: ``{partition: seconds}`` of the owned partitions no fetch
            loop is fetching now, sorted, with how long they have not been (since the fetch
            from their leader failed, or since fetching started): their leader is unknown or
            its broker did not answer, and the leader finder is looking for it (every
            ``refresh.leader.backoff.ms``). Empty while every partition is fetched.
        seconds_since_coordinator: with Kafka coordination, seconds since the group
            coordinator last answered (since the connector started, before its first answer);
            heartbeats go every ``heartbeat.interval.ms``, so many seconds mean the
            coordinator is unknown or unreachable (a health check's signal). ``None`` with
            ZooKeeper coordination.
    """

    state: ConnectorState
    consumer_id: str
    owned_partitions: tuple[TopicPartition, ...]
    consumed_offsets: Mapping[TopicPartition, int]
    committed_offsets: Mapping[TopicPartition, int]
    lag: Mapping[TopicPartition, int]
    completed_rebalances: int
    rebalances: tuple[RebalanceRecord, ...]
    failed_rebalance_attempts: int
    session_id: int | None
    zookeeper_commits: int
    kafka_commits: int
    last_error: BaseException | None
    group_generation: int | None = None
    member_id: str | None = None
    unowned_partitions: Mapping[TopicPartition, str] = field(default_factory=dict)
    seconds_since_fetch: float | None = None
    partitions_without_leader: Mapping[TopicPartition, float] = field(default_factory=dict)
    seconds_since_coordinator: float | None = None


_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions of a (nested) exception group, groups flattened."""
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


def _check_topic_name(topic: str) -> None:
    if not isinstance(topic, str) or not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise InvalidConfigError(
            "topic_count_map",
            f"illegal topic name {topic!r}: 1-249 of ASCII alphanumerics, '.', '_' and '-'",
        )


def generate_consumer_id() -> str:
    """``<hostname>-<epoch ms>-<first 8 hex digits of a random UUID>``, as the original."""
    return f"{socket.gethostname()}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"


class Committer(Protocol):
    """Commits offsets of owned partitions, fenced by the coordinator's rule."""

    async def commit(self, offsets: Mapping[TopicPartition, int], retries: int) -> int: ...

    async def auto_commit(self, interval_s: float) -> None: ...


@runtime_checkable
class _ReportsUnowned(Protocol):
    """A coordinator that may leave partitions of its plan unclaimed (the ZooKeeper one)."""

    @property
    def unowned_partitions(self) -> Mapping[TopicPartition, str]: ...


class ConsumerConnector:
    """A member of a consumer group: the part both coordinators share.

    Not built directly: use ``ZookeeperConsumerConnector``, ``KafkaConsumerConnector`` or
    ``aiozkconsumer.create_connector(config)``. Use as an async context manager, entered and
    left in one task::

        async with create_connector(config) as connector:
            streams = await connector.create_message_streams({"payments": 2})
            async for msg in streams["payments"][0]:
                ...

    Args:
        config: the consumer configuration.
        fetch: ``False`` makes a member that takes part in the group but fetches nothing:
            whoever owns it reads the owned partitions itself (the Spark source plans offset
            ranges for them) and commits with ``commit_offsets(offsets)``.
        cluster: where brokers, topics and partitions come from.
        offset_store: the group's offset storage.
        interceptors: interceptors to use besides those ``interceptor.classes`` names.

    Raises:
        InvalidConfigError: ``interceptor.classes`` names a class that cannot be loaded.
    """

    committer: Committer
    coordinator: Coordinator

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        fetch: bool,
        cluster: ClusterView,
        offset_store: OffsetStore,
        interceptors: Sequence[ConsumerInterceptor] = (),
    ) -> None:
        self.config = config
        self.fetch_enabled = fetch
        self.consumer_id_string = (
            f"{config.group_id}_{config.consumer_id or generate_consumer_id()}"
        )
        self.cluster = cluster
        """Where brokers, topics and partitions come from, and the Kafka client."""
        self.offset_store = offset_store
        self.interceptors = Interceptors.from_config(
            config.interceptor_classes, interceptors, config=config
        )
        """The consumer interceptors (``interceptor.classes`` and the constructor's)."""
        self.metrics = ConsumerMetrics(config.effective_client_id, config.group_id)
        """The original's metrics (``snapshot()``, ``collector()`` for Prometheus)."""
        self.fetcher = FetcherManager(None, config, self.metrics)  # type: ignore[arg-type]
        kbytes = config.effective_queued_max_messages_kbytes
        self.ownership = OwnershipState(
            config.queued_max_message_chunks or 0,
            queue_bytes=None if kbytes is None else kbytes * 1024,
            slot_bytes=config.fetch_message_max_bytes,
        )
        """What this member owns: registry, committed offsets, gate, stream queues."""
        self.handover = Handover(
            config=config,
            consumer_id=self.consumer_id_string,
            ownership=self.ownership,
            fetcher=self.fetcher,
            offset_store=offset_store,
            metrics=self.metrics,
            cluster=cluster,
            commit=lambda offsets: self.committer.commit(
                offsets, config.offsets_commit_max_retries
            ),
            task_group=lambda: self.task_group,
            fetch_enabled=fetch,
        )
        """Gives partitions up and takes them, for whichever coordinator."""
        # Kafka commits carry each offset's leader epoch (KIP-320), known from the batches the
        # consumed records came in.
        kafka_store = getattr(offset_store, "kafka_store", offset_store)
        if hasattr(kafka_store, "leader_epochs") and kafka_store.leader_epochs is None:
            kafka_store.leader_epochs = self._leader_epochs
        self.closing = False
        self._state = ConnectorState.NEW
        self._state_changed = anyio.Event()
        self._closed = anyio.Event()
        self._last_error: BaseException | None = None
        self._topic_count: TopicCount | None = None
        self._streams: dict[str, list[KafkaStream]] = {}
        self._owned_gauges: dict[str, Any] = {}
        self.ownership.on_change(self._owned_partitions_changed)
        self._rebalance_lock = anyio.Lock()
        self._rebalance_requested = anyio.Event()
        self._pending_reason = ""
        self._tg: TaskGroup | None = None
        self._tg_stack: contextlib.AsyncExitStack | None = None
        self._bg_tg: TaskGroup | None = None
        self._bg_scope: anyio.CancelScope | None = None
        self._bg_done: anyio.Event | None = None

    # -- what a coordinator brings -------------------------------------------------------

    async def _open(self) -> None:
        """Open the coordinator's session (before the task group starts)."""
        raise NotImplementedError

    def _start_background(self, tg: TaskGroup) -> None:
        """Start the coordinator's own background tasks (after the task group started)."""

    async def _subscribe(self, topics: Iterable[str], *, wildcard: bool) -> None:
        """Join the group with the subscription and run the first rebalance."""
        raise NotImplementedError

    async def _rebalance(self, reason: str) -> None:
        """One rebalance (the caller holds the rebalance lock)."""
        raise NotImplementedError

    async def _close_coordination(self) -> None:
        """Leave the group and close the coordinator's session (bounded, never raises)."""
        raise NotImplementedError

    def _gate_closed_error(self) -> ConsumerError | None:
        """The error ``commit_offsets`` raises while the gate is closed (``None``: commit
        anyway and let the coordinator judge)."""
        return ConsumerError("the member's ownership is in doubt: not committing")

    @property
    def _session_id(self) -> int | None:
        return None

    @property
    def _group_generation(self) -> tuple[int | None, str | None]:
        """``(generation, member id)`` of a Kafka-coordinated group; ``(None, None)`` else."""
        return (None, None)

    # -- views of the ownership state ----------------------------------------------------

    @property
    def gate(self) -> OwnershipGate:
        """The ownership gate: records flow only while it is passable."""
        return self.ownership.gate

    def _leader_epochs(
        self, offsets: Mapping[TopicPartition, int]
    ) -> Mapping[TopicPartition, int]:
        """``{tp: leader epoch of the record before offset}`` for owned partitions."""
        registry = self.ownership.registry
        return {
            tp: registry[tp].offset_epoch(offset)
            for tp, offset in offsets.items()
            if tp in registry
        }

    @property
    def topic_registry(self) -> Mapping[TopicPartition, PartitionTopicInfo]:
        """The owned partitions (a read-only view; the original's ``topicRegistry``)."""
        return self.ownership.registry

    @property
    def listener(self) -> ConsumerRebalanceListener | None:
        """The rebalance listener, or ``None``."""
        listener: ConsumerRebalanceListener | None = self.coordinator.listener
        return listener

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

    def _member_parts(self) -> MemberParts:
        """What this connector gives its coordinator."""
        return MemberParts(
            config=self.config,
            consumer_id=self.consumer_id_string,
            cluster=self.cluster,
            offset_store=self.offset_store,
            fetcher=self.fetcher,
            ownership=self.ownership,
            metrics=self.metrics,
            handover=self.handover,
            topic_count=lambda: self._topic_count,
            task_group=lambda: self.task_group,
            is_closing=lambda: self.closing,
            fetch_enabled=self.fetch_enabled,
            on_attempt_failed=lambda: self._set_state(self._state),
        )

    @property
    def task_group(self) -> TaskGroup:
        """The task group owning this connector's background tasks.

        Raises:
            ConsumerClosedError: the connector is not started (or already closed).
        """
        if self._bg_tg is None:
            raise ConsumerClosedError("the connector is not started")
        return self._bg_tg

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            # Also when a shutdown is already under way in another task (a signal handler):
            # shutdown() then waits for it, so the block is left only once CLOSED.
            await self.shutdown()
        finally:
            stack, self._tg, self._tg_stack = self._tg_stack, None, None
        if stack is None:
            return None
        try:
            return await stack.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # The block's own exception comes out as itself, as from any `async with`; so
            # does a single background failure (nested: the background tasks' own task group
            # is inside the connector's). Only several failures stay a group.
            leaves = _leaves(group)
            if exc is not None and all(e is exc for e in leaves):
                raise exc from None
            if len(leaves) == 1 and isinstance(leaves[0], ConsumerError):
                raise leaves[0] from group
            raise

    async def start(self) -> None:
        """Open the coordinator's session and start the connector's task group.

        Prefer ``async with``: the task group encloses the block, so a failure of a background
        task (a watch, the rebalance worker, a fetch loop) cancels the block and is raised
        when it exits. Without ``async with``, call ``start`` and then ``__aexit__`` in the
        same task.

        Raises:
            ConsumerClosedError: already started or closed.
            ZookeeperConnectionError: (ZooKeeper-coordinated) ZooKeeper did not answer within
                ``zookeeper.connection.timeout.ms``.
            KafkaConnectionError: (Kafka-coordinated) no broker of ``bootstrap.servers``
                answered.
        """
        if self._state is not ConnectorState.NEW:
            raise ConsumerClosedError(f"connector already {self._state.value}")
        await self._open()
        self.metrics.max_lag()
        self.metrics.min_fetch_rate()
        # The connector owns its task group through an exit stack (anyio's pattern for an
        # object that owns one): entered here, left by __aexit__ in the same task.
        stack = contextlib.AsyncExitStack()
        tg = await stack.enter_async_context(anyio.create_task_group())
        self._tg, self._tg_stack = tg, stack
        try:
            await tg.start(self._supervise)
            self._start_background(self.task_group)
        except BaseException:
            self._tg = self._tg_stack = None
            await stack.aclose()
            await self._close_coordination()
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
        """Stop fetching, end every stream, commit, leave the group, close the clients.

        As ``shutdown`` (0.10.2 order): fetchers stop, every stream gets the shutdown
        sentinel (iteration ends after the records already handed out), consumed offsets are
        committed (auto-commit on), the member leaves the group (the ZooKeeper session is
        closed, which deletes the registration and owner nodes at once; or LeaveGroup to the
        Kafka group coordinator), so the other members rebalance at once; then the Kafka
        client is closed. Idempotent; may be awaited from any task: while a shutdown is under
        way, another call waits until it has finished (state ``CLOSED``).

        Each step runs shielded from cancellation under its own time limit
        (``CLOSE_COMMIT_LIMIT_S`` for the final commit, ``CLOSE_STEP_LIMIT_S`` for each other
        step), so a hanging commit never keeps the group membership: the whole shutdown ends
        within 30 s.
        """
        if self._state is ConnectorState.NEW:
            return
        if self._state in (ConnectorState.CLOSING, ConnectorState.CLOSED):
            with anyio.CancelScope(shield=True):
                await self._closed.wait()
            return
        self.closing = True
        self._set_state(ConnectorState.CLOSING)
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_STEP_LIMIT_S):
                await self.fetcher.stop_connections()
                if self._bg_scope is not None:
                    self._bg_scope.cancel()
                    if self._bg_done is not None:
                        await self._bg_done.wait()
        finally:
            try:
                await self._final_cleanup()
            finally:
                self._set_state(ConnectorState.CLOSED)
                self._closed.set()

    async def _final_cleanup(self) -> None:
        """The final commit and the closes, each shielded under its own time limit."""
        own = self.ownership
        own.end_streams()
        try:
            if self.config.auto_commit_enable and len(own):
                with anyio.CancelScope(shield=True) as scope:
                    scope.deadline = anyio.current_time() + CLOSE_COMMIT_LIMIT_S
                    try:
                        await self.commit_offsets()
                    except (ZookeeperError, OffsetStorageError, CommitFencedError) as e:
                        log.error("[%s] final offset commit failed: %s", self.consumer_id_string, e)
                    except ConsumerError as e:
                        log.error(
                            "[%s] final offset commit skipped: %s", self.consumer_id_string, e
                        )
                if scope.cancelled_caught:
                    log.error(
                        "[%s] final offset commit gave up after %.0f s",
                        self.consumer_id_string,
                        CLOSE_COMMIT_LIMIT_S,
                    )
        finally:
            own.deactivate(own.owned())
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_STEP_LIMIT_S):
                await self.offset_store.close()
            self.metrics.remove_all()
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_STEP_LIMIT_S):
                await self._close_coordination()
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_STEP_LIMIT_S):
                await self.cluster.close()
            self.interceptors.close()

    async def wait_closed(self) -> None:
        """Wait until the connector is ``CLOSED`` (returns at once if it is)."""
        await self._closed.wait()

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
        self.coordinator.listener = listener

    async def create_message_streams(
        self,
        topic_count_map: Mapping[str, int],
        *,
        key_decoder: Decoder | None = None,
        value_decoder: Decoder | None = None,
    ) -> dict[str, list[KafkaStream]]:
        """Subscribe to topics and return their streams, after the first rebalance.

        As ``createMessageStreams`` (0.10.2). With ZooKeeper coordination: registers at
        ``/consumers/<group>/ids/<consumer id>``, watches the group and the topics, and runs
        the first rebalance before returning. With Kafka coordination: joins the group
        (JoinGroup/SyncGroup) before returning; the partitions the group gives this member
        are split over its streams of each topic.

        Args:
            topic_count_map: ``{topic: number of streams}``; each count >= 1. An empty map
                makes a member that subscribes to nothing (and so takes nothing).
            key_decoder: applied to each non-null key as a record is handed out.
            value_decoder: applied to each non-null value likewise.

        Returns:
            ``{topic: [KafkaStream, ...]}``, one stream per thread index.

        Raises:
            MessageStreamsExistError: streams were already created on this connector.
            InvalidConfigError: a count below 1, or an illegal topic name.
            ConsumerClosedError: the connector is not started or is closed.
            ConsumerRebalanceFailedError: the first rebalance failed.
            ZookeeperNodeExistsError: another live session registered the same consumer id.
            ZookeeperConnectionError: ZooKeeper became unreachable.
            GroupCoordinatorError: (Kafka) the group cannot be joined (no coordinator,
                an inconsistent group protocol, an authorization failure).
            UnknownTopicError: (Kafka) a topic of the map does not exist.
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
                self.ownership.add_queue(topic, tid, queue)
                streams.append(
                    self._new_stream(queue, f"{topic}-{tid.thread_id}", key_decoder, value_decoder)
                )
            self._streams[topic] = streams
        await self._subscribe(sorted(topic_count_map), wildcard=False)
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
        feeds stream ``i``); the topic list is followed, and a new matching topic is consumed
        without a restart. Internal topics are left out while ``exclude.internal.topics`` is
        true.

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
            ZookeeperConnectionError, GroupCoordinatorError: as ``create_message_streams``.
        """
        self._check_can_subscribe()
        all_topics = await self.cluster.all_topics()
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
            self.ownership.add_wildcard_queue(queue)
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
        queue = self.ownership.new_queue()
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
            interceptors=self.interceptors if self.interceptors else None,
        )

    def _apply_topic_list(self, all_topics: Iterable[str]) -> set[str]:
        """Follow the topic list with a wildcard subscription: update the matching topics and
        request a rebalance when they changed. Deleted topics stay out of the plan (the
        original kept them, a TODO there).

        Returns:
            The newly matching topics.
        """
        tc = self._topic_count
        if not isinstance(tc, WildcardTopicCount):
            return set()
        updated = tc.with_topics(all_topics)
        added = set(updated.allowed_topics()) - set(tc.allowed_topics())
        removed = set(tc.allowed_topics()) - set(updated.allowed_topics())
        if added or removed:
            self._topic_count = updated
            self.request_rebalance(
                f"topics matching {tc.topic_filter} changed (+{len(added)} -{len(removed)})"
            )
        return added

    def _subscribed_topics(self) -> list[str]:
        tc = self._topic_count
        return sorted(tc.get_consumer_thread_ids_per_topic()) if tc else []

    def streams(self) -> list[KafkaStream]:
        """Every stream created so far."""
        return [s for streams in self._streams.values() for s in streams]

    def queues(self) -> list[ChunkQueue]:
        """Every stream queue (distinct)."""
        return self.ownership.queues()

    def queue_for(self, topic: str, thread_id: ConsumerThreadId) -> ChunkQueue:
        """The queue of a (topic, thread id); a wildcard's thread ``i`` feeds stream ``i``."""
        return self.ownership.queue_for(topic, thread_id)

    @property
    def topic_count(self) -> TopicCount | None:
        """This member's subscription (``None`` before streams exist)."""
        return self._topic_count

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
            history = self.coordinator.history
            before = history[-1] if history else None
            try:
                await self._rebalance(reason)
            except (ConsumerRebalanceFailedError, ZookeeperError, ConsumerError) as e:
                if self.closing:
                    return
                self._last_error = e
                self._set_state(ConnectorState.REBALANCE_FAILED)
                if raise_on_failure:
                    raise
                log.error("[%s] %s", self.consumer_id_string, e)
                return
            finally:
                self._tell_rebalanced(before)
            if not self.closing:
                self._last_error = None
                self._set_state(ConnectorState.RUNNING)

    def _tell_rebalanced(self, before: RebalanceRecord | None) -> None:
        """Give the interceptors' ``on_rebalance`` the rebalance just recorded, if any (none
        when the attempt was cut short before the coordinator recorded it)."""
        if not self.interceptors.observes_rebalances:
            return
        history = self.coordinator.history
        if history and history[-1] is not before:
            self.interceptors.on_rebalance(history[-1])

    async def _rebalance_worker(self) -> None:
        while True:
            await self._rebalance_requested.wait()
            self._rebalance_requested = anyio.Event()
            reason, self._pending_reason = self._pending_reason, ""
            await self._run_rebalance(reason or "triggered", raise_on_failure=False)

    def _owned_partitions_changed(self) -> None:
        """Keep the ``OwnedPartitionsCount`` gauges (all topics, and per owned topic) in step."""
        m = self.metrics
        registry = self.ownership
        m.owned_partitions_count(None, lambda: float(len(registry)))
        topics = {tp.topic for tp in registry.owned()}
        for topic in topics - self._owned_gauges.keys():
            self._owned_gauges[topic] = m.owned_partitions_count(topic, self._owned_in(topic))
        for topic in set(self._owned_gauges) - topics:
            m.remove(self._owned_gauges.pop(topic))

    def _owned_in(self, topic: str) -> Callable[[], float]:
        def count() -> float:
            return float(sum(1 for tp in self.ownership.registry if tp.topic == topic))

        return count

    # -- offsets -------------------------------------------------------------------------

    async def commit_offsets(
        self,
        offsets: Mapping[TopicPartition, int] | None = None,
        *,
        retry_on_failure: bool = True,
    ) -> int:
        """Commit offsets to the group's offset storage.

        As ``commitOffsets`` (0.10.2): with no argument, the consumed offset ("next offset to
        read") of every owned partition; with ``offsets``, exactly those (the selective commit
        MirrorMaker used, 0.9+) — of partitions this member owns: another member's are
        refused (``CommitFencedError``; operators set offsets with the CLI). Every commit is
        fenced: ZooKeeper coordination refuses a partition another member claimed since this
        one did (its fencing token moved); Kafka coordination sends the generation and member
        id, and the group coordinator refuses a commit of a generation that is over.

        The original's ``retryOnFailure`` was inverted (a single attempt when ``True``); here
        ``True`` means what it says: ``1 + offsets.commit.max.retries`` attempts, with
        ``offsets.channel.backoff.ms`` between them.

        Args:
            offsets: ``{TopicPartition: next offset to read}``; ``None`` = consumed offsets.
            retry_on_failure: retry failed Kafka commits (ZooKeeper writes are not retried).

        Returns:
            The number of partitions written.

        Raises:
            ZookeeperConnectionError: (ZooKeeper) the session is suspended (nothing is
                committed while another member may own the partitions) or ZooKeeper is
                unreachable.
            OffsetCommitError: Kafka refused some offsets after every attempt.
            CommitFencedError: some partitions are not (or no longer) owned by this member;
                the others were committed (ZooKeeper), or nothing was (Kafka, whose
                generation is over), and a rebalance is requested.
        """
        if not self.ownership.gate.passable():
            error = self._gate_closed_error()
            if error is not None:
                raise error
        if offsets is None:
            offsets = self.ownership.consumed_offsets()
        retries = self.config.offsets_commit_max_retries if retry_on_failure else 0
        return await self.committer.commit(offsets, retries)

    def _drop_fenced(self, fenced: set[TopicPartition]) -> None:
        """Stop handing out and fetching partitions another member claimed since."""
        if not fenced:
            return
        log.warning(
            "[%s] %d partition(s) were claimed by another member since this one claimed them "
            "(it was paused or lost its session?): dropping %s",
            self.consumer_id_string,
            len(fenced),
            ", ".join(map(str, sorted(fenced))),
        )
        self.handover.drop(fenced)
        self.request_rebalance("commit fenced")

    # -- introspection -------------------------------------------------------------------

    def statistics(self) -> ConnectorStatistics:
        """A frozen snapshot of the connector's state (cheap: bounded history)."""
        own = self.ownership
        registry = own.registry
        generation, member_id = self._group_generation
        last_response = self.fetcher.last_response_at
        return ConnectorStatistics(
            state=self._state,
            consumer_id=self.consumer_id_string,
            owned_partitions=own.owned(),
            consumed_offsets=own.consumed_offsets(),
            committed_offsets=dict(own.committed),
            lag={
                tp: max(0, end - registry[tp].consumed_offset)
                for tp, end in self.fetcher.lag_end.items()
                if tp in registry and registry[tp].consumed_offset >= 0
            },
            completed_rebalances=self.coordinator.completed,
            rebalances=tuple(self.coordinator.history),
            failed_rebalance_attempts=self.coordinator.failed_attempts,
            session_id=self._session_id,
            zookeeper_commits=self.offset_store.zookeeper_commits,
            kafka_commits=self.offset_store.kafka_commits,
            last_error=self._last_error,
            group_generation=generation,
            member_id=member_id,
            unowned_partitions=(
                dict(self.coordinator.unowned_partitions)
                if isinstance(self.coordinator, _ReportsUnowned)
                else {}
            ),
            seconds_since_fetch=(
                None if last_response is None else max(0.0, time.monotonic() - last_response)
            ),
            partitions_without_leader=self.fetcher.without_leader(),
            seconds_since_coordinator=self._seconds_since_coordinator(),
        )

    def _seconds_since_coordinator(self) -> float | None:
        """:attr:`ConnectorStatistics.seconds_since_coordinator`: ``None`` here (ZooKeeper
        coordination has no group coordinator)."""
        return None

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.consumer_id_string} [{self._state.value}, "
            f"{len(self.ownership)} partitions]>"
        )
