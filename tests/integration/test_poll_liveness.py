"""Poll liveness (``max.poll.interval.ms``) on real brokers, both Kafka group protocols.

Two members of one group; one reader takes a record and hangs (a handler that never returns)
for twice ``max.poll.interval.ms`` and until the other member owns everything: its member
commits what it consumed, leaves, and its partitions move to the other member within the
interval plus a heartbeat; when the reader asks again, it rejoins. Nothing is lost, and the
only duplicates are records after the last commit.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio
import pytest
from _support import until_any

from aiozkconsumer import (
    ConnectorState,
    ConsumerConfig,
    KafkaConsumerConnector,
    MessageAndMetadata,
    TopicPartition,
)
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.stream import KafkaStream
from aiozkconsumer.testing import LocalCluster

pytestmark = pytest.mark.integration

INTERVAL_MS = 3000
PARTITIONS = 4
# A rebalance's own round trips on a loaded two-core machine, on top of interval + heartbeat.
SLACK_S = 4.0


def _config(cluster: LocalCluster, group: str, protocol: str) -> ConsumerConfig:
    kw: dict[str, Any] = {}
    if protocol == "classic":
        kw.update(session_timeout_ms=10000, heartbeat_interval_ms=1000)
    return ConsumerConfig(
        group_id=group,
        group_coordinator="kafka",
        group_protocol=protocol,
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        # Commits happen only when partitions are given up: what the poll timeout commits
        # is visible as such.
        auto_commit_interval_ms=60000,
        max_poll_interval_ms=INTERVAL_MS,
        **kw,
    )


class Deliveries:
    """Who handed out which (partition, offset), with an event per growth."""

    def __init__(self) -> None:
        self.by: dict[tuple[int, int], list[str]] = {}
        self.first: dict[tuple[str, int], int] = {}  # (member, partition): first offset
        self._grew = anyio.Event()

    def add(self, member: str, msg: MessageAndMetadata) -> None:
        self.by.setdefault((msg.partition, msg.offset), []).append(member)
        self._grew.set()
        self._grew = anyio.Event()

    async def wait_for(self, keys: set[tuple[int, int]], limit_s: float = 60) -> None:
        with anyio.fail_after(limit_s):
            while not keys <= self.by.keys():
                await self._grew.wait()

    def of(self, member: str, partition: int) -> list[int]:
        return sorted(o for (p, o), who in self.by.items() if p == partition and member in who)


def _owned(c: ConsumerConnector) -> set[TopicPartition]:
    return set(c.statistics().owned_partitions)


async def _hung_reader_leaves_and_rejoins(
    cluster: LocalCluster, topic: str, group: str, protocol: str, heartbeat_s: float, caplog: Any
) -> None:
    await cluster.create_topic(topic, PARTITIONS)
    await cluster.produce_to_partitions(
        topic, {p: [(b"k", b"v%d" % i) for i in range(10)] for p in range(PARTITIONS)}
    )
    everything = {TopicPartition(topic, p) for p in range(PARTITIONS)}
    seen = Deliveries()
    hold_started = 0.0
    held: MessageAndMetadata | None = None
    holding = anyio.Event()
    release_reader = anyio.Event()  # the hung handler's "never": set once the test saw enough

    async def read(stream: KafkaStream, member: str, hang: bool) -> None:
        nonlocal hold_started, held
        async for msg in stream:
            seen.add(member, msg)
            if hang and held is None:
                held, hold_started = msg, time.monotonic()
                holding.set()
                await release_reader.wait()

    caplog.set_level(logging.WARNING, logger="aiozkconsumer.group.base")
    async with (
        KafkaConsumerConnector(_config(cluster, group, protocol)) as a,
        KafkaConsumerConnector(_config(cluster, group, protocol)) as b,
    ):
        (stream_a,) = (await a.create_message_streams({topic: 1}))[topic]
        (stream_b,) = (await b.create_message_streams({topic: 1}))[topic]

        def split() -> bool:
            if a.state is not ConnectorState.RUNNING or b.state is not ConnectorState.RUNNING:
                return False
            sa, sb = _owned(a), _owned(b)
            return bool(sa) and bool(sb) and not sa & sb and sa | sb == everything

        await until_any([a, b], split, 60)
        async with anyio.create_task_group() as tg:
            tg.start_soon(read, stream_a, "a", True)
            tg.start_soon(read, stream_b, "b", False)
            with anyio.fail_after(30):
                await holding.wait()
            assert held is not None
            # What a consumed when it hung: the offset after each record it was handed.
            consumed = {p: max(seen.of("a", p)) + 1 for p in range(PARTITIONS) if seen.of("a", p)}
            assert held.partition in consumed
            # Its partitions move to b within the interval plus one heartbeat.
            await until_any([a, b], lambda: _owned(b) == everything, 30)
            moved_s = time.monotonic() - hold_started
            assert moved_s <= INTERVAL_MS / 1000 + heartbeat_s + SLACK_S, moved_s
            assert _owned(a) == set()
            # a committed what it consumed before it left: b starts right after it.
            committed = await b.offset_store.fetch(everything)
            for p, offset in consumed.items():
                assert committed[TopicPartition(topic, p)] == offset, (p, committed, consumed)
            await seen.wait_for({(p, 9) for p in range(PARTITIONS)})
            for p, offset in consumed.items():
                assert seen.of("b", p)[0] == offset, (p, seen.of("b", p), consumed)
            # The hung handler returns after twice the interval (at least).
            await anyio.sleep(hold_started + 2 * INTERVAL_MS / 1000 - time.monotonic())
            assert _owned(a) == set()  # nothing while still hung: no rejoin yet
            warnings = [
                r.getMessage()
                for r in caplog.records
                if "consumer poll timeout has expired" in r.getMessage()
            ]
            assert len(warnings) == 1, warnings
            assert a.consumer_id_string in warnings[0]
            assert f"max.poll.interval.ms={INTERVAL_MS}" in warnings[0]
            assert "leaving group" in warnings[0] and stream_a.name in warnings[0]
            before_rejoin = await b.offset_store.fetch(everything)
            release_reader.set()
            # a asks again: it rejoins and the group splits again.
            await until_any([a, b], split, 60)
            await cluster.produce_to_partitions(
                topic, {p: [(b"k", b"w%d" % i) for i in range(5)] for p in range(PARTITIONS)}
            )
            await seen.wait_for({(p, o) for p in range(PARTITIONS) for o in range(15)})
            tg.cancel_scope.cancel()
    assert a.coordinator.poll_timeouts == 1 and b.coordinator.poll_timeouts == 0
    # Nothing lost; duplicates only from what was not committed when the rejoin began.
    assert {(p, o) for p in range(PARTITIONS) for o in range(15)} <= seen.by.keys()
    for (p, o), who in seen.by.items():
        if len(who) > 1:
            assert o >= before_rejoin[TopicPartition(topic, p)], ((p, o), who, before_rejoin)


async def test_classic_a_hung_reader_leaves_committed_and_rejoins_when_it_reads_again(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str, caplog: Any
) -> None:
    await _hung_reader_leaves_and_rejoins(
        any_cluster, unique_topic, unique_group_id, "classic", 1.0, caplog
    )


async def test_consumer_protocol_a_hung_reader_leaves_committed_and_rejoins_when_it_reads_again(
    kraft_cluster: LocalCluster, unique_topic: str, unique_group_id: str, caplog: Any
) -> None:
    # The broker's group.consumer.heartbeat.interval.ms (5 s by default) paces the heartbeats.
    await _hung_reader_leaves_and_rejoins(
        kraft_cluster, unique_topic, unique_group_id, "consumer", 5.0, caplog
    )
