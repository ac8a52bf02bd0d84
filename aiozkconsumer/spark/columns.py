"""Fetched record sets parsed straight into Arrow columns (the executor's hot path).

An executor of the ``zkkafka`` source reads an offset range of one partition and hands Spark
Arrow record batches. Going through :class:`~aiozkconsumer.records.MessageAndMetadata`
would build a tuple per record only to take it apart again column by column; instead
:class:`RecordColumns` has the native decoder (``kafka/records.py``) append each record's
key and value to Arrow buffers straight from the fetched bytes, batch after batch
(:class:`aiozkconsumer.columns.ColumnBuilder`, shared with ``KafkaStream.arrow_batches``),
and turns them into a ``pyarrow.RecordBatch`` in
:func:`~aiozkconsumer.spark.schema.arrow_schema` in one go. Without the extension (or for
record sets with magic 0/1 batches) aiokafka's parser yields the records into per-column
lists instead. The rules are those of
:func:`~aiozkconsumer.simple_consumer.parse_records` (which the connector's fetcher uses):
control batches are skipped, under read_committed so are the batches of aborted transactions
(``kafka/transactions.py``), records before the fetch offset (inside a compressed batch) are
left out, and the next offset is the one after the last complete batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..columns import ColumnBuilder
from ..kafka.errors import RECORD_PARSE_ERRORS
from ..kafka.records import (
    Outcome,
    decompress_at,
    malformed_error,
    read_record_set,
    unsupported_codec_error,
)
from ..kafka.transactions import AbortedTransactions, drop_aborted
from ..records import TopicPartition
from ..simple_consumer import corrupt_record_error, message_too_large_error
from .schema import arrow_schema

__all__ = ["RecordColumns"]


class RecordColumns(ColumnBuilder):
    """Records of one partition, gathered column by column until turned into Arrow.

    Typical use, per fetch of ``[offset, end)``::

        columns = RecordColumns(tp, include_headers=False)
        offset = columns.add_fetch(raw.data, offset, end, max_bytes)
        ...
        batch = columns.take_batch()   # a pyarrow.RecordBatch; the columns start empty again

    ``take_batch`` and ``len`` are :class:`~aiozkconsumer.columns.ColumnBuilder`'s. Not
    thread-safe; one per task.

    Args:
        tp: the partition every added record belongs to.
        include_headers: gather the ``headers`` column too.
    """

    def __init__(self, tp: TopicPartition, *, include_headers: bool = False) -> None:
        super().__init__(include_headers=include_headers, schema=arrow_schema(include_headers))
        self.tp = tp

    def add_fetch(
        self,
        data: bytes,
        fetch_offset: int,
        end: int,
        max_bytes: int,
        aborted: Iterable[tuple[int, int]] | None = None,
    ) -> int:
        """Parse one fetch response's record set and add its records in ``[fetch_offset, end)``.

        Args:
            data: the partition's ``records`` bytes (see ``SimpleConsumer.fetch_raw``).
            fetch_offset: the offset the fetch asked for; records below it are left out.
            end: the offset after the last one wanted; records at or after it are left out.
            max_bytes: the fetch size the request used (for the error message).
            aborted: read_committed: the response's aborted transactions
                (``RawFetchResult.aborted_transactions``); their batches are left out.
                ``None`` (read_uncommitted) leaves them in.

        Returns:
            The offset to fetch next: after the last complete batch in ``data`` (control
            batches and compacted-away offsets included), or ``fetch_offset`` when ``data``
            is empty.

        Raises:
            MessageSizeTooLargeError: ``data`` is not empty but holds no complete batch (a
                batch at ``fetch_offset`` larger than ``max_bytes``).
            CorruptRecordError: a batch does not parse.
            UnsupportedCodecError: a batch with records wanted is compressed with a codec
                that cannot be decompressed here (``cramjam`` missing).
        """
        if not data:
            return fetch_offset
        record_set = read_record_set(data, self.tp, True)  # check.crcs, always on for Spark
        if record_set.corrupt:
            raise record_set.corrupt[min(record_set.corrupt)]  # the first corrupt batch
        batches = record_set.native_batches
        if batches is not None:
            if aborted:
                drop_aborted(batches, aborted)  # marked: the native loops step over
            return self._add_native_fetch(batches, fetch_offset, end, max_bytes)
        next_offset = fetch_offset
        complete = False
        topic, partition = self.tp.topic, self.tp.partition
        transactions = AbortedTransactions(aborted) if aborted else None
        try:
            for batch in record_set.batches:
                complete = True
                batch_next = batch.next_offset
                next_offset = max(next_offset, batch_next)
                if transactions and transactions.aborted(batch):
                    continue
                if batch_next <= fetch_offset or batch.is_control_batch:
                    continue
                unsupported = unsupported_codec_error(topic, partition, batch)
                if unsupported is not None:
                    raise unsupported
                timestamp_type = getattr(batch, "timestamp_type", None)
                if timestamp_type is None:  # a message set of magic 0 or 1: per record
                    self.add_legacy_records(batch, topic, partition, fetch_offset, end)
                    continue
                if batch.base_offset >= fetch_offset and batch_next <= end:
                    self.add_records(batch, topic, partition, timestamp_type)
                else:
                    self.add_records(
                        (r for r in batch if r.offset < end),
                        topic,
                        partition,
                        timestamp_type,
                        fetch_offset,
                    )
        except RECORD_PARSE_ERRORS as e:
            raise corrupt_record_error(self.tp, next_offset, e) from e
        if not complete:
            raise message_too_large_error(self.tp, fetch_offset, max_bytes)
        return next_offset

    def _add_native_fetch(
        self, batches: list[Any], fetch_offset: int, end: int, max_bytes: int
    ) -> int:
        """``add_fetch`` through the native decoder's take loop, batch after batch."""
        if not batches:
            raise message_too_large_error(self.tp, fetch_offset, max_bytes)
        topic, partition = self.tp.topic, self.tp.partition
        index = 0
        while index < len(batches):
            try:
                _, index, status, _ = self.add_native_batches(
                    batches, index, topic, partition, fetch_offset, end=end
                )
            except ValueError as e:
                raise malformed_error(topic, partition, batches[index], e) from e
            if status == Outcome.FOREIGN:  # compressed: decompressed, then read
                decompress_at(batches, index, topic, partition)
            elif status == Outcome.ERROR:
                continue  # the next call raises at the bad record
            elif status != Outcome.DONE:
                break  # Outcome.END: the records wanted are in
        return max(fetch_offset, int(batches[-1].next_offset))
