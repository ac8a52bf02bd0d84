"""The scale benchmark's pure parts: its grids and mode names, the points it keeps from
``rebalance.py``'s and ``throughput.py``'s result files, line fits (cost per partition, per
member) and the tables. Data in, data out: tested without a cluster
(``tests/unit/test_benchmark_scale.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from _common import fmt, md_table

CURVES = ("rebalance", "idle", "throughput")
# The rebalance curve's modes: our names -> rebalance.py's modes.
REBALANCE_MODES = {
    "zookeeper": "azk",  # ZooKeeper-coordinated group
    "classic": "azk-kafka",  # group.coordinator=kafka, the classic protocol (eager, range)
    "consumer": "azk-consumer",  # group.protocol=consumer (KIP-848), Kafka 4.x only
}
# The idle curve's clients (one member process each, see _scale_idle).
IDLE_CLIENTS = ("azk", "azk-kafka", "aiokafka", "confluent")
# The throughput curve's contenders (throughput.py's names).
THROUGHPUT_CONTENDERS = ("azk-iter-1", "azk-batch", "aiokafka-getmany", "confluent-sync-tuned")

FULL = {
    "members": (2, 8, 32, 64),
    "partitions": (64, 1024, 4096),
    "idle": (1, 100, 1_000, 10_000),
    "throughput": (1, 8, 64, 512),
}
QUICK = {
    "members": (2, 8),
    "partitions": (64,),
    "idle": (1, 100),
    "throughput": (1, 8),
}


def int_list(text: str) -> tuple[int, ...]:
    """``"1,100, 1000"`` -> ``(1, 100, 1000)``, sorted, without repeats.

    Raises:
        ValueError: for an empty list, a non-integer or a value below 1.
    """
    values = sorted({int(x) for x in text.split(",") if x.strip()})
    if not values or values[0] < 1:
        raise ValueError(f"expected positive integers, got {text!r}")
    return tuple(values)


def choose(text: str, known: Sequence[str], what: str) -> tuple[str, ...]:
    """A comma-separated subset of ``known``, in the order given, without repeats.

    Raises:
        ValueError: for an unknown name or none at all.
    """
    names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    wrong = [n for n in names if n not in known]
    if wrong or not names:
        raise ValueError(
            f"{what}: {', '.join(wrong) or 'nothing'} (choose from {', '.join(known)})"
        )
    return names


def rebalance_mode(name: str) -> str:
    """``rebalance.py``'s mode for one of ours (``zookeeper``, ``classic``, ``consumer``), or
    a ``rebalance.py`` mode name given as it is."""
    return REBALANCE_MODES.get(name, name)


def members_per_process(members: int) -> int:
    """Members hosted by one member process: ``rebalance.py``'s default up to 16 members (1,
    2, 4), then members / 8, so that 32 and 64 members are 8 processes on a small machine."""
    if members <= 2:
        return 1
    if members <= 8:
        return 2
    return max(4, math.ceil(members / 8))


def fit_line(points: Iterable[tuple[float, float | None]]) -> tuple[float, float] | None:
    """Least-squares line through ``(x, y)`` points: ``(slope, intercept)``; ``None`` with
    fewer than two distinct x (no slope to state). NaN and ``None`` y are left out."""
    pts = [(float(x), float(y)) for x, y in points if y is not None and y == y]
    xs = {x for x, _ in pts}
    if len(xs) < 2:
        return None
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    slope = sxy / sxx
    return slope, my - slope * mx


def _ms(seconds: float | None) -> float | None:
    if seconds is None or seconds != seconds:
        return None
    return seconds * 1000


# -- points from the tools' result files ------------------------------------------------------


def rebalance_point(mode: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """One point of the rebalance curve from one ``rebalance.py`` configuration (an item of
    its result file's ``configs``): latencies in ms, start-up apart."""
    return {
        "mode": mode,
        "rebalance_mode": config.get("mode"),
        "members": config.get("members"),
        "partitions": config.get("partitions"),
        "ok": bool(config.get("settled")),
        "events": config.get("events"),
        "settled": config.get("settled"),
        "p50_ms": _ms(config.get("p50_s")),
        "p99_ms": _ms(config.get("p99_s")),
        "max_ms": _ms(config.get("max_s")),
        "unmoved_gap_p50_ms": _ms(config.get("unmoved_gap_p50_s")),
        "baseline_gap_ms": _ms(config.get("baseline_gap_max_s")),
        "heartbeat_ms": config.get("heartbeat_ms"),
        "process_ready_max_s": config.get("process_ready_max_s"),
        "double_ownership": len(config.get("double_ownership") or []),
        "owner_node_problems": config.get("owner_node_problems"),
        "errors": list(config.get("errors") or [])[:5],
        "load_before": config.get("load_before"),
        "load_after": config.get("load_after"),
    }


def throughput_points(partitions: int, data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The throughput curve's points at one partition count, from ``throughput.py``'s result
    file (its ``summary``'s 1 KiB dataset), one per contender."""
    points = []
    for contender, s in (data.get("summary", {}).get("1KiB") or {}).items():
        records = s.get("records")
        cpu = s.get("window_cpu_s")
        points.append(
            {
                "contender": contender,
                "partitions": partitions,
                "ok": bool(s.get("ok_runs")),
                "runs": s.get("runs"),
                "records": records,
                "records_per_s": s.get("records_per_s"),
                "steady_records_per_s": s.get("steady_records_per_s"),
                "mib_per_s": s.get("mib_per_s"),
                "first_record_s": s.get("first_record_s"),
                "import_s": s.get("import_s"),
                "cpu_s_per_m": cpu / records * 1e6 if cpu and records else None,
                "maxrss_mib": s.get("maxrss_mib"),
            }
        )
    return points


# -- fits over the points -----------------------------------------------------------------


def idle_fits(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per idle client: RSS growth per owned partition (KiB, the slope of the end-of-window
    RSS over the partitions) and idle CPU per 1,000 partitions (% of a core)."""
    rows = []
    for client in dict.fromkeys(p["client"] for p in points):
        mine = [p for p in points if p["client"] == client and p.get("ok")]
        rss = fit_line((p["partitions"], p["rss_mib"]) for p in mine)
        cpu = fit_line((p["partitions"], p["cpu_pct"]) for p in mine)
        rows.append(
            {
                "client": client,
                "points": len(mine),
                "rss_kib_per_partition": rss[0] * 1024 if rss else None,
                "rss_intercept_mib": rss[1] if rss else None,
                "cpu_pct_per_1000_partitions": cpu[0] * 1000 if cpu else None,
            }
        )
    return rows


def rebalance_fits(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per mode and member count: p50 and p99 growth per 1,000 partitions (ms), from a line
    through that row's points."""
    rows = []
    keys = dict.fromkeys((p["mode"], p["members"]) for p in points)
    for mode, members in keys:
        mine = [p for p in points if p["mode"] == mode and p["members"] == members and p["ok"]]
        p50 = fit_line((p["partitions"], p["p50_ms"]) for p in mine)
        p99 = fit_line((p["partitions"], p["p99_ms"]) for p in mine)
        rows.append(
            {
                "mode": mode,
                "members": members,
                "points": len(mine),
                "p50_ms_per_1000_partitions": p50[0] * 1000 if p50 else None,
                "p99_ms_per_1000_partitions": p99[0] * 1000 if p99 else None,
            }
        )
    return rows


def relative_rates(points: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], float | None]:
    """``(contender, partitions)`` -> its steady rate over its own rate at the fewest
    partitions it ran with (the curve's shape, whatever the machine's speed)."""
    base: dict[str, float] = {}
    for p in sorted(points, key=lambda p: p["partitions"]):
        rate = p.get("steady_records_per_s")
        if p.get("ok") and rate and p["contender"] not in base:
            base[p["contender"]] = rate
    out: dict[tuple[str, int], float | None] = {}
    for p in points:
        rate, ref = p.get("steady_records_per_s"), base.get(p["contender"])
        out[(p["contender"], p["partitions"])] = rate / ref if rate and ref else None
    return out


# -- tables -----------------------------------------------------------------------------------


def rebalance_tables(points: Sequence[Mapping[str, Any]]) -> str:
    """The rebalance curve's tables: one row per point, then the growth per 1,000 partitions."""
    rows = [
        [
            p["mode"],
            p["members"],
            fmt(p["partitions"]),
            f"{p['settled'] or 0}/{p['events'] or 0}",
            fmt(p["p50_ms"]),
            fmt(p["p99_ms"]),
            fmt(p["max_ms"]),
            fmt(p["unmoved_gap_p50_ms"]),
            fmt(p["baseline_gap_ms"]),
            p["double_ownership"],
            fmt(p["process_ready_max_s"], 1),
        ]
        for p in points
    ]
    table = md_table(
        [
            "mode",
            "members",
            "partitions",
            "settled",
            "p50 ms",
            "p99 ms",
            "max ms",
            "unmoved gap p50 ms",
            "baseline gap ms",
            "double",
            "processes ready s (start-up)",
        ],
        rows,
    )
    fits = [
        [
            f["mode"],
            f["members"],
            f["points"],
            fmt(f["p50_ms_per_1000_partitions"], 1),
            fmt(f["p99_ms_per_1000_partitions"], 1),
        ]
        for f in rebalance_fits(points)
    ]
    growth = md_table(
        ["mode", "members", "points", "p50 ms per 1,000 partitions", "p99 ms per 1,000 partitions"],
        fits,
    )
    return f"{table}\n\nGrowth (least-squares line over the partitions):\n\n{growth}"


def idle_tables(points: Sequence[Mapping[str, Any]]) -> str:
    """The idle curve's tables: steady state per point, start-up apart, then the slopes."""
    steady = md_table(
        ["client", "partitions", "owned", "idle CPU % of a core", "RSS MiB", "RSS max MiB"],
        [
            [
                p["client"],
                fmt(p["partitions"]),
                fmt(p.get("owned")),
                fmt(p.get("cpu_pct"), 2),
                fmt(p.get("rss_mib"), 1),
                fmt(p.get("rss_max_mib"), 1),
            ]
            for p in points
        ],
    )
    startup = md_table(
        [
            "client",
            "partitions",
            "import s",
            "spawn to owning s",
            "CPU to owning s",
            "peak RSS MiB",
        ],
        [
            [
                p["client"],
                fmt(p["partitions"]),
                fmt(p.get("import_s"), 2),
                fmt(p.get("ready_s"), 2),
                fmt(p.get("startup_cpu_s"), 2),
                fmt(p.get("peak_rss_mib"), 1),
            ]
            for p in points
        ],
    )
    slopes = md_table(
        [
            "client",
            "points",
            "RSS KiB per owned partition",
            "RSS at 0 partitions MiB",
            "idle CPU % per 1,000 partitions",
        ],
        [
            [
                f["client"],
                f["points"],
                fmt(f["rss_kib_per_partition"], 2),
                fmt(f["rss_intercept_mib"], 1),
                fmt(f["cpu_pct_per_1000_partitions"], 3),
            ]
            for f in idle_fits(points)
        ],
    )
    return (
        f"Steady state (the window after settling):\n\n{steady}\n\n"
        f"Start-up (apart):\n\n{startup}\n\n"
        f"Slopes (least-squares line over the partitions):\n\n{slopes}"
    )


def throughput_tables(points: Sequence[Mapping[str, Any]]) -> str:
    """The throughput curve's tables: steady state per point, start-up apart."""
    rel = relative_rates(points)
    steady = md_table(
        [
            "contender",
            "partitions",
            "steady records/s",
            "x fewest partitions",
            "records/s (window)",
            "MiB/s",
            "CPU s / M records",
        ],
        [
            [
                p["contender"],
                fmt(p["partitions"]),
                fmt(p.get("steady_records_per_s")),
                fmt(rel.get((p["contender"], p["partitions"])), 2),
                fmt(p.get("records_per_s")),
                fmt(p.get("mib_per_s"), 1),
                fmt(p.get("cpu_s_per_m"), 2),
            ]
            for p in points
        ],
    )
    startup = md_table(
        ["contender", "partitions", "import s", "first record s", "peak RSS MiB"],
        [
            [
                p["contender"],
                fmt(p["partitions"]),
                fmt(p.get("import_s"), 2),
                fmt(p.get("first_record_s"), 2),
                fmt(p.get("maxrss_mib"), 0),
            ]
            for p in points
        ],
    )
    return f"Steady state (after the first record):\n\n{steady}\n\nStart-up (apart):\n\n{startup}"


def markdown(data: Mapping[str, Any]) -> str:
    """The whole report: a section per curve that ran, with its settings and notes."""
    parts = ["# Scale: cost curves", ""]
    settings = data.get("settings", {})
    before, after = data.get("machine_before", {}), data.get("machine_after", {})
    quick = "(quick) " if settings.get("quick") else ""
    parts.append(
        f"Run {quick}on {before.get('cpus')} CPUs; load before `{before.get('uptime')}`, "
        f"after `{after.get('uptime')}`."
    )
    for note in data.get("notes", []):
        parts += ["", f"Note: {note}"]
    if "rebalance" in data.get("curves", {}):
        parts += [
            "",
            "## Rebalance latency against members and partitions",
            "",
            f"{settings.get('events')} events per point (alternating leave/join), Kafka "
            f"{settings.get('rebalance_kafka')}; latency from the command to settled.",
            "",
            rebalance_tables(data["curves"]["rebalance"]),
        ]
    if "idle" in data.get("curves", {}):
        parts += [
            "",
            "## Idle CPU and RSS against owned partitions",
            "",
            "One member owning every partition of an empty topic; "
            f"{settings.get('idle_settle_s')} s to settle after it owns them, then a "
            f"{settings.get('idle_window_s')} s window.",
            "",
            idle_tables(data["curves"]["idle"]),
        ]
    if "throughput" in data.get("curves", {}):
        parts += [
            "",
            "## Throughput against partitions (1 KiB records)",
            "",
            f"{fmt(settings.get('throughput_records'))} records of 1 KiB, "
            f"{settings.get('throughput_repeats')} round(s), median.",
            "",
            throughput_tables(data["curves"]["throughput"]),
        ]
    return "\n".join(parts) + "\n"
