"""A connector's Kafka commits carry each offset's leader epoch (KIP-320, OffsetCommit v6+)."""

from __future__ import annotations

import pytest
from _read_paths import ConnectorReader, config_for

from aiozkconsumer.kafka.channel import OffsetsChannel
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing import LocalCluster

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("coordinator", ["kafka", "zookeeper"])
async def test_a_connectors_commit_carries_the_leader_epoch(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str, coordinator: str
) -> None:
    cluster = zk_kafka_cluster
    tp = TopicPartition(unique_topic, 0)
    await cluster.create_topic(unique_topic, 1)
    await cluster.produce_to_partitions(unique_topic, {0: [(None, b"v%d" % i) for i in range(10)]})
    extra = {} if coordinator == "kafka" else {"offsets_storage": "kafka"}
    config = config_for(cluster, unique_group_id, coordinator=coordinator, **extra)
    async with ConnectorReader(config, unique_topic, "records") as reader:
        await reader.read_until({tp: 10})
        await reader.connector.commit_offsets()
        kafka = await reader.connector.cluster.kafka()

        async def client() -> object:
            return kafka

        channel = OffsetsChannel(client, unique_group_id, socket_timeout_ms=10_000)  # type: ignore[arg-type]
        _, answered = await channel.fetch_with_epochs([tp])
    offset, epoch = answered[tp][:2]
    # A fresh topic's first leader has epoch 0; -1 would mean no epoch was committed.
    assert (offset, epoch) == (10, 0)
