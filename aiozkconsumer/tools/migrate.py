"""Moving a group's committed offsets between ZooKeeper and Kafka: ``offsets migrate``.

The way off ZooKeeper (see the migration guide, "Off ZooKeeper"): a group coordinated by
ZooKeeper keeps its offsets in ``/consumers/<group>/offsets/<topic>/<partition>``; a group
coordinated by Kafka (``group.coordinator=kafka``, or any Java, aiokafka or confluent-kafka
consumer) reads them from the group's coordinator. :func:`migrate_offsets` copies them from one
to the other — to Kafka as an admin commit (OffsetCommit with generation -1 and member id
``""``, as ``kafka-consumer-groups.sh --reset-offsets``), back to ZooKeeper as offset nodes —
but only while the target group has no live member, whose next commit would overwrite them.

The decision is pure (:func:`plan_migration`): an offset is copied only where the target has
none or a smaller one. A target offset already at the source's (dual commit wrote it) is left
alone, so a second run writes nothing; one *ahead* of the source (the target group went on
consuming) is never moved back, with a warning: a migration never makes a group re-read what it
consumed. The I/O reuses :class:`~aiozkconsumer.tools.GroupAdmin` (ZooKeeper's members, the
offsets in either store, the commit) and :class:`~aiozkconsumer.tools.KafkaGroupAdmin` (the Kafka
group's state and members).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..records import TopicPartition
from ..zk import layout
from .admin import GroupActiveError, GroupAdmin, MalformedNode, UnknownGroupError
from .kafka_groups import KafkaGroupAdmin

__all__ = [
    "MigrationPlan",
    "MigrationTarget",
    "PartitionMigration",
    "kafka_group_members",
    "migrate_offsets",
    "plan_migration",
]

MigrationTarget = Literal["kafka", "zookeeper"]
"""Where ``offsets migrate`` writes: ``kafka`` (from ZooKeeper) or ``zookeeper`` (from Kafka)."""

_IDLE_KAFKA_STATES = frozenset({"Empty", "Dead"})
"""States of a Kafka group without members: an admin commit is accepted only then."""


def _source_of(target: MigrationTarget) -> MigrationTarget:
    return "zookeeper" if target == "kafka" else "kafka"


@dataclass(frozen=True)
class PartitionMigration:
    """One line of a migration: a partition the source store has an offset for.

    Attributes:
        topic: the topic.
        partition: the partition number.
        source: the source store's committed offset (the next offset to read).
        target: the target store's committed offset before the migration, ``None`` when it
            has none.
        new: the offset the migration writes to the target, ``None`` when it writes nothing
            (the target already holds ``source``, or is ahead of it).
    """

    topic: str
    partition: int
    source: int
    target: int | None
    new: int | None

    @property
    def tp(self) -> TopicPartition:
        """The partition."""
        return TopicPartition(self.topic, self.partition)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "source_offset": self.source,
            "target_offset": self.target,
            "new_offset": self.new,
        }


@dataclass(frozen=True)
class MigrationPlan:
    """What a migration writes, partition by partition.

    Attributes:
        group: the group id.
        source: the store the offsets are read from.
        target: the store they are written to.
        partitions: one line per partition of the source, sorted by topic and partition.
        warnings: partitions left alone and why (target ahead, topic or partition gone,
            malformed offset node); live members of the source group, whose later commits the
            migration does not see.
        target_members: the target group's live members (non-empty only for a dry run: a
            migration that writes refuses them).
    """

    group: str
    source: MigrationTarget
    target: MigrationTarget
    partitions: tuple[PartitionMigration, ...]
    warnings: tuple[str, ...] = field(default=())
    target_members: tuple[str, ...] = field(default=())

    @property
    def new_offsets(self) -> dict[TopicPartition, int]:
        """``{tp: offset}`` of what the migration writes."""
        return {p.tp: p.new for p in self.partitions if p.new is not None}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "group": self.group,
            "from": self.source,
            "to": self.target,
            "partitions": [p.to_json() for p in self.partitions],
            "migrated": len(self.new_offsets),
            "warnings": list(self.warnings),
            "target_members": list(self.target_members),
        }


def plan_migration(
    group: str,
    target: MigrationTarget,
    *,
    source_offsets: Mapping[TopicPartition, int],
    target_offsets: Mapping[TopicPartition, int],
    partitions_for_topic: Mapping[str, Iterable[int]],
) -> MigrationPlan:
    """Which offsets of the source a migration copies to the target.

    Per partition of the source: the source's offset is written where the target has none
    or a smaller one; nothing where the target already has it (a second run, or dual commit
    wrote both) or a larger one (the target group consumed further: moving it back would make
    it re-read records, so it is kept, with a warning). A partition whose topic or partition
    no longer exists is left out with a warning (the coordinator would refuse its commit).

    Args:
        group: the group id.
        target: where the offsets go; the source is the other store.
        source_offsets: the source's committed offsets (negative ones count as none).
        target_offsets: the target's committed offsets of the same partitions.
        partitions_for_topic: topic -> its partition ids (a missing topic has none).

    Returns:
        The plan (:attr:`MigrationPlan.target_members` empty).
    """
    source = _source_of(target)
    lines: list[PartitionMigration] = []
    warnings: list[str] = []
    for tp, offset in sorted(source_offsets.items()):
        if offset < 0:
            continue
        where = f"[{tp.topic},{tp.partition}]"
        if tp.partition not in set(partitions_for_topic.get(tp.topic, ())):
            warnings.append(
                f"{where} has offset {offset} in {source} but no longer exists: not migrated"
            )
            continue
        current = target_offsets.get(tp)
        if current is not None and current < 0:
            current = None
        new: int | None = offset
        if current is not None and current >= offset:
            new = None
            if current > offset:
                warnings.append(
                    f"{where} is at {current} in {target}, ahead of {offset} in {source}: "
                    f"kept at {current} (a migration never moves an offset back)"
                )
        lines.append(PartitionMigration(tp.topic, tp.partition, offset, current, new))
    return MigrationPlan(group, source, target, tuple(lines), tuple(warnings))


async def kafka_group_members(groups: KafkaGroupAdmin, group: str) -> tuple[str, list[str]]:
    """A Kafka-coordinated group's state and live members (DescribeGroups).

    Args:
        groups: a started :class:`~aiozkconsumer.tools.KafkaGroupAdmin`.
        group: the group id.

    Returns:
        ``(state, member ids)``; ``("Dead", [])`` for a group the coordinator does not know
        (or that is not a consumer group).

    Raises:
        BrokerNotAvailableError: the coordinator did not answer in time.
        GroupCoordinatorError: the coordinator answered with an error.
    """
    try:
        description = await groups.describe_group(group, topics=())
    except UnknownGroupError:
        return "Dead", []
    return description.state, [m.member_id for m in description.members]


async def migrate_offsets(
    admin: GroupAdmin,
    groups: KafkaGroupAdmin,
    group: str,
    *,
    to: MigrationTarget = "kafka",
    execute: bool = False,
) -> MigrationPlan:
    """Copy a group's committed offsets from ZooKeeper to Kafka, or back; plan only by default.

    ``to="kafka"``: the offsets under ``/consumers/<group>/offsets`` go to the group's Kafka
    coordinator, committed as an admin (generation -1, member id ``""``). ``to="zookeeper"``:
    the group's Kafka offsets (OffsetFetch of all partitions) go to its offset nodes. Which
    partitions are written is :func:`plan_migration`'s decision: never an offset back.

    Args:
        admin: a started :class:`~aiozkconsumer.tools.GroupAdmin` (ZooKeeper, and the Kafka
            client of its cluster view for Kafka-stored offsets).
        groups: a started :class:`~aiozkconsumer.tools.KafkaGroupAdmin` over the same
            brokers, for the Kafka group's state.
        group: the group id.
        to: the target store.
        execute: write the plan; default, a dry run that changes nothing.

    Returns:
        The plan (written when ``execute``). Live members of the *source* group are a
        warning: the migration does not see their later commits.

    Raises:
        GroupActiveError: ``execute`` and the target group has live members — for Kafka, a
            state other than ``Empty``/``Dead``; for ZooKeeper, children of
            ``/consumers/<group>/ids``. Checked before any offset is read: nothing is written
            then. As ``offsets reset``, the check and the writes are not atomic.
        UnknownGroupError: the source has no committed offset of the group (for ZooKeeper:
            no ``/consumers/<group>``, or no offset node).
        OffsetFetchError, OffsetCommitError: Kafka-stored offsets could not be read / written.
        BrokerNotAvailableError, GroupCoordinatorError: the Kafka group could not be
            described.
        NoBrokersError, KafkaConnectionError: no broker answered.
        ZookeeperConnectionError: ZooKeeper is unreachable.
        ValueError: ``group`` cannot be a ZooKeeper path element.
    """
    layout.group_dir(group)
    source = _source_of(to)
    if to == "kafka":
        state, target_members = await kafka_group_members(groups, group)
        if state not in _IDLE_KAFKA_STATES and not target_members:
            target_members = [f"(group state {state})"]
        source_members = await admin.member_ids(group)
    else:
        target_members = await admin.member_ids(group)
        state, source_members = await kafka_group_members(groups, group)
        if state not in _IDLE_KAFKA_STATES and not source_members:
            source_members = [f"(group state {state})"]
    if execute and target_members:
        raise GroupActiveError(
            group,
            target_members,
            f"Offsets of group '{group}' can only be migrated to {to} while the group has no "
            f"live members there; live now: {', '.join(target_members)}. Stop them first "
            "(their next commit would overwrite the migrated offsets).",
        )
    if source == "zookeeper" and not await admin.group_exists(group):
        raise UnknownGroupError(group, f"Consumer group '{group}' does not exist in zookeeper.")
    malformed: list[MalformedNode] = []
    source_offsets = await admin.committed_offsets(group, storage=source, malformed=malformed)
    if not source_offsets:
        raise UnknownGroupError(
            group,
            f"Consumer group '{group}' has no committed offsets in {source}: nothing to migrate.",
        )
    tps = sorted(source_offsets)
    target_offsets = await admin.committed_offsets(group, tps, storage=to, malformed=malformed)
    existing = await admin.partitions_for({tp.topic for tp in tps})
    plan = plan_migration(
        group,
        to,
        source_offsets=source_offsets,
        target_offsets=target_offsets,
        partitions_for_topic=existing,
    )
    notes = [
        f"{m.path} does not parse ({m.reason}): counted as no committed offset" for m in malformed
    ]
    if source_members:
        notes.append(
            f"group '{group}' still has live members in {source} ({', '.join(source_members)})"
            f": their later commits are not migrated; stop them and run this again"
        )
    if notes or target_members:
        plan = dataclasses.replace(
            plan, warnings=plan.warnings + tuple(notes), target_members=tuple(target_members)
        )
    if execute:
        await admin.write_offsets(group, plan.new_offsets, to)
    return plan
