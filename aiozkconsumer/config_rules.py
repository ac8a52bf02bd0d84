"""The value rules of ``ConsumerConfig`` (pure): each key's type, range, choices and syntax, and
the rules that tie keys together (``group.coordinator``, ``group.protocol``), checked once at
construction; the validators the CLI shares with it.

Each rule follows the original (``ConsumerConfig.scala`` and ``kafka.common.Config``, 0.10.2) or
the Java client, and is stricter where a value the original let through cannot work (a zero
duration that would spin a loop, an ``int`` outside Java's 32-bit range, an empty
``group.id``). Every failure is an :class:`~aiozkconsumer.errors.InvalidConfigError` naming the
dotted key and never a secret's value. The security keys' rules are in
:mod:`aiozkconsumer.config_security`; the keys themselves in :mod:`aiozkconsumer.config_keys`.
"""

from __future__ import annotations

import re
import typing

from aiozkconsumer.config_keys import REDACTED, SECRET_FIELDS
from aiozkconsumer.config_security import check_choice
from aiozkconsumer.errors import InvalidConfigError

if typing.TYPE_CHECKING:
    from aiozkconsumer.config import ConsumerConfig

__all__ = [
    "check_group_protocol",
    "check_kafka_coordinated",
    "check_range",
    "check_type",
    "check_values",
    "parse_assignment_strategies",
    "validate_bootstrap_servers",
    "validate_group_id",
    "validate_group_instance_id",
    "validate_zookeeper_connect",
]

_INT32_MAX = 2**31 - 1

# As kafka.common.Config.validateChars (0.10.2), minus the empty string (see ConsumerConfig).
_LEGAL_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
_LEGAL_CHARS_TEXT = "ASCII alphanumerics, '.', '_' and '-'"
_HOSTNAME = re.compile(r"[A-Za-z0-9._-]+")
_IPV6_LITERAL = re.compile(r"\[[0-9A-Fa-f:.]+\]")

_AUTO_OFFSET_RESET_VALUES = ("smallest", "largest")
_OFFSETS_STORAGE_VALUES = ("zookeeper", "kafka")
_ASSIGNMENT_STRATEGY_VALUES = ("range", "roundrobin")
# group.coordinator=kafka, classic protocol: the Java client's assignors, by name() or class.
_KAFKA_GROUP_STRATEGY_VALUES = ("range", "roundrobin", "sticky", "cooperative-sticky")
_JAVA_ASSIGNOR_CLASSES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}
_CLUSTER_METADATA_SOURCE_VALUES = ("auto", "zookeeper", "kafka")
_GROUP_COORDINATOR_VALUES = ("zookeeper", "kafka")
_CRC_ERROR_ACTION_VALUES = ("raise", "skip")
_GROUP_PROTOCOL_VALUES = ("classic", "consumer")
_GROUP_REMOTE_ASSIGNOR_VALUES = ("uniform", "range")
# Keys of the classic protocol the consumer protocol (KIP-848) does not use: the broker decides
# the assignment, the session timeout and the heartbeat interval. As the Java client (4.x),
# setting one of them with group.protocol=consumer is a config error; here "set" means "set
# to anything but its default" (a default cannot be told apart from a value given).
_CLASSIC_PROTOCOL_ONLY = (
    ("partition_assignment_strategy", None),
    ("session_timeout_ms", 45000),
    ("heartbeat_interval_ms", 3000),
)
# The Java KafkaConsumer's names for auto.offset.reset, accepted with group.coordinator=kafka.
_NEW_CONSUMER_RESETS = {"earliest": "smallest", "latest": "largest"}
_ISOLATION_LEVEL_VALUES = ("read_uncommitted", "read_committed")


def check_values(config: ConsumerConfig) -> None:
    """Every rule of a new config but the security keys' and the last ones of
    ``ConsumerConfig.__post_init__``, in the order the first broken one is reported.

    Normalizes as the original: ``offsets.storage`` lower-cased; a Kafka-coordinated group's
    offsets storage, dual commit, metadata source and new-consumer ``auto.offset.reset``
    names set (:func:`check_kafka_coordinated`).

    Raises:
        InvalidConfigError: ``key`` the dotted key at fault; the message says what is wrong.
    """
    # The original lower-cases offsets.storage (ConsumerConfig.scala) and nothing else.
    object.__setattr__(config, "offsets_storage", config.offsets_storage.lower())

    validate_group_id(config.group_id)
    if config.consumer_id is not None:
        _check_legal_chars("consumer.id", config.consumer_id)
    if config.client_id is not None:
        _check_legal_chars("client.id", config.client_id)
    check_choice("group.coordinator", config.group_coordinator, _GROUP_COORDINATOR_VALUES)
    check_group_protocol(config)
    if config.group_instance_id is not None:
        validate_group_instance_id(config.group_instance_id)
        if config.group_coordinator != "kafka":
            raise InvalidConfigError(
                "group.instance.id",
                "static membership needs group.coordinator=kafka (a ZooKeeper-coordinated "
                "group has no group protocol); leave it unset",
            )
    if config.zookeeper_poll_liveness_enable and config.group_coordinator != "zookeeper":
        raise InvalidConfigError(
            "zookeeper.poll.liveness.enable",
            "applies to group.coordinator=zookeeper only (a Kafka-coordinated member always "
            "applies max.poll.interval.ms); leave it unset",
        )
    if config.group_coordinator == "kafka":
        check_kafka_coordinated(config)
    elif config.zookeeper_connect is None:
        raise InvalidConfigError(
            "zookeeper.connect",
            "missing required property (group.coordinator=zookeeper); set it, or "
            "group.coordinator=kafka with bootstrap.servers for a Kafka-coordinated group",
        )
    if config.zookeeper_connect is not None:
        validate_zookeeper_connect(config.zookeeper_connect)
    if config.bootstrap_servers is not None:
        validate_bootstrap_servers(config.bootstrap_servers)
    check_range("session.timeout.ms", config.session_timeout_ms, 1)
    check_range("heartbeat.interval.ms", config.heartbeat_interval_ms, 1)
    check_range("max.poll.interval.ms", config.max_poll_interval_ms, 1)
    if config.heartbeat_interval_ms >= config.session_timeout_ms:
        raise InvalidConfigError(
            "heartbeat.interval.ms",
            f"must be below session.timeout.ms ({config.session_timeout_ms}), got "
            f"{config.heartbeat_interval_ms}",
        )
    if config.interceptor_classes is not None:
        for name in config.interceptor_classes.split(","):
            if not re.fullmatch(r"\s*[A-Za-z_][\w.]*([:.][A-Za-z_]\w*)\s*", name):
                raise InvalidConfigError(
                    "interceptor.classes",
                    f"{name.strip()!r} is not a module:Class or module.Class name",
                )

    # Durations that pace an unbounded loop or bound a wait must be > 0; the rebalance
    # backoff may be 0 since rebalance.max.retries bounds that loop.
    check_range("zookeeper.session.timeout.ms", config.zookeeper_session_timeout_ms, 1)
    if config.zookeeper_connection_timeout_ms is not None:
        check_range("zookeeper.connection.timeout.ms", config.zookeeper_connection_timeout_ms, 1)
    check_range("zookeeper.sync.time.ms", config.zookeeper_sync_time_ms, 0)
    check_range("socket.timeout.ms", config.socket_timeout_ms, 1)
    if config.socket_receive_buffer_bytes != -1:
        check_range(
            "socket.receive.buffer.bytes",
            config.socket_receive_buffer_bytes,
            1,
            extra=" (or -1 for the operating system's default)",
        )
    check_range("fetch.message.max.bytes", config.fetch_message_max_bytes, 1)
    check_range("fetch.max.bytes", config.fetch_max_bytes, 1)
    check_range("fetch.min.bytes", config.fetch_min_bytes, 1)
    check_range("fetch.wait.max.ms", config.fetch_wait_max_ms, 1)
    check_range("num.consumer.fetchers", config.num_consumer_fetchers, 1)
    check_range("auto.commit.interval.ms", config.auto_commit_interval_ms, 1)
    if config.queued_max_message_chunks is not None:
        check_range("queued.max.message.chunks", config.queued_max_message_chunks, 1)
    if config.queued_max_messages_kbytes is not None:
        check_range("queued.max.messages.kbytes", config.queued_max_messages_kbytes, 1)
    check_range("rebalance.max.retries", config.rebalance_max_retries, 1)
    if config.rebalance_backoff_ms is not None:
        check_range("rebalance.backoff.ms", config.rebalance_backoff_ms, 0)
    check_range("refresh.leader.backoff.ms", config.refresh_leader_backoff_ms, 1)
    check_range(
        "consumer.timeout.ms",
        config.consumer_timeout_ms,
        -1,
        extra=" (-1 waits forever; any value below -1 is a mistake)",
    )
    check_range("offsets.channel.backoff.ms", config.offsets_channel_backoff_ms, 1)
    check_range("offsets.channel.socket.timeout.ms", config.offsets_channel_socket_timeout_ms, 1)
    check_range("offsets.commit.max.retries", config.offsets_commit_max_retries, 0)

    check_choice("auto.offset.reset", config.auto_offset_reset, _AUTO_OFFSET_RESET_VALUES)
    check_choice("offsets.storage", config.offsets_storage, _OFFSETS_STORAGE_VALUES)
    if config.partition_assignment_strategy is None:
        pass  # the default list: ConsumerConfig.assignment_strategies
    elif config.group_coordinator == "kafka":
        names = parse_assignment_strategies(config.partition_assignment_strategy)
        object.__setattr__(config, "partition_assignment_strategy", ",".join(names))
    else:
        check_choice(
            "partition.assignment.strategy",
            config.partition_assignment_strategy,
            _ASSIGNMENT_STRATEGY_VALUES,
        )
    check_choice(
        "cluster.metadata.source",
        config.cluster_metadata_source,
        _CLUSTER_METADATA_SOURCE_VALUES,
    )
    check_choice("crc.error.action", config.crc_error_action, _CRC_ERROR_ACTION_VALUES)
    check_choice("isolation.level", config.isolation_level, _ISOLATION_LEVEL_VALUES)
    check_range("reconnect.backoff.max.ms", config.reconnect_backoff_max_ms, 1)
    check_range("metadata.max.age.ms", config.metadata_max_age_ms, 1)


def parse_assignment_strategies(value: str) -> tuple[str, ...]:
    """A Kafka-coordinated group's ``partition.assignment.strategy``: a comma-separated list of
    assignors in order of preference, each by its protocol name (``range``, ``roundrobin``,
    ``sticky``, ``cooperative-sticky``) or its Java class name
    (``org.apache.kafka.clients.consumer.CooperativeStickyAssignor`` ...), as the Java
    client's list-valued key; JoinGroup offers them in this order.

    Args:
        value: the configured value.

    Returns:
        The protocol names, in order.

    Raises:
        InvalidConfigError: ``partition.assignment.strategy``: empty, an unknown assignor, or
            one named twice.
    """
    key = "partition.assignment.strategy"
    names: list[str] = []
    for raw in value.split(","):
        item = raw.strip()
        name = _JAVA_ASSIGNOR_CLASSES.get(item, item)
        if name not in _KAFKA_GROUP_STRATEGY_VALUES:
            raise InvalidConfigError(
                key,
                f"unknown assignor {item!r}; expected a comma-separated list of "
                f"{', '.join(_KAFKA_GROUP_STRATEGY_VALUES)} (or their Java class names "
                "org.apache.kafka.clients.consumer.RangeAssignor, ...)",
            )
        if name in names:
            raise InvalidConfigError(key, f"assignor {name!r} is listed twice in {value!r}")
        names.append(name)
    return tuple(names)


def check_group_protocol(config: ConsumerConfig) -> None:
    """The rules of ``group.protocol`` and ``group.remote.assignor`` (at construction)."""
    check_choice("group.protocol", config.group_protocol, _GROUP_PROTOCOL_VALUES)
    if config.group_remote_assignor is not None:
        check_choice(
            "group.remote.assignor", config.group_remote_assignor, _GROUP_REMOTE_ASSIGNOR_VALUES
        )
    if config.group_protocol == "classic":
        if config.group_remote_assignor is not None:
            raise InvalidConfigError(
                "group.remote.assignor",
                "only used with group.protocol=consumer (the broker assigns); the classic "
                "protocol's assignor is partition.assignment.strategy",
            )
        return
    if config.group_coordinator != "kafka":
        raise InvalidConfigError(
            "group.protocol",
            "group.protocol=consumer needs group.coordinator=kafka (and a Kafka 4.x "
            "broker); a ZooKeeper-coordinated group has no group protocol",
        )
    for name, default in _CLASSIC_PROTOCOL_ONLY:
        if getattr(config, name) != default:
            raise InvalidConfigError(
                name.replace("_", "."),
                f"not used with group.protocol=consumer (the broker decides it: "
                f"group.remote.assignor, group.consumer.session.timeout.ms, "
                f"group.consumer.heartbeat.interval.ms); leave it unset, got "
                f"{getattr(config, name)!r}",
            )


_MAX_INSTANCE_ID_LENGTH = 249


def validate_group_instance_id(value: str) -> None:
    """Check a ``group.instance.id`` as the Java client's
    ``JoinGroupRequest.validateGroupInstanceId`` (the rules of a topic name, ``Topic.validate``).

    Args:
        value: the id.

    Raises:
        InvalidConfigError: ``group.instance.id``: it is empty, ``"."`` or ``".."``, longer
            than 249 characters, or has a character other than ASCII alphanumerics, ``'.'``,
            ``'_'`` and ``'-'``.
    """
    key = "group.instance.id"
    if not value:
        raise InvalidConfigError(key, "the empty string is not allowed (leave it unset instead)")
    if value in (".", ".."):
        raise InvalidConfigError(key, f"{value!r} is not allowed")
    if len(value) > _MAX_INSTANCE_ID_LENGTH:
        raise InvalidConfigError(
            key,
            f"{value[:20]!r}... is {len(value)} characters long, longer than the max allowed "
            f"length {_MAX_INSTANCE_ID_LENGTH}",
        )
    if not _LEGAL_CHARS.fullmatch(value):
        raise InvalidConfigError(
            key, f"{value!r} contains one or more characters other than {_LEGAL_CHARS_TEXT}"
        )


def check_kafka_coordinated(config: ConsumerConfig) -> None:
    """The rules of ``group.coordinator=kafka`` (at construction)."""
    if not config.bootstrap_servers:
        raise InvalidConfigError(
            "bootstrap.servers",
            "missing required property (group.coordinator=kafka: the group is coordinated "
            "by a broker, found through bootstrap.servers)",
        )
    if config.dual_commit_enabled:
        raise InvalidConfigError(
            "dual.commit.enabled",
            "a Kafka-coordinated group (group.coordinator=kafka) stores its offsets in "
            "Kafka only; dual commit needs ZooKeeper offsets",
        )
    if config.cluster_metadata_source == "zookeeper":
        raise InvalidConfigError(
            "cluster.metadata.source",
            "a Kafka-coordinated group (group.coordinator=kafka) reads metadata from Kafka",
        )
    reset = _NEW_CONSUMER_RESETS.get(config.auto_offset_reset)
    if reset is not None:
        object.__setattr__(config, "auto_offset_reset", reset)
    object.__setattr__(config, "offsets_storage", "kafka")
    object.__setattr__(config, "dual_commit_enabled", False)
    object.__setattr__(config, "cluster_metadata_source", "kafka")


_KIND_NAMES = {int: "an int", bool: "a bool", str: "a str"}


def check_type(name: str, value: object, kind: type, optional: bool) -> None:
    """Check an attribute's value against its kind (``bool`` is not an ``int`` here).

    Raises:
        InvalidConfigError: the dotted key of ``name``; a secret's value is not shown.
    """
    if value is None and optional:
        return
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        wanted = _KIND_NAMES[kind] + (" or None" if optional else "")
        shown = REDACTED if name in SECRET_FIELDS else repr(value)
        raise InvalidConfigError(
            name.replace("_", "."),
            f"must be {wanted}, got {shown} ({type(value).__name__})",
        )


def check_range(key: str, value: int, minimum: int, *, extra: str = "") -> None:
    """Check ``minimum <= value <=`` Java's largest ``int``; ``extra`` ends the message's range.

    Raises:
        InvalidConfigError: ``key``, naming the range and the value.
    """
    if not minimum <= value <= _INT32_MAX:
        raise InvalidConfigError(
            key, f"must be between {minimum} and {_INT32_MAX}{extra}, got {value}"
        )


def _check_legal_chars(key: str, value: str) -> None:
    # Kafka's validateChars accepts "", which for group.id makes /consumers/ the group dir.
    if not _LEGAL_CHARS.fullmatch(value):
        what = "must not be empty" if not value else f"{value!r} is illegal"
        raise InvalidConfigError(key, f"{what}; allowed characters are {_LEGAL_CHARS_TEXT}")


def _check_host_ports(key: str, value: str) -> None:
    if not value:
        raise InvalidConfigError(key, "must not be empty; expected host:port[,host:port...]")
    for entry in value.split(","):
        host, colon, port = entry.rpartition(":")
        if not colon or not host:
            raise InvalidConfigError(
                key, f"{entry!r} is not host:port (in {value!r}); expected host:port[,host:port...]"
            )
        if not (_HOSTNAME.fullmatch(host) or _IPV6_LITERAL.fullmatch(host)):
            raise InvalidConfigError(
                key,
                f"{host!r} is not a valid host (in {value!r}); use a hostname, an IPv4 "
                f"address or an IPv6 address in brackets ([::1]:2181)",
            )
        if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise InvalidConfigError(
                key, f"port {port!r} of {entry!r} must be a number from 1 to 65535"
            )


def validate_group_id(value: str) -> str:
    """Check a ``group.id``: the rule of :class:`ConsumerConfig`, also used by the CLI.

    As ``kafka.common.Config.validateChars`` (0.10.2): ``[a-zA-Z0-9._-]+``; stricter than the
    original, the empty string, ``.`` and ``..`` are refused (the group's node
    ``/consumers/<group>`` could not exist).

    Args:
        value: the group id.

    Returns:
        ``value``, unchanged.

    Raises:
        InvalidConfigError: ``key`` ``"group.id"``; the message says what is wrong.
    """
    key = "group.id"
    if value in (".", "..") or "/" in value or "\x00" in value:
        raise InvalidConfigError(
            key,
            f"{value!r} cannot be a ZooKeeper path element; allowed characters are "
            f"{_LEGAL_CHARS_TEXT} (and not '.' or '..' alone)",
        )
    _check_legal_chars(key, value)
    return value


def validate_bootstrap_servers(value: str) -> str:
    """Check a ``bootstrap.servers`` list: the rule of :class:`ConsumerConfig`, also the CLI's.

    ``host:port[,host:port...]``: each host a hostname, an IPv4 address or an IPv6 address
    in brackets (``[::1]:9092``), each port 1..65535.

    Args:
        value: the list.

    Returns:
        ``value``, unchanged.

    Raises:
        InvalidConfigError: ``key`` ``"bootstrap.servers"``: empty, an entry without a port,
            a bad host or port.
    """
    _check_host_ports("bootstrap.servers", value)
    return value


def validate_zookeeper_connect(value: str) -> str:
    """Check a ``zookeeper.connect`` string: the rule of :class:`ConsumerConfig`, also the CLI's.

    ``host:port[,host:port...][/chroot]`` as :func:`validate_bootstrap_servers` for the hosts;
    the chroot an absolute ZooKeeper path (``PathUtils.validatePath``; ``/`` means none).

    Args:
        value: the connect string.

    Returns:
        ``value``, unchanged.

    Raises:
        InvalidConfigError: ``key`` ``"zookeeper.connect"``: empty, ``foo`` (no port),
            ``host:notaport``, a bad host or chroot.
    """
    key = "zookeeper.connect"
    if not value:
        raise InvalidConfigError(
            key, "must not be empty; expected host:port[,host:port...][/chroot]"
        )
    hosts, slash, path = value.partition("/")
    _check_host_ports(key, hosts)
    if not slash or not path:
        return value
    # As ZooKeeper's PathUtils.validatePath, which the chroot has to pass.
    segments = path.split("/")
    if any(seg in ("", ".", "..") for seg in segments):
        raise InvalidConfigError(
            key,
            f"chroot {slash + path!r} is not a valid ZooKeeper path: it must start with '/' and "
            f"have no empty, '.' or '..' segments and no trailing '/'",
        )
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in path):
        raise InvalidConfigError(key, f"chroot {slash + path!r} contains a control character")
    return value
