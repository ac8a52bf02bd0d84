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
import math
import time

import pytest

from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.group.state import MemberEvent, MemberState
from aiozkconsumer.kafka.consumer_group import FENCED_MEMBER_EPOCH, _HeartbeatError
from aiozkconsumer.kafka.group import (
    ILLEGAL_GENERATION,
    REBALANCE_IN_PROGRESS,
    GroupRequestError,
    JoinResult,
    encode_assignment,
)
from aiozkconsumer.kafka_connector import KafkaConsumerConnector
from aiozkconsumer.queues import ChunkQueue
from aiozkconsumer.records import TopicPartition


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
        member._beat_sent = (3, "m")  # type: ignore[attr-defined]  # the heartbeat answered
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


async def _rejoin_same_generation(connector: KafkaConsumerConnector) -> list[str]:
    """One JoinGroup + SyncGroup of the classic member, answered as a coordinator answers a
    follower rejoining a stable group with unchanged metadata: the current generation and
    the member's assignment (empty here), at once. Returns the requests sent."""
    member = connector.coordinator
    sent: list[str] = []

    async def join(member_id: str, **kwargs: object) -> JoinResult:
        sent.append("JoinGroup")
        return JoinResult(
            generation=3, protocol="range", leader="l", member_id=member_id, members=()
        )

    async def sync(generation: int, member_id: str, assignments: object) -> bytes:
        sent.append("SyncGroup")
        return encode_assignment([])

    async def nothing(*args: object) -> None:
        return None

    connector.group.join = join  # type: ignore[method-assign,assignment]
    connector.group.sync = sync  # type: ignore[method-assign,assignment]
    member._check_topics_exist = nothing  # type: ignore[method-assign,assignment]
    member._taken = nothing  # type: ignore[method-assign,assignment]
    await member._attempt([0, 0, 0])
    return sent


async def test_a_sync_answer_gives_no_lease_a_heartbeat_answer_does() -> None:
    """A follower rejoining a stable group with unchanged metadata gets its generation back
    from JoinGroup and SyncGroup without the coordinator restarting its session timer
    (``GroupMetadataManager.classicGroupJoinExistingMember``, SyncGroup in ``STABLE``): its
    session may end a moment later (its heartbeats went unanswered before the rejoin). The
    SyncGroup's answer must not extend the lease (it did, to 0.8 of a session timeout after
    the SyncGroup: the member handed records out for seconds after the coordinator had
    given its partitions to another member, a CI chaos run's ownership overlap). The next
    heartbeat goes out at once, and its answer extends the lease."""
    connector, _ = _member()
    member = connector.coordinator
    gate = connector.ownership.gate
    lapsed = time.monotonic() - 1.0
    gate.extend(lapsed)  # the heartbeats before the rejoin went unanswered
    assert await _rejoin_same_generation(connector) == ["JoinGroup", "SyncGroup"]
    assert gate.deadline == lapsed and not gate.passable()
    assert member._beat_at_once and member._heartbeat_reset.is_set()

    async def heartbeat(generation: int, member_id: str) -> None:
        assert (generation, member_id) == (3, "m")

    connector.group.heartbeat = heartbeat  # type: ignore[method-assign,assignment]
    before = time.monotonic()
    await member._beat()
    assert gate.passable() and gate.deadline >= before + 0.8 * 6.0


async def test_a_lease_running_from_earlier_heartbeats_is_kept_through_a_rejoin() -> None:
    """The heartbeats answered before the rejoin restarted the coordinator's timer: their
    lease still holds (nothing shortens it), so records flow at once after the SyncGroup."""
    connector, _ = _member()
    gate = connector.ownership.gate
    running = time.monotonic() + 3.0
    gate.extend(running)
    await _rejoin_same_generation(connector)
    assert gate.deadline == running and gate.passable()


async def test_a_first_membership_hands_nothing_out_until_a_heartbeat_is_answered() -> None:
    connector, _ = _member()
    gate = connector.ownership.gate
    assert gate.deadline == math.inf  # no lease kept before the first join
    await _rejoin_same_generation(connector)
    assert not gate.passable()


def test_a_commit_refused_for_the_generation_closes_the_gate_for_every_partition() -> None:
    """The coordinator refused a commit because the member's generation is over: every
    partition of that generation may be someone else's, not only those of the commit (a CI
    chaos run's member went on handing out a partition not in the refused commit for
    seconds). The gate closes at once, and a rejoin is asked for."""
    connector, _ = _member()
    asked: list[str] = []
    connector.request_rebalance = asked.append  # type: ignore[method-assign,assignment]
    gate = connector.ownership.gate
    gate.extend(time.monotonic() + 4.0)
    connector._drop_fenced({TopicPartition("t", 2)})
    assert not gate.passable() and asked == ["commit fenced"]


def test_a_heartbeat_failure_answered_during_a_join_is_left_to_the_join() -> None:
    """A heartbeat sent before a rejoin began (the one after a SyncGroup goes out at once)
    may be answered ``ILLEGAL_GENERATION`` while the JoinGroup is under way: the join's
    answer decides what became of the membership. Fencing the member then made the join's
    answer an illegal transition (``joined`` in state ``fenced``), and the member process
    exited (a chaos run's member did)."""
    connector, asked = _member()
    member = connector.coordinator
    member.machine.handle(MemberEvent.JOIN)
    member._beat_failed(GroupRequestError("Heartbeat", ILLEGAL_GENERATION, ""))
    assert member.machine.state is MemberState.JOINING and asked == []
    assert member.generation == 3 and member.member_id == "m"
    member.machine.handle(MemberEvent.JOINED)  # the join's answer still takes


def test_a_heartbeat_failure_of_an_earlier_generation_is_ignored() -> None:
    connector, asked = _member()
    member = connector.coordinator
    member._beat_sent = (2, "m")  # type: ignore[attr-defined]
    member._beat_failed(GroupRequestError("Heartbeat", ILLEGAL_GENERATION, ""))
    assert member.machine.state is MemberState.STABLE and asked == []
    assert connector.ownership.gate.passable()


async def test_an_eager_member_owns_nothing_when_a_retried_attempt_sends_its_joingroup() -> None:
    """An attempt that failed once its assignment was owned (no broker answered the metadata
    request after the SyncGroup) left the partitions owned and handed out, and the retried
    attempt's JoinGroup went out with them: a heartbeat answered for the new generation then
    extended the lease of partitions the new assignment gave another member. The eager
    member gives everything up before every JoinGroup, as ``_begin`` does before the first."""
    connector, _ = _member()
    member = connector.coordinator
    tp = TopicPartition("t", 0)
    connector.ownership.gate.extend(time.monotonic() + 4.0)  # answered heartbeats
    (pti,) = member.handover.acquire({tp: ChunkQueue(2)}, {tp: 5}).values()
    committed: list[dict[TopicPartition, int]] = []

    async def commit(offsets: dict[TopicPartition, int]) -> None:
        committed.append(dict(offsets))

    owned_at_join: list[tuple[TopicPartition, ...]] = []

    async def join(member_id: str, **kwargs: object) -> JoinResult:
        owned_at_join.append(connector.ownership.owned())
        raise GroupRequestError("JoinGroup", None, "no answer")

    async def nothing(*args: object) -> None:
        return None

    member.handover.commit = commit  # type: ignore[method-assign,assignment]
    connector.group.join = join  # type: ignore[method-assign,assignment]
    member._check_topics_exist = nothing  # type: ignore[method-assign,assignment]
    member.machine.handle(MemberEvent.JOIN)  # a rebalance whose attempt failed after its take
    totals = [0, 0, 0]
    with pytest.raises(GroupRequestError):
        await member._attempt(totals)
    assert owned_at_join == [()]
    assert not pti.active and totals[1] == 1
    assert committed == [{tp: 5}]  # its generation still stood: committed as it was given up
