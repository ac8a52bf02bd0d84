"""OpenTelemetry tracing over real brokers: the spans a ``TracingInterceptor`` makes of the
records a connector hands out, their link to the producer's ``traceparent``, and that nothing
imports OpenTelemetry when tracing is not enabled.

Records are written by aiokafka's producer with a ``traceparent`` header taken from a span
the test starts; the spans are read from the SDK's ``InMemorySpanExporter`` (through a tracer
provider of the test's own, or, in a subprocess, the global one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from _support import config_for
from aiokafka import AIOKafkaProducer
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from aiozkconsumer import ZookeeperConsumerConnector
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.tracing import TracingInterceptor

pytestmark = pytest.mark.integration

LIMIT_S = 60


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


async def produce_traced(
    cluster: LocalCluster, provider: TracerProvider, topic: str, per_partition: int
) -> dict[tuple[int, int], trace.SpanContext]:
    """Produce ``per_partition`` records to partitions 0 and 1, each but offset 0 of
    partition 1 with the ``traceparent`` of a ``send`` span of its own.

    Returns:
        ``{(partition, offset): the producer span's context}`` of the records with a header.
    """
    await cluster.create_topic(topic, 2)
    tracer = provider.get_tracer("test-producer")
    sent: dict[tuple[int, int], trace.SpanContext] = {}
    async with AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as p:
        for partition in (0, 1):
            for i in range(per_partition):
                if (partition, i) == (1, 0):
                    meta = await p.send_and_wait(topic, b"plain", key=b"k", partition=partition)
                    continue
                with tracer.start_as_current_span(f"send {topic}", kind=SpanKind.PRODUCER) as s:
                    carrier: dict[str, str] = {}
                    TraceContextTextMapPropagator().inject(carrier)
                    headers = [(k, v.encode()) for k, v in carrier.items()]
                    meta = await p.send_and_wait(
                        topic, b"v%d" % i, key=b"k%d" % i, partition=partition, headers=headers
                    )
                    sent[(partition, meta.offset)] = s.get_span_context()
                assert meta.offset == i
    return sent


def processed(exporter: InMemorySpanExporter, topic: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == f"process {topic}"]


async def test_each_record_gets_a_span_current_in_the_loop_and_parented_to_its_producer(
    zk_kafka_cluster: LocalCluster,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    unique_topic: str,
    unique_group_id: str,
) -> None:
    sent = await produce_traced(zk_kafka_cluster, provider, unique_topic, 3)
    config = config_for(
        zk_kafka_cluster, unique_group_id, auto_commit_enable=False, client_id="billing-svc"
    )
    tracing = TracingInterceptor(tracer_provider=provider)
    current: dict[tuple[int, int], int] = {}  # (partition, offset) -> current span id
    async with ZookeeperConsumerConnector(config, interceptors=[tracing]) as connector:
        streams = await connector.create_message_streams({unique_topic: 1})
        async for msg in streams[unique_topic][0]:
            span = trace.get_current_span()
            assert span.is_recording()
            current[(msg.partition, msg.offset)] = span.get_span_context().span_id
            if len(current) == 6:
                await connector.commit_offsets()  # while the last record's span is current
                break
        assert len(processed(exporter, unique_topic)) == 5  # the last span is still open
    spans = processed(exporter, unique_topic)
    assert len(spans) == 6  # closing the connector ended the last one
    by_record = {record_of(s): s for s in spans}
    assert set(by_record) == set(current) == {(p, o) for p in (0, 1) for o in range(3)}
    for key, span in by_record.items():
        assert span.context.span_id == current[key]  # the span current in the loop body
        assert span.kind is SpanKind.CONSUMER
        assert span.attributes is not None
        assert span.attributes["messaging.system"] == "kafka"
        assert span.attributes["messaging.destination.name"] == unique_topic
        assert span.attributes["messaging.operation.type"] == "process"
        assert span.attributes["messaging.consumer.group.name"] == unique_group_id
        assert span.attributes["messaging.client.id"] == "billing-svc"
        producer = sent.get(key)
        if producer is None:
            assert key == (1, 0)
            assert span.attributes["messaging.kafka.message.key"] == "k"
            assert span.parent is None and not span.links
            continue
        assert span.attributes["messaging.kafka.message.key"] == f"k{key[1]}"
        assert span.parent is not None and span.parent.span_id == producer.span_id
        assert span.context.trace_id == producer.trace_id
        assert [link.context.span_id for link in span.links] == [producer.span_id]
    last = by_record[list(current)[-1]]
    (commit,) = (e for e in last.events if e.name == "commit")
    assert commit.attributes is not None
    assert commit.attributes["aiozkconsumer.commit.partitions"] == 2
    assert commit.attributes["aiozkconsumer.commit.offset"] == 3  # next offset to read
    assert not any(e.events for e in spans if e is not last)
    (rebalance,) = (s for s in exporter.get_finished_spans() if s.name == "rebalance")
    assert rebalance.attributes is not None  # the first rebalance, creating the streams
    assert rebalance.attributes["aiozkconsumer.rebalance.succeeded"] is True
    assert rebalance.attributes["aiozkconsumer.rebalance.partitions"] == 2
    assert rebalance.attributes["messaging.consumer.group.name"] == unique_group_id


def record_of(span: ReadableSpan) -> tuple[int, int]:
    assert span.attributes is not None
    partition = span.attributes["messaging.destination.partition.id"]
    offset = span.attributes["messaging.kafka.offset"]
    assert isinstance(partition, str) and isinstance(offset, int)
    return int(partition), offset


async def test_a_batch_gets_one_span_linking_its_records_producers(
    zk_kafka_cluster: LocalCluster,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    unique_topic: str,
    unique_group_id: str,
) -> None:
    sent = await produce_traced(zk_kafka_cluster, provider, unique_topic, 4)
    config = config_for(zk_kafka_cluster, unique_group_id, auto_commit_enable=False)
    tracing = TracingInterceptor(tracer_provider=provider)
    batches: list[tuple[int, int]] = []  # (records, current span id)
    async with ZookeeperConsumerConnector(config, interceptors=[tracing]) as connector:
        streams = await connector.create_message_streams({unique_topic: 1})
        async for batch in streams[unique_topic][0].batches(max_records=100):
            span = trace.get_current_span()
            batches.append((len(batch), span.get_span_context().span_id))
            if sum(n for n, _ in batches) == 8:
                break
    spans = {s.context.span_id: s for s in processed(exporter, unique_topic)}
    assert set(spans) == {span_id for _, span_id in batches}
    links: set[int] = set()
    for n, span_id in batches:
        span = spans[span_id]
        assert span.attributes is not None
        if n == 1:  # a batch of one is traced as a record
            assert "messaging.kafka.offset" in span.attributes
        else:
            assert span.attributes["messaging.batch.message_count"] == n
            assert "messaging.kafka.offset" not in span.attributes
            assert span.parent is None
        links.update(link.context.span_id for link in span.links)
    assert links == {sc.span_id for sc in sent.values()}  # 7 producers: one record has none


_CONSUME = """
import asyncio, json, sys
from aiozkconsumer import ConsumerConfig, ZookeeperConsumerConnector

zookeeper, topic, group, mode = sys.argv[1:]
if mode == "config":  # enabled by configuration, spans to the global tracer provider
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    classes = "aiozkconsumer.tracing.TracingInterceptor"
else:
    classes = None

async def main() -> int:
    config = ConsumerConfig(group_id=group, zookeeper_connect=zookeeper,
                            auto_offset_reset="smallest", interceptor_classes=classes)
    n = 0
    async with ZookeeperConsumerConnector(config) as connector:
        streams = await connector.create_message_streams({topic: 1})
        async for _ in streams[topic][0]:
            n += 1
            if n == 6:
                break
    return n

n = asyncio.run(main())
spans = [s.name for s in exporter.get_finished_spans()] if mode == "config" else []
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
print(json.dumps({"records": n, "spans": spans, "otel": loaded}))
"""


def run_consumer(cluster: LocalCluster, topic: str, group: str, mode: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _CONSUME, cluster.zookeeper_connect, topic, group, mode],
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        env={**os.environ, "PYTHONWARNINGS": "error"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def test_not_enabled_no_span_and_no_opentelemetry_import(
    zk_kafka_cluster: LocalCluster,
    provider: TracerProvider,
    unique_topic: str,
    unique_group_id: str,
) -> None:
    await produce_traced(zk_kafka_cluster, provider, unique_topic, 3)
    off = run_consumer(zk_kafka_cluster, unique_topic, unique_group_id, "off")
    assert off == {"records": 6, "spans": [], "otel": []}
    on = run_consumer(zk_kafka_cluster, unique_topic, unique_group_id + "-on", "config")
    assert on["records"] == 6
    spans = on["spans"]
    assert isinstance(spans, list)
    assert spans.count(f"process {unique_topic}") == 6 and "rebalance" in spans
    assert on["otel"]
