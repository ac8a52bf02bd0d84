"""Where a consumer's time goes: py-spy samples of one throughput contender, summarised.

Runs ``throughput.py child`` for one contender under ``py-spy record`` (sampling, native
extensions included with ``--native``), then prints and writes the functions with the most
samples on top of the stack (self) and anywhere in it (inclusive), as percentages of all
samples. Idle time (the event loop waiting in ``select``/``epoll``) shows as its own line.

``--fetch-path`` instead measures the fetch path alone: the same FetchRequest (every partition
of ``--topic`` from offset 0, ``--fetch-kib`` each) sent over aiokafka's shared connection and
over the fetch loop's own (``aiozkconsumer/kafka/fetch_connection.py``), alternately, in one
process: MiB/s and CPU seconds per GiB of record data, and the peak memory traced
(``tracemalloc``) during one response as a multiple of its record bytes. The record bytes each
path copies follow from its code: aiokafka's four copies (transport ``recv``, ``feed_data``,
``readexactly``, ``Bytes.decode``), the own connection's two (``recv_into`` the record set's
buffer, ``bytes`` for ``MemoryRecords``, counted by ``FetchConnection.bytes_copied``).

Usage::

    .venv/bin/python benchmarks/profile_consume.py --contender azk-iter-1 \\
        --topic bench-tp-100B-2000000-8 --records 2000000 --zookeeper H:P --bootstrap-server H:P
    .venv/bin/python benchmarks/profile_consume.py --fetch-path --topic bench-tp-1KiB-200000-8 \\
        --bootstrap-server H:P --fetch-kib 1024 --rounds 30
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS_DIR, md_table, say, this_python

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def short(frame: str) -> str:
    """``func (path/to/module.py:12)`` -> ``func (module.py)`` (line numbers merged)."""
    m = _FRAME.match(frame)
    if not m:
        return frame
    path = m.group("file")
    parts = Path(path).parts
    if "site-packages" in parts:
        path = "/".join(parts[parts.index("site-packages") + 1 :])
    elif "aiozkconsumer" in parts:
        path = "/".join(parts[parts.index("aiozkconsumer") :])
    else:
        path = Path(path).name
    return f"{m.group('func')} ({path})"


def summarise(raw: str, top: int) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """Total samples, top self frames and top inclusive frames from py-spy's raw output."""
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        frames = [short(f) for f in stack.split(";") if f and not f.startswith("process ")]
        frames = [f for f in frames if not f.startswith("thread (")]
        if not frames:
            continue
        total += count
        self_c[frames[-1]] += count
        for f in set(frames):
            incl[f] += count
    return total, self_c.most_common(top), incl.most_common(top)


async def fetch_path(args: argparse.Namespace) -> dict[str, Any]:
    """Time and trace the same FetchRequest over the shared and the own connection."""
    from aiokafka.protocol.fetch import FetchRequest

    from aiozkconsumer.kafka.client import KafkaClient
    from aiozkconsumer.records import TopicPartition

    kafka = KafkaClient(args.bootstrap_server, client_id="profile-fetch-path")
    await kafka.start()
    try:
        assert await kafka.refresh_metadata([args.topic])
        node = kafka.leader_for(TopicPartition(args.topic, 0))
        assert node is not None
        parts = sorted(kafka.partitions_for(args.topic) or ())
        parts = [p for p in parts if kafka.leader_for(TopicPartition(args.topic, p)) == node]
        size = args.fetch_kib * 1024
        request = FetchRequest(100, 1, 1 << 30, 0, [(args.topic, [(p, 0, size) for p in parts])])
        channels = {
            "aiokafka shared connection": kafka.fetch_channel(node, dedicated=False),
            "own connection": kafka.fetch_channel(node),
        }
        rates: dict[str, list[float]] = {name: [] for name in channels}
        cpu: dict[str, list[float]] = {name: [] for name in channels}
        peaks: dict[str, list[float]] = {name: [] for name in channels}
        for ch in channels.values():
            await ch.fetch(request, 100)  # connect, warm
        for _ in range(args.repeats):
            for name, ch in channels.items():
                records = 0
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(args.rounds):
                    resp = await ch.fetch(request, 100)
                    records += sum(len(p[-1] or b"") for _, ps in resp.topics for p in ps)
                    del resp
                wall, used = time.perf_counter() - t0, time.process_time() - c0
                rates[name].append(records / wall / 2**20)
                cpu[name].append(used / (records / 2**30))
                tracemalloc.start()
                resp = await ch.fetch(request, 100)
                one = sum(len(p[-1] or b"") for _, ps in resp.topics for p in ps)
                del resp
                peaks[name].append(tracemalloc.get_traced_memory()[1] / max(one, 1))
                tracemalloc.stop()
        own = channels["own connection"].connection
        for ch in channels.values():
            ch.close()
        return {
            "partitions": len(parts),
            "fetch_kib": args.fetch_kib,
            "rounds": args.rounds,
            "repeats": args.repeats,
            "own_record_bytes_copied_into_bytes": own.bytes_copied,
            "paths": {
                name: {
                    "mib_per_s": statistics.median(rates[name]),
                    "cpu_s_per_gib": statistics.median(cpu[name]),
                    "peak_traced_per_response": statistics.median(peaks[name]),
                    "all_mib_per_s": [round(x) for x in rates[name]],
                }
                for name in channels
            },
        }
    finally:
        await kafka.close()


def fetch_path_main(args: argparse.Namespace) -> None:
    from _common import uptime

    before = uptime()
    result = asyncio.run(fetch_path(args))
    rows = [
        [
            name,
            f"{r['mib_per_s']:.0f}",
            f"{r['cpu_s_per_gib']:.2f}",
            f"{r['peak_traced_per_response']:.2f}x",
            ", ".join(str(x) for x in r["all_mib_per_s"]),
        ]
        for name, r in result["paths"].items()
    ]
    text = "\n".join(
        [
            f"# Fetch path: {result['partitions']} partitions x {args.fetch_kib} KiB per request",
            "",
            f"{args.rounds} requests per run, median of {args.repeats} runs, alternating; "
            f"load before: `{before}`, after: `{uptime()}`.",
            "",
            md_table(
                [
                    "path",
                    "MiB/s",
                    "CPU s per GiB",
                    "peak traced / response bytes",
                    "all runs MiB/s",
                ],
                rows,
            ),
            "",
        ]
    )
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out_file = args.out_dir / f"fetch-path-{args.fetch_kib}KiB.md"
    out_file.write_text(text)
    print(text)
    say(f"wrote {out_file}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--contender", default="azk-iter-1")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--fetch-path", action="store_true", help="measure the fetch path alone")
    parser.add_argument("--fetch-kib", type=int, default=1024, help="--fetch-path: KiB/partition")
    parser.add_argument("--rounds", type=int, default=30, help="--fetch-path: requests per run")
    parser.add_argument("--repeats", type=int, default=5, help="--fetch-path: runs per path")
    parser.add_argument("--records", type=int)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--zookeeper")
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--native", action="store_true", help="include native (C) frames")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.fetch_path:
        fetch_path_main(args)
        return
    if args.records is None or args.zookeeper is None:
        parser.error("--records and --zookeeper are needed to profile a contender")
    py_spy = shutil.which("py-spy") or str(Path(this_python()).with_name("py-spy"))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    raw_file = args.out_dir / f"profile-{args.contender}.raw"
    cmd = [
        py_spy,
        "record",
        "-r",
        str(args.rate),
        "-f",
        "raw",
        "-o",
        str(raw_file),
        *(["--native"] if args.native else []),
        "--",
        this_python(),
        str(Path(__file__).with_name("throughput.py")),
        "child",
        "--contender",
        args.contender,
        "--topic",
        args.topic,
        "--records",
        str(args.records),
        "--partitions",
        str(args.partitions),
        "--batch",
        str(args.batch),
        "--zookeeper",
        args.zookeeper,
        "--bootstrap-server",
        args.bootstrap_server,
    ]
    say(f"py-spy on {args.contender} ...")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not raw_file.exists():
        raise SystemExit(f"py-spy failed: {done.stderr[-2000:]}")
    report = next(
        (ln for ln in reversed(done.stdout.splitlines()) if ln.startswith("{")), "(no report)"
    )
    total, self_top, incl_top = summarise(raw_file.read_text(), args.top)

    def rows(items: list[tuple[str, int]]) -> list[list[object]]:
        return [[f"{100 * n / total:.1f}%", f"`{name}`"] for name, n in items]

    text = "\n".join(
        [
            f"# Profile: {args.contender}",
            "",
            f"py-spy, {args.rate} Hz, {total} samples; child report: `{report}`",
            "",
            "## Self (top of stack)",
            "",
            md_table(["samples", "function"], rows(self_top)),
            "",
            "## Inclusive",
            "",
            md_table(["samples", "function"], rows(incl_top)),
            "",
        ]
    )
    out_file = args.out_dir / f"profile-{args.contender}.md"
    out_file.write_text(text)
    print(text)
    say(f"wrote {out_file} and {raw_file.name}")


if __name__ == "__main__":
    main()
