"""``KafkaStream.arrow_batches``: the records of ``batches()``, column by column in Arrow.

Checked against the record path: on real record batches built with aiokafka (no servers) —
compressed batches that start before the position, control batches, a closed gate, a released
partition, a too-large batch, interceptors — and on real brokers with both connectors.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import aclosing
from typing import Any

import anyio
import pyarrow as pa
import pytest
from _support import config_for
from aiokafka import AIOKafkaProducer
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c

from aiozkconsumer import ConsumerConfig, TopicPartition, create_connector
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.errors import ConsumerTimeoutError, MessageSizeTooLargeError
from aiozkconsumer.interceptors import Interceptors
from aiozkconsumer.kafka import native
from aiozkconsumer.records import (
    FetchedDataChunk,
    MessageAndMetadata,
    OwnershipGate,
    PartitionTopicInfo,
)
from aiozkconsumer.stream import SHUTDOWN_COMMAND, ChunkQueue, KafkaStream
from aiozkconsumer.testing import LocalCluster

Row = tuple[str, int, int, bytes | None, bytes | None, int, int, tuple[tuple[str, bytes], ...]]
Spec = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]

GZIP = 1
_CONTROL_ATTRS = 0x30  # transactional | control
_DECODER = ["aiokafka"]  # which parser record_batch() hands its batch to


@pytest.fixture(params=["aiokafka", "native"])
def decoder(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test over aiokafka's batches and over the native decoder's."""
    _DECODER[0] = request.param
    yield request.param
    _DECODER[0] = "aiokafka"


def record_batch(
    base_offset: int,
    specs: Sequence[Spec],
    *,
    compression: int = 0,
    ts: int = 1_700_000_000_000,
    control: bool = False,
) -> Any:
    """One magic-2 record batch holding ``specs`` at offsets ``base_offset`` on."""
    builder = DefaultRecordBatchBuilder(2, compression, 0, -1, -1, -1, 1 << 20)
    for i, (key, value, headers) in enumerate(specs):
        assert builder.append(i, ts + base_offset + i, key, value, headers) is not None
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", base_offset)  # the broker assigns the base offset
    if control:
        (attrs,) = struct.unpack_from(">h", raw, 21)
        struct.pack_into(">h", raw, 21, attrs | _CONTROL_ATTRS)
    if control or compression:
        # The builder's CRC no longer matches the edited attributes: compute it again.
        struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))
    if _DECODER[0] == "native":
        parsed = native.parse_record_set(bytes(raw), TopicPartition("t", 0), True)
        assert parsed is not None and not parsed[1]
        (native_batch,) = parsed[0]
        return native_batch
    records = MemoryRecords(bytes(raw))
    batch = records.next_batch()
    assert batch is not None and not records.has_next()
    return batch


def specs(first: int, n: int) -> list[Spec]:
    """Records with null keys, tombstones (never both, as producers refuse) and some headers."""
    return [
        (
            None if i % 3 == 0 else b"k%d" % i,
            None if i % 3 == 1 else b"v%d" % i,
            [("h", b"%d" % i), ("n", b"")] if i % 2 else [],
        )
        for i in range(first, first + n)
    ]


def info(queue: ChunkQueue, partition: int = 0, consumed: int = 0, **kw: Any) -> PartitionTopicInfo:
    return PartitionTopicInfo("t", partition, queue, consumed, consumed, 1 << 20, "c", **kw)


def row_of(msg: MessageAndMetadata) -> Row:
    return (
        msg.topic,
        msg.partition,
        msg.offset,
        msg.key,
        msg.value,
        msg.timestamp,
        msg.timestamp_type,
        tuple(msg.headers),
    )


def rows_of(rb: pa.RecordBatch) -> list[Row]:
    """An Arrow batch's rows in ``MessageAndMetadata`` terms (timestamps back to epoch ms)."""
    millis = rb.column("timestamp").cast(pa.int64()).to_pylist()
    headers = (
        rb.column("headers").to_pylist() if "headers" in rb.schema.names else [None] * rb.num_rows
    )
    return [
        (t, p, o, k, v, ms // 1000, tt, tuple((h["key"], h["value"]) for h in hs or ()))
        for t, p, o, k, v, ms, tt, hs in zip(
            rb.column("topic").to_pylist(),
            rb.column("partition").to_pylist(),
            rb.column("offset").to_pylist(),
            rb.column("key").to_pylist(),
            rb.column("value").to_pylist(),
            millis,
            rb.column("timestampType").to_pylist(),
            headers,
            strict=True,
        )
    ]


def chunks(queue: ChunkQueue) -> tuple[PartitionTopicInfo, PartitionTopicInfo]:
    """Two partitions' chunks: plain, gzip starting before the position, control, plain."""
    p0, p1 = info(queue, 0, consumed=0), info(queue, 1, consumed=12)
    queue.put_nowait(
        FetchedDataChunk([record_batch(0, specs(0, 4)), record_batch(4, specs(4, 3))], p0, 0)
    )
    # A fetch at 12 returns the whole compressed batch starting at 10: 10 and 11 are skipped.
    queue.put_nowait(FetchedDataChunk([record_batch(10, specs(10, 6), compression=GZIP)], p1, 12))
    queue.put_nowait(
        FetchedDataChunk(
            [
                record_batch(7, [(None, b"marker", [])], control=True),
                record_batch(8, specs(8, 5), compression=GZIP),
            ],
            p0,
            7,
        )
    )
    queue.put_nowait(FetchedDataChunk([record_batch(16, specs(16, 2))], p1, 16))
    queue.put_nowait(SHUTDOWN_COMMAND)
    return p0, p1


def schema_of(include_headers: bool) -> pa.Schema:
    from aiozkconsumer.columns import kafka_arrow_schema

    return kafka_arrow_schema(include_headers)


@pytest.mark.usefixtures("decoder")
@pytest.mark.parametrize("max_records", [1, 3, 1000])
@pytest.mark.parametrize("include_headers", [False, True])
async def test_arrow_batches_hold_the_records_of_batches(
    max_records: int, include_headers: bool
) -> None:
    expected_q: ChunkQueue = ChunkQueue(maxsize=8)
    e0, e1 = chunks(expected_q)
    expected = [
        row_of(m) async for b in KafkaStream(expected_q, -1, "c", "t-0").batches() for m in b
    ]

    queue: ChunkQueue = ChunkQueue(maxsize=8)
    p0, p1 = chunks(queue)
    stream = KafkaStream(queue, -1, "c", "t-0")
    got: list[Row] = []
    sizes = []
    async for rb in stream.arrow_batches(max_records=max_records, include_headers=include_headers):
        assert isinstance(rb, pa.RecordBatch)
        assert rb.schema == schema_of(include_headers)
        sizes.append(rb.num_rows)
        got.extend(rows_of(rb))
    if not include_headers:
        expected = [(*r[:7], ()) for r in expected]
    assert got == expected
    assert [r[2] for r in got if r[1] == 1] == [12, 13, 14, 15, 16, 17]
    assert all(0 < n <= max_records for n in sizes)
    # Past the control batch too, as the record path.
    assert (p0.consumed_offset, p1.consumed_offset) == (e0.consumed_offset, e1.consumed_offset)
    assert (p0.consumed_offset, p1.consumed_offset) == (13, 18)


@pytest.mark.usefixtures("decoder")
async def test_offsets_count_as_consumed_when_a_batch_is_handed_out() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=2)
    p0 = info(queue)
    queue.put_nowait(
        FetchedDataChunk([record_batch(0, specs(0, 5)), record_batch(5, specs(5, 5))], p0, 0)
    )
    stream = KafkaStream(queue, 100, "c", "t-0")
    async with aclosing(stream.arrow_batches(max_records=4)) as batches:
        assert p0.consumed_offset == 0  # nothing taken before the first batch is asked for
        assert (await anext(batches)).column("offset").to_pylist() == [0, 1, 2, 3]
        assert p0.consumed_offset == 4
        assert (await anext(batches)).column("offset").to_pylist() == [4, 5, 6, 7]
        assert p0.consumed_offset == 8
    # The stream goes on where the batches stopped, record by record too.
    assert [(await stream.__aiter__().__anext__()).offset for _ in range(2)] == [8, 9]
    with pytest.raises(ConsumerTimeoutError):
        await stream.arrow_batches().__anext__()


@pytest.mark.usefixtures("decoder")
async def test_a_record_held_by_the_record_path_goes_into_the_next_batch() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=2)
    gate = OwnershipGate()
    p0 = info(queue, gate=gate)
    queue.put_nowait(FetchedDataChunk([record_batch(0, specs(0, 4))], p0, 0))
    stream = KafkaStream(queue, 100, "c", "t-0")
    it = stream.__aiter__()
    assert (await it.__anext__()).offset == 0
    gate.close()
    with pytest.raises(ConsumerTimeoutError):
        await it.__anext__()  # the record at 1 is now held back by the iterator
    # A closed gate holds the columnar path back too, and loses nothing.
    with pytest.raises(ConsumerTimeoutError):
        await stream.arrow_batches().__anext__()
    assert p0.consumed_offset == 1
    gate.reopen()
    rb = await stream.arrow_batches().__anext__()
    assert rb.column("offset").to_pylist() == [1, 2, 3]
    assert p0.consumed_offset == 4


@pytest.mark.usefixtures("decoder")
async def test_a_released_partition_is_dropped() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=3)
    released, kept = info(queue, 0), info(queue, 1)
    queue.put_nowait(FetchedDataChunk([record_batch(0, specs(0, 3))], released, 0))
    queue.put_nowait(FetchedDataChunk([record_batch(0, specs(0, 2))], kept, 0))
    stream = KafkaStream(queue, 100, "c", "t-0")
    first = await stream.arrow_batches(max_records=1).__anext__()
    assert first.column("offset").to_pylist() == [0]
    released.active = False  # a rebalance released it mid-chunk
    rb = await stream.arrow_batches().__anext__()
    pairs = zip(rb.column("partition").to_pylist(), rb.column("offset").to_pylist(), strict=True)
    assert list(pairs) == [(1, 0), (1, 1)]
    assert released.consumed_offset == 1


@pytest.mark.usefixtures("decoder")
async def test_a_too_large_batch_raises_after_the_records_in_hand() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=3)
    ok, big = info(queue, 0), info(queue, 1, consumed=42)
    queue.put_nowait(FetchedDataChunk([record_batch(0, specs(0, 2))], ok, 0))
    queue.put_nowait(FetchedDataChunk((), big, 42, too_large=True))
    stream = KafkaStream(queue, 100, "c", "t-0")
    async with aclosing(stream.arrow_batches()) as batches:
        assert (await anext(batches)).num_rows == 2
        with pytest.raises(MessageSizeTooLargeError, match="partition 1 at fetch offset 42"):
            await anext(batches)


@pytest.mark.usefixtures("decoder")
async def test_interceptors_see_each_batch_once() -> None:
    class DropTombstones:
        def __init__(self) -> None:
            self.calls: list[int] = []

        def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
            self.calls.append(len(records))
            return [r for r in records if r.value is not None]

        def on_commit(self, offsets: Any) -> None:
            pass

        def close(self) -> None:
            pass

    interceptor = DropTombstones()
    queue: ChunkQueue = ChunkQueue(maxsize=2)
    p0 = info(queue)
    queue.put_nowait(FetchedDataChunk([record_batch(0, specs(0, 10))], p0, 0))
    queue.put_nowait(SHUTDOWN_COMMAND)
    stream = KafkaStream(queue, -1, "c", "t-0", interceptors=Interceptors([interceptor]))
    offsets = [
        o
        async for rb in stream.arrow_batches(max_records=4)
        for o in rb.column("offset").to_pylist()
    ]
    assert offsets == [0, 2, 3, 5, 6, 8, 9]
    assert interceptor.calls == [4, 4, 2]
    assert p0.consumed_offset == 10  # removed records count as consumed


async def test_decoders_and_max_records_are_refused_at_once() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=1)
    with pytest.raises(ValueError, match="max_records"):
        KafkaStream(queue, -1, "c", "t-0").arrow_batches(max_records=0)
    decoded = KafkaStream(queue, -1, "c", "t-0", value_decoder=bytes.decode)
    with pytest.raises(ValueError, match="decoder"):
        decoded.arrow_batches()


def test_a_missing_pyarrow_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "aiozkconsumer.columns", raising=False)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    queue: ChunkQueue = ChunkQueue(maxsize=1)
    with pytest.raises(ImportError, match=r"pip install 'aiozkconsumer\[arrow\]'"):
        KafkaStream(queue, -1, "c", "t-0").arrow_batches()


def test_the_schema_is_pysparks() -> None:
    pytest.importorskip("pyspark")
    from aiozkconsumer.spark.schema import arrow_schema

    for include_headers in (False, True):
        assert schema_of(include_headers) == arrow_schema(include_headers)


# -- real brokers ---------------------------------------------------------------------------


async def produce_mixed(cluster: LocalCluster, topic: str) -> int:
    """Uncompressed and gzip batches on 2 partitions, with tombstones, null keys and headers.

    Returns:
        The number of records produced.
    """
    n = 0
    for compression in (None, "gzip", None):
        async with AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap_servers,
            compression_type=compression,
            linger_ms=50,
            acks="all",
        ) as producer:
            futures = []
            for partition in (0, 1):
                for key, value, headers in specs(n, 40):
                    futures.append(
                        await producer.send(
                            topic,
                            value,
                            key=key,
                            partition=partition,
                            headers=headers,
                            timestamp_ms=1_700_000_000_000 + n,
                        )
                    )
            await producer.flush()
            for f in futures:
                await f
        n += 40
    return 2 * n


async def read_records(stream: KafkaStream, count: int) -> list[Row]:
    rows: list[Row] = []
    with anyio.fail_after(60):
        async for msg in stream:
            rows.append(row_of(msg))
            if len(rows) == count:
                break
    return rows


async def read_arrow(stream: KafkaStream, count: int, max_records: int) -> list[Row]:
    rows: list[Row] = []
    batches: AsyncIterator[pa.RecordBatch] = stream.arrow_batches(
        max_records=max_records, include_headers=True
    )
    with anyio.fail_after(60):
        async with aclosing(batches):
            async for rb in batches:
                assert rb.schema == schema_of(True)
                rows.extend(rows_of(rb))
                if len(rows) >= count:
                    break
    return rows


async def consume_both_ways(
    cluster: LocalCluster, topic: str, configs: tuple[ConsumerConfig, ConsumerConfig]
) -> None:
    """One member reads with ``async for``, one (another group) with ``arrow_batches``: the
    same records, the same consumed offsets, and the same offsets committed and read back."""
    await cluster.create_topic(topic, 2)
    total = await produce_mixed(cluster, topic)
    ends = await cluster.log_end_offsets(topic)
    expected_offsets = {TopicPartition(topic, p): end for p, end in ends.items()}
    assert sum(ends.values()) == total  # no transaction markers: offsets are the records

    async def run(config: ConsumerConfig, arrow: bool) -> tuple[list[Row], dict[Any, int]]:
        connector: ConsumerConnector
        async with create_connector(config) as connector:
            (stream,) = (await connector.create_message_streams({topic: 1}))[topic]
            if arrow:
                rows = await read_arrow(stream, total, max_records=17)
            else:
                rows = await read_records(stream, total)
            consumed = dict(connector.statistics().consumed_offsets)
            await connector.commit_offsets()
            committed = await connector.offset_store.fetch(expected_offsets)
            assert committed == consumed
            return rows, consumed

    expected, consumed_records = await run(configs[0], arrow=False)
    got, consumed_arrow = await run(configs[1], arrow=True)
    assert len(got) == total
    assert sorted(got, key=lambda r: r[1:3]) == sorted(expected, key=lambda r: r[1:3])
    # Per partition in offset order, as the records path.
    for p in (0, 1):
        assert [r for r in got if r[1] == p] == [r for r in expected if r[1] == p]
    assert any(r[3] is None for r in got) and any(r[4] is None for r in got)
    assert any(r[7] for r in got)
    assert consumed_arrow == consumed_records == expected_offsets


@pytest.mark.integration
async def test_zookeeper_connector_arrow_batches_match_async_for(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    configs = (
        config_for(zk_kafka_cluster, unique_group_id + "-records", auto_commit_enable=False),
        config_for(zk_kafka_cluster, unique_group_id + "-arrow", auto_commit_enable=False),
    )
    await consume_both_ways(zk_kafka_cluster, unique_topic, configs)


@pytest.mark.integration
async def test_kafka_coordinated_connector_arrow_batches_match_async_for(
    kraft_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    def kafka_config(group: str) -> ConsumerConfig:
        return ConsumerConfig(
            group_id=group,
            group_coordinator="kafka",
            bootstrap_servers=kraft_cluster.bootstrap_servers,
            auto_offset_reset="earliest",
            auto_commit_enable=False,
            session_timeout_ms=10000,
            heartbeat_interval_ms=1000,
        )

    configs = (kafka_config(unique_group_id + "-records"), kafka_config(unique_group_id + "-arrow"))
    await consume_both_ways(kraft_cluster, unique_topic, configs)


def test_columns_of_several_topics_match_the_record_conversion() -> None:
    pytest.importorskip("pyspark")
    from aiozkconsumer.columns import ColumnBuilder
    from aiozkconsumer.spark.schema import records_to_arrow

    messages = [
        MessageAndMetadata("a", 0, 5, b"k", b"v", 1_700_000_000_000, 0, (("h", b"1"),)),
        MessageAndMetadata("a", 0, 6, None, None, 1_700_000_000_001, 0, ()),
        MessageAndMetadata("bb", 3, 0, b"k2", b"", -1, -1, (("x", None), ("y", b"2"))),
        MessageAndMetadata("a", 1, 9, b"k3", b"v3", 1_700_000_000_002, 1, ()),
    ]
    for include_headers in (False, True):
        columns = ColumnBuilder(include_headers=include_headers)
        assert columns.add_messages(messages) == 4
        rb = columns.take_batch()
        assert rb.equals(records_to_arrow(messages, include_headers=include_headers))
        assert len(columns) == 0
        assert columns.take_batch().num_rows == 0
