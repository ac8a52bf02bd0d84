"""The zkkafka executor path against a real Kafka 3.9: range reads and the consumer pool.

No SparkSession: ``read_offset_range`` is what a Spark task runs, called here directly (it
is synchronous, as in a Python worker). The consumers kept between tasks must read exactly
the planned range again, survive a broker restart, and be dropped after a failed task.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from aiozkconsumer.spark.executor import (
    DataLossError,
    ExecutorConsumers,
    ZkKafkaInputPartition,
    read_offset_range,
)
from aiozkconsumer.testing import LocalCluster

pytestmark = pytest.mark.integration

_T = TypeVar("_T")


def arun(coro: Coroutine[Any, Any, _T]) -> _T:
    return asyncio.run(coro)


def _produce(cluster: LocalCluster, topic: str, count: int, partitions: int = 1) -> None:
    async def go() -> None:
        await cluster.create_topic(topic, partitions)
        await cluster.produce_to_partitions(
            topic,
            {
                p: [(b"k%d" % i, b"v%d-%d" % (p, i)) for i in range(count)]
                for p in range(partitions)
            },
        )

    arun(go())


def _read(part: ZkKafkaInputPartition) -> list[tuple[int, bytes]]:
    rows: list[tuple[int, bytes]] = []
    for batch in read_offset_range(part):
        offsets, values = batch.column("offset").to_pylist(), batch.column("value").to_pylist()
        rows.extend(zip(offsets, values, strict=True))
    return rows


@pytest.fixture
def pool() -> Iterator[ExecutorConsumers]:
    """This thread's pool, emptied before and after the test."""
    ExecutorConsumers.for_this_thread().close()
    fresh = ExecutorConsumers.for_this_thread()
    yield fresh
    fresh.close()


def test_reads_exactly_the_range_and_keeps_the_consumer_for_the_next_task(
    zk_kafka_cluster: LocalCluster, unique_topic: str, pool: ExecutorConsumers
) -> None:
    _produce(zk_kafka_cluster, unique_topic, 5000, partitions=2)
    servers = zk_kafka_cluster.bootstrap_servers
    first = ZkKafkaInputPartition(unique_topic, 0, 100, 4100, servers, max_bytes=64 * 1024)
    assert _read(first) == [(o, b"v0-%d" % o) for o in range(100, 4100)]
    assert len(pool) == 1
    kept = pool.checkout(first)
    pool.checkin(first, kept, ok=True)
    second = ZkKafkaInputPartition(unique_topic, 1, 4990, 5000, servers)
    assert _read(second) == [(o, b"v1-%d" % o) for o in range(4990, 5000)]
    assert pool.checkout(second) is kept  # the same started consumer served both tasks
    pool.checkin(second, kept, ok=True)


def test_an_empty_range_reads_nothing(
    zk_kafka_cluster: LocalCluster, unique_topic: str, pool: ExecutorConsumers
) -> None:
    _produce(zk_kafka_cluster, unique_topic, 10)
    part = ZkKafkaInputPartition(unique_topic, 0, 10, 10, zk_kafka_cluster.bootstrap_servers)
    assert _read(part) == []


def test_a_failed_task_closes_its_consumer(
    zk_kafka_cluster: LocalCluster, unique_topic: str, pool: ExecutorConsumers
) -> None:
    _produce(zk_kafka_cluster, unique_topic, 10)

    async def delete_first_four() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=zk_kafka_cluster.bootstrap_servers)
        await admin.start()
        try:
            await admin.delete_records({KafkaTopicPartition(unique_topic, 0): RecordsToDelete(4)})
        finally:
            await admin.close()

    arun(delete_first_four())
    servers = zk_kafka_cluster.bootstrap_servers
    gone = ZkKafkaInputPartition(unique_topic, 0, 0, 10, servers)
    with pytest.raises(DataLossError, match=rf"offsets of \[{unique_topic},0\] from 0 are gone"):
        _read(gone)
    assert len(pool) == 0  # the retry gets a fresh consumer
    skipping = ZkKafkaInputPartition(unique_topic, 0, 0, 10, servers, fail_on_data_loss=False)
    assert [o for o, _ in _read(skipping)] == list(range(4, 10))
    assert len(pool) == 1


def test_an_idle_consumer_past_the_timeout_is_replaced(
    zk_kafka_cluster: LocalCluster, unique_topic: str
) -> None:
    _produce(zk_kafka_cluster, unique_topic, 3)
    part = ZkKafkaInputPartition(unique_topic, 0, 0, 3, zk_kafka_cluster.bootstrap_servers)
    pool = ExecutorConsumers(idle_timeout_s=0.0)
    try:
        first = pool.checkout(part)
        pool.checkin(part, first, ok=True)
        second = pool.checkout(part)
        assert second is not first
        pool.checkin(part, second, ok=True)
        assert len(pool) == 1
    finally:
        pool.close()


def test_each_thread_has_its_own_pool(pool: ExecutorConsumers) -> None:
    other: list[ExecutorConsumers] = []
    thread = threading.Thread(target=lambda: other.append(ExecutorConsumers.for_this_thread()))
    thread.start()
    thread.join()
    assert other and other[0] is not pool
    assert ExecutorConsumers.for_this_thread() is pool
    other[0].close()


@pytest.fixture(scope="module")
def restart_cluster() -> Iterator[LocalCluster]:
    """A private cluster: its broker is restarted."""
    cluster = LocalCluster()
    arun(cluster.start())
    try:
        yield cluster
    finally:
        arun(cluster.stop())


def test_a_kept_consumer_reads_on_after_a_broker_restart(
    restart_cluster: LocalCluster, unique_topic: str, pool: ExecutorConsumers
) -> None:
    _produce(restart_cluster, unique_topic, 1000)
    servers = restart_cluster.bootstrap_servers
    assert len(_read(ZkKafkaInputPartition(unique_topic, 0, 0, 500, servers))) == 500
    assert len(pool) == 1
    arun(restart_cluster.restart_broker(restart_cluster.broker_ids[0]))
    part = ZkKafkaInputPartition(unique_topic, 0, 500, 1000, servers, retry_backoff_ms=500)
    assert _read(part) == [(o, b"v0-%d" % o) for o in range(500, 1000)]
