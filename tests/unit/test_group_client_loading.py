"""A coordinator that has not loaded the group answers a Heartbeat with no error, blindly.

Kafka's group coordinator answers a classic member's Heartbeat ``NONE`` while it is still
loading the group after a coordinator move (``GroupCoordinatorService.heartbeat``: "The group
is still loading, so blindly respond"; the ZooKeeper-era ``GroupCoordinator`` alike). A
member whose session the old coordinator had ended was told it was still a member, extended
its lease on that answer and handed out records of partitions the new generation had given
to another member (the classic Kafka chaos run, seed 20260311: 36 and 143 records handed out
39 ms after such an answer). :class:`GroupClient` now first asks the new coordinator an empty
OffsetFetch, which a loading coordinator answers ``COORDINATOR_LOAD_IN_PROGRESS``, and sends
the Heartbeat only once that is answered without an error.

The broker is played by a scripted transport (``GroupClient._send``): the protocol logic here
needs no server; the failover itself is the chaos run's and ``test_kafka_faults.py``'s.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from aiozkconsumer.kafka.group import (
    COORDINATOR_LOAD_IN_PROGRESS,
    NONE,
    NOT_COORDINATOR,
    UNKNOWN_MEMBER_ID,
    GroupClient,
    GroupRequestError,
)


class ScriptedCoordinator:
    """Answers FindCoordinator with ``coordinator``, OffsetFetch with ``offset_fetch_code``
    (group-level error) and Heartbeat with ``heartbeat_code``; records what was sent."""

    def __init__(self) -> None:
        self.coordinator = 1
        self.offset_fetch_code = NONE
        self.heartbeat_code = NONE
        self.sent: list[tuple[str, int]] = []
        self.raw = SimpleNamespace(get_random_node=lambda: 0)

    def broker_address(self, node: int) -> str:
        return f"127.0.0.1:{9092 + node}"

    async def send(
        self, kafka: Any, node: int, request: Any, timeout_s: Any, what: str = ""
    ) -> Any:
        name = type(request).__name__
        self.sent.append((name, node))
        if name == "FindCoordinatorRequest":
            return SimpleNamespace(error_code=NONE, coordinator_id=self.coordinator)
        if name == "OffsetFetchEpochRequest":
            assert request.topics == []  # no partition: only the group-level error matters
            return SimpleNamespace(error_code=self.offset_fetch_code, topics=[])
        if name == "InstanceHeartbeatRequest":
            return SimpleNamespace(error_code=self.heartbeat_code)
        raise AssertionError(f"unexpected request {name}")


def _client() -> tuple[GroupClient, ScriptedCoordinator]:
    broker = ScriptedCoordinator()

    async def kafka() -> ScriptedCoordinator:
        return broker

    client = GroupClient(kafka, "g", request_timeout_ms=1000)  # type: ignore[arg-type]
    client._send = broker.send  # type: ignore[method-assign]
    return client, broker


def _names(broker: ScriptedCoordinator) -> list[str]:
    return [name for name, _ in broker.sent]


async def test_a_loading_coordinator_gets_no_heartbeat_and_the_heartbeat_fails() -> None:
    client, broker = _client()
    broker.offset_fetch_code = COORDINATOR_LOAD_IN_PROGRESS
    with pytest.raises(GroupRequestError) as failed:
        await client.heartbeat(17, "m")
    assert failed.value.code == COORDINATOR_LOAD_IN_PROGRESS
    assert "InstanceHeartbeatRequest" not in _names(broker)  # its NONE would be blind
    # Loaded now: the check is answered without an error, then the Heartbeat goes out.
    broker.offset_fetch_code = NONE
    await client.heartbeat(17, "m")
    assert _names(broker)[-2:] == ["OffsetFetchEpochRequest", "InstanceHeartbeatRequest"]


async def test_a_loaded_coordinator_is_checked_once_until_it_is_looked_up_again() -> None:
    client, broker = _client()
    await client.heartbeat(17, "m")
    await client.heartbeat(17, "m")
    assert _names(broker) == [
        "FindCoordinatorRequest",
        "OffsetFetchEpochRequest",
        "InstanceHeartbeatRequest",
        "InstanceHeartbeatRequest",
    ]
    # The coordinator moves: the new one is checked before its first Heartbeat.
    client.forget_coordinator()
    broker.coordinator = 2
    broker.sent.clear()
    broker.heartbeat_code = UNKNOWN_MEMBER_ID  # the new coordinator, loaded, knows better
    with pytest.raises(GroupRequestError) as fenced:
        await client.heartbeat(17, "m")
    assert fenced.value.fenced
    assert broker.sent == [
        ("FindCoordinatorRequest", 0),
        ("OffsetFetchEpochRequest", 2),
        ("InstanceHeartbeatRequest", 2),
    ]


async def test_a_check_answered_not_coordinator_looks_the_coordinator_up_again() -> None:
    client, broker = _client()
    broker.offset_fetch_code = NOT_COORDINATOR
    with pytest.raises(GroupRequestError) as moved:
        await client.heartbeat(17, "m")
    assert moved.value.coordinator_moved and client.coordinator is None
    assert "InstanceHeartbeatRequest" not in _names(broker)
