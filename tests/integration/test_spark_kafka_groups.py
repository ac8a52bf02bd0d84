"""The Spark bridges with a Kafka-coordinated group (``group.coordinator=kafka``).

The ``zkkafka`` source's member is a ``KafkaConsumerConnector`` when the options say so (no
``zookeeper.connect`` needed), and ``foreach_batch`` keeps its batch log in the metadata of
the group's committed offsets instead of a ZooKeeper node. Against real brokers (KRaft
Kafka 4 has no ZooKeeper at all) and a local SparkSession; the group's offsets and the batch
log are read back with aiokafka's admin client, not with this package's code.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import pyarrow as pa
from aiokafka.admin import AIOKafkaAdminClient
from pyspark.sql import DataFrame, SparkSession

from aiozkconsumer import (
    ConsumerConfig,
    InvalidConfigError,
    KafkaConsumerConnector,
    create_connector,
)
from aiozkconsumer.kafka.errors import NONE
from aiozkconsumer.offsets import NO_OFFSET, KafkaOffsetStore
from aiozkconsumer.records import MessageAndMetadata, PartitionTopicInfo, TopicPartition
from aiozkconsumer.spark import foreach_batch, parse_source_options, register
from aiozkconsumer.spark.batch_log import KafkaBatchLog, open_batch_log
from aiozkconsumer.spark.batch_records import BatchMark, BatchRecord, last_batch
from aiozkconsumer.spark.buffer import BridgeBuffer as _Buffer
from aiozkconsumer.spark.runs import PartitionRun, batch_ranges
from aiozkconsumer.spark.schema import records_to_arrow
from aiozkconsumer.testing import LocalCluster

pytestmark = pytest.mark.spark

_T = TypeVar("_T")

PARTITIONS = 4
PER_PARTITION = 500
MAX_RECORDS = 300
FAIL_ON = 2  # the third batch fails once
WAIT_S = 90.0

T = "payments"
T0, T1, T2 = (TopicPartition(T, p) for p in range(3))


def arun(coro: Coroutine[Any, Any, _T]) -> _T:
    return asyncio.run(coro)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local SparkSession (2 cores, UI off) with ``zkkafka`` registered, as test_spark's."""
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
    register(session)
    yield session
    session.stop()


async def setup_topic(cluster: LocalCluster, topic: str) -> None:
    await cluster.create_topic(topic, PARTITIONS)
    await cluster.produce_to_partitions(
        topic,
        {
            p: [(b"k%d" % i, b"v-%d-%d" % (p, i)) for i in range(PER_PARTITION)]
            for p in range(PARTITIONS)
        },
    )


async def group_offsets(cluster: LocalCluster, group: str) -> dict[int, tuple[int, str]]:
    """``{partition: (offset, metadata)}`` the group committed, as aiokafka's admin reads it."""
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    await admin.start()
    try:
        got = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp.partition: (o.offset, o.metadata) for tp, o in got.items()}


async def wait_group_offsets(
    cluster: LocalCluster, group: str, end: int, limit_s: float = 30
) -> dict[int, tuple[int, str]]:
    """Poll the group's offsets until every partition's reaches ``end`` (or the limit)."""
    got: dict[int, tuple[int, str]] = {}
    with anyio.move_on_after(limit_s):
        while True:
            got = await group_offsets(cluster, group)
            if len(got) == PARTITIONS and all(o >= end for o, _ in got.values()):
                break
            await anyio.sleep(0.5)
    return got


# -- pure parts: the options, the marks, the store's metadata -------------------------------


def test_source_options_of_a_kafka_coordinated_group_need_no_zookeeper() -> None:
    base = {"group.id": "billing", "subscribe": "payments"}
    opts = parse_source_options(
        {
            **base,
            "group.coordinator": "kafka",
            "kafka.bootstrap.servers": "127.0.0.1:9092",
            "enable.auto.commit": "false",
            "auto.offset.reset": "earliest",
        }
    )
    config = opts.config
    assert config.kafka_coordinated and config.zookeeper_connect is None
    assert config.bootstrap_servers == "127.0.0.1:9092" and not config.auto_commit_enable
    assert config.offsets_storage == "kafka"
    assert opts.starting_offsets.for_partition(TopicPartition("payments", 0)) == -2
    # The errors name the key at fault and say what to do.
    with pytest.raises(InvalidConfigError, match="group.coordinator=kafka") as info:
        parse_source_options(base)
    assert info.value.key == "zookeeper.connect"
    with pytest.raises(InvalidConfigError) as info:
        parse_source_options({**base, "group.coordinator": "kafka"})
    assert info.value.key == "bootstrap.servers"
    with pytest.raises(InvalidConfigError) as info:
        parse_source_options(
            {
                **base,
                "group.coordinator": "kafka",
                "bootstrap.servers": "h:1",
                "enable.auto.commit": "true",
            }
        )
    assert info.value.key == "auto.commit.enable"


def test_batch_marks_round_trip_and_foreign_metadata_is_not_a_mark() -> None:
    mark = BatchMark(7, False, 1200, 1450)
    assert mark.encode() == '{"b":7,"c":false,"r":[1200,1450]}'
    assert BatchMark.decode(mark.encode()) == mark
    named = BatchMark(3, True, 0, 5, name="audit")
    assert BatchMark.decode(named.encode()) == named and '"n":"audit"' in named.encode()
    for foreign in (
        "",
        "checkpoint 12",
        "{}",
        '{"b":"7","c":false,"r":[1,2]}',
        "{not json",
        '{"b":1,"c":false,"r":[5,3]}',
        '{"b":1,"c":0,"r":[1,2]}',
    ):
        assert BatchMark.decode(foreign) is None, foreign


def test_last_batch_is_the_largest_id_committed_only_when_all_its_partitions_are() -> None:
    assert last_batch({}) is None
    marks = {
        T0: BatchMark(4, True, 10, 20),
        T1: BatchMark(5, False, 30, 40),
        T2: BatchMark(5, False, 7, 9),
    }
    assert last_batch(marks) == BatchRecord(5, False, {T1: (30, 40), T2: (7, 9)})
    marks[T2] = BatchMark(5, True, 7, 9)  # its commit landed for T2 only: fn had returned
    assert last_batch(marks) == BatchRecord(5, False, {T1: (30, 40), T2: (7, 9)})
    marks[T1] = BatchMark(5, True, 30, 40)
    assert last_batch(marks) == BatchRecord(5, True, {T1: (30, 40), T2: (7, 9)})


class MetadataChannel:
    """Stands in for the store's ``OffsetsChannel``, keeping offsets and metadata."""

    def __init__(self) -> None:
        self.committed: dict[TopicPartition, tuple[int, str]] = {}
        self.asked: list[list[TopicPartition] | None] = []
        self.coordinator: int | None = 1

    async def commit(
        self,
        offsets: dict[TopicPartition, int],
        *,
        generation: int,
        member_id: str,
        metadata: dict[TopicPartition, str] | None = None,
    ) -> dict[TopicPartition, int]:
        for tp, offset in offsets.items():
            self.committed[tp] = (offset, (metadata or {}).get(tp, ""))
        return dict.fromkeys(offsets, NONE)

    async def fetch_with_metadata(
        self, tps: list[TopicPartition] | None
    ) -> tuple[int, dict[TopicPartition, tuple[int, str, int]]]:
        self.asked.append(tps)
        wanted = self.committed if tps is None else tps
        return NONE, {tp: (*self.committed.get(tp, (NO_OFFSET, "")), NONE) for tp in wanted}

    async def fetch(
        self, tps: list[TopicPartition]
    ) -> tuple[int, dict[TopicPartition, tuple[int, int]]]:
        code, got = await self.fetch_with_metadata(tps)
        return code, {tp: (o, c) for tp, (o, _, c) in got.items()}

    def forget_coordinator(self) -> None:
        pass

    def close(self) -> None:
        pass


async def _getter() -> Any:
    raise AssertionError("the scripted channel needs no client")


async def test_store_commits_metadata_and_reads_it_back() -> None:
    store = KafkaOffsetStore(_getter, "g", backoff_ms=10, socket_timeout_ms=1000)
    channel = MetadataChannel()
    store._channel = channel  # type: ignore[assignment]
    assert await store.commit({T0: 5, T1: 6}, metadata={T0: "m0"}) == 2
    await store.commit({T2: 9})  # no metadata: as before, empty
    assert await store.fetch([T0, T2]) == {T0: 5, T2: 9}
    assert await store.fetch_metadata([T1, T0]) == {T0: (5, "m0"), T1: (6, "")}
    # None: every partition the group committed (OffsetFetch with null topics).
    assert await store.fetch_metadata() == {T0: (5, "m0"), T1: (6, ""), T2: (9, "")}
    assert channel.asked[-1] is None
    assert await store.fetch_metadata([]) == {}


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


def test_held_partitions_the_log_entry_leaves_out_go_back_to_the_buffer() -> None:
    # A Kafka batch log whose first write failed for T1: fn never saw the batch, and the log
    # names T0 only. T1's records must not be lost (the streams handed them out already).
    registry = {T0: _pti(T0), T1: _pti(T1)}
    buf = _Buffer()
    buf.add(_rows((T0, 0, 5), (T1, 0, 5)), registry)
    buf.add(_rows((T1, 5, 8)), registry)
    batch = buf.take(10)
    buf.hold(3, batch)
    logged = BatchRecord(3, False, {T0: batch_ranges(batch)[T0]})
    assert _pairs(buf.reclaim(registry, 3, logged)) == _span(T0, 0, 5)
    assert _pairs(buf.runs) == _span(T1, 0, 8)
    # Reclaiming again (a call cancelled before the replay) does not add them twice.
    assert _pairs(buf.reclaim(registry, 3, logged)) == _span(T0, 0, 5)
    assert _pairs(buf.runs) == _span(T1, 0, 8)


# -- pull mode: the zkkafka source with group.coordinator=kafka ------------------------------


@pytest.mark.integration
def test_source_reads_every_record_once_and_commits_to_the_kafka_group(
    spark: SparkSession,
    any_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    topic, group = unique_topic, unique_group_id
    arun(setup_topic(any_cluster, topic))
    name = f"sink_{group.replace('-', '_')}"
    df = (
        spark.readStream.format("zkkafka")
        .option("group.coordinator", "kafka")
        .option("kafka.bootstrap.servers", any_cluster.bootstrap_servers)
        .option("group.id", group)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "700")
        .option("session.timeout.ms", "10000")
        .option("heartbeat.interval.ms", "1000")
        .load()
    )
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        assert query.awaitTermination(int(WAIT_S)), "the availableNow query did not end"
        batches = [p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    rows = spark.sql(f"SELECT partition, offset, value FROM {name}").collect()
    pairs = sorted((r.partition, r.offset) for r in rows)
    assert pairs == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]
    assert all(r.value == b"v-%d-%d" % (r.partition, r.offset) for r in rows)
    assert len(batches) >= 3  # maxOffsetsPerTrigger cut the 2000 records up
    # The group (in Kafka: there is no ZooKeeper group) committed up to the log end.
    committed = arun(wait_group_offsets(any_cluster, group, PER_PARTITION))
    assert {p: o for p, (o, _) in committed.items()} == dict.fromkeys(
        range(PARTITIONS), PER_PARTITION
    )


# -- push mode: foreach_batch with a KafkaConsumerConnector ----------------------------------


def kafka_config(cluster: LocalCluster, group: str, **kw: Any) -> ConsumerConfig:
    return ConsumerConfig(
        group_id=group,
        group_coordinator="kafka",
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        auto_commit_enable=False,
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
        **kw,
    )


class SinkDownError(RuntimeError):
    """What ``fn`` raises in the failing batch."""


@dataclass(frozen=True)
class Call:
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


async def fail_once(
    connector: KafkaConsumerConnector, spark: SparkSession, fn: Recorder, topic: str
) -> None:
    """Run the bridge until ``fn`` raises; the Kafka batch log shows the unfinished batch."""
    with pytest.raises(SinkDownError, match=f"sink down at batch {FAIL_ON}"):
        await foreach_batch(connector, spark, fn, max_records=MAX_RECORDS, max_interval_ms=500)
    failed = fn.failed
    assert failed.batch_id == FAIL_ON and failed.rows == len(failed.pairs) > 0
    assert [c.batch_id for c in fn.calls] == list(range(FAIL_ON + 1))
    batch_log = open_batch_log(connector)
    assert isinstance(batch_log, KafkaBatchLog)
    record = await batch_log.load()
    assert record is not None and (record.batch_id, record.committed) == (FAIL_ON, False)
    ranges = {
        TopicPartition(topic, p): (
            min(o for q, o in failed.pairs if q == p),
            max(o for q, o in failed.pairs if q == p) + 1,
        )
        for p in {p for p, _ in failed.pairs}
    }
    assert record.ranges == ranges
    # Nothing of the failed batch was committed: its partitions sit at its first offsets.
    committed = await group_offsets_of(connector)
    assert all(committed[tp.partition][0] == first for tp, (first, _) in ranges.items())


async def group_offsets_of(connector: KafkaConsumerConnector) -> dict[int, tuple[int, str]]:
    store = connector.offset_store
    assert isinstance(store, KafkaOffsetStore)
    return {tp.partition: got for tp, got in (await store.fetch_metadata()).items()}


async def drain(connector: KafkaConsumerConnector, spark: SparkSession, fn: Recorder) -> None:
    """Run the bridge until the member's committed offsets reach the log end, then stop it."""
    owned = connector.statistics().owned_partitions
    assert len(owned) == PARTITIONS
    async with anyio.create_task_group() as tg:
        tg.start_soon(_bridge, connector, spark, fn)
        with anyio.move_on_after(WAIT_S) as scope:
            while True:
                committed = connector.statistics().committed_offsets
                if all(committed.get(tp, -1) >= PER_PARTITION for tp in owned):
                    break
                await anyio.sleep(0.2)
        tg.cancel_scope.cancel()
    if scope.cancelled_caught:
        calls = [(c.batch_id, c.rows, c.ok) for c in fn.calls]
        committed = dict(connector.statistics().committed_offsets)
        raise AssertionError(f"offsets not at the log end: {committed}; fn calls {calls}")


async def _bridge(connector: KafkaConsumerConnector, spark: SparkSession, fn: Recorder) -> None:
    await foreach_batch(connector, spark, fn, max_records=MAX_RECORDS, max_interval_ms=500)


async def check_replayed_and_complete(cluster: LocalCluster, group: str, fn: Recorder) -> None:
    """The failed batch came back first, with the same id and records; nothing was lost."""
    failed = fn.failed
    after = fn.calls[fn.calls.index(failed) + 1 :]
    assert after, "fn was never called again"
    replay = after[0]
    assert replay.ok and replay.batch_id == failed.batch_id
    assert replay.rows == failed.rows > 0
    assert replay.pairs == failed.pairs
    assert [c.batch_id for c in after] == list(range(FAIL_ON, FAIL_ON + len(after)))
    # Every produced record reached a successful fn call, none twice in a batch.
    assert all(c.rows == len(c.pairs) for c in fn.calls)
    delivered = sorted(pair for c in fn.calls if c.ok for pair in c.pairs)
    assert delivered == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]
    # The group's offsets (read by aiokafka) are at the log end; the batch log's marks hold
    # the last batch, committed, for the partitions it covered.
    committed = await group_offsets(cluster, group)
    assert {p: o for p, (o, _) in committed.items()} == dict.fromkeys(
        range(PARTITIONS), PER_PARTITION
    )
    marks = {p: BatchMark.decode(text) for p, (_, text) in committed.items()}
    assert all(m is not None and m.committed for m in marks.values())
    last = after[-1]
    assert max(m.batch_id for m in marks.values() if m is not None) == last.batch_id
    for p in {p for p, _ in last.pairs}:
        mark = marks[p]
        assert mark is not None and mark.batch_id == last.batch_id
        assert (mark.first, mark.end) == (
            min(o for q, o in last.pairs if q == p),
            max(o for q, o in last.pairs if q == p) + 1,
        )


@pytest.mark.integration
async def test_bridge_retry_with_the_same_connector_replays_the_failed_batch(
    spark: SparkSession, any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = unique_topic, unique_group_id
    await setup_topic(any_cluster, topic)
    fn = Recorder(fail_on=FAIL_ON)
    async with create_connector(kafka_config(any_cluster, group)) as connector:
        assert isinstance(connector, KafkaConsumerConnector)
        await connector.create_message_streams({topic: 1})
        await fail_once(connector, spark, fn, topic)
        # The streams handed the failed batch's records out: only the bridge has them.
        consumed = connector.statistics().consumed_offsets
        failed = {p: max(o for q, o in fn.failed.pairs if q == p) for p, _ in fn.failed.pairs}
        assert all(consumed[TopicPartition(topic, p)] > last for p, last in failed.items())
        await drain(connector, spark, fn)
    await check_replayed_and_complete(any_cluster, group, fn)


@pytest.mark.integration
async def test_bridge_retry_with_a_new_connector_replays_the_failed_batch(
    spark: SparkSession, any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = unique_topic, unique_group_id
    await setup_topic(any_cluster, topic)
    fn = Recorder(fail_on=FAIL_ON)
    async with create_connector(kafka_config(any_cluster, group)) as connector:
        assert isinstance(connector, KafkaConsumerConnector)
        await connector.create_message_streams({topic: 1})
        await fail_once(connector, spark, fn, topic)
    # As a new process: a new connector (a new member), nothing of the first one's buffers.
    async with create_connector(kafka_config(any_cluster, group)) as connector:
        assert isinstance(connector, KafkaConsumerConnector)
        await connector.create_message_streams({topic: 1})
        await drain(connector, spark, fn)
    await check_replayed_and_complete(any_cluster, group, fn)
