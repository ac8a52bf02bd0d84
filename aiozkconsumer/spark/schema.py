"""The row schema of Spark's Kafka source, and records turned into Arrow in that schema.

Both the ``zkkafka`` streaming source and the push-mode bridge hand Spark rows with exactly
the columns of ``spark-sql-kafka-0-10`` (``KafkaRecordToRowConverter``): ``key binary,
value binary, topic string, partition int, offset long, timestamp timestamp,
timestampType int``, plus ``headers array<struct<key:string,value:binary>>`` when headers
are asked for. Records become ``pyarrow.RecordBatch`` objects column by column; Spark takes
those without converting row by row.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..records import MessageAndMetadata

__all__ = [
    "HEADERS_TYPE",
    "KAFKA_SCHEMA",
    "KAFKA_SCHEMA_WITH_HEADERS",
    "arrow_schema",
    "kafka_schema",
    "records_to_arrow",
]

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
"""``array<struct<key:string,value:binary>>``: the ``headers`` column (``includeHeaders``)."""

KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
"""The seven columns of Spark's Kafka source, all nullable, in its order."""

KAFKA_SCHEMA_WITH_HEADERS = StructType([*KAFKA_SCHEMA.fields, StructField("headers", HEADERS_TYPE)])
"""The Kafka source's schema with ``includeHeaders=true``."""

_US_PER_MS = 1000


def kafka_schema(include_headers: bool = False) -> StructType:
    """The row schema of Spark's Kafka source.

    Args:
        include_headers: add the ``headers`` column, as the Kafka source's ``includeHeaders``.

    Returns:
        ``KAFKA_SCHEMA`` or ``KAFKA_SCHEMA_WITH_HEADERS``.
    """
    return KAFKA_SCHEMA_WITH_HEADERS if include_headers else KAFKA_SCHEMA


@functools.cache
def arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The Arrow schema Spark expects for :func:`kafka_schema` (timestamps in UTC).

    Taken from PySpark's own conversion, which a Python data source's record batches must
    equal exactly (names, types and the list item's field name).

    Args:
        include_headers: with the ``headers`` column.

    Returns:
        The ``pyarrow.Schema``.
    """
    return to_arrow_schema(kafka_schema(include_headers), timezone="UTC")


def records_to_arrow(
    records: Sequence[MessageAndMetadata], *, include_headers: bool = False
) -> pa.RecordBatch:
    """Turn records into one Arrow record batch in the Kafka source's schema.

    As ``KafkaRecordToRowConverter``: the timestamp is the record's milliseconds since the
    epoch (``-1`` when it has none, which reads as 1969-12-31T23:59:59.999Z, as Spark shows
    it), ``timestampType`` the Java client's id (``-1`` none, ``0`` CreateTime, ``1``
    LogAppendTime), and ``headers`` is NULL for a record without headers.

    Args:
        records: the records, in any order.
        include_headers: add the ``headers`` column.

    Returns:
        A ``pyarrow.RecordBatch`` with ``len(records)`` rows and schema
        ``arrow_schema(include_headers)``.
    """
    schema = arrow_schema(include_headers)
    if not records:
        return pa.RecordBatch.from_pylist([], schema=schema)
    topics, partitions, offsets, keys, values, timestamps, types, headers = zip(
        *records, strict=True
    )
    millis = pa.array(timestamps, pa.int64())
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array(topics, pa.string()),
        pa.array(partitions, pa.int32()),
        pa.array(offsets, pa.int64()),
        pc.multiply(millis, _US_PER_MS).cast(schema.field("timestamp").type),
        pa.array(types, pa.int32()),
    ]
    if include_headers:
        columns.append(
            pa.array(
                [[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
                schema.field("headers").type,
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)
