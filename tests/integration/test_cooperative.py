"""Cooperative rebalancing (KIP-429, ``cooperative-sticky``) of the classic protocol on a real
Kafka 3.9 broker (before KIP-848, where a classic group's join is otherwise eager).

A member alone owns every partition; a second member joins. Under ``cooperative-sticky`` the
first member gives up only the partitions that move (its rebalance listener is told of exactly
those, and its rebalance history counts the rest as kept) and the follow-up rebalance hands
them to the joiner; under ``range`` (eager) the same join makes it give up everything, so the
observation can fail. Every record is delivered once across the group. The same with a Java
``KafkaConsumer`` configured with ``CooperativeStickyAssignor`` as the joiner, and as the
leader a member of ours joins; and the eager ``sticky`` assignor with a Java leader reading
our ``StickyAssignorUserData``; and KIP-429's upgrade step, an eager member of ours with the
Java default list ``range,cooperative-sticky`` next to a cooperative Java member.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _support import Seen, drain

from aiozkconsumer import ConsumerConfig, create_connector
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.group.classic import KafkaCoordinator
from aiozkconsumer.subscription import ConsumerThreadId
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.java_member import JavaConsumerMember

pytestmark = pytest.mark.integration

PARTITIONS = 6
FIRST = 30  # records per partition before the joiner
MORE = 30  # records per partition after it joined


class Releases:
    """A rebalance listener that records what its member gives up, per rebalance."""

    def __init__(self) -> None:
        self.released: list[set[int]] = []

    async def before_releasing_partitions(self, partition_ownership: dict[str, set[int]]) -> None:
        self.released.append({p for ps in partition_ownership.values() for p in ps})

    async def before_starting_fetchers(
        self, consumer_id: str, global_partition_assignment: dict[str, dict[int, ConsumerThreadId]]
    ) -> None:
        return None

    @property
    def all(self) -> set[int]:
        return set().union(*self.released) if self.released else set()


def _config(cluster: LocalCluster, group: str, strategy: str) -> ConsumerConfig:
    return ConsumerConfig(
        group_id=group,
        group_coordinator="kafka",
        bootstrap_servers=cluster.bootstrap_servers,
        partition_assignment_strategy=strategy,
        auto_offset_reset="earliest",
        auto_commit_interval_ms=500,
        session_timeout_ms=10000,
        heartbeat_interval_ms=500,
    )


async def _produce(cluster: LocalCluster, topic: str, first: int, n: int) -> None:
    await cluster.produce_to_partitions(
        topic, {p: [(b"k", b"%d" % (first + i)) for i in range(n)] for p in range(PARTITIONS)}
    )


def _member(c: ConsumerConnector) -> KafkaCoordinator:
    member = c.coordinator
    assert isinstance(member, KafkaCoordinator)
    return member


def _owned(c: ConsumerConnector) -> set[int]:
    return {tp.partition for tp in c.statistics().owned_partitions}


async def _until(condition: Any, limit_s: float = 60) -> None:
    with anyio.fail_after(limit_s):
        while True:
            if condition():
                return
            # Two members' (or processes') views: no single event says the group settled.
            await anyio.sleep(0.1)


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
async def test_a_joiner_takes_only_what_moves(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str, strategy: str
) -> None:
    cluster, topic, group = zk_kafka_cluster, unique_topic, unique_group_id
    await cluster.create_topic(topic, PARTITIONS)
    await _produce(cluster, topic, 0, FIRST)
    seen = Seen()
    first_listener = Releases()
    async with create_connector(_config(cluster, group, strategy)) as first:
        first.set_consumer_rebalance_listener(first_listener)
        streams = await first.create_message_streams({topic: 1})
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, streams[topic][0], 0, seen)
            await seen.wait_until(lambda: len(seen.pairs) == PARTITIONS * FIRST)
            assert _owned(first) == set(range(PARTITIONS))
            history_before = len(_member(first).history)
            async with create_connector(_config(cluster, group, strategy)) as second:
                streams2 = await second.create_message_streams({topic: 1})
                tg.start_soon(drain, streams2[topic][0], 1, seen)
                await _until(
                    lambda: (
                        len(_owned(first)) == len(_owned(second)) == PARTITIONS // 2
                        and not _member(first).machine.rebalancing
                    )
                )
                kept, moved = _owned(first), _owned(second)
                if strategy == "range":
                    # Eager: the join made the first member give everything up.
                    assert first_listener.all == set(range(PARTITIONS))
                else:
                    assert _member(first).cooperative and _member(second).cooperative
                    # Only what moved was given up; the kept partitions never stopped.
                    assert first_listener.all == moved
                    assert not first_listener.all & kept
                    records = list(_member(first).history)[history_before:]
                    assert sum(r.released for r in records) == len(moved)
                    assert any(r.kept == len(kept) for r in records)
                    assert "need to revoke partitions and re-join" in {r.reason for r in records}
                await _produce(cluster, topic, FIRST, MORE)
                total = PARTITIONS * (FIRST + MORE)
                await seen.wait_until(lambda: len(seen.pairs) >= total)
                # One rebalance for the join, plus the cooperative follow-up; no churn (a
                # commit refused during the join must not make the member drop and rejoin).
                expected = 3 if strategy == "cooperative-sticky" else 2
                assert _member(first).generation == _member(second).generation == expected
                tg.cancel_scope.cancel()
    assert len(seen.pairs) == len(set(seen.pairs)) == PARTITIONS * (FIRST + MORE)


async def test_a_java_cooperative_sticky_member_shares_the_group(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    cluster, topic, group = zk_kafka_cluster, unique_topic, unique_group_id
    await cluster.create_topic(topic, PARTITIONS)
    await _produce(cluster, topic, 0, FIRST)
    seen = Seen()
    listener = Releases()
    strategy = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
    async with create_connector(_config(cluster, group, strategy)) as ours:
        ours.set_consumer_rebalance_listener(listener)
        streams = await ours.create_message_streams({topic: 1})
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, streams[topic][0], 0, seen)
            await seen.wait_until(lambda: len(seen.pairs) == PARTITIONS * FIRST)
            async with JavaConsumerMember(
                cluster, group, [topic], assignor="cooperative-sticky", commit="sync"
            ) as java:
                await java.wait_for_assignment(bool, 90)
                await _until(
                    lambda: (
                        len(_owned(ours)) + len(java.assigned_partitions()) == PARTITIONS
                        and len(_owned(ours)) == PARTITIONS // 2
                    )
                )
                theirs = {tp.partition for tp in java.assigned_partitions()}
                assert theirs == set(range(PARTITIONS)) - _owned(ours)
                # Ours gave up exactly what the Java member took, nothing it kept.
                assert listener.all == theirs
                await _produce(cluster, topic, FIRST, MORE)
                mine_now = _owned(ours)
                await seen.wait_until(
                    lambda: (
                        {(p, o) for p, o in seen.pairs if p in mine_now}
                        >= {(p, o) for p in mine_now for o in range(FIRST + MORE)}
                    )
                )
                await java.wait_for(
                    lambda records: (
                        {(r.partition, r.offset) for r in records if r.partition in theirs}
                        >= {(p, o) for p in theirs for o in range(FIRST, FIRST + MORE)}
                    ),
                    timeout_s=60,
                )
                java_pairs = [(r.partition, r.offset) for r in java.records]
            tg.cancel_scope.cancel()
    # Once across the group: the Java member starts where ours committed.
    ours_pairs = set(seen.pairs)
    assert len(seen.pairs) == len(ours_pairs)
    assert not ours_pairs & set(java_pairs)
    assert ours_pairs | set(java_pairs) == {
        (p, o) for p in range(PARTITIONS) for o in range(FIRST + MORE)
    }


async def test_ours_joins_a_java_cooperative_sticky_leader(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    # The Java member leads: its CooperativeStickyAssignor reads our subscription, and it
    # revokes (only) what moves to us, then rejoins; we take those in the follow-up.
    cluster, topic, group = zk_kafka_cluster, unique_topic, unique_group_id
    await cluster.create_topic(topic, PARTITIONS)
    await _produce(cluster, topic, 0, FIRST)
    seen = Seen()
    listener = Releases()
    async with JavaConsumerMember(
        cluster, group, [topic], assignor="cooperative-sticky", commit="sync"
    ) as java:
        await java.wait_for_assignment(lambda tps: len(tps) == PARTITIONS, 90)
        await java.wait_for(lambda records: len(records) == PARTITIONS * FIRST, timeout_s=60)
        async with create_connector(_config(cluster, group, "cooperative-sticky")) as ours:
            ours.set_consumer_rebalance_listener(listener)
            streams = await ours.create_message_streams({topic: 1})
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain, streams[topic][0], 0, seen)
                await _until(
                    lambda: (
                        len(_owned(ours)) == PARTITIONS // 2
                        and len(java.assigned_partitions()) == PARTITIONS // 2
                    )
                )
                mine = _owned(ours)
                revoked = {
                    tp.partition
                    for a in java.assignments
                    if a.change in ("revoked", "lost")
                    for tp in a.changed
                }
                assert revoked == mine
                assert not any(a.change == "lost" for a in java.assignments)
                assert listener.all == set()
                await _produce(cluster, topic, FIRST, MORE)
                wanted = {(p, o) for p in mine for o in range(FIRST, FIRST + MORE)}
                await seen.wait_until(lambda: set(seen.pairs) >= wanted)
                tg.cancel_scope.cancel()
        java_pairs = [(r.partition, r.offset) for r in java.records]
    # Ours starts where the Java member committed on revocation: nothing twice.
    assert sorted(seen.pairs) == sorted(wanted)
    assert not set(seen.pairs) & set(java_pairs)


async def test_the_eager_sticky_assignor_with_a_java_leader(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    # `sticky` is eager; what a member owned travels in its user data
    # (StickyAssignorUserData). A Java StickyAssignor leads; when a third member joins, the
    # first member of ours keeps two of its three partitions (read from our user data), the
    # same two a Java member would keep.
    cluster, topic, group = zk_kafka_cluster, unique_topic, unique_group_id
    await cluster.create_topic(topic, PARTITIONS)
    strategy = "org.apache.kafka.clients.consumer.StickyAssignor"
    async with JavaConsumerMember(cluster, group, [topic], assignor="sticky") as java:
        await java.wait_for_assignment(lambda tps: len(tps) == PARTITIONS, 90)
        async with create_connector(_config(cluster, group, strategy)) as ours:
            await ours.create_message_streams({topic: 1})
            await _until(lambda: len(_owned(ours)) == len(java.assigned_partitions()) == 3)
            before = _owned(ours)
            java_before = {tp.partition for tp in java.assigned_partitions()}
            async with create_connector(_config(cluster, group, strategy)) as third:
                await third.create_message_streams({topic: 1})
                await _until(
                    lambda: (
                        len(_owned(ours)) == len(_owned(third)) == 2
                        and len(java.assigned_partitions()) == 2
                    )
                )
                # Each keeps its quota of what it owned, the lowest partitions first
                # (ConstrainedAssignmentBuilder sorts owned partitions by partition); without
                # our user data the Java leader would give ours two of the four it freed.
                assert _owned(ours) == set(sorted(before)[:2])
                java_now = {tp.partition for tp in java.assigned_partitions()}
                assert java_now == set(sorted(java_before)[:2])
                assert not _member(ours).cooperative


async def test_an_eager_member_with_the_java_default_list_and_a_cooperative_java_member(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    # KIP-429's upgrade step: ours offers the Java client's default `range,cooperative-sticky`
    # (eager), the Java member `cooperative-sticky` alone; the broker picks the assignor both
    # offer, and ours, eager, gives everything up before it joins.
    cluster, topic, group = zk_kafka_cluster, unique_topic, unique_group_id
    await cluster.create_topic(topic, PARTITIONS)
    listener = Releases()
    async with create_connector(_config(cluster, group, "range,cooperative-sticky")) as ours:
        ours.set_consumer_rebalance_listener(listener)
        await ours.create_message_streams({topic: 1})
        await _until(lambda: len(_owned(ours)) == PARTITIONS)
        assert _member(ours).protocol == "range" and not _member(ours).cooperative
        async with JavaConsumerMember(
            cluster, group, [topic], assignor="cooperative-sticky"
        ) as java:
            await _until(
                lambda: (
                    len(_owned(ours)) == len(java.assigned_partitions()) == PARTITIONS // 2
                    and not _member(ours).machine.rebalancing
                )
            )
            assert _member(ours).protocol == "cooperative-sticky"
            theirs = {tp.partition for tp in java.assigned_partitions()}
            assert not theirs & _owned(ours)
            assert listener.all == set(range(PARTITIONS))  # eager: everything given up
