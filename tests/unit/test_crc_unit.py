"""CRC checks (``check.crcs``) on record batches built with aiokafka's builders (no servers).

The check itself (``kafka/crc.py``), then each path that uses it: ``parse_records``
(SimpleConsumer), the fetcher's hand-over to a stream's queue with ``crc.error.action`` raise
and skip, the stream's iterator, and the Spark executors' ``RecordColumns``.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c

from aiozkconsumer import ConsumerConfig, CorruptRecordError
from aiozkconsumer.errors import ConsumerError, InvalidConfigError
from aiozkconsumer.fetcher import ConsumerFetcher, FetcherManager
from aiozkconsumer.kafka.crc import SkippedBatch, check_record_set, corrupt_batches
from aiozkconsumer.metrics import ConsumerMetrics
from aiozkconsumer.records import FetchedDataChunk, PartitionTopicInfo, TopicPartition
from aiozkconsumer.simple_consumer import parse_records
from aiozkconsumer.stream import ChunkQueue, KafkaStream

TP = TopicPartition("payments", 3)
TS = 1_700_000_000_000
MARK = b"flip-me"


def v2_batch(base_offset: int, n: int, *, marked: int | None = None) -> bytes:
    """One magic-2 batch with offsets base_offset .. base_offset + n - 1.

    Values are ``v<offset>``, except the record at offset ``marked``, whose value starts with
    :data:`MARK` (for :func:`flip`).
    """
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(n):
        offset = base_offset + i
        value = MARK + b"-%d" % offset if offset == marked else b"v%d" % offset
        builder.append(i, TS + i, b"k%d" % offset, value, [])
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", base_offset)  # the broker assigns the base offset
    return bytes(raw)


def legacy_message(offset: int, value: bytes, magic: int = 1) -> bytes:
    """One uncompressed legacy message (a message set of one) at ``offset``."""
    builder = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
    builder.append(0, TS if magic else None, b"k", value)
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", offset)
    return bytes(raw)


def flip(data: bytes) -> bytes:
    """``data`` with one bit flipped in the first byte of the marked value."""
    at = data.index(MARK)
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


# ---- the check ---------------------------------------------------------------------------


def test_an_intact_record_set_passes() -> None:
    data = v2_batch(0, 3) + v2_batch(3, 2) + legacy_message(5, b"x") + legacy_message(6, b"y", 0)
    assert corrupt_batches(data, TP) == {}
    check_record_set(data, TP)


def test_a_flipped_value_byte_names_partition_offsets_and_both_crcs() -> None:
    good = v2_batch(0, 3)
    bad = flip(v2_batch(3, 4, marked=5))
    data = good + bad + v2_batch(7, 1)
    found = corrupt_batches(data, TP)
    assert list(found) == [7]  # keyed by the batch's next offset
    with pytest.raises(CorruptRecordError) as raised:
        check_record_set(data, TP)
    e = raised.value
    assert str(e) == str(found[7])
    assert (e.topic, e.partition, e.offset, e.last_offset) == ("payments", 3, 3, 6)
    (stored,) = struct.unpack_from(">I", bad, 17)
    assert e.expected_crc == stored
    assert e.actual_crc == calc_crc32c(bad[21:]) != stored
    assert str(e) == (
        f"corrupt record batch in partition [payments,3] at offsets 3..6: CRC mismatch: "
        f"stored {stored:#010x}, computed {e.actual_crc:#010x}"
    )
    assert isinstance(e, ConsumerError)


def test_the_check_agrees_with_aiokafkas_validate_crc() -> None:
    data = flip(v2_batch(0, 2, marked=1)) + v2_batch(2, 2) + flip(v2_batch(4, 3, marked=4))
    records = MemoryRecords(data)
    invalid = []
    while records.has_next():
        batch = records.next_batch()
        assert batch is not None
        if not batch.validate_crc():
            invalid.append(batch.next_offset)
    assert sorted(corrupt_batches(data, TP)) == invalid == [2, 7]


@pytest.mark.parametrize("magic", [0, 1])
def test_a_legacy_message_is_checked_with_crc32(magic: int) -> None:
    good = legacy_message(7, b"fine", magic)
    bad = flip(legacy_message(8, MARK, magic))
    [(next_offset, e)] = corrupt_batches(good + bad, TP).items()
    assert next_offset == 9
    assert (e.offset, e.last_offset) == (8, 8)
    assert e.expected_crc == struct.unpack_from(">I", bad, 12)[0]
    assert e.actual_crc == zlib.crc32(bad[16:])


def test_a_trailing_partial_batch_is_not_checked() -> None:
    data = v2_batch(0, 2) + flip(v2_batch(2, 3, marked=2))[:-3]
    assert corrupt_batches(data, TP) == {}


# ---- configuration -------------------------------------------------------------------------


def test_config_keys_defaults_and_validation() -> None:
    config = ConsumerConfig(group_id="g", zookeeper_connect="h:1")
    assert config.check_crcs is True
    assert config.crc_error_action == "raise"
    props = {"group.id": "g", "zookeeper.connect": "h:1"}
    read = ConsumerConfig.from_properties(
        {**props, "check.crcs": "false", "crc.error.action": "skip"}
    )
    assert (read.check_crcs, read.crc_error_action) == (False, "skip")
    assert ConsumerConfig.from_properties(read.to_properties()) == read
    with pytest.raises(InvalidConfigError, match="crc.error.action: must be one of raise, skip"):
        ConsumerConfig(group_id="g", zookeeper_connect="h:1", crc_error_action="ignore")


# ---- SimpleConsumer's parse_records --------------------------------------------------------


def test_parse_raises_for_a_corrupt_first_batch_and_returns_nothing_of_it() -> None:
    data = flip(v2_batch(10, 3, marked=11)) + v2_batch(13, 2)
    with pytest.raises(CorruptRecordError, match=r"\[payments,3\] at offsets 10..12") as e:
        parse_records(TP, 10, data, 1 << 20)
    assert e.value.offset == 10


def test_parse_returns_the_batches_before_a_corrupt_one_then_raises_at_it() -> None:
    data = v2_batch(0, 3) + flip(v2_batch(3, 3, marked=4)) + v2_batch(6, 2)
    records, next_offset = parse_records(TP, 1, data, 1 << 20)
    assert [r.offset for r in records] == [1, 2]
    assert next_offset == 3  # where the corrupt batch starts: the next fetch begins there
    with pytest.raises(CorruptRecordError) as e:
        parse_records(TP, next_offset, data[len(v2_batch(0, 3)) :], 1 << 20)
    assert (e.value.offset, e.value.last_offset) == (3, 5)


def test_parse_without_check_crcs_delivers_the_flipped_value() -> None:
    data = v2_batch(0, 2) + flip(v2_batch(2, 3, marked=3))
    records, next_offset = parse_records(TP, 0, data, 1 << 20, check_crcs=False)
    assert [r.offset for r in records] == [0, 1, 2, 3, 4]
    assert records[3].value == bytes([MARK[0] ^ 0x01]) + MARK[1:] + b"-3"
    assert next_offset == 5


# ---- the fetcher's hand-over and the stream ------------------------------------------------


def _fetcher(
    config: ConsumerConfig, metrics: ConsumerMetrics | None = None
) -> tuple[ConsumerFetcher, PartitionTopicInfo, ChunkQueue]:
    manager = FetcherManager(None, config, metrics)  # type: ignore[arg-type]  # no fetches here
    fetcher = ConsumerFetcher(manager, 0, 0)
    queue: ChunkQueue = ChunkQueue(maxsize=4)
    info = PartitionTopicInfo(TP.topic, TP.partition, queue, 0, 0, 1 << 20, "c")
    fetcher.add_partitions([info])
    return fetcher, info, queue


def _config(**changes: Any) -> ConsumerConfig:
    return ConsumerConfig(group_id="g", zookeeper_connect="h:1", **changes)


async def _offsets(stream: KafkaStream, n: int) -> list[int]:
    it = stream.__aiter__()
    return [(await it.__anext__()).offset for _ in range(n)]


async def test_fetcher_hands_over_the_batches_before_a_corrupt_one_then_an_error_chunk() -> None:
    metrics = ConsumerMetrics("c")
    fetcher, info, queue = _fetcher(_config(), metrics)
    good = v2_batch(0, 3)
    corrupt = flip(v2_batch(3, 2, marked=3))
    await fetcher._enqueue(info, 0, good + corrupt + v2_batch(5, 2))
    assert info.fetched_offset == 3  # the next fetch starts at the corrupt batch
    assert metrics.corrupt_batches_per_sec().count == 0  # not met yet: the next fetch meets it
    await fetcher._enqueue(info, 3, corrupt + v2_batch(5, 2))
    assert info.fetched_offset == 3
    assert TP not in fetcher.partitions  # not fetched further
    assert metrics.corrupt_batches_per_sec(TP.topic).count == 1
    assert metrics.corrupt_batches_per_sec().count == 1

    stream = KafkaStream(queue, -1, "c", "payments-0")
    assert await _offsets(stream, 3) == [0, 1, 2]
    with pytest.raises(CorruptRecordError, match=r"\[payments,3\] at offsets 3..4") as e:
        await stream.__aiter__().__anext__()
    assert (e.value.topic, e.value.partition, e.value.offset) == ("payments", 3, 3)
    assert info.consumed_offset == 3  # a commit keeps the corrupt batch ahead


async def test_batches_hands_out_the_records_in_hand_then_raises() -> None:
    fetcher, info, queue = _fetcher(_config())
    corrupt = flip(v2_batch(2, 2, marked=2))
    await fetcher._enqueue(info, 0, v2_batch(0, 2) + corrupt)
    await fetcher._enqueue(info, 2, corrupt)
    stream = KafkaStream(queue, -1, "c", "payments-0")
    batches = stream.batches(max_records=10)
    assert [m.offset for m in await anext(batches)] == [0, 1]
    with pytest.raises(CorruptRecordError):
        await anext(batches)
    assert info.consumed_offset == 2


async def test_fetcher_skips_a_corrupt_batch_with_skip_and_marks_the_meter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = ConsumerMetrics("c")
    fetcher, info, queue = _fetcher(_config(crc_error_action="skip"), metrics)
    data = v2_batch(0, 2) + flip(v2_batch(2, 3, marked=3)) + v2_batch(5, 2)
    await fetcher._enqueue(info, 0, data)
    assert info.fetched_offset == 7
    chunk = queue.get_nowait()
    assert isinstance(chunk, FetchedDataChunk)
    assert [type(b) for b in chunk.batches][1] is SkippedBatch
    assert metrics.corrupt_batches_per_sec(TP.topic).count == 1
    assert "[payments,3] at offsets 2..4" in caplog.text and "skipped" in caplog.text

    queue.put_nowait(chunk)
    stream = KafkaStream(queue, -1, "c", "payments-0")
    assert await _offsets(stream, 4) == [0, 1, 5, 6]


async def test_a_skipped_last_batch_still_counts_as_consumed() -> None:
    fetcher, info, queue = _fetcher(_config(crc_error_action="skip"))
    await fetcher._enqueue(info, 0, v2_batch(0, 2) + flip(v2_batch(2, 3, marked=2)))
    await fetcher._enqueue(info, 5, v2_batch(5, 1))
    stream = KafkaStream(queue, -1, "c", "payments-0")
    assert await _offsets(stream, 2) == [0, 1]
    # async for read the chunk ahead: with record 1 handed out, the skipped batch's offsets
    # 2..4 (nothing to hand out) count as consumed too.
    assert info.consumed_offset == 5
    assert await _offsets(stream, 1) == [5]
    assert info.consumed_offset == 6


async def test_a_fetch_of_only_a_corrupt_batch_is_skipped_with_skip() -> None:
    fetcher, info, queue = _fetcher(_config(crc_error_action="skip"))
    await fetcher._enqueue(info, 0, flip(v2_batch(0, 3, marked=0)))
    assert info.fetched_offset == 3
    chunk = queue.get_nowait()
    assert isinstance(chunk, FetchedDataChunk)
    assert list(chunk.batches) == [SkippedBatch(0, 3)]
    queue.put_nowait(chunk)
    await fetcher._enqueue(info, 3, v2_batch(3, 1))
    stream = KafkaStream(queue, -1, "c", "payments-0")
    assert await _offsets(stream, 1) == [3]


async def test_fetcher_without_check_crcs_hands_out_the_flipped_value() -> None:
    fetcher, info, queue = _fetcher(_config(check_crcs=False))
    await fetcher._enqueue(info, 0, flip(v2_batch(0, 2, marked=1)))
    stream = KafkaStream(queue, -1, "c", "payments-0")
    it = stream.__aiter__()
    await it.__anext__()
    assert (await it.__anext__()).value == bytes([MARK[0] ^ 0x01]) + MARK[1:] + b"-1"


# ---- Spark's RecordColumns -----------------------------------------------------------------


def test_record_columns_raise_for_a_corrupt_batch() -> None:
    pytest.importorskip("pyarrow")
    from aiozkconsumer.spark.columns import RecordColumns

    data = v2_batch(0, 2) + flip(v2_batch(2, 2, marked=3))
    with pytest.raises(CorruptRecordError, match=r"\[payments,3\] at offsets 2..3"):
        RecordColumns(TP).add_fetch(data, 0, 100, 1 << 20)
