"""The rebalance benchmark's figures: one configuration's events summed up
(:func:`summarize`: latencies, gaps, start-up, problems), the member rebalances' phases
(:func:`phase_stats`) and the events' critical paths (:func:`critical_stats`). Pure
(measurements in, figures out).
"""

from __future__ import annotations

import argparse
from typing import Any

from _common import percentile
from _rebalance_settings import heartbeat_ms, session_ms
from _rebalance_view import Run, overlaps


def _phase_order() -> tuple[str, ...]:
    from aiozkconsumer.zkgroup.phases import PHASES

    return ("queued", *PHASES, "total", "first_records")


PHASE_ORDER = _phase_order()


def phase_stats(results: list[dict[str, Any]]) -> dict[str, dict[str, float | int]]:
    """Per phase, over the member rebalances of every event that report phases (the
    ZooKeeper modes): how many spent time in it (``n``), and p50 / p99 / max ms (a phase a
    rebalance did not reach counts as 0). ``total`` is the rebalance's duration,
    ``first_records`` from its fetchers' start to the first record of the last partition it
    acquired, ``queued`` from the trigger to its start (triggered rebalances only)."""
    rows: dict[str, list[float]] = {p: [] for p in PHASE_ORDER}
    for r in (r for ev in results for r in ev["rebalances"] if r.get("phases") is not None):
        for p in PHASE_ORDER:
            if p == "total":
                v = r["duration_s"] * 1000
            elif p == "first_records":
                v = r.get("first_records_ms")
            elif p == "queued":
                v = r.get("queued_ms")
            else:
                v = r["phases"].get(p, 0.0)
            if v is not None:
                rows[p].append(v)
    return {
        p: {
            "n": sum(1 for v in vs if v > 0),
            "of": len(vs),
            "p50_ms": percentile(vs, 50),
            "p99_ms": percentile(vs, 99),
            "max_ms": max(vs) if vs else float("nan"),
        }
        for p, vs in rows.items()
        if vs
    }


CRITICAL_SEGMENTS = ("cmd_to_ids_ms", "ids_to_start_ms", "rebalance_ms", "end_to_settled_ms")


def critical_stats(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The events' critical paths by kind (``all``, ``join``, ``leave``): p50 / p99 / max ms
    of each segment, and how often each phase was the critical member's longest."""
    out_: dict[str, dict[str, Any]] = {}
    for kind in ("all", "join", "leave"):
        crits = [
            r["critical"]
            for r in results
            if r.get("critical") and (kind == "all" or r["kind"] == kind)
        ]
        if not crits:
            continue
        row: dict[str, Any] = {"n": len(crits)}
        for seg in CRITICAL_SEGMENTS:
            vs = [c[seg] for c in crits if c.get(seg) is not None]
            row[seg] = {
                "p50": percentile(vs, 50),
                "p99": percentile(vs, 99),
                "max": max(vs) if vs else float("nan"),
            }
        longest: dict[str, int] = {}
        for c in crits:
            if c.get("phases"):
                top = max(c["phases"], key=lambda p: c["phases"][p])
                longest[top] = longest.get(top, 0) + 1
        row["longest_phase"] = longest
        out_[kind] = row
    return out_


def summarize(
    run: Run,
    results: list[dict[str, Any]],
    baseline: list[float],
    args: argparse.Namespace,
    *,
    spawned_at: float,
    load_before: str,
    load_after: str,
) -> dict[str, Any]:
    """One configuration's measurements: its settings, start-up, latency and gap figures,
    problems, and every event (``results``, as ``run_config`` recorded them).

    Args:
        run: the configuration's run, its events received.
        results: one record per membership event.
        baseline: the largest record gaps of a quiet window, seconds.
        args: the command line.
        spawned_at: when the member processes were spawned (``time.time()`` seconds).
        load_before: ``uptime`` before the configuration ran.
        load_after: ``uptime`` after it.
    """
    mode = run.mode
    lat = [r["latency_s"] for r in results if r["latency_s"] is not None]
    gaps_ = [r["unmoved_max_gap_s"] for r in results if r["unmoved_max_gap_s"] is not None]
    ready = [e["t"] - spawned_at for e in run.events if e["ev"] == "ready"]
    jvm = [e["startup_s"] for e in run.events if e["ev"] == "jvm_started"]
    return {
        "mode": mode,
        "members": run.members,
        "partitions": run.partitions,
        "kafka": args.kafka,
        "heartbeat_ms": heartbeat_ms(mode, args),
        "session_ms": session_ms(mode, args),
        # Start-up, apart from the rebalance figures: member processes from spawn to ready
        # to take commands (interpreter and imports), and Java members' JVMs (spawn to
        # consumer built and subscribed), once per member start.
        "process_ready_max_s": max(ready) if ready else None,
        "jvm_start_p50_s": percentile(jvm, 50) if jvm else None,
        "jvm_start_max_s": max(jvm) if jvm else None,
        "load_before": load_before,
        "load_after": load_after,
        "events": len(results),
        "settled": len(lat),
        "p50_s": percentile(lat, 50),
        "p99_s": percentile(lat, 99),
        "max_s": max(lat) if lat else None,
        "from_ids_p50_s": percentile(
            [r["latency_from_ids_s"] for r in results if r["latency_from_ids_s"]], 50
        ),
        "from_ids_p99_s": percentile(
            [r["latency_from_ids_s"] for r in results if r["latency_from_ids_s"]], 99
        ),
        "moved_median": percentile([r["moved"] for r in results], 50),
        "unmoved_gap_p50_s": percentile(gaps_, 50),
        "unmoved_gap_max_s": max(gaps_) if gaps_ else None,
        "baseline_gap_max_s": max(baseline) if baseline else None,
        "owner_node_problems": sum(len(r["owner_node_problems"]) for r in results),
        "phases": phase_stats(results),
        "critical_path": critical_stats(results),
        "double_ownership": overlaps(run),
        "errors": run.errors,
        "event_details": results,
    }


def restart_stats(results: list[dict[str, Any]], total_s: float | None) -> dict[str, Any]:
    """A rolling restart's figures over its restarts (``run_rolling_restart``'s records):
    settled count; per restart the new generations the other members saw and their
    rebalances (total and max), the partitions moved (total and max), the longest gap of a
    partition that stayed with a member not restarted and of the restarted member's own
    partitions (p50 / max), the latency from the stop command to settled (p50 / p99 / max);
    and ``total_s``, the whole restart from the first stop command to the last settle."""
    lat = [r["latency_s"] for r in results if r["latency_s"] is not None]
    gaps = [r["unmoved_max_gap_s"] for r in results if r["unmoved_max_gap_s"] is not None]
    own = [r["own_max_gap_s"] for r in results if r["own_max_gap_s"] is not None]
    gens = [len(r["generations"]) for r in results]
    rebs = [r["other_rebalances"] for r in results]
    moved = [r["moved"] for r in results]
    return {
        "restarts": len(results),
        "settled": len(lat),
        "generations_total": sum(gens),
        "generations_max": max(gens, default=0),
        "other_rebalances_total": sum(rebs),
        "other_rebalances_max": max(rebs, default=0),
        "moved_total": sum(moved),
        "moved_max": max(moved, default=0),
        "unmoved_gap_p50_s": percentile(gaps, 50),
        "unmoved_gap_max_s": max(gaps) if gaps else None,
        "own_gap_p50_s": percentile(own, 50),
        "own_gap_max_s": max(own) if own else None,
        "p50_s": percentile(lat, 50),
        "p99_s": percentile(lat, 99),
        "max_s": max(lat) if lat else None,
        "stop_p50_s": percentile([r["stop_s"] for r in results], 50),
        "total_s": total_s,
    }
