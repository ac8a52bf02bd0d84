"""Offsets in both Kafka and ZooKeeper (``dual.commit.enabled``): ``DualOffsetStore``.

For migrating a group between the two storages; see
:func:`~aiozkconsumer.offsets.make_offset_store` for when it is used.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..errors import OffsetCommitError
from ..records import TopicPartition
from .kafka_store import KafkaOffsetStore
from .rules import dual_fetch_result
from .zookeeper_store import ZookeeperOffsetStore

__all__ = ["DualOffsetStore"]


class DualOffsetStore:
    """Offsets in Kafka and ZooKeeper (``dual.commit.enabled``), for migrating a group.

    As ``commitOffsets`` / ``fetchOffsets`` with ``dual.commit.enabled`` in
    ``ZookeeperConsumerConnector.scala``, 0.10.2: commits go to Kafka, and the partitions
    Kafka accepted are also written to ZooKeeper (skipping unchanged ones, by the ZooKeeper
    store's checkpoint); reads take the larger of the two offsets per partition.

    Unlike the original, the ZooKeeper checkpoint holds what ZooKeeper has, not the larger
    offset read: a partition whose Kafka offset was ahead is written to ZooKeeper by the
    next commit even if nothing was consumed since.

    Args:
        zk_store: the ZooKeeper store.
        kafka_store: the Kafka store.
    """

    def __init__(self, zk_store: ZookeeperOffsetStore, kafka_store: KafkaOffsetStore) -> None:
        self.zk_store = zk_store
        self.kafka_store = kafka_store

    @property
    def zookeeper_commits(self) -> int:
        """Offset nodes written to ZooKeeper so far."""
        return self.zk_store.commits

    @property
    def kafka_commits(self) -> int:
        """Partitions Kafka accepted so far."""
        return self.kafka_store.kafka_commits

    async def fetch(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Read offsets from both stores; per partition the larger (:func:`dual_fetch_result`).

        Args:
            tps: the partitions.

        Returns:
            ``{tp: offset}`` for every partition of ``tps``, ``NO_OFFSET`` (-1) where
            neither store has one.

        Raises:
            OffsetFetchError: as :meth:`KafkaOffsetStore.fetch`.
            MalformedZookeeperDataError: an offset node does not hold a decimal offset.
            ZookeeperConnectionError: ZooKeeper is unreachable.
            ConsumerClosedError: the store is closed.
        """
        wanted = sorted(set(tps))
        kafka = await self.kafka_store.fetch(wanted)
        zookeeper = await self.zk_store.fetch(wanted)
        return dual_fetch_result(zookeeper, kafka)

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        retries: int = 0,
        fences: Mapping[TopicPartition, int] | None = None,
    ) -> int:
        """Commit to Kafka (``1 + retries`` attempts), then what Kafka accepted to ZooKeeper.

        Args:
            offsets: ``{partition: next offset to read}``; negative offsets are left out.
            retries: as :meth:`KafkaOffsetStore.commit`; the ZooKeeper write is not retried.
            fences: passed to the ZooKeeper write (see :meth:`ZookeeperOffsetStore.commit`).

        Returns:
            The number of partitions Kafka accepted (ZooKeeper writes are counted by
            ``zookeeper_commits``).

        Raises:
            OffsetCommitError: Kafka did not accept some partitions after every attempt; the
                accepted ones have been written to ZooKeeper first.
            ZookeeperConnectionError: ZooKeeper is unreachable (Kafka has the offsets).
            ConsumerClosedError: the store is closed.
            ValueError: ``retries`` is negative.
        """
        result = await self.kafka_store.commit_with_result(offsets, retries=retries)
        if result.accepted:
            await self.zk_store.commit(result.accepted, fences=fences)
        if result.failed:
            raise OffsetCommitError(
                self.kafka_store.group,
                result.failed,
                committed=len(result.accepted),
                attempts=result.attempts,
            )
        return len(result.accepted)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Drop the ZooKeeper checkpoints of released partitions."""
        self.zk_store.forget(tps)

    async def close(self) -> None:
        """Close both stores."""
        await self.kafka_store.close()
        await self.zk_store.close()

    def __repr__(self) -> str:
        return f"<DualOffsetStore {self.kafka_store!r} + {self.zk_store!r}>"
