"""The offset store protocol, and the choice of a store from the configuration."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from ..kafka.channel import KafkaGetter
from ..records import TopicPartition
from ..zk.client import ZkClient
from .dual_store import DualOffsetStore
from .kafka_store import KafkaOffsetStore
from .rules import default_fetch_timeout_ms
from .zookeeper_store import ZookeeperOffsetStore

if TYPE_CHECKING:
    from ..config import ConsumerConfig

__all__ = ["OffsetStore", "make_offset_store"]


class OffsetStore(Protocol):
    """Where a group's committed offsets live. Offsets are "next offset to read".

    Implemented by :class:`ZookeeperOffsetStore`, :class:`KafkaOffsetStore` and
    :class:`DualOffsetStore`; :func:`make_offset_store` picks one.
    """

    @property
    def zookeeper_commits(self) -> int:
        """Offset nodes written to ZooKeeper so far (``ZooKeeperCommitsPerSec``)."""
        ...

    @property
    def kafka_commits(self) -> int:
        """Partitions Kafka accepted so far (``KafkaCommitsPerSec``)."""
        ...

    async def fetch(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Read the committed offsets of ``tps``; ``NO_OFFSET`` (-1) where none is committed."""
        ...

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        retries: int = 0,
        fences: Mapping[TopicPartition, int] | None = None,
    ) -> int:
        """Commit ``offsets`` in ``1 + retries`` attempts at most; return partitions written.

        ``fences`` (``{partition: fencing token}``) make ZooKeeper writes conditional on the
        partition's fencing node being unchanged (``CommitFencedError`` otherwise); Kafka
        cannot check ZooKeeper atomically, so Kafka commits ignore them (the connector checks
        the fencing nodes just before).
        """
        ...

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Drop any bookkeeping of released partitions."""
        ...

    async def close(self) -> None:
        """Release what the store holds (never raises)."""
        ...


def make_offset_store(
    config: ConsumerConfig,
    zk: ZkClient | None,
    kafka_getter: KafkaGetter,
    *,
    group_generation: Callable[[], tuple[int, str]] | None = None,
) -> OffsetStore:
    """The offset store ``offsets.storage`` and ``dual.commit.enabled`` ask for.

    ===================  ======================  =========================================
    ``offsets.storage``  ``dual.commit.enabled``  store
    ===================  ======================  =========================================
    ``zookeeper``        false (its default)     :class:`ZookeeperOffsetStore`
    ``kafka``            false                   :class:`KafkaOffsetStore`
    ``kafka``            true (its default)      :class:`DualOffsetStore`
    ``zookeeper``        true                    :class:`DualOffsetStore` (see below)
    ===================  ======================  =========================================

    ``zookeeper`` + ``dual.commit.enabled=true`` is accepted by the original's config, but
    its code ignores the flag there (the ZooKeeper branch of ``commitOffsets`` and
    ``fetchOffsets`` never reads it). That breaks the documented roll-back from Kafka to
    ZooKeeper storage ("the above steps with ``offsets.storage=zookeeper``"): the first step
    would read the stale ZooKeeper offsets left from before the migration and stop updating
    Kafka, which members not yet bounced still read. Here it means dual storage, so the
    roll-back is safe in both directions.

    Args:
        config: the consumer configuration; ``offsets.channel.backoff.ms``,
            ``offsets.channel.socket.timeout.ms`` and ``offsets.commit.max.retries`` (for
            the fetch time limit, :func:`default_fetch_timeout_ms`) configure the Kafka store.
        zk: the connector's ZooKeeper client; ``None`` for a Kafka-coordinated group (whose
            offsets are in Kafka only).
        kafka_getter: async callable returning the connector's started Kafka client.
        group_generation: a Kafka-coordinated group's ``(generation, member id)``, sent with
            each OffsetCommit (see :class:`KafkaOffsetStore`).

    Returns:
        The store.
    """
    dual = config.effective_dual_commit_enabled
    if zk is None:
        dual = False
    elif config.offsets_storage == "zookeeper" and not dual:
        return ZookeeperOffsetStore(zk, config.group_id)
    kafka_store = KafkaOffsetStore(
        kafka_getter,
        config.group_id,
        backoff_ms=config.offsets_channel_backoff_ms,
        socket_timeout_ms=config.offsets_channel_socket_timeout_ms,
        fetch_timeout_ms=default_fetch_timeout_ms(
            config.offsets_channel_socket_timeout_ms, config.offsets_commit_max_retries
        ),
        group_generation=group_generation,
    )
    if not dual or zk is None:
        return kafka_store
    return DualOffsetStore(ZookeeperOffsetStore(zk, config.group_id), kafka_store)
