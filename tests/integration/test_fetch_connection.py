"""The fetch loop's own connection (``kafka/fetch_connection.py``) and the fetch memory budget.

Unit tests decode FetchResponses that aiokafka's own protocol classes encode, fed to the push
parser in pieces of every size, and check the fetch plan (``plan_fetch``) without servers.
Integration tests (real Kafka 3.9 ZooKeeper mode and Kafka 4 KRaft) compare what the own
connection and aiokafka's shared one return for the same request, reconnect after a dropped
connection, and hold a stream nobody reads to its budget however many partitions feed it.
A fake broker on loopback (SaslHandshake, SaslAuthenticate with PLAIN, Fetch v11; with or
without TLS) checks SASL before the first fetch, KIP-368 re-authentication on the same
connection, one attempt per ``reconnect.backoff.max.ms`` after a refusal, and the errors
that name what the broker answered (real secured brokers: ``test_security_kafka.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from aiokafka.protocol.fetch import (
    FetchRequest,
    FetchResponse_v4,
    FetchResponse_v5,
    FetchResponse_v7,
    FetchResponse_v11,
)

from aiozkconsumer import ConsumerConfig
from aiozkconsumer.errors import (
    AuthenticationError,
    BrokerNotAvailableError,
    SslAuthenticationError,
)
from aiozkconsumer.fetcher import FetcherManager, plan_fetch
from aiozkconsumer.kafka import native
from aiozkconsumer.kafka.client import KafkaClient
from aiozkconsumer.kafka.fetch_connection import (
    READ_AHEAD,
    FetchConnection,
    FetchResponseParser,
)
from aiozkconsumer.kafka.records import batch_larger_than as _too_large
from aiozkconsumer.queues import ChunkQueue
from aiozkconsumer.records import PartitionTopicInfo, TopicPartition
from aiozkconsumer.security import KafkaSecurity
from aiozkconsumer.testing import LocalCluster

# -- the parser, without servers ----------------------------------------------------------


def _partitions(version: int, records: list[bytes | None]) -> list[tuple[Any, ...]]:
    parts: list[tuple[Any, ...]] = []
    for i, data in enumerate(records):
        aborted = [(7, 100 + i)] if i % 2 else None
        row: list[Any] = [i, 0 if i != 2 else 1, 1000 + i, 900 + i]
        if version >= 5:
            row.append(10 + i)
        row.append(aborted)
        if version >= 11:
            row.append(-1)
        row.append(data)
        parts.append(tuple(row))
    return parts


def _encoded(
    version: int, correlation_id: int, topics: list[tuple[str, list[bytes | None]]]
) -> bytes:
    cls = {4: FetchResponse_v4, 5: FetchResponse_v5, 7: FetchResponse_v7, 11: FetchResponse_v11}
    body_topics = [(t, _partitions(version, recs)) for t, recs in topics]
    if version >= 7:
        body = cls[version](12, 0, 0, body_topics).encode()
    else:
        body = cls[version](12, body_topics).encode()
    message = struct.pack(">i", correlation_id) + body
    return struct.pack(">i", len(message)) + message


def _feed(parser: FetchResponseParser, data: bytes, rng: random.Random) -> int:
    """Feed ``data`` in random pieces as recv_into would; returns the bytes taken."""
    pos = 0
    while pos < len(data) and not parser.done:
        buf = parser.buffer()
        n = min(len(buf), len(data) - pos, rng.choice([1, 3, 7, 64, 4096, 1 << 20]))
        buf[:n] = data[pos : pos + n]
        parser.filled(n)
        pos += n
    return pos


TOPICS: list[tuple[str, list[bytes | None]]] = [
    ("alpha", [b"x" * 1000, b"", None, bytes(range(256)) * 50]),
    ("beta-ü", [b"y" * 3]),
    ("empty", []),
]


@pytest.mark.parametrize("version", [4, 5, 7, 11])
@pytest.mark.parametrize("seed", range(5))
def test_the_parser_decodes_what_aiokafka_encodes_in_any_pieces(version: int, seed: int) -> None:
    data = _encoded(version, 42, TOPICS)
    parser = FetchResponseParser(version, 42)
    assert _feed(parser, data, random.Random(seed)) == len(data)
    assert parser.done
    resp = parser.response
    assert resp.throttle_time_ms == 12 and resp.size == len(data) - 4
    assert [t for t, _ in resp.topics] == [t for t, _ in TOPICS]
    for (_, parts), (_, recs) in zip(resp.topics, TOPICS, strict=True):
        assert [p[-1] for p in parts] == recs
        for i, (partition, error, hw, lso, log_start, aborted, _) in enumerate(parts):
            assert (partition, error, hw, lso) == (i, 0 if i != 2 else 1, 1000 + i, 900 + i)
            assert log_start == (10 + i if version >= 5 else -1)
            assert aborted == ([(7, 100 + i)] if i % 2 else None)
            # The receive buffers themselves for the native decoder; else one copy to bytes.
            kind = bytearray if native.AVAILABLE else bytes
            assert all(type(p[-1]) is kind for p in parts if p[-1])
    copied = sum(len(r or b"") for _, rs in TOPICS for r in rs)
    assert parser.bytes_copied == (0 if native.AVAILABLE else copied)


def test_the_parser_receives_a_record_set_into_one_buffer() -> None:
    """Headers come with a read-ahead receive, the rest of a record set in one receive into
    its own buffer: no re-buffering per piece the socket delivers."""
    payload = b"z" * 100_000
    data = _encoded(11, 1, [("t", [payload])])
    parser = FetchResponseParser(11, 1)
    sizes = []
    pos = 0
    while not parser.done:
        buf = parser.buffer()
        sizes.append(len(buf))
        buf[:] = data[pos : pos + len(buf)]
        pos += len(buf)
        parser.filled(len(buf))
    assert pos == len(data)
    # The length prefix, one read-ahead (headers and the record set's start), the rest.
    assert sizes == [4, READ_AHEAD, len(data) - 4 - READ_AHEAD]
    assert parser.response.topics[0][1][0][-1] == payload


def test_header_fields_longer_than_the_read_ahead() -> None:
    aborted = [(i, 10 * i) for i in range(READ_AHEAD // 16 + 100)]
    body = FetchResponse_v11(0, 0, 0, [("t", [(0, 0, 5, 5, 0, aborted, -1, b"abc")])]).encode()
    message = struct.pack(">i", 9) + body
    data = struct.pack(">i", len(message)) + message
    parser = FetchResponseParser(11, 9)
    assert _feed(parser, data, random.Random(1)) == len(data) and parser.done
    ((_, ((_, _, _, _, _, got, records),)),) = parser.response.topics
    assert got == aborted and records == b"abc"


def test_a_response_to_another_request_is_refused() -> None:
    parser = FetchResponseParser(11, 5)
    with pytest.raises(ValueError, match="correlation id 6"):
        _feed(parser, _encoded(11, 6, TOPICS), random.Random(0))


def test_a_length_beyond_the_response_is_refused() -> None:
    data = bytearray(_encoded(7, 3, [("t", [b"abc"])]))
    struct.pack_into(">i", data, 0, len(data) - 4 - 2)  # the prefix says 2 bytes less
    with pytest.raises(ValueError, match="beyond the response"):
        _feed(FetchResponseParser(7, 3), bytes(data), random.Random(0))


@pytest.mark.parametrize("version", [3, 19])
def test_unparsed_versions_are_refused(version: int) -> None:
    with pytest.raises(ValueError):
        FetchResponseParser(version, 1)


# -- the fetch plan, without servers ------------------------------------------------------


def _pti(
    partition: int, queue: ChunkQueue, offset: int = 0, size: int = 1000
) -> PartitionTopicInfo:
    return PartitionTopicInfo("t", partition, queue, offset, offset, size, "test")


def test_the_plan_caps_the_response_at_the_free_slots() -> None:
    q1: ChunkQueue = ChunkQueue(2)
    q2: ChunkQueue = ChunkQueue(2)
    ptis = [_pti(p, q1) for p in range(4)] + [_pti(4, q2)]
    free = {id(q1): 1, id(q2): 3}
    plan = plan_fetch(ptis, {}, lambda q: free[id(q)], 50_000_000)
    # Every partition is asked for (none waits behind an empty one) ...
    assert [p.partition for p in plan.fetch] == [0, 1, 2, 3, 4]
    # ... but the response cannot bring more than the room left: q1's one free slot, and
    # one slot of q2 (its one partition brings one chunk, however much room is free): 2 x
    # 1000 bytes.
    assert plan.max_bytes == 2000
    assert {k: n for k, (_, n) in plan.slots.items()} == {id(q1): 1, id(q2): 1}
    assert plan.blocked == {}


async def test_a_broker_loop_long_polling_an_idle_partition_leaves_a_shared_stream_room() -> None:
    """Two brokers' loops feed one stream (the default byte budget: 16 slots of 1 MiB).
    The first loop's request, in flight, must leave room for the second; and when it does
    hold the last of it, its release wakes the loop waiting for room. Reserving every free
    slot starved the second broker's partition for good while the first long-polled."""
    config = ConsumerConfig(group_id="g", zookeeper_connect="x:1")
    manager = FetcherManager(None, config)  # type: ignore[arg-type]
    slot = config.fetch_message_max_bytes
    queue = ChunkQueue(0, max_bytes=16 * slot, slot_bytes=slot)
    idle, other = _pti(1, queue, size=slot), _pti(0, queue, size=slot)
    first = plan_fetch([idle], {}, manager.free_slots, config.fetch_max_bytes)
    assert [s for _, s in first.slots.values()] == [1]
    with manager.reserve(first.slots.values()):
        second = plan_fetch([other], {}, manager.free_slots, config.fetch_max_bytes)
        assert second.fetch == [other]
    # A fetch holding the last free slot: the waiting loop is woken by its release.
    crowd = [_pti(p, queue, size=slot) for p in range(2, 40)]
    greedy = plan_fetch(crowd, {}, manager.free_slots, config.fetch_max_bytes)
    event = anyio.Event()
    with manager.notify_on_room([queue], event):  # the waiting loop, as _run registers it
        with manager.reserve(greedy.slots.values()) as reservation:
            blocked = plan_fetch([other], {}, manager.free_slots, config.fetch_max_bytes)
            assert blocked.fetch == [] and list(blocked.blocked.values()) == [queue]
            assert not event.is_set()
        assert reservation.woke and event.is_set()
    assert queue.reserved == 0
    assert plan_fetch([other], {}, manager.free_slots, config.fetch_max_bytes).fetch == [other]


def test_a_full_stream_is_left_out_and_others_go_on() -> None:
    full: ChunkQueue = ChunkQueue(1)
    other: ChunkQueue = ChunkQueue(1)
    ptis = [_pti(0, full), _pti(1, other), _pti(2, other, offset=-1), _pti(3, other)]
    free = {id(full): 0, id(other): 2}
    plan = plan_fetch(ptis, {TopicPartition("t", 3): ptis[3]}, lambda q: free[id(q)], 800)
    assert [p.partition for p in plan.fetch] == [1]
    assert [p.partition for p in plan.reset] == [2]
    assert list(plan.blocked.values()) == [full]
    assert plan.max_bytes == 800  # fetch.max.bytes is the lower cap here


def test_a_partition_taken_again_onto_another_stream_is_not_held_by_the_old_wait() -> None:
    """A chunk of partition 0 waits for room in the old stream's queue; the partition is
    released and taken again onto another stream (a new PartitionTopicInfo): the new one is
    fetched at once, not after the old stream's reader makes room."""
    old_q: ChunkQueue = ChunkQueue(1)
    new_q: ChunkQueue = ChunkQueue(1)
    old, new = _pti(0, old_q), _pti(0, new_q)
    free = {id(old_q): 0, id(new_q): 2}
    waiting = {old.tp: old}
    assert plan_fetch([old], waiting, lambda q: free[id(q)], 1 << 20).fetch == []
    assert plan_fetch([new], waiting, lambda q: free[id(q)], 1 << 20).fetch == [new]


def test_nothing_to_fetch_when_every_stream_is_full() -> None:
    q: ChunkQueue = ChunkQueue(1)
    plan = plan_fetch([_pti(0, q), _pti(1, q)], {}, lambda _q: 0, 1 << 20)
    assert plan.fetch == [] and list(plan.blocked.values()) == [q]


def test_a_cut_batch_is_not_too_large() -> None:
    head = struct.pack(">qi", 0, 5000 - 12)  # a 5000-byte batch
    assert not _too_large(head + b"\0" * 100, 8000)  # cut by max_bytes: fetch it again
    assert _too_large(head + b"\0" * 100, 4000)  # can never fit in 4000 bytes
    assert not _too_large(b"\0" * 5, 8000)


async def test_room_in_a_queue_wakes_the_fetcher_and_a_waiting_put() -> None:
    manager = FetcherManager(None, ConsumerConfig(group_id="g", zookeeper_connect="x:1"))  # type: ignore[arg-type]
    queue: ChunkQueue = ChunkQueue(1)
    queue.put_nowait("a")
    event = anyio.Event()
    with manager.notify_on_room([queue], event):
        put = asyncio.create_task(queue.put("b"))  # a chunk waiting for room, after us
        await asyncio.sleep(0)
        assert queue.get_nowait() == "a"
        await event.wait()
        # The get woke our waiter first; the waiting put must not have missed its turn.
        await asyncio.wait_for(put, 5)
    assert queue.get_nowait() == "b"
    assert queue.room_listeners == 0  # the listener left with the block


# -- against real brokers -----------------------------------------------------------------

pytest_integration = pytest.mark.integration


@pytest.fixture
async def kafka(zk_kafka_cluster: LocalCluster) -> AsyncIterator[KafkaClient]:
    client = KafkaClient(zk_kafka_cluster.bootstrap_servers, client_id="test-fetch-conn")
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def _compare_paths(cluster: LocalCluster, kafka: KafkaClient, topic: str) -> None:
    await cluster.create_topic(topic, 3)
    await cluster.produce_to_partitions(
        topic, {p: [(b"k%d" % i, b"v" * (i * 37 % 700)) for i in range(300)] for p in range(3)}
    )
    assert await kafka.refresh_metadata([topic])
    by_leader: dict[int, list[int]] = {}
    for p in range(3):
        leader = kafka.leader_for(TopicPartition(topic, p))
        assert leader is not None
        by_leader.setdefault(leader, []).append(p)
    for node, parts in by_leader.items():
        requests = [
            # Whole partitions; one cut short by max_bytes; one past its end (empty);
            # one offset out of range (an error).
            FetchRequest(100, 1, 10_000_000, 0, [(topic, [(p, 0, 1 << 20) for p in parts])]),
            FetchRequest(100, 1, 10_000_000, 0, [(topic, [(p, 7, 100) for p in parts])]),
            FetchRequest(100, 1, 10_000_000, 0, [(topic, [(p, 300, 1 << 20) for p in parts])]),
            FetchRequest(100, 1, 10_000_000, 0, [(topic, [(p, 10**6, 1 << 20) for p in parts])]),
        ]
        own = kafka.fetch_channel(node)
        shared = kafka.fetch_channel(node, dedicated=False)
        copied = 0
        try:
            for request in requests:
                a = await own.fetch(request, 100)
                b = await shared.fetch(request, 100)
                rows_a = [(t, [(p[0], p[1], p[2], p[-1]) for p in ps]) for t, ps in a.topics]
                rows_b = [(t, [(p[0], p[1], p[2], p[-1]) for p in ps]) for t, ps in b.topics]
                assert rows_a == rows_b
                copied += sum(len(p[-1] or b"") for _, ps in a.topics for p in ps)
        finally:
            own.close()
            shared.close()
        assert own.connection.requests == len(requests)  # all went over the own connection
        assert copied > 0
        assert own.connection.bytes_copied == (0 if native.AVAILABLE else copied)


@pytest_integration
async def test_the_own_connection_returns_what_aiokafka_returns(
    zk_kafka_cluster: LocalCluster, unique_topic: str, kafka: KafkaClient
) -> None:
    await _compare_paths(zk_kafka_cluster, kafka, unique_topic)


@pytest_integration
async def test_the_own_connection_returns_what_aiokafka_returns_kraft(
    kraft_cluster: LocalCluster, unique_topic: str
) -> None:
    client = KafkaClient(kraft_cluster.bootstrap_servers, client_id="test-fetch-conn")
    await client.start()
    try:
        await _compare_paths(kraft_cluster, client, unique_topic)
    finally:
        await client.close()


def _drop(connection: FetchConnection) -> None:
    """Drop an open connection under the request in flight, as a broker going away would."""
    link = connection._link
    if link is not None:  # the I/O thread's blocking socket
        socket.socket.shutdown(link._sock, socket.SHUT_RDWR)
        return
    proto = connection._protocol
    assert proto is not None and proto.transport is not None
    proto.transport.abort()


@pytest_integration
@pytest.mark.parametrize("io_thread", [True, False], ids=["io-thread", "event-loop"])
async def test_a_dropped_connection_fails_the_fetch_and_the_next_reconnects(
    zk_kafka_cluster: LocalCluster, unique_topic: str, kafka: KafkaClient, io_thread: bool
) -> None:
    await zk_kafka_cluster.create_topic(unique_topic, 1)
    await zk_kafka_cluster.produce(unique_topic, [(None, b"v")], partition=0)
    assert await kafka.refresh_metadata([unique_topic])
    node = kafka.leader_for(TopicPartition(unique_topic, 0))
    assert node is not None
    channel = kafka.fetch_channel(node)
    channel.connection.io_thread = io_thread
    try:
        # Past the log end: the broker holds the request for max_wait; drop it meanwhile.
        waiting = FetchRequest(5000, 1, 1 << 20, 0, [(unique_topic, [(0, 1, 1 << 20)])])
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:

                async def drop() -> None:
                    await anyio.sleep(0.5)
                    assert channel.connection.connected
                    _drop(channel.connection)

                tg.start_soon(drop)
                with pytest.raises(BrokerNotAvailableError):
                    await channel.fetch(waiting, 5000)
        assert not channel.connection.connected
        ok = FetchRequest(100, 1, 1 << 20, 0, [(unique_topic, [(0, 0, 1 << 20)])])
        resp = await channel.fetch(ok, 100)
        assert resp.topics[0][1][0][-1]
    finally:
        channel.close()


@pytest_integration
async def test_an_unreachable_broker_is_broker_not_available() -> None:
    with socket_port() as port:
        conn = FetchConnection(1, lambda: ("127.0.0.1", port), "test", 2.0)
        request = FetchRequest(100, 1, 1 << 20, 0, [("t", [(0, 0, 1 << 20)])])
        with pytest.raises(BrokerNotAvailableError):
            await conn.fetch(request.build(_v11()), 100)
        conn.close()


def _v11() -> Any:
    from aiokafka.protocol.fetch import FetchRequest_v11

    return FetchRequest_v11


class socket_port:
    """A loopback port nothing listens on (bound, never listened)."""

    def __enter__(self) -> int:
        import socket

        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        return int(self._sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._sock.close()


@pytest_integration
async def test_an_unread_stream_holds_its_budget_however_many_partitions_feed_it(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str, kafka: KafkaClient
) -> None:
    """One stream of 6 partitions, 1 queued chunk: the fetcher brings at most 2 chunks
    (the queued one and one waiting for room) and stops; before, every partition parked a
    chunk of its own (6 in all)."""
    cluster, topic = zk_kafka_cluster, unique_topic
    await cluster.create_topic(topic, 6)
    await cluster.produce_to_partitions(
        topic, {p: [(None, b"x" * 200) for _ in range(50)] for p in range(6)}
    )
    config = ConsumerConfig(
        group_id=unique_group_id,
        zookeeper_connect=cluster.zookeeper_connect,
        fetch_message_max_bytes=4000,
        queued_max_message_chunks=1,
    )
    queue: ChunkQueue = ChunkQueue(1)
    ptis = [
        PartitionTopicInfo(topic, p, queue, 0, 0, config.fetch_message_max_bytes, "t")
        for p in range(6)
    ]
    manager = FetcherManager(kafka, config)
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            await manager.start_connections(ptis, tg)
            try:
                for _ in range(1200):
                    if queue.full() and any(f._delivering for f in manager.fetchers.values()):
                        break
                    await anyio.sleep(0.05)
                await anyio.sleep(1.0)  # time for more fetches, if any were to come
                waiting = sum(len(f._delivering) for f in manager.fetchers.values())
                assert queue.qsize() == 1 and waiting == 1
                assert manager.free_slots(queue) == 0
                assert sum(p.fetched_offset > 0 for p in ptis) == 1  # only the queued chunk's
                # Reading makes room: the waiting chunk goes in and fetching resumes.
                seen = {queue.get_nowait().topic_info.partition}
                with anyio.fail_after(30):
                    while len(seen) < 6:
                        seen.add((await queue.get()).topic_info.partition)
                assert seen == set(range(6))
            finally:
                await manager.stop_connections()


@pytest_integration
async def test_a_partition_moved_onto_another_stream_while_its_chunk_waits_is_fetched(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str, kafka: KafkaClient
) -> None:
    """The stalled partition (a rebalance moves a partition onto another of the member's
    streams while a chunk of it waits for room in the old stream's full queue): the new
    stream gets its records at once, round after round, though no old stream is ever read.
    Before, the fetch loop held the partition back by its name until the old wait ended."""
    cluster, topic = zk_kafka_cluster, unique_topic
    await cluster.create_topic(topic, 1)
    for _ in range(8):  # batches of 10 records (2 kB), two to a 4000-byte fetch
        await cluster.produce_to_partitions(topic, {0: [(None, b"x" * 200) for _ in range(10)]})
    config = ConsumerConfig(
        group_id=unique_group_id,
        zookeeper_connect=cluster.zookeeper_connect,
        fetch_message_max_bytes=4000,
        queued_max_message_chunks=1,
    )

    def on(queue: ChunkQueue) -> PartitionTopicInfo:
        return PartitionTopicInfo(topic, 0, queue, 0, 0, config.fetch_message_max_bytes, "t")

    def waiting(pti: PartitionTopicInfo) -> bool:
        return any(f._delivering.get(pti.tp) is pti for f in manager.fetchers.values())

    pti = on(ChunkQueue(1))
    manager = FetcherManager(kafka, config)
    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            await manager.start_connections([pti], tg)
            try:
                for _ in range(10):
                    # The stream's queue is full and a second chunk waits for room (polled:
                    # the fetch loop has no event for it).
                    while True:
                        if pti.queue.full() and waiting(pti):
                            break
                        await anyio.sleep(0.02)
                    # The rebalance: released (as Ownership.release), taken onto a new stream.
                    old, old.active = pti, False
                    manager.remove_partitions([pti.tp])
                    pti = on(ChunkQueue(1))
                    manager.add_partitions([pti])
                    with anyio.fail_after(20):
                        chunk = await pti.queue.get()
                    assert chunk.topic_info is pti and chunk.fetch_offset == 0
                    # The old chunk stopped waiting (it would be dropped when read).
                    assert not waiting(old) and old.queue.waiting == 0
                    pti.queue.put_nowait(chunk)  # full again, for the next round
            finally:
                await manager.stop_connections()


class _FakeBroker:
    """A loopback server that reads one request and answers ``reply`` (or nothing).

    With ``hang_up``, the connection is then reset at once (``"reset"``: SO_LINGER 0, as the
    kernel does for a killed process with unread data) or closed (``"close"``), instead of
    waiting for the client to drop it. ``reply`` may be a callable of the request's
    correlation id.
    """

    def __init__(self, reply: Any, hang_up: str | None = None) -> None:
        self.reply = reply
        self.hang_up = hang_up
        self.done = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            request = await reader.readexactly(size)
            reply = self.reply
            if callable(reply):
                reply = reply(struct.unpack_from(">i", request, 4)[0])
            if reply is not None:
                writer.write(reply)
                await writer.drain()
            if self.hang_up == "reset":
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                return
            if self.hang_up is None:
                with contextlib.suppress(ConnectionError):
                    await reader.read()  # until the client drops the connection
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self.done.set()


@pytest.mark.parametrize(
    ("reply", "match"),
    [(None, "TimeoutError"), (_encoded(11, 999, TOPICS), "correlation id 999")],
    ids=["silent", "out-of-sync"],
)
async def test_a_silent_or_out_of_sync_broker_is_broker_not_available(
    reply: bytes | None, match: str
) -> None:
    broker = _FakeBroker(reply)
    server = await asyncio.start_server(broker.handle, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    async with server:
        conn = FetchConnection(1, lambda: ("127.0.0.1", port), "test", 0.5)
        request = FetchRequest(100, 1, 1 << 20, 0, [("t", [(0, 0, 1 << 20)])])
        with anyio.fail_after(10):
            with pytest.raises(BrokerNotAvailableError, match=match):
                await conn.fetch(request.build(_v11()), 100)
            assert not conn.connected  # dropped: the next fetch starts on a fresh connection
            await broker.done.wait()
        conn.close()


# -- TLS and SASL on the own connection, against a fake broker ------------------------------


class _SaslBroker:
    """A loopback broker speaking SaslHandshake v1, SaslAuthenticate v1 (PLAIN) and Fetch v11.

    Args:
        password: the password PLAIN accepts (user ``alice``).
        lifetime_ms: the session lifetime sent in each SaslAuthenticate answer (KIP-368).
        handshake_error: error code of every SaslHandshake answer (33, 34) instead of 0.
        oauth_challenge: answer the first SaslAuthenticate with this error challenge (no
            error code), and the next with SASL_AUTHENTICATION_FAILED.
        tls_alert: answer every request with a TLS alert record instead.
    """

    MECHANISMS = ("PLAIN", "SCRAM-SHA-512")

    def __init__(
        self,
        *,
        password: str = "secret",
        lifetime_ms: int = 0,
        handshake_error: int = 0,
        oauth_challenge: bytes | None = None,
        tls_alert: bool = False,
    ) -> None:
        self.password = password
        self.lifetime_ms = lifetime_ms
        self.handshake_error = handshake_error
        self.oauth_challenge = oauth_challenge
        self.tls_alert = tls_alert
        self.connections: list[float] = []  # loop times of the accepted connections
        self.handshakes = 0
        self.authentications = 0
        self.fetches = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from aiokafka.protocol.admin import SaslAuthenticateResponse_v1, SaslHandShakeResponse_v1

        self.connections.append(asyncio.get_running_loop().time())
        authenticated = False
        challenged = False
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, _version, corr, id_len = struct.unpack_from(">hhih", frame)
                body = frame[10 + id_len :]
                if self.tls_alert:
                    writer.write(b"\x15\x03\x03\x00\x02\x02\x28")
                elif api_key == 17:
                    self.handshakes += 1
                    answer = SaslHandShakeResponse_v1(self.handshake_error, list(self.MECHANISMS))
                    writer.write(_frame(corr, answer.encode()))
                elif api_key == 36:
                    (n,) = struct.unpack_from(">i", body)
                    payload = body[4 : 4 + n]
                    if self.oauth_challenge is not None and not challenged:
                        challenged = True
                        answer = SaslAuthenticateResponse_v1(0, None, self.oauth_challenge, 0)
                    elif payload == b"alice\0alice\0" + self.password.encode():
                        self.authentications += 1
                        authenticated = True
                        answer = SaslAuthenticateResponse_v1(0, None, b"", self.lifetime_ms)
                    else:
                        message = "Authentication failed: Invalid username or password"
                        answer = SaslAuthenticateResponse_v1(58, message, b"", 0)
                    writer.write(_frame(corr, answer.encode()))
                elif api_key == 1 and authenticated:
                    self.fetches += 1
                    writer.write(_encoded(11, corr, TOPICS))
                else:
                    break  # a request before authentication: the broker hangs up
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def _frame(correlation_id: int, body: bytes) -> bytes:
    message = struct.pack(">i", correlation_id) + body
    return struct.pack(">i", len(message)) + message


def _plain(password: str = "secret", **kw: Any) -> KafkaSecurity:
    return KafkaSecurity(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="alice",
        sasl_password=password,
        **kw,
    )


@contextlib.asynccontextmanager
async def _serving(broker: _SaslBroker, ssl_context: Any = None) -> AsyncIterator[tuple[str, int]]:
    server = await asyncio.start_server(broker.handle, "127.0.0.1", 0, ssl=ssl_context)
    async with server:
        yield "127.0.0.1", int(server.sockets[0].getsockname()[1])


def _fetch_v11() -> Any:
    return FetchRequest(100, 1, 1 << 20, 0, [("alpha", [(0, 0, 1 << 20)])]).build(_v11())


async def test_sasl_runs_before_the_first_fetch_and_again_when_the_session_is_due() -> None:
    import dataclasses

    broker = _SaslBroker(lifetime_ms=60_000)
    async with _serving(broker) as address:
        conn = FetchConnection(1, lambda: address, "test", 5.0, security=_plain())
        try:
            with anyio.fail_after(10):
                first = await conn.fetch(_fetch_v11(), 100)
                assert [t for t, _ in first.topics] == [t for t, _ in TOPICS]
                session = conn.session
                assert session is not None and session.lifetime_ms == 60_000
                assert session.reauthenticate_at is not None
                share = (session.reauthenticate_at - session.started) / 60
                assert 0.85 <= share <= 0.95  # the Java client's window
                await conn.fetch(_fetch_v11(), 100)  # not due: no re-authentication
                assert (broker.handshakes, conn.reauthentications) == (1, 0)
                # Due: the next fetch re-authenticates first, on the same connection.
                conn._session = dataclasses.replace(session, reauthenticate_at=0.0)
                await conn.fetch(_fetch_v11(), 100)
        finally:
            conn.close()
    assert len(broker.connections) == 1 and conn.connects == 1
    assert (broker.handshakes, broker.authentications, broker.fetches) == (2, 2, 3)
    assert conn.reauthentications == 1


async def test_a_session_without_lifetime_is_never_reauthenticated() -> None:
    broker = _SaslBroker(lifetime_ms=0)
    async with _serving(broker) as address:
        conn = FetchConnection(1, lambda: address, "test", 5.0, security=_plain())
        try:
            with anyio.fail_after(10):
                for _ in range(3):
                    await conn.fetch(_fetch_v11(), 100)
        finally:
            conn.close()
    assert conn.session is None  # closed
    assert (broker.handshakes, broker.fetches, conn.reauthentications) == (1, 3, 0)


async def test_a_refused_password_is_an_authentication_error_retried_after_the_backoff() -> None:
    broker = _SaslBroker(password="right")
    security = _plain("wrong", reconnect_backoff_max_ms=300)
    async with _serving(broker) as address:
        conn = FetchConnection(1, lambda: address, "test", 5.0, security=security)
        try:
            with anyio.fail_after(10):
                for _ in range(2):
                    with pytest.raises(AuthenticationError) as info:
                        await conn.fetch(_fetch_v11(), 100)
                    assert type(info.value) is AuthenticationError
                    assert info.value.mechanism == "PLAIN"
                    assert info.value.broker == f"{address[0]}:{address[1]}"
                    assert "Invalid username or password" in str(info.value)
                    assert "wrong" not in str(info.value)
                    assert not conn.connected
        finally:
            conn.close()
    first, second = broker.connections
    assert second - first >= 0.3  # one attempt per reconnect.backoff.max.ms, no storm
    assert broker.fetches == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"handshake_error": 33}, "does not enable PLAIN; its mechanisms are PLAIN, SCRAM"),
        ({"handshake_error": 34}, "does not use SASL.*security.protocol=PLAINTEXT"),
        ({"tls_alert": True}, "speaks TLS.*security.protocol=SSL or SASL_SSL"),
    ],
    ids=["unsupported-mechanism", "no-sasl-listener", "tls-port"],
)
async def test_what_the_broker_answers_the_handshake_is_named(
    kwargs: dict[str, Any], match: str
) -> None:
    broker = _SaslBroker(**kwargs)
    async with _serving(broker) as address:
        conn = FetchConnection(1, lambda: address, "test", 5.0, security=_plain())
        try:
            with anyio.fail_after(10), pytest.raises(AuthenticationError, match=match):
                await conn.fetch(_fetch_v11(), 100)
        finally:
            conn.close()


async def test_a_refused_oauth_token_ends_the_exchange_with_its_status() -> None:
    class Tokens:
        async def token(self) -> str:
            return "not-a-jwt"

    from aiozkconsumer.kafka.oauth import refreshing

    broker = _SaslBroker(oauth_challenge=b'{"status":"invalid_token"}')
    security = KafkaSecurity(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER", token_provider=Tokens()
    )
    provider = refreshing(security.token_provider)
    async with _serving(broker) as address:
        conn = FetchConnection(
            1, lambda: address, "test", 5.0, security=security, token_provider=provider
        )
        try:
            with anyio.fail_after(10), pytest.raises(AuthenticationError) as info:
                await conn.fetch(_fetch_v11(), 100)
        finally:
            conn.close()
    assert "refused the token (status invalid_token)" in str(info.value)
    assert "Invalid username or password" in str(info.value)  # the broker's final word
    assert "not-a-jwt" not in str(info.value)


def _tls_contexts() -> tuple[Any, Any, Any]:
    import ssl

    import trustme

    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    untrusting = ssl.create_default_context()
    trustme.CA().configure_trust(untrusting)
    return server, client, untrusting


@pytest.mark.parametrize("io_thread", [True, False], ids=["io-thread", "event-loop"])
async def test_tls_and_sasl_under_either_receiver(io_thread: bool) -> None:
    """asyncio's SSL transport, or the I/O thread's SSL socket, decrypts into the buffers
    the parser hands out; the SASL exchange runs from the loop over either."""
    server_ctx, client_ctx, _ = _tls_contexts()
    broker = _SaslBroker()
    security = _plain(ssl_context=client_ctx)
    security = KafkaSecurity(**{**security.__dict__, "security_protocol": "SASL_SSL"})
    async with _serving(broker, server_ctx) as address:
        conn = FetchConnection(
            1, lambda: address, "test", 5.0, security=security, io_thread=io_thread
        )
        try:
            with anyio.fail_after(10):
                response = await conn.fetch(_fetch_v11(), 100)
                assert (conn._link is not None) is io_thread
                again = await conn.fetch(_fetch_v11(), 100)
        finally:
            conn.close()
    assert [p[-1] for p in response.topics[0][1]] == TOPICS[0][1]
    assert again.topics == response.topics
    assert broker.authentications == 1 and conn.connects == 1


async def test_an_untrusted_certificate_is_an_ssl_authentication_error() -> None:
    server_ctx, _, untrusting = _tls_contexts()
    security = KafkaSecurity(security_protocol="SSL", ssl_context=untrusting)
    async with _serving(_SaslBroker(), server_ctx) as address:
        conn = FetchConnection(1, lambda: address, "test", 5.0, security=security)
        try:
            with anyio.fail_after(10), pytest.raises(SslAuthenticationError) as info:
                await conn.fetch(_fetch_v11(), 100)
        finally:
            conn.close()
    assert "certificate verify failed" in str(info.value)
    assert info.value.broker == f"{address[0]}:{address[1]}"


def test_the_frame_reader_takes_a_frame_in_any_pieces_and_spots_tls() -> None:
    from aiozkconsumer.kafka.fetch_connection import TlsAnswerError, _FrameReader

    data = struct.pack(">i", 5) + b"hello"
    for step in (1, 2, 3, 9):
        reader = _FrameReader()
        pos = 0
        while not reader.done:
            buf = reader.buffer()
            n = min(step, len(buf))
            buf[:n] = data[pos : pos + n]
            pos += n
            reader.filled(n)
        assert reader.response == b"hello" and pos == len(data)
    reader = _FrameReader()
    reader.buffer()[:4] = b"\x15\x03\x03\x00"
    with pytest.raises(TlsAnswerError):
        reader.filled(4)


def test_reauthentication_comes_at_85_to_95_percent_of_the_session() -> None:
    from aiozkconsumer.kafka.auth import reauthentication_delay

    rng = random.Random(7)
    delays = [reauthentication_delay(10_000, rng) for _ in range(200)]
    assert all(d is not None and 8.5 <= d <= 9.5 for d in delays)
    assert max(d for d in delays if d) - min(d for d in delays if d) > 0.5  # jittered
    assert reauthentication_delay(0) is None


def test_tls_failures_are_explained() -> None:
    import ssl

    from aiozkconsumer.kafka.auth import tls_failure_reason

    mismatch = ssl.SSLCertVerificationError(1, "certificate verify failed")
    mismatch.verify_code = 64
    mismatch.verify_message = "IP address mismatch, certificate is not valid for '10.0.0.1'."
    assert (tls_failure_reason(mismatch, "10.0.0.1") or "").startswith("hostname mismatch")
    untrusted = ssl.SSLCertVerificationError(1, "certificate verify failed")
    untrusted.verify_code = 20
    untrusted.verify_message = "unable to get local issuer certificate"
    reason = tls_failure_reason(ConnectionError("lost"), "h")
    assert reason is None
    wrapped = ConnectionError("lost")
    wrapped.__cause__ = untrusted
    assert (tls_failure_reason(wrapped, "h") or "").startswith("certificate verify failed")
    eof = ssl.SSLEOFError(8, "EOF occurred in violation of protocol")
    assert "does not speak TLS" in (tls_failure_reason(eof, "h", handshake=True) or "")
    assert tls_failure_reason(eof, "h") is None  # after the handshake: a dropped connection
    assert "does not speak TLS" in (
        tls_failure_reason(ConnectionResetError(), "h", handshake=True) or ""
    )


# -- the I/O thread (io_thread=True, fetch.io.thread.enable) --------------------------------


@pytest.mark.parametrize("hang_up", ["reset", "close"])
@pytest.mark.parametrize("io_thread", [True, False], ids=["io-thread", "event-loop"])
async def test_a_broker_gone_mid_response_is_broker_not_available(
    io_thread: bool, hang_up: str
) -> None:
    """Half a response (a record set cut in its middle), then the broker is gone."""
    big: list[tuple[str, list[bytes | None]]] = [("alpha", [b"x" * 300_000, b"y" * 300_000])]
    broker = _FakeBroker(lambda corr: _encoded(11, corr, big)[:400_000], hang_up=hang_up)
    server = await asyncio.start_server(broker.handle, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    async with server:
        conn = FetchConnection(1, lambda: ("127.0.0.1", port), "test", 5.0, io_thread=io_thread)
        request = FetchRequest(100, 1, 1 << 20, 0, [("alpha", [(0, 0, 1 << 20)])])
        with anyio.fail_after(10):
            with pytest.raises(BrokerNotAvailableError):
                await conn.fetch(request.build(_v11()), 100)
            assert not conn.connected
            await broker.done.wait()
        conn.close()
        conn.close()  # twice: never raises


async def _wait_released(link: Any) -> None:
    """Until the I/O thread has let go of the link's socket (and closed it)."""
    with anyio.fail_after(5):
        while True:
            if not link._busy and link._sock.fileno() == -1:
                return
            await anyio.sleep(0.01)


async def _busy_link(conn: FetchConnection) -> Any:
    """The connection's link once its thread is in a request."""
    while True:
        link = conn._link
        if link is not None and link._busy:
            return link
        await anyio.sleep(0.01)


@pytest.mark.parametrize("how", ["cancelled", "timed-out"])
async def test_a_fetch_given_up_on_closes_the_connection_and_frees_the_thread(how: str) -> None:
    """The broker holds the request: cancelling the fetch (or its time limit) shuts the
    socket down, so the thread blocked receiving returns and closes it; the next fetch
    connects again."""
    broker = _FakeBroker(None)
    server = await asyncio.start_server(broker.handle, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    timeout_s = 0.3 if how == "timed-out" else 30.0
    async with server:
        conn = FetchConnection(1, lambda: ("127.0.0.1", port), "test", timeout_s, io_thread=True)
        request = FetchRequest(100, 1, 1 << 20, 0, [("t", [(0, 0, 1 << 20)])]).build(_v11())
        started = asyncio.get_running_loop().time()
        links: list[Any] = []

        async def watch() -> None:
            links.append(await _busy_link(conn))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                if how == "cancelled":
                    with anyio.move_on_after(0.3) as scope:
                        await conn.fetch(request, 100)
                    assert scope.cancelled_caught
                else:
                    with pytest.raises(BrokerNotAvailableError, match="TimeoutError"):
                        await conn.fetch(request, 100)
            assert conn._link is None and not conn.connected
            await _wait_released(links[0])
            await broker.done.wait()  # the broker saw the connection go
        assert asyncio.get_running_loop().time() - started < 5
        conn.close()


async def test_the_thread_lets_go_of_a_socket_closed_under_it() -> None:
    broker = _FakeBroker(None)
    server = await asyncio.start_server(broker.handle, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    async with server:
        conn = FetchConnection(1, lambda: ("127.0.0.1", port), "test", 30.0, io_thread=True)
        request = FetchRequest(100, 1, 1 << 20, 0, [("t", [(0, 0, 1 << 20)])]).build(_v11())
        failed: list[BaseException] = []

        async def fetch() -> None:
            try:
                await conn.fetch(request, 100)
            except BrokerNotAvailableError as e:
                failed.append(e)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(fetch)
                link = await _busy_link(conn)
                conn.close()  # from the loop, while the thread is blocked receiving
                await _wait_released(link)
        assert not conn.connected
        assert len(failed) == 1  # the request in flight failed


def _batches(base: int, count: int, per_batch: int) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    out = bytearray()
    for b in range(count):
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 22)
        for i in range(per_batch):
            builder.append(i, 1_700_000_000_000, b"k%d" % i, b"v" * 700, [])
        raw = bytearray(builder.build())
        raw[0:8] = struct.pack(">q", base + b * per_batch)
        out += raw
    return bytes(out)


@pytest.mark.parametrize("io_thread", [True, False], ids=["io-thread", "event-loop"])
async def test_record_sets_come_parsed_and_checked_from_the_io_thread(io_thread: bool) -> None:
    """With the native decoder, the thread parses each record set (batch headers, CRCs):
    the loop gets what ``read_record_set`` would give, a corrupt batch named; without it
    (``AIOZKCONSUMER_NATIVE=0``), or on the event loop, nothing is parsed ahead."""
    import functools

    from aiozkconsumer.kafka.records import read_record_set, read_record_sets

    good = _batches(0, 40, 20)
    bad = bytearray(_batches(0, 3, 20))
    bad[-5] ^= 0xFF  # a value byte of the last batch: its CRC no longer matches
    topics: list[tuple[str, list[bytes | None]]] = [("alpha", [good, bytes(bad)])]
    broker = _FakeBroker(lambda corr: _encoded(11, corr, topics))
    server = await asyncio.start_server(broker.handle, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    async with server:
        conn = FetchConnection(1, lambda: ("127.0.0.1", port), "test", 5.0, io_thread=io_thread)
        request = FetchRequest(100, 1, 1 << 20, 0, [("alpha", [(0, 0, 1 << 20)])])
        after = functools.partial(read_record_sets, check_crcs=True)
        try:
            with anyio.fail_after(10):
                response = await conn.fetch(request.build(_v11()), 100, after=after)
        finally:
            conn.close()
    parts = response.topics[0][1]
    assert [bytes(p[-1] or b"") for p in parts] == [good, bytes(bad)]
    if not (io_thread and native.AVAILABLE):
        assert response.record_sets == {}
        return
    assert set(response.record_sets) == {TopicPartition("alpha", 0), TopicPartition("alpha", 1)}
    for p in parts:
        tp = TopicPartition("alpha", p[0])
        ahead = response.record_sets[tp]
        here = read_record_set(p[-1], tp, True)
        assert [b.base_offset for b in ahead.batches] == [b.base_offset for b in here.batches]
        assert {k: str(e) for k, e in ahead.corrupt.items()} == {
            k: str(e) for k, e in here.corrupt.items()
        }
    assert list(response.record_sets[TopicPartition("alpha", 1)].corrupt) == [60]
    assert not response.record_sets[TopicPartition("alpha", 0)].corrupt
