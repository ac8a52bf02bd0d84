"""``KafkaClient.partition_ids`` against real brokers (Kafka 3.9 and 4.3): one Metadata v7
request, read by the project's own reader, gives the partitions aiokafka's full refresh gives,
nothing for an unknown topic, and sees partitions added to a topic."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions

from aiozkconsumer.kafka.client import KafkaClient
from aiozkconsumer.testing import LocalCluster

pytestmark = pytest.mark.integration


@pytest.fixture
async def kafka(any_cluster: LocalCluster) -> AsyncIterator[KafkaClient]:
    client = KafkaClient(any_cluster.bootstrap_servers, client_id="test-partition-ids")
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def test_partition_ids_agree_with_a_full_refresh_and_see_new_partitions(
    any_cluster: LocalCluster, kafka: KafkaClient, unique_topic: str
) -> None:
    await any_cluster.create_topic(unique_topic, 5)
    unknown = f"{unique_topic}-never-created"
    ids = await kafka.partition_ids([unique_topic, unknown, unique_topic])
    assert ids == {unique_topic: (0, 1, 2, 3, 4), unknown: ()}
    assert ids == await kafka.partitions_for_topics([unique_topic, unknown])
    admin = AIOKafkaAdminClient(bootstrap_servers=any_cluster.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_partitions({unique_topic: NewPartitions(total_count=7)})
    finally:
        await admin.close()
    # The broker's metadata takes the new partitions in shortly after the answer.
    with anyio.fail_after(30):
        while (got := (await kafka.partition_ids([unique_topic]))[unique_topic]) != tuple(range(7)):
            assert got in (tuple(range(5)), tuple(range(7))), got
            await anyio.sleep(0.1)
    assert await kafka.partition_ids([]) == {}
