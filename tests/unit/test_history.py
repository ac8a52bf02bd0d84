"""The history checker on small synthetic histories: one flagged and one clean case per rule.

As Jepsen's ``kafka_test.clj``: the checker is tested on hand-built histories before it is
trusted on real ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aiozkconsumer.testing.history import (
    AnomalyKind,
    CheckResult,
    InjectedFault,
    ProducedLog,
    check_history,
    duplicate_window_bound_s,
    load_events,
    load_produced_log,
)

T = "t"
S1, S2 = "0x1", "0x2"
TIMEOUT_MS = 3000


def produced(sizes: dict[int, int]) -> ProducedLog:
    """Partitions with offsets ``0..n-1`` and values ``"<p>:<offset>"``."""
    return ProducedLog.from_records(
        (T, p, o, f"{p}:{o}") for p, n in sizes.items() for o in range(n)
    )


def ev(
    ts: float, member: str, kind: str, session: str | None = S1, **fields: Any
) -> dict[str, Any]:
    return {"ts": ts, "member": member, "type": kind, "session": session, **fields}


def startup(ts: float, member: str) -> dict[str, Any]:
    return ev(ts, member, "startup", session=None)


def assigned(
    ts: float, member: str, claims: dict[int, int], session: str = S1, generation: int = 1
) -> dict[str, Any]:
    parts = [{"topic": T, "partition": p, "offset": o} for p, o in claims.items()]
    return ev(ts, member, "assigned", session, partitions=parts, generation=generation)


def revoked(
    ts: float, member: str, partitions: list[int], reason: str = "rebalance", session: str = S1
) -> dict[str, Any]:
    parts = [{"topic": T, "partition": p} for p in partitions]
    return ev(ts, member, "revoked", session, partitions=parts, reason=reason)


def consumed(
    ts: float,
    member: str,
    partition: int,
    low: int,
    high: int,
    *,
    count: int | None = None,
    session: str = S1,
) -> dict[str, Any]:
    return ev(
        ts,
        member,
        "consumed",
        session,
        topic=T,
        partition=partition,
        min_offset=low,
        max_offset=high,
        count=high - low + 1 if count is None else count,
        first=f"{partition}:{low}",
        last=f"{partition}:{high}",
    )


def committed(ts: float, member: str, offsets: dict[int, int], session: str = S1) -> dict[str, Any]:
    entries = [{"topic": T, "partition": p, "offset": o} for p, o in offsets.items()]
    return ev(ts, member, "committed", session, offsets=entries, reason="interval")


def state(ts: float, member: str, value: str, session: str = S1) -> dict[str, Any]:
    return ev(ts, member, "state", session, state=value)


def shutdown(ts: float, member: str, session: str = S1) -> dict[str, Any]:
    return ev(ts, member, "shutdown", session)


def check(log: ProducedLog, events: list[dict[str, Any]], **kw: Any) -> CheckResult:
    kw.setdefault("session_timeout_ms", TIMEOUT_MS)
    return check_history(log, sorted(events, key=lambda e: e["ts"]), **kw)


def kinds(result: CheckResult) -> set[AnomalyKind]:
    return {a.kind for a in result.anomalies}


def only(result: CheckResult, kind: AnomalyKind) -> None:
    assert kinds(result) == {kind}, result.summary()


# -- clean histories -------------------------------------------------------------------------


def test_single_member_consuming_everything_is_clean() -> None:
    log = produced({0: 10, 1: 5})
    result = check(
        log,
        [
            startup(0, "a"),
            assigned(1, "a", {0: -1, 1: -1}),
            consumed(2, "a", 0, 0, 4),
            consumed(3, "a", 1, 0, 4),
            committed(4, "a", {0: 5, 1: 5}),
            consumed(5, "a", 0, 5, 9),
            committed(6, "a", {0: 10, 1: 5}),
            revoked(7, "a", [0, 1], reason="shutdown"),
            shutdown(8, "a"),
        ],
    )
    assert result.ok, result.summary()
    assert (result.produced, result.delivered, result.distinct_delivered) == (15, 15, 15)
    assert (result.duplicates, result.lost, result.commits) == (0, 0, 4)
    assert (result.epochs, result.incarnations, result.crashes) == (2, 1, 0)


def test_clean_rebalance_handover_is_clean() -> None:
    log = produced({0: 10, 1: 10})
    result = check(
        log,
        [
            startup(0, "a"),
            assigned(1, "a", {0: -1, 1: -1}),
            consumed(2, "a", 0, 0, 5),
            consumed(2.5, "a", 1, 0, 3),
            startup(3, "b"),
            # a commits what it delivered and gives partition 1 up; b claims at that commit
            committed(4, "a", {1: 4}),
            revoked(4.1, "a", [1]),
            assigned(4.5, "b", {1: 4}, generation=1),
            consumed(5, "b", 1, 4, 9),
            consumed(5.5, "a", 0, 6, 9),
            committed(6, "b", {1: 10}),
            committed(6, "a", {0: 10}),
        ],
    )
    assert result.ok, result.summary()
    assert result.duplicates == 0


def test_redelivery_after_a_crash_is_allowed() -> None:
    """a delivers 0..9 but commits 5, then dies; b starts at 5: 5..9 twice is at-least-once."""
    log = produced({0: 20})
    result = check(
        log,
        [
            startup(0, "a"),
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 9),
            committed(3, "a", {0: 5}),
            startup(3.5, "b"),
            assigned(8, "b", {0: 5}),
            consumed(9, "b", 0, 5, 19),
            committed(10, "b", {0: 20}),
            revoked(11, "b", [0], reason="shutdown"),
            shutdown(11, "b"),
        ],
        last_fault_ts=4,
    )
    assert result.ok, result.summary()
    assert (result.duplicates, result.allowed_duplicates, result.lost) == (5, 5, 0)
    assert (result.crashes, result.faults_seen) == (1, 1)


def test_redelivery_after_an_unlogged_commit_is_allowed() -> None:
    """a wrote commit 8 but was killed before logging it: b claims at 8 (its own report)."""
    log = produced({0: 12})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 9),
            committed(3, "a", {0: 4}),
            assigned(8, "b", {0: 8}),
            consumed(9, "b", 0, 8, 11),
        ],
    )
    assert result.ok, result.summary()
    assert result.allowed_duplicates == 2


def test_expired_member_hands_over_after_its_suspension() -> None:
    """a is suspended at 5, its session expires; b claims at 6; a comes back with S2."""
    log = produced({0: 20, 1: 10})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            assigned(1, "b", {1: -1}, session="0x9"),
            consumed(2, "a", 0, 0, 9),
            committed(3, "a", {0: 10}),
            consumed(4, "a", 0, 10, 11),
            state(5, "a", "suspended"),
            assigned(6, "b", {0: 10}, session="0x9", generation=2),
            consumed(6.5, "b", 0, 10, 19, session="0x9"),
            consumed(6.6, "b", 1, 0, 9, session="0x9"),
            revoked(7, "a", [0], reason="session_lost", session=S1),
            state(7, "a", "rebalancing", session=S2),
            state(8, "a", "running", session=S2),
        ],
    )
    assert result.ok, result.summary()
    assert (result.session_losses, result.suspensions) == (1, 1)
    assert result.allowed_duplicates == 2


def test_session_change_without_revoke_ends_ownership_at_the_suspension() -> None:
    log = produced({0: 10})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 4),
            committed(2.5, "a", {0: 5}),
            state(3, "a", "suspended"),
            assigned(4, "b", {0: 5}, session="0x9"),
            consumed(5, "b", 0, 5, 9, session="0x9"),
            state(6, "a", "rebalancing", session=S2),
        ],
    )
    assert result.ok, result.summary()
    assert result.session_losses == 1


def test_resumed_session_keeps_ownership() -> None:
    log = produced({0: 10})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 4),
            state(3, "a", "suspended"),
            state(4, "a", "running"),
            consumed(5, "a", 0, 5, 9),
        ],
    )
    assert result.ok, result.summary()
    assert (result.suspensions, result.session_losses) == (1, 0)


def test_offsets_missing_from_the_produced_log_are_not_skips() -> None:
    """Compacted records and transaction markers leave offset gaps; the index has none."""
    log = ProducedLog.from_records((T, 0, o, f"0:{o}") for o in (0, 1, 2, 5, 6, 9))
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 2),
            committed(2.5, "a", {0: 5}),  # past the gap 3..4: nothing undelivered skipped
            consumed(3, "a", 0, 5, 9, count=3),
            committed(4, "a", {0: 10}),
        ],
    )
    assert result.ok, result.summary()


def test_a_kept_partition_stays_in_its_epoch_across_rebalances() -> None:
    log = produced({0: 10})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}, generation=1),
            consumed(2, "a", 0, 0, 4),
            state(3, "a", "rebalancing"),
            state(3.5, "a", "running"),
            consumed(4, "a", 0, 5, 9),
        ],
    )
    assert result.ok, result.summary()
    assert result.epochs == 1


# -- lost ------------------------------------------------------------------------------------


def test_lost_records_are_flagged() -> None:
    log = produced({0: 10, 1: 10})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1, 1: -1}),
            consumed(2, "a", 0, 0, 9),
            consumed(3, "a", 1, 0, 6),
        ],
    )
    only(result, AnomalyKind.LOST)
    (lost,) = result.anomalies
    assert (lost.partition, lost.offsets, lost.count) == (1, (7, 8, 9), 3)
    assert "3 in the tail" in lost.message
    assert result.lost == 3


# -- duplicates ------------------------------------------------------------------------------


def test_redelivery_below_the_group_commit_is_a_duplicate() -> None:
    """b read a stale offset (5) although a had committed 10 before releasing."""
    log = produced({0: 15})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 9),
            committed(3, "a", {0: 10}),
            revoked(4, "a", [0]),
            assigned(5, "b", {0: 5}),
            consumed(6, "b", 0, 5, 14),
        ],
    )
    only(result, AnomalyKind.DUPLICATE)
    (dup,) = result.anomalies
    assert (dup.member, dup.offsets, dup.count) == ("b", (5, 6, 7, 8, 9), 5)
    assert result.allowed_duplicates == 0


def test_new_owner_starting_below_its_own_claim_duplicates() -> None:
    log = produced({0: 12})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 9),
            committed(3, "a", {0: 8}),
            assigned(8, "b", {0: 8}),
            consumed(9, "b", 0, 3, 11),
        ],
    )
    only(result, AnomalyKind.DUPLICATE)
    assert result.anomalies[0].offsets == (3, 4, 5, 6, 7)


# -- nonmonotonic / skip ---------------------------------------------------------------------


def test_nonmonotonic_delivery_within_an_epoch() -> None:
    log = produced({0: 10})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 4),
            consumed(3, "a", 0, 3, 9),
        ],
    )
    only(result, AnomalyKind.NONMONOTONIC)
    assert result.anomalies[0].count == 2  # restarted 2 records back


def test_skip_within_an_epoch() -> None:
    log = produced({0: 10})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 4),
            consumed(3, "a", 0, 7, 9),
        ],
    )
    assert kinds(result) == {AnomalyKind.SKIP, AnomalyKind.LOST}, result.summary()
    skip = result.by_kind()[AnomalyKind.SKIP][0]
    assert (skip.offsets, skip.count) == ((5, 6), 2)


def test_skip_inside_one_delivery() -> None:
    log = produced({0: 10})
    result = check(
        log,
        [assigned(1, "a", {0: -1}), consumed(2, "a", 0, 0, 9, count=8)],
    )
    only(result, AnomalyKind.SKIP)


def test_discontinuity_across_epochs_is_not_an_epoch_anomaly() -> None:
    """A member that loses and regains a partition starts a new epoch at the commit."""
    log = produced({0: 10})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 6),
            committed(3, "a", {0: 4}),
            revoked(4, "a", [0], reason="session_lost"),
            assigned(5, "a", {0: 4}, session=S2, generation=2),
            consumed(6, "a", 0, 4, 9, session=S2),
        ],
    )
    assert result.ok, result.summary()
    assert result.allowed_duplicates == 3


# -- commits ---------------------------------------------------------------------------------


def test_decreasing_commit_is_flagged() -> None:
    log = produced({0: 10})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 9),
            committed(3, "a", {0: 10}),
            committed(4, "a", {0: 8}),
        ],
    )
    only(result, AnomalyKind.COMMIT_DECREASED)
    assert result.anomalies[0].offsets == (8, 10)


def test_a_lower_commit_sent_before_the_higher_was_answered_is_no_regression() -> None:
    """A member frozen with its commit on the wire logs it after the new owner's higher
    commit; sent before that commit was answered, it may have taken effect first. Sent
    after it, it is a regression."""
    log = produced({0: 20})

    def history(sent_ts: float) -> list[dict[str, Any]]:
        late = committed(9, "a", {0: 10})
        late["sent_ts"] = sent_ts
        return [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 9),
            committed(3, "a", {0: 10}),
            assigned(6, "b", {0: 10}),
            consumed(7, "b", 0, 10, 19),
            committed(8, "b", {0: 20}),
            late,
            revoked(9.5, "a", [0]),
        ]

    assert AnomalyKind.COMMIT_DECREASED not in kinds(check(log, history(sent_ts=4)))
    assert AnomalyKind.COMMIT_DECREASED in kinds(check(log, history(sent_ts=8.5)))


def test_zombie_commit_after_handover_decreases_and_is_unowned() -> None:
    log = produced({0: 20})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 9),
            committed(3, "a", {0: 5}),
            revoked(4, "a", [0], reason="session_lost"),
            assigned(5, "b", {0: 5}),
            consumed(6, "b", 0, 5, 19),
            committed(7, "b", {0: 20}),
            committed(8, "a", {0: 10}, session=S2),  # the zombie writes its old position
        ],
    )
    assert kinds(result) == {AnomalyKind.COMMIT_DECREASED, AnomalyKind.COMMIT_AHEAD}
    ahead = result.by_kind()[AnomalyKind.COMMIT_AHEAD][0]
    assert "without owning" in ahead.message


def test_commit_ahead_of_delivery_is_flagged() -> None:
    log = produced({0: 10})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 4),
            committed(3, "a", {0: 8}),
            consumed(4, "a", 0, 5, 9),
        ],
    )
    only(result, AnomalyKind.COMMIT_AHEAD)
    assert result.anomalies[0].offsets == (5, 6, 7)


def test_commit_of_the_claim_offset_before_delivering_is_fine() -> None:
    log = produced({0: 10})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 4),
            committed(3, "a", {0: 5}),
            revoked(4, "a", [0]),
            assigned(5, "b", {0: 5}),
            committed(6, "b", {0: 5}),
            consumed(7, "b", 0, 5, 9),
        ],
    )
    assert result.ok, result.summary()


def test_commit_ahead_before_delivering_is_flagged() -> None:
    log = produced({0: 10})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            committed(2, "a", {0: 3}),
            consumed(3, "a", 0, 0, 9),
        ],
    )
    only(result, AnomalyKind.COMMIT_AHEAD)


# -- hand-over continuity --------------------------------------------------------------------


def test_new_owner_starting_after_the_commit_is_a_handover_gap() -> None:
    log = produced({0: 20})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 9),
            committed(3, "a", {0: 10}),
            revoked(4, "a", [0]),
            assigned(5, "b", {0: 10}),
            consumed(6, "b", 0, 15, 19),
        ],
    )
    assert kinds(result) == {AnomalyKind.HANDOVER_GAP, AnomalyKind.LOST}, result.summary()
    gap = result.by_kind()[AnomalyKind.HANDOVER_GAP][0]
    assert (gap.member, gap.offsets, gap.count) == ("b", (10, 11, 12, 13, 14), 5)
    lost = result.by_kind()[AnomalyKind.LOST][0]
    assert "5 below the highest delivered offset 19" in lost.message


def test_first_owner_must_start_at_the_log_start_without_a_commit() -> None:
    log = produced({0: 10})
    result = check(log, [assigned(1, "a", {0: -1}), consumed(2, "a", 0, 3, 9)])
    assert kinds(result) == {AnomalyKind.HANDOVER_GAP, AnomalyKind.LOST}


def test_handover_uses_the_group_commit_when_the_claim_offset_is_unknown() -> None:
    log = produced({0: 10})
    clean = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 4),
            committed(3, "a", {0: 5}),
            revoked(4, "a", [0]),
            assigned(5, "b", {0: -1}),
            consumed(6, "b", 0, 5, 9),
        ],
    )
    assert clean.ok, clean.summary()


# -- exclusive ownership ---------------------------------------------------------------------


def test_two_owners_delivering_at_once_overlap() -> None:
    log = produced({0: 20})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 4),
            committed(2.5, "a", {0: 5}),
            assigned(3, "b", {0: 5}),  # a never gave it up
            consumed(4, "b", 0, 5, 9),
            consumed(5, "a", 0, 5, 14),
            consumed(6, "b", 0, 10, 19),
        ],
    )
    assert AnomalyKind.OWNERSHIP_OVERLAP in kinds(result), result.summary()
    members = {a.member for a in result.by_kind()[AnomalyKind.OWNERSHIP_OVERLAP]}
    assert members == {"a", "b"}


def test_zombie_delivering_after_its_suspension_is_flagged() -> None:
    """a's session was lost: it owned until its suspension; delivering later is a zombie."""
    log = produced({0: 20})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 4),
            committed(2.5, "a", {0: 5}),
            state(3, "a", "suspended"),
            assigned(4, "b", {0: 5}, session="0x9"),
            consumed(5, "b", 0, 5, 9, session="0x9"),
            consumed(6, "a", 0, 5, 19),  # the zombie wakes up and hands records out
            revoked(7, "a", [0], reason="session_lost"),
            state(7, "a", "rebalancing", session=S2),
            shutdown(10, "b", session="0x9"),
        ],
    )
    assert {AnomalyKind.OWNERSHIP_OVERLAP, AnomalyKind.UNOWNED_DELIVERY} <= kinds(result)
    overlap = result.by_kind()[AnomalyKind.OWNERSHIP_OVERLAP][0]
    assert overlap.member == "a"


def _paused_history(zombie_delivery: bool) -> list[dict[str, Any]]:
    """a is SIGSTOPped after ts 2 past its session timeout; b claims at 6; a resumes at 8."""
    events = [
        assigned(1, "a", {0: -1}),
        consumed(2, "a", 0, 0, 4),
        committed(2.5, "a", {0: 5}),
        assigned(6, "b", {0: 5}, session="0x9"),
        consumed(6.5, "b", 0, 5, 9, session="0x9"),
        ev(8, "a", "commit_failed", offsets=[], reason="interval", error="session expired"),
        state(8.1, "a", "suspended"),
        revoked(8.2, "a", [0], reason="session_lost"),
        state(8.2, "a", "rebalancing", session=S2),
        consumed(9, "b", 0, 10, 19, session="0x9"),
        shutdown(10, "b", session="0x9"),
    ]
    if zombie_delivery:
        # a hands out a queued batch before it notices that its session is gone
        events.append(consumed(7.5, "a", 0, 5, 9))
    return events


def test_member_frozen_past_its_session_timeout_is_not_an_owner_meanwhile() -> None:
    """Its epoch ended by session loss: it held the partition until its last delivery only."""
    result = check(produced({0: 20}), _paused_history(zombie_delivery=False))
    assert result.ok, result.summary()
    assert (result.session_losses, result.suspensions) == (1, 1)


def test_zombie_delivering_before_noticing_its_expiry_overlaps() -> None:
    result = check(produced({0: 20}), _paused_history(zombie_delivery=True))
    only(result, AnomalyKind.OWNERSHIP_OVERLAP)
    members = {a.member for a in result.anomalies}
    assert members == {"a", "b"}  # a delivered inside b's holding, and b inside a's (to 7.5)


def _fenced_and_given_back(record_the_loss: bool) -> list[dict[str, Any]]:
    """A Kafka member a, cut off, is expelled by the coordinator, which gives partition 0 to
    b; b hands it back at 9; a, fenced at 10, drops it and at once is given it again."""
    events = [
        assigned(1, "a", {0: -1}),
        consumed(2, "a", 0, 0, 4),
        committed(2.5, "a", {0: 5}),
        assigned(6, "b", {0: 5}),
        consumed(6.5, "b", 0, 5, 14),
        committed(8.5, "b", {0: 15}),
        revoked(9, "b", [0]),
        consumed(10.5, "a", 0, 15, 19),
        shutdown(11, "a"),
        shutdown(11, "b"),
    ]
    if record_the_loss:
        # Missed, the owned set looks the same before and after: no event at all.
        events += [revoked(10.01, "a", [0], reason="lost"), assigned(10.02, "a", {0: 15})]
    return events


def test_a_partition_lost_and_given_back_is_two_ownerships() -> None:
    """With the loss recorded (the verifiable member's ``lost`` revocation), a's two
    ownerships are apart and b's in between is clean; missed, they join into one that b
    overlaps and in which a skips b's records: the artefact the KIP-848 soak showed."""
    assert check(produced({0: 20}), _fenced_and_given_back(True)).ok
    merged = check(produced({0: 20}), _fenced_and_given_back(False))
    assert AnomalyKind.OWNERSHIP_OVERLAP in kinds(merged), merged.summary()


def test_delivery_without_assignment_is_unowned() -> None:
    log = produced({0: 10})
    result = check(log, [consumed(1, "a", 0, 0, 9)])
    only(result, AnomalyKind.UNOWNED_DELIVERY)


def test_delivery_after_revoke_is_unowned() -> None:
    log = produced({0: 10})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 4),
            revoked(3, "a", [0]),
            consumed(4, "a", 0, 5, 9),
        ],
    )
    only(result, AnomalyKind.UNOWNED_DELIVERY)


def test_killed_member_owns_until_its_last_event() -> None:
    """b claims after a's last event: no overlap, even though a never revoked."""
    log = produced({0: 10})
    result = check(
        log,
        [
            startup(0, "a"),
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 4),
            committed(3, "a", {0: 5}),
            assigned(7, "b", {0: 5}),
            consumed(8, "b", 0, 5, 9),
        ],
    )
    assert result.ok, result.summary()


def test_restarted_member_is_a_new_incarnation() -> None:
    log = produced({0: 10})
    result = check(
        log,
        [
            startup(0, "a"),
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 6),
            committed(3, "a", {0: 5}),
            startup(5, "a"),
            assigned(6, "a", {0: 5}, session=S2),
            consumed(7, "a", 0, 5, 9, session=S2),
        ],
    )
    assert result.ok, result.summary()
    assert (result.incarnations, result.crashes, result.allowed_duplicates) == (2, 2, 2)


# -- liveness --------------------------------------------------------------------------------


def _crash_history(reclaim_ts: float | None) -> list[dict[str, Any]]:
    events = [
        startup(0, "a"),
        startup(0, "b"),
        assigned(1, "a", {0: -1}),
        assigned(1, "b", {1: -1}, session="0x9"),
        consumed(2, "a", 0, 0, 4),
        committed(3, "a", {0: 5}),
        consumed(3, "b", 1, 0, 9, session="0x9"),
    ]
    if reclaim_ts is not None:
        events += [
            assigned(reclaim_ts, "b", {0: 5}, session="0x9", generation=2),
            consumed(reclaim_ts + 0.5, "b", 0, 5, 9, session="0x9"),
        ]
    events.append(shutdown(40, "b", session="0x9"))
    return events


def test_partition_owned_again_within_the_session_timeout_is_live() -> None:
    result = check(produced({0: 10, 1: 10}), _crash_history(12), last_fault_ts=10)
    assert result.ok, result.summary()


@pytest.mark.parametrize("reclaim_ts", [30.0, None], ids=["late", "never"])
def test_partition_not_owned_again_in_time_is_a_liveness_failure(
    reclaim_ts: float | None,
) -> None:
    result = check(produced({0: 10, 1: 10}), _crash_history(reclaim_ts), last_fault_ts=10)
    assert AnomalyKind.LIVENESS in kinds(result), result.summary()
    (late,) = result.by_kind()[AnomalyKind.LIVENESS]
    assert late.partition == 0
    assert ("first at 20.0 s" if reclaim_ts else "never") in late.message


def test_liveness_is_not_checked_without_a_fault_time() -> None:
    result = check(produced({0: 10, 1: 10}), _crash_history(30))
    assert result.ok, result.summary()


# -- stalled ---------------------------------------------------------------------------------

# Partitions 0 and 1 (20 records each) are acknowledged one record a second from t=0; member a
# owns both from t=0.1. Partition 1 flows. Partition 0 hands out offsets 0..4 by t=5, then
# nothing until t=25 (offset 5 waited from t=5): a 20 s stall against a bound of
# T + slack = 3 + 5 = 8 s.
ACKED = {(T, p): {o: float(o) for o in range(20)} for p in (0, 1)}


def _stall_history(resume_ts: float) -> list[dict[str, Any]]:
    events = [startup(0, "a"), assigned(0.1, "a", {0: -1, 1: -1})]
    events += [consumed(o + 0.2, "a", 1, o, o) for o in range(20)]
    events += [consumed(o + 0.2, "a", 0, o, o) for o in range(5)]
    events += [consumed(max(resume_ts, o + 0.2), "a", 0, o, o) for o in range(5, 20)]
    return [*events, shutdown(max(resume_ts, 20) + 1, "a")]


def test_a_partition_stalled_while_its_records_wait_is_flagged() -> None:
    result = check(produced({0: 20, 1: 20}), _stall_history(25), acked_at=ACKED)
    only(result, AnomalyKind.STALLED)
    (stall,) = result.by_kind()[AnomalyKind.STALLED]
    assert (stall.partition, stall.member, stall.offsets) == (0, "a", (5,))
    assert "for 20.0 s" in stall.message


def test_a_short_pause_and_a_history_without_ack_times_are_not_stalls() -> None:
    assert check(produced({0: 20, 1: 20}), _stall_history(12), acked_at=ACKED).ok
    assert check(produced({0: 20, 1: 20}), _stall_history(25)).ok  # not judged
    # A tighter bound flags the 7 s pause.
    tight = check(produced({0: 20, 1: 20}), _stall_history(12), acked_at=ACKED, stall_bound_s=5)
    only(tight, AnomalyKind.STALLED)


def test_nothing_waiting_is_no_stall() -> None:
    """The records after offset 4 were acknowledged only at t=24: the owner had nothing to
    hand out of partition 0 until then."""
    late = {**ACKED, (T, 0): {o: (float(o) if o < 5 else 24.0) for o in range(20)}}
    assert check(produced({0: 20, 1: 20}), _stall_history(25), acked_at=late).ok


def test_a_stall_inside_a_faults_window_is_not_counted() -> None:
    """A fault from t=6 to t=10 covers the stall up to 10 + 8 = 18 s: 7 s are left, under
    the bound."""
    fault = InjectedFault("broker_restart", 6.0, 10.0)
    result = check(
        produced({0: 20, 1: 20}), _stall_history(25), acked_at=ACKED, faults=[fault]
    )
    assert AnomalyKind.STALLED not in kinds(result), result.summary()


# -- inconsistent ----------------------------------------------------------------------------


def test_value_differing_from_the_produced_one_is_inconsistent() -> None:
    log = produced({0: 10})
    bad = consumed(2, "a", 0, 0, 9)
    bad["last"] = "0:99"
    result = check(log, [assigned(1, "a", {0: -1}), bad])
    only(result, AnomalyKind.INCONSISTENT)


def test_offset_not_in_the_produced_log_is_inconsistent() -> None:
    log = produced({0: 10})
    result = check(
        log,
        [assigned(1, "a", {0: -1}), consumed(2, "a", 0, 0, 9), consumed(3, "a", 0, 10, 12)],
    )
    only(result, AnomalyKind.INCONSISTENT)


# -- loaders and the result ------------------------------------------------------------------


def test_produced_log_round_trips_through_json_lines(tmp_path: Path) -> None:
    log = produced({0: 3, 2: 2})
    path = tmp_path / "produced.jsonl"
    log.write(path)
    assert load_produced_log(path) == log
    assert len(log) == 5
    assert log.partitions() == [(T, 0), (T, 2)]


def test_produced_log_accepts_a_plain_mapping() -> None:
    mapping = {(T, 0): [(0, b"0:0"), (1, b"0:1")]}
    result = check_history(
        mapping, [assigned(1, "a", {0: -1}), consumed(2, "a", 0, 0, 1)], session_timeout_ms=1
    )
    assert result.ok, result.summary()


def test_load_events_merges_files_by_time_and_drops_a_partial_last_line(
    tmp_path: Path,
) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(
        "\n".join(json.dumps(e) for e in [assigned(1, "a", {0: -1}), consumed(3, "a", 0, 0, 4)])
        + '\n{"ts": 5, "member": "a", "ty'  # killed mid-line
    )
    b.write_text(json.dumps(startup(2, "b")) + "\n")
    events = load_events(a, b)
    assert [(e["ts"], e["type"]) for e in events] == [
        (1, "assigned"),
        (2, "startup"),
        (3, "consumed"),
    ]


def test_load_events_rejects_a_corrupt_line_in_the_middle(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text('{"ts": 1, "type": "x"}\nnot json\n{"ts": 2, "type": "y"}\n')
    with pytest.raises(ValueError, match="e.jsonl:2"):
        load_events(path)


def test_summary_names_counts_and_anomalies() -> None:
    log = produced({0: 10})
    result = check(log, [assigned(1, "a", {0: -1}), consumed(2, "a", 0, 0, 4)])
    assert not result.ok
    text = result.summary()
    assert "produced=10 delivered=5" in text
    assert "lost=1" in text
    assert "lost t/0" in text


def test_batch_handed_out_before_a_freeze_and_logged_after_it_is_not_an_overlap() -> None:
    """a hands out 5..9 within its session lease (ending at 3.4), is frozen before it can log
    them, and logs them at 7.9, after b claimed at 6: the hand-out was before b's claim."""
    late = consumed(7.9, "a", 0, 5, 9)
    events = _paused_history(zombie_delivery=False)
    assert kinds(check(produced({0: 20}), [*events, late])) == {AnomalyKind.OWNERSHIP_OVERLAP}
    late["handed_out_by"] = 3.4
    result = check(produced({0: 20}), [*events, late])
    assert result.ok, result.summary()


def _cut_off_history(late_delivery: bool) -> list[dict[str, Any]]:
    """a is cut off from ZooKeeper (its session expires unseen) until it is stopped at 9."""
    events = [
        assigned(1, "a", {0: -1}),
        consumed(2, "a", 0, 0, 4),
        committed(2.5, "a", {0: 5}),
        assigned(6, "b", {0: 5}, session="0x9"),  # a's owner node is gone: its session expired
        consumed(6.5, "b", 0, 5, 19, session="0x9"),
        revoked(9, "a", [0]),  # a never learnt: it gives the partition up when stopped
        shutdown(9.1, "a"),
        shutdown(10, "b", session="0x9"),
    ]
    if late_delivery:
        events.append(consumed(7, "a", 0, 5, 9))  # a hands records out after b's claim
    return events


def test_member_cut_off_until_stopped_holds_until_its_last_delivery() -> None:
    result = check(produced({0: 20}), _cut_off_history(late_delivery=False))
    assert result.ok, result.summary()


def test_member_cut_off_delivering_after_the_new_claim_overlaps() -> None:
    result = check(produced({0: 20}), _cut_off_history(late_delivery=True))
    assert AnomalyKind.OWNERSHIP_OVERLAP in kinds(result), result.summary()
    assert "a" in {a.member for a in result.by_kind()[AnomalyKind.OWNERSHIP_OVERLAP]}


# -- duplicate window per hand-over (needs the fault log) ------------------------------------

C_MS, T_MS = 500, 6000
"""C = 0.5 s, T = 6 s: bounds C + ε = 0.75 s (kill, pause) and C + T/3 + ε = 2.75 s (link)."""


def _handover_history(window_s: float, *, killed: bool) -> list[dict[str, Any]]:
    """a commits 5, hands out 5..6 at 3 and 7..9 at ``3 + window_s``, then is cut off (its
    session expires: b claims at 12) or killed (b claims at 12); b re-reads 5..9."""
    late = 3 + window_s
    events = [
        startup(0, "a"),
        assigned(1, "a", {0: -1}),
        consumed(2, "a", 0, 0, 4),
        committed(2.5, "a", {0: 5}),
        consumed(3, "a", 0, 5, 6),
        consumed(late, "a", 0, 7, 9),
        assigned(12, "b", {0: 5}, session="0x9"),
        consumed(12.5, "b", 0, 5, 19, session="0x9"),
        committed(13, "b", {0: 20}, session="0x9"),
    ]
    if not killed:
        events += [
            state(late + 0.1, "a", "suspended"),
            revoked(13, "a", [0], reason="session_lost"),
            state(13, "a", "rebalancing", session=S2),
            state(14, "a", "running", session=S2),
        ]
    return events


def _fault(kind: str, start: float, end: float, *members: str, number: int = 1) -> InjectedFault:
    return InjectedFault(kind, start, end, frozenset(members) if members else None, number)


def _check_faults(
    events: list[dict[str, Any]], faults: list[InjectedFault], sizes: dict[int, int] | None = None
) -> CheckResult:
    return check(
        produced(sizes or {0: 20}),
        events,
        session_timeout_ms=T_MS,
        commit_interval_ms=C_MS,
        faults=faults,
    )


def test_duplicate_window_after_a_link_cut_within_its_bound_is_clean() -> None:
    cut = _fault("zookeeper_link", 3.5, 12, "a")
    result = _check_faults(_handover_history(0.9, killed=False), [cut])
    assert result.ok, result.summary()
    (h,) = result.handovers
    assert (h.previous, h.next, h.duplicates, h.offsets) == ("a", "b", 5, (5, 6, 7, 8, 9))
    assert (h.fault_kind, h.fault_number) == ("zookeeper_link", 1)
    assert h.window_s == pytest.approx(0.9)
    assert h.bound_s == pytest.approx(0.5 + 2 + 0.25)
    assert not h.exceeded


def test_duplicate_window_after_a_link_cut_beyond_its_bound_is_flagged() -> None:
    cut = _fault("zookeeper_link", 5.9, 12, "a", number=7)  # before a's suspension at 6.1
    result = _check_faults(_handover_history(3.0, killed=False), [cut])
    only(result, AnomalyKind.DUPLICATE_WINDOW_EXCEEDED)
    (anomaly,) = result.anomalies
    assert (anomaly.partition, anomaly.member, anomaly.ts, anomaly.count) == (0, "a", 12, 5)
    assert "b claimed the partition from a after zookeeper_link #7" in anomaly.message
    assert "3.000 s" in anomaly.message and "2.750 s" in anomaly.message


def test_duplicate_window_after_a_kill_is_bounded_by_one_commit_interval() -> None:
    def run(window_s: float) -> CheckResult:
        kill = _fault("kill", 3 + window_s + 0.05, 5, "a")
        return _check_faults(_handover_history(window_s, killed=True), [kill])

    flagged = run(0.9)
    only(flagged, AnomalyKind.DUPLICATE_WINDOW_EXCEEDED)
    assert flagged.handovers[0].bound_s == pytest.approx(0.75)
    clean = run(0.5)
    assert clean.ok, clean.summary()
    assert clean.handovers[0].fault_kind == "kill"


def test_duplicate_window_after_a_pause_overlapping_a_link_cut_is_bounded_as_the_cut() -> None:
    """a is cut off from ZooKeeper at 3.5, then paused at 5 (the last fault, before its
    suspension at 5.1): the cut was still in effect, and its looser bound applies."""
    faults = [
        _fault("zookeeper_link", 3.5, 12, "a", number=1),
        _fault("pause", 5.0, 15, "a", number=2),
    ]
    result = _check_faults(_handover_history(2.0, killed=False), faults)
    assert result.ok, result.summary()
    assert result.handovers[0].fault_kind == "zookeeper_link"
    alone = _check_faults(_handover_history(2.0, killed=False), faults[1:])
    only(alone, AnomalyKind.DUPLICATE_WINDOW_EXCEEDED)


def test_duplicate_window_after_a_session_loss_is_judged_by_the_fault_before_the_loss() -> None:
    """a's session is lost in a link cut (suspended at 5.1); a kill of a at 11, after the
    loss and before b claims, did not end a's epoch: the cut's bound applies, not the kill's."""
    faults = [
        _fault("zookeeper_link", 3.5, 8, "a", number=1),
        _fault("kill", 11, 11.5, "a", number=2),
    ]
    result = _check_faults(_handover_history(2.0, killed=False), faults)
    assert result.ok, result.summary()
    assert (result.handovers[0].fault_kind, result.handovers[0].fault_number) == (
        "zookeeper_link",
        1,
    )
    # Lost without a fault before the loss, the kill that came after is not blamed either.
    alone = _check_faults(_handover_history(2.0, killed=False), faults[1:])
    assert alone.ok, alone.summary()
    assert alone.handovers[0].fault_kind is None


def test_duplicate_window_after_a_kafka_members_loss_is_judged_by_the_fault_before_it() -> None:
    """A Kafka member a, cut off from its coordinator, is fenced and drops partition 0 at 9
    (``revoked``, reason ``lost``); a kill of a at 11, after the drop, did not end that
    ownership: the link cut's bound applies, not the kill's (it was blamed before)."""
    events = _handover_history(2.0, killed=True) + [revoked(9, "a", [0], reason="lost")]
    faults = [
        _fault("broker_link", 3.5, 5, "a", number=1),
        _fault("kill", 11.5, 11.8, "a", number=2),  # more than T after the cut: no compound
    ]
    result = _check_faults(events, faults)
    assert result.ok, result.summary()
    assert (result.handovers[0].fault_kind, result.handovers[0].fault_number) == (
        "broker_link",
        1,
    )
    blamed = _check_faults(_handover_history(2.0, killed=True), faults)
    only(blamed, AnomalyKind.DUPLICATE_WINDOW_EXCEEDED)


def test_duplicate_window_is_not_judged_without_a_fault_log_or_a_stated_bound() -> None:
    events = _handover_history(3.0, killed=False)
    plain = check(produced({0: 20}), events)
    assert plain.ok, plain.summary()
    (h,) = plain.handovers
    assert (h.fault_kind, h.bound_s, h.duplicates) == (None, None, 5)
    assert h.window_s == pytest.approx(3.0)
    # an expiry has no stated bound; a fault on another member, or one over before a's epoch
    # began, does not apply
    for fault in (
        _fault("expire", 6.5, 7, "a"),
        _fault("kill", 6.5, 7, "c"),
        _fault("zookeeper_link", 0.1, 0.5, "a"),
    ):
        result = _check_faults(events, [fault])
        assert result.ok, (fault, result.summary())


def test_handovers_without_duplicates_are_listed() -> None:
    log = produced({0: 10})
    result = check(
        log,
        [
            assigned(1, "a", {0: -1}),
            consumed(2, "a", 0, 0, 4),
            committed(3, "a", {0: 5}),
            revoked(4, "a", [0]),
            assigned(5, "b", {0: 5}),
            consumed(6, "b", 0, 5, 9),
        ],
        commit_interval_ms=C_MS,
        faults=[_fault("zookeeper_restart", 3.5, 4.5)],
    )
    assert result.ok, result.summary()
    (h,) = result.handovers
    assert (h.previous, h.next, h.duplicates, h.window_s) == ("a", "b", 0, 0.0)
    assert h.fault_kind == "zookeeper_restart"
    # Recovery as the partition's reader saw it: a's last hand-out at 2, b's first at 6.
    assert h.gap_s == pytest.approx(4.0)


def test_duplicate_window_bounds() -> None:
    assert duplicate_window_bound_s("kill", 500, 6000) == pytest.approx(0.75)
    assert duplicate_window_bound_s("pause", 500, 6000) == pytest.approx(0.75)
    assert duplicate_window_bound_s("zookeeper_link", 500, 6000) == pytest.approx(2.75)
    assert duplicate_window_bound_s("zookeeper_restart", 500, 6000) == pytest.approx(2.75)
    assert duplicate_window_bound_s("expire", 500, 6000) is None
    for kafka_fault in ("broker_link", "coordinator_kill", "leader_kill", "rolling_restart"):
        assert duplicate_window_bound_s(kafka_fault, 500, 6000) == pytest.approx(6.75)
    assert duplicate_window_bound_s("broker_restart", 500, 6000) is None
    assert duplicate_window_bound_s(None, 500, 6000) is None


# -- session expiry by a short ZooKeeper restart ---------------------------------------------


def _restart_history() -> list[dict[str, Any]]:
    """ZooKeeper is stopped at 10; a is suspended, and comes back at 14 with a new session."""
    return [
        startup(0, "a"),
        assigned(1, "a", {0: -1}),
        consumed(2, "a", 0, 0, 9),
        committed(3, "a", {0: 10}),
        state(10.1, "a", "suspended"),
        revoked(14, "a", [0], reason="session_lost"),
        state(14, "a", "rebalancing", session=S2),
        assigned(14.5, "a", {0: 10}, session=S2, generation=2),
        state(15, "a", "running", session=S2),
    ]


def test_session_expired_by_a_short_zookeeper_restart_is_flagged() -> None:
    restart = _fault("zookeeper_restart", 10, 12, number=4)  # down 2 s < T/2 = 3 s
    result = _check_faults(_restart_history(), [restart], sizes={0: 10})
    only(result, AnomalyKind.SESSION_EXPIRED_BY_SHORT_ZOOKEEPER_RESTART)
    (anomaly,) = result.anomalies
    assert (anomaly.member, anomaly.ts) == ("a", 14)
    assert "zookeeper_restart #4" in anomaly.message and "down 2.0 s" in anomaly.message
    (r,) = result.zookeeper_restarts
    assert (r.number, r.short, r.expired, r.unexplained) == (4, True, ("a",), ("a",))
    assert r.downtime_s == pytest.approx(2)
    (x,) = result.session_expiries
    assert (x.member, x.old_session, x.new_session, x.suspended_since) == ("a", S1, S2, 10.1)


def test_session_expired_by_a_long_zookeeper_restart_is_allowed() -> None:
    restart = _fault("zookeeper_restart", 10, 13.5)  # down 3.5 s >= T/2
    result = _check_faults(_restart_history(), [restart], sizes={0: 10})
    assert result.ok, result.summary()
    (r,) = result.zookeeper_restarts
    assert (r.short, r.expired) == (False, ("a",))


def test_session_expiry_another_fault_explains_is_not_blamed_on_a_short_restart() -> None:
    restart = _fault("zookeeper_restart", 10, 12, number=1)
    for other in (
        _fault("pause", 6, 13.5, "a", number=2),
        _fault("zookeeper_link", 11, 13, "a", number=2),
        _fault("zookeeper_link", 11, 13, number=2),  # every consumer's link
    ):
        result = _check_faults(_restart_history(), [restart, other], sizes={0: 10})
        assert result.ok, (other, result.summary())
        assert result.zookeeper_restarts[0].unexplained == ()
    # a fault on another member, or a broker fault, explains nothing
    for other in (_fault("pause", 6, 13.5, "b"), _fault("broker_link", 11, 13, "a")):
        result = _check_faults(_restart_history(), [restart, other], sizes={0: 10})
        only(result, AnomalyKind.SESSION_EXPIRED_BY_SHORT_ZOOKEEPER_RESTART)


def test_session_expiry_outside_a_short_restarts_window_is_not_flagged() -> None:
    restart = _fault("zookeeper_restart", 0.5, 1.5)  # window ends 1.5 + 2 T = 13.5 < 14
    result = _check_faults(_restart_history(), [restart], sizes={0: 10})
    assert result.ok, result.summary()
    assert result.zookeeper_restarts[0].expired == ()


def test_short_restart_rule_needs_the_fault_log() -> None:
    result = check(produced({0: 10}), _restart_history())
    assert result.ok, result.summary()
    assert result.zookeeper_restarts == ()
    assert len(result.session_expiries) == 1


# -- transactions: aborted and uncommitted reads ---------------------------------------------


def _transactional_log() -> ProducedLog:
    """Partition 0: records 0-1 plain, 2-3 an aborted transaction (its marker at 4), 5-6 a
    committed one (its marker at 7), 8 plain."""
    records = [(T, 0, o, f"0:{o}") for o in (0, 1, 5, 6, 8)]
    aborted = [(T, 0, o, f"0:a{o}") for o in (2, 3)]
    return ProducedLog.from_records(records, aborted)


def _read(member: str, ranges: list[tuple[int, int, int]], t0: float = 1.0) -> list[dict[str, Any]]:
    events = [startup(0.0, member), assigned(0.5, member, {0: -1})]
    for i, (low, high, count) in enumerate(ranges):
        events.append(consumed(t0 + i, member, 0, low, high, count=count))
    return [*events, committed(t0 + len(ranges), member, {0: 9}), shutdown(9.0, member)]


def test_read_committed_skipping_aborted_records_and_markers_is_clean() -> None:
    result = check(_transactional_log(), _read("a", [(0, 1, 2), (5, 8, 3)]))
    assert result.ok, result.summary()
    assert result.lost == 0 and result.produced == 5


def test_aborted_record_delivered_is_an_aborted_read() -> None:
    # One batch runs over the aborted transaction: 6 records where 4 are committed.
    result = check(_transactional_log(), _read("a", [(0, 6, 6), (8, 8, 1)]))
    only(result, AnomalyKind.ABORTED_READ)
    (anomaly,) = result.anomalies
    assert anomaly.offsets == (2, 3) and anomaly.member == "a"
    # A batch that starts on an aborted record.
    result = check(_transactional_log(), _read("a", [(0, 1, 2), (2, 3, 2), (5, 8, 3)]))
    only(result, AnomalyKind.ABORTED_READ)


def test_produced_log_with_aborted_records_round_trips(tmp_path: Path) -> None:
    log = _transactional_log()
    log.write(tmp_path / "p.jsonl")
    again = load_produced_log(tmp_path / "p.jsonl")
    assert again == log and len(again) == 5
    with pytest.raises(ValueError, match="aborted and not"):
        ProducedLog.from_records([(T, 0, 1, "x")], [(T, 0, 1, "y")])


def test_record_delivered_before_its_transaction_committed_is_an_uncommitted_read() -> None:
    # The transaction of offsets 5-6 began committing at 3.5: the delivery at 2.0 read past
    # the last stable offset.
    committed_at = {(T, 0): {5: 3.5, 6: 3.5}}
    early = _read("a", [(0, 1, 2), (5, 8, 3)])  # (5..8) at ts 2.0
    result = check(_transactional_log(), early, committed_at=committed_at)
    only(result, AnomalyKind.UNCOMMITTED_READ)
    assert result.anomalies[0].offsets == (5, 6)
    late = _read("a", [(0, 1, 2), (5, 8, 3)], t0=3.0)  # (5..8) at ts 4.0
    assert check(_transactional_log(), late, committed_at=committed_at).ok
