"""Offset stores: ZooKeeper, Kafka, or both (``offsets.storage`` / ``dual.commit.enabled``).

Offsets are "next offset to read". Three stores share the :class:`OffsetStore` protocol:

- :class:`ZookeeperOffsetStore`: a decimal string at ``/consumers/<group>/offsets/<t>/<p>``.
  A partition's node is written only when its offset differs from the last value read or
  written (the original's ``checkpointedZkOffsets``), so an idle consumer causes no writes.
- :class:`KafkaOffsetStore`: OffsetCommit / OffsetFetch to the group's coordinator, as a
  "simple consumer" (generation -1, member id ``""``): the broker keeps the offsets without
  the group ever joining Kafka's group protocol. Commits are always full (KAFKA-1510), so
  the broker's retention keeps being refreshed.
- :class:`DualOffsetStore`: both, as ``dual.commit.enabled`` for migrating a group between
  storages.

:func:`make_offset_store` picks one from a :class:`~aiozkconsumer.config.ConsumerConfig`.

The decisions on Kafka's answers are pure functions (:func:`classify_commit_errors`,
:func:`classify_fetch_response`, :func:`dual_fetch_result`), kept apart from the code that
talks to the brokers.

Modules: ``rules`` (the pure decisions), ``store`` (the :class:`OffsetStore` protocol and
:func:`make_offset_store`), ``zookeeper_store``, ``kafka_store`` (over the Kafka adapter's
:class:`~aiozkconsumer.kafka.channel.OffsetsChannel`) and ``dual_store``. Every name is
imported from here.

Retries, and how they differ from the original
----------------------------------------------
In 0.9-0.10.2 ``commitOffsets(retryOnFailure)`` passed its argument on as ``isAutoCommit``, so
``commitOffsets()`` / ``commitOffsets(true)`` (explicit commits, the shutdown commit, the
rebalance commit) made a single attempt while the auto-commit thread got
``1 + offsets.commit.max.retries``: the reverse of the documentation ("retry ... during
shut-down") and of the parameter's name. Here the caller says what it wants:
``commit(offsets, retries=n)`` makes ``1 + n`` attempts with ``offsets.channel.backoff.ms``
between them, and the connector passes ``retries=offsets.commit.max.retries`` for explicit,
shutdown and auto commits, as the documentation promised.

Reading offsets from Kafka looped forever in the original (while holding the rebalance lock);
here it gives up after a time limit with :class:`~aiozkconsumer.errors.OffsetFetchError`.
"""

from ..kafka.channel import KafkaGetter
from ..kafka.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NO_ANSWER,
    NONE,
    NOT_COORDINATOR,
    OFFSET_METADATA_TOO_LARGE,
    UNKNOWN_TOPIC_OR_PARTITION,
    error_name,
)
from .dual_store import DualOffsetStore
from .kafka_store import CommitResult, KafkaOffsetStore
from .rules import (
    NO_OFFSET,
    CommitVerdict,
    FetchAction,
    FetchVerdict,
    classify_commit_errors,
    classify_fetch_response,
    default_fetch_timeout_ms,
    dual_fetch_result,
)
from .store import OffsetStore, make_offset_store
from .zookeeper_store import ZookeeperOffsetStore

__all__ = [
    "COORDINATOR_LOAD_IN_PROGRESS",
    "COORDINATOR_NOT_AVAILABLE",
    "NONE",
    "NOT_COORDINATOR",
    "NO_ANSWER",
    "NO_OFFSET",
    "OFFSET_METADATA_TOO_LARGE",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "CommitResult",
    "CommitVerdict",
    "DualOffsetStore",
    "FetchAction",
    "FetchVerdict",
    "KafkaGetter",
    "KafkaOffsetStore",
    "OffsetStore",
    "ZookeeperOffsetStore",
    "classify_commit_errors",
    "classify_fetch_response",
    "default_fetch_timeout_ms",
    "dual_fetch_result",
    "error_name",
    "make_offset_store",
]
