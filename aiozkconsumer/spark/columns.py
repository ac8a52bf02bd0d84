"""Fetched record sets parsed straight into Arrow columns (the executor's hot path).

An executor of the ``zkkafka`` source reads an offset range of one partition and hands Spark
Arrow record batches. Going through :class:`~aiozkconsumer.records.MessageAndMetadata`
would build a tuple per record only to take it apart again column by column; instead
:class:`RecordColumns` appends each record's fields to per-column lists as aiokafka's record
batch parser yields them, and turns them into a ``pyarrow.RecordBatch`` in
:func:`~aiozkconsumer.spark.schema.arrow_schema` in one go. The rules are those of
:func:`~aiozkconsumer.simple_consumer.parse_records` (which the connector's fetcher uses):
control batches are skipped, records before the fetch offset (inside a compressed batch) are
left out, and the next offset is the one after the last complete batch.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.record.memory_records import MemoryRecords

from ..kafka.errors import RECORD_PARSE_ERRORS
from ..records import TopicPartition
from ..simple_consumer import corrupt_record_error, message_too_large_error
from .schema import arrow_schema

__all__ = ["RecordColumns"]

_US_PER_MS = 1000


class RecordColumns:
    """Records of one partition, gathered column by column until turned into Arrow.

    Typical use, per fetch of ``[offset, end)``::

        columns = RecordColumns(tp, include_headers=False)
        offset = columns.add_fetch(raw.data, offset, end, max_bytes)
        ...
        batch = columns.take_batch()   # a pyarrow.RecordBatch; the columns start empty again

    Not thread-safe; one per task.

    Args:
        tp: the partition every added record belongs to.
        include_headers: gather the ``headers`` column too.
    """

    def __init__(self, tp: TopicPartition, *, include_headers: bool = False) -> None:
        self.tp = tp
        self.include_headers = include_headers
        self._schema = arrow_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        self._offsets: list[int] = []
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._timestamps: list[int] = []
        self._type_runs: list[tuple[int, int]] = []  # (timestampType, rows)
        self._headers: list[list[dict[str, Any]] | None] = []

    def __len__(self) -> int:
        """The number of records gathered since the last :meth:`take_batch`."""
        return len(self._offsets)

    def add_fetch(self, data: bytes, fetch_offset: int, end: int, max_bytes: int) -> int:
        """Parse one fetch response's record set and add its records in ``[fetch_offset, end)``.

        Args:
            data: the partition's ``records`` bytes (see ``SimpleConsumer.fetch_raw``).
            fetch_offset: the offset the fetch asked for; records below it are left out.
            end: the offset after the last one wanted; records at or after it are left out.
            max_bytes: the fetch size the request used (for the error message).

        Returns:
            The offset to fetch next: after the last complete batch in ``data`` (control
            batches and compacted-away offsets included), or ``fetch_offset`` when ``data``
            is empty.

        Raises:
            MessageSizeTooLargeError: ``data`` is not empty but holds no complete batch (a
                batch at ``fetch_offset`` larger than ``max_bytes``).
            CorruptRecordError: a batch does not parse.
        """
        if not data:
            return fetch_offset
        memory_records = MemoryRecords(bytes(data))
        next_offset = fetch_offset
        complete = False
        offsets, keys, values, timestamps = (
            self._offsets,
            self._keys,
            self._values,
            self._timestamps,
        )
        add_offset, add_key, add_value, add_timestamp = (
            offsets.append,
            keys.append,
            values.append,
            timestamps.append,
        )
        add_headers = self._headers.append
        with_headers = self.include_headers
        try:
            while memory_records.has_next():
                batch = memory_records.next_batch()
                if batch is None:
                    break
                complete = True
                batch_next = batch.next_offset
                next_offset = max(next_offset, batch_next)
                if batch_next <= fetch_offset or batch.is_control_batch:
                    continue
                before = len(offsets)
                if not isinstance(batch, DefaultRecordBatch):
                    self._add_legacy(batch, fetch_offset, end)
                    continue
                whole = batch.base_offset >= fetch_offset and batch_next <= end
                if whole and not with_headers:
                    # The common case: no per-record checks.
                    for record in batch:
                        add_offset(record.offset)
                        add_key(record.key)
                        add_value(record.value)
                        add_timestamp(record.timestamp)
                else:
                    for record in batch:
                        offset = record.offset
                        if offset < fetch_offset or offset >= end:
                            continue
                        add_offset(offset)
                        add_key(record.key)
                        add_value(record.value)
                        add_timestamp(record.timestamp)
                        if with_headers:
                            add_headers(_headers_of(record.headers))
                added = len(offsets) - before
                if added:
                    self._type_runs.append((batch.timestamp_type, added))
        except RECORD_PARSE_ERRORS as e:
            raise corrupt_record_error(self.tp, next_offset, e) from e
        if not complete:
            raise message_too_large_error(self.tp, fetch_offset, max_bytes)
        return next_offset

    def _add_legacy(self, batch: Any, fetch_offset: int, end: int) -> None:
        """Add a message set of magic 0 or 1: timestamps and their type may be missing."""
        for record in batch:
            offset = record.offset
            if offset < fetch_offset or offset >= end:
                continue
            timestamp = record.timestamp
            timestamp_type = record.timestamp_type
            self._offsets.append(offset)
            self._keys.append(record.key)
            self._values.append(record.value)
            self._timestamps.append(timestamp if timestamp is not None else -1)
            self._type_runs.append((timestamp_type if timestamp_type is not None else -1, 1))
            if self.include_headers:
                self._headers.append(None)

    def take_batch(self) -> pa.RecordBatch:
        """The gathered records as one Arrow record batch; the columns start empty again.

        As ``KafkaRecordToRowConverter``: ``timestamp`` is the record's milliseconds since
        the epoch (``-1`` when it has none), ``timestampType`` the Java client's id (``-1``
        none, ``0`` CreateTime, ``1`` LogAppendTime), ``headers`` NULL for a record without
        headers.

        Returns:
            A ``pyarrow.RecordBatch`` with ``len(self)`` rows in offset order and schema
            ``arrow_schema(include_headers)``.
        """
        schema = self._schema
        rows = len(self._offsets)
        millis = np.fromiter(self._timestamps, np.int64, rows)
        types = np.repeat(
            np.array([t for t, _ in self._type_runs], np.int32),
            np.array([n for _, n in self._type_runs], np.int64),
        )
        columns = [
            pa.array(self._keys, pa.binary()),
            pa.array(self._values, pa.binary()),
            pa.array(itertools.repeat(self.tp.topic, rows), pa.string(), size=rows),
            pa.array(np.full(rows, self.tp.partition, np.int32)),
            pa.array(self._offsets, pa.int64()),
            pa.array(millis * _US_PER_MS, schema.field("timestamp").type),
            pa.array(types, pa.int32()),
        ]
        if self.include_headers:
            columns.append(pa.array(self._headers, schema.field("headers").type))
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def _headers_of(headers: list[tuple[str, bytes | None]]) -> list[dict[str, Any]] | None:
    return [{"key": k, "value": v} for k, v in headers] if headers else None
