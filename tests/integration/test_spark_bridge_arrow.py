"""``foreach_batch``'s Arrow buffer.

The push-mode bridge reads each stream with ``arrow_batches`` and keeps records as zero-copy
slices of one partition (``PartitionRun``): batches are cut by row counts, a replay by offsets.
Without servers: checked against the record-by-record rules the bridge had before (on
``(partition, offset)`` pairs), and the pump on real ``KafkaStream`` objects fed with record
batches built by aiokafka. Against a real ZooKeeper + Kafka 3.9 and a local SparkSession:
headers, and streams created with a decoder (read record by record).
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import pyarrow as pa
from _spark_session import spark_session  # noqa: F401
from aiokafka import AIOKafkaProducer
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from pyspark.sql import DataFrame, SparkSession

from aiozkconsumer import ConsumerConfig, ZookeeperConsumerConnector
from aiozkconsumer.records import (
    FetchedDataChunk,
    MessageAndMetadata,
    PartitionTopicInfo,
    TopicPartition,
)
from aiozkconsumer.spark import KAFKA_SCHEMA, KAFKA_SCHEMA_WITH_HEADERS, foreach_batch
from aiozkconsumer.spark.buffer import BridgeBuffer as _Buffer
from aiozkconsumer.spark.pump import decoded_to_arrow as _decoded_to_arrow
from aiozkconsumer.spark.pump import pump as _pump
from aiozkconsumer.spark.runs import (
    PartitionRun,
    batch_ranges,
    batch_table,
    partition_runs,
    split_replay,
    take_rows,
)
from aiozkconsumer.spark.schema import arrow_schema, records_to_arrow
from aiozkconsumer.stream import SHUTDOWN_COMMAND, ChunkQueue, KafkaStream
from aiozkconsumer.testing import LocalCluster

Pair = tuple[TopicPartition, int]

A, B, C = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def _rows(pairs: list[Pair], *, include_headers: bool = False) -> pa.RecordBatch:
    """A record batch holding ``pairs`` in order (value ``v<offset>``, a header on odd ones)."""
    return records_to_arrow(
        [
            MessageAndMetadata(
                tp.topic, tp.partition, o, None, b"v%d" % o, 1000 + o, 0, (("h", b"x"),) * (o % 2)
            )
            for tp, o in pairs
        ],
        include_headers=include_headers,
    )


def _pairs(runs: list[PartitionRun]) -> list[Pair]:
    return [(run.tp, o) for run in runs for o in run.rows.column("offset").to_pylist()]


def _span(tp: TopicPartition, first: int, end: int) -> list[Pair]:
    return [(tp, o) for o in range(first, end)]


def _pti(tp: TopicPartition) -> PartitionTopicInfo:
    return PartitionTopicInfo(tp.topic, tp.partition, asyncio.Queue(), 0, 0, 1 << 20, "c")


# -- the pure helpers ----------------------------------------------------------------------------


def test_partition_runs_cut_at_every_change_of_partition_and_share_the_buffers() -> None:
    pairs = _span(A, 0, 3) + _span(B, 0, 2) + _span(C, 5, 7) + _span(A, 3, 5) + _span(A, 1, 2)
    batch = _rows(pairs)
    runs = partition_runs(batch)
    # Topic, partition and an offset that goes back (a partition read again) each cut.
    assert [(r.tp, r.first, r.end, len(r)) for r in runs] == [
        (A, 0, 3, 3),
        (B, 0, 2, 2),
        (C, 5, 7, 2),
        (A, 3, 5, 2),
        (A, 1, 2, 1),
    ]
    assert _pairs(runs) == pairs
    # Slices, not copies: every run's value bytes are the batch's own buffer.
    data = batch.column("value").buffers()[2].address
    assert {r.rows.column("value").buffers()[2].address for r in runs} == {data}
    assert partition_runs(batch.slice(0, 0)) == []
    assert _pairs(partition_runs(batch.slice(4, 1))) == [(B, 1)]
    assert [len(r) for r in partition_runs(_rows([(A, 7), (A, 7), (A, 8)]))] == [1, 2]


# Per partition, offsets strictly increasing; interleaved, then cut into record batches.
_arrivals = st.lists(
    st.tuples(st.sampled_from([A, B, C]), st.integers(1, 4), st.integers(1, 9)),
    max_size=25,
)


def _interleave(steps: list[tuple[TopicPartition, int, int]]) -> list[Pair]:
    nxt: dict[TopicPartition, int] = {}
    pairs: list[Pair] = []
    for tp, gap, count in steps:
        start = nxt.get(tp, 0) + gap - 1
        pairs += _span(tp, start, start + count)
        nxt[tp] = start + count
    return pairs


def _chunked(pairs: list[Pair], sizes: list[int]) -> list[pa.RecordBatch]:
    batches, i = [], 0
    for size in sizes:
        if i >= len(pairs):
            break
        batches.append(_rows(pairs[i : i + size]))
        i += size
    if i < len(pairs):
        batches.append(_rows(pairs[i:]))
    return batches


def _reference_ranges(pairs: list[Pair]) -> dict[TopicPartition, tuple[int, int]]:
    ranges: dict[TopicPartition, tuple[int, int]] = {}
    for tp, o in pairs:
        first, end = ranges.get(tp, (o, o + 1))
        ranges[tp] = (min(first, o), max(end, o + 1))
    return ranges


@settings(max_examples=60, deadline=None)
@given(_arrivals, st.lists(st.integers(1, 12), max_size=10), st.integers(1, 15))
def test_batches_hand_the_buffer_out_in_arrival_order(
    steps: list[tuple[TopicPartition, int, int]], sizes: list[int], max_records: int
) -> None:
    pairs = _interleave(steps)
    registry = {tp: _pti(tp) for tp in (A, B, C)}
    buf = _Buffer()
    for batch in _chunked(pairs, sizes):
        buf.add(batch, registry)
    assert buf.size == len(pairs)
    taken: list[Pair] = []
    while buf.runs:
        batch = buf.take(max_records)
        assert 0 < sum(len(r) for r in batch) <= max_records
        # The batch log's ranges, from the offset columns alone.
        assert batch_ranges(batch) == _reference_ranges(_pairs(batch))
        taken += _pairs(batch)
    assert taken == pairs


@settings(max_examples=80, deadline=None)
@given(
    _arrivals,
    st.lists(st.integers(1, 12), max_size=10),
    st.dictionaries(st.sampled_from([A, B, C]), st.integers(0, 40), max_size=3),
)
def test_split_replay_follows_the_record_by_record_rule(
    steps: list[tuple[TopicPartition, int, int]], sizes: list[int], ends: dict[TopicPartition, int]
) -> None:
    pairs = _interleave(steps)
    runs = [run for batch in _chunked(pairs, sizes) for run in partition_runs(batch)]
    targets = {tp: (0, end + 1) for tp, end in ends.items()}
    batch, rest, reached = split_replay(runs, targets)
    # The rule the bridge had for MessageAndMetadata lists.
    assert _pairs(batch) == [(tp, o) for tp, o in pairs if tp in targets and o < targets[tp][1]]
    assert _pairs(rest) == [(tp, o) for tp, o in pairs if tp not in targets or o >= targets[tp][1]]
    assert reached == {tp for tp, o in pairs if tp in targets and o >= targets[tp][1] - 1}
    assert all(len(r) > 0 for r in batch + rest)


def test_take_rows_slices_the_run_the_cut_falls_in() -> None:
    runs = partition_runs(_rows(_span(A, 0, 4) + _span(B, 0, 3)))
    head, tail = take_rows(runs, 5)
    assert _pairs(head) == _span(A, 0, 4) + [(B, 0)]
    assert _pairs(tail) == _span(B, 1, 3)
    assert take_rows(runs, 0) == ([], runs)
    head, tail = take_rows(runs, 100)
    assert _pairs(head) == _span(A, 0, 4) + _span(B, 0, 3) and tail == []


def test_batch_table_has_sparks_schema_with_headers_only_when_asked() -> None:
    with_headers = partition_runs(_rows(_span(A, 0, 3) + _span(B, 0, 2), include_headers=True))
    without = partition_runs(_rows(_span(C, 0, 2)))
    table = batch_table(with_headers + without)
    assert table.schema == arrow_schema(False)
    assert table.column("offset").to_pylist() == [0, 1, 2, 0, 1, 0, 1]
    assert table.column("value").to_pylist()[:3] == [b"v0", b"v1", b"v2"]
    sliced = [run.slice(1) for run in with_headers]  # offsets that do not start at 0
    table = batch_table(sliced, include_headers=True)
    assert table.schema == arrow_schema(True)
    assert table.column("offset").to_pylist() == [1, 2, 1]
    header = [{"key": "h", "value": b"x"}]
    assert table.column("headers").to_pylist() == [header, None, header]
    # createDataFrame rebuilds list columns from their offsets and null mask, chunk by chunk:
    # a sliced chunk with nulls fails there, so headers come as one chunk starting at 0.
    headers = table.column("headers")
    assert headers.num_chunks == 1 and headers.chunk(0).offsets[0].as_py() == 0
    assert table.column("value").num_chunks == 2  # the rest stays zero-copy
    with pytest.raises(ValueError, match="without headers"):
        batch_table(with_headers + without, include_headers=True)
    assert batch_table([]).num_rows == 0


def test_buffer_drops_released_partitions_out_of_mixed_batches() -> None:
    registry = {tp: _pti(tp) for tp in (A, B)}
    buf = _Buffer()
    buf.add(_rows(_span(A, 0, 2) + _span(B, 0, 2) + _span(A, 2, 4)), registry)
    registry[B].active = False  # a rebalance released B
    buf.drop_stale(registry)
    assert _pairs(buf.runs) == _span(A, 0, 4)
    # Claimed again: a new PartitionTopicInfo, the streams start over at the committed offset.
    registry[B] = _pti(B)
    buf.add(_rows(_span(B, 0, 1)), registry)
    assert _pairs(buf.take(10)) == _span(A, 0, 4) + [(B, 0)]


def test_records_kept_without_headers_are_known() -> None:
    registry = {A: _pti(A)}
    buf = _Buffer()
    buf.add(_rows(_span(A, 0, 2), include_headers=True), registry)
    assert not buf.without_headers()
    buf.hold(0, buf.take(1))
    buf.add(_rows(_span(A, 2, 3)), registry)
    assert buf.without_headers()


# -- the pump on real streams --------------------------------------------------------------------


class _Registry:
    """What ``_pump`` reads of a connector: its topic registry."""

    def __init__(self, *infos: PartitionTopicInfo) -> None:
        self.topic_registry = {TopicPartition(i.topic, i.partition): i for i in infos}


def _record_batch(base_offset: int, count: int, headers: bool = False) -> Any:
    """One magic-2 record batch of ``count`` records at ``base_offset`` on (aiokafka's)."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(count):
        hs = [("h", b"%d" % i)] if headers else []
        assert builder.append(i, 1_700_000_000_000 + i, None, b"v%d" % (base_offset + i), hs)
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", base_offset)
    batch = MemoryRecords(bytes(raw)).next_batch()
    assert batch is not None
    return batch


def _info(queue: ChunkQueue, partition: int) -> PartitionTopicInfo:
    return PartitionTopicInfo("t", partition, queue, 0, 0, 1 << 20, "c")


async def _until(buf: _Buffer, rows: int) -> None:
    with anyio.fail_after(10):
        while buf.size < rows:
            await buf.wait_change()


async def test_pump_goes_on_after_consumer_timeouts_and_ends_with_the_stream() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=4)
    p0, p1 = _info(queue, 0), _info(queue, 1)
    stream = KafkaStream(queue, 50, "c", "t-0")  # consumer.timeout.ms=50
    buf = _Buffer()
    queue.put_nowait(FetchedDataChunk([_record_batch(0, 5)], p0, 0))
    async with anyio.create_task_group() as tg:
        tg.start_soon(_pump, _Registry(p0, p1), stream, buf, 100, True)
        await _until(buf, 5)
        await anyio.sleep(0.2)  # a few consumer timeouts: each ends one arrow_batches()
        queue.put_nowait(FetchedDataChunk([_record_batch(0, 3, headers=True)], p1, 0))
        queue.put_nowait(FetchedDataChunk([_record_batch(5, 2)], p0, 5))
        queue.put_nowait(SHUTDOWN_COMMAND)
    assert buf.ended == 1
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    assert _pairs(buf.runs) == _span(tp0, 0, 5) + _span(tp1, 0, 3) + _span(tp0, 5, 7)
    table = batch_table(buf.runs, include_headers=True)
    assert table.column("value").to_pylist()[5:8] == [b"v0", b"v1", b"v2"]
    assert table.column("headers").to_pylist()[4:6] == [None, [{"key": "h", "value": b"0"}]]


async def test_pump_keeps_about_two_batches_buffered() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=4)
    p0 = _info(queue, 0)
    queue.put_nowait(FetchedDataChunk([_record_batch(0, 20)], p0, 0))
    stream = KafkaStream(queue, -1, "c", "t-0")
    buf = _Buffer()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_pump, _Registry(p0), stream, buf, 3, False)
        await _until(buf, 6)
        await anyio.wait_all_tasks_blocked()
        assert buf.size == 6 and p0.consumed_offset == 6  # 2 x max_records, then it waits
        assert len(buf.take(3)) == 1
        buf.notify()
        await _until(buf, 6)
        await anyio.wait_all_tasks_blocked()
        assert buf.size == 6 and p0.consumed_offset == 9
        tg.cancel_scope.cancel()
    assert buf.ended == 1
    assert _pairs(buf.runs) == _span(TopicPartition("t", 0), 3, 9)


async def test_streams_with_decoders_are_read_record_by_record() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=4)
    p0 = _info(queue, 0)
    queue.put_nowait(FetchedDataChunk([_record_batch(0, 3)], p0, 0))
    queue.put_nowait(SHUTDOWN_COMMAND)
    # A decoder that returns bytes (say, decryption) keeps working: arrow_batches refuses it.
    stream = KafkaStream(queue, -1, "c", "t-0", value_decoder=bytes.upper)
    buf = _Buffer()
    await _pump(_Registry(p0), stream, buf, 10, False)
    assert batch_table(buf.runs).column("value").to_pylist() == [b"V0", b"V1", b"V2"]
    assert buf.failed is None


def test_decoded_values_that_are_not_bytes_fail_the_buffer_for_good() -> None:
    buf = _Buffer()
    decoded = [MessageAndMetadata("t", 0, 0, None, {"a": 1}, -1, -1, ())]
    with pytest.raises(TypeError, match="value_decoder") as raised:
        _decoded_to_arrow(decoded, False, buf)
    assert buf.failed is raised.value
    as_text = [MessageAndMetadata("t", 0, 0, "k", "v", -1, -1, ())]
    assert _decoded_to_arrow(as_text, False, _Buffer()).column("value").to_pylist() == [b"v"]


# -- end to end: real ZooKeeper, Kafka and Spark -------------------------------------------------

PER_PARTITION = 30
Row = tuple[int, int, bytes, list[tuple[str, bytes]] | None]


async def _produce_with_headers(cluster: LocalCluster, topic: str) -> None:
    await cluster.create_topic(topic, 2)
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
    await producer.start()
    try:
        for p in range(2):
            for i in range(PER_PARTITION):
                headers = [("n", b"%d" % i)] if i % 2 else []
                await producer.send(topic, b"v%d" % i, partition=p, headers=headers)
        await producer.flush()
    finally:
        await producer.stop()


class _Collect:
    """``fn``: the schema and rows of every batch."""

    def __init__(self) -> None:
        self.schemas: list[Any] = []
        self.rows: list[Row] = []

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.schemas.append(df.schema)
        has_headers = "headers" in df.columns
        for r in df.collect():
            headers = None
            if has_headers and r.headers is not None:
                headers = [(h.key, h.value) for h in r.headers]
            self.rows.append((r.partition, r.offset, r.value, headers))


async def _drain(
    connector: ZookeeperConsumerConnector,
    spark: SparkSession,
    fn: _Collect,
    include_headers: bool,
    max_records: int = 25,
) -> None:
    """Batches until ``fn`` saw every record."""
    with anyio.fail_after(120):
        while len(fn.rows) < 2 * PER_PARTITION:
            await foreach_batch(
                connector,
                spark,
                fn,
                max_records=max_records,
                max_interval_ms=300,
                include_headers=include_headers,
                max_batches=1,
            )


def _config(cluster: LocalCluster, group: str) -> ConsumerConfig:
    return ConsumerConfig(
        group_id=group,
        zookeeper_connect=cluster.zookeeper_connect,
        auto_offset_reset="smallest",
        auto_commit_enable=False,
    )


@pytest.mark.integration
@pytest.mark.spark
async def test_bridge_hands_fn_headers_and_reads_streams_with_decoders(
    spark: SparkSession, zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = unique_topic, unique_group_id
    await _produce_with_headers(zk_kafka_cluster, topic)
    everything = [(p, i) for p in range(2) for i in range(PER_PARTITION)]
    committed = {TopicPartition(topic, p): PER_PARTITION for p in range(2)}

    # Headers asked for in the first calls, not in the later ones: the records kept between
    # calls lose the column, nothing else.
    fn = _Collect()
    async with ZookeeperConsumerConnector(_config(zk_kafka_cluster, group)) as connector:
        await connector.create_message_streams({topic: 1})
        await foreach_batch(
            connector, spark, fn, max_records=25, include_headers=True, max_batches=2
        )
        assert fn.schemas == [KAFKA_SCHEMA_WITH_HEADERS] * 2
        with_headers = len(fn.rows)
        await _drain(connector, spark, fn, include_headers=False)
        assert all(s == KAFKA_SCHEMA for s in fn.schemas[2:])
        assert connector.statistics().committed_offsets == committed
    assert sorted((p, o) for p, o, _, _ in fn.rows) == everything
    for _, o, value, headers in fn.rows[:with_headers]:
        assert value == b"v%d" % o
        assert headers == ([("n", b"%d" % o)] if o % 2 else None)

    # A value decoder: the streams are read record by record, the DataFrame holds its bytes.
    fn = _Collect()
    async with ZookeeperConsumerConnector(_config(zk_kafka_cluster, group + "-d")) as connector:
        await connector.create_message_streams({topic: 1}, value_decoder=bytes.upper)
        await _drain(connector, spark, fn, include_headers=True, max_records=100)
        assert connector.statistics().committed_offsets == committed
    assert all(s == KAFKA_SCHEMA_WITH_HEADERS for s in fn.schemas)
    assert sorted((p, o) for p, o, _, _ in fn.rows) == everything
    for _, o, value, headers in fn.rows:
        assert value == b"V%d" % o
        assert headers == ([("n", b"%d" % o)] if o % 2 else None)
