"""The history checker's rules that need the fault log (pure): which fault a hand-over is
judged by, how long its duplicate window may be, and which session expiries a short ZooKeeper
restart is to blame for.

The chaos runner hands :func:`~aiozkconsumer.testing.history.check_history` the faults it
injected as :class:`InjectedFault` records; the rules (``duplicate_window_exceeded`` and
``session_expired_by_short_zookeeper_restart``) are stated in
:mod:`aiozkconsumer.testing.history`'s docstring, and the bounds come from
``docs/failure-semantics.md``. These functions take the fault log and what the checker found
(epoch spans, session expiries) and return data, so each rule is tested without replaying a
history. Import the public names from :mod:`aiozkconsumer.testing.history`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aiozkconsumer.testing._history_results import (
    Anomaly,
    AnomalyKind,
    SessionExpiry,
    ZookeeperRestart,
)

__all__ = [
    "DUPLICATE_WINDOW_TOLERANCE_S",
    "InjectedFault",
    "duplicate_window_bound_s",
    "expiry_explained",
    "handover_fault",
    "judge_zookeeper_restarts",
]

DUPLICATE_WINDOW_TOLERANCE_S = 0.25
"""ε of the duplicate-window bounds: scheduling slack of a loaded test machine, seconds."""

_ZOOKEEPER_RESTART = "zookeeper_restart"
_BROKER_FAULTS = frozenset({"broker_restart", "leader_kill"})
"""Faults on a server other than ZooKeeper: not on any member."""
_EVERY_MEMBER = frozenset({_ZOOKEEPER_RESTART, "coordinator_kill", "rolling_restart"})
"""Faults on the server every member's membership depends on: ZooKeeper, or (Kafka mode) the
group coordinator's broker."""
_KAFKA_BROKER_FAULTS = frozenset(
    {"broker_link", "coordinator_kill", "leader_kill", "rolling_restart"}
)
"""Kafka-mode faults on the brokers (or a member's link to one): no commit may reach the group
coordinator for a while."""
_SESSION_ENDING = frozenset({"pause", "expire", "zookeeper_link"})
"""Faults on a member, besides a long ZooKeeper restart, that can end its session."""


@dataclass(frozen=True)
class InjectedFault:
    """A fault a nemesis injected, as the checker needs it (the chaos runner's fault log).

    Attributes:
        kind: the fault's kind, a :class:`~aiozkconsumer.testing.chaos.FaultKind` value
            (``"kill"``, ``"pause"``, ``"expire"``, ``"zookeeper_restart"``,
            ``"broker_restart"``, ``"zookeeper_link"``, ``"broker_link"``); other kinds are
            kept and have no bound.
        started_ts: ``time.time()`` when the injection began.
        ended_ts: ``time.time()`` when it was healed (for a kill: once the replacement ran).
        members: the members (``member`` field of the events) it hit; ``None`` for every
            member. Ignored for server restarts: a ZooKeeper restart hits every member, a
            broker restart none.
        number: its number in the schedule, for messages.
    """

    kind: str
    started_ts: float
    ended_ts: float
    members: frozenset[str] | None = None
    number: int | None = None

    @property
    def downtime_s(self) -> float:
        """How long it lasted, seconds (a ZooKeeper restart's downtime, an upper bound)."""
        return self.ended_ts - self.started_ts

    def hits(self, member: str) -> bool:
        """Whether the fault is on ``member`` (a ZooKeeper restart, a group coordinator kill
        and a rolling restart are on every member)."""
        if self.kind in _EVERY_MEMBER:
            return True
        if self.kind in _BROKER_FAULTS:
            return False
        return self.members is None or member in self.members

    def label(self) -> str:
        """``"<kind> #<number>"`` (the number when known)."""
        return self.kind if self.number is None else f"{self.kind} #{self.number}"


def duplicate_window_bound_s(
    kind: str | None, commit_interval_ms: int, session_timeout_ms: int
) -> float | None:
    """The longest duplicate window ``docs/failure-semantics.md`` allows after a fault.

    With ``C`` the commit interval, ``T`` the session timeout, ``D = T/3`` (the time to
    notice a dead link) and ``ε`` = :data:`DUPLICATE_WINDOW_TOLERANCE_S`, all in seconds:
    ``kill`` / ``pause``: ``C + ε``; ``zookeeper_link`` / ``zookeeper_restart``:
    ``C + D + ε`` (a ZooKeeper restart shorter than ``T/2`` should hand nothing over at
    all: that is the ``session_expired_by_short_zookeeper_restart`` rule). The Kafka-mode
    broker faults (``broker_link``, ``coordinator_kill``, ``leader_kill``,
    ``rolling_restart``): ``C + T + ε``. While no commit reaches the group coordinator (its
    broker gone, moving, or cut off from the member), a member hands records out for at
    most its lease, ``0.8 T`` after its last answered heartbeat (``T``: the session timeout
    the coordinator applies, the broker's ``group.consumer.session.timeout.ms`` under
    ``group.protocol=consumer``), and those are the records a new owner reads again.

    Args:
        kind: the fault kind (a ``FaultKind`` value), ``None`` for no fault.
        commit_interval_ms: ``C``, ms.
        session_timeout_ms: ``T``, ms.

    A compound kind ``<kill or pause>_after_<link cut or ZooKeeper restart>`` (see
    :func:`handover_fault`): ``C + T + ε``: the commit sent into the cut lands only after the
    heal, so the crash repeats what was handed out from a commit interval before the cut to
    the crash (``docs/failure-semantics.md``, the compound window).

    Returns:
        The bound in seconds, or ``None`` for a kind without a stated bound (``expire``,
        ZooKeeper mode's ``broker_restart``, no fault).
    """
    c, t = commit_interval_ms / 1000, session_timeout_ms / 1000
    if kind is not None and _AFTER in kind:
        return c + t + DUPLICATE_WINDOW_TOLERANCE_S  # the compound window (handover_fault)
    if kind in ("kill", "pause"):
        return c + DUPLICATE_WINDOW_TOLERANCE_S
    if kind in ("zookeeper_link", _ZOOKEEPER_RESTART):
        return c + t / 3 + DUPLICATE_WINDOW_TOLERANCE_S
    if kind in _KAFKA_BROKER_FAULTS:
        return c + t + DUPLICATE_WINDOW_TOLERANCE_S
    return None


def handover_fault(
    faults: Sequence[InjectedFault] | None,
    *,
    member: str,
    began: float,
    lost_at: float,
    claimed: float,
    commit_interval_ms: int | None,
    session_timeout_ms: int,
) -> InjectedFault | None:
    """The fault a hand-over is judged by (see :mod:`aiozkconsumer.testing.history`).

    The last fault on the previous owner that began before the claim, had not ended before
    the previous epoch began, (for an epoch lost with its session) began by the loss, and did
    not begin after a kill of the previous owner (a fault on every member, such as a ZooKeeper
    restart, that comes after the member was killed did not move its partitions). When
    faults on the member overlap, those still in effect when the last one began count too:
    one without a stated bound wins, else the one with the loosest bound. A kill or pause
    that comes within ``T`` after a link cut (or ZooKeeper restart) on the member healed, in
    the same ownership, is the compound fault ``<kill>_after_<cut>``: a commit sent into the
    cut lands only after the heal.

    Args:
        faults: the fault log; ``None`` or empty: no fault.
        member: the previous owner (the ``member`` field of its events).
        began: when the previous epoch began (its ``assigned`` event), ``time.time()``.
        lost_at: when the previous epoch ended by a session loss (the suspension that began
            it) or, for a Kafka member, by the drop its fence caused (``revoked``, reason
            ``lost``); ``math.inf`` for an epoch that ended otherwise.
        claimed: when the new owner claimed the partition.
        commit_interval_ms: ``C``; ``None``: the last fault, without comparing bounds.
        session_timeout_ms: ``T``.

    Returns:
        The fault, or ``None`` when none applies.
    """
    if not faults:
        return None
    # When the ownership really ended: at the session loss (or fenced drop), or when a kill
    # ended the member (an incarnation), whichever came first. A fault begun after that (a
    # ZooKeeper restart is on every member, the dead too) did not move the partitions.
    kills = [f.started_ts for f in faults if f.kind == "kill" and f.hits(member)]
    ended = min([lost_at, *(t for t in kills if t >= began)])
    candidates = [
        f
        for f in faults
        if f.hits(member)
        and f.started_ts < claimed
        and f.ended_ts >= began
        and f.started_ts <= ended
    ]
    if not candidates:
        return None
    last = max(candidates, key=lambda f: f.started_ts)
    in_effect = [last] + [
        f for f in candidates if f is not last and f.started_ts <= last.started_ts <= f.ended_ts
    ]
    if commit_interval_ms is None:
        return last
    c, t = commit_interval_ms, session_timeout_ms
    unbounded = [f for f in in_effect if duplicate_window_bound_s(f.kind, c, t) is None]
    if unbounded:
        return max(unbounded, key=lambda f: f.started_ts)
    chosen = max(
        in_effect,
        key=lambda f: (duplicate_window_bound_s(f.kind, c, t) or 0.0, f.started_ts),
    )
    return _compound(last, chosen, candidates, began, t / 1000)


_AFTER = "_after_"
"""Joins the two kinds of a compound fault (``kill_after_zookeeper_link``)."""
_HOLDS_COMMITS = frozenset({"zookeeper_link", "broker_link", _ZOOKEEPER_RESTART})
"""Faults during which a commit sent may land only after the heal."""


def _compound(
    last: InjectedFault,
    chosen: InjectedFault,
    candidates: Sequence[InjectedFault],
    began: float,
    t_s: float,
) -> InjectedFault:
    """The last fault a kill or pause within ``T`` after a link cut (or ZooKeeper restart) on
    the same member healed, inside the same ownership (whatever else was in effect): the
    compound fault ``<kill>_after_<cut>``, judged by the compound window
    (:func:`duplicate_window_bound_s`); else ``chosen`` as it is."""
    if last.kind not in ("kill", "pause"):
        return chosen
    before = [
        f
        for f in candidates
        if f.kind in _HOLDS_COMMITS
        and f.ended_ts >= began
        and f.ended_ts < last.started_ts <= f.ended_ts + t_s
    ]
    if not before:
        return chosen
    cut = max(before, key=lambda f: f.ended_ts)
    return InjectedFault(
        kind=f"{last.kind}{_AFTER}{cut.kind}",
        started_ts=cut.started_ts,
        ended_ts=last.ended_ts,
        members=last.members,
        number=last.number,
    )


def judge_zookeeper_restarts(
    faults: Sequence[InjectedFault],
    expiries: Sequence[SessionExpiry],
    session_timeout_ms: int,
) -> tuple[list[ZookeeperRestart], list[Anomaly]]:
    """Each ZooKeeper restart of the fault log with the session expiries in its window.

    A restart's window runs from when ZooKeeper was being stopped to ``2 T`` after it
    answered again; a restart down less than ``T/2`` may expire no session, so each expiry in
    its window that no other fault explains (:func:`expiry_explained`) is an anomaly.

    Args:
        faults: the fault log, in any order.
        expiries: the session replacements the history shows, in time order.
        session_timeout_ms: ``T``.

    Returns:
        The restarts in the order they began, and the
        ``session_expired_by_short_zookeeper_restart`` anomalies in that order.
    """
    t = session_timeout_ms / 1000
    restarts = sorted(
        (f for f in faults if f.kind == _ZOOKEEPER_RESTART), key=lambda f: f.started_ts
    )
    judged: list[ZookeeperRestart] = []
    anomalies: list[Anomaly] = []
    for r in restarts:
        short = r.downtime_s < t / 2
        window_end = r.ended_ts + 2 * t
        expired = [x for x in expiries if r.started_ts <= x.ts <= window_end]
        unexplained = [x for x in expired if not expiry_explained(x, r, faults, t)]
        judged.append(
            ZookeeperRestart(
                number=r.number,
                started_ts=r.started_ts,
                downtime_s=r.downtime_s,
                short=short,
                expired=tuple(x.member for x in expired),
                unexplained=tuple(x.member for x in unexplained),
            )
        )
        if not short:
            continue
        anomalies.extend(
            Anomaly(
                AnomalyKind.SESSION_EXPIRED_BY_SHORT_ZOOKEEPER_RESTART,
                f"session {x.old_session} was replaced by {x.new_session} "
                f"{x.ts - r.started_ts:.1f} s after {r.label()} began; ZooKeeper was down "
                f"{r.downtime_s:.1f} s, less than T/2 = {t / 2:g} s: no session may expire",
                member=x.member,
                ts=x.ts,
            )
            for x in unexplained
        )
    return judged, anomalies


def expiry_explained(
    expiry: SessionExpiry,
    restart: InjectedFault,
    faults: Sequence[InjectedFault],
    session_timeout_s: float,
) -> bool:
    """Whether a fault on the member other than ``restart`` can have ended its session.

    A pause, an expiry, a ZooKeeper link cut, or a ZooKeeper restart of ``T/2`` or more, in
    effect between ``T`` before ``restart`` began and the session change.
    """
    t = session_timeout_s
    return any(
        f is not restart
        and f.hits(expiry.member)
        and (f.kind in _SESSION_ENDING or (f.kind == _ZOOKEEPER_RESTART and f.downtime_s >= t / 2))
        and f.started_ts <= expiry.ts
        and f.ended_ts >= restart.started_ts - t
        for f in faults
    )
