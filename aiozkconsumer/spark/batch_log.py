"""The batch log's stores: where ``foreach_batch`` keeps the last batch it handed to ``fn``.

:func:`open_batch_log` picks the store for the connector's kind of group: a ZooKeeper node
written with compare-and-set (:class:`ZookeeperBatchLog` over :class:`BatchLog`), or the
metadata of the group's committed offsets in Kafka (:class:`KafkaBatchLog`). Both commit a
finished batch's offsets (forward only, owned partitions only) and mark it committed. What
they store, and its encodings, are in ``batch_records.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

import anyio

from ..base_connector import ConsumerConnector
from ..connector import ZookeeperConsumerConnector
from ..errors import (
    CommitFencedError,
    ConsumerError,
    GroupCoordinatorError,
    OffsetCommitError,
    ZookeeperBadVersionError,
    ZookeeperNodeExistsError,
    ZookeeperNoNodeError,
)
from ..kafka_connector import KafkaConsumerConnector
from ..offsets import KafkaOffsetStore
from ..records import TopicPartition
from ..zk.client import ZkClient
from .batch_records import (
    DEFAULT_BATCH_LOG_NAME,
    BatchMark,
    BatchRecord,
    batch_log_path,
    last_batch,
    mark_offsets,
)
from .driver_plan import forward_offsets

__all__ = [
    "BatchLog",
    "BatchLogConflictError",
    "BatchLogStore",
    "KafkaBatchLog",
    "ZookeeperBatchLog",
    "commit_ranges",
    "open_batch_log",
    "wait_gate",
]


class BatchLogConflictError(ConsumerError):
    """The batch log node changed under us: another bridge writes the same node.

    Two bridges in one group must use different nodes (``batch_log_path``).
    """


class BatchLog:
    """The batch log node in ZooKeeper, written with compare-and-set on its version.

    The storage of :class:`ZookeeperBatchLog`.

    Args:
        zk: the connector's ZooKeeper client.
        path: the node (see :func:`batch_log_path`).
    """

    def __init__(self, zk: ZkClient, path: str) -> None:
        self.zk = zk
        self.path = path
        self._version: int | None = None
        self._loaded = False

    async def load(self) -> BatchRecord | None:
        """Read the node and remember its version for the next write.

        Returns:
            The last record, or ``None`` when the group never ran a batch.

        Raises:
            MalformedZookeeperDataError: the node does not hold a batch log.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        got = await self.zk.get(self.path)
        self._loaded = True
        if got is None:
            self._version = None
            return None
        data, stat = got
        self._version = int(stat.version)
        return BatchRecord.decode(data, self.path)

    async def write(self, record: BatchRecord) -> None:
        """Write a record if the node is still as last read or written.

        Raises:
            BatchLogConflictError: another writer changed (or created) the node meanwhile.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        if not self._loaded:
            await self.load()
        data = record.encode()
        if self._version is None:
            try:
                await self.zk.create(self.path, data)
            except ZookeeperNodeExistsError as e:
                raise BatchLogConflictError(
                    f"{self.path} was created by another writer; give each bridge its own node"
                ) from e
            self._version = 0
            return
        try:
            self._version = await self.zk.set_data(self.path, data, self._version)
        except (ZookeeperBadVersionError, ZookeeperNoNodeError) as e:
            raise BatchLogConflictError(
                f"{self.path} was changed by another writer; give each bridge its own node"
            ) from e

    def __repr__(self) -> str:
        return f"<BatchLog {self.path} version={self._version}>"


class BatchLogStore(Protocol):
    """Where ``foreach_batch`` keeps its batch log; :func:`open_batch_log` picks one.

    Implemented by :class:`ZookeeperBatchLog` (a ZooKeeper node) and :class:`KafkaBatchLog`
    (the metadata of the group's committed offsets in Kafka).
    """

    async def load(self) -> BatchRecord | None:
        """The last batch handed to ``fn``, or ``None`` when the group never ran one.

        ``ranges`` holds every partition of that batch the log still knows of.
        """
        ...

    async def begin(self, record: BatchRecord) -> None:
        """Record ``record`` (``committed=False``) before ``fn`` gets it; offsets stay."""
        ...

    async def complete(self, record: BatchRecord) -> dict[TopicPartition, int]:
        """After ``fn`` returned: commit the batch's end offsets of the partitions still
        owned (never backwards) and mark the batch committed. Returns the offsets written."""
        ...


class ZookeeperBatchLog:
    """The batch log of a ZooKeeper-coordinated group: one persistent node (:class:`BatchLog`).

    Offsets are committed with ``commit_offsets`` between the two writes of the node, so
    after a crash between them the node says ``committed: false`` while the group's offsets
    show the batch finished; recovery then finishes it instead of replaying it.

    Args:
        connector: the connector whose group the log belongs to.
        name: the node's name under ``/consumers/<group>/spark/``.

    Raises:
        ValueError: ``name`` cannot be a ZooKeeper path element.
    """

    def __init__(
        self, connector: ZookeeperConsumerConnector, name: str = DEFAULT_BATCH_LOG_NAME
    ) -> None:
        self.connector = connector
        self.node = BatchLog(connector.zk, batch_log_path(connector.config.group_id, name))

    async def load(self) -> BatchRecord | None:
        """Read the node (see :meth:`BatchLog.load`).

        Raises:
            MalformedZookeeperDataError: the node does not hold a batch log.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        return await self.node.load()

    async def begin(self, record: BatchRecord) -> None:
        """Write the node.

        Raises:
            BatchLogConflictError: another bridge writes the same node.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        await self.node.write(record)

    async def complete(self, record: BatchRecord) -> dict[TopicPartition, int]:
        """``commit_offsets`` of the end offsets, then the node with ``committed: true``.

        Raises:
            ZookeeperConnectionError: the session is suspended or ZooKeeper is unreachable.
            CommitFencedError: another member claimed a partition since.
            OffsetCommitError: Kafka refused the offsets (``offsets.storage=kafka``).
            BatchLogConflictError: another bridge writes the same node.
        """
        offsets = await commit_ranges(self.connector, record.ranges)
        await self.node.write(replace(record, committed=True))
        return offsets

    def __repr__(self) -> str:
        return f"<ZookeeperBatchLog {self.node!r}>"


class KafkaBatchLog:
    """The batch log of a Kafka-coordinated group, kept in its committed offsets' metadata.

    A Kafka-coordinated group has no ZooKeeper; Kafka keeps a metadata string with every
    committed offset (OffsetCommit), returned by OffsetFetch. Each partition of a batch
    carries its part of the log there (:class:`BatchMark`):

    - :meth:`begin` commits the batch's partitions at their current committed offsets (the
      batch's first offset where the group has none) with ``"c":false``;
    - :meth:`complete` commits their end offsets with ``"c":true`` — offsets and mark in one
      OffsetCommit;
    - :meth:`load` reads the group's every committed offset and takes the largest batch id.

    Both writes carry the member's generation, so a member whose generation is over cannot
    write the log either (``CommitFencedError``, as ``commit_offsets``). They go to the
    offset store directly (``commit_offsets`` sends no metadata) and record what was
    committed in the connector's ownership state, as ``commit_offsets`` does.

    A partition committed by another consumer of the group loses its mark. Batch ids
    continue from the largest mark the log still finds, so give each bridge of a group its
    own ``name``, and expect a bridge whose partitions all moved to other members to find
    no marks of its own (its ids start at 0 again).

    Args:
        connector: the Kafka-coordinated connector.
        name: the log's name, written into each mark unless ``batch_id``.

    Raises:
        ValueError: ``name`` is empty.
        TypeError: the connector's offset store is not a ``KafkaOffsetStore``.
    """

    def __init__(
        self, connector: KafkaConsumerConnector, name: str = DEFAULT_BATCH_LOG_NAME
    ) -> None:
        if not name:
            raise ValueError("the batch log name must not be empty")
        store = connector.offset_store
        if not isinstance(store, KafkaOffsetStore):
            raise TypeError(f"expected a KafkaOffsetStore, got {type(store).__name__}")
        self.connector = connector
        self.store = store
        self.name = name

    async def load(self) -> BatchRecord | None:
        """OffsetFetch of every partition the group committed; the last batch of this log.

        Raises:
            OffsetFetchError: the coordinator did not answer in time, or refused.
        """
        committed = await self.store.fetch_metadata()
        marks: dict[TopicPartition, BatchMark] = {}
        for tp, (_, text) in committed.items():
            mark = BatchMark.decode(text)
            if mark is not None and mark.name == self.name:
                marks[tp] = mark
        return last_batch(marks)

    async def begin(self, record: BatchRecord) -> None:
        """Mark the batch's owned partitions ``"c":false`` at their current offsets.

        Raises:
            CommitFencedError: the member's generation is over; nothing was written.
            GroupCoordinatorError: no heartbeat was answered for a session timeout.
            OffsetCommitError: some marks were not written after every attempt.
        """
        await self._commit(record, committed=False)

    async def complete(self, record: BatchRecord) -> dict[TopicPartition, int]:
        """Commit the end offsets of the batch's owned partitions with ``"c":true``.

        Raises:
            CommitFencedError: the member's generation is over; nothing was committed.
            GroupCoordinatorError: no heartbeat was answered for a session timeout.
            OffsetCommitError: some offsets were not committed after every attempt.
        """
        return await self._commit(record, committed=True)

    async def _commit(self, record: BatchRecord, *, committed: bool) -> dict[TopicPartition, int]:
        """One fenced OffsetCommit of the batch's owned partitions with their marks
        (:func:`~aiozkconsumer.spark.batch_records.mark_offsets`), and its bookkeeping (what
        ``commit_offsets`` does besides the request). Returns the offsets sent."""
        stats = self.connector.statistics()
        offsets = mark_offsets(
            record, stats.committed_offsets, set(stats.owned_partitions), committed=committed
        )
        if not offsets:
            return offsets
        conn = self.connector
        group = conn.config.group_id
        await wait_gate(conn)
        if not conn.gate.passable():
            raise GroupCoordinatorError(
                group,
                "?",
                "no heartbeat was answered for a session timeout: not writing the batch log "
                "while another member may own the partitions",
            )
        metadata = {
            tp: BatchMark(record.batch_id, committed, *record.ranges[tp], self.name).encode()
            for tp in offsets
        }
        result = await self.store.commit_with_result(
            offsets, retries=conn.config.offsets_commit_max_retries, metadata=metadata
        )
        done = dict(result.accepted)
        conn.ownership.record_committed(done)
        if done:
            conn.metrics.kafka_commits_per_sec().mark(len(done))
            if committed:
                conn.interceptors.on_commit(done)
        if result.fenced:
            conn.request_rebalance("batch log commit fenced")
            raise CommitFencedError(group, result.fenced)
        failed = dict(result.failed)
        failed.update(
            dict.fromkeys(result.dropped, "OFFSET_METADATA_TOO_LARGE (offset.metadata.max.bytes)")
        )
        if failed:
            raise OffsetCommitError(group, failed, committed=len(done), attempts=result.attempts)
        return offsets

    def __repr__(self) -> str:
        return f"<KafkaBatchLog group={self.connector.config.group_id} name={self.name}>"


def open_batch_log(
    connector: ConsumerConnector, name: str = DEFAULT_BATCH_LOG_NAME
) -> BatchLogStore:
    """The batch log for a connector's kind of group.

    Args:
        connector: a ``ZookeeperConsumerConnector`` or a ``KafkaConsumerConnector``.
        name: the log's name (``foreach_batch(batch_log_name=...)``).

    Returns:
        A :class:`ZookeeperBatchLog` or a :class:`KafkaBatchLog`.

    Raises:
        TypeError: another kind of connector.
        ValueError: ``name`` is not usable.
    """
    if isinstance(connector, ZookeeperConsumerConnector):
        return ZookeeperBatchLog(connector, name)
    if isinstance(connector, KafkaConsumerConnector):
        return KafkaBatchLog(connector, name)
    raise TypeError(f"no batch log for a {type(connector).__name__}")


async def wait_gate(connector: ConsumerConnector) -> None:
    """While the session is in doubt, give it the session timeout to come back (then the
    caller finds the gate still closed, or open)."""
    if connector.gate.passable():
        return
    config = connector.config
    timeout_ms = (
        config.session_timeout_ms
        if config.kafka_coordinated
        else config.zookeeper_session_timeout_ms
    )
    with anyio.move_on_after(timeout_ms / 1000):
        await connector.gate.wait_open()


async def commit_ranges(
    connector: ConsumerConnector, ranges: Mapping[TopicPartition, tuple[int, int]]
) -> dict[TopicPartition, int]:
    """Commit a batch's end offsets with ``commit_offsets``: partitions still owned, forward
    only (:func:`~aiozkconsumer.spark.driver_plan.forward_offsets`).

    Args:
        connector: the connector.
        ranges: ``{tp: (first offset, next offset)}`` of the batch.

    Returns:
        The offsets written.

    Raises:
        ZookeeperConnectionError, CommitFencedError, OffsetCommitError, GroupCoordinatorError:
            as ``commit_offsets``.
    """
    await wait_gate(connector)
    stats = connector.statistics()
    offsets = forward_offsets(
        {tp: end for tp, (_, end) in ranges.items()},
        stats.committed_offsets,
        set(stats.owned_partitions),
    )
    if offsets:
        await connector.commit_offsets(offsets)
    return offsets
