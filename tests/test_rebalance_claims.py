"""A claim conflict with a member that has not released yet is waited out within one attempt."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import anyio
import pytest
from _support import OnLog, config_for, wait_settled

from aiozkconsumer import ZookeeperConsumerConnector
from aiozkconsumer.subscription import ConsumerThreadId
from aiozkconsumer.testing import LocalCluster

pytestmark = pytest.mark.integration


class _ReleaseWhenTold:
    """A listener whose ``before_releasing_partitions`` waits for ``go``."""

    def __init__(self, go: anyio.Event) -> None:
        self.go = go
        self.released: list[dict[str, set[int]]] = []

    async def before_releasing_partitions(self, partition_ownership: dict[str, set[int]]) -> None:
        await self.go.wait()
        self.released.append(partition_ownership)

    async def before_starting_fetchers(
        self, consumer_id: str, global_partition_assignment: dict[str, dict[int, ConsumerThreadId]]
    ) -> None:
        return None


@pytest.fixture
def rebalance_log() -> Iterator[logging.Logger]:
    logger = logging.getLogger("aiozkconsumer.rebalance")
    level = logger.level
    logger.setLevel(logging.INFO)
    yield logger
    logger.setLevel(level)


async def test_a_blocked_claim_waits_for_the_release_within_one_attempt(
    any_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    rebalance_log: logging.Logger,
) -> None:
    await any_cluster.create_topic(unique_topic, 4)
    config = config_for(any_cluster, unique_group_id, rebalance_backoff_ms=2000)
    go = anyio.Event()
    listener = _ReleaseWhenTold(go)
    async with ZookeeperConsumerConnector(config) as first:
        first.set_consumer_rebalance_listener(listener)
        await first.create_message_streams({unique_topic: 1})
        assert len(first.statistics().owned_partitions) == 4
        async with ZookeeperConsumerConnector(config) as second:
            # The first member releases only once the second one waits on its owner nodes.
            handler = OnLog(go, second.consumer_id_string, "waiting for the partition ownership")
            rebalance_log.addHandler(handler)
            try:
                await second.create_message_streams({unique_topic: 1})
                await wait_settled([first, second])
            finally:
                rebalance_log.removeHandler(handler)
            assert go.is_set()
            moved = {tp.partition for tp in second.statistics().owned_partitions}
            assert len(moved) == 2
            assert listener.released == [{unique_topic: moved}]
            last = second.statistics().rebalances[-1]
            assert last.succeeded
            # The conflict was waited out inside the attempt, not by a second one.
            assert last.attempts == 1
            assert last.acquired == 2
