"""What the history checker reports, on hand-built results: the verdicts, the grouping and the
summary a failing test prints (no history replayed)."""

from __future__ import annotations

from typing import Any

from aiozkconsumer.testing._history_results import (
    Anomaly,
    AnomalyKind,
    CheckResult,
    Handover,
)


def result(*anomalies: Anomaly, **counts: Any) -> CheckResult:
    fields: dict[str, Any] = dict.fromkeys(
        (
            "produced",
            "delivered",
            "distinct_delivered",
            "duplicates",
            "allowed_duplicates",
            "lost",
            "commits",
            "epochs",
            "incarnations",
            "crashes",
            "session_losses",
            "suspensions",
        ),
        0,
    )
    fields.update(counts)
    return CheckResult(anomalies=list(anomalies), **fields)


LOST = Anomaly(AnomalyKind.LOST, "2 produced records never delivered", "t", 0, count=2)
WINDOW = Anomaly(AnomalyKind.DUPLICATE_WINDOW_EXCEEDED, "too long", "t", 1, member="a")
EXPIRED = Anomaly(AnomalyKind.SESSION_EXPIRED_BY_SHORT_ZOOKEEPER_RESTART, "expired", member="b")


def test_an_anomaly_reads_as_kind_place_member_and_message() -> None:
    assert str(LOST) == "lost t/0: 2 produced records never delivered"
    assert str(WINDOW) == "duplicate_window_exceeded t/1 [a]: too long"
    assert str(EXPIRED) == "session_expired_by_short_zookeeper_restart [b]: expired"


def test_only_the_bound_targets_leave_safety_intact() -> None:
    assert result().ok and result().safety_ok
    targets = result(WINDOW, EXPIRED)
    assert not targets.ok
    assert targets.safety_ok
    assert not result(WINDOW, LOST).safety_ok


def test_anomalies_are_grouped_by_kind_in_the_order_found() -> None:
    second_lost = Anomaly(AnomalyKind.LOST, "1 produced record never delivered", "t", 2)
    grouped = result(LOST, WINDOW, second_lost).by_kind()
    assert list(grouped) == [AnomalyKind.LOST, AnomalyKind.DUPLICATE_WINDOW_EXCEEDED]
    assert grouped[AnomalyKind.LOST] == [LOST, second_lost]


def test_faults_seen_are_crashes_plus_session_losses() -> None:
    assert result(crashes=2, session_losses=3).faults_seen == 5


def test_the_summary_counts_then_lists_at_most_limit_anomalies() -> None:
    many = [Anomaly(AnomalyKind.SKIP, f"skip {i}", "t", 0) for i in range(5)]
    text = result(*many, produced=10, lost=1, crashes=1).summary(limit=3)
    lines = text.splitlines()
    assert lines[0].startswith("produced=10 delivered=0 ")
    assert "lost=1" in lines[0] and "crashes=1" in lines[0]
    assert lines[1] == "5 anomalies: skip=5"
    assert lines[2:5] == ["  skip t/0: skip 0", "  skip t/0: skip 1", "  skip t/0: skip 2"]
    assert lines[5] == "  ... 2 more"
    assert result().summary().splitlines()[1] == "0 anomalies"


def test_a_handover_exceeds_only_a_bound_it_has() -> None:
    h = Handover("t", 0, "a", "b", ts=5.0, duplicates=3, window_s=1.0)
    assert not h.exceeded and h.fault_label() == "no fault"
    bounded = Handover(
        "t", 0, "a", "b", 5.0, 3, 1.0, fault_kind="kill", fault_number=2, bound_s=0.75
    )
    assert bounded.exceeded and bounded.fault_label() == "kill #2"
    within = Handover("t", 0, "a", "b", 5.0, 3, 0.75, fault_kind="kill", bound_s=0.75)
    assert not within.exceeded and within.fault_label() == "kill"


def test_handover_stats_give_the_delivery_gap_per_fault_kind() -> None:
    from aiozkconsumer.testing.chaos import HandoverStats

    hs = [
        Handover("t", p, "a", "b", 5.0, 0, 0.0, fault_kind="kill", gap_s=gap)
        for p, gap in enumerate([0.5, 1.0, 4.0, None])
    ]
    hs.append(Handover("t", 9, "a", "b", 5.0, 0, 0.0, gap_s=0.2))
    kill, no_fault = HandoverStats.by_kind(hs, 500, 6000)
    assert (kill.kind, kill.handovers, kill.gap_p50_s, kill.gap_p99_s) == ("kill", 4, 1.0, 4.0)
    assert "delivery gap p50 1.00 s p99 4.00 s" in str(kill)
    assert kill.to_json()["gap_p99_s"] == 4.0
    assert (no_fault.kind, no_fault.gap_p50_s) == ("no fault", 0.2)
