"""One round of the leader finder (``fetch_leaders.find_leaders``) against a real broker.

While the cluster is unchanged, a round sends one metadata request (Metadata v7, leaders and
epochs) and leaves the client's own metadata alone; it refreshes that (a second request, decoded
in full) only when the answer leaves a partition without a leader it can use.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from aiozkconsumer._repeats import Repeats
from aiozkconsumer.fetch_leaders import find_leaders
from aiozkconsumer.kafka.client import KafkaClient
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing import LocalCluster

pytestmark = pytest.mark.integration


class CountedClient(KafkaClient):
    """A real client that counts its metadata refreshes and the requests it sends."""

    refreshes = 0
    sent: list[str]

    async def refresh_metadata(self, topics: Iterable[str]) -> bool:
        self.refreshes += 1
        return await super().refresh_metadata(topics)

    async def send(self, node_id: int, request: Any) -> Any:
        self.sent.append(type(request).__name__)
        return await super().send(node_id, request)


@pytest.fixture
async def kafka(zk_kafka_cluster: LocalCluster) -> AsyncIterator[CountedClient]:
    client = CountedClient(zk_kafka_cluster.bootstrap_servers, client_id="test-leader-finder")
    client.sent = []
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def test_a_round_on_an_unchanged_cluster_sends_one_metadata_request(
    zk_kafka_cluster: LocalCluster, unique_topic: str, kafka: CountedClient
) -> None:
    await zk_kafka_cluster.create_topic(unique_topic, 3)
    pending = {TopicPartition(unique_topic, p): None for p in range(3)}
    repeats = Repeats()

    first = await find_leaders(kafka, pending, repeats)
    assert first is not None and set(first) >= set(pending)
    brokers = {node for node, _ in kafka.brokers()}
    assert all(first[tp].leader in brokers for tp in pending)

    kafka.refreshes, kafka.sent = 0, []
    again = await find_leaders(kafka, pending, repeats)
    assert again is not None
    assert {tp: again[tp] for tp in pending} == {tp: first[tp] for tp in pending}
    assert kafka.refreshes == 0  # the client's own metadata was not asked for
    assert len(kafka.sent) == 1  # the Metadata v7 request alone


async def test_a_partition_the_answer_leaves_without_a_leader_refreshes_the_metadata(
    zk_kafka_cluster: LocalCluster, unique_topic: str, kafka: CountedClient
) -> None:
    await zk_kafka_cluster.create_topic(unique_topic, 1)
    known = TopicPartition(unique_topic, 0)
    beyond = TopicPartition(unique_topic, 5)  # the topic has no partition 5
    repeats = Repeats()
    await find_leaders(kafka, {known: None}, repeats)

    kafka.refreshes, kafka.sent = 0, []
    answer = await find_leaders(kafka, {known: None, beyond: None}, repeats)
    assert answer is not None and known in answer and beyond not in answer
    assert kafka.refreshes == 1  # refreshed, then asked the epochs again
    assert kafka.sent.count(kafka.sent[0]) == 2
