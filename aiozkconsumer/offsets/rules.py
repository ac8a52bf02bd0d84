"""The pure rules of offset storage: what Kafka's answers mean, and which offset wins.

No I/O here: the stores (``zookeeper_store.py``, ``kafka_store.py``, ``dual_store.py``) call
these with the answers they got and act on the verdicts. Each rule names its source in
``ZookeeperConsumerConnector.scala`` (0.10.2), and where it departs from it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..kafka.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NONE,
    NOT_COORDINATOR,
    OFFSET_METADATA_TOO_LARGE,
    UNKNOWN_TOPIC_OR_PARTITION,
    error_name,
    is_retriable,
)
from ..records import TopicPartition

__all__ = [
    "NO_OFFSET",
    "CommitVerdict",
    "FetchAction",
    "FetchVerdict",
    "check_retries",
    "classify_commit_errors",
    "classify_fetch_response",
    "default_fetch_timeout_ms",
    "dual_fetch_result",
]

NO_OFFSET = -1
"""The offset of a partition with no committed offset (``OffsetMetadataAndError.NoOffset``)."""

_COORDINATOR_MOVED = frozenset({NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE})


def default_fetch_timeout_ms(socket_timeout_ms: int, max_retries: int) -> int:
    """The default time limit of an offset fetch from Kafka, in ms.

    ``offsets.channel.socket.timeout.ms x (1 + offsets.commit.max.retries)`` (60 s with the
    defaults): as long as a commit may take, at one request timeout per attempt. The original
    had no limit.
    """
    return socket_timeout_ms * (1 + max_retries)


@dataclass(frozen=True)
class CommitVerdict:
    """What one OffsetCommit answer means, as the fold in ``commitOffsets`` (0.10.2).

    Attributes:
        accepted: partitions the coordinator committed (error ``NONE``).
        failed: ``{partition: error code}`` of the others.
        refresh_coordinator: some partition got ``NOT_COORDINATOR`` or
            ``COORDINATOR_NOT_AVAILABLE``: look the coordinator up again before retrying
            (the original's ``offsetsChannel.disconnect()``).
        retryable: some partition failed with an error other than
            ``OFFSET_METADATA_TOO_LARGE``.
    """

    accepted: frozenset[TopicPartition]
    failed: Mapping[TopicPartition, int]
    refresh_coordinator: bool
    retryable: bool

    @property
    def committed(self) -> bool:
        """Whether the commit counts as done: nothing failed, or only with
        ``OFFSET_METADATA_TOO_LARGE`` (``committed = !(commitFailed && retryable)``)."""
        return not (self.failed and self.retryable)

    @property
    def to_retry(self) -> frozenset[TopicPartition]:
        """Failed partitions worth sending again (all but ``OFFSET_METADATA_TOO_LARGE``)."""
        return frozenset(tp for tp, c in self.failed.items() if c != OFFSET_METADATA_TOO_LARGE)


def classify_commit_errors(errors: Mapping[TopicPartition, int]) -> CommitVerdict:
    """Classify the per-partition error codes of an OffsetCommit response.

    As the fold over the response in ``ZookeeperConsumerConnector.commitOffsets`` (0.10.2):
    ``commitFailed |= code != NONE``, ``retryable |= code not in (NONE,
    OFFSET_METADATA_TOO_LARGE)``, ``refreshCoordinator |= code in (NOT_COORDINATOR_FOR_GROUP,
    GROUP_COORDINATOR_NOT_AVAILABLE)``. Every other error, ``COORDINATOR_LOAD_IN_PROGRESS``
    included, is a retryable failure.

    Args:
        errors: ``{partition: error code}``; a partition the answer left out should be
            given as ``NO_ANSWER`` (-1).

    Returns:
        The verdict.
    """
    accepted = frozenset(tp for tp, code in errors.items() if code == NONE)
    failed = {tp: code for tp, code in errors.items() if code != NONE}
    return CommitVerdict(
        accepted=accepted,
        failed=failed,
        refresh_coordinator=any(code in _COORDINATOR_MOVED for code in failed.values()),
        retryable=any(code != OFFSET_METADATA_TOO_LARGE for code in failed.values()),
    )


class FetchAction(enum.Enum):
    """What to do after an OffsetFetch answer."""

    DONE = "done"
    """The answer holds every partition's committed offset."""
    REDISCOVER = "rediscover"
    """The coordinator moved: look it up again, then retry."""
    RETRY = "retry"
    """A transient error (the coordinator is loading the group's offsets): retry."""
    FAIL = "fail"
    """An error retrying cannot fix (an authorization failure): give up."""


@dataclass(frozen=True)
class FetchVerdict:
    """What one OffsetFetch answer means.

    Attributes:
        action: what to do next.
        offsets: with ``DONE``, ``{partition: offset}`` for every partition asked for,
            ``NO_OFFSET`` where none is committed; empty otherwise.
        errors: the error codes that decided the action, ``{partition: code}``; the
            response-level error (OffsetFetch v2+) is under the key ``None``.
    """

    action: FetchAction
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    errors: Mapping[TopicPartition | None, int] = field(default_factory=dict)

    def describe(self) -> str:
        """The errors in words, for logs and exceptions."""
        return ", ".join(
            f"{'group' if tp is None else tp}: {error_name(code)}"
            for tp, code in sorted(self.errors.items(), key=lambda kv: str(kv[0]))
        )


def classify_fetch_response(
    requested: Iterable[TopicPartition],
    group_error: int,
    partitions: Mapping[TopicPartition, tuple[int, int]],
) -> FetchVerdict:
    """Classify an OffsetFetch response.

    As ``fetchOffsets`` with Kafka storage (0.10.2): ``NOT_COORDINATOR_FOR_GROUP`` on any
    partition means look the coordinator up again and retry, ``GROUP_LOAD_IN_PROGRESS`` means
    retry. Beyond the original: ``COORDINATOR_NOT_AVAILABLE`` also means rediscover; the
    response-level error of OffsetFetch v2+ (KIP-88, which the original's v1 did not have) is
    read the same way; ``UNKNOWN_TOPIC_OR_PARTITION`` gives ``NO_OFFSET`` (what the original
    passed on); any other retriable error means retry; and a non-retriable error (e.g.
    ``GROUP_AUTHORIZATION_FAILED``) means fail — the original passed such partitions on with
    offset -1, which silently reset them by ``auto.offset.reset``.

    Args:
        requested: the partitions asked for.
        group_error: the response-level error code (0 for OffsetFetch v1).
        partitions: ``{partition: (offset, error code)}`` as answered.

    Returns:
        The verdict. A partition asked for but not answered gets ``NO_OFFSET``.
    """
    errors: dict[TopicPartition | None, int] = {}
    if group_error != NONE:
        errors[None] = group_error
    for tp, (_, code) in partitions.items():
        if code not in (NONE, UNKNOWN_TOPIC_OR_PARTITION):
            errors[tp] = code
    codes = set(errors.values())
    if codes & _COORDINATOR_MOVED:
        return FetchVerdict(FetchAction.REDISCOVER, errors=errors)
    if COORDINATOR_LOAD_IN_PROGRESS in codes:
        return FetchVerdict(FetchAction.RETRY, errors=errors)
    if any(not is_retriable(code) for code in codes):
        fatal = {tp: c for tp, c in errors.items() if not is_retriable(c)}
        return FetchVerdict(FetchAction.FAIL, errors=fatal)
    if codes:
        return FetchVerdict(FetchAction.RETRY, errors=errors)
    offsets: dict[TopicPartition, int] = {}
    for tp in requested:
        offset, code = partitions.get(tp, (NO_OFFSET, NONE))
        offsets[tp] = NO_OFFSET if code != NONE or offset < 0 else offset
    return FetchVerdict(FetchAction.DONE, offsets=offsets)


def dual_fetch_result(
    zookeeper: Mapping[TopicPartition, int], kafka: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Combine offsets read from both stores: per partition the larger one.

    As ``fetchOffsets`` with ``dual.commit.enabled`` (0.10.2):
    ``zkOffset.max(kafkaOffset)``, a missing offset counting as ``NO_OFFSET`` (-1).

    Args:
        zookeeper: offsets read from ZooKeeper.
        kafka: offsets read from Kafka.

    Returns:
        ``{partition: max offset}`` over the partitions of both mappings.
    """
    return {
        tp: max(zookeeper.get(tp, NO_OFFSET), kafka.get(tp, NO_OFFSET))
        for tp in sorted({*zookeeper, *kafka})
    }


def check_retries(retries: int) -> None:
    """Reject a negative ``retries`` argument with ``ValueError``."""
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
