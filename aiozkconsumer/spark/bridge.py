"""Push mode: ``await foreach_batch(connector, spark, fn)`` — micro-batches from an async service.

For services that already run a :class:`~aiozkconsumer.ZookeeperConsumerConnector` and want
Spark's ``foreachBatch`` contract without a streaming query: records are collected from the
connector's streams into micro-batches, each becomes a DataFrame through Arrow (the Kafka
source's schema), ``fn(df, batch_id)`` runs in a worker thread — the event loop keeps
fetching and heartbeating ZooKeeper meanwhile — and the batch's offsets are committed only
after ``fn`` returned.

Batch ids live with the group, in a persistent ZooKeeper node the original layout does not
use, ``/consumers/<group>/spark/batch_id``. It holds the last batch handed to ``fn`` as JSON::

    {"version": 1, "batch_id": 7, "committed": false,
     "offsets": {"payments": {"0": [1200, 1450], "3": [980, 1010]}}}

(``[first offset, next offset]`` per partition). The node is written before ``fn`` runs
(``committed: false``) and again after the offsets were committed (``committed: true``), so
after a crash the next run knows whether batch 7 was finished and, if not, hands ``fn`` batch
7 again with exactly those records. Ids are contiguous and survive restarts; an idempotent
sink that stores the last batch id it wrote can skip a replayed batch.
"""

from __future__ import annotations

import json
import logging
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import anyio
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from ..connector import ZookeeperConsumerConnector
from ..errors import (
    ConsumerError,
    ConsumerTimeoutError,
    InvalidConfigError,
    MalformedZookeeperDataError,
    ZookeeperBadVersionError,
    ZookeeperNodeExistsError,
    ZookeeperNoNodeError,
)
from ..records import MessageAndMetadata, TopicPartition
from ..stream import KafkaStream
from ..zk import layout
from ..zk.client import ZkClient
from .schema import records_to_arrow

__all__ = [
    "BATCH_LOG_VERSION",
    "BatchLog",
    "BatchLogConflictError",
    "BatchRecord",
    "batch_log_path",
    "batch_ranges",
    "foreach_batch",
    "split_replay",
]

log = logging.getLogger(__name__)

BATCH_LOG_VERSION = 1
"""The ``version`` field of the batch log node's JSON."""

BatchFunction = Callable[[DataFrame, int], object]
"""``fn(df, batch_id)``, as ``DataStreamWriter.foreachBatch`` takes it."""


class BatchLogConflictError(ConsumerError):
    """The batch log node changed under us: another bridge writes the same node.

    Two bridges in one group must use different nodes (``batch_log_path``).
    """


def batch_log_path(group: str, name: str = "batch_id") -> str:
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
    """The batch log node, written with compare-and-set on its version.

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


def batch_ranges(records: Iterable[MessageAndMetadata]) -> dict[TopicPartition, tuple[int, int]]:
    """``{tp: (first offset, last offset + 1)}`` of a batch's records."""
    ranges: dict[TopicPartition, tuple[int, int]] = {}
    for r in records:
        tp = TopicPartition(r.topic, r.partition)
        got = ranges.get(tp)
        if got is None:
            ranges[tp] = (r.offset, r.offset + 1)
        else:
            ranges[tp] = (min(got[0], r.offset), max(got[1], r.offset + 1))
    return ranges


def split_replay(
    records: Sequence[MessageAndMetadata],
    targets: Mapping[TopicPartition, tuple[int, int]],
) -> tuple[list[MessageAndMetadata], list[MessageAndMetadata], set[TopicPartition]]:
    """Split records into those of a batch being replayed and the rest.

    Args:
        records: buffered records, in arrival order.
        targets: ``{tp: (first, end)}`` of the batch being replayed.

    Returns:
        ``(batch, rest, reached)``: the records of target partitions below their end
        offset, the others in their order, and the target partitions whose last offset
        (``end - 1``) or beyond has been seen.
    """
    batch: list[MessageAndMetadata] = []
    rest: list[MessageAndMetadata] = []
    reached: set[TopicPartition] = set()
    for r in records:
        tp = TopicPartition(r.topic, r.partition)
        target = targets.get(tp)
        if target is None or r.offset >= target[1]:
            rest.append(r)
        else:
            batch.append(r)
        if target is not None and r.offset >= target[1] - 1:
            reached.add(tp)
    return batch, rest, reached


class _Buffer:
    """Records taken from the streams and not yet in a batch (kept per connector)."""

    def __init__(self) -> None:
        self.records: list[MessageAndMetadata] = []
        self.ended = 0
        self._changed = anyio.Event()

    def notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_change(self) -> None:
        await self._changed.wait()


_buffers: weakref.WeakKeyDictionary[ZookeeperConsumerConnector, _Buffer] = (
    weakref.WeakKeyDictionary()
)


async def _pump(stream: KafkaStream, buf: _Buffer, max_records: int) -> None:
    """Move records from one stream into the buffer, keeping at most ~2 batches buffered.

    Cancellation is safe: ``next_batch`` only waits before it takes its first record.
    """
    it = stream.iterator
    try:
        while True:
            while len(buf.records) >= 2 * max_records:
                await buf.wait_change()
            try:
                chunk = await it.next_batch(max_records)
            except ConsumerTimeoutError:
                continue  # consumer.timeout.ms: nothing new, keep waiting
            except StopAsyncIteration:
                return
            buf.records.extend(chunk)
            buf.notify()
    finally:
        buf.ended += 1
        buf.notify()


def _owned(connector: ZookeeperConsumerConnector) -> set[TopicPartition]:
    return set(connector.statistics().owned_partitions)


def _drop_released(buf: _Buffer, owned: set[TopicPartition]) -> None:
    """Forget buffered records of partitions another member may own now."""
    kept = [r for r in buf.records if TopicPartition(r.topic, r.partition) in owned]
    if len(kept) != len(buf.records):
        dropped = len(buf.records) - len(kept)
        log.info("dropping %d buffered records of released partitions", dropped)
        buf.records = kept


async def _take(
    connector: ZookeeperConsumerConnector,
    buf: _Buffer,
    streams: int,
    max_records: int,
    max_interval_s: float,
) -> list[MessageAndMetadata] | None:
    """The next batch: 1 to ``max_records`` records, waiting at most ``max_interval_s``
    after the first one. ``None`` when every stream ended."""
    while True:
        _drop_released(buf, _owned(connector))
        if buf.ended >= streams:
            return None
        if buf.records:
            break
        await buf.wait_change()
    deadline = time.monotonic() + max_interval_s
    while len(buf.records) < max_records and buf.ended < streams:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        with anyio.move_on_after(left):
            await buf.wait_change()
    if buf.ended >= streams:
        return None
    _drop_released(buf, _owned(connector))
    batch, buf.records = buf.records[:max_records], buf.records[max_records:]
    buf.notify()
    return batch or await _take(connector, buf, streams, max_records, max_interval_s)


async def _take_replay(
    connector: ZookeeperConsumerConnector,
    buf: _Buffer,
    streams: int,
    targets: Mapping[TopicPartition, tuple[int, int]],
) -> list[MessageAndMetadata] | None:
    """The records of a batch being replayed: every target partition up to its end."""
    batch: list[MessageAndMetadata] = []
    reached: set[TopicPartition] = set()
    while True:
        _drop_released(buf, _owned(connector))
        taken, buf.records, seen = split_replay(buf.records, targets)
        batch.extend(taken)
        reached |= seen
        buf.notify()
        if reached >= set(targets):
            return batch
        if buf.ended >= streams:
            return None
        await buf.wait_change()


def _run_batch(
    spark: SparkSession,
    fn: BatchFunction,
    records: list[MessageAndMetadata],
    batch_id: int,
    include_headers: bool,
) -> None:
    """Build the DataFrame and call ``fn`` (in a worker thread)."""
    table = pa.Table.from_batches([records_to_arrow(records, include_headers=include_headers)])
    df = spark.createDataFrame(table)
    fn(df, batch_id)


async def _commit(
    connector: ZookeeperConsumerConnector, ranges: Mapping[TopicPartition, tuple[int, int]]
) -> dict[TopicPartition, int]:
    """Commit the batch's end offsets of partitions still owned, forward only."""
    if not connector.gate.open:
        # The session is in doubt; give it the session timeout to come back.
        with anyio.move_on_after(connector.config.zookeeper_session_timeout_ms / 1000):
            await connector.gate.wait_open()
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
    connector_or_streams: ZookeeperConsumerConnector
    | Iterable[KafkaStream]
    | Mapping[str, Sequence[KafkaStream]],
    connector: ZookeeperConsumerConnector | None,
) -> tuple[ZookeeperConsumerConnector, list[KafkaStream]]:
    if isinstance(connector_or_streams, ZookeeperConsumerConnector):
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
    connector: ZookeeperConsumerConnector, batch_log: BatchLog
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
        await _commit(connector, last.ranges)
        await batch_log.write(replace(last, committed=True))
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
    connector_or_streams: ZookeeperConsumerConnector
    | Iterable[KafkaStream]
    | Mapping[str, Sequence[KafkaStream]],
    spark: SparkSession,
    fn: BatchFunction,
    *,
    connector: ZookeeperConsumerConnector | None = None,
    max_records: int = 10000,
    max_interval_ms: int = 1000,
    include_headers: bool = False,
    max_batches: int | None = None,
    batch_log_name: str = "batch_id",
) -> int:
    """Feed a connector's records to ``fn(df, batch_id)`` in micro-batches; commit after each.

    Per batch: up to ``max_records`` records are collected (a batch closes
    ``max_interval_ms`` after its first record, or when full); the batch log node records
    the batch; ``fn`` gets a DataFrame in the Kafka source's schema and the batch id, in a
    worker thread (``anyio.to_thread.run_sync``), while the event loop goes on fetching and
    heartbeating ZooKeeper; when ``fn`` returned, the batch's offsets are committed
    (``commit_offsets`` with explicit offsets, for partitions still owned) and the batch is
    marked committed.

    Delivery is at-least-once; with an idempotent sink keyed on ``batch_id`` it is
    exactly-once: after a crash or an exception in ``fn``, the next run starts with the
    unfinished batch — same id, same records (for the partitions this member still owns).
    Records of partitions released by a rebalance are dropped from the buffer and not
    committed. Records taken from the streams but not yet batched stay with the connector
    for the next call.

    Args:
        connector_or_streams: a started connector whose streams exist (all its streams are
            read), or some of its streams (a list, or the dict of ``create_message_streams``)
            together with ``connector=``.
        spark: the session the DataFrames are created in.
        fn: called as ``fn(df, batch_id)``; its return value is ignored.
        connector: the connector the streams belong to, when streams are passed.
        max_records: the largest batch, >= 1.
        max_interval_ms: how long a batch may wait for more records after its first, >= 0.
        include_headers: add the ``headers`` column.
        max_batches: return after this many batches (``None``: until the streams end).
        batch_log_name: the batch log node under ``/consumers/<group>/spark/`` (give each
            bridge in one group its own).

    Returns:
        The number of batches processed and committed by this call.

    Raises:
        InvalidConfigError: the connector has ``auto.commit.enable=true`` (it would commit
            records before ``fn`` processed them).
        ValueError: ``max_records``, ``max_interval_ms`` or ``max_batches`` out of range.
        TypeError: streams were passed without ``connector=``.
        BatchLogConflictError: another bridge writes the same batch log node.
        ZookeeperConnectionError: the commit found the ZooKeeper session suspended.
        OffsetCommitError: Kafka refused the offsets.
        Exception: whatever ``fn`` raised; that batch is not committed and is replayed by
            the next run.
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
    batch_log = BatchLog(conn.zk, batch_log_path(conn.config.group_id, batch_log_name))
    next_id, replay = await _recover(conn, batch_log)
    buf = _buffers.setdefault(conn, _Buffer())
    buf.ended = 0
    done = 0
    error: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            for stream in streams:
                tg.start_soon(_pump, stream, buf, max_records)
            try:
                while max_batches is None or done < max_batches:
                    if replay is not None:
                        records = await _take_replay(conn, buf, len(streams), replay.ranges)
                        record = replay
                    else:
                        records = await _take(
                            conn, buf, len(streams), max_records, max_interval_ms / 1000
                        )
                        record = BatchRecord(next_id, False, batch_ranges(records or ()))
                    if records is None:
                        break
                    if replay is None:
                        await batch_log.write(record)
                    log.debug("batch %d: %d records", next_id, len(records))
                    await anyio.to_thread.run_sync(
                        _run_batch, spark, fn, records, next_id, include_headers
                    )
                    with anyio.CancelScope(shield=True):
                        await _commit(conn, record.ranges)
                        await batch_log.write(replace(record, committed=True))
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
