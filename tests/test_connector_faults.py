"""Faults of the real servers: session expiry, ZooKeeper outage, broker restart, bad offsets.

These tests stop and restart servers, so they run on a cluster of their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from _support import Seen, config_for, drain

from aiozkconsumer import ConnectorState, ZookeeperConsumerConnector
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.zk import layout

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=["zookeeper", "kraft"], ids=["zk", "kraft"])
def fault_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    cluster = LocalCluster(flavour=request.param)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(cluster.start())
        yield cluster
    finally:
        loop.run_until_complete(cluster.stop())
        loop.close()


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
