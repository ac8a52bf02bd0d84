"""Schema Registry decoders against a real registry and a real cluster.

The registry is Apicurio Registry (its Confluent-compatible API) from the test kit, one per
module; records are written by confluent-kafka's ``SerializingProducer`` with its
``AvroSerializer`` / ``ProtobufSerializer`` / ``JSONSerializer`` (which register the schemas),
and read through ``async for``, ``batches()``, ``value_decoder=`` and the CLI.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastavro")
pytest.importorskip("confluent_kafka.schema_registry.avro")
pytest.importorskip("grpc_tools")
from _spark_session import spark_session  # noqa: F401
from _support import config_for
from confluent_kafka import SerializingProducer
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from google.protobuf import descriptor_pool, message_factory
from pyspark.sql import SparkSession

from aiozkconsumer import ZookeeperConsumerConnector
from aiozkconsumer.errors import RecordDecodeError, UnknownSchemaError
from aiozkconsumer.records import MessageAndMetadata
from aiozkconsumer.schema_registry import (
    SchemaRegistryClient,
    SchemaRegistryDecoder,
    write_header,
)
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.schema_registry import LocalSchemaRegistry
from aiozkconsumer.zk import layout

pytestmark = pytest.mark.integration

CLI = str(Path(sys.executable).with_name("aiozkconsumer"))

V1 = {
    "type": "record",
    "name": "Payment",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
}
V2 = {
    "type": "record",
    "name": "Payment",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": "string", "default": "EUR"},
    ],
}
PROTO = """syntax = "proto3";
package shop;
message Ignored { string x = 1; }
message Order { string name = 1; int64 id = 2; repeated string tags = 3; }
"""


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSchemaRegistry]:
    with LocalSchemaRegistry(log_dir=tmp_path_factory.mktemp("registry")) as reg:
        yield reg


@pytest.fixture(scope="module")
def confluent(registry: LocalSchemaRegistry) -> Iterator[ConfluentRegistry]:
    """confluent-kafka's registry client, for its serializers."""
    with ConfluentRegistry({"url": registry.url}) as client:
        yield client


def _produce(
    cluster: LocalCluster, topic: str, serializer: Any, values: list[Any], partition: int = 0
) -> None:
    """Write ``values`` through a registry-aware confluent-kafka producer (blocking)."""
    producer = SerializingProducer(
        {"bootstrap.servers": cluster.bootstrap_servers, "value.serializer": serializer}
    )
    try:
        for v in values:
            producer.produce(topic, value=v, partition=partition)
        assert producer.flush(30) == 0
    finally:
        producer.close()


async def _read(
    cluster: LocalCluster,
    group: str,
    topic: str,
    count: int,
    consume: Callable[[Any], Any],
) -> list[MessageAndMetadata]:
    """``count`` records of ``topic``'s one stream through ``consume(stream)``."""
    async with ZookeeperConsumerConnector(config_for(cluster, group)) as connector:
        (stream,) = (await connector.create_message_streams({topic: 1}))[topic]
        got: list[MessageAndMetadata] = []
        async with asyncio.timeout(60):
            async for msg in consume(stream):
                got.append(msg)
                if len(got) == count:
                    break
        return got


async def test_avro_v1_and_v2_records_read_as_the_reader_schema_through_async_for_and_batches(
    zk_kafka_cluster: LocalCluster,
    registry: LocalSchemaRegistry,
    unique_topic: str,
    confluent: ConfluentRegistry,
) -> None:
    topic = unique_topic
    await zk_kafka_cluster.create_topic(topic, 1)
    v1 = [{"id": i, "amount": i / 2} for i in range(3)]
    v2 = [{"id": 10 + i, "amount": 1.5, "currency": "USD"} for i in range(3)]
    await asyncio.to_thread(
        _produce, zk_kafka_cluster, topic, AvroSerializer(confluent, json.dumps(V1)), v1
    )
    await asyncio.to_thread(
        _produce, zk_kafka_cluster, topic, AvroSerializer(confluent, json.dumps(V2)), v2
    )
    expected = [{**v, "currency": "EUR"} for v in v1] + v2

    async with SchemaRegistryClient(registry.url) as client:
        decoder = SchemaRegistryDecoder(client, "avro", reader_schema=V2)
        got = await _read(zk_kafka_cluster, f"{topic}-iter", topic, 6, decoder.decoding)
        assert [m.value for m in got] == expected
        assert [m.offset for m in got] == list(range(6))

        # batches(): the same records, decoded a batch at a time.
        async with ZookeeperConsumerConnector(config_for(zk_kafka_cluster, f"{topic}-b")) as c:
            (stream,) = (await c.create_message_streams({topic: 1}))[topic]
            values: list[Any] = []
            async with asyncio.timeout(60):
                async for batch in stream.batches():
                    values += [m.value for m in await decoder.decode_batch(batch)]
                    if len(values) == 6:
                        break
        assert values == expected

        # value_decoder=: sync, with the topic's subject versions prefetched (as written).
        sync = SchemaRegistryDecoder(client, "avro")
        assert await sync.prefetch(topics=[topic]) == 2
        async with ZookeeperConsumerConnector(config_for(zk_kafka_cluster, f"{topic}-s")) as c:
            (stream,) = (await c.create_message_streams({topic: 1}, value_decoder=sync))[topic]
            as_written: list[Any] = []
            async with asyncio.timeout(60):
                async for msg in stream:
                    as_written.append(msg.value)
                    if len(as_written) == 6:
                        break
        assert as_written == v1 + v2


def _proto_class() -> Any:
    """``shop.Order`` compiled from PROTO (what an application's generated class is)."""
    from aiozkconsumer.schema_registry.client import RegisteredSchema
    from aiozkconsumer.schema_registry.formats import _compile

    pool = descriptor_pool.DescriptorPool()
    pool.Add(_compile(RegisteredSchema(0, "PROTOBUF", PROTO), "order.proto", {}))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def _register(registry: LocalSchemaRegistry, subject: str, body: dict[str, Any]) -> int:
    request = urllib.request.Request(
        f"{registry.url}/subjects/{subject}/versions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(json.loads(response.read())["id"])


async def test_protobuf_from_a_serialized_descriptor_and_from_proto_text(
    zk_kafka_cluster: LocalCluster,
    registry: LocalSchemaRegistry,
    unique_topic: str,
    confluent: ConfluentRegistry,
) -> None:
    topic = unique_topic
    await zk_kafka_cluster.create_topic(topic, 1)
    order = _proto_class()
    # confluent-kafka registers the serialized descriptor itself ...
    described = ProtobufSerializer(order, confluent, {"use.deprecated.format": False})
    await asyncio.to_thread(
        _produce, zk_kafka_cluster, topic, described, [order(name="a", id=1, tags=["x"])]
    )
    # ... and a schema registered as .proto text (what most registries hold) is compiled.
    # confluent-kafka reads only serialized descriptors back (Confluent's format=serialized,
    # which Apicurio ignores), so this record is framed here, with the message indexes
    # confluent-kafka wrote above ([1]: the second message type).
    text_id = _register(registry, f"{topic}-text", {"schema": PROTO, "schemaType": "PROTOBUF"})
    framed = write_header(text_id) + b"\x02\x02" + order(name="b", id=2).SerializeToString()
    await zk_kafka_cluster.produce(topic, [(None, framed)], partition=0)

    async with SchemaRegistryClient(registry.url) as client:
        decoder = SchemaRegistryDecoder(client, "protobuf")
        got = await _read(zk_kafka_cluster, topic, topic, 2, decoder.decoding)
        assert "{" in client.cached(text_id).schema  # decoded from the .proto text
    assert [(type(m.value).DESCRIPTOR.full_name, m.value.name, m.value.id) for m in got] == [
        ("shop.Order", "a", 1),
        ("shop.Order", "b", 2),
    ]
    assert list(got[0].value.tags) == ["x"]


async def test_unknown_id_corrupt_payload_and_invalid_json_raise_or_reach_the_dead_letter(
    zk_kafka_cluster: LocalCluster,
    registry: LocalSchemaRegistry,
    unique_topic: str,
    confluent: ConfluentRegistry,
) -> None:
    topic = unique_topic
    await zk_kafka_cluster.create_topic(topic, 1)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    serializer = JSONSerializer(json.dumps(schema), confluent)
    await asyncio.to_thread(_produce, zk_kafka_cluster, topic, serializer, [{"n": 1}])
    schema_id = confluent.get_latest_version(f"{topic}-value").schema_id
    await zk_kafka_cluster.produce(
        topic,
        [
            (None, write_header(987654) + b'{"n": 2}'),  # offset 1: no such schema id
            (None, b"\x07garbage"),  # offset 2: not the wire format
            (None, write_header(schema_id) + b'{"n": "three"}'),  # offset 3: fails the schema
            (None, write_header(schema_id) + b'{"n": 4'),  # offset 4: not JSON
        ],
        partition=0,
    )
    await asyncio.to_thread(_produce, zk_kafka_cluster, topic, serializer, [{"n": 5}])

    async with SchemaRegistryClient(registry.url) as client:
        dead: list[tuple[MessageAndMetadata, RecordDecodeError]] = []
        routed = SchemaRegistryDecoder(
            client, "json-schema", on_error=lambda m, e: dead.append((m, e))
        )
        got = await _read(zk_kafka_cluster, f"{topic}-dl", topic, 2, routed.decoding)
        assert [(m.offset, m.value) for m in got] == [(0, {"n": 1}), (5, {"n": 5})]
        assert [(m.offset, e.topic, e.partition, e.offset, type(e)) for m, e in dead] == [
            (1, topic, 0, 1, UnknownSchemaError),
            (2, topic, 0, 2, RecordDecodeError),
            (3, topic, 0, 3, RecordDecodeError),
            (4, topic, 0, 4, RecordDecodeError),
        ]
        assert "'three' is not of type 'integer'" in str(dead[2][1])
        assert dead[1][0].value == b"\x07garbage"

        raising = SchemaRegistryDecoder(client, "json-schema")
        with pytest.raises(UnknownSchemaError) as info:
            await _read(zk_kafka_cluster, f"{topic}-raise", topic, 6, raising.decoding)
        assert f"offset 1 of partition [{topic},0] (schema id 987654)" in str(info.value)


async def test_cli_prints_decoded_values_as_json_and_stops_at_one_that_does_not_decode(
    zk_kafka_cluster: LocalCluster,
    registry: LocalSchemaRegistry,
    unique_topic: str,
    confluent: ConfluentRegistry,
    zk_client: Any,
) -> None:
    topic = unique_topic
    await zk_kafka_cluster.create_topic(topic, 1)
    schema = {**V1, "fields": [*V1["fields"], {"name": "raw", "type": "bytes"}]}
    serializer = AvroSerializer(confluent, json.dumps(schema))
    good = [{"id": 1, "amount": 2.5, "raw": b"\x00\xff"}]
    await asyncio.to_thread(_produce, zk_kafka_cluster, topic, serializer, good)
    # offset 1: a schema id the registry does not have; offset 2: fine again
    await zk_kafka_cluster.produce(topic, [(None, b"\x00\x00\x00\x27\x10x")], partition=0)
    await asyncio.to_thread(_produce, zk_kafka_cluster, topic, serializer, good)
    group = f"{topic}-cli"
    base = [CLI, "consume", "--zookeeper", zk_kafka_cluster.zookeeper_connect, "--topic", topic]
    registry_args = ["--value-format", "avro", "--schema-registry", registry.url]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args, *registry_args], capture_output=True, text=True, timeout=120
        )

    done = await asyncio.to_thread(run, "-g", group, "--from-beginning", "--max-messages", "3")
    assert done.returncode == 1, done.stderr
    (line,) = [json.loads(x) for x in done.stdout.splitlines()]
    assert line["value"] == {"id": 1, "amount": 2.5, "raw": "AP8="}
    assert (line["value_encoding"], line["offset"]) == ("avro", 0)
    assert f"offset 1 of partition [{topic},0] (schema id 10000)" in done.stderr
    # Committed: the record written, not the one that failed nor the one after it.
    committed = await zk_client.get_data(layout.offset_path(group, topic, 0))
    assert layout.decode_offset(committed) == 1

    # Without a group (--partition): the same error; from offset 2 on, decoded again.
    done = await asyncio.to_thread(run, "--partition", "0", "--offset", "1", "--max-messages", "2")
    assert done.returncode == 1 and done.stdout == ""
    assert f"offset 1 of partition [{topic},0] (schema id 10000)" in done.stderr
    done = await asyncio.to_thread(run, "--partition", "0", "--offset", "2", "--max-messages", "1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["value"]["id"] == 1


@pytest.mark.spark
async def test_spark_column_decodes_both_versions_into_the_newest_struct(
    spark: SparkSession,
    zk_kafka_cluster: LocalCluster,
    registry: LocalSchemaRegistry,
    unique_topic: str,
    confluent: ConfluentRegistry,
) -> None:
    from aiozkconsumer.spark.schema_registry import avro_schemas, from_confluent_avro

    topic = unique_topic
    await zk_kafka_cluster.create_topic(topic, 1)
    v1 = [{"id": 1, "amount": 0.5}]
    v2 = [{"id": 2, "amount": 1.5, "currency": "USD"}]
    for schema, values in ((V1, v1), (V2, v2)):
        serializer = AvroSerializer(confluent, json.dumps(schema))
        await asyncio.to_thread(_produce, zk_kafka_cluster, topic, serializer, values)
    await zk_kafka_cluster.produce(topic, [(None, b"\x00\x00\x00\x27\x10x")], partition=0)
    async with SchemaRegistryClient(registry.url) as client:
        schemas = await avro_schemas(client, topics=[topic])
        assert len(schemas) == 2

    def run() -> tuple[list[Any], str]:
        df = (
            spark.read.format("zkkafka")
            .option("zookeeper.connect", zk_kafka_cluster.zookeeper_connect)
            .option("group.id", f"{topic}-spark")
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
        )
        decoded = df.select("offset", from_confluent_avro(schemas).alias("p"))
        good = [r.p.asDict() for r in decoded.where("offset < 2").orderBy("offset").collect()]
        try:
            decoded.collect()
        except Exception as e:  # Spark's PythonException, carrying our message
            return good, str(e)
        return good, ""

    good, error = await asyncio.to_thread(run)
    assert good == [{**v1[0], "currency": "EUR"}, v2[0]]
    assert f"offset 2 of partition [{topic},0] (schema id 10000)" in error
