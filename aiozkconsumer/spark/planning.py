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

import difflib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import ConsumerConfig, nearest_key
from ..errors import ConsumerError, InvalidConfigError
from ..records import TopicPartition

__all__ = [
    "EARLIEST",
    "INITIAL_KEY",
    "LATEST",
    "SOURCE_NAME",
    "START_KEY",
    "BatchRead",
    "DataLossError",
    "OffsetRange",
    "SourceOptions",
    "StartingOffsets",
    "batch_read_options",
    "check_stream_options",
    "decode_offsets",
    "encode_offsets",
    "initial_offset",
    "parse_offsets_option",
    "parse_source_options",
    "parse_starting_offsets",
    "plan_batch",
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

# The source's own options, lowered -> as documented (for messages and typo hints).
_SOURCE_OPTIONS = {
    "subscribe": "subscribe",
    "subscribepattern": "subscribePattern",
    "startingoffsets": "startingOffsets",
    "endingoffsets": "endingOffsets",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "minpartitions": "minPartitions",
    "failondataloss": "failOnDataLoss",
    "includeheaders": "includeHeaders",
    "commitonsuccess": "commitOnSuccess",
}
_SOURCE_KEYS = set(_SOURCE_OPTIONS)
# Options of Spark's Kafka source that do not apply here, and what to use instead.
_UNSUPPORTED_KEYS = {
    "assign": "not supported: the group assigns the partitions; use subscribe or subscribePattern",
    "startingtimestamp": "not supported: use startingOffsets",
    "startingoffsetsbytimestamp": "not supported: use startingOffsets",
    "startingoffsetsbytimestampstrategy": "not supported: use startingOffsets",
    "endingtimestamp": "not supported: use endingOffsets",
    "endingoffsetsbytimestamp": "not supported: use endingOffsets",
    "minoffsetspertrigger": "not supported: use maxOffsetsPerTrigger",
    "maxtriggerdelay": "not supported",
    "maxrecordsperpartition": "not supported: use minPartitions",
    "kafka.group.id": "not the Kafka source: use group.id (the source reads as a member of it)",
    "groupidprefix": "not the Kafka source: use group.id (the source reads as a member of it)",
    "kafkaconsumer.polltimeoutms": "not supported: use socket.timeout.ms",
    "fetchoffset.numretries": "not supported",
    "fetchoffset.retryintervalms": "not supported: use refresh.leader.backoff.ms",
}
# Kafka source / Java client spellings that would be set without effect here.
_NEW_CONSUMER_RESETS = {"earliest": "smallest", "latest": "largest"}
_CONFIG_KEYS = frozenset(ConsumerConfig.__dataclass_fields__)
# Other names of consumer properties: the Kafka source's prefixed one and the Java client's.
_PROPERTY_ALIASES = {
    "kafka.bootstrap.servers": "bootstrap.servers",
    "kafka.isolation.level": "isolation.level",
    "enable.auto.commit": "auto.commit.enable",
}


# Java client keys ConsumerConfig.from_properties reads without an attribute of their own.
_SECURITY_PASS_THROUGH = frozenset(
    {
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.key.password",
        "sasl.oauthbearer.token.provider",
        "sasl.oauthbearer.client.credentials.client.id",
        "sasl.oauthbearer.client.credentials.client.secret",
    }
)


def _is_security_key(name: str) -> bool:
    """Whether ``name`` is a Kafka connection security key (``security.protocol``, ``ssl.*``,
    ``sasl.*``) this consumer reads."""
    if name in _SECURITY_PASS_THROUGH:
        return True
    return name.startswith(("ssl.", "sasl.", "security.")) and (
        name.replace(".", "_") in _CONFIG_KEYS
    )


def security_properties(config: ConsumerConfig) -> tuple[tuple[str, str], ...]:
    """The Kafka connection security of ``config`` as dotted keys, for the executors.

    The executors rebuild the TLS context and SASL credentials from them
    (``kafka_security_from_properties``); secrets travel inside the pickled task, never in
    a task's ``repr``. An ``ssl_context`` or token provider object given from code cannot
    travel: the executors then need the file keys (or a provider named ``module:Class``).

    Returns:
        ``((key, value), ...)`` sorted; empty for plaintext.
    """
    if config.security_protocol == "PLAINTEXT":
        return ()
    defaults = ConsumerConfig(group_id="g", zookeeper_connect="x:1").to_properties()
    props = config.to_properties()
    return tuple(
        sorted(
            (k, v) for k, v in props.items() if _is_security_key(k) and defaults.get(k) != v
        )
    )


class DataLossError(ConsumerError):
    """Offsets a batch should read are gone (deleted by retention, or the log was truncated).

    Raised with ``failOnDataLoss=true`` (the default), as the Kafka source fails the query;
    with ``failOnDataLoss=false`` the records are skipped with a warning instead.
    """


@dataclass(frozen=True)
class StartingOffsets:
    """Offsets per partition as ``startingOffsets`` / ``endingOffsets`` give them.

    Attributes:
        default: ``EARLIEST`` or ``LATEST``, for partitions not listed in ``specific``.
        specific: ``{TopicPartition: offset}`` from the JSON form; an offset may be
            ``EARLIEST`` (-2) or ``LATEST`` (-1).
    """

    default: int = LATEST
    specific: Mapping[TopicPartition, int] = field(default_factory=dict)

    def for_partition(self, tp: TopicPartition) -> int:
        """The offset of ``tp``: a concrete offset, ``EARLIEST`` or ``LATEST``."""
        return self.specific.get(tp, self.default)


def parse_offsets_option(name: str, text: str, default: int) -> StartingOffsets:
    """Read a ``startingOffsets`` or ``endingOffsets`` option, as the Kafka source does.

    Args:
        name: the option's name, for messages.
        text: ``"earliest"``, ``"latest"`` or JSON ``{"topicA": {"0": 23, "1": -1}}`` where
            -2 means earliest and -1 latest.
        default: what partitions the JSON leaves out get (``EARLIEST`` or ``LATEST``).

    Returns:
        The parsed offsets.

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
            name,
            f'expected earliest, latest or JSON {{"topic": {{"partition": offset}}}}, got {text!r}',
        )
    specific: dict[TopicPartition, int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise InvalidConfigError(name, f"{topic!r} must map to an object")
        for partition, offset in parts.items():
            if not str(partition).isdigit() or isinstance(offset, bool):
                raise InvalidConfigError(name, f"bad partition {partition!r}")
            if not isinstance(offset, int) or offset < EARLIEST:
                raise InvalidConfigError(
                    name,
                    f"offset of [{topic},{partition}] must be an integer >= -2, got {offset!r}",
                )
            specific[TopicPartition(topic, int(partition))] = offset
    return StartingOffsets(default, specific)


def parse_starting_offsets(text: str) -> StartingOffsets:
    """Read a streaming query's ``startingOffsets`` option, as the Kafka source does.

    Args:
        text: ``"earliest"``, ``"latest"`` or JSON ``{"topicA": {"0": 23, "1": -1}}`` where
            -2 means earliest and -1 latest. Partitions the JSON leaves out start at latest.

    Returns:
        The parsed starting offsets.

    Raises:
        InvalidConfigError: the text is none of those forms, or the JSON has a partition
            that is not an integer or an offset below -2.
    """
    return parse_offsets_option("startingOffsets", text, LATEST)


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
        starting_offsets_option: the ``startingOffsets`` text as given, ``None`` when unset
            (a batch read then starts at the group's committed offsets).
        ending_offsets_option: the ``endingOffsets`` text (batch reads only), or ``None``.
        commit_on_success: ``commitOnSuccess`` (batch reads only, default false): the read's
            end offsets may be committed to the group by ``commit_batch``.
        auto_offset_reset_set: whether ``auto.offset.reset`` was given.
    """

    config: ConsumerConfig
    topics: tuple[str, ...] | None
    pattern: str | None
    starting_offsets: StartingOffsets
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    starting_offsets_option: str | None = None
    ending_offsets_option: str | None = None
    commit_on_success: bool = False
    auto_offset_reset_set: bool = False


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


def _unknown_option(key: str) -> InvalidConfigError:
    """The one-line error of an option the source does not know, with the nearest known one."""
    if key.startswith("kafka."):
        bare = key.removeprefix("kafka.")
        if bare.replace(".", "_") in _CONFIG_KEYS:
            return InvalidConfigError(
                key, f"the Kafka source's prefix is not used here: set {bare} instead"
            )
        return InvalidConfigError(
            key,
            "the Kafka source's kafka.* consumer settings are not passed through; "
            "consumer properties of this library are set without a prefix (see docs/spark.md)",
        )
    near = difflib.get_close_matches(key, list(_SOURCE_KEYS), n=1, cutoff=0.75)
    if near:
        return InvalidConfigError(key, f"unknown option; did you mean {_SOURCE_OPTIONS[near[0]]}?")
    near_property = nearest_key(key)
    if near_property is not None:
        return InvalidConfigError(key, f"unknown option; did you mean {near_property}?")
    return InvalidConfigError(
        key,
        "unknown option (source options: "
        + ", ".join(sorted(_SOURCE_OPTIONS.values()))
        + "; anything else must be a consumer property such as group.id or zookeeper.connect)",
    )


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Check the options of ``spark.readStream.format("zkkafka")`` / ``spark.read``.

    Source options follow Spark's Kafka source (case-insensitive): exactly one of
    ``subscribe`` (comma-separated topics) and ``subscribePattern`` (a regex, subscribed as
    the old consumer's ``Whitelist``); ``startingOffsets``; ``endingOffsets`` and
    ``commitOnSuccess`` (batch reads, checked by :func:`batch_read_options`);
    ``maxOffsetsPerTrigger``; ``minPartitions``; ``failOnDataLoss``; ``includeHeaders``. Every
    option with a dot is a consumer property, as ``ConsumerConfig.from_properties`` reads it:
    ``group.id`` is required; a ZooKeeper-coordinated group (``group.coordinator=zookeeper``,
    the default) needs ``zookeeper.connect``, a Kafka-coordinated one
    (``group.coordinator=kafka``) needs ``bootstrap.servers`` and no ZooKeeper;
    ``offsets.storage``, ``zookeeper.session.timeout.ms``, ``session.timeout.ms``,
    ``fetch.message.max.bytes``, ``isolation.level``, ... pass through.
    The Kafka source's ``kafka.``-prefixed security keys (``kafka.security.protocol``,
    ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location``
    with ``kafka.ssl.truststore.type=PEM``, ...) are read as the bare keys.
    ``kafka.bootstrap.servers`` is read as ``bootstrap.servers``, ``kafka.isolation.level``
    (the Kafka source's spelling: ``read_committed`` reads committed transactions only, up
    to the last stable offset) as ``isolation.level`` and ``enable.auto.commit`` as
    ``auto.commit.enable``. Without
    ``startingOffsets``, ``auto.offset.reset`` is honoured (``smallest`` = earliest).

    Every error is an :class:`InvalidConfigError` whose message is one line naming the
    option and the fix: the nearest known option for a typo, what to use instead of a Kafka
    source option that does not apply, ``smallest`` for the new consumer's ``earliest``.

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
    for key, value in sorted(lowered.items()):
        if key in _UNSUPPORTED_KEYS:
            raise InvalidConfigError(key, _UNSUPPORTED_KEYS[key])
        if key in _SOURCE_KEYS:
            continue
        name = _PROPERTY_ALIASES.get(key, key)
        if name.startswith("kafka.") and _is_security_key(name.removeprefix("kafka.")):
            name = name.removeprefix("kafka.")  # the Kafka source's spelling of a client key
        if name in _SECURITY_PASS_THROUGH:
            properties[name] = value
            continue
        if "." in name and name.replace(".", "_") in _CONFIG_KEYS and "_" not in name:
            properties[name] = value
            continue
        raise _unknown_option(key)
    if "group.id" not in properties:
        raise InvalidConfigError(
            "group.id",
            "missing: the zkkafka source reads as a member of a consumer group; "
            'add .option("group.id", "<group>")',
        )
    if _bool_option("auto.commit.enable", properties.get("auto.commit.enable", "false")):
        raise InvalidConfigError(
            "auto.commit.enable",
            "must be false: the source commits offsets after Spark committed each batch",
        )
    properties["auto.commit.enable"] = "false"
    coordinator = properties.get("group.coordinator", "zookeeper").strip().lower()
    reset_text = properties.get("auto.offset.reset")
    if coordinator != "kafka" and reset_text is not None:
        old_name = _NEW_CONSUMER_RESETS.get(reset_text.strip().lower())
        if old_name is not None:
            raise InvalidConfigError(
                "auto.offset.reset",
                f"{reset_text.strip()!r} is the new consumer's name; this consumer's is "
                f"{old_name!r} (or set startingOffsets={reset_text.strip().lower()})",
            )
    if "zookeeper.connect" not in properties and "group.coordinator" not in properties:
        raise InvalidConfigError(
            "zookeeper.connect",
            "missing: the source joins a ZooKeeper-coordinated group (the default); for a "
            "Kafka-coordinated group set group.coordinator=kafka and bootstrap.servers",
        )
    config = ConsumerConfig.from_properties(properties)

    subscribe = lowered.get("subscribe")
    pattern = lowered.get("subscribepattern")
    if (subscribe is None) == (pattern is None):
        raise InvalidConfigError(
            "subscribe",
            "give exactly one of subscribe (topics) and subscribePattern (a regex)"
            + ("" if subscribe is None else ", not both"),
        )
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

    starting_text = lowered.get("startingoffsets")
    if starting_text is not None:
        starting = parse_starting_offsets(starting_text)
    elif reset_text is not None:
        starting = StartingOffsets(EARLIEST if config.auto_offset_reset == "smallest" else LATEST)
    else:
        starting = StartingOffsets(LATEST)
    ending_text = lowered.get("endingoffsets")
    if ending_text is not None:
        parse_offsets_option("endingOffsets", ending_text, LATEST)  # syntax, checked early

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
        starting_offsets_option=starting_text,
        ending_offsets_option=ending_text,
        commit_on_success=_bool_option("commitOnSuccess", lowered.get("commitonsuccess", "false")),
        auto_offset_reset_set=reset_text is not None,
    )


def check_stream_options(options: SourceOptions) -> None:
    """Refuse the batch-only options in a streaming query (as the Kafka source does).

    Raises:
        InvalidConfigError: ``endingOffsets`` or ``commitOnSuccess`` is set.
    """
    if options.ending_offsets_option is not None:
        raise InvalidConfigError(
            "endingOffsets", "only for batch reads (spark.read); a streaming query never ends"
        )
    if options.commit_on_success:
        raise InvalidConfigError(
            "commitOnSuccess",
            "only for batch reads (spark.read); a streaming query commits after each batch",
        )


# -- batch reads ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchRead:
    """The checked options of a batch read (``spark.read.format("zkkafka")``).

    Attributes:
        starting: ``startingOffsets`` (partitions the JSON leaves out start at earliest), or
            ``None`` to start at the group's committed offsets.
        missing: where a partition starts that the group has no committed offset for
            (``starting`` unset): ``auto.offset.reset`` when given, else ``EARLIEST`` (the
            Kafka source's batch default).
        ending: ``endingOffsets`` (default latest; partitions the JSON leaves out end at
            latest).
        commit_on_success: ``commitOnSuccess``.
    """

    starting: StartingOffsets | None
    missing: int
    ending: StartingOffsets
    commit_on_success: bool = False


def batch_read_options(options: SourceOptions) -> BatchRead:
    """Check the options of a batch read, as the Kafka source's ``validateBatchOptions``.

    Args:
        options: the source options.

    Returns:
        The batch read's start and end rules.

    Raises:
        InvalidConfigError: ``startingOffsets`` is ``latest`` or names -1 (latest) for a
            partition, or ``endingOffsets`` is ``earliest`` or names -2 (earliest).
    """
    starting: StartingOffsets | None = None
    if options.starting_offsets_option is not None:
        starting = parse_offsets_option(
            "startingOffsets", options.starting_offsets_option, EARLIEST
        )
        if starting.default == LATEST or LATEST in starting.specific.values():
            raise InvalidConfigError(
                "startingOffsets",
                "latest (-1) is not allowed in a batch read (as in Spark's Kafka source): use "
                "earliest, offsets, or leave it unset to start at the group's committed offsets",
            )
    ending = StartingOffsets(LATEST)
    if options.ending_offsets_option is not None:
        ending = parse_offsets_option("endingOffsets", options.ending_offsets_option, LATEST)
        if ending.default == EARLIEST or EARLIEST in ending.specific.values():
            raise InvalidConfigError(
                "endingOffsets",
                "earliest (-2) is not allowed in a batch read (as in Spark's Kafka source): "
                "use latest or offsets",
            )
    missing = EARLIEST
    if options.auto_offset_reset_set and options.config.auto_offset_reset == "largest":
        missing = LATEST
    return BatchRead(starting, missing, ending, options.commit_on_success)


def plan_batch(
    tps: Iterable[TopicPartition],
    batch: BatchRead,
    committed: Mapping[TopicPartition, int],
    log_start: Mapping[TopicPartition, int],
    log_end: Mapping[TopicPartition, int],
    *,
    fail_on_data_loss: bool = True,
) -> dict[TopicPartition, tuple[int, int]]:
    """The offset range ``[start, end)`` a batch read reads of each partition.

    A partition starts at ``batch.starting`` when given, else at the group's committed
    offset, else at ``batch.missing``; it ends at ``batch.ending``. ``EARLIEST`` and
    ``LATEST`` stand for the log start and log end offsets.

    Args:
        tps: the partitions of the subscribed topics.
        batch: the batch read's rules.
        committed: the group's committed offsets (only used without ``batch.starting``).
        log_start: each partition's log start offset.
        log_end: each partition's log end offset.
        fail_on_data_loss: refuse a start beyond the log end (``failOnDataLoss``); otherwise
            such a partition reads nothing.

    Returns:
        ``{tp: (start, end)}`` for every partition, ``start <= end``.

    Raises:
        InvalidConfigError: an ``endingOffsets`` offset is beyond the log end, or before
            the partition's start.
        DataLossError: a start is beyond the log end (with ``fail_on_data_loss``): the log
            was truncated or the offset is wrong (the message says which).
    """
    ranges: dict[TopicPartition, tuple[int, int]] = {}
    for tp in sorted(set(tps)):

        def resolve(offset: int, tp: TopicPartition = tp) -> int:
            if offset == EARLIEST:
                return log_start[tp]
            if offset == LATEST:
                return log_end[tp]
            return offset

        if batch.starting is not None:
            start, source = resolve(batch.starting.for_partition(tp)), "startingOffsets"
        elif tp in committed:
            start, source = committed[tp], "the group's committed offset"
        else:
            start, source = resolve(batch.missing), "auto.offset.reset"
        end = resolve(batch.ending.for_partition(tp))
        if end > log_end[tp]:
            raise InvalidConfigError(
                "endingOffsets",
                f"{end} of {tp} is beyond its log end offset {log_end[tp]}",
            )
        if start > log_end[tp]:
            message = f"{source} {start} of {tp} is beyond its log end offset {log_end[tp]}"
            if fail_on_data_loss:
                raise DataLossError(f"{message}; set failOnDataLoss=false to read nothing there")
            start = end
        if start > end:
            raise InvalidConfigError(
                "endingOffsets", f"{end} of {tp} is before its start, {source} {start}"
            )
        ranges[tp] = (start, end)
    return ranges


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
