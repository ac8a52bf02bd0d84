"""Run every aiozkconsumer benchmark against one local cluster and collect the results.

Starts one ``LocalCluster`` (ZooKeeper + one Kafka 3.9 broker in ZooKeeper mode) unless
``--zookeeper``/``--bootstrap-server`` name a running one, then runs, each in processes of its
own: ``throughput.py``, ``rebalance.py``, ``memory.py`` and ``profile_consume.py`` (py-spy on
the aiozkconsumer consume paths); ``--only ...,scale`` adds ``scale.py`` (the cost curves: hours
at full size, so not run by default; on this script's Kafka 3.9 cluster it leaves out the
consumer-protocol mode). Each writes ``<name>.json`` and ``<name>.md`` into
``--out-dir`` (default ``benchmarks/results/``); this script adds ``summary.md`` (all tables,
with the machine's load) and ``summary.json``.

Usage::

    .venv/bin/python benchmarks/run_all.py            # full size (about an hour on 2 cores)
    .venv/bin/python benchmarks/run_all.py --quick    # smoke size (a few minutes)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS_DIR, add_cluster_args, cluster_from_args, machine, say, this_python

HERE = Path(__file__).resolve().parent
BENCHMARKS = ("throughput", "rebalance", "memory", "profile", "scale")
# scale.py's full grid takes hours: run when asked for (--only).
DEFAULT = ("throughput", "rebalance", "memory", "profile")


def demote(markdown: str) -> str:
    """One more ``#`` on every heading, so each file's title nests under the summary's."""
    return "\n".join("#" + line if line.startswith("#") else line for line in markdown.splitlines())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="smoke-size runs of everything")
    parser.add_argument(
        "--only",
        default=",".join(DEFAULT),
        help="comma-separated subset of "
        + ", ".join(BENCHMARKS)
        + f" (default: {', '.join(DEFAULT)})",
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    add_cluster_args(parser)
    args = parser.parse_args(argv)
    only = [b for b in args.only.split(",") if b]
    unknown = set(only) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmarks: {', '.join(sorted(unknown))}")
    started = machine()
    failed = []
    timings = {}
    with cluster_from_args(args) as info:
        common = [
            "--zookeeper",
            info.zookeeper_connect,
            "--bootstrap-server",
            info.bootstrap_servers,
            "--out-dir",
            str(args.out_dir),
        ]
        quick = ["--quick"] if args.quick else []
        small = 200_000 if args.quick else 2_000_000
        for name in only:
            if name == "profile":
                cmds = [
                    [
                        this_python(),
                        str(HERE / "profile_consume.py"),
                        "--contender",
                        contender,
                        "--topic",
                        f"bench-tp-100B-{small}-8",
                        "--records",
                        str(small),
                        *common,
                    ]
                    for contender in ("azk-iter-1", "azk-batch", "aiokafka-iter")
                ]
            else:
                cmds = [[this_python(), str(HERE / f"{name}.py"), *quick, *common]]
            t0 = time.monotonic()
            for cmd in cmds:
                say(f"== {name}: {' '.join(cmd[1:3])}")
                if subprocess.run(cmd, check=False).returncode != 0:
                    failed.append(name)
            timings[name] = time.monotonic() - t0
    finished = machine()
    parts = [
        "# aiozkconsumer benchmarks",
        "",
        f"Run {'(quick) ' if args.quick else ''}from {started['time']} to {finished['time']} on "
        f"{started['cpus']} CPUs ({started['cpu_model']}), Python {started['python']}.",
        f"Load at start: `{started['uptime']}` ({started['java_processes']} java processes); "
        f"at the end: `{finished['uptime']}` ({finished['java_processes']} java processes).",
        "",
    ]
    for name in ("throughput", "rebalance", "memory", "scale"):
        md = args.out_dir / f"{name}.md"
        if name in only and md.exists():
            parts += [demote(md.read_text()), ""]
    for contender in ("azk-iter-1", "azk-batch", "aiokafka-iter"):
        md = args.out_dir / f"profile-{contender}.md"
        if "profile" in only and md.exists():
            parts += [demote(md.read_text()), ""]
    if failed:
        parts.append(f"FAILED: {', '.join(failed)}")
    (args.out_dir / "summary.md").write_text("\n".join(parts))
    (args.out_dir / "summary.json").write_text(
        json.dumps(
            {
                "quick": args.quick,
                "machine_start": started,
                "machine_end": finished,
                "seconds": timings,
                "failed": failed,
            },
            indent=2,
        )
        + "\n"
    )
    say(f"wrote {args.out_dir / 'summary.md'}" + (f"; FAILED: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
