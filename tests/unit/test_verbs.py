"""The pure parts of the runtime verbs: a seek or pause voids chunks fetched before it (queued
or half read), a paused partition is left out of the fetch plan and takes no queue room, and
a chunk that waited for room while the position moved does not advance the fetch offset.

Real record batches built with aiokafka, through the native decoder and aiokafka's (as
``test_stream.py``); no servers.
"""

from __future__ import annotations

import pytest
from test_stream import batch, decoder, pti  # noqa: F401  (the fixture runs both decoders)

from aiozkconsumer.errors import PartitionNotAssignedError
from aiozkconsumer.fetch_plan import chunk_continues, plan_fetch
from aiozkconsumer.records import FetchedDataChunk, TopicPartition
from aiozkconsumer.stream import ChunkQueue, KafkaStream


def _chunk(info: object, base: int, n: int) -> FetchedDataChunk:
    assert hasattr(info, "truncations")
    return FetchedDataChunk([batch(base, n)], info, base, truncations=info.truncations)  # type: ignore[arg-type]


async def test_a_seek_back_drops_the_half_read_chunk_and_the_queued_ones() -> None:
    queue = ChunkQueue(maxsize=4)
    info = pti(queue)
    stream = KafkaStream(queue, 0, "c", "t-0")
    queue.put_nowait(_chunk(info, 0, 5))
    queue.put_nowait(_chunk(info, 5, 5))
    it = stream.__aiter__()
    assert [(await it.__anext__()).offset for _ in range(2)] == [0, 1]
    info.seek(1)
    assert (info.consumed_offset, info.fetched_offset) == (1, 1)
    # Nothing fetched before the seek comes out: the rest of the chunk at 2.. and the queued
    # one at 5.. are stale; a chunk fetched after it (from offset 1) is handed out.
    queue.put_nowait(_chunk(info, 1, 3))
    assert [(await it.__anext__()).offset for _ in range(3)] == [1, 2, 3]
    assert queue.empty()


async def test_a_seek_forward_mid_chunk_hands_out_nothing_between() -> None:
    queue = ChunkQueue(maxsize=4)
    info = pti(queue)
    stream = KafkaStream(queue, 0, "c", "t-0")
    queue.put_nowait(_chunk(info, 0, 10))
    it = stream.__aiter__()
    assert (await it.__anext__()).offset == 0
    info.seek(7)
    queue.put_nowait(_chunk(info, 7, 2))
    assert [(await it.__anext__()).offset for _ in range(2)] == [7, 8]


async def test_pause_holds_the_partition_back_while_others_flow_and_resume_refetches() -> None:
    queue = ChunkQueue(maxsize=4)
    a, b = pti(queue, partition=0), pti(queue, partition=1)
    stream = KafkaStream(queue, 0, "c", "t-0")
    queue.put_nowait(_chunk(a, 0, 4))
    queue.put_nowait(_chunk(b, 0, 2))
    it = stream.__aiter__()
    assert (await it.__anext__()).offset == 0  # partition 0, offset 0
    a.pause()
    assert a.fetched_offset == 1  # fetched again from what was handed out
    got = [(m.partition, m.offset) for m in [await it.__anext__(), await it.__anext__()]]
    assert got == [(1, 0), (1, 1)]
    assert a.consumed_offset == 1
    # Paused: not in the fetch plan, its queue's room goes to the others.
    plan = plan_fetch([a, b], {}, lambda q: q.maxsize - q.qsize(), 1 << 20)
    assert plan.fetch == [b]
    assert plan_fetch([a], {}, lambda q: 1, 1 << 20).fetch == []
    a.resume()
    assert plan_fetch([a, b], {}, lambda q: 2, 1 << 20).fetch == [a, b]
    queue.put_nowait(_chunk(a, 1, 3))
    assert [(await it.__anext__()).offset for _ in range(3)] == [1, 2, 3]


def test_a_paused_partition_without_a_position_is_not_reset() -> None:
    info = pti(ChunkQueue(maxsize=1), consumed=-1)
    info.pause()
    assert info.fetched_offset == -1
    plan = plan_fetch([info], {}, lambda q: 1, 1 << 20)
    assert plan.reset == [] and plan.fetch == []


def test_pause_twice_moves_the_position_once() -> None:
    info = pti(ChunkQueue(maxsize=1))
    info.pause()
    moves = info.truncations
    info.pause()
    assert info.truncations == moves
    info.resume()
    info.resume()
    assert not info.paused


def test_a_chunk_continues_the_position_only_if_nothing_moved_it() -> None:
    info = pti(ChunkQueue(maxsize=1), consumed=5)
    chunk = FetchedDataChunk([], info, 5, truncations=info.truncations)
    assert chunk_continues(info, chunk)
    # A seek back to that very offset while the chunk waited for room: it is stale (the
    # iterator drops it), so the next fetch must start at 5 again, not after the chunk.
    info.seek(5)
    assert not chunk_continues(info, chunk)
    fresh = FetchedDataChunk([], info, 5, truncations=info.truncations)
    assert chunk_continues(info, fresh)
    info.active = False
    assert not chunk_continues(info, fresh)


def test_the_not_assigned_error_names_the_partition_and_the_owned_set() -> None:
    e = PartitionNotAssignedError(
        "seek", TopicPartition("t", 3), [TopicPartition("t", 1), TopicPartition("t", 0)]
    )
    assert str(e) == "seek: no current assignment for partition [t,3] (owned now: [t,0], [t,1])"
    assert e.partition == TopicPartition("t", 3)
    assert e.owned == {TopicPartition("t", 0), TopicPartition("t", 1)}
    assert isinstance(e, LookupError)
    assert "owned now: none" in str(PartitionNotAssignedError("pause", TopicPartition("t", 0), []))


@pytest.mark.parametrize("offset", [-1, -2])
def test_seek_refuses_a_negative_offset(offset: int) -> None:
    from aiozkconsumer.verbs import ConnectorVerbs

    with pytest.raises(ValueError, match="must be >= 0"):
        ConnectorVerbs.seek(None, TopicPartition("t", 0), offset)  # type: ignore[arg-type]
