"""The named registry: :class:`ConsumerMetrics`, the original consumer's metrics by their names.

The old consumer reported through Yammer metrics (``KafkaMetricsGroup``); operators know its
MBean names. :class:`ConsumerMetrics` is a small, self-contained registry (one per connector,
no global state) of the same metrics, with the same kinds and names
(``reference/old-consumer.md`` §8; ``C`` client id, ``G`` group id, ``T`` topic):

- ``messages_per_sec(topic=None)`` — meter
  ``kafka.consumer:type=ConsumerTopicMetrics,name=MessagesPerSec,clientId=C[,topic=T]``
- ``bytes_per_sec(topic=None)`` — meter
  ``kafka.consumer:type=ConsumerTopicMetrics,name=BytesPerSec,clientId=C[,topic=T]``
- ``corrupt_batches_per_sec(topic=None)`` — meter (new: the original had no CRC meter)
  ``kafka.consumer:type=ConsumerTopicMetrics,name=CorruptBatchesPerSec,clientId=C[,topic=T]``
- ``zookeeper_commits_per_sec()`` — meter
  ``kafka.consumer:type=ZookeeperConsumerConnector,name=ZooKeeperCommitsPerSec,clientId=C``
- ``kafka_commits_per_sec()`` — meter
  ``kafka.consumer:type=ZookeeperConsumerConnector,name=KafkaCommitsPerSec,clientId=C``
- ``rebalance_rate_and_time()`` — timer
  ``kafka.consumer:type=ZookeeperConsumerConnector,name=RebalanceRateAndTime,clientId=C``
- ``owned_partitions_count(topic, fn)`` — gauge
  ``kafka.consumer:type=ZookeeperConsumerConnector,name=OwnedPartitionsCount,clientId=C,``
  ``groupId=G[,topic=T]``
- ``fetch_queue_size(topic, thread_id, fn)`` — gauge
  ``kafka.consumer:type=ZookeeperConsumerConnector,name=FetchQueueSize,clientId=C,topic=T,``
  ``threadId=N``
- ``fetch_request_rate_and_time(broker=None)`` — timer
  ``kafka.consumer:type=FetchRequestAndResponseMetrics,name=FetchRequestRateAndTimeMs,``
  ``clientId=C[,brokerHost=H,brokerPort=P]``
- ``fetch_request_throttle_rate_and_time(broker=None)`` — timer
  ``kafka.consumer:type=FetchRequestAndResponseMetrics,``
  ``name=FetchRequestThrottleRateAndTimeMs,clientId=C[,brokerHost=H,brokerPort=P]``
- ``fetch_response_size(broker=None)`` — histogram
  ``kafka.consumer:type=FetchRequestAndResponseMetrics,name=FetchResponseSize,clientId=C``
  ``[,brokerHost=H,brokerPort=P]``
- ``consumer_lag(topic, partition, fn)`` — gauge
  ``kafka.server:type=FetcherLagMetrics,name=ConsumerLag,clientId=C,topic=T,partition=P``
- ``max_lag(fn=None)`` — gauge
  ``kafka.consumer:type=ConsumerFetcherManager,name=MaxLag,clientId=C``
- ``min_fetch_rate(fn=None)`` — gauge
  ``kafka.consumer:type=ConsumerFetcherManager,name=MinFetchRate,clientId=C``

Tags keep the original's order and, as ``KafkaMetricsGroup.toMBeanName``, empty tag values are
dropped (``group_id=""`` leaves ``groupId`` out). Tag values are not quoted: the original
restricted ``client.id`` and topic names to ``[a-zA-Z0-9._-]``.

The metric kinds themselves are in :mod:`aiozkconsumer.metrics.instruments`. With
``prometheus_client`` installed, the registry also binds every metric it creates to its series
among ``prometheus_client`` instruments of its own (:mod:`aiozkconsumer.metrics.prometheus`,
whose families follow Prometheus' naming rules rather than these names).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator

from .instruments import (
    DEFAULT_RESERVOIR_SIZE,
    AnyMetric,
    Clock,
    Gauge,
    GaugeFn,
    Histogram,
    Meter,
    Metric,
    MetricName,
    Tags,
    Timer,
)
from .prometheus import PrometheusCollector, PrometheusInstruments
from .specs import (
    _BYTES,
    _CORRUPT_BATCHES,
    _FETCH_TIME,
    _KAFKA_COMMITS,
    _LAG,
    _MAX_LAG,
    _MESSAGES,
    _MIN_FETCH_RATE,
    _OWNED,
    _QUEUE,
    _REBALANCE,
    _RESPONSE_SIZE,
    _THROTTLE,
    _ZK_COMMITS,
    SPECS,
    Kind,
    MetricSpec,
    spec_of,
)

__all__ = ["SPECS", "ConsumerMetrics", "Kind", "MetricSpec", "spec_of"]


def _tags(*pairs: tuple[str, str | int | None]) -> Tags:
    return tuple((k, str(v)) for k, v in pairs if v is not None and v != "")


def _broker_tags(broker: str | None) -> tuple[tuple[str, str | None], tuple[str, str | None]]:
    """``host:port`` → ``brokerHost``/``brokerPort`` tags (a bare host keeps no port)."""
    if broker is None:
        return ("brokerHost", None), ("brokerPort", None)
    host, sep, port = broker.rpartition(":")
    if sep and host and port.isdigit():
        return ("brokerHost", host), ("brokerPort", port)
    return ("brokerHost", broker), ("brokerPort", None)


# ---- the registry -----------------------------------------------------------------------


class ConsumerMetrics:
    """The metrics of one consumer, named as the original's (``KafkaMetricsGroup``).

    Meter, timer and histogram methods return the existing metric of that name or create it
    (as Yammer's ``newMeter``); cache the returned object on hot paths (a lookup costs a
    dictionary access, ``mark()`` an addition). Gauge methods register a callable, replacing
    the one a gauge of that name had (Yammer's ``newGauge`` kept the first), so a gauge can
    follow state that a rebalance rebuilds. Everything but reads runs in the event loop.

    With ``prometheus_client`` installed, every metric also feeds its Prometheus series
    (:meth:`collector`); without it the registry works the same, and only :meth:`collector`
    fails.

    Args:
        client_id: ``client.id`` (the ``clientId`` tag).
        group_id: ``group.id`` (the ``groupId`` tag); ``""`` leaves the tag out.
        clock: monotonic clock in seconds, for rates and ``Timer.time()``; tests inject one.
        reservoir_size: values kept by each histogram and timer for percentiles.

    Raises:
        ValueError: ``reservoir_size`` is not positive.
    """

    def __init__(
        self,
        client_id: str,
        group_id: str = "",
        *,
        clock: Clock = time.monotonic,
        reservoir_size: int = DEFAULT_RESERVOIR_SIZE,
    ) -> None:
        if reservoir_size < 1:
            raise ValueError(f"reservoir_size must be positive, got {reservoir_size}")
        self.client_id = client_id
        self.group_id = group_id
        self.clock = clock
        self._reservoir_size = reservoir_size
        self._lock = threading.RLock()
        self._metrics: dict[MetricName, AnyMetric] = {}
        # (metric name, topic or broker) -> metric: cheap keys for get-or-create lookups,
        # which callers may make per record.
        self._meters: dict[tuple[str, str | None], Meter] = {}
        self._timers: dict[tuple[str, str | None], Timer] = {}
        self._histograms: dict[tuple[str, str | None], Histogram] = {}
        self._prometheus: PrometheusInstruments | None
        try:
            self._prometheus = PrometheusInstruments(self._lock)
        except ImportError:
            self._prometheus = None

    # ---- lookup -----------------------------------------------------------------------

    def _name(self, spec: MetricSpec, tags: Tags) -> MetricName:
        return MetricName(spec.group, spec.type, spec.name, tags)

    def _created(self, metric: AnyMetric) -> None:
        self._metrics[metric.metric_name] = metric
        if self._prometheus is not None:
            self._prometheus.bind(metric)

    def _new_meter(self, spec: MetricSpec, key: tuple[str, str | None], tags: Tags) -> Meter:
        name = self._name(spec, tags)
        meter = self._metrics.get(name)
        if not isinstance(meter, Meter):
            meter = Meter(name, self._lock, self.clock)
            self._created(meter)
        self._meters[key] = meter
        return meter

    def _new_timer(self, spec: MetricSpec, key: tuple[str, str | None], tags: Tags) -> Timer:
        name = self._name(spec, tags)
        timer = self._metrics.get(name)
        if not isinstance(timer, Timer):
            timer = Timer(name, self._lock, self.clock, self._reservoir_size)
            self._created(timer)
        self._timers[key] = timer
        return timer

    def _gauge(self, spec: MetricSpec, tags: Tags, fn: GaugeFn) -> Gauge:
        name = self._name(spec, tags)
        existing = self._metrics.get(name)
        if isinstance(existing, Gauge):
            existing.fn = fn
            return existing
        gauge = Gauge(name, self._lock, fn)
        self._created(gauge)
        return gauge

    # ---- meters -----------------------------------------------------------------------

    def messages_per_sec(self, topic: str | None = None) -> Meter:
        """``ConsumerTopicMetrics,name=MessagesPerSec``: records handed to the application.

        As ``ConsumerIterator.next``, mark both the topic's meter and the all-topics meter
        (``topic=None``) once per record.

        Args:
            topic: the topic, or ``None`` for all topics.

        Returns:
            The meter (created on first use).
        """
        meter = self._meters.get(("MessagesPerSec", topic))
        if meter is None:
            meter = self._new_meter(
                _MESSAGES,
                ("MessagesPerSec", topic),
                _tags(("clientId", self.client_id), ("topic", topic)),
            )
        return meter

    def bytes_per_sec(self, topic: str | None = None) -> Meter:
        """``ConsumerTopicMetrics,name=BytesPerSec``: record bytes enqueued for the streams.

        As ``PartitionTopicInfo.enqueue``, mark the topic's and the all-topics meter with the
        size of each enqueued chunk.

        Args:
            topic: the topic, or ``None`` for all topics.

        Returns:
            The meter (created on first use).
        """
        meter = self._meters.get(("BytesPerSec", topic))
        if meter is None:
            meter = self._new_meter(
                _BYTES,
                ("BytesPerSec", topic),
                _tags(("clientId", self.client_id), ("topic", topic)),
            )
        return meter

    def corrupt_batches_per_sec(self, topic: str | None = None) -> Meter:
        """``ConsumerTopicMetrics,name=CorruptBatchesPerSec``: record batches failing their CRC.

        New (``check.crcs``): mark the topic's and the all-topics meter once per fetched
        record batch whose CRC does not match, whether ``crc.error.action`` raises or skips.

        Args:
            topic: the topic, or ``None`` for all topics.

        Returns:
            The meter (created on first use).
        """
        meter = self._meters.get(("CorruptBatchesPerSec", topic))
        if meter is None:
            meter = self._new_meter(
                _CORRUPT_BATCHES,
                ("CorruptBatchesPerSec", topic),
                _tags(("clientId", self.client_id), ("topic", topic)),
            )
        return meter

    def zookeeper_commits_per_sec(self) -> Meter:
        """``ZookeeperConsumerConnector,name=ZooKeeperCommitsPerSec``: offset writes to ZooKeeper.

        Mark once per offset node actually written (``commitOffsetToZooKeeper``).

        Returns:
            The meter (created on first use).
        """
        meter = self._meters.get(("ZooKeeperCommitsPerSec", None))
        if meter is None:
            meter = self._new_meter(
                _ZK_COMMITS, ("ZooKeeperCommitsPerSec", None), _tags(("clientId", self.client_id))
            )
        return meter

    def kafka_commits_per_sec(self) -> Meter:
        """``ZookeeperConsumerConnector,name=KafkaCommitsPerSec``: partitions committed to Kafka.

        Mark with the number of partitions of each successful OffsetCommit request.

        Returns:
            The meter (created on first use).
        """
        meter = self._meters.get(("KafkaCommitsPerSec", None))
        if meter is None:
            meter = self._new_meter(
                _KAFKA_COMMITS, ("KafkaCommitsPerSec", None), _tags(("clientId", self.client_id))
            )
        return meter

    # ---- timers and histograms --------------------------------------------------------

    def rebalance_rate_and_time(self) -> Timer:
        """``ZookeeperConsumerConnector,name=RebalanceRateAndTime``: rebalances, in ms.

        Wrap each ``syncedRebalance`` (every attempt of one rebalance, KAFKA-1446) in
        ``with metrics.rebalance_rate_and_time().time():``.

        Returns:
            The timer (created on first use).
        """
        timer = self._timers.get(("RebalanceRateAndTime", None))
        if timer is None:
            timer = self._new_timer(
                _REBALANCE, ("RebalanceRateAndTime", None), _tags(("clientId", self.client_id))
            )
        return timer

    def fetch_request_rate_and_time(self, broker: str | None = None) -> Timer:
        """``FetchRequestAndResponseMetrics,name=FetchRequestRateAndTimeMs``: fetch round trips.

        As ``SimpleConsumer.fetch``, update the broker's timer and the all-brokers timer
        (``broker=None``) with each fetch's duration in milliseconds.

        Args:
            broker: ``host:port`` of the broker (``brokerHost``/``brokerPort`` tags), or
                ``None`` for all brokers.

        Returns:
            The timer (created on first use).
        """
        timer = self._timers.get(("FetchRequestRateAndTimeMs", broker))
        if timer is None:
            timer = self._new_timer(
                _FETCH_TIME,
                ("FetchRequestRateAndTimeMs", broker),
                _tags(("clientId", self.client_id), *_broker_tags(broker)),
            )
        return timer

    def fetch_request_throttle_rate_and_time(self, broker: str | None = None) -> Timer:
        """``FetchRequestAndResponseMetrics,name=FetchRequestThrottleRateAndTimeMs``.

        Update with the ``throttle_time_ms`` of each fetch response (0.9+, KAFKA-2136).

        Args:
            broker: ``host:port`` of the broker, or ``None`` for all brokers.

        Returns:
            The timer (created on first use).
        """
        timer = self._timers.get(("FetchRequestThrottleRateAndTimeMs", broker))
        if timer is None:
            timer = self._new_timer(
                _THROTTLE,
                ("FetchRequestThrottleRateAndTimeMs", broker),
                _tags(("clientId", self.client_id), *_broker_tags(broker)),
            )
        return timer

    def fetch_response_size(self, broker: str | None = None) -> Histogram:
        """``FetchRequestAndResponseMetrics,name=FetchResponseSize``: bytes per fetch response.

        Args:
            broker: ``host:port`` of the broker, or ``None`` for all brokers.

        Returns:
            The histogram (created on first use).
        """
        histogram = self._histograms.get(("FetchResponseSize", broker))
        if histogram is None:
            name = self._name(
                _RESPONSE_SIZE, _tags(("clientId", self.client_id), *_broker_tags(broker))
            )
            found = self._metrics.get(name)
            if isinstance(found, Histogram):
                histogram = found
            else:
                histogram = Histogram(name, self._lock, self._reservoir_size)
                self._created(histogram)
            self._histograms[("FetchResponseSize", broker)] = histogram
        return histogram

    # ---- gauges -----------------------------------------------------------------------

    def owned_partitions_count(self, topic: str | None, value: GaugeFn) -> Gauge:
        """Register ``ZookeeperConsumerConnector,name=OwnedPartitionsCount``.

        The total (``topic=None``) stays registered and reads 0 after a release; per-topic
        gauges are removed (:meth:`remove`) when their partitions are released.

        Args:
            topic: the topic, or ``None`` for all owned partitions.
            value: returns the number of owned partitions.

        Returns:
            The gauge.
        """
        return self._gauge(
            _OWNED,
            _tags(("clientId", self.client_id), ("groupId", self.group_id), ("topic", topic)),
            value,
        )

    def fetch_queue_size(self, topic: str, thread_id: int, value: GaugeFn) -> Gauge:
        """Register ``ZookeeperConsumerConnector,name=FetchQueueSize`` for one stream.

        Args:
            topic: the stream's topic (of a static subscription; the wildcard streams'
                topic in the original was the filter's regex).
            thread_id: the stream's thread index (``ConsumerThreadId.thread_id``).
            value: returns the number of chunks in the stream's queue (``queue.qsize``).

        Returns:
            The gauge.
        """
        return self._gauge(
            _QUEUE,
            _tags(("clientId", self.client_id), ("topic", topic), ("threadId", thread_id)),
            value,
        )

    def consumer_lag(self, topic: str, partition: int, value: GaugeFn) -> Gauge:
        """Register ``kafka.server:type=FetcherLagMetrics,name=ConsumerLag`` for a partition.

        As the original, this is the *fetch* lag: high watermark minus fetch offset after the
        partition's last fetch (-1 before the first); under ``isolation.level=read_committed``
        the last stable offset minus fetch offset (as the Java client's ``records-lag``).
        Remove it when the partition leaves its fetcher.

        Args:
            topic: the topic.
            partition: the partition number.
            value: returns the lag in records.

        Returns:
            The gauge.
        """
        return self._gauge(
            _LAG,
            _tags(("clientId", self.client_id), ("topic", topic), ("partition", partition)),
            value,
        )

    def max_lag(self, value: GaugeFn | None = None) -> Gauge:
        """Register ``ConsumerFetcherManager,name=MaxLag``.

        Args:
            value: returns the largest lag; by default, the largest value of the registered
                :meth:`consumer_lag` gauges, at least 0 (as the original's fold from 0).

        Returns:
            The gauge.
        """
        return self._gauge(
            _MAX_LAG, _tags(("clientId", self.client_id)), value or self._derived_max_lag
        )

    def min_fetch_rate(self, value: GaugeFn | None = None) -> Gauge:
        """Register ``ConsumerFetcherManager,name=MinFetchRate``.

        Args:
            value: returns the smallest fetch rate; by default, the smallest one-minute rate
                of the per-broker :meth:`fetch_request_rate_and_time` timers, 0 without any
                (the original took it over its fetcher threads).

        Returns:
            The gauge.
        """
        return self._gauge(
            _MIN_FETCH_RATE,
            _tags(("clientId", self.client_id)),
            value or self._derived_min_fetch_rate,
        )

    def _derived_max_lag(self) -> float:
        lags = [
            m.value
            for m in list(self._metrics.values())
            if isinstance(m, Gauge) and m.metric_name.name == _LAG.name
        ]
        return max([0.0, *(v for v in lags if not math.isnan(v))])

    def _derived_min_fetch_rate(self) -> float:
        rates = [
            m.meter.one_minute_rate
            for m in list(self._metrics.values())
            if isinstance(m, Timer)
            and m.metric_name.name == _FETCH_TIME.name
            and any(k == "brokerHost" for k, _ in m.metric_name.tags)
        ]
        return min(rates) if rates else 0.0

    # ---- registry ---------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of registered metrics (the original's ``yammer-metrics-count``)."""
        return len(self._metrics)

    def __iter__(self) -> Iterator[AnyMetric]:
        """The registered metrics, in registration order."""
        return iter(list(self._metrics.values()))

    def get(self, mbean_name: str) -> AnyMetric | None:
        """The registered metric with this MBean name, or ``None``."""
        for name, metric in list(self._metrics.items()):
            if name.mbean_name == mbean_name:
                return metric
        return None

    def record_fetch(
        self, broker: str, elapsed_ms: float, response_bytes: int, throttle_ms: float
    ) -> None:
        """Report one FetchRequest as ``FetchRequestAndResponseStats`` did.

        Updates ``FetchRequestRateAndTimeMs``, ``FetchResponseSize`` and
        ``FetchRequestThrottleRateAndTimeMs`` for the broker and for all brokers.

        Args:
            broker: ``"host:port"`` of the broker fetched from.
            elapsed_ms: request time, milliseconds.
            response_bytes: record bytes in the response.
            throttle_ms: the broker's quota throttle time, milliseconds.
        """
        for which in (broker, None):
            self.fetch_request_rate_and_time(which).update(elapsed_ms)
            self.fetch_response_size(which).update(response_bytes)
            self.fetch_request_throttle_rate_and_time(which).update(throttle_ms)

    def remove(self, metric: Metric) -> bool:
        """Unregister a metric (e.g. a partition's ``ConsumerLag`` when it is released).

        A removed meter or timer that is still marked counts silently; asking the registry
        for it again creates a new one (and a new Prometheus series, from 0).

        Args:
            metric: a metric this registry returned.

        Returns:
            ``True`` if it was registered.
        """
        with self._lock:
            if self._metrics.get(metric.metric_name) is not metric:
                return False
            del self._metrics[metric.metric_name]
            if self._prometheus is not None:
                self._prometheus.unbind(metric.metric_name)
            for cache in (self._meters, self._timers, self._histograms):
                for key in [k for k, cached in cache.items() if cached is metric]:
                    del cache[key]
            return True

    def remove_all(self) -> None:
        """Unregister every metric (``KafkaMetricsGroup.removeAllConsumerMetrics``, KAFKA-1567).

        Called on shutdown so that a process creating connectors over and over does not leak;
        the Prometheus series go too.
        """
        with self._lock:
            if self._prometheus is not None:
                self._prometheus.clear()
            self._metrics.clear()
            self._meters.clear()
            self._timers.clear()
            self._histograms.clear()

    def snapshot(self) -> dict[str, dict[str, float]]:
        """Every metric's current values, read now (gauges call their callables).

        Returns:
            ``{mbean name: {JMX attribute: value}}``, fresh plain dictionaries the caller
            owns. Attributes: meters ``Count``, ``MeanRate``, ``OneMinuteRate``,
            ``FiveMinuteRate``, ``FifteenMinuteRate`` (events/s); histograms ``Count``,
            ``Min``, ``Max``, ``Mean``, ``StdDev``, ``50thPercentile`` … ``999thPercentile``;
            timers both (durations in ms); gauges ``Value``.
        """
        with self._lock:
            return {m.mbean_name: m.attributes() for m in list(self._metrics.values())}

    def collector(self) -> PrometheusCollector:
        """A ``prometheus_client`` collector exposing these metrics by Prometheus' conventions.

        Counters ending in ``_total``, histograms in seconds and bytes, the per-topic
        (per-broker) series in families apart from the all-topics (all-brokers) ones; the
        families are :data:`~aiozkconsumer.metrics.PROMETHEUS_FAMILIES`, the rules in
        :mod:`aiozkconsumer.metrics.prometheus` (:func:`prometheus_family` and
        :func:`prometheus_labels` name a metric's family and labels).

        Register it with ``prometheus_client.REGISTRY.register(metrics.collector())`` (or a
        ``CollectorRegistry`` of your own). For several connectors in one process, register
        one ``PrometheusCollector([m1, m2, ...])`` instead, so each family is exposed once.

        Returns:
            The collector; it reads this registry on every scrape.

        Raises:
            ImportError: ``prometheus_client`` is not installed (the ``prometheus`` extra).
        """
        return PrometheusCollector([self])

    def __repr__(self) -> str:
        group = f", group {self.group_id}" if self.group_id else ""
        return f"<ConsumerMetrics client {self.client_id}{group} [{len(self)} metrics]>"
