"""SimpleConsumer: record parsing without servers, then against a real Kafka 3.9 (LocalCluster)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Sequence

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from aiozkconsumer.errors import (
    BrokerNotAvailableError,
    ConsumerClosedError,
    ConsumerError,
    CorruptRecordError,
    KafkaConnectionError,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
    UnknownTopicError,
)
from aiozkconsumer.metrics import ConsumerMetrics
from aiozkconsumer.records import MessageAndMetadata, TopicPartition
from aiozkconsumer.simple_consumer import FetchResult, SimpleConsumer, parse_records
from aiozkconsumer.testing import LocalCluster

integration = pytest.mark.integration

TP = TopicPartition("t", 0)
TS = 1_700_000_000_000


# ---- parsing (no servers) ---------------------------------------------------------------


def _batch(base_offset: int, n: int, *, control: bool = False) -> bytes:
    """One magic-2 batch with offsets base_offset .. base_offset + n - 1."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(n):
        builder.append(i, TS + i, b"k%d" % (base_offset + i), b"v%d" % (base_offset + i), [])
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", base_offset)  # the broker assigns the base offset
    if control:
        raw[22] |= 0x20  # attributes (int16 at byte 21), bit 5: control batch
        struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))  # the CRC covers them
    return bytes(raw)


def test_parse_skips_records_below_the_fetch_offset() -> None:
    records, next_offset = parse_records(TP, 12, _batch(10, 5) + _batch(15, 2), 1 << 20)
    assert [r.offset for r in records] == [12, 13, 14, 15, 16]
    assert next_offset == 17
    first = records[0]
    assert first == MessageAndMetadata("t", 0, 12, b"k12", b"v12", TS + 2, 0, ())


def test_parse_steps_over_control_batches() -> None:
    data = _batch(0, 2) + _batch(2, 1, control=True) + _batch(3, 2)
    records, next_offset = parse_records(TP, 0, data, 1 << 20)
    assert [r.offset for r in records] == [0, 1, 3, 4]
    assert next_offset == 5
    records, next_offset = parse_records(TP, 2, _batch(2, 1, control=True), 1 << 20)
    assert (records, next_offset) == ([], 3)


def test_parse_ignores_a_trailing_partial_batch() -> None:
    data = _batch(0, 3) + _batch(3, 3)[:-5]
    records, next_offset = parse_records(TP, 0, data, 100)
    assert [r.offset for r in records] == [0, 1, 2]
    assert next_offset == 3


def test_parse_of_a_corrupt_batch_is_a_corrupt_record_error() -> None:
    data = bytearray(_batch(10, 2))
    data[-1] ^= 0xFF  # the last record's headers count: the record no longer parses
    with pytest.raises(CorruptRecordError, match=r"corrupt record batch in partition \[t,0\]") as e:
        parse_records(TP, 10, _batch(8, 2) + bytes(data), 1 << 20)
    assert not isinstance(e.value.__cause__, ConsumerError)  # aiokafka's, translated


def test_parse_of_empty_data_stays_at_the_fetch_offset() -> None:
    assert parse_records(TP, 7, b"", 100) == ([], 7)


def test_parse_without_a_complete_batch_is_message_size_too_large() -> None:
    with pytest.raises(
        MessageSizeTooLargeError, match=r"\(100 bytes\) on partition \[t,0\] at offset 4"
    ):
        parse_records(TP, 4, _batch(4, 3)[:30], 100)


# ---- lifecycle and arguments (no servers) -----------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_unreachable_bootstrap_server_fails_quickly_and_clearly() -> None:
    port = _closed_port()
    consumer = SimpleConsumer(f"127.0.0.1:{port}", socket_timeout_ms=2000)
    started = time.monotonic()
    with pytest.raises(KafkaConnectionError, match=f"127.0.0.1:{port}"):
        await consumer.start()
    assert time.monotonic() - started < 5
    with pytest.raises(ConsumerClosedError, match="not started"):
        await consumer.latest_offset(TP)
    await consumer.close()


async def test_calls_before_start_and_after_close_raise_consumer_closed() -> None:
    consumer = SimpleConsumer("127.0.0.1:1")
    with pytest.raises(ConsumerClosedError, match="not started"):
        await consumer.fetch(TP, 0)
    await consumer.close()
    await consumer.close()  # idempotent
    with pytest.raises(ConsumerClosedError, match="closed"):
        await consumer.partitions_for("t")
    with pytest.raises(ConsumerClosedError):
        await consumer.start()


def test_invalid_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="socket_timeout_ms"):
        SimpleConsumer("h:1", socket_timeout_ms=100, fetch_max_wait_ms=100)
    with pytest.raises(ValueError, match="max_retries"):
        SimpleConsumer("h:1", max_retries=-1)


# ---- against Kafka ----------------------------------------------------------------------


async def _produce_each(
    cluster: LocalCluster,
    topic: str,
    records: Sequence[tuple[bytes | None, bytes, int]],
    partition: int = 0,
) -> None:
    """Produce ``(key, value, timestamp ms)`` records one by one: one batch each."""
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    await producer.start()
    try:
        for key, value, ts in records:
            await producer.send_and_wait(
                topic,
                value,
                key=key,
                partition=partition,
                timestamp_ms=ts,
                headers=[("n", value)],
            )
    finally:
        await producer.stop()


@integration
async def test_partitions_leader_and_earliest_latest_offsets(
    any_cluster: LocalCluster, unique_topic: str
) -> None:
    cluster = any_cluster
    await cluster.create_topic(unique_topic, 2)
    await cluster.produce_to_partitions(
        unique_topic,
        {0: [(None, b"a%d" % i) for i in range(5)], 1: [(b"k", b"b%d" % i) for i in range(3)]},
    )
    async with SimpleConsumer(cluster.bootstrap_servers) as consumer:
        assert await consumer.partitions_for(unique_topic) == [0, 1]
        p0, p1 = TopicPartition(unique_topic, 0), TopicPartition(unique_topic, 1)
        assert await consumer.leader_for(p0) in cluster.broker_ids
        assert await consumer.earliest_offset(p0) == 0
        assert await consumer.latest_offset(p0) == 5
        assert await consumer.earliest_offset(p1) == 0
        assert await consumer.latest_offset(p1) == 3
        assert await consumer.latest_offset(p1) == (await cluster.log_end_offsets(unique_topic))[1]


@integration
async def test_fetch_from_an_offset_returns_the_records(
    any_cluster: LocalCluster, unique_topic: str
) -> None:
    cluster = any_cluster
    await cluster.create_topic(unique_topic, 1)
    now = int(time.time() * 1000)
    sent = [(b"key%d" % i if i % 2 else None, b"value%d" % i, now - 10_000 + i) for i in range(6)]
    await _produce_each(cluster, unique_topic, sent)
    tp = TopicPartition(unique_topic, 0)
    async with SimpleConsumer(cluster.bootstrap_servers) as consumer:
        result = await consumer.fetch(tp, 2)
        assert isinstance(result, FetchResult)
        assert result.high_watermark == 6
        assert result.next_offset == 6
        assert result.records == [
            MessageAndMetadata(unique_topic, 0, i, key, value, ts, 0, (("n", value),))
            for i, (key, value, ts) in enumerate(sent)
            if i >= 2
        ]
        # At the log end: the broker holds the fetch up to fetch_max_wait_ms, then no records.
        at_end = await consumer.fetch(tp, 6)
        assert at_end == FetchResult([], 6, 6, 6)  # no transaction: the LSO is the HW


@integration
async def test_fetch_range_spans_many_fetches_and_yields_exactly_the_range(
    any_cluster: LocalCluster, unique_topic: str
) -> None:
    cluster = any_cluster
    await cluster.create_topic(unique_topic, 1)
    for b in range(8):  # 8 batches of 5 records: offsets 0..39
        await cluster.produce(unique_topic, [(None, b"r%d" % (b * 5 + i)) for i in range(5)])
    tp = TopicPartition(unique_topic, 0)
    metrics = ConsumerMetrics("simple-test")
    async with SimpleConsumer(cluster.bootstrap_servers, metrics=metrics) as consumer:
        # max_bytes=1: each fetch returns just its first batch (KIP-74 still returns one).
        got = [m async for m in consumer.fetch_range(tp, 3, 37, max_bytes=1)]
        assert [m.offset for m in got] == list(range(3, 37))
        assert [m.value for m in got] == [b"r%d" % i for i in range(3, 37)]
        fetches = metrics.fetch_request_rate_and_time().count
        assert fetches == 8  # at 3, 5, 10, ..., 35
        assert [m async for m in consumer.fetch_range(tp, 10, 10)] == []
        whole = [m.offset async for m in consumer.fetch_range(tp, 0, 40)]
        assert whole == list(range(40))
    broker = cluster.bootstrap_servers.split(",")[0]
    snapshot = metrics.snapshot()
    per_broker = (
        "kafka.consumer:type=FetchRequestAndResponseMetrics,name=FetchRequestRateAndTimeMs,"
        f"clientId=simple-test,brokerHost={broker.rsplit(':', 1)[0]},"
        f"brokerPort={broker.rsplit(':', 1)[1]}"
    )
    assert snapshot[per_broker]["Count"] == metrics.fetch_request_rate_and_time().count
    assert metrics.fetch_response_size().sum > 0


@integration
async def test_offsets_before_a_timestamp(any_cluster: LocalCluster, unique_topic: str) -> None:
    cluster = any_cluster
    await cluster.create_topic(unique_topic, 1)
    base = int(time.time() * 1000) - 60_000
    await _produce_each(
        cluster, unique_topic, [(None, b"v%d" % i, base + i * 1000) for i in range(5)]
    )
    tp = TopicPartition(unique_topic, 0)
    async with SimpleConsumer(cluster.bootstrap_servers) as consumer:
        assert await consumer.offsets_before(tp, 0) == 0
        assert await consumer.offsets_before(tp, base) == 0
        assert await consumer.offsets_before(tp, base + 1) == 1
        assert await consumer.offsets_before(tp, base + 3000) == 3
        assert await consumer.offsets_before(tp, base + 3500) == 4
        assert await consumer.offsets_before(tp, base + 4000) == 4
        assert await consumer.offsets_before(tp, base + 4001) is None
        with pytest.raises(ValueError, match="negative"):
            await consumer.offsets_before(tp, -1)


@integration
async def test_out_of_range_offsets_raise_naming_the_valid_range(
    any_cluster: LocalCluster, unique_topic: str
) -> None:
    cluster = any_cluster
    await cluster.create_topic(unique_topic, 1)
    await cluster.produce(unique_topic, [(None, b"x%d" % i) for i in range(10)])
    tp = TopicPartition(unique_topic, 0)
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    await admin.start()
    try:  # move the log start offset to 4
        await admin.delete_records({KafkaTopicPartition(unique_topic, 0): RecordsToDelete(4)})
    finally:
        await admin.close()
    async with SimpleConsumer(cluster.bootstrap_servers) as consumer:
        assert await consumer.earliest_offset(tp) == 4
        with pytest.raises(OffsetOutOfRangeError) as beyond:
            await consumer.fetch(tp, 11)
        assert (beyond.value.offset, beyond.value.earliest, beyond.value.latest) == (11, 4, 10)
        assert f"[{unique_topic},0]" in str(beyond.value)
        assert "4..10" in str(beyond.value)
        with pytest.raises(OffsetOutOfRangeError, match="offset 2 .* 4..10"):
            await consumer.fetch(tp, 2)
        with pytest.raises(OffsetOutOfRangeError):
            _ = [m async for m in consumer.fetch_range(tp, 0, 10)]
        assert [m.offset async for m in consumer.fetch_range(tp, 4, 10)] == list(range(4, 10))


@integration
async def test_unknown_topic_and_partition(any_cluster: LocalCluster, unique_topic: str) -> None:
    cluster = any_cluster
    async with SimpleConsumer(cluster.bootstrap_servers) as consumer:
        with pytest.raises(UnknownTopicError) as e:
            await consumer.partitions_for(unique_topic)
        assert e.value.topic == unique_topic
        with pytest.raises(UnknownTopicError):
            await consumer.fetch(TopicPartition(unique_topic, 0), 0)
        with pytest.raises(UnknownTopicError):
            await consumer.latest_offset(TopicPartition(unique_topic, 0))
        # Created after the consumer first asked: metadata is refreshed, not cached as unknown.
        await cluster.create_topic(unique_topic, 1)
        assert await consumer.partitions_for(unique_topic) == [0]
        with pytest.raises(UnknownTopicError, match="no partition 3"):
            await consumer.earliest_offset(TopicPartition(unique_topic, 3))


@integration
async def test_an_unresponsive_leader_raises_broker_not_available_after_bounded_retries(
    zk_kafka_cluster: LocalCluster, unique_topic: str
) -> None:
    cluster = zk_kafka_cluster
    await cluster.create_topic(unique_topic, 1)
    await cluster.produce(unique_topic, [(None, b"x")])
    tp = TopicPartition(unique_topic, 0)
    async with SimpleConsumer(
        cluster.bootstrap_servers,
        socket_timeout_ms=500,
        max_retries=1,
        retry_backoff_ms=50,
    ) as consumer:
        leader = await consumer.leader_for(tp)
        cluster.pause_broker(leader)  # keep it well below the broker's ZK session timeout
        try:
            started = time.monotonic()
            with pytest.raises(BrokerNotAvailableError, match="after 2 attempts"):
                await consumer.fetch(tp, 0)
            # bounded: 2 attempts of 0.5 s each, not the 30 s default socket timeout (with
            # room for a loaded machine)
            assert time.monotonic() - started < 20
        finally:
            cluster.resume_broker(leader)
        # the connection is re-established on a retry; a thawed broker may need a while
        # on a loaded machine before it answers again, so the budget here is generous
        consumer.max_retries = 8  # backoffs 0.1 s doubling: up to ~25 s in all
        consumer.retry_backoff_ms = 100
        result = await consumer.fetch(tp, 0)
        assert [m.value for m in result.records] == [b"x"]
