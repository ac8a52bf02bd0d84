"""Prometheus export: a ``prometheus_client`` collector over :class:`ConsumerMetrics` registries.

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

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from .instruments import PERCENTILES, AnyMetric, Gauge, Meter, MetricName, Timer, quantile
from .specs import spec_of

if TYPE_CHECKING:
    from prometheus_client.core import Metric as PromMetric

    from .registry import ConsumerMetrics

__all__ = ["PrometheusCollector", "prometheus_family", "prometheus_labels"]

_SNAKE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SUFFIXES: Final[dict[str, tuple[str, ...]]] = {
    "meter": ("PerSec",),
    "timer": ("RateAndTimeMs", "RateAndTime"),
}
_LABELS: Final = {"clientId": "client_id", "groupId": "group_id", "threadId": "thread_id"}


def _snake(name: str) -> str:
    return _SNAKE.sub("_", name.replace("ZooKeeper", "Zookeeper")).lower()


def prometheus_family(metric_name: MetricName) -> str:
    """The Prometheus family name of a metric (counters without their ``_total``).

    Args:
        metric_name: the name of a metric of a :class:`ConsumerMetrics`.

    Returns:
        e.g. ``"kafka_consumer_zookeeper_consumer_connector_rebalance_ms"`` for
        ``RebalanceRateAndTime``; the rules are in this module's documentation
        (:mod:`aiozkconsumer.metrics.prometheus`) and on the Metrics page.

    Raises:
        KeyError: the name is not one of the original's consumer metrics.
    """
    spec = spec_of(metric_name)
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
            spec = spec_of(metric_name)
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
                fam.add_sample(fam_name, {**labels, "quantile": str(q)}, quantile(ordered, q))
            fam.add_sample(fam_name + "_count", labels, float(histogram.count))
            fam.add_sample(fam_name + "_sum", labels, histogram.sum)

    def __repr__(self) -> str:
        return f"<PrometheusCollector {list(self.registries)}>"
