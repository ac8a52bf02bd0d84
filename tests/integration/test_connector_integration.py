"""The connector against a real ZooKeeper + Kafka 3.9 (LocalCluster)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from _support import Seen, config_for, drain, members_of, owner_nodes, wait_settled

from aiozkconsumer import (
    ConsumerConfig,
    MessageStreamsExistError,
    ZookeeperConnectionError,
    ZookeeperConsumerConnector,
)
from aiozkconsumer.assignors import AssignmentContext, range_assign
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.subscription import StaticTopicCount
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.zk import layout

pytestmark = pytest.mark.integration


@pytest.fixture
async def topic4(any_cluster: LocalCluster, unique_topic: str) -> AsyncIterator[str]:
    await any_cluster.create_topic(unique_topic, 4)
    records = [(b"k%d" % i, b"v%d" % i) for i in range(10_000)]
    await any_cluster.produce_to_partitions(unique_topic, {p: records[p::4] for p in range(4)})
    yield unique_topic


async def test_group_of_two_reads_everything_and_commits_log_end(
    any_cluster: LocalCluster, topic4: str, unique_group_id: str, any_zk_client: Any
) -> None:
    group = unique_group_id
    seen = Seen()
    config = config_for(any_cluster, group)
    async with (
        ZookeeperConsumerConnector(config) as c0,
        ZookeeperConsumerConnector(config) as c1,
        anyio.create_task_group() as tg,
    ):
        for i, c in enumerate((c0, c1)):
            streams = await c.create_message_streams({topic4: 1})
            tg.start_soon(drain, streams[topic4][0], i, seen)
        await seen.wait_until(lambda: len(set(seen.pairs)) >= 10_000)
        # Both members settled: the owner nodes equal the range plan over both members.
        members = await members_of(any_zk_client, group)
        assert members == sorted([c0.consumer_id_string, c1.consumer_id_string])

        await wait_settled([c0, c1])
        counts = {m: StaticTopicCount(m, {topic4: 1}) for m in members}
        ctx = AssignmentContext.build(group, members[0], counts, {topic4: range(4)})
        plan = range_assign(ctx)
        expected = {tp.partition: str(tid) for per in plan.values() for tp, tid in per.items()}
        assert await owner_nodes(any_zk_client, group, topic4) == expected
        assert set(c0.statistics().owned_partitions) | set(c1.statistics().owned_partitions) == {
            TopicPartition(topic4, p) for p in range(4)
        }
        lags: dict[TopicPartition, int] = {}
        for c in (c0, c1):
            stats = c.statistics()
            assert stats.completed_rebalances >= 1 and stats.session_id == c.zk.session_id
            # Lag is known once a fetch of the partition returned (a member that just took
            # over a partition may not have fetched yet).
            assert set(stats.lag) <= set(stats.owned_partitions)
            lags.update(stats.lag)
            assert stats.consumed_offsets == dict.fromkeys(stats.owned_partitions, 2500)
        assert lags and all(lag == 0 for lag in lags.values())  # everything handed out
        tg.cancel_scope.cancel()
    # Every record was handed out (at least once), and nothing beyond the log.
    assert set(seen.pairs) == {(p, o) for p in range(4) for o in range(2500)}
    # After shutdown the committed offsets equal the log end offsets.
    ends = await any_cluster.log_end_offsets(topic4)
    for p in range(4):
        data = await any_zk_client.get_data(layout.offset_path(group, topic4, p))
        assert layout.decode_offset(data) == ends[p] == 2500
    # Sessions closed: registrations and owner nodes are gone.
    assert await members_of(any_zk_client, group) == []
    assert await owner_nodes(any_zk_client, group, topic4) == {}


async def test_registration_json_is_the_originals(
    any_cluster: LocalCluster, topic4: str, unique_group_id: str, any_zk_client: Any
) -> None:
    config = config_for(any_cluster, unique_group_id, consumer_id="host-1-abc")
    before = int(time.time() * 1000)
    async with ZookeeperConsumerConnector(config) as c:
        await c.create_message_streams({topic4: 2})
        path = layout.ids_path(unique_group_id, f"{unique_group_id}_host-1-abc")
        data, stat = await any_zk_client.get(path)
        assert stat.ephemeral_owner == c.zk.session_id
        text = data.decode()
        expected = (
            r'\{"version":1,"subscription":\{"TOPIC":2\},"pattern":"static","timestamp":"(\d+)"\}'
        ).replace("TOPIC", re.escape(topic4))
        m = re.fullmatch(expected, text)
        assert m, text
        assert before <= int(m.group(1)) <= int(time.time() * 1000)
        owners = await owner_nodes(any_zk_client, unique_group_id, topic4)
        assert owners == {
            0: f"{unique_group_id}_host-1-abc-0",
            1: f"{unique_group_id}_host-1-abc-0",
            2: f"{unique_group_id}_host-1-abc-1",
            3: f"{unique_group_id}_host-1-abc-1",
        }
        assert json.loads(text)["subscription"] == {topic4: 2}


async def test_member_joining_later_takes_over_its_share(
    any_cluster: LocalCluster, topic4: str, unique_group_id: str, any_zk_client: Any
) -> None:
    group = unique_group_id
    seen = Seen()
    config = config_for(
        any_cluster, group, queued_max_message_chunks=1, fetch_message_max_bytes=4096
    )
    async with ZookeeperConsumerConnector(config) as first, anyio.create_task_group() as tg:
        streams = await first.create_message_streams({topic4: 1})
        assert len(first.statistics().owned_partitions) == 4
        # The first member reads 100 records and pauses until the second one has joined.
        resume = anyio.Event()
        tg.start_soon(drain, streams[topic4][0], 0, seen, 100, resume)
        await seen.wait_until(lambda: len(seen.pairs) >= 100)
        async with ZookeeperConsumerConnector(config) as second:
            streams2 = await second.create_message_streams({topic4: 1})
            tg.start_soon(drain, streams2[topic4][0], 1, seen)
            await wait_settled([first, second])
            assert len(first.statistics().owned_partitions) == 2
            owned2 = {tp.partition for tp in second.statistics().owned_partitions}
            owners = await owner_nodes(any_zk_client, group, topic4)
            assert {
                p for p, o in owners.items() if o.startswith(second.consumer_id_string)
            } == owned2
            assert first.statistics().rebalances[-1].reason.startswith("group members changed")
            resume.set()
            await seen.wait_until(lambda: len(set(seen.pairs)) >= 10_000)
            assert seen.by_member[1] == owned2
        tg.cancel_scope.cancel()
    assert set(seen.pairs) == {(p, o) for p in range(4) for o in range(2500)}


async def test_second_create_message_streams_raises(
    any_cluster: LocalCluster, topic4: str, unique_group_id: str
) -> None:
    async with ZookeeperConsumerConnector(config_for(any_cluster, unique_group_id)) as c:
        await c.create_message_streams({topic4: 1})
        with pytest.raises(MessageStreamsExistError):
            await c.create_message_streams({topic4: 1})


async def test_unreachable_zookeeper_fails_within_connection_timeout() -> None:
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = ConsumerConfig(
        group_id="g",
        zookeeper_connect=f"127.0.0.1:{port}",
        zookeeper_connection_timeout_ms=1500,
    )
    t0 = time.monotonic()
    with pytest.raises(ZookeeperConnectionError, match=f"127.0.0.1:{port}"):
        async with ZookeeperConsumerConnector(config):
            pass
    assert time.monotonic() - t0 < 10  # bounded, not hanging (the limit is generous)


async def test_an_error_in_the_block_comes_out_as_itself(
    any_cluster: LocalCluster, unique_group_id: str
) -> None:
    with pytest.raises(KeyError, match="mine"):
        async with ZookeeperConsumerConnector(config_for(any_cluster, unique_group_id)):
            raise KeyError("mine")
