"""The offsets reset of ``kafka-consumer-groups.sh --reset-offsets``, for a ZooKeeper group.

:class:`ResetTools` reads what the plan needs (the scope's partitions, their committed
offsets, log start and end offsets, the offsets for a time), has the pure
:func:`~aiozkconsumer.tools.reset.plan_reset` decide, and with ``execute`` writes the plan,
refusing a group with live members.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Literal, Protocol

from ...errors import BrokerNotAvailableError
from ...records import TopicPartition
from ...zk import layout
from ..reset import (
    AllTopics,
    FromOffsets,
    ResetPlan,
    ResetScope,
    ResetSpec,
    TopicsScope,
    ToTimestamp,
    plan_reset,
    select_partitions,
)
from .errors import GroupActiveError, UnknownGroupError
from .nodes import MalformedNode
from .offsets import OffsetTools, ResetStorage

__all__ = ["ResetSource", "ResetTools", "reset_group_offsets"]


class ResetSource(Protocol):
    """What :func:`reset_group_offsets` reads and writes through: a ZooKeeper group's
    :class:`ResetTools`, or :class:`~aiozkconsumer.tools.KafkaGroupAdmin` for a group of a
    Kafka coordinator."""

    async def member_ids(self, group: str) -> list[str]: ...

    async def committed_offsets(
        self,
        group: str,
        tps: Iterable[TopicPartition] | None = None,
        *,
        storage: ResetStorage = "zookeeper",
        malformed: list[MalformedNode] | None = None,
    ) -> dict[TopicPartition, int]: ...

    async def partitions_for(self, topics: Iterable[str]) -> dict[str, tuple[int, ...]]: ...

    async def list_offsets(
        self, tps: Iterable[TopicPartition], which: Literal["earliest", "latest"]
    ) -> dict[TopicPartition, int]: ...

    async def offsets_for_times(
        self, tps: Iterable[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int]: ...

    async def write_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int], storage: ResetStorage
    ) -> None: ...


class ResetTools(OffsetTools):
    """``offsets reset``: plan a reset of a group's offsets and, with ``execute``, write it."""

    async def reset_offsets(
        self,
        group: str,
        scope: ResetScope | None,
        spec: ResetSpec,
        *,
        storage: ResetStorage = "zookeeper",
        execute: bool = False,
    ) -> ResetPlan:
        """Plan a reset of a group's offsets and, with ``execute``, write it.

        As ``kafka-consumer-groups.sh --reset-offsets`` (``ConsumerGroupCommand``, Kafka 2.x)
        for a ZooKeeper-coordinated group: the partitions of the scope
        (:func:`~aiozkconsumer.tools.reset.select_partitions`), their committed offsets, log
        start and end offsets (and for a time, ListOffsets' answer) are read, the plan made by
        :func:`~aiozkconsumer.tools.reset.plan_reset`, and with ``execute`` written to the
        storage. The group need not exist yet (offsets can be set before its first start).

        Args:
            group: the group id.
            scope: ``--topic`` / ``--all-topics``; ``None`` only with a
                :class:`~aiozkconsumer.tools.reset.FromOffsets` spec.
            spec: the mode (``--to-earliest`` ... ``--from-file``).
            storage: where offsets are read and written (see :meth:`committed_offsets`).
            execute: write the plan; default, a dry run that changes nothing.

        Returns:
            The plan (written when ``execute``). An offset node that does not parse counts
            as no committed offset, with a warning in the plan.

        Raises:
            GroupActiveError: ``execute`` and the group has live members (checked first:
                nothing is read or written then). As the original tools, the check and the
                writes are not atomic.
            UnknownGroupError: ``--all-topics`` and the group has no committed offset in the
                storage.
            UnknownTopicError: a topic of the scope or the file does not exist or lacks a
                partition named.
            ResetPlanError: ``--shift-by`` of a partition without a committed offset.
            BrokerNotAvailableError: a partition's leader gave no log start / end offset.
            OffsetFetchError, OffsetCommitError: Kafka-stored offsets could not be read /
                written.
            NoBrokersError, KafkaConnectionError: no broker answered.
            ZookeeperConnectionError: ZooKeeper is unreachable.
            ValueError: ``group`` cannot be a ZooKeeper path element.
        """
        layout.group_dir(group)
        return await reset_group_offsets(self, group, scope, spec, storage=storage, execute=execute)


async def reset_group_offsets(
    source: ResetSource,
    group: str,
    scope: ResetScope | None,
    spec: ResetSpec,
    *,
    storage: ResetStorage,
    execute: bool,
) -> ResetPlan:
    """The steps of ``--reset-offsets`` over ``source``: refuse live members (with
    ``execute``), read what the plan needs, plan, and with ``execute`` write.

    Args and Raises: as :meth:`ResetTools.reset_offsets`, for the group ``source`` holds
    (ZooKeeper errors only from a ZooKeeper source).
    """
    if execute:
        members = await source.member_ids(group)
        if members:
            raise GroupActiveError(
                group,
                members,
                f"Offsets of group '{group}' can only be reset while it has no live "
                f"members; live now: {', '.join(members)}. Stop them first (their next "
                "commit would overwrite the reset).",
            )
    malformed: list[MalformedNode] = []
    committed: dict[TopicPartition, int] = {}
    if isinstance(spec, FromOffsets):
        topics = {tp.topic for tp in spec.offsets}
    elif isinstance(scope, AllTopics):
        committed = await source.committed_offsets(group, storage=storage, malformed=malformed)
        if not committed:
            raise UnknownGroupError(
                group,
                f"Consumer group '{group}' has no committed offsets in {storage}: "
                "nothing to reset with --all-topics.",
            )
        topics = {tp.topic for tp in committed}
    elif isinstance(scope, TopicsScope):
        topics = set(scope.topics)
    else:
        raise ValueError("a reset needs --topic or --all-topics (or --from-file)")
    partitions = await source.partitions_for(topics)
    tps = select_partitions(scope, spec, partitions, committed)
    if not isinstance(scope, AllTopics) or isinstance(spec, FromOffsets):
        committed = await source.committed_offsets(group, tps, storage=storage, malformed=malformed)
    log_start = await source.list_offsets(tps, "earliest")
    log_end = await source.list_offsets(tps, "latest")
    unanswered = [tp for tp in tps if tp not in log_start or tp not in log_end]
    if unanswered:
        raise BrokerNotAvailableError(
            "no log start / end offset from the leaders of "
            + ", ".join(f"[{tp.topic},{tp.partition}]" for tp in unanswered)
        )
    by_time = None
    if isinstance(spec, ToTimestamp):
        by_time = await source.offsets_for_times(tps, spec.timestamp_ms)
    plan = plan_reset(
        group,
        tps,
        spec,
        current=committed,
        log_start=log_start,
        log_end=log_end,
        by_time=by_time,
    )
    if malformed:
        plan = dataclasses.replace(
            plan,
            warnings=plan.warnings
            + tuple(
                f"{m.path} does not parse ({m.reason}): counted as no committed offset"
                for m in malformed
            ),
        )
    if execute:
        await source.write_offsets(group, plan.new_offsets, storage)
    return plan
