"""Rebalance: the pure plan and the serialized worker that carries it out.

The decisions are pure functions in ``plan.py`` (the assignment, what to keep, release and
acquire, whether claims hold); ``Rebalancer`` reads the view and performs them. It is given its
parts (config, ZooKeeper session, cluster view, offset store, fetcher, ownership state,
membership, fenced committer, listener), never the connector. It performs one
``syncedRebalance`` (``ZookeeperConsumerConnector.scala``, 0.10.2, §3.4–3.5 of the reference):
assign from a fresh view, release what moves (stop handing it out and fetching it, commit its
consumed offsets with auto-commit on, call the listener, delete its owner nodes), claim the
owner nodes of what is new (undoing the claims of the attempt on any conflict it cannot wait
out), read its committed offsets, start fetching it; up to ``rebalance.max.retries`` attempts.
Independent ZooKeeper requests are in flight together (the view's reads, the creates, the
waits on blocking owner nodes), so an attempt takes a few round trips, not one per read; a
view reads again only the registrations of members it has not seen (or all of them when the
``/ids`` child version shows a member registered again), not every one each time.

Beyond the original:

- Incremental: partitions whose owner does not change keep their owner node, their fetcher and
  their place in the stream; a member joining does not stop the whole group. The original
  released and re-claimed everything on every rebalance. The ZooKeeper layout is unchanged, and
  a member running the original computes the same plan, so it never claims what we keep.
- A claim that conflicts with a member that has not yet released keeps the claims already made
  and waits (a ZooKeeper watch, at most ``rebalance.backoff.ms`` per wait) only on the blocking
  owner nodes, then claims those again, for as long as the group's membership (the ``/ids``
  child version read with the view) is unchanged: every member reading the same membership
  computes the same plan, so nobody else wants the claims held meanwhile. When the membership
  changed, the claims of the attempt are deleted and the next attempt plans again from a fresh
  view. The original deleted every claim and re-read the whole view after each conflict.
- A partition whose offset node does not hold a number is left unowned, alone (its claim is
  deleted again at once; the original failed the whole attempt); ``unowned_partitions`` says
  which and why, and every rebalance reads it again. With ``offsets.malformed.reset`` it is
  claimed from ``auto.offset.reset``.

Every rebalance is timed by phase (:class:`RebalancePhases`, :data:`PHASES`): kept in
``Rebalancer.phase_history`` next to ``history`` and logged at DEBUG, so that a slow rebalance
says where its time went.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

import anyio

from ..errors import (
    ConsumerError,
    ConsumerRebalanceFailedError,
    MalformedZookeeperDataError,
    ZookeeperConnectionError,
    ZookeeperError,
    ZookeeperSessionExpiredError,
)
from ..handover import MemberParts, StreamView
from ..offsets import NO_OFFSET, ZookeeperOffsetStore
from ..plan import (
    Moves,
    plan_assignment,
    plan_moves,
)
from ..records import HISTORY_LIMIT, RebalanceRecord, TopicPartition
from ..subscription import (
    ConsumerThreadId,
)
from ..zk import layout
from ..zk.client import ZkClient
from .membership import Membership
from .owners import OwnerNodes
from .phases import PHASES, PhaseClock, RebalancePhases
from .view import ViewReader

if TYPE_CHECKING:
    from ..queues import ChunkQueue

__all__ = [
    "HISTORY_LIMIT",
    "PHASES",
    "PhaseClock",
    "RebalanceListener",
    "RebalancePhases",
    "RebalanceRecord",
    "Rebalancer",
    "plan_assignment",
]

log = logging.getLogger(__name__)


class RebalanceListener(Protocol):
    """The two hooks the rebalancer calls (``ConsumerRebalanceListener``, 0.9+)."""

    def before_releasing_partitions(
        self, partition_ownership: dict[str, set[int]]
    ) -> Awaitable[None]: ...

    def before_starting_fetchers(
        self, consumer_id: str, global_partition_assignment: dict[str, dict[int, ConsumerThreadId]]
    ) -> Awaitable[None]: ...


class Rebalancer:
    """Performs rebalances for one member, one at a time (the caller holds the lock).

    Args:
        parts: what the connector gives every coordinator (its hand-over commits released
            partitions' consumed offsets with the fenced committer, auto-commit on).
        zk: the ZooKeeper session.
        membership: the registration (re-registers after a replaced session).
        on_no_brokers: called when ZooKeeper has no broker (starts a watch on them).
        on_attempt_failed: called after each failed attempt.
        connection_retry_window_s: how long attempts lost to ZooKeeper connection loss are
            not counted against ``rebalance.max.retries``.

    Attributes:
        listener: the rebalance listener, or ``None``.
        history: the last ``HISTORY_LIMIT`` rebalances, oldest first.
        phase_history: the phase timings of the same rebalances (one per ``history`` entry,
            with the same ``started_at``).
        completed: rebalances that ended owning their assignment, all time.
        failed_attempts: attempts that failed, all time.
        unowned_partitions: ``{partition: reason}`` of the partitions the last attempt's plan
            gave this member but that it did not keep (a malformed offset node: its claim was
            deleted again), so that no member owns them; each is read again by the next
            rebalance.
    """

    def __init__(
        self,
        parts: MemberParts,
        *,
        zk: ZkClient,
        membership: Membership,
        on_no_brokers: Callable[[], None] = lambda: None,
        connection_retry_window_s: float = 0.0,
    ) -> None:
        self.config = parts.config
        self.consumer_id = parts.consumer_id
        self.zk = zk
        self.cluster = parts.cluster
        self.offset_store = parts.offset_store
        self.fetcher = parts.fetcher
        self.ownership = parts.ownership
        self.membership = membership
        self.handover = parts.handover
        self.metrics = parts.metrics
        self.topic_count = parts.topic_count
        self.task_group = parts.task_group
        self.is_closing = parts.is_closing
        self.fetch_enabled = parts.fetch_enabled
        self.on_no_brokers = on_no_brokers
        self.on_attempt_failed = parts.on_attempt_failed
        self.connection_retry_window_s = connection_retry_window_s
        self.history: deque[RebalanceRecord] = deque(maxlen=HISTORY_LIMIT)
        self.phase_history: deque[RebalancePhases] = deque(maxlen=HISTORY_LIMIT)
        self.completed = 0
        self.failed_attempts = 0
        self.last_moves = (0, 0, 0)
        self.unowned_partitions: dict[TopicPartition, str] = {}
        self.view = ViewReader(
            config=self.config,
            consumer_id=self.consumer_id,
            zk=zk,
            cluster=self.cluster,
            membership=membership,
            topic_count=self.topic_count,
            on_no_brokers=on_no_brokers,
        )
        """Reads the group's view each attempt plans from."""
        self.owners = OwnerNodes(
            config=self.config,
            consumer_id=self.consumer_id,
            zk=zk,
            membership=membership,
            membership_changed=self.view.membership_changed,
            is_closing=self.is_closing,
            lap=lambda phase: self._clock.lap(phase),
        )
        """Claims, waits for, fences and deletes this member's owner nodes."""
        self._clock = PhaseClock()
        self._triggered_at: float | None = None
        self._queued_ms: float | None = None

    def note_trigger(self) -> None:
        """Note that a rebalance was requested now (the first request since the last
        rebalance started counts): its ``queued_ms`` starts here."""
        if self._triggered_at is None:
            self._triggered_at = time.monotonic()

    @property
    def listener(self) -> RebalanceListener | None:
        """The rebalance listener, or ``None`` (the hand-over calls it)."""
        listener: RebalanceListener | None = self.handover.listener
        return listener

    @listener.setter
    def listener(self, value: RebalanceListener | None) -> None:
        self.handover.listener = value

    async def rebalance(self, reason: str) -> None:
        """The :class:`~aiozkconsumer.handover.Coordinator` protocol's name for
        :meth:`synced_rebalance`."""
        await self.synced_rebalance(reason)

    async def leave(self) -> None:
        """Nothing to send: a ZooKeeper member leaves when its registration is deleted (the
        connector's shutdown), and the other members' watches rebalance then."""

    async def synced_rebalance(self, reason: str) -> None:
        """Time ``_synced_rebalance`` in ``RebalanceRateAndTime`` (KAFKA-1446)."""
        with self.metrics.rebalance_rate_and_time().time():
            await self._synced_rebalance(reason)

    async def _synced_rebalance(self, reason: str) -> None:
        """Run up to ``rebalance.max.retries`` attempts (``syncedRebalance``).

        An attempt cut short by ZooKeeper connection loss or session expiry does not use up
        one of them: the next one starts when the session is connected again, within
        ``connection_retry_window_s`` (the original's ZkClient blocked the attempt until the
        connection was back). Nor does an attempt that found the group's membership changed
        while it claimed (it deleted its claims and plans again at once with the members of
        now): the group is still forming, nobody is in the way. *The original counted it: a
        group of dozens of members starting together ran members out of their 4 attempts
        (measured at 64 members x 4,096 partitions on 2 cores), and each started without
        partitions until the next trigger.*

        Raises:
            ConsumerRebalanceFailedError: no attempt succeeded. The consumer then owns no
                partition and fetches nothing; it stays registered, and the next trigger
                (member change, new session) rebalances again.

        A member deregistered on a poll timeout (``membership.stale``) does not rebalance: it
        owns nothing and takes nothing until its reader asks for records again.
        """
        if self.membership.stale:
            log.info(
                "[%s] not rebalancing (%s): deregistered while a stream holds records past "
                "max.poll.interval.ms",
                self.consumer_id,
                reason,
            )
            return
        cfg = self.config
        started, t0 = time.time(), time.monotonic()
        self._clock = PhaseClock()
        triggered, self._triggered_at = self._triggered_at, None
        self._queued_ms = None if triggered is None else max(0.0, t0 - triggered) * 1000.0
        backoff_s = cfg.effective_rebalance_backoff_ms / 1000
        last_error: BaseException | None = None
        connection_deadline: float | None = None
        attempt = replans = 0
        while attempt < cfg.rebalance_max_retries:
            attempt += 1
            if self.is_closing():
                return
            log.info(
                "[%s] begin rebalancing (attempt %d%s, %s)",
                self.consumer_id,
                attempt,
                f", plan {replans + 1}" if replans else "",
                reason,
            )
            blocking: list[str] = []
            self.last_moves = (0, 0, 0)
            self.owners.replan_now = False
            try:
                # The session may have been replaced since the last attempt (or since the
                # rebalance began): own nothing of the old one and register again first.
                await self.membership.handle_new_session_if_needed()
                self._clock.lap("session")
                self.owners.waits_left = cfg.rebalance_max_retries - attempt
                done = await self._rebalance(blocking)
            except (ConsumerError, MalformedZookeeperDataError, ZookeeperError) as e:
                log.info("[%s] exception during rebalance: %s", self.consumer_id, e)
                last_error, done = e, False
                self.owners.replan_now = False  # failed, not replanned: counted
            if done:
                self._record(started, t0, attempt, True, reason)
                return
            # A failed attempt keeps what it kept (it still holds those owner nodes, so nobody
            # else can take them) and waits before the next one.
            self.failed_attempts += 1
            self.on_attempt_failed()
            if isinstance(last_error, (ZookeeperConnectionError, ZookeeperSessionExpiredError)):
                now = anyio.current_time()
                if connection_deadline is None:
                    connection_deadline = now + self.connection_retry_window_s
                if now < connection_deadline and not self.is_closing():
                    attempt -= 1  # lost to the connection, not to the group: not counted
                    with anyio.move_on_after(connection_deadline - now):
                        await self.zk.wait_for_state("connected")
                        await anyio.sleep(backoff_s)
                    self._clock.lap("retry_wait")
                    continue
            if self.owners.replan_now:
                # The membership changed while claiming: plan again at once, not counted.
                attempt -= 1
                replans += 1
                self._clock.lap("retry_wait")
                continue
            try:
                if blocking:
                    await self.owners.wait_deleted(blocking, backoff_s)
                else:
                    await anyio.sleep(backoff_s)
            except ZookeeperError as e:
                log.info("[%s] waiting before the next attempt: %s", self.consumer_id, e)
                await anyio.sleep(backoff_s)
            finally:
                self._clock.lap("retry_wait")
        # Out of attempts: own nothing, fetch nothing, as the original after its last attempt.
        await self._release(self.ownership.owned())
        await self.fetcher.stop_connections()
        self._record(started, t0, cfg.rebalance_max_retries, False, reason)
        raise ConsumerRebalanceFailedError(
            f"{self.consumer_id} can't rebalance after {cfg.rebalance_max_retries} retries"
            + (f"; last error: {last_error}" if last_error else "")
        ) from last_error

    def _record(self, started: float, t0: float, attempts: int, ok: bool, reason: str) -> None:
        rec = RebalanceRecord(
            started_at=started,
            duration_s=time.monotonic() - t0,
            attempts=attempts,
            succeeded=ok,
            partitions=self.ownership.owned(),
            reason=reason,
            members=self.view.members,
            kept=self.last_moves[0],
            released=self.last_moves[1],
            acquired=self.last_moves[2],
        )
        phases = RebalancePhases(
            started_at=started,
            queued_ms=self._queued_ms,
            phases=MappingProxyType(self._clock.totals_ms()),
        )
        self.history.append(rec)
        self.phase_history.append(phases)
        if ok:
            self.completed += 1
        log.info(
            "[%s] rebalance %s in %.3f s after %d attempt(s); owns %d partitions",
            self.consumer_id,
            "done" if ok else "FAILED",
            rec.duration_s,
            attempts,
            len(rec.partitions),
        )
        log.debug("[%s] rebalance phases: %s", self.consumer_id, phases.describe())

    async def _release(self, tps: Iterable[TopicPartition]) -> None:
        """Give up partitions: stop handing them out and fetching them, commit, delete owners.

        The original's ``closeFetchersForQueues`` + ``releasePartitionOwnership``, for the
        partitions that move: they are marked inactive first (no record of them is handed out
        any more, and queued chunks of them are dropped by the iterators), their consumed
        offsets are committed while we still own them (auto-commit on), the listener's
        ``before_releasing_partitions`` sees them, then their owner nodes are deleted.
        """
        await self.handover.release(tps, step=self.owners.delete_owned, lap=self._clock.lap)

    async def _rebalance(self, blocking: list[str]) -> bool:
        """One attempt (``rebalance(cluster)``). Returns ``True`` on success.

        ``blocking`` receives the owner paths held by others when the claim fails.
        """
        cfg = self.config
        me = self.consumer_id
        clock = self._clock
        if self.fetch_enabled and self.cluster.kafka_client is None:
            # A new member: its fetchers need the Kafka client at the end of the attempt;
            # connect it meanwhile.
            self.task_group().start_soon(self._start_kafka)
        view = await self.view.read()
        clock.lap("view")
        if not view.registered:
            # Gone with an expired session this member has not noticed yet: the next attempt
            # drops the old ownership (without committing: its owner nodes are gone) and
            # registers on the current session.
            log.warning("[%s] own registration is missing: registering again", me)
            self.membership.session_replaced = True
            return False
        if not view.brokers:
            self.unowned_partitions = {}
            return True
        assignment = plan_assignment(
            group=cfg.group_id,
            consumer_id=me,
            topic_counts=view.topic_counts,
            partitions_for_topic=view.partitions,
            strategy=cfg.assignment_strategies[0],
        )
        mine = assignment.get(me, {})
        own = self.ownership
        wanted: dict[TopicPartition, ChunkQueue] = {
            tp: own.queue_for(tp.topic, tid) for tp, tid in mine.items()
        }
        moves: Moves[ChunkQueue] = plan_moves(own.owned_streams(), wanted)
        clock.lap("plan")
        await self._release(moves.release)
        acquire = {tp: mine[tp] for tp in moves.acquire}
        if self.is_closing():
            return False
        # With offsets in ZooKeeper, their nodes are read right behind the claims (one round
        # trip for both; used only when the claims and every fencing bump were one
        # transaction, so the read comes after both, as below).
        zk_offsets = isinstance(self.offset_store, ZookeeperOffsetStore)
        offset_paths = {
            layout.offset_path(cfg.group_id, tp.topic, tp.partition): tp for tp in acquire
        }
        read_after = sorted(offset_paths) if zk_offsets else []
        if await self.owners.claim(acquire, blocking, read_after=read_after) is None:
            return False
        tokens = await self.owners.fence(acquire)
        read = self.owners.read_with_claims
        prefetched = (
            None if read is None else {offset_paths[path]: data for path, data in read.items()}
        )
        clock.lap("fence")
        offsets: dict[TopicPartition, int] = {}
        self.unowned_partitions = {}
        if acquire:
            # Read once the claims hold and the fencing tokens moved on: a previous owner
            # commits before it deletes its owner node, and a former owner that has not
            # noticed yet can no longer commit, so every commit that can still land is seen
            # (the original read before claiming, and could start below the group's commit;
            # a read before claiming would only find malformed nodes earlier).
            offsets, unreadable = await self._fetch_offsets(acquire, prefetched)
            for tp in unreadable:
                offsets[tp] = NO_OFFSET  # offsets.malformed.reset: auto.offset.reset applies
            dropped = self._judge_unreadable(unreadable)
            if dropped:
                # Not kept, and nobody else claims it (it is not theirs in the plan): no member
                # fetches or commits it until its node is fixed. Nothing is skipped.
                self.unowned_partitions = dropped
                await self.owners.undo(dropped, swallow=False)
                for tp in dropped:
                    del acquire[tp]
            clock.lap("offsets")
        new_ptis = self.handover.acquire(
            {tp: moves.acquire[tp] for tp in acquire}, offsets, fences=tokens
        )
        self.last_moves = (len(moves.keep), len(moves.release), len(acquire))
        global_view: StreamView = {}
        for per_consumer in assignment.values():
            for tp, tid in per_consumer.items():
                global_view.setdefault(tp.topic, {})[tp.partition] = tid
        await self.handover.start(new_ptis, global_view, lap=clock.lap)
        return True

    async def _start_kafka(self) -> None:
        """Start the Kafka client (in the background of an attempt). A failure is left to
        the attempt's own ``cluster.kafka()`` before it starts the fetchers, which raises it."""
        try:
            await self.cluster.kafka()
        except ConsumerError as e:
            log.debug("[%s] starting the Kafka client: %s", self.consumer_id, e)

    async def _fetch_offsets(
        self,
        tps: Iterable[TopicPartition],
        prefetched: Mapping[TopicPartition, bytes | None] | None = None,
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, MalformedZookeeperDataError]]:
        """Read the committed offsets of ``tps``, setting aside those whose node is malformed.

        ``prefetched``: their ZooKeeper offset nodes' data, read with the claims (then not
        read again).

        Returns:
            ``(offsets, unreadable)``: ``{tp: offset}`` of the readable partitions (``NO_OFFSET``
            where none is committed), and ``{tp: error}`` of those whose offset node does not
            hold a decimal offset.

        Raises:
            MalformedZookeeperDataError: a node that is not one of ``tps``' offset nodes.
            ZookeeperError, OffsetStorageError: as the store's ``fetch``.
        """
        group = self.config.group_id
        remaining = set(tps)
        by_path = {layout.offset_path(group, tp.topic, tp.partition): tp for tp in remaining}
        unreadable: dict[TopicPartition, MalformedZookeeperDataError] = {}
        while True:
            try:
                if prefetched is not None and isinstance(self.offset_store, ZookeeperOffsetStore):
                    return await self.offset_store.fetch(remaining, read=prefetched), unreadable
                return await self.offset_store.fetch(remaining), unreadable
            except MalformedZookeeperDataError as e:
                # The store names the first bad node; read the others again without it. Each
                # round removes one partition, so this ends.
                tp = by_path.get(e.path or "")
                if tp is None or tp not in remaining:
                    raise
                unreadable[tp] = e
                remaining.discard(tp)

    def _judge_unreadable(
        self, unreadable: Mapping[TopicPartition, MalformedZookeeperDataError]
    ) -> dict[TopicPartition, str]:
        """Which partitions with a malformed offset node stay unclaimed (and log each).

        Without ``offsets.malformed.reset``: all of them. With it: none; each is claimed with
        ``NO_OFFSET``, so ``auto.offset.reset`` applies and the next commit overwrites the node.

        Returns:
            ``{partition: reason}`` of the partitions not to claim.
        """
        unowned: dict[TopicPartition, str] = {}
        for tp, error in sorted(unreadable.items()):
            if self.config.offsets_malformed_reset:
                log.error(
                    "[%s] %s; offsets.malformed.reset=true: %s starts from auto.offset.reset=%s",
                    self.consumer_id,
                    error,
                    tp,
                    self.config.auto_offset_reset,
                )
                continue
            log.error(
                "[%s] not claiming %s: %s. No member consumes it until the node holds an "
                "offset (then at the next rebalance), or offsets.malformed.reset=true",
                self.consumer_id,
                tp,
                error,
            )
            unowned[tp] = str(error)
        return unowned
