"""The iterator's hand-out semantics that any read-ahead must keep (no servers).

What a reader was handed is all that counts as consumed (commits, lag), a release drops the
rest of the chunk, a closed gate holds records back, and ``next_batch`` / ``next_columns``
after ``__anext__`` go on exactly where it stopped. Record sets are parsed by the decoder the
fetcher uses (native when built, aiokafka's otherwise); no servers. ``async for`` reads a
chunk's records ahead (``READ_AHEAD_RECORDS``, fewer when large) and hands them out one by
one, each with the gate checked and its offset counted as consumed then.
"""

from __future__ import annotations

import struct
from typing import Any

import anyio
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from aiozkconsumer.errors import ConsumerTimeoutError
from aiozkconsumer.kafka.records import read_record_set
from aiozkconsumer.records import FetchedDataChunk, PartitionTopicInfo, TopicPartition
from aiozkconsumer.stream import ChunkQueue, ConsumerIterator, KafkaStream

TP = TopicPartition("t", 0)
_CONTROL = 0x20


def record_set(base: int, n: int, *, control_after: bool = False) -> bytes:
    """One magic-2 batch of ``n`` records from ``base`` (and a control batch after it)."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(n):
        builder.append(i, 1_700_000_000_000 + i, None, b"v%d" % (base + i), [])
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", base)
    if not control_after:
        return bytes(raw)
    marker = DefaultRecordBatchBuilder(2, 0, 0, 7, 0, 0, 1 << 20)
    marker.append(0, 1_700_000_000_000, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", [])
    ctl = bytearray(marker.build())
    ctl[0:8] = struct.pack(">q", base + n)
    ctl[22] |= _CONTROL
    struct.pack_into(">I", ctl, 17, calc_crc32c(bytes(ctl[21:])))
    return bytes(raw) + bytes(ctl)


def setup(*sets: tuple[int, bytes]) -> tuple[KafkaStream, PartitionTopicInfo, ChunkQueue]:
    queue = ChunkQueue(maxsize=len(sets) + 1)
    info = PartitionTopicInfo("t", 0, queue, 0, 0, 1 << 20, "c")
    for fetch_offset, data in sets:
        batches = list(read_record_set(data, TP, True).batches)
        queue.put_nowait(FetchedDataChunk(batches, info, fetch_offset))
    return KafkaStream(queue, 200, "c", "t-0"), info, queue


async def test_only_what_was_handed_out_counts_as_consumed() -> None:
    stream, info, _ = setup((0, record_set(0, 100)))
    it = stream.iterator
    for expected in range(3):
        assert (await it.__anext__()).offset == expected
        # Read ahead or not, a commit now must not cover records the reader never got.
        assert info.consumed_offset == expected + 1


async def test_a_release_drops_what_was_read_ahead() -> None:
    stream, info, queue = setup((0, record_set(0, 50)))
    it = stream.iterator
    assert (await it.__anext__()).offset == 0
    info.active = False  # a rebalance released the partition mid-chunk
    with pytest.raises(ConsumerTimeoutError):
        await it.__anext__()  # nothing else is queued: consumer.timeout.ms runs out
    assert info.consumed_offset == 1


async def test_a_closed_gate_holds_records_read_ahead_until_it_opens() -> None:
    stream, info, _ = setup((0, record_set(0, 10)))
    it = stream.iterator
    assert (await it.__anext__()).offset == 0
    info.gate = gate = type(info.gate)()  # this partition's own gate
    gate.close()
    got: list[int] = []

    async def read() -> None:
        got.append((await it.__anext__()).offset)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        assert got == [] and info.consumed_offset == 1  # held back, not consumed
        gate.reopen()
    assert got == [1] and info.consumed_offset == 2


async def test_next_batch_after_anext_goes_on_in_order() -> None:
    stream, info, _ = setup((0, record_set(0, 40)), (40, record_set(40, 40)))
    it = stream.iterator
    assert (await it.__anext__()).offset == 0
    batch = await it.next_batch(10)
    assert [m.offset for m in batch] == list(range(1, 11))
    assert info.consumed_offset == 11
    rest: list[int] = []
    while len(rest) < 69:
        rest += [m.offset for m in await it.next_batch(100)]
    assert rest == list(range(11, 80))
    assert info.consumed_offset == 80


async def test_next_columns_after_anext_goes_on_in_order() -> None:
    pytest.importorskip("pyarrow")
    from aiozkconsumer.columns import ColumnBuilder

    stream, info, _ = setup((0, record_set(0, 30)), (30, record_set(30, 30)))
    it = stream.iterator
    assert (await it.__anext__()).offset == 0
    offsets: list[int] = []
    while len(offsets) < 59:
        columns = ColumnBuilder()
        await it.next_columns(columns, 1000)
        offsets += columns.take_batch().column("offset").to_pylist()
    assert offsets == list(range(1, 60))
    assert info.consumed_offset == 60


class _Meter:
    def __init__(self) -> None:
        self.count = 0

    def mark(self, n: int = 1) -> None:
        self.count += n


async def test_the_meters_count_what_was_handed_out_not_what_was_read_ahead() -> None:
    stream, info, queue = setup((0, record_set(0, 50)))
    topic_meter, all_meter = _Meter(), _Meter()
    info.meters = (topic_meter, all_meter)
    it = stream.iterator
    for expected in range(5):
        assert (await it.__anext__()).offset == expected
    info.active = False  # released with records still read ahead
    with pytest.raises(ConsumerTimeoutError):
        await it.__anext__()
    assert topic_meter.count == all_meter.count == 5


async def test_async_for_reads_fewer_large_records_ahead() -> None:
    from aiozkconsumer.stream import READ_AHEAD_BYTES, READ_AHEAD_RECORDS

    size = 100 * 1024
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 24)
    for i in range(20):
        builder.append(i, 1_700_000_000_000 + i, None, bytes(size), [])
    stream, info, _ = setup((0, bytes(builder.build())))
    it = stream.iterator
    offsets = []
    most = 0
    for _ in range(20):
        offsets.append((await it.__anext__()).offset)
        most = max(most, len(it._ahead))
    assert offsets == list(range(20)) and info.consumed_offset == 20
    # Decoded ahead of the reader: about READ_AHEAD_BYTES of values, not READ_AHEAD_RECORDS.
    assert 0 < most <= READ_AHEAD_BYTES // size < READ_AHEAD_RECORDS


async def test_a_seek_drops_what_was_read_ahead() -> None:
    stream, info, _ = setup((0, record_set(0, 30)))
    it = stream.iterator
    assert (await it.__anext__()).offset == 0
    assert (await it.__anext__()).offset == 1
    info.truncations += 1  # a seek or pause voided what was fetched before it
    with pytest.raises(ConsumerTimeoutError):
        await it.__anext__()
    assert info.consumed_offset == 2


async def test_a_decoder_error_comes_with_its_record_and_the_rest_follow() -> None:
    queue = ChunkQueue(maxsize=2)
    info = PartitionTopicInfo("t", 0, queue, 0, 0, 1 << 20, "c")
    batches = list(read_record_set(record_set(0, 10), TP, True).batches)
    queue.put_nowait(FetchedDataChunk(batches, info, 0))

    def decode(value: bytes) -> str:
        if value == b"v3":
            raise ValueError("not a value")
        return value.decode()

    it = KafkaStream(queue, 200, "c", "t-0", value_decoder=decode).iterator
    got = [(await it.__anext__()).value for _ in range(3)]
    assert got == ["v0", "v1", "v2"] and info.consumed_offset == 3
    with pytest.raises(ValueError, match="not a value"):
        await it.__anext__()
    rest = [(await it.__anext__()).value for _ in range(6)]
    assert rest == [f"v{i}" for i in range(4, 10)] and info.consumed_offset == 10


def _decoding_stream(bad: set[bytes]) -> tuple[ConsumerIterator, PartitionTopicInfo]:
    queue = ChunkQueue(maxsize=2)
    info = PartitionTopicInfo("t", 0, queue, 0, 0, 1 << 20, "c")
    batches = list(read_record_set(record_set(0, 10), TP, True).batches)
    queue.put_nowait(FetchedDataChunk(batches, info, 0))

    def decode(value: bytes) -> str:
        if value in bad:
            raise ValueError(f"not a value: {value!r}")
        return value.decode()

    return KafkaStream(queue, 200, "c", "t-0", value_decoder=decode).iterator, info


async def test_a_decoder_error_in_a_batch_loses_no_record() -> None:
    """``next_batch`` with a value decoder that refuses records 3 and 4 of 10: the records
    before them go out in the batch, each error with its own call, then the records after
    them; none is counted as consumed before it was handed out or its error raised."""
    it, info = _decoding_stream({b"v3", b"v4"})
    first = await it.next_batch(100)
    assert [m.value for m in first] == ["v0", "v1", "v2"] and info.consumed_offset == 3
    for bad in ("v3", "v4"):
        with pytest.raises(ValueError, match=bad):
            await it.next_batch(100)
    rest = await it.next_batch(100)
    assert [m.value for m in rest] == [f"v{i}" for i in range(5, 10)]
    assert info.consumed_offset == 10


async def test_a_decoder_error_in_a_small_batch_keeps_the_rest_for_the_next() -> None:
    it, info = _decoding_stream({b"v2"})
    got: list[str] = []
    errors = 0
    while len(got) < 9:
        try:
            got += [m.value for m in await it.next_batch(3)]
        except ValueError:
            errors += 1
        assert info.consumed_offset <= len(got) + errors
    assert got == [f"v{i}" for i in range(10) if i != 2] and errors == 1
    assert info.consumed_offset == 10


async def test_async_for_hands_out_each_record_once_in_order_and_counts_it_at_hand_out() -> None:
    """The hand-out of a record read ahead (in C where built: ``NATIVE_HAND_OUT``), through
    ``async for`` itself, across chunks and to the end of a read-ahead."""
    stream, info, queue = setup((0, record_set(0, 300)), (300, record_set(300, 5)))
    seen: list[int] = []
    async for msg in stream:
        seen.append(msg.offset)
        assert info.consumed_offset == msg.offset + 1
        if msg.offset == 304:
            break
    assert seen == list(range(305))


async def test_the_hand_out_works_under_a_tracer() -> None:
    """A tracer (coverage, a debugger) makes the interpreter resume an awaitable through the
    iterator protocol instead of ``am_send``: the record then comes as ``StopIteration``'s
    value, whole although it is a tuple."""
    import sys

    stream, info, _ = setup((0, record_set(0, 20)))
    it = stream.iterator
    assert [(await it.__anext__()).offset for _ in range(2)] == [0, 1]
    assert len(it._ahead) > 5  # the rest of the batch is read ahead now

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        got = [await it.__anext__() for _ in range(5)]
    finally:
        sys.settrace(previous)
    assert [m.offset for m in got] == [2, 3, 4, 5, 6]
    assert got[0].value == b"v2" and info.consumed_offset == 7


async def test_an_anext_awaitable_completes_once() -> None:
    import aiozkconsumer.iterator as iterator_module

    stream, _, _ = setup((0, record_set(0, 20)))
    it = stream.iterator
    assert [(await it.__anext__()).offset for _ in range(2)] == [0, 1]
    assert it._ahead  # the next one goes out of the read-ahead
    step = it.__anext__()
    assert (await step).offset == 2
    if iterator_module.NATIVE_HAND_OUT:  # a coroutine cannot be awaited twice at all
        assert await step is None  # nothing is handed out twice
    assert (await it.__anext__()).offset == 3
