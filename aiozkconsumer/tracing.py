"""OpenTelemetry tracing of the records a connector hands out: the ``otel`` extra.

``TracingInterceptor`` is a consumer interceptor (``interceptor.classes``, or the connector's
``interceptors=``). Each record handed to ``async for`` gets a ``process <topic>`` span
(CONSUMER) with the messaging semantic conventions' attributes (1.27: ``messaging.system``,
``messaging.destination.name``, ``messaging.destination.partition.id``,
``messaging.kafka.offset``, ``messaging.consumer.group.name``, ``messaging.client.id``,
``messaging.operation.type``); each batch of ``batches()`` one span for the batch. The span
is current while the application processes what it was handed, and ends when the reader asks
for more (the interceptors' ``on_poll`` hook), when the stream ends, or when the connector
closes. A record's W3C ``traceparent`` header (any propagator set in OpenTelemetry, in fact)
becomes a link of its span and, by default, its parent, as
``opentelemetry-instrumentation-aiokafka`` does. Rebalances are ``rebalance`` spans of their
own and events on the spans open meanwhile; commits are events on the open spans they cover,
or ``commit`` spans of their own. Metrics stay on Prometheus (``aiozkconsumer.metrics``).

Nothing else in the package imports this module, so OpenTelemetry is imported only when a
user names or imports it. Importing it without OpenTelemetry's API installed raises an
``ImportError`` that names the extra.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Final

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.propagators.textmap import Getter
    from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Tracer, TracerProvider
    from opentelemetry.util.types import AttributeValue
except ImportError as e:
    raise ImportError("tracing needs OpenTelemetry's API: pip install 'aiozkconsumer[otel]'") from e

from . import __version__
from .records import MessageAndMetadata, RebalanceRecord, TopicPartition

if TYPE_CHECKING:
    from .config import ConsumerConfig

__all__ = [
    "OTEL_EXTRA",
    "SCHEMA_URL",
    "Headers",
    "TracingInterceptor",
    "batch_attributes",
    "creation_context",
    "record_attributes",
    "span_name",
]

log = logging.getLogger(__name__)

OTEL_EXTRA: Final = "aiozkconsumer[otel]"
"""The extra that installs what this module needs."""

SCHEMA_URL: Final = "https://opentelemetry.io/schemas/1.27.0"
"""The semantic conventions the attribute names follow (messaging, 1.27.0)."""

# Attribute names of the messaging semantic conventions (1.27; tests/unit/test_tracing_unit.py
# checks them against opentelemetry-semantic-conventions). Spelled out here so that the API
# alone is enough at run time.
MESSAGING_SYSTEM: Final = "messaging.system"
MESSAGING_OPERATION_NAME: Final = "messaging.operation.name"
MESSAGING_OPERATION_TYPE: Final = "messaging.operation.type"
MESSAGING_DESTINATION_NAME: Final = "messaging.destination.name"
MESSAGING_DESTINATION_PARTITION_ID: Final = "messaging.destination.partition.id"
MESSAGING_KAFKA_OFFSET: Final = "messaging.kafka.offset"
MESSAGING_KAFKA_MESSAGE_KEY: Final = "messaging.kafka.message.key"
MESSAGING_KAFKA_MESSAGE_TOMBSTONE: Final = "messaging.kafka.message.tombstone"
MESSAGING_CONSUMER_GROUP_NAME: Final = "messaging.consumer.group.name"
MESSAGING_CLIENT_ID: Final = "messaging.client.id"
MESSAGING_BATCH_MESSAGE_COUNT: Final = "messaging.batch.message_count"

# Ours, for what the conventions have no name for.
COMMIT_PARTITIONS: Final = "aiozkconsumer.commit.partitions"
COMMIT_OFFSET: Final = "aiozkconsumer.commit.offset"
REBALANCE_REASON: Final = "aiozkconsumer.rebalance.reason"
REBALANCE_SUCCEEDED: Final = "aiozkconsumer.rebalance.succeeded"
REBALANCE_ATTEMPTS: Final = "aiozkconsumer.rebalance.attempts"
REBALANCE_PARTITIONS: Final = "aiozkconsumer.rebalance.partitions"
REBALANCE_KEPT: Final = "aiozkconsumer.rebalance.kept"
REBALANCE_RELEASED: Final = "aiozkconsumer.rebalance.released"
REBALANCE_ACQUIRED: Final = "aiozkconsumer.rebalance.acquired"

PROCESS: Final = "process"
Headers = Sequence[tuple[str, bytes | None]]
"""A record's headers, as ``MessageAndMetadata.headers`` holds them."""

Attributes = dict[str, AttributeValue]


class _HeaderGetter(Getter[dict[str, str]]):
    """Reads propagation fields from a record's headers, made a ``{key: value}`` once.

    Kafka header keys are case-sensitive and may repeat: the last value of a key wins (as the
    Java instrumentation's ``lastHeader``); values are decoded as UTF-8 (a ``traceparent`` is
    ASCII), null values skipped.
    """

    def get(self, carrier: dict[str, str], key: str) -> list[str] | None:
        value = carrier.get(key)
        return None if value is None else [value]

    def keys(self, carrier: dict[str, str]) -> list[str]:
        return list(carrier)


_GETTER: Final = _HeaderGetter()


def creation_context(headers: Headers) -> Context | None:
    """The producer's context carried by a record's headers (its ``traceparent``).

    Extracted with the propagators OpenTelemetry is set up with (``OTEL_PROPAGATORS``;
    default W3C trace context and baggage).

    Args:
        headers: the record's headers.

    Returns:
        The extracted context (the producer's span context, and its baggage), or ``None``
        when the headers carry no valid span context (none, or a malformed ``traceparent``).
    """
    if not headers:
        return None
    carrier = {name: value.decode("utf-8", "replace") for name, value in headers if value}
    ctx = propagate.extract(carrier, getter=_GETTER)
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None
    return ctx


def _base_attributes(group_id: str | None, client_id: str | None) -> Attributes:
    attributes: Attributes = {
        MESSAGING_SYSTEM: "kafka",
        MESSAGING_OPERATION_NAME: PROCESS,
        MESSAGING_OPERATION_TYPE: PROCESS,
    }
    if group_id is not None:
        attributes[MESSAGING_CONSUMER_GROUP_NAME] = group_id
    if client_id is not None:
        attributes[MESSAGING_CLIENT_ID] = client_id
    return attributes


def _key_string(key: object) -> str | None:
    """The record key as the conventions' ``messaging.kafka.message.key``: a string key as it
    is, a bytes key if it is UTF-8, else none (no canonical string form)."""
    if isinstance(key, str):
        return key
    if isinstance(key, bytes | bytearray):
        try:
            return bytes(key).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def record_attributes(
    msg: MessageAndMetadata, group_id: str | None, client_id: str | None
) -> Attributes:
    """The span attributes of one record's ``process`` span.

    Args:
        msg: the record handed out.
        group_id: ``group.id`` (``messaging.consumer.group.name``); ``None`` leaves it out.
        client_id: ``client.id`` in force (``messaging.client.id``); ``None`` leaves it out.

    Returns:
        ``{attribute: value}``: system ``kafka``, operation ``process``, the topic, the
        partition (a string, as the conventions want), the offset, the group and client id,
        the key (only when it is a string or UTF-8 bytes) and ``tombstone`` for a null value.
    """
    attributes = _base_attributes(group_id, client_id)
    attributes[MESSAGING_DESTINATION_NAME] = msg.topic
    attributes[MESSAGING_DESTINATION_PARTITION_ID] = str(msg.partition)
    attributes[MESSAGING_KAFKA_OFFSET] = msg.offset
    if msg.key is not None:
        key = _key_string(msg.key)
        if key is not None:
            attributes[MESSAGING_KAFKA_MESSAGE_KEY] = key
    if msg.value is None:
        attributes[MESSAGING_KAFKA_MESSAGE_TOMBSTONE] = True
    return attributes


def batch_attributes(
    records: Sequence[MessageAndMetadata], group_id: str | None, client_id: str | None
) -> Attributes:
    """The span attributes of a batch's ``process`` span.

    Args:
        records: the batch handed out (not empty).
        group_id: as :func:`record_attributes`.
        client_id: as :func:`record_attributes`.

    Returns:
        ``{attribute: value}``: system, operation, group, client id and
        ``messaging.batch.message_count``; the topic when every record has the same one, and
        the partition when they also share that (a wildcard stream's batch may mix them).
    """
    attributes = _base_attributes(group_id, client_id)
    attributes[MESSAGING_BATCH_MESSAGE_COUNT] = len(records)
    topics = {msg.topic for msg in records}
    if len(topics) == 1:
        attributes[MESSAGING_DESTINATION_NAME] = records[0].topic
        partitions = {msg.partition for msg in records}
        if len(partitions) == 1:
            attributes[MESSAGING_DESTINATION_PARTITION_ID] = str(records[0].partition)
    return attributes


def span_name(records: Sequence[MessageAndMetadata]) -> str:
    """``process <topic>``, or ``process`` when the records come from several topics."""
    topic = records[0].topic
    if all(msg.topic == topic for msg in records):
        return f"{PROCESS} {topic}"
    return PROCESS


def _current_task() -> asyncio.Task[object] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running event loop (a synchronous caller)
        return None


class _Open:
    """A record or batch span handed to the application and not ended yet."""

    __slots__ = ("ended", "partitions", "span", "task", "token")

    def __init__(
        self,
        span: Span,
        token: Token[Context],
        task: asyncio.Task[object] | None,
        partitions: tuple[tuple[str, int], ...],
    ) -> None:
        self.span = span
        self.token = token
        self.task = task
        self.partitions = partitions  # (topic, partition) of its records, distinct
        self.ended = False


class TracingInterceptor:
    """A consumer interceptor that traces the records a connector hands out.

    Enable it in code, ``create_connector(config, interceptors=[TracingInterceptor()])``, or
    by configuration, ``interceptor.classes=aiozkconsumer.tracing.TracingInterceptor`` (then
    it uses the global tracer provider). One instance per connector: the connector's
    ``configure`` call gives it the group and client id.

    Spans (see ``docs/tracing.md``):

    - a record from ``async for msg in stream``: ``process <topic>``, kind CONSUMER. Its
      parent is the producer's span from the record's ``traceparent`` header (with
      ``producer_as_parent``, the default), else the span current where the loop runs; the
      producer's span is also its link. Current while the loop body runs; ended when the
      loop asks for the next record, when the stream ends, or when the connector closes.
    - a batch from ``batches()`` (or ``arrow_batches()``) of more than one record: one
      ``process`` span for the batch, a child of the span current where the loop runs, with
      ``messaging.batch.message_count`` and a link to every distinct producer span of its
      records. A batch of one record gets a record span.
    - a rebalance: a ``rebalance`` span (INTERNAL) over its real start and duration, with
      what it did as attributes, and a ``rebalance`` event on every record or batch span
      open at its end (records being processed while the group moved partitions).
    - a commit: a ``commit`` event on every open span whose partitions it covers, with the
      committed offset ("next offset to read") of a record span's partition; a commit that
      covers no open span (auto-commit between records, the commit before a partition is
      released, the last one at shutdown) is a ``commit`` span of its own (INTERNAL, no
      duration: the interceptor learns of a commit once it is done).

    An exception raised in the loop body is not recorded: the interceptor does not see it.
    After ``break``, the span stays current in that task until the task asks a traced
    stream for more, :meth:`end_current_span` is called, or the connector closes.

    Args:
        tracer_provider: where spans go; ``None``: OpenTelemetry's global tracer provider.
        producer_as_parent: make the producer's span the parent of a record's span (as
            ``opentelemetry-instrumentation-aiokafka``); ``False``: only link it (the
            conventions' requirement), the record span then being a child of the span
            current in the loop.

    Raises:
        ImportError: (on import of this module) OpenTelemetry's API is not installed; the
            message names the ``aiozkconsumer[otel]`` extra.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        producer_as_parent: bool = True,
    ) -> None:
        self._tracer: Tracer = trace.get_tracer(
            "aiozkconsumer", __version__, tracer_provider, schema_url=SCHEMA_URL
        )
        self._producer_as_parent = producer_as_parent
        self._group_id: str | None = None
        self._client_id: str | None = None
        # Each task's open span: the reader's task asks for records and processes them.
        self._current: ContextVar[_Open | None] = ContextVar(
            f"aiozkconsumer.tracing.{id(self):x}", default=None
        )
        self._open: dict[int, _Open] = {}  # every task's open span, for events and close()
        self._closed = False

    # -- the interceptor's hooks ---------------------------------------------------------

    def configure(self, config: ConsumerConfig) -> None:
        """Take the group and client id from the connector's configuration (called by the
        connector, once).

        Args:
            config: the connector's configuration.
        """
        self._group_id = config.group_id
        self._client_id = config.effective_client_id

    def on_poll(self) -> None:
        """End the calling task's span: its reader asks for the next record or batch."""
        current = self._current.get()
        if current is not None:
            self._end(current)

    def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
        """Start the span of ``records`` and make it current in the calling task.

        Args:
            records: the record (a list of one) or batch about to be handed out.

        Returns:
            ``records``, unchanged.
        """
        current = self._current.get()
        if current is not None:
            self._end(current)  # an interceptor before this one dropped the last records
        if not records or self._closed:
            return records
        if len(records) == 1:
            self._start_record(records[0])
        else:
            self._start_batch(records)
        return records

    def on_commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Record a commit: events on the open spans it covers, else a span of its own.

        Args:
            offsets: the committed offsets (next offset to read) per partition.
        """
        if self._closed:
            return
        covered = False
        for open_ in list(self._open.values()):
            committed = [
                offsets[tp]
                for tp in (TopicPartition(t, p) for t, p in open_.partitions)
                if tp in offsets
            ]
            if not committed:
                continue
            covered = True
            attributes: Attributes = {COMMIT_PARTITIONS: len(offsets)}
            if len(open_.partitions) == 1:
                attributes[COMMIT_OFFSET] = committed[0]
            open_.span.add_event("commit", attributes)
        if not covered:
            span = self._tracer.start_span(
                "commit",
                kind=SpanKind.INTERNAL,
                attributes={
                    **_base_attributes(self._group_id, self._client_id),
                    MESSAGING_OPERATION_NAME: "commit",
                    MESSAGING_OPERATION_TYPE: "settle",
                    COMMIT_PARTITIONS: len(offsets),
                },
            )
            span.end()

    def on_rebalance(self, record: RebalanceRecord) -> None:
        """Record a rebalance: a span of its own and an event on every open span.

        Args:
            record: what the rebalance did.
        """
        if self._closed:
            return
        attributes: Attributes = {
            REBALANCE_REASON: record.reason,
            REBALANCE_SUCCEEDED: record.succeeded,
            REBALANCE_ATTEMPTS: record.attempts,
            REBALANCE_PARTITIONS: len(record.partitions),
            REBALANCE_KEPT: record.kept,
            REBALANCE_RELEASED: record.released,
            REBALANCE_ACQUIRED: record.acquired,
        }
        start_ns = int(record.started_at * 1e9)
        span = self._tracer.start_span(
            "rebalance",
            kind=SpanKind.INTERNAL,
            attributes={
                MESSAGING_SYSTEM: "kafka",
                **_group_attributes(self._group_id, self._client_id),
                **attributes,
            },
            start_time=start_ns,
        )
        span.end(end_time=start_ns + int(record.duration_s * 1e9))
        for open_ in list(self._open.values()):
            open_.span.add_event("rebalance", attributes)

    def close(self) -> None:
        """End every open span (the connector shuts down). Idempotent."""
        self._closed = True
        for open_ in list(self._open.values()):
            self._end(open_, closing=True)

    # -- for the application -------------------------------------------------------------

    def end_current_span(self) -> None:
        """End the span of the record or batch the calling task was handed, if any.

        The span otherwise ends when the task asks for more; call this after leaving the
        loop with ``break`` to end it (and restore the context) at once.
        """
        self.on_poll()

    # -- spans ---------------------------------------------------------------------------

    def _start_record(self, msg: MessageAndMetadata) -> None:
        parent: Context | None = None
        links: list[Link] | None = None
        if msg.headers:
            ctx = creation_context(msg.headers)
            if ctx is not None:
                links = [Link(trace.get_current_span(ctx).get_span_context())]
                if self._producer_as_parent:
                    parent = ctx
        span = self._tracer.start_span(
            f"{PROCESS} {msg.topic}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=record_attributes(msg, self._group_id, self._client_id),
            links=links,
        )
        self._attach(span, parent, ((msg.topic, msg.partition),))

    def _start_batch(self, records: Sequence[MessageAndMetadata]) -> None:
        span = self._tracer.start_span(
            span_name(records),
            kind=SpanKind.CONSUMER,
            attributes=batch_attributes(records, self._group_id, self._client_id),
            links=[Link(sc) for sc in _distinct_creation_spans(records)],
        )
        partitions = tuple(dict.fromkeys((msg.topic, msg.partition) for msg in records))
        self._attach(span, None, partitions)

    def _attach(
        self, span: Span, parent: Context | None, partitions: tuple[tuple[str, int], ...]
    ) -> None:
        # The span becomes current in the reader's task: __anext__ (and the batches()
        # generator) run in the context of the task that awaits them.
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        open_ = _Open(span, token, _current_task(), partitions)
        self._current.set(open_)
        self._open[id(open_)] = open_

    def _end(self, open_: _Open, *, closing: bool = False) -> None:
        """End ``open_`` if not yet; restore the context if the calling task attached it.

        A task that only inherited ``open_`` (a child task started while it was current,
        whose context is a copy) forgets it without ending it, unless the connector closes:
        its owner ends it.
        """
        if self._current.get() is open_:
            self._current.set(None)
            if open_.task is _current_task():
                otel_context.detach(open_.token)
            elif not closing:
                return
        if not open_.ended:
            open_.ended = True
            self._open.pop(id(open_), None)
            open_.span.end()

    def __repr__(self) -> str:
        return (
            f"<TracingInterceptor group={self._group_id!r} open={len(self._open)}"
            f"{' closed' if self._closed else ''}>"
        )


def _group_attributes(group_id: str | None, client_id: str | None) -> Attributes:
    attributes: Attributes = {}
    if group_id is not None:
        attributes[MESSAGING_CONSUMER_GROUP_NAME] = group_id
    if client_id is not None:
        attributes[MESSAGING_CLIENT_ID] = client_id
    return attributes


def _distinct_creation_spans(records: Iterable[MessageAndMetadata]) -> list[SpanContext]:
    """The distinct producer span contexts of ``records``' headers, in record order."""
    seen: dict[tuple[int, int], SpanContext] = {}
    for msg in records:
        if not msg.headers:
            continue
        ctx = creation_context(msg.headers)
        if ctx is None:
            continue
        sc = trace.get_current_span(ctx).get_span_context()
        seen.setdefault((sc.trace_id, sc.span_id), sc)
    return list(seen.values())
