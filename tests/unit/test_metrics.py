"""ConsumerMetrics: Yammer-style meters/timers/gauges, the original's names, Prometheus export.

The export is checked against a restatement of promlint (``promtool check metrics`` is not
available to the tests).
"""

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
    PROMETHEUS_FAMILIES,
    ConsumerMetrics,
    MetricName,
    PrometheusCollector,
    PrometheusFamily,
    prometheus_family,
)
from aiozkconsumer.metrics.specs import SPECS

SPEC_BY_NAME = {spec.name: spec for spec in SPECS.values()}


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


# ---- Prometheus: a promlint equivalent --------------------------------------------------

# Prometheus' promlint (`promtool check metrics`, client_golang testutil/promlint), restated:
# its unit tables and the abbreviations it refuses.
_BASE_UNITS = {"amperes", "bytes", "celsius", "grams", "joules", "kelvin", "meters", "metres"}
_BASE_UNITS |= {"seconds", "volts"}
_NON_BASE_UNITS = {
    "minutes": "seconds",
    "hours": "seconds",
    "days": "seconds",
    "weeks": "seconds",
    "kelvins": "kelvin",
    "fahrenheit": "celsius",
    "rankine": "celsius",
    "inches": "meters",
    "yards": "meters",
    "miles": "meters",
    "bits": "bytes",
    "calories": "joules",
    "pounds": "grams",
    "ounces": "grams",
}
_UNIT_PREFIXES = ("pico", "nano", "micro", "milli", "centi", "deci", "deca", "hecto", "kilo")
_UNIT_PREFIXES += ("kibi", "mega", "mibi", "giga", "gibi", "tera", "tebi", "peta", "pebi")
_ABBREVIATIONS = {"s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "tb", "pb", "m", "h", "d"}
_TYPES_IN_NAMES = ("counter", "gauge", "histogram", "summary", "gauge_histogram")
_SNAKE_CASE = re.compile(r"^[a-z_][a-z0-9_]*$")


def _unit(name: str) -> tuple[str, str] | None:
    """The first unit word of a metric name and its base unit, as promlint's ``metricUnits``."""
    units = {**{u: u for u in _BASE_UNITS}, **_NON_BASE_UNITS}
    for word in name.split("_"):
        if word in units:
            return word, units[word]
        for prefix in _UNIT_PREFIXES:
            if word.startswith(prefix) and word[len(prefix) :] in units:
                return word, units[word[len(prefix) :]]
    return None


def _promlint(text: str) -> list[str]:
    """promlint's problems with an exposition, plus this project's own rules.

    Every family is parsed with ``text_string_to_metric_families``. The parser strips a
    counter's ``_total`` from the family's name and adds it to its samples' names whatever the
    exposition said, so the name promtool lints is the one of the family's ``# TYPE`` line.
    """
    problems: list[str] = []
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    names: list[str] = []
    declared = set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))
    for family in text_string_to_metric_families(text):
        kind = family.type
        exposed = f"{family.name}_total" if f"{family.name}_total" in declared else family.name
        names.append(exposed)

        def problem(message: str, name: str = exposed) -> None:
            problems.append(f"{name}: {message}")

        if not family.documentation.strip():
            problem("no help text")
        if kind == "counter" and not exposed.endswith("_total"):
            problem('counter metrics should have "_total" suffix')
        if kind not in ("counter", "unknown") and exposed.endswith("_total"):
            problem('non-counter metrics should not have "_total" suffix')
        if kind not in ("gauge", "unknown") and exposed.endswith("_timestamp_seconds"):
            problem('non-gauge metrics should not have "_timestamp_seconds" suffix')
        if kind != "histogram" and exposed.endswith("_bucket"):
            problem('non-histogram metrics should not have "_bucket" suffix')
        for suffix in ("_count", "_sum"):
            if kind not in ("histogram", "summary") and exposed.endswith(suffix):
                problem(f'non-histogram and non-summary metrics should not have "{suffix}" suffix')
        for typename in _TYPES_IN_NAMES:
            if f"_{typename}_" in exposed or exposed.endswith(f"_{typename}"):
                problem(f"metric name should not include type '{typename}'")
        if ":" in exposed:
            problem("metric names should not contain ':'")
        if not _SNAKE_CASE.match(exposed):
            problem("metric names should be written in 'snake_case'")
        for abbreviation in _ABBREVIATIONS:
            if f"_{abbreviation}_" in exposed or exposed.endswith(f"_{abbreviation}"):
                problem("metric names should not contain abbreviated units")
        unit = _unit(exposed)
        if unit is not None and unit[0] != unit[1]:
            problem(f"use base unit {unit[1]!r} instead of {unit[0]!r}")
        # This project's rules: a unit is the name's suffix (before _total); no summaries,
        # whose quantiles cannot be aggregated; one prefix, never kafka_server_.
        if unit is not None and not exposed.removesuffix("_total").endswith(f"_{unit[0]}"):
            problem(f"the unit {unit[0]!r} should be the name's suffix")
        if kind == "summary" or any("quantile" in s.labels for s in family.samples):
            problem("a summary with quantiles: use a histogram")
        if exposed.startswith("kafka_server_") or not exposed.startswith("kafka_consumer_"):
            problem("consumer metrics are named kafka_consumer_*")
        for sample in family.samples:
            for label in sample.labels:
                if not _SNAKE_CASE.match(label):
                    problem(f"label names should be written in 'snake_case': {label}")
                if label == "le" and kind != "histogram":
                    problem('non-histogram metrics should not have "le" label')
                if label == "quantile" and kind != "summary":
                    problem('non-summary metrics should not have "quantile" label')
            key = (sample.name, tuple(sorted(sample.labels.items())))
            if key in seen:
                problem(f"duplicate series {key}")
            seen.add(key)
    problems.extend(f"{n}: duplicate family" for n in {n for n in names if names.count(n) > 1})
    return problems


def _populate(metrics: ConsumerMetrics) -> None:
    """Every metric the connector creates, with values (as a connector would after a while)."""
    for topic, n in (("orders", 3), ("payments", 5)):
        metrics.messages_per_sec(topic).mark(n)
        metrics.messages_per_sec().mark(n)
        metrics.bytes_per_sec(topic).mark(100 * n)
        metrics.bytes_per_sec().mark(100 * n)
        metrics.corrupt_batches_per_sec(topic).mark(1)
        metrics.corrupt_batches_per_sec().mark(1)
        metrics.owned_partitions_count(topic, lambda: 1)
        metrics.fetch_queue_size(topic, 0, lambda: 2)
        metrics.consumer_lag(topic, 0, lambda: 12)
    metrics.owned_partitions_count(None, lambda: 2)
    metrics.zookeeper_commits_per_sec().mark(2)
    metrics.kafka_commits_per_sec().mark(1)
    metrics.rebalance_rate_and_time().update(42.0)
    metrics.record_fetch("127.0.0.1:9092", 5.0, 1024, 0.0)
    metrics.record_fetch("127.0.0.2:9092", 150.0, 0, 20.0)
    metrics.max_lag()
    metrics.min_fetch_rate()


def test_promlint_finds_the_problems_of_the_old_names() -> None:
    old = """\
# HELP kafka_consumer_zookeeper_consumer_connector_rebalance_ms Rebalances.
# TYPE kafka_consumer_zookeeper_consumer_connector_rebalance_ms summary
kafka_consumer_zookeeper_consumer_connector_rebalance_ms{client_id="C",quantile="0.5"} 20.0
kafka_consumer_zookeeper_consumer_connector_rebalance_ms_count{client_id="C"} 3.0
kafka_consumer_zookeeper_consumer_connector_rebalance_ms_sum{client_id="C"} 60.0
# HELP kafka_server_fetcher_lag_metrics_consumer_lag Lag.
# TYPE kafka_server_fetcher_lag_metrics_consumer_lag gauge
kafka_server_fetcher_lag_metrics_consumer_lag{clientId="C"} 12.0
# HELP kafka_consumer_zookeeper_consumer_connector_owned_partitions_count Owned.
# TYPE kafka_consumer_zookeeper_consumer_connector_owned_partitions_count gauge
kafka_consumer_zookeeper_consumer_connector_owned_partitions_count{client_id="C"} 4.0
# HELP kafka_consumer_fetch_milliseconds Fetches.
# TYPE kafka_consumer_fetch_milliseconds counter
kafka_consumer_fetch_milliseconds{client_id="C"} 4.0
# HELP kafka_consumer_bytes_total_gauge
# TYPE kafka_consumer_bytes_total_gauge gauge
kafka_consumer_bytes_total_gauge 1.0
"""
    problems = "\n".join(_promlint(old))
    rebalance = "kafka_consumer_zookeeper_consumer_connector_rebalance_ms"
    assert f"{rebalance}: metric names should not contain abbreviated units" in problems
    assert f"{rebalance}: a summary with quantiles: use a histogram" in problems
    lag = "kafka_server_fetcher_lag_metrics_consumer_lag"
    assert f"{lag}: consumer metrics are named kafka_consumer_*" in problems
    assert f"{lag}: label names should be written in 'snake_case': clientId" in problems
    owned = "kafka_consumer_zookeeper_consumer_connector_owned_partitions_count"
    assert f'{owned}: non-histogram and non-summary metrics should not have "_count"' in problems
    fetch = "kafka_consumer_fetch_milliseconds"
    assert f'{fetch}: counter metrics should have "_total" suffix' in problems
    assert f"{fetch}: use base unit 'seconds' instead of 'milliseconds'" in problems
    gauge = "kafka_consumer_bytes_total_gauge"
    assert f"{gauge}: no help text" in problems
    assert f"{gauge}: metric name should not include type 'gauge'" in problems
    assert f"{gauge}: the unit 'bytes' should be the name's suffix" in problems


def test_exposition_is_promlint_clean(clock: FakeClock) -> None:
    a = ConsumerMetrics("a", "G", clock=clock)
    b = ConsumerMetrics("b", "", clock=clock)
    _populate(a)
    _populate(b)
    text = _scrape(a, b)
    assert _promlint(text) == []
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    expected = {
        prometheus_family(m.metric_name) for m in a if prometheus_family(m.metric_name) is not None
    }
    assert set(families) == expected
    assert len(families) == len(PROMETHEUS_FAMILIES)  # every family, each once
    assert "summary" not in families.values()
    assert not any(name.endswith("_created") for name in families)


@pytest.mark.parametrize(
    ("original", "family"),
    [pytest.param(original, f, id=f.name) for (original, _), f in PROMETHEUS_FAMILIES.items()],
)
def test_each_family_is_named_by_the_rules(original: str, family: PrometheusFamily) -> None:
    assert family.name.startswith("kafka_consumer_")
    assert family.name.endswith("_total") == (family.type == "counter")
    assert (SPEC_BY_NAME[original].kind == "meter") == (family.type == "counter")
    if SPEC_BY_NAME[original].kind == "timer":
        assert family.type == "histogram" and family.name.endswith("_seconds")
        assert family.divisor == 1000.0
    if original == "FetchResponseSize":
        assert family.type == "histogram" and family.name.endswith("_bytes")
    assert list(family.buckets) == sorted(family.buckets)
    assert bool(family.buckets) == (family.type == "histogram")
    assert all(_SNAKE_CASE.match(label) for label in family.labels)
    assert family.labels[0] == "client_id"


# ---- Prometheus: values -----------------------------------------------------------------


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


def _family(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (s.labels, s.value)
        for f in text_string_to_metric_families(text)
        if f.name == name
        for s in f.samples
    ]


def test_sum_over_the_per_topic_family_is_the_all_topics_value(
    metrics: ConsumerMetrics,
) -> None:
    # As ConsumerIterator: each record marks its topic's meter and the all-topics meter.
    for topic, records in (("orders", 7), ("payments", 5), ("orders", 2)):
        metrics.messages_per_sec(topic).mark(records)
        metrics.messages_per_sec().mark(records)
        metrics.bytes_per_sec(topic).mark(10 * records)
        metrics.bytes_per_sec().mark(10 * records)
    text = _scrape(metrics)
    for all_topics, per_topic in (
        ("kafka_consumer_messages", "kafka_consumer_topic_messages"),
        ("kafka_consumer_bytes", "kafka_consumer_topic_bytes"),
    ):
        total = _family(text, all_topics)
        topics = _family(text, per_topic)
        assert [labels for labels, _ in total] == [{"client_id": "C"}]
        assert sorted(labels["topic"] for labels, _ in topics) == ["orders", "payments"]
        # sum(kafka_consumer_topic_messages_total) == kafka_consumer_messages_total
        assert sum(value for _, value in topics) == total[0][1]
    per_topic_messages = _family(text, "kafka_consumer_topic_messages")
    assert {labels["topic"]: value for labels, value in per_topic_messages} == {
        "orders": 9,
        "payments": 5,
    }
    assert _family(text, "kafka_consumer_messages") == [({"client_id": "C"}, 14)]


def test_timers_are_histograms_in_seconds(metrics: ConsumerMetrics, clock: FakeClock) -> None:
    timer = metrics.rebalance_rate_and_time()
    with timer.time():
        clock.advance(0.25)
    with timer.time():
        clock.advance(0.75)
    timer.update(-1)  # ignored, as by the snapshot
    metrics.fetch_response_size().update(0)
    metrics.fetch_response_size().update(3000)
    samples = _samples(_scrape(metrics))
    c = ("client_id", "C")
    rebalance = "kafka_consumer_rebalance_duration_seconds"
    assert samples[(f"{rebalance}_count", (c,))] == 2
    assert samples[(f"{rebalance}_sum", (c,))] == pytest.approx(1.0)
    assert samples[(f"{rebalance}_bucket", (c, ("le", "0.1")))] == 0
    assert samples[(f"{rebalance}_bucket", (c, ("le", "0.25")))] == 1
    assert samples[(f"{rebalance}_bucket", (c, ("le", "1.0")))] == 2
    assert samples[(f"{rebalance}_bucket", (c, ("le", "+Inf")))] == 2
    size = "kafka_consumer_fetch_response_size_bytes"
    assert samples[(f"{size}_bucket", (c, ("le", "0.0")))] == 1  # empty responses
    assert samples[(f"{size}_bucket", (c, ("le", "4096.0")))] == 2
    assert samples[(f"{size}_sum", (c,))] == 3000
    # The snapshot keeps the original's milliseconds and percentiles.
    assert timer.attributes()["Max"] == pytest.approx(750.0)


def test_prometheus_series_names_and_labels(metrics: ConsumerMetrics) -> None:
    _populate(metrics)
    samples = _samples(_scrape(metrics))
    c, g = ("client_id", "C"), ("group_id", "G")
    orders = ("topic", "orders")
    assert samples[("kafka_consumer_zookeeper_commits_total", (c,))] == 2
    assert samples[("kafka_consumer_kafka_commits_total", (c,))] == 1
    assert samples[("kafka_consumer_owned_partitions", (c, g))] == 2
    assert samples[("kafka_consumer_topic_owned_partitions", (c, g, orders))] == 1
    assert samples[("kafka_consumer_fetch_queue_chunks", (c, ("thread_id", "0"), orders))] == 2
    lag = ("kafka_consumer_fetch_lag_records", (c, ("partition", "0"), orders))
    assert samples[lag] == 12
    assert samples[("kafka_consumer_max_fetch_lag_records", (c,))] == 12
    broker = ("broker", "127.0.0.2:9092")
    per_broker = "kafka_consumer_broker_fetch_request_duration_seconds"
    assert samples[(f"{per_broker}_sum", (broker, c))] == pytest.approx(0.15)
    assert samples[("kafka_consumer_fetch_request_duration_seconds_count", (c,))] == 2
    throttle = "kafka_consumer_broker_fetch_throttle_duration_seconds"
    assert samples[(f"{throttle}_sum", (broker, c))] == pytest.approx(0.02)
    assert not any("min_fetch_rate" in name for name, _ in samples)  # a client-side rate


def test_help_names_the_original_metric(metrics: ConsumerMetrics) -> None:
    metrics.rebalance_rate_and_time().update(1)
    metrics.consumer_lag("t", 0, lambda: 1)
    helps = {f.name: f.documentation for f in text_string_to_metric_families(_scrape(metrics))}
    assert helps["kafka_consumer_rebalance_duration_seconds"].endswith(
        "Originally kafka.consumer:type=ZookeeperConsumerConnector,name=RebalanceRateAndTime."
    )
    assert (
        "kafka.server:type=FetcherLagMetrics,name=ConsumerLag"
        in (helps["kafka_consumer_fetch_lag_records"])
    )


def test_prometheus_and_snapshot_count_the_same_events(metrics: ConsumerMetrics) -> None:
    meter = metrics.kafka_commits_per_sec()
    for n in (1, 3, 0):
        meter.mark(n)
    meter.mark(-2)  # a Yammer meter took it; a Prometheus counter only goes up
    timer = metrics.fetch_request_rate_and_time("h:1")
    for ms in (1, 2, 3):
        timer.update(ms)
    samples = _samples(_scrape(metrics))
    assert samples[("kafka_consumer_kafka_commits_total", (("client_id", "C"),))] == 4
    assert meter.count == 2
    key = (("broker", "h:1"), ("client_id", "C"))
    assert samples[("kafka_consumer_broker_fetch_request_duration_seconds_count", key)] == 3
    assert metrics.snapshot()[timer.mbean_name]["Count"] == 3


def test_every_metric_but_min_fetch_rate_has_a_family(metrics: ConsumerMetrics) -> None:
    _populate(metrics)
    families = {m.metric_name.name: prometheus_family(m.metric_name) for m in metrics}
    assert families.pop("MinFetchRate") is None
    assert None not in families.values()
    assert prometheus_family(metrics.messages_per_sec("t").metric_name) == (
        "kafka_consumer_topic_messages"  # a counter's family, without _total
    )
    with pytest.raises(KeyError):
        prometheus_family(MetricName("kafka.consumer", "Nope", "Nope", ()))


def test_one_collector_for_several_consumers_exposes_each_family_once(
    clock: FakeClock,
) -> None:
    a = ConsumerMetrics("a", "G", clock=clock)
    b = ConsumerMetrics("b", "G", clock=clock)
    a.kafka_commits_per_sec().mark(1)
    b.kafka_commits_per_sec().mark(2)
    text = _scrape(a, b)
    family = "kafka_consumer_kafka_commits"
    assert text.count(f"# TYPE {family}_total counter") == 1
    samples = _samples(text)
    assert samples[(f"{family}_total", (("client_id", "a"),))] == 1
    assert samples[(f"{family}_total", (("client_id", "b"),))] == 2


def test_each_connector_has_a_registry_of_its_own(clock: FakeClock) -> None:
    a = ConsumerMetrics("same", clock=clock)
    b = ConsumerMetrics("same", clock=clock)  # no global state: no duplicate-name error
    a.messages_per_sec().mark(1)
    assert _family(_scrape(b), "kafka_consumer_messages") == []
    assert _family(_scrape(a), "kafka_consumer_messages") == [({"client_id": "same"}, 1)]


def test_removed_metrics_leave_the_exposition(metrics: ConsumerMetrics) -> None:
    lag = metrics.consumer_lag("t", 0, lambda: 1)
    meter = metrics.messages_per_sec("t")
    meter.mark(5)
    registry = CollectorRegistry()
    registry.register(metrics.collector())
    assert "kafka_consumer_fetch_lag_records{" in generate_latest(registry).decode()
    metrics.remove(lag)
    assert "kafka_consumer_fetch_lag_records" not in generate_latest(registry).decode()
    metrics.remove(meter)
    meter.mark(1)  # still held (by a stream, say): counts unseen
    metrics.messages_per_sec("t").mark(2)  # a new meter, a new series from 0
    assert _family(generate_latest(registry).decode(), "kafka_consumer_topic_messages") == [
        ({"client_id": "C", "topic": "t"}, 2)
    ]
    metrics.remove_all()
    assert generate_latest(registry).decode() == ""


def test_a_failing_gauge_reads_nan_in_the_exposition(metrics: ConsumerMetrics) -> None:
    def broken() -> float:
        raise RuntimeError("queue gone")

    metrics.fetch_queue_size("t", 0, broken)
    [(_, value)] = _family(_scrape(metrics), "kafka_consumer_fetch_queue_chunks")
    assert math.isnan(value)


def test_without_prometheus_client_only_the_collector_fails(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    metrics = ConsumerMetrics("C", clock=clock)
    metrics.messages_per_sec().mark(2)
    metrics.rebalance_rate_and_time().update(3)
    metrics.consumer_lag("t", 0, lambda: 1)
    assert metrics.snapshot()[metrics.messages_per_sec().mbean_name]["Count"] == 2
    metrics.remove_all()
    with pytest.raises(ImportError, match=r"aiozkconsumer\[prometheus\]"):
        metrics.collector()


def test_docs_map_every_original_name_to_its_family() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text(encoding="utf-8")
    row = re.compile(r"^\| `(\w+)` \|([\w ]*)\| `(\w+)` \| (\w+) \| (.*) \|$", re.MULTILINE)
    documented = {(m[1], m[3], m[4], m[5]) for m in row.finditer(text)}
    expected = {
        (original, f.name, f.type, ", ".join(f"`{label}`" for label in f.labels))
        for (original, _), f in PROMETHEUS_FAMILIES.items()
    }
    assert documented == expected
    originals = {spec.name for spec in SPECS.values()}
    assert {m[0] for m in documented} == originals - {"MinFetchRate"}
    assert "| `MinFetchRate` | | — | — |" in text


# ---- the package ------------------------------------------------------------------------


def _tree(module: str) -> ast.Module:
    source = Path(aiozkconsumer.metrics.__file__).with_name(f"{module}.py").read_text()
    return ast.parse(source)


def _imported_modules(module: str, *, top_level_only: bool = False) -> set[str]:
    """Top-level names of the modules a metrics submodule imports (``.x`` for relative).

    With ``top_level_only``, only the imports run when the module is imported (not those in a
    function or under ``if TYPE_CHECKING:``).
    """
    tree = _tree(module)
    nodes: list[ast.AST] = list(tree.body) if top_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or "").split(".")[0])
    return names


def test_instruments_import_only_the_standard_library() -> None:
    imported = _imported_modules("instruments")
    assert imported
    assert {name for name in imported if name not in sys.stdlib_module_names} == set()


@pytest.mark.parametrize("module", ["instruments", "specs", "registry", "prometheus", "__init__"])
def test_prometheus_client_is_imported_only_when_instruments_are_made(module: str) -> None:
    top = _imported_modules(module, top_level_only=True)
    allowed = {".instruments", ".prometheus", ".registry", ".specs", "."}
    assert {n for n in top if n not in sys.stdlib_module_names} <= allowed
    everywhere = _imported_modules(module)
    assert ("prometheus_client" in everywhere) == (module == "prometheus")


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
