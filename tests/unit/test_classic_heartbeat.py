"""The Kafka members' heartbeat answers without servers: what a failed heartbeat asks for,
under the classic protocol and under ``group.protocol=consumer`` (KIP-848).

A heartbeat without an answer for a session timeout (the coordinator's broker died and the
coordinator is moving) asks for no rejoin: the member looks the coordinator up again and goes
on beating, as the Java client's heartbeat thread does (``AbstractCoordinator``,
``markCoordinatorUnknown``; the KIP-848 heartbeat request manager alike); the coordinator's
answer decides. A rejoin there rebalanced the
whole group after a coordinator failover slower than the session timeout
(``tests/integration/test_kafka_faults.py``'s coordinator failover found it).
"""

from __future__ import annotations

import logging
import time

import pytest

from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.group.state import MemberEvent, MemberState
from aiozkconsumer.kafka.consumer_group import FENCED_MEMBER_EPOCH, _HeartbeatError
from aiozkconsumer.kafka.group import ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, GroupRequestError
from aiozkconsumer.kafka_connector import KafkaConsumerConnector


def _member(protocol: str = "classic") -> tuple[KafkaConsumerConnector, list[str]]:
    connector = KafkaConsumerConnector(
        ConsumerConfig(
            group_id="g",
            group_coordinator="kafka",
            group_protocol=protocol,
            bootstrap_servers="127.0.0.1:9092",
            **({"session_timeout_ms": 6000} if protocol == "classic" else {}),
        )
    )
    member = connector.coordinator
    member.member_id = "m"
    if protocol == "classic":
        member.generation = 3  # type: ignore[misc]
    else:
        member.member_epoch = 3  # type: ignore[attr-defined]
        member._broker_session_timeout_ms = 6000  # type: ignore[attr-defined]  # learned at the join
    for event in (MemberEvent.JOIN, MemberEvent.JOINED, MemberEvent.SYNCED):
        member.machine.handle(event)
    assert member.machine.state is MemberState.STABLE
    asked: list[str] = []
    member.request_rebalance = asked.append
    return connector, asked


def _epoch(connector: KafkaConsumerConnector) -> int:
    member = connector.coordinator
    return int(getattr(member, "member_epoch", member.generation))


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_no_answer_for_a_session_timeout_looks_the_coordinator_up_again_without_a_rejoin(
    protocol: str,
) -> None:
    connector, asked = _member(protocol)
    member = connector.coordinator
    forgotten: list[bool] = []
    connector.group.forget_coordinator = lambda: forgotten.append(True)  # type: ignore[method-assign]
    member.last_heartbeat_received = time.monotonic() - 7.0
    member._beat_failed(GroupRequestError("Heartbeat", None, "connection closed"))
    assert asked == [] and forgotten == [True]
    assert member.machine.state is MemberState.STABLE and _epoch(connector) == 3


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_no_answer_within_a_session_timeout_changes_nothing(protocol: str) -> None:
    connector, asked = _member(protocol)
    member = connector.coordinator
    forgotten: list[bool] = []
    connector.group.forget_coordinator = lambda: forgotten.append(True)  # type: ignore[method-assign]
    member.last_heartbeat_received = time.monotonic() - 2.0
    member._beat_failed(GroupRequestError("Heartbeat", None, "connection closed"))
    assert asked == [] and forgotten == [] and member.machine.state is MemberState.STABLE


def test_a_fenced_consumer_protocol_member_rejoins_and_closes_the_gate() -> None:
    connector, asked = _member("consumer")
    member = connector.coordinator
    member._beat_failed(_HeartbeatError("ConsumerGroupHeartbeat", FENCED_MEMBER_EPOCH, ""))
    assert len(asked) == 1 and asked[0].startswith("fenced")
    assert _epoch(connector) == 0 and not connector.ownership.gate.passable()


def test_the_coordinators_answers_still_ask_for_a_rejoin() -> None:
    connector, asked = _member()
    member = connector.coordinator
    member._beat_failed(GroupRequestError("Heartbeat", REBALANCE_IN_PROGRESS, ""))
    assert asked == ["the group is rebalancing"]
    member._beat_failed(GroupRequestError("Heartbeat", ILLEGAL_GENERATION, ""))
    assert len(asked) == 2 and asked[1].startswith("fenced")
    assert member.generation == -1 and not connector.ownership.gate.passable()


async def test_a_group_that_keeps_rebalancing_is_waited_out_not_given_up(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """JoinGroup/SyncGroup answered ``REBALANCE_IN_PROGRESS`` for longer than the retry window
    (members of a churning group dying and joining again): the member goes on trying, as
    the Java client does while polled, with a WARNING per window. It gave up after the window
    before, and the connector died (a 15-minute chaos soak saw it)."""
    import aiozkconsumer.group.base as base

    connector, _ = _member()
    member = connector.coordinator
    clock = [0.0]
    monkeypatch.setattr(base.anyio, "current_time", lambda: clock[0])
    attempts: list[float] = []

    async def attempt(totals: list[int]) -> None:
        attempts.append(clock[0])
        if len(attempts) <= 4:
            clock[0] += 20.0  # each failed round a third of the window and more
            raise GroupRequestError("SyncGroup", REBALANCE_IN_PROGRESS, "group 'g'")

    member._attempt = attempt  # type: ignore[method-assign]
    caplog.set_level(logging.WARNING, logger="aiozkconsumer.group.base")
    await member._rebalance("test")
    assert len(attempts) == 5  # 80 s of REBALANCE_IN_PROGRESS, then the join took
    assert any("the group kept rebalancing" in r.getMessage() for r in caplog.records)
