"""A claim conflict with a member that has not released yet is waited out within one attempt."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from _support import OnLog, config_for, on_log, owner_nodes, wait_settled

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
    logger = logging.getLogger("aiozkconsumer.zkgroup")
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


async def test_a_join_while_a_claim_waits_makes_the_waiter_plan_again(
    zk_kafka_cluster: LocalCluster,
    zk_client: Any,
    unique_topic: str,
    unique_group_id: str,
    rebalance_log: logging.Logger,
) -> None:
    """The membership is read again with the claims made after a wait: a member that joined
    meanwhile makes the waiter delete the claims of the attempt and plan again at once (not
    using up one of its attempts), and the group of three ends with every partition owned
    once."""
    group, topic = unique_group_id, unique_topic
    await zk_kafka_cluster.create_topic(topic, 6)
    config = config_for(zk_kafka_cluster, group, rebalance_backoff_ms=5000)
    go = anyio.Event()
    listener = _ReleaseWhenTold(go)
    async with (
        ZookeeperConsumerConnector(config) as first,
        ZookeeperConsumerConnector(config) as second,
        ZookeeperConsumerConnector(config) as third,
    ):
        first.set_consumer_rebalance_listener(listener)
        await first.create_message_streams({topic: 1})
        waiting, replanning = anyio.Event(), anyio.Event()
        handlers = [
            OnLog(waiting, second.consumer_id_string, "waiting for the partition ownership"),
            OnLog(replanning, second.consumer_id_string, "membership changed: planning again"),
        ]
        for handler in handlers:
            rebalance_log.addHandler(handler)
        try:
            registered = anyio.Event()
            with (
                anyio.fail_after(60),
                on_log("aiozkconsumer.zkgroup.membership", registered, third.consumer_id_string),
            ):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(second.create_message_streams, {topic: 1})
                    await waiting.wait()
                    tg.start_soon(third.create_message_streams, {topic: 1})
                    await registered.wait()
                    go.set()  # the first member releases; the second's claims see 3 members
            await wait_settled([first, second, third])
        finally:
            for handler in handlers:
                rebalance_log.removeHandler(handler)
        assert replanning.is_set()
        joined = second.statistics().rebalances[0]
        assert joined.reason == "initial subscription" and joined.succeeded
        # Planning again after the third member joined did not use up an attempt.
        assert joined.attempts == 1
        members = (first, second, third)
        owned = {c: {tp.partition for tp in c.statistics().owned_partitions} for c in members}
        assert sorted(len(parts) for parts in owned.values()) == [2, 2, 2]
        assert set().union(*owned.values()) == set(range(6))
        assert await owner_nodes(zk_client, group, topic) == {
            p: f"{c.consumer_id_string}-0" for c, parts in owned.items() for p in parts
        }
