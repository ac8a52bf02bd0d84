"""Avro decode throughput: our Schema Registry decoder next to confluent-kafka's.

One topic of ``--records`` Avro records of about 1 KiB each (``--value-size``), written by
confluent-kafka's ``AvroSerializer`` through a local Apicurio Registry (the test kit's
:class:`~aiozkconsumer.testing.schema_registry.LocalSchemaRegistry`, or ``--schema-registry
URL``), is read to its end by a fresh group, ``--repeats`` times per contender:

- ``raw iter``: our stream, ``async for``, values left as bytes (the ceiling);
- ``decoding() iter``: ``async for msg in decoder.decoding(stream)``;
- ``decode_batch() batches``: ``stream.batches()`` with ``await decoder.decode_batch(batch)``;
- ``value_decoder= iter``: the decoder as the stream's ``value_decoder`` (prefetched);
- ``confluent DeserializingConsumer``: confluent-kafka's ``DeserializingConsumer`` with its
  ``AvroDeserializer``, ``poll()`` in a loop (a Kafka-coordinated group, librdkafka fetching
  in its own threads).

The rate is records/s from the first record handed out to the last. Run::

    .venv/bin/python benchmarks/schema_registry.py [--records 100000] [--zookeeper H:P ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

from _common import ClusterInfo, add_cluster_args, cluster_from_args, fmt, md_table, say
from confluent_kafka import DeserializingConsumer, SerializingProducer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

from aiozkconsumer import ConsumerConfig, ZookeeperConsumerConnector
from aiozkconsumer.schema_registry import SchemaRegistryClient, SchemaRegistryDecoder
from aiozkconsumer.testing.schema_registry import LocalSchemaRegistry

SCHEMA = {
    "type": "record",
    "name": "Event",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "kind", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "body", "type": "string"},
    ],
}


@contextlib.contextmanager
def registry_url(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    with LocalSchemaRegistry() as registry:
        yield registry.url


def fill(info: ClusterInfo, url: str, topic: str, partitions: int, records: int, size: int) -> None:
    admin = AdminClient({"bootstrap.servers": info.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    body = "x" * max(0, size - 60)  # the other fields and the framing take about 60 bytes
    t0 = time.monotonic()
    with ConfluentRegistry({"url": url}) as registry:
        producer = SerializingProducer(
            {
                "bootstrap.servers": info.bootstrap_servers,
                "value.serializer": AvroSerializer(registry, json.dumps(SCHEMA)),
                "linger.ms": 50,
                "batch.size": 1 << 20,
            }
        )
        for i in range(records):
            value = {"id": i, "kind": "payment", "amount": i / 3, "tags": ["a", "b"], "body": body}
            while True:
                try:
                    producer.produce(topic, value=value, partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.1)
        assert producer.flush(120) == 0
        producer.close()
    say(f"produced {records:,} Avro records of ~{size} B in {time.monotonic() - t0:.1f} s")


async def ours(info: ClusterInfo, url: str, topic: str, total: int, how: str) -> float:
    config = ConsumerConfig(
        group_id=f"bench-sr-{uuid.uuid4().hex[:8]}",
        zookeeper_connect=info.zookeeper_connect,
        auto_offset_reset="smallest",
        auto_commit_enable=False,
    )
    n = 0
    started = 0.0
    async with SchemaRegistryClient(url) as registry:
        decoder = SchemaRegistryDecoder(registry, "avro")
        value_decoder = None
        if how == "value_decoder":
            await decoder.prefetch(topics=[topic])
            value_decoder = decoder
        async with ZookeeperConsumerConnector(config) as connector:
            streams = await connector.create_message_streams(
                {topic: 1}, value_decoder=value_decoder
            )
            stream = streams[topic][0]
            if how == "batches":
                async for batch in stream.batches(max_records=500):
                    decoded = await decoder.decode_batch(batch)
                    if n == 0:
                        started = time.perf_counter()
                    n += len(decoded)
                    if n >= total:
                        break
            else:
                records: Any = decoder.decoding(stream) if how == "decoding" else stream
                async for msg in records:
                    if n == 0:
                        started = time.perf_counter()
                    n += 1
                    if n == total:
                        assert how == "raw" or msg.value["id"] >= 0
                        break
            elapsed = time.perf_counter() - started
    return (total - 1) / elapsed


def confluent(info: ClusterInfo, url: str, topic: str, total: int) -> float:
    with ConfluentRegistry({"url": url}) as registry:
        consumer = DeserializingConsumer(
            {
                "bootstrap.servers": info.bootstrap_servers,
                "group.id": f"bench-sr-confluent-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "value.deserializer": AvroDeserializer(registry),
            }
        )
        consumer.subscribe([topic])
        n = 0
        started = 0.0
        try:
            while n < total:
                msg = consumer.poll(1.0)
                if msg is None or msg.error():
                    continue
                if n == 0:
                    started = time.perf_counter()
                n += 1
            elapsed = time.perf_counter() - started
            assert msg is not None and msg.value()["id"] >= 0
        finally:
            consumer.close()
    return (total - 1) / elapsed


CONTENDERS = {
    "raw iter (no decoding)": "raw",
    "decoding() iter": "decoding",
    "decode_batch() batches": "batches",
    "value_decoder= iter": "value_decoder",
    "confluent DeserializingConsumer": "confluent",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--value-size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--schema-registry", metavar="URL", help="default: a local one")
    add_cluster_args(parser)
    args = parser.parse_args()
    with cluster_from_args(args) as info, registry_url(args.schema_registry) as url:
        topic = f"bench-sr-{uuid.uuid4().hex[:8]}"
        total = args.records
        fill(info, url, topic, args.partitions, total, args.value_size)
        rates: dict[str, list[float]] = {name: [] for name in CONTENDERS}
        for r in range(args.repeats):
            for name, how in CONTENDERS.items():  # interleaved: drift hits all alike
                if how == "confluent":
                    rate = confluent(info, url, topic, total)
                else:
                    rate = asyncio.run(ours(info, url, topic, total, how))
                rates[name].append(rate)
                say(f"  run {r + 1} {name}: {rate:,.0f} records/s")
    rows = []
    for name, values in rates.items():
        med = statistics.median(values)
        rows.append([name, fmt(med), fmt(min(values)), fmt(max(values)), fmt(1e6 / med, 1)])
    print(f"\n{total:,} Avro records of ~{args.value_size} B, {args.repeats} runs each\n")
    print(md_table(["contender", "median rec/s", "min", "max", "us/record"], rows))


if __name__ == "__main__":
    main()
