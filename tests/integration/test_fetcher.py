"""The fetcher against a real ZooKeeper + Kafka 3.9 (LocalCluster): backpressure per stream.

Built as a rebalance builds it (``Rebalancer._rebalance`` / ``_partition_info``): one
``PartitionTopicInfo`` per partition, each pointing at its stream's bounded chunk queue, and
``FetcherManager.start_connections`` in a task group, with the Kafka client set on the manager.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from aiozkconsumer import ConsumerConfig
from aiozkconsumer.cluster import KafkaClient
from aiozkconsumer.fetcher import FetcherManager
from aiozkconsumer.queues import ChunkQueue
from aiozkconsumer.records import FetchedDataChunk, PartitionTopicInfo, TopicPartition
from aiozkconsumer.testing import LocalCluster

pytestmark = pytest.mark.integration

RECORDS_PER_BATCH = 10
"""Each produce call writes one batch of this many records per partition."""
VALUE = b"x" * 100
FETCH_BYTES = 1500
"""``fetch.message.max.bytes``: more than one batch (~1.2 KB), less than two, so each fetch of
a partition returns a chunk of one batch."""
BATCHES = 8
"""Batches written to each partition up front: many more than a held stream takes."""
WAIT_S = 60.0


class WatchedQueue(ChunkQueue):
    """A stream's chunk queue that reports when a put finds it full and has to wait.

    The fetcher puts with ``put_nowait`` and, when the queue is full, leaves the chunk to a
    delivery task awaiting ``put``: ``held`` is set then.
    """

    def __init__(self, maxsize: int) -> None:
        super().__init__(maxsize)
        self.held = asyncio.Event()

    async def put(self, item: Any) -> None:
        if self.full():
            self.held.set()
        await super().put(item)


def batch_records(partition: int, first: int) -> list[tuple[bytes | None, bytes]]:
    return [(b"%d-%d" % (partition, first + i), VALUE) for i in range(RECORDS_PER_BATCH)]


async def drain(queue: ChunkQueue, start: int, end: int) -> list[FetchedDataChunk]:
    """Take chunks until the partition's records ``start .. end - 1`` went by, in order."""
    chunks: list[FetchedDataChunk] = []
    offset = start
    while offset < end:
        chunk = await queue.get()
        assert isinstance(chunk, FetchedDataChunk)
        assert not chunk.too_large and chunk.batches
        assert chunk.fetch_offset == offset  # contiguous: nothing skipped, nothing twice
        offset = chunk.batches[-1].next_offset
        chunks.append(chunk)
    assert offset == end
    return chunks


@pytest.fixture
async def kafka(zk_kafka_cluster: LocalCluster) -> AsyncIterator[KafkaClient]:
    client = KafkaClient(zk_kafka_cluster.bootstrap_servers, client_id="test-fetcher")
    await client.start()
    try:
        yield client
    finally:
        await client.close()


@pytest.mark.parametrize("io_thread", [False, True], ids=["event-loop", "io-thread"])
async def test_a_full_stream_holds_only_its_partition_and_resumes_when_read(
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    kafka: KafkaClient,
    io_thread: bool,
) -> None:
    """With ``fetch.io.thread.enable`` the record sets come parsed and checked from the I/O
    thread (``read_record_sets``); the chunks are the same."""
    topic, cluster = unique_topic, zk_kafka_cluster
    # Two partitions with the same leader, so that one fetch loop serves both.
    await cluster.create_topic(topic, len(cluster.broker_ids) + 1)
    assert await kafka.refresh_metadata([topic])
    by_leader: dict[int | None, list[int]] = {}
    for p in range(len(cluster.broker_ids) + 1):
        by_leader.setdefault(kafka.leader_for(TopicPartition(topic, p)), []).append(p)
    pa, pb = next(ps for leader, ps in by_leader.items() if leader is not None and len(ps) > 1)[:2]
    for i in range(BATCHES):
        await cluster.produce_to_partitions(
            topic, {p: batch_records(p, i * RECORDS_PER_BATCH) for p in (pa, pb)}
        )
    ends = await cluster.log_end_offsets(topic)
    assert ends[pa] == ends[pb] == BATCHES * RECORDS_PER_BATCH

    config = ConsumerConfig(
        group_id=unique_group_id,
        zookeeper_connect=cluster.zookeeper_connect,
        fetch_message_max_bytes=FETCH_BYTES,
        queued_max_message_chunks=2,
        fetch_io_thread_enable=io_thread,
    )
    bound = config.queued_max_message_chunks
    queue_a, queue_b = WatchedQueue(bound), WatchedQueue(bound)

    def partition_info(partition: int, queue: ChunkQueue) -> PartitionTopicInfo:
        return PartitionTopicInfo(
            topic, partition, queue, 0, 0, config.fetch_message_max_bytes, "test-fetcher"
        )

    info_a, info_b = partition_info(pa, queue_a), partition_info(pb, queue_b)
    manager = FetcherManager(kafka, config)
    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            await manager.start_connections([info_a, info_b], tg)
            try:
                # Nobody reads A: its queue fills to its bound and the next chunk waits.
                await queue_a.held.wait()
                assert queue_a.qsize() == bound
                held_at = info_a.fetched_offset
                assert 0 < held_at < ends[pa]
                (loop,) = [f for f in manager.fetchers.values() if info_a.tp in f.partitions]
                assert info_b.tp in loop.partitions
                requests = loop.requests

                # B is read to its log end, several times over as more is written to it: the
                # fetch loop goes on for B while A stays where it was held.
                end_b = ends[pb]
                chunks_b = await drain(queue_b, 0, end_b)
                assert len(chunks_b) > bound + 1  # more than B could have had while held
                for _ in range(3):
                    assert info_b.fetched_offset == end_b
                    assert info_a.fetched_offset == held_at
                    assert queue_a.qsize() == bound
                    start = end_b
                    await cluster.produce_to_partitions(topic, {pb: batch_records(pb, start)})
                    end_b = (await cluster.log_end_offsets(topic))[pb]
                    assert end_b == start + RECORDS_PER_BATCH
                    await drain(queue_b, start, end_b)
                assert info_b.fetched_offset == end_b
                assert info_a.fetched_offset == held_at
                assert queue_a.qsize() == bound
                assert loop.requests > requests

                # Read A: it resumes where it was, and is fetched to its log end.
                chunks_a = await drain(queue_a, 0, ends[pa])
                assert len(chunks_a) > bound + 1
                assert chunks_a[bound].fetch_offset == held_at  # the chunk that waited
                assert info_a.fetched_offset == ends[pa]
                assert queue_a.empty() and queue_b.empty()
            finally:
                await manager.stop_connections()
