"""The Kafka group coordinator's side of a member: the Java client's ``ConsumerCoordinator``.

A second implementation of the same ownership parts the ZooKeeper ``Rebalancer`` uses: it is
given the ownership state, the fetcher, the offset store and the listener, never the
connector. It speaks the classic group protocol (``kafka/group.py``): JoinGroup with the
configured assignor and the standard ``ConsumerProtocol`` subscription, the leader computing
the assignment with the Java assignors' rules (``group_assignors.py``), SyncGroup, a heartbeat
coroutine (the seed's ``HeartbeatTask``) that keeps running while the user's code is slow, and
LeaveGroup on shutdown. As in ``AbstractCoordinator``/``ConsumerCoordinator`` (kafka-clients):

- ``rejoin_needed``: set by a heartbeat answered ``REBALANCE_IN_PROGRESS``, by a fenced
  member (``UNKNOWN_MEMBER_ID``, ``ILLEGAL_GENERATION``), by a metadata change of the
  subscription (a partition-count change, a new topic matching a pattern) and by the leader's
  assignment snapshot going stale while it assigned;
- ``needs_join_prepare``: before (re)joining, the member commits its consumed offsets, calls
  the listener and gives up every partition (the classic protocol is eager: a member joining
  stops the group's fetching while it rebalances);
- rebalances stay one serialized task, as in ZooKeeper mode.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from anyio.abc import TaskGroup

from .cluster import ClusterView
from .config import ConsumerConfig
from .errors import (
    ConsumerError,
    GroupCoordinatorError,
    OffsetStorageError,
    UnknownTopicError,
)
from .fetcher import FetcherManager
from .group_assignors import assign
from .kafka.group import (
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    GroupClient,
    GroupRequestError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from .metrics import ConsumerMetrics
from .offsets import OffsetStore
from .ownership import OwnershipState, call_listener, partition_info, partitions_by_topic
from .plan import plan_moves
from .records import HISTORY_LIMIT, RebalanceRecord, TopicPartition
from .subscription import ConsumerThreadId, TopicCount, WildcardTopicCount

__all__ = ["METADATA_REFRESH_MS", "KafkaCoordinator"]

log = logging.getLogger(__name__)

METADATA_REFRESH_MS = 5000
"""How often the subscription's metadata is checked for changes, ms (the metadata snapshot)."""

_RETRY_BACKOFF_S = 0.1
_RETRY_BACKOFF_MAX_S = 1.0


class KafkaCoordinator:
    """One member's part in a Kafka-coordinated group (classic protocol).

    Args:
        config: the consumer configuration (``group.coordinator=kafka``).
        consumer_id: this member's consumer id string (the streams' thread ids use it).
        group: the group protocol requests.
        cluster: metadata (topics, partition counts) and the Kafka client.
        offset_store: reads the committed offsets of assigned partitions.
        fetcher: the fetcher manager.
        ownership: the member's ownership state.
        metrics: ``RebalanceRateAndTime``.
        commit: commits consumed offsets before the member gives partitions up (auto-commit
            on); its failures are logged.
        topic_count: returns the subscription.
        task_group: returns the task group owning the fetcher tasks.
        is_closing: whether the member is shutting down.
        request_rebalance: asks the connector's rebalance worker for a rejoin.
        fetch_enabled: whether this member fetches what it owns.
        on_attempt_failed: called after each failed attempt.

    Attributes:
        listener: the rebalance listener, or ``None``.
        member_id: the id the coordinator gave (``""`` before the first join).
        generation: the group generation of the current membership (-1: none).
        history: the last ``HISTORY_LIMIT`` rebalances.
        completed: rebalances that ended with an assignment, all time.
        failed_attempts: attempts that failed, all time.
        last_heartbeat_sent, last_heartbeat_received: monotonic seconds, ``None`` before any.
    """

    def __init__(
        self,
        *,
        config: ConsumerConfig,
        consumer_id: str,
        group: GroupClient,
        cluster: ClusterView,
        offset_store: OffsetStore,
        fetcher: FetcherManager,
        ownership: OwnershipState,
        metrics: ConsumerMetrics,
        commit: Callable[[Mapping[TopicPartition, int]], Awaitable[Any]],
        topic_count: Callable[[], TopicCount | None],
        task_group: Callable[[], TaskGroup],
        is_closing: Callable[[], bool],
        request_rebalance: Callable[[str], None],
        fetch_enabled: bool = True,
        on_attempt_failed: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        self.consumer_id = consumer_id
        self.group = group
        self.cluster = cluster
        self.offset_store = offset_store
        self.fetcher = fetcher
        self.ownership = ownership
        self.metrics = metrics
        self.commit = commit
        self.topic_count = topic_count
        self.task_group = task_group
        self.is_closing = is_closing
        self.request_rebalance = request_rebalance
        self.fetch_enabled = fetch_enabled
        self.on_attempt_failed = on_attempt_failed
        self.listener: Any = None
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader: str | None = None
        self.rejoin_needed = True
        self.history: deque[RebalanceRecord] = deque(maxlen=HISTORY_LIMIT)
        self.completed = 0
        self.failed_attempts = 0
        self.last_heartbeat_sent: float | None = None
        self.last_heartbeat_received: float | None = None
        self._rebalancing = False
        self._heartbeat_reset = anyio.Event()
        self._metadata_snapshot: dict[str, int] | None = None
        self._members: tuple[str, ...] = ()

    # -- the subscription ----------------------------------------------------------------

    def subscribed_topics(self) -> list[str]:
        """The topics this member subscribes to now (a pattern's current matches)."""
        tc = self.topic_count()
        if tc is None:
            return []
        if isinstance(tc, WildcardTopicCount):
            return sorted(tc.allowed_topics())
        return sorted(tc.get_consumer_thread_ids_per_topic())

    def _streams_of(self, topic: str) -> int:
        tc = self.topic_count()
        if tc is None:
            return 1
        ids = tc.get_consumer_thread_ids_per_topic().get(topic)
        return max(1, len(ids)) if ids else 1

    def thread_for(self, tp: TopicPartition) -> ConsumerThreadId:
        """The stream a partition feeds: partition ``p`` of a topic with ``n`` streams feeds
        stream ``p mod n`` (stable across rebalances, so a partition that stays keeps its
        stream)."""
        return ConsumerThreadId(self.consumer_id, tp.partition % self._streams_of(tp.topic))

    # -- the rebalance -------------------------------------------------------------------

    async def rebalance(self, reason: str) -> None:
        """Join (or rejoin) the group and take the assignment (``ensureActiveGroup``).

        Retriable failures (no coordinator yet, the coordinator moved, a rebalance under way,
        a fenced member) are retried with a short backoff within ``max(session.timeout.ms,
        30 s)``.

        Raises:
            GroupCoordinatorError: a fatal group error (authorization, inconsistent group
                protocol, a broker too old), or no success within the deadline; names the
                group and the coordinator.
            UnknownTopicError: a topic of a static subscription does not exist.
        """
        with self.metrics.rebalance_rate_and_time().time():
            await self._rebalance(reason)

    async def _rebalance(self, reason: str) -> None:
        started, t0 = time.time(), time.monotonic()
        deadline = anyio.current_time() + max(self.config.session_timeout_ms / 1000, 30.0)
        backoff = _RETRY_BACKOFF_S
        attempts = 0
        kept = released = acquired = 0
        self._rebalancing = True
        try:
            released = await self._prepare_join()
            while True:
                if self.is_closing():
                    return
                attempts += 1
                try:
                    kept, acquired = await self._join_and_sync()
                    break
                except GroupRequestError as e:
                    self.failed_attempts += 1
                    self.on_attempt_failed()
                    if e.fatal:
                        raise GroupCoordinatorError(
                            self.config.group_id, await self._where(), str(e)
                        ) from e
                    if e.code == UNKNOWN_MEMBER_ID:
                        self.member_id = ""
                    if e.fenced:
                        self.generation = -1
                    log.info("[%s] join attempt %d failed: %s", self.consumer_id, attempts, e)
                    if anyio.current_time() >= deadline:
                        self._record(started, t0, attempts, False, reason, 0, released, 0)
                        raise GroupCoordinatorError(
                            self.config.group_id,
                            await self._where(),
                            f"could not join within {time.monotonic() - t0:.0f} s: {e}",
                        ) from e
                    if e.code != REBALANCE_IN_PROGRESS and not e.fenced:
                        await anyio.sleep(backoff)
                        backoff = min(backoff * 2, _RETRY_BACKOFF_MAX_S)
        finally:
            self._rebalancing = False
        self._record(started, t0, attempts, True, reason, kept, released, acquired)

    async def _where(self) -> str:
        try:
            return await self.group.coordinator_address()
        except ConsumerError:
            return "unknown"

    async def _prepare_join(self) -> int:
        """``onJoinPrepare``: commit, call the listener, give every partition up (eager)."""
        own = self.ownership
        owned = own.owned()
        if not owned:
            return 0
        released = own.deactivate(owned)
        self.fetcher.remove_partitions(released)
        if self.config.auto_commit_enable and self.generation >= 0:
            try:
                await self.commit({tp: p.consumed_offset for tp, p in released.items()})
            except (OffsetStorageError, ConsumerError) as e:
                log.warning("[%s] commit before rejoining failed: %s", self.consumer_id, e)
        if self.listener is not None:
            await call_listener(
                self.listener.before_releasing_partitions(partitions_by_topic(released))
            )
        self.offset_store.forget(released)
        own.release(released)
        return len(released)

    async def _join_and_sync(self) -> tuple[int, int]:
        """One JoinGroup + SyncGroup, then take the assignment. Returns (kept, acquired)."""
        cfg = self.config
        topics = self.subscribed_topics()
        await self._check_topics_exist(topics)
        self.rejoin_needed = False
        joined = await self.group.join(
            self.member_id,
            session_timeout_ms=cfg.session_timeout_ms,
            rebalance_timeout_ms=cfg.max_poll_interval_ms,
            protocols=[(cfg.partition_assignment_strategy, encode_subscription(topics))],
        )
        self.member_id = joined.member_id
        self.generation = joined.generation
        self.protocol = joined.protocol
        self.leader = joined.leader
        log.info(
            "[%s] joined group %s: generation %d, member %s%s, assignor %s",
            self.consumer_id,
            cfg.group_id,
            joined.generation,
            joined.member_id,
            " (leader)" if joined.is_leader else "",
            joined.protocol,
        )
        assignments: list[tuple[str, bytes]] = []
        snapshot: dict[str, int] | None = None
        if joined.is_leader:
            assignments, snapshot = await self._assign(joined.protocol, joined.members)
        # JoinGroup may wait long for the other members; SyncGroup is answered at once: its
        # start is when the coordinator last heard from this member.
        t0 = time.monotonic()
        data = await self.group.sync(joined.generation, joined.member_id, assignments)
        # An answered join proves the membership as a heartbeat does: the lease starts anew,
        # and so does the heartbeat timer (as the Java client's HeartbeatThread.enable): all
        # members then heartbeat at about the same moment and notice the next rebalance
        # together, instead of up to an interval apart.
        self.ownership.gate.extend(t0 + 0.8 * cfg.session_timeout_ms / 1000)
        self._heartbeat_reset.set()
        mine = decode_assignment(data)
        if snapshot is not None:
            # The assignment snapshot: metadata changed while the leader assigned.
            now = await self._partition_counts(list(snapshot))
            if now != snapshot:
                log.info("[%s] metadata changed while assigning: rejoining", self.consumer_id)
                self.request_rebalance("metadata changed while the leader assigned")
        return await self._take(mine)

    async def _check_topics_exist(self, topics: list[str]) -> None:
        tc = self.topic_count()
        if tc is None or isinstance(tc, WildcardTopicCount) or not topics:
            return
        counts = await self._partition_counts(topics)
        missing = [t for t in topics if not counts.get(t)]
        if missing:
            raise UnknownTopicError(
                missing[0],
                f"topic {missing[0]!r} of the subscription does not exist "
                f"(group {self.config.group_id!r})",
            )

    async def _partition_counts(self, topics: list[str]) -> dict[str, int]:
        parts = await self.cluster.partitions_for_topics(topics)
        return {t: len(p) for t, p in parts.items()}

    async def _assign(
        self, protocol: str, members: tuple[tuple[str, str | None, bytes], ...]
    ) -> tuple[list[tuple[str, bytes]], dict[str, int]]:
        """The leader's part: every member's assignment (Java assignors' rules)."""
        subscriptions: dict[str, list[str]] = {}
        instance_ids: dict[str, str | None] = {}
        for member_id, instance_id, metadata in members:
            try:
                subscriptions[member_id] = decode_subscription(metadata)
            except ValueError as e:
                log.error("[%s] member %s sent %s: it gets nothing", self.consumer_id, member_id, e)
                subscriptions[member_id] = []
            instance_ids[member_id] = instance_id
        self._members = tuple(sorted(subscriptions))
        all_topics = sorted({t for topics in subscriptions.values() for t in topics})
        counts = await self._partition_counts(all_topics)
        plan = assign(protocol, subscriptions, counts, instance_ids)
        return [(m, encode_assignment(tps)) for m, tps in sorted(plan.items())], counts

    async def _take(self, mine: list[TopicPartition]) -> tuple[int, int]:
        """Own the assigned partitions: read their offsets, start fetching them."""
        own = self.ownership
        wanted = {tp: own.queue_for(tp.topic, self.thread_for(tp)) for tp in mine}
        moves = plan_moves(own.owned_streams(), wanted)
        offsets = await self.offset_store.fetch(list(moves.acquire))
        new = {
            tp: partition_info(
                self.config, self.metrics, own.gate, tp, moves.acquire[tp], offsets[tp]
            )
            for tp in moves.acquire
        }
        own.acquire(new.values())
        own.record_committed(offsets)
        own.gate.reopen()
        self._metadata_snapshot = await self._partition_counts(self.subscribed_topics())
        if self.listener is not None:
            view: dict[str, dict[int, ConsumerThreadId]] = {}
            for tp in mine:
                view.setdefault(tp.topic, {})[tp.partition] = self.thread_for(tp)
            await call_listener(self.listener.before_starting_fetchers(self.consumer_id, view))
        if self.fetch_enabled and len(own):
            self.fetcher.kafka = await self.cluster.kafka()
            await self.fetcher.ensure_fetching(
                own.registry.values(), new.values(), self.task_group()
            )
        return len(moves.keep), len(new)

    def _record(
        self,
        started: float,
        t0: float,
        attempts: int,
        ok: bool,
        reason: str,
        kept: int,
        released: int,
        acquired: int,
    ) -> None:
        rec = RebalanceRecord(
            started_at=started,
            duration_s=time.monotonic() - t0,
            attempts=attempts,
            succeeded=ok,
            partitions=self.ownership.owned(),
            reason=reason,
            members=self._members,
            kept=kept,
            released=released,
            acquired=acquired,
        )
        self.history.append(rec)
        if ok:
            self.completed += 1
        log.info(
            "[%s] rebalance %s in %.3f s (generation %d); owns %d partitions",
            self.consumer_id,
            "done" if ok else "FAILED",
            rec.duration_s,
            self.generation,
            len(rec.partitions),
        )

    # -- background tasks ----------------------------------------------------------------

    async def heartbeat_loop(self) -> None:
        """The ``HeartbeatTask``: every ``heartbeat.interval.ms`` while a member.

        A heartbeat answered ``REBALANCE_IN_PROGRESS`` asks for a rejoin; ``UNKNOWN_MEMBER_ID``
        / ``ILLEGAL_GENERATION`` mean this member was fenced: it stops handing out records at
        once (the gate closes) and rejoins. Each answered heartbeat sent at ``t0`` extends the
        gate's lease to ``t0 + 0.8 x session.timeout.ms``: a member paused past its session
        timeout hands out nothing when it wakes up until the coordinator answers again.
        """
        cfg = self.config
        interval = cfg.heartbeat_interval_ms / 1000
        session_s = cfg.session_timeout_ms / 1000
        gate = self.ownership.gate
        while True:
            with anyio.move_on_after(interval):
                await self._heartbeat_reset.wait()
            if self._heartbeat_reset.is_set():
                self._heartbeat_reset = anyio.Event()
                continue  # a join just completed: the next heartbeat is an interval after it
            if self.generation < 0 or self._rebalancing or self.is_closing():
                continue
            t0 = time.monotonic()
            self.last_heartbeat_sent = t0
            try:
                await self.group.heartbeat(self.generation, self.member_id)
            except GroupRequestError as e:
                if e.code == REBALANCE_IN_PROGRESS:
                    self.request_rebalance("the group is rebalancing")
                elif e.fenced:
                    log.warning("[%s] fenced by the coordinator: %s", self.consumer_id, e)
                    if e.code == UNKNOWN_MEMBER_ID:
                        self.member_id = ""
                    self.generation = -1
                    gate.extend(min(gate.deadline, time.monotonic()))
                    self.request_rebalance("fenced: " + str(e))
                else:
                    log.info("[%s] heartbeat failed: %s", self.consumer_id, e)
                    if self.last_heartbeat_received is not None and (
                        time.monotonic() - self.last_heartbeat_received > session_s
                    ):
                        self.request_rebalance("no heartbeat answered for a session timeout")
                continue
            self.last_heartbeat_received = time.monotonic()
            gate.extend(t0 + 0.8 * session_s)

    async def metadata_loop(self) -> None:
        """The metadata snapshot: rejoin when a subscribed topic's partition count changes or
        a pattern matches a new topic (checked every ``METADATA_REFRESH_MS``)."""
        while True:
            await anyio.sleep(METADATA_REFRESH_MS / 1000)
            if self._rebalancing or self._metadata_snapshot is None:
                continue
            try:
                counts = await self._partition_counts(self.subscribed_topics())
            except ConsumerError as e:
                log.info("[%s] metadata refresh failed: %s", self.consumer_id, e)
                continue
            if counts != self._metadata_snapshot:
                log.info(
                    "[%s] subscription metadata changed (%s -> %s): rejoining",
                    self.consumer_id,
                    self._metadata_snapshot,
                    counts,
                )
                self._metadata_snapshot = counts
                self.request_rebalance("subscription metadata changed")

    async def leave(self) -> None:
        """LeaveGroup, so the group rebalances at once (never raises)."""
        if self.member_id and self.generation >= 0:
            await self.group.leave(self.member_id)
        self.generation = -1

    def __repr__(self) -> str:
        return (
            f"<KafkaCoordinator {self.config.group_id} member={self.member_id or '-'} "
            f"generation={self.generation}>"
        )
