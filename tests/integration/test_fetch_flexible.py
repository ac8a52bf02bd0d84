"""The newest Fetch versions and fetch sessions against real brokers (Kafka 3.9 and 4.3).

``FetchChannel.fetch_partitions`` with the newest version each broker offers (3.9: v17, 4.3:
v18; topic ids from Metadata v12/v13) returns the records that were produced, the same as
aiokafka's v11 request; a fetch session (KIP-227) survives partitions moving out of and back
into the request, sending only what changed (and an empty request still long-polls); a broker
restart loses it (FETCH_SESSION_ID_NOT_FOUND) and the same fetch opens a new one, as after a
stale epoch (INVALID_FETCH_SESSION_EPOCH); a closed session is gone from the broker.
Throughout, every record is read once: positions advance from what the responses hold, and the
offsets read per partition are exactly ``0 .. n-1`` with the produced keys and values.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords

from aiozkconsumer.kafka.client import FetchChannel, KafkaClient
from aiozkconsumer.kafka.fetch_request import ZERO_UUID, FetchPartition, FlexibleFetchRequest
from aiozkconsumer.kafka.fetch_session import FETCH_SESSION_ID_NOT_FOUND
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing import LocalCluster

pytestmark = pytest.mark.integration

NEWEST = {"zookeeper": 17, "kraft": 18}
"""The newest FetchRequest version of Kafka 3.9 and Kafka 4.3 (their ApiVersions answers)."""


@pytest.fixture
async def kafka(any_cluster: LocalCluster) -> AsyncIterator[KafkaClient]:
    client = KafkaClient(any_cluster.bootstrap_servers, client_id="test-fetch-flexible")
    await client.start()
    try:
        yield client
    finally:
        await client.close()


def _records(data: Any) -> list[tuple[int, bytes | None, bytes | None]]:
    out: list[tuple[int, bytes | None, bytes | None]] = []
    if not data:
        return out
    records = MemoryRecords(bytes(data))
    while (batch := records.next_batch()) is not None:
        out.extend((r.offset, r.key, r.value) for r in batch)
    return out


class Reader:
    """A fetch loop's bookkeeping: positions advanced from the responses, records kept."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.positions: dict[int, int] = {}
        self.read: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {}

    def want(self, partitions: list[int]) -> list[FetchPartition]:
        return [
            FetchPartition(self.topic, p, self.positions.setdefault(p, 0), 1 << 20)
            for p in partitions
        ]

    def take(self, response: Any, asked: list[FetchPartition]) -> int:
        """Record a response; returns the records it held."""
        asked_at = {p.partition: p.fetch_offset for p in asked}
        got = 0
        for topic, parts in response.topics:
            assert topic == self.topic
            for part in parts:
                partition, error = part[0], part[1]
                assert error == 0, f"partition {partition}: error {error}"
                assert partition in asked_at, "a partition the request did not want"
                records = [r for r in _records(part[-1]) if r[0] >= asked_at[partition]]
                if records:
                    assert records[0][0] == self.positions[partition]
                    self.positions[partition] = records[-1][0] + 1
                    self.read.setdefault(partition, []).extend(records)
                    got += len(records)
        return got


def _produced(n_partitions: int, per_partition: int, start: int = 0) -> dict[int, list[Any]]:
    return {
        p: [
            (b"k%d-%d" % (p, i), b"v%d" % i * (i % 7 + 1))
            for i in range(start, start + per_partition)
        ]
        for p in range(n_partitions)
    }


def _check_all_read_once(reader: Reader, produced: dict[int, list[Any]]) -> None:
    for p, records in produced.items():
        got = reader.read.get(p, [])
        assert [o for o, _, _ in got] == list(range(len(records)))  # none lost, none twice
        assert [(k, v) for _, k, v in got] == records


async def _leader(kafka: KafkaClient, topic: str) -> int:
    assert await kafka.refresh_metadata([topic])
    leader = kafka.leader_for(TopicPartition(topic, 0))
    assert leader is not None
    return leader


async def _drain(
    channel: FetchChannel, reader: Reader, partitions: list[int], until: dict[int, int]
) -> int:
    """Fetch ``partitions`` until each reaches its ``until`` position; returns the fetches."""
    fetches = 0
    while any(reader.positions.get(p, 0) < until[p] for p in partitions):
        asked = reader.want(partitions)
        response = await channel.fetch_partitions(
            asked, max_wait_ms=200, min_bytes=1, max_bytes=1 << 20
        )
        reader.take(response, asked)
        fetches += 1
        assert fetches < 200, "no progress"
    return fetches


async def test_the_newest_version_fetches_what_was_produced(
    any_cluster: LocalCluster, kafka: KafkaClient, unique_topic: str
) -> None:
    await any_cluster.create_topic(unique_topic, 3)
    produced = _produced(3, 400)
    await any_cluster.produce_to_partitions(unique_topic, produced)
    node = await _leader(kafka, unique_topic)
    channel = FetchChannel(kafka, node)
    legacy = FetchChannel(kafka, node, max_version=11)  # aiokafka's request, over our connection
    try:
        assert await channel.flexible_version() == NEWEST[any_cluster.flavour]
        assert await legacy.flexible_version() is None
        reader = Reader(unique_topic)
        await _drain(channel, reader, [0, 1, 2], dict.fromkeys(range(3), 400))
        assert channel.last_version == NEWEST[any_cluster.flavour]
        assert channel._topic_ids[unique_topic] != ZERO_UUID  # asked with Metadata v10+
        _check_all_read_once(reader, produced)
        # The same bytes as aiokafka's v11 request returns, partition by partition.
        asked = [FetchPartition(unique_topic, p, 0, 1 << 20) for p in range(3)]
        ours = await channel.fetch_partitions(asked, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20)
        theirs = await legacy.fetch(
            FetchRequest(0, 0, 1 << 20, 0, [(unique_topic, [(p, 0, 1 << 20) for p in range(3)])]),
            0,
        )
        assert legacy.connection.requests == 1
        rows_ours = {(t, p[0]): bytes(p[-1]) for t, ps in ours.topics for p in ps}
        rows_theirs = {(t, p[0]): bytes(p[-1]) for t, ps in theirs.topics for p in ps}
        assert rows_ours == rows_theirs and len(rows_ours) == 3
        # aiokafka's request through the seam when the channel may not go flexible.
        legacy_reader = Reader(unique_topic)
        await _drain(legacy, legacy_reader, [0, 1, 2], dict.fromkeys(range(3), 400))
        _check_all_read_once(legacy_reader, produced)
        assert legacy.last_version is None
    finally:
        channel.close()
        legacy.close()


async def test_a_session_survives_partitions_moving_out_and_in(
    any_cluster: LocalCluster, kafka: KafkaClient, unique_topic: str
) -> None:
    await any_cluster.create_topic(unique_topic, 6)
    first = _produced(6, 50)
    await any_cluster.produce_to_partitions(unique_topic, first)
    node = await _leader(kafka, unique_topic)
    channel = FetchChannel(kafka, node)
    reader = Reader(unique_topic)
    try:
        asked = reader.want(list(range(6)))
        response = await channel.fetch_partitions(
            asked, max_wait_ms=200, min_bytes=1, max_bytes=1 << 20
        )
        reader.take(response, asked)
        full_bytes = channel.connection.bytes_sent  # the full request that opened the session
        await _drain(channel, reader, list(range(6)), dict.fromkeys(range(6), 50))
        stats = channel.session.statistics()
        session_id = stats.session_id
        assert session_id != 0 and stats.sessions_opened == 1 and stats.full_requests == 1
        sent = channel.connection.bytes_sent
        # Nothing new: the next request carries the 6 positions the last records moved;
        # the one after carries no partition at all. The broker waits, answers none (no
        # news), and the session goes on.
        for _ in range(2):
            sent = channel.connection.bytes_sent
            asked = reader.want(list(range(6)))
            started = time.monotonic()
            idle = await channel.fetch_partitions(
                asked, max_wait_ms=300, min_bytes=1, max_bytes=1 << 20
            )
            assert idle.topics == [] and idle.session_id == session_id
        idle_bytes = channel.connection.bytes_sent - sent
        # The request named no partition, yet the broker held it for the session's (implied)
        # ones: a fetch loop with nothing to read long-polls rather than spins.
        assert time.monotonic() - started >= 0.25
        # Partitions 4 and 5 leave the request (forgotten), records arrive for every
        # partition, 0-3 are read; then 4 and 5 come back where they were left.
        second = _produced(6, 30, start=50)
        await any_cluster.produce_to_partitions(unique_topic, second)
        await _drain(channel, reader, [0, 1, 2, 3], dict.fromkeys(range(4), 80))
        assert 4 not in [p for _, p in channel.session.session_partitions]
        await _drain(channel, reader, list(range(6)), dict.fromkeys(range(6), 80))
        # One partition out, one in, and back.
        await _drain(channel, reader, [1, 2, 3, 4, 5], dict.fromkeys(range(6), 80))
        third = _produced(6, 20, start=80)
        await any_cluster.produce_to_partitions(unique_topic, third)
        await _drain(channel, reader, list(range(6)), dict.fromkeys(range(6), 100))
        stats = channel.session.statistics()
        assert stats.session_id == session_id, "the session survived"
        assert stats.full_requests == 1 and stats.sessions_opened == 1
        assert stats.incremental_requests >= 4 and stats.session_errors == 0
        # An incremental request with nothing changed is smaller than the full one was.
        assert idle_bytes < full_bytes - 6 * 33  # 33 bytes per partition in a full one
        produced = {p: first[p] + second[p] + third[p] for p in range(6)}
        _check_all_read_once(reader, produced)
    finally:
        channel.close()


async def test_a_broker_restart_drops_the_session_and_the_next_fetch_opens_one(
    any_cluster: LocalCluster, kafka: KafkaClient, unique_topic: str
) -> None:
    await any_cluster.create_topic(unique_topic, 2)
    before = _produced(2, 100)
    await any_cluster.produce_to_partitions(unique_topic, before)
    node = await _leader(kafka, unique_topic)
    channel = FetchChannel(kafka, node)
    reader = Reader(unique_topic)
    try:
        await _drain(channel, reader, [0, 1], {0: 100, 1: 100})
        after = _produced(2, 50, start=100)
        await any_cluster.produce_to_partitions(unique_topic, after)  # read after the restart
        old = channel.session.statistics()
        assert old.session_id != 0
        await any_cluster.restart_broker(node)
        # restart_broker returns once the broker is registered; the topic is served a moment
        # later (the kit has no public wait for that: its own create_topic one).
        await any_cluster._wait_topic_ready(unique_topic, 2)
        # The connection was closed by the restart: the next fetch reconnects and sends the
        # old session's next incremental request; the new broker process does not know it
        # (FETCH_SESSION_ID_NOT_FOUND) and the channel asks again at once with a full one.
        assert not channel.connection.connected
        asked = reader.want([0, 1])
        response = await channel.fetch_partitions(
            asked, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20
        )
        new = channel.session.statistics()
        assert new.session_errors == old.session_errors + 1
        assert new.sessions_opened == old.sessions_opened + 1
        assert new.session_id not in (0, old.session_id)
        assert new.full_requests == old.full_requests + 1
        reader.take(response, asked)
        await _drain(channel, reader, [0, 1], {0: 150, 1: 150})
        _check_all_read_once(reader, {p: before[p] + after[p] for p in range(2)})
    finally:
        channel.close()


async def test_a_closed_session_is_gone_from_the_broker(
    any_cluster: LocalCluster, kafka: KafkaClient, unique_topic: str
) -> None:
    await any_cluster.create_topic(unique_topic, 1)
    await any_cluster.produce_to_partitions(unique_topic, _produced(1, 5))
    node = await _leader(kafka, unique_topic)
    channel = FetchChannel(kafka, node)
    try:
        reader = Reader(unique_topic)
        await _drain(channel, reader, [0], {0: 5})
        meta = channel.session.next_metadata
        assert meta.session_id != 0 and not meta.is_full
        version = channel.last_version
        assert version is not None
        await channel.close_session()
        assert channel.session.session_id == 0
        # The old session's next incremental request is refused: the broker dropped it.
        stale = FlexibleFetchRequest(
            version, 0, 0, 1 << 20, session_id=meta.session_id, session_epoch=meta.epoch
        )
        answer = await channel.connection.fetch(stale, 0)
        assert answer.error_code == FETCH_SESSION_ID_NOT_FOUND
    finally:
        channel.close()


async def test_a_stale_epoch_is_refused_and_the_same_fetch_opens_a_new_session(
    any_cluster: LocalCluster, kafka: KafkaClient, unique_topic: str
) -> None:
    await any_cluster.create_topic(unique_topic, 2)
    produced = _produced(2, 60)
    await any_cluster.produce_to_partitions(unique_topic, {p: r[:30] for p, r in produced.items()})
    node = await _leader(kafka, unique_topic)
    channel = FetchChannel(kafka, node)
    reader = Reader(unique_topic)
    try:
        await _drain(channel, reader, [0, 1], {0: 30, 1: 30})
        meta = channel.session.next_metadata
        version = channel.last_version
        assert not meta.is_full and version is not None
        # Someone else's request in the session moves the broker's epoch past ours.
        other = FlexibleFetchRequest(
            version, 0, 0, 1 << 20, session_id=meta.session_id, session_epoch=meta.epoch
        )
        assert (await channel.connection.fetch(other, 0)).error_code == 0
        await any_cluster.produce_to_partitions(
            unique_topic, {p: r[30:] for p, r in produced.items()}
        )
        old = channel.session.statistics()
        asked = reader.want([0, 1])
        response = await channel.fetch_partitions(
            asked, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20
        )
        new = channel.session.statistics()
        # INVALID_FETCH_SESSION_EPOCH, then a full request closing the old session and
        # opening another, in the same call.
        assert new.session_errors == old.session_errors + 1
        assert new.sessions_opened == old.sessions_opened + 1
        assert new.session_id not in (0, meta.session_id)
        reader.take(response, asked)
        await _drain(channel, reader, [0, 1], {0: 60, 1: 60})
        _check_all_read_once(reader, produced)
    finally:
        channel.close()
