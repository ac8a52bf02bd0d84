"""The executor side of the ``zkkafka`` source: one Spark task reads one offset range.

The driver makes each task from the source options (:func:`input_partition`) and Spark
pickles it to an executor.

``read`` runs in a Spark executor's Python worker. It fetches ``[start, end)`` of one
partition straight from the partition's leader with a :class:`SimpleConsumer` and yields
Arrow record batches in the Kafka source's schema, parsed straight from the fetched record
sets (:class:`~aiozkconsumer.spark.columns.RecordColumns`).

Python workers are reused across tasks (``spark.python.worker.reuse``, on by default), so,
as the Kafka source pools its consumers per executor, a worker keeps its started consumers
and the event loop they live on between tasks (:class:`ExecutorConsumers`): a task does not
pay for connecting and reading metadata again. A task that fails closes the consumer it
used, so the retry starts with a fresh one (as the Kafka source invalidates a failed task's
consumer).

Under ``kafka.isolation.level=read_committed`` (``isolation.level``) a task fetches at that level
and leaves out the records of aborted transactions; the driver plans its ranges up to the last
stable offset, so a task never waits for an open transaction.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..config import ConsumerConfig, kafka_security_from_properties
from ..errors import BrokerNotAvailableError, OffsetOutOfRangeError
from ..records import TopicPartition
from ..simple_consumer import SimpleConsumer
from .columns import RecordColumns
from .planning import DataLossError, OffsetRange, SourceOptions, security_properties

__all__ = [
    "ARROW_BATCH_BYTES",
    "ARROW_BATCH_ROWS",
    "DataLossError",
    "ExecutorConsumers",
    "ZkKafkaBatchPartition",
    "ZkKafkaInputPartition",
    "input_partition",
    "read_offset_range",
]

log = logging.getLogger(__name__)

ARROW_BATCH_ROWS = 32768
"""Rows per Arrow record batch a task yields (also cut at ``ARROW_BATCH_BYTES``)."""

ARROW_BATCH_BYTES = 32 * 1024 * 1024
"""Fetched bytes per Arrow record batch a task yields, about (a batch is cut after the fetch
that reaches it)."""

_EMPTY_FETCH_RETRIES = 10


@dataclass(frozen=True)
class ZkKafkaInputPartition(InputPartition):
    """One Spark task: offsets ``[start, end)`` of a partition, and how to reach the brokers.

    Pickled by the source runner and read by an executor; carries everything ``read`` needs.

    Attributes:
        topic: the topic.
        partition: the partition number.
        start: the first offset to read.
        end: the offset after the last one.
        bootstrap_servers: ``host:port,...`` of the cluster.
        include_headers: add the ``headers`` column.
        fail_on_data_loss: raise ``DataLossError`` when offsets of the range are gone.
        client_id: ``client.id`` of the fetches.
        max_bytes: ``fetch.message.max.bytes`` per fetch.
        socket_timeout_ms: ``socket.timeout.ms``.
        fetch_wait_max_ms: ``fetch.wait.max.ms``.
        retry_backoff_ms: ``refresh.leader.backoff.ms``: first backoff after a leader change.
        isolation_level: ``isolation.level``: ``"read_uncommitted"`` (default) or
            ``"read_committed"`` (the records of aborted transactions are left out).
        security_properties: the connection's ``security.protocol``, ``ssl.*`` and ``sasl.*``
            keys (``planning.security_properties``); left out of ``repr``.
    """

    topic: str
    partition: int
    start: int
    end: int
    bootstrap_servers: str
    include_headers: bool = False
    fail_on_data_loss: bool = True
    client_id: str = "zkkafka"
    max_bytes: int = 1048576
    socket_timeout_ms: int = 30000
    fetch_wait_max_ms: int = 100
    retry_backoff_ms: int = 200
    isolation_level: str = "read_uncommitted"
    security_properties: tuple[tuple[str, str], ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class ZkKafkaBatchPartition(ZkKafkaInputPartition):
    """One task of a batch read (``spark.read.format("zkkafka")``).

    Read like :class:`ZkKafkaInputPartition`; it also says where the range's end may be
    committed, for :func:`~aiozkconsumer.spark.batch_reader.commit_batch`.

    Attributes:
        config: the group's consumer configuration.
        commit_on_success: whether the read was made with ``commitOnSuccess=true``.
    """

    config: ConsumerConfig | None = None
    commit_on_success: bool = False


def input_partition(
    options: SourceOptions, r: OffsetRange, bootstrap_servers: str, *, batch: bool = False
) -> ZkKafkaInputPartition:
    """The Spark task reading ``r``: what the executor needs, from the source options.

    Args:
        options: the source options.
        r: the range.
        bootstrap_servers: ``host:port,...`` of the brokers.
        batch: a batch read's task (it also carries where its end may be committed).

    Returns:
        A ``ZkKafkaInputPartition``, or a ``ZkKafkaBatchPartition`` with ``batch``.
    """
    cfg = options.config
    fields: dict[str, Any] = {
        "topic": r.tp.topic,
        "partition": r.tp.partition,
        "start": r.start,
        "end": r.end,
        "bootstrap_servers": bootstrap_servers,
        "include_headers": options.include_headers,
        "fail_on_data_loss": options.fail_on_data_loss,
        "client_id": cfg.effective_client_id,
        "max_bytes": cfg.fetch_message_max_bytes,
        "socket_timeout_ms": cfg.socket_timeout_ms,
        "fetch_wait_max_ms": cfg.fetch_wait_max_ms,
        "retry_backoff_ms": cfg.refresh_leader_backoff_ms,
        "isolation_level": cfg.isolation_level,
        "security_properties": security_properties(cfg),
    }
    if batch:
        return ZkKafkaBatchPartition(
            **fields, config=cfg, commit_on_success=options.commit_on_success
        )
    return ZkKafkaInputPartition(**fields)


CONSUMER_IDLE_TIMEOUT_S = 300.0
"""A pooled consumer unused this long is closed rather than reused (as the Kafka source's
``spark.kafka.consumer.cache.timeout``, 5 minutes)."""

CONSUMER_POOL_CAPACITY = 16
"""Started consumers a worker thread keeps at most (least recently used closed first)."""


_ConsumerKey = tuple[str, str, int, int, int, str, tuple[tuple[str, str], ...]]


def _consumer_key(part: ZkKafkaInputPartition) -> _ConsumerKey:
    return (
        part.bootstrap_servers,
        part.client_id,
        part.socket_timeout_ms,
        part.fetch_wait_max_ms,
        part.retry_backoff_ms,
        part.isolation_level,
        part.security_properties,
    )


class ExecutorConsumers:
    """One worker thread's event loop and its started consumers, kept between tasks.

    A consumer serves every partition of its cluster (it follows each partition's leader),
    so consumers are pooled by connection settings, not by partition. :func:`read_offset_range`
    gets the calling thread's instance from :meth:`for_this_thread`.

    Args:
        capacity: consumers kept at most; the least recently used is closed beyond that.
        idle_timeout_s: a consumer idle this long is closed instead of reused.
    """

    _local = threading.local()

    def __init__(
        self,
        *,
        capacity: int = CONSUMER_POOL_CAPACITY,
        idle_timeout_s: float = CONSUMER_IDLE_TIMEOUT_S,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self.capacity = capacity
        self.idle_timeout_s = idle_timeout_s
        self._idle: collections.OrderedDict[_ConsumerKey, tuple[SimpleConsumer, float]] = (
            collections.OrderedDict()
        )

    @classmethod
    def for_this_thread(cls) -> ExecutorConsumers:
        """The calling thread's instance (created on first use)."""
        pool: ExecutorConsumers | None = getattr(cls._local, "pool", None)
        if pool is None or pool.loop.is_closed():
            pool = cls._local.pool = cls()
        return pool

    def __len__(self) -> int:
        """The number of idle consumers kept."""
        return len(self._idle)

    def checkout(self, part: ZkKafkaInputPartition) -> SimpleConsumer:
        """A started consumer for ``part``'s cluster: a kept one, or a new one.

        Raises:
            KafkaConnectionError: no bootstrap broker answered (a new consumer).
        """
        key = _consumer_key(part)
        kept = self._idle.pop(key, None)
        if kept is not None:
            consumer, since = kept
            if time.monotonic() - since <= self.idle_timeout_s:
                return consumer
            self.loop.run_until_complete(consumer.close())
        consumer = SimpleConsumer(
            part.bootstrap_servers,
            client_id=part.client_id,
            socket_timeout_ms=part.socket_timeout_ms,
            fetch_max_wait_ms=part.fetch_wait_max_ms,
            retry_backoff_ms=part.retry_backoff_ms,
            isolation_level=part.isolation_level,
            security=kafka_security_from_properties(dict(part.security_properties)),
        )
        try:
            self.loop.run_until_complete(consumer.start())
        except BaseException:
            self.loop.run_until_complete(consumer.close())
            raise
        return consumer

    def checkin(self, part: ZkKafkaInputPartition, consumer: SimpleConsumer, *, ok: bool) -> None:
        """Give a consumer back: kept for the next task if the task succeeded, else closed."""
        if not ok:
            self.loop.run_until_complete(consumer.close())
            return
        key = _consumer_key(part)
        previous = self._idle.pop(key, None)
        if previous is not None:  # cannot happen with one task per thread; be safe
            self.loop.run_until_complete(previous[0].close())
        self._idle[key] = (consumer, time.monotonic())
        while len(self._idle) > self.capacity:
            _, (oldest, _) = self._idle.popitem(last=False)
            self.loop.run_until_complete(oldest.close())

    def close(self) -> None:
        """Close every kept consumer and the loop. Idempotent."""
        if self.loop.is_closed():
            return
        try:
            while self._idle:
                _, (consumer, _) = self._idle.popitem()
                self.loop.run_until_complete(consumer.close())
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()


async def _fetch_range(
    consumer: SimpleConsumer, part: ZkKafkaInputPartition
) -> AsyncGenerator[pa.RecordBatch, None]:
    """Yield the records of ``part`` as Arrow batches of about ``ARROW_BATCH_ROWS`` rows.

    Fetched record sets are parsed straight into columns (:class:`RecordColumns`): no
    per-record ``MessageAndMetadata`` on this path.
    """
    tp = TopicPartition(part.topic, part.partition)
    columns = RecordColumns(tp, include_headers=part.include_headers)
    offset, end = part.start, part.end
    chunk_bytes = 0
    empty = 0
    while offset < end:
        try:
            raw = await consumer.fetch_raw(tp, offset, part.max_bytes)
        except OffsetOutOfRangeError as e:
            lost = f"offsets of {tp} from {offset} are gone ({e})"
            if part.fail_on_data_loss:
                raise DataLossError(f"{lost}; set failOnDataLoss=false to skip them instead") from e
            if e.earliest is not None and offset < e.earliest < end:
                log.warning("%s; skipping to %d", lost, e.earliest)
                offset = e.earliest
                continue
            log.warning("%s; skipping the rest of [%d, %d)", lost, part.start, end)
            break
        next_offset = columns.add_fetch(
            raw.data, offset, end, part.max_bytes, raw.aborted_transactions
        )
        chunk_bytes += len(raw.data)
        if len(columns) >= ARROW_BATCH_ROWS or chunk_bytes >= ARROW_BATCH_BYTES:
            yield columns.take_batch()
            chunk_bytes = 0
        if next_offset > offset:
            offset, empty = next_offset, 0
            continue
        if raw.high_watermark <= offset:
            lost = f"{tp} ends at {raw.high_watermark}, before {end} (log truncated?)"
            if part.fail_on_data_loss:
                raise DataLossError(f"{lost}; set failOnDataLoss=false to skip instead")
            log.warning("%s; skipping [%d, %d)", lost, offset, end)
            break
        empty += 1
        if empty > _EMPTY_FETCH_RETRIES:
            stable = (
                f" (read_committed: the last stable offset is {raw.last_stable_offset}, a "
                "transaction is open)"
                if 0 <= raw.last_stable_offset <= offset
                else ""
            )
            raise BrokerNotAvailableError(
                f"{tp}: {empty} fetches at offset {offset} returned nothing below the "
                f"high watermark {raw.high_watermark}{stable}"
            )
    if len(columns):
        yield columns.take_batch()


def read_offset_range(part: ZkKafkaInputPartition) -> Iterator[pa.RecordBatch]:
    """Read ``[part.start, part.end)`` from the partition's leader as Arrow record batches.

    Runs in an executor's Python worker, on the worker thread's loop with a pooled consumer
    (see :class:`ExecutorConsumers`). Offsets that hold no data record (transaction markers,
    compacted records, under read_committed the records of aborted transactions) are simply
    absent.

    Args:
        part: the range and the connection settings.

    Yields:
        Record batches in the Kafka source's schema, in offset order.

    Raises:
        DataLossError: offsets of the range were deleted or the log ends before ``end``
            (with ``fail_on_data_loss``).
        KafkaConnectionError: no bootstrap broker answered.
        BrokerNotAvailableError: the leader could not be reached after retries.
        CorruptRecordError, UnsupportedCodecError: a fetched batch is corrupt, or compressed
            with a codec that cannot be decompressed here (see ``RecordColumns.add_fetch``).
        ConsumerError: another fetch failure (see ``SimpleConsumer.fetch``).
    """
    if part.start >= part.end:
        # A batch read plans every partition, also those with nothing to read (as the Kafka
        # source's KafkaSourceRDD), so that its end offsets are known: no connection for them.
        return
    pool = ExecutorConsumers.for_this_thread()
    loop = pool.loop
    consumer = pool.checkout(part)
    chunks = _fetch_range(consumer, part)
    ok = False
    try:
        while True:
            try:
                batch = loop.run_until_complete(anext(chunks))
            except StopAsyncIteration:
                ok = True
                return
            yield batch
    finally:
        try:
            loop.run_until_complete(chunks.aclose())
        finally:
            pool.checkin(part, consumer, ok=ok)
