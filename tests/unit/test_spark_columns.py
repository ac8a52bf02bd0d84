"""RecordColumns: fetched record sets straight into Arrow, checked against the record path.

No servers and no SparkSession: the reference is ``records_to_arrow(parse_records(...))``,
the path the push-mode bridge and the connector's fetcher use.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from aiozkconsumer.errors import CorruptRecordError, MessageSizeTooLargeError
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.simple_consumer import parse_records
from aiozkconsumer.spark.columns import RecordColumns
from aiozkconsumer.spark.schema import arrow_schema, records_to_arrow

TP = TopicPartition("payments", 3)
TS = 1_700_000_000_000
_CONTROL = 0x20
_LOG_APPEND_TIME = 0x08


def _batch(
    base_offset: int,
    deltas: list[int],
    *,
    flags: int = 0,
    headers: bool = False,
    null_keys: bool = False,
) -> bytes:
    """A magic-2 batch with records at ``base_offset + delta`` (gaps: compacted records)."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for d in deltas:
        o = base_offset + d
        builder.append(
            d,
            TS + o,
            None if null_keys else b"k%d" % o,
            b"v%d" % o,
            [("h", b"%d" % o), ("n", None)] if headers and o % 2 else [],
        )
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", base_offset)  # the broker assigns the base offset
    raw[22] |= flags  # attributes (int16 at byte 21): timestamp type, control
    struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))  # the CRC covers them
    return bytes(raw)


def _legacy(base_offset: int, n: int, magic: int) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
    for i in range(n):
        o = base_offset + i
        builder.append(o, TS + o if magic else None, b"k%d" % o, b"v%d" % o)
    return bytes(builder.build())


def _reference(data: bytes, fetch_offset: int, end: int, *, headers: bool) -> pa.RecordBatch:
    records, _ = parse_records(TP, fetch_offset, data, 1 << 20)
    return records_to_arrow([r for r in records if r.offset < end], include_headers=headers)


def _columns(
    data: bytes, fetch_offset: int, end: int, *, headers: bool
) -> tuple[pa.RecordBatch, int]:
    columns = RecordColumns(TP, include_headers=headers)
    next_offset = columns.add_fetch(data, fetch_offset, end, 1 << 20)
    return columns.take_batch(), next_offset


def test_whole_batches_give_the_kafka_source_columns() -> None:
    data = _batch(0, [0, 1, 2]) + _batch(3, [0, 1])
    batch, next_offset = _columns(data, 0, 100, headers=False)
    assert next_offset == 5
    assert batch.schema == arrow_schema(False)
    assert batch.to_pydict() == {
        "key": [b"k0", b"k1", b"k2", b"k3", b"k4"],
        "value": [b"v0", b"v1", b"v2", b"v3", b"v4"],
        "topic": ["payments"] * 5,
        "partition": [3] * 5,
        "offset": [0, 1, 2, 3, 4],
        "timestamp": batch.column("timestamp").to_pylist(),
        "timestampType": [0] * 5,
    }
    millis = [int(t.timestamp() * 1000) for t in batch.column("timestamp").to_pylist()]
    assert millis == [TS, TS + 1, TS + 2, TS + 3, TS + 4]


def test_records_outside_the_range_are_left_out_but_the_next_offset_moves_on() -> None:
    data = _batch(10, [0, 1, 2, 3, 4]) + _batch(15, [0, 1, 2])
    batch, next_offset = _columns(data, 12, 16, headers=False)
    assert batch.column("offset").to_pylist() == [12, 13, 14, 15]
    assert next_offset == 18


def test_control_batches_and_compacted_offsets_are_stepped_over() -> None:
    data = _batch(0, [0, 2, 5]) + _batch(6, [0], flags=_CONTROL) + _batch(7, [0, 1])
    batch, next_offset = _columns(data, 0, 100, headers=False)
    assert batch.column("offset").to_pylist() == [0, 2, 5, 7, 8]
    assert next_offset == 9


def test_log_append_time_and_headers() -> None:
    data = _batch(0, [0, 1, 2], flags=_LOG_APPEND_TIME, headers=True)
    batch, _ = _columns(data, 0, 100, headers=True)
    assert batch.column("timestampType").to_pylist() == [1, 1, 1]
    assert batch.column("headers").to_pylist() == [
        None,
        [{"key": "h", "value": b"1"}, {"key": "n", "value": None}],
        None,
    ]
    assert batch.equals(_reference(data, 0, 100, headers=True))


def test_null_keys_are_null() -> None:
    batch, _ = _columns(_batch(0, [0, 1], null_keys=True), 0, 100, headers=False)
    assert batch.column("key").null_count == 2


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_message_sets(magic: int) -> None:
    data = _legacy(0, 4, magic)
    batch, next_offset = _columns(data, 1, 3, headers=True)
    assert batch.column("offset").to_pylist() == [1, 2]
    assert next_offset == 4
    assert batch.equals(_reference(data, 1, 3, headers=True))
    expected_type = 0 if magic else -1
    assert batch.column("timestampType").to_pylist() == [expected_type] * 2


def test_columns_gather_over_several_fetches_until_taken() -> None:
    columns = RecordColumns(TP)
    assert columns.add_fetch(_batch(0, [0, 1]), 0, 100, 1 << 20) == 2
    assert columns.add_fetch(_batch(2, [0, 1, 2]), 2, 100, 1 << 20) == 5
    assert len(columns) == 5
    assert columns.take_batch().column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert len(columns) == 0
    assert columns.take_batch().num_rows == 0


def test_empty_data_stays_at_the_fetch_offset() -> None:
    columns = RecordColumns(TP)
    assert columns.add_fetch(b"", 7, 100, 1 << 20) == 7
    assert len(columns) == 0


def test_a_trailing_partial_batch_is_ignored() -> None:
    data = _batch(0, [0, 1, 2]) + _batch(3, [0, 1, 2])[:-5]
    batch, next_offset = _columns(data, 0, 100, headers=False)
    assert batch.column("offset").to_pylist() == [0, 1, 2]
    assert next_offset == 3


def test_no_complete_batch_is_message_size_too_large() -> None:
    too_large = r"\(100 bytes\) on partition \[payments,3\]"
    with pytest.raises(MessageSizeTooLargeError, match=too_large):
        RecordColumns(TP).add_fetch(_batch(4, [0, 1, 2])[:-5], 4, 100, 100)


def test_a_corrupt_batch_is_a_corrupt_record_error() -> None:
    data = bytearray(_batch(0, [0, 1, 2]))
    data[57] = 0xFF  # the batch's record count: records end before the batch does
    with pytest.raises(CorruptRecordError, match=r"partition \[payments,3\]"):
        RecordColumns(TP).add_fetch(bytes(data), 0, 100, 1 << 20)


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(
        st.tuples(
            st.lists(st.integers(0, 6), min_size=1, max_size=8, unique=True),  # deltas
            st.sampled_from([0, _CONTROL, _LOG_APPEND_TIME]),
            st.booleans(),  # headers
        ),
        min_size=1,
        max_size=6,
    ),
    fetch_at=st.integers(0, 40),
    span=st.integers(0, 50),
    headers=st.booleans(),
)
def test_same_rows_as_the_record_path(
    batches: list[tuple[list[int], int, bool]], fetch_at: int, span: int, headers: bool
) -> None:
    data = b""
    base = 0
    for deltas, flags, with_headers in batches:
        deltas = sorted(deltas)
        data += _batch(base, deltas, flags=flags, headers=with_headers)
        base += deltas[-1] + 1
    fetch_offset = min(fetch_at, base - 1)
    end = fetch_offset + span
    batch, next_offset = _columns(data, fetch_offset, end, headers=headers)
    _, expected_next = parse_records(TP, fetch_offset, data, 1 << 20)
    assert next_offset == expected_next
    assert batch.equals(_reference(data, fetch_offset, end, headers=headers))
