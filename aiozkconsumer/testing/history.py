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
writes unconditionally, §1c); it makes the next owner re-read committed records. A commit
whose ``sent_ts`` comes before the higher commit's event (it was on the wire, its member
frozen, when the higher one was answered) may have taken effect first: it is not flagged and
leaves the group commit as it was.

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

``stalled`` (a liveness rule within an epoch). Given ``acked_at`` (when each record was
acknowledged), an owner must not hand out nothing of its partition for longer than
``stall_bound_s`` (default ``T + liveness_slack_s``) while a record of it waits: acknowledged,
at or after the epoch's claim offset, and after its last delivery. Time inside a fault's window
(from its injection to ``T + liveness_slack_s`` after its heal) does not count. It catches a
healthy owner that stops handing out one partition while the others flow (a fetch loop holding
the partition back); one anomaly per epoch, its longest stall.

``aborted_read`` (Jepsen's ``:aborted-read``). Given a produced log with aborted records
(:attr:`ProducedLog.aborted`: the records of aborted transactions, which a member reading with
``isolation.level=read_committed`` must never hand out), a ``consumed`` event whose first or
last offset is an aborted record's, or whose ``count`` exceeds the committed records in its
range while aborted ones lie in it. The rest of the event is judged as if the aborted records
had been skipped. Offsets of aborted records are not records of the log: skipping them is no
``skip``, and ``lost`` never counts them.

``uncommitted_read`` (no read past an open transaction; Jepsen's ``:G1a``-style dirty read,
approximated). Given ``committed_at`` (when the producer began committing each transactional
record's transaction), a ``consumed`` event written before that moment delivered a record of a
transaction still open: a ``read_committed`` reader handed out records past the partition's
last stable offset. (Commit markers become visible after the commit began, so the rule never
flags a correct reader; it misses reads in the moment between the commit's start and its
markers.)

Per-partition monotonic offsets are ``nonmonotonic`` (within an epoch) and
``commit_decreased``; "read your committed" after a hand-over is ``handover_gap`` and
``duplicate`` (a new owner starts at the group commit it found, not after it nor below it).

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
timeout): ``C + ε``; ``zookeeper_link`` or ``zookeeper_restart``: ``C + D + ε``; the Kafka-mode
broker faults (``broker_link``, ``coordinator_kill``, ``leader_kill``, ``rolling_restart``):
``C + T + ε`` (no commit reaches the coordinator meanwhile, and the member's lease lets it hand
records out for at most ``0.8 T`` after its last answered heartbeat). Hand-overs after another
fault (``expire``, ZooKeeper mode's ``broker_restart``) or after none have no stated bound and
are listed, not judged.

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

Where the parts live
--------------------

This module states the rules and holds :func:`check_history`; the parts are private modules
next to it, each one job: ``_history_files`` (the produced log and the event files: the only
file I/O), ``_history_results`` (what a check reports), ``_history_epochs`` (the indexed
produced log, ownership epochs and their holding), ``_history_checker`` (the replay in time
order and the whole-history rules) and ``_history_faults`` (the rules that need the fault log).
Import every name from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aiozkconsumer.testing._history_checker import Checker
from aiozkconsumer.testing._history_faults import (
    DUPLICATE_WINDOW_TOLERANCE_S,
    InjectedFault,
    duplicate_window_bound_s,
)
from aiozkconsumer.testing._history_files import (
    ProducedLog,
    TopicPartitionKey,
    load_events,
    load_produced_log,
)
from aiozkconsumer.testing._history_results import (
    Anomaly,
    AnomalyKind,
    CheckResult,
    Handover,
    SessionExpiry,
    ZookeeperRestart,
)

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


def check_history(
    produced_log: ProducedLog | Mapping[TopicPartitionKey, Sequence[tuple[int, str | bytes]]],
    events: Iterable[Mapping[str, Any]],
    *,
    session_timeout_ms: int,
    last_fault_ts: float | None = None,
    liveness_slack_s: float = 5,
    commit_interval_ms: int | None = None,
    faults: Sequence[InjectedFault] | None = None,
    acked_at: Mapping[TopicPartitionKey, Mapping[int, float]] | None = None,
    stall_bound_s: float | None = None,
    committed_at: Mapping[TopicPartitionKey, Mapping[int, float]] | None = None,
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
        acked_at: ``{(topic, partition): {offset: time.time() of its acknowledgement}}``;
            enables ``stalled`` (records without a time are not judged). Default ``None``.
        stall_bound_s: how long an owner may hand out nothing of its partition while a
            record of it waits, outside the faults' windows; default the session timeout
            plus ``liveness_slack_s``.
        committed_at: ``{(topic, partition): {offset: time.time() when the producer began
            committing the record's transaction}}``; enables ``uncommitted_read``. Default
            ``None``.

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
    checker = Checker(
        produced_log,
        session_timeout_ms,
        last_fault_ts,
        liveness_slack_s,
        commit_interval_ms=commit_interval_ms,
        faults=faults,
        acked_at=acked_at,
        stall_bound_s=stall_bound_s,
        committed_at=committed_at,
    )
    checker.run(events)
    checker.finish()
    return checker.result()
