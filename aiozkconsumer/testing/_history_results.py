"""What the history checker reports: the anomalies, the hand-overs, the counts (pure data).

:func:`~aiozkconsumer.testing.history.check_history` returns a :class:`CheckResult`; the rules
behind each :class:`AnomalyKind` are in :mod:`aiozkconsumer.testing.history`'s docstring. Kept
apart from the checker so that a report (the chaos runner's, a failing test's ``summary``) is
read and built without the rules that produced it. Import the names from
:mod:`aiozkconsumer.testing.history`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Anomaly",
    "AnomalyKind",
    "CheckResult",
    "Handover",
    "SessionExpiry",
    "ZookeeperRestart",
]


class AnomalyKind(enum.StrEnum):
    """The kinds of anomaly :func:`check_history` reports (see the module docstring)."""

    LOST = "lost"
    DUPLICATE = "duplicate"
    NONMONOTONIC = "nonmonotonic"
    SKIP = "skip"
    COMMIT_DECREASED = "commit_decreased"
    COMMIT_AHEAD = "commit_ahead"
    HANDOVER_GAP = "handover_gap"
    OWNERSHIP_OVERLAP = "ownership_overlap"
    UNOWNED_DELIVERY = "unowned_delivery"
    LIVENESS = "liveness"
    STALLED = "stalled"
    INCONSISTENT = "inconsistent"
    ABORTED_READ = "aborted_read"
    UNCOMMITTED_READ = "uncommitted_read"
    DUPLICATE_WINDOW_EXCEEDED = "duplicate_window_exceeded"
    SESSION_EXPIRED_BY_SHORT_ZOOKEEPER_RESTART = "session_expired_by_short_zookeeper_restart"


@dataclass(frozen=True)
class Anomaly:
    """One violation found in a history.

    Attributes:
        kind: which rule was broken.
        message: a sentence saying what happened, for humans.
        topic: the topic concerned, if one.
        partition: the partition concerned, if one.
        member: the member (``member`` field of the events) at fault, if one.
        ts: when (``time.time()`` of the event that showed it), if known.
        offsets: up to 20 of the offsets concerned, ascending.
        count: how many records (or commits, deliveries) are concerned.
    """

    kind: AnomalyKind
    message: str
    topic: str | None = None
    partition: int | None = None
    member: str | None = None
    ts: float | None = None
    offsets: tuple[int, ...] = ()
    count: int = 1

    def __str__(self) -> str:
        where = f" {self.topic}/{self.partition}" if self.topic is not None else ""
        who = f" [{self.member}]" if self.member is not None else ""
        return f"{self.kind.value}{where}{who}: {self.message}"


@dataclass(frozen=True)
class Handover:
    """One hand-over of a partition and its duplicates (see the module docstring).

    Attributes:
        topic: the topic.
        partition: the partition.
        previous: the member that owned it before (whose deliveries were repeated).
        next: the member that claimed it.
        ts: when the new owner claimed it (its ``assigned`` event).
        duplicates: records the new owner delivered again that ``previous`` had delivered.
        window_s: the duplicate window: last minus first hand-out time of ``previous``'s
            deliveries of those records, seconds (0 without duplicates).
        offsets: up to 20 of the duplicated offsets, ascending.
        fault_kind: the kind of fault the hand-over is judged by; ``None`` when no fault log
            was given or no fault applies.
        fault_number: that fault's number in the schedule, if known.
        bound_s: the bound for ``fault_kind`` (:func:`duplicate_window_bound_s`); ``None``
            when not judged.
        gap_s: the partition's delivery gap across the hand-over, seconds: from the previous
            owner's last hand-out of it to the new owner's first (``None`` when either handed
            out nothing): the hand-over's recovery time as a reader of the partition sees it.
    """

    topic: str
    partition: int
    previous: str
    next: str
    ts: float
    duplicates: int
    window_s: float
    offsets: tuple[int, ...] = ()
    fault_kind: str | None = None
    fault_number: int | None = None
    bound_s: float | None = None
    gap_s: float | None = None

    @property
    def exceeded(self) -> bool:
        """Whether the window exceeds its bound."""
        return self.bound_s is not None and self.window_s > self.bound_s

    def fault_label(self) -> str:
        """``"<kind> #<number>"``, ``"<kind>"``, or ``"no fault"``."""
        if self.fault_kind is None:
            return "no fault"
        return (
            self.fault_kind
            if self.fault_number is None
            else f"{self.fault_kind} #{self.fault_number}"
        )


@dataclass(frozen=True)
class SessionExpiry:
    """A member's ZooKeeper session replaced by a new one (the old one expired).

    Attributes:
        member: the member.
        ts: when the history first shows the new session.
        old_session: the session that expired.
        new_session: the session that replaced it.
        suspended_since: when the member's ``state: suspended`` before it was written, if any.
    """

    member: str
    ts: float
    old_session: Any
    new_session: Any
    suspended_since: float | None = None


@dataclass(frozen=True)
class ZookeeperRestart:
    """One injected ZooKeeper restart and the sessions that expired in its window.

    Attributes:
        number: the fault's number in the schedule, if known.
        started_ts: when ZooKeeper was being stopped.
        downtime_s: how long until it answered again, seconds (an upper bound).
        short: whether it was shorter than half a session timeout (no session may expire).
        expired: members whose session changed within its window, in time order.
        unexplained: those of ``expired`` no other fault explains (flagged when ``short``).
    """

    number: int | None
    started_ts: float
    downtime_s: float
    short: bool
    expired: tuple[str, ...] = ()
    unexplained: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckResult:
    """What :func:`check_history` found.

    Attributes:
        anomalies: every anomaly, in the order found (per kind: time order).
        produced: records in the produced log.
        delivered: record deliveries (a record delivered twice counts twice).
        distinct_delivered: produced records delivered at least once.
        duplicates: deliveries beyond the first of a record (allowed or not).
        allowed_duplicates: redeliveries the at-least-once window explains.
        lost: produced records never delivered.
        commits: committed offsets (one per partition per ``committed`` event).
        epochs: ownership epochs (partition claims).
        incarnations: member processes seen (``startup`` events, or members without one).
        crashes: incarnations without a ``shutdown`` event (killed, crashed, or still
            running when the history was taken).
        session_losses: times a member's ZooKeeper session was replaced (expiry).
        suspensions: ``state: suspended`` events (connection lost, maybe resumed).
        handovers: every hand-over, in claim order, with its duplicates, window and (given
            the fault log) fault kind and bound.
        session_expiries: every session replacement (:attr:`session_losses` of them), in
            time order.
        zookeeper_restarts: the injected ZooKeeper restarts and the sessions expired in each
            one's window (empty without a fault log).
    """

    anomalies: list[Anomaly]
    produced: int
    delivered: int
    distinct_delivered: int
    duplicates: int
    allowed_duplicates: int
    lost: int
    commits: int
    epochs: int
    incarnations: int
    crashes: int
    session_losses: int
    suspensions: int
    handovers: tuple[Handover, ...] = ()
    session_expiries: tuple[SessionExpiry, ...] = ()
    zookeeper_restarts: tuple[ZookeeperRestart, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the history has no anomaly."""
        return not self.anomalies

    @property
    def safety_ok(self) -> bool:
        """Whether the history has no anomaly but the bound targets.

        ``duplicate_window_exceeded`` and ``session_expired_by_short_zookeeper_restart``
        check the duplicate window and the ZooKeeper-restart ride-through against their
        stated targets; they do not mean a record was lost, owned twice or committed wrongly.
        """
        targets = {
            AnomalyKind.DUPLICATE_WINDOW_EXCEEDED,
            AnomalyKind.SESSION_EXPIRED_BY_SHORT_ZOOKEEPER_RESTART,
        }
        return all(a.kind in targets for a in self.anomalies)

    @property
    def faults_seen(self) -> int:
        """Crashed incarnations plus session losses: the faults the history shows."""
        return self.crashes + self.session_losses

    def by_kind(self) -> dict[AnomalyKind, list[Anomaly]]:
        """The anomalies grouped by kind."""
        grouped: dict[AnomalyKind, list[Anomaly]] = {}
        for anomaly in self.anomalies:
            grouped.setdefault(anomaly.kind, []).append(anomaly)
        return grouped

    def summary(self, limit: int = 20) -> str:
        """A few lines for a test failure: the counts, then up to ``limit`` anomalies."""
        lines = [
            f"produced={self.produced} delivered={self.delivered} "
            f"distinct={self.distinct_delivered} duplicates={self.duplicates} "
            f"(allowed {self.allowed_duplicates}) lost={self.lost} commits={self.commits} "
            f"epochs={self.epochs} incarnations={self.incarnations} crashes={self.crashes} "
            f"session_losses={self.session_losses} suspensions={self.suspensions}",
            f"{len(self.anomalies)} anomalies"
            + (
                ": " + ", ".join(f"{k.value}={len(v)}" for k, v in self.by_kind().items())
                if self.anomalies
                else ""
            ),
        ]
        lines.extend(f"  {a}" for a in self.anomalies[:limit])
        if len(self.anomalies) > limit:
            lines.append(f"  ... {len(self.anomalies) - limit} more")
        return "\n".join(lines)
