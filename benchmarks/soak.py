"""Soak: a long chaos run (30 minutes or more) against a local cluster, then the history check.

The same runner as the CI chaos test (:func:`aiozkconsumer.testing.chaos.run_chaos`), for
longer: verifiable consumer processes, each through its own proxied link, consume a topic
that keeps receiving records while a fault is injected every ~2 s (consumer kills and pauses,
real session expiry, ZooKeeper and broker restarts, link cuts); then everything is healed,
the group finishes, and the history is checked.

Usage::

    .venv/bin/python benchmarks/soak.py --duration-s 1800 --seed 7 --records-per-s 500

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

from aiozkconsumer.testing import ChaosReport, LocalCluster, run_chaos

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
    parser.add_argument("--flavour", choices=("zookeeper", "kraft"), default="zookeeper")
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
    print(f"events, schedule and fault log: {report.events_dir}")


async def _soak(args: argparse.Namespace, seed: int, out: Path) -> ChaosReport:
    records = int(args.records_per_s * args.duration_s)
    async with LocalCluster(
        proxy_links=args.consumers,
        zk_tick_time_ms=args.zk_tick_ms,
        flavour=args.flavour,
        keep_work_dir=True,
        work_dir=out / "cluster",
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
            finish_timeout_s=300.0,
            on_progress=lambda text: print(text, flush=True),
        )


def main(argv: list[str] | None = None) -> int:
    """Run the soak; 0 if the history is clean, 1 if not."""
    args = _parser().parse_args(argv)
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
    print(f"soak: seed {seed}, fault phase {args.duration_s:g} s, output in {out}", flush=True)
    began = time.monotonic()
    report = asyncio.run(_soak(args, seed, out))
    wall = time.monotonic() - began
    result = {
        **report.to_json(),
        "wall_s": round(wall, 1),
        "records_per_s": args.records_per_s,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    (out / "soak.json").write_text(json.dumps(result, indent=2))
    _print_report(report, wall)
    print(f"result: {out / 'soak.json'}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
