"""Payload readers per schema type, built once per schema id: Avro, JSON Schema, Protobuf.

Each reader is a plain function ``(payload: bytes, start: int) -> object`` made from a
registered schema (and the schemas it references); maintained libraries do the decoding:

- Avro: ``fastavro.schemaless_reader`` with the registry's schema as the writer schema and,
  optionally, the application's reader schema (Avro schema resolution: fields added with a
  default are filled in, removed ones dropped). Records decode to ``dict``.
- JSON Schema: ``json.loads``; with ``validate`` (the default), the value is checked against
  the schema by ``jsonschema`` (the draft the schema names).
- Protobuf: a ``google.protobuf`` message class from the schema's file descriptor. Registries
  that store the serialized descriptor (Confluent's ``format=serialized`` answer, Apicurio
  for schemas registered that way) need nothing more; .proto text is compiled by the
  ``protoc`` that ``grpcio-tools`` bundles (installed separately). Messages decode to the
  message object (``google.protobuf.json_format.MessageToDict`` turns one into a ``dict``).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import RecordDecodeError
from .client import RegisteredSchema
from .wire import read_message_indexes

__all__ = ["FORMATS", "PayloadReader", "avro_reader", "json_reader", "protobuf_reader"]

PayloadReader = Callable[[bytes, int], Any]
"""Decodes ``data[start:]`` (the payload after the header) into an object."""

FORMATS = {"avro": "AVRO", "json-schema": "JSON", "protobuf": "PROTOBUF"}
"""The format names the decoders accept, and the registry's ``schemaType`` of each."""


def avro_reader(
    schema: RegisteredSchema,
    references: Sequence[tuple[str, RegisteredSchema]],
    reader_schema: Mapping[str, Any] | None = None,
) -> PayloadReader:
    """A reader of Avro binary payloads written with ``schema``.

    Args:
        schema: the writer schema, from the registry.
        references: ``(name, schema)`` of the schemas its named types come from,
            dependencies first.
        reader_schema: the application's schema to resolve to (optional).

    Returns:
        The reader.

    Raises:
        RecordDecodeError: the registered schema (or ``reader_schema``) is not valid Avro.
    """
    import fastavro

    named: dict[str, Any] = {}
    try:
        for _, ref in references:
            fastavro.parse_schema(json.loads(ref.schema), named_schemas=named)
        writer = fastavro.parse_schema(json.loads(schema.schema), named_schemas=named)
        reader = fastavro.parse_schema(dict(reader_schema)) if reader_schema is not None else None
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as e:
        raise RecordDecodeError(f"invalid Avro schema: {e}", schema_id=schema.schema_id) from None
    read = fastavro.schemaless_reader

    def decode(data: bytes, start: int) -> Any:
        stream = io.BytesIO(data)
        stream.seek(start)
        value = read(stream, writer, reader)
        if stream.tell() != len(data):
            raise ValueError(f"{len(data) - stream.tell()} bytes left after the Avro datum")
        return value

    return decode


def json_reader(schema: RegisteredSchema, *, validate: bool = True) -> PayloadReader:
    """A reader of JSON payloads, checked against ``schema`` when ``validate``.

    Args:
        schema: the JSON Schema, from the registry.
        validate: whether to validate each value (needs ``jsonschema``).

    Returns:
        The reader; a value that fails validation raises ``ValueError`` from it.

    Raises:
        RecordDecodeError: the registered schema is not a valid JSON Schema.
    """
    loads = json.loads
    if not validate:
        return lambda data, start: loads(data[start:])
    import jsonschema

    try:
        document = json.loads(schema.schema)
        cls = jsonschema.validators.validator_for(document)
        cls.check_schema(document)
    except (ValueError, jsonschema.SchemaError) as e:
        raise RecordDecodeError(f"invalid JSON Schema: {e}", schema_id=schema.schema_id) from None
    validator = cls(document)

    def decode(data: bytes, start: int) -> Any:
        value = loads(data[start:])
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is not None:
            path = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise ValueError(f"fails the JSON Schema at {path}: {error.message}")
        return value

    return decode


def protobuf_reader(
    schema: RegisteredSchema, references: Sequence[tuple[str, RegisteredSchema]]
) -> PayloadReader:
    """A reader of Protobuf payloads (message indexes, then the message) for ``schema``.

    Args:
        schema: the schema, from the registry: a base64 serialized ``FileDescriptorProto``
            or .proto text.
        references: ``(import path, schema)`` of the imported files, dependencies first.

    Returns:
        The reader; it returns the decoded message object.

    Raises:
        RecordDecodeError: the schema does not parse, or is .proto text and
            ``grpcio-tools`` is not installed.
    """
    from google.protobuf import descriptor_pool, message_factory

    texts = {name: ref.schema for name, ref in references}
    pool = descriptor_pool.DescriptorPool()
    try:
        files = [_file_descriptor(ref, name, texts) for name, ref in references]
        files.append(_file_descriptor(schema, "schema.proto", texts))
        for proto in files:
            pool.Add(proto)
        main = pool.FindFileByName(files[-1].name)
        top_level = [m.name for m in files[-1].message_type]  # in declaration order
    except (TypeError, KeyError, ValueError) as e:
        raise RecordDecodeError(
            f"invalid Protobuf schema: {e}", schema_id=schema.schema_id
        ) from None
    classes: dict[tuple[int, ...], Any] = {}
    schema_id = schema.schema_id

    def message_class(indexes: list[int]) -> Any:
        key = tuple(indexes)
        cls = classes.get(key)
        if cls is None:
            try:
                desc = main.message_types_by_name[top_level[indexes[0]]]
                for i in indexes[1:]:
                    desc = desc.nested_types[i]
            except IndexError:
                raise RecordDecodeError(
                    f"message indexes {indexes} name no message type of the schema",
                    schema_id=schema_id,
                ) from None
            cls = classes[key] = message_factory.GetMessageClass(desc)
        return cls

    def decode(data: bytes, start: int) -> Any:
        indexes, pos = read_message_indexes(data, start, schema_id)
        return message_class(indexes).FromString(data[pos:])

    return decode


def _file_descriptor(schema: RegisteredSchema, name: str, imports: Mapping[str, str]) -> Any:
    """The ``FileDescriptorProto`` of a registered Protobuf schema."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    text = schema.schema.strip()
    proto = descriptor_pb2.FileDescriptorProto()
    if "{" not in text:  # the serialized form: base64, no braces
        try:
            proto.ParseFromString(base64.b64decode(text, validate=True))
        except (binascii.Error, DecodeError) as e:
            raise ValueError(f"neither .proto text nor a serialized descriptor: {e}") from None
        return proto
    return _compile(schema, name, imports)


def _compile(schema: RegisteredSchema, name: str, imports: Mapping[str, str]) -> Any:
    """Compile .proto text with grpcio-tools' bundled protoc (no protoc binary needed)."""
    from google.protobuf import descriptor_pb2

    try:
        from grpc_tools import protoc
    except ImportError:
        raise RecordDecodeError(
            "the registry returned .proto text; compiling it needs grpcio-tools "
            "(pip install grpcio-tools)",
            schema_id=schema.schema_id,
        ) from None
    with tempfile.TemporaryDirectory(prefix="aiozk-proto-") as tmp:
        root = Path(tmp)
        for path, text in {**imports, name: schema.schema}.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text, encoding="utf-8")
        out = root / "out.pb"
        code = protoc.main(["protoc", f"-I{root}", f"--descriptor_set_out={out}", str(root / name)])
        if code != 0 or not out.exists():
            raise ValueError(f"protoc could not compile the .proto text (exit code {code})")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return files.file[-1]
