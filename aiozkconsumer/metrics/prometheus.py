"""Prometheus export: each connector's metrics as ``prometheus_client`` instruments.

The original's metrics are Yammer meters, timers and histograms; exporting those as they are
breaks Prometheus' conventions (client-side quantiles and moving averages, milliseconds, one
family holding both the per-topic series and their all-topics sum). So the export keeps
instruments of its own, named by Prometheus' rules, and the named registry
(:class:`~aiozkconsumer.metrics.ConsumerMetrics`) feeds them: when ``prometheus_client`` is
installed (``pip install 'aiozkconsumer[prometheus]'``), each registry holds a
:class:`PrometheusInstruments` — ``prometheus_client`` ``Counter``, ``Gauge`` and ``Histogram``
objects in a ``CollectorRegistry`` of its own — and binds every metric it creates to its
series there (a meter's marks increment a counter, a timer's durations are observed in
seconds, a gauge's callable is read on scrape). :class:`PrometheusCollector` exposes the
series of one or more registries, each family once.

The families (:data:`PROMETHEUS_FAMILIES`) follow https://prometheus.io/docs/practices/naming/:

- one prefix, ``kafka_consumer_`` (the original's ``kafka.consumer`` domain; its one
  ``kafka.server`` metric, ``ConsumerLag``, is a consumer metric too);
- meters become counters ending in ``_total``: compute rates with PromQL ``rate()``;
- timers become histograms in seconds (``_seconds``) and the response size a histogram in
  bytes (``_bytes``): aggregate them with ``histogram_quantile()``;
- the all-topics (all-brokers) metric and the per-topic (per-broker) metrics are separate
  families, ``kafka_consumer_messages_total`` and ``kafka_consumer_topic_messages_total``
  with a ``topic`` label, so that ``sum()`` over a family never counts a record twice;
- ``MinFetchRate`` is not exported: it is a client-side moving average, which PromQL computes
  from the per-broker fetch histogram's ``_count``.

Labels are the original's tags in snake_case (``clientId`` → ``client_id``, ``groupId`` →
``group_id``, ``threadId`` → ``thread_id``, ``topic``, ``partition``), and ``broker``
(``host:port``) for ``brokerHost`` and ``brokerPort``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

from .instruments import AnyMetric, Gauge, Meter, MetricName, Observer
from .specs import SPECS, spec_of

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client import Counter as PromCounter
    from prometheus_client import Gauge as PromGauge
    from prometheus_client import Histogram as PromHistogram
    from prometheus_client.core import Metric as PromMetric

    from .registry import ConsumerMetrics

__all__ = [
    "PROMETHEUS_FAMILIES",
    "PrometheusCollector",
    "PrometheusFamily",
    "PrometheusInstruments",
    "prometheus_family",
    "prometheus_labels",
]

FamilyType: TypeAlias = Literal["counter", "gauge", "histogram"]

_INSTALL: Final = (
    "Prometheus export needs prometheus_client: pip install 'aiozkconsumer[prometheus]'"
)


@dataclass(frozen=True, slots=True)
class PrometheusFamily:
    """One Prometheus family of the export.

    Attributes:
        name: the family's name as exposed (a counter's with its ``_total``).
        type: ``"counter"``, ``"gauge"`` or ``"histogram"``.
        help: what it counts or measures, without a final period (the HELP text adds the
            original's MBean name).
        labels: label names, in order.
        divisor: the instrument's values are divided by it (1000: milliseconds to seconds).
        buckets: a histogram's bucket upper bounds in the family's unit (``+Inf`` is added).
    """

    name: str
    type: FamilyType
    help: str
    labels: tuple[str, ...]
    divisor: float = 1.0
    buckets: tuple[float, ...] = ()


# Fetches long-poll up to fetch.wait.max.ms (100 ms by default); rebalances back off
# rebalance.backoff.ms (2 s) between attempts; throttling is mostly 0, which le="0" counts.
_FETCH_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_REBALANCE_S: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_THROTTLE_S: Final = (0.0, 0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0)
_KIB: Final = 1024.0
_RESPONSE_BYTES: Final = (0.0, *(_KIB * 4**i for i in range(10)))  # 0, 1 KiB, 4 KiB .. 256 MiB

_C: Final = ("client_id",)
_CT: Final = ("client_id", "topic")
_CB: Final = ("client_id", "broker")
_ALL_TOPICS: Final = ", all topics"
_PER_TOPIC: Final = ", per topic"
_ALL_BROKERS: Final = ", all brokers"
_PER_BROKER: Final = ", per broker"

_MESSAGES_HELP: Final = "Records handed to the application by the streams"
_BYTES_HELP: Final = "Bytes of fetched record data enqueued for the streams"
_OWNED_HELP: Final = "Partitions this consumer owns"
_CORRUPT_HELP: Final = "Fetched record batches whose CRC did not match (never delivered)"
_FETCH_HELP: Final = "Fetch request round-trip time in seconds"
_THROTTLE_HELP: Final = "Quota throttle time brokers reported in fetch responses, in seconds"
_SIZE_HELP: Final = "Record bytes per fetch response"

PROMETHEUS_FAMILIES: Final[dict[tuple[str, bool], PrometheusFamily]] = {
    ("MessagesPerSec", False): PrometheusFamily(
        "kafka_consumer_messages_total", "counter", _MESSAGES_HELP + _ALL_TOPICS, _C
    ),
    ("MessagesPerSec", True): PrometheusFamily(
        "kafka_consumer_topic_messages_total", "counter", _MESSAGES_HELP + _PER_TOPIC, _CT
    ),
    ("BytesPerSec", False): PrometheusFamily(
        "kafka_consumer_bytes_total", "counter", _BYTES_HELP + _ALL_TOPICS, _C
    ),
    ("BytesPerSec", True): PrometheusFamily(
        "kafka_consumer_topic_bytes_total", "counter", _BYTES_HELP + _PER_TOPIC, _CT
    ),
    ("CorruptBatchesPerSec", False): PrometheusFamily(
        "kafka_consumer_corrupt_batches_total", "counter", _CORRUPT_HELP + _ALL_TOPICS, _C
    ),
    ("CorruptBatchesPerSec", True): PrometheusFamily(
        "kafka_consumer_topic_corrupt_batches_total", "counter", _CORRUPT_HELP + _PER_TOPIC, _CT
    ),
    ("ZooKeeperCommitsPerSec", False): PrometheusFamily(
        "kafka_consumer_zookeeper_commits_total",
        "counter",
        "Offsets written to ZooKeeper (unchanged offsets are not written)",
        _C,
    ),
    ("KafkaCommitsPerSec", False): PrometheusFamily(
        "kafka_consumer_kafka_commits_total",
        "counter",
        "Partitions Kafka accepted in offset commits",
        _C,
    ),
    ("RebalanceRateAndTime", False): PrometheusFamily(
        "kafka_consumer_rebalance_duration_seconds",
        "histogram",
        "Rebalances and their duration in seconds, every attempt included",
        _C,
        divisor=1000.0,
        buckets=_REBALANCE_S,
    ),
    ("OwnedPartitionsCount", False): PrometheusFamily(
        "kafka_consumer_owned_partitions",
        "gauge",
        _OWNED_HELP + _ALL_TOPICS,
        ("client_id", "group_id"),
    ),
    ("OwnedPartitionsCount", True): PrometheusFamily(
        "kafka_consumer_topic_owned_partitions",
        "gauge",
        _OWNED_HELP + _PER_TOPIC,
        ("client_id", "group_id", "topic"),
    ),
    ("FetchQueueSize", True): PrometheusFamily(
        "kafka_consumer_fetch_queue_chunks",
        "gauge",
        "Fetched chunks waiting in a stream's queue",
        ("client_id", "topic", "thread_id"),
    ),
    ("FetchRequestRateAndTimeMs", False): PrometheusFamily(
        "kafka_consumer_fetch_request_duration_seconds",
        "histogram",
        _FETCH_HELP + _ALL_BROKERS,
        _C,
        divisor=1000.0,
        buckets=_FETCH_S,
    ),
    ("FetchRequestRateAndTimeMs", True): PrometheusFamily(
        "kafka_consumer_broker_fetch_request_duration_seconds",
        "histogram",
        _FETCH_HELP + _PER_BROKER,
        _CB,
        divisor=1000.0,
        buckets=_FETCH_S,
    ),
    ("FetchRequestThrottleRateAndTimeMs", False): PrometheusFamily(
        "kafka_consumer_fetch_throttle_duration_seconds",
        "histogram",
        _THROTTLE_HELP + _ALL_BROKERS,
        _C,
        divisor=1000.0,
        buckets=_THROTTLE_S,
    ),
    ("FetchRequestThrottleRateAndTimeMs", True): PrometheusFamily(
        "kafka_consumer_broker_fetch_throttle_duration_seconds",
        "histogram",
        _THROTTLE_HELP + _PER_BROKER,
        _CB,
        divisor=1000.0,
        buckets=_THROTTLE_S,
    ),
    ("FetchResponseSize", False): PrometheusFamily(
        "kafka_consumer_fetch_response_size_bytes",
        "histogram",
        _SIZE_HELP + _ALL_BROKERS,
        _C,
        buckets=_RESPONSE_BYTES,
    ),
    ("FetchResponseSize", True): PrometheusFamily(
        "kafka_consumer_broker_fetch_response_size_bytes",
        "histogram",
        _SIZE_HELP + _PER_BROKER,
        _CB,
        buckets=_RESPONSE_BYTES,
    ),
    ("ConsumerLag", True): PrometheusFamily(
        "kafka_consumer_fetch_lag_records",
        "gauge",
        "High watermark minus fetch offset of a partition after its last fetch "
        "(-1 before the first)",
        ("client_id", "topic", "partition"),
    ),
    ("MaxLag", False): PrometheusFamily(
        "kafka_consumer_max_fetch_lag_records",
        "gauge",
        "Largest fetch lag of this consumer's partitions (0 without any)",
        _C,
    ),
}
"""Every family of the export, by the original's metric name and whether the metric is the
per-topic (per-broker) one: ``("MessagesPerSec", True)`` is
``kafka_consumer_topic_messages_total``. ``MinFetchRate`` has none."""

_SCOPE_TAGS: Final = frozenset({"topic", "brokerHost"})
_LABELS: Final = {"clientId": "client_id", "groupId": "group_id", "threadId": "thread_id"}
_ORIGINAL: Final = {s.name: f"{s.group}:type={s.type},name={s.name}" for s in SPECS.values()}


def _definition(metric_name: MetricName) -> PrometheusFamily | None:
    spec = spec_of(metric_name)
    scoped = any(key in _SCOPE_TAGS for key, _ in metric_name.tags)
    return PROMETHEUS_FAMILIES.get((spec.name, scoped))


def prometheus_family(metric_name: MetricName) -> str | None:
    """The Prometheus family that exports a metric, named as ``prometheus_client`` names it.

    Args:
        metric_name: the name of a metric of a :class:`ConsumerMetrics`.

    Returns:
        The family name, a counter's without its ``_total`` (as the parser and
        ``prometheus_client``'s ``Metric.name`` have it): ``"kafka_consumer_topic_messages"``
        for ``MessagesPerSec`` of a topic, ``"kafka_consumer_rebalance_duration_seconds"``
        for ``RebalanceRateAndTime``; ``None`` for ``MinFetchRate``, which is not exported.

    Raises:
        KeyError: the name is not one of the original's consumer metrics.
    """
    family = _definition(metric_name)
    if family is None:
        return None
    return family.name.removesuffix("_total") if family.type == "counter" else family.name


def prometheus_labels(metric_name: MetricName) -> dict[str, str]:
    """The Prometheus labels of a metric: its tags in snake_case, the broker as ``host:port``.

    Args:
        metric_name: the metric's name.

    Returns:
        e.g. ``{"client_id": "c", "topic": "t", "partition": "0"}``.
    """
    labels: dict[str, str] = {}
    tags = dict(metric_name.tags)
    for key, value in metric_name.tags:
        if key == "brokerHost":
            port = tags.get("brokerPort")
            labels["broker"] = f"{value}:{port}" if port else value
        elif key != "brokerPort":
            labels[_LABELS.get(key, key)] = value
    return labels


def _gauge_reader(gauge: Gauge) -> Callable[[], float]:
    return lambda: gauge.value


def _counter_observer(inc: Callable[[float], None]) -> Observer:
    def observe(n: float) -> None:
        # A Prometheus counter only goes up; a Yammer meter accepted any mark.
        if n > 0:
            inc(n)

    return observe


def _scaled(observe: Callable[[float], None], divisor: float) -> Observer:
    if divisor == 1.0:
        return observe
    return lambda value: observe(value / divisor)


class PrometheusInstruments:
    """One connector's Prometheus series: ``prometheus_client`` instruments and their registry.

    :class:`ConsumerMetrics` makes one (when ``prometheus_client`` is installed), binds each
    metric it creates (:meth:`bind`) and unbinds each it removes; :class:`PrometheusCollector`
    reads :meth:`collect`. Every family exists from the start; a series, from its metric's
    creation until its removal.

    Args:
        lock: the registry's lock, held while collecting (gauges read the registry's state).

    Raises:
        ImportError: ``prometheus_client`` is not installed.
    """

    def __init__(self, lock: threading.RLock) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        except ImportError as e:
            raise ImportError(_INSTALL) from e
        self._lock = lock
        self.registry: CollectorRegistry = CollectorRegistry(auto_describe=False)
        """The registry holding the instruments (one per connector, never the global one)."""
        self._counters: dict[str, PromCounter] = {}
        self._gauges: dict[str, PromGauge] = {}
        self._histograms: dict[str, PromHistogram] = {}
        self._all: dict[str, PromCounter | PromGauge | PromHistogram] = {}
        for (original, _), family in PROMETHEUS_FAMILIES.items():
            # CorruptBatchesPerSec is new (check.crcs): JMX-style name, not the original's.
            origin = "JMX name" if original == "CorruptBatchesPerSec" else "Originally"
            doc = f"{family.help}. {origin} {_ORIGINAL[original]}."
            instrument: PromCounter | PromGauge | PromHistogram
            if family.type == "counter":
                instrument = self._counters[family.name] = Counter(
                    family.name, doc, family.labels, registry=self.registry
                )
            elif family.type == "gauge":
                instrument = self._gauges[family.name] = Gauge(
                    family.name, doc, family.labels, registry=self.registry
                )
            else:
                instrument = self._histograms[family.name] = Histogram(
                    family.name, doc, family.labels, registry=self.registry, buckets=family.buckets
                )
            self._all[family.name] = instrument

    @staticmethod
    def _label_values(family: PrometheusFamily, metric_name: MetricName) -> list[str]:
        labels = prometheus_labels(metric_name)
        # An empty tag is left out of the MBean name; an empty label is the same as none.
        return [labels.get(label, "") for label in family.labels]

    def bind(self, metric: AnyMetric) -> None:
        """Create the metric's series and feed it from the metric.

        A meter's marks increment the counter; a timer's or histogram's updates are observed
        (durations in seconds); a gauge's value is read when collected. A metric without a
        family (``MinFetchRate``) is left alone.

        Args:
            metric: a metric the registry just created.
        """
        family = _definition(metric.metric_name)
        if family is None:
            return
        values = self._label_values(family, metric.metric_name)
        if isinstance(metric, Gauge):
            self._gauges[family.name].labels(*values).set_function(_gauge_reader(metric))
        elif isinstance(metric, Meter):
            metric.observer = _counter_observer(self._counters[family.name].labels(*values).inc)
        else:
            child = self._histograms[family.name].labels(*values)
            metric.observer = _scaled(child.observe, family.divisor)

    def unbind(self, metric_name: MetricName) -> None:
        """Remove a metric's series (a metric still marked afterwards updates it unseen).

        Args:
            metric_name: the name of a metric bound before.
        """
        family = _definition(metric_name)
        if family is None:
            return
        self._all[family.name].remove(*self._label_values(family, metric_name))

    def clear(self) -> None:
        """Remove every series (the families stay, empty)."""
        for instrument in self._all.values():
            instrument.clear()

    def collect(self) -> list[PromMetric]:
        """The families and their current samples, gauges read now, under the registry's lock."""
        with self._lock:
            return list(self.registry.collect())

    def __repr__(self) -> str:
        return f"<PrometheusInstruments [{len(PROMETHEUS_FAMILIES)} families]>"


class PrometheusCollector:
    """A ``prometheus_client`` collector for the metrics of one or more consumers.

    Each family appears once even when several registries have series of it (they differ by
    their ``client_id`` label), so use one collector for all the connectors of a process.
    Families without a series are left out, and so are the ``_created`` samples (the text
    format would expose each as a gauge of its own, a series per series, for no query of
    ours). It may run in the exporter's thread: it takes each registry's lock, and gauge
    callables must be safe to call from there (reading a number or a queue's size is).

    Args:
        registries: the consumers' metrics.

    Raises:
        ImportError: ``prometheus_client`` is not installed; install the ``prometheus``
            extra (``pip install 'aiozkconsumer[prometheus]'``).
    """

    def __init__(self, registries: Iterable[ConsumerMetrics]) -> None:
        try:
            from prometheus_client.core import Metric as PromMetric
        except ImportError as e:
            raise ImportError(_INSTALL) from e
        self._family_cls = PromMetric
        self.registries = tuple(registries)
        sources = [registry._prometheus for registry in self.registries]
        if any(source is None for source in sources):
            raise ImportError(_INSTALL)
        self._sources = tuple(source for source in sources if source is not None)

    def describe(self) -> list[PromMetric]:
        """Nothing: the series come and go with partitions and connectors.

        Returning an empty list also keeps ``CollectorRegistry.register`` from calling
        :meth:`collect` at registration, and lets the collector of a closed connector (which
        has no series left) stay registered beside its successor's.
        """
        return []

    def collect(self) -> list[PromMetric]:
        """The current samples of every family that has a series, one family per name."""
        families: dict[str, PromMetric] = {}
        for source in self._sources:
            for family in source.collect():
                created = family.name + "_created"
                samples = [s for s in family.samples if s.name != created]
                if not samples:
                    continue
                merged = families.get(family.name)
                if merged is None:
                    merged = families[family.name] = self._family_cls(
                        family.name, family.documentation, family.type, family.unit
                    )
                merged.samples.extend(samples)
        return list(families.values())

    def __repr__(self) -> str:
        return f"<PrometheusCollector {list(self.registries)}>"
