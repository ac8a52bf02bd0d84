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

This module drives a call; the parts it drives have modules of their own, whose public names
it re-exports: what the batch log holds (``batch_records.py``, pure) and its stores
(``batch_log.py``), partition runs (``runs.py``, pure), the per-connector buffer
(``buffer.py``) and the pump from the streams into it (``pump.py``).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

import anyio
from pyspark.sql import DataFrame, SparkSession

from ..base_connector import ConsumerConnector
from ..errors import InvalidConfigError
from ..records import TopicPartition
from ..stream import KafkaStream
from .batch_log import (
    BatchLog,
    BatchLogConflictError,
    BatchLogStore,
    KafkaBatchLog,
    ZookeeperBatchLog,
    open_batch_log,
)
from .batch_records import (
    BATCH_LOG_VERSION,
    DEFAULT_BATCH_LOG_NAME,
    BatchMark,
    BatchRecord,
    batch_log_path,
    last_batch,
)
from .buffer import BridgeBuffer
from .pump import pump, take_batch, take_replay
from .runs import (
    PartitionRun,
    batch_ranges,
    batch_table,
    count_rows,
    partition_runs,
    split_replay,
    take_rows,
)

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

BatchFunction = Callable[[DataFrame, int], object]
"""``fn(df, batch_id)``, as ``DataStreamWriter.foreachBatch`` takes it."""

_buffers: weakref.WeakKeyDictionary[ConsumerConnector, BridgeBuffer] = weakref.WeakKeyDictionary()


def _owned(connector: ConsumerConnector) -> set[TopicPartition]:
    return set(connector.statistics().owned_partitions)


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
    buf = _buffers.setdefault(conn, BridgeBuffer())
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
                tg.start_soon(pump, conn, stream, buf, max_records, include_headers)
            try:
                while max_batches is None or done < max_batches:
                    if replay is not None:
                        runs = await take_replay(conn, buf, len(streams), replay.ranges, held)
                        record = replay
                    else:
                        runs = await take_batch(
                            conn, buf, len(streams), max_records, max_interval_ms / 1000
                        )
                        record = BatchRecord(next_id, False, batch_ranges(runs or ()))
                    if runs is None:
                        break
                    # Until it is committed: a retry in this process replays it from here.
                    buf.hold(next_id, runs)
                    if replay is None:
                        await batch_log.begin(record)
                    log.debug("batch %d: %d records", next_id, count_rows(runs))
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
