"""Schema Registry decoders: Avro, Protobuf and JSON Schema in the Confluent wire format.

The ``schema-registry`` extra (``pip install 'aiozkconsumer[schema-registry]'``) brings what
they need (aiohttp, fastavro, protobuf, jsonschema)::

    from aiozkconsumer.schema_registry import SchemaRegistryClient, SchemaRegistryDecoder

    async with SchemaRegistryClient("http://registry:8081") as registry:
        decoder = SchemaRegistryDecoder(registry, "avro")
        async for msg in decoder.decoding(stream):
            handle(msg.value)  # a dict

- :mod:`.wire`: the wire format, parsed without I/O.
- :mod:`.client`: the async registry client, schemas cached by id.
- :mod:`.formats`: one payload reader per schema, from fastavro, jsonschema, protobuf.
- :mod:`.decoder`: :class:`SchemaRegistryDecoder`, for streams, batches and ``value_decoder=``.
"""

from __future__ import annotations

from ..errors import RecordDecodeError, SchemaRegistryError, UnknownSchemaError
from .client import RegisteredSchema, SchemaReference, SchemaRegistryClient
from .decoder import DeadLetterCallback, SchemaRegistryDecoder
from .formats import FORMATS
from .wire import read_header, read_message_indexes, write_header

__all__ = [
    "FORMATS",
    "DeadLetterCallback",
    "RecordDecodeError",
    "RegisteredSchema",
    "SchemaReference",
    "SchemaRegistryClient",
    "SchemaRegistryDecoder",
    "SchemaRegistryError",
    "UnknownSchemaError",
    "read_header",
    "read_message_indexes",
    "write_header",
]
