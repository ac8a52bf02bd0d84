"""The console consumers' loops: records of a group or a partition, formatted, to a sink.

:class:`ConsoleConsumer` runs one connector with one stream (``ConsoleConsumer --zookeeper``,
Kafka 0.10.2); :class:`PartitionConsoleConsumer` reads one partition from an offset through a
:class:`~aiozkconsumer.simple_consumer.SimpleConsumer`, without a group. Both stop on the same
ends (enough records, a timeout, the log end, the reader gone, :meth:`~ConsoleConsumer.stop`)
and count exactly the records their :class:`~aiozkconsumer.tools.OutputSink` delivered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

import anyio

from ...base_connector import ConnectorState, ConsumerConnector
from ...config import ConsumerConfig
from ...consumer import create_connector
from ...errors import ConsumerError, ConsumerTimeoutError
from ...iterator import ConsumerIterator
from ...records import MessageAndMetadata, TopicPartition
from ...simple_consumer import SimpleConsumer
from ...subscription import TopicFilter
from .formatters import MessageFormatter, RecordFormatter
from .rules import OffsetSpec, at_log_end, resolve_start_offset, rewind_offsets
from .sinks import OutputSink, StreamSink

__all__ = ["ConsoleConsumer", "PartitionConsoleConsumer"]

_T = TypeVar("_T")

_END_POLL_S = 0.1
_OUTPUT_POLL_S = 0.2
_BATCH = 500


class _ConsoleRun:
    """What both console consumers share: the sink, the counters, and stopping.

    Stopping cancels only the wait for records (``_until_stopped``), never a write in
    progress: the records written are always counted.
    """

    sink: OutputSink
    decode: Callable[[MessageAndMetadata], Awaitable[MessageAndMetadata | None]] | None = None
    """Turns each record read into what is formatted (a Schema Registry decoder's
    ``decode_message``); ``None`` formats the records as read. When it raises, the records
    before are written, the rest of the batch is not (nor counted consumed, so not
    committed), the run ends and :meth:`run` raises that error."""
    failure: ConsumerError | None = None

    def __init__(
        self,
        sink: OutputSink,
        formatter: RecordFormatter | None,
        max_messages: int | None,
        exit_at_end: bool,
    ) -> None:
        self.sink = sink
        self.formatter: RecordFormatter = formatter or MessageFormatter()
        self.max_messages = max_messages
        self.exit_at_end = exit_at_end
        self.count = 0
        self.timed_out = False
        self.output_closed = False
        self.reached_end = False
        self._stopping = False
        self._waiting: anyio.CancelScope | None = None

    def stop(self) -> None:
        """Ask :meth:`run` to end (e.g. from a signal handler in the event loop's thread).

        A wait for records ends at once; a record being handed to a slow pipe reader counts
        as not delivered.
        """
        self._interrupt()
        self.sink.abort()

    def _interrupt(self) -> None:
        self._stopping = True
        if self._waiting is not None:
            self._waiting.cancel()

    async def _until_stopped(
        self, fn: Callable[..., Awaitable[_T]], *args: Any
    ) -> tuple[bool, _T | None]:
        """``(True, await fn(*args))``, or ``(False, None)`` if stopped first."""
        if self._stopping:
            return False, None
        with anyio.CancelScope() as scope:
            self._waiting = scope
            try:
                return True, await fn(*args)
            finally:
                self._waiting = None
        return False, None

    async def _supervised(
        self, body: Callable[[], Awaitable[None]], watchers: Sequence[Callable[[], Awaitable[None]]]
    ) -> None:
        """Run ``body`` with ``watchers`` beside it; the first error is raised, unwrapped.

        A watcher's error stops the run (as :meth:`stop`); the watchers end with the body.
        """
        errors: list[Exception] = []

        async def guarded(fn: Callable[[], Awaitable[None]]) -> None:
            try:
                await fn()
            except Exception as e:
                errors.append(e)
                self._interrupt()

        async with anyio.create_task_group() as tg:
            for watcher in watchers:
                tg.start_soon(guarded, watcher)
            try:
                await body()
            except Exception as e:  # raised below, not as the task group's ExceptionGroup
                errors.append(e)
            finally:
                tg.cancel_scope.cancel()
        if errors:
            raise errors[0]

    async def _watch_output(self) -> None:
        """End the run when the reader of the output goes away, even while idle."""
        while not self._stopping:
            if self.sink.reader_gone():
                self.output_closed = True
                self._interrupt()
                return
            await anyio.sleep(_OUTPUT_POLL_S)

    def _wanted(self) -> int:
        if self.max_messages is None:
            return _BATCH
        return min(_BATCH, self.max_messages - self.count)

    async def _deliver(self, batch: Sequence[MessageAndMetadata]) -> int:
        """Write ``batch``; count and return the records delivered."""
        fmt = self.formatter.format
        if self.decode is not None:
            decoded = []
            for msg in batch:
                try:
                    out = await self.decode(msg)
                except ConsumerError as e:
                    self.failure = e
                    self._stopping = True
                    break
                if out is None:  # a decoder with a dead-letter callback: not for the console
                    self.failure = ConsumerError(
                        f"the decoder left out the record at offset {msg.offset} of "
                        f"partition [{msg.topic},{msg.partition}]"
                    )
                    self._stopping = True
                    break
                decoded.append(out)
            batch = decoded
        written = await self.sink.write_records([fmt(m) for m in batch])
        self.count += written
        if self.sink.closed:
            self.output_closed = True
        return written


class ConsoleConsumer(_ConsoleRun):
    """The console consumer of the old mode (``ConsoleConsumer --zookeeper``, 0.10.2).

    One connector with one stream over a topic filter (``createMessageStreamsByFilter(filter,
    1)``); records go to the sink through the formatter until ``max_messages`` were
    delivered, ``consumer.timeout.ms`` passes without a record, every owned partition reached
    its log end (``exit_at_end``), the reader of the output went away, or :meth:`stop` is
    called. Leaving commits the consumed offsets (with ``auto.commit.enable``) and closes the
    session. The offsets count exactly the records delivered: a batch never holds more than
    the records still wanted, and the consumed offsets of records the sink did not deliver
    (a closed pipe; see :class:`FdSink` for what "delivered" means on a pipe) are set back
    before the final commit. The original lost those records.

    Args:
        config: the consumer configuration.
        topic_filter: a ``Whitelist`` or ``Blacklist``.
        write: called with each formatted record, when no ``sink`` is given (wrapped in a
            :class:`StreamSink` with ``flush``).
        flush: called after each batch of records (with ``write``).
        sink: where the records go (instead of ``write``/``flush``).
        formatter: the record formatter (default :class:`MessageFormatter`).
        max_messages: stop after this many records (``None``: no limit).
        exit_at_end: stop once every partition this member owns has been read up to its log
            end offset as of the start (kcat's ``-e``); needs ``end_offsets``. Partitions
            acquired later are read up to their log end when first owned.
        end_offsets: ``await end_offsets(tps)`` -> ``{tp: log end offset}`` (for
            ``exit_at_end``); the caller may cache, answering with the offsets at start.

    Attributes:
        count: records delivered so far.
        timed_out: whether the run ended because ``consumer.timeout.ms`` passed.
        output_closed: whether the run ended because the reader of the output went away.
        reached_end: whether the run ended because every owned partition reached its end.
        connector: the connector, while :meth:`run` runs.

    Raises:
        ValueError: neither ``write`` nor ``sink``, or ``exit_at_end`` without
            ``end_offsets``.
    """

    def __init__(
        self,
        config: ConsumerConfig,
        topic_filter: TopicFilter,
        write: Callable[[bytes], object] | None = None,
        flush: Callable[[], object] = lambda: None,
        *,
        sink: OutputSink | None = None,
        formatter: RecordFormatter | None = None,
        max_messages: int | None = None,
        exit_at_end: bool = False,
        end_offsets: Callable[[Collection[TopicPartition]], Awaitable[Mapping[TopicPartition, int]]]
        | None = None,
    ) -> None:
        if sink is None:
            if write is None:
                raise ValueError("give write or sink")
            sink = StreamSink(write, flush)
        if exit_at_end and end_offsets is None:
            raise ValueError("exit_at_end needs end_offsets")
        super().__init__(sink, formatter, max_messages, exit_at_end)
        self.config = config
        self.topic_filter = topic_filter
        self.end_offsets = end_offsets
        self.connector: ConsumerConnector | None = None

    async def run(self) -> int:
        """Consume until one of the ends of the class doc; then shut down.

        Returns:
            The number of records delivered.

        Raises:
            ConsumerError: from the connector (``ZookeeperConnectionError``,
                ``ConsumerRebalanceFailedError``, ...), from ``end_offsets``, or the output
                failed.
        """
        async with create_connector(self.config) as connector:
            self.connector = connector
            watchers = [self._watch_output]
            if self.exit_at_end:
                watchers.append(lambda: self._watch_log_end(connector))

            async def body() -> None:
                ok, streams = await self._until_stopped(
                    connector.create_message_streams_by_filter, self.topic_filter, 1
                )
                if ok and streams:
                    await self._consume(streams[0].iterator, connector)

            await self._supervised(body, watchers)
        if self.failure is not None:
            raise self.failure
        return self.count

    async def _consume(self, iterator: ConsumerIterator, connector: ConsumerConnector) -> None:
        next_batch = iterator.next_batch
        while not self._stopping and self._wanted() > 0:
            try:
                ok, batch = await self._until_stopped(next_batch, self._wanted())
            except StopAsyncIteration:
                break
            except ConsumerTimeoutError:
                self.timed_out = True
                break
            if not ok or not batch:
                break
            written = await self._deliver(batch)
            if written < len(batch):
                self._rewind(connector, batch[written:])
                break
            if self.exit_at_end and await self._check_log_end(connector):
                break

    @staticmethod
    def _rewind(connector: ConsumerConnector, undelivered: Sequence[MessageAndMetadata]) -> None:
        """Set the consumed offsets back to the first record not delivered, per partition."""
        registry = connector.topic_registry
        for tp, offset in rewind_offsets(undelivered).items():
            pti = registry.get(tp)
            if pti is not None and pti.consumed_offset > offset:
                pti.consumed_offset = offset

    async def _check_log_end(self, connector: ConsumerConnector) -> bool:
        if connector.state is not ConnectorState.RUNNING:
            return False  # mid-rebalance, suspended: what is owned is about to change
        positions = {tp: pti.consumed_offset for tp, pti in connector.topic_registry.items()}
        assert self.end_offsets is not None
        ends = await self.end_offsets(list(positions))
        if connector.state is ConnectorState.RUNNING and at_log_end(positions, ends):
            self.reached_end = True
            self._interrupt()
        return self.reached_end

    async def _watch_log_end(self, connector: ConsumerConnector) -> None:
        """Catch the end while no record comes (e.g. the log was read up to its end already)."""
        # Consumed offsets advance without an event to wait for: poll them.
        while not self._stopping:
            if await self._check_log_end(connector):
                return
            await anyio.sleep(_END_POLL_S)


class PartitionConsoleConsumer(_ConsoleRun):
    """Reads one partition from an offset without a group (the console consumer's
    ``--partition`` / ``--offset``; kcat's ``-p`` / ``-o``).

    Nothing is registered anywhere and nothing is committed: the records of ``tp`` from
    ``start`` on are fetched from the partition's leader with ``consumer`` and written to the
    sink, until ``max_messages`` were delivered, ``timeout_ms`` passes without a record, the
    log end offset as of the start is reached (``exit_at_end``), the reader of the output
    went away, or :meth:`stop` is called.

    Args:
        consumer: a started :class:`~aiozkconsumer.simple_consumer.SimpleConsumer`.
        tp: the partition.
        start: where to start (see :data:`OffsetSpec`).
        sink: where the records go.
        formatter: the record formatter (default :class:`MessageFormatter`).
        max_messages: stop after this many records (``None``: no limit).
        timeout_ms: stop when no record came for this long (``None``: wait forever).
        exit_at_end: stop at the log end offset read at the start (records past it are not
            written).
        fetch_max_bytes: the size of each fetch (``fetch.message.max.bytes``).

    Attributes:
        count, timed_out, output_closed, reached_end: as :class:`ConsoleConsumer`.
        start_offset: the offset the read started at, once resolved.
        next_offset: the offset after the last record delivered (or skipped as a control
            record), where a later read would go on.
    """

    def __init__(
        self,
        consumer: SimpleConsumer,
        tp: TopicPartition,
        start: OffsetSpec,
        sink: OutputSink,
        *,
        formatter: RecordFormatter | None = None,
        max_messages: int | None = None,
        timeout_ms: int | None = None,
        exit_at_end: bool = False,
        fetch_max_bytes: int = 1048576,
    ) -> None:
        super().__init__(sink, formatter, max_messages, exit_at_end)
        self.consumer = consumer
        self.tp = tp
        self.start = start
        self.timeout_ms = timeout_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.start_offset: int | None = None
        self.next_offset: int | None = None

    async def run(self) -> int:
        """Read and write until one of the ends of the class doc.

        Returns:
            The number of records delivered.

        Raises:
            OffsetOutOfRangeError: the start offset is not in the partition (the error
                carries the valid range).
            UnknownTopicError: the topic or the partition does not exist.
            BrokerNotAvailableError: the partition's leader cannot be reached.
            ConsumerError: another fetch error, or the output failed.
        """
        await self._supervised(self._read, [self._watch_output])
        if self.failure is not None:
            raise self.failure
        return self.count

    async def _read(self) -> None:
        consumer, tp = self.consumer, self.tp
        need_latest = (
            self.exit_at_end
            or self.start == "latest"
            or (isinstance(self.start, int) and self.start < 0)
        )
        latest = await consumer.latest_offset(tp) if need_latest else -1
        earliest = (
            await consumer.earliest_offset(tp)
            if self.start == "earliest" or (isinstance(self.start, int) and self.start < 0)
            else -1
        )
        offset = resolve_start_offset(self.start, earliest, latest)
        self.start_offset = self.next_offset = offset
        end = latest if self.exit_at_end else None
        timeout_s = None if self.timeout_ms is None else self.timeout_ms / 1000
        last_record = anyio.current_time()
        while not self._stopping and self._wanted() > 0:
            if end is not None and offset >= end:
                self.reached_end = True
                break
            ok, result = await self._until_stopped(consumer.fetch, tp, offset, self.fetch_max_bytes)
            if not ok or result is None:
                break
            records = result.records
            if end is not None:
                records = [r for r in records if r.offset < end]
            records = records[: self._wanted()]
            if records:
                written = await self._deliver(records)
                if written < len(records):
                    self.next_offset = records[written].offset
                    break
                last_record = anyio.current_time()
                if len(records) < len(result.records):
                    self.next_offset = records[-1].offset + 1
                    offset = self.next_offset
                    continue
            elif timeout_s is not None and anyio.current_time() - last_record >= timeout_s:
                self.timed_out = True
                break
            offset = self.next_offset = max(offset, result.next_offset)
