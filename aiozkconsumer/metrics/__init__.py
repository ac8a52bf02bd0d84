"""Consumer metrics with the original's names, and their Prometheus export.

The old consumer reported through Yammer metrics (``KafkaMetricsGroup``); operators know its
MBean names. :class:`ConsumerMetrics` is a small, self-contained registry (one per connector,
no global state) of the same metrics, with the same kinds, names and tags, read with
``snapshot()``. Its Prometheus export follows Prometheus' conventions instead (counters ending
in ``_total``, histograms in seconds and bytes, per-topic families apart from all-topics ones).
The names and their Prometheus families are tabulated on the Metrics page of this documentation.

One idea per module; every name is imported from here:

- ``instruments``: the metric kinds, as Yammer's (metrics-core 2.2), each named by a
  :class:`MetricName`. :class:`Meter`: a count and 1-, 5- and 15-minute exponentially
  weighted moving average rates (events/second) ticked every 5 s, plus the mean rate since
  creation. :class:`Histogram`: a count and a sum of every value and, over a bounded reservoir
  of the most recent 1028 values, min, max, mean, standard deviation and percentiles.
  :class:`Timer`: a meter of events plus a histogram of their durations in milliseconds.
  :class:`Gauge`: a callable read when the gauge is read. Pure: no I/O, no client library.
- ``registry``: :class:`ConsumerMetrics`, which creates the instruments under the original's
  names (``messages_per_sec(topic)`` is
  ``kafka.consumer:type=ConsumerTopicMetrics,name=MessagesPerSec,clientId=C,topic=T``) and
  binds each to its Prometheus series.
- ``prometheus``: the families (:data:`PROMETHEUS_FAMILIES`, :func:`prometheus_family`,
  :func:`prometheus_labels`), :class:`PrometheusInstruments` (one connector's
  ``prometheus_client`` ``Counter``, ``Gauge`` and ``Histogram`` objects, in a
  ``CollectorRegistry`` of its own) and :class:`PrometheusCollector`, which exposes those of
  one or more connectors. ``prometheus_client`` is optional
  (``pip install 'aiozkconsumer[prometheus]'``): without it there is no Prometheus series and
  ``collector()`` raises ``ImportError``.

The hot path is cheap and lock-free (the connector runs in one event loop): ``Meter.mark``
adds to a counter, ``Timer.update`` / ``Histogram.update`` add to a counter and a sum and
append to a bounded deque, and each feeds its ``prometheus_client`` instrument; rates are
brought up to date lazily when read. Reads (``snapshot()``, rate properties, Prometheus
collection) hold the registry's lock, so a Prometheus exporter thread and the event loop can
both read.
"""

# The API page lists these in import order: the registry first, then its instruments.
from .registry import ConsumerMetrics

# isort: split
from .instruments import (
    DEFAULT_RESERVOIR_SIZE,
    PERCENTILES,
    TICK_INTERVAL_S,
    Gauge,
    Histogram,
    Meter,
    Metric,
    MetricName,
    Observer,
    Timer,
)
from .prometheus import (
    PROMETHEUS_FAMILIES,
    PrometheusCollector,
    PrometheusFamily,
    PrometheusInstruments,
    prometheus_family,
    prometheus_labels,
)

__all__ = [
    "ConsumerMetrics",
    "DEFAULT_RESERVOIR_SIZE",
    "Gauge",
    "Histogram",
    "Meter",
    "Metric",
    "MetricName",
    "Observer",
    "PERCENTILES",
    "PROMETHEUS_FAMILIES",
    "PrometheusCollector",
    "PrometheusFamily",
    "PrometheusInstruments",
    "TICK_INTERVAL_S",
    "Timer",
    "prometheus_family",
    "prometheus_labels",
]
