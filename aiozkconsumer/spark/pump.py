"""The push-mode bridge's pump: records from the connector's streams into the buffer, and
batches cut from it.

One :func:`pump` task per stream moves what the stream hands out (``arrow_batches``, or
``batches`` for streams with decoders) into the connector's
:class:`~aiozkconsumer.spark.buffer.BridgeBuffer`, keeping about two batches buffered;
:func:`take_batch` waits for the next batch (full, or ``max_interval`` after its first
record) and :func:`take_replay` for the records of a batch being replayed.
``foreach_batch`` (``bridge.py``) runs them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import pyarrow as pa

from ..base_connector import ConsumerConnector
from ..errors import ConsumerTimeoutError
from ..records import MessageAndMetadata, TopicPartition
from ..stream import KafkaStream
from .buffer import BridgeBuffer
from .runs import PartitionRun, split_replay
from .schema import records_to_arrow

__all__ = ["decoded_to_arrow", "pump", "take_batch", "take_replay"]


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


def decoded_to_arrow(
    records: Sequence[MessageAndMetadata], include_headers: bool, buf: BridgeBuffer
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


async def pump(
    connector: ConsumerConnector,
    stream: KafkaStream,
    buf: BridgeBuffer,
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
            batch = got if columnar else decoded_to_arrow(got, include_headers, buf)
            buf.add(batch, connector.topic_registry)
            buf.notify()
    finally:
        try:
            await _close(batches)
        finally:
            buf.ended += 1
            buf.notify()


async def take_batch(
    connector: ConsumerConnector,
    buf: BridgeBuffer,
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
    return batch or await take_batch(connector, buf, streams, max_records, max_interval_s)


async def take_replay(
    connector: ConsumerConnector,
    buf: BridgeBuffer,
    streams: int,
    targets: Mapping[TopicPartition, tuple[int, int]],
    held: Sequence[PartitionRun] = (),
) -> list[PartitionRun] | None:
    """The records of a batch being replayed: every target partition up to its end.

    Args:
        held: the batch's records the bridge still holds (see
            :meth:`~aiozkconsumer.spark.buffer.BridgeBuffer.reclaim`); their partitions are
            complete, the others are read from the buffer.

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
