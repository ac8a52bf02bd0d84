"""The consumer group protocol of KIP-848 (``group.protocol=consumer``) on real brokers.

Members of ours share a group on Kafka 4.3: each gets a disjoint share; a member joining takes
partitions from the others without stopping the ones that do not move (the listener is told
of exactly the partitions that move); a member leaving hands its partitions over at its
commits; a member removed from the group is fenced (its commits refused) and rejoins. The
Kafka 3.9 ZooKeeper-mode broker has no such protocol: a clear error. Config rules first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from aiozkconsumer import (
    CommitFencedError,
    ConnectorState,
    ConsumerConfig,
    GroupCoordinatorError,
    KafkaConsumerConnector,
    MessageAndMetadata,
    TopicPartition,
    Whitelist,
    create_connector,
)
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.errors import InvalidConfigError
from aiozkconsumer.group.consumer_protocol import ConsumerProtocolCoordinator
from aiozkconsumer.kafka.client import KafkaClient
from aiozkconsumer.kafka.consumer_group import ConsumerGroupClient, ConsumerGroupHeartbeatRequest
from aiozkconsumer.kafka.group_admin import DescribedMember
from aiozkconsumer.stream import KafkaStream
from aiozkconsumer.subscription import ConsumerThreadId
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.tools.kafka_groups import KafkaGroupAdmin

# -- configuration (no servers) -----------------------------------------------------------


def _config(**kw: Any) -> ConsumerConfig:
    kw.setdefault("group_coordinator", "kafka")
    kw.setdefault("bootstrap_servers", "127.0.0.1:9092")
    kw.setdefault("group_protocol", "consumer")
    return ConsumerConfig(group_id="g", **kw)


def test_the_consumer_protocol_is_a_kafka_coordinator_setting() -> None:
    assert ConsumerConfig(group_id="g", zookeeper_connect="h:1").group_protocol == "classic"
    assert _config().consumer_protocol and _config().group_remote_assignor is None
    assert _config(group_remote_assignor="range").group_remote_assignor == "range"
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig(group_id="g", zookeeper_connect="h:1", group_protocol="consumer")
    assert info.value.key == "group.protocol" and "group.coordinator=kafka" in str(info.value)
    with pytest.raises(InvalidConfigError) as info:
        _config(group_protocol="eager")
    assert info.value.key == "group.protocol"
    with pytest.raises(InvalidConfigError) as info:
        _config(group_remote_assignor="sticky")
    assert info.value.key == "group.remote.assignor"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("partition_assignment_strategy", "roundrobin"),
        ("session_timeout_ms", 10000),
        ("heartbeat_interval_ms", 1000),
    ],
)
def test_classic_only_keys_are_refused_with_the_consumer_protocol(key: str, value: Any) -> None:
    with pytest.raises(InvalidConfigError) as info:
        _config(**{key: value})
    assert info.value.key == key.replace("_", ".")
    assert "group.protocol=consumer" in str(info.value)


def test_a_remote_assignor_needs_the_consumer_protocol() -> None:
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig(
            group_id="g",
            group_coordinator="kafka",
            bootstrap_servers="h:1",
            group_remote_assignor="uniform",
        )
    assert info.value.key == "group.remote.assignor"
    props = {
        "group.id": "g",
        "group.coordinator": "kafka",
        "bootstrap.servers": "h:1",
        "group.protocol": "consumer",
        "group.remote.assignor": "uniform",
    }
    config = ConsumerConfig.from_properties(props)
    assert ConsumerConfig.from_properties(config.to_properties()) == config


def test_the_connector_uses_the_consumer_protocol_coordinator() -> None:
    connector = create_connector(_config())
    assert isinstance(connector, KafkaConsumerConnector)
    assert isinstance(connector.coordinator, ConsumerProtocolCoordinator)
    stats = connector.statistics()
    assert stats.group_generation is None and stats.member_id


# -- on real brokers ----------------------------------------------------------------------


def consumer_config(cluster: LocalCluster, group: str, **kw: Any) -> ConsumerConfig:
    kw.setdefault("auto_offset_reset", "earliest")
    kw.setdefault("auto_commit_interval_ms", 500)
    return ConsumerConfig(
        group_id=group,
        group_coordinator="kafka",
        group_protocol="consumer",
        bootstrap_servers=cluster.bootstrap_servers,
        **kw,
    )


class Listener:
    """Records what the connector is told to release, and each start."""

    def __init__(self) -> None:
        self.released: list[TopicPartition] = []
        self.starts = 0

    async def before_releasing_partitions(self, partition_ownership: dict[str, set[int]]) -> None:
        for topic, parts in partition_ownership.items():
            self.released.extend(TopicPartition(topic, p) for p in parts)

    async def before_starting_fetchers(
        self, consumer_id: str, assignment: dict[str, dict[int, ConsumerThreadId]]
    ) -> None:
        self.starts += 1


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


async def _until(
    connectors: Sequence[ConsumerConnector], predicate: Any, limit_s: float = 90
) -> None:
    """Wait until ``predicate()`` holds, re-checking whenever any connector's state changes."""
    with anyio.fail_after(limit_s):
        while not predicate():
            async with anyio.create_task_group() as tg:

                async def wake(c: ConsumerConnector) -> None:
                    await c.wait_for_state_change()
                    tg.cancel_scope.cancel()

                for c in connectors:
                    tg.start_soon(wake, c)


def _owned(c: ConsumerConnector) -> set[TopicPartition]:
    return set(c.statistics().owned_partitions)


def _split(connectors: Sequence[ConsumerConnector], everything: set[TopicPartition]) -> bool:
    """Every member owns a non-empty share, the shares are disjoint and cover everything."""
    shares = [_owned(c) for c in connectors]
    if not all(shares) or any(c.state is not ConnectorState.RUNNING for c in connectors):
        return False
    union: set[TopicPartition] = set()
    for share in shares:
        if union & share:
            return False
        union |= share
    return union == everything


@pytest.mark.integration
async def test_members_split_a_joiner_takes_only_what_moves_and_a_leaver_hands_over(
    kraft_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    partitions = 6
    await kraft_cluster.create_topic(unique_topic, partitions)
    await kraft_cluster.produce_to_partitions(
        unique_topic, {p: [(b"k", b"v%d" % i) for i in range(10)] for p in range(partitions)}
    )
    everything = {TopicPartition(unique_topic, p) for p in range(partitions)}
    seen = Deliveries()
    config = consumer_config(kraft_cluster, unique_group_id)
    listeners = {name: Listener() for name in "abc"}
    async with (
        create_connector(config) as a,
        create_connector(config) as b,
        anyio.create_task_group() as tg,
    ):
        for name, c in (("a", a), ("b", b)):
            c.set_consumer_rebalance_listener(listeners[name])
            for s in (await c.create_message_streams({unique_topic: 2}))[unique_topic]:
                tg.start_soon(_drain, s, name, seen)
        await _until([a, b], lambda: _split([a, b], everything))
        await seen.wait_for(10 * partitions)
        before = {"a": dict(a.topic_registry), "b": dict(b.topic_registry)}
        assert a.statistics().member_id != b.statistics().member_id
        assert a.statistics().group_generation and b.statistics().group_generation
        for listener in listeners.values():
            listener.released.clear()

        async with create_connector(config) as c:
            c.set_consumer_rebalance_listener(listeners["c"])
            for s in (await c.create_message_streams({unique_topic: 1}))[unique_topic]:
                tg.start_soon(_drain, s, "c", seen)
            await _until([a, b, c], lambda: _split([a, b, c], everything))
            owned_c = _owned(c)
            for name, member in (("a", a), ("b", b)):
                kept = set(before[name]) & _owned(member)
                assert kept, name  # a member keeps part of its share
                # Only what moved to the joiner was revoked; what stayed was never released:
                # the very same partition state (offsets, queue, fetcher) goes on.
                assert set(listeners[name].released) == set(before[name]) - _owned(member)
                assert set(listeners[name].released) <= owned_c
                for tp in kept:
                    assert member.topic_registry[tp] is before[name][tp]
                    assert member.topic_registry[tp].active
            await kraft_cluster.produce_to_partitions(
                unique_topic, {p: [(b"k", b"mid")] * 5 for p in range(partitions)}
            )
            await seen.wait_for(15 * partitions)
        # c committed and left (epoch -1): a and b take its partitions over at its commits.
        await _until([a, b], lambda: _split([a, b], everything))
        await kraft_cluster.produce_to_partitions(
            unique_topic, {p: [(b"k", b"late")] * 5 for p in range(partitions)}
        )
        await seen.wait_for(20 * partitions)
        assert seen.duplicates() == {}
        assert sorted(seen.by) == [(p, o) for p in range(partitions) for o in range(20)]
        assert "c" in {who for whos in seen.by.values() for who in whos}
        await a.commit_offsets()
        await b.commit_offsets()
        tg.cancel_scope.cancel()


@pytest.mark.integration
async def test_a_member_removed_from_the_group_is_fenced_and_rejoins(
    kraft_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await kraft_cluster.create_topic(unique_topic, 2)
    await kraft_cluster.produce_to_partitions(unique_topic, {0: [(b"k", b"v")] * 5, 1: []})
    everything = {TopicPartition(unique_topic, p) for p in range(2)}
    seen = Deliveries()
    config = consumer_config(kraft_cluster, unique_group_id, auto_commit_enable=False)
    kafka = KafkaClient(kraft_cluster.bootstrap_servers, client_id="intruder")
    await kafka.start()
    try:
        async with create_connector(config) as a, anyio.create_task_group() as tg:
            listener = Listener()
            a.set_consumer_rebalance_listener(listener)
            for s in (await a.create_message_streams({unique_topic: 1}))[unique_topic]:
                tg.start_soon(_drain, s, "a", seen)
            await _until([a], lambda: _split([a], everything))
            await seen.wait_for(5)
            member_id = a.statistics().member_id
            assert member_id is not None

            async def get_kafka() -> KafkaClient:
                return kafka

            # Someone else makes the member leave (epoch -1 with its member id): the
            # coordinator forgets it, so its epoch is over.
            intruder = ConsumerGroupClient(get_kafka, unique_group_id, request_timeout_ms=10000)
            await intruder.consumer_heartbeat(
                ConsumerGroupHeartbeatRequest(unique_group_id, member_id, -1)
            )
            with pytest.raises(CommitFencedError):
                await a.commit_offsets()
            # The member drops what it owned and rejoins (epoch 0, the same member id).
            await _until(
                [a],
                lambda: _split([a], everything) and a.statistics().group_generation is not None,
            )
            assert a.statistics().member_id == member_id
            await a.commit_offsets()
            await kraft_cluster.produce_to_partitions(unique_topic, {1: [(b"k", b"w")] * 3})
            await seen.wait_for(8)
            # Removed again, now found out by a heartbeat (UNKNOWN_MEMBER_ID): every partition
            # is dropped (the listener is told) and the member rejoins at a new epoch.
            epoch = a.statistics().group_generation
            assert epoch is not None
            listener.released.clear()
            await intruder.consumer_heartbeat(
                ConsumerGroupHeartbeatRequest(unique_group_id, member_id, -1)
            )
            await _until(
                [a],
                lambda: _split([a], everything) and (a.statistics().group_generation or 0) > epoch,
            )
            assert set(listener.released) == everything
            await a.commit_offsets()
            await kraft_cluster.produce_to_partitions(unique_topic, {0: [(b"k", b"x")] * 2})
            # Every record arrives; those after the last commit before a fencing arrive again
            # (at least once: a fenced member commits nothing).
            await seen.wait_for(10)
            tg.cancel_scope.cancel()
    finally:
        await kafka.close()


@pytest.mark.integration
async def test_a_zookeeper_mode_broker_refuses_the_consumer_protocol_clearly(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await zk_kafka_cluster.create_topic(unique_topic, 1)
    async with create_connector(consumer_config(zk_kafka_cluster, unique_group_id)) as c:
        with pytest.raises(GroupCoordinatorError) as info:
            await c.create_message_streams({unique_topic: 1})
    assert "group.protocol=consumer" in str(info.value)
    assert "Kafka 4.0" in str(info.value)


@pytest.mark.integration
async def test_a_pattern_subscription_follows_new_topics(
    kraft_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    first, second = f"{unique_topic}-a", f"{unique_topic}-b"
    await kraft_cluster.create_topic(first, 2)
    await kraft_cluster.produce_to_partitions(first, {0: [(b"k", b"v")] * 3, 1: []})
    seen = Deliveries()
    config = consumer_config(kraft_cluster, unique_group_id)
    async with create_connector(config) as a, anyio.create_task_group() as tg:
        streams = await a.create_message_streams_by_filter(Whitelist(f"{unique_topic}-.*"), 2)
        for s in streams:
            tg.start_soon(_drain, s, "a", seen)
        await _until([a], lambda: _owned(a) == {TopicPartition(first, p) for p in range(2)})
        await seen.wait_for(3)
        # The regex went to the broker (KIP-848's SubscribedTopicRegex), not the names.
        (member,) = await _members(kraft_cluster, unique_group_id)
        assert member.subscribed_topic_regex == f"{unique_topic}-.*"
        assert member.subscribed_topic_names == ()
        await kraft_cluster.create_topic(second, 2)
        await kraft_cluster.produce_to_partitions(second, {1: [(b"k", b"w")] * 4, 0: []})
        # The topic list is followed; the broker assigns the new topic's partitions.
        await _until([a], lambda: len(_owned(a)) == 4)
        await seen.wait_for(7)
        tg.cancel_scope.cancel()


async def _members(cluster: LocalCluster, group: str) -> tuple[DescribedMember, ...]:
    """The group's members as its coordinator describes them (ConsumerGroupDescribe)."""
    async with KafkaGroupAdmin(cluster.bootstrap_servers) as admin:
        _, described = await admin._describe(group)
    return described.members


@pytest.mark.integration
@pytest.mark.parametrize(
    ("pattern", "why"),
    [("(?!{t}-b){t}-.*", "lookahead, not in RE2/J"), ("{t}-.*|__consumer_offsets", "internal")],
    ids=["lookahead", "internal-topic"],
)
async def test_a_pattern_the_broker_cannot_match_is_resolved_here(
    kraft_cluster: LocalCluster, unique_topic: str, unique_group_id: str, pattern: str, why: str
) -> None:
    """A Whitelist RE2/J cannot read, or one naming an internal topic (excluded here, but the
    broker would assign it), is resolved by the member: the broker gets the names."""
    first, second = f"{unique_topic}-a", f"{unique_topic}-b"
    await kraft_cluster.create_topic(first, 1)
    await kraft_cluster.create_topic(second, 1)
    await kraft_cluster.produce_to_partitions(first, {0: [(b"k", b"v")] * 2})
    seen = Deliveries()
    config = consumer_config(kraft_cluster, unique_group_id)
    whitelist = Whitelist(pattern.format(t=unique_topic))
    async with create_connector(config) as a, anyio.create_task_group() as tg:
        (stream,) = await a.create_message_streams_by_filter(whitelist, 1)
        tg.start_soon(_drain, stream, "a", seen)
        await seen.wait_for(2)
        (member,) = await _members(kraft_cluster, unique_group_id)
        tg.cancel_scope.cancel()
    assert member.subscribed_topic_regex is None, why
    expected = [first] if why.startswith("lookahead") else [first, second]
    assert sorted(member.subscribed_topic_names) == expected
