"""Rebalance latency: how long a group needs, after a member joins or leaves, until every
partition is owned and fetching again; and whether the members whose partitions did not move
kept receiving records meanwhile.

Setup per configuration (members x partitions): a topic with P partitions; a producer process
writes one record to every partition every ``--tick-ms``; M group members, spread over a few
member processes (``--members-per-process``), each member one stream. Then ``--events``
membership changes alternate: a member leaves (graceful shutdown), then joins again (a new
connector, a new consumer id), a different member each pair.

Per event the orchestrator records:

- latency from the command (the member process starting to leave / to join) to *settled*:
  every live member has finished a rebalance after the command, their partition sets are
  disjoint and cover the topic, and every partition a member acquired has handed out a record
  (so: owned and fetching again). Settled time = the latest of those rebalance ends and first
  records. For ZooKeeper modes also from the moment the orchestrator's own watch on
  ``/consumers/<group>/ids`` saw the membership change.
- the largest gap between two records of a partition whose owner did not change (measured by
  the members, per partition, over a window from just before the command to 1 s after
  settling), against the same gap measured in a quiet window (baseline).
- double ownership: two members handing out records of one partition in overlapping
  intervals (each member reports, per tenure, its first and last record time), and for the
  ZooKeeper modes the owner nodes read back after each event (the node's owner must be the
  member that says it owns the partition).

Modes (``--modes``):

- ``azk``: aiozkconsumer as it is (incremental rebalance; claims wait for the blocking owner
  node's deletion).
- ``original``: aiozkconsumer patched in the member process to behave like the 0.10.2 consumer:
  every rebalance first releases every partition (stop, commit, delete owner nodes), and a
  conflicting claim sleeps ``rebalance.backoff.ms`` (2,000 ms, the default) instead of
  watching the owner node. An emulation, not the Scala code.
- ``azk-kafka``: aiozkconsumer with a Kafka-coordinated group (``group.coordinator=kafka``:
  the classic protocol through the broker's group coordinator, eager: every rebalance
  releases everything; ``range`` assignor), session ``--kafka-session-ms`` (10 s) and
  heartbeat ``--kafka-heartbeat-ms`` (1 s). No ZooKeeper: no "from ids" and no owner nodes.
- ``azk-kafka-coop``: as ``azk-kafka`` with ``partition.assignment.strategy=cooperative-sticky``
  (KIP-429: members keep fetching what they own through the rebalance and give up only what
  moves; a follow-up rebalance hands that to its new owner, so "settled" is after it).
- ``aiokafka``: ``AIOKafkaConsumer.subscribe()`` with Kafka's group coordinator (eager
  protocol: every rebalance revokes everything; its default round-robin assignor), session
  ``--aiokafka-session-ms`` and heartbeat ``--aiokafka-heartbeat-ms`` (aiokafka's defaults,
  10 s and 3 s).

- ``java-kafka-coop`` / ``java-kafka``: the Java ``KafkaConsumer`` (kafka-clients 4.3.1 with
  ``--kafka 4.3``, 3.9.1 otherwise; one JVM per member) with the classic protocol and
  ``cooperative-sticky`` / ``range``, session and heartbeat as ``azk-kafka``; not run by
  default with ``--kafka 3.9``.

``--membership static`` runs the modes that have it (``azk-kafka``, ``azk-kafka-coop``,
``azk-consumer`` and the Java modes) as static members (``group.instance.id``, KIP-345, one
per slot, the same across the slot's restarts).

``--scenario rolling-restart`` replaces the join/leave events by a rolling restart: each member
in turn (``--rounds`` times over) is stopped (its connector closed; a static member does not
leave the group) and at once started again in its slot, within the session timeout; the next
once the group settled again: every member live, the partition sets disjoint, balanced and
covering, the restarted member given its partitions after its stop and handing out a record of
each (and every other member of any partition it acquired), then 1 s without an assignment
change. Static members make no rebalance, so nothing here waits for one. Per restart: the new
generations (member epochs) the other members saw and their rebalances, partitions moved, the
longest gap of a partition that stayed with a member not restarted, the restarted member's own
partitions' gap, stop to settled; and the whole restart's time. By default both dynamic and
static members.

Kafka-coordinated members learn of a rebalance from a heartbeat answer, so their latency
includes up to one heartbeat interval: compare ``azk-kafka`` and ``aiokafka`` at the same
``--*-heartbeat-ms`` (the table has a column for it). Before each event of those modes the
orchestrator waits a random 0 to one heartbeat interval (``--event-jitter-ms``), or the fixed
pauses of the procedure would keep every event at one phase against the heartbeats.

Usage::

    .venv/bin/python benchmarks/rebalance.py [--quick] [--grid diagonal|full]
    .venv/bin/python benchmarks/rebalance.py --kafka 4.3 --scenario rolling-restart \
        --configs 8x128 --modes azk-kafka,azk-kafka-coop,azk-consumer

The benchmark is split by job, in modules next to this one: ``_rebalance_settings`` (modes,
grids, timeouts), ``_rebalance_members`` and ``_rebalance_tracker`` (the producer and member
processes), ``_rebalance_scenario`` (one configuration run), ``_rebalance_view`` (the
orchestrator's view of the group), ``_rebalance_stats`` (the figures) and
``_rebalance_report`` (the tables); this one is the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    RESULTS_DIR,
    add_cluster_args,
    cluster_from_args,
    machine,
    say,
    uptime,
    versions,
    write_results,
)
from _rebalance_members import member_main, producer_main
from _rebalance_report import librdkafka_version, markdown
from _rebalance_scenario import run_config, run_rolling_restart
from _rebalance_settings import (
    CLASSIC_MODES,
    CONSUMER_PROTOCOL_MODES,
    KAFKA_TIMEOUT_OPTIONS,
    KAFKA_VERSIONS,
    MODES,
    SCENARIOS,
    STATIC_MODES,
    broker_properties,
    event_jitter_ms,
    grid_of,
    memberships_of,
    modes_of,
)


def build_parser() -> argparse.ArgumentParser:
    """The command line: the benchmark's options, and the child processes' subcommands."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("producer", help="(internal) write to every partition every tick")
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--tick-ms", type=int, default=100)
    m = sub.add_parser("member", help="(internal) host member slots driven through stdin")
    m.add_argument("--mode", choices=MODES, required=True)
    m.add_argument("--group", required=True)
    m.add_argument("--topic", required=True)
    m.add_argument("--slots", required=True, help="comma-separated slot numbers")
    m.add_argument("--original-backoff-ms", type=int, default=2000)
    m.add_argument("--kafka", choices=KAFKA_VERSIONS, default="3.9")
    m.add_argument("--remote-assignor")
    m.add_argument("--java-poll-ms", type=int, default=1000)
    m.add_argument("--static", action="store_true", help="group.instance.id per slot")
    m.add_argument("--log-level", default="WARNING", help="the member process's log level (stderr)")
    for opt, default, _ in KAFKA_TIMEOUT_OPTIONS:
        m.add_argument(opt, type=int, default=default)
    for sp in (p, m):
        sp.add_argument("--zookeeper", required=True)
        sp.add_argument("--bootstrap-server", required=True)

    parser.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default="join-leave",
        help="join-leave (default): alternating leave/join events; rolling-restart: each "
        "member in turn stopped and started again within the session timeout (--rounds times "
        "over), dynamic and static members (--membership)",
    )
    parser.add_argument(
        "--membership",
        help="comma-separated subset of dynamic, static (group.instance.id, KIP-345; modes "
        + ", ".join(STATIC_MODES)
        + "); default: dynamic for join-leave, dynamic,static for rolling-restart",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="rolling-restart: restarts of every member"
    )
    parser.add_argument("--quick", action="store_true", help="smoke size: 6 events, small grid")
    parser.add_argument(
        "--grid",
        choices=("diagonal", "full"),
        default="diagonal",
        help="diagonal: 2x16, 8x128, 16x256; full: every members x partitions",
    )
    parser.add_argument(
        "--modes",
        help="comma-separated subset of "
        + ", ".join(MODES)
        + f" (default: {', '.join(CLASSIC_MODES)} with --kafka 3.9, all with --kafka 4.3; "
        f"{', '.join(CONSUMER_PROTOCOL_MODES)} need --kafka 4.3)",
    )
    parser.add_argument(
        "--kafka",
        choices=KAFKA_VERSIONS,
        default="3.9",
        help="the LocalCluster's broker: 3.9 (ZooKeeper mode, default) or 4.3 (KRaft; a "
        "standalone ZooKeeper next to it for the ZooKeeper-coordinated modes). With "
        "--zookeeper/--bootstrap-server: the version of that cluster",
    )
    parser.add_argument(
        "--consumer-heartbeat-ms",
        type=int,
        default=1000,
        help="Kafka 4.3: the broker's group.consumer.heartbeat.interval.ms (and "
        "group.consumer.min.heartbeat.interval.ms when lower than its 5000 default), the "
        "heartbeat interval of every consumer-protocol member; 0: the broker default 5000 "
        "(default 1000, as azk-kafka's heartbeat)",
    )
    parser.add_argument(
        "--java-poll-ms",
        type=int,
        default=1000,
        help="java-consumer: the KafkaConsumer.poll timeout (the rebalance listener runs "
        "within poll; default 1000)",
    )
    parser.add_argument(
        "--remote-assignor",
        choices=("uniform", "range"),
        default=None,
        help="group.remote.assignor of the consumer-protocol members (default: unset, the "
        "broker's default, uniform; the Java member is given uniform explicitly)",
    )
    parser.add_argument(
        "--configs", help="comma-separated MEMBERSxPARTITIONS (e.g. 16x256); overrides --grid"
    )
    parser.add_argument("--events", type=int, default=20, help="join/leave events per config")
    parser.add_argument("--tick-ms", type=int, default=100, help="producer interval per partition")
    parser.add_argument(
        "--members-per-process", type=int, default=0, help="0: 1 for 2 members, 2 for 8, 4 for 16"
    )
    parser.add_argument("--settle-timeout", type=float, default=30.0, help="seconds per event")
    parser.add_argument(
        "--original-backoff-ms",
        type=int,
        default=2000,
        help="rebalance.backoff.ms of the emulated original",
    )
    for opt, default, text in KAFKA_TIMEOUT_OPTIONS:
        parser.add_argument(opt, type=int, default=default, help=f"{text} (default {default})")
    parser.add_argument(
        "--event-jitter-ms",
        type=int,
        default=-1,
        help="wait a random 0..N ms before each event, so that events do not keep one phase "
        "against the members' heartbeats (the settle check's fixed 1 s pause would lock it); "
        "default -1: the mode's heartbeat interval, 0 for the ZooKeeper modes",
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--member-logs",
        type=Path,
        default=None,
        help="write each member process's stderr (its log lines, INFO and up) to "
        "DIR/<group>-member-<i>.log (default: discarded)",
    )
    parser.add_argument(
        "--name", default="rebalance", help="result file stem (<name>.json, <name>.md)"
    )
    add_cluster_args(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "producer":
        asyncio.run(producer_main(args))
        return
    if args.command == "member":
        args.slots = [int(s) for s in args.slots.split(",")]
        asyncio.run(member_main(args))
        return
    grid = grid_of(args)
    if args.quick:
        args.events = min(args.events, 6)
    try:
        modes = modes_of(args)
        runs = memberships_of(args, modes)
    except ValueError as exc:
        parser.error(str(exc))
    scenario = run_rolling_restart if args.scenario == "rolling-restart" else run_config
    flavour = "kraft" if args.kafka == "4.3" else "zookeeper"
    with cluster_from_args(
        args, flavour=flavour, broker_properties=broker_properties(args)
    ) as info:
        before = machine()
        say(f"machine before: {before['uptime']}; {before['java_processes']} java processes")
        configs = []
        loads = []
        for members, partitions in grid:
            for mode, membership in runs:
                say(
                    f"{mode} ({membership}): {members} members x {partitions} partitions, "
                    + (
                        f"{args.rounds} rolling restart(s)"
                        if args.scenario == "rolling-restart"
                        else f"{args.events} events"
                    )
                )
                configs.append(
                    asyncio.run(scenario(info, mode, members, partitions, args, membership))
                )
                label = mode if membership == "dynamic" else f"{mode} static"
                loads.append(f"{label} {members}x{partitions}: {uptime()}")
        data = {
            "benchmark": "rebalance",
            "settings": {
                "scenario": args.scenario,
                "rounds": args.rounds,
                "events": args.events,
                "tick_ms": args.tick_ms,
                "grid": [list(g) for g in grid],
                "modes": modes,
                "original_backoff_ms": args.original_backoff_ms,
                "kafka_session_ms": args.kafka_session_ms,
                "kafka_heartbeat_ms": args.kafka_heartbeat_ms,
                "aiokafka_session_ms": args.aiokafka_session_ms,
                "aiokafka_heartbeat_ms": args.aiokafka_heartbeat_ms,
                "event_jitter_ms": {mode: event_jitter_ms(mode, args) for mode in modes},
                "quick": args.quick,
                "kafka": args.kafka,
                "broker_properties": broker_properties(args),
                "remote_assignor": args.remote_assignor,
                "java_poll_ms": args.java_poll_ms,
            },
            "command": " ".join(sys.argv),
            "machine_before": before,
            "machine_after": machine(),
            "uptime_per_config": loads,
            "versions": {
                **versions("aiozkconsumer", "aiokafka", "aiozk", "confluent-kafka"),
                "librdkafka": librdkafka_version(),
                "kafka-clients (Java member)": "4.3.1" if args.kafka == "4.3" else "3.9.1",
                "broker": "4.3.1 (KRaft)" if args.kafka == "4.3" else "3.9.1 (ZooKeeper mode)",
            },
            "configs": configs,
        }
        write_results(args.out_dir, args.name, data, markdown(data))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
