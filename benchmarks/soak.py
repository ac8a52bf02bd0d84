"""Soak: a long chaos run (30 minutes or more) against a local cluster, then the history check.

The same runner as the CI chaos tests (:func:`aiozkconsumer.testing.chaos.run_chaos`), for
longer: verifiable consumer processes, each through its own proxied link, consume a topic
that keeps receiving records while a fault is injected every ~2 s; then everything is healed,
the group finishes, and the history is checked.

- ``--coordinator zookeeper`` (default): ZooKeeper-coordinated members on one broker;
  consumer kills and pauses, real session expiry, ZooKeeper and broker restarts, link cuts.
- ``--coordinator kafka --protocol classic|consumer``: Kafka-coordinated members (the classic
  protocol, or KIP-848's ``group.protocol=consumer``) on three KRaft brokers (Kafka 4.3) with
  the offsets, transaction-state and data topics at replication factor 3 and
  ``min.insync.replicas=2``; member kills and pauses, the group coordinator's broker killed
  (the coordinator moves), a partition leader's broker killed, a member's link to one broker
  cut, rolling restarts of every broker; ``--transactions`` of the producer's chunks are
  written in transactions (three in ten aborted), read with ``isolation.level=read_committed``.
- ``--client aiokafka`` (``--coordinator kafka --protocol classic`` only; default
  ``--client aiozkconsumer``): the same run, the same schedule for the same ``--seed``, with
  members that consume with plain aiokafka ``AIOKafkaConsumer``
  (:mod:`aiozkconsumer.testing.verifiable_aiokafka`: ``group_id``, manual commits every
  250 ms / on revocation / at shutdown as ours, ``enable_auto_commit=False``,
  ``auto_offset_reset="earliest"``, ``isolation_level="read_committed"`` with transactions,
  our session timeout and heartbeat interval) as a reference for ours. The same checker and
  report; the report names the client, lists the rules not applied to aiokafka members
  (``duplicate_window_exceeded``: its bounds rest on our session lease) with the anomalies
  left out of the verdict, and the event fields aiokafka does not show (member id and
  generation, lease deadline, suspensions). aiokafka has no KIP-848 member, so
  ``--protocol consumer`` is refused.

Usage::

    .venv/bin/python benchmarks/soak.py --duration-s 1800 --seed 7 --records-per-s 500
    .venv/bin/python benchmarks/soak.py --coordinator kafka --protocol consumer \
        --duration-s 900 --records-per-s 300
    .venv/bin/python benchmarks/soak.py --coordinator kafka --protocol classic \
        --client aiokafka --duration-s 900 --records-per-s 300

Prints the faults injected by kind, the records, the hand-overs per fault kind (duplicates
and duplicate window, max and p99, next to the bound ``docs/failure-semantics.md`` states),
the sessions expired per ZooKeeper restart, the checker's summary and anomalies;
writes ``soak.json`` (the report) into ``--out-dir``, next to the event files, the fault log
and the schedule. Exit status 0 when the history is clean, 1 otherwise. Reproduce a failing
run with the same ``--seed`` (the same faults are injected at the same offsets).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiozkconsumer.testing import ChaosReport, LocalCluster, run_chaos
from aiozkconsumer.testing.chaos import (
    CoordinatorMode,
    MemberClient,
    kafka_chaos_broker_properties,
)

log = logging.getLogger("soak")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="benchmarks/soak.py", description="A long Jepsen-style chaos run, then a check."
    )
    parser.add_argument("--duration-s", type=float, default=1800.0, help="fault phase, s")
    parser.add_argument("--seed", type=int, default=None, help="default: from the clock")
    parser.add_argument("--records-per-s", type=float, default=500.0, help="produce rate")
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--zk-tick-ms", type=int, default=1000, help="ZooKeeper tickTime")
    parser.add_argument("--interval-s", type=float, default=2.0, help="mean time between faults")
    parser.add_argument(
        "--compound",
        type=float,
        default=0.0,
        help="probability (0-1) that a member's link cut healing within the session timeout "
        "is followed by a kill of that member within a session timeout (the compound window; "
        "default 0)",
    )
    parser.add_argument(
        "--flavour",
        choices=("zookeeper", "kraft"),
        default=None,
        help="the cluster's metadata mode (default: zookeeper; kraft with --coordinator kafka)",
    )
    parser.add_argument("--coordinator", choices=("zookeeper", "kafka"), default="zookeeper")
    parser.add_argument(
        "--protocol",
        choices=("classic", "consumer"),
        default="classic",
        help="group.protocol of Kafka-coordinated members",
    )
    parser.add_argument(
        "--client",
        choices=tuple(c.value for c in MemberClient),
        default=MemberClient.AIOZKCONSUMER.value,
        help="the members' client: ours, or aiokafka's AIOKafkaConsumer as a reference "
        "(--coordinator kafka --protocol classic only)",
    )
    parser.add_argument(
        "--heartbeat-interval-ms", type=int, default=1000, help="Kafka-coordinated members"
    )
    parser.add_argument(
        "--transactions",
        type=float,
        default=None,
        help="share of the producer's chunks written in transactions (default 0.5 with "
        "--coordinator kafka, 0 otherwise)",
    )
    parser.add_argument("--brokers", type=int, default=None, help="default 3 with kafka, else 1")
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="default: a new directory under /tmp"
    )
    parser.add_argument("--log-level", default="INFO")
    return parser


def _print_report(report: ChaosReport, wall_s: float) -> None:
    r = report.result
    print(f"seed {report.seed}: {'OK' if report.ok else 'FAILED'} after {wall_s / 60:.1f} min")
    print("faults injected by kind:")
    for kind, n in report.faults.items():
        print(f"  {kind:<18} {n}")
    if report.skipped:
        print(f"faults not injected (target busy): {report.skipped}")
    print(
        f"records: {report.records} in the topic ({report.acknowledged} acknowledged, "
        f"{report.produce_failures} failed chunks); delivered {r.delivered} "
        f"({r.distinct_delivered} distinct, {r.duplicates} duplicates, "
        f"{r.allowed_duplicates} within the at-least-once window), lost {r.lost}"
    )
    print(
        f"consumer incarnations {report.incarnations}, crashes {r.crashes}, "
        f"session losses {r.session_losses}, suspensions {r.suspensions}, "
        f"commits {r.commits}, ownership epochs {r.epochs}"
    )
    print("phases: " + ", ".join(f"{k} {v:.0f} s" for k, v in report.phases_s.items()))
    for exit_ in report.unexpected_exits:
        print(f"unexpected exit: {exit_}")
    for problem in report.harness_problems:
        print(f"harness problem: {problem}")
    for line in report.fault_lines():
        print(line)
    kinds = r.by_kind()
    print(
        f"anomalies: {len(r.anomalies)}"
        + (" (" + ", ".join(f"{k.value}={len(v)}" for k, v in kinds.items()) + ")" if kinds else "")
    )
    for anomaly in r.anomalies[:50]:
        print(f"  {anomaly}")
    if len(r.anomalies) > 50:
        print(f"  ... {len(r.anomalies) - 50} more in soak.json")
    for line in report.client_lines():
        print(line)
    print(f"events, schedule and fault log: {report.events_dir}")


def _mode(args: argparse.Namespace) -> CoordinatorMode:
    if args.coordinator == "zookeeper":
        return CoordinatorMode.ZOOKEEPER
    if args.protocol == "consumer":
        return CoordinatorMode.KAFKA_CONSUMER
    return CoordinatorMode.KAFKA_CLASSIC


async def _soak(args: argparse.Namespace, seed: int, out: Path) -> ChaosReport:
    records = int(args.records_per_s * args.duration_s)
    mode = _mode(args)
    kafka = mode is not CoordinatorMode.ZOOKEEPER
    brokers = args.brokers or (3 if kafka else 1)
    cluster_options: dict[str, Any] = {}
    chaos_options: dict[str, Any] = {}
    if kafka:
        cluster_options["broker_properties"] = kafka_chaos_broker_properties(
            args.session_timeout_ms, args.heartbeat_interval_ms
        )
        chaos_options = {
            "mode": mode,
            "client": args.client,
            "heartbeat_interval_ms": args.heartbeat_interval_ms,
            "transactions": 0.5 if args.transactions is None else args.transactions,
        }
    elif args.transactions:
        chaos_options["transactions"] = args.transactions
    async with LocalCluster(
        brokers=brokers,
        proxy_links=args.consumers,
        zk_tick_time_ms=args.zk_tick_ms,
        flavour=args.flavour or ("kraft" if kafka else "zookeeper"),
        keep_work_dir=True,
        work_dir=out / "cluster",
        **cluster_options,
    ) as cluster:
        log.info("cluster up: %r", cluster)
        return await run_chaos(
            cluster,
            consumers=args.consumers,
            partitions=args.partitions,
            records=records,
            duration_s=args.duration_s,
            seed=seed,
            session_timeout_ms=args.session_timeout_ms,
            events_dir=out / "events",
            interval_s=args.interval_s,
            compound=args.compound,
            finish_timeout_s=300.0,
            on_progress=lambda text: print(text, flush=True),
            **chaos_options,
        )


def main(argv: list[str] | None = None) -> int:
    """Run the soak; 0 if the history is clean, 1 if not."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not 0.0 <= args.compound <= 1.0:
        parser.error(f"--compound must be within [0, 1], got {args.compound}")
    if args.client == MemberClient.AIOKAFKA.value and (
        args.coordinator != "kafka" or args.protocol != "classic"
    ):
        parser.error(
            "--client aiokafka needs --coordinator kafka --protocol classic: aiokafka's "
            "AIOKafkaConsumer has neither ZooKeeper coordination nor the KIP-848 "
            "(group.protocol=consumer) member"
        )
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("aiokafka", "aiozk", "aiozkconsumer.testing.proxy"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    out = args.out_dir or Path(tempfile.mkdtemp(prefix=f"aiozkconsumer-soak-{seed}-"))
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"soak: {_mode(args).value}, client {args.client}, seed {seed}, "
        f"fault phase {args.duration_s:g} s, output in {out}",
        flush=True,
    )
    began = time.monotonic()
    report = asyncio.run(_soak(args, seed, out))
    wall = time.monotonic() - began
    result = {
        **report.to_json(),
        "wall_s": round(wall, 1),
        "records_per_s": args.records_per_s,
        "coordinator_mode": _mode(args).value,
        "client": args.client,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    (out / "soak.json").write_text(json.dumps(result, indent=2))
    _print_report(report, wall)
    print(f"result: {out / 'soak.json'}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
