"""A Jepsen-style checker for histories of consumer-group runs (pure; loaders aside).

A run produces two kinds of files: the *produced log* (what the brokers acknowledged: per
partition the ``(offset, value)`` pairs, see :func:`aiozkconsumer.testing.verifiable.
produce_checkable`) and one JSON-lines *event file* per consumer process (see
:mod:`aiozkconsumer.testing.verifiable` for the schema). :func:`check_history` reads both and
returns a :class:`CheckResult` listing every :class:`Anomaly` it finds. The method follows
Jepsen's Kafka queue workload (``jepsen.tests.kafka``; ``reference/reliability-and-style.md``
§1a), adapted to a ZooKeeper-coordinated group: the broker with ``acks=all`` is the trusted
substrate, and what is checked is the group protocol — who owns a partition, where a new owner
starts, and what is committed.

Vocabulary
----------

- *Incarnation*: one run of a member process, from its ``startup`` event to its last event.
  A member restarted under the same name is a new incarnation.
- *Ownership epoch* (the unit that must be monotonic, Jepsen's "process between two
  subscribes"): one incarnation's hold on one partition, from its ``assigned`` event to the
  event that ends it (below). It is identified by (member, incarnation, session, generation of
  the claiming rebalance, partition). Partitions a member *keeps* across an incremental
  rebalance stay in the same epoch.
- *Index*: a record's position in the produced log of its partition. Offsets that are not in
  the produced log (compacted records, transaction markers) are not records: deliveries are
  compared by index, so such gaps are never reported as skips.
- *Group commit*: the last ``committed`` offset of a partition, by any member, in time order.
  It models the offset node ``/consumers/<group>/offsets/<topic>/<partition>``.

Events from different processes are ordered by their ``ts`` (``time.time()`` on one machine);
the events of one file keep their file order.

When an epoch ends
------------------

An epoch ends at the first of: a ``revoked`` event of its incarnation naming the partition; the
incarnation's ``shutdown`` event; a new ``assigned`` event for the same partition; the
incarnation's last event, when it has no ``shutdown`` (it crashed or was killed: it can hand
nothing out after its last recorded act); the member's next ``startup``. **Session loss**: when
an incarnation's later events carry a different ZooKeeper session id, or a ``revoked`` event says
``"reason": "session_lost"``, its epochs of the old session end at the ``state: suspended`` event
that began the loss, if there is one (the connector closes its ownership gate when the
connection drops and hands nothing out until it knows whether the session survived; the server
may have deleted the owner nodes at any point after that, so that is the last moment ownership
is certain). Session-change detection ignores ``revoked`` events, which carry the session of the
epoch they end. A member whose session *resumed* keeps its epochs through the suspension (its
owner nodes never went away, so nobody else could claim).

*Holding*, for judging other members' deliveries, is narrower for an epoch that ended by a
session loss or a crash: it holds the partition from its ``assigned`` event to its *last
delivery* of it (its start, if it delivered nothing). Its session expired at an unknown moment
between that last delivery and its end, and another member may legitimately claim the partition
from then on; a member frozen past its session timeout (SIGSTOP) hands nothing out, so it must
not be blamed for the new owner's deliveries, while a zombie that does hand records out after
the new owner claimed is caught: those deliveries fall inside the new owner's holding (and,
after its ``state: suspended`` event, outside its own ownership). Epochs that ended by a
``revoked`` or ``shutdown`` event (the member was alive and kept its owner nodes until then)
hold until that event — unless another incarnation was assigned the partition while the epoch
was still open. Owner nodes are exclusive ephemeral nodes, so that claim proves the epoch's
session had expired although the member never learnt it (cut off from ZooKeeper until it was
stopped): such a *superseded* epoch holds until its last delivery too, like a session loss.

The rules (one anomaly kind each)
---------------------------------

``lost`` (Jepsen's ``:lost-write`` plus ``:unseen`` at the end of the run). A produced record
that nobody delivered. Without a final phase that lets the survivors read everything, the tail
of a partition counts as lost too; the message says how many lost records lie below the
partition's highest delivered offset (certainly skipped) and how many in the tail.

``duplicate`` (reference §1a, check 8, "bounded duplicates"). Delivery is at-least-once, so a
record may be delivered again, but only by a new owner that starts at the group commit it found
and re-reads what a member that died, was revoked or lost its session had delivered after its
last commit. Rule: when epoch E delivers a record an *other* epoch delivered before, the record's
offset must be >= the group commit of the partition at E's ``assigned`` event (any offset is
allowed when nothing was committed yet). A redelivery below it means a stale commit was read or
a committed record was handed out again. (Repeats within one epoch are ``nonmonotonic``.)

``nonmonotonic`` / ``skip`` (Jepsen's ``:nonmonotonic-poll`` / ``:poll-skip``, per epoch, as
Jepsen resets expectations at a subscribe). Within one epoch a partition's deliveries must be
consecutive: each ``consumed`` event starts at the index after the previous one's last, and
covers ``count`` = every index from its first to its last offset. Starting at or before the
previous end is ``nonmonotonic``; leaving indexes out is ``skip``. Across epochs these are
excused; group-level continuity is ``handover_gap``.

``commit_decreased`` (reference §1a, check 4). Per partition, the group commits in time order
never decrease. A decrease is what a zombie's late commit does (``commitOffsetToZooKeeper``
writes unconditionally, §1c); it makes the next owner re-read committed records.

``commit_ahead`` (Kafka's VerifiableConsumer "Committed offset is ahead of the current
position", reference §1a check 5). A commit of offset ``o`` by a member is allowed only while it
owns the partition (an open epoch), and only if no produced record lies in ``[base, o)``, where
``base`` is one past the epoch's last delivered offset, or, before the epoch delivered anything,
the offset it claimed at (its ``assigned`` offset, else the group commit, else the start of the
log). Committing past records it has not handed out loses them for the next owner.

``handover_gap`` (reference §1a, check 6). A new owner's first delivery must be at or below the
first produced record at or after the committed offset it claimed at (the ``assigned`` event's
``offset``; when absent, the group commit at that time; with none, the start of the log, which
assumes ``auto.offset.reset=smallest``). Starting later skips records under at-least-once.
(The claim-time offset the member reports is preferred over the group commit because a member
killed between writing a commit and logging it leaves a commit the history does not show.)

``ownership_overlap`` (reference §1a, check 7, "exclusive ownership"). No record of a partition
is handed out by one incarnation while another incarnation holds it: a ``consumed`` event at time
``t`` by epoch E is flagged for every epoch E' of another incarnation with
``E'.start <= t <= E'.hold_end`` (holding as defined above: until its ``revoked``/``shutdown``
event; for a member whose session expired or that was killed, until its last delivery of the
partition, which is at the latest its ``state: suspended`` event or its last event, unless it
delivered as a zombie after that). Reported once per pair of epochs.

``unowned_delivery`` (the other half of check 7). A ``consumed`` event outside its own
incarnation's ownership of the partition: before any ``assigned``, after the ``revoked``, or
after the ``state: suspended`` that began a session loss (a zombie handing out records).

``liveness`` (reference §1a, check 9). Given ``last_fault_ts``, every partition of the produced
log must be owned again by ``last_fault_ts + session_timeout_ms / 1000 + liveness_slack_s``: some
epoch must start by then and end after ``last_fault_ts``. (A killed member's epochs end at its
last event, before the kill, so they do not count.)

``inconsistent`` (Jepsen's ``:inconsistent-offsets``; validates the broker and the harness). A
``consumed`` event names an offset that is not in the produced log, a ``first``/``last`` value
that differs from the produced value at that offset, or a range that is empty or whose
``count`` is impossible.

Rules that need the fault log
-----------------------------

Two more rules judge the history against the faults a nemesis injected, given as
:class:`InjectedFault` records (``faults=``, from the chaos runner) together with the commit
interval ``C`` (``commit_interval_ms=``) and the session timeout ``T``. A history checked
without them is checked as above; the hand-overs are still listed (:attr:`CheckResult.
handovers`), without a fault kind.

*Hand-over*: an epoch E2 of a partition takes over from an earlier epoch E1 of it (any member,
the same one after a session loss included). Its *duplicates* are the records E2 delivers again
that E1 had delivered: each redelivered record is charged to the epoch that delivered it last
before, so one claim may end several hand-overs' worth of duplicates (one per earlier
deliverer); a claim without duplicates is a hand-over from the epoch that started last before it.
Its *duplicate window* is the time span of E1's deliveries of those records, in seconds (the last
one's hand-out time minus the first one's; ``handed_out_by`` where given, as for ownership). Its
*fault* is the last fault injected on E1's member — or a ZooKeeper restart, which hits every
member — that began before E2's claim and had not ended before E1 began (an older fault did not
end E1) and, when E1 ended with a session loss, began before that loss (a later fault, say a
kill of the member once it had registered again, did not end E1 either). When faults on the
member overlap, those still in effect when the last one began count too and the loosest bound
applies (a member cut off from ZooKeeper, then paused, is bounded as a link cut).

``duplicate_window_exceeded`` (the bound ``docs/failure-semantics.md`` states for each fault,
:func:`duplicate_window_bound_s`): a hand-over whose duplicate window exceeds the bound of its
fault kind, with ``D = T/3`` (how long a dead link takes to notice) and a scheduling tolerance
``ε`` = :data:`DUPLICATE_WINDOW_TOLERANCE_S`: ``kill`` or ``pause`` (past the session
timeout): ``C + ε``; ``zookeeper_link`` or ``zookeeper_restart``: ``C + D + ε``. Hand-overs
after another fault (``expire``, broker faults) or after none have no stated bound and are
listed, not judged.

``session_expired_by_short_zookeeper_restart``: a ZooKeeper restart down for less than ``T/2``
must expire no session (the server restores the sessions it knew, and their clients are back in
time). A session change of a member (a later event carrying a new session id) seen within the
restart's window — from when ZooKeeper was stopped to ``2 T`` after it served again: the server
gives a restored session a full timeout, and the client then needs to reconnect and notice — is
flagged unless another fault on that member that can end a session (a pause, an expiry, a
ZooKeeper link cut, a ZooKeeper restart of ``T/2`` or more) was in effect between ``T`` before
the restart and the session change. The downtime is the injector's span (``ended_ts -
started_ts``): from before ZooKeeper was stopped to after it answered again, an upper bound, so
a restart judged short was short.
"""

from __future__ import annotations

import enum
import heapq
import json
import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DUPLICATE_WINDOW_TOLERANCE_S",
    "Anomaly",
    "AnomalyKind",
    "CheckResult",
    "Handover",
    "InjectedFault",
    "ProducedLog",
    "SessionExpiry",
    "TopicPartitionKey",
    "ZookeeperRestart",
    "check_history",
    "duplicate_window_bound_s",
    "load_events",
    "load_produced_log",
]

TopicPartitionKey = tuple[str, int]
"""``(topic, partition)``."""

_SAMPLE = 20
"""At most this many offsets are listed in one anomaly."""

_LOST_REASONS = frozenset({"session_lost", "crashed", "restarted"})
"""Epoch ends that do not say when ownership really ended (an expiry somewhere before)."""

DUPLICATE_WINDOW_TOLERANCE_S = 0.25
"""ε of the duplicate-window bounds: scheduling slack of a loaded test machine, seconds."""

_ZOOKEEPER_RESTART = "zookeeper_restart"
_BROKER_FAULTS = frozenset({"broker_restart"})
"""Faults on a server other than ZooKeeper: not on any member."""
_SESSION_ENDING = frozenset({"pause", "expire", "zookeeper_link"})
"""Faults on a member, besides a long ZooKeeper restart, that can end its session."""


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
    INCONSISTENT = "inconsistent"
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
        """Whether the fault is on ``member`` (a ZooKeeper restart is on every member)."""
        if self.kind == _ZOOKEEPER_RESTART:
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
    all: that is the ``session_expired_by_short_zookeeper_restart`` rule).

    Args:
        kind: the fault kind (a ``FaultKind`` value), ``None`` for no fault.
        commit_interval_ms: ``C``, ms.
        session_timeout_ms: ``T``, ms.

    Returns:
        The bound in seconds, or ``None`` for a kind without a stated bound (``expire``,
        broker faults, no fault).
    """
    c, t = commit_interval_ms / 1000, session_timeout_ms / 1000
    if kind in ("kill", "pause"):
        return c + DUPLICATE_WINDOW_TOLERANCE_S
    if kind in ("zookeeper_link", _ZOOKEEPER_RESTART):
        return c + t / 3 + DUPLICATE_WINDOW_TOLERANCE_S
    return None


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


@dataclass(frozen=True)
class ProducedLog:
    """What the brokers acknowledged: per partition, ``(offset, value)`` in offset order.

    Attributes:
        records: ``{(topic, partition): ((offset, value), ...)}``, offsets strictly
            increasing; values as text (the checkable producer's values are ASCII).
    """

    records: Mapping[TopicPartitionKey, tuple[tuple[int, str], ...]]

    @classmethod
    def from_records(cls, records: Iterable[tuple[str, int, int, str | bytes]]) -> ProducedLog:
        """Build a log from ``(topic, partition, offset, value)`` in any order.

        Raises:
            ValueError: an offset appears twice in a partition.
        """
        by_tp: dict[TopicPartitionKey, list[tuple[int, str]]] = {}
        for topic, partition, offset, value in records:
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            by_tp.setdefault((topic, int(partition)), []).append((int(offset), text))
        frozen: dict[TopicPartitionKey, tuple[tuple[int, str], ...]] = {}
        for tp, pairs in sorted(by_tp.items()):
            pairs.sort()
            for (a, _), (b, _) in zip(pairs, pairs[1:], strict=False):
                if a == b:
                    raise ValueError(f"offset {a} of {tp[0]}/{tp[1]} appears twice")
            frozen[tp] = tuple(pairs)
        return cls(frozen)

    def __len__(self) -> int:
        return sum(len(pairs) for pairs in self.records.values())

    def partitions(self) -> list[TopicPartitionKey]:
        """The partitions, sorted."""
        return sorted(self.records)

    def json_lines(self) -> Iterable[str]:
        """The log as JSON lines (``{"topic", "partition", "offset", "value"}``, no newline)."""
        for (topic, partition), pairs in sorted(self.records.items()):
            for offset, value in pairs:
                yield json.dumps(
                    {"topic": topic, "partition": partition, "offset": offset, "value": value},
                    separators=(",", ":"),
                )

    def write(self, path: str | Path) -> None:
        """Write the log to ``path`` as JSON lines (see :meth:`json_lines`)."""
        with Path(path).open("w", encoding="utf-8") as out:
            for line in self.json_lines():
                out.write(line + "\n")


# -- loaders ---------------------------------------------------------------------------------


def load_produced_log(path: str | Path) -> ProducedLog:
    """Read a produced log written by :meth:`ProducedLog.write`.

    Raises:
        OSError: the file cannot be read.
        ValueError: a line is not a JSON object with ``topic``, ``partition``, ``offset``,
            ``value``, or an offset appears twice.
    """
    records: list[tuple[str, int, int, str]] = []
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                records.append(
                    (str(obj["topic"]), int(obj["partition"]), int(obj["offset"]), obj["value"])
                )
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{number}: not a produced record: {e}") from e
    return ProducedLog.from_records(records)


def _read_event_file(path: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        lines = f.read().split("\n")
    # A killed writer may leave a partial last line (no newline): that one is dropped.
    complete, tail = lines[:-1], lines[-1]
    for number, line in enumerate(complete, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{path}:{number}: not JSON: {e}") from e
        if not isinstance(event, dict) or "ts" not in event or "type" not in event:
            raise ValueError(f"{path}:{number}: not an event (needs 'ts' and 'type')")
        events.append(event)
    if tail.strip():
        try:
            event = json.loads(tail)
        except ValueError:
            return events
        if isinstance(event, dict) and "ts" in event and "type" in event:
            events.append(event)
    return events


def load_events(*paths: str | Path) -> list[dict[str, Any]]:
    """Read JSON-lines event files and merge them into one history in time order.

    Each file keeps its own order; files are interleaved by ``ts``. A partial last line (a
    writer killed mid-line) is dropped.

    Args:
        paths: event files, one per consumer process.

    Returns:
        The events, as dicts.

    Raises:
        OSError: a file cannot be read.
        ValueError: a complete line is not a JSON object with ``ts`` and ``type``.
    """
    per_file = [_read_event_file(Path(p)) for p in paths]
    return list(heapq.merge(*per_file, key=lambda e: float(e["ts"])))


# -- the checker -----------------------------------------------------------------------------


@dataclass(eq=False)
class _Partition:
    """The produced log of one partition, indexed."""

    offsets: list[int]
    values: list[str]
    index: dict[int, int]
    deliveries: list[int]
    last_epoch: list[int]
    last_ts: list[float]
    """When each record was last handed out (``last_epoch`` did it)."""
    max_delivered: int = -1

    @classmethod
    def build(cls, pairs: Sequence[tuple[int, str]]) -> _Partition:
        offsets = [o for o, _ in pairs]
        return cls(
            offsets=offsets,
            values=[v for _, v in pairs],
            index={o: i for i, o in enumerate(offsets)},
            deliveries=[0] * len(offsets),
            last_epoch=[-1] * len(offsets),
            last_ts=[math.nan] * len(offsets),
        )

    def first_index_at_or_after(self, offset: int) -> int:
        return bisect_left(self.offsets, offset)

    def records_between(self, low: int, high: int) -> list[int]:
        """Produced offsets in ``[low, high)``."""
        return self.offsets[bisect_left(self.offsets, low) : bisect_left(self.offsets, high)]


@dataclass(eq=False)
class _Epoch:
    id: int
    member: str
    incarnation: int
    session: Any
    generation: Any
    tp: TopicPartitionKey
    start: float
    claim_offset: int
    group_commit: int
    end: float = math.inf
    end_reason: str = ""
    last_index: int | None = None
    delivered_any: bool = False
    last_delivery_ts: float | None = None
    superseded: bool = False
    """Another incarnation was assigned the partition while this epoch was open."""

    @property
    def hold_end(self) -> float:
        """Until when the epoch holds the partition, for judging other members' deliveries."""
        if self.end_reason in _LOST_REASONS or self.superseded:
            last = self.last_delivery_ts if self.last_delivery_ts is not None else self.start
            return min(self.end, max(self.start, last))
        return self.end


@dataclass(eq=False)
class _Incarnation:
    member: str
    number: int
    first_ts: float
    last_ts: float
    session: Any = None
    suspended_since: float | None = None
    shut_down: bool = False
    open: dict[TopicPartitionKey, _Epoch] = field(default_factory=dict)


@dataclass(eq=False)
class _Delivery:
    ts: float
    epoch: _Epoch
    member: str
    first: int
    last: int


def _sample(offsets: Sequence[int]) -> tuple[int, ...]:
    return tuple(offsets[:_SAMPLE])


def _partition_entries(event: Mapping[str, Any], key: str) -> list[tuple[TopicPartitionKey, int]]:
    """``[((topic, partition), offset)]`` of an event's list field (offset -1 if absent)."""
    entries = []
    for entry in event.get(key) or ():
        offset = entry.get("offset")
        entries.append(
            ((str(entry["topic"]), int(entry["partition"])), -1 if offset is None else int(offset))
        )
    return entries


class _Checker:
    def __init__(
        self,
        produced: ProducedLog,
        session_timeout_ms: int,
        last_fault_ts: float | None,
        liveness_slack_s: float,
        commit_interval_ms: int | None = None,
        faults: Sequence[InjectedFault] | None = None,
    ) -> None:
        self.produced = produced
        self.partitions = {tp: _Partition.build(pairs) for tp, pairs in produced.records.items()}
        self.session_timeout_ms = session_timeout_ms
        self.session_timeout_s = session_timeout_ms / 1000
        self.last_fault_ts = last_fault_ts
        self.liveness_slack_s = liveness_slack_s
        self.commit_interval_ms = commit_interval_ms
        self.faults = None if faults is None else list(faults)
        self.expiries: list[SessionExpiry] = []
        self.handovers: list[Handover] = []
        self.restarts: list[ZookeeperRestart] = []
        # (previous epoch id, next epoch id): [(offset, previous hand-out time)] of the
        # records the next epoch delivered again after the previous one
        self._redelivered: dict[tuple[int, int], list[tuple[int, float]]] = {}
        self.anomalies: list[Anomaly] = []
        self.incarnations: list[_Incarnation] = []
        self.current: dict[str, _Incarnation] = {}
        self.epochs: list[_Epoch] = []
        self.deliveries: list[_Delivery] = []
        self.group_commit: dict[TopicPartitionKey, int] = {}
        self.commits = 0
        self.delivered = 0
        self.duplicates = 0
        self.allowed_duplicates = 0
        self.session_losses = 0
        self.suspensions = 0
        # per (epoch id, kind): [offsets] of disallowed duplicates, reported once per epoch
        self._bad_duplicates: dict[int, list[int]] = {}
        self._bad_duplicate_ts: dict[int, float] = {}

    def flag(self, kind: AnomalyKind, message: str, **details: Any) -> None:
        self.anomalies.append(Anomaly(kind, message, **details))

    # -- pass 1: in time order ---------------------------------------------------------------

    def incarnation_of(self, event: Mapping[str, Any], ts: float) -> _Incarnation:
        member = str(event.get("member", "?"))
        inc = self.current.get(member)
        if event.get("type") == "startup":
            if inc is not None:
                self.close_all(inc, inc.last_ts, "restarted")
            inc = _Incarnation(member, (inc.number + 1) if inc else 1, ts, ts)
            self.incarnations.append(inc)
            self.current[member] = inc
        elif inc is None:
            inc = _Incarnation(member, 0, ts, ts)
            self.incarnations.append(inc)
            self.current[member] = inc
        inc.last_ts = max(inc.last_ts, ts)
        return inc

    def close(self, inc: _Incarnation, tp: TopicPartitionKey, end: float, reason: str) -> None:
        epoch = inc.open.pop(tp, None)
        if epoch is not None:
            epoch.end = max(epoch.start, end)
            epoch.end_reason = reason

    def close_all(self, inc: _Incarnation, end: float, reason: str) -> None:
        for tp in list(inc.open):
            self.close(inc, tp, end, reason)

    def session_lost_end(self, inc: _Incarnation, ts: float) -> float:
        return inc.suspended_since if inc.suspended_since is not None else ts

    def run(self, events: Iterable[Mapping[str, Any]]) -> None:
        for event in events:
            ts = float(event["ts"])
            inc = self.incarnation_of(event, ts)
            kind = event.get("type")
            session = event.get("session")
            if kind != "revoked" and session is not None:
                if inc.session is not None and session != inc.session:
                    self.session_losses += 1
                    self.expiries.append(
                        SessionExpiry(inc.member, ts, inc.session, session, inc.suspended_since)
                    )
                    self.close_all(inc, self.session_lost_end(inc, ts), "session_lost")
                    inc.suspended_since = None
                inc.session = session
            if kind == "state":
                self.on_state(inc, event, ts)
            elif kind == "assigned":
                self.on_assigned(inc, event, ts)
            elif kind == "revoked":
                self.on_revoked(inc, event, ts)
            elif kind == "consumed":
                self.on_consumed(inc, event, ts)
            elif kind == "committed":
                self.on_committed(inc, event, ts)
            elif kind == "shutdown":
                inc.shut_down = True
                self.close_all(inc, ts, "shutdown")

    def on_state(self, inc: _Incarnation, event: Mapping[str, Any], ts: float) -> None:
        if event.get("state") == "suspended":
            if inc.suspended_since is None:
                self.suspensions += 1
                inc.suspended_since = ts
        elif event.get("state") not in ("closing", "closed"):
            # Same session (a change was handled before): the session resumed.
            inc.suspended_since = None

    def on_assigned(self, inc: _Incarnation, event: Mapping[str, Any], ts: float) -> None:
        for tp, offset in _partition_entries(event, "partitions"):
            self.close(inc, tp, ts, "reassigned")
            epoch = _Epoch(
                id=len(self.epochs),
                member=inc.member,
                incarnation=inc.number,
                session=event.get("session", inc.session),
                generation=event.get("generation"),
                tp=tp,
                start=ts,
                claim_offset=offset,
                group_commit=self.group_commit.get(tp, -1),
            )
            self.epochs.append(epoch)
            inc.open[tp] = epoch

    def on_revoked(self, inc: _Incarnation, event: Mapping[str, Any], ts: float) -> None:
        lost = event.get("reason") == "session_lost"
        end = self.session_lost_end(inc, ts) if lost else ts
        for tp, _ in _partition_entries(event, "partitions"):
            self.close(inc, tp, end, str(event.get("reason") or "revoked"))

    def on_consumed(self, inc: _Incarnation, event: Mapping[str, Any], ts: float) -> None:
        topic, partition = str(event["topic"]), int(event["partition"])
        tp = (topic, partition)
        low, high = int(event["min_offset"]), int(event["max_offset"])
        where: dict[str, Any] = {"topic": topic, "partition": partition, "member": inc.member}
        log = self.partitions.get(tp)
        if log is None or low not in log.index or high not in log.index or high < low:
            self.flag(
                AnomalyKind.INCONSISTENT,
                f"delivered offsets {low}..{high}, not a range of the produced log",
                ts=ts,
                offsets=(low, high),
                **where,
            )
            return
        first, last = log.index[low], log.index[high]
        expected = last - first + 1
        count = int(event.get("count", expected))
        if count != expected:
            kind = AnomalyKind.SKIP if count < expected else AnomalyKind.NONMONOTONIC
            self.flag(
                kind,
                f"one delivery of {low}..{high} holds {count} records, the produced log {expected}",
                ts=ts,
                offsets=(low, high),
                count=abs(expected - count),
                **where,
            )
        for name, index in (("first", first), ("last", last)):
            value = event.get(name)
            if value is not None and value != log.values[index]:
                self.flag(
                    AnomalyKind.INCONSISTENT,
                    f"delivered {value!r} at offset {log.offsets[index]}, "
                    f"produced {log.values[index]!r}",
                    ts=ts,
                    offsets=(log.offsets[index],),
                    **where,
                )
        # ``handed_out_by``: the latest the records can have been handed out (the end of the
        # session lease they were handed out under); the event itself may be written later,
        # by a member frozen in between.
        delivered = min(ts, float(event.get("handed_out_by", ts)))
        epoch = inc.open.get(tp)
        if epoch is None:
            self.flag(
                AnomalyKind.UNOWNED_DELIVERY,
                f"delivered {low}..{high} without owning the partition",
                ts=ts,
                offsets=(low, high),
                count=expected,
                **where,
            )
        else:
            self.check_continuity(epoch, log, first, last, ts, where)
            epoch.last_delivery_ts = delivered
            self.deliveries.append(_Delivery(delivered, epoch, inc.member, low, high))
        self.count_deliveries(epoch, log, first, last, ts, delivered)

    def check_continuity(
        self,
        epoch: _Epoch,
        log: _Partition,
        first: int,
        last: int,
        ts: float,
        where: dict[str, Any],
    ) -> None:
        if epoch.last_index is None:
            start = self.claim_start(epoch)
            expected = log.first_index_at_or_after(start) if start >= 0 else 0
            if first > expected:
                skipped = log.offsets[expected:first]
                self.flag(
                    AnomalyKind.HANDOVER_GAP,
                    f"new owner (generation {epoch.generation}) started at offset "
                    f"{log.offsets[first]}, but claimed at offset {start}: "
                    f"{len(skipped)} records skipped",
                    ts=ts,
                    offsets=_sample(skipped),
                    count=len(skipped),
                    **where,
                )
        else:
            delta = first - epoch.last_index
            if delta <= 0:
                self.flag(
                    AnomalyKind.NONMONOTONIC,
                    f"delivered from offset {log.offsets[first]} after having delivered up to "
                    f"{log.offsets[epoch.last_index]} in the same epoch",
                    ts=ts,
                    offsets=(log.offsets[first], log.offsets[epoch.last_index]),
                    count=1 - delta,
                    **where,
                )
            elif delta > 1:
                skipped = log.offsets[epoch.last_index + 1 : first]
                self.flag(
                    AnomalyKind.SKIP,
                    f"delivered from offset {log.offsets[first]} after "
                    f"{log.offsets[epoch.last_index]}: {len(skipped)} records skipped",
                    ts=ts,
                    offsets=_sample(skipped),
                    count=len(skipped),
                    **where,
                )
        epoch.last_index = last
        epoch.delivered_any = True

    @staticmethod
    def claim_start(epoch: _Epoch) -> int:
        """The offset an epoch claimed at (-1: none committed, the log's start)."""
        return epoch.claim_offset if epoch.claim_offset >= 0 else epoch.group_commit

    def count_deliveries(
        self,
        epoch: _Epoch | None,
        log: _Partition,
        first: int,
        last: int,
        ts: float,
        delivered: float,
    ) -> None:
        epoch_id = epoch.id if epoch is not None else -1
        floor = epoch.group_commit if epoch is not None else -1
        deliveries, last_epoch, offsets = log.deliveries, log.last_epoch, log.offsets
        last_ts = log.last_ts
        for i in range(first, last + 1):
            if deliveries[i]:
                self.duplicates += 1
                previous = last_epoch[i]
                if epoch is not None and previous != epoch_id:
                    if offsets[i] >= floor:
                        self.allowed_duplicates += 1
                    else:
                        self._bad_duplicates.setdefault(epoch_id, []).append(offsets[i])
                        self._bad_duplicate_ts.setdefault(epoch_id, ts)
                    if previous >= 0:
                        self._redelivered.setdefault((previous, epoch_id), []).append(
                            (offsets[i], last_ts[i])
                        )
            deliveries[i] += 1
            last_epoch[i] = epoch_id
            last_ts[i] = delivered
        self.delivered += last - first + 1
        log.max_delivered = max(log.max_delivered, last)

    def on_committed(self, inc: _Incarnation, event: Mapping[str, Any], ts: float) -> None:
        for tp, offset in _partition_entries(event, "offsets"):
            self.commits += 1
            where: dict[str, Any] = {"topic": tp[0], "partition": tp[1], "member": inc.member}
            previous = self.group_commit.get(tp)
            if previous is not None and offset < previous:
                self.flag(
                    AnomalyKind.COMMIT_DECREASED,
                    f"committed {offset} after the group had committed {previous}",
                    ts=ts,
                    offsets=(offset, previous),
                    **where,
                )
            self.group_commit[tp] = offset
            epoch = inc.open.get(tp)
            log = self.partitions.get(tp)
            if epoch is None:
                self.flag(
                    AnomalyKind.COMMIT_AHEAD,
                    f"committed {offset} without owning the partition",
                    ts=ts,
                    offsets=(offset,),
                    **where,
                )
                continue
            if log is None:
                continue
            if epoch.last_index is not None:
                base = log.offsets[epoch.last_index] + 1
            else:
                start = self.claim_start(epoch)
                base = start if start >= 0 else (log.offsets[0] if log.offsets else 0)
            undelivered = log.records_between(base, offset)
            if undelivered:
                self.flag(
                    AnomalyKind.COMMIT_AHEAD,
                    f"committed {offset}, past {len(undelivered)} records this epoch has not "
                    f"delivered (from offset {undelivered[0]})",
                    ts=ts,
                    offsets=_sample(undelivered),
                    count=len(undelivered),
                    **where,
                )

    # -- pass 2: whole-history rules ---------------------------------------------------------

    def finish(self) -> None:
        for inc in self.incarnations:
            if not inc.shut_down:
                self.close_all(inc, inc.last_ts, "crashed")
        for epoch_id, offsets in self._bad_duplicates.items():
            epoch = self.epochs[epoch_id]
            offsets.sort()
            self.flag(
                AnomalyKind.DUPLICATE,
                f"{len(offsets)} records delivered again below the group commit "
                f"{epoch.group_commit} found at the claim (generation {epoch.generation})",
                topic=epoch.tp[0],
                partition=epoch.tp[1],
                member=epoch.member,
                ts=self._bad_duplicate_ts[epoch_id],
                offsets=_sample(offsets),
                count=len(offsets),
            )
        self.check_ownership()
        self.check_lost()
        if self.last_fault_ts is not None:
            self.check_liveness(self.last_fault_ts)
        self.check_handovers()
        if self.faults is not None:
            self.check_zookeeper_restarts(self.faults)

    def check_ownership(self) -> None:
        by_tp: dict[TopicPartitionKey, list[_Epoch]] = {}
        for epoch in self.epochs:
            by_tp.setdefault(epoch.tp, []).append(epoch)
        for epochs in by_tp.values():
            for epoch in epochs:
                epoch.superseded = any(
                    epoch.start < other.start < epoch.end
                    and (other.member, other.incarnation) != (epoch.member, epoch.incarnation)
                    for other in epochs
                )
        overlaps: dict[tuple[int, int], list[_Delivery]] = {}
        for d in self.deliveries:
            epoch = d.epoch
            where: dict[str, Any] = {"topic": epoch.tp[0], "partition": epoch.tp[1]}
            if d.ts > epoch.end:
                self.flag(
                    AnomalyKind.UNOWNED_DELIVERY,
                    f"delivered {d.first}..{d.last} {d.ts - epoch.end:.3f} s after its "
                    f"ownership ended ({epoch.end_reason})",
                    member=d.member,
                    ts=d.ts,
                    offsets=(d.first, d.last),
                    **where,
                )
            for other in by_tp[epoch.tp]:
                if (other.member, other.incarnation) == (epoch.member, epoch.incarnation):
                    continue
                if other.start <= d.ts <= other.hold_end:
                    overlaps.setdefault((epoch.id, other.id), []).append(d)
        for (epoch_id, other_id), ds in overlaps.items():
            epoch, other = self.epochs[epoch_id], self.epochs[other_id]
            self.flag(
                AnomalyKind.OWNERSHIP_OVERLAP,
                f"{len(ds)} deliveries ({ds[0].first}..{ds[-1].last}) while {other.member} "
                f"(incarnation {other.incarnation}, generation {other.generation}) held the "
                f"partition ({other.start:.3f} to {other.hold_end:.3f}, {other.end_reason})",
                topic=epoch.tp[0],
                partition=epoch.tp[1],
                member=epoch.member,
                ts=ds[0].ts,
                offsets=(ds[0].first, ds[-1].last),
                count=len(ds),
            )

    def check_lost(self) -> None:
        for (topic, partition), log in sorted(self.partitions.items()):
            missing = [o for o, n in zip(log.offsets, log.deliveries, strict=True) if not n]
            if not missing:
                continue
            top = log.offsets[log.max_delivered] if log.max_delivered >= 0 else -1
            below = sum(1 for o in missing if o < top)
            self.flag(
                AnomalyKind.LOST,
                f"{len(missing)} produced records never delivered ({below} below the highest "
                f"delivered offset {top}, {len(missing) - below} in the tail)",
                topic=topic,
                partition=partition,
                offsets=_sample(missing),
                count=len(missing),
            )

    def check_liveness(self, fault_ts: float) -> None:
        deadline = fault_ts + self.session_timeout_s + self.liveness_slack_s
        for tp in sorted(self.partitions):
            owners = [e for e in self.epochs if e.tp == tp and e.end > fault_ts]
            if any(e.start <= deadline for e in owners):
                continue
            first = min((e.start for e in owners), default=None)
            when = f"first at {first - fault_ts:.1f} s" if first is not None else "never"
            self.flag(
                AnomalyKind.LIVENESS,
                f"not owned within {deadline - fault_ts:.1f} s of the last fault ({when})",
                topic=tp[0],
                partition=tp[1],
                ts=deadline,
            )

    def check_handovers(self) -> None:
        by_tp: dict[TopicPartitionKey, list[_Epoch]] = {}
        for epoch in self.epochs:
            by_tp.setdefault(epoch.tp, []).append(epoch)
        predecessor: dict[int, _Epoch] = {}
        for epochs in by_tp.values():
            epochs.sort(key=lambda e: (e.start, e.id))
            for before, after in zip(epochs, epochs[1:], strict=False):
                predecessor[after.id] = before
        with_duplicates = {next_id for _, next_id in self._redelivered}
        handovers = [
            self.handover(self.epochs[prev_id], self.epochs[next_id], pairs)
            for (prev_id, next_id), pairs in self._redelivered.items()
        ]
        handovers.extend(
            self.handover(before, self.epochs[after_id], [])
            for after_id, before in predecessor.items()
            if after_id not in with_duplicates
        )
        handovers.sort(key=lambda h: (h.ts, h.topic, h.partition, h.previous))
        self.handovers = handovers
        for h in handovers:
            if not h.exceeded:
                continue
            assert h.bound_s is not None and self.commit_interval_ms is not None
            self.flag(
                AnomalyKind.DUPLICATE_WINDOW_EXCEEDED,
                f"{h.next} claimed the partition from {h.previous} after {h.fault_label()} "
                f"and delivered again {h.duplicates} records "
                f"{h.previous} had handed out over {h.window_s:.3f} s; the bound for "
                f"{h.fault_kind} is {h.bound_s:.3f} s (C={self.commit_interval_ms / 1000:g} s, "
                f"T={self.session_timeout_s:g} s)",
                topic=h.topic,
                partition=h.partition,
                member=h.previous,
                ts=h.ts,
                offsets=h.offsets,
                count=h.duplicates,
            )

    def handover(
        self, previous: _Epoch, nxt: _Epoch, pairs: Sequence[tuple[int, float]]
    ) -> Handover:
        times = [t for _, t in pairs if not math.isnan(t)]
        fault = self.fault_of(previous, nxt.start)
        bound = None
        if fault is not None and self.commit_interval_ms is not None:
            bound = duplicate_window_bound_s(
                fault.kind, self.commit_interval_ms, self.session_timeout_ms
            )
        return Handover(
            topic=nxt.tp[0],
            partition=nxt.tp[1],
            previous=previous.member,
            next=nxt.member,
            ts=nxt.start,
            duplicates=len(pairs),
            window_s=max(times) - min(times) if times else 0.0,
            offsets=_sample(sorted(o for o, _ in pairs)),
            fault_kind=fault.kind if fault is not None else None,
            fault_number=fault.number if fault is not None else None,
            bound_s=bound,
        )

    def fault_of(self, previous: _Epoch, at: float) -> InjectedFault | None:
        """The fault a hand-over at ``at`` from ``previous`` is judged by (module docstring)."""
        if not self.faults:
            return None
        # An epoch lost with its session ended at the suspension that began the loss: a fault
        # that began after it did not end the epoch.
        lost_at = previous.end if previous.end_reason == "session_lost" else math.inf
        candidates = [
            f
            for f in self.faults
            if f.hits(previous.member)
            and f.started_ts < at
            and f.ended_ts >= previous.start
            and f.started_ts <= lost_at
        ]
        if not candidates:
            return None
        last = max(candidates, key=lambda f: f.started_ts)
        in_effect = [last] + [
            f for f in candidates if f is not last and f.started_ts <= last.started_ts <= f.ended_ts
        ]
        if self.commit_interval_ms is None:
            return last
        c, t = self.commit_interval_ms, self.session_timeout_ms
        unbounded = [f for f in in_effect if duplicate_window_bound_s(f.kind, c, t) is None]
        if unbounded:
            return max(unbounded, key=lambda f: f.started_ts)
        return max(
            in_effect,
            key=lambda f: (duplicate_window_bound_s(f.kind, c, t) or 0.0, f.started_ts),
        )

    def check_zookeeper_restarts(self, faults: Sequence[InjectedFault]) -> None:
        t = self.session_timeout_s
        restarts = sorted(
            (f for f in faults if f.kind == _ZOOKEEPER_RESTART), key=lambda f: f.started_ts
        )
        for r in restarts:
            short = r.downtime_s < t / 2
            window_end = r.ended_ts + 2 * t
            expired = [x for x in self.expiries if r.started_ts <= x.ts <= window_end]
            unexplained = [x for x in expired if not self.expiry_explained(x, r, faults)]
            self.restarts.append(
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
            for x in unexplained:
                self.flag(
                    AnomalyKind.SESSION_EXPIRED_BY_SHORT_ZOOKEEPER_RESTART,
                    f"session {x.old_session} was replaced by {x.new_session} "
                    f"{x.ts - r.started_ts:.1f} s after {r.label()} began; ZooKeeper was down "
                    f"{r.downtime_s:.1f} s, less than T/2 = {t / 2:g} s: no session may expire",
                    member=x.member,
                    ts=x.ts,
                )

    def expiry_explained(
        self, expiry: SessionExpiry, restart: InjectedFault, faults: Sequence[InjectedFault]
    ) -> bool:
        """Whether a fault on the member other than ``restart`` can have ended its session."""
        t = self.session_timeout_s
        return any(
            f is not restart
            and f.hits(expiry.member)
            and (
                f.kind in _SESSION_ENDING
                or (f.kind == _ZOOKEEPER_RESTART and f.downtime_s >= t / 2)
            )
            and f.started_ts <= expiry.ts
            and f.ended_ts >= restart.started_ts - t
            for f in faults
        )

    def result(self) -> CheckResult:
        distinct = sum(1 for log in self.partitions.values() for n in log.deliveries if n)
        produced = len(self.produced)
        return CheckResult(
            anomalies=list(self.anomalies),
            produced=produced,
            delivered=self.delivered,
            distinct_delivered=distinct,
            duplicates=self.duplicates,
            allowed_duplicates=self.allowed_duplicates,
            lost=produced - distinct,
            commits=self.commits,
            epochs=len(self.epochs),
            incarnations=len(self.incarnations),
            crashes=sum(1 for inc in self.incarnations if not inc.shut_down),
            session_losses=self.session_losses,
            suspensions=self.suspensions,
            handovers=tuple(self.handovers),
            session_expiries=tuple(self.expiries),
            zookeeper_restarts=tuple(self.restarts),
        )


def check_history(
    produced_log: ProducedLog | Mapping[TopicPartitionKey, Sequence[tuple[int, str | bytes]]],
    events: Iterable[Mapping[str, Any]],
    *,
    session_timeout_ms: int,
    last_fault_ts: float | None = None,
    liveness_slack_s: float = 5,
    commit_interval_ms: int | None = None,
    faults: Sequence[InjectedFault] | None = None,
) -> CheckResult:
    """Check a history of a consumer group against the produced log.

    Pure: the same inputs give the same result. The rules are in the module docstring.

    Args:
        produced_log: what was produced and acknowledged, as a :class:`ProducedLog` or
            ``{(topic, partition): [(offset, value), ...]}``.
        events: every member's events (dicts as written by the verifiable consumer), in time
            order, as :func:`load_events` returns them. Events of other topics are checked
            as records absent from the produced log (``inconsistent``).
        session_timeout_ms: ``zookeeper.session.timeout.ms`` of the members (``T``), for
            liveness and the fault-log rules.
        last_fault_ts: ``time.time()`` of the last fault (kill, expiry, ...) once it was
            done; ``None`` skips the liveness rule.
        liveness_slack_s: seconds allowed beyond the session timeout (rebalance backoff,
            retries, process start), default 5.
        commit_interval_ms: how often the members commit (``auto.commit.interval.ms``, or
            the verifiable consumer's ``--commit-interval-ms``: ``C``); with ``faults``, it
            enables ``duplicate_window_exceeded``. Default ``None``: not judged.
        faults: the faults injected (:class:`InjectedFault`), in any order; enables
            ``session_expired_by_short_zookeeper_restart`` and gives each hand-over its
            fault kind. Default ``None``: neither (the history is checked as without a
            nemesis log; an empty list means "no fault was injected").

    Returns:
        The anomalies found and the history's counts.

    Raises:
        KeyError: an event lacks a field its type requires (``consumed`` needs ``topic``,
            ``partition``, ``min_offset``, ``max_offset``; partition entries need ``topic``
            and ``partition``).
        ValueError: a field has the wrong type, or the mapping form of the log repeats an
            offset.
    """
    if not isinstance(produced_log, ProducedLog):
        produced_log = ProducedLog.from_records(
            (topic, partition, offset, value)
            for (topic, partition), pairs in produced_log.items()
            for offset, value in pairs
        )
    checker = _Checker(
        produced_log,
        session_timeout_ms,
        last_fault_ts,
        liveness_slack_s,
        commit_interval_ms=commit_interval_ms,
        faults=faults,
    )
    checker.run(events)
    checker.finish()
    return checker.result()
