"""The member state machine: every transition of the table, every illegal event."""

from __future__ import annotations

import pytest

from aiozkconsumer.group.state import (
    TRANSITIONS,
    IllegalTransition,
    MemberEvent,
    MemberState,
    MemberStateMachine,
)

S, E = MemberState, MemberEvent


def _machine_in(state: MemberState) -> MemberStateMachine:
    m = MemberStateMachine()
    m.state = state
    return m


ALLOWED = [(s, e, nxt) for s, row in TRANSITIONS.items() for e, nxt in row.items()]
ILLEGAL = [(s, e) for s in MemberState for e in MemberEvent if e not in TRANSITIONS[s]]


def test_every_state_has_a_row() -> None:
    assert set(TRANSITIONS) == set(MemberState)


@pytest.mark.parametrize(("state", "event", "expected"), ALLOWED)
def test_every_allowed_transition(state: S, event: E, expected: S) -> None:
    m = _machine_in(state)
    assert m.handle(event) is expected
    assert m.state is expected and m.history[-1] == (event, expected)


@pytest.mark.parametrize(("state", "event"), ILLEGAL)
def test_every_illegal_event_raises_and_leaves_the_state(state: S, event: E) -> None:
    m = _machine_in(state)
    with pytest.raises(IllegalTransition) as raised:
        m.handle(event)
    assert m.state is state
    assert raised.value.state is state and raised.value.event is event
    assert repr(event.value) in str(raised.value) and repr(state.value) in str(raised.value)


def test_the_illegal_set_is_not_empty_and_left_is_final() -> None:
    assert len(ILLEGAL) > 20
    assert all(nxt is S.LEFT for nxt in TRANSITIONS[S.LEFT].values())


def test_a_classic_rebalance_then_a_fence_then_a_rejoin() -> None:
    m = MemberStateMachine()
    for event in (E.JOIN, E.JOINED, E.ASSIGNMENT_GIVEN, E.SYNCED):
        assert not m.may_heartbeat
        m.handle(event)
    assert m.state is S.STABLE and m.may_heartbeat and m.is_member and not m.rebalancing
    m.handle(E.HEARTBEAT_ANSWERED)
    m.handle(E.FENCED)
    assert not m.may_heartbeat and not m.is_member
    m.handle(E.JOIN)
    assert m.rebalancing
    m.handle(E.GAVE_UP)
    assert m.state is S.UNJOINED


def test_a_kip848_member_reconciles_without_rejoining_and_leaves() -> None:
    m = MemberStateMachine()
    for event in (E.JOIN, E.JOINED, E.SYNCED, E.RECONCILE, E.ASSIGNMENT_GIVEN, E.SYNCED):
        m.handle(event)
    assert m.state is S.STABLE
    m.handle(E.RECONCILE)
    m.handle(E.GAVE_UP)  # a member that joined keeps heartbeating
    assert m.state is S.STABLE
    m.handle(E.LEAVE)
    m.handle(E.HEARTBEAT_ANSWERED)  # one sent before leaving
    m.handle(E.LEFT)
    with pytest.raises(IllegalTransition, match="allowed: heartbeat_answered, fenced"):
        m.handle(E.JOIN)


def test_history_keeps_the_last_32() -> None:
    m = MemberStateMachine()
    m.handle(E.JOIN)
    for _ in range(40):
        m.handle(E.JOIN)
    assert len(m.history) == 32
