"""Offset stores against a real ZooKeeper + Kafka 3.9 (LocalCluster).

What Kafka stores is checked with the broker's own view (``AIOKafkaAdminClient.
list_consumer_group_offsets``, the data ``kafka-consumer-groups --describe`` shows), what
ZooKeeper stores with the raw offset nodes and their stats.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from aiozkconsumer.cluster import KafkaClient
from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.errors import OffsetCommitError, OffsetFetchError
from aiozkconsumer.offsets import (
    NO_OFFSET,
    DualOffsetStore,
    KafkaGetter,
    KafkaOffsetStore,
    ZookeeperOffsetStore,
    make_offset_store,
)
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.zk import layout
from aiozkconsumer.zk.client import ZkClient

pytestmark = pytest.mark.integration

PARTITIONS = 3


@pytest.fixture
async def kafka(zk_kafka_cluster: LocalCluster) -> AsyncIterator[KafkaClient]:
    client = KafkaClient(zk_kafka_cluster.bootstrap_servers, client_id="test-offsets")
    await client.start()
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def zk(zk_kafka_cluster: LocalCluster) -> AsyncIterator[ZkClient]:
    client = ZkClient(zk_kafka_cluster.zookeeper_connect, session_timeout_ms=10000)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def topic(zk_kafka_cluster: LocalCluster, unique_topic: str) -> str:
    await zk_kafka_cluster.create_topic(unique_topic, PARTITIONS)
    return unique_topic


def _getter(client: KafkaClient) -> KafkaGetter:
    async def get() -> KafkaClient:
        return client

    return get


def _kafka_store(client: KafkaClient, group: str, **kw: Any) -> KafkaOffsetStore:
    kw.setdefault("backoff_ms", 100)
    kw.setdefault("socket_timeout_ms", 10000)
    return KafkaOffsetStore(_getter(client), group, **kw)


async def _broker_view(bootstrap: str, group: str) -> dict[TopicPartition, int]:
    """The group's committed offsets as the broker reports them."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="test-offsets-admin")
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {TopicPartition(tp.topic, tp.partition): om.offset for tp, om in offsets.items()}


async def _zk_offset(zk: ZkClient, group: str, tp: TopicPartition) -> tuple[bytes, Any] | None:
    return await zk.get(layout.offset_path(group, tp.topic, tp.partition))


def _tps(topic: str) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(PARTITIONS)]


# -- Kafka storage -----------------------------------------------------------------------


async def test_kafka_commit_then_fetch_round_trips(
    zk_kafka_cluster: LocalCluster,
    kafka: KafkaClient,
    zk: ZkClient,
    topic: str,
    unique_group_id: str,
) -> None:
    p0, p1, p2 = _tps(topic)
    store = _kafka_store(kafka, unique_group_id)
    assert await store.fetch([p0, p1, p2]) == {p0: NO_OFFSET, p1: NO_OFFSET, p2: NO_OFFSET}

    assert await store.commit({p0: 5, p1: 7, p2: NO_OFFSET}) == 2
    assert store.coordinator in zk_kafka_cluster.broker_ids
    assert await store.fetch([p0, p1, p2]) == {p0: 5, p1: 7, p2: NO_OFFSET}

    # The broker's own view agrees, and a second store (its own coordinator lookup) too.
    bootstrap = zk_kafka_cluster.bootstrap_servers
    assert await _broker_view(bootstrap, unique_group_id) == {p0: 5, p1: 7}
    fresh = _kafka_store(kafka, unique_group_id)
    assert await fresh.fetch([p1, p0]) == {p0: 5, p1: 7}

    # Kafka commits are always full (KAFKA-1510): unchanged offsets are sent again.
    assert await store.commit({p0: 5, p1: 7}) == 2
    assert store.kafka_commits == 4
    assert await store.commit({p0: 6, p1: 7}, retries=2) == 2
    assert await _broker_view(bootstrap, unique_group_id) == {p0: 6, p1: 7}

    # Kafka-only storage leaves ZooKeeper alone.
    assert not await zk.exists(layout.offsets_dir(unique_group_id, topic))
    assert store.zookeeper_commits == 0


async def test_kafka_commit_to_a_missing_topic_fails_after_every_attempt(
    kafka: KafkaClient, topic: str, unique_group_id: str
) -> None:
    good = TopicPartition(topic, 0)
    missing = TopicPartition(f"{topic}-missing", 0)
    store = _kafka_store(kafka, unique_group_id, backoff_ms=50)
    with pytest.raises(OffsetCommitError) as info:
        await store.commit({good: 3, missing: 4}, retries=2)
    err = info.value
    assert err.attempts == 3
    assert err.committed == 1
    assert list(err.failed) == [missing]
    assert "UNKNOWN_TOPIC_OR_PARTITION" in err.failed[missing]
    assert await store.fetch([good]) == {good: 3}


# -- dual storage --------------------------------------------------------------------------


async def test_dual_commit_writes_both_and_fetch_takes_the_max(
    zk_kafka_cluster: LocalCluster,
    kafka: KafkaClient,
    zk: ZkClient,
    topic: str,
    unique_group_id: str,
) -> None:
    p0, p1, p2 = _tps(topic)
    config = ConsumerConfig(
        group_id=unique_group_id,
        zookeeper_connect=zk_kafka_cluster.zookeeper_connect,
        offsets_storage="kafka",
        offsets_channel_backoff_ms=100,
    )
    store = make_offset_store(config, zk, _getter(kafka))
    assert isinstance(store, DualOffsetStore)

    assert await store.commit({p0: 10, p1: 20}, retries=1) == 2
    assert store.kafka_commits == 2 and store.zookeeper_commits == 2
    assert (await _zk_offset(zk, unique_group_id, p0) or (b"",))[0] == b"10"
    assert (await _zk_offset(zk, unique_group_id, p1) or (b"",))[0] == b"20"
    assert await _broker_view(zk_kafka_cluster.bootstrap_servers, unique_group_id) == {
        p0: 10,
        p1: 20,
    }

    # ZooKeeper ahead on p0 (written by hand), Kafka ahead on p1 (Kafka-only commit).
    await zk.set_or_create(layout.offset_path(unique_group_id, topic, 0), b"50")
    assert await _kafka_store(kafka, unique_group_id).commit({p1: 30}) == 1

    assert await store.fetch([p0, p1, p2]) == {p0: 50, p1: 30, p2: NO_OFFSET}

    # The next commit of the offsets read brings ZooKeeper up to date for p1 only: p0's node
    # already holds 50, p1's checkpoint is what ZooKeeper has (20), not the max read.
    assert await store.commit({p0: 50, p1: 30}) == 2
    assert (await _zk_offset(zk, unique_group_id, p1) or (b"",))[0] == b"30"
    assert store.zookeeper_commits == 3


async def test_dual_commit_skips_zookeeper_for_partitions_kafka_rejected(
    kafka: KafkaClient, zk: ZkClient, topic: str, unique_group_id: str
) -> None:
    good = TopicPartition(topic, 0)
    missing = TopicPartition(f"{topic}-missing", 0)
    store = DualOffsetStore(
        ZookeeperOffsetStore(zk, unique_group_id), _kafka_store(kafka, unique_group_id)
    )
    with pytest.raises(OffsetCommitError) as info:
        await store.commit({good: 8, missing: 9})
    assert info.value.attempts == 1
    assert (await _zk_offset(zk, unique_group_id, good) or (b"",))[0] == b"8"
    assert await _zk_offset(zk, unique_group_id, missing) is None


# -- ZooKeeper checkpoint ------------------------------------------------------------------


async def test_unchanged_offsets_are_not_rewritten_in_zookeeper(
    zk: ZkClient, topic: str, unique_group_id: str
) -> None:
    p0, p1, _ = _tps(topic)
    store = ZookeeperOffsetStore(zk, unique_group_id)
    assert await store.commit({p0: 3, p1: 4}) == 2
    before = await _zk_offset(zk, unique_group_id, p0)
    assert before is not None and before[0] == b"3"

    assert await store.commit({p0: 3, p1: 5}) == 1
    after = await _zk_offset(zk, unique_group_id, p0)
    assert after is not None
    assert (after[1].version, after[1].last_modified_zxid) == (
        before[1].version,
        before[1].last_modified_zxid,
    )

    # A new owner's fetch seeds its checkpoint: committing what it read writes nothing.
    successor = ZookeeperOffsetStore(zk, unique_group_id)
    assert await successor.fetch([p0, p1]) == {p0: 3, p1: 5}
    assert await successor.commit({p0: 3, p1: 5}) == 0
    again = await _zk_offset(zk, unique_group_id, p0)
    assert again is not None and again[1].version == before[1].version

    assert await successor.commit({p0: 4}) == 1
    moved = await _zk_offset(zk, unique_group_id, p0)
    assert moved is not None and moved[0] == b"4"
    assert moved[1].version == before[1].version + 1


async def test_dual_store_keeps_sending_unchanged_offsets_to_kafka_only(
    kafka: KafkaClient, zk: ZkClient, topic: str, unique_group_id: str
) -> None:
    p0 = TopicPartition(topic, 0)
    store = DualOffsetStore(
        ZookeeperOffsetStore(zk, unique_group_id), _kafka_store(kafka, unique_group_id)
    )
    assert await store.commit({p0: 11}) == 1
    before = await _zk_offset(zk, unique_group_id, p0)
    assert before is not None
    assert await store.commit({p0: 11}) == 1
    after = await _zk_offset(zk, unique_group_id, p0)
    assert after is not None and after[1].version == before[1].version
    assert (store.kafka_commits, store.zookeeper_commits) == (2, 1)


# -- unreachable brokers ---------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class UnreachableKafka:
    """The connector's getter when no broker listens: each call tries to start a client."""

    def __init__(self) -> None:
        self.port = _closed_port()
        self.calls = 0

    async def __call__(self) -> KafkaClient:
        self.calls += 1
        client = KafkaClient(f"127.0.0.1:{self.port}", client_id="test-offsets")
        await client.start()  # raises KafkaConnectionError (and closes itself)
        return client


async def test_unreachable_broker_fails_commit_after_every_attempt(unique_group_id: str) -> None:
    getter = UnreachableKafka()
    store = KafkaOffsetStore(getter, unique_group_id, backoff_ms=100, socket_timeout_ms=1000)
    tp = TopicPartition("t", 0)
    began = time.monotonic()
    with pytest.raises(OffsetCommitError) as info:
        await store.commit({tp: 1}, retries=2)
    elapsed = time.monotonic() - began
    assert getter.calls == 3 and info.value.attempts == 3
    assert elapsed >= 0.2
    assert "could not reach any Kafka broker" in info.value.failed[tp]


async def test_unreachable_broker_fails_fetch_within_its_time_limit(
    unique_group_id: str,
) -> None:
    getter = UnreachableKafka()
    store = KafkaOffsetStore(
        getter, unique_group_id, backoff_ms=100, socket_timeout_ms=1000, fetch_timeout_ms=1500
    )
    began = time.monotonic()
    with pytest.raises(OffsetFetchError) as info:
        await store.fetch([TopicPartition("t", 0)])
    elapsed = time.monotonic() - began
    assert 1.5 <= elapsed < 5
    assert getter.calls >= 2
    assert "1500 ms" in str(info.value)
    assert "could not reach any Kafka broker" in str(info.value)


async def test_frozen_coordinator_times_out_then_recovers(unique_topic: str) -> None:
    """A coordinator that keeps its sockets but answers nothing (SIGSTOP): each request gives
    up after offsets.channel.socket.timeout.ms; after SIGCONT the store finds it again.

    Runs on its own cluster: freezing the session cluster's broker could expire its
    ZooKeeper session under load and disturb the other tests.
    """
    group = f"test-frozen-{unique_topic[-12:]}"
    async with LocalCluster(broker_properties={"zookeeper.session.timeout.ms": "10000"}) as cluster:
        await cluster.create_topic(unique_topic, 1)
        tp = TopicPartition(unique_topic, 0)
        client = KafkaClient(cluster.bootstrap_servers, client_id="test-offsets")
        await client.start()
        try:
            store = _kafka_store(client, group, socket_timeout_ms=500)
            # A fresh cluster answers COORDINATOR_NOT_AVAILABLE until __consumer_offsets exists
            # (which can take a while on a loaded machine).
            with anyio.fail_after(120):
                while True:
                    try:
                        assert await store.commit({tp: 1}, retries=10) == 1
                        break
                    except OffsetCommitError:
                        continue

            cluster.pause_broker(0)
            try:
                began = time.monotonic()
                with pytest.raises(OffsetCommitError) as commit_info:
                    await store.commit({tp: 2}, retries=1)
                commit_s = time.monotonic() - began
                # A new store does not know the coordinator: FindCoordinator times out too.
                unknown = _kafka_store(client, group, socket_timeout_ms=500, fetch_timeout_ms=1200)
                began = time.monotonic()
                with pytest.raises(OffsetFetchError) as fetch_info:
                    await unknown.fetch([tp])
                fetch_s = time.monotonic() - began
            finally:
                cluster.resume_broker(0)

            assert commit_info.value.attempts == 2
            assert "offsets.channel.socket.timeout.ms=500" in commit_info.value.failed[tp]
            assert commit_s >= 1.0  # two attempts, each waiting out the 500 ms timeout
            assert store.coordinator is None
            assert "1200 ms" in str(fetch_info.value)
            assert fetch_s >= 1.2  # gave up at the fetch time limit, not before

            assert await store.commit({tp: 3}, retries=50) == 1
            assert await _broker_view(cluster.bootstrap_servers, group) == {tp: 3}
        finally:
            await client.close()
