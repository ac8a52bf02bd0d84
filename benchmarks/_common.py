"""Plumbing shared by the benchmarks: the cluster, child processes, medians, result files.

Every contender runs in a child process of its own, started with ``subprocess.Popen`` and
reaped with ``os.wait4``, so the CPU time and the peak RSS reported are that child's alone
(``RUSAGE_CHILDREN`` would mix every child's ``ru_maxrss``). Children print one JSON object on
their last stdout line; the parent parses it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
CACHE_DIR = Path(os.environ.get("AIOZKCONSUMER_CACHE", Path.home() / ".cache" / "aiozkconsumer"))


# -- the cluster -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterInfo:
    """Where the benchmark's ZooKeeper and Kafka broker are.

    Attributes:
        zookeeper_connect: ZooKeeper's ``host:port``.
        bootstrap_servers: the brokers' plaintext listener (what loads the topics).
        client_properties: security mode (a key of :data:`SECURITY_MODES` other than
            ``plaintext``) -> the Java-client-style properties that reach the brokers over
            it (``bootstrap.servers`` of that listener, ``security.protocol``, ``ssl.*``,
            ``sasl.*``); empty unless secured modes were asked for.
        broker_pids: the brokers' process ids when they run on this machine (a LocalCluster
            started for the run, or ``--broker-pids``), for :func:`process_cpu_s`; empty
            otherwise.
    """

    zookeeper_connect: str
    bootstrap_servers: str
    client_properties: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    broker_pids: tuple[int, ...] = ()


def process_cpu_s(pids: Sequence[int]) -> float | None:
    """User + system CPU seconds the processes ``pids`` used so far (``/proc/<pid>/stat``),
    summed; None if there are none or one cannot be read (it ended, or not Linux)."""
    if not pids:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / ticks


def _broker_pids(text: str) -> tuple[int, ...]:
    """``--broker-pids``: comma-separated process ids (a clear exit on anything else)."""
    try:
        return tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise SystemExit(f"--broker-pids: process ids separated by commas, not {text!r}") from None


# Security modes of the benchmarks -> (LocalCluster listener, SASL mechanism).
SECURITY_MODES: Mapping[str, tuple[str, str | None]] = {
    "plaintext": ("PLAINTEXT", None),
    "ssl": ("SSL", None),
    "sasl_ssl": ("SASL_SSL", "SCRAM-SHA-512"),
}
# The keys a client properties file may hold (the consumer config's names, docs/security.md).
CLIENT_PROPERTY_KEYS = (
    "bootstrap.servers",
    "security.protocol",
    "ssl.cafile",
    "ssl.certfile",
    "ssl.keyfile",
    "ssl.endpoint.identification.algorithm",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
)


def add_security_args(parser: argparse.ArgumentParser) -> None:
    """``--security`` and ``--client-properties``: which listeners the contenders read over."""
    parser.add_argument(
        "--security",
        default="plaintext",
        help="comma-separated security modes every contender runs over: "
        f"{', '.join(SECURITY_MODES)} (sasl_ssl: SCRAM-SHA-512 over TLS); default plaintext",
    )
    parser.add_argument(
        "--client-properties",
        action="append",
        default=[],
        metavar="MODE=FILE",
        help="with --zookeeper/--bootstrap-server: a properties file per secured mode "
        "(e.g. ssl=ssl.properties) with bootstrap.servers of that listener and the "
        f"consumer config's security keys ({', '.join(CLIENT_PROPERTY_KEYS[1:])})",
    )


def security_modes(args: argparse.Namespace) -> list[str]:
    """The ``--security`` modes, checked; plaintext first when present.

    Raises:
        SystemExit: for an unknown mode or none at all.
    """
    modes = list(dict.fromkeys(x.strip().lower() for x in args.security.split(",") if x.strip()))
    wrong = [m for m in modes if m not in SECURITY_MODES]
    if wrong or not modes:
        raise SystemExit(
            f"--security: {', '.join(wrong) or 'nothing'} (choose from {', '.join(SECURITY_MODES)})"
        )
    return sorted(modes, key=list(SECURITY_MODES).index)


def read_client_properties(path: str | Path) -> dict[str, str]:
    """A client properties file (Java ``.properties`` syntax) with only known keys.

    Raises:
        SystemExit: if it holds a key outside :data:`CLIENT_PROPERTY_KEYS`.
    """
    from aiozkconsumer.tools.console import parse_properties

    props = parse_properties(Path(path).read_text())
    unknown = sorted(set(props) - set(CLIENT_PROPERTY_KEYS))
    if unknown:
        raise SystemExit(
            f"{path}: unsupported keys {', '.join(unknown)} "
            f"(the benchmarks read {', '.join(CLIENT_PROPERTY_KEYS)})"
        )
    return props


def write_client_properties(path: Path, props: Mapping[str, str]) -> None:
    """Write ``props`` as a properties file only its owner can read (it holds a password)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        for key, value in props.items():
            escaped = value.replace("\\", "\\\\")  # parse_properties unescapes backslashes
            f.write(f"{key}={escaped}\n")


def _existing_client_properties(
    args: argparse.Namespace, modes: Sequence[str]
) -> dict[str, Mapping[str, str]]:
    given: dict[str, Mapping[str, str]] = {}
    for item in getattr(args, "client_properties", None) or []:
        mode, sep, path = item.partition("=")
        mode = mode.strip().lower()
        if not sep or mode not in SECURITY_MODES or mode == "plaintext":
            raise SystemExit(
                f"--client-properties {item!r}: expected MODE=FILE with MODE one of "
                f"{', '.join(m for m in SECURITY_MODES if m != 'plaintext')}"
            )
        props = read_client_properties(path)
        if "bootstrap.servers" not in props or "security.protocol" not in props:
            raise SystemExit(f"{path}: bootstrap.servers and security.protocol are required")
        given[mode] = props
    missing = [m for m in modes if m != "plaintext" and m not in given]
    if missing:
        raise SystemExit(
            f"--security {','.join(modes)} on a running cluster needs --client-properties "
            f"for {', '.join(missing)}"
        )
    return {m: given[m] for m in modes if m != "plaintext"}


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    """``--zookeeper`` / ``--bootstrap-server``: use a running cluster instead of a new one."""
    parser.add_argument(
        "--zookeeper",
        help="ZooKeeper host:port of a running Kafka 3.9 ZooKeeper-mode cluster "
        "(default: start a LocalCluster for this run)",
    )
    parser.add_argument("--bootstrap-server", help="its Kafka broker(s), host:port[,...]")
    parser.add_argument(
        "--broker-pids",
        default="",
        help="with --zookeeper/--bootstrap-server: the brokers' process ids on this machine, "
        "comma-separated, to report the brokers' CPU per run (a LocalCluster's are known)",
    )


@contextlib.contextmanager
def cluster_from_args(
    args: argparse.Namespace,
    *,
    flavour: str = "zookeeper",
    broker_properties: Mapping[str, str] | None = None,
    security: Sequence[str] = (),
    broker_heap: str = "512m",
) -> Iterator[ClusterInfo]:
    """Yield the cluster named on the command line, or a LocalCluster started for the run.

    ``flavour``, ``broker_properties`` and ``broker_heap`` are the LocalCluster's
    (``"kraft"``: one Kafka 4.3 broker in KRaft mode, next to the ZooKeeper the consumer
    groups of ZooKeeper mode use); they do not apply to a cluster named on the command line.

    ``security``: the :data:`SECURITY_MODES` the run reads over. Any but ``plaintext`` starts
    the LocalCluster with secured listeners (the test kit's ``ClusterSecurity``, request log
    off: it would log every fetch) and fills :attr:`ClusterInfo.client_properties` from
    ``cluster.client_properties(listener, mechanism)``; a running cluster takes them from
    ``--client-properties MODE=FILE``. Topics are still loaded over the plaintext listener.
    """
    secured = [m for m in security if m != "plaintext"]
    if args.zookeeper or args.bootstrap_server:
        if not (args.zookeeper and args.bootstrap_server):
            raise SystemExit("--zookeeper and --bootstrap-server go together")
        props = _existing_client_properties(args, security) if secured else {}
        pids = _broker_pids(getattr(args, "broker_pids", "") or "")
        yield ClusterInfo(args.zookeeper, args.bootstrap_server, props, pids)
        return
    from aiozkconsumer.testing import LocalCluster

    kafka = "Kafka 4.3 broker (KRaft)" if flavour == "kraft" else "Kafka 3.9 broker"
    cluster_security = None
    if secured:
        from aiozkconsumer.testing.security import ClusterSecurity

        cluster_security = ClusterSecurity(request_log=False)
        kafka += " with SSL and SASL_SSL listeners"
    say(f"starting a LocalCluster (ZooKeeper + one {kafka}) ...")
    cluster = LocalCluster(
        flavour=flavour,
        broker_properties=broker_properties,
        security=cluster_security,
        broker_heap=broker_heap,
    )
    asyncio.run(cluster.start())
    try:
        say(f"cluster up: ZooKeeper {cluster.zookeeper_connect}, Kafka {cluster.bootstrap_servers}")
        props = {m: cluster.client_properties(*SECURITY_MODES[m]) for m in secured}
        for mode, p in props.items():
            say(f"  {mode}: {p['bootstrap.servers']} ({p['security.protocol']})")
        pids = tuple(pid for name, pid in cluster.pids.items() if name.startswith("broker-"))
        yield ClusterInfo(cluster.zookeeper_connect, cluster.bootstrap_servers, props, pids)
    finally:
        asyncio.run(cluster.stop())


async def _ensure_topic(
    info: ClusterInfo, topic: str, partitions: int, records: int, value_size: int
) -> int:
    """Create ``topic`` and fill it with ``records`` values of ``value_size`` bytes (no key),
    spread evenly over the partitions, unless it already holds that many. Returns the count."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from aiozkconsumer.cli.demo import ExistingCluster

    cluster = ExistingCluster(info.zookeeper_connect, info.bootstrap_servers)
    admin = AIOKafkaAdminClient(bootstrap_servers=info.bootstrap_servers)
    await admin.start()
    try:
        exists = topic in await admin.list_topics()
        if not exists:
            await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    have = sum((await cluster.log_end_offsets(topic)).values())
    if have == records:
        return have
    if have > 0:
        raise SystemExit(f"topic {topic} exists with {have} records, expected {records}")
    value = (b"v" * value_size)[:value_size]
    per_round = max(partitions, 200_000 * 100 // max(value_size, 1))
    produced = 0
    t0 = time.monotonic()
    while produced < records:
        n = min(per_round, records - produced)
        by_partition: dict[int, list[tuple[bytes | None, bytes]]] = {
            p: [(None, value)] * (n // partitions + (1 if p < n % partitions else 0))
            for p in range(partitions)
        }
        produced += await cluster.produce_to_partitions(topic, by_partition)
    say(f"produced {produced:,} x {value_size} B into {topic} in {time.monotonic() - t0:.1f} s")
    return produced


def ensure_topic(
    info: ClusterInfo, topic: str, partitions: int, records: int, value_size: int
) -> int:
    """Synchronous ``_ensure_topic``."""
    return asyncio.run(_ensure_topic(info, topic, partitions, records, value_size))


# -- child processes -------------------------------------------------------------------------


@dataclass
class ChildResult:
    """What a child process did and cost.

    Attributes:
        returncode: its exit code (negative: killed by that signal).
        wall_s: wall-clock seconds from spawn to exit.
        user_s, sys_s: its CPU seconds (``wait4``).
        maxrss_mb: its peak resident set size, MiB (``VmHWM`` followed while it runs;
            ``ru_maxrss`` where there is no ``/proc``).
        report: the JSON object on its last stdout line (``{}`` if none).
        stderr_tail: the end of its stderr.
        timed_out: it was killed for running past the time limit.
    """

    returncode: int
    wall_s: float
    user_s: float
    sys_s: float
    maxrss_mb: float
    report: dict[str, Any] = field(default_factory=dict)
    stderr_tail: str = ""
    stdout: str = ""
    timed_out: bool = False

    @property
    def cpu_s(self) -> float:
        """User + system CPU seconds of the whole process."""
        return self.user_s + self.sys_s

    @property
    def ok(self) -> bool:
        """Exited 0 in time with a report."""
        return self.returncode == 0 and not self.timed_out and bool(self.report)


TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)


def proc_rss_mib(pid: int, key: str = "VmRSS") -> float:
    """Resident set size of process ``pid``, MiB: now (``VmRSS``), or its peak since its
    ``exec`` (``VmHWM``). Not ``wait4``'s ``ru_maxrss``: Linux carries the parent's peak
    over a (v)fork and exec into it, so a child's figure never falls below its parent's."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # gone (or no /proc)
        return float("nan")
    for line in text.splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class _PeakRss:
    """Follows a child's ``VmHWM`` (its peak RSS since its ``exec``) every ``every_s`` until
    :meth:`stop`; ``mib`` is the last reading (NaN if none: no ``/proc``). ``wait4``'s
    ``ru_maxrss`` cannot serve: Linux carries the parent's peak into a child it forks and
    execs, so the child's figure never falls below the benchmark runner's own."""

    def __init__(self, pid: int, every_s: float = 0.05) -> None:
        self.mib = float("nan")
        self._pid = pid
        self._every_s = every_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        while True:
            now = proc_rss_mib(self._pid, "VmHWM")
            if now == now:  # not NaN: a zombie has no VmHWM line; keep the last reading
                self.mib = max(now, self.mib) if self.mib == self.mib else now
            if self._done.wait(self._every_s):
                return

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def run_child(
    cmd: Sequence[str], *, timeout_s: float, env: Mapping[str, str] | None = None
) -> ChildResult:
    """Run ``cmd`` to completion and return its own CPU time, peak RSS and JSON report."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            list(cmd), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=dict(env or os.environ)
        )
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        peak = _PeakRss(proc.pid)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
            peak.stop()
        wall = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    report: dict[str, Any] = {}
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                report = json.loads(line)
                break
    return ChildResult(
        returncode=proc.returncode,
        wall_s=wall,
        user_s=usage.ru_utime,
        sys_s=usage.ru_stime,
        maxrss_mb=peak.mib if peak.mib == peak.mib else usage.ru_maxrss / 1024,
        report=report,
        stderr_tail=stderr[-3000:],
        stdout=stdout,
        timed_out=killed.is_set(),
    )


def this_python() -> str:
    """The interpreter running the benchmarks (the project's virtualenv)."""
    return sys.executable


# -- reporting -------------------------------------------------------------------------------


def say(text: str) -> None:
    """Progress to stderr (stdout carries children's JSON reports)."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def median(values: Sequence[float]) -> float:
    """Median, or NaN for no values."""
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, int(-(-q * len(ordered) // 100)))
    return ordered[min(rank, len(ordered)) - 1]


def uptime() -> str:
    """``uptime``'s line (load averages over 1, 5, 15 minutes)."""
    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        one, five, fifteen = os.getloadavg()
        return f"load average: {one:.2f}, {five:.2f}, {fifteen:.2f}"


def java_processes() -> int:
    """How many java processes run on the machine (other agents' clusters included)."""
    count = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
                    count += 1
    return count


def machine() -> dict[str, Any]:
    """A description of the machine and its load right now."""
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "uptime": uptime(),
        "loadavg": os.getloadavg(),
        "java_processes": java_processes(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def versions(*dists: str) -> dict[str, str]:
    """Installed versions of these distributions (``-`` if missing)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for dist in dists:
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = "-"
    return found


def md_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table."""

    def cell(v: object) -> str:
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(value: float | None, digits: int = 0) -> str:
    """A number with thousands separators, ``-`` for None/NaN."""
    if value is None or value != value:
        return "-"
    return f"{value:,.{digits}f}"


def write_results(out_dir: Path, name: str, data: Mapping[str, Any], markdown: str) -> None:
    """Write ``<name>.json`` and ``<name>.md`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    (out_dir / f"{name}.md").write_text(markdown.rstrip() + "\n")
    say(f"wrote {out_dir / (name + '.json')} and {name}.md")


def emit(report: Mapping[str, Any]) -> None:
    """Print a child's report: one JSON object on its own (last) stdout line."""
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()


def cpu_now() -> float:
    """User + system CPU seconds of this process (all threads) so far."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime
