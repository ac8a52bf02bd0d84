"""Static membership (KIP-345, ``group.instance.id``) on real brokers, both group protocols.

A static member closed and restarted (a new connector, the same ``group.instance.id``) within
the session timeout takes its partitions back while the other member sees no rebalance (its
generation or member epoch, its rebalance history and its heartbeats' answers stay as they
were); dynamic members doing the same make the group rebalance, so the observation can fail.
Two live members with one instance id: with the classic protocol the newer takes the place
and the older is fenced (``FencedInstanceIdError``), as the Java client; with the consumer
protocol (KIP-848) the newer is refused (``UnreleasedInstanceIdError``) while the older keeps
going, and a member whose released instance id another member took is fenced.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from _support import until_any

from aiozkconsumer import (
    ConnectorState,
    ConsumerConfig,
    KafkaConsumerConnector,
    TopicPartition,
    create_connector,
)
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.errors import FencedInstanceIdError, UnreleasedInstanceIdError
from aiozkconsumer.kafka.consumer_group import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupClient,
    ConsumerGroupHeartbeatRequest,
    HeartbeatResult,
)
from aiozkconsumer.testing import LocalCluster

pytestmark = pytest.mark.integration

PARTITIONS = 4

# (protocol, cluster flavour): the classic protocol on both brokers, KIP-848 on Kafka 4 only.
PROTOCOLS = [
    pytest.param("classic", "zookeeper", id="classic-zk"),
    pytest.param("classic", "kraft", id="classic-kraft"),
    pytest.param("consumer", "kraft", id="consumer-kraft"),
]


def _config(
    cluster: LocalCluster, group: str, protocol: str, instance_id: str | None
) -> ConsumerConfig:
    kw: dict[str, Any] = {}
    if protocol == "classic":
        # Short, for the fencing test; the restart takes about a second.
        kw.update(session_timeout_ms=8000, heartbeat_interval_ms=1000)
    return ConsumerConfig(
        group_id=group,
        group_coordinator="kafka",
        group_protocol=protocol,
        bootstrap_servers=cluster.bootstrap_servers,
        group_instance_id=instance_id,
        auto_offset_reset="earliest",
        **kw,
    )


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> LocalCluster:
    """The session cluster of the test's flavour (``zk_kafka_cluster`` or ``kraft_cluster``)."""
    flavour = request.node.callspec.params["flavour"]
    fixture = "zk_kafka_cluster" if flavour == "zookeeper" else "kraft_cluster"
    found: LocalCluster = request.getfixturevalue(fixture)
    return found


async def _topic(cluster: LocalCluster, topic: str) -> set[TopicPartition]:
    await cluster.create_topic(topic, PARTITIONS)
    await cluster.produce_to_partitions(topic, {p: [(b"k", b"v")] for p in range(PARTITIONS)})
    return {TopicPartition(topic, p) for p in range(PARTITIONS)}


def _owned(c: ConsumerConnector) -> set[TopicPartition]:
    return set(c.statistics().owned_partitions)


def _split(connectors: Sequence[ConsumerConnector], everything: set[TopicPartition]) -> bool:
    """Every member runs with a non-empty share; the shares are disjoint and cover all."""
    shares = [_owned(c) for c in connectors]
    if not all(shares) or any(c.state is not ConnectorState.RUNNING for c in connectors):
        return False
    return sum(map(len, shares)) == len(everything) and set().union(*shares) == everything


class HeartbeatSpy:
    """Records a member's heartbeats (the real requests, wrapped) as ``(sent at, answer or
    error)``, with an event per answer."""

    def __init__(self, connector: KafkaConsumerConnector) -> None:
        group = connector.group
        name = "consumer_heartbeat" if isinstance(group, ConsumerGroupClient) else "heartbeat"
        real = getattr(group, name)
        self.answers: list[tuple[float, Any]] = []
        self._answered = anyio.Event()

        async def spy(*args: Any, **kw: Any) -> Any:
            sent = time.monotonic()
            try:
                result = await real(*args, **kw)
            except Exception as e:
                self._record(sent, e)
                raise
            self._record(sent, result)
            return result

        setattr(group, name, spy)

    def _record(self, sent: float, outcome: Any) -> None:
        self.answers.append((sent, outcome))
        self._answered.set()
        self._answered = anyio.Event()

    async def answers_sent_after(self, mark: float, count: int, limit_s: float = 30) -> list[Any]:
        """The first ``count`` answers to heartbeats sent after ``mark`` (monotonic s)."""
        with anyio.fail_after(limit_s):
            while True:
                later = [outcome for sent, outcome in self.answers if sent > mark]
                if len(later) >= count:
                    return later[:count]
                await self._answered.wait()


async def _restart_a(
    cluster: LocalCluster, protocol: str, topic: str, group: str, *, static: bool
) -> dict[str, Any]:
    """Members ``a`` and ``b`` share the topic; ``a`` is closed and a new connector with its
    config joins. Returns what ``b`` and the new ``a`` saw."""
    everything = await _topic(cluster, topic)

    def config(name: str) -> ConsumerConfig:
        return _config(cluster, group, protocol, f"member-{name}" if static else None)

    seen: dict[str, Any] = {}
    async with create_connector(config("b")) as b:
        assert isinstance(b, KafkaConsumerConnector)
        async with create_connector(config("a")) as a:
            await b.create_message_streams({topic: 1})
            await a.create_message_streams({topic: 1})
            await until_any([a, b], lambda: _split([a, b], everything))
            seen["a_before"] = _owned(a)
            before = b.statistics()
            spy = HeartbeatSpy(b)
        # a closed: a static member does not leave, a dynamic one does.
        async with create_connector(config("a")) as a2:
            await a2.create_message_streams({topic: 1})
            joined = time.monotonic()
            if static:
                await until_any([a2, b], lambda: _split([a2, b], everything))
                seen["a_after"] = _owned(a2)
                seen["a_generation"] = a2.statistics().group_generation
                # A rebalance started by a2's join would be told to b at its next heartbeat.
                seen["b_answers"] = await spy.answers_sent_after(joined, 1)
            else:
                await until_any(
                    [a2, b],
                    lambda: (
                        b.statistics().group_generation != before.group_generation
                        and _split([a2, b], everything)
                    ),
                )
            after = b.statistics()
    seen.update(b_before=before, b_after=after)
    return seen


@pytest.mark.parametrize(("protocol", "flavour"), PROTOCOLS)
async def test_a_static_member_restarted_within_the_session_timeout_gets_its_partitions_back_without_a_rebalance(  # noqa: E501
    cluster: LocalCluster, protocol: str, flavour: str, unique_topic: str, unique_group_id: str
) -> None:
    seen = await _restart_a(cluster, protocol, unique_topic, unique_group_id, static=True)
    before, after = seen["b_before"], seen["b_after"]
    assert seen["a_after"] == seen["a_before"]
    # The other member: the same generation (member epoch), no rebalance, no new history.
    assert after.group_generation == before.group_generation
    assert seen["a_generation"] == before.group_generation
    assert after.completed_rebalances == before.completed_rebalances
    assert after.rebalances == before.rebalances
    assert after.owned_partitions == before.owned_partitions
    assert after.state is ConnectorState.RUNNING
    # Its heartbeat after the restart was answered as before: no REBALANCE_IN_PROGRESS; the
    # same epoch and, if the coordinator repeats it (an answer to owned partitions sent), the
    # same assignment.
    (answer,) = seen["b_answers"]
    if protocol == "classic":
        assert answer is None
    else:
        assert isinstance(answer, HeartbeatResult)
        assert answer.member_epoch == before.group_generation
        if answer.assignment is not None:
            given = sorted(p for parts in answer.assignment.values() for p in parts)
            assert given == sorted(tp.partition for tp in before.owned_partitions)


@pytest.mark.parametrize(("protocol", "flavour"), PROTOCOLS)
async def test_a_dynamic_member_restarted_makes_the_group_rebalance(
    cluster: LocalCluster, protocol: str, flavour: str, unique_topic: str, unique_group_id: str
) -> None:
    seen = await _restart_a(cluster, protocol, unique_topic, unique_group_id, static=False)
    before, after = seen["b_before"], seen["b_after"]
    assert after.group_generation != before.group_generation
    if protocol == "classic" or set(after.owned_partitions) != set(before.owned_partitions):
        assert after.completed_rebalances > before.completed_rebalances
    # Under the consumer protocol a new member epoch that leaves B's partitions as they were
    # is acknowledged without a reconciliation (as the Java client's "target assignment equal
    # to the current one"), so it counts no rebalance; the epoch above shows the group moved.


@pytest.mark.parametrize("any_cluster", ["zookeeper", "kraft"], indirect=True)
async def test_classic_a_second_member_with_the_same_instance_id_takes_over_and_the_first_is_fenced(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    everything = await _topic(any_cluster, unique_topic)
    config = _config(any_cluster, unique_group_id, "classic", "the-one")
    with anyio.fail_after(60):
        async with create_connector(config) as newer:
            with pytest.raises(FencedInstanceIdError) as info:
                async with create_connector(config) as older:
                    await older.create_message_streams({unique_topic: 1})
                    await until_any([older], lambda: _owned(older) == everything)
                    generation = older.statistics().group_generation
                    await newer.create_message_streams({unique_topic: 1})
                    # The older member's next heartbeat is answered FENCED_INSTANCE_ID: its
                    # connector fails, which cancels this block.
                    await anyio.sleep_forever()
            # The newer member took the place as it was: its partitions, no rebalance.
            assert _owned(newer) == everything
            assert newer.state is ConnectorState.RUNNING
            assert newer.statistics().group_generation == generation
    error = info.value
    assert error.instance_id == "the-one" and error.group == unique_group_id
    assert "'the-one'" in str(error) and unique_group_id in str(error)
    assert "FENCED_INSTANCE_ID" in str(error)
    assert older.state is ConnectorState.CLOSED


@pytest.mark.parametrize("any_cluster", ["kraft"], indirect=True)
async def test_consumer_protocol_a_second_member_with_an_instance_id_in_use_is_refused(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    everything = await _topic(any_cluster, unique_topic)
    config = _config(any_cluster, unique_group_id, "consumer", "the-one")
    async with create_connector(config) as first:
        await first.create_message_streams({unique_topic: 1})
        await until_any([first], lambda: _owned(first) == everything)
        epoch = first.statistics().group_generation
        async with create_connector(config) as second:
            with pytest.raises(UnreleasedInstanceIdError) as info:
                await second.create_message_streams({unique_topic: 1})
            assert second.statistics().owned_partitions == ()
        # The first member goes on as it was.
        assert first.state is ConnectorState.RUNNING
        assert _owned(first) == everything
        assert first.statistics().group_generation == epoch
    error = info.value
    assert error.instance_id == "the-one" and error.group == unique_group_id
    assert "UNRELEASED_INSTANCE_ID" in str(error)


@pytest.mark.parametrize("any_cluster", ["kraft"], indirect=True)
async def test_consumer_protocol_a_member_whose_released_instance_id_was_taken_is_fenced(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    everything = await _topic(any_cluster, unique_topic)
    config = _config(any_cluster, unique_group_id, "consumer", "the-one")
    with anyio.fail_after(60):
        async with create_connector(config) as newer:
            with pytest.raises(FencedInstanceIdError) as info:
                async with create_connector(config) as older:
                    assert isinstance(older, KafkaConsumerConnector)
                    await older.create_message_streams({unique_topic: 1})
                    await until_any([older], lambda: _owned(older) == everything)
                    # The older member's static leave, sent for it (as a close would) while
                    # it goes on: the instance id is released, and the newer takes it over.
                    group = older.group
                    assert isinstance(group, ConsumerGroupClient)
                    await group.consumer_heartbeat(
                        ConsumerGroupHeartbeatRequest(
                            unique_group_id,
                            older.coordinator.member_id,
                            LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                            instance_id="the-one",
                        )
                    )
                    await newer.create_message_streams({unique_topic: 1})
                    await until_any([newer], lambda: _owned(newer) == everything)
                    # The older member's next heartbeat is answered FENCED_INSTANCE_ID.
                    await anyio.sleep_forever()
            assert newer.state is ConnectorState.RUNNING
    error = info.value
    assert error.instance_id == "the-one" and "FENCED_INSTANCE_ID" in str(error)
