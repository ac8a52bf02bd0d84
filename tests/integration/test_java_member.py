"""The Java group member of the test kit: a real ``KafkaConsumer`` in a consumer group.

On both cluster flavours: one member consumes every record once, two members split the
partitions, a stopped member leaves the group at once (the other takes over well within the
session timeout), the KIP-848 ``consumer`` protocol works on Kafka 4, and an aiokafka group
member and a Java one share a group (the interop the Kafka-coordinated member will need).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.java_member import (
    JavaConsumerMember,
    JavaMemberError,
    JavaMemberState,
    JavaRecord,
)

pytestmark = pytest.mark.integration

PARTITIONS = 4
PER_PARTITION = 25
LIMIT_S = 60.0
CLOSE_S = 10.0

Produced = dict[int, list[tuple[bytes | None, bytes]]]


def _records(per_partition: int = PER_PARTITION, tag: str = "") -> Produced:
    return {
        p: [(f"k{p}-{i}".encode(), f"v{tag}{p}-{i}".encode()) for i in range(per_partition)]
        for p in range(PARTITIONS)
    }


def _all(topic: str) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, p) for p in range(PARTITIONS))


def _by_position(
    records: Sequence[JavaRecord],
) -> dict[tuple[int, int], tuple[bytes | None, bytes]]:
    """(partition, offset) -> (key, value); fails on a record delivered twice."""
    seen: dict[tuple[int, int], tuple[bytes | None, bytes]] = {}
    for r in records:
        assert (r.partition, r.offset) not in seen, f"delivered twice: {r}"
        assert r.value is not None
        seen[(r.partition, r.offset)] = (r.key, r.value)
    return seen


def _expected(
    produced: Produced, base: int = 0
) -> dict[tuple[int, int], tuple[bytes | None, bytes]]:
    return {(p, base + i): kv for p, rs in produced.items() for i, kv in enumerate(rs)}


async def _split_evenly(*members: JavaConsumerMember, topic: str) -> None:
    """Wait until each member owns PARTITIONS / len(members) partitions (a settled split)."""
    share = PARTITIONS // len(members)
    for member in members:
        await member.wait_for_assignment(lambda tps: len(tps) == share, LIMIT_S)
    owned = [m.assigned_partitions() for m in members]
    assert frozenset().union(*owned) == _all(topic)
    assert sum(len(o) for o in owned) == PARTITIONS, f"a partition owned twice: {owned}"


def _at_least(count: int) -> Callable[[Sequence[JavaRecord]], bool]:
    return lambda records: len(records) >= count


async def _consume_own_share(*members: JavaConsumerMember) -> None:
    """Wait until each member has the records of the partitions it owns."""
    for member in members:
        share = len(member.assigned_partitions()) * PER_PARTITION
        await member.wait_for(_at_least(share), LIMIT_S)


# -- no servers ------------------------------------------------------------------------------


def test_consumer_properties_follow_the_protocol() -> None:
    classic = JavaConsumerMember("127.0.0.1:1", "g", "t", assignor="roundrobin", commit="sync")
    props = classic.consumer_properties()
    assert props["partition.assignment.strategy"].endswith(".RoundRobinAssignor")
    assert props["group.protocol"] == "classic"
    assert props["enable.auto.commit"] == "false"
    assert props["session.timeout.ms"] == "10000"

    new = JavaConsumerMember(
        "127.0.0.1:1",
        "g",
        re.compile("t-.*"),
        group_protocol="consumer",
        extra_properties={"max.poll.records": "7"},
    )
    props = new.consumer_properties()
    assert props["group.remote.assignor"] == "range"
    assert "partition.assignment.strategy" not in props
    assert "session.timeout.ms" not in props  # a broker setting with the consumer protocol
    assert props["max.poll.records"] == "7"


@pytest.mark.parametrize(
    ("kwargs", "topics"),
    [
        ({"assignor": "uniform"}, "t"),
        ({"group_protocol": "consumer", "assignor": "roundrobin"}, "t"),
        ({"group_protocol": "eager"}, "t"),
        ({"commit": "async"}, "t"),
        ({"flavour": "kafka2"}, "t"),
        ({}, []),
    ],
)
def test_rejects_bad_arguments(kwargs: dict[str, Any], topics: str | list[str]) -> None:
    with pytest.raises(ValueError):
        JavaConsumerMember("127.0.0.1:1", "g", topics, **kwargs)


async def test_waiting_before_start_raises() -> None:
    member = JavaConsumerMember("127.0.0.1:1", "g", "t")
    with pytest.raises(JavaMemberError):
        await member.wait_for(lambda records: True, 1)
    assert await member.stop() is None


async def test_a_rejected_configuration_fails_the_start(tmp_path: Path) -> None:
    member = JavaConsumerMember(
        "127.0.0.1:1",
        "g",
        "t",
        extra_properties={"partition.assignment.strategy": "no.such.Assignor"},
        work_dir=tmp_path,
    )
    with pytest.raises(JavaMemberError, match="no.such.Assignor"):
        await member.start()
    assert member.state is JavaMemberState.STOPPED
    assert member.returncode == 1
    assert member.errors and "no.such.Assignor" in member.errors[0]


async def test_a_member_killed_from_outside_fails_the_wait(tmp_path: Path) -> None:
    # No broker at all: the consumer runs, retrying its bootstrap connection.
    async with JavaConsumerMember("127.0.0.1:1", "g", "t", work_dir=tmp_path) as member:
        assert member.pid is not None
        os.kill(member.pid, signal.SIGKILL)
        with pytest.raises(JavaMemberError, match="not running"):
            await member.wait_for(lambda records: len(records) > 0, LIMIT_S)
        assert member.state is JavaMemberState.EXITED
    assert member.returncode == -signal.SIGKILL
    assert not member.closed_cleanly
    assert member.log_file.is_file()


# -- on a cluster ----------------------------------------------------------------------------


async def test_one_member_consumes_every_record_once(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await any_cluster.create_topic(unique_topic, PARTITIONS)
    produced = _records()
    await any_cluster.produce_to_partitions(unique_topic, produced)

    async with JavaConsumerMember(any_cluster, unique_group_id, [unique_topic]) as member:
        assert member.state.value == "running"
        await member.wait_for(lambda recs: len(recs) >= PARTITIONS * PER_PARTITION, LIMIT_S)
        assert member.assigned_partitions() == _all(unique_topic)
        assert member.generation >= 1 and member.member_id

    assert member.state is JavaMemberState.STOPPED
    assert member.closed_cleanly, member.log_tail()
    assert member.errors == []
    assert {r.topic for r in member.records} == {unique_topic}
    assert _by_position(member.records) == _expected(produced)
    # In each partition, in offset order.
    for p in range(PARTITIONS):
        offsets = [r.offset for r in member.records if r.partition == p]
        assert offsets == sorted(offsets)


async def test_sync_commits_are_reported_and_resume(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await any_cluster.create_topic(unique_topic, PARTITIONS)
    first = _records()
    await any_cluster.produce_to_partitions(unique_topic, first)
    async with JavaConsumerMember(
        any_cluster, unique_group_id, unique_topic, commit="sync"
    ) as member:
        await member.wait_until(
            lambda: member.committed == dict.fromkeys(_all(unique_topic), PER_PARTITION),
            LIMIT_S,
        )
    assert member.closed_cleanly

    second = _records(tag="b")
    await any_cluster.produce_to_partitions(unique_topic, second)
    async with JavaConsumerMember(
        any_cluster, unique_group_id, unique_topic, commit="sync"
    ) as again:
        await again.wait_for(lambda recs: len(recs) >= PARTITIONS * PER_PARTITION, LIMIT_S)
    # Only the records after the committed offsets.
    assert _by_position(again.records) == _expected(second, base=PER_PARTITION)


async def test_two_members_split_the_partitions(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await any_cluster.create_topic(unique_topic, PARTITIONS)
    async with (
        JavaConsumerMember(any_cluster, unique_group_id, [unique_topic]) as a,
        JavaConsumerMember(any_cluster, unique_group_id, [unique_topic]) as b,
    ):
        await _split_evenly(a, b, topic=unique_topic)
        assert a.generation == b.generation
        assert a.member_id != b.member_id

        produced = _records()
        await any_cluster.produce_to_partitions(unique_topic, produced)
        await _consume_own_share(a, b)

    partitions_a = {r.partition for r in a.records}
    partitions_b = {r.partition for r in b.records}
    assert partitions_a.isdisjoint(partitions_b)
    assert _by_position([*a.records, *b.records]) == _expected(produced)
    assert a.closed_cleanly and b.closed_cleanly


async def test_a_stopped_member_leaves_the_group_at_once(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    # A session timeout far longer than the wait below: only a LeaveGroup explains the
    # takeover.
    slow = 45_000
    await any_cluster.create_topic(unique_topic, PARTITIONS)
    async with (
        JavaConsumerMember(
            any_cluster, unique_group_id, unique_topic, session_timeout_ms=slow
        ) as a,
        JavaConsumerMember(
            any_cluster, unique_group_id, unique_topic, session_timeout_ms=slow
        ) as b,
    ):
        await _split_evenly(a, b, topic=unique_topic)
        await a.stop()
        assert a.closed_cleanly, a.log_tail()
        assert a.state is JavaMemberState.STOPPED
        await b.wait_for_assignment(lambda tps: tps == _all(unique_topic), 15)


@pytest.mark.parametrize("any_cluster", ["kraft"], indirect=True)
async def test_consumer_group_protocol(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    """KIP-848 (``group.protocol=consumer``) on Kafka 4: split, consume, leave."""
    await any_cluster.create_topic(unique_topic, PARTITIONS)
    new = "consumer"
    async with (
        JavaConsumerMember(any_cluster, unique_group_id, unique_topic, group_protocol=new) as a,
        JavaConsumerMember(any_cluster, unique_group_id, unique_topic, group_protocol=new) as b,
    ):
        await _split_evenly(a, b, topic=unique_topic)
        produced = _records()
        await any_cluster.produce_to_partitions(unique_topic, produced)
        await _consume_own_share(a, b)
        assert {r.partition for r in a.records}.isdisjoint({r.partition for r in b.records})
        assert _by_position([*a.records, *b.records]) == _expected(produced)

        await a.stop()
        assert a.closed_cleanly, a.log_tail()
        await b.wait_for_assignment(lambda tps: tps == _all(unique_topic), LIMIT_S)


class _Assignments(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka's rebalance listener: the owned partitions, with an event per change."""

    def __init__(self) -> None:
        self.owned: frozenset[TopicPartition] = frozenset()
        self.changed = asyncio.Event()

    async def on_partitions_revoked(self, revoked: Sequence[KafkaTopicPartition]) -> None:
        self.owned = self.owned - {TopicPartition(tp.topic, tp.partition) for tp in revoked}

    async def on_partitions_assigned(self, assigned: Sequence[KafkaTopicPartition]) -> None:
        self.owned = frozenset(TopicPartition(tp.topic, tp.partition) for tp in assigned)
        self.changed.set()
        self.changed = asyncio.Event()

    async def wait_for(self, count: int) -> None:
        async with asyncio.timeout(LIMIT_S):
            while len(self.owned) != count:
                await self.changed.wait()


async def test_an_aiokafka_member_and_a_java_member_share_a_group(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await any_cluster.create_topic(unique_topic, PARTITIONS)
    async with JavaConsumerMember(any_cluster, unique_group_id, unique_topic) as java:
        await java.wait_for_assignment(lambda tps: tps == _all(unique_topic), LIMIT_S)

        listener = _Assignments()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=any_cluster.bootstrap_servers,
            group_id=unique_group_id,
            partition_assignment_strategy=(RangePartitionAssignor,),
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
        )
        await consumer.start()
        try:
            consumer.subscribe([unique_topic], listener=listener)
            # aiokafka's coordinator joins once something waits for records.
            fetching = asyncio.create_task(consumer.getone())
            try:
                await listener.wait_for(PARTITIONS // 2)
                await java.wait_for_assignment(lambda tps: len(tps) == PARTITIONS // 2, LIMIT_S)
            finally:
                fetching.cancel()
                await asyncio.gather(fetching, return_exceptions=True)
            assert listener.owned.isdisjoint(java.assigned_partitions())
            assert listener.owned | java.assigned_partitions() == _all(unique_topic)

            produced = _records()
            await any_cluster.produce_to_partitions(unique_topic, produced)
            java_share = len(java.assigned_partitions()) * PER_PARTITION
            await java.wait_for(lambda recs: len(recs) >= java_share, LIMIT_S)
            ours: list[tuple[int, int]] = []
            async with asyncio.timeout(LIMIT_S):
                while len(ours) < PARTITIONS * PER_PARTITION - java_share:
                    batches = await consumer.getmany(timeout_ms=1000)
                    ours.extend((m.partition, m.offset) for ms in batches.values() for m in ms)
        finally:
            await asyncio.wait_for(consumer.stop(), CLOSE_S)

        java_positions = {(r.partition, r.offset) for r in java.records}
        assert java_positions.isdisjoint(ours)
        assert java_positions | set(ours) == set(_expected(produced))
        # aiokafka left the group on stop: the Java member takes everything back.
        await java.wait_for_assignment(lambda tps: tps == _all(unique_topic), LIMIT_S)
