"""Poll liveness in ZooKeeper mode (``zookeeper.poll.liveness.enable``) on a real cluster.

Two ZooKeeper-coordinated members of one group; one reader takes a record and hangs for twice
``max.poll.interval.ms``. With the key set, its member commits what it consumed, deregisters
(its ``/ids`` node goes), and the other member takes every partition from the committed
offsets; when the reader asks again, it registers and rebalances back in, and nothing is lost.
With the key unset (the default, as the original), the hung member keeps its partitions.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio
import pytest
from _support import config_for, members_of, until_any, wait_settled

from aiozkconsumer import MessageAndMetadata, TopicPartition, ZookeeperConsumerConnector
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.stream import KafkaStream
from aiozkconsumer.testing import LocalCluster

pytestmark = pytest.mark.integration

INTERVAL_MS = 2000
PARTITIONS = 4
# The others' watch and one rebalance on a loaded two-core machine, on top of the interval.
SLACK_S = 5.0
LOGGER = "aiozkconsumer.zkgroup.liveness"


class Deliveries:
    """Who handed out which (partition, offset), with an event per growth."""

    def __init__(self) -> None:
        self.by: dict[tuple[int, int], list[str]] = {}
        self._grew = anyio.Event()

    def add(self, member: str, msg: MessageAndMetadata) -> None:
        self.by.setdefault((msg.partition, msg.offset), []).append(member)
        self._grew.set()
        self._grew = anyio.Event()

    async def wait_for(self, keys: set[tuple[int, int]], limit_s: float = 30) -> None:
        with anyio.fail_after(limit_s):
            while not keys <= self.by.keys():
                await self._grew.wait()

    def of(self, member: str, partition: int) -> list[int]:
        return sorted(o for (p, o), who in self.by.items() if p == partition and member in who)


def _owned(c: ConsumerConnector) -> set[TopicPartition]:
    return set(c.statistics().owned_partitions)


def _warnings(caplog: Any) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and "consumer poll timeout has expired" in r.getMessage()
    ]


class HungReader:
    """Two readers; ``a`` hangs on its first record until :attr:`release` is set."""

    def __init__(self) -> None:
        self.seen = Deliveries()
        self.held: MessageAndMetadata | None = None
        self.hold_started = 0.0
        self.holding = anyio.Event()
        self.release = anyio.Event()

    async def read(self, stream: KafkaStream, member: str, hang: bool) -> None:
        async for msg in stream:
            self.seen.add(member, msg)
            if hang and self.held is None:
                self.held, self.hold_started = msg, time.monotonic()
                self.holding.set()
                await self.release.wait()


async def _two_members(
    cluster: LocalCluster, topic: str, group: str, **kw: Any
) -> tuple[ZookeeperConsumerConnector, ZookeeperConsumerConnector]:
    await cluster.create_topic(topic, PARTITIONS)
    await cluster.produce_to_partitions(
        topic, {p: [(b"k", b"v%d" % i) for i in range(10)] for p in range(PARTITIONS)}
    )
    # Commits happen only when partitions are given up: what the poll timeout commits is
    # visible as such.
    cfg = config_for(
        cluster, group, auto_commit_interval_ms=60000, max_poll_interval_ms=INTERVAL_MS, **kw
    )
    return ZookeeperConsumerConnector(cfg), ZookeeperConsumerConnector(cfg)


async def test_a_hung_reader_deregisters_committed_and_rejoins_when_it_reads_again(
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    zk_client: Any,
    caplog: Any,
) -> None:
    topic, group = unique_topic, unique_group_id
    everything = {TopicPartition(topic, p) for p in range(PARTITIONS)}
    r = HungReader()
    caplog.set_level(logging.WARNING, logger=LOGGER)
    a, b = await _two_members(zk_kafka_cluster, topic, group, zookeeper_poll_liveness_enable=True)
    async with a, b:
        (stream_a,) = (await a.create_message_streams({topic: 1}))[topic]
        (stream_b,) = (await b.create_message_streams({topic: 1}))[topic]
        await wait_settled([a, b])

        def split() -> bool:
            sa, sb = _owned(a), _owned(b)
            return bool(sa) and bool(sb) and not sa & sb and sa | sb == everything

        await until_any([a, b], split, 30)
        async with anyio.create_task_group() as tg:
            tg.start_soon(r.read, stream_a, "a", True)
            tg.start_soon(r.read, stream_b, "b", False)
            with anyio.fail_after(20):
                await r.holding.wait()
            assert r.held is not None
            consumed = {
                p: max(r.seen.of("a", p)) + 1 for p in range(PARTITIONS) if r.seen.of("a", p)
            }
            assert r.held.partition in consumed
            # a's partitions move to b within the interval (plus the others' rebalance).
            await until_any([a, b], lambda: _owned(b) == everything, 20)
            moved_s = time.monotonic() - r.hold_started
            assert INTERVAL_MS / 1000 <= moved_s <= INTERVAL_MS / 1000 + SLACK_S, moved_s
            assert _owned(a) == set()
            assert await members_of(zk_client, group) == [b.consumer_id_string]
            # a committed what it consumed before it deregistered: b starts right after it.
            committed = await b.offset_store.fetch(everything)
            for p, offset in consumed.items():
                assert committed[TopicPartition(topic, p)] == offset, (p, committed, consumed)
            await r.seen.wait_for({(p, 9) for p in range(PARTITIONS)})
            for p, offset in consumed.items():
                assert r.seen.of("b", p)[0] == offset, (p, r.seen.of("b", p), consumed)
            # The hung handler returns after twice the interval: no rejoin before.
            await anyio.sleep(r.hold_started + 2 * INTERVAL_MS / 1000 - time.monotonic())
            assert _owned(a) == set()
            assert await members_of(zk_client, group) == [b.consumer_id_string]
            warnings = _warnings(caplog)
            assert len(warnings) == 1, warnings
            assert a.consumer_id_string in warnings[0] and stream_a.name in warnings[0]
            assert f"max.poll.interval.ms={INTERVAL_MS}" in warnings[0]
            before_rejoin = await b.offset_store.fetch(everything)
            r.release.set()
            # a asks again: it registers again and the group splits again.
            await until_any([a, b], split, 30)
            assert await members_of(zk_client, group) == sorted(
                [a.consumer_id_string, b.consumer_id_string]
            )
            await zk_kafka_cluster.produce_to_partitions(
                topic, {p: [(b"k", b"w%d" % i) for i in range(5)] for p in range(PARTITIONS)}
            )
            await r.seen.wait_for({(p, o) for p in range(PARTITIONS) for o in range(15)})
            tg.cancel_scope.cancel()
        assert a.poll_liveness.poll_timeouts == 1 and b.poll_liveness.poll_timeouts == 0
    assert len(_warnings(caplog)) == 1
    # Nothing lost; duplicates only from what was not committed when the rejoin began.
    assert {(p, o) for p in range(PARTITIONS) for o in range(15)} <= r.seen.by.keys()
    for (p, o), who in r.seen.by.items():
        if len(who) > 1:
            assert o >= before_rejoin[TopicPartition(topic, p)], ((p, o), who, before_rejoin)


async def test_off_by_default_a_hung_reader_keeps_its_partitions(
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    zk_client: Any,
    caplog: Any,
) -> None:
    topic, group = unique_topic, unique_group_id
    r = HungReader()
    caplog.set_level(logging.WARNING, logger=LOGGER)
    a, b = await _two_members(zk_kafka_cluster, topic, group)
    assert not a.config.zookeeper_poll_liveness_enable
    async with a, b:
        (stream_a,) = (await a.create_message_streams({topic: 1}))[topic]
        (stream_b,) = (await b.create_message_streams({topic: 1}))[topic]
        await wait_settled([a, b])
        owned_a, owned_b = _owned(a), _owned(b)
        assert owned_a and owned_b
        async with anyio.create_task_group() as tg:
            tg.start_soon(r.read, stream_a, "a", True)
            tg.start_soon(r.read, stream_b, "b", False)
            with anyio.fail_after(20):
                await r.holding.wait()
            # Nothing is to happen: wait out twice the interval, then look.
            await anyio.sleep(r.hold_started + 2 * INTERVAL_MS / 1000 - time.monotonic())
            assert (_owned(a), _owned(b)) == (owned_a, owned_b)
            assert await members_of(zk_client, group) == sorted(
                [a.consumer_id_string, b.consumer_id_string]
            )
            assert _warnings(caplog) == []
            r.release.set()
            await r.seen.wait_for({(p, o) for p in range(PARTITIONS) for o in range(10)})
            tg.cancel_scope.cancel()
        assert a.poll_liveness.poll_timeouts == 0
    # Each record once: nobody else took a's partitions.
    assert all(len(who) == 1 for who in r.seen.by.values()), r.seen.by
