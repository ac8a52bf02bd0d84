"""The history checker's fault-log rules on their own: which fault a hand-over is judged by,
which session expiries a ZooKeeper restart is blamed for (no history replayed, no servers)."""

from __future__ import annotations

import math

import pytest

from aiozkconsumer.testing._history_faults import (
    DUPLICATE_WINDOW_TOLERANCE_S,
    InjectedFault,
    duplicate_window_bound_s,
    expiry_explained,
    handover_fault,
    judge_zookeeper_restarts,
)
from aiozkconsumer.testing._history_results import AnomalyKind, SessionExpiry

C_MS, T_MS = 500, 6000


def fault(kind: str, start: float, end: float, *members: str, number: int = 1) -> InjectedFault:
    return InjectedFault(kind, start, end, frozenset(members) if members else None, number)


def judged(
    faults: list[InjectedFault] | None,
    *,
    member: str = "a",
    began: float = 1.0,
    lost_at: float = math.inf,
    claimed: float = 10.0,
    commit_interval_ms: int | None = C_MS,
) -> InjectedFault | None:
    return handover_fault(
        faults,
        member=member,
        began=began,
        lost_at=lost_at,
        claimed=claimed,
        commit_interval_ms=commit_interval_ms,
        session_timeout_ms=T_MS,
    )


# -- InjectedFault ---------------------------------------------------------------------------


def test_a_fault_hits_its_members_a_zookeeper_restart_all_a_broker_restart_none() -> None:
    assert fault("kill", 0, 1, "a").hits("a")
    assert not fault("kill", 0, 1, "a").hits("b")
    assert fault("pause", 0, 1).hits("anyone")  # no members named: every member
    assert fault("zookeeper_restart", 0, 1, "a").hits("b")  # members ignored
    assert not fault("broker_restart", 0, 1).hits("a")
    assert fault("kill", 2, 5.5).downtime_s == pytest.approx(3.5)
    assert fault("kill", 0, 1, number=4).label() == "kill #4"
    assert InjectedFault("kill", 0, 1).label() == "kill"


# -- which fault judges a hand-over ----------------------------------------------------------


def test_no_fault_log_or_no_fault_on_the_member_judges_nothing() -> None:
    assert judged(None) is None
    assert judged([]) is None
    assert judged([fault("kill", 5, 6, "b")]) is None
    assert judged([fault("broker_restart", 5, 6)]) is None


def test_a_fault_over_before_the_epoch_began_or_begun_after_the_claim_does_not_count() -> None:
    assert judged([fault("kill", 0.1, 0.5, "a")]) is None  # ended before began=1
    assert judged([fault("kill", 10, 11, "a")]) is None  # began at the claim, not before
    hit = fault("kill", 0.5, 1.0, "a")  # ended exactly when the epoch began: counts
    assert judged([hit]) is hit


def test_after_a_session_loss_only_faults_begun_by_the_loss_count() -> None:
    cut = fault("zookeeper_link", 3, 6, "a", number=1)
    kill = fault("kill", 7, 7.5, "a", number=2)
    # Without a loss: the last one, the kill, which came within T of the cut's heal: the
    # compound fault (the commit sent into the cut landed only after the heal).
    both = judged([cut, kill])
    assert both is not None and (both.kind, both.number) == ("kill_after_zookeeper_link", 2)
    assert judged([cut, kill], lost_at=5.0) is cut
    assert judged([kill], lost_at=5.0) is None


def test_a_kill_within_t_of_a_healed_cut_is_the_compound_fault_later_a_plain_kill() -> None:
    cut = fault("zookeeper_link", 3, 6, "a", number=1)
    soon = judged([cut, fault("kill", 6.5, 7, "a", number=2)])
    assert soon is not None and soon.kind == "kill_after_zookeeper_link"
    assert (soon.started_ts, soon.ended_ts) == (3, 7)
    assert duplicate_window_bound_s(soon.kind, C_MS, T_MS) == pytest.approx(
        C_MS / 1000 + T_MS / 1000 + DUPLICATE_WINDOW_TOLERANCE_S
    )
    late_kill = fault("kill", 6 + T_MS / 1000 + 0.5, 13, "a", number=3)
    assert judged([cut, late_kill], claimed=14.0) is late_kill
    # A cut over before the ownership began does not make one.
    plain = judged([cut, fault("kill", 7, 8, "a", number=4)], began=6.5)
    assert plain is not None and plain.kind == "kill"
    # A kill during a second cut, the first healed just before: still the compound (the
    # ZooKeeper soak's kill #62, inside cut #61 and 4 s after cut #59 healed).
    second = fault("zookeeper_link", 6.5, 9, "a", number=5)
    inside = judged([cut, second, fault("kill", 7.5, 8, "a", number=6)])
    assert inside is not None and inside.kind == "kill_after_zookeeper_link"
    assert judged([second, fault("kill", 7.5, 8, "a", number=6)]) is second  # the cut alone


def test_a_fault_on_every_member_after_the_member_was_killed_does_not_judge_it() -> None:
    """The ZooKeeper soak's hand-over after restart #309: the previous owner had been killed
    (#305) 9.4 s before ZooKeeper was restarted, 4 s after a ZooKeeper cut of it healed; the
    restart, on every member, was taken as the last fault and its bound applied."""
    cut = fault("zookeeper_link", 2, 4, "a", number=1)
    kill = fault("kill", 6, 9, "a", number=2)
    restart = fault("zookeeper_restart", 8, 9.5, number=3)
    got = judged([cut, kill, restart], claimed=9.6)
    assert got is not None and (got.kind, got.number) == ("kill_after_zookeeper_link", 2)
    assert judged([kill, restart], claimed=9.6) is kill
    # A live member (no kill) is still judged by the restart.
    assert judged([restart], claimed=9.6) is restart


def test_overlapping_faults_take_the_loosest_bound_and_an_unbounded_one_wins() -> None:
    cut = fault("zookeeper_link", 3, 9, "a", number=1)
    pause = fault("pause", 5, 9, "a", number=2)
    assert judged([cut, pause]) is cut  # the cut's C + D + eps beats the pause's C + eps
    expire = fault("expire", 4, 9, "a", number=3)
    assert judged([cut, pause, expire]) is expire  # no stated bound: not judged by a bound
    # without C, bounds are not compared: the last one
    assert judged([cut, pause], commit_interval_ms=None) is pause
    # a fault over before the last began was not in effect, but a cut healed within T
    # before a pause makes the compound fault
    early = fault("zookeeper_link", 1.5, 4, "a", number=4)
    compound = judged([early, pause])
    assert compound is not None and compound.kind == "pause_after_zookeeper_link"
    assert judged([fault("zookeeper_link", 1.5, 4, "b"), pause]) is pause  # another member's


# -- ZooKeeper restarts and session expiries -------------------------------------------------


def expiry(ts: float, member: str = "a") -> SessionExpiry:
    return SessionExpiry(member, ts, "0x1", "0x2", suspended_since=ts - 1)


def test_an_expiry_in_a_short_restarts_window_is_flagged_once() -> None:
    restart = fault("zookeeper_restart", 10, 12, number=5)  # down 2 s < T/2 = 3 s
    restarts, anomalies = judge_zookeeper_restarts([restart], [expiry(14)], T_MS)
    (r,) = restarts
    assert (r.number, r.short, r.expired, r.unexplained) == (5, True, ("a",), ("a",))
    (a,) = anomalies
    assert a.kind is AnomalyKind.SESSION_EXPIRED_BY_SHORT_ZOOKEEPER_RESTART
    assert (a.member, a.ts) == ("a", 14)
    assert "zookeeper_restart #5" in a.message and "0x1" in a.message


def test_a_long_restart_lists_its_expiries_without_flagging_them() -> None:
    restart = fault("zookeeper_restart", 10, 14)  # down 4 s >= T/2
    restarts, anomalies = judge_zookeeper_restarts([restart], [expiry(15)], T_MS)
    assert anomalies == []
    assert (restarts[0].short, restarts[0].expired) == (False, ("a",))


def test_the_window_ends_two_timeouts_after_zookeeper_served_again() -> None:
    restart = fault("zookeeper_restart", 10, 12)
    inside, outside = expiry(12 + 2 * T_MS / 1000), expiry(12 + 2 * T_MS / 1000 + 0.01, "b")
    before = expiry(9.9, "c")
    restarts, anomalies = judge_zookeeper_restarts([restart], [before, inside, outside], T_MS)
    assert restarts[0].expired == ("a",)
    assert [a.member for a in anomalies] == ["a"]


def test_restarts_are_judged_in_the_order_they_began() -> None:
    late = fault("zookeeper_restart", 50, 51, number=2)
    early = fault("zookeeper_restart", 10, 11, number=1)
    restarts, _ = judge_zookeeper_restarts([late, fault("kill", 0, 1, "a"), early], [], T_MS)
    assert [r.number for r in restarts] == [1, 2]


def test_another_session_ending_fault_on_the_member_explains_an_expiry() -> None:
    t = T_MS / 1000
    restart = fault("zookeeper_restart", 10, 12)
    x = expiry(14)
    for other in (
        fault("pause", 5, 9, "a"),  # ended within T before the restart began
        fault("expire", 13, 13.5, "a"),
        fault("zookeeper_link", 11, 13, "a"),
        fault("zookeeper_restart", 3, 6.5),  # a long one (3.5 s >= T/2)
    ):
        assert expiry_explained(x, restart, [restart, other], t), other
    for other in (
        fault("kill", 11, 12, "a"),  # a kill starts a new incarnation, not a new session
        fault("pause", 11, 12, "b"),  # another member
        fault("pause", 1, 3.9, "a"),  # over more than T before the restart
        fault("pause", 14.5, 15, "a"),  # began after the session changed
        fault("zookeeper_restart", 3, 5),  # a short one
    ):
        assert not expiry_explained(x, restart, [restart, other], t), other
    _, anomalies = judge_zookeeper_restarts([restart, fault("pause", 5, 9, "a")], [x], T_MS)
    assert anomalies == []
