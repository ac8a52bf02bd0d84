"""``KafkaStream``: ``async for msg in stream``, ``stream.batches()``, ``stream.arrow_batches()``.

One stream per (topic, thread index) of a static subscription, fed by a bounded queue of
``FetchedDataChunk`` objects (``queued.max.message.chunks``), as ``KafkaStream.scala``
(0.10.2). Its one iterator is ``iterator.py``'s ``ConsumerIterator`` (where the semantics of
the hand-out are), or an ``InterceptingIterator`` around it when interceptors are configured.
``KafkaStream.arrow_batches`` hands the same records out as ``pyarrow.RecordBatch``es,
gathered column by column (``aiozkconsumer.columns``, imported only then: pyarrow is an
optional extra). ``ConsumerIterator``, ``Decoder``, ``ChunkQueue`` and ``SHUTDOWN_COMMAND``
are importable from here too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from time import monotonic as _monotonic
from typing import TYPE_CHECKING, Any

from .errors import ConsumerTimeoutError
from .interceptors import Interceptors
from .iterator import READ_AHEAD_BYTES, READ_AHEAD_RECORDS, ConsumerIterator, Decoder
from .queues import SHUTDOWN_COMMAND, ChunkQueue
from .records import MessageAndMetadata

if TYPE_CHECKING:
    import pyarrow as pa

    from .columns import ColumnBuilder

__all__ = [
    "READ_AHEAD_BYTES",
    "READ_AHEAD_RECORDS",
    "SHUTDOWN_COMMAND",
    "ChunkQueue",
    "ConsumerIterator",
    "Decoder",
    "InterceptingIterator",
    "KafkaStream",
]


class InterceptingIterator:
    """A ``ConsumerIterator`` whose records pass through the interceptors' ``on_consume``.

    Used by a ``KafkaStream`` only when interceptors are configured, so the plain iterator's
    hot path stays untouched. ``__anext__`` passes each record on its own (``on_consume`` of a
    list of one); ``next_batch`` passes the whole batch once. Records an interceptor removes
    are not handed out, but their offsets count as consumed (as the Java client, whose
    ``onConsume`` runs after the position moved); when everything is removed the iterator
    keeps waiting. Extra records an interceptor returns are kept, in order, and handed out
    first by the next calls, even after a rebalance clears the stream (their offsets were
    already consumed). Interceptors with an ``on_poll`` hook are told each time the reader
    asks the underlying iterator for more (not while kept records are handed out).

    Args:
        iterator: the stream's ``ConsumerIterator``.
        interceptors: the chain; should be non-empty.

    Raises (from ``__anext__`` and ``next_batch``):
        ConsumerTimeoutError: as ``ConsumerIterator``; also when records kept arriving but
            were all removed and ``consumer.timeout.ms`` has passed since the call began
            (checked after each removal, so the wait can overrun by up to one more
            ``consumer.timeout.ms``).
        MessageSizeTooLargeError, StopAsyncIteration: as ``ConsumerIterator``; records kept
            from an earlier call are handed out first.
    """

    __slots__ = ("_buffer", "_interceptors", "_iterator", "_on_poll")

    def __init__(self, iterator: ConsumerIterator, interceptors: Interceptors) -> None:
        self._iterator = iterator
        self._interceptors = interceptors
        self._buffer: deque[MessageAndMetadata] = deque()
        # Bound once: most chains have no on_poll hook and pay nothing for it.
        self._on_poll: Callable[[], None] | None = (
            interceptors.on_poll if interceptors.polls else None
        )

    def __aiter__(self) -> InterceptingIterator:
        return self

    @property
    def iterator(self) -> ConsumerIterator:
        """The underlying ``ConsumerIterator``."""
        return self._iterator

    def _check_timeout(self, started: float) -> None:
        timeout_s = self._iterator._timeout_s
        if timeout_s is not None and _monotonic() - started >= timeout_s:
            raise ConsumerTimeoutError(
                f"no record within consumer.timeout.ms={int(timeout_s * 1000)} "
                "(interceptors removed the records that arrived)"
            )

    async def __anext__(self) -> MessageAndMetadata:
        buffer = self._buffer
        if buffer:
            self._iterator._polled_at = _monotonic()
            return buffer.popleft()
        if self._on_poll is not None:
            self._on_poll()
        on_consume = self._interceptors.on_consume
        started = _monotonic()
        while True:
            records = on_consume([await self._iterator.__anext__()])
            if records:
                if len(records) > 1:
                    buffer.extend(records[1:])
                return records[0]
            self._check_timeout(started)

    async def next_batch(self, max_records: int = 500) -> list[MessageAndMetadata]:
        """As ``ConsumerIterator.next_batch``, the batch passed through ``on_consume`` once.

        Returns:
            1 to ``max_records`` records. Records kept from an earlier call go out first, on
            their own; records past ``max_records`` are kept for the next call.
        """
        buffer = self._buffer
        if not buffer:
            if self._on_poll is not None:
                self._on_poll()
            on_consume = self._interceptors.on_consume
            started = _monotonic()
            while True:
                records = on_consume(await self._iterator.next_batch(max_records))
                if len(records) > max_records:
                    buffer.extend(records)
                    break
                if records:
                    return records
                self._check_timeout(started)
        self._iterator._polled_at = _monotonic()
        return [buffer.popleft() for _ in range(min(max_records, len(buffer)))]


class KafkaStream:
    """A stream of records for one consumer thread id (``KafkaStream.scala``).

    Iterate with ``async for msg in stream``; every ``__aiter__`` returns the same iterator, as
    the original's single iterator per stream: the ``ConsumerIterator`` itself, or, when
    interceptors are configured, an ``InterceptingIterator`` around it.

    Args:
        queue: the bounded chunk queue the fetchers fill.
        consumer_timeout_ms: ``consumer.timeout.ms``; negative blocks forever.
        client_id: ``client.id``, for metrics and ``repr``.
        name: a label such as ``"payments-0"`` (topic and thread index).
        key_decoder: applied to non-null keys (see ``ConsumerIterator``).
        value_decoder: applied to non-null values.
        interceptors: ``interceptor.classes``: when non-empty, records pass through their
            ``on_consume`` (after the decoders) before the reader gets them.
    """

    def __init__(
        self,
        queue: ChunkQueue,
        consumer_timeout_ms: int,
        client_id: str,
        name: str,
        key_decoder: Decoder | None = None,
        value_decoder: Decoder | None = None,
        *,
        interceptors: Interceptors | None = None,
    ) -> None:
        self.queue = queue
        self.client_id = client_id
        self.name = name
        self._iterator = ConsumerIterator(queue, consumer_timeout_ms, key_decoder, value_decoder)
        self._reader: ConsumerIterator | InterceptingIterator = (
            InterceptingIterator(self._iterator, interceptors) if interceptors else self._iterator
        )
        queue.reader = self

    def held_since(self) -> float | None:
        """Since when the reader holds what it was handed (monotonic seconds), ``None`` while
        it waits for records or before it first asked (``ConsumerIterator.held_since``)."""
        return self._iterator.held_since()

    def wake_on_poll(self, listener: Any) -> None:
        """``listener.set()`` each time the reader starts waiting for records."""
        self._iterator.wake_on_poll(listener)

    def __aiter__(self) -> AsyncIterator[MessageAndMetadata]:
        return self._reader

    @property
    def iterator(self) -> ConsumerIterator:
        """The stream's one ``ConsumerIterator`` (before any interceptor)."""
        return self._iterator

    def clear(self) -> None:
        """Drop the iterator's current chunk and what ``async for`` read ahead, used by a
        rebalance (``KafkaStream.clear``)."""
        self._iterator.clear_current_chunk()
        self._iterator.drop_read_ahead()

    async def batches(self, max_records: int = 500) -> AsyncIterator[list[MessageAndMetadata]]:
        """Iterate in batches: ``async for batch in stream.batches(max_records=1000)``.

        Each batch holds 1 to ``max_records`` records, in offset order per partition; a batch
        is handed out as soon as one record is ready. The records' offsets count as consumed
        when the batch is handed out. Ends when the stream ends. With interceptors, each
        batch passes through their ``on_consume`` once (see ``InterceptingIterator``).

        Args:
            max_records: the largest batch, >= 1.

        Raises:
            ValueError: ``max_records`` < 1.
            ConsumerTimeoutError, MessageSizeTooLargeError, CorruptRecordError,
                UnsupportedCodecError: as iterating record by record.
        """
        if max_records < 1:
            raise ValueError(f"max_records must be >= 1, not {max_records}")
        it = self._reader
        while True:
            try:
                batch = await it.next_batch(max_records)
            except StopAsyncIteration:
                return
            yield batch

    def arrow_batches(
        self, max_records: int = 10_000, *, include_headers: bool = False
    ) -> AsyncIterator[pa.RecordBatch]:
        """Iterate in Arrow record batches: ``async for rb in stream.arrow_batches()``.

        The records of ``batches()``, as ``pyarrow.RecordBatch``es in the row schema of
        Spark's Kafka source (:func:`aiozkconsumer.columns.kafka_arrow_schema`): ``key``,
        ``value`` (binary, NULL for a null key or a tombstone), ``topic``, ``partition``,
        ``offset``, ``timestamp`` (UTC, microseconds; epoch - 1 ms when the record has none),
        ``timestampType`` (``0`` CreateTime, ``1`` LogAppendTime, ``-1`` none) and, with
        ``include_headers``, ``headers`` (a list of ``{key, value}``, NULL without headers).
        The columns are built straight from the fetched record batches, with no
        ``MessageAndMetadata`` per record.

        Semantics are those of ``batches()``: a batch holds 1 to ``max_records`` records, in
        offset order per partition (a batch may mix the stream's partitions), and is handed
        out as soon as one record is ready; its records' offsets count as consumed when it is
        handed out (so auto-commit and ``commit_offsets()`` cover them from then on); a
        rebalance drops records of released partitions not yet handed out; the iteration
        ends when the stream ends (shutdown). With interceptors, each batch's records pass
        through their ``on_consume`` once, as ``MessageAndMetadata``, and the records it
        returns are put into columns (keys and values must stay bytes).

        Args:
            max_records: the largest batch, >= 1.
            include_headers: add the ``headers`` column.

        Returns:
            An async iterator of ``pyarrow.RecordBatch``.

        Raises:
            ImportError: pyarrow (or numpy) is not installed; it names the extra to install,
                ``aiozkconsumer[arrow]``.
            ValueError: ``max_records`` < 1, or the stream was created with a key or value
                decoder (the columns hold the records' bytes).
            ConsumerTimeoutError, MessageSizeTooLargeError, CorruptRecordError,
                UnsupportedCodecError: while iterating, as ``batches()``.
        """
        if max_records < 1:
            raise ValueError(f"max_records must be >= 1, not {max_records}")
        it = self._iterator
        if it._key_decoder is not None or it._value_decoder is not None:
            raise ValueError(
                "arrow_batches hands out the records' bytes: create the streams without "
                "key_decoder/value_decoder to use it"
            )
        from .columns import ColumnBuilder  # needs the optional pyarrow

        return self._arrow_batches(ColumnBuilder(include_headers=include_headers), max_records)

    async def _arrow_batches(
        self, columns: ColumnBuilder, max_records: int
    ) -> AsyncIterator[pa.RecordBatch]:
        reader = self._reader
        while True:
            try:
                if isinstance(reader, InterceptingIterator):
                    columns.add_messages(await reader.next_batch(max_records))
                else:
                    await reader.next_columns(columns, max_records)
            except StopAsyncIteration:
                return
            yield columns.take_batch()

    def __repr__(self) -> str:
        return f"<KafkaStream {self.name} queued={self.queue.qsize()}/{self.queue.maxsize}>"
