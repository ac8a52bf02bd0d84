"""Push mode: ``await foreach_batch(connector, spark, fn)`` — micro-batches from an async service.

For services that already run a connector — a
:class:`~aiozkconsumer.ZookeeperConsumerConnector` or a Kafka-coordinated
:class:`~aiozkconsumer.KafkaConsumerConnector` — and want Spark's ``foreachBatch`` contract
without a streaming query: the connector's streams are read with
``KafkaStream.arrow_batches`` (Arrow record batches in the Kafka source's schema, built
column by column), micro-batches are cut from them as zero-copy slices per partition
(:class:`PartitionRun`) and handed to Spark as one Arrow table each, ``fn(df, batch_id)``
runs in a worker thread — the event loop keeps fetching and keeping the group session
meanwhile — and the batch's offsets are committed only after ``fn`` returned. No Python
object is made per record, except for streams created with a key or value decoder, which
``arrow_batches`` refuses: those are read with ``KafkaStream.batches`` and turned into Arrow
with :func:`~aiozkconsumer.spark.schema.records_to_arrow`.

Batch ids and the last batch handed to ``fn`` are kept with the group, in a *batch log*
(:class:`BatchLogStore`), so that after a failure the next run knows whether batch 7 was
finished and, if not, hands ``fn`` batch 7 again with exactly those records. It is written
before ``fn`` runs (``committed: false``) and again with the offsets after ``fn`` returned
(``committed: true``). Where it lives depends on the connector:

- **ZooKeeper-coordinated** (:class:`ZookeeperBatchLog`): a persistent node the original
  layout does not use, ``/consumers/<group>/spark/batch_id``, holding the last batch as
  JSON::

      {"version": 1, "batch_id": 7, "committed": false,
       "offsets": {"payments": {"0": [1200, 1450], "3": [980, 1010]}}}

  (``[first offset, next offset]`` per partition), written with compare-and-set.
- **Kafka-coordinated** (:class:`KafkaBatchLog`, no ZooKeeper): the metadata string Kafka
  keeps with each committed offset. Before ``fn`` runs, the batch's partitions are committed
  at their current offsets with metadata ``{"b":7,"c":false,"r":[1200,1450]}``; after it
  returned, at their new offsets with ``"c":true`` — one generation-fenced OffsetCommit, so
  the offset and the mark move together. Recovery reads them back with OffsetFetch: the batch
  id is the largest found, the unfinished batch's ranges those of its partitions still
  marked ``"c":false``.

A new process (or a partition a rebalance took away and gave back) reads a replayed batch
again from the committed offsets; a retry with the same connector gets it from the bridge,
which keeps a batch (its Arrow slices) until it is committed (the streams handed its records
out already); a replay's records are cut from the buffered slices at the logged offsets. Ids
are contiguous and survive restarts; an idempotent sink that stores the last batch id it
wrote can skip a replayed batch.
"""

from __future__ import annotations

import json
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import anyio
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from ..base_connector import ConsumerConnector
from ..connector import ZookeeperConsumerConnector
from ..errors import (
    CommitFencedError,
    ConsumerError,
    ConsumerTimeoutError,
    GroupCoordinatorError,
    InvalidConfigError,
    MalformedZookeeperDataError,
    OffsetCommitError,
    ZookeeperBadVersionError,
    ZookeeperNodeExistsError,
    ZookeeperNoNodeError,
)
from ..kafka_connector import KafkaConsumerConnector
from ..offsets import KafkaOffsetStore
from ..records import MessageAndMetadata, PartitionTopicInfo, TopicPartition
from ..stream import KafkaStream
from ..zk import layout
from ..zk.client import ZkClient
from .schema import arrow_schema, records_to_arrow

__all__ = [
    "BATCH_LOG_VERSION",
    "DEFAULT_BATCH_LOG_NAME",
    "BatchLog",
    "BatchLogConflictError",
    "BatchLogStore",
    "BatchMark",
    "BatchRecord",
    "KafkaBatchLog",
    "PartitionRun",
    "ZookeeperBatchLog",
    "batch_log_path",
    "batch_ranges",
    "batch_table",
    "foreach_batch",
    "last_batch",
    "open_batch_log",
    "partition_runs",
    "split_replay",
    "take_rows",
]

log = logging.getLogger(__name__)

BATCH_LOG_VERSION = 1
"""The ``version`` field of the batch log node's JSON."""

DEFAULT_BATCH_LOG_NAME = "batch_id"
"""The batch log's name unless ``foreach_batch(batch_log_name=...)`` gives another."""

BatchFunction = Callable[[DataFrame, int], object]
"""``fn(df, batch_id)``, as ``DataStreamWriter.foreachBatch`` takes it."""


class BatchLogConflictError(ConsumerError):
    """The batch log node changed under us: another bridge writes the same node.

    Two bridges in one group must use different nodes (``batch_log_path``).
    """


def batch_log_path(group: str, name: str = DEFAULT_BATCH_LOG_NAME) -> str:
    """The batch log node of a group, ``/consumers/<group>/spark/<name>``.

    Args:
        group: the ``group.id``.
        name: the node's name, ``batch_id`` by default.

    Returns:
        The absolute path.

    Raises:
        ValueError: ``group`` or ``name`` cannot be a ZooKeeper path element.
    """
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"batch log name {name!r} cannot be a ZooKeeper path element")
    return f"{layout.group_dir(group)}/spark/{name}"


@dataclass(frozen=True)
class BatchRecord:
    """One entry of the batch log: the last batch handed to ``fn``.

    Attributes:
        batch_id: the batch id, from 0.
        committed: whether its offsets were committed (``fn`` returned and the commit
            succeeded).
        ranges: ``{tp: (first offset, next offset)}`` of the records in the batch.
    """

    batch_id: int
    committed: bool
    ranges: Mapping[TopicPartition, tuple[int, int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        """The node's JSON bytes (topics and partitions sorted)."""
        offsets: dict[str, dict[str, list[int]]] = {}
        for tp in sorted(self.ranges):
            first, end = self.ranges[tp]
            offsets.setdefault(tp.topic, {})[str(tp.partition)] = [first, end]
        body = {
            "version": BATCH_LOG_VERSION,
            "batch_id": self.batch_id,
            "committed": self.committed,
            "offsets": offsets,
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, path: str | None = None) -> BatchRecord:
        """Read a node written by :meth:`encode`.

        Args:
            data: the node's bytes.
            path: the node's path, for the error message.

        Returns:
            The record.

        Raises:
            MalformedZookeeperDataError: the bytes are not such a record.
        """
        try:
            body = json.loads(data)
            if body.get("version") != BATCH_LOG_VERSION:
                raise ValueError(f"unknown version {body.get('version')!r}")
            batch_id = body["batch_id"]
            committed = body["committed"]
            if not isinstance(batch_id, int) or batch_id < 0 or not isinstance(committed, bool):
                raise ValueError("bad batch_id or committed")
            ranges: dict[TopicPartition, tuple[int, int]] = {}
            for topic, parts in body["offsets"].items():
                for partition, (first, end) in parts.items():
                    ranges[TopicPartition(topic, int(partition))] = (int(first), int(end))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise MalformedZookeeperDataError(path or "?", data, f"not a batch log: {e}") from e
        return cls(batch_id, committed, ranges)


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
        offsets = await _commit(self.connector, record.ranges)
        await self.node.write(replace(record, committed=True))
        return offsets

    def __repr__(self) -> str:
        return f"<ZookeeperBatchLog {self.node!r}>"


@dataclass(frozen=True)
class BatchMark:
    """One partition's entry in the Kafka batch log: the metadata committed with its offset.

    Encoded as compact JSON, ``{"b":7,"c":false,"r":[1200,1450]}`` (plus ``"n":<name>`` for a
    log not named ``batch_id``): far below the broker's ``offset.metadata.max.bytes`` (4096
    by default).

    Attributes:
        batch_id: the batch the partition was last part of.
        committed: whether that batch's offsets were committed (``fn`` returned).
        first: the batch's first offset of the partition.
        end: the batch's next offset of the partition (last offset + 1).
        name: the batch log's name (``foreach_batch(batch_log_name=...)``).
    """

    batch_id: int
    committed: bool
    first: int
    end: int
    name: str = DEFAULT_BATCH_LOG_NAME

    def encode(self) -> str:
        """The metadata string."""
        body: dict[str, object] = {
            "b": self.batch_id,
            "c": self.committed,
            "r": [self.first, self.end],
        }
        if self.name != DEFAULT_BATCH_LOG_NAME:
            body["n"] = self.name
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> BatchMark | None:
        """Read a metadata string written by :meth:`encode`.

        Args:
            text: the metadata committed with an offset.

        Returns:
            The mark; ``None`` for anything else (empty metadata, another client's), which
            is not an error: any consumer of the group may commit the partition.
        """
        if not text.startswith("{"):
            return None
        try:
            body = json.loads(text)
            batch_id, committed, (first, end) = body["b"], body["c"], body["r"]
            name = body.get("n", DEFAULT_BATCH_LOG_NAME)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        ints = (batch_id, first, end)
        if (
            not all(isinstance(v, int) and not isinstance(v, bool) for v in ints)
            or not isinstance(committed, bool)
            or not isinstance(name, str)
            or batch_id < 0
            or not 0 <= first < end
        ):
            return None
        return cls(batch_id, committed, first, end, name)


def last_batch(marks: Mapping[TopicPartition, BatchMark]) -> BatchRecord | None:
    """The last batch a Kafka batch log shows, from its partitions' marks.

    Args:
        marks: ``{tp: mark}`` of one log (one name).

    Returns:
        ``None`` without marks; else the largest batch id found, committed when every
        partition marked with it is (a batch's commit is one OffsetCommit, but a partition
        may fail in it), with the ranges of all those partitions.
    """
    if not marks:
        return None
    batch_id = max(m.batch_id for m in marks.values())
    of_last = {tp: m for tp, m in marks.items() if m.batch_id == batch_id}
    return BatchRecord(
        batch_id,
        all(m.committed for m in of_last.values()),
        {tp: (m.first, m.end) for tp, m in sorted(of_last.items())},
    )


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
        stats = self.connector.statistics()
        owned = set(stats.owned_partitions)
        known = stats.committed_offsets
        offsets = {
            tp: known.get(tp, first) for tp, (first, _) in record.ranges.items() if tp in owned
        }
        await self._commit(offsets, record, committed=False)

    async def complete(self, record: BatchRecord) -> dict[TopicPartition, int]:
        """Commit the end offsets of the batch's owned partitions with ``"c":true``.

        Raises:
            CommitFencedError: the member's generation is over; nothing was committed.
            GroupCoordinatorError: no heartbeat was answered for a session timeout.
            OffsetCommitError: some offsets were not committed after every attempt.
        """
        stats = self.connector.statistics()
        owned = set(stats.owned_partitions)
        known = stats.committed_offsets
        offsets = {
            tp: max(end, known.get(tp, -1)) for tp, (_, end) in record.ranges.items() if tp in owned
        }
        await self._commit(offsets, record, committed=True)
        return offsets

    async def _commit(
        self, offsets: Mapping[TopicPartition, int], record: BatchRecord, *, committed: bool
    ) -> None:
        """One fenced OffsetCommit of ``offsets`` with the batch's marks, and its bookkeeping
        (what ``commit_offsets`` does besides the request)."""
        if not offsets:
            return
        conn = self.connector
        group = conn.config.group_id
        await _wait_gate(conn)
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


@dataclass(frozen=True)
class PartitionRun:
    """Consecutive records of one partition with strictly increasing offsets, as Arrow.

    A zero-copy slice of a ``pyarrow.RecordBatch`` in the Kafka source's schema (as
    ``KafkaStream.arrow_batches`` hands them out); :func:`partition_runs` cuts a batch into
    runs. The bridge buffers, holds and replays records as runs: a batch is made by slicing
    and concatenating them, never with a Python object per record.

    Attributes:
        tp: the partition.
        rows: its records, at least one, in increasing offset order.
    """

    tp: TopicPartition
    rows: pa.RecordBatch

    def __len__(self) -> int:
        return int(self.rows.num_rows)

    @property
    def offsets(self) -> npt.NDArray[np.int64]:
        """The ``offset`` column as a numpy array (a view: no copy)."""
        offsets: npt.NDArray[np.int64] = self.rows.column("offset").to_numpy(zero_copy_only=False)
        return offsets

    @property
    def first(self) -> int:
        """The first offset."""
        return int(self.rows.column("offset")[0].as_py())

    @property
    def end(self) -> int:
        """The last offset + 1."""
        return int(self.rows.column("offset")[-1].as_py()) + 1

    def slice(self, start: int, length: int | None = None) -> PartitionRun:
        """Rows ``start`` to ``start + length`` (to the end without ``length``), no copy."""
        return PartitionRun(self.tp, self.rows.slice(start, length))

    def __repr__(self) -> str:
        return f"<PartitionRun {self.tp} [{self.first}, {self.end}) rows={len(self)}>"


def partition_runs(batch: pa.RecordBatch) -> list[PartitionRun]:
    """Cut a record batch into runs of one partition with strictly increasing offsets.

    The cuts come from comparing every row's ``topic``, ``partition`` and ``offset`` with the
    row before (pyarrow.compute and numpy, no loop over the rows); the runs are zero-copy
    slices of ``batch``.

    Args:
        batch: records in the Kafka source's schema, ``topic``, ``partition`` and ``offset``
            not null (as ``KafkaStream.arrow_batches`` and ``records_to_arrow`` make them).

    Returns:
        The runs in row order; ``[]`` for an empty batch.
    """
    rows = int(batch.num_rows)
    if rows == 0:
        return []
    topics = batch.column("topic")
    partitions = batch.column("partition").to_numpy(zero_copy_only=False)
    offsets = batch.column("offset").to_numpy(zero_copy_only=False)
    cuts = (partitions[1:] != partitions[:-1]) | (offsets[1:] <= offsets[:-1])
    changed = pc.not_equal(topics.slice(1), topics.slice(0, rows - 1))
    cuts |= changed.to_numpy(zero_copy_only=False)
    starts: list[int] = [0, *(np.flatnonzero(cuts) + 1).tolist()]
    ends = [*starts[1:], rows]
    return [
        PartitionRun(TopicPartition(topics[s].as_py(), int(partitions[s])), batch.slice(s, e - s))
        for s, e in zip(starts, ends, strict=True)
    ]


def batch_ranges(runs: Iterable[PartitionRun]) -> dict[TopicPartition, tuple[int, int]]:
    """``{tp: (first offset, last offset + 1)}`` of a batch's records.

    Args:
        runs: the batch, as runs (:func:`partition_runs`); a partition may have several.

    Returns:
        Per partition, its smallest offset and its largest + 1.
    """
    ranges: dict[TopicPartition, tuple[int, int]] = {}
    for run in runs:
        first, end = run.first, run.end
        got = ranges.get(run.tp)
        ranges[run.tp] = (first, end) if got is None else (min(got[0], first), max(got[1], end))
    return ranges


def take_rows(
    runs: Sequence[PartitionRun], count: int
) -> tuple[list[PartitionRun], list[PartitionRun]]:
    """Split runs after their first ``count`` rows, slicing the run the cut falls in.

    Args:
        runs: runs in arrival order.
        count: the rows to take, >= 0.

    Returns:
        ``(head, tail)``: runs holding the first ``count`` rows (all of them when there are
        fewer), and those holding the rest, both in order.
    """
    head: list[PartitionRun] = []
    left = count
    for i, run in enumerate(runs):
        if left <= 0:
            return head, list(runs[i:])
        if len(run) <= left:
            head.append(run)
            left -= len(run)
        else:
            head.append(run.slice(0, left))
            return head, [run.slice(left), *runs[i + 1 :]]
    return head, []


def split_replay(
    runs: Sequence[PartitionRun],
    targets: Mapping[TopicPartition, tuple[int, int]],
) -> tuple[list[PartitionRun], list[PartitionRun], set[TopicPartition]]:
    """Split buffered runs into the records of a batch being replayed and the rest.

    A target partition's run is cut at the target's end offset (a binary search in its
    offsets; the two parts are slices).

    Args:
        runs: buffered runs, in arrival order.
        targets: ``{tp: (first, end)}`` of the batch being replayed.

    Returns:
        ``(batch, rest, reached)``: the records of target partitions below their end
        offset, the others in their order, and the target partitions whose last offset
        (``end - 1``) or beyond has been seen.
    """
    batch: list[PartitionRun] = []
    rest: list[PartitionRun] = []
    reached: set[TopicPartition] = set()
    for run in runs:
        target = targets.get(run.tp)
        if target is None:
            rest.append(run)
            continue
        end = target[1]
        cut = int(np.searchsorted(run.offsets, end, side="left"))
        if cut == len(run):
            batch.append(run)
        elif cut == 0:
            rest.append(run)
        else:
            batch.append(run.slice(0, cut))
            rest.append(run.slice(cut))
        if run.end >= end:
            reached.add(run.tp)
    return batch, rest, reached


def batch_table(runs: Sequence[PartitionRun], include_headers: bool = False) -> pa.Table:
    """The batch's records as one Arrow table for ``spark.createDataFrame``.

    Args:
        runs: the batch.
        include_headers: with the ``headers`` column (dropped from runs that have it when
            ``False``).

    Returns:
        A ``pyarrow.Table`` with schema ``arrow_schema(include_headers)``, one chunk per run
        (but ``headers``: one chunk, copied).

    Raises:
        ValueError: ``include_headers`` and a run was read without headers.
    """
    schema = arrow_schema(include_headers)
    names = schema.names
    batches = []
    for run in runs:
        have = run.rows.schema.names
        if have == names:
            batches.append(run.rows)
        elif include_headers and "headers" not in have:
            raise ValueError(f"{run!r} was read without headers")
        else:
            batches.append(run.rows.select(names))
    table = pa.Table.from_batches(batches, schema=schema)
    if include_headers and table.num_rows:
        # createDataFrame rebuilds list columns chunk by chunk (pa.ListArray.from_arrays),
        # which refuses a slice whose offsets do not start at 0 once it has nulls: the
        # headers column goes as one new chunk (a copy of that column alone).
        i = schema.get_field_index("headers")
        headers = pa.concat_arrays(table.column(i).chunks)
        table = table.set_column(i, schema.field(i), pa.chunked_array([headers]))
    return table


def _rows(runs: Iterable[PartitionRun]) -> int:
    return sum(len(run) for run in runs)


def _current(
    registry: Mapping[TopicPartition, PartitionTopicInfo],
    tp: TopicPartition,
    source: PartitionTopicInfo | None,
) -> bool:
    """Whether records handed out under ``source`` still belong to this member's ownership of
    ``tp``: the partition was not released (nor released and claimed again) since."""
    return source is not None and source.active and registry.get(tp) is source


@dataclass(frozen=True)
class _Held:
    """A batch taken for ``fn`` and not committed yet, kept until it is.

    The streams handed its records out (the consumed offsets are past them), so a retry in
    this process gets them from here; partitions released meanwhile are read again by the
    streams from the committed offset instead.

    Attributes:
        batch_id: its batch id.
        runs: its records, as handed to ``fn``.
        sources: per partition, the ``PartitionTopicInfo`` (the ownership) the records were
            handed out under.
    """

    batch_id: int
    runs: list[PartitionRun]
    sources: Mapping[TopicPartition, PartitionTopicInfo | None]


class _Buffer:
    """What the bridge keeps for one connector across calls: records taken from the streams
    and not yet in a batch (Arrow runs, in arrival order), and the batch handed to ``fn`` and
    not yet committed.

    Every buffered partition is tagged with the ``PartitionTopicInfo`` its records were
    handed out under. A rebalance that releases a partition (and maybe claims it again)
    replaces that object, and the new one starts at the committed offset: the buffered
    records of the old one are dropped, or they would be delivered twice and, worse, make a
    replay believe it had reached the end of a partition it had not read yet.
    """

    def __init__(self) -> None:
        self.runs: list[PartitionRun] = []
        self.sources: dict[TopicPartition, PartitionTopicInfo | None] = {}
        self.held: _Held | None = None
        self.replaying = False
        self.ended = 0
        # Set when records the streams handed out could not be buffered: nothing of this
        # connector may be committed any more (later offsets would skip them).
        self.failed: BaseException | None = None
        self._changed = anyio.Event()

    @property
    def size(self) -> int:
        """The records buffered (not counting the held batch)."""
        return _rows(self.runs)

    def notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_change(self) -> None:
        await self._changed.wait()

    def adopt(self, tp: TopicPartition, source: PartitionTopicInfo | None) -> None:
        """Tag ``tp`` with ``source``, dropping its records buffered under another one."""
        if tp in self.sources and self.sources[tp] is source:
            return
        if tp in self.sources:
            self._drop({tp})
        self.sources[tp] = source

    def add(
        self,
        batch: pa.RecordBatch,
        registry: Mapping[TopicPartition, PartitionTopicInfo],
    ) -> None:
        """Append a record batch a stream just handed out, as runs.

        Must run without awaiting after the stream returned it: ``registry`` then still
        holds the ``PartitionTopicInfo`` each record was handed out under (an iterator hands
        out records of active partitions only, and a release replaces the registry).
        """
        runs = partition_runs(batch)
        for tp in dict.fromkeys(run.tp for run in runs):
            self.adopt(tp, registry.get(tp))
        self.runs.extend(runs)

    def take(self, max_records: int) -> list[PartitionRun]:
        """Take the first ``max_records`` buffered records (all when fewer)."""
        batch, self.runs = take_rows(self.runs, max_records)
        return batch

    def drop_stale(self, registry: Mapping[TopicPartition, PartitionTopicInfo]) -> None:
        """Forget buffered records of partitions released since they were handed out."""
        stale = [tp for tp, source in self.sources.items() if not _current(registry, tp, source)]
        for tp in stale:
            del self.sources[tp]
        if stale:
            self._drop(set(stale))

    def _drop(self, tps: set[TopicPartition]) -> None:
        kept = [run for run in self.runs if run.tp not in tps]
        if len(kept) != len(self.runs):
            log.info("dropping %d buffered records of released partitions", self.size - _rows(kept))
            self.runs = kept

    def hold(self, batch_id: int, runs: list[PartitionRun]) -> None:
        """Keep a batch until it is committed (taken right after it left the buffer)."""
        tps = {run.tp for run in runs}
        self.held = _Held(batch_id, runs, {tp: self.sources.get(tp) for tp in tps})

    def without_headers(self) -> bool:
        """Whether some records kept (buffered or held) were read without headers."""
        kept = [*self.runs, *(self.held.runs if self.held is not None else ())]
        return any("headers" not in run.rows.schema.names for run in kept)

    def reclaim(
        self,
        registry: Mapping[TopicPartition, PartitionTopicInfo],
        next_id: int,
        replay: BatchRecord | None,
    ) -> list[PartitionRun]:
        """At the start of a call: what becomes of the batch a previous call left uncommitted.

        Only records of partitions whose ownership did not change are kept (the others are
        read again by the streams, from the committed offset).

        Args:
            registry: the connector's topic registry now.
            next_id: the batch id the batch log says comes next.
            replay: the unfinished batch the batch log says to replay first, if any.

        Returns:
            The records of the held batch to replay (empty when nothing is held, or the held
            batch is not the one to replay); the batch stays held until the replay replaces
            it (a call cancelled before leaves it for the next one). A held batch the log
            never recorded (writing the log failed before ``fn`` ran) goes back to the front
            of the buffer instead, and so do held partitions the replayed batch's log entry
            leaves out (a Kafka batch log whose first write failed for some of them: ``fn``
            never saw them); one the log shows finished is dropped.
        """
        held = self.held
        if held is None:
            return []
        current = {tp for tp, source in held.sources.items() if _current(registry, tp, source)}
        if replay is not None and replay.batch_id == held.batch_id:
            ranges = batch_ranges(held.runs)
            keep = {tp for tp, r in replay.ranges.items() if tp in current and ranges.get(tp) == r}
            back = {tp for tp in current if tp not in replay.ranges}
            if back:
                log.info(
                    "batch %d: %d partitions are not in its log entry; their records go back "
                    "to the buffer",
                    held.batch_id,
                    len(back),
                )
                for tp in back:
                    self.adopt(tp, held.sources[tp])
                self.runs[:0] = [run for run in held.runs if run.tp in back]
                held = self.held = replace(
                    held,
                    runs=[run for run in held.runs if run.tp not in back],
                    sources={tp: s for tp, s in held.sources.items() if tp not in back},
                )
            log.info(
                "batch %d: replaying %d partitions from the records held, %d from the streams",
                held.batch_id,
                len(keep),
                len(replay.ranges) - len(keep),
            )
        elif replay is None and held.batch_id == next_id:
            keep = current
            log.info("batch %d never reached fn: its records go back to the buffer", next_id)
        else:
            self.held = None  # the batch log shows it finished
            return []
        for tp in keep:
            self.adopt(tp, held.sources[tp])
        runs = [run for run in held.runs if run.tp in keep]
        if replay is None:
            self.held = None
            self.runs[:0] = runs
            return []
        return runs


_buffers: weakref.WeakKeyDictionary[ConsumerConnector, _Buffer] = weakref.WeakKeyDictionary()


def _open(
    stream: KafkaStream, max_records: int, include_headers: bool
) -> tuple[AsyncIterator[Any], bool]:
    """The stream's ``arrow_batches``; its ``batches`` (``MessageAndMetadata`` lists) when it
    was created with a key or value decoder, which ``arrow_batches`` refuses.

    Returns:
        ``(iterator, columnar)``.
    """
    try:
        return stream.arrow_batches(max_records, include_headers=include_headers), True
    except ValueError:  # max_records is checked: a decoder
        return stream.batches(max_records), False


async def _close(batches: AsyncIterator[Any]) -> None:
    aclose = getattr(batches, "aclose", None)
    if aclose is not None:
        with anyio.CancelScope(shield=True):
            await aclose()


def _decoded_to_arrow(
    records: Sequence[MessageAndMetadata], include_headers: bool, buf: _Buffer
) -> pa.RecordBatch:
    """Records of a stream with decoders as Arrow (a Python object per record: the slow path).

    Raises:
        TypeError: a decoded key or value is neither bytes nor str. The records are lost to
            the buffer, so the buffer is marked failed: nothing after them may be committed.
    """
    try:
        return records_to_arrow(records, include_headers=include_headers)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        buf.failed = TypeError(
            "a stream's key_decoder or value_decoder returned something other than bytes or "
            f"str ({e}); foreach_batch puts keys and values in binary columns. Records were "
            "taken from the streams and are not committed: close this connector and create "
            "the streams without decoders (or with decoders that return bytes)"
        )
        raise buf.failed from e


async def _pump(
    connector: ConsumerConnector,
    stream: KafkaStream,
    buf: _Buffer,
    max_records: int,
    include_headers: bool,
) -> None:
    """Move record batches from one stream into the buffer, keeping at most ~2 batches
    buffered.

    The bound is lifted while a batch is replayed: the replay waits for its partitions'
    records, which may come after more than two batches of other partitions' records; a
    full buffer would keep them out for good.

    Cancellation is safe: ``arrow_batches`` (``batches``) only waits before it takes its
    first record, and a batch it yields is in the buffer before the next await.
    """
    batches, columnar = _open(stream, max_records, include_headers)
    try:
        while True:
            while not buf.replaying and buf.size >= 2 * max_records:
                await buf.wait_change()
            try:
                got = await anext(batches)
            except ConsumerTimeoutError:
                # consumer.timeout.ms: nothing new. The error ended the generator, not the
                # stream: go on with a new one.
                await _close(batches)
                batches, columnar = _open(stream, max_records, include_headers)
                continue
            except StopAsyncIteration:
                return
            batch = got if columnar else _decoded_to_arrow(got, include_headers, buf)
            buf.add(batch, connector.topic_registry)
            buf.notify()
    finally:
        try:
            await _close(batches)
        finally:
            buf.ended += 1
            buf.notify()


def _owned(connector: ConsumerConnector) -> set[TopicPartition]:
    return set(connector.statistics().owned_partitions)


async def _take(
    connector: ConsumerConnector,
    buf: _Buffer,
    streams: int,
    max_records: int,
    max_interval_s: float,
) -> list[PartitionRun] | None:
    """The next batch: 1 to ``max_records`` records, waiting at most ``max_interval_s``
    after the first one. ``None`` when every stream ended."""
    while True:
        buf.drop_stale(connector.topic_registry)
        if buf.ended >= streams:
            return None
        if buf.runs:
            break
        await buf.wait_change()
    deadline = time.monotonic() + max_interval_s
    while buf.size < max_records and buf.ended < streams:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        with anyio.move_on_after(left):
            await buf.wait_change()
    if buf.ended >= streams:
        return None
    buf.drop_stale(connector.topic_registry)
    batch = buf.take(max_records)
    buf.notify()
    return batch or await _take(connector, buf, streams, max_records, max_interval_s)


async def _take_replay(
    connector: ConsumerConnector,
    buf: _Buffer,
    streams: int,
    targets: Mapping[TopicPartition, tuple[int, int]],
    held: Sequence[PartitionRun] = (),
) -> list[PartitionRun] | None:
    """The records of a batch being replayed: every target partition up to its end.

    Args:
        held: the batch's records the bridge still holds (see :meth:`_Buffer.reclaim`);
            their partitions are complete, the others are read from the buffer.

    Returns:
        The batch; ``None`` when every stream ended first.
    """
    complete = {run.tp for run in held}
    batch = list(held)
    reached = set(complete)
    buf.replaying = True
    try:
        while True:
            buf.drop_stale(connector.topic_registry)
            taken, buf.runs, seen = split_replay(buf.runs, targets)
            # (Defensive: the ownership that handed the held records out never does so again.)
            batch.extend(run for run in taken if run.tp not in complete)
            reached |= seen
            buf.notify()
            if reached >= set(targets):
                return batch
            if buf.ended >= streams:
                return None
            await buf.wait_change()
    finally:
        buf.replaying = False
        buf.notify()


def _run_batch(
    spark: SparkSession,
    fn: BatchFunction,
    runs: list[PartitionRun],
    batch_id: int,
    include_headers: bool,
) -> None:
    """Build the DataFrame and call ``fn`` (in a worker thread)."""
    df = spark.createDataFrame(batch_table(runs, include_headers))
    fn(df, batch_id)


async def _wait_gate(connector: ConsumerConnector) -> None:
    """While the session is in doubt, give it the session timeout to come back."""
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


async def _commit(
    connector: ConsumerConnector, ranges: Mapping[TopicPartition, tuple[int, int]]
) -> dict[TopicPartition, int]:
    """Commit the batch's end offsets of partitions still owned, forward only."""
    await _wait_gate(connector)
    stats = connector.statistics()
    owned = set(stats.owned_partitions)
    known = stats.committed_offsets
    offsets = {
        tp: end for tp, (_, end) in ranges.items() if tp in owned and end > known.get(tp, -1)
    }
    if offsets:
        await connector.commit_offsets(offsets)
    return offsets


def _resolve(
    connector_or_streams: ConsumerConnector
    | Iterable[KafkaStream]
    | Mapping[str, Sequence[KafkaStream]],
    connector: ConsumerConnector | None,
) -> tuple[ConsumerConnector, list[KafkaStream]]:
    if isinstance(connector_or_streams, ConsumerConnector):
        if connector is not None and connector is not connector_or_streams:
            raise ValueError("two different connectors given")
        return connector_or_streams, connector_or_streams.streams()
    if isinstance(connector_or_streams, Mapping):
        streams = [s for group in connector_or_streams.values() for s in group]
    else:
        streams = list(connector_or_streams)
    if connector is None:
        raise TypeError("pass connector=... with streams: offsets are committed through it")
    if not all(isinstance(s, KafkaStream) for s in streams):
        raise TypeError("expected KafkaStream objects")
    return connector, streams


async def _recover(
    connector: ConsumerConnector, batch_log: BatchLogStore
) -> tuple[int, BatchRecord | None]:
    """The next batch id, and the batch to replay first (``None`` if the last one finished)."""
    last = await batch_log.load()
    if last is None:
        return 0, None
    if last.committed:
        return last.batch_id + 1, None
    committed = await connector.offset_store.fetch(list(last.ranges))
    if any(committed.get(tp, -1) >= end for tp, (_, end) in last.ranges.items()):
        # Offsets are committed only after fn returned: batch N was done, its commit cut short.
        log.info("batch %d was processed; finishing its commit", last.batch_id)
        await batch_log.complete(last)
        return last.batch_id + 1, None
    owned = _owned(connector)
    targets = {tp: r for tp, r in last.ranges.items() if tp in owned}
    if len(targets) < len(last.ranges):
        log.warning(
            "replaying batch %d partially: partitions %s are owned by other members now",
            last.batch_id,
            ", ".join(str(tp) for tp in sorted(set(last.ranges) - set(targets))),
        )
    log.info("replaying batch %d (%d partitions)", last.batch_id, len(targets))
    return last.batch_id, replace(last, ranges=targets)


async def foreach_batch(
    connector_or_streams: ConsumerConnector
    | Iterable[KafkaStream]
    | Mapping[str, Sequence[KafkaStream]],
    spark: SparkSession,
    fn: BatchFunction,
    *,
    connector: ConsumerConnector | None = None,
    max_records: int = 10000,
    max_interval_ms: int = 1000,
    include_headers: bool = False,
    max_batches: int | None = None,
    batch_log_name: str = DEFAULT_BATCH_LOG_NAME,
) -> int:
    """Feed a connector's records to ``fn(df, batch_id)`` in micro-batches; commit after each.

    Per batch: up to ``max_records`` records are collected (a batch closes
    ``max_interval_ms`` after its first record, or when full); the batch log records the
    batch; ``fn`` gets a DataFrame in the Kafka source's schema and the batch id, in a
    worker thread (``anyio.to_thread.run_sync``), while the event loop goes on fetching and
    keeping the group session (ZooKeeper, or heartbeats to the group coordinator); when
    ``fn`` returned, the batch's offsets are committed (for partitions still owned, never
    backwards) and the batch is marked committed.

    The batch log is chosen by the connector (:func:`open_batch_log`): for a
    ``ZookeeperConsumerConnector`` a ZooKeeper node (:class:`ZookeeperBatchLog`), for a
    ``KafkaConsumerConnector`` the metadata of the group's committed offsets
    (:class:`KafkaBatchLog`; the offsets and the mark are one generation-fenced commit).

    Delivery is at-least-once; with an idempotent sink keyed on ``batch_id`` it is
    exactly-once: after a crash or an exception in ``fn``, the next run starts with the
    unfinished batch — same id, same records (for the partitions this member still owns).
    Records of partitions released by a rebalance are dropped from the buffer and not
    committed. Records taken from the streams but not yet batched stay with the connector
    for the next call, and so does a batch until it is committed: when ``fn`` raised and the
    service calls ``foreach_batch`` again with the same connector, the streams have handed
    that batch's records out already, and the bridge replays them from memory.

    Records move as Arrow: each stream is read with ``arrow_batches(max_records,
    include_headers=...)`` (so interceptors' ``on_consume`` sees every batch, as there), and a
    batch is sliced and concatenated from those record batches. Streams created with a key
    or value decoder are read with ``batches()`` instead and converted with
    ``records_to_arrow``; their decoders must return bytes (or str, stored as UTF-8).

    Args:
        connector_or_streams: a started connector (ZooKeeper- or Kafka-coordinated) whose
            streams exist (all its streams are read), or some of its streams (a list, or the
            dict of ``create_message_streams``) together with ``connector=``.
        spark: the session the DataFrames are created in.
        fn: called as ``fn(df, batch_id)``; its return value is ignored.
        connector: the connector the streams belong to, when streams are passed.
        max_records: the largest batch, >= 1.
        max_interval_ms: how long a batch may wait for more records after its first, >= 0.
        include_headers: add the ``headers`` column. Records are read with headers only
            when asked, so pass the same value to every call with one connector.
        max_batches: return after this many batches (``None``: until the streams end).
        batch_log_name: the batch log's name: its node under ``/consumers/<group>/spark/``
            (ZooKeeper), or the name in its offset metadata (Kafka). Give each bridge in one
            group its own.

    Returns:
        The number of batches processed and committed by this call.

    Raises:
        InvalidConfigError: the connector has ``auto.commit.enable=true`` (it would commit
            records before ``fn`` processed them).
        ValueError: ``max_records``, ``max_interval_ms`` or ``max_batches`` out of range;
            or ``include_headers=True`` while records kept from an earlier call with this
            connector were read without headers.
        TypeError: streams were passed without ``connector=``; or a stream's decoder
            returned something other than bytes or str (the records taken with it cannot be
            batched, so this and every later call with this connector raise it, and nothing
            past them is committed: start a new connector).
        BatchLogConflictError: another bridge writes the same batch log node (ZooKeeper).
        ZookeeperConnectionError: the commit found the ZooKeeper session suspended.
        GroupCoordinatorError: (Kafka-coordinated) no heartbeat was answered for a session
            timeout: nothing is committed while another member may own the partitions.
        CommitFencedError: the partitions were claimed by another member since (ZooKeeper),
            or the member's generation is over (Kafka): nothing of the batch was committed;
            it is replayed by the next call, for the partitions still owned.
        OffsetCommitError: Kafka refused the offsets (or the batch log's metadata).
        OffsetFetchError: (Kafka-coordinated) the batch log could not be read.
        Exception: whatever ``fn`` raised; that batch is not committed and is replayed by
            the next call, with the same connector or a new one.
    """
    conn, streams = _resolve(connector_or_streams, connector)
    if conn.config.auto_commit_enable:
        raise InvalidConfigError(
            "auto.commit.enable",
            "must be false for foreach_batch: offsets are committed after fn returns",
        )
    if max_records < 1:
        raise ValueError(f"max_records must be >= 1, got {max_records}")
    if max_interval_ms < 0:
        raise ValueError(f"max_interval_ms must be >= 0, got {max_interval_ms}")
    if max_batches is not None and max_batches < 1:
        raise ValueError(f"max_batches must be >= 1 or None, got {max_batches}")
    buf = _buffers.setdefault(conn, _Buffer())
    if buf.failed is not None:
        raise TypeError(f"an earlier foreach_batch with this connector failed: {buf.failed}")
    batch_log = open_batch_log(conn, batch_log_name)
    next_id, replay = await _recover(conn, batch_log)
    buf.ended = 0
    held = buf.reclaim(conn.topic_registry, next_id, replay)
    if include_headers and buf.without_headers():
        raise ValueError(
            "include_headers=True, but records kept from an earlier call with this connector "
            "were read without headers: pass the same include_headers to every call"
        )
    done = 0
    error: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            for stream in streams:
                tg.start_soon(_pump, conn, stream, buf, max_records, include_headers)
            try:
                while max_batches is None or done < max_batches:
                    if replay is not None:
                        runs = await _take_replay(conn, buf, len(streams), replay.ranges, held)
                        record = replay
                    else:
                        runs = await _take(
                            conn, buf, len(streams), max_records, max_interval_ms / 1000
                        )
                        record = BatchRecord(next_id, False, batch_ranges(runs or ()))
                    if runs is None:
                        break
                    # Until it is committed: a retry in this process replays it from here.
                    buf.hold(next_id, runs)
                    if replay is None:
                        await batch_log.begin(record)
                    log.debug("batch %d: %d records", next_id, _rows(runs))
                    await anyio.to_thread.run_sync(
                        _run_batch, spark, fn, runs, next_id, include_headers
                    )
                    with anyio.CancelScope(shield=True):
                        await batch_log.complete(record)
                        buf.held = None
                    next_id += 1
                    done += 1
                    replay = None
            except Exception as e:
                error = e
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        errors = [e for e in group.exceptions if isinstance(e, Exception)]
        if len(group.exceptions) == 1 and errors:
            raise errors[0] from group
        raise
    if error is not None:
        raise error
    return done
