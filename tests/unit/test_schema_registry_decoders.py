"""Schema Registry decoders without Kafka: the wire format, the payload readers, the client.

The client's HTTP is checked against a small aiohttp application answering the registry's
``GET /schemas/ids/{id}`` as the Confluent API does (the integration tests use a real
registry); it records the requests, so credentials and caching are visible.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

fastavro = pytest.importorskip("fastavro")
pytest.importorskip("jsonschema")
pytest.importorskip("google.protobuf")
from aiohttp import web  # noqa: E402
from google.protobuf import descriptor_pb2  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from aiozkconsumer.errors import (  # noqa: E402
    InvalidConfigError,
    RecordDecodeError,
    SchemaRegistryError,
    UnknownSchemaError,
)
from aiozkconsumer.records import MessageAndMetadata  # noqa: E402
from aiozkconsumer.schema_registry import (  # noqa: E402
    RegisteredSchema,
    SchemaRegistryClient,
    SchemaRegistryDecoder,
    read_header,
    read_message_indexes,
    write_header,
)
from aiozkconsumer.schema_registry.formats import (  # noqa: E402
    avro_reader,
    json_reader,
    protobuf_reader,
)

V1 = {"type": "record", "name": "Payment", "fields": [{"name": "id", "type": "long"}]}
V2 = {
    "type": "record",
    "name": "Payment",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "currency", "type": "string", "default": "EUR"},
    ],
}


def _avro(schema: dict[str, Any], value: dict[str, Any], schema_id: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return write_header(schema_id) + out.getvalue()


def _zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append((z & 0x7F) | 0x80)
        z >>= 7


# -- wire format -------------------------------------------------------------------------------


def test_header_gives_the_big_endian_schema_id_and_payload_start() -> None:
    assert read_header(b"\x00\x00\x00\x01\x02rest") == (258, 5)
    assert write_header(258) == b"\x00\x00\x00\x01\x02"


@pytest.mark.parametrize(
    ("data", "match"),
    [(b"", "0 bytes, too short"), (b"\x00\x00\x01", "3 bytes"), (b"\x01\x00\x00\x00\x01", "magic")],
)
def test_header_errors_say_what_is_wrong(data: bytes, match: str) -> None:
    with pytest.raises(RecordDecodeError, match=match) as info:
        read_header(data)
    assert info.value.schema_id is None and info.value.topic is None


@given(st.lists(st.integers(min_value=0, max_value=2**40), min_size=1, max_size=6))
def test_message_indexes_read_what_confluent_writes(indexes: list[int]) -> None:
    # Confluent writes [0] as the single byte 0, anything else as count then indexes.
    encoded = b"\x00" if indexes == [0] else _zigzag(len(indexes)) + b"".join(map(_zigzag, indexes))
    data = write_header(7) + encoded + b"payload"
    got, pos = read_message_indexes(data, 5, 7)
    assert got == indexes
    assert data[pos:] == b"payload"


@pytest.mark.parametrize(
    ("encoded", "match"),
    [
        (b"\x04\x02", "truncated"),
        (b"\x01", "invalid message index count -1"),
        (b"\x02\x01", "negative"),
    ],
)
def test_bad_message_indexes_are_decode_errors(encoded: bytes, match: str) -> None:
    with pytest.raises(RecordDecodeError, match=match) as info:
        read_message_indexes(write_header(7) + encoded, 5, 7)
    assert info.value.schema_id == 7


# -- payload readers ---------------------------------------------------------------------------


def test_avro_reader_resolves_an_old_writer_to_a_new_reader_schema() -> None:
    v1 = RegisteredSchema(1, "AVRO", json.dumps(V1))
    v2 = RegisteredSchema(2, "AVRO", json.dumps(V2))
    as_written = avro_reader(v2, [])
    assert as_written(_avro(V2, {"id": 1, "currency": "USD"}, 2), 5) == {"id": 1, "currency": "USD"}
    evolved = avro_reader(v1, [], V2)
    assert evolved(_avro(V1, {"id": 2}, 1), 5) == {"id": 2, "currency": "EUR"}


def test_avro_reader_refuses_bytes_left_over() -> None:
    reader = avro_reader(RegisteredSchema(1, "AVRO", json.dumps(V1)), [])
    with pytest.raises(ValueError, match="1 bytes left"):
        reader(_avro(V1, {"id": 2}, 1) + b"x", 5)


def test_avro_reader_uses_named_types_of_references() -> None:
    money = {
        "type": "record",
        "name": "Money",
        "namespace": "m",
        "fields": [{"name": "cents", "type": "long"}],
    }
    order = {"type": "record", "name": "Order", "fields": [{"name": "total", "type": "m.Money"}]}
    ref = RegisteredSchema(1, "AVRO", json.dumps(money))
    reader = avro_reader(RegisteredSchema(2, "AVRO", json.dumps(order)), [("m.Money", ref)])
    payload = _avro(
        {**order, "fields": [{"name": "total", "type": money}]}, {"total": {"cents": 5}}, 2
    )
    assert reader(payload, 5) == {"total": {"cents": 5}}


def test_json_reader_validates_against_the_schema() -> None:
    schema = RegisteredSchema(
        3, "JSON", json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}})
    )
    assert json_reader(schema)(write_header(3) + b'{"n": 1}', 5) == {"n": 1}
    with pytest.raises(ValueError, match="at n: 'x' is not of type 'integer'"):
        json_reader(schema)(write_header(3) + b'{"n": "x"}', 5)
    assert json_reader(schema, validate=False)(write_header(3) + b'{"n": "x"}', 5) == {"n": "x"}


def _user_file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="user.proto", package="t", syntax="proto3")
    other = f.message_type.add(name="Other")
    other.field.add(name="x", number=1, type=9, label=1)
    user = f.message_type.add(name="User")
    user.field.add(name="name", number=1, type=9, label=1)
    inner = user.nested_type.add(name="Inner")
    inner.field.add(name="n", number=1, type=3, label=1)
    return f


def test_protobuf_reader_picks_the_message_type_by_index_from_a_serialized_descriptor() -> None:
    encoded = base64.b64encode(_user_file().SerializeToString()).decode()
    reader = protobuf_reader(RegisteredSchema(4, "PROTOBUF", encoded), [])
    # User { name: "ab" } (field 1, length-delimited), index [1]; Inner { n: 5 }, index [1, 0]
    user = reader(write_header(4) + b"\x02\x02" + b"\x0a\x02ab", 5)
    assert type(user).DESCRIPTOR.full_name == "t.User" and user.name == "ab"
    inner = reader(write_header(4) + b"\x04\x02\x00" + b"\x08\x05", 5)
    assert type(inner).DESCRIPTOR.full_name == "t.User.Inner" and inner.n == 5
    with pytest.raises(RecordDecodeError, match=r"indexes \[5\] name no message type"):
        reader(write_header(4) + b"\x02\x0a", 5)


def test_protobuf_reader_compiles_proto_text() -> None:
    pytest.importorskip("grpc_tools")
    text = 'syntax = "proto3"; package t; message A { int64 n = 1; }'
    reader = protobuf_reader(RegisteredSchema(5, "PROTOBUF", text), [])
    assert reader(write_header(5) + b"\x00" + b"\x08\x07", 5).n == 7


# -- client and decoder over HTTP ---------------------------------------------------------------


class _Registry:
    """A registry answering ``GET /schemas/ids/{id}`` from a dict, recording requests."""

    def __init__(self, schemas: dict[int, dict[str, Any]], user_info: str | None) -> None:
        self.schemas = schemas
        self.expected = (
            "Basic " + base64.b64encode(user_info.encode()).decode() if user_info else None
        )
        self.requests: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(request.path_qs)
        if self.expected and request.headers.get("Authorization") != self.expected:
            return web.json_response({"error_code": 40101, "message": "Unauthorized"}, status=401)
        body = self.schemas.get(int(request.match_info["id"]))
        if body is None:
            return web.json_response({"error_code": 40403, "message": "not found"}, status=404)
        return web.json_response(body)


@pytest.fixture
async def registry_app() -> AsyncIterator[tuple[_Registry, str]]:
    registry = _Registry(
        {
            1: {"schema": json.dumps(V1)},
            2: {"schema": json.dumps(V2)},
            3: {"schema": "{}", "schemaType": "JSON"},
        },
        "alice:s3cret",
    )
    app = web.Application()
    app.router.add_get("/schemas/ids/{id}", registry.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield registry, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _msg(value: Any, offset: int = 7) -> MessageAndMetadata:
    return MessageAndMetadata("payments", 2, offset, None, value, 0, 0, ())


async def test_credentials_go_in_the_header_never_in_repr_or_errors(
    registry_app: tuple[_Registry, str],
) -> None:
    registry, url = registry_app
    host = url.removeprefix("http://")
    async with SchemaRegistryClient(
        f"http://alice:s3cret@{host}", basic_auth_credentials_source="URL"
    ) as client:
        assert (await client.get_schema(1)).schema_type == "AVRO"
        assert "s3cret" not in repr(client) and "s3cret" not in client.url
    async with SchemaRegistryClient(url, basic_auth_user_info="alice:wrong") as client:
        with pytest.raises(SchemaRegistryError) as info:
            await client.get_schema(1)
        assert info.value.status == 401 and "wrong" not in str(info.value)


def test_client_configuration_errors() -> None:
    with pytest.raises(InvalidConfigError, match="basic.auth.user.info"):
        SchemaRegistryClient("http://r:8081", basic_auth_credentials_source="USER_INFO")
    with pytest.raises(InvalidConfigError, match="basic.auth.credentials.source"):
        SchemaRegistryClient("http://r:8081", basic_auth_credentials_source="SASL_INHERIT")
    with pytest.raises(InvalidConfigError, match="url"):
        SchemaRegistryClient.from_properties({"basic.auth.user.info": "a:b"})
    with pytest.raises(InvalidConfigError, match="not an http"):
        SchemaRegistryClient("ftp://u:pw@r/")


async def test_decoder_fetches_each_schema_once_and_locates_errors(
    registry_app: tuple[_Registry, str],
) -> None:
    registry, url = registry_app
    async with SchemaRegistryClient(url, basic_auth_user_info="alice:s3cret") as client:
        decoder = SchemaRegistryDecoder(client, "avro", reader_schema=V2)
        batch = [_msg(_avro(V1, {"id": i}, 1), i) for i in range(3)]
        decoded = await decoder.decode_batch([*batch, _msg(None, 3)])
        assert [m.value for m in decoded] == [
            {"id": 0, "currency": "EUR"},
            {"id": 1, "currency": "EUR"},
            {"id": 2, "currency": "EUR"},
            None,
        ]
        assert registry.requests == ["/schemas/ids/1?format=serialized"]
        # Sync use (value_decoder=): what is loaded decodes, the rest says to prefetch.
        assert decoder(_avro(V1, {"id": 9}, 1)) == {"id": 9, "currency": "EUR"}
        with pytest.raises(RecordDecodeError, match="schema id 2.*not loaded"):
            decoder(_avro(V2, {"id": 9, "currency": "X"}, 2))

        with pytest.raises(UnknownSchemaError) as unknown:
            await decoder.decode_message(_msg(write_header(99) + b"\x02", 41))
        assert (unknown.value.topic, unknown.value.partition, unknown.value.offset) == (
            "payments",
            2,
            41,
        )
        assert unknown.value.schema_id == 99
        assert "offset 41 of partition [payments,2]" in str(unknown.value)
        with pytest.raises(RecordDecodeError, match=r"offset 42 .*schema id 1.*does not parse"):
            await decoder.decode_message(_msg(write_header(1) + b"\xff", 42))
        with pytest.raises(RecordDecodeError, match="the schema is JSON, not AVRO"):
            await decoder.decode_message(_msg(write_header(3) + b"{}", 43))


async def test_dead_letter_callback_gets_the_record_and_the_located_error(
    registry_app: tuple[_Registry, str],
) -> None:
    _, url = registry_app
    dead: list[tuple[MessageAndMetadata, RecordDecodeError]] = []
    async with SchemaRegistryClient(url, basic_auth_user_info="alice:s3cret") as client:
        decoder = SchemaRegistryDecoder(client, "avro", on_error=lambda m, e: dead.append((m, e)))
        records = [
            _msg(_avro(V1, {"id": 1}, 1), 10),
            _msg(b"not the wire format", 11),
            _msg(write_header(99) + b"\x02", 12),
            _msg(_avro(V1, {"id": 2}, 1), 13),
        ]

        async def source() -> AsyncIterator[MessageAndMetadata]:
            for m in records:
                yield m

        got = [m async for m in decoder.decoding(source())]
    assert [m.offset for m in got] == [10, 13]
    assert [(m.offset, m.value, e.offset, type(e)) for m, e in dead] == [
        (11, b"not the wire format", 11, RecordDecodeError),
        (12, write_header(99) + b"\x02", 12, UnknownSchemaError),
    ]
    assert "decoded: 2, failed: 2" in repr(decoder)


async def test_an_unreachable_registry_is_a_registry_error_not_a_decode_error() -> None:
    async with SchemaRegistryClient("http://127.0.0.1:9", request_timeout_ms=2000) as client:
        decoder = SchemaRegistryDecoder(client, "avro", on_error=lambda m, e: None)
        with pytest.raises(SchemaRegistryError, match="127.0.0.1:9"):
            await decoder.decode_message(_msg(_avro(V1, {"id": 1}, 1)))


# -- what the CLI prints and the Spark type -----------------------------------------------------


def test_decoded_json_formatter_writes_values_as_json() -> None:
    import datetime
    import decimal

    from aiozkconsumer.tools.console import DecodedJsonFormatter

    value = {
        "raw": b"\x00\xff",
        "price": decimal.Decimal("1.50"),
        "at": datetime.date(2026, 1, 2),
        "n": None,
    }
    line = json.loads(DecodedJsonFormatter(value_format="avro").format(_msg(value)))
    assert line["value"] == {"raw": "AP8=", "price": "1.50", "at": "2026-01-02", "n": None}
    assert line["value_encoding"] == "avro"
    tombstone = json.loads(DecodedJsonFormatter(value_format="avro").format(_msg(None)))
    assert (tombstone["value"], tombstone["value_encoding"]) == (None, None)

    encoded = base64.b64encode(_user_file().SerializeToString()).decode()
    reader = protobuf_reader(RegisteredSchema(4, "PROTOBUF", encoded), [])
    user = reader(write_header(4) + b"\x02\x02" + b"\x0a\x02ab", 5)
    line = json.loads(DecodedJsonFormatter(value_format="protobuf").format(_msg(user)))
    assert line["value"] == {"name": "ab"}


def test_avro_struct_type_maps_as_spark_from_avro() -> None:
    types = pytest.importorskip("pyspark.sql.types")
    from aiozkconsumer.spark.schema_registry import avro_struct_type

    schema = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {
                "name": "lines",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Line",
                        "fields": [{"name": "sku", "type": "string"}],
                    },
                },
            },
            {"name": "extra", "type": {"type": "map", "values": "int"}},
            {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["A", "B"]}},
            {"name": "again", "type": ["null", "Line"]},
        ],
    }
    struct = avro_struct_type(schema)
    line = types.StructType([types.StructField("sku", types.StringType(), False)])
    assert struct == types.StructType(
        [
            types.StructField("id", types.LongType(), False),
            types.StructField("note", types.StringType(), True),
            types.StructField("lines", types.ArrayType(line, True), False),
            types.StructField(
                "extra", types.MapType(types.StringType(), types.IntegerType(), True), False
            ),
            types.StructField("state", types.StringType(), False),
            types.StructField("again", line, True),
        ]
    )
    with pytest.raises(ValueError, match="union of several types"):
        avro_struct_type({**schema, "fields": [{"name": "u", "type": ["int", "string"]}]})
