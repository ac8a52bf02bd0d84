"""The rebalance benchmark's settings: the modes, the grids, the Kafka-coordinated members'
timeouts and what the command line's choices make of them. Pure (the parsed arguments in,
values out), so the rules are tested without a cluster.
"""

from __future__ import annotations

import argparse

CLASSIC_MODES = ("azk", "azk-kafka", "azk-kafka-coop", "original", "aiokafka")
# aiozkconsumer with group.coordinator=kafka: eager range, and cooperative-sticky (KIP-429).
AZK_KAFKA_MODES = ("azk-kafka", "azk-kafka-coop")
# group.protocol=consumer (KIP-848): Kafka 4.x brokers only (--kafka 4.3).
CONSUMER_PROTOCOL_MODES = ("azk-consumer", "java-consumer", "confluent-consumer")
# The Java KafkaConsumer with the classic protocol, as azk-kafka-coop and azk-kafka (the same
# session and heartbeat); not run by default with --kafka 3.9 (a JVM per member).
JAVA_CLASSIC_MODES = ("java-kafka-coop", "java-kafka")
JAVA_MODES = ("java-consumer", *JAVA_CLASSIC_MODES)
MODES = CLASSIC_MODES + CONSUMER_PROTOCOL_MODES + JAVA_CLASSIC_MODES
# Modes that can run as static members (group.instance.id, KIP-345).
STATIC_MODES = ("azk-kafka", "azk-kafka-coop", "azk-consumer", *JAVA_MODES)
SCENARIOS = ("join-leave", "rolling-restart")
MEMBERSHIPS = ("dynamic", "static")
ZK_MODES = ("azk", "original")  # modes whose group lives in ZooKeeper (ids, owner nodes)
# The broker's group.consumer.* defaults (Kafka 4.3), for the table.
BROKER_CONSUMER_SESSION_MS = 45_000
BROKER_CONSUMER_HEARTBEAT_MS = 5_000
DIAGONAL = ((2, 16), (8, 128), (16, 256))
TARGET_P99_S = 0.5  # issue 17: rebalance p99 < 500 ms for azk at 16 members x 256 partitions
FULL = tuple((m, p) for m in (2, 8, 16) for p in (16, 128, 256))


KAFKA_VERSIONS = ("3.9", "4.3")
KAFKA_TIMEOUT_OPTIONS = (
    (
        "--kafka-session-ms",
        10_000,
        "session.timeout.ms of the azk-kafka(-coop) and java-kafka(-coop) members",
    ),
    (
        "--kafka-heartbeat-ms",
        1_000,
        "heartbeat.interval.ms of the azk-kafka(-coop) and java-kafka(-coop) members",
    ),
    ("--aiokafka-session-ms", 10_000, "session_timeout_ms of the aiokafka members (its default)"),
    (
        "--aiokafka-heartbeat-ms",
        3_000,
        "heartbeat_interval_ms of the aiokafka members (its default)",
    ),
)


def kafka_timeouts(args: argparse.Namespace) -> list[str]:
    """The Kafka-coordinated members' timeouts as member-process options."""
    flags = []
    for opt, _, _ in KAFKA_TIMEOUT_OPTIONS:
        flags += [opt, str(getattr(args, opt[2:].replace("-", "_")))]
    return flags


def heartbeat_ms(mode: str, args: argparse.Namespace) -> int | None:
    """The heartbeat interval of a Kafka-coordinated mode (``None``: ZooKeeper modes); the
    ``consumer``-protocol modes get the broker's ``group.consumer.heartbeat.interval.ms``."""
    if mode in AZK_KAFKA_MODES or mode in JAVA_CLASSIC_MODES:
        return int(args.kafka_heartbeat_ms)
    if mode == "aiokafka":
        return int(args.aiokafka_heartbeat_ms)
    if mode in CONSUMER_PROTOCOL_MODES:
        return int(args.consumer_heartbeat_ms or BROKER_CONSUMER_HEARTBEAT_MS)
    return None


def broker_properties(args: argparse.Namespace) -> dict[str, str]:
    """Kafka 4.3 broker settings for the ``consumer``-protocol groups (every such mode alike:
    the broker is shared); the classic groups and ZooKeeper do not read them."""
    hb = args.consumer_heartbeat_ms
    if args.kafka != "4.3" or not hb:
        return {}
    return {
        "group.consumer.heartbeat.interval.ms": str(hb),
        "group.consumer.min.heartbeat.interval.ms": str(min(hb, BROKER_CONSUMER_HEARTBEAT_MS)),
    }


def event_jitter_ms(mode: str, args: argparse.Namespace) -> int:
    """The random pause before each event: ``--event-jitter-ms``, or by default the mode's
    heartbeat interval (0 for the ZooKeeper modes)."""
    if args.event_jitter_ms >= 0:
        return int(args.event_jitter_ms)
    return heartbeat_ms(mode, args) or 0


def session_ms(mode: str, args: argparse.Namespace) -> int | None:
    """The session timeout of a Kafka-coordinated mode (``None``: ZooKeeper modes); the
    ``consumer``-protocol modes get the broker's."""
    if mode in AZK_KAFKA_MODES or mode in JAVA_CLASSIC_MODES:
        return int(args.kafka_session_ms)
    if mode == "aiokafka":
        return int(args.aiokafka_session_ms)
    if mode in CONSUMER_PROTOCOL_MODES:
        return BROKER_CONSUMER_SESSION_MS
    return None


def grid_of(args: argparse.Namespace) -> tuple[tuple[int, int], ...]:
    """The (members, partitions) configurations to run: ``--configs``, else the smoke grid
    with ``--quick``, else ``--grid``."""
    grid = FULL if args.grid == "full" else DIAGONAL
    if args.quick:
        grid = ((2, 16), (8, 64))
    if args.configs:
        grid = tuple(
            (int(m), int(p)) for m, p in (c.split("x") for c in args.configs.split(",") if c)
        )
    return grid


def modes_of(args: argparse.Namespace) -> list[str]:
    """The modes to run: ``--modes``, else every mode the broker version serves.

    Raises:
        ValueError: for an unknown mode, or a ``consumer``-protocol mode without
            ``--kafka 4.3`` (the message is the command line's error).
    """
    default_modes = MODES if args.kafka == "4.3" else CLASSIC_MODES
    modes = [x for x in (args.modes or ",".join(default_modes)).split(",") if x]
    unknown = set(modes) - set(MODES)
    if unknown:
        raise ValueError(f"unknown modes: {', '.join(sorted(unknown))} (known: {', '.join(MODES)})")
    if args.kafka != "4.3" and set(modes) & set(CONSUMER_PROTOCOL_MODES):
        raise ValueError(f"{', '.join(CONSUMER_PROTOCOL_MODES)} need --kafka 4.3")
    return modes


def memberships_of(args: argparse.Namespace, modes: list[str]) -> list[tuple[str, str]]:
    """The (mode, membership) pairs to run: ``--membership``, by default ``dynamic`` for
    join-leave and ``dynamic,static`` for the rolling restart; ``static`` only for the modes
    that have it (:data:`STATIC_MODES`).

    Raises:
        ValueError: for an unknown membership, or ``static`` asked for and no mode has it.
    """
    default = "dynamic,static" if args.scenario == "rolling-restart" else "dynamic"
    kinds = [x for x in (args.membership or default).split(",") if x]
    unknown = set(kinds) - set(MEMBERSHIPS)
    if unknown:
        raise ValueError(
            f"unknown membership: {', '.join(sorted(unknown))} (known: {', '.join(MEMBERSHIPS)})"
        )
    pairs = [(m, k) for m in modes for k in kinds if k == "dynamic" or m in STATIC_MODES]
    if not pairs:
        raise ValueError(f"static membership needs one of {', '.join(STATIC_MODES)}")
    return pairs
