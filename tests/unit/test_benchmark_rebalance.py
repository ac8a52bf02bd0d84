"""The rebalance benchmark's pure parts (``benchmarks/_rebalance_*.py``), without a cluster or
a child process: its command line and settings, the members' gap bookkeeping, the
orchestrator's view of the group (settled, overlaps, critical path), the figures and the
tables."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the benchmarks import each other by file name

import _rebalance_report as report  # noqa: E402
import _rebalance_settings as settings  # noqa: E402
import _rebalance_stats as stats  # noqa: E402
import _rebalance_view as view  # noqa: E402
from _rebalance_tracker import Tracker  # noqa: E402


def _load_cli() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_rebalance", BENCHMARKS / "rebalance.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cli = _load_cli()


def parse(*argv: str) -> Any:
    return cli.build_parser().parse_args(list(argv))


# -- the command line and the settings --------------------------------------------------------


def test_the_default_run_is_the_diagonal_grid_and_the_classic_modes() -> None:
    args = parse()
    assert settings.grid_of(args) == settings.DIAGONAL
    assert settings.modes_of(args) == list(settings.CLASSIC_MODES)
    assert settings.modes_of(parse("--kafka", "4.3")) == list(settings.MODES)


def test_configs_override_quick_which_overrides_the_grid() -> None:
    assert settings.grid_of(parse("--grid", "full")) == settings.FULL
    assert settings.grid_of(parse("--grid", "full", "--quick")) == ((2, 16), (8, 64))
    assert settings.grid_of(parse("--quick", "--configs", "16x256,2x4,")) == ((16, 256), (2, 4))


def test_unknown_modes_and_consumer_modes_without_kafka_4_are_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown modes: bogus, x \(known: azk, "):
        settings.modes_of(parse("--modes", "azk,x,bogus"))
    with pytest.raises(ValueError, match="need --kafka 4.3"):
        settings.modes_of(parse("--modes", "azk,java-consumer"))
    assert settings.modes_of(parse("--modes", "java-consumer,", "--kafka", "4.3")) == [
        "java-consumer"
    ]


def test_the_command_line_says_what_is_wrong(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--modes", "bogus"])
    assert exit_info.value.code == 2
    assert "error: unknown modes: bogus" in capsys.readouterr().err


def test_member_processes_get_the_kafka_timeouts_given() -> None:
    args = parse("--kafka-heartbeat-ms", "250", "--aiokafka-session-ms", "6000")
    flags = settings.kafka_timeouts(args)
    assert flags == [
        "--kafka-session-ms",
        "10000",
        "--kafka-heartbeat-ms",
        "250",
        "--aiokafka-session-ms",
        "6000",
        "--aiokafka-heartbeat-ms",
        "3000",
    ]
    member = parse("member", *flags, "--mode", "azk", "--group", "g", "--topic", "t",
                   "--slots", "0", "--zookeeper", "z", "--bootstrap-server", "b")  # fmt: skip
    assert (member.kafka_heartbeat_ms, member.aiokafka_session_ms) == (250, 6000)


@pytest.mark.parametrize(
    ("mode", "heartbeat", "session"),
    [
        ("azk", None, None),
        ("original", None, None),
        ("azk-kafka", 1000, 10_000),
        ("aiokafka", 3000, 10_000),
        ("azk-consumer", 1000, 45_000),
        ("confluent-consumer", 1000, 45_000),
    ],
)
def test_heartbeat_and_session_per_mode(
    mode: str, heartbeat: int | None, session: int | None
) -> None:
    args = parse()
    assert settings.heartbeat_ms(mode, args) == heartbeat
    assert settings.session_ms(mode, args) == session
    jitter = settings.event_jitter_ms(mode, args)
    assert jitter == (heartbeat or 0)
    assert settings.event_jitter_ms(mode, parse("--event-jitter-ms", "7")) == 7


def test_the_consumer_protocol_heartbeat_is_the_brokers() -> None:
    assert settings.broker_properties(parse()) == {}  # Kafka 3.9: no consumer groups
    assert settings.broker_properties(parse("--kafka", "4.3", "--consumer-heartbeat-ms", "0")) == {}
    assert settings.heartbeat_ms("java-consumer", parse("--consumer-heartbeat-ms", "0")) == 5000
    assert settings.broker_properties(parse("--kafka", "4.3")) == {
        "group.consumer.heartbeat.interval.ms": "1000",
        "group.consumer.min.heartbeat.interval.ms": "1000",
    }
    slow = settings.broker_properties(parse("--kafka", "4.3", "--consumer-heartbeat-ms", "8000"))
    assert slow["group.consumer.min.heartbeat.interval.ms"] == "5000"


# -- the members' bookkeeping -----------------------------------------------------------------


def lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(x) for x in capsys.readouterr().out.splitlines()]


def test_a_tracker_reports_first_records_releases_and_the_largest_gaps(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tracker = Tracker(3)
    tracker.record(0, at=10.0)
    tracker.record(0, at=10.1)
    tracker.record(0, at=10.6)
    tracker.record(1, at=10.2)
    first = lines(capsys)
    assert [(e["ev"], e["p"], e["t"]) for e in first] == [("first", 0, 10.0), ("first", 1, 10.2)]
    gaps = tracker.report()
    assert gaps[0] >= 0.5  # open since 10.6: counts up to now
    tracker.released([1, 1])
    (released,) = lines(capsys)
    assert released["partitions"] == [1] and released["last"] == {"1": 10.2}
    tracker.record(1, at=20.0)  # back to the same member: the gap across the release counts
    assert lines(capsys)[0]["ev"] == "first"
    assert tracker.max_gap[1] == pytest.approx(9.8)


# -- the orchestrator's view ------------------------------------------------------------------


def group(mode: str = "azk", partitions: int = 4, members: int = 2) -> view.Run:
    run = view.Run(mode, members, partitions, "t", "g")
    run.slots = {s: view.SlotState(proc=0) for s in range(members)}
    run.expected_live = members
    return run


def feed(run: view.Run, *events: dict[str, Any]) -> None:
    for e in events:
        view.handle(run, e)


def settled(*then: dict[str, Any], mode: str = "azk", at: float = 1.0) -> view.Run:
    """Two members owning two partitions each and fetching from ``at`` on, then ``then``."""
    run = group(mode)
    feed(
        run,
        {"ev": "started", "slot": 0, "member": "m0"},
        {"ev": "started", "slot": 1, "member": "m1"},
        {"ev": "assigned", "slot": 0, "partitions": [0, 1], "t": at},
        {"ev": "assigned", "slot": 1, "partitions": [2, 3], "t": at + 0.1},
        *({"ev": "first", "slot": p // 2, "p": p, "t": at + 0.2 + p / 10} for p in range(4)),
        *then,
    )
    return run


def test_a_group_settles_once_every_partition_is_owned_once_and_fetching() -> None:
    run = group()
    assert view.settled_at(run, 0.0) is None
    feed(
        run,
        {"ev": "started", "slot": 0, "member": "m0"},
        {"ev": "started", "slot": 1, "member": "m1"},
        {"ev": "assigned", "slot": 0, "partitions": [0, 1], "t": 1.0},
        {"ev": "assigned", "slot": 1, "partitions": [2, 3], "t": 1.1},
        {"ev": "first", "slot": 0, "p": 0, "t": 1.2},
        {"ev": "first", "slot": 0, "p": 1, "t": 1.3},
        {"ev": "first", "slot": 1, "p": 2, "t": 1.4},
    )
    assert view.settled_at(run, 0.0) is None  # partition 3 handed out nothing yet
    feed(run, {"ev": "first", "slot": 1, "p": 3, "t": 1.5})
    assert view.settled_at(run, 0.0) == 1.5
    assert view.settled_at(run, 1.05) is None  # slot 0's rebalance ended before that
    assert view.owner_snapshot(run) == {0: 0, 1: 0, 2: 1, 3: 1}


def test_overlapping_unbalanced_or_short_handed_groups_are_not_settled() -> None:
    run = settled({"ev": "assigned", "slot": 1, "partitions": [1, 2, 3], "t": 2.0})
    assert view.settled_at(run, 0.0) is None  # partition 1 owned twice, 3 against 1
    run = settled()
    run.expected_live = 1
    assert view.settled_at(run, 0.0) is None
    feed(run, {"ev": "stopping", "slot": 1})
    assert view.settled_at(run, 0.0) is None  # slot 0 alone covers only half


def test_a_group_that_has_not_settled_says_which_condition_fails() -> None:
    run = group()
    assert view.unsettled_state(run, 0.0) == "no member live (expected 2)"
    run = settled({"ev": "assigned", "slot": 1, "partitions": [1, 2, 3], "t": 2.0})
    assert view.unsettled_state(run, 0.0) == (
        "2/2 members live; 1 outside 2..2 partitions (owning 2..3); 0 without a rebalance "
        "since; 4/4 partitions owned, 1 by more than one; 1 acquired without a record yet"
    )
    run = settled()
    run.expected_live = 3
    assert view.unsettled_state(run, 1.05).startswith(
        "2/3 members live; 0 outside 2..2 partitions (owning 2..2); 1 without a rebalance since"
    )


def test_consumer_protocol_members_whose_partitions_stay_hear_nothing() -> None:
    for mode, expected in (("azk-consumer", 3.0), ("azk-kafka", None)):
        run = settled(mode=mode)
        assert view.settled_at(run, 2.5) is None  # nothing happened since
        feed(run, {"ev": "assigned", "slot": 1, "partitions": [2, 3], "t": 3.0})
        # Eager and ZooKeeper modes wait for slot 0's rebalance too.
        assert view.settled_at(run, 2.5) == expected


def test_a_partition_moved_counts_once_its_new_owner_fetches_it() -> None:
    run = settled(
        {"ev": "released", "slot": 0, "partitions": [1], "last": {"1": 2.9}},
        {"ev": "assigned", "slot": 0, "partitions": [0, 2], "t": 3.0},
        {"ev": "released", "slot": 1, "partitions": [2], "last": {"2": 2.9}},
        {"ev": "assigned", "slot": 1, "partitions": [1, 3], "t": 3.1},
    )
    assert view.settled_at(run, 2.5) is None
    feed(run, {"ev": "first", "slot": 0, "p": 2, "t": 3.2})
    assert view.settled_at(run, 2.5) is None
    feed(run, {"ev": "first", "slot": 1, "p": 1, "t": 3.4})
    assert view.settled_at(run, 2.5) == 3.4


def handed_over(last: float) -> view.Run:
    """Partition 1 goes from slot 0, whose last record of it was at ``last``, to slot 1,
    whose first is at 4.0."""
    return settled(
        {"ev": "released", "slot": 0, "partitions": [1], "last": {"1": last}},
        {"ev": "first", "slot": 1, "p": 1, "t": 4.0},
    )


def test_two_members_handing_out_one_partition_at_once_is_an_overlap() -> None:
    run = handed_over(5.0)
    assert run.tenures == [(1, 0, 1.3, 5.0)]
    (found,) = view.overlaps(run)
    assert found == "p1: slot 0 until 5.000, slot 1 from 4.000"
    assert view.overlaps(handed_over(3.0)) == []


def test_errors_and_gap_reports_reach_the_orchestrator() -> None:
    run = group()
    feed(
        run, {"ev": "error", "slot": 1, "error": "boom"}, {"ev": "gaps", "gaps": {"0": {"1": 0.2}}}
    )
    assert run.errors == ["slot 1: boom"]
    assert run.gap_parts == {"0": {"1": 0.2}}
    assert run.changed.is_set()


def rebalance_line(slot: int, started_at: float, duration_s: float, **more: Any) -> dict[str, Any]:
    return {
        "ev": "rebalance",
        "slot": slot,
        "started_at": started_at,
        "duration_s": duration_s,
        "attempts": 1,
        **more,
    }


def test_the_critical_path_is_the_member_that_settled_last() -> None:
    run = settled(at=0.0)
    marker = len(run.events)
    feed(
        run,
        rebalance_line(0, 10.2, 0.1, phases={"plan": 10.0}),
        rebalance_line(1, 10.3, 0.4, phases={"plan": 5.0, "claims": 300.0}, reason="ids"),
        {"ev": "assigned", "slot": 1, "partitions": [2, 3], "t": 10.7},
        {"ev": "released", "slot": 1, "partitions": [3], "last": {}},
        {"ev": "assigned", "slot": 1, "partitions": [2, 3], "t": 10.7},
        {"ev": "first", "slot": 1, "p": 3, "t": 10.9},
    )
    rebs, critical = view.member_rebalances(run, marker, 10.0, 10.1, 11.0)
    assert [r["slot"] for r in rebs] == [0, 1]
    assert rebs[1]["from_ids_ms"] == pytest.approx(200)
    assert rebs[1]["first_records_ms"] == pytest.approx(200)
    assert critical is not None and critical["slot"] == 1
    assert critical["cmd_to_ids_ms"] == pytest.approx(100)
    assert critical["ids_to_start_ms"] == pytest.approx(200)
    assert critical["rebalance_ms"] == pytest.approx(400)
    assert critical["end_to_settled_ms"] == pytest.approx(300)
    assert critical["reason"] == "ids"
    assert view.member_rebalances(run, marker, 10.0, None, None)[1] is None


# -- the figures and the tables ---------------------------------------------------------------


def event(kind: str, latency: float | None, gap: float | None, **more: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "latency_s": latency,
        "latency_from_ids_s": None if latency is None else latency - 0.01,
        "unmoved_max_gap_s": gap,
        "moved": 2,
        "owner_node_problems": [],
        "rebalances": [],
        "critical": None,
        **more,
    }


def test_phase_figures_count_the_rebalances_that_spent_time_in_a_phase() -> None:
    results = [
        event(
            "join",
            0.2,
            0.1,
            rebalances=[
                {"duration_s": 0.05, "phases": {"plan": 1.0}, "queued_ms": 2.0},
                {"duration_s": 0.15, "phases": {}, "first_records_ms": 30.0},
                {"duration_s": 9.0, "phases": None},  # a Kafka mode: no phases
            ],
        )
    ]
    figures = stats.phase_stats(results)
    assert figures["plan"]["n"] == 1 and figures["plan"]["of"] == 2
    assert figures["total"]["max_ms"] == pytest.approx(150)
    assert figures["queued"]["of"] == 1 and figures["first_records"]["p50_ms"] == 30.0
    assert list(figures)[0] == "queued" and stats.PHASE_ORDER[-2:] == ("total", "first_records")


def test_critical_paths_by_kind_and_the_longest_phase() -> None:
    crit = {
        "cmd_to_ids_ms": 1.0,
        "ids_to_start_ms": None,
        "rebalance_ms": 5.0,
        "end_to_settled_ms": 2.0,
        "phases": {"plan": 1.0, "claims": 4.0},
    }
    results = [event("join", 0.1, None, critical=crit), event("leave", 0.2, None)]
    paths = stats.critical_stats(results)
    assert set(paths) == {"all", "join"}
    assert paths["join"]["n"] == 1 and paths["join"]["longest_phase"] == {"claims": 1}
    assert paths["all"]["rebalance_ms"]["p99"] == 5.0
    assert math.isnan(paths["all"]["ids_to_start_ms"]["max"])


def summary(mode: str = "azk", p99: float = 0.3) -> dict[str, Any]:
    run = group(mode, partitions=256, members=16)
    run.events = [{"ev": "ready", "t": 101.0}, {"ev": "jvm_started", "startup_s": 2.5}]
    results = [event("join", 0.1, 0.05), event("leave", p99, 0.2), event("join", None, None)]
    return stats.summarize(
        run, results, [0.1, 0.12], parse(), spawned_at=100.0, load_before="b", load_after="a"
    )


def test_a_configuration_is_summed_up_from_its_events() -> None:
    c = summary()
    assert (c["mode"], c["members"], c["partitions"], c["kafka"]) == ("azk", 16, 256, "3.9")
    assert (c["events"], c["settled"]) == (3, 2)
    assert c["p50_s"] == 0.1 and c["p99_s"] == 0.3 and c["max_s"] == 0.3
    assert c["unmoved_gap_max_s"] == 0.2 and c["baseline_gap_max_s"] == 0.12
    assert c["process_ready_max_s"] == 1.0 and c["jvm_start_max_s"] == 2.5
    assert c["heartbeat_ms"] is None and c["session_ms"] is None
    assert (c["load_before"], c["load_after"]) == ("b", "a")
    assert c["double_ownership"] == [] and c["owner_node_problems"] == 0


def data(*configs: dict[str, Any], kafka: str = "3.9") -> dict[str, Any]:
    machine = {"cpus": 2, "uptime": "load average: 0.50, 0.4, 0.3", "java_processes": 3}
    return {
        "settings": {
            "events": 3,
            "tick_ms": 100,
            "original_backoff_ms": 2000,
            "event_jitter_ms": {"azk": 0},
            "kafka": kafka,
            "broker_properties": {},
        },
        "command": "rebalance.py --quick",
        "machine_before": machine,
        "machine_after": machine,
        "versions": {},
        "uptime_per_config": ["azk 16x256: load average: 1.00, 0.9, 0.8"],
        "configs": list(configs),
    }


def test_the_tables_say_whether_the_target_was_met() -> None:
    met = report.markdown(data(summary(p99=0.3)))
    assert met.startswith("# Rebalance latency")
    assert "| azk | 16 x 256 | - | 2/3 | 100 | 300 | 300 |" in met
    assert "p99 = 300 ms -> met." in met
    assert "- `azk 16x256: load average: 1.00, 0.9, 0.8`" in met
    missed = report.markdown(data(summary(p99=0.7), kafka="4.3"))
    assert "p99 = 700 ms -> NOT met." in missed
    assert "Consumer-protocol modes" in missed
    assert "target" not in report.markdown(data(summary(mode="aiokafka"))).lower()


def test_table_cells() -> None:
    assert report.ms(0.1234) == "123" and report.ms(None) == "-" and report.ms(math.nan) == "-"
    assert report.load1("10:00 up 1 day, load average: 1.25, 0.5, 0.1") == "1.25"
    assert report.load1("") == "-"
    events = [event("join", 0.1, 0.05), event("join", None, None), event("leave", 0.2, 0.3)]
    assert report.by_kind(events, "join") == ["1/2", "100", "100", "100", "50 / 50"]
