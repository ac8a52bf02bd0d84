"""Shared helpers of the integration tests (imported by the test modules)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import anyio
from aiozk import exc as zk_exc

from aiozkconsumer import ConnectorState, ConsumerConfig, ZookeeperConsumerConnector
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.stream import KafkaStream
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.zk import layout


def config_for(cluster: LocalCluster, group: str, **kw: Any) -> ConsumerConfig:
    kw.setdefault("auto_offset_reset", "smallest")
    kw.setdefault("auto_commit_interval_ms", 500)
    kw.setdefault("rebalance_backoff_ms", 500)
    if cluster.kraft:  # no /brokers in ZooKeeper: brokers and partitions from Kafka metadata
        kw.setdefault("bootstrap_servers", cluster.bootstrap_servers)
    return ConsumerConfig(group_id=group, zookeeper_connect=cluster.zookeeper_connect, **kw)


class Seen:
    """(partition, offset) pairs handed out, with an event per growth."""

    def __init__(self) -> None:
        self.pairs: list[tuple[int, int]] = []
        self.by_member: dict[int, set[int]] = {}
        self._grew = anyio.Event()

    def add(self, member: int, partition: int, offset: int) -> None:
        self.pairs.append((partition, offset))
        self.by_member.setdefault(member, set()).add(partition)
        self._grew.set()
        self._grew = anyio.Event()

    async def wait_until(self, predicate: Callable[[], bool], limit_s: float = 60) -> None:
        with anyio.fail_after(limit_s):
            while not predicate():
                await self._grew.wait()


async def drain(
    stream: KafkaStream,
    member: int,
    seen: Seen,
    pause_after: int | None = None,
    resume: anyio.Event | None = None,
) -> None:
    n = 0
    async for msg in stream:
        seen.add(member, msg.partition, msg.offset)
        n += 1
        if n == pause_after and resume is not None:
            await resume.wait()  # stop reading: backpressure stops the fetcher too


async def members_of(zk_client: Any, group: str) -> list[str]:
    return sorted(await zk_client.get_children(layout.ids_dir(group)))


async def owner_nodes(zk_client: Any, group: str, topic: str) -> dict[int, str]:
    """Partition -> owner thread id, from the group's owner nodes of ``topic``.

    A missing owners directory (or an owner node deleted while reading) means no owner;
    every other ZooKeeper error propagates, so an assertion on the result cannot pass by
    accident.
    """
    owners_dir = layout.owners_dir(group, topic)
    try:
        children = await zk_client.get_children(owners_dir)
    except zk_exc.NoNode:
        return {}
    result = {}
    for child in children:
        try:
            data = await zk_client.get_data(f"{owners_dir}/{child}")
        except zk_exc.NoNode:
            continue
        result[int(child)] = data.decode()
    return result


def settled(connectors: list[ZookeeperConsumerConnector]) -> bool:
    """Every member is running its last rebalance, which saw exactly the current members."""
    members = sorted(c.consumer_id_string for c in connectors)
    for c in connectors:
        rebalances = c.statistics().rebalances
        if c.state is not ConnectorState.RUNNING or c.rebalance_pending or not rebalances:
            return False
        if sorted(rebalances[-1].members) != members:
            return False
    return True


async def wait_settled(connectors: list[ZookeeperConsumerConnector], limit_s: float = 60) -> None:
    """Wait until the group settled, woken by every state change of a member."""
    with anyio.fail_after(limit_s):
        while not settled(connectors):
            async with anyio.create_task_group() as tg:

                async def one(c: ZookeeperConsumerConnector) -> None:
                    await c.wait_for_state_change()
                    tg.cancel_scope.cancel()

                for c in connectors:
                    tg.start_soon(one, c)


class OnLog(logging.Handler):
    """Sets ``event`` when a log message contains every one of ``needles``."""

    def __init__(self, event: anyio.Event, *needles: str) -> None:
        super().__init__(logging.INFO)
        self.event = event
        self.needles = needles

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if all(n in message for n in self.needles):
            self.event.set()


@contextmanager
def on_log(logger_name: str, event: anyio.Event, *needles: str) -> Iterator[None]:
    """While inside, ``event`` is set by the first INFO+ message of ``logger_name`` that
    contains every one of ``needles``."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    handler = OnLog(event, *needles)
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def until_any(
    connectors: Sequence[ConsumerConnector], predicate: Callable[[], bool], limit_s: float = 60
) -> None:
    """Wait until ``predicate()`` holds, re-checking whenever any connector's state changes.

    The waiters start a loop turn after the check, so a change in between would go unseen
    (and a group generation change is no state change): each wait is bounded by half a second.
    """
    with anyio.fail_after(limit_s):
        while not predicate():
            with anyio.move_on_after(0.5):
                async with anyio.create_task_group() as tg:

                    async def wake(c: ConsumerConnector) -> None:
                        await c.wait_for_state_change()
                        tg.cancel_scope.cancel()

                    for c in connectors:
                        tg.start_soon(wake, c)
