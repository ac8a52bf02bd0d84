"""The original consumer's metric names: where each lives and its kind (pure data).

Shared by the named registry (``registry.py``) and the Prometheus export (``prometheus.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from .instruments import MetricName

__all__ = ["SPECS", "Kind", "MetricSpec", "spec_of"]

Kind: TypeAlias = Literal["meter", "timer", "histogram", "gauge"]
"""A metric's kind, as the original's Yammer class (``Meter``, ``Timer``, ...)."""


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """What the original defined for one metric name: where it lives and its kind."""

    group: str
    type: str
    name: str
    kind: Kind
    unit: str
    help: str


_ZCC = "ZookeeperConsumerConnector"
_FRR = "FetchRequestAndResponseMetrics"

_MESSAGES = MetricSpec(
    "kafka.consumer",
    "ConsumerTopicMetrics",
    "MessagesPerSec",
    "meter",
    "",
    "Messages handed to the application by the stream iterators.",
)
_BYTES = MetricSpec(
    "kafka.consumer",
    "ConsumerTopicMetrics",
    "BytesPerSec",
    "meter",
    "",
    "Bytes of fetched record data enqueued for the streams.",
)
_CORRUPT_BATCHES = MetricSpec(
    "kafka.consumer",
    "ConsumerTopicMetrics",
    "CorruptBatchesPerSec",
    "meter",
    "",
    "Fetched record batches whose CRC did not match (never delivered; new, not the original's).",
)
_ZK_COMMITS = MetricSpec(
    "kafka.consumer",
    _ZCC,
    "ZooKeeperCommitsPerSec",
    "meter",
    "",
    "Offset writes to ZooKeeper (unchanged offsets are not written).",
)
_KAFKA_COMMITS = MetricSpec(
    "kafka.consumer",
    _ZCC,
    "KafkaCommitsPerSec",
    "meter",
    "",
    "Partitions sent in offset commits to Kafka.",
)
_REBALANCE = MetricSpec(
    "kafka.consumer",
    _ZCC,
    "RebalanceRateAndTime",
    "timer",
    "ms",
    "Rebalances and their duration in milliseconds.",
)
_OWNED = MetricSpec(
    "kafka.consumer",
    _ZCC,
    "OwnedPartitionsCount",
    "gauge",
    "",
    "Partitions this consumer owns.",
)
_QUEUE = MetricSpec(
    "kafka.consumer",
    _ZCC,
    "FetchQueueSize",
    "gauge",
    "",
    "Fetched chunks waiting in a stream's queue.",
)
_FETCH_TIME = MetricSpec(
    "kafka.consumer",
    _FRR,
    "FetchRequestRateAndTimeMs",
    "timer",
    "ms",
    "Fetch requests and their round-trip time in milliseconds.",
)
_THROTTLE = MetricSpec(
    "kafka.consumer",
    _FRR,
    "FetchRequestThrottleRateAndTimeMs",
    "timer",
    "ms",
    "Quota throttle time the brokers reported in fetch responses, in milliseconds.",
)
_RESPONSE_SIZE = MetricSpec(
    "kafka.consumer",
    _FRR,
    "FetchResponseSize",
    "histogram",
    "bytes",
    "Record bytes per fetch response.",
)
_LAG = MetricSpec(
    "kafka.server",
    "FetcherLagMetrics",
    "ConsumerLag",
    "gauge",
    "",
    "High watermark minus fetch offset of a partition, after its last fetch.",
)
_MAX_LAG = MetricSpec(
    "kafka.consumer",
    "ConsumerFetcherManager",
    "MaxLag",
    "gauge",
    "",
    "Largest ConsumerLag of this consumer's partitions.",
)
_MIN_FETCH_RATE = MetricSpec(
    "kafka.consumer",
    "ConsumerFetcherManager",
    "MinFetchRate",
    "gauge",
    "",
    "Smallest one-minute fetch request rate across the brokers fetched from.",
)

SPECS: Final[dict[tuple[str, str, str], MetricSpec]] = {
    (spec.group, spec.type, spec.name): spec
    for spec in (
        _MESSAGES,
        _BYTES,
        _CORRUPT_BATCHES,
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
"""Every metric the original's consumer defined, by ``(group, type, name)``, and the one this
consumer adds (``CorruptBatchesPerSec``, for ``check.crcs``)."""


def spec_of(metric_name: MetricName) -> MetricSpec:
    """What the original defined for a metric name: its kind, unit and meaning.

    Args:
        metric_name: the name of a metric of a :class:`ConsumerMetrics`.

    Returns:
        The metric's specification (tags aside, every name of one metric shares it).

    Raises:
        KeyError: the name is not one of the original's consumer metrics.
    """
    return SPECS[(metric_name.group, metric_name.type, metric_name.name)]
