"""Avro values written through a Schema Registry, as a Spark struct column.

The registry is read on the driver, once per schema id, before the query runs
(:func:`avro_schemas`); the executors get the writer schemas with the column function and
never call the registry. Each value is decoded by fastavro into the reader schema (by default
the newest writer schema, so records of older versions read with the fields added since at
their defaults) and becomes a struct of :func:`avro_struct_type`::

    async with SchemaRegistryClient("http://registry:8081") as registry:
        schemas = await avro_schemas(registry, topics=["payments"])
    df = spark.read.format("zkkafka")...load()
    payments = df.select(from_confluent_avro(schemas).alias("payment")).select("payment.*")

A value whose schema id is not among ``schemas`` or whose payload does not parse fails the
task with the record's topic, partition, offset and schema id (Spark's ``PythonException``
carries the :class:`~aiozkconsumer.errors.RecordDecodeError` message); a null value is a
null struct. Spark's own ``from_avro`` needs the ``spark-avro`` jar and knows nothing of the
wire format's header; this needs fastavro only (the ``schema-registry`` extra).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import RecordDecodeError
from ..schema_registry.client import RegisteredSchema, SchemaRegistryClient

__all__ = ["avro_schemas", "avro_struct_type", "from_confluent_avro"]

_PRIMITIVES: dict[str, T.DataType] = {
    "null": T.NullType(),
    "boolean": T.BooleanType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "bytes": T.BinaryType(),
    "string": T.StringType(),
}


async def avro_schemas(
    registry: SchemaRegistryClient, *, topics: Iterable[str] = (), subjects: Iterable[str] = ()
) -> dict[int, str]:
    """The Avro schemas of every version of the topics' value subjects, by schema id.

    Args:
        registry: the registry client (on the driver).
        topics: read ``<topic>-value`` (Confluent's TopicNameStrategy).
        subjects: read these subjects as well.

    Returns:
        ``{schema_id: schema JSON}``, with the schemas of references folded in (named
        types defined inline), ready for :func:`from_confluent_avro`.

    Raises:
        SchemaRegistryError: the registry could not be asked.
        RecordDecodeError: a subject holds a schema that is not Avro.
    """
    out: dict[int, str] = {}
    for subject in [*subjects, *(f"{t}-value" for t in topics)]:
        for version in await registry.get_versions(subject):
            schema = await registry.get_version(subject, version)
            if schema.schema_type != "AVRO":
                raise RecordDecodeError(
                    f"subject {subject!r} version {version} is {schema.schema_type}, not AVRO",
                    schema_id=schema.schema_id,
                )
            out[schema.schema_id] = await _inline(registry, schema)
    return out


async def _inline(registry: SchemaRegistryClient, schema: RegisteredSchema) -> str:
    """``schema`` as one JSON text: referenced named types defined where first used."""
    if not schema.references:
        return schema.schema
    named: dict[str, Any] = {}
    for ref in schema.references:
        target = await registry.get_version(ref.subject, ref.version)
        named[ref.name] = json.loads(await _inline(registry, target))
    seen: set[str] = set()

    def expand(node: Any) -> Any:
        if isinstance(node, str) and node in named and node not in seen:
            seen.add(node)
            return expand(named[node])
        if isinstance(node, list):
            return [expand(n) for n in node]
        if isinstance(node, dict):
            return {
                k: expand(v) if k in ("type", "items", "values", "fields") else v
                for k, v in node.items()
            }
        return node

    return json.dumps(expand(json.loads(schema.schema)))


def avro_struct_type(schema: Mapping[str, Any] | str) -> T.StructType:
    """The Spark type of an Avro record schema, as Spark's ``from_avro`` maps it.

    Records become structs, arrays arrays, maps maps of string keys, enums strings, ``fixed``
    and ``bytes`` binary, a union with ``null`` its other branch (nullable); logical types
    keep their underlying type.

    Args:
        schema: an Avro record schema (parsed, or its JSON).

    Returns:
        The struct type.

    Raises:
        ValueError: ``schema`` is not a record, or uses a union of several non-null types.
    """
    doc = json.loads(schema) if isinstance(schema, str) else dict(schema)
    named: dict[str, T.DataType] = {}
    result = _spark_type(doc, named, doc.get("namespace", ""))
    if not isinstance(result, T.StructType):
        raise ValueError("the Avro schema is not a record")
    return result


def _spark_type(node: Any, named: dict[str, T.DataType], namespace: str) -> T.DataType:
    if isinstance(node, str):
        if node in _PRIMITIVES:
            return _PRIMITIVES[node]
        full = node if "." in node or not namespace else f"{namespace}.{node}"
        if full in named:
            return named[full]
        if node in named:
            return named[node]
        raise ValueError(f"unknown Avro type {node!r}")
    if isinstance(node, list):
        branches = [b for b in node if b != "null"]
        if len(branches) != 1:
            raise ValueError(f"a union of several types has no Spark type: {node}")
        return _spark_type(branches[0], named, namespace)
    kind = node["type"]
    ns = node.get("namespace", namespace)
    if kind == "record":
        full = node["name"] if "." in node["name"] or not ns else f"{ns}.{node['name']}"
        struct = T.StructType([])
        named[full] = named[node["name"]] = struct
        for f in node["fields"]:
            t = f["type"]
            nullable = isinstance(t, list) and "null" in t
            struct.add(f["name"], _spark_type(t, named, ns), nullable)
        return struct
    if kind == "array":
        return T.ArrayType(_spark_type(node["items"], named, ns), True)
    if kind == "map":
        return T.MapType(T.StringType(), _spark_type(node["values"], named, ns), True)
    if kind == "enum":
        named[node["name"]] = T.StringType()
        return T.StringType()
    if kind == "fixed":
        named[node["name"]] = T.BinaryType()
        return T.BinaryType()
    return _spark_type(kind, named, ns)


def from_confluent_avro(
    schemas: Mapping[int, str],
    reader_schema: Mapping[str, Any] | str | None = None,
    *,
    value: str = "value",
    topic: str = "topic",
    partition: str = "partition",
    offset: str = "offset",
) -> Column:
    """A column of the decoded values of a DataFrame with the Kafka source's schema.

    Args:
        schemas: the writer schemas by id, from :func:`avro_schemas` (on the driver).
        reader_schema: the record schema to decode into; default: the schema with the
            highest id in ``schemas``.
        value: the column of the wire-format bytes.
        topic: the topic column (named in errors).
        partition: the partition column (named in errors).
        offset: the offset column (named in errors).

    Returns:
        A struct column of :func:`avro_struct_type` of the reader schema.

    Raises:
        ValueError: ``schemas`` is empty, or the reader schema has no Spark type.
    """
    if not schemas:
        raise ValueError("no writer schemas: fetch them with avro_schemas() first")
    reader_text = (
        schemas[max(schemas)]
        if reader_schema is None
        else reader_schema
        if isinstance(reader_schema, str)
        else json.dumps(reader_schema)
    )
    struct = avro_struct_type(reader_text)
    decode = _Decoder(dict(schemas), reader_text)
    fn = F.udf(decode, struct, useArrow=False)
    return fn(F.col(value), F.col(topic), F.col(partition), F.col(offset))


class _Decoder:
    """The executor side: parses the schemas once per Python worker, decodes each value."""

    def __init__(self, schemas: dict[int, str], reader: str) -> None:
        self._schemas = schemas
        self._reader = reader
        self._parsed: dict[int, Any] | None = None
        self._reader_parsed: Any = None

    def __call__(self, data: bytes | None, topic: str, partition: int, offset: int) -> Any:
        if data is None:
            return None
        import io

        import fastavro

        from ..schema_registry.wire import read_header

        if self._parsed is None:
            self._parsed = {
                i: fastavro.parse_schema(json.loads(s)) for i, s in self._schemas.items()
            }
            self._reader_parsed = fastavro.parse_schema(json.loads(self._reader))
        try:
            schema_id, start = read_header(bytes(data))
            writer = self._parsed.get(schema_id)
            if writer is None:
                raise RecordDecodeError(
                    "schema id not among those fetched on the driver (avro_schemas)",
                    schema_id=schema_id,
                )
            stream = io.BytesIO(data)
            stream.seek(start)
            try:
                return fastavro.schemaless_reader(stream, writer, self._reader_parsed)
            except Exception as e:  # fastavro's errors vary; named, not chained
                raise RecordDecodeError(
                    f"avro payload does not parse: {type(e).__name__}: {e}", schema_id=schema_id
                ) from None
        except RecordDecodeError as e:
            raise e.at(topic, partition, offset) from None
