"""Decoders of records written through a Schema Registry, for streams, batches and the CLI.

A :class:`SchemaRegistryDecoder` turns the Confluent wire format into objects. Registry
lookups are I/O and the stream's ``value_decoder`` is a plain function of the bytes, so it
offers two ways in:

- ``async for msg in decoder.decoding(stream)`` (and ``await decoder.decode_batch(batch)``):
  a schema id seen for the first time is fetched on the spot; a record that does not decode
  raises :class:`~aiozkconsumer.errors.RecordDecodeError` naming its topic, partition and
  offset, or goes to the ``on_error`` dead-letter callback. The recommended way.
- ``value_decoder=decoder``: the decoder is a sync callable on bytes that decodes with the
  schemas it already holds; ``await decoder.prefetch(topics=[...])`` loads every version of
  the topics' subjects first. A schema id it does not hold raises ``RecordDecodeError`` (from
  the iterator, without the record's coordinates, which a ``value_decoder`` is not given).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import RecordDecodeError
from ..records import MessageAndMetadata
from .client import RegisteredSchema, SchemaRegistryClient
from .formats import FORMATS, PayloadReader, avro_reader, json_reader, protobuf_reader
from .wire import read_header

__all__ = ["DeadLetterCallback", "SchemaRegistryDecoder"]

DeadLetterCallback = Callable[[MessageAndMetadata, RecordDecodeError], object]
"""Called with the undecoded record (topic, partition, offset, raw bytes) and its error."""

_MAX_REFERENCE_DEPTH = 32


class SchemaRegistryDecoder:
    """Decodes keys or values in the Confluent wire format with schemas from a registry.

    Args:
        registry: the registry client (shared by any number of decoders).
        value_format: ``"avro"``, ``"protobuf"`` or ``"json-schema"``; a record whose schema
            is of another type is a decode error.
        reader_schema: Avro only: the application's schema, to which every writer schema is
            resolved (schema evolution); default: each record as it was written.
        validate: JSON Schema only: check each value against its schema (default True).
        on_error: the dead-letter callback: a record that does not decode is passed to it
            with its error and left out of what :meth:`decoding` / :meth:`decode_batch`
            hand out. Default ``None``: the error is raised. A callback that raises stops
            the reader with its exception.
        field: ``"value"`` (default) or ``"key"``: which part of the record
            :meth:`decode_message` decodes.

    Raises:
        ValueError: an unknown ``value_format`` or ``field``.

    Attributes:
        decoded: how many keys or values decoded so far.
        failed: how many did not (raised or dead-lettered).
    """

    def __init__(
        self,
        registry: SchemaRegistryClient,
        value_format: str,
        *,
        reader_schema: Mapping[str, Any] | None = None,
        validate: bool = True,
        on_error: DeadLetterCallback | None = None,
        field: str = "value",
    ) -> None:
        if value_format not in FORMATS:
            raise ValueError(f"unknown format {value_format!r}; one of {', '.join(FORMATS)}")
        if field not in ("key", "value"):
            raise ValueError(f"field must be 'key' or 'value', not {field!r}")
        self.registry = registry
        self.format = value_format
        self._schema_type = FORMATS[value_format]
        self._reader_schema = reader_schema
        self._validate = validate
        self.on_error = on_error
        self.field = field
        self._readers: dict[int, PayloadReader] = {}
        self.decoded = 0
        self.failed = 0

    def __repr__(self) -> str:
        return (
            f"<SchemaRegistryDecoder {self.format} {self.field} [schemas: {len(self._readers)}, "
            f"decoded: {self.decoded}, failed: {self.failed}]>"
        )

    def __call__(self, data: bytes) -> Any:
        """Decode with the schemas already loaded; never does I/O (for ``value_decoder=``).

        Args:
            data: a key or value in the wire format.

        Returns:
            The decoded object.

        Raises:
            RecordDecodeError: not the wire format, a schema id not loaded (see
                :meth:`prefetch`), or a payload that does not parse.
        """
        try:
            schema_id, start = read_header(data)
            reader = self._readers.get(schema_id)
            if reader is None:
                raise RecordDecodeError(
                    "schema not loaded: prefetch it (await decoder.prefetch(...)) or decode "
                    "through decoder.decoding(stream), which fetches it",
                    schema_id=schema_id,
                )
            return self._read(reader, data, start, schema_id)
        except RecordDecodeError:
            self.failed += 1
            raise

    def _read(self, reader: PayloadReader, data: bytes, start: int, schema_id: int) -> Any:
        try:
            value = reader(data, start)
        except RecordDecodeError:
            raise
        except Exception as e:  # the libraries' parse errors vary: name them, keep the cause out
            raise RecordDecodeError(
                f"{self.format} payload does not parse: {type(e).__name__}: {e}",
                schema_id=schema_id,
            ) from None
        self.decoded += 1
        return value

    async def decode(self, data: bytes) -> Any:
        """Decode ``data``, fetching its schema (and references) on first sight.

        Args:
            data: a key or value in the wire format.

        Returns:
            The decoded object: a ``dict`` for Avro records and JSON objects, the message
            for Protobuf.

        Raises:
            RecordDecodeError: not the wire format, a schema of another type, or a payload
                that does not parse (without coordinates: see :meth:`decode_message`).
            UnknownSchemaError: the registry has no schema with the record's id.
            SchemaRegistryError: the registry could not be asked.
        """
        schema_id, start = read_header(data)
        reader = self._readers.get(schema_id)
        if reader is None:
            reader = await self._load(schema_id)
        return self._read(reader, data, start, schema_id)

    async def decode_message(self, msg: MessageAndMetadata) -> MessageAndMetadata | None:
        """``msg`` with its value (or key, see ``field``) decoded.

        A null value (a tombstone) stays ``None``.

        Args:
            msg: a record as the stream hands it out (raw bytes).

        Returns:
            The record with the decoded field, or ``None`` when it did not decode and went
            to ``on_error``.

        Raises:
            RecordDecodeError: it did not decode and there is no ``on_error``; the error
                names the record's topic, partition and offset (``UnknownSchemaError`` for
                an id the registry does not have).
            SchemaRegistryError: the registry could not be asked (never dead-lettered: the
                record is fine, the registry is not).
        """
        raw = msg.value if self.field == "value" else msg.key
        if raw is None:
            return msg
        try:
            decoded = await self.decode(raw)
        except RecordDecodeError as e:
            self.failed += 1
            located = e.at(msg.topic, msg.partition, msg.offset)
            if self.on_error is None:
                raise located from None
            self.on_error(msg, located)
            return None
        if self.field == "value":
            return msg._replace(value=decoded)
        return msg._replace(key=decoded)

    async def decode_batch(self, batch: Sequence[MessageAndMetadata]) -> list[MessageAndMetadata]:
        """The records of ``batch`` decoded, in order (dead-lettered ones left out).

        Raises:
            RecordDecodeError: as :meth:`decode_message`, for the first record that does not
                decode when there is no ``on_error``.
            SchemaRegistryError: as :meth:`decode_message`.
        """
        out = []
        for msg in batch:
            decoded = await self.decode_message(msg)
            if decoded is not None:
                out.append(decoded)
        return out

    async def decoding(
        self, records: AsyncIterable[MessageAndMetadata]
    ) -> AsyncIterator[MessageAndMetadata]:
        """Iterate over ``records`` (a stream or its iterator) with the field decoded.

        Args:
            records: e.g. a ``KafkaStream``.

        Yields:
            Each record decoded; dead-lettered records are left out.

        Raises:
            RecordDecodeError: as :meth:`decode_message`.
            SchemaRegistryError: as :meth:`decode_message`.
        """
        async for msg in records:
            decoded = await self.decode_message(msg)
            if decoded is not None:
                yield decoded

    async def prefetch(
        self,
        *,
        topics: Iterable[str] = (),
        subjects: Iterable[str] = (),
        schema_ids: Iterable[int] = (),
    ) -> int:
        """Load schemas ahead, for use as a ``value_decoder`` (which cannot fetch).

        Args:
            topics: load every version of ``<topic>-value`` (or ``-key``, see ``field``):
                Confluent's default TopicNameStrategy.
            subjects: load every version of these subjects.
            schema_ids: load these ids.

        Returns:
            How many schemas the decoder holds afterwards.

        Raises:
            UnknownSchemaError: one of ``schema_ids`` is not in the registry.
            SchemaRegistryError: the registry could not be asked.
        """
        names = [*subjects, *(f"{t}-{self.field}" for t in topics)]
        for subject in names:
            for version in await self.registry.get_versions(subject):
                schema = await self.registry.get_version(subject, version)
                if schema.schema_type == self._schema_type:
                    await self._load(schema.schema_id)
        for schema_id in schema_ids:
            await self._load(schema_id)
        return len(self._readers)

    async def _load(self, schema_id: int) -> PayloadReader:
        schema = await self.registry.get_schema(schema_id)
        if schema.schema_type != self._schema_type:
            raise RecordDecodeError(
                f"the schema is {schema.schema_type}, not {self._schema_type} ({self.format})",
                schema_id=schema_id,
            )
        refs = await self._references(schema, 0)
        if self._schema_type == "AVRO":
            reader = avro_reader(schema, refs, self._reader_schema)
        elif self._schema_type == "JSON":
            reader = json_reader(schema, validate=self._validate)
        else:
            reader = protobuf_reader(schema, refs)
        self._readers[schema_id] = reader
        return reader

    async def _references(
        self, schema: RegisteredSchema, depth: int
    ) -> list[tuple[str, RegisteredSchema]]:
        """The schemas ``schema`` refers to, transitively, dependencies first."""
        if depth > _MAX_REFERENCE_DEPTH:
            raise RecordDecodeError("schema references nest too deep", schema_id=schema.schema_id)
        out: list[tuple[str, RegisteredSchema]] = []
        for ref in schema.references:
            target = await self.registry.get_version(ref.subject, ref.version)
            for item in await self._references(target, depth + 1):
                if item[0] not in {name for name, _ in out}:
                    out.append(item)
            if ref.name not in {name for name, _ in out}:
                out.append((ref.name, target))
        return out
