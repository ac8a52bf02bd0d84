"""ConsumerMetrics: Yammer-style meters/timers/gauges, the original's names, Prometheus export."""

from __future__ import annotations

import ast
import importlib
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import aiozkconsumer.metrics
from aiozkconsumer.metrics import (
    ConsumerMetrics,
    PrometheusCollector,
    prometheus_family,
)


class FakeClock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def metrics(clock: FakeClock) -> ConsumerMetrics:
    return ConsumerMetrics("C", "G", clock=clock)


# ---- meters -----------------------------------------------------------------------------


def test_meter_ewma_rates_match_hand_computed_values(
    metrics: ConsumerMetrics, clock: FakeClock
) -> None:
    meter = metrics.messages_per_sec("t")
    meter.mark(60)
    clock.advance(4.9)
    # No 5-second tick yet: the moving averages are still 0.
    assert meter.one_minute_rate == 0.0
    assert meter.mean_rate == pytest.approx(60 / 4.9)

    clock.advance(0.1)  # first tick: 60 events in 5 s, and the first tick sets the rate
    assert meter.one_minute_rate == pytest.approx(12.0)
    assert meter.five_minute_rate == pytest.approx(12.0)
    assert meter.fifteen_minute_rate == pytest.approx(12.0)

    clock.advance(5)  # a tick without events: rate *= exp(-5 s / window)
    assert meter.one_minute_rate == pytest.approx(11.04053297555188)  # 12 e^(-1/12)
    assert meter.five_minute_rate == pytest.approx(11.80165744585941)  # 12 e^(-1/60)
    assert meter.fifteen_minute_rate == pytest.approx(11.933518176058762)  # 12 e^(-1/180)

    meter.mark(30)  # 6 events/s during the next interval: rate += alpha * (6 - rate)
    clock.advance(5)
    assert meter.one_minute_rate == pytest.approx(10.63751421091143)
    assert meter.five_minute_rate == pytest.approx(11.705764482854367)
    assert meter.fifteen_minute_rate == pytest.approx(11.900645583497688)
    assert meter.count == 90
    assert meter.mean_rate == pytest.approx(90 / 15)


def test_meter_catches_up_on_many_idle_ticks_in_closed_form(
    metrics: ConsumerMetrics, clock: FakeClock
) -> None:
    meter = metrics.kafka_commits_per_sec()
    meter.mark(5)
    clock.advance(5)
    assert meter.one_minute_rate == pytest.approx(1.0)
    clock.advance(5 * 12 + 2)  # 12 idle ticks (and 2 s towards the next)
    assert meter.one_minute_rate == pytest.approx(math.exp(-1.0))  # 12 × e^(-1/12)
    assert meter.fifteen_minute_rate == pytest.approx(math.exp(-12 * 5 / 900))
    meter.mark(10)
    clock.advance(3)  # the 13th tick: 10 events in it
    alpha = 1 - math.exp(-5 / 60)
    prev = math.exp(-1.0)
    assert meter.one_minute_rate == pytest.approx(prev + alpha * (2.0 - prev))


def test_meter_attributes_are_the_jmx_names(metrics: ConsumerMetrics, clock: FakeClock) -> None:
    metrics.zookeeper_commits_per_sec().mark()
    clock.advance(10)
    attrs = metrics.snapshot()[
        "kafka.consumer:type=ZookeeperConsumerConnector,name=ZooKeeperCommitsPerSec,clientId=C"
    ]
    assert set(attrs) == {
        "Count",
        "MeanRate",
        "OneMinuteRate",
        "FiveMinuteRate",
        "FifteenMinuteRate",
    }
    assert attrs["Count"] == 1.0
    assert attrs["MeanRate"] == pytest.approx(0.1)


# ---- timers and histograms --------------------------------------------------------------


def test_timer_percentiles_over_the_reservoir(metrics: ConsumerMetrics) -> None:
    timer = metrics.fetch_request_rate_and_time("broker1:9092")
    for ms in range(100, 0, -1):  # order does not matter
        timer.update(ms)
    attrs = timer.attributes()
    assert attrs["Count"] == 100
    assert attrs["Min"] == 1.0
    assert attrs["Max"] == 100.0
    assert attrs["Mean"] == pytest.approx(50.5)
    assert attrs["StdDev"] == pytest.approx(29.011491975882016)  # sample standard deviation
    # Yammer's Snapshot.getValue: pos = q (n + 1), interpolated between neighbours.
    assert attrs["50thPercentile"] == pytest.approx(50.5)
    assert attrs["75thPercentile"] == pytest.approx(75.75)
    assert attrs["95thPercentile"] == pytest.approx(95.95)
    assert attrs["98thPercentile"] == pytest.approx(98.98)
    assert attrs["99thPercentile"] == pytest.approx(99.99)
    assert attrs["999thPercentile"] == 100.0  # pos beyond the last value
    assert timer.histogram.percentile(0.0) == 1.0
    with pytest.raises(ValueError, match="quantile"):
        timer.histogram.percentile(1.5)


def test_histogram_reservoir_is_bounded_to_recent_values(clock: FakeClock) -> None:
    metrics = ConsumerMetrics("C", clock=clock, reservoir_size=10)
    histogram = metrics.fetch_response_size()
    for size in range(1, 101):
        histogram.update(size)
    assert histogram.count == 100
    assert histogram.sum == sum(range(1, 101))
    assert histogram.values() == [float(v) for v in range(91, 101)]
    attrs = histogram.attributes()
    assert (attrs["Min"], attrs["Max"], attrs["Count"]) == (91.0, 100.0, 100.0)
    assert "OneMinuteRate" not in attrs


def test_empty_histogram_reads_zero(metrics: ConsumerMetrics) -> None:
    attrs = metrics.fetch_response_size().attributes()
    assert attrs["Count"] == 0
    assert attrs["Min"] == attrs["Max"] == attrs["50thPercentile"] == attrs["StdDev"] == 0.0


def test_timer_time_measures_with_the_clock_and_counts_the_rate(
    metrics: ConsumerMetrics, clock: FakeClock
) -> None:
    timer = metrics.rebalance_rate_and_time()
    with timer.time():
        clock.advance(0.25)
    with timer.time():
        clock.advance(0.75)
    timer.update(-1)  # negative durations are ignored, as Yammer's
    assert timer.count == 2
    clock.advance(4.0)  # t = 5 s: first tick, 2 events
    attrs = timer.attributes()
    assert attrs["Min"] == pytest.approx(250.0)
    assert attrs["Max"] == pytest.approx(750.0)
    assert attrs["Mean"] == pytest.approx(500.0)
    assert attrs["OneMinuteRate"] == pytest.approx(2 / 5)
    assert attrs["Count"] == 2


# ---- names ------------------------------------------------------------------------------


def test_mbean_names_are_exactly_the_originals(metrics: ConsumerMetrics) -> None:
    zcc = "kafka.consumer:type=ZookeeperConsumerConnector"
    frr = "kafka.consumer:type=FetchRequestAndResponseMetrics"
    names = {
        metrics.rebalance_rate_and_time(): f"{zcc},name=RebalanceRateAndTime,clientId=C",
        metrics.owned_partitions_count(
            None, lambda: 0
        ): f"{zcc},name=OwnedPartitionsCount,clientId=C,groupId=G",
        metrics.owned_partitions_count(
            "T", lambda: 0
        ): f"{zcc},name=OwnedPartitionsCount,clientId=C,groupId=G,topic=T",
        metrics.fetch_queue_size(
            "T", 3, lambda: 0
        ): f"{zcc},name=FetchQueueSize,clientId=C,topic=T,threadId=3",
        metrics.kafka_commits_per_sec(): f"{zcc},name=KafkaCommitsPerSec,clientId=C",
        metrics.zookeeper_commits_per_sec(): f"{zcc},name=ZooKeeperCommitsPerSec,clientId=C",
        metrics.max_lag(): "kafka.consumer:type=ConsumerFetcherManager,name=MaxLag,clientId=C",
        metrics.min_fetch_rate(): (
            "kafka.consumer:type=ConsumerFetcherManager,name=MinFetchRate,clientId=C"
        ),
        metrics.consumer_lag("T", 7, lambda: 0): (
            "kafka.server:type=FetcherLagMetrics,name=ConsumerLag,clientId=C,topic=T,partition=7"
        ),
        metrics.messages_per_sec(): (
            "kafka.consumer:type=ConsumerTopicMetrics,name=MessagesPerSec,clientId=C"
        ),
        metrics.messages_per_sec("T"): (
            "kafka.consumer:type=ConsumerTopicMetrics,name=MessagesPerSec,clientId=C,topic=T"
        ),
        metrics.bytes_per_sec(): (
            "kafka.consumer:type=ConsumerTopicMetrics,name=BytesPerSec,clientId=C"
        ),
        metrics.bytes_per_sec("T"): (
            "kafka.consumer:type=ConsumerTopicMetrics,name=BytesPerSec,clientId=C,topic=T"
        ),
        metrics.fetch_request_rate_and_time(): f"{frr},name=FetchRequestRateAndTimeMs,clientId=C",
        metrics.fetch_request_rate_and_time("h1.example:9092"): (
            f"{frr},name=FetchRequestRateAndTimeMs,clientId=C,brokerHost=h1.example,brokerPort=9092"
        ),
        metrics.fetch_request_throttle_rate_and_time("h1:9093"): (
            f"{frr},name=FetchRequestThrottleRateAndTimeMs,clientId=C,brokerHost=h1,brokerPort=9093"
        ),
        metrics.fetch_response_size(): f"{frr},name=FetchResponseSize,clientId=C",
        metrics.fetch_response_size("h1:9092"): (
            f"{frr},name=FetchResponseSize,clientId=C,brokerHost=h1,brokerPort=9092"
        ),
    }
    for metric, expected in names.items():
        assert metric.mbean_name == expected
    assert sorted(metrics.snapshot()) == sorted(names.values())
    assert len(metrics) == len(names)


def test_empty_tag_values_are_dropped(clock: FakeClock) -> None:
    metrics = ConsumerMetrics("C", "", clock=clock)
    gauge = metrics.owned_partitions_count(None, lambda: 1)
    assert gauge.mbean_name == (
        "kafka.consumer:type=ZookeeperConsumerConnector,name=OwnedPartitionsCount,clientId=C"
    )
    assert metrics.messages_per_sec("").mbean_name == metrics.messages_per_sec().mbean_name


def test_get_or_create_returns_the_same_metric(metrics: ConsumerMetrics) -> None:
    assert metrics.messages_per_sec("t") is metrics.messages_per_sec("t")
    assert metrics.messages_per_sec("t") is not metrics.messages_per_sec()
    assert metrics.fetch_request_rate_and_time("h:1") is metrics.fetch_request_rate_and_time("h:1")
    meter = metrics.messages_per_sec("t")
    assert metrics.get(meter.mbean_name) is meter
    assert metrics.get("kafka.consumer:type=Nope,name=Nope") is None


# ---- gauges -----------------------------------------------------------------------------


def test_gauges_are_read_at_snapshot_time(metrics: ConsumerMetrics) -> None:
    owned = [1, 2]
    gauge = metrics.owned_partitions_count("t", lambda: len(owned))
    name = gauge.mbean_name
    assert metrics.snapshot()[name] == {"Value": 2.0}
    owned.append(3)
    assert metrics.snapshot()[name] == {"Value": 3.0}
    # Registering again replaces the callable (e.g. a new queue after a rebalance).
    assert metrics.owned_partitions_count("t", lambda: 42) is gauge
    assert gauge.value == 42.0


def test_a_failing_gauge_reads_nan_and_does_not_break_the_snapshot(
    metrics: ConsumerMetrics,
) -> None:
    def broken() -> float:
        raise RuntimeError("queue gone")

    gauge = metrics.fetch_queue_size("t", 0, broken)
    metrics.kafka_commits_per_sec().mark()
    snapshot = metrics.snapshot()
    assert math.isnan(snapshot[gauge.mbean_name]["Value"])
    assert len(snapshot) == 2


def test_max_lag_and_min_fetch_rate_derive_from_the_other_metrics(
    metrics: ConsumerMetrics, clock: FakeClock
) -> None:
    max_lag = metrics.max_lag()
    min_rate = metrics.min_fetch_rate()
    assert max_lag.value == 0.0  # no partitions: the original's fold from 0
    assert min_rate.value == 0.0
    lags = {0: 5, 1: 17}

    def lag_of(partition: int) -> Callable[[], float]:
        return lambda: lags[partition]

    for p in lags:
        metrics.consumer_lag("t", p, lag_of(p))
    metrics.consumer_lag("u", 0, lambda: -1)  # not fetched yet
    assert max_lag.value == 17.0
    lags[0] = 30
    assert max_lag.value == 30.0

    for _ in range(10):
        metrics.fetch_request_rate_and_time("a:1").update(1)
    for _ in range(20):
        metrics.fetch_request_rate_and_time("b:1").update(1)
    for _ in range(99):
        metrics.fetch_request_rate_and_time().update(1)  # all brokers: not a fetcher
    clock.advance(5)
    assert min_rate.value == pytest.approx(10 / 5)
    assert metrics.max_lag(lambda: 99).value == 99.0  # an explicit callable wins


def test_snapshot_is_plain_data_owned_by_the_caller(metrics: ConsumerMetrics) -> None:
    meter = metrics.messages_per_sec()
    meter.mark(3)
    snapshot = metrics.snapshot()
    snapshot[meter.mbean_name]["Count"] = -1.0
    snapshot.clear()
    assert metrics.snapshot()[meter.mbean_name]["Count"] == 3.0
    assert all(
        isinstance(v, float) for attrs in metrics.snapshot().values() for v in attrs.values()
    )


# ---- removal ----------------------------------------------------------------------------


def test_remove_unregisters_one_metric(metrics: ConsumerMetrics) -> None:
    lag = metrics.consumer_lag("t", 0, lambda: 1)
    meter = metrics.messages_per_sec("t")
    meter.mark(5)
    assert metrics.remove(lag)
    assert not metrics.remove(lag)
    assert lag.mbean_name not in metrics.snapshot()
    assert metrics.remove(meter)
    fresh = metrics.messages_per_sec("t")
    assert fresh is not meter and fresh.count == 0


def test_remove_all_removes_every_consumer_metric(metrics: ConsumerMetrics) -> None:
    meter = metrics.messages_per_sec("t")
    metrics.rebalance_rate_and_time().update(3)
    metrics.owned_partitions_count(None, lambda: 1)
    metrics.consumer_lag("t", 0, lambda: 1)
    metrics.max_lag()
    assert len(metrics) == 5
    metrics.remove_all()
    assert len(metrics) == 0
    assert metrics.snapshot() == {}
    assert list(metrics) == []
    meter.mark()  # a cached meter still counts, but is no longer reported
    assert metrics.snapshot() == {}
    assert metrics.messages_per_sec("t") is not meter


# ---- Prometheus -------------------------------------------------------------------------


def _scrape(*registries: ConsumerMetrics) -> str:
    registry = CollectorRegistry()
    registry.register(PrometheusCollector(registries))
    return generate_latest(registry).decode()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_prometheus_exposition_names_and_labels(metrics: ConsumerMetrics) -> None:
    metrics.messages_per_sec("orders").mark(3)
    metrics.messages_per_sec().mark(3)
    metrics.zookeeper_commits_per_sec().mark(2)
    for ms in (10, 20, 30):
        metrics.rebalance_rate_and_time().update(ms)
    metrics.fetch_request_rate_and_time("127.0.0.1:9092").update(5)
    metrics.fetch_response_size("127.0.0.1:9092").update(1024)
    metrics.owned_partitions_count(None, lambda: 4)
    metrics.owned_partitions_count("orders", lambda: 4)
    metrics.fetch_queue_size("orders", 1, lambda: 2)
    metrics.consumer_lag("orders", 0, lambda: 12)
    metrics.max_lag()

    registry = CollectorRegistry()
    registry.register(metrics.collector())
    text = generate_latest(registry).decode()
    samples = _samples(text)

    c, g = ("client_id", "C"), ("group_id", "G")
    topic = ("topic", "orders")
    assert samples[("kafka_consumer_consumer_topic_metrics_messages_total", (c, topic))] == 3
    assert samples[("kafka_consumer_consumer_topic_metrics_messages_total", (c,))] == 3
    zcc = "kafka_consumer_zookeeper_consumer_connector"
    assert samples[(f"{zcc}_zookeeper_commits_total", (c,))] == 2
    assert samples[(f"{zcc}_rebalance_ms_count", (c,))] == 3
    assert samples[(f"{zcc}_rebalance_ms_sum", (c,))] == 60
    assert samples[(f"{zcc}_rebalance_ms", (c, ("quantile", "0.5")))] == 20
    assert samples[(f"{zcc}_owned_partitions_count", (c, g))] == 4
    assert samples[(f"{zcc}_owned_partitions_count", (c, g, topic))] == 4
    assert samples[(f"{zcc}_fetch_queue_size", (c, ("thread_id", "1"), topic))] == 2
    broker = ("broker", "127.0.0.1:9092")
    frr = "kafka_consumer_fetch_request_and_response_metrics"
    assert samples[(f"{frr}_fetch_request_ms_count", (broker, c))] == 1
    assert samples[(f"{frr}_fetch_response_size_bytes_sum", (broker, c))] == 1024
    lag = ("kafka_server_fetcher_lag_metrics_consumer_lag", (c, ("partition", "0"), topic))
    assert samples[lag] == 12
    assert samples[("kafka_consumer_consumer_fetcher_manager_max_lag", (c,))] == 12

    assert f"# TYPE {zcc}_rebalance_ms summary" in text
    assert "# TYPE kafka_consumer_consumer_topic_metrics_messages_total counter" in text
    assert "# TYPE kafka_server_fetcher_lag_metrics_consumer_lag gauge" in text
    assert "RebalanceRateAndTime" in text  # HELP names the original metric


def test_prometheus_family_names_are_legal_and_derived_from_the_mbean(
    metrics: ConsumerMetrics,
) -> None:
    metrics.messages_per_sec()
    metrics.bytes_per_sec()
    metrics.zookeeper_commits_per_sec()
    metrics.kafka_commits_per_sec()
    metrics.rebalance_rate_and_time()
    metrics.fetch_request_rate_and_time()
    metrics.fetch_request_throttle_rate_and_time()
    metrics.fetch_response_size()
    metrics.owned_partitions_count(None, lambda: 0)
    metrics.fetch_queue_size("t", 0, lambda: 0)
    metrics.consumer_lag("t", 0, lambda: 0)
    metrics.max_lag()
    metrics.min_fetch_rate()
    families = {prometheus_family(m.metric_name) for m in metrics}
    assert families == {
        "kafka_consumer_consumer_topic_metrics_messages",
        "kafka_consumer_consumer_topic_metrics_bytes",
        "kafka_consumer_zookeeper_consumer_connector_zookeeper_commits",
        "kafka_consumer_zookeeper_consumer_connector_kafka_commits",
        "kafka_consumer_zookeeper_consumer_connector_rebalance_ms",
        "kafka_consumer_fetch_request_and_response_metrics_fetch_request_ms",
        "kafka_consumer_fetch_request_and_response_metrics_fetch_request_throttle_ms",
        "kafka_consumer_fetch_request_and_response_metrics_fetch_response_size_bytes",
        "kafka_consumer_zookeeper_consumer_connector_owned_partitions_count",
        "kafka_consumer_zookeeper_consumer_connector_fetch_queue_size",
        "kafka_server_fetcher_lag_metrics_consumer_lag",
        "kafka_consumer_consumer_fetcher_manager_max_lag",
        "kafka_consumer_consumer_fetcher_manager_min_fetch_rate",
    }
    legal = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    assert all(legal.match(f) for f in families)
    text = _scrape(metrics)
    assert {f.name for f in text_string_to_metric_families(text)} == families


def test_one_collector_for_several_consumers_exposes_each_family_once(
    clock: FakeClock,
) -> None:
    a = ConsumerMetrics("a", "G", clock=clock)
    b = ConsumerMetrics("b", "G", clock=clock)
    a.kafka_commits_per_sec().mark(1)
    b.kafka_commits_per_sec().mark(2)
    text = _scrape(a, b)
    family = "kafka_consumer_zookeeper_consumer_connector_kafka_commits"
    assert text.count(f"# TYPE {family}_total counter") == 1
    samples = _samples(text)
    assert samples[(f"{family}_total", (("client_id", "a"),))] == 1
    assert samples[(f"{family}_total", (("client_id", "b"),))] == 2


def test_removed_metrics_leave_the_exposition(metrics: ConsumerMetrics) -> None:
    lag = metrics.consumer_lag("t", 0, lambda: 1)
    registry = CollectorRegistry()
    registry.register(metrics.collector())
    assert "consumer_lag{" in generate_latest(registry).decode()
    metrics.remove(lag)
    assert "consumer_lag{" not in generate_latest(registry).decode()
    metrics.remove_all()
    assert generate_latest(registry).decode() == ""


def test_collector_without_prometheus_client_names_the_extra(
    metrics: ConsumerMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client.core", None)
    with pytest.raises(ImportError, match=r"aiozkconsumer\[prometheus\]"):
        metrics.collector()


# ---- the package ------------------------------------------------------------------------


def _imported_modules(module: str) -> set[str]:
    """Top-level names of every module a metrics submodule imports (``.x`` for relative)."""
    source = Path(aiozkconsumer.metrics.__file__).with_name(f"{module}.py").read_text()
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or "").split(".")[0])
    return names


def test_instruments_import_only_the_standard_library() -> None:
    imported = _imported_modules("instruments")
    assert imported
    assert {name for name in imported if name not in sys.stdlib_module_names} == set()


def test_registry_and_prometheus_import_no_client_library() -> None:
    registry = _imported_modules("registry")
    prometheus = _imported_modules("prometheus")
    allowed = {".instruments", ".prometheus", ".registry", ".specs", "prometheus_client"}
    for imported in (registry, prometheus):
        assert {n for n in imported if n not in sys.stdlib_module_names} <= allowed
    assert "prometheus_client" not in registry  # imported lazily, by the collector only


@pytest.mark.parametrize("name", aiozkconsumer.metrics.__all__)
def test_the_package_re_exports_each_name_of_its_modules(name: str) -> None:
    exported = getattr(aiozkconsumer.metrics, name)
    homes = [
        module
        for module in ("instruments", "specs", "registry", "prometheus")
        if getattr(importlib.import_module(f"aiozkconsumer.metrics.{module}"), name, None)
        is exported
    ]
    assert homes, name
