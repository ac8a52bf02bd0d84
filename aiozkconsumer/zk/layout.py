"""ZooKeeper paths and node-data codecs of the old consumer, byte-compatible with Kafka 0.10.2.

Everything here is pure: functions take names and bytes and return paths, bytes or frozen
values, so the layout can be tested without a server and shared by the connector, the offset
store and the command-line tools. The layout is that of ``ZkUtils`` / ``ZKGroupDirs`` /
``ZKGroupTopicDirs`` in Kafka 0.10.2; the JSON written by the consumer (its registration) is
produced byte for byte as ``kafka.utils.Json.encode`` does, so Java consumers and the original
tools can share a group with ours. Node data written by brokers and the controller is parsed
leniently enough to read every version Kafka 0.8 to 3.9 writes.

Every parse failure raises :class:`~aiozkconsumer.errors.MalformedZookeeperDataError` with the
node's path and a reason that names the offending field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, NoReturn, TypeGuard

from aiozkconsumer.errors import InvalidConfigError, MalformedZookeeperDataError

__all__ = [
    "fencing_path",
    "BLACK_LIST_PATTERN",
    "BROKER_IDS_PATH",
    "BROKER_TOPICS_PATH",
    "CONSUMERS_PATH",
    "STATIC_PATTERN",
    "WHITE_LIST_PATTERN",
    "BrokerEndPoint",
    "BrokerInfo",
    "Registration",
    "broker_path",
    "decode_broker",
    "decode_offset",
    "decode_owner",
    "decode_registration",
    "decode_topic_partitions",
    "encode_offset",
    "encode_owner",
    "encode_registration",
    "group_dir",
    "ids_dir",
    "ids_path",
    "json_escape_string",
    "offset_path",
    "offsets_dir",
    "owner_path",
    "owners_dir",
    "partition_state_path",
    "topic_path",
]

CONSUMERS_PATH: Final = "/consumers"
"""Root of every consumer group (``ZkUtils.ConsumersPath``)."""

BROKER_IDS_PATH: Final = "/brokers/ids"
"""Parent of the brokers' ephemeral registrations (``ZkUtils.BrokerIdsPath``)."""

BROKER_TOPICS_PATH: Final = "/brokers/topics"
"""Parent of the topics' replica assignments (``ZkUtils.BrokerTopicsPath``)."""

STATIC_PATTERN: Final = "static"
"""Registration pattern of a consumer subscribed to a fixed topic -> stream-count map."""

WHITE_LIST_PATTERN: Final = "white_list"
"""Registration pattern of a consumer subscribed through a :class:`Whitelist` filter."""

BLACK_LIST_PATTERN: Final = "black_list"
"""Registration pattern of a consumer subscribed through a :class:`Blacklist` filter."""

_PATTERNS: Final = frozenset({STATIC_PATTERN, WHITE_LIST_PATTERN, BLACK_LIST_PATTERN})

_INT_MIN: Final = -(2**31)
_INT_MAX: Final = 2**31 - 1
_LONG_MAX: Final = 2**63 - 1

# Security protocols a listener name maps to when the broker JSON has no
# "listener_security_protocol_map" (EndPoint.DefaultSecurityProtocolMap).
_DEFAULT_SECURITY_PROTOCOLS: Final = MappingProxyType(
    {name: name for name in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
)

# EndPoint.uriParseExp of Kafka 0.10.2 - 3.9, applied as a full match (Scala's unapplySeq).
_ENDPOINT_RE: Final = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")

_DECIMAL_RE: Final = re.compile(r"[0-9]+")


# --------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------


def _component(value: str, what: str) -> str:
    """Check that ``value`` can be one path element of a ZooKeeper node."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if value in ("", ".", "..") or "/" in value or "\x00" in value:
        raise ValueError(f"{what} {value!r} cannot be a ZooKeeper path element")
    return value


def _partition_component(partition: int) -> str:
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise TypeError(f"partition must be an int, not {type(partition).__name__}")
    if partition < 0:
        raise ValueError(f"partition must be >= 0, got {partition}")
    return str(partition)


def group_dir(group: str) -> str:
    """Return the node of a consumer group, ``/consumers/<group>`` (``consumerGroupDir``).

    Args:
        group: the ``group.id``.

    Returns:
        The absolute path.

    Raises:
        ValueError: ``group`` is empty, ``.``/``..`` or contains ``/`` or NUL (ZooKeeper
            would reject the path; the original let ZooKeeper fail).
    """
    return f"{CONSUMERS_PATH}/{_component(group, 'group')}"


def ids_dir(group: str) -> str:
    """Return the parent of the group's member registrations, ``/consumers/<group>/ids``.

    As ``ZKGroupDirs.consumerRegistryDir``, 0.10.2.

    Args:
        group: the ``group.id``.

    Returns:
        The absolute path.

    Raises:
        ValueError: ``group`` cannot be a path element (see :func:`group_dir`).
    """
    return f"{group_dir(group)}/ids"


def ids_path(group: str, consumer_id: str) -> str:
    """Return a member's ephemeral registration node, ``/consumers/<group>/ids/<consumer_id>``.

    Args:
        group: the ``group.id``.
        consumer_id: the member's ``consumerIdString`` (``<group>_<consumer.id or generated>``).

    Returns:
        The absolute path.

    Raises:
        ValueError: ``group`` or ``consumer_id`` cannot be a path element.
    """
    return f"{ids_dir(group)}/{_component(consumer_id, 'consumer id')}"


def owners_dir(group: str, topic: str) -> str:
    """Return the parent of a topic's owner nodes, ``/consumers/<group>/owners/<topic>``.

    As ``ZKGroupTopicDirs.consumerOwnerDir``, 0.10.2.

    Args:
        group: the ``group.id``.
        topic: the topic's name.

    Returns:
        The absolute path.

    Raises:
        ValueError: ``group`` or ``topic`` cannot be a path element.
    """
    return f"{group_dir(group)}/owners/{_component(topic, 'topic')}"


def owner_path(group: str, topic: str, partition: int) -> str:
    """Return a partition's ephemeral owner node, ``/consumers/<group>/owners/<topic>/<p>``.

    Args:
        group: the ``group.id``.
        topic: the topic's name.
        partition: the partition number (>= 0).

    Returns:
        The absolute path.

    Raises:
        ValueError: a name cannot be a path element, or ``partition`` is negative.
        TypeError: ``partition`` is not an int.
    """
    return f"{owners_dir(group, topic)}/{_partition_component(partition)}"


def offsets_dir(group: str, topic: str) -> str:
    """Return the parent of a topic's offset nodes, ``/consumers/<group>/offsets/<topic>``.

    As ``ZKGroupTopicDirs.consumerOffsetDir``, 0.10.2.

    Args:
        group: the ``group.id``.
        topic: the topic's name.

    Returns:
        The absolute path.

    Raises:
        ValueError: ``group`` or ``topic`` cannot be a path element.
    """
    return f"{group_dir(group)}/offsets/{_component(topic, 'topic')}"


def fencing_path(group: str, topic: str, partition: int) -> str:
    """Return a partition's fencing node, ``/consumers/<group>/fencing/<topic>/<p>``.

    Not part of the original layout (its tools ignore it): persistent, its data the thread id
    of the last claimer, its *version* the fencing token — every claim by an aiozkconsumer
    member sets it, so the version grows with every new owner, and a commit that checks the
    version it saw fails once someone else claimed the partition. (An owner node cannot serve:
    ephemeral, it is recreated at version 0.)

    Raises:
        ValueError: a name cannot be a path element, or ``partition`` is negative.
    """
    return (
        f"{group_dir(group)}/fencing/{_component(topic, 'topic')}/{_partition_component(partition)}"
    )


def offset_path(group: str, topic: str, partition: int) -> str:
    """Return a partition's persistent offset node, ``/consumers/<group>/offsets/<topic>/<p>``.

    Args:
        group: the ``group.id``.
        topic: the topic's name.
        partition: the partition number (>= 0).

    Returns:
        The absolute path.

    Raises:
        ValueError: a name cannot be a path element, or ``partition`` is negative.
        TypeError: ``partition`` is not an int.
    """
    return f"{offsets_dir(group, topic)}/{_partition_component(partition)}"


def broker_path(broker_id: int) -> str:
    """Return a broker's ephemeral registration node, ``/brokers/ids/<broker_id>``.

    Args:
        broker_id: the broker's ``broker.id``.

    Returns:
        The absolute path.

    Raises:
        TypeError: ``broker_id`` is not an int.
    """
    if isinstance(broker_id, bool) or not isinstance(broker_id, int):
        raise TypeError(f"broker_id must be an int, not {type(broker_id).__name__}")
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    """Return a topic's replica-assignment node, ``/brokers/topics/<topic>``.

    Args:
        topic: the topic's name.

    Returns:
        The absolute path.

    Raises:
        ValueError: ``topic`` cannot be a path element.
    """
    return f"{BROKER_TOPICS_PATH}/{_component(topic, 'topic')}"


def partition_state_path(topic: str, partition: int) -> str:
    """Return a partition's leader/ISR node, ``/brokers/topics/<topic>/partitions/<p>/state``.

    As ``ZkUtils.getTopicPartitionLeaderAndIsrPath``, 0.10.2.

    Args:
        topic: the topic's name.
        partition: the partition number (>= 0).

    Returns:
        The absolute path.

    Raises:
        ValueError: ``topic`` cannot be a path element, or ``partition`` is negative.
        TypeError: ``partition`` is not an int.
    """
    return f"{topic_path(topic)}/partitions/{_partition_component(partition)}/state"


# --------------------------------------------------------------------------------------------
# JSON helpers
# --------------------------------------------------------------------------------------------


def json_escape_string(s: str) -> str:
    """Escape a string for a JSON string literal, exactly as ``CoreUtils.JSONEscapeString``.

    ``"``, ``\\`` and ``/`` get a backslash; backspace, form feed, newline, carriage return and
    tab get their short escapes; the other C0 controls, DEL and the C1 controls (U+0000-U+001F,
    U+007F-U+009F) become ``\\uXXXX`` with lower-case hex digits; everything else (including
    non-ASCII text) is kept as is. The old consumer applies it to a wildcard subscription's
    regex only, before ``Json.encode`` writes the (otherwise unescaped) registration.

    Args:
        s: the text to escape.

    Returns:
        The escaped text, without surrounding quotes.
    """
    out: list[str] = []
    for ch in s:
        escaped = _SHORT_ESCAPES.get(ch)
        if escaped is not None:
            out.append(escaped)
        elif ch <= "\x1f" or "\x7f" <= ch <= "\x9f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


_SHORT_ESCAPES: Final = MappingProxyType(
    {
        '"': '\\"',
        "\\": "\\\\",
        "/": "\\/",
        "\b": "\\b",
        "\f": "\\f",
        "\n": "\\n",
        "\r": "\\r",
        "\t": "\\t",
    }
)


def _fail(path: str | None, data: bytes | str | None, reason: str) -> NoReturn:
    raise MalformedZookeeperDataError(path, data, reason)


def _reject_constant(name: str) -> object:
    # json.loads would otherwise accept NaN / Infinity, which no Kafka JSON parser does.
    raise ValueError(f"invalid JSON constant {name}")


def _load_json(data: bytes | None, path: str | None, what: str) -> object:
    """Decode UTF-8 JSON node data, translating every failure."""
    if data is None:
        _fail(path, data, f"the node has no data (expected {what})")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedZookeeperDataError(path, data, f"not valid UTF-8: {exc}") from exc
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise MalformedZookeeperDataError(path, data, f"not valid JSON ({what}): {exc}") from exc


def _load_object(data: bytes | None, path: str | None, what: str) -> dict[str, object]:
    value = _load_json(data, path, what)
    if not isinstance(value, dict):
        _fail(path, data, f"expected a JSON object ({what}), got {_json_type(value)}")
    return value


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a non-integer number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _require_int(
    obj: Mapping[str, object],
    key: str,
    path: str | None,
    data: bytes | None,
    *,
    context: str = "",
) -> int:
    """Return ``obj[key]`` as a 32-bit int (Kafka parses JSON numbers with ``toInt``)."""
    name = f"{context}{key!r}"
    if key not in obj:
        _fail(path, data, f"missing field {name}")
    value = obj[key]
    if not _is_int(value):
        _fail(path, data, f"field {name} must be an integer, got {_json_type(value)}")
    if not _INT_MIN <= value <= _INT_MAX:
        _fail(path, data, f"field {name} is out of the 32-bit integer range: {value}")
    return value


def _optional_int_or_string(value: object) -> int | None:
    """Read a field the original ignores (``version``, ``timestamp``); never fail."""
    if _is_int(value):
        return value
    if isinstance(value, str) and _DECIMAL_RE.fullmatch(value.strip()):
        return int(value.strip())
    return None


def _int_list(value: object, name: str, path: str | None, data: bytes | None) -> list[int]:
    if not isinstance(value, list):
        _fail(path, data, f"field {name} must be an array, got {_json_type(value)}")
    out: list[int] = []
    for item in value:
        if not _is_int(item):
            _fail(path, data, f"field {name} must hold integers, got {_json_type(item)}")
        if not _INT_MIN <= item <= _INT_MAX:
            _fail(path, data, f"field {name} holds {item}, out of the 32-bit integer range")
        out.append(item)
    return out


# --------------------------------------------------------------------------------------------
# Consumer registration: /consumers/<group>/ids/<consumer id>
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Registration:
    """A member's registration, read from ``/consumers/<group>/ids/<consumer id>``.

    Equal registrations have equal subscriptions regardless of key order; the mapping is a
    read-only copy, so a registration is hashable.

    Attributes:
        pattern: ``"static"``, ``"white_list"`` or ``"black_list"``. Any other string is kept
            as read; readers treat it as static, as ``TopicCount.constructTopicCount`` does.
        subscription: topic -> stream count for a static member; for a wildcard member one
            entry, the filter's regex (as read, i.e. JSON-unescaped) -> stream count. In the
            order of the JSON object.
        timestamp_ms: the registration time in epoch milliseconds, or ``None`` when absent or
            unreadable (the original ignores it).
        version: the registration format version (1), or ``None`` when absent or unreadable
            (the original ignores it).
    """

    pattern: str
    subscription: Mapping[str, int]
    timestamp_ms: int | None = None
    version: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "subscription", MappingProxyType(dict(self.subscription)))

    def __hash__(self) -> int:
        return hash(
            (self.pattern, frozenset(self.subscription.items()), self.timestamp_ms, self.version)
        )

    @property
    def is_wildcard(self) -> bool:
        """Whether a reader evaluates this registration as a topic filter.

        True when the pattern is ``white_list`` or ``black_list`` and the subscription is not
        empty, the condition of ``TopicCount.constructTopicCount`` (0.10.2).
        """
        return self.pattern in (WHITE_LIST_PATTERN, BLACK_LIST_PATTERN) and bool(self.subscription)


def encode_registration(subscription: Mapping[str, int], pattern: str, timestamp_ms: int) -> bytes:
    """Encode a member registration exactly as ``registerConsumerInZK`` does (0.10.2).

    The output is ``Json.encode(Map("version" -> 1, "subscription" -> ..., "pattern" -> ...,
    "timestamp" -> ...))``: no spaces, keys in this order, subscription entries in the mapping's
    order, the timestamp as a *string*, and strings written without escaping, e.g.
    ``{"version":1,"subscription":{"topicA":2},"pattern":"static","timestamp":"1490000000000"}``.
    A wildcard member passes ``{json_escape_string(regex): num_streams}``, as
    ``WildcardTopicCount.getTopicCountMap`` does; topic names never need escaping.

    Args:
        subscription: topic (or escaped regex) -> stream count (>= 1).
        pattern: ``"static"``, ``"white_list"`` or ``"black_list"``.
        timestamp_ms: registration time, epoch milliseconds.

    Returns:
        The node's UTF-8 data.

    Raises:
        ValueError: ``pattern`` is not one of the three, a stream count is not an int >= 1,
            a key is not JSON-safe as written (an unescaped ``"``, ``\\`` or control
            character: the node would not parse), or ``timestamp_ms`` is negative.
        TypeError: a key is not a str, or ``timestamp_ms`` is not an int.
    """
    if pattern not in _PATTERNS:
        raise ValueError(f"pattern must be one of {sorted(_PATTERNS)}, got {pattern!r}")
    if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int):
        raise TypeError(f"timestamp_ms must be an int, not {type(timestamp_ms).__name__}")
    if timestamp_ms < 0:
        raise ValueError(f"timestamp_ms must be >= 0, got {timestamp_ms}")
    entries: list[str] = []
    for key, count in subscription.items():
        if not isinstance(key, str):
            raise TypeError(f"subscription keys must be str, not {type(key).__name__}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"stream count of {key!r} must be an int >= 1, got {count!r}")
        entries.append(f'"{key}":{count}')
    text = (
        '{"version":1,"subscription":{'
        + ",".join(entries)
        + f'}},"pattern":"{pattern}","timestamp":"{timestamp_ms}"}}'
    )
    # Json.encode does not escape, so a key that is not already JSON-safe would produce a
    # node no reader can parse; refuse to write it.
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"subscription keys are not JSON-safe (escape them first): {exc}") from exc
    if len(parsed["subscription"]) != len(entries):
        raise ValueError("subscription keys collide once JSON-unescaped")
    return text.encode("utf-8")


def decode_registration(data: bytes | None, path: str | None = None) -> Registration:
    """Decode a member registration as ``TopicCount.constructTopicCount`` reads it (0.10.2).

    Only ``pattern`` and ``subscription`` are required; ``version`` and ``timestamp`` are
    read when they hold an int or a decimal string and otherwise ignored, as the original
    ignores them.

    Args:
        data: the node's data.
        path: the node's path, for error messages.

    Returns:
        The registration.

    Raises:
        MalformedZookeeperDataError: the data is missing, not UTF-8 JSON, not an object,
            ``pattern`` is missing or not a string, ``subscription`` is missing or not an
            object, or a stream count is not a 32-bit integer >= 1.
    """
    obj = _load_object(data, path, "consumer registration")
    if "pattern" not in obj:
        _fail(path, data, "missing field 'pattern'")
    pattern = obj["pattern"]
    if not isinstance(pattern, str):
        _fail(path, data, f"field 'pattern' must be a string, got {_json_type(pattern)}")
    if "subscription" not in obj:
        _fail(path, data, "missing field 'subscription'")
    raw_subscription = obj["subscription"]
    if not isinstance(raw_subscription, dict):
        _fail(
            path,
            data,
            f"field 'subscription' must be an object, got {_json_type(raw_subscription)}",
        )
    subscription: dict[str, int] = {}
    for key in raw_subscription:
        count = _require_int(raw_subscription, key, path, data, context="subscription ")
        if count < 1:
            _fail(path, data, f"field subscription {key!r} must be >= 1, got {count}")
        subscription[key] = count
    return Registration(
        pattern=pattern,
        subscription=subscription,
        timestamp_ms=_optional_int_or_string(obj.get("timestamp")),
        version=_optional_int_or_string(obj.get("version")),
    )


# --------------------------------------------------------------------------------------------
# Owner and offset nodes
# --------------------------------------------------------------------------------------------


def encode_owner(thread_id: str) -> bytes:
    """Encode an owner node's data: the owning ``ConsumerThreadId`` as a plain string.

    Args:
        thread_id: ``str(ConsumerThreadId)``, e.g. ``"g1_host-1490000000000-1a2b3c4d-0"``.

    Returns:
        The UTF-8 bytes of ``thread_id``.

    Raises:
        ValueError: ``thread_id`` is empty.
    """
    if not thread_id:
        raise ValueError("thread_id must not be empty")
    return thread_id.encode("utf-8")


def decode_owner(data: bytes | None, path: str | None = None) -> str:
    """Decode an owner node's data into the owning thread id string.

    Args:
        data: the node's data.
        path: the node's path, for error messages.

    Returns:
        The thread id, e.g. ``"g1_host-1490000000000-1a2b3c4d-0"``.

    Raises:
        MalformedZookeeperDataError: the data is missing, empty or not UTF-8.
    """
    if not data:
        _fail(path, data, "owner node holds no thread id")
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedZookeeperDataError(path, data, f"owner is not valid UTF-8: {exc}") from exc


def encode_offset(offset: int) -> bytes:
    """Encode an offset node's data: the next offset to consume as a decimal string.

    Args:
        offset: the next offset to read (>= 0), e.g. ``4711`` -> ``b"4711"``.

    Returns:
        The ASCII decimal bytes.

    Raises:
        ValueError: ``offset`` is negative or above the signed 64-bit range.
        TypeError: ``offset`` is not an int.
    """
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"offset must be an int, not {type(offset).__name__}")
    if not 0 <= offset <= _LONG_MAX:
        raise ValueError(f"offset must be in [0, 2**63 - 1], got {offset}")
    return str(offset).encode("ascii")


def decode_offset(data: bytes | None, path: str | None = None) -> int:
    """Decode an offset node's data (a decimal string, surrounding whitespace ignored).

    Args:
        data: the node's data.
        path: the node's path, for error messages.

    Returns:
        The committed offset (the next offset to consume).

    Raises:
        MalformedZookeeperDataError: the data is missing, not ASCII decimal digits (a sign,
            including ``-``, is rejected) or above the signed 64-bit range.
    """
    if data is None:
        _fail(path, data, "offset node has no data")
    try:
        text = bytes(data).decode("ascii").strip()
    except UnicodeDecodeError:
        _fail(path, data, "offset is not an ASCII decimal number")
    if not _DECIMAL_RE.fullmatch(text):
        _fail(path, data, "offset is not a non-negative decimal number")
    value = int(text)
    if value > _LONG_MAX:
        _fail(path, data, "offset is above the signed 64-bit range")
    return value


# --------------------------------------------------------------------------------------------
# Broker registration: /brokers/ids/<id>
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerEndPoint:
    """One parsed entry of a broker's ``endpoints`` list (Kafka's ``EndPoint``).

    Attributes:
        listener_name: the listener name, upper-cased as ``ListenerName.normalised``.
        host: the advertised host (IPv6 without brackets), or ``None`` when empty.
        port: the port.
        security_protocol: the listener's security protocol (``"PLAINTEXT"``, ``"SSL"``,
            ``"SASL_PLAINTEXT"``, ``"SASL_SSL"``), or ``None`` when the broker JSON does not
            say and the listener name is not a protocol name.
    """

    listener_name: str
    host: str | None
    port: int
    security_protocol: str | None

    @property
    def connection_string(self) -> str:
        """The ``LISTENER://host:port`` form the broker writes (IPv6 hosts in brackets)."""
        host = self.host or ""
        if ":" in host:
            host = f"[{host}]"
        return f"{self.listener_name}://{host}:{self.port}"


@dataclass(frozen=True)
class BrokerInfo:
    """A broker registration read from ``/brokers/ids/<id>`` (``Broker.createBroker``).

    Attributes:
        broker_id: the broker's id (the node's name).
        host: the legacy ``host`` field: the first PLAINTEXT endpoint's host, or ``None``
            when a version >= 2 registration has none (Kafka writes ``null`` then).
        port: the legacy ``port`` field, ``-1`` when absent or null.
        endpoints: the raw ``endpoints`` strings (``"PLAINTEXT://h:9092"``), in order; for a
            version 1 registration one ``PLAINTEXT://host:port`` entry is derived.
        rack: the broker's rack (version >= 3), or ``None``.
        version: the registration format version (1 to 5 as of Kafka 3.9).
        jmx_port: the ``jmx_port`` field, ``-1`` when absent.
        timestamp_ms: the registration time in epoch milliseconds, ``None`` when absent.
        listener_security_protocol_map: listener name -> security protocol (version >= 4,
            names upper-cased), or ``None`` when absent.
    """

    broker_id: int
    host: str | None
    port: int
    endpoints: tuple[str, ...]
    rack: str | None
    version: int
    jmx_port: int = -1
    timestamp_ms: int | None = None
    listener_security_protocol_map: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "endpoints", tuple(self.endpoints))
        if self.listener_security_protocol_map is not None:
            normalised = {
                name.upper(): protocol.upper()
                for name, protocol in self.listener_security_protocol_map.items()
            }
            object.__setattr__(self, "listener_security_protocol_map", MappingProxyType(normalised))

    def __hash__(self) -> int:
        protocol_map = self.listener_security_protocol_map
        return hash(
            (
                self.broker_id,
                self.host,
                self.port,
                self.endpoints,
                self.rack,
                self.version,
                self.jmx_port,
                self.timestamp_ms,
                None if protocol_map is None else frozenset(protocol_map.items()),
            )
        )

    @property
    def path(self) -> str:
        """The registration node's path, ``/brokers/ids/<broker_id>``."""
        return broker_path(self.broker_id)

    def parsed_endpoints(self) -> tuple[BrokerEndPoint, ...]:
        """Parse :attr:`endpoints` as ``EndPoint.createEndPoint`` does (0.10.2 to 3.9).

        A listener's security protocol comes from :attr:`listener_security_protocol_map`
        when present, otherwise a listener named after a protocol has that protocol.

        Returns:
            The endpoints, in order.

        Raises:
            MalformedZookeeperDataError: an entry is not ``LISTENER://host:port``.
        """
        protocols: Mapping[str, str] = (
            self.listener_security_protocol_map
            if self.listener_security_protocol_map is not None
            else _DEFAULT_SECURITY_PROTOCOLS
        )
        return tuple(_parse_endpoint(entry, protocols, self.path, None) for entry in self.endpoints)

    def plaintext_address(self) -> tuple[str, int]:
        """Return the host and port the old consumer connects to: :meth:`address_for` PLAINTEXT.

        As ``ClientUtils.getPlaintextBrokerEndPoints`` (0.10.2): the first endpoint whose
        security protocol is PLAINTEXT. For a version 1 registration that is ``(host, port)``;
        for version >= 2 the endpoints list is authoritative.

        Raises:
            InvalidConfigError, MalformedZookeeperDataError: as :meth:`address_for`.
        """
        return self.address_for("PLAINTEXT")

    def address_for(self, security_protocol: str) -> tuple[str, int]:
        """The host and port of the first endpoint whose listener speaks ``security_protocol``.

        The listener's protocol comes from ``listener_security_protocol_map`` (a listener
        named ``EXTERNAL`` mapped to ``SASL_SSL``), as ``Broker.brokerEndPoint`` picks the
        endpoint of a client's protocol (0.10.2 to 3.9).

        Args:
            security_protocol: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``
                (``security.protocol``).

        Returns:
            ``(host, port)``.

        Raises:
            InvalidConfigError: the broker has no endpoint with that protocol (key
                ``security.protocol``; the message lists the protocols it has and says to set
                ``security.protocol`` to one of them).
            MalformedZookeeperDataError: its host is empty, or an endpoint does not parse.
        """
        parsed = self.parsed_endpoints()
        for endpoint in parsed:
            if endpoint.security_protocol != security_protocol:
                continue
            if endpoint.host is None:
                _fail(
                    self.path,
                    None,
                    f"broker {self.broker_id}'s {security_protocol} endpoint "
                    f"{endpoint.connection_string!r} has no host",
                )
            return endpoint.host, endpoint.port
        offered = sorted({str(e.security_protocol) for e in parsed})
        # Not malformed data: the client's security.protocol does not match the broker's
        # listeners (a SASL_SSL-only broker, a PLAINTEXT client).
        raise InvalidConfigError(
            "security.protocol",
            f"{security_protocol}, but broker {self.broker_id} has no endpoint with that "
            f"protocol (endpoints: {list(self.endpoints)}, {self.path}); it offers "
            f"{', '.join(offered) or 'none'}: set security.protocol to one of them",
        )


def _parse_endpoint(
    entry: str, protocols: Mapping[str, str], path: str | None, data: bytes | None
) -> BrokerEndPoint:
    match = _ENDPOINT_RE.fullmatch(entry)
    if match is None:
        _fail(path, data, f"field 'endpoints' holds {entry!r}, not LISTENER://host:port")
    listener, host, port_text = match.groups()
    port = int(port_text)
    if not _INT_MIN <= port <= _INT_MAX:
        _fail(path, data, f"field 'endpoints' holds {entry!r} with an out-of-range port")
    name = listener.upper()
    return BrokerEndPoint(
        listener_name=name,
        host=host or None,
        port=port,
        security_protocol=protocols.get(name),
    )


def decode_broker(broker_id: int, data: bytes | None, path: str | None = None) -> BrokerInfo:
    """Decode a broker registration, JSON versions 1 to 5 (Kafka 0.8.2 to 3.9).

    Version 1 has ``host`` and ``port``; version 2 adds ``endpoints``; version 3 ``rack``;
    version 4 ``listener_security_protocol_map``; version 5 (Kafka 2.7+, still written by
    3.9 in ZooKeeper mode) ``features``, which is ignored. From version 2 the endpoints list is
    required and authoritative, and ``host`` may be ``null`` with ``port`` -1 when the broker
    has no PLAINTEXT listener. Unknown keys are ignored; versions above 5 are read as 5.

    Args:
        broker_id: the broker's id (the node's name).
        data: the node's data.
        path: the node's path, for error messages; defaults to :func:`broker_path`.

    Returns:
        The broker registration.

    Raises:
        MalformedZookeeperDataError: the data is missing or not a UTF-8 JSON object,
            ``version`` is missing, not an integer or < 1, a version 1 registration lacks
            ``host``/``port``, ``endpoints`` is missing (version >= 2) or holds an entry that
            is not ``LISTENER://host:port``, or a field has the wrong type.
    """
    where = path if path is not None else broker_path(broker_id)
    obj = _load_object(data, where, "broker registration")
    version = _require_int(obj, "version", where, data)
    if version < 1:
        _fail(where, data, f"unsupported broker registration version {version}")

    host_value = obj.get("host")
    if host_value is not None and not isinstance(host_value, str):
        _fail(where, data, f"field 'host' must be a string, got {_json_type(host_value)}")
    host: str | None = host_value
    port = _require_int(obj, "port", where, data) if obj.get("port") is not None else -1
    jmx_port = _require_int(obj, "jmx_port", where, data) if obj.get("jmx_port") is not None else -1

    protocol_map: dict[str, str] | None = None
    raw_map = obj.get("listener_security_protocol_map")
    if raw_map is not None:
        if not isinstance(raw_map, dict) or not all(isinstance(v, str) for v in raw_map.values()):
            _fail(
                where,
                data,
                "field 'listener_security_protocol_map' must be an object of strings",
            )
        protocol_map = {str(k).upper(): str(v).upper() for k, v in raw_map.items()}

    rack_value = obj.get("rack")
    if rack_value is not None and not isinstance(rack_value, str):
        _fail(where, data, f"field 'rack' must be a string, got {_json_type(rack_value)}")

    if version == 1:
        if host is None:
            _fail(where, data, "missing field 'host' (required by version 1)")
        if "port" not in obj or obj["port"] is None:
            _fail(where, data, "missing field 'port' (required by version 1)")
        endpoint = BrokerEndPoint("PLAINTEXT", host or None, port, "PLAINTEXT")
        endpoints: tuple[str, ...] = (endpoint.connection_string,)
    else:
        if "endpoints" not in obj:
            _fail(where, data, f"missing field 'endpoints' (required by version {version})")
        raw_endpoints = obj["endpoints"]
        if not isinstance(raw_endpoints, list) or not all(
            isinstance(e, str) for e in raw_endpoints
        ):
            _fail(where, data, "field 'endpoints' must be an array of strings")
        endpoints = tuple(raw_endpoints)
        protocols = protocol_map if protocol_map is not None else _DEFAULT_SECURITY_PROTOCOLS
        for entry in endpoints:
            _parse_endpoint(entry, protocols, where, data)

    return BrokerInfo(
        broker_id=broker_id,
        host=host,
        port=port,
        endpoints=endpoints,
        rack=rack_value,
        version=version,
        jmx_port=jmx_port,
        timestamp_ms=_optional_int_or_string(obj.get("timestamp")),
        listener_security_protocol_map=protocol_map,
    )


# --------------------------------------------------------------------------------------------
# Topics: /brokers/topics/<topic>
# --------------------------------------------------------------------------------------------


def decode_topic_partitions(data: bytes | None, path: str | None = None) -> dict[int, list[int]]:
    """Decode a topic's replica assignment, ``{"version":1,"partitions":{"0":[1,2],...}}``.

    Reads the ``partitions`` object as ``ZkUtils.getPartitionAssignmentForTopics`` (0.10.2);
    ``version`` and the keys Kafka 2.x-3.9 add (``topic_id``, ``adding_replicas``,
    ``removing_replicas``, version 2/3) are ignored. Unlike 0.10.2, which read a node without
    ``partitions`` as a topic with no partitions, a missing ``partitions`` is an error here:
    Kafka always creates the node with its data.

    Args:
        data: the node's data.
        path: the node's path, for error messages.

    Returns:
        Partition id -> replica broker ids, ordered by partition id.

    Raises:
        MalformedZookeeperDataError: the data is missing or not a UTF-8 JSON object,
            ``partitions`` is missing or not an object, a partition id is not a non-negative
            decimal number, or a replica list is not an array of integers.
    """
    obj = _load_object(data, path, "topic partition assignment")
    if "partitions" not in obj:
        _fail(path, data, "missing field 'partitions'")
    raw = obj["partitions"]
    if not isinstance(raw, dict):
        _fail(path, data, f"field 'partitions' must be an object, got {_json_type(raw)}")
    assignment: dict[int, list[int]] = {}
    for key, replicas in raw.items():
        if not _DECIMAL_RE.fullmatch(key) or int(key) > _INT_MAX:
            _fail(path, data, f"field 'partitions' has key {key!r}, not a partition id")
        assignment[int(key)] = _int_list(replicas, f"partitions {key!r}", path, data)
    return dict(sorted(assignment.items()))
