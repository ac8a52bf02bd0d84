"""Every codec on every read path, and a codec missing at run time.

Without servers: a codec whose library is missing (``aiokafka.codec.has_lz4()`` false, as
without ``cramjam``) gives an :class:`~aiozkconsumer.UnsupportedCodecError` naming the codec,
the partition, the offsets and the package — not a ``CorruptRecordError`` — on every path,
after the records before the batch, and the stream goes on with its other partitions.

Against the session clusters (Kafka 3.9 and 4.3): a Java producer
(:class:`~aiozkconsumer.testing.java_producer.JavaProducer`) writes a topic per codec (and a
LogAppendTime one), mixed sizes 0 B-20 KiB, null keys and values, headers; every read path
(``async for``, ``batches()``, ``arrow_batches()``, ``SimpleConsumer``, the Spark executors,
the CLI), with the native decoder and with aiokafka's parser, delivers exactly the
``(partition, offset, key, value, headers, timestamp)`` set written.
"""

from __future__ import annotations

import json
import os
import struct
import uuid
from typing import Any

import aiokafka.codec
import pytest
from _read_paths import PATHS, read_path, without_native
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from aiozkconsumer import ConsumerConfig, CorruptRecordError, UnsupportedCodecError
from aiozkconsumer.fetcher import ConsumerFetcher, FetcherManager
from aiozkconsumer.kafka import native
from aiozkconsumer.metrics import ConsumerMetrics
from aiozkconsumer.records import PartitionTopicInfo, TopicPartition
from aiozkconsumer.simple_consumer import parse_records
from aiozkconsumer.stream import ChunkQueue, KafkaStream
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.java_producer import CODECS, JavaProducer, ProducedRecord

TS = 1_700_000_000_000
A = TopicPartition("zipped", 0)
B = TopicPartition("zipped", 1)


@pytest.fixture(params=["native", "aiokafka"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    with without_native(monkeypatch, request.param):
        yield request.param


def batch(base_offset: int, n: int, compression: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, compression, 0, -1, -1, -1, 1 << 20)
    for i in range(n):
        builder.append(i, TS + i, b"k", b"v%d" % (base_offset + i) * 20, [])
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", base_offset)
    return bytes(raw)


LZ4 = 3


@pytest.fixture
def no_lz4(monkeypatch: pytest.MonkeyPatch) -> bytes:
    """An lz4 batch at offsets 2..4, then lz4 is gone (as without cramjam)."""
    data = batch(2, 3, LZ4)
    monkeypatch.setattr(aiokafka.codec, "has_lz4", lambda: False)
    return data


def _check(e: UnsupportedCodecError, tp: TopicPartition) -> None:
    assert not isinstance(e, CorruptRecordError)
    assert (e.topic, e.partition, e.offset, e.last_offset) == (tp.topic, tp.partition, 2, 4)
    assert (e.codec, e.package) == ("lz4", "cramjam")
    text = str(e)
    for part in (f"[{tp.topic},{tp.partition}]", "offsets 2..4", "lz4", "pip install cramjam"):
        assert part in text
    assert "corrupt" not in text


async def test_a_missing_codec_stops_only_its_partition_after_the_records_before_it(
    decoder: str, no_lz4: bytes
) -> None:
    metrics = ConsumerMetrics("c")
    manager = FetcherManager(None, ConsumerConfig(group_id="g", zookeeper_connect="h:1"), metrics)  # type: ignore[arg-type]
    fetcher = ConsumerFetcher(manager, 0, 0)
    queue: ChunkQueue = ChunkQueue(maxsize=8)
    a = PartitionTopicInfo(A.topic, A.partition, queue, 0, 0, 1 << 20, "c")
    b = PartitionTopicInfo(B.topic, B.partition, queue, 0, 0, 1 << 20, "c")
    fetcher.add_partitions([a, b])
    await fetcher._enqueue(a, 0, bytearray(batch(0, 2) + no_lz4 + batch(5, 1)))
    assert a.fetched_offset == 2  # the next fetch starts at the lz4 batch
    await fetcher._enqueue(a, 2, bytearray(no_lz4 + batch(5, 1)))
    assert A not in fetcher.partitions and B in fetcher.partitions  # only A stops
    await fetcher._enqueue(b, 0, bytearray(batch(0, 2)))

    stream = KafkaStream(queue, -1, "c", "zipped-0")
    it = stream.__aiter__()
    assert [(await it.__anext__()).offset for _ in range(2)] == [0, 1]
    with pytest.raises(UnsupportedCodecError) as e:
        await it.__anext__()
    _check(e.value, A)
    assert a.consumed_offset == 2  # a commit keeps the batch ahead
    got = [await it.__anext__() for _ in range(2)]  # the stream goes on: B's records
    assert [(m.partition, m.offset) for m in got] == [(1, 0), (1, 1)]
    assert metrics.corrupt_batches_per_sec().count == 0  # not counted as corrupt


async def test_batches_hand_out_the_records_in_hand_then_raise(decoder: str, no_lz4: bytes) -> None:
    manager = FetcherManager(None, ConsumerConfig(group_id="g", zookeeper_connect="h:1"))  # type: ignore[arg-type]
    fetcher = ConsumerFetcher(manager, 0, 0)
    queue: ChunkQueue = ChunkQueue(maxsize=8)
    a = PartitionTopicInfo(A.topic, A.partition, queue, 0, 0, 1 << 20, "c")
    fetcher.add_partitions([a])
    await fetcher._enqueue(a, 0, bytearray(batch(0, 2) + no_lz4))
    await fetcher._enqueue(a, 2, bytearray(no_lz4))
    stream = KafkaStream(queue, -1, "c", "zipped-0")
    batches = stream.batches(max_records=10)
    assert [m.offset for m in await anext(batches)] == [0, 1]
    with pytest.raises(UnsupportedCodecError) as e:
        await anext(batches)
    _check(e.value, A)


async def test_arrow_batches_raise_the_codec_error(decoder: str, no_lz4: bytes) -> None:
    pytest.importorskip("pyarrow")
    manager = FetcherManager(None, ConsumerConfig(group_id="g", zookeeper_connect="h:1"))  # type: ignore[arg-type]
    fetcher = ConsumerFetcher(manager, 0, 0)
    queue: ChunkQueue = ChunkQueue(maxsize=8)
    a = PartitionTopicInfo(A.topic, A.partition, queue, 2, 2, 1 << 20, "c")
    fetcher.add_partitions([a])
    await fetcher._enqueue(a, 2, bytearray(no_lz4))
    stream = KafkaStream(queue, -1, "c", "zipped-0")
    with pytest.raises(UnsupportedCodecError) as e:
        await anext(stream.arrow_batches())
    _check(e.value, A)


def test_parse_records_raises_the_codec_error(decoder: str, no_lz4: bytes) -> None:
    records, next_offset = parse_records(A, 0, batch(0, 2) + no_lz4, 1 << 20)
    assert ([m.offset for m in records], next_offset) == ([0, 1], 2)
    with pytest.raises(UnsupportedCodecError) as e:
        parse_records(A, 2, no_lz4, 1 << 20)
    _check(e.value, A)


def test_record_columns_raise_the_codec_error(decoder: str, no_lz4: bytes) -> None:
    pytest.importorskip("pyarrow")
    from aiozkconsumer.spark.columns import RecordColumns

    with pytest.raises(UnsupportedCodecError) as e:
        RecordColumns(A).add_fetch(batch(0, 2) + no_lz4, 0, 100, 1 << 20)
    _check(e.value, A)


def test_a_codec_gone_after_the_fetch_is_still_named(no_lz4: bytes) -> None:
    # The native path decompresses when a batch is read; the codec may vanish in between.
    if not native.AVAILABLE:
        pytest.skip("the native decoder is not built")
    parsed = native.parse_record_set(no_lz4, A, True)
    assert parsed is not None
    (lz4_batch,) = parsed[0]
    with pytest.raises(native.MissingCodecError) as missing:
        native.decompressed(lz4_batch)
    error = native.malformed_error(A.topic, A.partition, lz4_batch, missing.value)
    assert isinstance(error, UnsupportedCodecError)
    _check(error, A)


def test_every_codec_is_available_after_a_plain_install() -> None:
    assert all(native.codec_available(c) for c in range(5))
    assert not native.codec_available(5)


# ---- against the clusters ---------------------------------------------------------------------

CODEC_RECORDS = 48
PARTITIONS = 2
_PRODUCED: dict[str, tuple[str, dict[str, list[ProducedRecord]]]] = {}
"""Per cluster flavour: the topics' prefix and what the Java producer wrote to each."""


async def codec_topics(cluster: LocalCluster) -> tuple[str, dict[str, list[ProducedRecord]]]:
    """A topic per codec and a LogAppendTime one, written once per session cluster."""
    if cluster.flavour in _PRODUCED:
        return _PRODUCED[cluster.flavour]
    prefix = f"codecs-{uuid.uuid4().hex[:10]}"
    topics = {f"{prefix}-{codec}": codec for codec in CODECS}
    topics[f"{prefix}-zstd-logappend"] = "zstd"
    for topic in topics:
        config = {"message.timestamp.type": "LogAppendTime"} if "logappend" in topic else None
        await cluster.create_topic(topic, PARTITIONS, config=config)
    written: dict[str, list[ProducedRecord]] = {}
    async with JavaProducer(cluster) as producer:
        for seed, (topic, codec) in enumerate(sorted(topics.items())):
            written[topic] = await producer.produce_codec(
                topic, codec, CODEC_RECORDS, partitions=PARTITIONS, seed=seed
            )
    _PRODUCED[cluster.flavour] = (prefix, written)
    return prefix, written


def report_counts(row: dict[str, Any]) -> None:
    """Append a row of the codec x path x isolation table (``AIOZKCONSUMER_COUNTS`` file)."""
    path = os.environ.get("AIOZKCONSUMER_COUNTS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


@pytest.mark.integration
@pytest.mark.parametrize("path", PATHS)
async def test_every_path_reads_every_codec_exactly(
    any_cluster: LocalCluster, decoder: str, path: str, unique_group_id: str
) -> None:
    prefix, written = await codec_topics(any_cluster)
    ends = {
        TopicPartition(topic, p): end
        for topic in written
        for p, end in (await any_cluster.log_end_offsets(topic)).items()
    }
    delivered = await read_path(
        path,
        any_cluster,
        unique_group_id,
        f"{prefix}-.*",
        ends,
        isolation="read_uncommitted",
        decoder=decoder,
        cli_group=True,
    )
    for topic, records in sorted(written.items()):
        expected = sorted(r.identity for r in records)
        got = sorted(identity for t, identity in delivered if t == topic)
        report_counts(
            {
                "test": "codecs",
                "flavour": any_cluster.flavour,
                "codec": topic[len(prefix) + 1 :],
                "path": path,
                "decoder": decoder,
                "isolation": "read_uncommitted",
                "produced": len(expected),
                "delivered": len(got),
            }
        )
        assert got == expected, topic
    assert len(delivered) == sum(len(r) for r in written.values())  # nothing else, no twice
