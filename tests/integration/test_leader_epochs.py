"""Leader epochs (KIP-320) against a real 2-broker ZooKeeper-mode Kafka 3.9 cluster.

An unclean leader election is made for real: a topic with replication factor 2,
``unclean.leader.election.enable=true`` and ``min.insync.replicas=1``; the follower is killed,
records are written to the leader alone, the consumer reads them, then the leader is killed
and the lagging follower started: elected uncleanly, its log lacks the records the consumer
fetched, and new records take their offsets. The fetcher must detect the truncation with
OffsetsForLeaderEpoch, warn, and read the new records from the divergence point (without the
check it fetches on at its old position and silently skips them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import anyio
import pytest

from aiozkconsumer import ConsumerConfig, fetch_leaders
from aiozkconsumer.cluster import KafkaClient
from aiozkconsumer.errors import BrokerNotAvailableError
from aiozkconsumer.fetcher import FetcherManager
from aiozkconsumer.kafka.channel import OffsetsChannel
from aiozkconsumer.kafka.leader_epoch import LeaderAndEpoch, leaders_and_epochs
from aiozkconsumer.offsets.kafka_store import KafkaOffsetStore
from aiozkconsumer.queues import ChunkQueue
from aiozkconsumer.records import FetchedDataChunk, PartitionTopicInfo, TopicPartition
from aiozkconsumer.testing import LocalCluster

pytestmark = pytest.mark.integration

log = logging.getLogger(__name__)

WAIT_S = 180.0
BEFORE = 50
"""Records both replicas hold (leader epoch 0)."""
LEADER_ONLY = 30
"""Records only the first leader holds: truncated by the unclean election."""
AFTER = 60
"""Records the uncleanly elected leader takes: more than were truncated, so that fetching on
at the old position would skip some of them silently."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(
        brokers=2,
        work_dir=tmp_path_factory.mktemp("leader-epochs"),
        broker_properties={
            # The follower drops out of the ISR 2 s after it stops fetching.
            "replica.lag.time.max.ms": "2000",
        },
    )
    asyncio.run(c.start())
    try:
        yield c
    finally:
        asyncio.run(c.stop())


@pytest.fixture
async def kafka(cluster: LocalCluster) -> AsyncIterator[KafkaClient]:
    client = KafkaClient(cluster.bootstrap_servers, client_id="test-leader-epochs")
    await client.start()
    try:
        yield client
    finally:
        await client.close()


def records(prefix: str, n: int) -> list[tuple[bytes | None, bytes]]:
    return [(None, b"%s-%d" % (prefix.encode(), i)) for i in range(n)]


async def leader_of(kafka: KafkaClient, tp: TopicPartition, ask: int | None = None) -> int:
    """The partition's leader once it has one, by polling metadata (of broker ``ask``)."""
    while True:
        leader: int | None = None
        if ask is None:
            await kafka.refresh_metadata([tp.topic])
            leader = kafka.leader_for(tp)
        else:
            try:
                known = (await leaders_and_epochs(kafka, ask, [tp.topic])).get(tp)
                leader = None if known is None else known.leader
            except BrokerNotAvailableError:
                # aiokafka asks only the brokers of its last metadata for more: one that
                # learnt the cluster while ``ask`` was down never finds it again once the
                # others are down too. Bootstrap again (KafkaClient.refresh_metadata does
                # not yet fall back to the bootstrap servers, KIP-899).
                with contextlib.suppress(Exception):
                    await kafka.raw.bootstrap()
        if leader is not None and leader >= 0:
            return leader
        await anyio.sleep(0.2)


async def take_until(queue: ChunkQueue, end: int) -> list[FetchedDataChunk]:
    """Chunks until one ends at ``end`` or beyond."""
    chunks: list[FetchedDataChunk] = []
    while True:
        chunk = await queue.get()
        assert isinstance(chunk, FetchedDataChunk) and chunk.error is None
        chunks.append(chunk)
        if chunk.batches and chunk.batches[-1].next_offset >= end:
            return chunks


def partition_info(tp: TopicPartition, queue: ChunkQueue) -> PartitionTopicInfo:
    return PartitionTopicInfo(tp.topic, tp.partition, queue, 0, 0, 1 << 20, "test-epochs")


async def test_an_unclean_leader_election_is_detected_and_the_position_reset(
    cluster: LocalCluster, kafka: KafkaClient, unique_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aiozkconsumer.fetcher")
    tp = TopicPartition(unique_topic, 0)
    await cluster.create_topic(
        tp.topic,
        1,
        2,
        config={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"},
    )
    first = await leader_of(kafka, tp)
    (follower,) = [b for b in cluster.broker_ids if b != first]
    await cluster.produce(tp.topic, records("both", BEFORE), partition=0)

    config = ConsumerConfig(group_id="epochs", zookeeper_connect=cluster.zookeeper_connect)
    queue: ChunkQueue = ChunkQueue(100)
    pti = partition_info(tp, queue)
    manager = FetcherManager(kafka, config)
    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            # Started while both brokers are up: the client's metadata names both (aiokafka
            # asks only the brokers of its last metadata, so one that learnt the cluster
            # while the follower was down would never find it again once the leader dies).
            await manager.start_connections([pti], tg)
            try:
                before = await take_until(queue, BEFORE)
                cluster.kill_broker(follower)
                await cluster.produce(tp.topic, records("leader-only", LEADER_ONLY), partition=0)
                before += await take_until(queue, BEFORE + LEADER_ONLY)
                assert before[0].fetch_offset == 0
                assert pti.fetched_offset == BEFORE + LEADER_ONLY
                first_epoch = pti.leader_epoch
                # The records' epoch; the leader's may have moved on when the follower left
                # the ISR (the ZooKeeper-mode controller bumps it then).
                fetched_epoch = pti.offset_epoch(pti.fetched_offset)
                assert 0 <= fetched_epoch <= first_epoch
                pti.consumed_offset = pti.fetched_offset  # all handed out

                cluster.kill_broker(first)
                started = time.monotonic()
                await cluster.restart_broker(follower)
                restarted = time.monotonic() - started
                assert await leader_of(kafka, tp, ask=follower) == follower
                log.info(
                    "unclean election: restart %.1f s, elected %.1f s",
                    restarted,
                    time.monotonic() - started,
                )
                await cluster.produce(tp.topic, records("after", AFTER), partition=0)

                after = await take_until(queue, BEFORE + AFTER)
            finally:
                await manager.stop_connections()
                tg.cancel_scope.cancel()
        await cluster.restart_broker(first)  # both brokers up again for the next test
    # The position went back to where the logs diverge: every record of the new leader
    # is read, none skipped.
    assert after[0].fetch_offset == BEFORE
    assert all(c.truncations == 1 for c in after)
    assert pti.truncations == 1
    assert pti.leader_epoch > first_epoch
    assert fetched_epoch < pti.offset_epoch(BEFORE + AFTER) <= pti.leader_epoch
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "Log truncation detected" in r.getMessage()
    ]
    assert len(warnings) == 1, warnings
    assert f"partition {tp}" in warnings[0]
    assert f"offsets {BEFORE}..{BEFORE + LEADER_ONLY - 1} had been fetched" in warnings[0]
    assert f"{LEADER_ONLY} record offset(s) truncated, {LEADER_ONLY} of them" in warnings[0]
    assert f"Resetting the position to offset {BEFORE}" in warnings[0]


async def test_a_fetch_at_a_stale_leader_epoch_is_fenced_and_recovers(
    cluster: LocalCluster,
    kafka: KafkaClient,
    unique_topic: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO, logger="aiozkconsumer.fetcher")
    tp = TopicPartition(unique_topic, 0)
    await cluster.create_topic(tp.topic, 1, 2)
    leader = await leader_of(kafka, tp)
    # Restarting the leader moves leadership to the other replica: a new leader epoch.
    await cluster.restart_broker(leader)
    leader = await leader_of(kafka, tp)
    current = (await leaders_and_epochs(kafka, leader, [tp.topic]))[tp].epoch
    assert current >= 1
    await cluster.produce(tp.topic, records("r", 20), partition=0)

    answers: list[int] = []

    async def stale_first(kafka: Any, node: int, topics: Any) -> dict[TopicPartition, Any]:
        got = await leaders_and_epochs(kafka, node, topics)
        if not answers:  # metadata from a broker that lags behind: an older epoch
            got[tp] = LeaderAndEpoch(got[tp].leader, got[tp].epoch - 1)
        answers.append(got[tp].epoch)
        return got

    monkeypatch.setattr(fetch_leaders, "leaders_and_epochs", stale_first)
    config = ConsumerConfig(group_id="epochs", zookeeper_connect=cluster.zookeeper_connect)
    queue: ChunkQueue = ChunkQueue(100)
    pti = partition_info(tp, queue)
    manager = FetcherManager(kafka, config)
    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            await manager.start_connections([pti], tg)
            try:
                chunks = await take_until(queue, 20)
            finally:
                await manager.stop_connections()
                tg.cancel_scope.cancel()
    assert chunks[0].fetch_offset == 0
    assert answers[:2] == [current - 1, current]
    assert pti.leader_epoch == current
    fenced = [r.getMessage() for r in caplog.records if "FENCED_LEADER_EPOCH" in r.getMessage()]
    assert fenced and f"at leader epoch {current - 1}" in fenced[0]


async def test_commits_carry_the_leader_epoch_of_the_offset(
    cluster: LocalCluster, kafka: KafkaClient, unique_topic: str, unique_group_id: str
) -> None:
    """OffsetCommit v7 carries ``CommittedLeaderEpoch``; OffsetFetch v5 reads it back."""
    tp, other = TopicPartition(unique_topic, 0), TopicPartition(unique_topic, 1)
    await cluster.create_topic(tp.topic, 2, 2)

    async def getter() -> KafkaClient:
        return kafka

    pti = partition_info(tp, ChunkQueue())
    pti.epochs.add([(0, 3), (10, 5)])  # as the fetcher records them from batch headers

    def epochs(offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return {t: pti.offset_epoch(o) for t, o in offsets.items() if t == tp}

    store = KafkaOffsetStore(
        getter, unique_group_id, backoff_ms=100, socket_timeout_ms=10_000, leader_epochs=epochs
    )
    try:
        assert await store.commit({tp: 12, other: 4}, retries=20) == 2
        channel = OffsetsChannel(getter, unique_group_id, socket_timeout_ms=10_000)
        _, answered = await channel.fetch_with_epochs([tp, other])
        assert answered[tp][:2] == (12, 5)
        assert answered[other][:2] == (4, -1)  # no epoch known: -1, as the Java client
        assert await store.commit({tp: 10}) == 1
        _, answered = await channel.fetch_with_epochs([tp])
        assert answered[tp][:2] == (10, 3)
        # The old reader still works on the new request.
        assert await store.fetch([tp]) == {tp: 10}
    finally:
        await store.close()
