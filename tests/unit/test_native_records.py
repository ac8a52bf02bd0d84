"""The native record decoder (``kafka/_native.c``) against aiokafka's parser (no servers).

Record batches are built with aiokafka's builders — uncompressed and gzip, null keys,
tombstones, headers (with null values), LogAppendTime, control batches — and decoded both
ways: the tuples of ``take_messages_from``, the Arrow batches of
``ColumnBuilder.add_native_batches`` and
the CRC-32C must equal what aiokafka's parser and ``calc_crc32c`` give. Malformed input
(random byte flips, truncation) must raise ``ValueError``, never crash or read out of bounds.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from aiozkconsumer.columns import ColumnBuilder
from aiozkconsumer.kafka import native
from aiozkconsumer.records import MessageAndMetadata, TopicPartition

TS = 1_700_000_000_000
TP = TopicPartition("t", 2)
NO_DEADLINE = float("inf")

Spec = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def test_the_native_decoder_is_built() -> None:
    # The package's set-up builds it on every supported machine; a silent fallback would
    # leave the fast path untested.
    from aiozkconsumer.kafka import _native  # type: ignore[attr-defined]

    assert _native.Batch is not None


def raw_batch(
    base_offset: int,
    records: Sequence[Spec],
    *,
    compression: int = 0,
    log_append_time: bool = False,
    control: bool = False,
    deltas: Sequence[int] | None = None,
) -> bytes:
    builder = DefaultRecordBatchBuilder(2, compression, 0, -1, -1, -1, 1 << 22)
    for i, (key, value, headers) in enumerate(records):
        delta = deltas[i] if deltas is not None else i
        assert builder.append(delta, TS + 7 * i, key, value, headers) is not None
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", base_offset)
    attrs = struct.unpack_from(">h", raw, 21)[0]
    if log_append_time:
        attrs |= 0x08
        struct.pack_into(">q", raw, 35, TS + 999)  # the broker's append time
    if control:
        attrs |= 0x30
    struct.pack_into(">h", raw, 21, attrs)
    struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))
    return bytes(raw)


def specs(n: int, seed: int = 0, size: int = 20) -> list[Spec]:
    rng = random.Random(seed)
    out: list[Spec] = []
    for i in range(n):
        key = None if i % 3 == 0 else rng.randbytes(rng.randrange(0, 8))
        value = None if i % 5 == 1 else rng.randbytes(rng.randrange(0, size))
        headers: list[tuple[str, bytes | None]] = []
        if i % 4 == 2:
            headers = [("h", b"%d" % i), ("é", None), ("", b"")]
        out.append((key, value, headers))
    return out


def aiokafka_messages(data: bytes, min_offset: int = 0) -> list[MessageAndMetadata]:
    records = MemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        if batch.is_control_batch:
            continue
        for r in batch:
            if r.offset < min_offset:
                continue
            out.append(
                MessageAndMetadata(
                    TP.topic,
                    TP.partition,
                    r.offset,
                    r.key,
                    r.value,
                    r.timestamp,
                    r.timestamp_type,
                    tuple(r.headers) if r.headers else (),
                )
            )
    return out


def native_messages(data: Any, min_offset: int = 0, limit: int = 7) -> list[MessageAndMetadata]:
    parsed = native.parse_record_set(data, TP, True)
    assert parsed is not None
    batches, corrupt = parsed
    assert corrupt == {}
    out: list[MessageAndMetadata] = []
    for batch in batches:
        if batch.is_control_batch:
            continue
        batch = native.decompressed(batch)
        while True:  # in pieces of `limit`, resuming at the cursor
            before = len(out)
            got, _, status, _ = native.native.take_messages_from(
                [batch],
                0,
                out,
                MessageAndMetadata,
                TP.topic,
                TP.partition,
                min_offset,
                limit,
                NO_DEADLINE,
            )
            assert got == len(out) - before <= limit
            if got:
                assert batch.last_offset == out[-1].offset
            if status == native.STATUS_DONE:
                break
            assert status == native.STATUS_FULL
    return out


@pytest.mark.parametrize("compression", [0, 1])
@pytest.mark.parametrize("log_append_time", [False, True])
@pytest.mark.parametrize("min_offset", [0, 103, 141])
def test_messages_equal_aiokafkas(compression: int, log_append_time: bool, min_offset: int) -> None:
    data = (
        raw_batch(100, specs(10, 1), compression=compression, log_append_time=log_append_time)
        + raw_batch(110, [(None, b"\x00\x00\x00\x00", [])], control=True)
        + raw_batch(111, specs(25, 2, size=3000), compression=compression)
        + raw_batch(140, specs(3, 3), deltas=[0, 4, 9])  # compacted: gaps in the offsets
    )
    expected = aiokafka_messages(data, min_offset)
    got = native_messages(data, min_offset)
    assert got == expected
    assert all(type(m) is MessageAndMetadata for m in got)
    offsets = [*range(100, 110), *range(111, 136), 140, 144, 149]  # no control, with gaps
    assert [m.offset for m in got] == [o for o in offsets if o >= min_offset]
    # A bytearray (the fetch connection's receive buffer) reads the same, without a copy.
    assert native_messages(bytearray(data), min_offset) == expected


def test_a_trailing_partial_batch_is_left_out_and_legacy_sets_go_to_aiokafka() -> None:
    whole = raw_batch(0, specs(4)) + raw_batch(4, specs(4))
    batches, end, legacy_at, bad = native.native.parse_record_set(whole[:-5], True)
    assert [b.base_offset for b in batches] == [0]
    assert end == len(raw_batch(0, specs(4)))
    assert (legacy_at, bad) == (-1, [])
    legacy = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    legacy.append(0, TS, b"k", b"v")
    mixed = raw_batch(0, specs(2)) + bytes(legacy.build())
    assert native.native.parse_record_set(mixed, True)[2] == len(raw_batch(0, specs(2)))
    assert native.parse_record_set(mixed, TP, True) is None  # aiokafka's parser takes it


def test_a_flipped_byte_is_reported_with_both_crcs_and_not_without_check() -> None:
    good = raw_batch(0, specs(3))
    second = raw_batch(3, [(b"k", b"flip-me", [])])
    data = bytearray(good + second + raw_batch(4, specs(2)))
    at = data.index(b"flip-me")
    data[at] ^= 0x01
    parsed = native.parse_record_set(bytes(data), TP, True)
    assert parsed is not None
    batches, corrupt = parsed
    assert len(batches) == 3
    assert list(corrupt) == [4]  # keyed by the corrupt batch's next offset
    error = corrupt[4]
    assert (error.topic, error.partition, error.offset, error.last_offset) == ("t", 2, 3, 3)
    assert error.expected_crc != error.actual_crc
    assert error.expected_crc == struct.unpack_from(">I", second, 17)[0]
    assert error.actual_crc == calc_crc32c(bytes(data[len(good) + 21 : len(good) + len(second)]))
    unchecked = native.parse_record_set(bytes(data), TP, False)
    assert unchecked is not None and unchecked[1] == {}


@given(st.binary(max_size=5000), st.integers(0, 7))
@settings(max_examples=200, deadline=None)
def test_crc32c_equals_aiokafkas(data: bytes, skip: int) -> None:
    view = memoryview(data)[skip:]  # unaligned starts
    assert native.native.crc32c(view) == calc_crc32c(bytes(view))


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_malformed_records_raise_value_error_never_crash(data: st.DataObject) -> None:
    raw = bytearray(raw_batch(0, specs(6, 4, size=40)))
    flips = data.draw(st.lists(st.integers(61, len(raw) - 1), min_size=1, max_size=4))
    for at in flips:
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(61, len(raw)))
    # Keep the header's length honest so the batch is parsed, not left as partial.
    struct.pack_into(">i", raw, 8, cut - 12)
    batches, _, _, _ = native.native.parse_record_set(bytes(raw[:cut]), False)
    assert len(batches) == 1
    out: list[Any] = []
    columns = native.NativeColumns(True)
    try:
        native.native.take_messages_from(
            batches, 0, out, MessageAndMetadata, "t", 0, 0, 100, NO_DEADLINE
        )
    except UnicodeDecodeError:
        pass  # a header key that is not UTF-8 (aiokafka raises the same)
    except ValueError as e:
        assert "malformed record batch" in str(e)
    again = native.native.parse_record_set(bytes(raw[:cut]), False)[0][0]
    try:
        native.native.take_columns_from([again], 0, columns, 0, 100)
    except UnicodeDecodeError:
        pass
    except ValueError as e:
        assert "malformed record batch" in str(e)
    else:
        rows = columns.take()
        assert rows[0] == len(out) or out == []


def test_a_deadline_in_the_past_stops_before_the_next_record() -> None:
    (batch,), _ = native.parse_record_set(raw_batch(0, specs(5)), TP, True) or ((), {})
    out: list[Any] = []
    take = native.native.take_messages_from
    got, _, status, _ = take([batch], 0, out, MessageAndMetadata, "t", 2, 0, 100, 0.0)
    assert (got, status, out) == (0, native.STATUS_GATE, [])
    got, _, status, _ = take([batch], 0, out, MessageAndMetadata, "t", 2, 0, 100, NO_DEADLINE)
    assert (got, status) == (5, native.STATUS_DONE)
    assert [m.offset for m in out] == [0, 1, 2, 3, 4]


# ---- columns ------------------------------------------------------------------------------


def pure_builder(include_headers: bool) -> ColumnBuilder:
    builder = ColumnBuilder(include_headers=include_headers)
    builder._native = None  # the lists, as without the extension
    return builder


@pytest.mark.parametrize("include_headers", [False, True])
@pytest.mark.parametrize("compression", [0, 1])
def test_native_columns_equal_the_pure_builders(include_headers: bool, compression: int) -> None:
    data = (
        raw_batch(0, specs(9, 5), compression=compression, log_append_time=True)
        + raw_batch(9, specs(30, 6, size=500), compression=compression)
        + raw_batch(39, [(b"k", b"x" * 70_000, [("big", b"y" * 1000)])])
    )
    expected = pure_builder(include_headers)
    records = MemoryRecords(data)
    while records.has_next():
        b = records.next_batch()
        assert b is not None
        expected.add_records(iter(b), TP.topic, TP.partition, b.timestamp_type, 4)

    builder = ColumnBuilder(include_headers=include_headers)
    assert builder._native is not None
    parsed = native.parse_record_set(data, TP, True)
    assert parsed is not None
    for batch in parsed[0]:
        batch = native.decompressed(batch)
        while True:
            added, _, status, _ = builder.add_native_batches(
                [batch], 0, TP.topic, TP.partition, 4, 5
            )
            assert added <= 5
            if status == native.STATUS_DONE:
                break
    assert len(builder) == len(expected) == 36
    assert builder.last_offset == expected.last_offset == 39
    got, want = builder.take_batch(), expected.take_batch()
    got.validate(full=True)
    assert got.equals(want), (got.to_pylist()[:2], want.to_pylist()[:2])
    assert len(builder) == 0 and builder.take_batch().num_rows == 0


@pytest.mark.parametrize("include_headers", [False, True])
def test_native_columns_mix_native_and_appended_rows_in_order(include_headers: bool) -> None:
    builder = ColumnBuilder(include_headers=include_headers)
    expected = pure_builder(include_headers)
    msgs = [
        MessageAndMetadata("u", 1, 5, None, b"a", TS, 0, (("h", None),)),
        MessageAndMetadata("u", 1, 6, b"k", None, -1, -1, ()),
    ]
    for b in (builder, expected):
        b.add_messages(msgs)
    (batch,), _ = native.parse_record_set(raw_batch(7, specs(4)), TP, True) or ((), {})
    builder.add_native_batches([batch], 0, "u", 1)
    records = MemoryRecords(raw_batch(7, specs(4)))
    b = records.next_batch()
    assert b is not None
    expected.add_records(iter(b), "u", 1, 0)
    got = builder.take_batch()
    assert got.equals(expected.take_batch())
    assert got.column("offset").to_pylist() == [5, 6, 7, 8, 9, 10]


def test_end_offset_stops_the_columns_before_it() -> None:
    (batch,), _ = native.parse_record_set(raw_batch(0, specs(10)), TP, True) or ((), {})
    builder = ColumnBuilder()
    added, _, status, _ = builder.add_native_batches([batch], 0, "t", 0, 2, 100, 6)
    assert (added, status) == (4, native.STATUS_END)
    assert builder.take_batch().column("offset").to_pylist() == [2, 3, 4, 5]


def test_a_non_bytes_value_is_refused_as_arrow_does() -> None:
    builder = ColumnBuilder()
    with pytest.raises((pa.ArrowTypeError, pa.ArrowInvalid)):
        builder.add_messages([MessageAndMetadata("t", 0, 0, None, "text", TS, 0, ())])  # type: ignore[arg-type]
        builder.take_batch()


# ---- many batches in one call, through the stream -------------------------------------------


def malformed_batch(base_offset: int) -> bytes:
    """A batch whose CRC matches but whose second record's length runs past the batch."""
    raw = bytearray(raw_batch(base_offset, [(b"k", b"v" * 10, []), (b"k", b"w" * 10, [])]))
    first_len = raw[61]  # the first record's zigzag length (one byte here)
    at = 61 + 1 + (first_len >> 1)  # the second record's length varint
    raw[at] = 0x7E  # 63: far beyond the batch
    struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))
    return bytes(raw)


async def test_a_malformed_batch_after_good_ones_hands_those_out_then_raises() -> None:
    from aiozkconsumer.errors import CorruptRecordError
    from aiozkconsumer.records import FetchedDataChunk, PartitionTopicInfo
    from aiozkconsumer.stream import ChunkQueue, KafkaStream

    data = raw_batch(0, specs(3)) + raw_batch(3, specs(2)) + malformed_batch(5)
    parsed = native.parse_record_set(data, TP, True)
    assert parsed is not None
    for read in ("records", "arrow"):
        queue: ChunkQueue = ChunkQueue(maxsize=2)
        info = PartitionTopicInfo("t", 2, queue, 0, 0, 1 << 20, "c")
        fresh = native.parse_record_set(data, TP, True)
        assert fresh is not None
        queue.put_nowait(FetchedDataChunk(fresh[0], info, 0))
        stream = KafkaStream(queue, 100, "c", "t-0")
        if read == "records":
            batch = await stream.iterator.next_batch(100)
            assert [m.offset for m in batch] == [0, 1, 2, 3, 4, 5]
        else:
            rb = await stream.arrow_batches(max_records=100).__anext__()
            assert rb.column("offset").to_pylist() == [0, 1, 2, 3, 4, 5]
        assert info.consumed_offset == 6
        with pytest.raises(CorruptRecordError, match=r"\[t,2\] at offsets 5..6") as e:
            if read == "records":
                await stream.iterator.next_batch(100)
            else:
                await stream.arrow_batches(max_records=100).__anext__()
        assert "malformed record batch" in str(e.value)
        assert info.consumed_offset == 6  # nothing past the bad record counts as consumed


def test_a_change_of_timestamp_type_starts_a_new_run() -> None:
    data = raw_batch(0, specs(3)) + raw_batch(3, specs(2), log_append_time=True)
    parsed = native.parse_record_set(data, TP, True)
    assert parsed is not None
    builder = ColumnBuilder()
    added, index, status, consumed = builder.add_native_batches(parsed[0], 0, "t", 2)
    assert (added, index, status, consumed) == (5, 2, native.STATUS_DONE, 5)
    rb = builder.take_batch()
    assert rb.column("timestampType").to_pylist() == [0, 0, 0, 1, 1]
    assert rb.column("timestamp").cast(pa.int64()).to_pylist()[3:] == [(TS + 999) * 1000] * 2
