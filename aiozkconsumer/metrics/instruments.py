"""The instruments: Yammer-style meters, histograms, timers and gauges, with no names of their own.

Each instrument carries a :class:`MetricName` (Yammer's group, type, name and tags) and the
lock of the registry that made it, but knows nothing of the consumer: which metrics exist and
what they are called is :mod:`aiozkconsumer.metrics.registry`'s business, and their export
:mod:`aiozkconsumer.metrics.prometheus`'s. Nothing here does I/O or imports a client library.

Kinds, as Yammer's (metrics-core 2.2):

- :class:`Meter`: a count and 1-, 5- and 15-minute exponentially weighted moving average rates
  (events/second) ticked every 5 s, plus the mean rate since creation.
- :class:`Histogram`: a count and a sum of every value and, over a bounded reservoir of the
  most recent 1028 values (a sliding window; Yammer used an exponentially decaying sample of
  the same size), min, max, mean, standard deviation and percentiles.
- :class:`Timer`: a meter of events plus a histogram of their durations in milliseconds.
- :class:`Gauge`: a callable read when the gauge is read (snapshot, Prometheus scrape).

These serve the original's names and JMX attributes (``ConsumerMetrics.snapshot()``); the
Prometheus export does not read them but keeps ``prometheus_client`` instruments of its own.
A meter, histogram or timer passes each mark or update on to its :attr:`~Meter.observer` when
it has one, which is how the registry feeds those instruments without this module knowing them.

The hot path is cheap and lock-free (the connector runs in one event loop): ``Meter.mark``
adds to a counter; ``Timer.update`` / ``Histogram.update`` add to a counter and a sum and
append to a bounded deque (plus, each, one call of the observer). Rates are brought up to date
lazily when read; events marked since the last read are attributed to the first 5-second tick
that elapsed, so a meter read less often than every 5 s decays slightly differently from
Yammer's ticker thread (they agree when it is read at least every 5 s). Reads (``snapshot()``,
rate properties) hold the registry's lock, so an exporter thread and the event loop can both
read.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Final, TypeAlias

__all__ = [
    "DEFAULT_RESERVOIR_SIZE",
    "PERCENTILES",
    "TICK_INTERVAL_S",
    "AnyMetric",
    "Clock",
    "Gauge",
    "GaugeFn",
    "Histogram",
    "Meter",
    "Metric",
    "MetricName",
    "Observer",
    "Tags",
    "Timer",
    "quantile",
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

Tags: TypeAlias = tuple[tuple[str, str], ...]
"""A metric's ``(key, value)`` tags, in order."""

Observer: TypeAlias = Callable[[float], None]
"""Called with each mark (the number of events) or update (the value) of an instrument."""


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
    tags: Tags

    @property
    def mbean_name(self) -> str:
        """``group:type=Type,name=Name,k1=v1,...`` exactly as the original registered it."""
        tags = "".join(f",{k}={v}" for k, v in self.tags)
        return f"{self.group}:type={self.type},name={self.name}{tags}"

    def __str__(self) -> str:
        return self.mbean_name


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

    ``mark()`` is the hot path: it adds to :attr:`count` and calls the observer.

    Attributes:
        count: events marked since creation.
        observer: called with ``n`` on each ``mark(n)``, or ``None``.
    """

    __slots__ = (
        "_clock",
        "_counted",
        "_last_tick",
        "_m1",
        "_m15",
        "_m5",
        "_start",
        "count",
        "observer",
    )

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
        self.observer: Observer | None = None

    def mark(self, n: int = 1) -> None:
        """Record ``n`` events (cheap: one addition, and the observer's call)."""
        self.count += n
        if self.observer is not None:
            self.observer(n)

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


def quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values, interpolated as Yammer's ``Snapshot.getValue``.

    Args:
        ordered: the values, sorted ascending (as :meth:`Histogram.values` returns them).
        q: the quantile, within ``[0, 1]`` (not checked).

    Returns:
        The value at position ``q (n + 1)``, interpolated between its neighbours and clamped
        to the first and last values; 0 for no values.
    """
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
        observer: called with each value recorded, or ``None``.
    """

    __slots__ = ("_window", "count", "observer", "sum")

    kind = "histogram"

    def __init__(self, metric_name: MetricName, lock: threading.RLock, reservoir_size: int) -> None:
        super().__init__(metric_name, lock)
        self.count = 0
        self.sum = 0.0
        self._window: collections.deque[float] = collections.deque(maxlen=reservoir_size)
        self.observer: Observer | None = None

    def update(self, value: float) -> None:
        """Record one value (cheap: two additions, a bounded append and the observer's call)."""
        self.count += 1
        self.sum += value
        self._window.append(value)
        if self.observer is not None:
            self.observer(value)

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
        return quantile(self.values(), q)

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
            stats[attr] = quantile(ordered, q)
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
    """Rate of events and distribution of their durations in ms (Yammer's ``Timer``).

    Attributes:
        meter: the events (its rates are the JMX ``...Rate`` attributes).
        histogram: their durations in milliseconds.
        observer: called with each duration recorded, in milliseconds, or ``None``.
    """

    __slots__ = ("_clock", "histogram", "meter", "observer")

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
        self.observer: Observer | None = None

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
        if self.observer is not None:
            self.observer(duration_ms)

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
"""Any instrument a registry holds."""
