"""Offsets in Kafka (``offsets.storage=kafka``): ``KafkaOffsetStore``.

OffsetCommit / OffsetFetch to the group's coordinator, as a "simple consumer" (generation -1,
member id ``""``): the broker keeps the offsets without the group ever joining Kafka's group
protocol. Commits are always full (KAFKA-1510), so the broker's retention keeps being
refreshed. The requests are the adapter's (:mod:`aiozkconsumer.kafka.channel`); the retries
and the reading of the answers are here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from ..errors import (
    CommitFencedError,
    ConsumerClosedError,
    OffsetCommitError,
    OffsetFetchError,
)
from ..kafka.channel import ChannelError, KafkaGetter, OffsetsChannel
from ..kafka.errors import error_name
from ..records import TopicPartition
from .rules import (
    FetchAction,
    check_retries,
    classify_commit_errors,
    classify_fetch_response,
    default_fetch_timeout_ms,
)

__all__ = ["CommitResult", "KafkaOffsetStore"]

log = logging.getLogger(__name__)

_DEFAULT_COMMIT_MAX_RETRIES = 5  # offsets.commit.max.retries' default
# ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS: a Kafka-coordinated member's
# generation is over (the Java client's CommitFailedException); retrying cannot help. With the
# consumer protocol (KIP-848), FENCED_MEMBER_EPOCH and STALE_MEMBER_EPOCH: the member epoch sent
# is not the member's (a STALE one is sent again if the epoch moved on meanwhile).
_GENERATION_OVER = frozenset({22, 25, 27, 110, 113})
_STALE_MEMBER_EPOCH = 113
_STALE_RESENDS = 3


@dataclass(frozen=True)
class CommitResult:
    """The outcome of :meth:`KafkaOffsetStore.commit_with_result`.

    Attributes:
        accepted: ``{partition: offset}`` the coordinator committed.
        failed: ``{partition: reason}`` not committed after every attempt.
        dropped: partitions rejected with ``OFFSET_METADATA_TOO_LARGE``: not committed, yet
            not a failure of the commit (as the original counted them).
        attempts: OffsetCommit attempts made.
        fenced: partitions refused because the group generation is over
            (``ILLEGAL_GENERATION``, ``UNKNOWN_MEMBER_ID``, ``REBALANCE_IN_PROGRESS``): not
            retried.
    """

    accepted: Mapping[TopicPartition, int]
    failed: Mapping[TopicPartition, str]
    dropped: frozenset[TopicPartition]
    attempts: int
    fenced: frozenset[TopicPartition] = frozenset()


class KafkaOffsetStore:
    """Reads and commits a group's offsets in Kafka (``offsets.storage=kafka``).

    Requests go over an :class:`~aiozkconsumer.kafka.channel.OffsetsChannel`: the group's
    coordinator is found with FindCoordinator and kept until it answers ``NOT_COORDINATOR`` /
    ``COORDINATOR_NOT_AVAILABLE`` or stops answering; OffsetCommit is sent with generation -1
    and member id ``""`` (a "simple consumer" commit; the group never joins Kafka's group
    protocol), retention -1 (the broker's ``offsets.retention.minutes``) and empty metadata
    (unless the caller gives some: :meth:`commit`'s ``metadata``, read back with
    :meth:`fetch_metadata`). One request is in flight at a time, as the original's
    ``offsetsChannelLock``. This class keeps the retry rules and reads the answers with
    :func:`classify_commit_errors` and :func:`classify_fetch_response`.

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
        group_generation: for a Kafka-coordinated group, returns ``(generation, member id)``
            to send with each OffsetCommit, so the coordinator refuses a commit of a
            generation that is over; default: generation -1 and member id ``""``. With the
            consumer protocol, ``(member epoch, member id)``.
        channel: the offsets channel to use (the consumer protocol's sends OffsetCommit v9,
            :class:`~aiozkconsumer.kafka.consumer_group.MemberEpochOffsetsChannel`); default
            an :class:`~aiozkconsumer.kafka.channel.OffsetsChannel` on ``kafka_getter``.
        leader_epochs: given the offsets to commit, ``{partition: leader epoch of the
            record before the offset}`` to commit with them (KIP-320, the Java client's
            ``OffsetAndMetadata.leaderEpoch``); also settable as the attribute of the same
            name once the partitions' owner exists. ``None``: epochs not sent (-1).

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
        group_generation: Callable[[], tuple[int, str]] | None = None,
        channel: OffsetsChannel | None = None,
        leader_epochs: Callable[[Mapping[TopicPartition, int]], Mapping[TopicPartition, int]]
        | None = None,
    ) -> None:
        self._group_generation = group_generation
        self.leader_epochs = leader_epochs
        """Where commits take each offset's leader epoch from (``None``: not sent)."""
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
        self.group = group
        self.backoff_ms = backoff_ms
        self.socket_timeout_ms = socket_timeout_ms
        self.fetch_timeout_ms = fetch_timeout_ms
        self._channel = (
            channel
            if channel is not None
            else OffsetsChannel(kafka_getter, group, socket_timeout_ms=socket_timeout_ms)
        )
        self._closed = False
        self._kafka_commits = 0

    @property
    def coordinator(self) -> int | None:
        """The broker id of the group's coordinator, ``None`` until known."""
        return self._channel.coordinator

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
        got = await self._fetch(wanted, with_metadata=False)
        return {tp: offset for tp, (offset, _) in got.items()}

    async def fetch_metadata(
        self, tps: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, tuple[int, str]]:
        """:meth:`fetch`, with the metadata string committed with each offset.

        Same retries and time limit as :meth:`fetch`.

        Args:
            tps: the partitions; ``None`` (the default): every partition the group has a
                committed offset for (OffsetFetch v2+, KIP-88; Kafka 0.10.2 and later).

        Returns:
            ``{tp: (offset, metadata)}``: for every partition of ``tps``, ``(NO_OFFSET, "")``
            where the group has no committed offset; with ``None``, the partitions the
            coordinator answered for.

        Raises:
            OffsetFetchError: as :meth:`fetch`; also when ``tps`` is ``None`` and the broker
                is older than OffsetFetch v2.
            ConsumerClosedError: the store is closed.
        """
        wanted = None if tps is None else sorted(set(tps))
        if wanted == []:
            return {}
        return await self._fetch(wanted, with_metadata=True)

    async def _fetch(
        self, wanted: list[TopicPartition] | None, *, with_metadata: bool
    ) -> dict[TopicPartition, tuple[int, str]]:
        """The OffsetFetch loop of :meth:`fetch` and :meth:`fetch_metadata`."""
        self._check_open()
        attempts = 0
        last: str = "no attempt finished"
        asked = wanted or []
        try:
            with anyio.fail_after(self.fetch_timeout_ms / 1000):
                while True:
                    attempts += 1
                    texts: dict[TopicPartition, str] = {}
                    try:
                        if with_metadata:
                            code, full = await self._channel.fetch_with_metadata(wanted)
                            answered = {tp: (o, c) for tp, (o, _, c) in full.items()}
                            texts = {tp: text for tp, (_, text, _) in full.items()}
                        else:
                            code, answered = await self._channel.fetch(asked)
                        requested = sorted(answered) if wanted is None else wanted
                        verdict = classify_fetch_response(requested, code, answered)
                    except ChannelError as e:
                        if e.fatal:
                            raise OffsetFetchError(
                                self.group, asked, e.reason, attempts=attempts
                            ) from e
                        last = e.reason
                    else:
                        if verdict.action is FetchAction.DONE:
                            return {
                                tp: (offset, texts.get(tp, "") if offset >= 0 else "")
                                for tp, offset in verdict.offsets.items()
                            }
                        last = verdict.describe()
                        if verdict.action is FetchAction.FAIL:
                            raise OffsetFetchError(self.group, asked, last, attempts=attempts)
                        if verdict.action is FetchAction.REDISCOVER:
                            self._channel.forget_coordinator()
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
                asked,
                f"no answer within {self.fetch_timeout_ms} ms (last failure: {last})",
                attempts=attempts,
            ) from None

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        retries: int = 0,
        fences: Mapping[TopicPartition, int] | None = None,
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> int:
        """Commit ``offsets`` to the group's coordinator: always all of them.

        As ``commitOffsets`` with Kafka storage in ``ZookeeperConsumerConnector.scala``,
        0.10.2, with its retry parameter no longer inverted (see :mod:`aiozkconsumer.offsets`):
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
            metadata: ``{partition: metadata string}`` to commit with the offsets (the broker
                keeps it with the offset, up to its ``offset.metadata.max.bytes``;
                :meth:`fetch_metadata` reads it back); partitions left out, or all with
                ``None`` (the default), get empty metadata.

        Returns:
            The number of partitions the coordinator accepted.

        Raises:
            CommitFencedError: (Kafka-coordinated group) the coordinator refused the commit:
                the member's generation is over; nothing of it was committed.
            OffsetCommitError: some partitions were still not committed after ``1 + retries``
                attempts; ``failed`` names them and why.
            ConsumerClosedError: the store is closed.
            ValueError: ``retries`` is negative.
        """
        result = await self.commit_with_result(offsets, retries=retries, metadata=metadata)
        if result.fenced:
            raise CommitFencedError(self.group, result.fenced)
        if result.failed:
            raise OffsetCommitError(
                self.group, result.failed, committed=len(result.accepted), attempts=result.attempts
            )
        return len(result.accepted)

    async def commit_with_result(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        retries: int = 0,
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> CommitResult:
        """:meth:`commit`, returning what was and was not committed instead of raising.

        For :class:`DualOffsetStore`, which writes the accepted partitions to ZooKeeper
        whatever happened to the others.

        Args:
            offsets: as :meth:`commit`.
            retries: as :meth:`commit`.
            metadata: as :meth:`commit`.

        Returns:
            The partitions accepted, failed and dropped, and the attempts made.

        Raises:
            ConsumerClosedError: the store is closed.
            ValueError: ``retries`` is negative.
        """
        check_retries(retries)
        pending = {tp: off for tp, off in sorted(offsets.items()) if off >= 0}
        if not pending:
            return CommitResult({}, {}, frozenset(), 0)
        self._check_open()
        accepted: dict[TopicPartition, int] = {}
        dropped: set[TopicPartition] = set()
        failed: dict[TopicPartition, str] = {}
        fenced: frozenset[TopicPartition] = frozenset()
        attempts = 0
        stale_resends = 0
        resend = False
        while pending and (attempts < 1 + retries or resend):
            if attempts and not resend:
                await anyio.sleep(self.backoff_ms / 1000)
            if not resend:
                attempts += 1
            resend = False
            generation, member_id = (
                self._group_generation() if self._group_generation is not None else (-1, "")
            )
            extra: dict[str, Any] = {}
            if metadata is not None:
                extra["metadata"] = metadata
            if self.leader_epochs is not None:
                extra["leader_epochs"] = self.leader_epochs(pending)
            try:
                codes = await self._channel.commit(
                    pending, generation=generation, member_id=member_id, **extra
                )
            except ChannelError as e:
                failed = dict.fromkeys(pending, e.reason)
                if e.fatal:
                    break
            else:
                if self._group_generation is not None:
                    fenced = frozenset(tp for tp, code in codes.items() if code in _GENERATION_OVER)
                    if (
                        fenced
                        and all(codes[tp] == _STALE_MEMBER_EPOCH for tp in fenced)
                        and self._group_generation()[0] != generation
                        and stale_resends < _STALE_RESENDS
                    ):
                        # The member epoch moved on while the commit was under way (a
                        # heartbeat answered): send it again with the new one.
                        stale_resends += 1
                        resend = True
                        fenced = frozenset()
                        continue
                if fenced:
                    failed = {}
                    break
                verdict = classify_commit_errors(codes)
                accepted.update((tp, pending[tp]) for tp in verdict.accepted)
                self._kafka_commits += len(verdict.accepted)
                if verdict.refresh_coordinator:
                    self._channel.forget_coordinator()
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
        return CommitResult(accepted, failed, frozenset(dropped), attempts, fenced)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Nothing to forget: Kafka commits are never filtered by a checkpoint."""

    async def close(self) -> None:
        """Forget the coordinator and drop its connection; later calls raise
        ``ConsumerClosedError``. The Kafka client itself belongs to the connector."""
        self._closed = True
        self._channel.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError(f"the offset store of group {self.group!r} is closed")

    def __repr__(self) -> str:
        coordinator = self._channel.coordinator
        where = "unknown" if coordinator is None else f"broker {coordinator}"
        state = "closed" if self._closed else f"coordinator {where}"
        return f"<KafkaOffsetStore group={self.group} [{state}, {self._kafka_commits} commits]>"
