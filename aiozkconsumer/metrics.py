"""Consumer metrics with the original's names, and their Prometheus export.

The old consumer reported through Yammer metrics (``KafkaMetricsGroup``); operators know its
MBean names. :class:`ConsumerMetrics` is a small, self-contained registry (one per connector,
no global state) of the same metrics, with the same kinds and names
(``reference/old-consumer.md`` §8; ``C`` client id, ``G`` group id, ``T`` topic):

- ``messages_per_sec(topic=None)`` — meter
  ``kafka.consumer:type=ConsumerTopicMetrics,name=MessagesPerSec,clientId=C[,topic=T]``
- ``bytes_per_sec(topic=None)`` — meter
  ``kafka.consumer:type=ConsumerTopicMetrics,name=BytesPerSec,clientId=C[,topic=T]``
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

Kinds, as Yammer's (metrics-core 2.2):

- :class:`Meter`: a count and 1-, 5- and 15-minute exponentially weighted moving average rates
  (events/second) ticked every 5 s, plus the mean rate since creation.
- :class:`Histogram`: a count and a sum of every value and, over a bounded reservoir of the
  most recent 1028 values (a sliding window; Yammer used an exponentially decaying sample of
  the same size), min, max, mean, standard deviation and percentiles.
- :class:`Timer`: a meter of events plus a histogram of their durations in milliseconds.
- :class:`Gauge`: a callable read when the gauge is read (snapshot, Prometheus scrape).

The hot path is cheap and lock-free (the connector runs in one event loop): ``Meter.mark``
adds to a counter; ``Timer.update`` / ``Histogram.update`` add to a counter and a sum and
append to a bounded deque. Rates are brought up to date lazily when read; events marked since
the last read are attributed to the first 5-second tick that elapsed, so a meter read less
often than every 5 s decays slightly differently from Yammer's ticker thread (they agree when
it is read at least every 5 s). Reads (``snapshot()``, rate properties, Prometheus collection)
hold the registry's lock, so a Prometheus exporter thread and the event loop can both read.

Prometheus (``pip install 'aiozkconsumer[prometheus]'``): :meth:`ConsumerMetrics.collector`
returns a ``prometheus_client`` collector. Family names are derived from the MBean name:
``<group, "." as "_">_<type in snake_case>_<name in snake_case>`` (``ZooKeeper`` is spelled
``zookeeper``), then by kind:

- meters become counters: the ``PerSec`` suffix is dropped, ``_total`` added;
- timers become summaries in milliseconds: ``RateAndTime``/``RateAndTimeMs`` is dropped and
  ``_ms`` added (samples with ``quantile`` 0.5, 0.75, 0.95, 0.98, 0.99, 0.999, plus ``_count``
  and ``_sum``); use PromQL ``rate()`` instead of the meters' moving averages;
- the histogram becomes a summary in bytes (``_bytes`` added);
- gauges keep their name.

Which gives (prefix + suffixes)::

    kafka_consumer_consumer_topic_metrics_
        messages_total, bytes_total
    kafka_consumer_zookeeper_consumer_connector_
        zookeeper_commits_total, kafka_commits_total, rebalance_ms,
        owned_partitions_count, fetch_queue_size
    kafka_consumer_fetch_request_and_response_metrics_
        fetch_request_ms, fetch_request_throttle_ms, fetch_response_size_bytes
    kafka_server_fetcher_lag_metrics_
        consumer_lag
    kafka_consumer_consumer_fetcher_manager_
        max_lag, min_fetch_rate

Tags become labels: ``clientId`` → ``client_id``, ``groupId`` → ``group_id``, ``topic``,
``partition``, ``threadId`` → ``thread_id``, and ``brokerHost``/``brokerPort`` → ``broker``
(``host:port``). As with the MBeans, the all-topics (all-brokers) metric is a series of the
same family *without* the ``topic`` (``broker``) label: select ``{topic=""}`` for the total
and ``{topic!=""}`` for the per-topic series rather than summing the family.
"""

from __future__ import annotations

import collections
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

if TYPE_CHECKING:
    from prometheus_client.core import Metric as PromMetric

__all__ = [
    "ConsumerMetrics",
    "DEFAULT_RESERVOIR_SIZE",
    "Gauge",
    "Histogram",
    "Meter",
    "Metric",
    "MetricName",
    "PERCENTILES",
    "PrometheusCollector",
    "TICK_INTERVAL_S",
    "Timer",
    "prometheus_family",
    "prometheus_labels",
]

log = logging.getLogger(__name__)

TICK_INTERVAL_S: Final = 5.0
"""Seconds between two EWMA ticks (Yammer's ``EWMA`` interval)."""

DEFAULT_RESERVOIR_SIZE: Final = 1028
"""Values kept for percentiles (Yammer's default sample size)."""

PERCENTILES: Final = (
    (0.5, "50thPercentile"),
    (0.75, "75thPercentile"),
    (0.95, "95thPercentile"),
    (0.98, "98thPercentile"),
    (0.99, "99thPercentile"),
    (0.999, "999thPercentile"),
)
"""Quantiles reported by timers and histograms, with their JMX attribute names."""

_M1_ALPHA: Final = 1 - math.exp(-TICK_INTERVAL_S / 60 / 1)
_M5_ALPHA: Final = 1 - math.exp(-TICK_INTERVAL_S / 60 / 5)
_M15_ALPHA: Final = 1 - math.exp(-TICK_INTERVAL_S / 60 / 15)

Clock: TypeAlias = Callable[[], float]
"""A monotonic clock in seconds (``time.monotonic`` unless a test injects one)."""

GaugeFn: TypeAlias = Callable[[], float]
"""A gauge's value source: called, without arguments, each time the gauge is read."""

_Kind = Literal["meter", "timer", "histogram", "gauge"]


# ---- names ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Spec:
    """What the original defined for one metric name: where it lives and its kind."""

    group: str
    type: str
    name: str
    kind: _Kind
    unit: str
    help: str


_ZCC = "ZookeeperConsumerConnector"
_FRR = "FetchRequestAndResponseMetrics"

_MESSAGES = _Spec(
    "kafka.consumer",
    "ConsumerTopicMetrics",
    "MessagesPerSec",
    "meter",
    "",
    "Messages handed to the application by the stream iterators.",
)
_BYTES = _Spec(
    "kafka.consumer",
    "ConsumerTopicMetrics",
    "BytesPerSec",
    "meter",
    "",
    "Bytes of fetched record data enqueued for the streams.",
)
_ZK_COMMITS = _Spec(
    "kafka.consumer",
    _ZCC,
    "ZooKeeperCommitsPerSec",
    "meter",
    "",
    "Offset writes to ZooKeeper (unchanged offsets are not written).",
)
_KAFKA_COMMITS = _Spec(
    "kafka.consumer",
    _ZCC,
    "KafkaCommitsPerSec",
    "meter",
    "",
    "Partitions sent in offset commits to Kafka.",
)
_REBALANCE = _Spec(
    "kafka.consumer",
    _ZCC,
    "RebalanceRateAndTime",
    "timer",
    "ms",
    "Rebalances and their duration in milliseconds.",
)
_OWNED = _Spec(
    "kafka.consumer",
    _ZCC,
    "OwnedPartitionsCount",
    "gauge",
    "",
    "Partitions this consumer owns.",
)
_QUEUE = _Spec(
    "kafka.consumer",
    _ZCC,
    "FetchQueueSize",
    "gauge",
    "",
    "Fetched chunks waiting in a stream's queue.",
)
_FETCH_TIME = _Spec(
    "kafka.consumer",
    _FRR,
    "FetchRequestRateAndTimeMs",
    "timer",
    "ms",
    "Fetch requests and their round-trip time in milliseconds.",
)
_THROTTLE = _Spec(
    "kafka.consumer",
    _FRR,
    "FetchRequestThrottleRateAndTimeMs",
    "timer",
    "ms",
    "Quota throttle time the brokers reported in fetch responses, in milliseconds.",
)
_RESPONSE_SIZE = _Spec(
    "kafka.consumer",
    _FRR,
    "FetchResponseSize",
    "histogram",
    "bytes",
    "Record bytes per fetch response.",
)
_LAG = _Spec(
    "kafka.server",
    "FetcherLagMetrics",
    "ConsumerLag",
    "gauge",
    "",
    "High watermark minus fetch offset of a partition, after its last fetch.",
)
_MAX_LAG = _Spec(
    "kafka.consumer",
    "ConsumerFetcherManager",
    "MaxLag",
    "gauge",
    "",
    "Largest ConsumerLag of this consumer's partitions.",
)
_MIN_FETCH_RATE = _Spec(
    "kafka.consumer",
    "ConsumerFetcherManager",
    "MinFetchRate",
    "gauge",
    "",
    "Smallest one-minute fetch request rate across the brokers fetched from.",
)

_Tags: TypeAlias = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class MetricName:
    """A metric's identity: Yammer's ``MetricName`` (group, type, name, tags).

    Attributes:
        group: the JMX domain, ``"kafka.consumer"`` or ``"kafka.server"``.
        type: the reporting class of the original, e.g. ``"ZookeeperConsumerConnector"``.
        name: the metric's name, e.g. ``"RebalanceRateAndTime"``.
        tags: ``(key, value)`` pairs in the original's order, empty values left out.
    """

    group: str
    type: str
    name: str
    tags: _Tags

    @property
    def mbean_name(self) -> str:
        """``group:type=Type,name=Name,k1=v1,...`` exactly as the original registered it."""
        tags = "".join(f",{k}={v}" for k, v in self.tags)
        return f"{self.group}:type={self.type},name={self.name}{tags}"

    def __str__(self) -> str:
        return self.mbean_name


def _tags(*pairs: tuple[str, str | int | None]) -> _Tags:
    return tuple((k, str(v)) for k, v in pairs if v is not None and v != "")


def _broker_tags(broker: str | None) -> tuple[tuple[str, str | None], tuple[str, str | None]]:
    """``host:port`` → ``brokerHost``/``brokerPort`` tags (a bare host keeps no port)."""
    if broker is None:
        return ("brokerHost", None), ("brokerPort", None)
    host, sep, port = broker.rpartition(":")
    if sep and host and port.isdigit():
        return ("brokerHost", host), ("brokerPort", port)
    return ("brokerHost", broker), ("brokerPort", None)


# ---- metric kinds -----------------------------------------------------------------------


class _EWMA:
    """An exponentially weighted moving average rate, as Yammer's ``EWMA``."""

    __slots__ = ("alpha", "initialized", "rate")

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha
        self.rate = 0.0  # events per second
        self.initialized = False

    def tick(self, count: int) -> None:
        """Fold in ``count`` events seen during one tick interval."""
        instant = count / TICK_INTERVAL_S
        if self.initialized:
            self.rate += self.alpha * (instant - self.rate)
        else:
            self.rate = instant
            self.initialized = True

    def idle(self, ticks: int) -> None:
        """Fold in ``ticks`` intervals without events (closed form of ``ticks`` × ``tick(0)``)."""
        if self.initialized and ticks > 0:
            self.rate *= (1 - self.alpha) ** ticks


class Metric:
    """Base of every metric: its name and the registry lock its reads take."""

    __slots__ = ("_lock", "metric_name")

    kind: str = ""

    def __init__(self, metric_name: MetricName, lock: threading.RLock) -> None:
        self.metric_name = metric_name
        self._lock = lock

    @property
    def mbean_name(self) -> str:
        """The original's MBean name, e.g. ``kafka.consumer:type=...,clientId=C``."""
        return self.metric_name.mbean_name

    def attributes(self) -> dict[str, float]:
        """The metric's current values, keyed by their JMX attribute names."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.mbean_name}>"


class Meter(Metric):
    """Events counted with 1/5/15-minute moving average rates (Yammer's ``Meter``).

    ``mark()`` is the hot path: it only adds to :attr:`count`.

    Attributes:
        count: events marked since creation.
    """

    __slots__ = ("_clock", "_counted", "_last_tick", "_m1", "_m15", "_m5", "_start", "count")

    kind = "meter"

    def __init__(self, metric_name: MetricName, lock: threading.RLock, clock: Clock) -> None:
        super().__init__(metric_name, lock)
        self._clock = clock
        self.count = 0
        self._counted = 0
        self._start = self._last_tick = clock()
        self._m1 = _EWMA(_M1_ALPHA)
        self._m5 = _EWMA(_M5_ALPHA)
        self._m15 = _EWMA(_M15_ALPHA)

    def mark(self, n: int = 1) -> None:
        """Record ``n`` events (cheap: one addition)."""
        self.count += n

    def _tick(self) -> None:
        """Apply every 5-second tick that elapsed since the last one (caller holds the lock)."""
        now = self._clock()
        ticks = int((now - self._last_tick) // TICK_INTERVAL_S)
        if ticks <= 0:
            return
        self._last_tick += ticks * TICK_INTERVAL_S
        count = self.count
        new, self._counted = count - self._counted, count
        for ewma in (self._m1, self._m5, self._m15):
            ewma.tick(new)
            ewma.idle(ticks - 1)

    def _rates(self) -> tuple[float, float, float, float]:
        with self._lock:
            self._tick()
            elapsed = self._clock() - self._start
            mean = self.count / elapsed if self.count and elapsed > 0 else 0.0
            return mean, self._m1.rate, self._m5.rate, self._m15.rate

    @property
    def mean_rate(self) -> float:
        """Events per second since creation (0 before the first event)."""
        return self._rates()[0]

    @property
    def one_minute_rate(self) -> float:
        """Events per second, 1-minute exponentially weighted moving average."""
        return self._rates()[1]

    @property
    def five_minute_rate(self) -> float:
        """Events per second, 5-minute exponentially weighted moving average."""
        return self._rates()[2]

    @property
    def fifteen_minute_rate(self) -> float:
        """Events per second, 15-minute exponentially weighted moving average."""
        return self._rates()[3]

    def attributes(self) -> dict[str, float]:
        """``Count``, ``MeanRate``, ``OneMinuteRate``, ``FiveMinuteRate``, ``FifteenMinuteRate``."""
        mean, m1, m5, m15 = self._rates()
        return {
            "Count": float(self.count),
            "MeanRate": mean,
            "OneMinuteRate": m1,
            "FiveMinuteRate": m5,
            "FifteenMinuteRate": m15,
        }


def _quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values, interpolated as Yammer's ``Snapshot.getValue``."""
    if not ordered:
        return 0.0
    pos = q * (len(ordered) + 1)
    if pos < 1:
        return ordered[0]
    if pos >= len(ordered):
        return ordered[-1]
    lower = ordered[int(pos) - 1]
    upper = ordered[int(pos)]
    return lower + (pos - math.floor(pos)) * (upper - lower)


class Histogram(Metric):
    """Distribution of values over a bounded reservoir (Yammer's ``Histogram``).

    ``count`` and ``sum`` cover every update; min, max, mean, standard deviation and
    percentiles cover the most recent ``reservoir_size`` values.

    Attributes:
        count: values recorded since creation.
        sum: sum of every value recorded since creation.
    """

    __slots__ = ("_window", "count", "sum")

    kind = "histogram"

    def __init__(self, metric_name: MetricName, lock: threading.RLock, reservoir_size: int) -> None:
        super().__init__(metric_name, lock)
        self.count = 0
        self.sum = 0.0
        self._window: collections.deque[float] = collections.deque(maxlen=reservoir_size)

    def update(self, value: float) -> None:
        """Record one value (cheap: two additions and a bounded append)."""
        self.count += 1
        self.sum += value
        self._window.append(value)

    def values(self) -> list[float]:
        """The values in the reservoir, sorted."""
        with self._lock:
            return sorted(map(float, self._window))

    def percentile(self, q: float) -> float:
        """The ``q`` quantile (``0 <= q <= 1``) of the reservoir; 0 when it is empty.

        Raises:
            ValueError: ``q`` is outside ``[0, 1]``.
        """
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be within [0, 1], got {q}")
        return _quantile(self.values(), q)

    def _stats(self) -> dict[str, float]:
        ordered = self.values()
        n = len(ordered)
        mean = math.fsum(ordered) / n if n else 0.0
        stddev = math.sqrt(math.fsum((v - mean) ** 2 for v in ordered) / (n - 1)) if n > 1 else 0.0
        stats = {
            "Count": float(self.count),
            "Min": ordered[0] if n else 0.0,
            "Max": ordered[-1] if n else 0.0,
            "Mean": mean,
            "StdDev": stddev,
        }
        for q, attr in PERCENTILES:
            stats[attr] = _quantile(ordered, q)
        return stats

    def attributes(self) -> dict[str, float]:
        """``Count``, ``Min``, ``Max``, ``Mean``, ``StdDev`` and the percentiles."""
        return self._stats()


class _TimerContext:
    """``with timer.time():`` measures the block with the timer's clock."""

    __slots__ = ("_start", "_timer")

    def __init__(self, timer: Timer) -> None:
        self._timer = timer
        self._start = 0.0

    def __enter__(self) -> _TimerContext:
        self._start = self._timer._clock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._timer.update((self._timer._clock() - self._start) * 1000.0)


class Timer(Metric):
    """Rate of events and distribution of their durations in ms (Yammer's ``Timer``)."""

    __slots__ = ("_clock", "histogram", "meter")

    kind = "timer"

    def __init__(
        self,
        metric_name: MetricName,
        lock: threading.RLock,
        clock: Clock,
        reservoir_size: int,
    ) -> None:
        super().__init__(metric_name, lock)
        self._clock = clock
        self.meter = Meter(metric_name, lock, clock)
        self.histogram = Histogram(metric_name, lock, reservoir_size)

    @property
    def count(self) -> int:
        """Events timed since creation."""
        return self.meter.count

    def update(self, duration_ms: float) -> None:
        """Record one event that took ``duration_ms`` milliseconds (negative ones are ignored)."""
        if duration_ms < 0:
            return
        self.meter.count += 1
        self.histogram.update(duration_ms)

    def time(self) -> _TimerContext:
        """A context manager timing its block (it may contain ``await``).

        Example::

            with metrics.rebalance_rate_and_time().time():
                await rebalance()
        """
        return _TimerContext(self)

    def attributes(self) -> dict[str, float]:
        """The histogram's attributes (ms) and the meter's rates (events per second)."""
        stats = self.histogram.attributes()
        stats.update(self.meter.attributes())
        return stats


class Gauge(Metric):
    """A value read from a callable each time the gauge is read (Yammer's ``Gauge``)."""

    __slots__ = ("fn",)

    kind = "gauge"

    def __init__(self, metric_name: MetricName, lock: threading.RLock, fn: GaugeFn) -> None:
        super().__init__(metric_name, lock)
        self.fn = fn

    @property
    def value(self) -> float:
        """The callable's current value; NaN (and a debug log) if it raises."""
        try:
            return float(self.fn())
        except Exception:
            log.debug("gauge %s failed", self.mbean_name, exc_info=True)
            return math.nan

    def attributes(self) -> dict[str, float]:
        """``Value``."""
        return {"Value": self.value}


AnyMetric: TypeAlias = Meter | Timer | Histogram | Gauge


# ---- the registry -----------------------------------------------------------------------


class ConsumerMetrics:
    """The metrics of one consumer, named as the original's (``KafkaMetricsGroup``).

    Meter, timer and histogram methods return the existing metric of that name or create it
    (as Yammer's ``newMeter``); cache the returned object on hot paths (a lookup costs a
    dictionary access, ``mark()`` an addition). Gauge methods register a callable, replacing
    the one a gauge of that name had (Yammer's ``newGauge`` kept the first), so a gauge can
    follow state that a rebalance rebuilds. Everything but reads runs in the event loop.

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

    # ---- lookup -----------------------------------------------------------------------

    def _name(self, spec: _Spec, tags: _Tags) -> MetricName:
        return MetricName(spec.group, spec.type, spec.name, tags)

    def _new_meter(self, spec: _Spec, key: tuple[str, str | None], tags: _Tags) -> Meter:
        name = self._name(spec, tags)
        existing = self._metrics.get(name)
        meter = existing if isinstance(existing, Meter) else Meter(name, self._lock, self.clock)
        self._metrics[name] = self._meters[key] = meter
        return meter

    def _new_timer(self, spec: _Spec, key: tuple[str, str | None], tags: _Tags) -> Timer:
        name = self._name(spec, tags)
        existing = self._metrics.get(name)
        timer = (
            existing
            if isinstance(existing, Timer)
            else Timer(name, self._lock, self.clock, self._reservoir_size)
        )
        self._metrics[name] = self._timers[key] = timer
        return timer

    def _gauge(self, spec: _Spec, tags: _Tags, fn: GaugeFn) -> Gauge:
        name = self._name(spec, tags)
        existing = self._metrics.get(name)
        if isinstance(existing, Gauge):
            existing.fn = fn
            return existing
        gauge = Gauge(name, self._lock, fn)
        self._metrics[name] = gauge
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
            existing = self._metrics.get(name)
            histogram = (
                existing
                if isinstance(existing, Histogram)
                else Histogram(name, self._lock, self._reservoir_size)
            )
            self._metrics[name] = self._histograms[("FetchResponseSize", broker)] = histogram
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
        partition's last fetch (-1 before the first). Remove it when the partition leaves
        its fetcher.

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
        for it again creates a new one.

        Args:
            metric: a metric this registry returned.

        Returns:
            ``True`` if it was registered.
        """
        with self._lock:
            if self._metrics.get(metric.metric_name) is not metric:
                return False
            del self._metrics[metric.metric_name]
            for cache in (self._meters, self._timers, self._histograms):
                for key in [k for k, cached in cache.items() if cached is metric]:
                    del cache[key]
            return True

    def remove_all(self) -> None:
        """Unregister every metric (``KafkaMetricsGroup.removeAllConsumerMetrics``, KAFKA-1567).

        Called on shutdown so that a process creating connectors over and over does not leak.
        """
        with self._lock:
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
        """A ``prometheus_client`` collector exposing these metrics (see the module docs).

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


# ---- Prometheus -------------------------------------------------------------------------

_SNAKE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SUFFIXES: Final[dict[str, tuple[str, ...]]] = {
    "meter": ("PerSec",),
    "timer": ("RateAndTimeMs", "RateAndTime"),
}
_LABELS: Final = {"clientId": "client_id", "groupId": "group_id", "threadId": "thread_id"}
_SPECS: Final = {
    (spec.group, spec.type, spec.name): spec
    for spec in (
        _MESSAGES,
        _BYTES,
        _ZK_COMMITS,
        _KAFKA_COMMITS,
        _REBALANCE,
        _OWNED,
        _QUEUE,
        _FETCH_TIME,
        _THROTTLE,
        _RESPONSE_SIZE,
        _LAG,
        _MAX_LAG,
        _MIN_FETCH_RATE,
    )
}


def _snake(name: str) -> str:
    return _SNAKE.sub("_", name.replace("ZooKeeper", "Zookeeper")).lower()


def _spec_of(metric_name: MetricName) -> _Spec:
    return _SPECS[(metric_name.group, metric_name.type, metric_name.name)]


def prometheus_family(metric_name: MetricName) -> str:
    """The Prometheus family name of a metric (counters without their ``_total``).

    Args:
        metric_name: the name of a metric of a :class:`ConsumerMetrics`.

    Returns:
        e.g. ``"kafka_consumer_zookeeper_consumer_connector_rebalance_ms"`` for
        ``RebalanceRateAndTime``; the rules are in the module's documentation.

    Raises:
        KeyError: the name is not one of the original's consumer metrics.
    """
    spec = _spec_of(metric_name)
    name = spec.name
    for suffix in _SUFFIXES.get(spec.kind, ()):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    family = f"{spec.group.replace('.', '_')}_{_snake(spec.type)}_{_snake(name)}"
    return f"{family}_{spec.unit}" if spec.unit else family


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


class PrometheusCollector:
    """A ``prometheus_client`` collector for the metrics of one or more consumers.

    Each family appears once even when several registries have series of it (they differ by
    their ``client_id`` / ``group_id`` labels), so use one collector for all the connectors
    of a process. It reads the registries on every scrape and may run in the exporter's
    thread: it takes each registry's read lock, and gauge callables must be safe to call
    from there (reading a number or a queue's size is).

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
            raise ImportError(
                "Prometheus export needs prometheus_client: pip install 'aiozkconsumer[prometheus]'"
            ) from e
        self._family_cls = PromMetric
        self.registries = tuple(registries)

    def describe(self) -> list[PromMetric]:
        """Nothing: the families change as partitions come and go.

        Returning an empty list also keeps ``CollectorRegistry.register`` from calling
        :meth:`collect` at registration.
        """
        return []

    def collect(self) -> list[PromMetric]:
        """The current samples of every metric, one family per name."""
        families: dict[str, PromMetric] = {}
        for registry in self.registries:
            with registry._lock:
                for metric in list(registry._metrics.values()):
                    self._add_samples(metric, families)
        return list(families.values())

    def _family(
        self, families: dict[str, PromMetric], name: str, metric_name: MetricName, typ: str
    ) -> PromMetric:
        fam = families.get(name)
        if fam is None:
            spec = _spec_of(metric_name)
            doc = f"{spec.help} ({spec.group}:type={spec.type},name={spec.name})"
            fam = families[name] = self._family_cls(name, doc, typ)
        return fam

    def _add_samples(self, metric: AnyMetric, families: dict[str, PromMetric]) -> None:
        name = metric.metric_name
        fam_name = prometheus_family(name)
        labels = prometheus_labels(name)
        if isinstance(metric, Meter):
            fam = self._family(families, fam_name, name, "counter")
            fam.add_sample(fam_name + "_total", labels, float(metric.count))
        elif isinstance(metric, Gauge):
            fam = self._family(families, fam_name, name, "gauge")
            fam.add_sample(fam_name, labels, metric.value)
        else:
            histogram = metric.histogram if isinstance(metric, Timer) else metric
            fam = self._family(families, fam_name, name, "summary")
            ordered = histogram.values()
            for q, _ in PERCENTILES:
                fam.add_sample(fam_name, {**labels, "quantile": str(q)}, _quantile(ordered, q))
            fam.add_sample(fam_name + "_count", labels, float(histogram.count))
            fam.add_sample(fam_name + "_sum", labels, histogram.sum)

    def __repr__(self) -> str:
        return f"<PrometheusCollector {list(self.registries)}>"
