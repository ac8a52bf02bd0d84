"""``KafkaStream`` and its ``ConsumerIterator``: ``async for msg in stream``.

One stream per (topic, thread index) of a static subscription, fed by a bounded queue of
``FetchedDataChunk`` objects (``queued.max.message.chunks``). Semantics follow
``ConsumerIterator.scala`` / ``KafkaStream.scala`` (0.10.2): the consumed offset advances when a
record is handed out; records below the consumed offset in a chunk are skipped;
``consumer.timeout.ms`` raises ``ConsumerTimeoutError`` and leaves the iterator usable; the
shutdown sentinel ends iteration.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

from .errors import ConsumerTimeoutError, MessageSizeTooLargeError
from .records import FetchedDataChunk, MessageAndMetadata, PartitionTopicInfo

__all__ = ["SHUTDOWN_COMMAND", "ChunkQueue", "ConsumerIterator", "KafkaStream"]


class _ShutdownCommand:
    """The sentinel put into every queue on shutdown (the original's ``shutdownCommand``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "SHUTDOWN_COMMAND"


SHUTDOWN_COMMAND: Final = _ShutdownCommand()

ChunkQueue = asyncio.Queue[FetchedDataChunk | _ShutdownCommand]


def _records_of(chunk: FetchedDataChunk) -> Iterator[tuple[PartitionTopicInfo, Any]]:
    """Yield the data records of a chunk in offset order, skipping control batches."""
    pti = chunk.topic_info
    for batch in chunk.batches:
        if batch.is_control_batch:
            # Transaction markers occupy offsets but are not records: move past them.
            if pti.active and pti.consumed_offset < batch.next_offset:
                pti.consumed_offset = batch.next_offset
            continue
        for record in batch:
            yield pti, record


class ConsumerIterator:
    """The asynchronous iterator of one ``KafkaStream`` (``ConsumerIterator.scala``).

    ``await it.__anext__()`` returns the next ``MessageAndMetadata``.

    Raises (from ``__anext__``):
        ConsumerTimeoutError: no record within ``consumer.timeout.ms`` (when >= 0). The
            iterator stays usable: iterate again to keep waiting (KAFKA-241).
        MessageSizeTooLargeError: a record batch at the fetch offset is larger than
            ``fetch.message.max.bytes``. The partition does not advance; raise the fetch size.
            The iterator stays usable for the stream's other partitions.
        StopAsyncIteration: the connector shut down (the shutdown sentinel arrived).
    """

    __slots__ = ("_current", "_done", "_queue", "_records", "_timeout_s")

    def __init__(self, queue: ChunkQueue, consumer_timeout_ms: int) -> None:
        self._queue = queue
        self._timeout_s = consumer_timeout_ms / 1000 if consumer_timeout_ms >= 0 else None
        self._current: FetchedDataChunk | None = None
        self._records: Iterator[tuple[PartitionTopicInfo, Any]] | None = None
        self._done = False

    def __aiter__(self) -> ConsumerIterator:
        return self

    async def _next_chunk(self) -> FetchedDataChunk | _ShutdownCommand:
        queue = self._queue
        if not queue.empty():
            return queue.get_nowait()
        if self._timeout_s is None:
            return await queue.get()
        try:
            return await asyncio.wait_for(queue.get(), self._timeout_s)
        except TimeoutError:
            raise ConsumerTimeoutError(
                f"no record within consumer.timeout.ms={int(self._timeout_s * 1000)}"
            ) from None

    async def __anext__(self) -> MessageAndMetadata:
        while True:
            records = self._records
            if records is None:
                if self._done:
                    raise StopAsyncIteration
                chunk = await self._next_chunk()
                if isinstance(chunk, _ShutdownCommand):
                    self._done = True
                    raise StopAsyncIteration
                pti = chunk.topic_info
                if not pti.active:
                    continue  # released by a rebalance while queued
                if chunk.too_large:
                    raise MessageSizeTooLargeError(
                        "Found a message larger than the maximum fetch size of this consumer "
                        f"on topic {pti.topic} partition {pti.partition} at fetch offset "
                        f"{chunk.fetch_offset}. Increase the fetch size "
                        f"(fetch.message.max.bytes={pti.fetch_size}), or decrease the maximum "
                        "message size the broker will allow."
                    )
                if pti.consumed_offset < chunk.fetch_offset:
                    # After an offset reset the chunk starts past what was consumed.
                    pti.consumed_offset = chunk.fetch_offset
                self._current = chunk
                records = self._records = _records_of(chunk)
            for pti, record in records:
                if not pti.active:
                    break  # partition released mid-chunk: drop the rest
                offset = record.offset
                if offset < pti.consumed_offset:
                    continue
                pti.consumed_offset = offset + 1
                return MessageAndMetadata(
                    pti.topic,
                    pti.partition,
                    offset,
                    record.key,
                    record.value,
                    record.timestamp if record.timestamp is not None else -1,
                    record.timestamp_type if record.timestamp_type is not None else -1,
                    tuple(record.headers),
                )
            self._current = None
            self._records = None

    def clear_current_chunk(self) -> None:
        """Drop the chunk being iterated (``ConsumerIterator.clearCurrentChunk``)."""
        self._current = None
        self._records = None


class KafkaStream:
    """A stream of records for one consumer thread id (``KafkaStream.scala``).

    Iterate with ``async for msg in stream``; every ``__aiter__`` returns the same
    ``ConsumerIterator``, as the original's single iterator per stream.

    Args:
        queue: the bounded chunk queue the fetchers fill.
        consumer_timeout_ms: ``consumer.timeout.ms``; negative blocks forever.
        client_id: ``client.id``, for metrics and ``repr``.
        name: a label such as ``"payments-0"`` (topic and thread index).
    """

    def __init__(
        self, queue: ChunkQueue, consumer_timeout_ms: int, client_id: str, name: str
    ) -> None:
        self.queue = queue
        self.client_id = client_id
        self.name = name
        self._iterator = ConsumerIterator(queue, consumer_timeout_ms)

    def __aiter__(self) -> AsyncIterator[MessageAndMetadata]:
        return self._iterator

    @property
    def iterator(self) -> ConsumerIterator:
        """The stream's one ``ConsumerIterator``."""
        return self._iterator

    def clear(self) -> None:
        """Drop the iterator's current chunk, used by a rebalance (``KafkaStream.clear``)."""
        self._iterator.clear_current_chunk()

    def __repr__(self) -> str:
        return f"<KafkaStream {self.name} queued={self.queue.qsize()}/{self.queue.maxsize}>"
