"""The Confluent wire format, parsed without I/O: header, schema id, Protobuf message indexes.

A record written through a Schema Registry serializer is::

    byte 0       magic byte 0
    bytes 1..4   the schema id, a big-endian signed 32-bit integer
    Protobuf     the message indexes: a zigzag varint count, then that many zigzag varints
                 (the path to the message type in the .proto file); the count 0 alone stands
                 for [0], the first message type
    the rest     the payload (Avro binary, JSON text, Protobuf binary)

as Confluent's ``AbstractKafkaSchemaSerDe`` and ``ProtobufSchema.toMessageIndexes`` write it.
Every function here raises :class:`~aiozkconsumer.errors.RecordDecodeError` (without
coordinates: the caller knows them) for bytes that do not fit.
"""

from __future__ import annotations

from ..errors import RecordDecodeError

__all__ = ["MAGIC_BYTE", "read_header", "read_message_indexes", "write_header"]

MAGIC_BYTE = 0
"""The first byte of every record in the Confluent wire format."""

_MAX_INDEXES = 1024


def read_header(data: bytes) -> tuple[int, int]:
    """The schema id of a record and where its payload starts.

    Args:
        data: the record's key or value.

    Returns:
        ``(schema_id, 5)``: the id and the offset of what follows the header.

    Raises:
        RecordDecodeError: ``data`` is shorter than 5 bytes or does not start with the
            magic byte 0.
    """
    if len(data) < 5:
        raise RecordDecodeError(
            f"{len(data)} bytes, too short for the Schema Registry wire format "
            "(magic byte, 4-byte schema id)"
        )
    if data[0] != MAGIC_BYTE:
        raise RecordDecodeError(
            f"unknown magic byte {data[0]:#04x}: not written by a Schema Registry serializer"
        )
    return int.from_bytes(data[1:5], "big", signed=True), 5


def write_header(schema_id: int) -> bytes:
    """The 5-byte header for ``schema_id`` (for tests and tools).

    Args:
        schema_id: the registry's schema id.

    Returns:
        The magic byte and the big-endian id.
    """
    return bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big", signed=True)


def _zigzag_varint(data: bytes, pos: int, schema_id: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise RecordDecodeError("truncated Protobuf message indexes", schema_id=schema_id)
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise RecordDecodeError("overlong varint in the message indexes", schema_id=schema_id)
    return (result >> 1) ^ -(result & 1), pos


def read_message_indexes(data: bytes, pos: int, schema_id: int) -> tuple[list[int], int]:
    """The Protobuf message indexes after the header.

    Args:
        data: the record's key or value.
        pos: where the indexes start (5).
        schema_id: the record's schema id (named in errors).

    Returns:
        ``(indexes, payload_start)``: ``[0]`` for the first message type of the file,
        ``[1, 0]`` for the first nested type of the second, and so on.

    Raises:
        RecordDecodeError: the indexes are truncated, negative or implausibly many.
    """
    count, pos = _zigzag_varint(data, pos, schema_id)
    if count == 0:
        return [0], pos
    if count < 0 or count > _MAX_INDEXES:
        raise RecordDecodeError(f"invalid message index count {count}", schema_id=schema_id)
    indexes = []
    for _ in range(count):
        index, pos = _zigzag_varint(data, pos, schema_id)
        if index < 0:
            raise RecordDecodeError(f"negative message index {index}", schema_id=schema_id)
        indexes.append(index)
    return indexes, pos
