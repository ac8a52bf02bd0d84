"""The decoder seam (``kafka/records.py``) and the extension's stub (``kafka/_native.pyi``).

No servers: record sets are built with aiokafka's builders and read through the seam with the
native decoder and, as without it (the module state ``AIOZKCONSUMER_NATIVE=0`` leaves), with
aiokafka's parser; both must give the same batches, records and errors.
"""

from __future__ import annotations

import ast
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiokafka.codec
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

from aiozkconsumer.errors import CorruptRecordError, UnsupportedCodecError
from aiozkconsumer.kafka import native, records
from aiozkconsumer.kafka.crc import SkippedBatch
from aiozkconsumer.kafka.transactions import AbortedBatch
from aiozkconsumer.records import MessageAndMetadata, TopicPartition

TS = 1_700_000_000_000
TP = TopicPartition("t", 3)
GZIP, LZ4 = 1, 3

built = pytest.mark.skipif(not native.AVAILABLE, reason="the native decoder is not built")


@pytest.fixture(params=["native", "aiokafka"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "aiokafka":
        monkeypatch.setattr(native, "native", None)
        monkeypatch.setattr(native, "AVAILABLE", False)
    elif not native.AVAILABLE:
        pytest.skip("the native decoder is not built")
    yield request.param


def batch(base_offset: int, n: int, compression: int = 0, *, headers: bool = True) -> bytes:
    builder = DefaultRecordBatchBuilder(2, compression, 0, -1, -1, -1, 1 << 20)
    for i in range(n):
        value = b"v%d" % (base_offset + i)
        builder.append(i, TS + i, b"k", value, [("h", value)] if headers else [])
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", base_offset)
    return bytes(raw)


def corrupt(data: bytes) -> bytes:
    flipped = bytearray(data)
    flipped[-1] ^= 0x01  # in the last record: the CRC no longer matches
    return bytes(flipped)


def offsets(out: list[MessageAndMetadata]) -> list[int]:
    return [m.offset for m in out]


# ---- the status codes and the stub ------------------------------------------------------------


@built
def test_outcomes_are_the_extensions_status_codes() -> None:
    for outcome in records.Outcome:
        assert getattr(native.native, f"STATUS_{outcome.name}") == outcome
        assert getattr(native, f"STATUS_{outcome.name}") is outcome


def _declared(body: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


@built
def test_the_stub_declares_every_public_name_of_the_extension() -> None:
    stub = ast.parse(Path(native.__file__).with_name("_native.pyi").read_text())
    extension = native.native
    public = {name for name in dir(extension) if not name.startswith("_")}
    assert _declared(stub.body) >= public
    classes = {node.name: node for node in stub.body if isinstance(node, ast.ClassDef)}
    for name in ("Batch", "Columns"):
        members = {m for m in vars(getattr(extension, name)) if not m.startswith("_")}
        assert _declared(classes[name].body) >= members, name


# ---- parsing a record set -----------------------------------------------------------------------


def test_both_parsers_give_the_same_batches_and_corrupt_ones(decoder: str) -> None:
    data = batch(0, 2) + corrupt(batch(2, 3)) + batch(5, 1) + batch(6, 4)[:-3]
    record_set = records.read_record_set(bytearray(data), TP, True)
    assert (record_set.native_batches is record_set.batches) is (decoder == "native")
    got = [(b.base_offset, b.next_offset) for b in record_set.batches]
    assert got == [(0, 2), (2, 5), (5, 6)]  # the trailing partial batch left out
    assert list(record_set.corrupt) == [5]
    error = record_set.corrupt[5]
    assert (error.offset, error.last_offset) == (2, 4)


def test_without_check_crcs_nothing_is_corrupt(decoder: str) -> None:
    record_set = records.read_record_set(corrupt(batch(0, 2)), TP, False)
    assert record_set.corrupt == {}
    assert [b.next_offset for b in record_set.batches] == [2]


@built
def test_a_legacy_message_set_goes_to_aiokafka() -> None:
    builder = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    builder.append(0, TS, b"k", b"v")
    record_set = records.read_record_set(bytes(builder.build()), TP, True)
    assert record_set.native_batches is None
    (legacy,) = list(record_set.batches)
    assert records.reads_natively([legacy]) is False


@built
def test_a_chunk_with_a_native_batch_is_read_natively() -> None:
    native_batches = list(records.read_record_set(batch(1, 2), TP, True).batches)
    assert records.reads_natively(native_batches)
    assert records.reads_natively([SkippedBatch(0, 1), *native_batches])
    assert not records.reads_natively([SkippedBatch(0, 1)])
    assert not records.reads_natively([])


# ---- reading batches ----------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [0, GZIP])
def test_append_messages_reads_either_parsers_batch_alike(decoder: str, compression: int) -> None:
    out: list[MessageAndMetadata] = []
    for b in records.read_record_set(batch(10, 4, compression), TP, True).batches:
        records.append_messages(b, out, TP.topic, TP.partition, 12)
    assert out == [
        MessageAndMetadata("t", 3, 12, b"k", b"v12", TS + 2, 0, (("h", b"v12"),)),
        MessageAndMetadata("t", 3, 13, b"k", b"v13", TS + 3, 0, (("h", b"v13"),)),
    ]


@built
def test_a_record_that_does_not_parse_comes_after_the_records_before_it() -> None:
    raw = bytearray(batch(0, 3, headers=False))
    raw[-1] ^= 0xFF  # the last record's header count
    (bad,) = records.read_record_set(bytes(raw), TP, False).batches
    out: list[MessageAndMetadata] = []
    with pytest.raises(CorruptRecordError) as e:
        records.append_messages(bad, out, TP.topic, TP.partition, 0)
    assert offsets(out) == [0, 1]
    assert (e.value.topic, e.value.partition) == ("t", 3)


@built
def test_decompress_at_makes_a_compressed_native_batch_readable() -> None:
    batches = list(records.read_record_set(batch(0, 3, GZIP), TP, True).batches)
    out: list[MessageAndMetadata] = []
    _, index, status, _ = records.take_messages(
        batches, 0, out, MessageAndMetadata, "t", 3, 0, 100, float("inf")
    )
    assert (index, status, out) == (0, records.Outcome.FOREIGN, [])
    assert records.decompress_at(batches, 0, "t", 3)
    _, index, status, consumed = records.take_messages(
        batches, 0, out, MessageAndMetadata, "t", 3, 0, 100, float("inf")
    )
    assert (offsets(out), index, status, consumed) == ([0, 1, 2], 1, records.Outcome.DONE, 3)
    with pytest.raises(RuntimeError, match="not compressed"):
        records.decompress_at(batches, 0, "t", 3)


def test_decompress_at_leaves_other_items_to_the_reader(decoder: str) -> None:
    batches: list[Any] = [
        SkippedBatch(0, 2),
        *records.read_record_set(batch(2, 1), TP, True).batches,
    ]
    assert not records.decompress_at(batches, 0, "t", 3)
    if decoder == "aiokafka":
        assert not records.decompress_at(batches, 1, "t", 3)


@built
def test_a_codec_missing_when_decompressing_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    batches = list(records.read_record_set(batch(2, 3, LZ4), TP, True).batches)
    monkeypatch.setattr(aiokafka.codec, "has_lz4", lambda: False)
    with pytest.raises(UnsupportedCodecError) as e:
        records.decompress_at(batches, 0, "t", 3)
    assert (e.value.codec, e.value.offset, e.value.last_offset) == ("lz4", 2, 4)
    assert records.unsupported_codec_error("t", 3, batches[0]) is not None


def test_an_aborted_batch_is_stepped_over(decoder: str) -> None:
    (b,) = records.read_record_set(batch(4, 2), TP, True).batches
    stand_in = records.mark_aborted(b)
    if decoder == "native":
        assert stand_in is b and b.aborted
        out: list[MessageAndMetadata] = []
        _, index, _, consumed = records.take_messages(
            [b], 0, out, MessageAndMetadata, "t", 3, 0, 100, float("inf")
        )
        assert (out, index, consumed) == ([], 1, 6)
    else:
        assert stand_in == AbortedBatch(4, 6, -1)
        assert stand_in.is_control_batch


def test_native_columns_only_with_the_decoder(decoder: str) -> None:
    columns = records.native_columns(include_headers=True)
    if decoder == "native":
        assert columns is not None and len(columns) == 0
    else:
        assert columns is None
