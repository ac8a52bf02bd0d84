"""The chunk queue's room accounting and room notification, without servers."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from aiozkconsumer.queues import SHUTDOWN_COMMAND, ChunkQueue, notify_on_room


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
