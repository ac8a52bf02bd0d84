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

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from aiokafka import errors as kafka_errors
from aiokafka.client import ConnectionGroup
from aiokafka.conn import CloseReason
from aiokafka.protocol.commit import OffsetCommitRequest, OffsetFetchRequest
from aiokafka.protocol.coordination import FindCoordinatorRequest

from .cluster import KafkaClient
from .errors import (
    CommitFencedError,
    ConsumerClosedError,
    ConsumerError,
    MalformedZookeeperDataError,
    OffsetCommitError,
    OffsetFetchError,
)
from .records import TopicPartition
from .zk import layout
from .zk.client import ZkClient

if TYPE_CHECKING:
    from .config import ConsumerConfig

__all__ = [
    "COORDINATOR_LOAD_IN_PROGRESS",
    "COORDINATOR_NOT_AVAILABLE",
    "NONE",
    "NOT_COORDINATOR",
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

log = logging.getLogger(__name__)

NO_OFFSET = -1
"""The offset of a partition with no committed offset (``OffsetMetadataAndError.NoOffset``)."""

# Kafka protocol error codes the rules below name (``org.apache.kafka.common.protocol.Errors``).
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
"""``GROUP_LOAD_IN_PROGRESS`` in 0.10.2."""
COORDINATOR_NOT_AVAILABLE = 15
"""``GROUP_COORDINATOR_NOT_AVAILABLE`` in 0.10.2."""
NOT_COORDINATOR = 16
"""``NOT_COORDINATOR_FOR_GROUP`` in 0.10.2."""
NO_ANSWER = -1
"""Pseudo error code of a partition the coordinator's answer left out (Kafka's ``UNKNOWN``)."""

_COORDINATOR_MOVED = frozenset({NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE})
_NO_METADATA = ""  # OffsetMetadata.NoMetadata: the old consumer never committed metadata
_DEFAULT_COMMIT_MAX_RETRIES = 5  # offsets.commit.max.retries' default

KafkaGetter = Callable[[], Awaitable[KafkaClient]]
"""An async callable returning the connector's started :class:`~aiozkconsumer.cluster.KafkaClient`
(created on first use), e.g. ``connector.ensure_kafka``."""


def error_name(code: int) -> str:
    """Kafka's name of a protocol error code, with the code: ``"NOT_COORDINATOR (16)"``."""
    return f"{kafka_errors.for_code(code).message} ({code})"


def default_fetch_timeout_ms(socket_timeout_ms: int, max_retries: int) -> int:
    """The default time limit of an offset fetch from Kafka, in ms.

    ``offsets.channel.socket.timeout.ms x (1 + offsets.commit.max.retries)`` (60 s with the
    defaults): as long as a commit may take, at one request timeout per attempt. The original
    had no limit.
    """
    return socket_timeout_ms * (1 + max_retries)


# -- pure decisions --------------------------------------------------------------------


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
    if any(not kafka_errors.for_code(code).retriable for code in codes):
        fatal = {tp: c for tp, c in errors.items() if not kafka_errors.for_code(c).retriable}
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


def _check_retries(retries: int) -> None:
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")


# -- the protocol ----------------------------------------------------------------------


class OffsetStore(Protocol):
    """Where a group's committed offsets live. Offsets are "next offset to read".

    Implemented by :class:`ZookeeperOffsetStore`, :class:`KafkaOffsetStore` and
    :class:`DualOffsetStore`; :func:`make_offset_store` picks one.
    """

    @property
    def zookeeper_commits(self) -> int:
        """Offset nodes written to ZooKeeper so far (``ZooKeeperCommitsPerSec``)."""
        ...

    @property
    def kafka_commits(self) -> int:
        """Partitions Kafka accepted so far (``KafkaCommitsPerSec``)."""
        ...

    async def fetch(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Read the committed offsets of ``tps``; ``NO_OFFSET`` (-1) where none is committed."""
        ...

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        retries: int = 0,
        fences: Mapping[TopicPartition, int] | None = None,
    ) -> int:
        """Commit ``offsets`` in ``1 + retries`` attempts at most; return partitions written.

        ``fences`` (``{partition: fencing token}``) make ZooKeeper writes conditional on the
        partition's fencing node being unchanged (``CommitFencedError`` otherwise); Kafka
        cannot check ZooKeeper atomically, so Kafka commits ignore them (the connector checks
        the fencing nodes just before).
        """
        ...

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Drop any bookkeeping of released partitions."""
        ...

    async def close(self) -> None:
        """Release what the store holds (never raises)."""
        ...


# -- ZooKeeper -------------------------------------------------------------------------

_WRITTEN, _FENCED, _UNCHANGED = object(), object(), object()


class ZookeeperOffsetStore:
    """Reads and commits a group's offsets in ZooKeeper (``offsets.storage=zookeeper``).

    Args:
        zk: the connector's ZooKeeper client.
        group: ``group.id``.
    """

    def __init__(self, zk: ZkClient, group: str) -> None:
        self.zk = zk
        self.group = group
        self._checkpoint: dict[TopicPartition, int] = {}
        self.commits = 0
        """Number of offset nodes written (the original's ``ZooKeeperCommitsPerSec`` count)."""

    @property
    def zookeeper_commits(self) -> int:
        """Offset nodes written so far (same as ``commits``)."""
        return self.commits

    @property
    def kafka_commits(self) -> int:
        """Always 0: this store does not talk to Kafka."""
        return 0

    async def fetch(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Read the committed offsets of ``tps`` (``fetchOffsets`` with ZooKeeper storage).

        As ``fetchOffsetFromZooKeeper`` in ``ZookeeperConsumerConnector.scala``, 0.10.2.

        Args:
            tps: the partitions.

        Returns:
            ``{tp: offset}``, ``NO_OFFSET`` (-1) where no offset node exists, or where it
            does not hold a decimal offset (logged as an error; ``auto.offset.reset`` then
            applies and the next commit overwrites the node). Each value also becomes the
            partition's checkpoint, so committing it unchanged writes nothing.

        Raises:
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        result: dict[TopicPartition, int] = {}
        tps = list(tps)
        paths = [layout.offset_path(self.group, tp.topic, tp.partition) for tp in tps]
        # Pipelined: ZooKeeper answers in order on one connection.
        datas = await asyncio.gather(*(self.zk.get_data(path) for path in paths))
        for tp, path, data in zip(tps, paths, datas, strict=True):
            try:
                offset = NO_OFFSET if data is None else layout.decode_offset(data, path)
            except MalformedZookeeperDataError as e:
                # Someone else wrote garbage there. Failing would stop the whole group's
                # rebalance; treating it as "no offset" applies auto.offset.reset, and the
                # next commit overwrites the node.
                log.error("%s; using auto.offset.reset for %s", e, tp)
                result[tp] = NO_OFFSET
                self._checkpoint.pop(tp, None)
                continue
            result[tp] = offset
            self._checkpoint[tp] = offset
        return result

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        retries: int = 0,
        fences: Mapping[TopicPartition, int] | None = None,
    ) -> int:
        """Write offsets that changed since the last read or write.

        As ``commitOffsetToZooKeeper`` in ``ZookeeperConsumerConnector.scala``, 0.10.2: a node
        is written only if the offset differs from the partition's checkpoint. Negative
        offsets (nothing consumed, no starting offset known yet) are skipped.

        Args:
            offsets: ``{partition: next offset to read}``.
            retries: accepted for the :class:`OffsetStore` protocol and ignored: as in the
                original, retries only matter for Kafka storage; a ZooKeeper failure is
                raised at once (the ZooKeeper client already waits out a short disconnect).
            fences: ``{partition: fencing token}``: each such partition is written only while
                its fencing node still has that version, in one multi-op with the write.

        Returns:
            The number of offset nodes written.

        Raises:
            ValueError: ``retries`` is negative.
            ZookeeperConnectionError: ZooKeeper is unreachable; offsets not yet written keep
                their old checkpoint and are written by the next commit.
            CommitFencedError: another member claimed some fenced partitions since; the
                others were written.
        """
        _check_retries(retries)
        fences = fences or {}
        todo = sorted((tp, o) for tp, o in offsets.items() if o >= 0)
        # One request per partition, all in flight at once (ZooKeeper applies one session's
        # requests in order and groups their log writes): a commit of n partitions takes
        # about one round trip, not n.
        outcomes = await asyncio.gather(
            *(self._commit_one(tp, offset, fences.get(tp)) for tp, offset in todo),
            return_exceptions=True,
        )
        written = sum(1 for outcome in outcomes if outcome is _WRITTEN)
        fenced = [tp for (tp, _), outcome in zip(todo, outcomes, strict=True) if outcome is _FENCED]
        self.commits += written
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if errors:
            raise errors[0]
        if fenced:
            raise CommitFencedError(self.group, fenced)
        if written:
            log.debug("committed %d offsets of group %s to ZooKeeper", written, self.group)
        return written

    async def _commit_one(self, tp: TopicPartition, offset: int, token: int | None) -> object:
        """Write one partition's offset node; ``_WRITTEN``, ``_FENCED`` or ``_UNCHANGED``."""
        if self._checkpoint.get(tp) == offset:
            # Nothing to write; but a fenced member must still learn it lost the partition.
            if token is not None and not await self._fence_holds(tp, token):
                return _FENCED
            return _UNCHANGED
        path = layout.offset_path(self.group, tp.topic, tp.partition)
        if token is None:
            await self.zk.set_or_create(path, layout.encode_offset(offset))
        elif not await self.zk.fenced_write(
            path,
            layout.encode_offset(offset),
            layout.fencing_path(self.group, tp.topic, tp.partition),
            token,
        ):
            return _FENCED
        self._checkpoint[tp] = offset
        return _WRITTEN

    async def _fence_holds(self, tp: TopicPartition, token: int) -> bool:
        got = await self.zk.get(layout.fencing_path(self.group, tp.topic, tp.partition))
        return got is not None and int(got[1].version) == token

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Drop the checkpoints of released partitions."""
        for tp in tps:
            self._checkpoint.pop(tp, None)

    async def close(self) -> None:
        """Nothing to release: the ZooKeeper client belongs to the connector."""

    def __repr__(self) -> str:
        return (
            f"<ZookeeperOffsetStore group={self.group} [{len(self._checkpoint)} checkpoints, "
            f"{self.commits} commits]>"
        )


# -- Kafka -----------------------------------------------------------------------------


class _AttemptError(Exception):
    """One attempt got no usable answer (no broker, no coordinator, timeout, broken
    connection). ``fatal``: retrying cannot help (the broker lacks the API version)."""

    def __init__(self, reason: str, *, fatal: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fatal = fatal


@dataclass(frozen=True)
class CommitResult:
    """The outcome of :meth:`KafkaOffsetStore.commit_with_result`.

    Attributes:
        accepted: ``{partition: offset}`` the coordinator committed.
        failed: ``{partition: reason}`` not committed after every attempt.
        dropped: partitions rejected with ``OFFSET_METADATA_TOO_LARGE``: not committed, yet
            not a failure of the commit (as the original counted them).
        attempts: OffsetCommit attempts made.
    """

    accepted: Mapping[TopicPartition, int]
    failed: Mapping[TopicPartition, str]
    dropped: frozenset[TopicPartition]
    attempts: int


class KafkaOffsetStore:
    """Reads and commits a group's offsets in Kafka (``offsets.storage=kafka``).

    The group's coordinator is found with FindCoordinator and kept until it answers
    ``NOT_COORDINATOR`` / ``COORDINATOR_NOT_AVAILABLE`` or stops answering. Requests go over
    aiokafka's coordination connection (not the one fetches use, whose long polls would delay
    them). OffsetCommit is sent with generation -1 and member id ``""`` (a "simple
    consumer" commit; the group never joins Kafka's group protocol), retention -1 (the
    broker's ``offsets.retention.minutes``) and empty metadata; aiokafka negotiates the
    version (OffsetCommit v2-v3, OffsetFetch v1-v3). One request is in flight at a time, as
    the original's ``offsetsChannelLock``.

    Args:
        kafka_getter: async callable returning the connector's started Kafka client (the
            connector creates it on first use). Its failures (``NoBrokersError``,
            ``KafkaConnectionError`` ...) count as failed attempts.
        group: ``group.id``.
        backoff_ms: ``offsets.channel.backoff.ms``: pause between attempts, ms, > 0.
        socket_timeout_ms: ``offsets.channel.socket.timeout.ms``: time limit of each
            FindCoordinator, OffsetCommit and OffsetFetch request, ms, > 0.
        fetch_timeout_ms: time limit of a whole :meth:`fetch`, ms, > 0; default
            ``socket_timeout_ms x (1 + 5)`` (:func:`default_fetch_timeout_ms` with the
            default ``offsets.commit.max.retries``).

    Raises:
        ValueError: a time is not positive.
    """

    def __init__(
        self,
        kafka_getter: KafkaGetter,
        group: str,
        *,
        backoff_ms: int,
        socket_timeout_ms: int,
        fetch_timeout_ms: int | None = None,
    ) -> None:
        if fetch_timeout_ms is None:
            fetch_timeout_ms = default_fetch_timeout_ms(
                socket_timeout_ms, _DEFAULT_COMMIT_MAX_RETRIES
            )
        for name, value in (
            ("backoff_ms", backoff_ms),
            ("socket_timeout_ms", socket_timeout_ms),
            ("fetch_timeout_ms", fetch_timeout_ms),
        ):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        self._kafka_getter = kafka_getter
        self.group = group
        self.backoff_ms = backoff_ms
        self.socket_timeout_ms = socket_timeout_ms
        self.fetch_timeout_ms = fetch_timeout_ms
        self._coordinator: int | None = None
        self._kafka: KafkaClient | None = None
        self._lock = anyio.Lock()
        self._closed = False
        self._kafka_commits = 0

    @property
    def coordinator(self) -> int | None:
        """The broker id of the group's coordinator, ``None`` until known."""
        return self._coordinator

    @property
    def zookeeper_commits(self) -> int:
        """Always 0: this store does not write to ZooKeeper."""
        return 0

    @property
    def kafka_commits(self) -> int:
        """Partitions the coordinator accepted so far (``KafkaCommitsPerSec`` count)."""
        return self._kafka_commits

    # -- public --------------------------------------------------------------------------

    async def fetch(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Read the committed offsets of ``tps`` from the group's coordinator.

        As ``fetchOffsets`` with Kafka storage in ``ZookeeperConsumerConnector.scala``,
        0.10.2: send OffsetFetch until an answer arrives, looking the coordinator up again
        after ``NOT_COORDINATOR`` / ``COORDINATOR_NOT_AVAILABLE`` or a failed request,
        retrying after ``COORDINATOR_LOAD_IN_PROGRESS``, ``offsets.channel.backoff.ms``
        between attempts (see :func:`classify_fetch_response` for every rule). Unlike the
        original, which looped forever, it gives up after ``fetch_timeout_ms``.

        Args:
            tps: the partitions; none gives ``{}`` without contacting Kafka.

        Returns:
            ``{tp: offset}`` for every partition of ``tps``, ``NO_OFFSET`` (-1) where the
            group has no committed offset.

        Raises:
            OffsetFetchError: no answer within ``fetch_timeout_ms``, an error retrying cannot
                fix (e.g. ``GROUP_AUTHORIZATION_FAILED``), or a broker too old for the
                request. ``__cause__`` is the last failure, where there was one.
            ConsumerClosedError: the store is closed.
        """
        wanted = sorted(set(tps))
        if not wanted:
            return {}
        self._check_open()
        attempts = 0
        last: str = "no attempt finished"
        try:
            with anyio.fail_after(self.fetch_timeout_ms / 1000):
                while True:
                    attempts += 1
                    try:
                        verdict = await self._fetch_once(wanted)
                    except _AttemptError as e:
                        if e.fatal:
                            raise OffsetFetchError(
                                self.group, wanted, e.reason, attempts=attempts
                            ) from e
                        last = e.reason
                    else:
                        if verdict.action is FetchAction.DONE:
                            return dict(verdict.offsets)
                        last = verdict.describe()
                        if verdict.action is FetchAction.FAIL:
                            raise OffsetFetchError(self.group, wanted, last, attempts=attempts)
                        if verdict.action is FetchAction.REDISCOVER:
                            self._coordinator_dead()
                    log.warning(
                        "fetching offsets of group %s from Kafka failed (attempt %d): %s; "
                        "retrying in %d ms",
                        self.group,
                        attempts,
                        last,
                        self.backoff_ms,
                    )
                    await anyio.sleep(self.backoff_ms / 1000)
        except TimeoutError:
            raise OffsetFetchError(
                self.group,
                wanted,
                f"no answer within {self.fetch_timeout_ms} ms (last failure: {last})",
                attempts=attempts,
            ) from None

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        retries: int = 0,
        fences: Mapping[TopicPartition, int] | None = None,
    ) -> int:
        """Commit ``offsets`` to the group's coordinator: always all of them.

        As ``commitOffsets`` with Kafka storage in ``ZookeeperConsumerConnector.scala``,
        0.10.2, with its retry parameter no longer inverted (see the module docstring):
        OffsetCommit with generation -1 and member id ``""``; ``NOT_COORDINATOR`` /
        ``COORDINATOR_NOT_AVAILABLE`` make the next attempt look the coordinator up again;
        ``OFFSET_METADATA_TOO_LARGE`` alone counts as committed; any other error, or no
        answer within ``offsets.channel.socket.timeout.ms``, fails the attempt. Each further
        attempt sends the partitions still failing, ``offsets.channel.backoff.ms`` later.
        Nothing is filtered by a checkpoint (KAFKA-1510: full commits keep the broker's
        retention refreshed).

        Args:
            offsets: ``{partition: next offset to read}``; negative offsets (nothing
                consumed yet) are left out.
            retries: further attempts after a failed one (``1 + retries`` in all). The
                connector passes ``offsets.commit.max.retries`` for explicit, shutdown and
                auto commits, as the original's documentation (not its code) promised.
            fences: ignored: Kafka cannot check a ZooKeeper node in the same step (the
                connector checks the fencing nodes just before committing).

        Returns:
            The number of partitions the coordinator accepted.

        Raises:
            OffsetCommitError: some partitions were still not committed after ``1 + retries``
                attempts; ``failed`` names them and why.
            ConsumerClosedError: the store is closed.
            ValueError: ``retries`` is negative.
        """
        result = await self.commit_with_result(offsets, retries=retries)
        if result.failed:
            raise OffsetCommitError(
                self.group, result.failed, committed=len(result.accepted), attempts=result.attempts
            )
        return len(result.accepted)

    async def commit_with_result(
        self, offsets: Mapping[TopicPartition, int], *, retries: int = 0
    ) -> CommitResult:
        """:meth:`commit`, returning what was and was not committed instead of raising.

        For :class:`DualOffsetStore`, which writes the accepted partitions to ZooKeeper
        whatever happened to the others.

        Args:
            offsets: as :meth:`commit`.
            retries: as :meth:`commit`.

        Returns:
            The partitions accepted, failed and dropped, and the attempts made.

        Raises:
            ConsumerClosedError: the store is closed.
            ValueError: ``retries`` is negative.
        """
        _check_retries(retries)
        pending = {tp: off for tp, off in sorted(offsets.items()) if off >= 0}
        if not pending:
            return CommitResult({}, {}, frozenset(), 0)
        self._check_open()
        accepted: dict[TopicPartition, int] = {}
        dropped: set[TopicPartition] = set()
        failed: dict[TopicPartition, str] = {}
        attempts = 0
        while pending and attempts < 1 + retries:
            if attempts:
                await anyio.sleep(self.backoff_ms / 1000)
            attempts += 1
            try:
                codes = await self._commit_once(pending)
            except _AttemptError as e:
                failed = dict.fromkeys(pending, e.reason)
                if e.fatal:
                    break
            else:
                verdict = classify_commit_errors(codes)
                accepted.update((tp, pending[tp]) for tp in verdict.accepted)
                self._kafka_commits += len(verdict.accepted)
                if verdict.refresh_coordinator:
                    self._coordinator_dead()
                too_large = set(verdict.failed) - verdict.to_retry
                if too_large:
                    log.warning(
                        "Kafka rejected the offsets of %s (group %s) with "
                        "OFFSET_METADATA_TOO_LARGE; not retried",
                        ", ".join(map(str, sorted(too_large))),
                        self.group,
                    )
                    dropped |= too_large
                failed = {tp: error_name(verdict.failed[tp]) for tp in verdict.to_retry}
                pending = {tp: pending[tp] for tp in sorted(verdict.to_retry)}
            if failed:
                log.warning(
                    "committing offsets of group %s to Kafka failed (attempt %d of %d) for %d "
                    "partition(s): %s",
                    self.group,
                    attempts,
                    1 + retries,
                    len(failed),
                    next(iter(failed.values())),
                )
        if accepted:
            log.debug("committed %d offsets of group %s to Kafka", len(accepted), self.group)
        return CommitResult(accepted, failed, frozenset(dropped), attempts)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Nothing to forget: Kafka commits are never filtered by a checkpoint."""

    async def close(self) -> None:
        """Forget the coordinator and drop its connection; later calls raise
        ``ConsumerClosedError``. The Kafka client itself belongs to the connector."""
        self._closed = True
        self._coordinator_dead()
        self._kafka = None

    # -- one attempt ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError(f"the offset store of group {self.group!r} is closed")

    async def _commit_once(
        self, offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """Send one OffsetCommit; return ``{partition: error code}`` for every partition."""
        by_topic: dict[str, list[tuple[int, int, str]]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append((tp.partition, offset, _NO_METADATA))
        request = OffsetCommitRequest(
            self.group,
            OffsetCommitRequest.DEFAULT_GENERATION_ID,
            "",
            OffsetCommitRequest.DEFAULT_RETENTION_TIME,
            sorted(by_topic.items()),
        )
        async with self._lock:
            response = await self._to_coordinator(request, "OffsetCommit")
        codes = dict.fromkeys(offsets, NO_ANSWER)
        for topic, parts in response.topics:
            for partition, code in parts:
                tp = TopicPartition(topic, partition)
                if tp in codes:
                    codes[tp] = int(code)
        return codes

    async def _fetch_once(self, tps: list[TopicPartition]) -> FetchVerdict:
        """Send one OffsetFetch and classify its answer."""
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = OffsetFetchRequest(self.group, sorted(by_topic.items()))
        async with self._lock:
            response = await self._to_coordinator(request, "OffsetFetch")
        answered: dict[TopicPartition, tuple[int, int]] = {}
        for topic, parts in response.topics:
            for partition, offset, _metadata, code in parts:
                answered[TopicPartition(topic, partition)] = (int(offset), int(code))
        group_error = int(getattr(response, "error_code", NONE))
        return classify_fetch_response(tps, group_error, answered)

    async def _to_coordinator(self, request: Any, what: str) -> Any:
        """Send ``request`` to the coordinator (found first if unknown)."""
        kafka = await self._client()
        if self._coordinator is None:
            node = kafka.raw.get_random_node()
            if node is None:
                raise _AttemptError("no broker known to ask for the group coordinator")
            response = await self._send(
                kafka, node, FindCoordinatorRequest(self.group, 0), "FindCoordinator"
            )
            code = int(response.error_code)
            if code != NONE:
                raise _AttemptError(f"FindCoordinator answered {error_name(code)}")
            self._coordinator = int(response.coordinator_id)
            log.info(
                "group %s: offset coordinator is broker %d (%s)",
                self.group,
                self._coordinator,
                kafka.broker_address(self._coordinator),
            )
        try:
            return await self._send(kafka, self._coordinator, request, what)
        except _AttemptError:
            # As the original's offsetsChannel.disconnect() on any failure: rediscover.
            self._coordinator_dead()
            raise

    async def _client(self) -> KafkaClient:
        try:
            kafka = await self._kafka_getter()
        except ConsumerError as e:
            raise _AttemptError(f"no Kafka client: {e}") from e
        if kafka is not self._kafka:
            self._kafka = kafka
            self._coordinator = None
        return kafka

    async def _send(self, kafka: KafkaClient, node: int, request: Any, what: str) -> Any:
        """One request over the coordination connection, bounded by the socket timeout.

        Every aiokafka error is turned into an ``_AttemptError`` here.
        """
        try:
            with anyio.fail_after(self.socket_timeout_ms / 1000):
                return await kafka.raw.send(node, request, group=ConnectionGroup.COORDINATION)
        except TimeoutError:
            self._disconnect(kafka, node)
            raise _AttemptError(
                f"{what} to {kafka.broker_address(node)} got no answer within "
                f"offsets.channel.socket.timeout.ms={self.socket_timeout_ms}"
            ) from None
        except kafka_errors.IncompatibleBrokerVersion as e:
            raise _AttemptError(f"{what}: broker too old: {e}", fatal=True) from e
        except kafka_errors.KafkaError as e:
            raise _AttemptError(f"{what} to {kafka.broker_address(node)} failed: {e!r}") from e
        except NotImplementedError as e:  # Request.prepare: no version both sides speak
            raise _AttemptError(f"{what}: no protocol version in common: {e}", fatal=True) from e

    def _coordinator_dead(self) -> None:
        if self._coordinator is not None:
            log.info("group %s: forgetting offset coordinator %d", self.group, self._coordinator)
            if self._kafka is not None:
                self._disconnect(self._kafka, self._coordinator)
        self._coordinator = None

    @staticmethod
    def _disconnect(kafka: KafkaClient, node: int) -> None:
        # aiokafka has no public way to drop one connection; a request we gave up on would
        # otherwise stay queued on it until socket.timeout.ms.
        conn = kafka.raw._conns.get((node, ConnectionGroup.COORDINATION))
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close(reason=CloseReason.CONNECTION_TIMEOUT)

    def __repr__(self) -> str:
        where = "unknown" if self._coordinator is None else f"broker {self._coordinator}"
        state = "closed" if self._closed else f"coordinator {where}"
        return f"<KafkaOffsetStore group={self.group} [{state}, {self._kafka_commits} commits]>"


# -- both ------------------------------------------------------------------------------


class DualOffsetStore:
    """Offsets in Kafka and ZooKeeper (``dual.commit.enabled``), for migrating a group.

    As ``commitOffsets`` / ``fetchOffsets`` with ``dual.commit.enabled`` in
    ``ZookeeperConsumerConnector.scala``, 0.10.2: commits go to Kafka, and the partitions
    Kafka accepted are also written to ZooKeeper (skipping unchanged ones, by the ZooKeeper
    store's checkpoint); reads take the larger of the two offsets per partition.

    Unlike the original, the ZooKeeper checkpoint holds what ZooKeeper has, not the larger
    offset read: a partition whose Kafka offset was ahead is written to ZooKeeper by the
    next commit even if nothing was consumed since.

    Args:
        zk_store: the ZooKeeper store.
        kafka_store: the Kafka store.
    """

    def __init__(self, zk_store: ZookeeperOffsetStore, kafka_store: KafkaOffsetStore) -> None:
        self.zk_store = zk_store
        self.kafka_store = kafka_store

    @property
    def zookeeper_commits(self) -> int:
        """Offset nodes written to ZooKeeper so far."""
        return self.zk_store.commits

    @property
    def kafka_commits(self) -> int:
        """Partitions Kafka accepted so far."""
        return self.kafka_store.kafka_commits

    async def fetch(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Read offsets from both stores; per partition the larger (:func:`dual_fetch_result`).

        Args:
            tps: the partitions.

        Returns:
            ``{tp: offset}`` for every partition of ``tps``, ``NO_OFFSET`` (-1) where
            neither store has one.

        Raises:
            OffsetFetchError: as :meth:`KafkaOffsetStore.fetch`.
            MalformedZookeeperDataError: an offset node does not hold a decimal offset.
            ZookeeperConnectionError: ZooKeeper is unreachable.
            ConsumerClosedError: the store is closed.
        """
        wanted = sorted(set(tps))
        kafka = await self.kafka_store.fetch(wanted)
        zookeeper = await self.zk_store.fetch(wanted)
        return dual_fetch_result(zookeeper, kafka)

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        retries: int = 0,
        fences: Mapping[TopicPartition, int] | None = None,
    ) -> int:
        """Commit to Kafka (``1 + retries`` attempts), then what Kafka accepted to ZooKeeper.

        Args:
            offsets: ``{partition: next offset to read}``; negative offsets are left out.
            retries: as :meth:`KafkaOffsetStore.commit`; the ZooKeeper write is not retried.
            fences: passed to the ZooKeeper write (see :meth:`ZookeeperOffsetStore.commit`).

        Returns:
            The number of partitions Kafka accepted (ZooKeeper writes are counted by
            ``zookeeper_commits``).

        Raises:
            OffsetCommitError: Kafka did not accept some partitions after every attempt; the
                accepted ones have been written to ZooKeeper first.
            ZookeeperConnectionError: ZooKeeper is unreachable (Kafka has the offsets).
            ConsumerClosedError: the store is closed.
            ValueError: ``retries`` is negative.
        """
        result = await self.kafka_store.commit_with_result(offsets, retries=retries)
        if result.accepted:
            await self.zk_store.commit(result.accepted, fences=fences)
        if result.failed:
            raise OffsetCommitError(
                self.kafka_store.group,
                result.failed,
                committed=len(result.accepted),
                attempts=result.attempts,
            )
        return len(result.accepted)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Drop the ZooKeeper checkpoints of released partitions."""
        self.zk_store.forget(tps)

    async def close(self) -> None:
        """Close both stores."""
        await self.kafka_store.close()
        await self.zk_store.close()

    def __repr__(self) -> str:
        return f"<DualOffsetStore {self.kafka_store!r} + {self.zk_store!r}>"


# -- choice ----------------------------------------------------------------------------


def make_offset_store(
    config: ConsumerConfig, zk: ZkClient, kafka_getter: KafkaGetter
) -> OffsetStore:
    """The offset store ``offsets.storage`` and ``dual.commit.enabled`` ask for.

    ===================  ======================  =========================================
    ``offsets.storage``  ``dual.commit.enabled``  store
    ===================  ======================  =========================================
    ``zookeeper``        false (its default)     :class:`ZookeeperOffsetStore`
    ``kafka``            false                   :class:`KafkaOffsetStore`
    ``kafka``            true (its default)      :class:`DualOffsetStore`
    ``zookeeper``        true                    :class:`DualOffsetStore` (see below)
    ===================  ======================  =========================================

    ``zookeeper`` + ``dual.commit.enabled=true`` is accepted by the original's config, but
    its code ignores the flag there (the ZooKeeper branch of ``commitOffsets`` and
    ``fetchOffsets`` never reads it). That breaks the documented roll-back from Kafka to
    ZooKeeper storage ("the above steps with ``offsets.storage=zookeeper``"): the first step
    would read the stale ZooKeeper offsets left from before the migration and stop updating
    Kafka, which members not yet bounced still read. Here it means dual storage, so the
    roll-back is safe in both directions.

    Args:
        config: the consumer configuration; ``offsets.channel.backoff.ms``,
            ``offsets.channel.socket.timeout.ms`` and ``offsets.commit.max.retries`` (for
            the fetch time limit, :func:`default_fetch_timeout_ms`) configure the Kafka store.
        zk: the connector's ZooKeeper client.
        kafka_getter: async callable returning the connector's started Kafka client.

    Returns:
        The store.
    """
    zk_store = ZookeeperOffsetStore(zk, config.group_id)
    dual = config.effective_dual_commit_enabled
    if config.offsets_storage == "zookeeper" and not dual:
        return zk_store
    kafka_store = KafkaOffsetStore(
        kafka_getter,
        config.group_id,
        backoff_ms=config.offsets_channel_backoff_ms,
        socket_timeout_ms=config.offsets_channel_socket_timeout_ms,
        fetch_timeout_ms=default_fetch_timeout_ms(
            config.offsets_channel_socket_timeout_ms, config.offsets_commit_max_retries
        ),
    )
    if not dual:
        return kafka_store
    return DualOffsetStore(zk_store, kafka_store)
