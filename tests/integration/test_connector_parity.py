"""Behaviour the original's users relied on, against a real ZooKeeper + Kafka 3.9.

Includes the expectations of the original's own ZookeeperConsumerConnectorTest: the timeout
error twice from one iterator, a member with an empty subscription steals nothing, listener
callbacks receive the ownership maps.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _support import Seen, config_for, drain, on_log, owner_nodes, wait_settled

from aiozkconsumer import (
    ConnectorState,
    ConsumerRebalanceFailedError,
    ConsumerThreadId,
    ConsumerTimeoutError,
    MessageStreamsExistError,
    ZookeeperConsumerConnector,
)
from aiozkconsumer.subscription import Whitelist
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.zk import layout

pytestmark = pytest.mark.integration


async def _topic(cluster: LocalCluster, name: str, partitions: int, per_partition: int) -> None:
    await cluster.create_topic(name, partitions)
    if per_partition:
        await cluster.produce_to_partitions(
            name,
            {
                p: [(b"k", b"%d-%d" % (p, i)) for i in range(per_partition)]
                for p in range(partitions)
            },
        )


async def test_consumer_timeout_twice_then_a_record(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(any_cluster, unique_topic, 1, 0)
    config = config_for(any_cluster, unique_group_id, consumer_timeout_ms=200)
    async with ZookeeperConsumerConnector(config) as c:
        streams = await c.create_message_streams({unique_topic: 1})
        it = streams[unique_topic][0].__aiter__()
        for _ in range(2):  # the iterator stays usable after a timeout (KAFKA-241)
            with pytest.raises(ConsumerTimeoutError):
                await it.__anext__()
        await any_cluster.produce(unique_topic, [(b"k", b"late")])
        with anyio.fail_after(30):
            while True:
                try:
                    msg = await it.__anext__()
                    break
                except ConsumerTimeoutError:
                    continue
        assert (msg.offset, msg.value) == (0, b"late")


async def test_member_with_empty_topic_map_steals_nothing(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str, any_zk_client: Any
) -> None:
    await _topic(any_cluster, unique_topic, 4, 0)
    config = config_for(any_cluster, unique_group_id)
    async with ZookeeperConsumerConnector(config) as c1:
        await c1.create_message_streams({unique_topic: 2})
        before = await owner_nodes(any_zk_client, unique_group_id, unique_topic)
        assert len(before) == 4
        async with ZookeeperConsumerConnector(config) as c2:
            assert await c2.create_message_streams({}) == {}
            await wait_settled([c1, c2])
            assert c2.statistics().owned_partitions == ()
            assert len(c1.statistics().owned_partitions) == 4
            assert await owner_nodes(any_zk_client, unique_group_id, unique_topic) == before
            data = await any_zk_client.get_data(
                layout.ids_path(unique_group_id, c2.consumer_id_string)
            )
            assert layout.decode_registration(data).subscription == {}


class RecordingListener:
    def __init__(self) -> None:
        self.released: list[dict[str, set[int]]] = []
        self.started: list[tuple[str, dict[str, dict[int, ConsumerThreadId]]]] = []

    async def before_releasing_partitions(self, partition_ownership: dict[str, set[int]]) -> None:
        self.released.append(partition_ownership)

    async def before_starting_fetchers(
        self, consumer_id: str, global_partition_assignment: dict[str, dict[int, ConsumerThreadId]]
    ) -> None:
        self.started.append((consumer_id, global_partition_assignment))


async def test_listener_receives_ownership_and_global_assignment(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(any_cluster, unique_topic, 4, 0)
    config = config_for(any_cluster, unique_group_id)
    listener = RecordingListener()
    async with ZookeeperConsumerConnector(config) as c1:
        c1.set_consumer_rebalance_listener(listener)
        await c1.create_message_streams({unique_topic: 1})
        with pytest.raises(MessageStreamsExistError):
            c1.set_consumer_rebalance_listener(RecordingListener())
        me = c1.consumer_id_string
        assert listener.started[-1] == (
            me,
            {unique_topic: {p: ConsumerThreadId(me, 0) for p in range(4)}},
        )
        async with ZookeeperConsumerConnector(config) as c2:
            await c2.create_message_streams({unique_topic: 1})
            await wait_settled([c1, c2])
            consumer_id, global_map = listener.started[-1]
            assert consumer_id == me
            owners = {str(t) for t in global_map[unique_topic].values()}
            assert owners == {f"{c1.consumer_id_string}-0", f"{c2.consumer_id_string}-0"}
            assert sorted(global_map[unique_topic]) == [0, 1, 2, 3]
            # Before releasing, c1 reported exactly the partitions that moved to c2 (the
            # rebalance is incremental: the partitions c1 keeps are never released).
            moved = {p for p, t in global_map[unique_topic].items() if t.consumer != me}
            assert len(moved) == 2
            assert listener.released == [{unique_topic: moved}]
            last = c1.statistics().rebalances[-1]
            assert (last.kept, last.released, last.acquired) == (2, 2, 0)


async def test_ownership_conflict_resolved_within_retries(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str, any_zk_client: Any
) -> None:
    await _topic(any_cluster, unique_topic, 2, 10)
    # Another session holds partition 0 (a previous owner that has not released yet).
    blocker = layout.owner_path(unique_group_id, unique_topic, 0)
    await any_zk_client.ensure_path(layout.owners_dir(unique_group_id, unique_topic))
    await any_zk_client.create(blocker, b"someone-else-0", ephemeral=True)
    config = config_for(any_cluster, unique_group_id, rebalance_backoff_ms=5000)
    waiting = anyio.Event()
    with on_log("aiozkconsumer.zkgroup.owners", waiting, "waiting for the partition ownership"):
        async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
            done = anyio.Event()

            async def subscribe() -> None:
                await c.create_message_streams({unique_topic: 1})
                done.set()

            tg.start_soon(subscribe)
            with anyio.fail_after(30):
                await waiting.wait()
            # The attempt keeps its other claim while it waits for partition 0's owner node
            # (the membership is unchanged, so nobody else plans to take partition 1).
            owners = await owner_nodes(any_zk_client, unique_group_id, unique_topic)
            assert owners[0] == "someone-else-0"
            assert owners[1].startswith(c.consumer_id_string)
            await any_zk_client.delete(blocker)
            with anyio.fail_after(30):
                await done.wait()
            stats = c.statistics()
            assert stats.state is ConnectorState.RUNNING
            assert len(stats.owned_partitions) == 2
            assert stats.rebalances[-1].attempts == 1
            assert stats.failed_rebalance_attempts == 0
            # Waiting for the deletion, not the 5 s backoff.
            assert stats.rebalances[-1].duration_s < 5


async def test_a_claim_conflict_past_the_last_attempt_leaves_no_claim_behind(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str, any_zk_client: Any
) -> None:
    await _topic(any_cluster, unique_topic, 2, 10)
    blocker = layout.owner_path(unique_group_id, unique_topic, 0)
    await any_zk_client.ensure_path(layout.owners_dir(unique_group_id, unique_topic))
    await any_zk_client.create(blocker, b"someone-else-0", ephemeral=True)
    config = config_for(
        any_cluster, unique_group_id, rebalance_max_retries=2, rebalance_backoff_ms=100
    )
    async with ZookeeperConsumerConnector(config) as c:
        with pytest.raises(ConsumerRebalanceFailedError):
            await c.create_message_streams({unique_topic: 1})
        # Each failed attempt deleted the claims it made: partition 1 is not held by anyone.
        assert await owner_nodes(any_zk_client, unique_group_id, unique_topic) == {
            0: "someone-else-0"
        }
        assert c.statistics().failed_rebalance_attempts == 2
    await any_zk_client.delete(blocker)


async def test_wildcard_consumes_topics_created_later(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    first, later, other = f"{unique_topic}.a", f"{unique_topic}.b", f"x{unique_topic}"
    await _topic(any_cluster, first, 2, 5)
    await _topic(any_cluster, other, 1, 5)
    seen = Seen()
    config = config_for(any_cluster, unique_group_id)
    async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
        streams = await c.create_message_streams_by_filter(Whitelist(f" '{unique_topic}\\..*' "), 2)
        assert len(streams) == 2
        for s in streams:
            tg.start_soon(drain, s, 0, seen)
        await seen.wait_until(lambda: len(seen.pairs) >= 10)
        await _topic(any_cluster, later, 3, 4)
        await seen.wait_until(lambda: len(seen.pairs) >= 22)
        owned = {(tp.topic, tp.partition) for tp in c.statistics().owned_partitions}
        assert owned == {(first, 0), (first, 1), (later, 0), (later, 1), (later, 2)}
        tg.cancel_scope.cancel()
    assert len(seen.pairs) == 22  # nothing of the topic the filter does not match


async def test_a_static_member_and_a_wildcard_member_split_the_topic(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    """A member with a static subscription reads the cluster's topic list only when some
    registration is a wildcard one; it must then see the wildcard member's topics, or the
    two would plan differently and the wildcard member would get nothing."""
    await _topic(any_cluster, unique_topic, 4, 0)
    config = config_for(any_cluster, unique_group_id)
    async with ZookeeperConsumerConnector(config) as a, ZookeeperConsumerConnector(config) as b:
        await a.create_message_streams({unique_topic: 1})
        await b.create_message_streams_by_filter(Whitelist(unique_topic), 1)
        await wait_settled([a, b])
        owned_a = {tp.partition for tp in a.statistics().owned_partitions}
        owned_b = {tp.partition for tp in b.statistics().owned_partitions}
        assert len(owned_a) == len(owned_b) == 2
        assert owned_a | owned_b == {0, 1, 2, 3}


async def test_malformed_registration_of_another_member_is_left_out(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str, any_zk_client: Any
) -> None:
    await _topic(any_cluster, unique_topic, 2, 3)
    await any_zk_client.ensure_path(layout.ids_dir(unique_group_id))
    await any_zk_client.create(
        layout.ids_path(unique_group_id, "bogus"), b"{not json", ephemeral=True
    )
    seen = Seen()
    config = config_for(any_cluster, unique_group_id)
    async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
        streams = await c.create_message_streams({unique_topic: 1})
        tg.start_soon(drain, streams[unique_topic][0], 0, seen)
        await seen.wait_until(lambda: len(seen.pairs) >= 6)
        assert c.state is ConnectorState.RUNNING
        assert len(c.statistics().owned_partitions) == 2
        tg.cancel_scope.cancel()


async def test_decoders_and_batches(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(any_cluster, unique_topic, 1, 50)
    config = config_for(any_cluster, unique_group_id)
    async with ZookeeperConsumerConnector(config) as c:
        streams = await c.create_message_streams(
            {unique_topic: 1}, key_decoder=bytes.decode, value_decoder=lambda b: b.upper()
        )
        got = []
        with anyio.fail_after(30):
            async for batch in streams[unique_topic][0].batches(max_records=20):
                assert 1 <= len(batch) <= 20
                got.extend(batch)
                if len(got) >= 50:
                    break
        assert [m.offset for m in got] == list(range(50))
        assert got[7].key == "k" and got[7].value == b"0-7".upper()


async def _kafka_group_offsets(cluster: LocalCluster, group: str) -> dict[tuple[str, int], int]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    await admin.start()
    try:
        got = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {(tp.topic, tp.partition): meta.offset for tp, meta in got.items()}


@pytest.mark.parametrize("dual", [False, True], ids=["kafka", "dual"])
async def test_kafka_offset_storage_is_what_kafka_tools_show(
    any_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    any_zk_client: Any,
    dual: bool,
) -> None:
    await _topic(any_cluster, unique_topic, 2, 25)
    config = config_for(
        any_cluster,
        unique_group_id,
        offsets_storage="kafka",
        dual_commit_enabled=dual,
        bootstrap_servers=any_cluster.bootstrap_servers,
    )
    seen = Seen()
    async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
        streams = await c.create_message_streams({unique_topic: 1})
        tg.start_soon(drain, streams[unique_topic][0], 0, seen)
        await seen.wait_until(lambda: len(seen.pairs) >= 50)
        tg.cancel_scope.cancel()
    # What Kafka's own kafka-consumer-groups --describe reads: the group's committed offsets.
    assert await _kafka_group_offsets(any_cluster, unique_group_id) == {
        (unique_topic, 0): 25,
        (unique_topic, 1): 25,
    }
    zk_offset = await any_zk_client.exists(layout.offset_path(unique_group_id, unique_topic, 0))
    assert zk_offset == dual  # dual commit writes ZooKeeper too; Kafka storage alone does not


async def test_selective_commit_of_explicit_offsets(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str, any_zk_client: Any
) -> None:
    from aiozkconsumer import TopicPartition

    await _topic(any_cluster, unique_topic, 2, 5)
    config = config_for(any_cluster, unique_group_id, auto_commit_enable=False)
    async with ZookeeperConsumerConnector(config) as c:
        await c.create_message_streams({unique_topic: 1})
        written = await c.commit_offsets({TopicPartition(unique_topic, 1): 3})
        assert written == 1
        data = await any_zk_client.get_data(layout.offset_path(unique_group_id, unique_topic, 1))
        assert layout.decode_offset(data) == 3
        assert not await any_zk_client.exists(layout.offset_path(unique_group_id, unique_topic, 0))


async def test_malformed_offset_node_is_logged_and_reset(
    any_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    any_zk_client: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await _topic(any_cluster, unique_topic, 1, 4)
    path = layout.offset_path(unique_group_id, unique_topic, 0)
    await any_zk_client.ensure_path(layout.offsets_dir(unique_group_id, unique_topic))
    await any_zk_client.create(path, b"not-an-offset")
    seen = Seen()
    config = config_for(
        any_cluster, unique_group_id, auto_offset_reset="smallest", offsets_malformed_reset=True
    )
    async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
        streams = await c.create_message_streams({unique_topic: 1})
        tg.start_soon(drain, streams[unique_topic][0], 0, seen)
        await seen.wait_until(lambda: len(seen.pairs) >= 4)
        assert c.state is ConnectorState.RUNNING
        tg.cancel_scope.cancel()
    assert any(path in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
    # The final commit replaced the garbage.
    assert layout.decode_offset(await any_zk_client.get_data(path)) == 4


async def test_a_stalled_stream_does_not_block_the_others(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    # Both partitions live on the one broker, so one fetch loop serves both streams. Thirty
    # separate sends make thirty record batches per partition, so thirty fetches each.
    await _topic(any_cluster, unique_topic, 2, 0)
    for i in range(30):
        await any_cluster.produce_to_partitions(
            unique_topic, {p: [(b"k", b"%d" % (i * 100 + j)) for j in range(100)] for p in (0, 1)}
        )
    config = config_for(
        any_cluster,
        unique_group_id,
        queued_max_message_chunks=1,
        fetch_message_max_bytes=2048,  # many small chunks
    )
    seen = Seen()
    async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
        streams = await c.create_message_streams({unique_topic: 2})
        # Stream 1 is never read: its queue fills up at once. Stream 0 must still get all.
        tg.start_soon(drain, streams[unique_topic][0], 0, seen)
        await seen.wait_until(lambda: len(seen.pairs) >= 3000)
        assert {p for p, _ in seen.pairs} == {0}
        tg.cancel_scope.cancel()


async def test_metrics_follow_the_originals_names(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    await _topic(any_cluster, unique_topic, 2, 30)
    config = config_for(any_cluster, unique_group_id, client_id="metrics-test")
    seen = Seen()
    async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
        streams = await c.create_message_streams({unique_topic: 1})
        tg.start_soon(drain, streams[unique_topic][0], 0, seen)
        await seen.wait_until(lambda: len(seen.pairs) >= 60)
        await c.commit_offsets()
        snap = c.metrics.snapshot()
        base = "kafka.consumer:type=ZookeeperConsumerConnector,name="
        topic_meter = (
            "kafka.consumer:type=ConsumerTopicMetrics,name=MessagesPerSec,"
            f"clientId=metrics-test,topic={unique_topic}"
        )
        assert snap[topic_meter]["Count"] == 60
        assert snap[f"{base}RebalanceRateAndTime,clientId=metrics-test"]["Count"] >= 1
        owned = f"{base}OwnedPartitionsCount,clientId=metrics-test,groupId={unique_group_id}"
        assert snap[owned]["Value"] == 2
        assert snap[f"{base}ZooKeeperCommitsPerSec,clientId=metrics-test"]["Count"] == 2
        fetches = (
            "kafka.consumer:type=FetchRequestAndResponseMetrics,"
            "name=FetchRequestRateAndTimeMs,clientId=metrics-test"
        )
        assert snap[fetches]["Count"] >= 1
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry()
        registry.register(c.metrics.collector())
        text = generate_latest(registry).decode()
        assert "kafka_consumer_topic_messages_total" in text
        tg.cancel_scope.cancel()
    assert len(c.metrics) == 0  # removed on shutdown (KAFKA-1567)


async def test_a_listener_that_raises_fails_the_attempt(
    any_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    from aiozkconsumer import ConsumerRebalanceFailedError

    await _topic(any_cluster, unique_topic, 1, 0)

    class Broken(RecordingListener):
        async def before_starting_fetchers(
            self, consumer_id: str, global_partition_assignment: dict[str, Any]
        ) -> None:
            raise ValueError("listener bug")

    config = config_for(
        any_cluster, unique_group_id, rebalance_max_retries=2, rebalance_backoff_ms=10
    )
    async with ZookeeperConsumerConnector(config) as c:
        c.set_consumer_rebalance_listener(Broken())
        with pytest.raises(ConsumerRebalanceFailedError, match="listener bug"):
            await c.create_message_streams({unique_topic: 1})
        stats = c.statistics()
        assert stats.state is ConnectorState.REBALANCE_FAILED
        assert stats.failed_rebalance_attempts == 2 and stats.owned_partitions == ()
