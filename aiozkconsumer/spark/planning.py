"""Pure planning of the ``zkkafka`` source: options, offsets JSON, batch ranges, rate limits.

Nothing here does I/O. The stream reader (``source.py``) gathers the facts — which
partitions this group member owns, the offsets the group committed, the log end offsets —
and these functions decide what the next micro-batch reads.

Offsets travel through Spark's checkpoint as JSON in the shape of the Kafka source's
``KafkaSourceOffset``: ``{"<topic>": {"<partition>": <next offset>}}``. Two extra keys, which
cannot be topic names (``@`` is not a legal topic character), keep replays deterministic:

- ``"@start": {"<topic>": {"<partition>": <offset>}}`` in a batch's *end* offset: where the
  batch starts reading a partition whose start is not the previous batch's end — a partition
  this member just acquired from the group (starting at the group's committed offset), or
  the first batch of a query. A replay reads the checkpointed end offset, so it reads the
  same ranges whatever the group looks like at replay time.
- ``"@initial": true``: the offset of a new query before its first batch (``initialOffset``).
  The first batch's end offset records every start in ``"@start"``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import ConsumerConfig
from ..errors import InvalidConfigError
from ..records import TopicPartition

__all__ = [
    "EARLIEST",
    "INITIAL_KEY",
    "LATEST",
    "SOURCE_NAME",
    "START_KEY",
    "OffsetRange",
    "SourceOptions",
    "StartingOffsets",
    "decode_offsets",
    "encode_offsets",
    "initial_offset",
    "parse_source_options",
    "parse_starting_offsets",
    "plan_ranges",
    "plan_starts",
    "rate_limit",
]

SOURCE_NAME = "zkkafka"
"""The format name: ``spark.readStream.format("zkkafka")``."""

START_KEY = "@start"
"""End-offset key holding the start of partitions that do not continue the previous batch."""

INITIAL_KEY = "@initial"
"""Key of the offset a new query starts from, before the group told it what it owns."""

EARLIEST = -2
"""``startingOffsets`` JSON value for the log start offset (as the Kafka source)."""

LATEST = -1
"""``startingOffsets`` JSON value for the log end offset (as the Kafka source)."""

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")

_SOURCE_KEYS = {
    "subscribe",
    "subscribepattern",
    "startingoffsets",
    "maxoffsetspertrigger",
    "minpartitions",
    "failondataloss",
    "includeheaders",
}
_UNSUPPORTED_KEYS = {
    "assign": "partitions are assigned by the group: use subscribe or subscribePattern",
    "startingtimestamp": "not supported: use startingOffsets",
    "startingoffsetsbytimestamp": "not supported: use startingOffsets",
    "startingoffsetsbytimestampstrategy": "not supported: use startingOffsets",
    "endingoffsets": "batch queries are not supported",
    "endingtimestamp": "batch queries are not supported",
    "endingoffsetsbytimestamp": "batch queries are not supported",
    "minoffsetspertrigger": "not supported",
    "maxtriggerdelay": "not supported",
    "kafka.group.id": "use group.id: the source is a member of that consumer group",
    "groupidprefix": "use group.id: the source is a member of that consumer group",
}
_CONFIG_KEYS = frozenset(ConsumerConfig.__dataclass_fields__)
# Other names of consumer properties: the Kafka source's prefixed one and the Java client's.
_PROPERTY_ALIASES = {
    "kafka.bootstrap.servers": "bootstrap.servers",
    "enable.auto.commit": "auto.commit.enable",
}


@dataclass(frozen=True)
class StartingOffsets:
    """Where to start partitions the group has no committed offset for (``startingOffsets``).

    Attributes:
        default: ``EARLIEST`` or ``LATEST``, for partitions not listed in ``specific``.
        specific: ``{TopicPartition: offset}`` from the JSON form; an offset may be
            ``EARLIEST`` (-2) or ``LATEST`` (-1).
    """

    default: int = LATEST
    specific: Mapping[TopicPartition, int] = field(default_factory=dict)

    def for_partition(self, tp: TopicPartition) -> int:
        """The starting offset of ``tp``: a concrete offset, ``EARLIEST`` or ``LATEST``."""
        return self.specific.get(tp, self.default)


def parse_starting_offsets(text: str) -> StartingOffsets:
    """Read a ``startingOffsets`` option, as the Kafka source does.

    Args:
        text: ``"earliest"``, ``"latest"`` or JSON ``{"topicA": {"0": 23, "1": -1}}`` where
            -2 means earliest and -1 latest. Partitions the JSON leaves out start at latest.

    Returns:
        The parsed starting offsets.

    Raises:
        InvalidConfigError: the text is none of those forms, or the JSON has a partition
            that is not an integer or an offset below -2.
    """
    lowered = text.strip().lower()
    if lowered == "earliest":
        return StartingOffsets(EARLIEST)
    if lowered == "latest":
        return StartingOffsets(LATEST)
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise InvalidConfigError(
            "startingOffsets",
            f"expected earliest, latest or JSON {{topic: {{partition: offset}}}}, got {text!r}",
        )
    specific: dict[TopicPartition, int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise InvalidConfigError("startingOffsets", f"{topic!r} must map to an object")
        for partition, offset in parts.items():
            if not str(partition).isdigit() or isinstance(offset, bool):
                raise InvalidConfigError("startingOffsets", f"bad partition {partition!r}")
            if not isinstance(offset, int) or offset < EARLIEST:
                raise InvalidConfigError(
                    "startingOffsets",
                    f"offset of [{topic},{partition}] must be an integer >= -2, got {offset!r}",
                )
            specific[TopicPartition(topic, int(partition))] = offset
    return StartingOffsets(LATEST, specific)


@dataclass(frozen=True)
class SourceOptions:
    """The options of a ``zkkafka`` source, checked.

    Attributes:
        config: the group member's consumer configuration (``auto.commit.enable`` forced
            off: offsets are committed when Spark committed a batch).
        topics: the ``subscribe`` topics, or ``None`` with ``subscribePattern``.
        pattern: the ``subscribePattern`` regex (a ``Whitelist``), or ``None``.
        starting_offsets: ``startingOffsets`` (default latest), for partitions the group has
            no offset for.
        max_offsets_per_trigger: ``maxOffsetsPerTrigger``, the most offsets one micro-batch
            covers across all partitions; ``None`` for no limit.
        min_partitions: ``minPartitions``: split offset ranges into at least this many Spark
            partitions; ``None`` for one per Kafka partition.
        fail_on_data_loss: ``failOnDataLoss`` (default true): fail the query when offsets to
            read were deleted or are out of range; otherwise skip them with a warning.
        include_headers: ``includeHeaders`` (default false): add the ``headers`` column.
    """

    config: ConsumerConfig
    topics: tuple[str, ...] | None
    pattern: str | None
    starting_offsets: StartingOffsets
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False


def _bool_option(name: str, value: str) -> bool:
    lowered = str(value).strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidConfigError(name, f"must be true or false, got {value!r}")
    return lowered == "true"


def _positive_int_option(name: str, value: str) -> int:
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise InvalidConfigError(name, f"must be a positive integer, got {value!r}")
    return int(text)


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Check the options of ``spark.readStream.format("zkkafka")``.

    Source options follow Spark's Kafka source (case-insensitive): exactly one of
    ``subscribe`` (comma-separated topics) and ``subscribePattern`` (a regex, subscribed as
    the old consumer's ``Whitelist``); ``startingOffsets``; ``maxOffsetsPerTrigger``;
    ``minPartitions``; ``failOnDataLoss``; ``includeHeaders``. Every option with a dot is a
    consumer property, as ``ConsumerConfig.from_properties`` reads it: ``group.id`` is
    required; a ZooKeeper-coordinated group (``group.coordinator=zookeeper``, the default)
    needs ``zookeeper.connect``, a Kafka-coordinated one (``group.coordinator=kafka``) needs
    ``bootstrap.servers`` and no ZooKeeper; ``offsets.storage``,
    ``zookeeper.session.timeout.ms``, ``session.timeout.ms``, ``fetch.message.max.bytes``, ...
    pass through. ``kafka.bootstrap.servers`` is read as ``bootstrap.servers`` and
    ``enable.auto.commit`` as ``auto.commit.enable``. Without ``startingOffsets``,
    ``auto.offset.reset`` is honoured (``smallest``/``earliest`` = earliest).

    Args:
        options: the source options (keys in any letter case).

    Returns:
        The checked options.

    Raises:
        InvalidConfigError: a required option is missing (``group.id``; ``zookeeper.connect``
            of a ZooKeeper-coordinated group; ``bootstrap.servers`` of a Kafka-coordinated
            one), a value is invalid, an option is unknown or not supported (``assign``,
            timestamps, ``kafka.group.id``), both or neither of ``subscribe`` and
            ``subscribePattern`` are given, or ``auto.commit.enable`` is true.
    """
    lowered = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    properties: dict[str, str] = {}
    for key, value in lowered.items():
        if key in _UNSUPPORTED_KEYS:
            raise InvalidConfigError(key, _UNSUPPORTED_KEYS[key])
        if key in _SOURCE_KEYS:
            continue
        name = _PROPERTY_ALIASES.get(key, key)
        if "." in name and name.replace(".", "_") in _CONFIG_KEYS and "_" not in name:
            properties[name] = value
            continue
        raise InvalidConfigError(
            key,
            "unknown option of the zkkafka source (source options: subscribe, "
            "subscribePattern, startingOffsets, maxOffsetsPerTrigger, minPartitions, "
            "failOnDataLoss, includeHeaders; anything else must be a consumer property "
            "such as group.id, zookeeper.connect or bootstrap.servers)",
        )
    if _bool_option("auto.commit.enable", properties.get("auto.commit.enable", "false")):
        raise InvalidConfigError(
            "auto.commit.enable",
            "must be false: the source commits offsets after Spark committed each batch",
        )
    properties["auto.commit.enable"] = "false"
    if "zookeeper.connect" not in properties and "group.coordinator" not in properties:
        raise InvalidConfigError(
            "zookeeper.connect",
            "missing: the source joins a ZooKeeper-coordinated group (the default); for a "
            "Kafka-coordinated group set group.coordinator=kafka and bootstrap.servers",
        )
    config = ConsumerConfig.from_properties(properties)
    reset = properties.get("auto.offset.reset")

    subscribe = lowered.get("subscribe")
    pattern = lowered.get("subscribepattern")
    if (subscribe is None) == (pattern is None):
        raise InvalidConfigError("subscribe", "give exactly one of subscribe and subscribePattern")
    topics: tuple[str, ...] | None = None
    if subscribe is not None:
        topics = tuple(sorted({t.strip() for t in subscribe.split(",") if t.strip()}))
        if not topics:
            raise InvalidConfigError("subscribe", "no topic given")
        for topic in topics:
            if not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
                raise InvalidConfigError("subscribe", f"illegal topic name {topic!r}")
    elif pattern is not None and not pattern.strip():
        raise InvalidConfigError("subscribePattern", "must not be empty")

    if "startingoffsets" in lowered:
        starting = parse_starting_offsets(lowered["startingoffsets"])
    elif reset is not None:
        starting = StartingOffsets(EARLIEST if config.auto_offset_reset == "smallest" else LATEST)
    else:
        starting = StartingOffsets(LATEST)

    max_offsets = lowered.get("maxoffsetspertrigger")
    min_parts = lowered.get("minpartitions")
    return SourceOptions(
        config=config,
        topics=topics,
        pattern=pattern,
        starting_offsets=starting,
        max_offsets_per_trigger=(
            _positive_int_option("maxOffsetsPerTrigger", max_offsets)
            if max_offsets is not None
            else None
        ),
        min_partitions=(
            _positive_int_option("minPartitions", min_parts) if min_parts is not None else None
        ),
        fail_on_data_loss=_bool_option("failOnDataLoss", lowered.get("failondataloss", "true")),
        include_headers=_bool_option("includeHeaders", lowered.get("includeheaders", "false")),
    )


# -- offsets JSON ---------------------------------------------------------------------------


def _nested(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def _flat(nested: Any, what: str) -> dict[TopicPartition, int]:
    if not isinstance(nested, dict):
        raise ValueError(f"{what} is not a JSON object: {nested!r}")
    out: dict[TopicPartition, int] = {}
    for topic, parts in nested.items():
        if not isinstance(parts, dict):
            raise ValueError(f"{what}: {topic!r} does not map to an object")
        for partition, offset in parts.items():
            out[TopicPartition(topic, int(partition))] = int(offset)
    return out


def encode_offsets(
    positions: Mapping[TopicPartition, int],
    starts: Mapping[TopicPartition, int] | None = None,
) -> dict[str, Any]:
    """The offset dict of a batch end, in the Kafka source's JSON shape.

    Args:
        positions: ``{tp: next offset to read}`` after the batch.
        starts: ``{tp: first offset}`` for partitions whose range does not start at the
            previous batch's end (stored under ``"@start"``).

    Returns:
        ``{"<topic>": {"<partition>": offset}, ...}``, topics and partitions sorted, plus
        ``"@start"`` when ``starts`` is not empty.
    """
    out: dict[str, Any] = dict(_nested(positions))
    if starts:
        out[START_KEY] = _nested(starts)
    return out


def decode_offsets(
    offset: Mapping[str, Any],
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Read an offset dict written by :func:`encode_offsets` (or :func:`initial_offset`).

    Args:
        offset: the dict Spark passes back (the checkpointed JSON, parsed).

    Returns:
        ``(positions, starts)``; both empty for the initial offset.

    Raises:
        ValueError: the dict is not in this source's shape (a checkpoint of another source).
    """
    positions: dict[TopicPartition, int] = {}
    starts: dict[TopicPartition, int] = {}
    for key, value in offset.items():
        if key == INITIAL_KEY:
            continue
        if key == START_KEY:
            starts = _flat(value, START_KEY)
        else:
            positions.update(_flat({key: value}, "offset"))
    return positions, starts


def initial_offset() -> dict[str, Any]:
    """The offset of a new query: ``{"@initial": true}`` (see the module docstring)."""
    return {INITIAL_KEY: True}


# -- planning -------------------------------------------------------------------------------


def plan_starts(
    previous: Mapping[TopicPartition, int],
    owned: Iterable[TopicPartition],
    committed: Mapping[TopicPartition, int],
    starting: Mapping[TopicPartition, int],
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Where the next batch starts reading each owned partition.

    A partition the previous batch read continues at its end, unless the group committed a
    larger offset (another member read further while this query was stopped or did not own
    the partition): then it starts there. A partition the previous batch did not read starts
    at the group's committed offset, or at ``starting`` when the group has none.

    Args:
        previous: ``{tp: end offset}`` of the previous batch (empty for a new query).
        owned: the partitions this member owns now.
        committed: the group's committed offsets (next offset to read), where it has one.
        starting: the resolved starting offset of each owned partition without a committed
            offset and without a previous end (missing ones start at 0).

    Returns:
        ``(starts, rebased)``: the start of every owned partition, and the subset whose start
        is not the previous end (to be recorded in ``"@start"``).
    """
    starts: dict[TopicPartition, int] = {}
    rebased: dict[TopicPartition, int] = {}
    for tp in sorted(set(owned)):
        prev = previous.get(tp)
        group = committed.get(tp)
        if prev is not None and (group is None or group <= prev):
            starts[tp] = prev
            continue
        start = group if group is not None else starting.get(tp, 0)
        starts[tp] = rebased[tp] = start
    return starts, rebased


def rate_limit(
    ranges: Mapping[TopicPartition, tuple[int, int]], max_offsets: int
) -> dict[TopicPartition, int]:
    """Cut offset ranges so that together they cover at most ``max_offsets`` offsets.

    As the Kafka source's ``maxOffsetsPerTrigger``: each partition gets a share proportional
    to its backlog. Unlike the Kafka source (which rounds small shares up, so a batch may
    exceed the limit by up to one offset per partition), the shares here never add up to more
    than the limit: the floor of each share, then the remaining offsets one by one to the
    partitions with the largest remainders (the larger backlog first on ties), so a small
    partition is not starved.

    Args:
        ranges: ``{tp: (start, end)}``, ``start <= end``.
        max_offsets: the limit, >= 1.

    Returns:
        ``{tp: new end}`` for every partition of ``ranges``, ``start <= new end <= end``.

    Raises:
        ValueError: ``max_offsets`` < 1.
    """
    if max_offsets < 1:
        raise ValueError(f"max_offsets must be >= 1, got {max_offsets}")
    sizes = {tp: end - start for tp, (start, end) in ranges.items() if end > start}
    total = sum(sizes.values())
    if total <= max_offsets:
        return {tp: end for tp, (_, end) in ranges.items()}
    shares = {tp: size * max_offsets / total for tp, size in sizes.items()}
    taken = {tp: min(sizes[tp], math.floor(share)) for tp, share in shares.items()}
    left = max_offsets - sum(taken.values())
    by_remainder = sorted(
        sizes, key=lambda tp: (-(shares[tp] - taken[tp]), -sizes[tp], tp.topic, tp.partition)
    )
    for tp in by_remainder:
        if left <= 0:
            break
        if taken[tp] < sizes[tp]:
            taken[tp] += 1
            left -= 1
    return {tp: start + taken.get(tp, 0) for tp, (start, _) in ranges.items()}


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition: what one Spark task reads.

    Attributes:
        tp: the partition.
        start: the first offset.
        end: the offset after the last one.
    """

    tp: TopicPartition
    start: int
    end: int

    @property
    def size(self) -> int:
        """``end - start``."""
        return self.end - self.start


def plan_ranges(
    ranges: Mapping[TopicPartition, tuple[int, int]], min_partitions: int | None = None
) -> list[OffsetRange]:
    """Spark tasks for a batch: one per non-empty range, split up for ``minPartitions``.

    As the Kafka source's ``KafkaOffsetRangeCalculator``: with ``min_partitions`` above the
    number of non-empty ranges, each range is split into about
    ``size / total * min_partitions`` (at least 1) equal parts.

    Args:
        ranges: ``{tp: (start, end)}``.
        min_partitions: the ``minPartitions`` option, or ``None``.

    Returns:
        The non-empty ranges, sorted by partition then start.
    """
    whole = [OffsetRange(tp, s, e) for tp, (s, e) in sorted(ranges.items()) if e > s]
    if min_partitions is None or min_partitions <= len(whole):
        return whole
    total = sum(r.size for r in whole)
    out: list[OffsetRange] = []
    for r in whole:
        parts = min(r.size, max(1, round(r.size / total * min_partitions)))
        for i in range(parts):
            start = r.start + r.size * i // parts
            end = r.start + r.size * (i + 1) // parts
            out.append(OffsetRange(r.tp, start, end))
    return out
