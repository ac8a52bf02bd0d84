"""Cost curves: how rebalance latency, idle cost and throughput grow with members and partitions.

Three curves (``--curves``), each a grid of points rather than one point:

- ``rebalance``: rebalance p50/p99 after a join or leave for every members x partitions of
  ``--members`` x ``--partitions`` (default 2, 8, 32, 64 x 64, 1024, 4096), in each of
  ``--modes``: ``zookeeper`` (a ZooKeeper-coordinated group), ``classic`` (``group.coordinator=
  kafka``, the classic protocol: eager, range) and ``consumer`` (``group.protocol=consumer``,
  KIP-848). Each point is one run of ``rebalance.py`` (``--configs MxP --modes M``, its JSON
  result read back), against one Kafka 4.3 broker (KRaft) with a standalone ZooKeeper next to
  it for the ZooKeeper-coordinated groups.
- ``idle``: idle CPU (% of one core) and RSS of one member process owning every partition of
  an empty topic of ``--idle-partitions`` (default 1, 100, 1,000, 10,000) partitions, over a
  window after it settled; for aiozkconsumer in both coordinations, a plain aiokafka consumer
  and a confluent-kafka consumer (``_scale_idle``). RSS growth per owned partition is the
  slope of a least-squares line.
- ``throughput``: steady records/s of 1 KiB records with ``--throughput-partitions`` (default
  1, 8, 64, 512) partitions; each point is one run of ``throughput.py`` (``--partitions P``,
  the 1 KiB dataset only) with aiozkconsumer, aiokafka and confluent-kafka contenders.

Start-up (imports, spawn to ready, first record) is reported apart from the steady-state
figures. Writes ``<name>.json`` (every point, settings, load), ``<name>.md`` (the tables, also
printed on stdout) and ``<name>-<curve>.png`` into ``--out-dir``; the tools' own result files
go to ``<out-dir>/<name>-raw/``. Progress goes to stderr. Ctrl-C (or SIGTERM) stops the running
point's processes and the cluster, then writes what was measured.

Without ``--zookeeper``/``--bootstrap-server`` the idle and throughput curves run on a
LocalCluster with a Kafka 3.9 broker in ZooKeeper mode (``throughput.py``'s ZooKeeper-mode
contenders find the broker in ``/brokers``), then the rebalance curve on a Kafka 4.3 KRaft
LocalCluster (the ``consumer`` protocol): one cluster at a time. A running cluster
(``--kafka`` says its version) serves every curve it can: on 3.9 the ``consumer`` mode is left
out, on 4.3 the throughput curve.

Usage::

    .venv/bin/python benchmarks/scale.py --quick
    .venv/bin/python benchmarks/scale.py                      # the full grid (hours)
    .venv/bin/python benchmarks/scale.py --curves idle --idle-partitions 1,100,1000
    .venv/bin/python benchmarks/scale.py plot benchmarks/results/scale.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    RESULTS_DIR,
    ClusterInfo,
    add_cluster_args,
    cluster_from_args,
    machine,
    say,
    this_python,
    uptime,
    versions,
    write_results,
)
from _scale_idle import create_empty_topic, delete_topic, idle_member_main, kill_group, measure_idle
from _scale_report import (
    CURVES,
    FULL,
    IDLE_CLIENTS,
    QUICK,
    REBALANCE_MODES,
    THROUGHPUT_CONTENDERS,
    choose,
    int_list,
    markdown,
    members_per_process,
    rebalance_mode,
    rebalance_point,
    throughput_points,
)

HERE = Path(__file__).resolve().parent
REBALANCE_HEARTBEAT_MS = 1000  # rebalance.py's --consumer-heartbeat-ms default, on our broker


def build_parser() -> argparse.ArgumentParser:
    """The command line; ``idle-member`` and ``plot`` are subcommands."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command")
    m = sub.add_parser("idle-member", help="(internal) one idle member of the idle curve")
    m.add_argument("--client", choices=IDLE_CLIENTS, required=True)
    m.add_argument("--topic", required=True)
    m.add_argument("--partitions", type=int, required=True)
    m.add_argument("--zookeeper", required=True)
    m.add_argument("--bootstrap-server", required=True)
    m.add_argument("--kafka", choices=("3.9", "4.3"), default="3.9")
    p = sub.add_parser("plot", help="redraw the PNGs from a result file")
    p.add_argument("result", type=Path, help="a scale.json")

    parser.add_argument(
        "--curves",
        default=",".join(CURVES),
        help=f"comma-separated subset of {', '.join(CURVES)} (default: all)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke grid: members 2,8 x partitions 64, idle 1,100, throughput 1,8; 4 events "
        "per rebalance point, a 5 s settle and 10 s idle window, 20,000 records once",
    )
    g = parser.add_argument_group("rebalance curve")
    g.add_argument(
        "--members", help="comma-separated member counts (default 2,8,32,64; --quick 2,8)"
    )
    g.add_argument(
        "--partitions",
        help="comma-separated partition counts (default 64,1024,4096; --quick 64)",
    )
    g.add_argument(
        "--modes",
        default=",".join(REBALANCE_MODES),
        help="comma-separated: zookeeper (ZooKeeper-coordinated), classic (Kafka classic "
        "protocol, eager range), consumer (KIP-848, Kafka 4.x); rebalance.py's own mode names "
        "(e.g. azk-kafka-coop) are taken too (default: zookeeper,classic,consumer)",
    )
    g.add_argument(
        "--events",
        type=int,
        help="alternating leave/join events per point (default 10; --quick 4); p99 is "
        "nearest-rank: below 100 events, the slowest",
    )
    g.add_argument(
        "--settle-timeout",
        type=float,
        default=60.0,
        help="rebalance.py's seconds per event (the first settle gets 3x; default 60)",
    )
    g.add_argument(
        "--tick-ms",
        type=int,
        default=100,
        help="rebalance.py's producer: a record to every partition every N ms (default 100)",
    )
    g.add_argument(
        "--members-per-process",
        type=int,
        default=0,
        help="members per member process (default 0: 1 for 2 members, 2 for 8, then "
        "members/8, at least 4: at most 8 processes)",
    )
    g = parser.add_argument_group("idle curve")
    g.add_argument(
        "--idle-partitions",
        help="comma-separated owned partition counts (default 1,100,1000,10000; --quick 1,100)",
    )
    g.add_argument(
        "--idle-clients",
        default=",".join(IDLE_CLIENTS),
        help="comma-separated subset of " + ", ".join(IDLE_CLIENTS) + " (default: all)",
    )
    g.add_argument(
        "--idle-settle-s",
        type=float,
        help="seconds after owning every partition before the window (default 10; --quick 5)",
    )
    g.add_argument(
        "--idle-window-s",
        type=float,
        help="the measured window, seconds (default 30; --quick 10)",
    )
    g = parser.add_argument_group("throughput curve")
    g.add_argument(
        "--throughput-partitions",
        help="comma-separated partition counts (default 1,8,64,512; --quick 1,8)",
    )
    g.add_argument(
        "--throughput-contenders",
        default=",".join(THROUGHPUT_CONTENDERS),
        help="throughput.py contenders (default: " + ", ".join(THROUGHPUT_CONTENDERS) + ")",
    )
    g.add_argument(
        "--throughput-records",
        type=int,
        help="1 KiB records per topic (default 200,000; --quick 20,000)",
    )
    g.add_argument(
        "--throughput-repeats", type=int, help="rounds, median reported (default 3; --quick 1)"
    )
    parser.add_argument(
        "--kafka",
        choices=("3.9", "4.3"),
        default="3.9",
        help="with --zookeeper/--bootstrap-server: that cluster's broker version (3.9: "
        "ZooKeeper mode, no consumer-protocol mode; 4.3: KRaft, no throughput curve)",
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--name", default="scale", help="result file stem (default scale)")
    add_cluster_args(parser)
    return parser


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """The grids and sizes: the options given, else ``--quick``'s or the full ones.

    Raises:
        ValueError: for a malformed list or an unknown curve, mode or client.
    """
    grid = QUICK if args.quick else FULL

    def ints(given: str | None, key: str) -> list[int]:
        return list(int_list(given) if given else grid[key])

    def pick(given: float | None, quick: float, full: float) -> Any:
        return given if given is not None else quick if args.quick else full

    known_modes = (*REBALANCE_MODES, *REBALANCE_MODES.values(), "azk-kafka-coop", "original")
    return {
        "quick": args.quick,
        "curves": list(choose(args.curves, CURVES, "--curves")),
        "members": ints(args.members, "members"),
        "partitions": ints(args.partitions, "partitions"),
        "modes": list(choose(args.modes, known_modes, "--modes")),
        "events": pick(args.events, 4, 10),
        "settle_timeout_s": args.settle_timeout,
        "tick_ms": args.tick_ms,
        "members_per_process": args.members_per_process,
        "rebalance_heartbeat_ms": REBALANCE_HEARTBEAT_MS,
        "idle_partitions": ints(args.idle_partitions, "idle"),
        "idle_clients": list(choose(args.idle_clients, IDLE_CLIENTS, "--idle-clients")),
        "idle_settle_s": pick(args.idle_settle_s, 5.0, 10.0),
        "idle_window_s": pick(args.idle_window_s, 10.0, 30.0),
        "throughput_partitions": ints(args.throughput_partitions, "throughput"),
        "throughput_contenders": [x for x in args.throughput_contenders.split(",") if x],
        "throughput_records": pick(args.throughput_records, 20_000, 200_000),
        "throughput_repeats": pick(args.throughput_repeats, 1, 3),
    }


# -- child tools, stopped with their process group ------------------------------------------


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_tool(cmd: list[str], timeout_s: float) -> int | None:
    """Run a benchmark script in a session of its own (a Ctrl-C at the terminal reaches this
    process only), its stdout and stderr onto our stderr (progress). On timeout or interrupt
    the tool gets SIGINT (its own teardown stops its members, producer or contender), then,
    20 s later, whatever is left of its process group SIGKILL. Returns the exit code, ``None``
    after a timeout.

    Raises:
        KeyboardInterrupt: after stopping the tool, if this process was interrupted.
    """
    proc = subprocess.Popen(cmd, stdout=sys.stderr, start_new_session=True)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        say(f"  timed out after {timeout_s:.0f} s: stopping {' '.join(cmd[1:4])}")
        _stop_group(proc)
        return None
    except BaseException:
        say(f"  interrupted: stopping {' '.join(cmd[1:4])} and its processes")
        _stop_group(proc)
        raise


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    kill_group(proc.pid, signal.SIGKILL)  # what is left of the group (members, producer)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


class Progress:
    """``[curve i/n]`` progress lines with an estimate of the time left in that curve."""

    def __init__(self, curve: str, total: int) -> None:
        self.curve, self.total, self.done, self.t0 = curve, total, 0, time.monotonic()

    def start(self, what: str) -> None:
        left = ""
        if self.done:
            per = (time.monotonic() - self.t0) / self.done
            left = f", about {per * (self.total - self.done) / 60:.0f} min left in this curve"
        say(f"[{self.curve} {self.done + 1}/{self.total}] {what}{left}")

    def finish(self) -> None:
        self.done += 1


# -- the curves -------------------------------------------------------------------------------


def rebalance_curve(
    info: ClusterInfo,
    s: dict[str, Any],
    args: argparse.Namespace,
    raw: Path,
    kafka: str,
    points: list[dict[str, Any]],
    save: Any,
) -> None:
    """Run ``rebalance.py`` once per (members, partitions, mode), appending each point."""
    modes = [m for m in s["modes"] if kafka == "4.3" or rebalance_mode(m) != "azk-consumer"]
    grid = [(m, p, mode) for m in s["members"] for p in s["partitions"] for mode in modes]
    progress = Progress("rebalance", len(grid))
    for members, partitions, mode in grid:
        progress.start(f"{mode}: {members} members x {partitions} partitions, {s['events']} events")
        stem = f"{args.name}-rebalance-{mode}-{members}x{partitions}"
        per_proc = s["members_per_process"] or members_per_process(members)
        cmd = [
            this_python(),
            str(HERE / "rebalance.py"),
            "--kafka",
            kafka,
            "--configs",
            f"{members}x{partitions}",
            "--modes",
            rebalance_mode(mode),
            "--events",
            str(s["events"]),
            "--settle-timeout",
            str(s["settle_timeout_s"]),
            "--tick-ms",
            str(s["tick_ms"]),
            "--members-per-process",
            str(per_proc),
            "--out-dir",
            str(raw),
            "--name",
            stem,
            "--zookeeper",
            info.zookeeper_connect,
            "--bootstrap-server",
            info.bootstrap_servers,
        ]
        result = raw / f"{stem}.json"
        result.unlink(missing_ok=True)
        timeout = 300 + 3 * s["settle_timeout_s"] + s["events"] * (s["settle_timeout_s"] + 15)
        rc = run_tool(cmd, timeout)
        if rc == 0 and result.exists():
            config = json.loads(result.read_text())["configs"][0]
            point = rebalance_point(mode, config)
        else:
            point = {
                "mode": mode,
                "members": members,
                "partitions": partitions,
                "ok": False,
                "events": s["events"],
                "settled": 0,
                "error": "timed out" if rc is None else f"rebalance.py exited {rc}",
                **dict.fromkeys(
                    (
                        "p50_ms",
                        "p99_ms",
                        "max_ms",
                        "unmoved_gap_p50_ms",
                        "baseline_gap_ms",
                        "process_ready_max_s",
                    ),
                ),
                "double_ownership": 0,
            }
        point["members_per_process"] = per_proc
        points.append(point)
        say(
            f"  {mode} {members}x{partitions}: p50 {point['p50_ms'] or float('nan'):,.0f} ms, "
            f"p99 {point['p99_ms'] or float('nan'):,.0f} ms, settled {point['settled']}/"
            f"{point['events']}; load {os.getloadavg()[0]:.1f}"
        )
        progress.finish()
        save()


def idle_curve(
    info: ClusterInfo, s: dict[str, Any], kafka: str, points: list[dict[str, Any]], save: Any
) -> None:
    """One topic per partition count, each client in turn (the order rotating per count)."""
    clients = s["idle_clients"]
    progress = Progress("idle", len(s["idle_partitions"]) * len(clients))
    for i, partitions in enumerate(s["idle_partitions"]):
        topic = f"scale-idle-{partitions}-{uuid.uuid4().hex[:6]}"
        say(f"creating {topic} ({partitions} partitions, empty)")
        t0 = time.monotonic()
        create_empty_topic(info, topic, partitions)
        say(f"  created in {time.monotonic() - t0:.1f} s")
        try:
            for client in clients[i % len(clients) :] + clients[: i % len(clients)]:
                progress.start(f"{client} owning {partitions} partitions")
                point = measure_idle(
                    info,
                    client,
                    topic,
                    partitions,
                    kafka=kafka,
                    settle_s=s["idle_settle_s"],
                    window_s=s["idle_window_s"],
                    ready_timeout_s=300 + partitions / 20,
                )
                point["load_after"] = uptime()
                points.append(point)
                if point["ok"]:
                    say(
                        f"  {client} {partitions}: idle CPU {point['cpu_pct']:.2f}% of a core, "
                        f"RSS {point['rss_mib']:.1f} MiB; start-up {point['ready_s']:.1f} s"
                    )
                progress.finish()
                save()
        finally:
            delete_topic(info, topic)


def throughput_curve(
    info: ClusterInfo,
    s: dict[str, Any],
    args: argparse.Namespace,
    raw: Path,
    points: list[dict[str, Any]],
    save: Any,
) -> None:
    """Run ``throughput.py`` once per partition count (the 1 KiB dataset only)."""
    progress = Progress("throughput", len(s["throughput_partitions"]))
    contenders = s["throughput_contenders"]
    for partitions in s["throughput_partitions"]:
        progress.start(f"{partitions} partitions: {', '.join(contenders)}")
        stem = f"{args.name}-throughput-p{partitions}"
        cmd = [
            this_python(),
            str(HERE / "throughput.py"),
            "--partitions",
            str(partitions),
            "--small-records",
            "0",
            "--huge-records",
            "0",
            "--large-records",
            str(s["throughput_records"]),
            "--repeats",
            str(s["throughput_repeats"]),
            "--contenders",
            ",".join(contenders),
            "--out-dir",
            str(raw),
            "--name",
            stem,
            "--zookeeper",
            info.zookeeper_connect,
            "--bootstrap-server",
            info.bootstrap_servers,
        ]
        result = raw / f"{stem}.json"
        result.unlink(missing_ok=True)
        runs = len(contenders) * s["throughput_repeats"] + 1
        rc = run_tool(cmd, 600 + runs * max(120, s["throughput_records"] / 2_000))
        if rc == 0 and result.exists():
            got = throughput_points(partitions, json.loads(result.read_text()))
        else:
            got = [
                {"contender": c, "partitions": partitions, "ok": False, "error": f"rc {rc}"}
                for c in contenders
            ]
        for point in got:
            points.append(point)
            if point["ok"]:
                say(
                    f"  {point['contender']} {partitions}: steady "
                    f"{point['steady_records_per_s'] or 0:,.0f} rec/s"
                )
        progress.finish()
        save()


# -- the run ----------------------------------------------------------------------------------


SCALE_BROKER_HEAP = "1g"
"""The LocalCluster broker's heap for every curve (the test kit's default is 512m).

With 10,000 partitions and one idle consumer a Kafka 3.9 broker's heap held 400 to 500 MB;
the next point's member (a fetch session over 10,000 partitions, the last point's topic still
being deleted) left a 512m broker no heap: it stopped answering (it had to be killed), and
every later point was lost. 1g is Kafka's own default (``kafka-server-start.sh``); the rebalance
curve's 4,096 partitions and 64 members get it too.
"""

IDLE_BROKER_PROPERTIES = {"fetch.purgatory.purge.interval.requests": "100"}
"""The Kafka 3.9 LocalCluster's broker settings for the idle and throughput curves.

An idle long poll the broker completes on its timeout stays in the broker's fetch purgatory,
one entry per partition of the fetch, until the next purge, which runs once more than
``fetch.purgatory.purge.interval.requests`` (default 1,000) fetches completed that way. At
10,000 partitions a fetch that is about 1.5 MB of broker heap, so the default lets completed
fetches fill the LocalCluster broker's 512 MiB heap (``OutOfMemoryError``) after about 100
idle fetches: 10 to 20 s of ours (``fetch.wait.max.ms`` 100), 50 s of librdkafka's (500). A purge
every 100 keeps it near 150 MB. The setting changes no client's cost: it is how often the
broker cleans its watch lists.
"""


@contextlib.contextmanager
def cluster_for(
    args: argparse.Namespace, kraft: bool, s: dict[str, Any]
) -> Iterator[tuple[ClusterInfo, str]]:
    """The running cluster named on the command line (and its ``--kafka``), or a
    LocalCluster: Kafka 4.3 KRaft (with the consumer-protocol heartbeat the rebalance curve
    uses) when ``kraft``, else Kafka 3.9 in ZooKeeper mode; stopped on the way out."""
    if args.zookeeper or args.bootstrap_server:
        with cluster_from_args(args) as info:
            yield info, args.kafka
        return
    if kraft:
        hb = s["rebalance_heartbeat_ms"]
        props = {
            "group.consumer.heartbeat.interval.ms": str(hb),
            "group.consumer.min.heartbeat.interval.ms": str(min(hb, 5000)),
        }
        with cluster_from_args(
            args, flavour="kraft", broker_properties=props, broker_heap=SCALE_BROKER_HEAP
        ) as info:
            yield info, "4.3"
    else:
        with cluster_from_args(
            args, broker_properties=IDLE_BROKER_PROPERTIES, broker_heap=SCALE_BROKER_HEAP
        ) as info:
            yield info, "3.9"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "idle-member":
        idle_member_main(args)
        return 0
    if args.command == "plot":
        from _scale_plots import plot_all

        saved = json.loads(args.result.read_text())
        for path in plot_all(saved, args.result.parent, args.result.stem):
            say(f"wrote {path}")
        return 0
    try:
        s = settings_of(args)
    except ValueError as exc:
        parser.error(str(exc))
    # Ctrl-C and SIGTERM stop the run cleanly, even when started in the background by a
    # shell that set SIGINT to be ignored (its children then get the default back at exec).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    raw = args.out_dir / f"{args.name}-raw"
    raw.mkdir(parents=True, exist_ok=True)
    running = bool(args.zookeeper or args.bootstrap_server)
    notes: list[str] = []
    data: dict[str, Any] = {
        "benchmark": "scale",
        "settings": s,
        "command": " ".join(sys.argv),
        "machine_before": machine(),
        "versions": versions("aiozkconsumer", "aiokafka", "aiozk", "confluent-kafka", "matplotlib"),
        "notes": notes,
        "curves": {c: [] for c in s["curves"]},
        "seconds": {},
    }

    def save() -> None:
        data["machine_after"] = machine()
        args.out_dir.mkdir(parents=True, exist_ok=True)
        (args.out_dir / f"{args.name}.json").write_text(
            json.dumps(data, indent=2, default=str) + "\n"
        )

    curves = s["curves"]
    on_zk = [c for c in curves if c in ("idle", "throughput")]
    if running and args.kafka == "4.3" and "throughput" in on_zk:
        on_zk.remove("throughput")
        notes.append("throughput curve left out: it needs a Kafka 3.9 ZooKeeper-mode cluster")
    if running and args.kafka == "3.9" and "rebalance" in curves:
        if any(rebalance_mode(m) == "azk-consumer" for m in s["modes"]):
            notes.append("consumer mode left out: the cluster is Kafka 3.9 (no KIP-848)")
    say(f"scale: curves {', '.join(curves)}; load {os.getloadavg()[0]:.1f}")
    interrupted = False
    try:
        if on_zk:
            with cluster_for(args, kraft=False, s=s) as (info, kafka):
                data["settings"]["idle_kafka"] = kafka
                for curve in on_zk:
                    t0 = time.monotonic()
                    if curve == "idle":
                        idle_curve(info, s, kafka, data["curves"]["idle"], save)
                    else:
                        throughput_curve(info, s, args, raw, data["curves"]["throughput"], save)
                    data["seconds"][curve] = time.monotonic() - t0
        if "rebalance" in curves:
            with cluster_for(args, kraft=True, s=s) as (info, kafka):
                data["settings"]["rebalance_kafka"] = kafka
                t0 = time.monotonic()
                rebalance_curve(info, s, args, raw, kafka, data["curves"]["rebalance"], save)
                data["seconds"]["rebalance"] = time.monotonic() - t0
    except KeyboardInterrupt:
        interrupted = True
        notes.append("interrupted: the curves are partial")
        say("interrupted: the cluster is stopped; writing what was measured")
    data["curves"] = {c: pts for c, pts in data["curves"].items() if pts}
    data["machine_after"] = machine()
    text = markdown(data)
    write_results(args.out_dir, args.name, data, text)
    from _scale_plots import plot_all

    try:
        for path in plot_all(data, args.out_dir, args.name):
            say(f"wrote {path}")
    except ImportError as exc:
        say(
            f"no plots: {exc} (install the bench extra: pip install -e '.[bench]'); "
            f"draw them later with: scale.py plot {args.out_dir / (args.name + '.json')}"
        )
    sys.stdout.write(text)
    sys.stdout.flush()
    return 130 if interrupted else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
