"""ConsumerIterator semantics, on real record batches built with aiokafka (no servers).

Every test runs twice: over aiokafka's parsed batches and over the native decoder's
(``kafka/native.py``), which the fetcher hands over when the extension is built.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from aiozkconsumer.errors import ConsumerTimeoutError, MessageSizeTooLargeError
from aiozkconsumer.kafka import native
from aiozkconsumer.records import (
    FetchedDataChunk,
    MessageAndMetadata,
    PartitionTopicInfo,
    TopicPartition,
)
from aiozkconsumer.stream import SHUTDOWN_COMMAND, ChunkQueue, KafkaStream

_DECODER = ["aiokafka"]


@pytest.fixture(autouse=True, params=["aiokafka", "native"])
def decoder(request: pytest.FixtureRequest) -> Iterator[str]:
    _DECODER[0] = request.param
    yield request.param
    _DECODER[0] = "aiokafka"


def batch(base_offset: int, n: int, *, ts: int = 1_700_000_000_000) -> object:
    """One magic-2 record batch holding offsets base_offset .. base_offset + n - 1."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(n):
        builder.append(
            i, ts + i, b"k%d" % (base_offset + i), b"v%d" % (base_offset + i), [("h", b"x")]
        )
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", base_offset)  # the broker assigns the base offset
    if _DECODER[0] == "native":
        parsed = native.parse_record_set(bytes(raw), TopicPartition("t", 0), True)
        assert parsed is not None and not parsed[1]
        return parsed[0][0]
    records = MemoryRecords(bytes(raw))
    b = records.next_batch()
    assert b is not None and not records.has_next()
    return b


def pti(queue: ChunkQueue, consumed: int = 0, partition: int = 0) -> PartitionTopicInfo:
    return PartitionTopicInfo("t", partition, queue, consumed, consumed, 1 << 20, "c")


async def take(stream: KafkaStream, n: int) -> list[tuple[int, int]]:
    it = stream.__aiter__()
    return [((m := await it.__anext__()).partition, m.offset) for _ in range(n)]


async def test_records_in_order_and_consumed_offset_advances() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=2)
    info = pti(queue)
    stream = KafkaStream(queue, -1, "c", "t-0")
    queue.put_nowait(FetchedDataChunk([batch(0, 3), batch(3, 2)], info, 0))
    it = stream.__aiter__()
    msg = await it.__anext__()
    assert (msg.topic, msg.partition, msg.offset, msg.key, msg.value) == ("t", 0, 0, b"k0", b"v0")
    assert msg.timestamp == 1_700_000_000_000 and msg.timestamp_type == 0
    assert msg.headers == (("h", b"x"),)
    # The position advances when a record is handed out: next offset to read.
    assert info.consumed_offset == 1
    assert [m[1] for m in await take(stream, 4)] == [1, 2, 3, 4]
    assert info.consumed_offset == 5


async def test_records_below_consumed_offset_are_skipped() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=2)
    info = pti(queue, consumed=7)
    stream = KafkaStream(queue, -1, "c", "t-0")
    # A fetch at 7 may return the whole batch starting at 5 (compressed wrappers do).
    queue.put_nowait(FetchedDataChunk([batch(5, 5)], info, 7))
    assert [o for _, o in await take(stream, 3)] == [7, 8, 9]


async def test_consumer_timeout_raises_and_iterator_stays_usable() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=2)
    info = pti(queue)
    stream = KafkaStream(queue, 50, "c", "t-0")
    it = stream.__aiter__()
    with pytest.raises(ConsumerTimeoutError):
        await it.__anext__()
    queue.put_nowait(FetchedDataChunk([batch(0, 1)], info, 0))
    assert (await it.__anext__()).offset == 0


async def test_shutdown_command_ends_iteration() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=2)
    info = pti(queue)
    stream = KafkaStream(queue, -1, "c", "t-0")
    queue.put_nowait(FetchedDataChunk([batch(0, 2)], info, 0))
    queue.put_nowait(SHUTDOWN_COMMAND)
    got = [m.offset async for m in stream]
    assert got == [0, 1]
    # Ended for good: iterating again stops at once.
    assert [m async for m in stream] == []


async def test_released_partition_is_not_handed_out() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=3)
    released, kept = pti(queue, partition=0), pti(queue, partition=1)
    stream = KafkaStream(queue, 100, "c", "t-0")
    queue.put_nowait(FetchedDataChunk([batch(0, 3)], released, 0))
    queue.put_nowait(FetchedDataChunk([batch(0, 1)], kept, 0))
    it = stream.__aiter__()
    assert (await it.__anext__()).partition == 0
    released.active = False  # a rebalance released it while its chunk was being iterated
    msg = await it.__anext__()
    assert (msg.partition, msg.offset) == (1, 0)
    assert released.consumed_offset == 1


async def test_too_large_chunk_raises_message_size_too_large() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=2)
    info = pti(queue, consumed=42)
    stream = KafkaStream(queue, 100, "c", "t-0")
    queue.put_nowait(FetchedDataChunk((), info, 42, too_large=True))
    with pytest.raises(MessageSizeTooLargeError, match="partition 0 at fetch offset 42"):
        await stream.__aiter__().__anext__()


async def test_closed_gate_holds_records_until_reopened() -> None:
    from aiozkconsumer.records import OwnershipGate

    queue: ChunkQueue = ChunkQueue(maxsize=2)
    gate = OwnershipGate()
    info = PartitionTopicInfo("t", 0, queue, 0, 0, 1 << 20, "c", gate=gate)
    stream = KafkaStream(queue, 100, "c", "t-0")
    queue.put_nowait(FetchedDataChunk([batch(0, 3)], info, 0))
    it = stream.__aiter__()
    assert (await it.__anext__()).offset == 0
    gate.close()
    # Held back, not lost: the timeout fires and the record is still there afterwards.
    with pytest.raises(ConsumerTimeoutError):
        await it.__anext__()
    assert info.consumed_offset == 1
    gate.reopen()
    assert [(await it.__anext__()).offset for _ in range(2)] == [1, 2]


async def test_batches_take_what_is_ready_and_end_with_the_stream() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=3)
    info = pti(queue)
    stream = KafkaStream(queue, -1, "c", "t-0")
    queue.put_nowait(FetchedDataChunk([batch(0, 5)], info, 0))
    queue.put_nowait(FetchedDataChunk([batch(5, 5)], info, 5))
    queue.put_nowait(SHUTDOWN_COMMAND)
    sizes = [len(b) async for b in stream.batches(max_records=4)]
    assert sizes == [4, 4, 2]
    assert info.consumed_offset == 10
    with pytest.raises(ValueError):
        await stream.batches(max_records=0).__anext__()


async def test_decoders_apply_to_non_null_fields_only() -> None:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    builder.append(0, 1, None, b"a", [])
    builder.append(1, 1, b"k", None, [])
    records = MemoryRecords(bytes(builder.build()))
    queue: ChunkQueue = ChunkQueue(maxsize=1)
    calls: list[bytes] = []

    def decode(b: bytes) -> str:
        calls.append(b)
        return b.decode()

    stream = KafkaStream(queue, -1, "c", "t-0", key_decoder=decode, value_decoder=decode)
    queue.put_nowait(FetchedDataChunk([records.next_batch()], pti(queue), 0))
    first, second = await take_msgs(stream, 2)
    assert (first.key, first.value) == (None, "a")
    assert (second.key, second.value) == ("k", None)
    assert calls == [b"a", b"k"]


async def take_msgs(stream: KafkaStream, n: int) -> list[MessageAndMetadata]:
    it = stream.__aiter__()
    return [await it.__anext__() for _ in range(n)]
