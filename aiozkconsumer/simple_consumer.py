"""``SimpleConsumer``: direct partition reads for tools and Spark executors.

The asyncio counterpart of the original's ``kafka.consumer.SimpleConsumer`` (0.8–0.10.2): no
group, no ZooKeeper, no offsets stored anywhere — the caller says which partition and offset
to read, and gets records back. The old command-line tools and Spark's executors used it to
read a known offset range; the high-level consumer's fetcher threads used one each.

What it does that the original left to its callers: it finds each partition's leader from
Kafka metadata and follows leader changes (``NotLeaderForPartition``, a broker that went away)
by refreshing metadata and retrying a bounded number of times with exponential backoff, and
:meth:`SimpleConsumer.fetch_range` iterates an offset range across as many fetches as needed.
It reads at either ``isolation.level``: ``read_committed`` fetches up to the last stable offset
and drops the records of aborted transactions (``kafka/transactions.py``).

Connections, metadata and the translation of aiokafka's errors are the Kafka adapter's
(``kafka/client.py``, ``kafka/errors.py``); record batches are parsed by the parser
``kafka/records.py`` chooses, as in ``fetcher.py``. A batch compressed with a codec that cannot be
decompressed here raises :class:`~aiozkconsumer.errors.UnsupportedCodecError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiokafka.protocol.fetch import FetchRequest

from ._resource import AsyncService
from .cluster import EARLIEST, LATEST, KafkaClient
from .errors import (
    BrokerNotAvailableError,
    ConsumerClosedError,
    ConsumerError,
    CorruptRecordError,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
    UnknownTopicError,
)
from .kafka.errors import (
    RECORD_PARSE_ERRORS,
    PartitionError,
    classify_partition_error,
    error_name,
)
from .kafka.records import append_messages, read_record_set, unsupported_codec_error
from .kafka.stable_offsets import list_offsets
from .kafka.transactions import (
    READ_UNCOMMITTED,
    AbortedTransactions,
    isolation_level_id,
    stable_and_aborted,
)
from .metrics import ConsumerMetrics
from .records import MessageAndMetadata, TopicPartition
from .security import KafkaSecurity

__all__ = [
    "FetchResult",
    "RawFetchResult",
    "SimpleConsumer",
    "corrupt_record_error",
    "message_too_large_error",
    "parse_records",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class FetchResult:
    """What one fetch of one partition returned.

    Attributes:
        records: the data records at offsets >= the requested offset, in offset order
            (control batches — transaction markers — are skipped; records of aborted
            transactions are included under read_uncommitted, as the original had no
            transactions, and left out under read_committed).
        high_watermark: the partition's high watermark (the offset after the last committed
            record) when the broker answered.
        next_offset: the offset to fetch next: past the last complete batch returned,
            including control batches, batches of aborted transactions and offsets removed
            by compaction; the requested offset when nothing was returned.
        last_stable_offset: the partition's last stable offset when the broker answered
            (the first offset of its oldest open transaction, else the high watermark): where
            a read_committed read ends for now; ``-1`` when the broker gave none.
    """

    records: list[MessageAndMetadata]
    high_watermark: int
    next_offset: int
    last_stable_offset: int = -1


@dataclass(frozen=True, slots=True)
class RawFetchResult:
    """What one fetch of one partition returned, unparsed (see :meth:`SimpleConsumer.fetch_raw`).

    Attributes:
        data: the partition's ``records`` bytes as the broker sent them (Kafka's record batch
            format; may be empty).
        high_watermark: the partition's high watermark when the broker answered.
        last_stable_offset: the partition's last stable offset when the broker answered
            (``-1`` when it gave none).
        aborted_transactions: under read_committed, the response's aborted transactions
            overlapping ``data``, ``(producer id, first offset)`` each, for
            :func:`parse_records` (and ``RecordColumns.add_fetch``) to drop their batches;
            ``None`` under read_uncommitted.
    """

    data: bytes
    high_watermark: int
    last_stable_offset: int = -1
    aborted_transactions: tuple[tuple[int, int], ...] | None = None


class _RetriableError(Exception):
    """A failure that new metadata (a new leader) may cure: refresh and try again."""


def parse_records(
    tp: TopicPartition,
    fetch_offset: int,
    data: bytes,
    max_bytes: int,
    *,
    check_crcs: bool = True,
    aborted: Iterable[tuple[int, int]] | None = None,
) -> tuple[list[MessageAndMetadata], int]:
    """Parse one partition's record set from a fetch response.

    Args:
        tp: the partition the data belongs to.
        fetch_offset: the offset the fetch asked for; records below it are left out (a
            compressed batch may start before it).
        data: the ``records`` bytes of the partition's fetch response.
        max_bytes: the fetch size the request used (for the error message).
        check_crcs: check every batch's CRC before reading its records (``check.crcs``, as
            the original's ``ensureValid()`` on every message).
        aborted: read_committed: the fetch response's aborted transactions for the partition
            (``RawFetchResult.aborted_transactions``); the batches of those transactions are
            left out (the Java client's algorithm, ``kafka/transactions.py``). ``None``
            (read_uncommitted) leaves them in.

    Returns:
        ``(records, next_offset)``: the data records at offsets >= ``fetch_offset`` and the
        offset after the last complete batch (``fetch_offset`` when ``data`` is empty). When
        a batch's CRC does not match, or its codec cannot be decompressed, after batches that
        reach past ``fetch_offset``, those batches' records are returned and ``next_offset``
        is where the bad batch starts: the next parse from there raises.

    Raises:
        MessageSizeTooLargeError: ``data`` is not empty but holds no complete batch: the batch
            at ``fetch_offset`` is larger than ``max_bytes``.
        CorruptRecordError: the first batch reaching past ``fetch_offset`` has a CRC that
            does not match (nothing of it is returned), or a batch does not parse.
        UnsupportedCodecError: the first batch reaching past ``fetch_offset`` is compressed
            with a codec that cannot be decompressed here (``cramjam`` missing); nothing of
            it is returned.
    """
    if not data:
        return [], fetch_offset
    record_set = read_record_set(data, tp, check_crcs)
    records: list[MessageAndMetadata] = []
    next_offset = fetch_offset
    complete = False
    topic, partition = tp.topic, tp.partition
    bad = record_set.corrupt
    transactions = AbortedTransactions(aborted) if aborted is not None else None
    try:
        for batch in record_set.batches:
            if bad and batch.next_offset in bad:
                if next_offset > fetch_offset:
                    break  # the records before it go out; the next fetch raises
                raise bad[batch.next_offset]
            if transactions and transactions.aborted(batch):
                complete = True
                next_offset = max(next_offset, batch.next_offset)
                continue  # an aborted transaction's: stepped over, as a control batch
            if batch.is_control_batch:
                complete = True
                next_offset = max(next_offset, batch.next_offset)
                continue
            wanted = batch.next_offset > fetch_offset
            if wanted and (unsupported := unsupported_codec_error(topic, partition, batch)):
                if next_offset > fetch_offset:
                    break  # the records before it go out; the next fetch raises
                raise unsupported
            complete = True
            next_offset = max(next_offset, batch.next_offset)
            if wanted:
                append_messages(batch, records, topic, partition, fetch_offset)
    except RECORD_PARSE_ERRORS as e:
        raise corrupt_record_error(tp, next_offset, e) from e
    if not complete:
        raise message_too_large_error(tp, fetch_offset, max_bytes)
    return records, next_offset


def corrupt_record_error(tp: TopicPartition, after: int, cause: Exception) -> CorruptRecordError:
    """The error for a record batch of ``tp`` after offset ``after`` that does not parse."""
    return CorruptRecordError(tp.topic, tp.partition, after, f"does not parse: {cause}")


def message_too_large_error(
    tp: TopicPartition, fetch_offset: int, max_bytes: int
) -> MessageSizeTooLargeError:
    """The error for fetched data without a complete batch (the original's wording)."""
    return MessageSizeTooLargeError(
        f"Found a message larger than the maximum fetch size ({max_bytes} bytes) on "
        f"partition {tp} at offset {fetch_offset}. Increase the fetch size, or decrease "
        "the maximum message size the broker will allow."
    )


class SimpleConsumer(AsyncService):
    """Reads partitions at given offsets from their leaders (``kafka.consumer.SimpleConsumer``).

    An async context manager::

        async with SimpleConsumer("127.0.0.1:9092") as consumer:
            tp = TopicPartition("payments", 0)
            start = await consumer.earliest_offset(tp)
            async for msg in consumer.fetch_range(tp, start, start + 100):
                ...

    Not tied to one broker as the original was: every call goes to the partition's current
    leader. Leader changes and unreachable brokers are retried ``max_retries`` times with an
    exponential backoff (``retry_backoff_ms``, doubling), refreshing metadata before each
    retry; only then ``BrokerNotAvailableError`` is raised.

    Args:
        bootstrap_servers: ``host:port[,host:port]`` of some brokers of the cluster.
        client_id: ``client.id`` sent with every request (and the metrics' ``clientId``).
        socket_timeout_ms: ``socket.timeout.ms``: the time limit of each request, and of
            connecting in :meth:`start`. Must exceed ``fetch_max_wait_ms``.
        fetch_max_wait_ms: ``fetch.wait.max.ms``: how long the broker may hold a fetch that
            has less than ``fetch_min_bytes`` to return (long polling at the log end).
        fetch_min_bytes: ``fetch.min.bytes``: the least data the broker waits for.
        max_retries: retries after a retriable failure (leader change, broker unreachable).
        retry_backoff_ms: the first retry's backoff; each further retry doubles it.
        isolation_level: ``isolation.level``: ``"read_uncommitted"`` (default, as the
            original and the Java client: every record, up to the high watermark) or
            ``"read_committed"`` (up to the last stable offset, without the records of
            aborted transactions; :meth:`latest_offset` is then the last stable offset).
        metrics: where to report ``FetchRequestRateAndTimeMs``, ``FetchResponseSize`` and
            ``FetchRequestThrottleRateAndTimeMs`` (per broker and for all brokers), as the
            original's ``FetchRequestAndResponseStats``, and ``CorruptBatchesPerSec``;
            ``None`` reports nothing.
        check_crcs: ``check.crcs``: :meth:`fetch` checks the CRC of every record batch and
            raises ``CorruptRecordError`` for one that does not match (the original's
            ``ConsumerIterator`` called ``ensureValid()`` on every message). ``False`` hands
            out whatever arrived. :meth:`fetch_raw` never checks.
        security: TLS and SASL of every connection (``KafkaSecurity.from_config`` or
            ``kafka_security_from_properties``); default plaintext.

    Raises:
        ValueError: a timeout, size or retry count is out of range, or ``isolation_level``
            is neither value.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "aiozkconsumer-simple",
        socket_timeout_ms: int = 30000,
        fetch_max_wait_ms: int = 100,
        fetch_min_bytes: int = 1,
        max_retries: int = 3,
        retry_backoff_ms: int = 200,
        isolation_level: str = "read_uncommitted",
        metrics: ConsumerMetrics | None = None,
        check_crcs: bool = True,
        security: KafkaSecurity | None = None,
    ) -> None:
        if socket_timeout_ms <= fetch_max_wait_ms:
            raise ValueError(
                f"socket_timeout_ms ({socket_timeout_ms}) must exceed "
                f"fetch_max_wait_ms ({fetch_max_wait_ms})"
            )
        if fetch_max_wait_ms < 0 or fetch_min_bytes < 0:
            raise ValueError("fetch_max_wait_ms and fetch_min_bytes must not be negative")
        if max_retries < 0 or retry_backoff_ms < 0:
            raise ValueError("max_retries and retry_backoff_ms must not be negative")
        self._isolation = isolation_level_id(isolation_level)
        self.isolation_level = isolation_level
        self.bootstrap_servers = bootstrap_servers
        self.client_id = client_id
        self.socket_timeout_ms = socket_timeout_ms
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.max_retries = max_retries
        self.retry_backoff_ms = retry_backoff_ms
        self.metrics = metrics
        self.check_crcs = check_crcs
        self.security = security or KafkaSecurity()
        self._kafka: KafkaClient | None = None
        self._closed = False

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to a bootstrap broker and read the cluster metadata.

        Raises:
            KafkaConnectionError: no bootstrap broker answered within ``socket_timeout_ms``
                (a subclass of ``BrokerNotAvailableError``).
            ConsumerClosedError: the consumer was closed, or is already started.
        """
        if self._closed or self._kafka is not None:
            raise ConsumerClosedError(f"{self!r} cannot be started again")
        kafka = KafkaClient(
            self.bootstrap_servers,
            client_id=self.client_id,
            request_timeout_ms=self.socket_timeout_ms,
            retry_backoff_ms=self.retry_backoff_ms,
            security=self.security,
        )
        await kafka.start()
        self._kafka = kafka

    async def close(self) -> None:
        """Close every connection. Idempotent; never raises."""
        self._closed = True
        kafka, self._kafka = self._kafka, None
        if kafka is not None:
            await kafka.close()

    shield_close = True  # the close runs even while the block is being cancelled

    async def aclose(self) -> None:
        """Leaving ``async with``: :meth:`close`."""
        await self.close()

    def _client(self) -> KafkaClient:
        if self._kafka is None:
            state = "closed" if self._closed else "not started"
            raise ConsumerClosedError(f"SimpleConsumer is {state}")
        return self._kafka

    # ---- metadata -------------------------------------------------------------------------

    async def _partitions(self, topic: str, *, refresh: bool) -> set[int]:
        """Partition ids of ``topic``, refreshing metadata if asked or if it is not known.

        Raises:
            UnknownTopicError: the cluster's metadata has no such topic.
            BrokerNotAvailableError: no broker answered the metadata request.
        """
        kafka = self._client()
        parts = None if refresh else kafka.partitions_for(topic)
        if parts is None:
            if not await kafka.refresh_metadata({topic}):
                raise BrokerNotAvailableError(
                    f"no broker of {self.bootstrap_servers!r} answered a metadata request"
                )
            parts = kafka.partitions_for(topic)
            if parts is None:
                raise UnknownTopicError(topic)
        return parts

    async def _leader(self, tp: TopicPartition, *, refresh: bool) -> int:
        parts = await self._partitions(tp.topic, refresh=refresh)
        if tp.partition not in parts:
            if not refresh:  # maybe partitions were added since the metadata was read
                parts = await self._partitions(tp.topic, refresh=True)
            if tp.partition not in parts:
                raise UnknownTopicError(
                    tp.topic,
                    f"topic {tp.topic!r} has no partition {tp.partition} "
                    f"(partitions: {sorted(parts)})",
                )
        leader = self._client().leader_for(tp)
        if leader is None:
            raise _RetriableError(f"partition {tp} has no leader")
        return leader

    async def _with_leader(
        self, tp: TopicPartition, what: str, op: Callable[[int], Awaitable[_T]]
    ) -> _T:
        """Run ``op(leader)``, retrying on leader changes and unreachable brokers.

        A topic or partition missing from the metadata is retried too, and reported as
        ``UnknownTopicError`` only when still missing after the retries: a broker that has
        just restarted answers metadata requests before it has learnt the cluster's topics
        (and the client's cached metadata is replaced by that answer).

        Raises:
            BrokerNotAvailableError: still failing after ``max_retries`` retries.
            UnknownTopicError: the topic or partition does not exist.
        """
        attempt = 0
        refresh = False
        while True:
            try:
                leader = await self._leader(tp, refresh=refresh)
                return await op(leader)
            except UnknownTopicError as e:
                attempt += 1
                if attempt > self.max_retries:
                    raise
                backoff_s = self.retry_backoff_ms / 1000 * 2 ** (attempt - 1)
                log.info("%s of partition %s: %s; retrying in %.3f s", what, tp, e, backoff_s)
                await asyncio.sleep(backoff_s)
                refresh = True
            except (_RetriableError, BrokerNotAvailableError) as e:
                attempt += 1
                if attempt > self.max_retries:
                    raise BrokerNotAvailableError(
                        f"{what} of partition {tp} failed after {attempt} attempts: {e}"
                    ) from e
                backoff_s = self.retry_backoff_ms / 1000 * 2 ** (attempt - 1)
                log.info(
                    "%s of partition %s failed (%s); refreshing metadata and retrying in %.3f s",
                    what,
                    tp,
                    e,
                    backoff_s,
                )
                await asyncio.sleep(backoff_s)
                refresh = True

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of a topic, from Kafka metadata.

        Args:
            topic: the topic's name.

        Returns:
            The partition ids, sorted.

        Raises:
            UnknownTopicError: the topic does not exist (metadata is refreshed before saying so).
            BrokerNotAvailableError: no broker answered the metadata request.
            ConsumerClosedError: the consumer is not started or closed.
        """
        return sorted(await self._partitions(topic, refresh=False))

    async def leader_for(self, tp: TopicPartition) -> int:
        """The broker id of a partition's leader.

        Args:
            tp: the partition.

        Returns:
            The leader's broker id.

        Raises:
            UnknownTopicError: the topic or the partition does not exist (still missing
                from the metadata after ``max_retries`` retries).
            BrokerNotAvailableError: the partition has no leader after ``max_retries``
                metadata refreshes, or no broker answered.
            ConsumerClosedError: the consumer is not started or closed.
        """

        async def leader(node_id: int) -> int:
            return node_id

        return await self._with_leader(tp, "leader lookup", leader)

    # ---- offsets --------------------------------------------------------------------------

    async def _list_offset(self, tp: TopicPartition, timestamp: int) -> int:
        kafka = self._client()

        async def list_offset(leader: int) -> int:
            try:
                offsets = await list_offsets(
                    kafka, leader, {tp: timestamp}, isolation_level=self._isolation
                )
            except UnknownTopicError as e:
                # A broker that has not caught up with a new topic yet; the metadata refresh
                # before the retry tells whether the topic is really gone.
                raise _RetriableError(str(e)) from e
            offset = offsets.get(tp)
            if offset is None:  # e.g. NOT_LEADER_FOR_PARTITION (logged by KafkaClient)
                raise _RetriableError(f"broker {leader} did not give an offset for {tp}")
            return offset

        return await self._with_leader(tp, "ListOffsets", list_offset)

    async def earliest_offset(self, tp: TopicPartition) -> int:
        """The log start offset: the first offset still held (``OffsetRequest.EarliestTime``).

        Args:
            tp: the partition.

        Returns:
            The offset of the earliest record (the log end offset if the log is empty).

        Raises:
            UnknownTopicError: the topic or the partition does not exist (still missing
                from the metadata after ``max_retries`` retries).
            BrokerNotAvailableError: the leader could not be reached after ``max_retries``
                retries.
            ConsumerClosedError: the consumer is not started or closed.
        """
        return await self._list_offset(tp, EARLIEST)

    async def latest_offset(self, tp: TopicPartition) -> int:
        """The log end offset: the offset the next record will get (``LatestTime``).

        This is the high watermark (records up to it are readable), as the original's
        ``earliestOrLatestOffset(tp, LatestTime)``; with ``isolation_level="read_committed"``
        the last stable offset (records up to it are readable at that level), as the Java
        client's ``endOffsets``.

        Args:
            tp: the partition.

        Returns:
            The log end offset.

        Raises:
            UnknownTopicError: the topic or the partition does not exist (still missing
                from the metadata after ``max_retries`` retries).
            BrokerNotAvailableError: the leader could not be reached after ``max_retries``
                retries.
            ConsumerClosedError: the consumer is not started or closed.
        """
        return await self._list_offset(tp, LATEST)

    async def offsets_before(self, tp: TopicPartition, timestamp_ms: int) -> int | None:
        """The earliest offset whose record timestamp is at or after ``timestamp_ms``.

        ListOffsets v1+ by timestamp (KIP-79, what the Java consumer's ``offsetsForTimes``
        does): record-precise, using the brokers' time index. This is **not** the original's
        ``getOffsetsBefore(tp, time, maxNumOffsets)`` (ListOffsets v0), which returned up to
        ``maxNumOffsets`` *log segment* base offsets of segments last modified before
        ``time``, newest first — a coarse answer, at segment granularity, from file
        modification times. To start reading "from time T", use this offset.

        Args:
            tp: the partition.
            timestamp_ms: milliseconds since the epoch (record timestamps: CreateTime, or
                LogAppendTime for topics configured so).

        Returns:
            The offset of the first record with a timestamp >= ``timestamp_ms``, or ``None``
            when there is none (every record is older; read from :meth:`latest_offset`).

        Raises:
            ValueError: ``timestamp_ms`` is negative (-1 and -2 mean latest and earliest in
                the protocol: use :meth:`latest_offset` and :meth:`earliest_offset`).
            UnknownTopicError: the topic or the partition does not exist (still missing
                from the metadata after ``max_retries`` retries).
            BrokerNotAvailableError: the leader could not be reached after ``max_retries``
                retries.
            ConsumerClosedError: the consumer is not started or closed.
        """
        if timestamp_ms < 0:
            raise ValueError(f"timestamp_ms must not be negative, got {timestamp_ms}")
        offset = await self._list_offset(tp, timestamp_ms)
        return None if offset < 0 else offset

    async def _offset_range(self, tp: TopicPartition) -> tuple[int | None, int | None]:
        """``(earliest, latest)`` for an error message; ``None`` where it cannot be read."""
        try:
            return await self.earliest_offset(tp), await self.latest_offset(tp)
        except ConsumerError as e:
            log.debug("could not read the offset range of %s: %s", tp, e)
            return None, None

    # ---- fetching -------------------------------------------------------------------------

    async def fetch(self, tp: TopicPartition, offset: int, max_bytes: int = 1048576) -> FetchResult:
        """Fetch records of one partition from ``offset`` (one FetchRequest to its leader).

        As the original's ``SimpleConsumer.fetch``: at the log end the broker holds the
        request up to ``fetch_max_wait_ms`` for data, then answers with no records.

        Args:
            tp: the partition.
            offset: the first offset wanted.
            max_bytes: the most record bytes to return (``fetch.message.max.bytes``). A
                broker of 0.10.1+ returns a first batch larger than this whole (KIP-74).

        Returns:
            The records at offsets >= ``offset``, the high watermark and the next offset to
            fetch (see :class:`FetchResult`).

        Raises:
            ValueError: ``offset`` is negative or ``max_bytes`` not positive.
            OffsetOutOfRangeError: the partition does not hold ``offset`` (it is below the
                log start offset or beyond the log end offset); the error carries the valid
                range.
            MessageSizeTooLargeError: the response holds data but no complete batch (a batch
                larger than ``max_bytes``, from an old broker).
            CorruptRecordError: the record batch at ``offset`` has a CRC that does not match
                (with ``check_crcs``; nothing of it is returned, and records of batches
                before it are returned first, by the fetch that reaches it), or the returned
                data does not parse. ``offset``, ``last_offset``, ``expected_crc`` and
                ``actual_crc`` of the error say which batch and how.
            UnsupportedCodecError: the record batch at ``offset`` is compressed with a codec
                that cannot be decompressed here (``cramjam`` missing); as for a corrupt
                batch, the records before it are returned first.
            UnknownTopicError: the topic or the partition does not exist (still missing
                from the metadata after ``max_retries`` retries).
            BrokerNotAvailableError: the leader could not be reached, or kept answering
                ``NOT_LEADER_FOR_PARTITION`` or another retriable error, after
                ``max_retries`` retries.
            ConsumerError: the broker answered with another error for the partition (e.g.
                ``TopicAuthorizationFailed``); the message names it.
            ConsumerClosedError: the consumer is not started or closed.
        """
        raw = await self.fetch_raw(tp, offset, max_bytes)
        try:
            records, next_offset = parse_records(
                tp,
                offset,
                raw.data,
                max_bytes,
                check_crcs=self.check_crcs,
                aborted=raw.aborted_transactions,
            )
        except CorruptRecordError as e:
            if self.metrics is not None and e.expected_crc is not None:
                self.metrics.corrupt_batches_per_sec(tp.topic).mark()
                self.metrics.corrupt_batches_per_sec().mark()
            raise
        return FetchResult(records, raw.high_watermark, next_offset, raw.last_stable_offset)

    async def fetch_raw(
        self, tp: TopicPartition, offset: int, max_bytes: int = 1048576
    ) -> RawFetchResult:
        """Fetch one partition from ``offset`` and return the record set unparsed.

        :meth:`fetch` without the parsing, for callers that decode record batches their own
        way (the Spark source builds Arrow columns straight from them). Same request, same
        retries, same errors except those of parsing.

        Args:
            tp: the partition.
            offset: the first offset wanted.
            max_bytes: the most record bytes to return (``fetch.message.max.bytes``).

        Returns:
            The partition's ``records`` bytes (may start before ``offset``, inside a
            compressed batch, and may end with a partial batch), the high watermark, the
            last stable offset and, under read_committed, the aborted transactions to drop
            (the bytes hold their batches still; :func:`parse_records` drops them).

        Raises:
            ValueError, OffsetOutOfRangeError, UnknownTopicError, BrokerNotAvailableError,
                ConsumerError, ConsumerClosedError: as :meth:`fetch`.
        """
        if offset < 0:
            raise ValueError(f"offset must not be negative, got {offset}")
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        kafka = self._client()
        request = FetchRequest(
            self.fetch_max_wait_ms,
            self.fetch_min_bytes,
            max_bytes,
            self._isolation,
            [(tp.topic, [(tp.partition, offset, max_bytes)])],
        )

        async def fetch_from(leader: int) -> RawFetchResult:
            metrics = self.metrics
            started = metrics.clock() if metrics is not None else 0.0
            response = await kafka.send(leader, request)
            part = _partition_response(response, tp)
            if metrics is not None:
                self._record_fetch(metrics, leader, started, response, len(part[2]) if part else 0)
            if part is None:
                raise _RetriableError(f"broker {leader} answered without partition {tp}")
            error_code, high_watermark, data, stable, aborted = part
            err = classify_partition_error(error_code)
            if err is PartitionError.NONE:
                if self._isolation == READ_UNCOMMITTED:
                    aborted = None
                elif aborted is None:
                    aborted = ()
                return RawFetchResult(data, high_watermark, stable, aborted)
            if err is PartitionError.OFFSET_OUT_OF_RANGE:
                earliest, latest = await self._offset_range(tp)
                raise OffsetOutOfRangeError(tp.topic, tp.partition, offset, earliest, latest)
            if err.retriable:
                raise _RetriableError(f"broker {leader} answered {error_name(error_code)}")
            raise ConsumerError(
                f"fetch of partition {tp} at offset {offset} from broker {leader} "
                f"failed: {error_name(error_code)}"
            )

        return await self._with_leader(tp, "fetch", fetch_from)

    def _record_fetch(
        self,
        metrics: ConsumerMetrics,
        leader: int,
        started: float,
        response: Any,
        size: int,
    ) -> None:
        """Report one fetch as ``FetchRequestAndResponseStats`` did (broker + all brokers)."""
        metrics.record_fetch(
            self._client().broker_address(leader),
            (metrics.clock() - started) * 1000.0,
            size,
            float(getattr(response, "throttle_time_ms", 0) or 0),
        )

    async def fetch_range(
        self, tp: TopicPartition, start: int, end: int, *, max_bytes: int = 1048576
    ) -> AsyncIterator[MessageAndMetadata]:
        """Yield the records of a partition at offsets in ``[start, end)``, in order.

        Fetches as often as needed, from the next offset of each fetch (so control batches
        and compacted-away offsets are stepped over). Offsets in the range that hold no data
        record (transaction markers, compacted records, under read_committed the records of
        aborted transactions) are simply absent. If ``end`` is beyond the log end (under
        read_committed: the last stable offset), it waits for the records to be produced (or
        their transaction to end; each fetch at the end is held up to ``fetch_max_wait_ms``):
        bound it with a timeout if they may never come.

        Args:
            tp: the partition.
            start: the first offset wanted.
            end: the offset after the last one wanted; ``start == end`` yields nothing.
            max_bytes: the fetch size of each fetch.

        Yields:
            The records, ``start <= msg.offset < end``.

        Raises:
            ValueError: ``start`` is negative or ``end < start``.
            OffsetOutOfRangeError: ``start`` (or an offset reached later, e.g. deleted by
                retention while reading) is out of range.
            MessageSizeTooLargeError, CorruptRecordError, UnsupportedCodecError,
                UnknownTopicError, BrokerNotAvailableError, ConsumerError,
                ConsumerClosedError: as :meth:`fetch`.
        """
        if start < 0 or end < start:
            raise ValueError(f"invalid offset range [{start}, {end}) for partition {tp}")
        offset = start
        while offset < end:
            result = await self.fetch(tp, offset, max_bytes)
            for record in result.records:
                if record.offset >= end:
                    return
                yield record
            offset = max(offset, result.next_offset)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "started" if self._kafka is not None else "new"
        return f"<SimpleConsumer {self.bootstrap_servers} client_id={self.client_id} [{state}]>"


def _partition_response(
    response: Any, tp: TopicPartition
) -> tuple[int, int, bytes, int, tuple[tuple[int, int], ...] | None] | None:
    """``(error code, high watermark, records bytes, last stable offset, aborted
    transactions)`` of ``tp`` in a fetch response (``-1`` and ``None`` before Fetch v4)."""
    for topic, parts in response.topics:
        if topic != tp.topic:
            continue
        for partition, error_code, high_watermark, *rest in parts:
            if partition == tp.partition:
                stable, aborted = stable_and_aborted(rest)
                return (
                    int(error_code),
                    int(high_watermark),
                    rest[-1] or b"",
                    int(stable),
                    None if aborted is None else tuple((int(p), int(f)) for p, f in aborted),
                )
    return None
