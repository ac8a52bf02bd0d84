"""What the two Kafka-coordinated members share: the Java client's ``AbstractCoordinator``.

:class:`GroupMember` holds the parts the connector gives (:class:`~aiozkconsumer.handover.
MemberParts`), the member state machine (:mod:`.state`), the subscription helpers, the
retry loop of a rebalance, the assignment's acquisition through the hand-over, the
rebalance history, the heartbeat task's skeleton, and poll liveness (``max.poll.interval.ms``:
a member whose reader holds what it was handed too long leaves, and rejoins when the reader
asks again). The classic member
(:mod:`.classic`) and the KIP-848 member (:mod:`.consumer_protocol`) fill in the protocol:
one attempt, what a failed attempt means, one heartbeat and what its failure means, and how
to leave on a poll timeout.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, ClassVar

import anyio

from ..errors import (
    BrokerNotAvailableError,
    ConsumerError,
    FencedInstanceIdError,
    GroupCoordinatorError,
    NoBrokersError,
    UnknownTopicError,
    UnreleasedInstanceIdError,
)
from ..handover import MemberParts, StreamView
from ..kafka.group import COORDINATOR_LOAD_IN_PROGRESS, FENCED_INSTANCE_ID, GroupRequestError
from ..plan import plan_moves
from ..queues import PollingReader
from ..records import HISTORY_LIMIT, PartitionTopicInfo, RebalanceRecord, TopicPartition
from ..subscription import ConsumerThreadId, WildcardTopicCount
from .state import MemberEvent, MemberState, MemberStateMachine, PollCheck, check_poll_interval

__all__ = ["GroupMember"]

log = logging.getLogger(__name__)

_RETRY_BACKOFF_S = 0.1
_RETRY_BACKOFF_MAX_S = 1.0


def _coordinator_unreachable(e: GroupRequestError) -> bool:
    """Whether a failed attempt found no coordinator to take the join: no answer, the
    coordinator moved or not available, or still loading the group (a broker restarting)."""
    return e.coordinator_moved or e.code == COORDINATOR_LOAD_IN_PROGRESS


class GroupMember:
    """A member of a Kafka-coordinated group; subclasses speak one group protocol.

    Args:
        parts: what the connector gives every coordinator.
        group: the protocol's group requests.
        request_rebalance: asks the connector's rebalance worker for a rebalance.

    Attributes:
        member_id: the member id (``""`` before the classic protocol's first join).
        machine: the member state machine.
        history: the last ``HISTORY_LIMIT`` rebalances.
        completed: rebalances that ended with the assignment taken, all time.
        failed_attempts: attempts that failed, all time.
        last_heartbeat_sent, last_heartbeat_received: monotonic seconds, ``None`` before any.
        fatal_error: the error that ended this membership for good (a fenced or unreleased
            ``group.instance.id``), ``None`` while there is none.
        poll_timeouts: how often a reader held what it was handed past
            ``max.poll.interval.ms`` and the member left the group for it, all time.
    """

    _round_name: ClassVar[str] = "rebalance"
    _generation_name: ClassVar[str] = "generation"

    def __init__(
        self, parts: MemberParts, group: Any, request_rebalance: Callable[[str], None]
    ) -> None:
        self.parts = parts
        self.config = parts.config
        self.consumer_id = parts.consumer_id
        self.cluster = parts.cluster
        self.offset_store = parts.offset_store
        self.ownership = parts.ownership
        self.metrics = parts.metrics
        self.handover = parts.handover
        self.topic_count = parts.topic_count
        self.is_closing = parts.is_closing
        self.group = group
        self.request_rebalance = request_rebalance
        self.member_id = ""
        self.machine = MemberStateMachine()
        self.history: deque[RebalanceRecord] = deque(maxlen=HISTORY_LIMIT)
        self.completed = 0
        self.failed_attempts = 0
        self.last_heartbeat_sent: float | None = None
        self.last_heartbeat_received: float | None = None
        self.fatal_error: GroupCoordinatorError | None = None
        self.poll_timeouts = 0
        self._heartbeat_reset = anyio.Event()
        # Set with _heartbeat_reset when the next heartbeat must go out at once rather than an
        # interval later (a classic member's lease starts with it after a SyncGroup).
        self._beat_at_once = False
        # Serializes a rebalance with a poll timeout's leave (the rebalance worker holds the
        # connector's lock, the poll liveness task only this one).
        self._membership_lock = anyio.Lock()
        # STALE and a reader still holds past the interval: no rejoin until it asks again.
        self._stale = False
        self._rejoin_started = anyio.Event()

    @property
    def listener(self) -> Any:
        """The rebalance listener, or ``None`` (the hand-over calls it)."""
        return self.handover.listener

    @listener.setter
    def listener(self, value: Any) -> None:
        self.handover.listener = value

    @property
    def generation(self) -> int:
        """The group generation or member epoch (-1: not a member)."""
        raise NotImplementedError

    def commit_generation(self) -> tuple[int, str]:
        """``(generation or member epoch, member id)`` an offset commit carries."""
        return self.generation, self.member_id

    def membership(self) -> tuple[int | None, str | None]:
        """``(generation, member id)`` of the current membership (``statistics()``);
        ``None`` where there is none."""
        return (self.generation if self.generation >= 0 else None, self.member_id or None)

    def background_tasks(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        """The tasks that keep the membership, started once the member joined."""
        return [self.heartbeat_loop, self.poll_liveness_loop]

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
        if isinstance(tc, WildcardTopicCount):
            # Every topic shares the wildcard's streams, one the member has not listed yet
            # too (a broker-side regex assigns new topics before the member sees them).
            return tc.num_streams
        ids = tc.get_consumer_thread_ids_per_topic().get(topic)
        return max(1, len(ids)) if ids else 1

    def thread_for(self, tp: TopicPartition) -> ConsumerThreadId:
        """The stream a partition feeds: partition ``p`` of a topic with ``n`` streams feeds
        stream ``p mod n`` (stable across rebalances, so a partition that stays keeps its
        stream)."""
        return ConsumerThreadId(self.consumer_id, tp.partition % self._streams_of(tp.topic))

    async def _partition_counts(self, topics: list[str]) -> dict[str, int]:
        parts = await self.cluster.partitions_for_topics(topics)
        return {t: len(p) for t, p in parts.items()}

    async def _check_topics_exist(self, topics: list[str]) -> None:
        """Raises ``UnknownTopicError`` for a topic of a static subscription that does not
        exist (a pattern's topics come and go)."""
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

    async def _where(self) -> str:
        try:
            return str(await self.group.coordinator_address())
        except ConsumerError:
            return "unknown"

    # -- the rebalance -------------------------------------------------------------------

    async def rebalance(self, reason: str) -> None:
        """Join (or rejoin) the group, or reconcile, and take the assignment.

        Retriable failures (no coordinator yet, the coordinator moved or is loading, a
        rebalance under way, a fenced member) are retried with a short backoff (doubling
        from 0.1 s to 1 s) for as long as they go on, as the Java client does while polled,
        with a WARNING each ``max(session.timeout.ms, 30 s)``; another failure ends the
        rebalance when that window is over.

        Raises:
            FencedInstanceIdError: the coordinator answered ``FENCED_INSTANCE_ID``: another
                member took this member's ``group.instance.id`` (fatal, see
                :meth:`_fail_for_instance`).
            UnreleasedInstanceIdError: (``group.protocol=consumer``) the coordinator answered
                ``UNRELEASED_INSTANCE_ID``: a member with this ``group.instance.id`` is still
                in the group (fatal).
            GroupCoordinatorError: a fatal group error (authorization, an inconsistent
                group protocol, a broker without the protocol), or a failure that is neither
                fatal nor retriable, lasting past the window; names the group and the
                coordinator.
            UnknownTopicError: a topic of a static subscription does not exist.
            ConsumerError: the rebalance listener raised.

        A member that left on a poll timeout (``STALE``) does not rejoin while a reader still
        holds what it was handed past ``max.poll.interval.ms``: the call returns at once.
        """
        async with self._membership_lock:
            if self.machine.state is MemberState.STALE:
                if self._stale:
                    log.info(
                        "[%s] not rejoining (%s): a stream still holds records past "
                        "max.poll.interval.ms",
                        self.consumer_id,
                        reason,
                    )
                    return
                self._rejoin_started.set()
            with self.metrics.rebalance_rate_and_time().time():
                await self._rebalance(reason)

    async def _rebalance(self, reason: str) -> None:
        started, t0 = time.time(), time.monotonic()
        window = max(self.config.session_timeout_ms / 1000, 30.0)
        deadline = anyio.current_time() + window
        backoff = _RETRY_BACKOFF_S
        attempts = 0
        totals = [0, 0, 0]  # kept, released, acquired
        if self.is_closing():
            return
        try:
            await self._begin(totals)
            while True:
                if self.is_closing():
                    return
                attempts += 1
                try:
                    try:
                        await self._attempt(totals)
                    except (NoBrokersError, BrokerNotAvailableError) as e:
                        # No broker answered the attempt's metadata request (the topics'
                        # partitions; brokers restarting, a link cut): retried as a group
                        # request that got no answer.
                        raise GroupRequestError("Metadata", None, str(e)) from e
                    break
                except GroupRequestError as e:
                    self.failed_attempts += 1
                    self.parts.on_attempt_failed()
                    if e.instance_error:
                        self._record(started, t0, attempts, False, reason, totals)
                        raise await self._fail_for_instance(e) from e
                    if self._is_fatal(e):
                        self._record(started, t0, attempts, False, reason, totals)
                        raise GroupCoordinatorError(
                            self.config.group_id, await self._where(), str(e)
                        ) from e
                    back_off = self._attempt_failed(e)
                    log.info("[%s] attempt %d failed: %s", self.consumer_id, attempts, e)
                    if anyio.current_time() >= deadline and (
                        _coordinator_unreachable(e) or e.retriable or e.fenced
                    ):
                        # As the Java client, which goes on finding and joining the
                        # coordinator for as long as the application polls: a coordinator
                        # down (killed, restarting, a rolling restart of the brokers), or a
                        # group that keeps rebalancing (REBALANCE_IN_PROGRESS, a generation
                        # or member id gone stale meanwhile: members dying and joining
                        # again and again) is waited out, with a WARNING per window, rather
                        # than ending the connector.
                        log.warning(
                            "[%s] group %s: %s for %.0f s (%s); still trying",
                            self.consumer_id,
                            self.config.group_id,
                            "no coordinator took the join"
                            if _coordinator_unreachable(e)
                            else "the group kept rebalancing",
                            time.monotonic() - t0,
                            e,
                        )
                        deadline = anyio.current_time() + window
                    elif anyio.current_time() >= deadline:
                        self._record(started, t0, attempts, False, reason, totals)
                        raise GroupCoordinatorError(
                            self.config.group_id,
                            await self._where(),
                            f"could not join within {time.monotonic() - t0:.0f} s: {e}",
                        ) from e
                    if back_off:
                        await anyio.sleep(backoff)
                        backoff = min(backoff * 2, _RETRY_BACKOFF_MAX_S)
        finally:
            if self.machine.rebalancing:
                self.machine.handle(MemberEvent.GAVE_UP)
        self._record(started, t0, attempts, True, reason, totals)

    async def _begin(self, totals: list[int]) -> None:
        """Before the first attempt (the classic member gives everything up here)."""

    async def _attempt(self, totals: list[int]) -> None:
        """One attempt; ends with the assignment taken (``synced``).

        Raises:
            GroupRequestError: the attempt failed.
        """
        raise NotImplementedError

    def _is_fatal(self, e: GroupRequestError) -> bool:
        """Whether ``e`` ends the rebalance at once."""
        return e.fatal

    def _attempt_failed(self, e: GroupRequestError) -> bool:
        """React to a failed attempt; returns whether to back off before the next."""
        raise NotImplementedError

    async def _take(
        self, target: Iterable[TopicPartition], *, always_tell_listener: bool
    ) -> tuple[int, int, int]:
        """Own exactly ``target``: give up what is owned and not in it (committing), take
        what is new (at its committed offset), leave what stays untouched (its fetcher,
        queued chunks and stream keep going), then start fetching.

        Args:
            target: the assignment.
            always_tell_listener: call ``before_starting_fetchers`` even when nothing moved.

        Returns:
            ``(kept, released, acquired)`` counts.
        """
        own = self.ownership
        target = list(target)
        wanted = {tp: own.queue_for(tp.topic, self.thread_for(tp)) for tp in target}
        moves = plan_moves(own.owned_streams(), wanted)
        released: dict[TopicPartition, PartitionTopicInfo] = {}
        if moves.release:
            released = await self.handover.release(moves.release, commit=True)
        new: dict[TopicPartition, PartitionTopicInfo] = {}
        if moves.acquire:
            offsets = await self.offset_store.fetch(list(moves.acquire))
            new = self.handover.acquire(moves.acquire, offsets)
        own.gate.reopen()
        await self._taken()
        if released or new:
            log.info(
                "[%s] %s %d: kept %d, released %s, acquired %s",
                self.consumer_id,
                self._generation_name,
                self.generation,
                len(moves.keep),
                sorted(released),
                sorted(new),
            )
        view: StreamView | None = None
        if always_tell_listener or released or new:
            view = {}
            for tp in target:
                view.setdefault(tp.topic, {})[tp.partition] = self.thread_for(tp)
        await self.handover.start(new, view)
        return len(moves.keep), len(released), len(new)

    async def _taken(self) -> None:
        """After the assignment is owned, before the listener hears of it."""

    def _members_seen(self) -> tuple[str, ...]:
        return (self.member_id,)

    def _record(
        self, started: float, t0: float, attempts: int, ok: bool, reason: str, totals: list[int]
    ) -> None:
        kept, released, acquired = totals
        rec = RebalanceRecord(
            started_at=started,
            duration_s=time.monotonic() - t0,
            attempts=attempts,
            succeeded=ok,
            partitions=self.ownership.owned(),
            reason=reason,
            members=self._members_seen(),
            kept=kept,
            released=released,
            acquired=acquired,
        )
        self.history.append(rec)
        if ok:
            self.completed += 1
        log.info(
            "[%s] %s %s in %.3f s (%s %d); owns %d partitions",
            self.consumer_id,
            self._round_name,
            "done" if ok else "FAILED",
            rec.duration_s,
            self._generation_name,
            self.generation,
            len(rec.partitions),
        )

    async def leave(self) -> None:
        """Leave the group so that it rebalances at once (never raises)."""
        raise NotImplementedError

    # -- static membership ---------------------------------------------------------------

    @property
    def static(self) -> bool:
        """Whether this member has a ``group.instance.id`` (static membership, KIP-345)."""
        return self.config.group_instance_id is not None

    async def _fail_for_instance(self, e: GroupRequestError) -> GroupCoordinatorError:
        """End the membership for good after an answer about the instance id itself.

        As the Java client, which makes ``FencedInstanceIdException`` and
        ``UnreleasedInstanceIdException`` fatal (``AbstractCoordinator``'s join, sync and
        heartbeat handlers; ``ConsumerHeartbeatRequestManager.handleSpecificError``): the
        member is fenced (no rejoin), the gate closes at once (no record is handed out, no
        offset committed), and the error is kept in :attr:`fatal_error`, which the heartbeat
        task raises so that the connector fails with it.

        Args:
            e: an answer with ``FENCED_INSTANCE_ID`` or ``UNRELEASED_INSTANCE_ID``.

        Returns:
            The error to raise: :class:`~aiozkconsumer.errors.FencedInstanceIdError` or
            :class:`~aiozkconsumer.errors.UnreleasedInstanceIdError`, naming the group,
            the coordinator and the instance id.
        """
        if self.fatal_error is not None:
            return self.fatal_error
        instance_id = self.config.group_instance_id or ""
        where = await self._where()
        error: GroupCoordinatorError
        if e.code == FENCED_INSTANCE_ID:
            error = FencedInstanceIdError(self.config.group_id, where, instance_id, str(e))
        else:
            error = UnreleasedInstanceIdError(self.config.group_id, where, instance_id, str(e))
        log.error("[%s] %s", self.consumer_id, error)
        self.fatal_error = error
        self.machine.handle(MemberEvent.FENCED)
        self._membership_over()
        self._close_gate_now()
        self._heartbeat_reset.set()  # the heartbeat task wakes up and raises it
        return error

    def _membership_over(self) -> None:
        """Forget the generation or epoch (the membership ended for good)."""

    # -- poll liveness (max.poll.interval.ms) -------------------------------------------

    def _readers(self) -> list[PollingReader]:
        return [q.reader for q in self.ownership.queues() if q.reader is not None]

    def _check_poll(self) -> PollCheck:
        return check_poll_interval(
            {r.name: r.held_since() for r in self._readers()},
            time.monotonic(),
            self.config.max_poll_interval_ms / 1000,
        )

    async def poll_liveness_loop(self) -> None:
        """Poll liveness: leave the group when a reader holds what it was handed for
        ``max.poll.interval.ms``, rejoin when it asks for records again.

        As the Java client (``AbstractCoordinator.HeartbeatThread`` with
        ``handlePollTimeoutExpiry``; ``AbstractHeartbeatRequestManager.poll`` with
        ``AbstractMembershipManager.transitionToSendingLeaveGroup(true)`` and
        ``maybeRejoinStaleMember``), where the heartbeat keeps a member alive only while the
        application calls ``poll()``. A reader holds a record or batch from its ask for it
        until its next ask (``async for``'s next step, the next ``batches()`` batch,
        ``next_batch``); a reader waiting for records is polling. On expiry (see
        :meth:`_leave_for_poll_timeout`) the member commits, gives everything up and leaves
        (``STALE``); it rejoins when no reader holds past the interval any more. Wakes at the
        earliest moment a reader can expire, and, while stale, when a reader starts waiting.
        Never raises (the connector's task group cancels it at shutdown).
        """
        while True:
            check = self._check_poll()
            if self.machine.state is MemberState.STALE:
                if check.expired:
                    await self._wait_for_poll(self.config.max_poll_interval_ms / 1000)
                    continue
                if self._stale:
                    # maybeRejoinStaleMember: the reader asked again.
                    self._stale = False
                    self._rejoin_started = anyio.Event()
                    log.info(
                        "[%s] the reader asks for records again after the poll timeout: "
                        "rejoining group %s",
                        self.consumer_id,
                        self.config.group_id,
                    )
                    self.request_rebalance("the reader asked for records after a poll timeout")
                await self._rejoin_started.wait()
                continue
            if check.expired and self._may_expire():
                await self._leave_for_poll_timeout()
                continue
            await anyio.sleep(check.next_check_s or self.config.max_poll_interval_ms / 1000)

    async def _wait_for_poll(self, limit_s: float) -> None:
        """Until a reader starts waiting for records, or ``limit_s`` seconds."""
        readers = self._readers()
        woken = anyio.Event()
        for reader in readers:
            reader.wake_on_poll(woken)
        try:
            with anyio.move_on_after(limit_s):
                await woken.wait()
        finally:
            for reader in readers:
                reader.wake_on_poll(None)

    def _may_expire(self) -> bool:
        """Whether a poll timeout may end this membership now (not closing, not fenced for
        good, not already leaving); a rebalance under way is waited for (the lock)."""
        return (
            not self.is_closing()
            and self.fatal_error is None
            and self.machine.state not in (MemberState.LEAVING, MemberState.LEFT)
        )

    async def _leave_for_poll_timeout(self) -> None:
        """A reader held past ``max.poll.interval.ms``: commit, give up, leave (``STALE``).

        In order: one WARNING naming the stream(s) and the interval (the Java client's
        "consumer poll timeout has expired" message); the owned partitions are given up
        through the hand-over, their consumed offsets committed first while the membership
        still stands (auto-commit on; the Java client commits nothing here: its
        ``onJoinPrepare`` later finds no generation), the listener's
        ``before_releasing_partitions`` called; then the protocol's leave
        (:meth:`_leave_stale`). Nothing more of those partitions is handed out. Re-checks
        everything under the membership lock (a rebalance may have run meanwhile). Never
        raises: a commit or listener failure is logged and the member leaves all the same.
        """
        async with self._membership_lock:
            state = self.machine.state
            if state not in (MemberState.STABLE, MemberState.UNJOINED, MemberState.FENCED):
                return
            if not self._may_expire():
                return
            check = self._check_poll()
            if not check.expired:
                return
            interval_ms = self.config.max_poll_interval_ms
            log.warning(
                "[%s] consumer poll timeout has expired: stream %s held what it was handed "
                "for %.1f s without asking for more, longer than max.poll.interval.ms=%d; "
                "committing its consumed offsets and leaving group %s (it rejoins when the "
                "stream is read again)",
                self.consumer_id,
                ", ".join(check.expired),
                check.longest_s,
                interval_ms,
                self.config.group_id,
            )
            self.poll_timeouts += 1
            self.machine.handle(MemberEvent.POLL_EXPIRED)
            self._stale = True
            owned = self.ownership.owned()
            if owned:
                try:
                    await self.handover.release(owned, commit=state is not MemberState.FENCED)
                except ConsumerError as e:
                    log.warning(
                        "[%s] giving up partitions on the poll timeout: %s", self.consumer_id, e
                    )
            await self._leave_stale()
            self.parts.on_attempt_failed()  # wake those who wait for the connector's state

    async def _leave_stale(self) -> None:
        """The protocol's leave on a poll timeout (never raises)."""
        raise NotImplementedError

    # -- heartbeats ----------------------------------------------------------------------

    def _heartbeat_interval_s(self) -> float:
        return self.config.heartbeat_interval_ms / 1000

    def _may_heartbeat(self) -> bool:
        return self.machine.may_heartbeat

    async def heartbeat_loop(self) -> None:
        """The ``HeartbeatTask``: one heartbeat an interval while the member is stable.

        The interval starts anew when a rebalance ends (it heartbeated, as the Java
        client's ``HeartbeatThread.enable``), so the group's members notice the next
        rebalance together; a classic member heartbeats at once after its SyncGroup instead
        (its session lease starts with that answer). What a heartbeat's answer means is the
        protocol's (:meth:`_beat`, :meth:`_beat_failed`).

        Raises:
            FencedInstanceIdError, UnreleasedInstanceIdError: the membership ended for good
                (:attr:`fatal_error`, from a heartbeat's answer or a rebalance's), as the Java
                client's heartbeat thread fails with ``FencedInstanceIdException``: the
                connector's task group fails with it.
        """
        while True:
            if self.fatal_error is not None:
                raise self.fatal_error
            with anyio.move_on_after(self._heartbeat_interval_s()):
                await self._heartbeat_reset.wait()
            if self.fatal_error is not None:
                raise self.fatal_error
            if self._heartbeat_reset.is_set():
                self._heartbeat_reset = anyio.Event()
                if not self._beat_at_once:
                    continue  # a rebalance just ended: the next heartbeat is an interval after it
                self._beat_at_once = False
            if not self._may_heartbeat() or self.is_closing():
                continue
            try:
                await self._beat()
            except GroupRequestError as e:
                if e.instance_error:
                    raise await self._fail_for_instance(e) from e
                self._beat_failed(e)

    async def _beat(self) -> None:
        """One heartbeat and what its answer asks for."""
        raise NotImplementedError

    def _beat_failed(self, e: GroupRequestError) -> None:
        """What a failed heartbeat asks for."""
        raise NotImplementedError

    def _close_gate_now(self) -> None:
        """Fenced: hand out nothing more until the coordinator answers again."""
        self.ownership.gate.end_lease()

    def _session_timeout_s(self) -> float:
        """The session timeout the coordinator applies to this member, seconds
        (``session.timeout.ms``, sent with JoinGroup)."""
        return self.config.session_timeout_ms / 1000

    def _lapsed(self) -> bool:
        """Whether no heartbeat was answered for a session timeout."""
        return self.last_heartbeat_received is not None and (
            time.monotonic() - self.last_heartbeat_received > self._session_timeout_s()
        )

    def _leaving(self) -> bool:
        """Start leaving; ``False`` when already leaving or gone."""
        if self.machine.state in (MemberState.LEAVING, MemberState.LEFT):
            return False
        self.machine.handle(MemberEvent.LEAVE)
        return True

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.config.group_id} member={self.member_id or '-'} "
            f"{self._generation_name}={self.generation} {self.machine.state.value}>"
        )
