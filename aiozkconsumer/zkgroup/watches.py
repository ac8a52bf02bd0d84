"""The rebalance triggers: ZooKeeper watches (and Kafka metadata refreshes on KRaft clusters).

The original's listeners (``ZKRebalancerListener``, ``ZKTopicPartitionChangeListener``,
``ZookeeperTopicEventWatcher``, 0.10.2) become coroutines owned by the connector's task group.
Each only *requests* a rebalance; the serialized rebalance worker coalesces the requests.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..cluster import ClusterView
from ..errors import (
    BrokerNotAvailableError,
    MalformedZookeeperDataError,
    NoBrokersError,
    ZookeeperError,
)
from ..zk import layout
from ..zk.client import ZkClient

__all__ = ["METADATA_REFRESH_MS", "GroupWatches"]

log = logging.getLogger(__name__)

METADATA_REFRESH_MS = 5000
"""How often a consumer on a KRaft cluster (metadata from Kafka) re-reads topics and partition
counts; ZooKeeper-mode clusters are followed with watches instead."""


class GroupWatches:
    """Starts and runs the watches that trigger a rebalance.

    Args:
        group: ``group.id``.
        consumer_id: for the log.
        zk: the ZooKeeper session.
        cluster: the cluster view (decides ZooKeeper watches vs Kafka metadata refreshes).
        request_rebalance: called with a reason when something changed.
        task_group: returns the task group that owns the watch tasks.
    """

    def __init__(
        self,
        group: str,
        consumer_id: str,
        zk: ZkClient,
        cluster: ClusterView,
        request_rebalance: Callable[[str], None],
        task_group: Callable[[], TaskGroup],
    ) -> None:
        self.group = group
        self.consumer_id = consumer_id
        self.zk = zk
        self.cluster = cluster
        self.request_rebalance = request_rebalance
        self.task_group = task_group
        self._watched_topics: set[str] = set()
        self._watching_broker_ids = False

    async def resilient(self, what: str, body: Callable[[], Awaitable[None]]) -> None:
        """Run a watch loop, restarting it after ZooKeeper connection loss or expiry."""
        while True:
            try:
                await body()
                return
            except ZookeeperError as e:
                log.info(
                    "[%s] %s interrupted (%s); resuming when connected", self.consumer_id, what, e
                )
                await self.zk.wait_for_state("connected")

    async def watch_group(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch ``/consumers/<group>/ids`` (``ZKRebalancerListener.handleChildChange``)."""
        path = layout.ids_dir(self.group)
        last: list[str] | None = None
        started = False

        async def body() -> None:
            nonlocal last, started
            async for children in self.zk.watch_children(path):
                members = sorted(children or [])
                if not started:
                    started = True
                    task_status.started()
                elif members != last:
                    self.request_rebalance(f"group members changed ({len(members)} now)")
                last = members

        await self.resilient(f"watch of {path}", body)

    def watch_broker_ids(self) -> None:
        """Rebalance when brokers register, after a rebalance found none (as the original)."""
        if self._watching_broker_ids:
            return
        self._watching_broker_ids = True

        async def watch() -> None:
            async def body() -> None:
                async for children in self.zk.watch_children(layout.BROKER_IDS_PATH):
                    if children:
                        self.request_rebalance(f"brokers registered ({len(children)})")
                        return

            await self.resilient("watch of /brokers/ids", body)
            self._watching_broker_ids = False

        self.task_group().start_soon(watch)

    async def start_topic_watch(self, topic: str) -> None:
        """Follow a topic's partition count (once per topic; none on KRaft clusters)."""
        if topic in self._watched_topics or await self.cluster.metadata_from_kafka():
            return
        self._watched_topics.add(topic)
        await self.task_group().start(self._watch_topic, topic)

    async def _watch_topic(
        self, topic: str, *, task_status: Any = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Watch ``/brokers/topics/<t>`` (``ZKTopicPartitionChangeListener``)."""
        path = layout.topic_path(topic)
        last: frozenset[int] | None = None
        started = False

        async def body() -> None:
            nonlocal last, started
            async for data in self.zk.watch_data(path):
                try:
                    parts = (
                        frozenset(layout.decode_topic_partitions(data, path))
                        if data
                        else frozenset()
                    )
                except MalformedZookeeperDataError as e:
                    log.error("[%s] ignoring topic node: %s", self.consumer_id, e)
                    parts = last or frozenset()
                if not started:
                    started = True
                    task_status.started()
                elif parts != last:
                    self.request_rebalance(f"partitions of {topic} changed ({len(parts)} now)")
                last = parts

        await self.resilient(f"watch of {path}", body)

    async def watch_topic_list(
        self,
        on_topics: Callable[[Iterable[str]], Awaitable[None]],
        *,
        task_status: Any = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Follow the topic list for a wildcard subscription (``ZookeeperTopicEventWatcher``).

        On ZooKeeper-mode clusters a watch on ``/brokers/topics``; on KRaft clusters Kafka
        metadata is read every ``METADATA_REFRESH_MS``. ``on_topics`` gets every topic name
        each time; ``task_status.started()`` is called after its first call.
        """
        started = False

        async def deliver(topics: Iterable[str]) -> None:
            nonlocal started
            if not started:
                started = True
                task_status.started()
            await on_topics(topics)

        if await self.cluster.metadata_from_kafka():
            while True:
                try:
                    kafka = await self.cluster.kafka()
                    topics = await kafka.all_topics()
                except (BrokerNotAvailableError, NoBrokersError) as e:
                    log.info("[%s] topic list refresh failed: %s", self.consumer_id, e)
                else:
                    await deliver(topics)
                await anyio.sleep(METADATA_REFRESH_MS / 1000)

        async def body() -> None:
            async for children in self.zk.watch_children(layout.BROKER_TOPICS_PATH):
                await deliver(children or [])

        await self.resilient("watch of /brokers/topics", body)

    async def watch_partitions_by_metadata(self, topics: Callable[[], Iterable[str]]) -> None:
        """On KRaft clusters, detect partition-count changes by refreshing Kafka metadata.

        Args:
            topics: returns the subscribed topics now.
        """
        last: dict[str, int] | None = None
        while True:
            try:
                kafka = await self.cluster.kafka()
                # One Metadata v7 request, not a refresh of aiokafka's whole metadata: at
                # thousands of partitions that took tens of ms of the loop every 5 s.
                ids = await kafka.partition_ids(sorted(topics()))
                counts = {topic: len(partitions) for topic, partitions in ids.items()}
            except (BrokerNotAvailableError, NoBrokersError) as e:
                # Brokers down or restarting: the fetchers retry on their own; look again later.
                log.info("[%s] metadata refresh failed: %s", self.consumer_id, e)
            else:
                if last is not None and counts != last:
                    self.request_rebalance("partition counts changed (Kafka metadata)")
                last = counts
            await anyio.sleep(METADATA_REFRESH_MS / 1000)

    def __repr__(self) -> str:
        return f"<GroupWatches {self.consumer_id} [{len(self._watched_topics)} topics]>"
