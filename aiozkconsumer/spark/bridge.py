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
7 again with exactly those records. A new process (or a partition a rebalance took away and
gave back) reads them again from the committed offsets; a retry with the same connector gets
them from the bridge, which keeps a batch until it is committed (the streams handed its
records out already). Ids are contiguous and survive restarts; an idempotent sink that
stores the last batch id it wrote can skip a replayed batch.
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
from ..records import MessageAndMetadata, PartitionTopicInfo, TopicPartition
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
        records: its records, as handed to ``fn``.
        sources: per partition, the ``PartitionTopicInfo`` (the ownership) the records were
            handed out under.
    """

    batch_id: int
    records: list[MessageAndMetadata]
    sources: Mapping[TopicPartition, PartitionTopicInfo | None]


class _Buffer:
    """What the bridge keeps for one connector across calls: records taken from the streams
    and not yet in a batch, and the batch handed to ``fn`` and not yet committed.

    Every buffered partition is tagged with the ``PartitionTopicInfo`` its records were
    handed out under. A rebalance that releases a partition (and maybe claims it again)
    replaces that object, and the new one starts at the committed offset: the buffered
    records of the old one are dropped, or they would be delivered twice and, worse, make a
    replay believe it had reached the end of a partition it had not read yet.
    """

    def __init__(self) -> None:
        self.records: list[MessageAndMetadata] = []
        self.sources: dict[TopicPartition, PartitionTopicInfo | None] = {}
        self.held: _Held | None = None
        self.replaying = False
        self.ended = 0
        self._changed = anyio.Event()

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
            self._drop({(tp.topic, tp.partition)})
        self.sources[tp] = source

    def add(
        self,
        records: Sequence[MessageAndMetadata],
        registry: Mapping[TopicPartition, PartitionTopicInfo],
    ) -> None:
        """Append records a stream just handed out.

        Must run without awaiting after the stream returned them: ``registry`` then still
        holds the ``PartitionTopicInfo`` each record was handed out under (an iterator hands
        out records of active partitions only, and a release replaces the registry).
        """
        for topic, partition in {(r.topic, r.partition) for r in records}:
            tp = TopicPartition(topic, partition)
            self.adopt(tp, registry.get(tp))
        self.records.extend(records)

    def drop_stale(self, registry: Mapping[TopicPartition, PartitionTopicInfo]) -> None:
        """Forget buffered records of partitions released since they were handed out."""
        stale = [tp for tp, source in self.sources.items() if not _current(registry, tp, source)]
        for tp in stale:
            del self.sources[tp]
        if stale:
            self._drop({(tp.topic, tp.partition) for tp in stale})

    def _drop(self, keys: set[tuple[str, int]]) -> None:
        kept = [r for r in self.records if (r.topic, r.partition) not in keys]
        if len(kept) != len(self.records):
            log.info(
                "dropping %d buffered records of released partitions", len(self.records) - len(kept)
            )
            self.records = kept

    def hold(self, batch_id: int, records: list[MessageAndMetadata]) -> None:
        """Keep a batch until it is committed (taken right after it left the buffer)."""
        tps = {TopicPartition(r.topic, r.partition) for r in records}
        self.held = _Held(batch_id, records, {tp: self.sources.get(tp) for tp in tps})

    def reclaim(
        self,
        registry: Mapping[TopicPartition, PartitionTopicInfo],
        next_id: int,
        replay: BatchRecord | None,
    ) -> list[MessageAndMetadata]:
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
            of the buffer instead; one the log shows finished is dropped.
        """
        held = self.held
        if held is None:
            return []
        current = {tp for tp, source in held.sources.items() if _current(registry, tp, source)}
        if replay is not None and replay.batch_id == held.batch_id:
            ranges = batch_ranges(held.records)
            keep = {tp for tp, r in replay.ranges.items() if tp in current and ranges.get(tp) == r}
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
        records = [r for r in held.records if TopicPartition(r.topic, r.partition) in keep]
        if replay is None:
            self.held = None
            self.records[:0] = records
            return []
        return records


_buffers: weakref.WeakKeyDictionary[ZookeeperConsumerConnector, _Buffer] = (
    weakref.WeakKeyDictionary()
)


async def _pump(
    connector: ZookeeperConsumerConnector, stream: KafkaStream, buf: _Buffer, max_records: int
) -> None:
    """Move records from one stream into the buffer, keeping at most ~2 batches buffered.

    The bound is lifted while a batch is replayed: the replay waits for its partitions'
    records, which may come after more than two batches of other partitions' records; a
    full buffer would keep them out for good.

    Cancellation is safe: ``next_batch`` only waits before it takes its first record.
    """
    it = stream.iterator
    try:
        while True:
            while not buf.replaying and len(buf.records) >= 2 * max_records:
                await buf.wait_change()
            try:
                chunk = await it.next_batch(max_records)
            except ConsumerTimeoutError:
                continue  # consumer.timeout.ms: nothing new, keep waiting
            except StopAsyncIteration:
                return
            buf.add(chunk, connector.topic_registry)
            buf.notify()
    finally:
        buf.ended += 1
        buf.notify()


def _owned(connector: ZookeeperConsumerConnector) -> set[TopicPartition]:
    return set(connector.statistics().owned_partitions)


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
        buf.drop_stale(connector.topic_registry)
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
    buf.drop_stale(connector.topic_registry)
    batch, buf.records = buf.records[:max_records], buf.records[max_records:]
    buf.notify()
    return batch or await _take(connector, buf, streams, max_records, max_interval_s)


async def _take_replay(
    connector: ZookeeperConsumerConnector,
    buf: _Buffer,
    streams: int,
    targets: Mapping[TopicPartition, tuple[int, int]],
    held: Sequence[MessageAndMetadata] = (),
) -> list[MessageAndMetadata] | None:
    """The records of a batch being replayed: every target partition up to its end.

    Args:
        held: the batch's records the bridge still holds (see :meth:`_Buffer.reclaim`);
            their partitions are complete, the others are read from the buffer.

    Returns:
        The batch; ``None`` when every stream ended first.
    """
    complete = {TopicPartition(r.topic, r.partition) for r in held}
    batch = list(held)
    reached = set(complete)
    buf.replaying = True
    try:
        while True:
            buf.drop_stale(connector.topic_registry)
            taken, buf.records, seen = split_replay(buf.records, targets)
            # (Defensive: the ownership that handed the held records out never does so again.)
            batch.extend(r for r in taken if TopicPartition(r.topic, r.partition) not in complete)
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
    for the next call, and so does a batch until it is committed: when ``fn`` raised and the
    service calls ``foreach_batch`` again with the same connector, the streams have handed
    that batch's records out already, and the bridge replays them from memory.

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
    batch_log = BatchLog(conn.zk, batch_log_path(conn.config.group_id, batch_log_name))
    next_id, replay = await _recover(conn, batch_log)
    buf = _buffers.setdefault(conn, _Buffer())
    buf.ended = 0
    held = buf.reclaim(conn.topic_registry, next_id, replay)
    done = 0
    error: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            for stream in streams:
                tg.start_soon(_pump, conn, stream, buf, max_records)
            try:
                while max_batches is None or done < max_batches:
                    if replay is not None:
                        records = await _take_replay(conn, buf, len(streams), replay.ranges, held)
                        record = replay
                    else:
                        records = await _take(
                            conn, buf, len(streams), max_records, max_interval_ms / 1000
                        )
                        record = BatchRecord(next_id, False, batch_ranges(records or ()))
                    if records is None:
                        break
                    # Until it is committed: a retry in this process replays it from here.
                    buf.hold(next_id, records)
                    if replay is None:
                        await batch_log.write(record)
                    log.debug("batch %d: %d records", next_id, len(records))
                    await anyio.to_thread.run_sync(
                        _run_batch, spark, fn, records, next_id, include_headers
                    )
                    with anyio.CancelScope(shield=True):
                        await _commit(conn, record.ranges)
                        await batch_log.write(replace(record, committed=True))
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
