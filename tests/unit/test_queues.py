"""The chunk queue's room accounting and room notification, without servers."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from aiozkconsumer.queues import SHUTDOWN_COMMAND, ChunkQueue, notify_on_room
from aiozkconsumer.records import FetchedDataChunk, PartitionTopicInfo


def test_free_slots_count_queued_waiting_and_reserved_chunks() -> None:
    q = ChunkQueue(3)
    assert q.free_slots() == 4  # the capacity plus one chunk waiting for room
    q.put_nowait(SHUTDOWN_COMMAND)
    q.reserved = 2
    assert q.free_slots() == 1
    q.waiting = 1
    assert q.free_slots() == 0
    q.reserved = 5
    assert q.free_slots() == -3  # over-committed: nothing more is fetched for it
    assert "reserved=5" in repr(q) and "waiting=1" in repr(q)


async def test_a_get_tells_every_listener_and_a_waiting_put_keeps_its_turn() -> None:
    a, b = ChunkQueue(1), ChunkQueue(1)
    a.put_nowait(SHUTDOWN_COMMAND)
    event = anyio.Event()
    with notify_on_room([a, b], event):
        assert a.room_listeners == b.room_listeners == 1
        put = asyncio.create_task(a.put(SHUTDOWN_COMMAND))  # a chunk waiting for room
        await asyncio.sleep(0)
        assert not event.is_set()
        assert await a.get() is SHUTDOWN_COMMAND
        assert event.is_set()
        await asyncio.wait_for(put, 5)  # the get woke the waiting put too
    assert a.room_listeners == b.room_listeners == 0
    assert a.qsize() == 1


def test_get_nowait_on_an_empty_queue_raises_and_tells_nobody() -> None:
    q = ChunkQueue(1)
    told: list[int] = []

    class Listener:
        def set(self) -> None:
            told.append(1)

    with q.notify_on_room(Listener()), pytest.raises(asyncio.QueueEmpty):
        q.get_nowait()
    assert told == []


def _chunk(size: int) -> FetchedDataChunk:
    queue = ChunkQueue()
    info = PartitionTopicInfo("t", 0, queue, 0, 0, 1 << 20, "c")
    return FetchedDataChunk([], info, 0, size=size)


def test_a_byte_budget_counts_queued_bytes_and_whole_slots_in_flight() -> None:
    mib = 1 << 20
    q = ChunkQueue(max_bytes=4 * mib, slot_bytes=mib)
    assert q.free_slots() == 4
    q.reserved = 1  # a fetch in flight may bring a whole slot
    assert q.free_slots() == 3
    q.reserved = 0
    for _ in range(10):  # small chunks: ten of 100 KiB use one slot's worth, not ten
        q.put_nowait(_chunk(100 << 10))
    assert q.queued_bytes == 1000 << 10
    assert q.free_slots() == 3
    for _ in range(4):
        q.put_nowait(_chunk(mib))
    assert q.free_slots() == -1  # over the budget: nothing more is fetched for it
    assert "bytes=" in repr(q)
    while not q.empty():
        q.get_nowait()
    assert q.queued_bytes == 0 and q.free_slots() == 4


def test_a_budget_below_one_slot_still_lets_one_fetch_out_at_a_time() -> None:
    q = ChunkQueue(max_bytes=64 << 10, slot_bytes=1 << 20)
    assert q.free_slots() == 1  # empty: one fetch may go out
    q.reserved = 1
    assert q.free_slots() <= 0  # that fetch is in flight: no second one
    q.reserved = 0
    q.put_nowait(_chunk(10))
    assert q.free_slots() <= 0  # its chunk waits to be read


def test_a_chunk_bound_and_a_byte_budget_together_take_the_smaller() -> None:
    q = ChunkQueue(2, max_bytes=100 << 20, slot_bytes=1 << 20)
    assert q.free_slots() == 3  # the chunk bound (plus one waiting) is the smaller
    q = ChunkQueue(16, max_bytes=2 << 20, slot_bytes=1 << 20)
    assert q.free_slots() == 2  # the bytes are
