"""The fetcher's leader checks (KIP-320): leader epochs, position validation, truncation.

Used by the leader finder of :class:`~aiozkconsumer.fetcher.FetcherManager` before it hands a
partition to a new leader's fetch loop: :func:`find_leaders` (one round) and
:func:`leader_epochs` ask the partitions' leaders and epochs (Metadata v7);
:func:`validate_positions` checks each position whose leader epoch moved on against the new
leader's log (OffsetsForLeaderEpoch), as the Java client's ``OffsetsForLeaderEpochUtils``; a
truncated log moves the position back to where the logs diverge, or by ``auto.offset.reset``
when that is unknown (:func:`reset_truncated`). The decisions themselves are pure, in
:mod:`~aiozkconsumer.epochs`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ._repeats import Repeats
from .cluster import EARLIEST, LATEST, KafkaClient
from .epochs import EpochError, Outcome, classify_epoch_error, validate_position
from .errors import BrokerNotAvailableError, UnknownTopicError
from .kafka.errors import error_name
from .kafka.leader_epoch import LeaderAndEpoch, leaders_and_epochs, offsets_for_leader_epoch
from .kafka.stable_offsets import list_offsets
from .records import (
    PartitionTopicInfo,
    TopicPartition,
    describe_partitions,
    note_fetch_change,
)

__all__ = ["find_leaders", "leader_epochs", "reset_truncated", "validate_positions"]

log = logging.getLogger("aiozkconsumer.fetcher")
"""The fetcher's logger: these messages are the fetcher's, for a user's log configuration."""


async def leader_epochs(
    kafka: KafkaClient, pending: Iterable[TopicPartition]
) -> dict[TopicPartition, LeaderAndEpoch] | None:
    """Leaders and leader epochs (Metadata v7) from the partitions' leaders as aiokafka's
    metadata knows them, else the first other broker that answers; ``None`` when none
    does."""
    pending = list(pending)
    nodes = sorted({n for n in map(kafka.leader_for, pending) if n is not None})
    nodes += [n for n, _ in kafka.brokers() if n not in nodes]
    topics = {tp.topic for tp in pending}
    for node in nodes:
        try:
            return await leaders_and_epochs(kafka, node, topics)
        except BrokerNotAvailableError as e:
            log.debug("no leader epochs from broker %s: %s", node, e)
    return None


async def find_leaders(
    kafka: KafkaClient, pending: Mapping[TopicPartition, Any], repeats: Repeats
) -> dict[TopicPartition, LeaderAndEpoch] | None:
    """One round of the leader finder: leaders and leader epochs of ``pending`` (Metadata
    v7), or ``None`` when no broker answered (then a WARNING, once per outage, through
    ``repeats``, naming the partitions).

    When the client knows brokers, the Metadata v7 request alone answers. The client's own
    metadata is refreshed (a second request, decoded in full) only when that answer leaves a
    partition without a leader, names a broker the client does not know, or no broker
    answered; the epochs are then asked again. So a round costs one metadata request while
    the cluster did not change, as the original's ``LeaderFinderThread`` round did
    (``ClientUtils.fetchTopicMetadata``).
    """
    known = {node for node, _ in kafka.brokers()}
    if known:
        epochs = await leader_epochs(kafka, pending)
        if epochs is not None and all(
            (answer := epochs.get(tp)) is not None and answer.leader in known for tp in pending
        ):
            repeats.forget("no leader")
            return epochs
    if await kafka.refresh_metadata({tp.topic for tp in pending}):
        repeats.forget("no leader")
    else:
        msg = "Failed to find leader for %s: no broker answered"
        repeats.warning(log, "no leader", msg, describe_partitions(pending))
    return await leader_epochs(kafka, pending)


async def validate_positions(
    kafka: KafkaClient,
    leader: int,
    checks: dict[PartitionTopicInfo, int],
    *,
    auto_offset_reset: str,
    isolation_level: int,
) -> list[PartitionTopicInfo]:
    """Check positions against a new leader's log (OffsetsForLeaderEpoch, KIP-320).

    As the Java client's ``OffsetsForLeaderEpochUtils`` and
    ``SubscriptionState.maybeCompleteValidation``: for each partition, ask where the
    leader's log of the position's epoch ends (:func:`~.epochs.validate_position`
    decides). A log that ends before the position was truncated under the consumer (an
    unclean leader election): the position goes back to where the logs diverge, or by
    ``auto.offset.reset`` when that is unknown, with a WARNING naming the partition, the
    truncated range and the records lost or read again. Chunks fetched before are dropped
    by the iterator (``PartitionTopicInfo.truncations``).

    Args:
        leader: the partitions' new leader.
        checks: ``{partition: the new leader epoch}``.

    Returns:
        The partitions to fetch from ``leader`` now (leader epoch set); the others stay
        with the leader finder (a retriable error or no answer: asked again next round).
    """
    positions = {pti: (pti.fetched_offset, pti.offset_epoch(pti.fetched_offset)) for pti in checks}
    try:
        answers = await offsets_for_leader_epoch(
            kafka,
            leader,
            {pti.tp: (checks[pti], epoch) for pti, (_, epoch) in positions.items()},
        )
    except BrokerNotAvailableError as e:
        log.warning(
            "validating the positions of %s on broker %s failed: %s",
            sorted(p.tp for p in checks),
            leader,
            e,
        )
        return []
    ready: list[PartitionTopicInfo] = []
    by_policy: list[PartitionTopicInfo] = []
    for pti, (position, position_epoch) in positions.items():
        answer = answers.get(pti.tp)
        if answer is None or not pti.active or pti.fetched_offset != position:
            continue  # unanswered, or released or moved meanwhile: next round
        kind = classify_epoch_error(answer.error_code)
        if kind is EpochError.RETRY:
            log.debug(
                "validating %s on broker %s: %s", pti.tp, leader, error_name(answer.error_code)
            )
            continue
        old_epoch, pti.leader_epoch = pti.leader_epoch, checks[pti]
        note_fetch_change()
        ready.append(pti)
        if kind is EpochError.FATAL:
            # TOPIC_AUTHORIZATION_FAILED: the fetch reports it as it does today.
            continue
        verdict = validate_position(
            position, position_epoch, answer.leader_epoch, answer.end_offset
        )
        if verdict.outcome is Outcome.TRUNCATED:
            consumed = pti.consumed_offset
            # Records below the divergence point that were fetched but not yet handed
            # out are still in the log: fetch them again rather than drop them.
            new = min(consumed, verdict.offset) if consumed >= 0 else verdict.offset
            epoch = verdict.epoch if new == verdict.offset else pti.offset_epoch(new)
            log.warning(
                "Log truncation detected for partition %s (leader epoch %d -> %d on "
                "broker %s, an unclean leader election?): the leader's log of epoch %d "
                "ends at offset %d, but offsets %d..%d had been fetched from the previous "
                "leader: %d record offset(s) truncated, %d of them already handed out "
                "and no longer in the log. Resetting the position to offset %d "
                "(auto.offset.reset=%s; the first offset known to diverge, as the Java "
                "client): offsets %d..%d will be read again from the new leader",
                pti.tp,
                old_epoch,
                checks[pti],
                leader,
                position_epoch,
                verdict.offset,
                verdict.offset,
                position - 1,
                verdict.truncated,
                max(0, min(consumed, position) - verdict.offset),
                new,
                auto_offset_reset,
                new,
                position - 1,
            )
            pti.truncations += 1
            pti.reset_offsets(new, epoch)
        elif verdict.outcome is Outcome.TRUNCATED_UNKNOWN:
            by_policy.append(pti)
    if by_policy:
        await reset_truncated(
            kafka,
            leader,
            by_policy,
            positions,
            auto_offset_reset=auto_offset_reset,
            isolation_level=isolation_level,
        )
    return ready


async def reset_truncated(
    kafka: KafkaClient,
    leader: int,
    ptis: list[PartitionTopicInfo],
    positions: dict[PartitionTopicInfo, tuple[int, int]],
    *,
    auto_offset_reset: str,
    isolation_level: int,
) -> None:
    """Reset by ``auto.offset.reset`` the positions whose divergence point the leader
    does not know (it holds no epoch up to theirs), with the WARNING."""
    policy = auto_offset_reset
    ts = EARLIEST if policy == "smallest" else LATEST
    try:
        offsets = await list_offsets(
            kafka, leader, {p.tp: ts for p in ptis}, isolation_level=isolation_level
        )
    except (BrokerNotAvailableError, UnknownTopicError) as e:
        offsets = {}
        log.warning("offset reset on broker %s failed: %s", leader, e)
    for pti in ptis:
        position, position_epoch = positions[pti]
        new = offsets.get(pti.tp)
        if new is None:
            # Asked again next round (the fetch loop resets a position of -1 by policy
            # too, but without saying why).
            continue
        consumed = pti.consumed_offset
        log.warning(
            "Log truncation detected for partition %s on broker %s (an unclean leader "
            "election?): the leader holds no leader epoch up to %d, the epoch of offset "
            "%d, so where its log diverged from the %d record offset(s) fetched is "
            "unknown. Resetting the position to offset %d by auto.offset.reset=%s: %s",
            pti.tp,
            leader,
            position_epoch,
            position - 1,
            position,
            new,
            policy,
            f"offsets {new}..{consumed - 1} will be read again"
            if new < consumed
            else f"offsets {position}..{new - 1} ({new - position}) are skipped"
            if new > position
            else "no offset is skipped or read again",
        )
        pti.truncations += 1
        pti.reset_offsets(new)
