"""Offsets reset as ``kafka-consumer-groups.sh --reset-offsets`` plans it: the pure decisions.

Which partitions a reset touches (:func:`select_partitions`), the new offset of each for every
mode with the clamp to ``[log start, log end]`` (:func:`plan_reset`), and the parsing of the
tool's arguments (:func:`parse_topic_partitions`, :func:`parse_datetime_ms`,
:func:`parse_duration`). The rules are those of ``ConsumerGroupCommand.prepareOffsetsToReset``
and ``checkOffsetsRange`` (Kafka 2.x), applied to a ZooKeeper-coordinated group. Nothing
here does I/O: :meth:`GroupAdmin.reset_offsets <aiozkconsumer.tools.GroupAdmin.reset_offsets>`
reads the committed and log offsets, calls these, and writes the plan.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

from ..errors import ConsumerError, UnknownTopicError
from ..records import TopicPartition

__all__ = [
    "AllTopics",
    "FromOffsets",
    "PartitionReset",
    "ResetPlan",
    "ResetPlanError",
    "ResetScope",
    "ResetSpec",
    "ShiftBy",
    "ToEarliest",
    "ToLatest",
    "ToOffset",
    "ToTimestamp",
    "TopicsScope",
    "format_timestamp_ms",
    "parse_datetime_ms",
    "parse_duration",
    "parse_topic_partitions",
    "plan_reset",
    "select_partitions",
]


class ResetPlanError(ConsumerError, ValueError):
    """A reset cannot be planned: ``--shift-by`` of a partition with no committed offset.

    As ``ConsumerGroupCommand`` ("Cannot shift offset for partition ... since there is no
    current committed offset").

    Attributes:
        partitions: the partitions at fault, sorted.
    """

    def __init__(self, partitions: Iterable[TopicPartition], message: str) -> None:
        super().__init__(message)
        self.partitions = tuple(sorted(partitions))


# -- the modes (--to-earliest ... --from-file) --------------------------------------------


@dataclass(frozen=True)
class ToEarliest:
    """``--to-earliest``: each partition's log start offset."""


@dataclass(frozen=True)
class ToLatest:
    """``--to-latest``: each partition's log end offset."""


@dataclass(frozen=True)
class ToOffset:
    """``--to-offset N``: the same offset for every partition, clamped to its log.

    Attributes:
        offset: the offset (>= 0).
    """

    offset: int


@dataclass(frozen=True)
class ShiftBy:
    """``--shift-by N``: the committed offset plus ``delta`` (negative: back), clamped.

    Attributes:
        delta: the shift, in records.
    """

    delta: int


@dataclass(frozen=True)
class ToTimestamp:
    """``--to-datetime`` / ``--by-duration``: the first offset whose record's timestamp is
    at or after the time (ListOffsets with a timestamp); the log end where there is none.

    Attributes:
        timestamp_ms: the time, epoch milliseconds.
    """

    timestamp_ms: int


@dataclass(frozen=True)
class FromOffsets:
    """``--from-file``: the offsets of a file, clamped.

    Attributes:
        offsets: partition -> its new offset.
    """

    offsets: Mapping[TopicPartition, int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "offsets", MappingProxyType(dict(sorted(self.offsets.items()))))

    def __hash__(self) -> int:
        return hash(frozenset(self.offsets.items()))


ResetSpec = ToEarliest | ToLatest | ToOffset | ShiftBy | ToTimestamp | FromOffsets
"""How the new offsets are chosen: one of the ``--to-*`` / ``--shift-by`` / ``--from-file``
modes."""


# -- the scope (--topic / --all-topics) ---------------------------------------------------


@dataclass(frozen=True)
class TopicsScope:
    """``--topic T[:P,...]`` (repeatable): the given partitions, or all of a topic's.

    Attributes:
        topics: topic -> its chosen partitions, sorted; ``None``: every partition.
    """

    topics: Mapping[str, tuple[int, ...] | None]

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", MappingProxyType(dict(sorted(self.topics.items()))))

    def __hash__(self) -> int:
        return hash(frozenset(self.topics.items()))

    def covers(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` is in the scope."""
        if tp.topic not in self.topics:
            return False
        partitions = self.topics[tp.topic]
        return partitions is None or tp.partition in partitions


@dataclass(frozen=True)
class AllTopics:
    """``--all-topics``: every partition the group has a committed offset for, as
    ``ConsumerGroupCommand`` (the committed offsets' partitions, not whole topics)."""


ResetScope = TopicsScope | AllTopics
"""Which partitions a reset touches."""


# -- argument parsing ---------------------------------------------------------------------

_TOPIC_PARTITIONS_RE = re.compile(r"([^:]+)(?::(.*))?")


def parse_topic_partitions(values: Iterable[str]) -> TopicsScope:
    """Parse ``--topic`` values: ``topic`` or ``topic:0,1,2``, as ``ConsumerGroupCommand``.

    A topic given more than once gets the union of its partitions; a bare ``topic`` anywhere
    means all of its partitions.

    Args:
        values: the option's values.

    Returns:
        The scope.

    Raises:
        ValueError: a value has an empty topic, or a partition that is not a non-negative
            decimal number.
    """
    topics: dict[str, set[int] | None] = {}
    for value in values:
        match = _TOPIC_PARTITIONS_RE.fullmatch(value.strip())
        if match is None or not match.group(1).strip():
            raise ValueError(f"{value!r}: expected TOPIC or TOPIC:PARTITION[,PARTITION...]")
        topic, spec = match.group(1).strip(), match.group(2)
        if spec is None:
            topics[topic] = None
            continue
        partitions: set[int] = set()
        for item in spec.split(","):
            text = item.strip()
            if not text.isdecimal() or not text.isascii():
                raise ValueError(f"{value!r}: partition {text!r} is not a non-negative number")
            partitions.add(int(text))
        if topic not in topics:
            topics[topic] = partitions
        elif (known := topics[topic]) is not None:
            known |= partitions
    return TopicsScope({t: None if ps is None else tuple(sorted(ps)) for t, ps in topics.items()})


def parse_datetime_ms(text: str, *, local_tz: Any = None) -> int:
    """Parse ``--to-datetime``: an ISO 8601 date-time, e.g. ``2024-05-01T12:30:00.000``.

    As ``Utils.getDateTime`` of ``ConsumerGroupCommand``: a time without a zone is local time;
    ``Z`` or ``+hh:mm`` give the zone.

    Args:
        text: the value.
        local_tz: the zone of a time without one (a ``tzinfo``); default: the machine's.

    Returns:
        The time, epoch milliseconds.

    Raises:
        ValueError: the value is not an ISO 8601 date-time.
    """
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is not an ISO 8601 date-time (e.g. 2024-05-01T12:30:00.000 or "
            "2024-05-01T12:30:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=local_tz) if local_tz is not None else moment.astimezone()
    return (moment - _EPOCH) // timedelta(milliseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_DURATION_RE = re.compile(
    r"P(?:(?P<days>\d+)D)?(?:T(?=\d)(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d{1,9})?)S)?)?",
    re.IGNORECASE,
)


def parse_duration(text: str) -> timedelta:
    """Parse ``--by-duration``: an ISO 8601 duration ``PnDTnHnMn.nS``, e.g. ``P1DT2H30M``.

    The format of Java's ``Duration.parse``, which ``ConsumerGroupCommand`` uses, without its
    signs: the reset goes back by the duration from now.

    Args:
        text: the value.

    Returns:
        The duration (>= 0).

    Raises:
        ValueError: the value is not such a duration, or names no amount (``P``, ``PT``).
    """
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None or not any(match.groupdict().values()):
        raise ValueError(f"{text!r} is not an ISO 8601 duration PnDTnHnMn.nS (e.g. P1DT2H30M)")
    return timedelta(
        days=int(match["days"] or 0),
        hours=int(match["hours"] or 0),
        minutes=int(match["minutes"] or 0),
        seconds=float(match["seconds"] or 0),
    )


def format_timestamp_ms(timestamp_ms: int) -> str:
    """An epoch-milliseconds time as ISO 8601 in UTC, e.g. ``2024-05-01T12:30:00.000Z``."""
    moment = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{timestamp_ms % 1000:03d}Z"


# -- planning -----------------------------------------------------------------------------


def select_partitions(
    scope: ResetScope | None,
    spec: ResetSpec,
    partitions_for_topic: Mapping[str, Iterable[int]],
    committed: Iterable[TopicPartition],
) -> list[TopicPartition]:
    """The partitions a reset touches, as ``ConsumerGroupCommand.getPartitionsToReset``.

    - ``--topic t``: every partition of ``t``; ``--topic t:0,1``: those partitions.
    - ``--all-topics``: the partitions the group has a committed offset for.
    - ``--from-file``: the file's partitions; narrowed to the scope's when one is given.

    Args:
        scope: ``--topic`` / ``--all-topics``; ``None`` only with a :class:`FromOffsets`
            spec.
        spec: the mode.
        partitions_for_topic: topic -> its partition ids (a missing topic has none), for
            the scope's topics and the file's.
        committed: the partitions the group has a committed offset for.

    Returns:
        The partitions, sorted.

    Raises:
        UnknownTopicError: a topic of the scope or the file does not exist, or has no such
            partition.
        ValueError: no scope and the mode is not :class:`FromOffsets`.
    """
    if isinstance(spec, FromOffsets):
        chosen = sorted(
            tp for tp in spec.offsets if not isinstance(scope, TopicsScope) or scope.covers(tp)
        )
    elif isinstance(scope, TopicsScope):
        chosen = []
        for topic, wanted in scope.topics.items():
            existing = sorted(set(partitions_for_topic.get(topic, ())))
            if not existing:
                raise UnknownTopicError(topic, f"Topic '{topic}' does not exist.")
            chosen += [TopicPartition(topic, p) for p in (existing if wanted is None else wanted)]
    elif isinstance(scope, AllTopics):
        chosen = sorted(set(committed))
    else:
        raise ValueError("a reset needs --topic or --all-topics (or --from-file)")
    for tp in chosen:
        existing_ids = set(partitions_for_topic.get(tp.topic, ()))
        if not existing_ids:
            raise UnknownTopicError(tp.topic, f"Topic '{tp.topic}' does not exist.")
        if tp.partition not in existing_ids:
            raise UnknownTopicError(
                tp.topic, f"Topic '{tp.topic}' has no partition {tp.partition}."
            )
    return sorted(set(chosen))


@dataclass(frozen=True)
class PartitionReset:
    """One line of a reset plan.

    Attributes:
        topic: the topic.
        partition: the partition number.
        current: the committed offset, ``None`` when none is.
        new: the offset the reset writes.
        requested: what the mode asked for, before the clamp to ``[log start, log end]``
            (for a time: ListOffsets' answer, or the log end where it had none); equals
            ``new`` when nothing was clamped.
    """

    topic: str
    partition: int
    current: int | None
    new: int
    requested: int

    @property
    def tp(self) -> TopicPartition:
        """The partition."""
        return TopicPartition(self.topic, self.partition)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "current_offset": self.current,
            "new_offset": self.new,
        }


@dataclass(frozen=True)
class ResetPlan:
    """What a reset writes, partition by partition, and what it adjusted on the way.

    Attributes:
        group: the group id.
        partitions: the partitions' lines, sorted by topic and partition.
        warnings: one line per adjusted partition (clamped to the log, or no record at or
            after the time), in the partitions' order.
    """

    group: str
    partitions: tuple[PartitionReset, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def new_offsets(self) -> dict[TopicPartition, int]:
        """``{tp: new offset}``."""
        return {p.tp: p.new for p in self.partitions}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "group": self.group,
            "partitions": [p.to_json() for p in self.partitions],
            "warnings": list(self.warnings),
        }


def plan_reset(
    group: str,
    tps: Iterable[TopicPartition],
    spec: ResetSpec,
    *,
    current: Mapping[TopicPartition, int],
    log_start: Mapping[TopicPartition, int],
    log_end: Mapping[TopicPartition, int],
    by_time: Mapping[TopicPartition, int] | None = None,
) -> ResetPlan:
    """The new offset of each partition, as ``ConsumerGroupCommand.prepareOffsetsToReset``.

    Per mode: the log start (``--to-earliest``) or end (``--to-latest``); the given offset;
    the committed offset shifted; the ListOffsets answer for the time, or the log end where
    the partition has no record at or after it (Kafka's "Falling back to latest known
    offset"); the file's offset. Every new offset is then clamped to ``[log start, log end]``
    as ``checkOffsetsRange`` does, with a warning.

    Args:
        group: the group id.
        tps: the partitions (:func:`select_partitions`).
        spec: the mode.
        current: the committed offsets; partitions without one are absent (or negative).
        log_start: each partition's log start offset.
        log_end: each partition's log end offset.
        by_time: for :class:`ToTimestamp`, ListOffsets' answer per partition, ``-1`` (or
            absent) where no record is at or after the time.

    Returns:
        The plan.

    Raises:
        ResetPlanError: ``--shift-by`` and a partition has no committed offset.
        ValueError: a partition has no log start or log end offset.
    """
    chosen = sorted(set(tps))
    missing = [tp for tp in chosen if tp not in log_start or tp not in log_end]
    if missing:
        raise ValueError(f"no log start / end offset for {', '.join(map(str, missing))}")
    committed = {tp: o for tp, o in current.items() if o >= 0}
    if isinstance(spec, ShiftBy):
        unshiftable = [tp for tp in chosen if tp not in committed]
        if unshiftable:
            raise ResetPlanError(
                unshiftable,
                "Cannot shift the offsets of "
                + ", ".join(f"[{tp.topic},{tp.partition}]" for tp in unshiftable)
                + f" of group '{group}': no committed offset.",
            )
    lines: list[PartitionReset] = []
    warnings: list[str] = []
    for tp in chosen:
        start, end = log_start[tp], log_end[tp]
        where = f"[{tp.topic},{tp.partition}]"
        if isinstance(spec, ToEarliest):
            requested = start
        elif isinstance(spec, ToLatest):
            requested = end
        elif isinstance(spec, ToOffset):
            requested = spec.offset
        elif isinstance(spec, ShiftBy):
            requested = committed[tp] + spec.delta
        elif isinstance(spec, FromOffsets):
            requested = spec.offsets[tp]
        else:
            found = (by_time or {}).get(tp, -1)
            if found < 0:
                warnings.append(
                    f"no record of {where} at or after {format_timestamp_ms(spec.timestamp_ms)}"
                    f": set to its log end offset {end}"
                )
                found = end
            requested = found
        new = min(max(requested, start), end)
        if requested > end:
            warnings.append(
                f"new offset {requested} of {where} is above its log end offset {end}: set to {end}"
            )
        elif requested < start:
            warnings.append(
                f"new offset {requested} of {where} is below its log start offset {start}: "
                f"set to {start}"
            )
        lines.append(PartitionReset(tp.topic, tp.partition, committed.get(tp), new, requested))
    return ResetPlan(group, tuple(lines), tuple(warnings))
