"""Interop: a member of ours and a real Java ``KafkaConsumer`` share a ``consumer``-protocol
group (KIP-848) on Kafka 4.3.

The broker splits the partitions between them; no partition is delivered by both at once;
when the Java member leaves, ours takes its partitions over at its committed offsets: every
record exactly once overall.
"""

from __future__ import annotations

import anyio
import pytest

from aiozkconsumer import ConnectorState, ConsumerConfig, TopicPartition, create_connector
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.java_member import JavaConsumerMember

pytestmark = pytest.mark.integration

PARTITIONS = 4
PER_PARTITION = 20


@pytest.mark.parametrize("assignor", ["uniform", "range"])
async def test_our_member_and_a_java_member_share_a_consumer_protocol_group(
    kraft_cluster: LocalCluster, unique_topic: str, unique_group_id: str, assignor: str
) -> None:
    await kraft_cluster.create_topic(unique_topic, PARTITIONS)
    config = ConsumerConfig(
        group_id=unique_group_id,
        group_coordinator="kafka",
        group_protocol="consumer",
        group_remote_assignor=assignor,
        bootstrap_servers=kraft_cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        auto_commit_enable=False,
    )
    ours_seen: dict[tuple[int, int], int] = {}
    grew = anyio.Event()
    all_tps = {TopicPartition(unique_topic, p) for p in range(PARTITIONS)}

    async with create_connector(config) as ours, anyio.create_task_group() as tg:
        java = JavaConsumerMember(
            kraft_cluster,
            unique_group_id,
            [unique_topic],
            group_protocol="consumer",
            assignor=assignor,
            commit="sync",
        )
        await java.start()
        try:
            streams = await ours.create_message_streams({unique_topic: 1})

            async def read() -> None:
                nonlocal grew
                async for msg in streams[unique_topic][0]:
                    key = (msg.partition, msg.offset)
                    ours_seen[key] = ours_seen.get(key, 0) + 1
                    await ours.commit_offsets()
                    grew.set()
                    grew = anyio.Event()

            tg.start_soon(read)
            java_tps = await java.wait_for_assignment(lambda tps: 0 < len(tps) < PARTITIONS, 90)
            with anyio.fail_after(90):
                while not (
                    ours.state is ConnectorState.RUNNING
                    and set(ours.statistics().owned_partitions) | set(java_tps) == all_tps
                    and not set(ours.statistics().owned_partitions) & set(java_tps)
                ):
                    await ours.wait_for_state_change()
            mine = set(ours.statistics().owned_partitions)
            assert len(mine) == len(java_tps) == PARTITIONS // 2  # both assignors balance
            assert ours.statistics().member_id != java.member_id
            # Records arrive once the group is split, so each member reads its own share.
            await kraft_cluster.produce_to_partitions(
                unique_topic,
                {p: [(b"k", b"v%d" % i) for i in range(PER_PARTITION)] for p in range(PARTITIONS)},
            )
            java_count = PER_PARTITION * len(java_tps)
            await java.wait_for(lambda recs: len(recs) >= java_count, 90)
            with anyio.fail_after(90):
                while len(ours_seen) < PER_PARTITION * len(mine):
                    await grew.wait()
        finally:
            await java.stop()
        # The Java member committed and left: ours takes its partitions at their commits.
        with anyio.fail_after(90):
            while set(ours.statistics().owned_partitions) != all_tps:
                await ours.wait_for_state_change()
        await kraft_cluster.produce_to_partitions(
            unique_topic, {p: [(b"k", b"late")] * 3 for p in range(PARTITIONS)}
        )
        with anyio.fail_after(90):
            while len(ours_seen) < PER_PARTITION * len(mine) + 3 * PARTITIONS:
                await grew.wait()
        tg.cancel_scope.cancel()

    java_positions = {(r.partition, r.offset) for r in java.records}
    assert len(java_positions) == len(java.records)  # the Java member delivered each once
    ours_positions = set(ours_seen)
    assert all(n == 1 for n in ours_seen.values())
    assert not java_positions & ours_positions
    everything = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION + 3)}
    assert java_positions | ours_positions == everything
