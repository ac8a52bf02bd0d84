"""Records gathered column by column into Arrow, in the row schema of Spark's Kafka source.

The columnar paths — ``KafkaStream.arrow_batches`` and the ``zkkafka`` Spark executors
(:class:`aiozkconsumer.spark.columns.RecordColumns`) — share :class:`ColumnBuilder`: it
appends each record's fields to per-column lists as aiokafka's record batch parser yields
them and turns them into one ``pyarrow.RecordBatch`` in one go, without a
:class:`~aiozkconsumer.records.MessageAndMetadata` (a tuple per record) in between. Topic,
partition and timestamp type are kept as runs (they are per record batch, not per record).

Needs pyarrow and numpy (the ``arrow`` extra, also in ``spark``); importing this module
without them raises an ``ImportError`` that names the extra. It does not need PySpark.
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Iterable, Sequence
from typing import Any

try:
    import numpy as np
    import pyarrow as pa
except ImportError as e:
    raise ImportError(
        "the columnar batch API (arrow_batches, RecordColumns) needs pyarrow and numpy: "
        "pip install 'aiozkconsumer[arrow]'"
    ) from e

from .kafka.records import NativeColumns, Outcome, native_columns, take_columns
from .records import MessageAndMetadata

__all__ = ["ARROW_EXTRA", "ColumnBuilder", "kafka_arrow_schema"]

ARROW_EXTRA = "arrow"
"""The optional extra that brings pyarrow and numpy: ``pip install 'aiozkconsumer[arrow]'``."""

_US_PER_MS = 1000


@functools.cache
def kafka_arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The Arrow schema of Spark's Kafka source (``KafkaRecordToRowConverter``).

    ``key binary, value binary, topic string, partition int32, offset int64, timestamp
    timestamp[us, UTC], timestampType int32`` and, with ``include_headers``, ``headers
    list<element: struct<key: string, value: binary>>``; every field nullable. Equal to
    PySpark's conversion of :data:`aiozkconsumer.spark.KAFKA_SCHEMA`, without needing PySpark.

    Args:
        include_headers: add the ``headers`` column, as the Kafka source's ``includeHeaders``.

    Returns:
        The ``pyarrow.Schema``.
    """
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)


class ColumnBuilder:
    """Records of any partitions, gathered column by column until turned into Arrow.

    Feed it with :meth:`add_native_batches` (the native decoder's batches, the fast path),
    :meth:`add_records` (aiokafka's records of one record batch), :meth:`add_legacy_records`
    (a message set of magic 0 or 1) or :meth:`add_messages` (``MessageAndMetadata`` objects),
    then take a ``pyarrow.RecordBatch`` with :meth:`take_batch`. Rows keep the order they
    were added in. With the native decoder (``kafka/records.py``) every row goes into
    its Arrow buffers, which ``take_batch`` wraps without a copy; without it, into per-column
    lists. Not thread-safe; one per task.

    Args:
        include_headers: gather the ``headers`` column too.
        schema: the Arrow schema to build (default :func:`kafka_arrow_schema`); must be equal
            to it, as PySpark's own conversion is.
    """

    def __init__(self, *, include_headers: bool = False, schema: pa.Schema | None = None) -> None:
        self.include_headers = include_headers
        self._schema = schema if schema is not None else kafka_arrow_schema(include_headers)
        # With the native decoder, rows go straight into Arrow buffers (kafka/_native.c);
        # the per-column lists below stay empty.
        self._native: NativeColumns | None = native_columns(include_headers)
        self._reset()

    def _reset(self) -> None:
        self._offsets: list[int] = []
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._timestamps: list[int] = []
        # (topic, partition, timestampType, rows), one per record batch added (or merged).
        self._runs: list[tuple[str, int, int, int]] = []
        self._headers: list[Sequence[tuple[str, bytes | None]] | None] = []

    def __len__(self) -> int:
        """The number of records gathered since the last :meth:`take_batch`."""
        if self._native is not None:
            return len(self._native)
        return len(self._offsets)

    @property
    def last_offset(self) -> int:
        """The offset of the last record added (``-1`` when none is gathered)."""
        if self._native is not None:
            return int(self._native.last_offset)
        return self._offsets[-1] if self._offsets else -1

    @property
    def native_decoder(self) -> bool:
        """Whether rows go into the native decoder's buffers (``add_native_batches`` works)."""
        return self._native is not None

    def add_native_batches(
        self,
        batches: list[Any],
        index: int,
        topic: str,
        partition: int,
        min_offset: int = 0,
        limit: int = sys.maxsize,
        end: int = sys.maxsize,
    ) -> tuple[int, int, int, int]:
        """Add the records of ``batches[index:]``, batch after batch, in as few calls as can be.

        The decoder reads native batches from ``index`` on, stepping over control batches
        and batches marked aborted (read_committed, ``kafka/transactions.py``), until
        ``limit`` rows are added, a record at ``end`` or beyond comes, the list ends, or an
        item it cannot read comes (a compressed batch, an aiokafka batch, a skipped one: the
        caller handles it and calls again).

        Args:
            batches: a chunk's batches (a list; native batches keep their cursor).
            index: the first batch to read (it may have been read in part).
            topic: their topic.
            partition: their partition.
            min_offset: records at lower offsets are skipped.
            limit: the most rows to add.
            end: stop before a record at this offset or beyond.

        Returns:
            ``(added, index, outcome, consumed)``: the rows added, the batch to read next, an
            :class:`~aiozkconsumer.kafka.records.Outcome` value and the offset after the last
            row added or batch stepped over (``-1`` when none).

        Raises:
            ValueError: a record does not parse and nothing was added in this call
                (``kafka.records.malformed_error`` turns it into the partition's error).
        """
        columns = self._native
        if columns is None:
            raise RuntimeError("add_native_batches needs the native decoder")
        take = take_columns
        total = 0
        consumed = -1
        while True:
            added, index, status, last, timestamp_type = take(
                batches, index, columns, max(min_offset, consumed), limit - total, end
            )
            consumed = max(consumed, last)
            if added:
                total += added
                self._add_run(topic, partition, timestamp_type, added)
            if status != Outcome.TS_TYPE:
                return total, index, status, consumed

    def _add_run(self, topic: str, partition: int, timestamp_type: int, rows: int) -> None:
        runs = self._runs
        if runs:
            last = runs[-1]
            if last[0] == topic and last[1] == partition and last[2] == timestamp_type:
                runs[-1] = (topic, partition, timestamp_type, last[3] + rows)
                return
        runs.append((topic, partition, timestamp_type, rows))

    def add_records(
        self,
        records: Iterable[Any],
        topic: str,
        partition: int,
        timestamp_type: int,
        min_offset: int = 0,
    ) -> tuple[int, int]:
        """Add records of one magic-2 record batch (``DefaultRecordBatch``).

        The hot path: it runs once per record. Records below ``min_offset`` (the start of a
        compressed batch before the fetch position) are taken but left out.

        Args:
            records: aiokafka records (``offset``, ``key``, ``value``, ``timestamp``,
                ``headers``), in offset order; an iterator is consumed as far as it goes
                (bound it with ``itertools.islice`` to take at most so many).
            topic: their topic.
            partition: their partition.
            timestamp_type: the batch's timestamp type (``0`` CreateTime, ``1``
                LogAppendTime).
            min_offset: records at lower offsets are left out.

        Returns:
            ``(added, taken)``: the records added, and the records taken from ``records``
            (added ones and those left out).
        """
        if self._native is not None:
            return self._append_records(
                self._native, records, topic, partition, timestamp_type, min_offset
            )
        offsets, keys, values, timestamps = (
            self._offsets,
            self._keys,
            self._values,
            self._timestamps,
        )
        before = len(offsets)
        add_offset, add_key, add_value, add_timestamp = (
            offsets.append,
            keys.append,
            values.append,
            timestamps.append,
        )
        taken = 0
        if self.include_headers:
            add_headers = self._headers.append
            for record in records:
                taken += 1
                offset = record.offset
                if offset < min_offset:
                    continue
                add_offset(offset)
                add_key(record.key)
                add_value(record.value)
                add_timestamp(record.timestamp)
                add_headers(record.headers or None)
            added = len(offsets) - before
        elif min_offset > 0:
            for record in records:
                taken += 1
                offset = record.offset
                if offset < min_offset:
                    continue
                add_offset(offset)
                add_key(record.key)
                add_value(record.value)
                add_timestamp(record.timestamp)
            added = len(offsets) - before
        else:
            # Nothing to leave out: no per-record checks at all.
            for record in records:
                add_offset(record.offset)
                add_key(record.key)
                add_value(record.value)
                add_timestamp(record.timestamp)
            added = taken = len(offsets) - before
        if added:
            self._add_run(topic, partition, timestamp_type, added)
        return added, taken

    def _append_records(
        self,
        columns: NativeColumns,
        records: Iterable[Any],
        topic: str,
        partition: int,
        timestamp_type: int,
        min_offset: int,
    ) -> tuple[int, int]:
        """``add_records`` into the native buffers (records parsed by aiokafka)."""
        append = columns.append
        headers = self.include_headers
        added = taken = 0
        for record in records:
            taken += 1
            offset = record.offset
            if offset < min_offset:
                continue
            append(
                offset,
                record.timestamp,
                record.key,
                record.value,
                (record.headers or None) if headers else None,
            )
            added += 1
        if added:
            self._add_run(topic, partition, timestamp_type, added)
        return added, taken

    def add_legacy_records(
        self,
        records: Iterable[Any],
        topic: str,
        partition: int,
        min_offset: int = 0,
        end: int = sys.maxsize,
    ) -> tuple[int, int]:
        """Add records of a message set of magic 0 or 1, whose timestamp and type may be missing.

        Args:
            records: aiokafka legacy records, in offset order (an iterator is consumed as far
                as it goes).
            topic: their topic.
            partition: their partition.
            min_offset: records at lower offsets are left out.
            end: records at this offset or beyond are left out.

        Returns:
            ``(added, taken)``, as :meth:`add_records`.
        """
        added = taken = 0
        for record in records:
            taken += 1
            offset = record.offset
            if offset < min_offset or offset >= end:
                continue
            timestamp = record.timestamp
            timestamp_type = record.timestamp_type
            self._add_row(
                offset, timestamp if timestamp is not None else -1, record.key, record.value, None
            )
            self._add_run(topic, partition, timestamp_type if timestamp_type is not None else -1, 1)
            added += 1
        return added, taken

    def add_messages(self, messages: Iterable[MessageAndMetadata]) -> int:
        """Add records already handed out as ``MessageAndMetadata`` (keys and values bytes).

        The slow path, for records that went through interceptors.

        Returns:
            The records added.
        """
        added = 0
        for m in messages:
            self._add_row(m.offset, m.timestamp, m.key, m.value, m.headers or None)
            self._add_run(m.topic, m.partition, m.timestamp_type, 1)
            added += 1
        return added

    def _add_row(
        self,
        offset: int,
        timestamp: int,
        key: Any,
        value: Any,
        headers: Sequence[tuple[str, bytes | None]] | None,
    ) -> None:
        """One record, into the native buffers or the lists (the slow paths)."""
        if self._native is not None:
            for field_value in (key, value):
                if field_value is not None and not isinstance(field_value, bytes | bytearray):
                    raise pa.ArrowTypeError(
                        f"a key or value is {type(field_value).__name__}, not bytes"
                    )
            self._native.append(
                offset, timestamp, key, value, headers if self.include_headers else None
            )
            return
        self._offsets.append(offset)
        self._keys.append(key)
        self._values.append(value)
        self._timestamps.append(timestamp)
        if self.include_headers:
            self._headers.append(headers)

    def take_batch(self) -> pa.RecordBatch:
        """The gathered records as one Arrow record batch; the columns start empty again.

        As ``KafkaRecordToRowConverter``: ``timestamp`` is the record's milliseconds since
        the epoch (``-1`` when it has none), ``timestampType`` the Java client's id (``-1``
        none, ``0`` CreateTime, ``1`` LogAppendTime), ``headers`` NULL for a record without
        headers.

        Returns:
            A ``pyarrow.RecordBatch`` with ``len(self)`` rows in the order added and this
            builder's schema.

        Raises:
            pyarrow.ArrowInvalid, pyarrow.ArrowTypeError: a key or value is not bytes
                (``add_messages`` of decoded records).
        """
        schema = self._schema
        if self._native is not None:
            return self._take_native_batch(self._native, schema)
        rows = len(self._offsets)
        topic_column, partition_column, type_column = _run_columns(self._runs, rows)
        millis = np.fromiter(self._timestamps, np.int64, rows)
        columns = [
            pa.array(self._keys, pa.binary()),
            pa.array(self._values, pa.binary()),
            topic_column,
            partition_column,
            pa.array(self._offsets, pa.int64()),
            pa.array(millis * _US_PER_MS, schema.field("timestamp").type),
            type_column,
        ]
        if self.include_headers:
            columns.append(_headers_column(self._headers, schema.field("headers").type))
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def _take_native_batch(self, buffers: NativeColumns, schema: pa.Schema) -> pa.RecordBatch:
        """``take_batch`` over the native decoder's buffers (no copy of keys or values)."""
        rows, offsets, timestamps, keys, values, headers = buffers.take()
        topic_column, partition_column, type_column = _run_columns(self._runs, rows)
        columns = [
            _var_column(pa.binary(), rows, keys),
            _var_column(pa.binary(), rows, values),
            topic_column,
            partition_column,
            pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(offsets)]),
            pa.Array.from_buffers(
                schema.field("timestamp").type, rows, [None, pa.py_buffer(timestamps)]
            ),
            type_column,
        ]
        if self.include_headers:
            assert headers is not None  # the buffers gather them too
            list_validity, list_offsets, list_nulls, entries, header_keys, header_values = headers
            list_type = schema.field("headers").type
            struct_type = list_type.value_type
            entry_array = pa.StructArray.from_arrays(
                [
                    _var_column(struct_type.field("key").type, entries, header_keys),
                    _var_column(struct_type.field("value").type, entries, header_values),
                ],
                fields=list(struct_type),
            )
            columns.append(
                pa.Array.from_buffers(
                    list_type,
                    rows,
                    [
                        pa.py_buffer(list_validity) if list_validity is not None else None,
                        pa.py_buffer(list_offsets),
                    ],
                    null_count=list_nulls,
                    children=[entry_array],
                )
            )
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def _run_columns(runs: Sequence[tuple[str, int, int, int]], rows: int) -> tuple[pa.Array, ...]:
    """``topic``, ``partition`` and ``timestampType`` from the runs of records added."""
    if len(runs) == 1:  # the common case: one partition's records, one timestamp type
        topic, partition, timestamp_type, _ = runs[0]
        return (
            _repeated_string(topic, rows),
            _int32(np.full(rows, partition, np.int32)),
            _int32(np.full(rows, timestamp_type, np.int32)),
        )
    counts = np.fromiter((n for *_, n in runs), np.int64, len(runs))
    topics = {topic: i for i, topic in enumerate(dict.fromkeys(t for t, *_ in runs))}
    if len(topics) == 1:
        topic_column = _repeated_string(runs[0][0], rows)
    else:
        indices = np.repeat(np.fromiter((topics[t] for t, *_ in runs), np.int32), counts)
        encoded = [t.encode() for t in topics]
        ends = np.fromiter(itertools.accumulate(map(len, encoded), initial=0), np.int32)
        names = pa.Array.from_buffers(
            pa.string(), len(encoded), [None, pa.py_buffer(ends), pa.py_buffer(b"".join(encoded))]
        )
        topic_column = names.take(_int32(indices))
    partitions = np.repeat(np.fromiter((p for _, p, _, _ in runs), np.int32), counts)
    types = np.repeat(np.fromiter((t for _, _, t, _ in runs), np.int32), counts)
    return topic_column, _int32(partitions), _int32(types)


def _int32(values: Any) -> pa.Array:
    """An int32 array over a numpy array's buffer.

    (``pa.array`` of a numpy array would do, but its first call imports pandas when it is
    installed: half a second, on the first batch.)
    """
    values = np.ascontiguousarray(values, np.int32)
    return pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(values)])


def _repeated_string(value: str, rows: int) -> pa.Array:
    """A string array of ``rows`` times ``value``, built from its buffers.

    (``pa.repeat`` would do, but its first call in a process costs about half a second.)
    """
    data = value.encode()
    offsets = np.arange(0, (rows + 1) * len(data), len(data) or 1, dtype=np.int32)[: rows + 1]
    if not data:
        offsets = np.zeros(rows + 1, np.int32)
    return pa.Array.from_buffers(
        pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data * rows)]
    )


def _var_column(type_: pa.DataType, rows: int, parts: tuple[Any, Any, Any, int]) -> pa.Array:
    """A binary or string array over the native decoder's buffers, without a copy."""
    validity, offsets, data, nulls = parts
    return pa.Array.from_buffers(
        type_,
        rows,
        [
            pa.py_buffer(validity) if validity is not None else None,
            pa.py_buffer(offsets),
            pa.py_buffer(data),
        ],
        null_count=nulls,
    )


def _headers_column(
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None], list_type: pa.DataType
) -> pa.Array:
    """``list<struct<key, value>>`` from per-record header lists, built from flat arrays."""
    lengths = [len(h) if h else 0 for h in headers]
    offsets = pa.array(itertools.accumulate(lengths, initial=0), pa.int32())
    flat = [kv for h in headers if h for kv in h]
    struct_type = list_type.value_type
    entries = pa.StructArray.from_arrays(
        [
            pa.array([k for k, _ in flat], struct_type.field("key").type),
            pa.array([v for _, v in flat], struct_type.field("value").type),
        ],
        fields=list(struct_type),
    )
    mask = pa.array([not h for h in headers], pa.bool_())
    return pa.ListArray.from_arrays(offsets, entries, type=list_type, mask=mask)
