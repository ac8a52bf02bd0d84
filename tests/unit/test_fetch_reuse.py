"""A fetch loop asks again with the very same request while nothing it depends on changed (an
idle partition set then costs no work per partition and fetch), and plans afresh after any
change: a seek, a pause or resume, a partition added or removed, a leader epoch, a chunk
handed over, or room taken in a stream's queue.

No servers: the loop (``fetcher.py``) runs against a channel that hands each request to the
test and answers it when the test says so (an empty response: nothing new, as an idle broker
answers).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import anyio

from aiozkconsumer import ConsumerConfig
from aiozkconsumer.fetcher import ConsumerFetcher, FetcherManager
from aiozkconsumer.kafka.fetch_request import FetchPartition
from aiozkconsumer.kafka.fetch_response import FetchResponse
from aiozkconsumer.queues import ChunkQueue
from aiozkconsumer.records import (
    FetchedDataChunk,
    PartitionTopicInfo,
    TopicPartition,
    describe_partitions,
    fetch_changes,
)

Request = tuple[FetchPartition, ...]


class _Channel:
    """Hands each request to the test; answers when the test gives a response."""

    def __init__(self) -> None:
        self.requests: asyncio.Queue[Request] = asyncio.Queue()
        self.answers: asyncio.Queue[FetchResponse] = asyncio.Queue()

    async def fetch_partitions(self, partitions: Request, **kwargs: Any) -> FetchResponse:
        self.requests.put_nowait(partitions)
        return await self.answers.get()


def _loop() -> tuple[FetcherManager, ConsumerFetcher]:
    config = ConsumerConfig(group_id="g", zookeeper_connect="h:1")
    kafka = SimpleNamespace(broker_address=str)
    manager = FetcherManager(kafka, config)  # type: ignore[arg-type]
    loop = manager.fetchers[(0, 0)] = ConsumerFetcher(manager, 0, 0)
    return manager, loop


def _info(queue: ChunkQueue, partition: int, offset: int = 5) -> PartitionTopicInfo:
    return PartitionTopicInfo("t", partition, queue, offset, offset, 1 << 20, "c")


async def _next(channel: _Channel, answer: bool = True) -> Request:
    """Answer the request in flight (unless ``answer`` is false), then take the next one."""
    if answer:
        channel.answers.put_nowait(FetchResponse())
    with anyio.fail_after(5):
        return await channel.requests.get()


def _positions(request: Request) -> dict[int, tuple[int, int]]:
    return {p.partition: (p.fetch_offset, p.current_leader_epoch) for p in request}


async def test_an_idle_loop_asks_again_with_the_same_request_and_plans_again_on_change() -> None:
    manager, loop = _loop()
    queue: ChunkQueue = ChunkQueue(4)
    a, b = _info(queue, 0), _info(queue, 1)
    loop.add_partitions([a, b])
    channel = _Channel()
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop._run, cast(Any, channel))
        first = await _next(channel, answer=False)
        assert _positions(first) == {0: (5, -1), 1: (5, -1)}
        again = await _next(channel)
        assert again is first  # nothing changed: the very same request, no plan

        a.seek(50)
        after_seek = await _next(channel)
        assert after_seek is not first and _positions(after_seek) == {0: (50, -1), 1: (5, -1)}
        assert await _next(channel) is after_seek

        b.pause()
        assert _positions(await _next(channel)) == {0: (50, -1)}
        b.resume()
        assert _positions(await _next(channel)) == {0: (50, -1), 1: (5, -1)}

        c = _info(queue, 2, offset=9)
        loop.add_partitions([c])
        assert _positions(await _next(channel)) == {0: (50, -1), 1: (5, -1), 2: (9, -1)}

        manager.remove_partitions([TopicPartition("t", 1)])
        steady = await _next(channel)
        assert _positions(steady) == {0: (50, -1), 2: (9, -1)}
        assert await _next(channel) is steady

        # Room taken in the stream's queue (a chunk the reader has not taken yet): the
        # request reserves what is left, so it is planned again.
        queue.put_nowait(FetchedDataChunk([], c, 9))
        changes = fetch_changes()
        planned = await _next(channel)
        assert planned is not steady and fetch_changes() == changes
        tg.cancel_scope.cancel()


def test_a_long_list_of_partitions_is_cut_short_in_messages() -> None:
    tps = [TopicPartition("t", p) for p in range(10_000, 0, -1)]
    text = describe_partitions(tps, limit=3)
    assert text == "[t,1], [t,2], [t,3] ... and 9997 more (10000 in all)"
    assert describe_partitions(tps[-2:]) == "[t,1], [t,2]"
    assert describe_partitions([]) == ""
