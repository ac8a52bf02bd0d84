"""Memory: peak RSS of an aiozkconsumer process whose reader is 10x slower than its fetcher.

A topic of 1 KiB records (8 partitions; the throughput benchmark's) is read by one connector
whose streams hand records to a reader throttled to a tenth of the rate an unthrottled reader
reaches (calibrated at the start of the run), so the stream queues stay full and the fetcher
is held back by backpressure alone. For every queue setting (``--queues``: ``cN`` is
``queued.max.message.chunks=N``, ``kbN`` is ``queued.max.messages.kbytes=N`` with no chunk
bound, ``default`` the library's default, today ``kb16384``) x ``fetch.message.max.bytes`` x
streams the child runs ``--seconds`` and reports its RSS before subscribing (baseline:
interpreter, imports, ZooKeeper session) and its peak RSS (``VmHWM``, followed while it
runs). The growth (peak - baseline) is compared with the configured budget + 30 MiB: per stream
``chunks x fetch size`` under a chunk bound, ``max(kbytes, fetch size) + fetch size`` (the
chunk being read is out of the queue) under a byte budget. The fetch responses in flight count
in it (the fetcher asks only for partitions whose stream queue has room net of the fetches in
flight), so nothing is parked outside the queues. The default grid: chunks 1, 2, 8 and the
default byte budget x fetch sizes 64 KiB, 1 MiB, 4 MiB, one stream, a reader 10x slower than
the fetcher.

Usage::

    .venv/bin/python benchmarks/memory.py [--quick] [--zookeeper H:P --bootstrap-server H:P]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    RESULTS_DIR,
    ClusterInfo,
    add_cluster_args,
    cluster_from_args,
    emit,
    ensure_topic,
    fmt,
    machine,
    md_table,
    median,
    run_child,
    say,
    this_python,
    uptime,
    versions,
    write_results,
)

MIB = 1024 * 1024
SLACK_MIB = 30
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib() -> float:
    """This process's resident set size now, MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / MIB


async def child_main(args: argparse.Namespace) -> None:
    """Consume with the given settings and a throttled reader; report RSS and the rate."""
    import anyio
    import anyio.lowlevel

    from aiozkconsumer import ConsumerConfig, ZookeeperConsumerConnector

    config = ConsumerConfig(
        group_id=f"bench-mem-{uuid.uuid4().hex[:10]}",
        zookeeper_connect=args.zookeeper,
        auto_offset_reset="smallest",
        auto_commit_enable=False,
        fetch_message_max_bytes=args.fetch_bytes,
        **queue_config(args.queue),
    )
    peak = 0.0
    records = 0
    last = 0.0
    per_stream_rate = args.rate / args.streams if args.rate > 0 else 0.0
    async with ZookeeperConsumerConnector(config) as connector:
        baseline = rss_mib()
        streams = (await connector.create_message_streams({args.topic: args.streams}))[args.topic]
        t0 = time.monotonic()

        async def read(stream: Any) -> None:
            nonlocal records, last
            n = 0
            async for _msg in stream:
                n += 1
                records += 1
                last = time.monotonic()
                if per_stream_rate and n % 50 == 0:
                    ahead = n / per_stream_rate - (time.monotonic() - t0)
                    if ahead > 0:
                        await anyio.sleep(ahead)
                elif n % 1000 == 0:
                    await anyio.lowlevel.checkpoint()

        async def sample() -> None:
            nonlocal peak
            while True:
                peak = max(peak, rss_mib())
                await anyio.sleep(0.05)

        with anyio.move_on_after(args.seconds):
            async with anyio.create_task_group() as tg:
                tg.start_soon(sample)
                for stream in streams:
                    tg.start_soon(read, stream)
        # Over the time records came: a short topic read to its end must not dilute the rate.
        seconds = max((last or time.monotonic()) - t0, 1e-6)
        queued = sum(q.qsize() for q in connector.queues())
    emit(
        {
            "baseline_mib": baseline,
            "sampled_peak_mib": peak,
            "records": records,
            "seconds": seconds,
            "records_per_s": records / seconds,
            "queued_chunks_at_end": queued,
        }
    )


def queue_config(queue: str) -> dict[str, int]:
    """The ``ConsumerConfig`` keys of a ``--queues`` item (``c2``, ``kb16384``, ``default``)."""
    if queue.startswith("c"):
        return {"queued_max_message_chunks": int(queue[1:])}
    if queue.startswith("kb"):
        return {"queued_max_messages_kbytes": int(queue[2:])}
    if queue == "default":
        return {}
    raise ValueError(f"unknown queue setting {queue!r} (cN, kbN or default)")


def queue_budget_bytes(queue: str, fetch_bytes: int) -> int:
    """One stream's memory budget under ``queue`` (see the module docstring)."""
    from aiozkconsumer.config import DEFAULT_QUEUED_MAX_MESSAGES_KBYTES

    if queue.startswith("c"):
        return int(queue[1:]) * fetch_bytes
    kbytes = int(queue[2:]) if queue.startswith("kb") else DEFAULT_QUEUED_MAX_MESSAGES_KBYTES
    return max(kbytes * 1024, fetch_bytes) + fetch_bytes


def run_setting(
    info: ClusterInfo,
    topic: str,
    queue: str,
    fetch_bytes: int,
    streams: int,
    rate: float,
    seconds: float,
) -> dict[str, Any]:
    cmd = [
        this_python(),
        str(Path(__file__).resolve()),
        "child",
        "--topic",
        topic,
        "--queue",
        queue,
        "--fetch-bytes",
        str(fetch_bytes),
        "--streams",
        str(streams),
        "--rate",
        str(rate),
        "--seconds",
        str(seconds),
        "--zookeeper",
        info.zookeeper_connect,
    ]
    res = run_child(cmd, timeout_s=seconds + 120)
    if not res.ok:
        say(f"  child failed (rc={res.returncode}): {res.stderr_tail[-1500:]}")
        return {"ok": False}
    rep = res.report
    return {
        "ok": True,
        "peak_rss_mib": res.maxrss_mb,
        "baseline_mib": rep["baseline_mib"],
        "growth_mib": res.maxrss_mb - rep["baseline_mib"],
        "records_per_s": rep["records_per_s"],
        "queued_chunks_at_end": rep["queued_chunks_at_end"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command")
    c = sub.add_parser("child", help="(internal) one setting, one process")
    c.add_argument("--topic", required=True)
    c.add_argument("--queue", required=True, help="cN, kbN or default")
    c.add_argument("--fetch-bytes", type=int, required=True)
    c.add_argument("--streams", type=int, required=True)
    c.add_argument("--rate", type=float, required=True, help="records/s in all; 0 = unthrottled")
    c.add_argument("--seconds", type=float, required=True)
    c.add_argument("--zookeeper", required=True)

    parser.add_argument("--quick", action="store_true", help="smoke size: 4 settings, 1 round")
    parser.add_argument("--records", type=int, default=200_000, help="1 KiB records in the topic")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument(
        "--queues",
        default="c1,c2,c8,default",
        help="queue settings: cN (queued.max.message.chunks=N), kbN "
        "(queued.max.messages.kbytes=N), default",
    )
    parser.add_argument(
        "--fetch-kib", default="64,1024,4096", help="fetch.message.max.bytes values, KiB"
    )
    parser.add_argument("--streams", default="1", help="stream counts")
    parser.add_argument("--seconds", type=float, default=8.0, help="run time per setting")
    parser.add_argument("--repeats", type=int, default=3, help="rounds (median reported)")
    parser.add_argument("--slowdown", type=float, default=10.0, help="reader this much slower")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    add_cluster_args(parser)
    args = parser.parse_args(argv)
    if args.command == "child":
        asyncio.run(child_main(args))
        return
    if args.quick:
        args.records //= 10
        args.queues, args.fetch_kib, args.streams = "c1,default", "64,4096", "1"
        args.repeats, args.seconds = 1, 4.0
    with cluster_from_args(args) as info:
        run(info, args)


def run(info: ClusterInfo, args: argparse.Namespace) -> None:
    topic = f"bench-tp-1KiB-{args.records}-{args.partitions}"
    ensure_topic(info, topic, args.partitions, args.records, 1024)
    cal = run_setting(info, topic, "c2", MIB, 1, 0, min(args.seconds, 3.0))
    full_rate = cal.get("records_per_s", 20_000.0)
    rate = full_rate / args.slowdown
    say(f"unthrottled reader: {full_rate:,.0f} records/s; throttled reader: {rate:,.0f}")
    settings = list(
        itertools.product(
            [x for x in args.queues.split(",") if x],
            [int(x) * 1024 for x in args.fetch_kib.split(",")],
            [int(x) for x in args.streams.split(",")],
        )
    )
    before = machine()
    runs: dict[str, list[dict[str, Any]]] = {}
    for rnd in range(args.repeats):
        for queue, fetch_bytes, streams in (
            settings[rnd % len(settings) :] + settings[: rnd % len(settings)]
        ):
            key = f"{queue}/{fetch_bytes}/{streams}"
            r = run_setting(info, topic, queue, fetch_bytes, streams, rate, args.seconds)
            runs.setdefault(key, []).append(r)
            if r["ok"]:
                say(
                    f"round {rnd + 1} queue={queue} fetch={fetch_bytes // 1024} KiB "
                    f"streams={streams}: peak {r['peak_rss_mib']:.0f} MiB "
                    f"(+{r['growth_mib']:.0f} over {r['baseline_mib']:.0f})"
                )
    rows = []
    for queue, fetch_bytes, streams in settings:
        good = [r for r in runs[f"{queue}/{fetch_bytes}/{streams}"] if r["ok"]]
        queue_budget = queue_budget_bytes(queue, fetch_bytes) * streams / MIB
        growth = median([r["growth_mib"] for r in good]) if good else None
        rows.append(
            {
                "queue": queue,
                "fetch_kib": fetch_bytes // 1024,
                "streams": streams,
                "ok_runs": len(good),
                "peak_rss_mib": median([r["peak_rss_mib"] for r in good]) if good else None,
                "baseline_mib": median([r["baseline_mib"] for r in good]) if good else None,
                "growth_mib": growth,
                "queue_budget_mib": queue_budget,
                "limit_mib": queue_budget + SLACK_MIB,
                "within": growth is not None and growth <= queue_budget + SLACK_MIB,
                "reader_records_per_s": median([r["records_per_s"] for r in good])
                if good
                else None,
            }
        )
    data = {
        "benchmark": "memory",
        "settings": {
            "records": args.records,
            "partitions": args.partitions,
            "seconds": args.seconds,
            "repeats": args.repeats,
            "slowdown": args.slowdown,
            "unthrottled_records_per_s": full_rate,
            "reader_rate": rate,
            "quick": args.quick,
        },
        "machine_before": before,
        "machine_after": machine(),
        "uptime_end": uptime(),
        "versions": versions("aiozkconsumer", "aiokafka"),
        "rows": rows,
        "runs": runs,
    }
    write_results(args.out_dir, "memory", data, markdown(data))


def markdown(data: dict[str, Any]) -> str:
    s = data["settings"]
    table = md_table(
        [
            "queue",
            "fetch KiB",
            "streams",
            "peak RSS MiB",
            "baseline MiB",
            "growth MiB",
            "queued budget MiB",
            "limit (+30) MiB",
            "within",
            "reader rec/s",
        ],
        [
            [
                r["queue"],
                r["fetch_kib"],
                r["streams"],
                fmt(r["peak_rss_mib"]),
                fmt(r["baseline_mib"]),
                fmt(r["growth_mib"]),
                fmt(r["queue_budget_mib"]),
                fmt(r["limit_mib"]),
                "yes" if r["within"] else "NO",
                fmt(r["reader_records_per_s"]),
            ]
            for r in data["rows"]
        ],
    )
    return "\n".join(
        [
            "# Memory with a slow reader",
            "",
            f"1 KiB records, {s['partitions']} partitions; the reader is throttled to "
            f"{s['reader_rate']:,.0f} records/s, 1/{s['slowdown']:g} of an unthrottled reader "
            f"({s['unthrottled_records_per_s']:,.0f} records/s); {s['seconds']:g} s per run, "
            f"median of {s['repeats']}. Growth = peak RSS (`VmHWM`) - RSS before "
            "subscribing. Budget per stream = chunks x fetch size (cN), or max(kbytes, fetch "
            "size) + fetch size (kbN, default); the fetches in flight count in it; limit = "
            "budget + 30 MiB.",
            "",
            f"Machine: {data['machine_before']['cpus']} CPUs; load before: "
            f"`{data['machine_before']['uptime']}`; after: `{data['uptime_end']}`.",
            "",
            table,
        ]
    )


if __name__ == "__main__":
    main()
