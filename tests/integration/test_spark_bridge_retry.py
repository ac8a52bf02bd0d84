"""``foreach_batch``: a batch whose ``fn`` failed is replayed with the same id and records.

Against a real ZooKeeper + Kafka 3.9 and a local SparkSession, the three ways a service
retries after ``fn`` raised: calling ``foreach_batch`` again with the same connector (the
records of the failed batch were already taken from the streams), doing so after a rebalance
took the failed batch's partitions away and gave them back, and starting a new connector (as
a new process would). Each test counts every (partition, offset) ``fn`` received.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import pyarrow as pa
from _support import wait_settled
from pyspark.sql import DataFrame, SparkSession

from aiozkconsumer import ConsumerConfig, ZookeeperConsumerConnector
from aiozkconsumer.records import MessageAndMetadata, PartitionTopicInfo, TopicPartition
from aiozkconsumer.spark import BatchRecord, batch_log_path, foreach_batch
from aiozkconsumer.spark.buffer import BridgeBuffer as _Buffer
from aiozkconsumer.spark.runs import PartitionRun, batch_ranges, partition_runs
from aiozkconsumer.spark.schema import records_to_arrow
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.zk import layout
from aiozkconsumer.zk.client import ZkClient

pytestmark = pytest.mark.spark

PARTITIONS = 4
PER_PARTITION = 1000
MAX_RECORDS = 400
FAIL_ON = 2  # the third batch fails once
WAIT_S = 60.0


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local SparkSession (2 cores, UI off), as ``tests/integration/test_spark.py``'s."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("aiozkconsumer-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


class SinkDownError(RuntimeError):
    """What ``fn`` raises in the failing batch."""


@dataclass(frozen=True)
class Call:
    """One call of ``fn``: its batch id, the (partition, offset) pairs, the row count."""

    batch_id: int
    pairs: frozenset[tuple[int, int]]
    rows: int
    ok: bool


class Recorder:
    """``fn`` for ``foreach_batch``: records every call and raises once in batch ``fail_on``."""

    def __init__(self, fail_on: int) -> None:
        self.fail_on = fail_on
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = df.select("partition", "offset").collect()
        pairs = frozenset((r.partition, r.offset) for r in rows)
        with self._lock:
            failing = batch_id == self.fail_on and not any(
                c.batch_id == batch_id for c in self.calls
            )
            self.calls.append(Call(batch_id, pairs, len(rows), ok=not failing))
        if failing:
            raise SinkDownError(f"sink down at batch {batch_id}")

    @property
    def failed(self) -> Call:
        (call,) = [c for c in self.calls if not c.ok]
        return call


def config(cluster: LocalCluster, group: str, **kw: Any) -> ConsumerConfig:
    return ConsumerConfig(
        group_id=group,
        zookeeper_connect=cluster.zookeeper_connect,
        auto_offset_reset="smallest",
        auto_commit_enable=False,
        rebalance_backoff_ms=500,
        **kw,
    )


async def setup_topic(cluster: LocalCluster, topic: str) -> None:
    await cluster.create_topic(topic, PARTITIONS)
    await cluster.produce_to_partitions(
        topic,
        {
            p: [(b"k%d" % i, b"v-%d-%d" % (p, i)) for i in range(PER_PARTITION)]
            for p in range(PARTITIONS)
        },
    )


async def fail_once(
    connector: ZookeeperConsumerConnector, spark: SparkSession, fn: Recorder
) -> None:
    """Run the bridge until ``fn`` raises; check the batch log left an unfinished batch."""
    with pytest.raises(SinkDownError, match=f"sink down at batch {FAIL_ON}"):
        await foreach_batch(connector, spark, fn, max_records=MAX_RECORDS, max_interval_ms=500)
    failed = fn.failed
    assert failed.batch_id == FAIL_ON and failed.rows == len(failed.pairs) > 0
    assert [c.batch_id for c in fn.calls] == list(range(FAIL_ON + 1))
    data = await connector.zk.get_data(batch_log_path(connector.config.group_id))
    assert data is not None
    record = BatchRecord.decode(data)
    assert (record.batch_id, record.committed) == (FAIL_ON, False)
    assert record.ranges == ranges_of(failed.pairs, topic_of(record))
    # Nothing of the failed batch was committed.
    committed = connector.statistics().committed_offsets
    assert all(committed.get(tp, 0) <= first for tp, (first, _) in record.ranges.items())


def topic_of(record: BatchRecord) -> str:
    (topic,) = {tp.topic for tp in record.ranges}
    return topic


def ranges_of(
    pairs: frozenset[tuple[int, int]], topic: str
) -> dict[TopicPartition, tuple[int, int]]:
    """``{tp: (first offset, last offset + 1)}``, as the batch log writes a batch."""
    out: dict[TopicPartition, tuple[int, int]] = {}
    for p in {p for p, _ in pairs}:
        offsets = [o for q, o in pairs if q == p]
        out[TopicPartition(topic, p)] = (min(offsets), max(offsets) + 1)
    return out


async def drain(connector: ZookeeperConsumerConnector, spark: SparkSession, fn: Recorder) -> None:
    """Run the bridge until every partition's committed offset (in ZooKeeper) is at the log
    end, then cancel it."""
    owned = connector.statistics().owned_partitions
    assert len(owned) == PARTITIONS
    group = connector.config.group_id
    async with anyio.create_task_group() as tg:
        tg.start_soon(_bridge, connector, spark, fn)
        with anyio.move_on_after(WAIT_S) as scope:
            for tp in owned:
                path = layout.offset_path(group, tp.topic, tp.partition)
                async for data in connector.zk.watch_data(path):
                    if data is not None and layout.decode_offset(data) >= PER_PARTITION:
                        break
        tg.cancel_scope.cancel()
    if scope.cancelled_caught:
        calls = [(c.batch_id, c.rows, c.ok) for c in fn.calls]
        committed = dict(connector.statistics().committed_offsets)
        raise AssertionError(f"offsets not at the log end: {committed}; fn calls {calls}")


async def _bridge(connector: ZookeeperConsumerConnector, spark: SparkSession, fn: Recorder) -> None:
    await foreach_batch(connector, spark, fn, max_records=MAX_RECORDS, max_interval_ms=500)


async def group_offsets(cluster: LocalCluster, group: str, topic: str) -> dict[int, int | None]:
    zk = ZkClient(cluster.zookeeper_connect, session_timeout_ms=10000)
    await zk.start()
    try:
        out: dict[int, int | None] = {}
        for p in range(PARTITIONS):
            data = await zk.get_data(layout.offset_path(group, topic, p))
            out[p] = None if data is None else layout.decode_offset(data)
        return out
    finally:
        await zk.close()


async def check_replayed_and_complete(
    cluster: LocalCluster, group: str, topic: str, fn: Recorder
) -> None:
    """The failed batch came back first, with the same id and records; nothing was lost."""
    failed = fn.failed
    after = fn.calls[fn.calls.index(failed) + 1 :]
    assert after, "fn was never called again"
    replay = after[0]
    assert replay.ok and replay.batch_id == failed.batch_id
    assert replay.rows == failed.rows > 0
    assert replay.pairs == failed.pairs
    # Batch ids stay contiguous after the replay.
    assert [c.batch_id for c in after] == list(range(FAIL_ON, FAIL_ON + len(after)))
    # Every produced record reached a successful fn call, none twice, none twice in a batch.
    assert all(c.rows == len(c.pairs) for c in fn.calls)
    delivered = sorted(pair for c in fn.calls if c.ok for pair in c.pairs)
    assert len(delivered) == PARTITIONS * PER_PARTITION
    assert delivered == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]
    # The group's offsets are at the log end, and the last batch is marked committed.
    assert await group_offsets(cluster, group, topic) == dict.fromkeys(
        range(PARTITIONS), PER_PARTITION
    )
    zk = ZkClient(cluster.zookeeper_connect, session_timeout_ms=10000)
    await zk.start()
    try:
        data = await zk.get_data(batch_log_path(group))
    finally:
        await zk.close()
    assert data is not None
    last = BatchRecord.decode(data)
    assert (last.batch_id, last.committed) == (after[-1].batch_id, True)


@pytest.mark.integration
async def test_retry_with_the_same_connector_replays_the_failed_batch(
    spark: SparkSession, zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = unique_topic, unique_group_id
    await setup_topic(zk_kafka_cluster, topic)
    fn = Recorder(fail_on=FAIL_ON)
    async with ZookeeperConsumerConnector(config(zk_kafka_cluster, group)) as connector:
        await connector.create_message_streams({topic: 1})
        await fail_once(connector, spark, fn)
        # The failed batch's records were handed out by the streams: its partitions'
        # consumed offsets are past it, so only the bridge can give them back.
        failed = ranges_of(fn.failed.pairs, topic)
        consumed = connector.statistics().consumed_offsets
        assert all(consumed[tp] >= end for tp, (_, end) in failed.items())
        await drain(connector, spark, fn)
    await check_replayed_and_complete(zk_kafka_cluster, group, topic, fn)


@pytest.mark.integration
async def test_retry_after_a_rebalance_replays_the_failed_batch(
    spark: SparkSession, zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = unique_topic, unique_group_id
    await setup_topic(zk_kafka_cluster, topic)
    fn = Recorder(fail_on=FAIL_ON)
    async with ZookeeperConsumerConnector(
        config(zk_kafka_cluster, group, consumer_id="m")
    ) as connector:
        await connector.create_message_streams({topic: 1})
        await fail_once(connector, spark, fn)
        failed_partitions = {p for p, _ in fn.failed.pairs}
        # The range assignor gives p0, p1 to the member whose id sorts first: pick the
        # joining member's id so that it takes a partition of the failed batch.
        other_id = "a" if failed_partitions & {0, 1} else "z"
        async with ZookeeperConsumerConnector(
            config(zk_kafka_cluster, group, consumer_id=other_id)
        ) as other:
            await other.create_message_streams({topic: 1})
            await wait_settled([connector, other])
            kept = {tp.partition for tp in connector.statistics().owned_partitions}
            assert len(kept) == 2 and failed_partitions - kept
        # The other member left without committing: this one owns everything again, the
        # moved partitions of the failed batch from its first offsets (the group's).
        await wait_settled([connector])
        assert len(connector.statistics().owned_partitions) == PARTITIONS
        consumed = connector.statistics().consumed_offsets
        moved = {
            tp: r for tp, r in ranges_of(fn.failed.pairs, topic).items() if tp.partition not in kept
        }
        assert moved and all(consumed[tp] <= first for tp, (first, _) in moved.items())
        await drain(connector, spark, fn)
    await check_replayed_and_complete(zk_kafka_cluster, group, topic, fn)


@pytest.mark.integration
async def test_retry_with_a_new_connector_replays_the_failed_batch(
    spark: SparkSession, zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = unique_topic, unique_group_id
    await setup_topic(zk_kafka_cluster, topic)
    fn = Recorder(fail_on=FAIL_ON)
    async with ZookeeperConsumerConnector(config(zk_kafka_cluster, group)) as connector:
        await connector.create_message_streams({topic: 1})
        await fail_once(connector, spark, fn)
    # As a new process: a new connector, nothing of the first one's buffers.
    async with ZookeeperConsumerConnector(config(zk_kafka_cluster, group)) as connector:
        await connector.create_message_streams({topic: 1})
        await drain(connector, spark, fn)
    await check_replayed_and_complete(zk_kafka_cluster, group, topic, fn)


# -- the bridge's memory, without servers -----------------------------------------------------


def _pti(tp: TopicPartition) -> PartitionTopicInfo:
    return PartitionTopicInfo(tp.topic, tp.partition, asyncio.Queue(), 0, 0, 1024, "c")


def _rows(*parts: tuple[TopicPartition, int, int]) -> pa.RecordBatch:
    """One record batch (as a stream's ``arrow_batches`` hands out) of ``(tp, first, end)``."""
    return records_to_arrow(
        [
            MessageAndMetadata(tp.topic, tp.partition, o, None, b"v", -1, -1, ())
            for tp, first, end in parts
            for o in range(first, end)
        ]
    )


def _pairs(runs: list[PartitionRun]) -> list[tuple[TopicPartition, int]]:
    return [(run.tp, o) for run in runs for o in run.rows.column("offset").to_pylist()]


def _span(tp: TopicPartition, first: int, end: int) -> list[tuple[TopicPartition, int]]:
    return [(tp, o) for o in range(first, end)]


def test_buffer_keeps_a_batch_until_committed_and_only_under_the_same_ownership() -> None:
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    registry = {a: _pti(a), b: _pti(b)}
    buf = _Buffer()
    buf.add(_rows((a, 0, 10), (b, 0, 10)), registry)
    batch = buf.take(15)  # a[0, 10) and b[0, 5)
    assert _pairs(batch) == _span(a, 0, 10) + _span(b, 0, 5)
    failed = BatchRecord(3, False, batch_ranges(batch))
    assert failed.ranges == {a: (0, 10), b: (0, 5)}

    # Same ownership: the whole batch comes back from memory, the buffer is untouched.
    buf.hold(3, batch)
    assert _pairs(buf.reclaim(registry, 3, failed)) == _pairs(batch)
    assert _pairs(buf.runs) == _span(b, 5, 10)
    # Still held until the replay takes it over (a cancelled call leaves it for the next).
    assert _pairs(buf.reclaim(registry, 3, failed)) == _pairs(batch)

    # b was released and claimed again (a new PartitionTopicInfo, reading from the committed
    # offset): its held and buffered records are forgotten, the streams deliver them again.
    buf.hold(3, batch)
    registry[b].active = False
    registry = {a: registry[a], b: _pti(b)}
    assert _pairs(buf.reclaim(registry, 3, failed)) == _span(a, 0, 10)
    buf.drop_stale(registry)
    assert buf.runs == []
    buf.add(_rows((b, 0, 7)), registry)
    assert _pairs(buf.runs) == _span(b, 0, 7)

    # A batch the log never recorded goes back to the front of the buffer.
    buf.runs = []
    buf.hold(4, partition_runs(_rows((a, 10, 12))))
    buf.add(_rows((a, 12, 14)), registry)
    assert buf.reclaim(registry, 4, None) == [] and _pairs(buf.runs) == _span(a, 10, 14)
    assert buf.held is None

    # A batch the log shows finished is dropped.
    buf.hold(4, partition_runs(_rows((a, 10, 12))))
    assert buf.reclaim(registry, 5, None) == [] and buf.held is None
    assert _pairs(buf.runs) == _span(a, 10, 14)
