"""The classic group protocol's member: the Java client's ``ConsumerCoordinator``.

It speaks the classic group protocol (``kafka/group.py``): JoinGroup with the configured
assignor and the standard ``ConsumerProtocol`` subscription, the leader computing the
assignment with the Java assignors' rules (:mod:`.assignors`), SyncGroup, a heartbeat task
(the seed's ``HeartbeatTask``) that keeps running while the user's code is slow, and
LeaveGroup on shutdown. As in ``AbstractCoordinator``/``ConsumerCoordinator``
(kafka-clients):

- a rejoin is asked for by a heartbeat answered ``REBALANCE_IN_PROGRESS``, by a fenced
  member (``UNKNOWN_MEMBER_ID``, ``ILLEGAL_GENERATION``), by a metadata change of the
  subscription (a partition-count change, a new topic matching a pattern) and by the
  leader's assignment snapshot going stale while it assigned;
- ``onJoinPrepare``: before (re)joining, an eager member (range, roundrobin, sticky: the
  classic protocol's original form) commits its consumed offsets, calls the listener and
  gives up every partition, so a member joining stops the group's fetching while it
  rebalances; a cooperative member (KIP-429: every configured assignor is
  ``cooperative-sticky``) keeps fetching what it owns, sends it in its subscription
  (``owned_partitions``, with its generation), gives up after SyncGroup only what is no
  longer assigned to it and, if it gave up anything, rejoins at once ("need to revoke
  partitions and re-join", ``ConsumerCoordinator.onJoinComplete``) so the follow-up
  rebalance can give those partitions to their new owners;
- rebalances stay one serialized task, as in ZooKeeper mode;
- static membership (KIP-345, ``group.instance.id``): every group request carries the
  instance id; a static member does not send LeaveGroup on shutdown (``maybeLeaveGroup``
  leaves only dynamic members), so one restarted with the same id within
  ``session.timeout.ms`` takes its place and its assignment without a rebalance. A member
  whose instance id another member took is answered ``FENCED_INSTANCE_ID``, which is fatal
  (:meth:`~aiozkconsumer.group.base.GroupMember._fail_for_instance`);
- poll liveness (``max.poll.interval.ms``): a member whose reader holds past the interval
  sends LeaveGroup (none for a static member) and forgets its generation
  (``AbstractCoordinator.handlePollTimeoutExpiry`` / ``maybeLeaveGroup``), after committing.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from ..errors import ConsumerError
from ..handover import MemberParts
from ..kafka.group import (
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    GroupClient,
    GroupRequestError,
    decode_assignment,
    encode_assignment,
    encode_subscription,
    parse_subscription,
)
from ..kafka.replicas import replica_racks
from ..records import TopicPartition
from .assignors import COOPERATIVE_STRATEGIES, assign
from .base import GroupMember
from .state import MemberEvent, MemberState
from .sticky import (
    MemberData,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    member_data,
)

__all__ = ["KafkaCoordinator"]

log = logging.getLogger(__name__)


class KafkaCoordinator(GroupMember):
    """One member's part in a Kafka-coordinated group (classic protocol).

    Args:
        parts: what the connector gives every coordinator.
        group: the classic protocol's group requests.
        request_rebalance: asks the connector's rebalance worker for a rejoin.

    Attributes:
        member_id: the id the coordinator gave (``""`` before the first join).
        generation: the group generation of the current membership (-1: none).
        protocol: the assignor the group chose; leader: the leader's member id.
        cooperative: whether this member rebalances cooperatively (KIP-429): every assignor
            of ``partition.assignment.strategy`` supports it (``cooperative-sticky``), as the
            Java client's ``ConsumerCoordinator`` picks the protocol all its assignors share.

    And the attributes of :class:`~aiozkconsumer.group.base.GroupMember`.
    """

    def __init__(
        self,
        parts: MemberParts,
        *,
        group: GroupClient,
        request_rebalance: Callable[[str], None],
    ) -> None:
        super().__init__(parts, group, request_rebalance)
        self._generation = -1
        self.protocol: str | None = None
        self.leader: str | None = None
        self._metadata_snapshot: dict[str, int] | None = None
        self._members: tuple[str, ...] = ()
        self._strategies = self.config.assignment_strategies
        self.cooperative = all(s in COOPERATIVE_STRATEGIES for s in self._strategies)
        # The last assignment and its generation (the sticky assignors' onAssignment state).
        self._assigned: list[TopicPartition] | None = None
        self._assigned_generation = -1
        # (generation, member id) of the last heartbeat sent: its answer may come after a join.
        self._beat_sent: tuple[int, str] = (-1, "")

    @property
    def generation(self) -> int:
        """The group generation of the current membership (-1: none)."""
        return self._generation

    @generation.setter
    def generation(self, value: int) -> None:
        self._generation = value

    # -- the rebalance -------------------------------------------------------------------

    async def _begin(self, totals: list[int]) -> None:
        """``onJoinPrepare``: eager, commit, call the listener and give every partition up;
        cooperative, give up only partitions of topics no longer subscribed, or everything
        when the membership was lost (no generation: the partitions may be someone else's)."""
        self.machine.handle(MemberEvent.JOIN)  # no heartbeat from here on
        await self._give_up_before_join(totals)

    async def _give_up_before_join(self, totals: list[int]) -> None:
        """What ``_begin`` gives up, before every JoinGroup: an attempt that failed once its
        assignment was owned (no broker answered the metadata request after the SyncGroup)
        left it owned, and the next attempt's JoinGroup must not go out with it still handed
        out. The Java client never owns an assignment while it joins: ``onJoinComplete``
        applies it only once the join succeeded, and ``onJoinPrepare`` runs before the next.
        A heartbeat answered for the new generation would otherwise extend the lease of
        partitions the new assignment gives to another member."""
        owned = self.ownership.owned()
        if not owned:
            return
        if self.cooperative and self.generation >= 0 and self.member_id:
            subscribed = set(self.subscribed_topics())
            owned = tuple(tp for tp in owned if tp.topic not in subscribed)
            if not owned:
                return
        released = await self.handover.release(owned, commit=self.generation >= 0)
        totals[1] += len(released)

    def _subscription(self, strategy: str, topics: list[str]) -> bytes:
        """The JoinGroup metadata of one assignor (``ConsumerCoordinator.metadata``): the
        subscription with the assignor's user data (``subscriptionUserData``), what this
        member owns (a cooperative member; an eager one gave everything up) and its
        generation."""
        rack = self.config.client_rack
        if strategy == "sticky":
            user_data = None
            if self._assigned is not None:
                user_data = encode_sticky_user_data(self._assigned, self._assigned_generation)
            return encode_subscription(
                topics, rack=rack, user_data=user_data, generation=self.generation
            )
        if strategy == "cooperative-sticky":
            return encode_subscription(
                topics,
                rack=rack,
                user_data=encode_cooperative_user_data(self._assigned_generation),
                owned_partitions=self.ownership.owned() if self.cooperative else (),
                generation=self.generation,
            )
        return encode_subscription(topics, rack=rack)

    async def _attempt(self, totals: list[int]) -> None:
        """One JoinGroup + SyncGroup, then take the assignment."""
        cfg = self.config
        self.machine.handle(MemberEvent.JOIN)
        await self._give_up_before_join(totals)
        topics = self.subscribed_topics()
        await self._check_topics_exist(topics)
        joined = await self.group.join(
            self.member_id,
            session_timeout_ms=cfg.session_timeout_ms,
            rebalance_timeout_ms=cfg.max_poll_interval_ms,
            protocols=[(name, self._subscription(name, topics)) for name in self._strategies],
        )
        self.member_id = joined.member_id
        self.generation = joined.generation
        self.protocol = joined.protocol
        self.leader = joined.leader
        self.machine.handle(MemberEvent.JOINED)
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
        data = await self.group.sync(joined.generation, joined.member_id, assignments)
        self.machine.handle(MemberEvent.ASSIGNMENT_GIVEN)
        # An answered JoinGroup/SyncGroup does not prove the membership for a session
        # timeout: to a follower rejoining a stable group with unchanged metadata, the
        # coordinator returns the current generation without restarting the member's session
        # timer (Kafka 4's GroupMetadataManager.classicGroupJoinExistingMember, and SyncGroup
        # in STABLE; GroupCoordinator.scala restarted it at that SyncGroup), which may run out
        # a moment later. So the lease is extended only by an answered heartbeat (each
        # restarts that timer), the first one sent at once; a lease still running from the
        # heartbeats before the rejoin stays (they were answered), and a member without one
        # hands nothing out until that answer. The heartbeat timer
        # starts anew with it (as the Java client's HeartbeatThread.enable): the members
        # then heartbeat at about the same moment and notice the next rebalance together.
        gate = self.ownership.gate
        if gate.deadline == math.inf:
            gate.extend(time.monotonic())
        self._beat_at_once = True
        self._heartbeat_reset.set()
        mine = decode_assignment(data)
        if snapshot is not None:
            # The assignment snapshot: metadata changed while the leader assigned.
            now = await self._partition_counts(list(snapshot))
            if now != snapshot:
                log.info("[%s] metadata changed while assigning: rejoining", self.consumer_id)
                self.request_rebalance("metadata changed while the leader assigned")
        kept, released, acquired = await self._take(mine, always_tell_listener=True)
        totals[0], totals[2] = kept, acquired
        totals[1] += released
        self._assigned, self._assigned_generation = mine, joined.generation
        if self.machine.state is MemberState.FENCED:
            # A heartbeat answered while the assignment was taken fenced the member (the gate
            # is closed); it asked for the rejoin, which gives everything up.
            return
        self.machine.handle(MemberEvent.SYNCED)
        if self.cooperative and released:
            # ConsumerCoordinator.onJoinComplete (COOPERATIVE): what this member gave up is
            # owned by nobody until the next rebalance hands it to its new owner.
            log.info(
                "[%s] gave up %d partitions: rejoining so that they are reassigned",
                self.consumer_id,
                released,
            )
            self.request_rebalance("need to revoke partitions and re-join")

    def _attempt_failed(self, e: GroupRequestError) -> bool:
        if e.code == UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if e.fenced:
            self.generation = -1
            self.machine.handle(MemberEvent.FENCED)
        return e.code != REBALANCE_IN_PROGRESS and not e.fenced

    async def _taken(self) -> None:
        self._metadata_snapshot = await self._partition_counts(self.subscribed_topics())

    async def _assign(
        self, protocol: str, members: tuple[tuple[str, str | None, bytes], ...]
    ) -> tuple[list[tuple[str, bytes]], dict[str, int]]:
        """The leader's part: every member's assignment (Java assignors' rules)."""
        subscriptions: dict[str, list[str]] = {}
        instance_ids: dict[str, str | None] = {}
        racks: dict[str, str | None] = {}
        owned: dict[str, MemberData] = {}
        sticky = protocol in ("sticky", "cooperative-sticky")
        for member_id, instance_id, metadata in members:
            try:
                sub = parse_subscription(metadata)
            except ValueError as e:
                log.error("[%s] member %s sent %s: it gets nothing", self.consumer_id, member_id, e)
                subscriptions[member_id] = []
            else:
                subscriptions[member_id] = list(sub.topics)
                racks[member_id] = sub.rack
                if sticky:
                    owned[member_id] = member_data(
                        protocol,
                        sub.topics,
                        user_data=sub.user_data,
                        owned_partitions=sub.owned_partitions,
                        generation_id=sub.generation_id,
                        rack=sub.rack,
                    )
            instance_ids[member_id] = instance_id
        self._members = tuple(sorted(subscriptions))
        all_topics = sorted({t for topics in subscriptions.values() for t in topics})
        counts = await self._partition_counts(all_topics)
        partition_racks = None
        if any(racks.values()):  # KIP-881: the range assignor matches racks
            kafka = await self.cluster.kafka()
            partition_racks = {t: replica_racks(kafka, t) for t in all_topics}
        plan = assign(
            protocol,
            subscriptions,
            counts,
            instance_ids,
            member_racks=racks,
            partition_racks=partition_racks,
            member_data=owned,
        )
        return [(m, encode_assignment(tps)) for m, tps in sorted(plan.items())], counts

    def _members_seen(self) -> tuple[str, ...]:
        return self._members

    def _membership_over(self) -> None:
        self.generation = -1

    # -- background tasks ----------------------------------------------------------------

    def background_tasks(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        """The heartbeat, poll liveness and the metadata snapshot (the KIP-848 member's broker
        follows the metadata itself)."""
        return [self.heartbeat_loop, self.poll_liveness_loop, self.metadata_loop]

    def _may_heartbeat(self) -> bool:
        # A member that gave a rejoin up still holds its generation: its heartbeats tell it
        # (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION) to try again. A member taking its
        # assignment (commits, the listener) beats too, as the Java client's heartbeat
        # thread does through the rebalance callbacks: a slow listener is bounded by
        # max.poll.interval.ms, not session.timeout.ms (the coordinator would expel it).
        state = self.machine.state
        return (
            self.machine.may_heartbeat
            or state is MemberState.RECONCILING
            or (state is MemberState.UNJOINED and self.generation >= 0)
        )

    async def _beat(self) -> None:
        """One heartbeat; each answered heartbeat sent at ``t0`` extends the gate's lease to
        ``t0 + 0.8 x session.timeout.ms``: a member paused past its session timeout hands out
        nothing when it wakes up until the coordinator answers again."""
        t0 = time.monotonic()
        self.last_heartbeat_sent = t0
        self._beat_sent = (self.generation, self.member_id)
        await self.group.heartbeat(self.generation, self.member_id)
        self.last_heartbeat_received = time.monotonic()
        self.machine.handle(MemberEvent.HEARTBEAT_ANSWERED)
        self.ownership.gate.extend(t0 + 0.8 * self.config.session_timeout_ms / 1000)

    def _beat_failed(self, e: GroupRequestError) -> None:
        """``REBALANCE_IN_PROGRESS`` asks for a rejoin; ``UNKNOWN_MEMBER_ID`` /
        ``ILLEGAL_GENERATION`` mean this member was fenced: it stops handing out records at
        once (the gate closes) and rejoins. No answer for a session timeout asks for no
        rejoin: the coordinator is looked up again and the heartbeats go on, as the Java
        client's heartbeat thread does (``AbstractCoordinator``: "session timed out without
        receiving a heartbeat response", ``markCoordinatorUnknown``); the answer says whether
        the membership survived. A coordinator that moved keeps it (the new one loads the
        group), and a rejoin would rebalance the whole group for nothing. Meanwhile the lease
        has closed the gate (0.8 x ``session.timeout.ms`` after the last answer).

        A failure answered to a heartbeat of a membership the member has since left (a join
        under way, since the heartbeat after a SyncGroup goes out at once; another generation
        or member id) is ignored: the join's own answer tells what became of it."""
        state = self.machine.state
        if self._beat_sent != (self.generation, self.member_id) or state in (
            MemberState.JOINING,
            MemberState.JOINED,
        ):
            log.info(
                "[%s] heartbeat of generation %d failed while %s: %s (the join's answer decides)",
                self.consumer_id,
                self._beat_sent[0],
                state.value,
                e,
            )
            return
        if e.code == REBALANCE_IN_PROGRESS:
            self.request_rebalance("the group is rebalancing")
        elif e.fenced:
            log.warning("[%s] fenced by the coordinator: %s", self.consumer_id, e)
            if e.code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.generation = -1
            self.machine.handle(MemberEvent.FENCED)
            self._close_gate_now()
            self.request_rebalance("fenced: " + str(e))
        else:
            log.info("[%s] heartbeat failed: %s", self.consumer_id, e)
            if self._lapsed():
                self.group.forget_coordinator()

    async def metadata_loop(self) -> None:
        """The metadata snapshot: rejoin when a subscribed topic's partition count changes
        (checked every ``metadata.max.age.ms``, as the Java client's periodic metadata refresh
        finds it: ``ConsumerCoordinator``'s subscription metadata snapshot)."""
        while True:
            await anyio.sleep(self.config.metadata_max_age_ms / 1000)
            if self.machine.rebalancing or self._metadata_snapshot is None:
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

    async def _leave_stale(self) -> None:
        """On a poll timeout, as the Java client's ``AbstractCoordinator.maybeLeaveGroup``
        ("consumer poll timeout has expired."): a dynamic member sends LeaveGroup, so the
        group rebalances at once; a static member (``group.instance.id``) sends none (2.3+:
        only the session timeout ends a static membership), so its partitions move only after
        ``session.timeout.ms``. Either forgets its generation and member id
        (``resetGenerationOnLeaveGroup``) and joins anew when the reader asks again (a static
        member then takes its instance id's place back). Never raises."""
        if self.member_id and self.generation >= 0 and not self.static:
            await self.group.leave(self.member_id)
        self.generation = -1
        self.member_id = ""

    async def leave(self) -> None:
        """LeaveGroup, so the group rebalances at once (never raises).

        A static member (``group.instance.id``) sends none, as the Java client's
        ``AbstractCoordinator.maybeLeaveGroup`` (2.3+): it stays in the group until its
        session times out, so a member restarted with the same instance id within
        ``session.timeout.ms`` gets its assignment back without a rebalance.
        """
        member = self.member_id and self.generation >= 0
        if not self._leaving():
            return
        if member and self.static:
            log.info(
                "[%s] static member %s (group.instance.id %s): no LeaveGroup; the coordinator "
                "keeps its assignment for session.timeout.ms (%d ms)",
                self.consumer_id,
                self.member_id,
                self.config.group_instance_id,
                self.config.session_timeout_ms,
            )
        elif member:
            await self.group.leave(self.member_id)
        self.generation = -1
        self.machine.handle(MemberEvent.LEFT)
