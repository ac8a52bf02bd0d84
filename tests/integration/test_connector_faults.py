"""Faults of the real servers: session expiry, ZooKeeper outage, broker restart, bad offsets.

These tests stop and restart servers, so they run on a cluster of their own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _support import Seen, config_for, drain

from aiozkconsumer import ConnectorState, ConsumerTimeoutError, ZookeeperConsumerConnector
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.zk import layout

pytestmark = pytest.mark.integration

_MEMBER = Path(__file__).resolve().parents[1] / "_member.py"
"""A member in a process of its own (``tests/_member.py``)."""


def _running(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """Start ``cluster`` in a private loop, yield it, stop it."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(cluster.start())
        yield cluster
    finally:
        loop.run_until_complete(cluster.stop())
        loop.close()


@pytest.fixture(scope="module", params=["zookeeper", "kraft"], ids=["zk", "kraft"])
def fault_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    yield from _running(LocalCluster(flavour=request.param))


async def _topic(cluster: LocalCluster, name: str, partitions: int, per_partition: int) -> None:
    await cluster.create_topic(name, partitions)
    await cluster.produce_to_partitions(
        name, {p: [(b"k", b"v%d" % i) for i in range(per_partition)] for p in range(partitions)}
    )


async def _until(c: ZookeeperConsumerConnector, predicate: Any, limit_s: float = 60) -> None:
    with anyio.fail_after(limit_s):
        while not predicate():
            await c.wait_for_state_change()


async def test_real_session_expiry_reregisters_and_rebalances(
    fault_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(fault_cluster, unique_topic, 2, 10)
    seen = Seen()
    config = config_for(fault_cluster, unique_group_id)
    async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
        streams = await c.create_message_streams({unique_topic: 1})
        tg.start_soon(drain, streams[unique_topic][0], 0, seen)
        await seen.wait_until(lambda: len(set(seen.pairs)) >= 20)
        old = c.zk.session_id
        assert old is not None
        await fault_cluster.expire_session(old, c.zk.raw.session.password)
        await _until(
            c,
            lambda: (
                c.state is ConnectorState.RUNNING
                and c.statistics().rebalances[-1].reason == "new ZooKeeper session"
            ),
        )
        new = c.zk.session_id
        assert new is not None and new != old
        # Registration and ownership belong to the new session.
        zk = c.zk
        got = await zk.get(layout.ids_path(unique_group_id, c.consumer_id_string))
        assert got is not None and got[1].ephemeral_owner == new
        for p in range(2):
            owner = await zk.get(layout.owner_path(unique_group_id, unique_topic, p))
            assert owner is not None and owner[1].ephemeral_owner == new
        # And it keeps consuming.
        await fault_cluster.produce_to_partitions(unique_topic, {0: [(b"k", b"after")]})
        await seen.wait_until(lambda: (0, 10) in seen.pairs)
        tg.cancel_scope.cancel()


async def test_short_zookeeper_outage_holds_records_without_rebalance(
    fault_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(fault_cluster, unique_topic, 1, 5)
    seen = Seen()
    config = config_for(fault_cluster, unique_group_id, zookeeper_session_timeout_ms=10000)
    async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
        streams = await c.create_message_streams({unique_topic: 1})
        tg.start_soon(drain, streams[unique_topic][0], 0, seen)
        await seen.wait_until(lambda: len(seen.pairs) >= 5)
        session, rebalances = c.zk.session_id, len(c.statistics().rebalances)
        await fault_cluster.stop_zookeeper()
        try:
            await _until(c, lambda: c.state is ConnectorState.SUSPENDED, 30)
            assert not c.gate.open  # records are held back while the session is in doubt
        finally:
            await fault_cluster.start_zookeeper()
        await _until(c, lambda: c.state is ConnectorState.RUNNING, 30)
        assert c.gate.open
        assert c.zk.session_id == session
        await fault_cluster.produce_to_partitions(unique_topic, {0: [(b"k", b"after")]})
        await seen.wait_until(lambda: len(seen.pairs) >= 6)
        assert len(c.statistics().rebalances) == rebalances  # no rebalance
        tg.cancel_scope.cancel()


async def test_broker_restart_loses_nothing_and_does_not_rebalance(
    fault_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(fault_cluster, unique_topic, 2, 2000)
    seen = Seen()
    resume = anyio.Event()
    config = config_for(fault_cluster, unique_group_id, queued_max_message_chunks=1)
    async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
        streams = await c.create_message_streams({unique_topic: 1})
        tg.start_soon(drain, streams[unique_topic][0], 0, seen, 100, resume)
        await seen.wait_until(lambda: len(seen.pairs) >= 100)
        await fault_cluster.restart_broker(fault_cluster.broker_ids[0])
        resume.set()
        await seen.wait_until(lambda: len(set(seen.pairs)) >= 4000, limit_s=120)
        assert len(c.statistics().rebalances) == 1
        tg.cancel_scope.cancel()
    assert set(seen.pairs) == {(p, o) for p in range(2) for o in range(2000)}


async def _until_stats(c: ConsumerConnector, predicate: Any, limit_s: float) -> None:
    """Poll ``c.statistics()`` until ``predicate`` holds (no event announces a fetch)."""
    with anyio.fail_after(limit_s):
        # A snapshot with a clock in it: nothing announces "no fetch answered for 2 s".
        while not predicate(c.statistics()):  # noqa: ASYNC110
            await anyio.sleep(0.05)


async def test_statistics_show_a_broker_that_stopped_answering(
    fault_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    """``seconds_since_fetch`` stays below a second while the broker answers (a fetch is
    answered within fetch.wait.max.ms, records or not), grows while it is frozen, and drops
    again once it answers: the signal a readiness check needs."""
    await _topic(fault_cluster, unique_topic, 1, 10)
    seen = Seen()
    config = config_for(fault_cluster, unique_group_id)
    broker = fault_cluster.broker_ids[0]
    async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
        streams = await c.create_message_streams({unique_topic: 1})
        tg.start_soon(drain, streams[unique_topic][0], 0, seen)
        await seen.wait_until(lambda: len(seen.pairs) >= 10)
        await _until_stats(c, lambda s: s.seconds_since_fetch is not None, 10)
        assert c.statistics().partitions_without_leader == {}
        fault_cluster.pause_broker(broker)
        try:
            await _until_stats(c, lambda s: (s.seconds_since_fetch or 0) > 2.0, 30)
        finally:
            fault_cluster.resume_broker(broker)
        await _until_stats(c, lambda s: (s.seconds_since_fetch or 99) < 1.0, 60)
        await fault_cluster.produce_to_partitions(unique_topic, {0: [(b"k", b"after")]})
        await seen.wait_until(lambda: (0, 10) in seen.pairs)
        tg.cancel_scope.cancel()


async def test_statistics_show_a_group_coordinator_that_stopped_answering(
    fault_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    """With Kafka coordination, ``seconds_since_coordinator`` stays within a heartbeat
    interval while the coordinator answers, grows while its broker is frozen, and drops again
    once it answers (the readiness rule "the group coordinator is unknown"); ZooKeeper
    coordination has none (``None``)."""
    from aiozkconsumer import ConsumerConfig, create_connector

    await _topic(fault_cluster, unique_topic, 1, 10)
    seen = Seen()
    config = ConsumerConfig(
        group_id=unique_group_id,
        group_coordinator="kafka",
        bootstrap_servers=fault_cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        session_timeout_ms=20000,
        heartbeat_interval_ms=500,
    )
    broker = fault_cluster.broker_ids[0]
    async with create_connector(config) as c, anyio.create_task_group() as tg:
        streams = await c.create_message_streams({unique_topic: 1})
        tg.start_soon(drain, streams[unique_topic][0], 0, seen)
        await seen.wait_until(lambda: len(seen.pairs) >= 10)
        await _until_stats(c, lambda s: (s.seconds_since_coordinator or 99) < 1.0, 10)
        fault_cluster.pause_broker(broker)
        try:
            await _until_stats(c, lambda s: (s.seconds_since_coordinator or 0) > 3.0, 30)
        finally:
            fault_cluster.resume_broker(broker)
        await _until_stats(c, lambda s: (s.seconds_since_coordinator or 99) < 1.0, 60)
        tg.cancel_scope.cancel()
    zk_config = config_for(fault_cluster, unique_group_id + "-zk")
    async with ZookeeperConsumerConnector(zk_config) as z:
        assert z.statistics().seconds_since_coordinator is None


async def test_committed_offset_out_of_range_resets_to_smallest(
    fault_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(fault_cluster, unique_topic, 1, 7)
    from aiozkconsumer.zk.client import ZkClient

    zk = ZkClient(fault_cluster.zookeeper_connect)
    await zk.start()
    try:
        await zk.set_or_create(
            layout.offset_path(unique_group_id, unique_topic, 0), layout.encode_offset(1_000_000)
        )
    finally:
        await zk.close()
    seen = Seen()
    config = config_for(fault_cluster, unique_group_id, auto_offset_reset="smallest")
    async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
        streams = await c.create_message_streams({unique_topic: 1})
        tg.start_soon(drain, streams[unique_topic][0], 0, seen)
        await seen.wait_until(lambda: len(seen.pairs) >= 7)
        assert sorted(o for _, o in seen.pairs) == list(range(7))
        tg.cancel_scope.cancel()


async def test_zombie_paused_past_its_session_commits_nothing_and_hands_out_nothing(
    fault_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    """A member frozen past its session timeout (here: the whole event loop blocked, as a
    SIGSTOP or a long GC pause would) must, when it wakes up, neither hand out records of the
    partition another member took meanwhile nor move that member's committed offset back."""
    import subprocess
    import sys
    import time

    from aiozkconsumer import (
        CommitFencedError,
        TopicPartition,
        ZookeeperConnectionError,
        ZookeeperSessionExpiredError,
    )

    await _topic(fault_cluster, unique_topic, 1, 0)
    for i in range(10):  # ten batches, so the zombie stops mid-partition
        await fault_cluster.produce_to_partitions(
            unique_topic, {0: [(b"k", b"%d" % (i * 10 + j)) for j in range(10)]}
        )
    tp = TopicPartition(unique_topic, 0)
    # Consumer ids sort so that the zombie ("a-...") owns the one partition while alive.
    config = config_for(
        fault_cluster,
        unique_group_id,
        consumer_id="a-zombie",
        zookeeper_session_timeout_ms=3000,
        auto_commit_enable=False,
        queued_max_message_chunks=1,
        fetch_message_max_bytes=256,
        consumer_timeout_ms=500,
    )
    member = _MEMBER
    other = subprocess.Popen(  # noqa: ASYNC220 - started once, before anything runs
        [
            sys.executable,
            str(member),
            fault_cluster.zookeeper_connect,
            unique_group_id,
            unique_topic,
            "b-other",
            *([fault_cluster.bootstrap_servers] if fault_cluster.kraft else []),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        async with ZookeeperConsumerConnector(config) as zombie:
            streams = await zombie.create_message_streams({unique_topic: 1})
            it = streams[unique_topic][0].__aiter__()
            first = [await it.__anext__() for _ in range(5)]
            assert [m.offset for m in first] == [0, 1, 2, 3, 4]
            await zombie.commit_offsets()
            assert zombie.statistics().committed_offsets == {tp: 5}
            more = [await it.__anext__() for _ in range(2)]  # consumed 7, committed 5
            token = zombie.topic_registry[tp].fence  # what the zombie's commits are fenced by
            line = await anyio.to_thread.run_sync(other.stdout.readline)  # type: ignore[union-attr]
            assert line.strip() == "ready"  # the other member is in the group, owning nothing

            # Frozen well past the session timeout. Meanwhile the server expires the zombie's
            # session and the other member (its own process) takes the partition, bumps its
            # fencing token and consumes and commits everything.
            time.sleep(3000 / 1000 * 3)  # noqa: ASYNC251 - the freeze IS the test

            # Awake again, before the loop ran anything else: the lease is over.
            with pytest.raises(ZookeeperConnectionError):
                await zombie.commit_offsets()
            # Even past the lease check, its old position is fenced off: the first try may
            # only find the connection dead, or be refused for its expired session (a request
            # is never sent under the session that replaced its own); once ZooKeeper answers
            # again on the new session, the fence refuses.
            with anyio.fail_after(60):
                while True:
                    try:
                        await zombie.offset_store.commit(
                            {tp: more[-1].offset + 1}, fences={tp: token}
                        )
                    except (ZookeeperConnectionError, ZookeeperSessionExpiredError):
                        await zombie.zk.wait_for_state("connected")
                        continue
                    except CommitFencedError:
                        break
                    pytest.fail("the zombie's commit went through")
            # And nothing the new owner already had comes out of the zombie's stream: not the
            # rest of its old chunk, nothing until it has rejoined from the committed offset.
            handed: list[int] = []
            with anyio.fail_after(60):
                while True:
                    try:
                        handed.append((await it.__anext__()).offset)
                    except ConsumerTimeoutError:
                        if zombie.state is ConnectorState.RUNNING and tp in (
                            zombie.statistics().owned_partitions
                        ):
                            break
            assert handed == [], handed
    finally:
        other.terminate()
        await anyio.to_thread.run_sync(other.wait)
        if other.stdout is not None:
            other.stdout.close()
    # The group's committed offset is the new owner's, never moved back.
    from aiozkconsumer.zk.client import ZkClient

    zk = ZkClient(fault_cluster.zookeeper_connect)
    await zk.start()
    try:
        data = await zk.get_data(layout.offset_path(unique_group_id, unique_topic, 0))
        assert data is not None and layout.decode_offset(data) == 100
    finally:
        await zk.close()


@pytest.fixture(scope="module")
def linked_cluster() -> Iterator[LocalCluster]:
    """A cluster whose clients reach ZooKeeper through a proxy that a test can black-hole."""
    yield from _running(LocalCluster(proxy_links=1))


class _LogEvent(logging.Handler):
    """Sets an event when a log message contains ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.event = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


async def test_registration_rides_over_a_zookeeper_link_cut(
    linked_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(linked_cluster, unique_topic, 2, 5)
    link = linked_cluster.link(0)
    config = dataclasses.replace(
        config_for(linked_cluster, unique_group_id, zookeeper_session_timeout_ms=10000),
        zookeeper_connect=link.zookeeper_connect,
    )
    retrying = _LogEvent("registration: ")
    logger = logging.getLogger("aiozkconsumer.connector")
    logger.addHandler(retrying)
    try:
        async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
            await link.cut("zookeeper")  # requests now time out, as in a network partition
            created = anyio.Event()

            async def create() -> None:
                await c.create_message_streams({unique_topic: 1})
                created.set()

            tg.start_soon(create)
            with anyio.fail_after(60):
                await retrying.event.wait()  # the registration failed and is being retried
            await link.heal("zookeeper")
            with anyio.fail_after(60):
                await created.wait()
            assert c.state is ConnectorState.RUNNING
            assert len(c.statistics().owned_partitions) == 2
            got = await c.zk.get(layout.ids_path(unique_group_id, c.consumer_id_string))
            assert got is not None and got[1].ephemeral_owner == c.zk.session_id
    finally:
        logger.removeHandler(retrying)
