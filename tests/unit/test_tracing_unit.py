"""OpenTelemetry tracing (``aiozkconsumer.tracing``) without servers: the attribute mapping,
the ``traceparent`` extraction, and the span life cycle over real streams fed by hand.

The spans go to the SDK's ``InMemorySpanExporter`` through a tracer provider of each test's
own (never the global one). Over real brokers: ``tests/integration/test_tracing.py``.
"""

from __future__ import annotations

import asyncio
import os
import struct
import subprocess
import sys
from collections.abc import Iterator, Sequence

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import messaging_attributes as semconv
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from aiozkconsumer import tracing
from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.errors import InvalidConfigError
from aiozkconsumer.interceptors import Interceptors
from aiozkconsumer.records import (
    FetchedDataChunk,
    MessageAndMetadata,
    PartitionTopicInfo,
    RebalanceRecord,
    TopicPartition,
)
from aiozkconsumer.stream import SHUTDOWN_COMMAND, ChunkQueue, KafkaStream
from aiozkconsumer.tracing import (
    TracingInterceptor,
    batch_attributes,
    creation_context,
    record_attributes,
    span_name,
)

Header = tuple[str, bytes]
CONFIG = ConsumerConfig(group_id="billing", zookeeper_connect="127.0.0.1:2181", client_id="svc")


def msg(
    offset: int = 7,
    *,
    topic: str = "payments",
    partition: int = 3,
    key: object = None,
    value: object = b"v",
    headers: tuple[Header, ...] = (),
) -> MessageAndMetadata:
    return MessageAndMetadata(topic, partition, offset, key, value, 0, 0, headers)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def producer_span(provider: TracerProvider) -> Iterator[trace.Span]:
    """A finished span standing for the producer's ``send``."""
    span = provider.get_tracer("producer").start_span("send payments", kind=SpanKind.PRODUCER)
    span.end()
    yield span


def traceparent(span: trace.Span) -> Header:
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, trace.set_span_in_context(span))
    return ("traceparent", carrier["traceparent"].encode())


def interceptor(provider: TracerProvider, **kw: bool) -> TracingInterceptor:
    it = TracingInterceptor(tracer_provider=provider, **kw)
    it.configure(CONFIG)
    return it


def finished(exporter: InMemorySpanExporter, name: str | None = None) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if name is None or s.name == name]


# -- attribute names and values -----------------------------------------------------------------


def test_attribute_names_are_the_current_semantic_conventions() -> None:
    assert tracing.MESSAGING_SYSTEM == semconv.MESSAGING_SYSTEM
    assert tracing.MESSAGING_OPERATION_NAME == semconv.MESSAGING_OPERATION_NAME
    assert tracing.MESSAGING_OPERATION_TYPE == semconv.MESSAGING_OPERATION_TYPE
    assert tracing.MESSAGING_DESTINATION_NAME == semconv.MESSAGING_DESTINATION_NAME
    assert tracing.MESSAGING_DESTINATION_PARTITION_ID == semconv.MESSAGING_DESTINATION_PARTITION_ID
    assert tracing.MESSAGING_KAFKA_OFFSET == semconv.MESSAGING_KAFKA_OFFSET
    assert tracing.MESSAGING_KAFKA_MESSAGE_KEY == semconv.MESSAGING_KAFKA_MESSAGE_KEY
    assert tracing.MESSAGING_KAFKA_MESSAGE_TOMBSTONE == semconv.MESSAGING_KAFKA_MESSAGE_TOMBSTONE
    assert tracing.MESSAGING_CONSUMER_GROUP_NAME == semconv.MESSAGING_CONSUMER_GROUP_NAME
    assert tracing.MESSAGING_CLIENT_ID == semconv.MESSAGING_CLIENT_ID
    assert tracing.MESSAGING_BATCH_MESSAGE_COUNT == semconv.MESSAGING_BATCH_MESSAGE_COUNT
    assert semconv.MessagingSystemValues.KAFKA.value == "kafka"
    assert semconv.MessagingOperationTypeValues.PROCESS.value == tracing.PROCESS
    assert semconv.MessagingOperationTypeValues.SETTLE.value == "settle"


def test_record_attributes() -> None:
    assert record_attributes(msg(key="k-1"), "billing", "svc") == {
        "messaging.system": "kafka",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": "payments",
        "messaging.destination.partition.id": "3",
        "messaging.kafka.offset": 7,
        "messaging.kafka.message.key": "k-1",
        "messaging.consumer.group.name": "billing",
        "messaging.client.id": "svc",
    }


@pytest.mark.parametrize(
    ("key", "expected"),
    [(b"user-1", "user-1"), ("user-1", "user-1"), (b"\xff\xfe", None), (None, None), (42, None)],
)
def test_the_key_is_kept_only_in_a_string_form(key: object, expected: str | None) -> None:
    attributes = record_attributes(msg(key=key), "g", "c")
    assert attributes.get("messaging.kafka.message.key") == expected


def test_a_tombstone_is_marked_and_missing_ids_are_left_out() -> None:
    attributes = record_attributes(msg(value=None), None, None)
    assert attributes["messaging.kafka.message.tombstone"] is True
    assert "messaging.consumer.group.name" not in attributes
    assert "messaging.client.id" not in attributes
    assert "messaging.kafka.message.tombstone" not in record_attributes(msg(), None, None)


def test_batch_attributes_name_the_topic_and_partition_only_when_shared() -> None:
    one = [msg(0), msg(1)]
    assert batch_attributes(one, "g", "c") == {
        "messaging.system": "kafka",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.batch.message_count": 2,
        "messaging.destination.name": "payments",
        "messaging.destination.partition.id": "3",
        "messaging.consumer.group.name": "g",
        "messaging.client.id": "c",
    }
    partitions = batch_attributes([msg(0), msg(0, partition=1)], "g", "c")
    assert partitions["messaging.destination.name"] == "payments"
    assert "messaging.destination.partition.id" not in partitions
    topics = batch_attributes([msg(0), msg(0, topic="refunds")], "g", "c")
    assert "messaging.destination.name" not in topics
    assert "messaging.destination.partition.id" not in topics
    assert span_name(one) == "process payments"
    assert span_name([msg(0), msg(0, topic="refunds")]) == "process"


# -- the producer's context ---------------------------------------------------------------------


def test_creation_context_reads_the_traceparent_header(producer_span: trace.Span) -> None:
    ctx = creation_context((("other", b"x"), traceparent(producer_span)))
    assert ctx is not None
    extracted = trace.get_current_span(ctx).get_span_context()
    expected = producer_span.get_span_context()
    assert (extracted.trace_id, extracted.span_id) == (expected.trace_id, expected.span_id)
    assert extracted.is_remote


@pytest.mark.parametrize(
    "headers",
    [
        (),
        (("other", b"x"),),
        (("traceparent", b"not a traceparent"),),
        (("traceparent", b"00-00000000000000000000000000000000-0000000000000000-01"),),
        (("traceparent", None),),
        (("Traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),),
    ],
)
def test_no_creation_context_without_a_valid_traceparent(
    headers: tuple[tuple[str, bytes | None], ...],
) -> None:
    assert creation_context(headers) is None


# -- the span life cycle over a stream fed by hand --------------------------------------------


def record_batch(base_offset: int, headers: Sequence[Sequence[Header]]) -> object:
    """One magic-2 record batch, a record per item of ``headers`` (its headers)."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i, hs in enumerate(headers):
        builder.append(i, 1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i, list(hs))
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", base_offset)
    records = MemoryRecords(bytes(raw))
    return records.next_batch()


def stream_of(
    tracer: TracingInterceptor, *batches: Sequence[Sequence[Header]], end: bool = True
) -> KafkaStream:
    queue: ChunkQueue = ChunkQueue(maxsize=len(batches) + 1)
    info = PartitionTopicInfo("payments", 3, queue, 0, 0, 1 << 20, "c")
    offset = 0
    for headers in batches:
        queue.put_nowait(FetchedDataChunk([record_batch(offset, headers)], info, offset))
        offset += len(headers)
    if end:
        queue.put_nowait(SHUTDOWN_COMMAND)
    return KafkaStream(queue, -1, "svc", "payments-0", interceptors=Interceptors([tracer]))


async def test_a_record_span_is_current_in_the_loop_body_and_ends_at_the_next_ask(
    provider: TracerProvider, exporter: InMemorySpanExporter, producer_span: trace.Span
) -> None:
    tracer = interceptor(provider)
    stream = stream_of(tracer, [[traceparent(producer_span)], []])
    before = trace.get_current_span()
    current: list[tuple[int, int]] = []
    ended_before_next: list[int] = []
    async for m in stream:
        span = trace.get_current_span()
        current.append((m.offset, span.get_span_context().span_id))
        ended_before_next.append(len(finished(exporter)))
    assert trace.get_current_span() is before  # the loop's end restored the context
    spans = finished(exporter, "process payments")
    assert [s.attributes["messaging.kafka.offset"] for s in spans] == [0, 1]  # type: ignore[index]
    assert [s.context.span_id for s in spans] == [sid for _, sid in current]
    assert ended_before_next == [1, 2]  # only the producer's span, then record 0's
    first, second = spans
    assert first.kind is SpanKind.CONSUMER
    produced = producer_span.get_span_context()
    assert first.parent is not None and first.parent.span_id == produced.span_id
    assert first.context.trace_id == produced.trace_id
    assert [link.context.span_id for link in first.links] == [produced.span_id]
    assert second.parent is None and not second.links  # no header: the loop's context
    assert first.attributes is not None
    assert first.attributes["messaging.consumer.group.name"] == "billing"
    assert first.attributes["messaging.client.id"] == "svc"
    assert first.attributes["messaging.destination.partition.id"] == "3"
    assert first.instrumentation_scope is not None
    assert first.instrumentation_scope.name == "aiozkconsumer"
    assert first.instrumentation_scope.schema_url == tracing.SCHEMA_URL


async def test_link_only_keeps_the_loops_parent(
    provider: TracerProvider, exporter: InMemorySpanExporter, producer_span: trace.Span
) -> None:
    tracer = interceptor(provider, producer_as_parent=False)
    stream = stream_of(tracer, [[traceparent(producer_span)]])
    with provider.get_tracer("app").start_as_current_span("consume loop") as loop_span:
        async for _ in stream:
            pass
    (span,) = finished(exporter, "process payments")
    assert span.parent is not None
    assert span.parent.span_id == loop_span.get_span_context().span_id
    assert [link.context.span_id for link in span.links] == [
        producer_span.get_span_context().span_id
    ]


async def test_a_batch_gets_one_span_linking_every_distinct_producer_span(
    provider: TracerProvider, exporter: InMemorySpanExporter, producer_span: trace.Span
) -> None:
    tracer = interceptor(provider)
    other = provider.get_tracer("producer").start_span("send payments")
    other.end()
    header, second = traceparent(producer_span), traceparent(other)
    stream = stream_of(tracer, [[header], [header], [], [second]])
    sizes: list[int] = []
    async for batch in stream.batches(max_records=10):
        sizes.append(len(batch))
        assert trace.get_current_span().get_span_context().is_valid
    assert sizes == [4]
    (span,) = finished(exporter, "process payments")
    assert span.parent is None
    assert span.attributes is not None
    assert span.attributes["messaging.batch.message_count"] == 4
    assert "messaging.kafka.offset" not in span.attributes
    assert [link.context.span_id for link in span.links] == [
        producer_span.get_span_context().span_id,
        other.get_span_context().span_id,
    ]


async def test_break_leaves_the_span_current_until_ended_or_closed(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracer = interceptor(provider)
    stream = stream_of(tracer, [[], []], end=False)
    async for _ in stream:
        break
    assert trace.get_current_span().is_recording()
    tracer.end_current_span()
    assert not trace.get_current_span().is_recording()
    assert len(finished(exporter)) == 1
    async for _ in stream:
        break
    tracer.close()
    assert len(finished(exporter)) == 2
    tracer.end_current_span()  # restores the context; the span is not ended twice
    assert not trace.get_current_span().is_recording()
    assert len(finished(exporter)) == 2


async def test_a_child_task_does_not_end_the_span_it_inherited(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracer = interceptor(provider)
    tracer.on_consume([msg(0)])
    parent_span = trace.get_current_span()

    async def child() -> None:
        tracer.on_poll()  # the child's copy forgets the span; the span goes on
        assert not finished(exporter)

    await asyncio.create_task(child())
    assert trace.get_current_span() is parent_span
    tracer.on_poll()
    assert len(finished(exporter)) == 1
    assert not trace.get_current_span().is_recording()


def test_commits_are_events_on_the_spans_they_cover_else_spans(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracer = interceptor(provider)
    token = otel_context.attach(otel_context.Context())
    try:
        tracer.on_commit({TopicPartition("payments", 3): 5})  # nothing open: a span
        tracer.on_consume([msg(7)])
        tracer.on_commit({TopicPartition("payments", 0): 9})  # another partition: a span
        tracer.on_commit({TopicPartition("payments", 3): 8, TopicPartition("payments", 0): 9})
        tracer.on_poll()
    finally:
        otel_context.detach(token)
    commits = finished(exporter, "commit")
    assert len(commits) == 2
    assert commits[0].attributes is not None
    assert commits[0].attributes["messaging.operation.type"] == "settle"
    assert commits[0].attributes["aiozkconsumer.commit.partitions"] == 1
    (record,) = finished(exporter, "process payments")
    (event,) = record.events
    assert event.name == "commit"
    assert dict(event.attributes or {}) == {
        "aiozkconsumer.commit.partitions": 2,
        "aiozkconsumer.commit.offset": 8,
    }


def test_a_rebalance_is_a_span_over_its_time_and_an_event_on_open_spans(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracer = interceptor(provider)
    record = RebalanceRecord(
        started_at=1_700_000_000.5,
        duration_s=0.25,
        attempts=2,
        succeeded=True,
        partitions=(TopicPartition("payments", 0), TopicPartition("payments", 3)),
        reason="member joined",
        kept=1,
        released=0,
        acquired=1,
    )
    tracer.on_consume([msg(7)])
    tracer.on_rebalance(record)
    tracer.on_poll()
    (span,) = finished(exporter, "rebalance")
    assert span.kind is SpanKind.INTERNAL
    assert span.start_time == 1_700_000_000_500_000_000
    assert span.end_time == 1_700_000_000_750_000_000
    expected = {
        "aiozkconsumer.rebalance.reason": "member joined",
        "aiozkconsumer.rebalance.succeeded": True,
        "aiozkconsumer.rebalance.attempts": 2,
        "aiozkconsumer.rebalance.partitions": 2,
        "aiozkconsumer.rebalance.kept": 1,
        "aiozkconsumer.rebalance.released": 0,
        "aiozkconsumer.rebalance.acquired": 1,
    }
    assert span.attributes is not None
    assert {k: span.attributes[k] for k in expected} == expected
    assert span.attributes["messaging.consumer.group.name"] == "billing"
    (processed,) = finished(exporter, "process payments")
    assert [(e.name, dict(e.attributes or {})) for e in processed.events] == [
        ("rebalance", expected)
    ]


def test_nothing_is_recorded_after_close(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracer = interceptor(provider)
    tracer.close()
    assert tracer.on_consume([msg(0)]) == [msg(0)]
    tracer.on_commit({TopicPartition("payments", 3): 1})
    assert not finished(exporter)
    assert not trace.get_current_span().is_recording()


# -- enabling -----------------------------------------------------------------------------------


def test_the_connector_configures_it_by_name() -> None:
    config = ConsumerConfig(
        group_id="billing",
        zookeeper_connect="127.0.0.1:2181",
        interceptor_classes="aiozkconsumer.tracing.TracingInterceptor",
    )
    chain = Interceptors.from_config(config.interceptor_classes, config=config)
    (built,) = chain.items
    assert isinstance(built, TracingInterceptor)
    assert repr(built) == "<TracingInterceptor group='billing' open=0>"
    assert chain.polls and chain.observes_rebalances


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "error"},
        check=False,
    )


def test_the_package_never_imports_opentelemetry_by_itself() -> None:
    done = _run(
        "import sys, pkgutil, importlib, aiozkconsumer\n"
        "skip = ('aiozkconsumer.tracing', 'aiozkconsumer.__main__', 'aiozkconsumer.spark',"
        " 'aiozkconsumer.testing', 'aiozkconsumer.columns', 'aiozkconsumer.cli.demo_spark')\n"
        "for m in pkgutil.walk_packages(aiozkconsumer.__path__, 'aiozkconsumer.'):\n"
        "    if not m.name.startswith(skip):\n"
        "        importlib.import_module(m.name)\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] == 'opentelemetry'))\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_the_extra_the_import_error_names_it() -> None:
    done = _run(
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "try:\n"
        "    import aiozkconsumer.tracing\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'aiozkconsumer[otel]'" in done.stdout


def test_by_name_without_the_extra_is_a_config_error() -> None:
    done = _run(
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "from aiozkconsumer.interceptors import Interceptors\n"
        "from aiozkconsumer.errors import InvalidConfigError\n"
        "try:\n"
        "    Interceptors.from_config('aiozkconsumer.tracing.TracingInterceptor')\n"
        "except InvalidConfigError as e:\n"
        "    print(e)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "aiozkconsumer[otel]" in done.stdout
    assert "interceptor.classes" in done.stdout


def test_invalid_config_error_is_what_from_config_raises() -> None:
    # The same error type as the subprocess above, checked in-process for its key.
    with pytest.raises(InvalidConfigError, match=r"interceptor\.classes"):
        Interceptors.from_config("aiozkconsumer.tracing.NoSuchClass")
