"""A group whose members speak both protocols (KIP-848's online migration), Kafka 4.3.

A classic member of ours (JoinGroup/SyncGroup) reads a group alone; a ``group.protocol=
consumer`` member of ours joins it, which makes the broker convert the classic group into a
consumer group that keeps the classic member (``group.consumer.migration.policy``, bidirectional
by default in Kafka 4); when the consumer member leaves, the group goes back to classic. Across
both hand-overs every record is delivered, and none twice: each member commits what it handed
out before its partitions move. The same with a Java ``KafkaConsumer`` on the consumer-protocol
side.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _support import Seen, drain

from aiozkconsumer import ConsumerConfig, create_connector
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.java_member import JavaConsumerMember
from aiozkconsumer.tools import KafkaGroupAdmin

pytestmark = pytest.mark.integration

PARTITIONS = 4
FIRST = 50  # records per partition before the second member joins
MORE = 50  # records per partition while both read


def _config(cluster: LocalCluster, group: str, protocol: str) -> ConsumerConfig:
    classic: dict[str, Any] = (
        {"session_timeout_ms": 10000, "heartbeat_interval_ms": 500}
        if protocol == "classic"
        else {}
    )
    return ConsumerConfig(
        group_id=group,
        group_coordinator="kafka",
        group_protocol=protocol,
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        auto_commit_interval_ms=500,
        **classic,
    )


async def _produce(cluster: LocalCluster, topic: str, first: int, n: int) -> None:
    await cluster.produce_to_partitions(
        topic, {p: [(b"k", b"%d" % (first + i)) for i in range(n)] for p in range(PARTITIONS)}
    )


async def _group_type(cluster: LocalCluster, group: str) -> str:
    async with KafkaGroupAdmin(cluster.bootstrap_servers) as admin:
        return (await admin.describe_group(group)).group_type


async def _owned(c: ConsumerConnector) -> set[int]:
    return {tp.partition for tp in c.statistics().owned_partitions}


async def _until_owned(connectors: list[ConsumerConnector], limit_s: float = 60) -> None:
    """Until the connectors own every partition between them, each some."""
    with anyio.fail_after(limit_s):
        while True:
            owned = [await _owned(c) for c in connectors]
            if all(owned) and sum(len(o) for o in owned) == PARTITIONS:
                return
            # Several members' snapshots: no one event announces that the group settled.
            await anyio.sleep(0.1)


async def test_a_consumer_protocol_member_joins_a_classic_group_and_leaves_it(
    kraft_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = unique_topic, unique_group_id
    await kraft_cluster.create_topic(topic, PARTITIONS)
    await _produce(kraft_cluster, topic, 0, FIRST)
    seen = Seen()
    classic = create_connector(_config(kraft_cluster, group, "classic"))
    async with classic, anyio.create_task_group() as tg:
        streams = await classic.create_message_streams({topic: 1})
        tg.start_soon(drain, streams[topic][0], 0, seen)
        await seen.wait_until(lambda: len(set(seen.pairs)) >= PARTITIONS * FIRST)
        assert await _group_type(kraft_cluster, group) == "classic"

        consumer = create_connector(_config(kraft_cluster, group, "consumer"))
        async with consumer, anyio.create_task_group() as tg2:
            streams2 = await consumer.create_message_streams({topic: 1})
            tg2.start_soon(drain, streams2[topic][0], 1, seen)
            await _until_owned([classic, consumer])
            assert await _group_type(kraft_cluster, group) == "consumer"  # converted
            await _produce(kraft_cluster, topic, FIRST, MORE)
            await seen.wait_until(lambda: len(set(seen.pairs)) >= PARTITIONS * (FIRST + MORE))
            tg2.cancel_scope.cancel()
        # The consumer member left: the classic one takes everything back.
        await _until_owned([classic])
        await _produce(kraft_cluster, topic, FIRST + MORE, MORE)
        await seen.wait_until(lambda: len(set(seen.pairs)) >= PARTITIONS * (FIRST + 2 * MORE))
        assert await _group_type(kraft_cluster, group) == "classic"  # converted back
        tg.cancel_scope.cancel()
    expected = {(p, o) for p in range(PARTITIONS) for o in range(FIRST + 2 * MORE)}
    assert set(seen.pairs) == expected
    assert len(seen.pairs) == len(expected), "a record was delivered twice"
    assert set(seen.by_member) == {0, 1}  # both members read


async def test_a_java_consumer_protocol_member_shares_a_classic_member_of_ours_group(
    kraft_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = unique_topic, unique_group_id
    await kraft_cluster.create_topic(topic, PARTITIONS)
    await _produce(kraft_cluster, topic, 0, FIRST)
    seen = Seen()
    ours = create_connector(_config(kraft_cluster, group, "classic"))
    async with ours, anyio.create_task_group() as tg:
        streams = await ours.create_message_streams({topic: 1})
        tg.start_soon(drain, streams[topic][0], 0, seen)
        await seen.wait_until(lambda: len(set(seen.pairs)) >= PARTITIONS * FIRST)
        async with JavaConsumerMember(
            kraft_cluster, group, [topic], group_protocol="consumer"
        ) as java:
            await java.wait_for_assignment(bool, 90)
            with anyio.fail_after(60):
                while True:
                    if len(await _owned(ours)) + len(java.assigned_partitions()) == PARTITIONS:
                        break
                    await anyio.sleep(0.1)  # two processes' views: no shared event
            await _produce(kraft_cluster, topic, FIRST, MORE)
            wanted = {(p, o) for p in range(PARTITIONS) for o in range(FIRST + MORE)}
            with anyio.fail_after(90):
                while True:
                    if {(r.partition, r.offset) for r in java.records} | set(seen.pairs) >= wanted:
                        break
                    await anyio.sleep(0.1)  # two processes' deliveries: no shared event
            theirs = [(r.partition, r.offset) for r in java.records]
        tg.cancel_scope.cancel()
    both = seen.pairs + theirs
    assert set(both) == {(p, o) for p in range(PARTITIONS) for o in range(FIRST + MORE)}
    assert len(both) == len(set(both)), "a record was delivered twice"
