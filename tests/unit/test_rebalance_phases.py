"""The rebalance's phase timings: the clock that sums them and the record that keeps them."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from aiozkconsumer.zkgroup.phases import PHASES, PhaseClock, RebalancePhases


class _FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_laps_add_the_time_since_the_previous_lap_to_the_phase() -> None:
    t = _FakeClock()
    clock = PhaseClock(t)
    t.now += 0.010
    clock.lap("view")
    t.now += 0.002
    clock.lap("plan")
    t.now += 0.005
    clock.lap("claim")
    t.now += 0.100
    clock.lap("claim_wait")
    t.now += 0.003
    clock.lap("claim")  # a second round of creates after the wait adds up
    assert clock.totals_ms() == pytest.approx(
        {"view": 10.0, "plan": 2.0, "claim": 8.0, "claim_wait": 100.0}
    )


def test_totals_come_in_phase_order_with_unknown_phases_last() -> None:
    t = _FakeClock()
    clock = PhaseClock(t)
    for phase in ("start_fetchers", "extra", "session", "retry_wait", "view"):
        t.now += 0.001
        clock.lap(phase)
    assert list(clock.totals_ms()) == ["session", "view", "start_fetchers", "retry_wait", "extra"]
    assert set(PHASES) >= {"session", "view", "start_fetchers", "retry_wait"}


def test_no_lap_no_phase() -> None:
    assert PhaseClock(_FakeClock()).totals_ms() == {}


def test_describe_names_every_phase_in_order() -> None:
    phases = RebalancePhases(
        started_at=1.0, queued_ms=3.4, phases=MappingProxyType({"view": 12.2, "claim": 1.6})
    )
    assert phases.describe() == "queued 3 ms, view 12 ms, claim 2 ms"
    untriggered = RebalancePhases(started_at=1.0, queued_ms=None, phases=MappingProxyType({}))
    assert untriggered.describe() == "-"
