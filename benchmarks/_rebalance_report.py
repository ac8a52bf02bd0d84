"""The rebalance benchmark's result tables: the Markdown written next to the JSON results
(:func:`markdown`: latency per configuration, joins and leaves apart, the phase and
critical-path tables of the ZooKeeper modes, the target, start-up and load), and the cells
they are made of. Pure (the results' data in, text out).
"""

from __future__ import annotations

from typing import Any

from _common import fmt, md_table, percentile
from _rebalance_settings import BROKER_CONSUMER_SESSION_MS, TARGET_P99_S, ZK_MODES
from _rebalance_stats import CRITICAL_SEGMENTS


def librdkafka_version() -> str:
    """The librdkafka confluent-kafka runs on (``-`` if not installed)."""
    try:
        import confluent_kafka
    except ImportError:
        return "-"
    return str(confluent_kafka.libversion()[0])


def ms(seconds: float | None) -> str:
    """Seconds as whole milliseconds, ``-`` for None/NaN."""
    return fmt(seconds * 1000 if seconds is not None and seconds == seconds else None)


def by_kind(events: list[dict[str, Any]], kind: str) -> list[str]:
    """Cells for the join/leave table: count, latency p50/p99/max, unmoved gap p50/max."""
    mine = [e for e in events if e["kind"] == kind]
    lat = [e["latency_s"] for e in mine if e["latency_s"] is not None]
    gaps = [e["unmoved_max_gap_s"] for e in mine if e["unmoved_max_gap_s"] is not None]
    return [
        f"{len(lat)}/{len(mine)}",
        ms(percentile(lat, 50)),
        ms(percentile(lat, 99)),
        ms(max(lat) if lat else None),
        f"{ms(percentile(gaps, 50))} / {ms(max(gaps) if gaps else None)}",
    ]


def label(c: dict[str, Any]) -> str:
    """A row's mode, ``static`` added for static members."""
    return f"{c['mode']} static" if c.get("membership") == "static" else str(c["mode"])


def restart_markdown(data: dict[str, Any]) -> str:
    """The rolling restart's tables (``--scenario rolling-restart``)."""
    s = data["settings"]
    rows = []
    for c in data["configs"]:
        r = c["restart"]
        rows.append(
            [
                c["mode"],
                c.get("membership", "dynamic"),
                f"{c['members']} x {c['partitions']}",
                fmt(c.get("session_ms")),
                f"{r['settled']}/{r['restarts']}",
                f"{r['generations_total']} ({r['generations_max']})",
                (
                    "-"
                    if c["mode"].startswith("java")
                    else f"{r['other_rebalances_total']} ({r['other_rebalances_max']})"
                ),
                f"{r['moved_total']} ({r['moved_max']})",
                f"{ms(r['unmoved_gap_p50_s'])} / {ms(r['unmoved_gap_max_s'])}",
                ms(c["baseline_gap_max_s"]),
                f"{ms(r['own_gap_p50_s'])} / {ms(r['own_gap_max_s'])}",
                f"{ms(r['p50_s'])} / {ms(r['max_s'])}",
                fmt(r["total_s"], 1),
                len(c["double_ownership"]),
            ]
        )
    lines = [
        "# Rolling restart",
        "",
        f"Each of the members in turn ({s.get('rounds', 1)} round(s)) is stopped (its "
        "connector closed; a static member does not leave the group) and started again at "
        "once in the same slot (static: the same `group.instance.id`), within the session "
        "timeout; the next once the group settled: every member live, their partition sets "
        "disjoint, balanced and covering the topic, the restarted member given its partitions "
        "after its stop and handing out records of each (and so every other member of any "
        "partition it acquired), then 1 s without an assignment change. A producer writes one "
        f"record to every partition every {s['tick_ms']} ms. Generations: new group "
        "generations (consumer protocol: member epochs) the other members saw, over all "
        "restarts (the most in one restart); rebalances: the other members' rebalances "
        "(their connectors' rebalance history; `-` for Java members); moved: partitions whose "
        "owner changed (total, most in one restart); stayed gap: the longest gap between two "
        "records of a partition that stayed with a member not restarted, per restart (p50 / "
        "max, ms), next to the baseline gap of a quiet 3 s window; own gap: the restarted "
        "member's partitions it got back, from its last record before the stop to its first "
        "after (p50 / max ms); restart: stop command to settled (p50 / max ms); total: the "
        "first stop command to the last settle (s). Double: partitions two members handed "
        "out in overlapping intervals.",
        "",
        f"Broker: {data['versions'].get('broker', '-')}; session ms: the classic members' "
        "`session.timeout.ms`, the consumer-protocol members' is the broker's; heartbeat: "
        f"classic {s.get('kafka_heartbeat_ms', '-')} ms, consumer protocol "
        + (
            ", ".join(f"`{k}={v}`" for k, v in s.get("broker_properties", {}).items())
            or "the broker's"
        )
        + ".",
        "",
        f"Command: `{data.get('command', '-')}`",
        "",
        f"Machine: {data['machine_before']['cpus']} CPUs; load before: "
        f"`{data['machine_before']['uptime']}`; after: `{data['machine_after']['uptime']}`.",
        "",
        md_table(
            [
                "mode",
                "membership",
                "members x partitions",
                "session ms",
                "settled",
                "generations",
                "rebalances",
                "moved",
                "stayed gap p50 / max",
                "baseline gap",
                "own gap p50 / max",
                "restart p50 / max",
                "total s",
                "double",
            ],
            rows,
        ),
        "",
        "Load per configuration:",
        "",
    ]
    lines += [f"- `{u}`" for u in data["uptime_per_config"]]
    return "\n".join(lines)


def markdown(data: dict[str, Any]) -> str:
    """The result tables."""
    s = data["settings"]
    if s.get("scenario") == "rolling-restart":
        return restart_markdown(data)
    rows = [
        [
            label(c),
            f"{c['members']} x {c['partitions']}",
            fmt(c.get("heartbeat_ms")),
            f"{c['settled']}/{c['events']}",
            ms(c["p50_s"]),
            ms(c["p99_s"]),
            ms(c["max_s"]),
            ms(c["from_ids_p99_s"]),
            fmt(c["moved_median"]),
            ms(c["unmoved_gap_p50_s"]),
            ms(c["unmoved_gap_max_s"]),
            ms(c["baseline_gap_max_s"]),
            len(c["double_ownership"]),
            c["owner_node_problems"] if c["mode"] in ZK_MODES else "n/a",
        ]
        for c in data["configs"]
    ]
    target = [
        c
        for c in data["configs"]
        if c["mode"] == "azk" and c["members"] == 16 and c["partitions"] == 256
    ]
    lines = [
        "# Rebalance latency",
        "",
        f"{s['events']} alternating leave/join events per row; a producer writes one record to "
        f"every partition every {s['tick_ms']} ms. Latency: from the member process starting "
        "to leave/join to every partition owned and handing out records again (ms). "
        "'from ids': from the ZooKeeper membership change seen by a watch. Unmoved gap: the "
        "largest gap between two records of a partition whose owner did not change, per event "
        "(p50 over events, and max); baseline: the same in a quiet 3 s window. Double: "
        "partitions two members handed out in overlapping intervals. Owner nodes: owner nodes "
        "disagreeing with the members after settling. `original` emulates the 0.10.2 consumer "
        f"(release everything every rebalance, sleep {s['original_backoff_ms']} ms per "
        "conflict). `azk-kafka`: aiozkconsumer with `group.coordinator=kafka` (eager, range "
        "assignor); `azk-kafka-coop`: the same with `cooperative-sticky` (KIP-429, settled "
        "after the follow-up rebalance); heartbeat ms: the heartbeat interval of the "
        "Kafka-coordinated modes "
        f"(session: azk-kafka {s.get('kafka_session_ms', '-')} ms, aiokafka "
        f"{s.get('aiokafka_session_ms', '-')} ms), who learn of a rebalance from a heartbeat "
        "answer; before each event the orchestrator waits a random 0 to "
        + ", ".join(f"{m} {j} ms" for m, j in s.get("event_jitter_ms", {}).items())
        + " (a random phase against the heartbeats).",
        "",
        f"Broker: {data['versions'].get('broker', 'Kafka 3.9.1 (ZooKeeper mode)')}"
        + (
            "; the ZooKeeper modes use a standalone ZooKeeper next to it (metadata from the "
            "broker). Consumer-protocol modes (`group.protocol=consumer`, KIP-848, broker-side "
            f"assignor {s.get('remote_assignor') or 'uniform (the broker default)'}): "
            "`azk-consumer` (aiozkconsumer), `java-consumer` (kafka-clients 4.3.1 "
            "`KafkaConsumer`, one JVM per member, its events timed as this harness reads its "
            "output; the join clock starts once the consumer is built and subscribed, the "
            "JVM start-up is in the start-up table), `confluent-consumer` (confluent-kafka "
            f"{data['versions'].get('confluent-kafka', '-')}, librdkafka "
            f"{data['versions'].get('librdkafka', '-')}); their heartbeat interval is the "
            "broker's: "
            + (
                ", ".join(f"`{k}={v}`" for k, v in s["broker_properties"].items())
                or "`group.consumer.heartbeat.interval.ms` 5000 (default)"
            )
            + ", the same for every consumer-protocol mode (the broker is shared); session: "
            f"the broker's {BROKER_CONSUMER_SESSION_MS} ms. Settled, for them: balanced, "
            "covering, disjoint, fetching (a member whose partitions stay hears nothing)."
            if s.get("kafka") == "4.3"
            else "."
        ),
        "",
        f"Command: `{data.get('command', '-')}`",
        "",
        f"Machine: {data['machine_before']['cpus']} CPUs; load before: "
        f"`{data['machine_before']['uptime']}`; after: `{data['machine_after']['uptime']}`; "
        f"java processes: {data['machine_before']['java_processes']}.",
        "",
        md_table(
            [
                "mode",
                "members x partitions",
                "heartbeat ms",
                "settled",
                "p50 ms",
                "p99 ms",
                "max ms",
                "p99 from ids ms",
                "moved (median)",
                "unmoved gap p50 ms",
                "unmoved gap max ms",
                "baseline gap ms",
                "double",
                "owner nodes",
            ],
            rows,
        ),
        "",
    ]
    lines += [
        "Joins and leaves apart (latency ms over the events of that kind; unmoved gap ms: "
        "p50 and max over them):",
        "",
        md_table(
            [
                "mode",
                "members x partitions",
                "join n",
                "join p50",
                "join p99",
                "join max",
                "join unmoved gap p50 / max",
                "leave n",
                "leave p50",
                "leave p99",
                "leave max",
                "leave unmoved gap p50 / max",
            ],
            [
                [label(c), f"{c['members']} x {c['partitions']}"]
                + by_kind(c["event_details"], "join")
                + by_kind(c["event_details"], "leave")
                for c in data["configs"]
            ],
        ),
        "",
    ]
    phased = [c for c in data["configs"] if c.get("phases")]
    for c in phased:
        lines += [
            f"Rebalance phases, `{c['mode']}` {c['members']} x {c['partitions']} (ms, over the "
            "member rebalances of every event; a phase a rebalance did not reach counts as 0; "
            "n: rebalances that spent time in it). queued: trigger to start; total: the "
            "rebalance; first_records: its fetchers' start to the first record of the last "
            "partition it acquired:",
            "",
            md_table(
                ["phase", "n", "p50", "p99", "max"],
                [
                    [
                        p,
                        f"{v['n']}/{v['of']}",
                        fmt(v["p50_ms"], 1),
                        fmt(v["p99_ms"], 1),
                        fmt(v["max_ms"], 1),
                    ]
                    for p, v in c["phases"].items()
                ],
            ),
            "",
        ]
        cp = c.get("critical_path") or {}
        if cp:
            lines += [
                "Critical path per event (the member that settled last): command -> ids "
                "change (seen by the orchestrator's watch) -> its rebalance start -> its end "
                "-> settled (its and others' first records), ms p50 / p99 / max; longest "
                "phase: how often each phase was that member's longest:",
                "",
                md_table(
                    [
                        "events",
                        "n",
                        *(s.removesuffix("_ms") for s in CRITICAL_SEGMENTS),
                        "longest phase",
                    ],
                    [
                        [kind, row["n"]]
                        + [
                            " / ".join(fmt(row[s][q]) for q in ("p50", "p99", "max"))
                            for s in CRITICAL_SEGMENTS
                        ]
                        + [
                            ", ".join(
                                f"{p} {n}"
                                for p, n in sorted(
                                    row["longest_phase"].items(), key=lambda x: -x[1]
                                )
                            )
                        ]
                        for kind, row in cp.items()
                    ],
                ),
                "",
            ]
    if target:
        t = target[0]
        ok = t["p99_s"] == t["p99_s"] and t["p99_s"] < TARGET_P99_S
        lines.append(
            f"Target (azk, 16 x 256, p99 < {TARGET_P99_S * 1000:.0f} ms): "
            f"p99 = {fmt(t['p99_s'] * 1000)} ms -> "
            f"{'met' if ok else 'NOT met'}."
        )
    lines += [
        "",
        "Start-up, apart from the figures above (s): member processes from spawn to ready for "
        "commands (interpreter, imports); Java members: a JVM from spawn to the consumer "
        "built and subscribed, per member start (p50 / max). Load (1-minute average) before "
        "and after each row:",
        "",
        md_table(
            [
                "mode",
                "members x partitions",
                "processes ready (max)",
                "JVM start p50 / max",
                "load before",
                "load after",
            ],
            [
                [
                    c["mode"],
                    f"{c['members']} x {c['partitions']}",
                    fmt(c.get("process_ready_max_s"), 1),
                    (
                        f"{fmt(c.get('jvm_start_p50_s'), 1)} / {fmt(c.get('jvm_start_max_s'), 1)}"
                        if c.get("jvm_start_p50_s") is not None
                        else "-"
                    ),
                    load1(c.get("load_before", "")),
                    load1(c.get("load_after", "")),
                ]
                for c in data["configs"]
            ],
        ),
    ]
    lines += ["", "Load per configuration:", ""] + [f"- `{u}`" for u in data["uptime_per_config"]]
    return "\n".join(lines)


def load1(uptime_line: str) -> str:
    """The 1-minute load average of an ``uptime`` line (``-`` if none)."""
    _, _, loads = uptime_line.partition("load average:")
    return loads.split(",")[0].strip() or "-"
