"""The scheduler's compound faults: a kill of a member soon after its link cut healed."""

from __future__ import annotations

import pytest

from aiozkconsumer.testing.chaos import CoordinatorMode, Fault, FaultKind, FaultScheduler

SESSION_TIMEOUT_MS = 6000
T = SESSION_TIMEOUT_MS / 1000
CONSUMERS = 4


def _plan(compound: float, mode: CoordinatorMode = CoordinatorMode.ZOOKEEPER) -> list[Fault]:
    return FaultScheduler(
        7,
        consumers=CONSUMERS,
        brokers=[0, 1, 2] if mode.kafka else [0],
        session_timeout_ms=SESSION_TIMEOUT_MS,
        mode=mode,
        compound=compound,
    ).plan(1200)


def _compounds(faults: list[Fault], cut_kind: FaultKind) -> list[tuple[Fault, Fault]]:
    """(cut, kill) pairs: a kill of the cut's member within [0.1 T, 0.9 T] after its heal."""
    pairs = []
    for cut in faults:
        if cut.kind is not cut_kind or cut.member is None or cut.duration_s >= T:
            continue
        healed = cut.at_s + cut.duration_s
        pairs += [
            (cut, kill)
            for kill in faults
            if kill.kind is FaultKind.KILL
            and kill.member == cut.member
            and healed + 0.1 * T <= kill.at_s <= healed + 0.9 * T
        ]
    return pairs


@pytest.mark.parametrize(
    ("mode", "cut_kind"),
    [
        (CoordinatorMode.ZOOKEEPER, FaultKind.ZOOKEEPER_LINK),
        (CoordinatorMode.KAFKA_CLASSIC, FaultKind.BROKER_LINK),
    ],
)
def test_compound_follows_healed_cuts_with_a_kill_of_the_same_member(
    mode: CoordinatorMode, cut_kind: FaultKind
) -> None:
    faults = _plan(1.0, mode)
    pairs = _compounds(faults, cut_kind)
    healable = [
        f for f in faults if f.kind is cut_kind and f.member is not None and f.duration_s < T
    ]
    # Many healable cuts get their kill (not those whose member is busy with a fault of its
    # own already: a kill's replacement holds it 8 s, a pause its length).
    assert len(pairs) >= len(healable) // 4 > 0
    # Numbered 1..n in time order after the follow-ups were merged in.
    assert [f.number for f in faults] == list(range(1, len(faults) + 1))
    assert [f.at_s for f in faults] == sorted(f.at_s for f in faults)
    # Nothing else happens to the member between its cut and its kill.
    for cut, kill in pairs:
        others = [
            f
            for f in faults
            if f.member == cut.member
            and f.kind in (FaultKind.KILL, FaultKind.PAUSE, FaultKind.EXPIRE)
            and cut.at_s <= f.at_s < kill.at_s
        ]
        assert not others, (str(cut), str(kill), [str(f) for f in others])


def test_without_compound_no_cut_is_followed_by_a_kill_within_the_window_by_design() -> None:
    """``compound=0`` draws no follow-up: a seed's schedule is the one it always was, and
    the follow-ups of ``compound=1`` are extra kills (those of a plain schedule stay)."""
    plain = _plan(0.0)
    assert plain == FaultScheduler(
        7, consumers=CONSUMERS, brokers=[0], session_timeout_ms=SESSION_TIMEOUT_MS
    ).plan(1200)
    kills = sum(f.kind is FaultKind.KILL for f in plain)
    with_compound = _plan(1.0)
    assert sum(f.kind is FaultKind.KILL for f in with_compound) > kills


def test_compound_probability_is_checked() -> None:
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="compound"):
            FaultScheduler(1, consumers=1, session_timeout_ms=SESSION_TIMEOUT_MS, compound=bad)
