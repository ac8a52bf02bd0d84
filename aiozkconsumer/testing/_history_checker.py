"""The history checker itself (pure): one pass over the events in time order, then the rules
that need the whole history.

The first pass replays the members' events (:meth:`Checker.run`): it tracks incarnations and
their ownership epochs, indexes each delivery into the produced log and flags what one event
shows (``inconsistent``, ``nonmonotonic``, ``skip``, ``handover_gap``, ``commit_decreased``,
``commit_ahead``, deliveries outside the member's own ownership). The second pass
(:meth:`Checker.finish`) closes what is still open and judges what needs every epoch:
``duplicate``, ``ownership_overlap``, ``lost``, ``liveness`` and the hand-overs, with the fault
log's rules from :mod:`aiozkconsumer.testing._history_faults`. The rules are stated in
:mod:`aiozkconsumer.testing.history`'s docstring; :func:`~aiozkconsumer.testing.history.
check_history` is the entry point.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiozkconsumer.testing._history_epochs import (
    Delivery,
    Epoch,
    Incarnation,
    PartitionLog,
    partition_entries,
)
from aiozkconsumer.testing._history_faults import (
    InjectedFault,
    duplicate_window_bound_s,
    handover_fault,
    judge_zookeeper_restarts,
)
from aiozkconsumer.testing._history_files import ProducedLog, TopicPartitionKey
from aiozkconsumer.testing._history_results import (
    Anomaly,
    AnomalyKind,
    CheckResult,
    Handover,
    SessionExpiry,
)

if TYPE_CHECKING:
    from aiozkconsumer.testing._history_results import ZookeeperRestart

__all__ = ["Checker"]

_SAMPLE = 20
"""At most this many offsets are listed in one anomaly."""


def _sample(offsets: Sequence[int]) -> tuple[int, ...]:
    return tuple(offsets[:_SAMPLE])


def _outside(begin: float, end: float, windows: Sequence[tuple[float, float]]) -> float:
    """Seconds of ``[begin, end]`` outside the ``windows`` (sorted ``(start, end)`` pairs)."""
    total, at = 0.0, begin
    for w_start, w_end in windows:
        if w_end <= at:
            continue
        if w_start >= end:
            break
        total += max(0.0, w_start - at)
        at = max(at, w_end)
        if at >= end:
            return total
    return total + max(0.0, end - at)


class Checker:
    """The state of one check: built from the inputs, fed the events, then finished."""

    def __init__(
        self,
        produced: ProducedLog,
        session_timeout_ms: int,
        last_fault_ts: float | None,
        liveness_slack_s: float,
        commit_interval_ms: int | None = None,
        faults: Sequence[InjectedFault] | None = None,
        acked_at: Mapping[TopicPartitionKey, Mapping[int, float]] | None = None,
        stall_bound_s: float | None = None,
        committed_at: Mapping[TopicPartitionKey, Mapping[int, float]] | None = None,
    ) -> None:
        self.produced = produced
        self.partitions = {tp: PartitionLog.build(pairs) for tp, pairs in produced.records.items()}
        self.aborted = {
            tp: [o for o, _ in pairs] for tp, pairs in produced.aborted.items() if pairs
        }
        self.committed_at = committed_at
        self.session_timeout_ms = session_timeout_ms
        self.session_timeout_s = session_timeout_ms / 1000
        self.last_fault_ts = last_fault_ts
        self.liveness_slack_s = liveness_slack_s
        self.commit_interval_ms = commit_interval_ms
        self.faults = None if faults is None else list(faults)
        self.acked_at = acked_at
        self.stall_bound_s = (
            self.session_timeout_s + liveness_slack_s if stall_bound_s is None else stall_bound_s
        )
        self.expiries: list[SessionExpiry] = []
        self.handovers: list[Handover] = []
        self.restarts: list[ZookeeperRestart] = []
        # (previous epoch id, next epoch id): [(offset, previous hand-out time)] of the
        # records the next epoch delivered again after the previous one
        self._redelivered: dict[tuple[int, int], list[tuple[int, float]]] = {}
        self.anomalies: list[Anomaly] = []
        self.incarnations: list[Incarnation] = []
        self.current: dict[str, Incarnation] = {}
        self.epochs: list[Epoch] = []
        self.deliveries: list[Delivery] = []
        self.group_commit: dict[TopicPartitionKey, int] = {}
        self.group_commit_ts: dict[TopicPartitionKey, float] = {}
        """When each partition's group commit was answered (its event's ``ts``)."""
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

    def flag_records(
        self, kind: AnomalyKind, message: str, offsets: Sequence[int], **details: Any
    ) -> None:
        """Flag an anomaly about records: a sample of their ``offsets`` and their count."""
        self.flag(kind, message, offsets=_sample(offsets), count=len(offsets), **details)

    # -- pass 1: in time order ---------------------------------------------------------------

    def incarnation_of(self, event: Mapping[str, Any], ts: float) -> Incarnation:
        member = str(event.get("member", "?"))
        inc = self.current.get(member)
        if event.get("type") == "startup":
            if inc is not None:
                self.close_all(inc, inc.last_ts, "restarted")
            inc = Incarnation(member, (inc.number + 1) if inc else 1, ts, ts)
            self.incarnations.append(inc)
            self.current[member] = inc
        elif inc is None:
            inc = Incarnation(member, 0, ts, ts)
            self.incarnations.append(inc)
            self.current[member] = inc
        inc.last_ts = max(inc.last_ts, ts)
        return inc

    def close(self, inc: Incarnation, tp: TopicPartitionKey, end: float, reason: str) -> None:
        epoch = inc.open.pop(tp, None)
        if epoch is not None:
            epoch.end = max(epoch.start, end)
            epoch.end_reason = reason

    def close_all(self, inc: Incarnation, end: float, reason: str) -> None:
        for tp in list(inc.open):
            self.close(inc, tp, end, reason)

    def session_lost_end(self, inc: Incarnation, ts: float) -> float:
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

    def on_state(self, inc: Incarnation, event: Mapping[str, Any], ts: float) -> None:
        if event.get("state") == "suspended":
            if inc.suspended_since is None:
                self.suspensions += 1
                inc.suspended_since = ts
        elif event.get("state") not in ("closing", "closed"):
            # Same session (a change was handled before): the session resumed.
            inc.suspended_since = None

    def on_assigned(self, inc: Incarnation, event: Mapping[str, Any], ts: float) -> None:
        for tp, offset in partition_entries(event, "partitions"):
            self.close(inc, tp, ts, "reassigned")
            epoch = Epoch(
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

    def on_revoked(self, inc: Incarnation, event: Mapping[str, Any], ts: float) -> None:
        lost = event.get("reason") == "session_lost"
        end = self.session_lost_end(inc, ts) if lost else ts
        for tp, _ in partition_entries(event, "partitions"):
            self.close(inc, tp, end, str(event.get("reason") or "revoked"))

    def on_consumed(self, inc: Incarnation, event: Mapping[str, Any], ts: float) -> None:
        topic, partition = str(event["topic"]), int(event["partition"])
        tp = (topic, partition)
        low, high = int(event["min_offset"]), int(event["max_offset"])
        where: dict[str, Any] = {"topic": topic, "partition": partition, "member": inc.member}
        log = self.partitions.get(tp)
        count = int(event["count"]) if "count" in event else None
        in_range = log.records_between(low, high + 1) if log is not None else []
        aborted = self.aborted_between(tp, low, high)
        ends_aborted = bool(aborted) and (aborted[0] == low or aborted[-1] == high)
        if aborted and (ends_aborted or (count is not None and count > len(in_range))):
            read = len(aborted) if count is None else min(len(aborted), count - len(in_range))
            self.flag_records(
                AnomalyKind.ABORTED_READ,
                f"delivered {low}..{high} ({count} records): {max(read, 1)} of them of aborted "
                f"transactions ({len(aborted)} aborted in the range)",
                aborted,
                ts=ts,
                **where,
            )
            if count is not None and not ends_aborted:
                count = len(in_range)  # the rest is judged as if the aborted ones were skipped
        if log is None or low not in log.index or high not in log.index or high < low:
            if not ends_aborted:
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
        if count is None:
            count = expected
        if self.committed_at is not None:
            self.check_commit_order(tp, log, first, last, ts, where)
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
            self.deliveries.append(Delivery(delivered, epoch, inc.member, low, high))
        self.count_deliveries(epoch, log, first, last, ts, delivered)

    def aborted_between(self, tp: TopicPartitionKey, low: int, high: int) -> list[int]:
        """Offsets of aborted records of ``tp`` in ``[low, high]``."""
        offsets = self.aborted.get(tp)
        if not offsets or high < low:
            return []
        return offsets[bisect_left(offsets, low) : bisect_right(offsets, high)]

    def check_commit_order(
        self,
        tp: TopicPartitionKey,
        log: PartitionLog,
        first: int,
        last: int,
        ts: float,
        where: dict[str, Any],
    ) -> None:
        """``uncommitted_read``: records of a transaction delivered (by ``ts``, the event's
        time, at the latest) before the producer began committing it: a ``read_committed``
        reader handed out records past the last stable offset."""
        assert self.committed_at is not None
        begun = self.committed_at.get(tp)
        if not begun:
            return
        early = [
            o for o in log.offsets[first : last + 1] if (at := begun.get(o)) is not None and ts < at
        ]
        if early:
            self.flag_records(
                AnomalyKind.UNCOMMITTED_READ,
                f"delivered {len(early)} records of a transaction before its commit began "
                f"(from {begun[early[0]] - ts:.3f} s before)",
                early,
                ts=ts,
                **where,
            )

    def check_continuity(
        self,
        epoch: Epoch,
        log: PartitionLog,
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
                self.flag_records(
                    AnomalyKind.HANDOVER_GAP,
                    f"new owner (generation {epoch.generation}) started at offset "
                    f"{log.offsets[first]}, but claimed at offset {start}: "
                    f"{len(skipped)} records skipped",
                    skipped,
                    ts=ts,
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
                self.flag_records(
                    AnomalyKind.SKIP,
                    f"delivered from offset {log.offsets[first]} after "
                    f"{log.offsets[epoch.last_index]}: {len(skipped)} records skipped",
                    skipped,
                    ts=ts,
                    **where,
                )
        epoch.last_index = last
        epoch.delivered_any = True

    @staticmethod
    def claim_start(epoch: Epoch) -> int:
        """The offset an epoch claimed at (-1: none committed, the log's start)."""
        return epoch.claim_offset if epoch.claim_offset >= 0 else epoch.group_commit

    def count_deliveries(
        self,
        epoch: Epoch | None,
        log: PartitionLog,
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

    def on_committed(self, inc: Incarnation, event: Mapping[str, Any], ts: float) -> None:
        # When the commit was sent: it took effect between then and ``ts`` (its answer).
        sent = min(ts, float(event.get("sent_ts", ts)))
        for tp, offset in partition_entries(event, "offsets"):
            self.commits += 1
            where: dict[str, Any] = {"topic": tp[0], "partition": tp[1], "member": inc.member}
            previous = self.group_commit.get(tp)
            if previous is not None and offset < previous:
                if sent <= self.group_commit_ts.get(tp, -math.inf):
                    # Sent before the higher commit was answered (a member frozen with its
                    # request on the wire): it may have taken effect first, so it proves no
                    # regression, and the higher commit may be the one that stands.
                    continue
                self.flag(
                    AnomalyKind.COMMIT_DECREASED,
                    f"committed {offset} after the group had committed {previous}",
                    ts=ts,
                    offsets=(offset, previous),
                    **where,
                )
            self.group_commit[tp] = offset
            self.group_commit_ts[tp] = ts
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
                self.flag_records(
                    AnomalyKind.COMMIT_AHEAD,
                    f"committed {offset}, past {len(undelivered)} records this epoch has not "
                    f"delivered (from offset {undelivered[0]})",
                    undelivered,
                    ts=ts,
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
            self.flag_records(
                AnomalyKind.DUPLICATE,
                f"{len(offsets)} records delivered again below the group commit "
                f"{epoch.group_commit} found at the claim (generation {epoch.generation})",
                offsets,
                topic=epoch.tp[0],
                partition=epoch.tp[1],
                member=epoch.member,
                ts=self._bad_duplicate_ts[epoch_id],
            )
        self.check_ownership()
        self.check_lost()
        if self.last_fault_ts is not None:
            self.check_liveness(self.last_fault_ts)
        self.check_handovers()
        if self.faults is not None:
            self.check_zookeeper_restarts(self.faults)
        if self.acked_at is not None:
            self.check_stalls(self.acked_at)

    def check_ownership(self) -> None:
        by_tp: dict[TopicPartitionKey, list[Epoch]] = {}
        for epoch in self.epochs:
            by_tp.setdefault(epoch.tp, []).append(epoch)
        for epochs in by_tp.values():
            for epoch in epochs:
                epoch.superseded = any(
                    epoch.start < other.start < epoch.end
                    and (other.member, other.incarnation) != (epoch.member, epoch.incarnation)
                    for other in epochs
                )
        overlaps: dict[tuple[int, int], list[Delivery]] = {}
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
            self.flag_records(
                AnomalyKind.LOST,
                f"{len(missing)} produced records never delivered ({below} below the highest "
                f"delivered offset {top}, {len(missing) - below} in the tail)",
                missing,
                topic=topic,
                partition=partition,
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

    def check_stalls(self, acked_at: Mapping[TopicPartitionKey, Mapping[int, float]]) -> None:
        """``stalled``: an owner that hands out nothing of its partition for longer than the
        bound while a record of it waits (acknowledged, not yet handed out by this epoch).

        Each epoch is walked from its start through its deliveries to its end; in each gap the
        record waiting is the one after the epoch's last delivery (from the claim offset at
        first), waiting from its acknowledgement. Time inside a fault's window (from its
        injection to ``session timeout + liveness slack`` after its heal: the group
        rebalances and members restart then) does not count.
        """
        bound = self.stall_bound_s
        slack = self.session_timeout_s + self.liveness_slack_s
        excluded = sorted((f.started_ts, f.ended_ts + slack) for f in self.faults or ())
        by_epoch: dict[int, list[Delivery]] = {}
        for d in self.deliveries:
            by_epoch.setdefault(d.epoch.id, []).append(d)
        for epoch in self.epochs:
            log, acks = self.partitions.get(epoch.tp), acked_at.get(epoch.tp)
            if log is None or not acks:
                continue
            deliveries = sorted(by_epoch.get(epoch.id, ()), key=lambda d: d.ts)
            end = epoch.end
            if not math.isfinite(end):
                end = deliveries[-1].ts if deliveries else epoch.start
            # The gaps: (when it ended, the index waiting after it; None for the last).
            gaps: list[tuple[float, int | None]] = [
                (d.ts, log.index[d.last] + 1) for d in deliveries
            ]
            gaps.append((end, None))
            waiting = log.first_index_at_or_after(max(self.claim_start(epoch), 0))
            since = epoch.start
            worst: tuple[float, float, int] | None = None  # (stalled s, from, offset)
            for until, next_index in gaps:
                if waiting < len(log.offsets):
                    acked = acks.get(log.offsets[waiting])
                    if acked is not None:
                        begin = max(since, acked)
                        stalled = _outside(begin, until, excluded)
                        if stalled > bound and (worst is None or stalled > worst[0]):
                            worst = (stalled, begin, log.offsets[waiting])
                if next_index is not None:
                    waiting = max(waiting, next_index)
                since = max(since, until)
            if worst is not None:
                stalled, begin, offset = worst
                self.flag(
                    AnomalyKind.STALLED,
                    f"handed out nothing for {stalled:.1f} s (bound {bound:.1f} s) while offset "
                    f"{offset} waited, from {begin:.3f} (generation {epoch.generation})",
                    topic=epoch.tp[0],
                    partition=epoch.tp[1],
                    member=epoch.member,
                    ts=begin,
                    offsets=(offset,),
                )

    def check_handovers(self) -> None:
        by_tp: dict[TopicPartitionKey, list[Epoch]] = {}
        for epoch in self.epochs:
            by_tp.setdefault(epoch.tp, []).append(epoch)
        predecessor: dict[int, Epoch] = {}
        for epochs in by_tp.values():
            epochs.sort(key=lambda e: (e.start, e.id))
            for before, after in zip(epochs, epochs[1:], strict=False):
                predecessor[after.id] = before
        self._first_delivery: dict[int, float] = {}
        for d in self.deliveries:
            first = self._first_delivery.get(d.epoch.id)
            if first is None or d.ts < first:
                self._first_delivery[d.epoch.id] = d.ts
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

    def handover(self, previous: Epoch, nxt: Epoch, pairs: Sequence[tuple[int, float]]) -> Handover:
        times = [t for _, t in pairs if not math.isnan(t)]
        fault = self.fault_of(previous, nxt.start)
        bound = None
        if fault is not None and self.commit_interval_ms is not None:
            bound = duplicate_window_bound_s(
                fault.kind, self.commit_interval_ms, self.session_timeout_ms
            )
        first = self._first_delivery.get(nxt.id)
        last = previous.last_delivery_ts
        return Handover(
            gap_s=None if first is None or last is None else max(0.0, first - last),
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

    def fault_of(self, previous: Epoch, at: float) -> InjectedFault | None:
        """The fault a hand-over at ``at`` from ``previous`` is judged by (module docstring)."""
        # An epoch lost with its session ended at the suspension that began the loss (and a
        # Kafka member's, at the drop its fence caused): a fault that began after it did not
        # end the epoch.
        lost_at = previous.end if previous.end_reason in ("session_lost", "lost") else math.inf
        return handover_fault(
            self.faults,
            member=previous.member,
            began=previous.start,
            lost_at=lost_at,
            claimed=at,
            commit_interval_ms=self.commit_interval_ms,
            session_timeout_ms=self.session_timeout_ms,
        )

    def check_zookeeper_restarts(self, faults: Sequence[InjectedFault]) -> None:
        restarts, anomalies = judge_zookeeper_restarts(
            faults, self.expiries, self.session_timeout_ms
        )
        self.restarts.extend(restarts)
        self.anomalies.extend(anomalies)

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
