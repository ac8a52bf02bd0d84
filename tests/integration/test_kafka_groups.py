"""Kafka-coordinated groups (``group.coordinator=kafka``) on real brokers, Kafka 3.9 and 4.3.

Members of ours share groups with each other and with aiokafka's consumer; heartbeats survive
a slow reader; a member cut off past its session timeout is fenced and its commits refused;
metadata changes reassign; interceptors see every record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Iterator, Mapping
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from aiozkconsumer import (
    CommitFencedError,
    ConnectorState,
    ConsumerConfig,
    GroupCoordinatorError,
    KafkaConsumerConnector,
    MessageAndMetadata,
    TopicPartition,
    UnknownTopicError,
    Whitelist,
    create_connector,
)
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.group.classic import KafkaCoordinator
from aiozkconsumer.stream import KafkaStream
from aiozkconsumer.testing import LocalCluster

pytestmark = pytest.mark.integration


def kafka_config(cluster: LocalCluster, group: str, **kw: Any) -> ConsumerConfig:
    kw.setdefault("auto_offset_reset", "earliest")
    kw.setdefault("auto_commit_interval_ms", 500)
    kw.setdefault("session_timeout_ms", 10000)
    kw.setdefault("heartbeat_interval_ms", 1000)
    return ConsumerConfig(
        group_id=group,
        group_coordinator="kafka",
        bootstrap_servers=cluster.bootstrap_servers,
        **kw,
    )


async def _topic(cluster: LocalCluster, name: str, partitions: int, per_partition: int) -> None:
    await cluster.create_topic(name, partitions)
    if per_partition:
        await cluster.produce_to_partitions(
            name,
            {p: [(b"k", b"v%d" % i) for i in range(per_partition)] for p in range(partitions)},
        )


class Deliveries:
    """Who handed out which (partition, offset), with an event per growth."""

    def __init__(self) -> None:
        self.by: dict[tuple[int, int], list[str]] = {}
        self._grew = anyio.Event()

    def add(self, member: str, msg: MessageAndMetadata) -> None:
        self.by.setdefault((msg.partition, msg.offset), []).append(member)
        self._grew.set()
        self._grew = anyio.Event()

    async def wait_for(self, count: int, limit_s: float = 90) -> None:
        with anyio.fail_after(limit_s):
            while len(self.by) < count:
                await self._grew.wait()

    def duplicates(self) -> dict[tuple[int, int], list[str]]:
        return {k: v for k, v in self.by.items() if len(v) > 1}


async def _drain(stream: KafkaStream, member: str, seen: Deliveries) -> None:
    async for msg in stream:
        seen.add(member, msg)


async def _until(c: ConsumerConnector, predicate: Any, limit_s: float = 60) -> None:
    with anyio.fail_after(limit_s):
        while not predicate():
            await c.wait_for_state_change()


async def test_factory_returns_the_kind_the_config_names(any_cluster: LocalCluster) -> None:
    connector = create_connector(kafka_config(any_cluster, "factory"))
    assert isinstance(connector, KafkaConsumerConnector)


async def test_two_members_split_the_partitions_and_hand_over_at_the_commit(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(any_cluster, unique_topic, 4, 25)
    seen = Deliveries()
    config = kafka_config(any_cluster, unique_group_id)
    async with create_connector(config) as b, anyio.create_task_group() as tg:
        async with create_connector(config) as a:
            streams_a = await a.create_message_streams({unique_topic: 2})
            # b joins: the group rebalances (a rejoins too) and the partitions are split.
            streams_b = await b.create_message_streams({unique_topic: 2})
            for s in streams_a[unique_topic]:
                tg.start_soon(_drain, s, "a", seen)
            for s in streams_b[unique_topic]:
                tg.start_soon(_drain, s, "b", seen)
            await seen.wait_for(100)
            await _until(
                a,
                lambda: (
                    a.state is ConnectorState.RUNNING
                    and a.statistics().group_generation == b.statistics().group_generation
                ),
            )
            owned_a = set(a.statistics().owned_partitions)
            owned_b = set(b.statistics().owned_partitions)
            assert owned_a and owned_b and not owned_a & owned_b
            assert owned_a | owned_b == {TopicPartition(unique_topic, p) for p in range(4)}
            assert a.statistics().member_id != b.statistics().member_id
        # a left (committed first, then LeaveGroup): b owns everything and goes on.
        await _until(b, lambda: len(b.statistics().owned_partitions) == 4)
        await any_cluster.produce_to_partitions(
            unique_topic, {p: [(b"k", b"late")] * 5 for p in range(4)}
        )
        await seen.wait_for(120)
        assert seen.duplicates() == {}
        assert sorted(seen.by) == [(p, o) for p in range(4) for o in range(30)]
        await b.commit_offsets()
        assert b.statistics().committed_offsets == {
            TopicPartition(unique_topic, p): 30 for p in range(4)
        }
        tg.cancel_scope.cancel()


async def test_an_aiokafka_member_shares_the_group(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(any_cluster, unique_topic, 4, 20)
    seen = Deliveries()
    ours = create_connector(kafka_config(any_cluster, unique_group_id))
    theirs = AIOKafkaConsumer(
        unique_topic,
        bootstrap_servers=any_cluster.bootstrap_servers,
        group_id=unique_group_id,
        auto_offset_reset="earliest",
        partition_assignment_strategy=(RangePartitionAssignor,),
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
    )
    await theirs.start()
    try:
        async with ours, anyio.create_task_group() as tg:
            streams = await ours.create_message_streams({unique_topic: 1})
            tg.start_soon(_drain, streams[unique_topic][0], "ours", seen)

            async def aiokafka_reader() -> None:
                async for rec in theirs:
                    seen.add(
                        "aiokafka",
                        MessageAndMetadata(
                            rec.topic, rec.partition, rec.offset, rec.key, rec.value, -1, -1, ()
                        ),
                    )

            tg.start_soon(aiokafka_reader)
            await seen.wait_for(80)
            await _until(ours, lambda: len(ours.statistics().owned_partitions) in (1, 2, 3))
            mine = {tp.partition for tp in ours.statistics().owned_partitions}
            theirs_parts = {tp.partition for tp in theirs.assignment()}
            assert mine and theirs_parts and not mine & theirs_parts
            assert mine | theirs_parts == set(range(4))
            assert seen.duplicates() == {}
            tg.cancel_scope.cancel()
    finally:
        await theirs.stop()


async def test_a_member_offering_another_assignor_gets_a_clear_error(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(any_cluster, unique_topic, 2, 0)
    theirs = AIOKafkaConsumer(
        bootstrap_servers=any_cluster.bootstrap_servers,
        group_id=unique_group_id,
        partition_assignment_strategy=(RoundRobinPartitionAssignor,),
    )
    assigned = asyncio.Event()

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            pass

        async def on_partitions_assigned(self, assigned_tps: Any) -> None:
            assigned.set()

    theirs.subscribe([unique_topic], listener=Listener())
    await theirs.start()
    try:
        with anyio.fail_after(60):
            await assigned.wait()
        config = kafka_config(any_cluster, unique_group_id, partition_assignment_strategy="range")
        async with create_connector(config) as ours:
            with pytest.raises(GroupCoordinatorError, match="INCONSISTENT_GROUP_PROTOCOL"):
                await ours.create_message_streams({unique_topic: 1})
    finally:
        await theirs.stop()


async def test_unknown_topic_in_a_static_subscription(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    async with create_connector(kafka_config(any_cluster, unique_group_id)) as c:
        with pytest.raises(UnknownTopicError, match=unique_topic):
            await c.create_message_streams({unique_topic: 1})


async def test_heartbeats_survive_a_reader_slower_than_the_session_timeout(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(zk_kafka_cluster, unique_topic, 1, 3)
    config = kafka_config(
        zk_kafka_cluster, unique_group_id, session_timeout_ms=6000, heartbeat_interval_ms=500
    )
    async with create_connector(config) as c:
        streams = await c.create_message_streams({unique_topic: 1})
        generation = c.statistics().group_generation
        got = []
        async for msg in streams[unique_topic][0]:
            got.append(msg.offset)
            if len(got) == 3:
                break
            # The handler: slower than the session timeout. The heartbeat coroutine keeps the
            # membership meanwhile (this sleep is the behaviour under test).
            await anyio.sleep(7)
        stats = c.statistics()
        assert got == [0, 1, 2]
        assert stats.group_generation == generation and stats.completed_rebalances == 1
        assert stats.state is ConnectorState.RUNNING
        assert await c.commit_offsets() == 1


@pytest.fixture(scope="module")
def linked_cluster() -> Iterator[LocalCluster]:
    loop = asyncio.new_event_loop()
    cluster = LocalCluster(proxy_links=1)
    try:
        loop.run_until_complete(cluster.start())
        yield cluster
    finally:
        loop.run_until_complete(cluster.stop())
        loop.close()


async def test_a_member_cut_off_past_its_session_timeout_is_fenced(
    linked_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    cluster = linked_cluster
    await _topic(cluster, unique_topic, 2, 10)
    link = cluster.link(0)
    base = kafka_config(
        cluster,
        unique_group_id,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        auto_commit_enable=False,
    )
    zombie_config = dataclasses.replace(base, bootstrap_servers=link.bootstrap_servers)
    seen = Deliveries()
    try:
        async with create_connector(zombie_config) as zombie, anyio.create_task_group() as tg:
            streams = await zombie.create_message_streams({unique_topic: 1})
            tg.start_soon(_drain, streams[unique_topic][0], "zombie", seen)
            await seen.wait_for(20)
            await zombie.commit_offsets({TopicPartition(unique_topic, 0): 4})
            await link.cut("brokers")  # heartbeats and commits of the zombie now go nowhere
            async with create_connector(base) as heir:
                await heir.create_message_streams({unique_topic: 1})
                # The coordinator evicts the zombie after its session timeout; heir owns all.
                await _until(heir, lambda: len(heir.statistics().owned_partitions) == 2, 90)
                assert heir.statistics().committed_offsets[TopicPartition(unique_topic, 0)] == 4
                # Both commits of the heir before the heal: once healed, the zombie rejoins and
                # the group rebalances, so a later commit of the heir could be refused for a
                # partition that moved meanwhile (a race of the test, not the point of it).
                await heir.commit_offsets(
                    {TopicPartition(unique_topic, 0): 7, TopicPartition(unique_topic, 1): 10}
                )
                old_generation = zombie.statistics().group_generation
                await link.heal("brokers")
                # The zombie's generation is over: its commit is refused, nothing moves back.
                tps = [TopicPartition(unique_topic, p) for p in (0, 1)]
                try:
                    await zombie.commit_offsets({tps[0]: 5})
                except CommitFencedError:
                    fetched = await heir.offset_store.fetch(tps)
                    assert fetched == {tps[0]: 7, tps[1]: 10}
                else:
                    # Only a member that rejoined since the heal may commit it: the heartbeat
                    # after the heal found it fenced and it rejoined before this commit (seen
                    # in a CI run), in a new generation that gave it the partition (a commit
                    # of a partition it does not own is refused before it is sent). Whether
                    # it still owns it now is another race: the heir's rejoin may already
                    # have started the next rebalance (seen in a CI run too).
                    stats = zombie.statistics()
                    assert stats.group_generation != old_generation, stats
            tg.cancel_scope.cancel()
    finally:
        await link.heal("brokers")


class _Rejoined:
    """A rebalance listener that sets an event when the member starts its fetchers."""

    def __init__(self) -> None:
        self.started = anyio.Event()

    async def before_releasing_partitions(self, partition_ownership: Any) -> None:
        return None

    async def before_starting_fetchers(self, consumer_id: str, partition_ownership: Any) -> None:
        self.started.set()


@pytest.fixture(scope="module")
def linked_kraft_cluster() -> Iterator[LocalCluster]:
    """A KRaft broker (Kafka 4: the group coordinator of KIP-848's rewrite, which serves
    classic groups too) behind one proxied link."""
    loop = asyncio.new_event_loop()
    cluster = LocalCluster(flavour="kraft", proxy_links=1)
    try:
        loop.run_until_complete(cluster.start())
        yield cluster
    finally:
        loop.run_until_complete(cluster.stop())
        loop.close()


async def test_a_follower_rejoining_a_stable_group_hands_nothing_out_past_its_session(
    linked_kraft_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    """To a follower that rejoins a stable group with unchanged metadata, Kafka 4's group
    coordinator returns the current generation at once, without restarting the member's
    session timer (``GroupMetadataManager.classicGroupJoinExistingMember``; SyncGroup in
    ``STABLE``; the older ``GroupCoordinator.scala`` restarted it at that SyncGroup, so a
    Kafka 3 cluster does not show this). Here the follower's heartbeats go unanswered for
    3.5 s (its link reset), it rejoins right after the heal, and its link is reset again as
    soon as it hands records out again. Unless a heartbeat was answered after the rejoin, its
    session on the coordinator ends about 6 s after the last heartbeat before the first cut,
    and the leader takes its partition. The follower must hand nothing out of that partition
    once the leader owns it. Before the fix its lease ran 0.8 x ``session.timeout.ms`` from
    the SyncGroup, seconds past the session (found while diagnosing a CI chaos run's
    ownership overlap): 233 records, the last 2.5 s after the leader took the partition. Now
    only an answered heartbeat extends it, and the first one goes out at once after the
    SyncGroup."""
    cluster = linked_kraft_cluster
    await _topic(cluster, unique_topic, 2, 3000)
    link = cluster.link(0)
    base = kafka_config(
        cluster,
        unique_group_id,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        auto_commit_enable=False,
        # Eager assignors only: their subscription metadata does not change between joins
        # (cooperative-sticky's carries the member's generation, which makes every rejoin a
        # metadata change, hence a real rebalance).
        partition_assignment_strategy="range",
    )
    follower_config = dataclasses.replace(base, bootstrap_servers=link.bootstrap_servers)
    handed: list[tuple[float, int]] = []  # (time.monotonic(), partition) by the follower
    reading, reading_again = anyio.Event(), anyio.Event()
    rejoined_at = [math.inf]

    async def read_slowly(stream: KafkaStream) -> None:
        async for msg in stream:
            now = time.monotonic()
            handed.append((now, msg.partition))
            if len(handed) >= 20:
                reading.set()
            if now > rejoined_at[0]:
                reading_again.set()
            await anyio.sleep(0.01)  # a slow reader: the fetched records last

    try:
        async with create_connector(base) as leader, anyio.create_task_group() as tg:
            tg.start_soon(
                _drain,
                (await leader.create_message_streams({unique_topic: 1}))[unique_topic][0],
                "leader",
                Deliveries(),
            )
            await _until(leader, lambda: len(leader.statistics().owned_partitions) == 2)
            async with create_connector(follower_config) as follower:
                rejoined = _Rejoined()
                follower.set_consumer_rebalance_listener(rejoined)
                stream = (await follower.create_message_streams({unique_topic: 1}))[unique_topic]
                tg.start_soon(read_slowly, stream[0])
                await _until(follower, lambda: len(follower.statistics().owned_partitions) == 1)
                with anyio.fail_after(30):
                    await reading.wait()
                member = follower.coordinator
                assert isinstance(member, KafkaCoordinator)
                assert member.leader != member.member_id  # the leader joined first
                (mine,) = follower.statistics().owned_partitions
                generation = follower.statistics().group_generation

                await link.cut("brokers", "reset")  # no heartbeat answered from here
                await anyio.sleep(3.5)
                await link.heal("brokers")
                rejoined.started = anyio.Event()
                follower.request_rebalance("the test rejoins a stable group")
                with anyio.fail_after(5):
                    await rejoined.started.wait()
                rejoined_at[0] = time.monotonic()
                # The premise: the coordinator handed the same generation back.
                assert follower.statistics().group_generation == generation
                with anyio.fail_after(10):
                    await reading_again.wait()  # it fetched its partition again
                await link.cut("brokers", "reset")
                with anyio.fail_after(30):
                    await _until(leader, lambda: mine in leader.statistics().owned_partitions)
                leader_took = time.monotonic()
                # Until the follower's lease (the one it hands records out under) is over.
                lease_left = follower.ownership.gate.deadline - leader_took
                await anyio.sleep(min(max(0.0, lease_left), 10.0) + 0.5)
                late = [
                    t - leader_took for t, p in handed if p == mine.partition and t >= leader_took
                ]
                after_rejoin = [t for t, p in handed if p == mine.partition and t > rejoined_at[0]]
                await link.heal("brokers")
            tg.cancel_scope.cancel()
    finally:
        await link.heal("brokers")
    assert after_rejoin, "the follower handed nothing out after its rejoin: nothing was tested"
    assert not late, (
        f"the follower handed out {len(late)} records of {mine} after the leader took it "
        f"(the last {max(late):.2f} s after)"
    )


async def _add_partitions(cluster: LocalCluster, topic: str, total: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_partitions({topic: NewPartitions(total_count=total)})
    finally:
        await admin.close()


async def test_a_partition_count_increase_is_assigned_after_a_metadata_refresh(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(any_cluster, unique_topic, 2, 1)
    # The Java client's rule: found at the next periodic metadata refresh.
    config = kafka_config(any_cluster, unique_group_id, metadata_max_age_ms=1000)
    async with create_connector(config) as c:
        await c.create_message_streams({unique_topic: 1})
        assert len(c.statistics().owned_partitions) == 2
        await _add_partitions(any_cluster, unique_topic, 3)
        await _until(c, lambda: len(c.statistics().owned_partitions) == 3, 60)
        assert c.statistics().completed_rebalances >= 2


async def test_a_new_topic_matching_a_whitelist_is_consumed(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    first, second = f"{unique_topic}-a", f"{unique_topic}-b"
    await _topic(any_cluster, first, 1, 2)
    seen = {first: Deliveries(), second: Deliveries()}

    async def drain(stream: KafkaStream) -> None:
        async for msg in stream:
            seen[msg.topic].add("c", msg)

    config = kafka_config(any_cluster, unique_group_id, metadata_max_age_ms=1000)
    async with create_connector(config) as c:
        streams = await c.create_message_streams_by_filter(Whitelist(f"{unique_topic}-.*"), 1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, streams[0])
            await seen[first].wait_for(2)
            await _topic(any_cluster, second, 1, 3)
            await _until(
                c,
                lambda: TopicPartition(second, 0) in c.statistics().owned_partitions,
                60,
            )
            await seen[second].wait_for(3)
            assert sorted(seen[second].by) == [(0, 0), (0, 1), (0, 2)]
            tg.cancel_scope.cancel()


class _Recording:
    def __init__(self) -> None:
        self.consumed: list[tuple[int, int]] = []
        self.commits: list[Mapping[TopicPartition, int]] = []
        self.closed = False

    def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
        self.consumed.extend((r.partition, r.offset) for r in records)
        return records

    def on_commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.commits.append(dict(offsets))

    def close(self) -> None:
        self.closed = True


class _Raising(_Recording):
    def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
        raise RuntimeError("interceptor bug")


async def test_interceptors_see_every_record_and_commit_and_a_raising_one_loses_nothing(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(any_cluster, unique_topic, 2, 10)
    recording, raising = _Recording(), _Raising()
    config = kafka_config(any_cluster, unique_group_id, auto_commit_enable=False)
    seen = Deliveries()
    async with create_connector(config, interceptors=[raising, recording]) as c:
        streams = await c.create_message_streams({unique_topic: 1})
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain, streams[unique_topic][0], "c", seen)
            await seen.wait_for(20)
            tg.cancel_scope.cancel()
        assert (
            sorted(recording.consumed)
            == sorted(seen.by)
            == [(p, o) for p in range(2) for o in range(10)]
        )
        await c.commit_offsets()
        assert recording.commits == [{TopicPartition(unique_topic, p): 10 for p in range(2)}]
    assert recording.closed and raising.closed
