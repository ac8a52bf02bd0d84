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
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from ._concurrency import gather, gather_outcomes
from .errors import (
    ConsumerError,
    ConsumerRebalanceFailedError,
    MalformedZookeeperDataError,
    ZookeeperConnectionError,
    ZookeeperError,
    ZookeeperSessionExpiredError,
)
from .handover import MemberParts, StreamView
from .membership import Membership
from .offsets import NO_OFFSET
from .plan import (
    Moves,
    decide_claims,
    decide_fencing,
    plan_assignment,
    plan_moves,
    registrations_still_valid,
)
from .records import HISTORY_LIMIT, RebalanceRecord, TopicPartition
from .subscription import (
    ConsumerThreadId,
    StaticTopicCount,
    TopicCount,
    construct_topic_count,
)
from .zk import layout
from .zk.client import ZkClient

if TYPE_CHECKING:
    from .stream import ChunkQueue

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

PHASES = (
    "session",
    "view",
    "plan",
    "release_commit",
    "release_listener",
    "release_delete",
    "claim",
    "claim_wait",
    "fence",
    "offsets",
    "start_listener",
    "start_fetchers",
    "retry_wait",
)
"""The phases of a rebalance, in order (each summed over the rebalance's attempts):

- ``session``: a replaced session dropped and registered again.
- ``view``: the own registration, brokers, topics, the members and their subscriptions,
  partitions per topic (read concurrently).
- ``plan``: the assignment and the moves (pure, CPU only).
- ``release_commit``: the consumed offsets of the partitions that move committed.
- ``release_listener``: ``before_releasing_partitions``.
- ``release_delete``: their owner nodes deleted.
- ``claim``: the acquired partitions' owner nodes created (each round of creates, with the
  membership read again after a wait).
- ``claim_wait``: waiting for blocking owner nodes' deletion (all watched at once).
- ``fence``: the fencing tokens bumped.
- ``offsets``: the committed offsets of the acquired partitions read, once the claims hold
  (a malformed node's claim is deleted again).
- ``start_listener``: ``before_starting_fetchers``.
- ``start_fetchers``: the fetchers started or given the new partitions.
- ``retry_wait``: between failed attempts (back-off, owner nodes, the connection).
"""


class PhaseClock:
    """Sums the time between successive :meth:`lap` calls into named phases.

    Synchronous and never blocking: the rebalance worker calls ``lap(phase)`` when a phase
    ends; the time since the previous lap (or since the clock was made) is added to it.

    Args:
        clock: the time source, seconds (``time.monotonic``).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last = clock()
        self._totals: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        """End ``phase`` now: add the time since the previous lap to it."""
        now = self._clock()
        self._totals[phase] = self._totals.get(phase, 0.0) + (now - self._last)
        self._last = now

    def totals_ms(self) -> dict[str, float]:
        """``{phase: milliseconds}`` of the phases lapped so far, in :data:`PHASES` order
        (others after them, in the order first lapped)."""
        order = {p: i for i, p in enumerate(PHASES)}
        names = sorted(self._totals, key=lambda p: order.get(p, len(order)))
        return {p: self._totals[p] * 1000.0 for p in names}


@dataclass(frozen=True)
class RebalancePhases:
    """Where one rebalance's time went.

    Attributes:
        started_at: wall-clock start, seconds since the epoch (the ``started_at`` of the
            ``RebalanceRecord`` of the same rebalance).
        queued_ms: from the first trigger since the previous rebalance started (a watch
            firing, a new session) to this rebalance's start: coalescing and waiting for the
            rebalance lock; ``None`` for a rebalance nobody triggered (the initial one).
        phases: ``{phase: milliseconds}``, see :data:`PHASES`; phases not reached are absent.
    """

    started_at: float
    queued_ms: float | None
    phases: Mapping[str, float]

    def describe(self) -> str:
        """``"queued 3 ms, view 12 ms, ..."`` for the log."""
        parts = [] if self.queued_ms is None else [f"queued {self.queued_ms:.0f} ms"]
        parts += [f"{p} {v:.0f} ms" for p, v in self.phases.items()]
        return ", ".join(parts) or "-"


class RebalanceListener(Protocol):
    """The two hooks the rebalancer calls (``ConsumerRebalanceListener``, 0.9+)."""

    def before_releasing_partitions(
        self, partition_ownership: dict[str, set[int]]
    ) -> Awaitable[None]: ...

    def before_starting_fetchers(
        self, consumer_id: str, global_partition_assignment: dict[str, dict[int, ConsumerThreadId]]
    ) -> Awaitable[None]: ...


@dataclass(frozen=True)
class _View:
    """What one attempt plans from (see ``Rebalancer._read_view``)."""

    registered: bool = True
    brokers: bool = True
    topic_counts: Mapping[str, TopicCount] = field(default_factory=dict)
    partitions: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


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
        self._members: tuple[str, ...] = ()
        self._ids_version: int | None = None
        # The members' registrations read with the last view, and that view's /ids node
        # (creation zxid), child version (read before the list) and list.
        self._registrations: dict[str, bytes] = {}
        self._registrations_view: tuple[int, int, tuple[str, ...]] | None = None
        self._waits_left = 0
        self._replan_now = False
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
        connection was back).

        Raises:
            ConsumerRebalanceFailedError: no attempt succeeded. The consumer then owns no
                partition and fetches nothing; it stays registered, and the next trigger
                (member change, new session) rebalances again.
        """
        cfg = self.config
        started, t0 = time.time(), time.monotonic()
        self._clock = PhaseClock()
        triggered, self._triggered_at = self._triggered_at, None
        self._queued_ms = None if triggered is None else max(0.0, t0 - triggered) * 1000.0
        backoff_s = cfg.effective_rebalance_backoff_ms / 1000
        last_error: BaseException | None = None
        connection_deadline: float | None = None
        attempt = 0
        while attempt < cfg.rebalance_max_retries:
            attempt += 1
            if self.is_closing():
                return
            log.info("[%s] begin rebalancing (attempt %d, %s)", self.consumer_id, attempt, reason)
            blocking: list[str] = []
            self.last_moves = (0, 0, 0)
            try:
                # The session may have been replaced since the last attempt (or since the
                # rebalance began): own nothing of the old one and register again first.
                await self.membership.handle_new_session_if_needed()
                self._clock.lap("session")
                self._waits_left = cfg.rebalance_max_retries - attempt
                self._replan_now = False
                done = await self._rebalance(blocking)
            except (ConsumerError, MalformedZookeeperDataError, ZookeeperError) as e:
                log.info("[%s] exception during rebalance: %s", self.consumer_id, e)
                last_error, done = e, False
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
            try:
                if self._replan_now:
                    pass  # the membership changed while claiming: plan again at once
                elif blocking:
                    await self._wait_deleted(blocking, backoff_s)
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
            members=self._members,
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
        await self.handover.release(tps, step=self._delete_owner_nodes, lap=self._clock.lap)

    async def _delete_owner_nodes(self, tps: Iterable[TopicPartition]) -> None:
        """Delete our owner nodes of ``tps``, only our own: after a session expiry a node may
        be another member's by now.

        The deletes are bound to the session that registered this member, which claimed
        every owned partition (a new session drops the ownership before it claims anything):
        while that session lives, an owner node of an owned partition is its own (no other
        session can delete an ephemeral node it holds, nor create one at its path), so a
        delete is one round trip, without reading the node's owner first. Once that session
        was replaced, its nodes are gone with it and nothing is deleted.

        Raises:
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        group = self.config.group_id
        paths = [layout.owner_path(group, tp.topic, tp.partition) for tp in sorted(tps)]
        try:
            with self.zk.bound_to(self.membership.registered_session):
                await gather(self.zk.delete(path) for path in paths)
        except ZookeeperSessionExpiredError:
            log.info(
                "[%s] the session that claimed %d partition(s) expired: their owner nodes are "
                "gone with it",
                self.consumer_id,
                len(paths),
            )

    async def _read_view(self) -> _View:
        """Read the group's view: the own registration, brokers, topics, the members'
        subscriptions and the partitions of their topics.

        The reads are independent, so they are all in flight at once (one ZooKeeper session
        answers pipelined requests in order): about three round trips instead of one per
        read. The partitions of this member's own topics (a static subscription) are read
        with them, those of other members' topics afterwards.

        Returns:
            The view; ``registered`` is ``False`` when the own registration node is missing,
            ``brokers`` is ``False`` when ZooKeeper has no broker (nothing to assign; a watch
            on ``/brokers/ids`` is started).

        Raises:
            ConsumerError: the own registration vanished between the reads.
            MalformedZookeeperDataError: the own registration, a broker or a topic node does
                not parse.
            ZookeeperError: a read failed (the others were cancelled).
        """
        cfg = self.config
        group, me, zk, cluster = cfg.group_id, self.consumer_id, self.zk, self.cluster
        from_kafka = await cluster.metadata_from_kafka()  # decided once, at the first call
        own = self.topic_count()
        guess = (
            sorted(own.get_consumer_thread_ids_per_topic())
            if isinstance(own, StaticTopicCount)
            else []
        )
        registered = has_brokers = True
        all_topics: list[str] = []
        members: list[str] = []
        datas: list[bytes | None] = []
        partitions: dict[str, tuple[int, ...]] = {}

        async def read_registration() -> None:
            nonlocal registered
            registered = await zk.get_data(self.membership.path) is not None

        async def read_brokers() -> None:
            nonlocal has_brokers
            has_brokers = bool(await cluster.brokers())

        async def read_topics() -> None:
            nonlocal all_topics
            all_topics = await cluster.all_topics()

        async def read_members() -> None:
            nonlocal members, datas
            # The child version first: a member joining between the two reads makes it look
            # changed later (a re-plan), never unchanged.
            ids = await zk.get(layout.ids_dir(group))
            self._ids_version = None if ids is None else int(ids[1].child_version)
            members = sorted(await zk.get_children(layout.ids_dir(group)) or [])
            datas = await self._read_registrations(members, ids)

        async def read_partitions() -> None:
            partitions.update(await cluster.partitions_for_topics(guess))

        steps = [read_registration(), read_topics(), read_members()]
        if not from_kafka:
            steps.append(read_brokers())
        if guess:
            steps.append(read_partitions())
        await gather(steps)
        if not registered:
            return _View(registered=False)
        if not has_brokers:
            log.warning("[%s] no brokers found when trying to rebalance.", me)
            self.on_no_brokers()
            return _View(brokers=False)
        self._members = tuple(members)
        topic_counts: dict[str, TopicCount] = {}
        for member, data in zip(members, datas, strict=True):
            path = layout.ids_path(group, member)
            if data is None:
                continue  # left meanwhile; the ids watch triggers another rebalance
            try:
                reg = layout.decode_registration(data, path)
            except MalformedZookeeperDataError as e:
                if member == me:
                    raise
                # Every member reads the same bytes and leaves the same member out, so the
                # plans still agree; the rest of the group keeps consuming.
                log.error("[%s] leaving member %s out of the assignment: %s", me, member, e)
                continue
            topic_counts[member] = construct_topic_count(
                member, reg, all_topics, cfg.exclude_internal_topics
            )
        if me not in topic_counts:
            raise ConsumerError(f"own registration of {me} vanished during rebalance")
        topics = {
            t
            for tcount in topic_counts.values()
            for t in tcount.get_consumer_thread_ids_per_topic()
        }
        missing = topics - partitions.keys()
        if missing:
            partitions.update(await cluster.partitions_for_topics(missing))
        return _View(
            topic_counts=topic_counts, partitions={t: partitions[t] for t in sorted(topics)}
        )

    async def _read_registrations(
        self, members: list[str], ids: tuple[bytes, Any] | None
    ) -> list[bytes | None]:
        """The registration data of ``members``, in order (``None``: gone meanwhile).

        A registration is written once and never updated, so the data the previous view read
        still holds for a member listed by both views unless it was deleted and registered
        again in between, which the ``/ids`` child version tells
        (:func:`plan.registrations_still_valid`): the version is read again (after the list)
        together with the data of the members not seen before, and only when it does not
        account for every change is every registration read again, as the original always
        did. A view of one join or leave thus reads one registration, or none, instead of
        all of them.

        Args:
            members: the members just listed.
            ids: ``/ids``'s data and stat, read before the list (``None``: no such node).
        """
        zk, group = self.zk, self.config.group_id
        known = self._registrations
        node = None if ids is None else int(ids[1].created_zxid)
        before = None if ids is None else int(ids[1].child_version)
        got: dict[str, bytes | None] = {}
        after: list[tuple[int, int] | None] = []

        async def read(member: str) -> None:
            got[member] = await zk.get_data(layout.ids_path(group, member))

        async def read_version() -> None:
            again = await zk.get(layout.ids_dir(group))
            after.append(
                None if again is None else (int(again[1].created_zxid), int(again[1].child_version))
            )

        previous = self._registrations_view
        if previous is not None and node is not None and known:
            await gather([read_version(), *(read(m) for m in members if m not in known)])
            prev_node, prev_version, prev_members = previous
            valid = (
                after[0] is not None
                and after[0][0] == prev_node == node
                and registrations_still_valid(prev_members, prev_version, members, after[0][1])
            )
            if valid:
                got.update({m: known[m] for m in members if m not in got})
        await gather(read(m) for m in members if m not in got)
        datas = [got[m] for m in members]
        self._registrations = {m: d for m, d in zip(members, datas, strict=True) if d is not None}
        self._registrations_view = None if node is None else (node, before or 0, tuple(members))
        return datas

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
        view = await self._read_view()
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
            strategy=cfg.partition_assignment_strategy,
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
        if await self._claim(acquire, blocking) is None:
            return False
        tokens = await self._fence(acquire)
        clock.lap("fence")
        offsets: dict[TopicPartition, int] = {}
        self.unowned_partitions = {}
        if acquire:
            # Read once the claims hold and the fencing tokens moved on: a previous owner
            # commits before it deletes its owner node, and a former owner that has not
            # noticed yet can no longer commit, so every commit that can still land is seen
            # (the original read before claiming, and could start below the group's commit;
            # a read before claiming would only find malformed nodes earlier).
            offsets, unreadable = await self._fetch_offsets(acquire)
            for tp in unreadable:
                offsets[tp] = NO_OFFSET  # offsets.malformed.reset: auto.offset.reset applies
            dropped = self._judge_unreadable(unreadable)
            if dropped:
                # Not kept, and nobody else claims it (it is not theirs in the plan): no member
                # fetches or commits it until its node is fixed. Nothing is skipped.
                self.unowned_partitions = dropped
                await self._undo_claims(dropped, swallow=False)
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
        self, tps: Iterable[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, MalformedZookeeperDataError]]:
        """Read the committed offsets of ``tps``, setting aside those whose node is malformed.

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

    async def _claim(
        self, mine: Mapping[TopicPartition, ConsumerThreadId], blocking: list[str]
    ) -> set[TopicPartition] | None:
        """Create our owner nodes (``reflectPartitionOwnershipDecision``), waiting out conflicts.

        Tries all, not stopping at the first conflict. On a conflict it keeps the nodes it
        created and waits for the blocking ones to be deleted (all watched at once, at most
        ``rebalance.backoff.ms`` per wait, as many waits as the rebalance has attempts left),
        then claims those again, as long as the membership read with the view is unchanged
        (read again with those claims, in the same round trip). When it changed, or the waits
        ran out, it deletes every node this attempt created and returns ``None`` (``blocking``
        then names the owner nodes still in the way).

        Returns:
            The partitions whose claim had to wait, or ``None`` when the attempt failed.

        Raises:
            ZookeeperError: a create, a wait or the membership read failed; every node this
                attempt created was deleted first (best effort).
        """
        group = self.config.group_id
        backoff_s = self.config.effective_rebalance_backoff_ms / 1000
        pending = dict(mine)
        held: set[TopicPartition] = set()
        waited: set[TopicPartition] = set()
        after_wait = False
        while True:
            items = sorted(pending.items())
            results, changed = await self._create_owner_nodes(items, check_membership=after_wait)
            outcome = decide_claims(dict(zip((tp for tp, _ in items), results, strict=True)))
            self._clock.lap("claim")
            held |= outcome.created
            error = outcome.error if outcome.error is not None else changed
            if isinstance(error, Exception):
                await self._undo_claims(held, swallow=True)
                raise error
            if changed:
                log.info("[%s] the group's membership changed: planning again", self.consumer_id)
                self._replan_now = True
                await self._undo_claims(held, swallow=False)
                return None
            if not outcome.blocking:
                return waited
            paths = []
            for tp in sorted(outcome.blocking):
                log.info(
                    "[%s] waiting for the partition ownership to be deleted: %s for topic %s",
                    self.consumer_id,
                    tp.partition,
                    tp.topic,
                )
                paths.append(layout.owner_path(group, tp.topic, tp.partition))
            if self._waits_left <= 0 or self.is_closing():
                blocking.extend(paths)
                await self._undo_claims(held, swallow=False)
                return None
            self._waits_left -= 1
            try:
                await self._wait_deleted(paths, backoff_s)
            except ZookeeperError:
                await self._undo_claims(held, swallow=True)
                raise
            self._clock.lap("claim_wait")
            waited |= outcome.blocking
            pending = {tp: mine[tp] for tp in outcome.blocking}
            after_wait = True

    async def _create_owner_nodes(
        self, items: Iterable[tuple[TopicPartition, ConsumerThreadId]], *, check_membership: bool
    ) -> tuple[list[bool | Exception], bool | Exception]:
        """Create the owner nodes of ``items``, all in flight at once, and with them (when
        ``check_membership``) read whether the membership changed since the view.

        Returns:
            ``(per item: True created / False another value there / the exception its create
            raised, membership changed: a bool or the exception its read raised)``; never
            raises but cancellation (every create runs to its end, so each one that succeeded
            is known and can be undone).
        """
        group = self.config.group_id
        results: list[bool | Exception] = []
        changed: bool | Exception = False

        async def create_all() -> None:
            results.extend(
                await gather_outcomes(
                    self.zk.create_ephemeral_expect_conflict(
                        layout.owner_path(group, tp.topic, tp.partition),
                        layout.encode_owner(str(tid)),
                    )
                    for tp, tid in items
                )
            )

        async def read_membership() -> None:
            nonlocal changed
            try:
                changed = await self._membership_changed()
            except ZookeeperError as e:
                changed = e

        await gather([create_all(), read_membership()] if check_membership else [create_all()])
        return results, changed

    async def _wait_deleted(self, paths: Iterable[str], timeout_s: float) -> None:
        """Wait until every node of ``paths`` is gone, at most ``timeout_s`` seconds, all
        watched at once (``ZkClient.wait_deleted`` looks at one after the other: a round trip
        each, even when they are gone already)."""
        await gather(self.zk.wait_deleted([path], timeout_s) for path in paths)

    async def _membership_changed(self) -> bool:
        """Whether the ``/ids`` child version differs from the one read with the view."""
        ids = await self.zk.get(layout.ids_dir(self.config.group_id))
        version = None if ids is None else int(ids[1].child_version)
        return version is None or version != self._ids_version

    async def _undo_claims(self, tps: Iterable[TopicPartition], *, swallow: bool) -> None:
        """Delete owner nodes this attempt created (best effort when ``swallow``)."""
        group = self.config.group_id
        paths = [layout.owner_path(group, tp.topic, tp.partition) for tp in sorted(tps)]
        if not paths:
            return
        if swallow:
            await gather_outcomes(self.zk.delete(p) for p in paths)
        else:
            await gather(self.zk.delete(p) for p in paths)

    async def _fence(
        self, claimed: Mapping[TopicPartition, ConsumerThreadId]
    ) -> dict[TopicPartition, int]:
        """Move each claimed partition's fencing token on, so a former owner (a zombie that
        has not noticed yet) can no longer commit it.

        Returns:
            ``{partition: its new fencing token}``.

        Raises:
            ZookeeperError: a bump failed; every claim of this attempt was deleted again
                first (no owner node stays without an entry in the ownership state).
        """
        group = self.config.group_id
        items = sorted(claimed.items())
        results = await gather_outcomes(
            self.zk.bump(
                layout.fencing_path(group, tp.topic, tp.partition), layout.encode_owner(str(tid))
            )
            for tp, tid in items
        )
        outcome = decide_fencing(dict(zip((tp for tp, _ in items), results, strict=True)))
        if outcome.error is not None:
            await self._undo_claims(outcome.undo, swallow=True)
            raise outcome.error
        return dict(outcome.tokens)
