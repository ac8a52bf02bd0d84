"""The scale benchmark's pure parts (``benchmarks/_scale_report.py``, ``scale.py``'s settings),
without a cluster or a child process: grids and names, line fits, the points kept from the
tools' result files and the tables."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the benchmarks import each other by file name

import _scale_report as report  # noqa: E402


def _load_cli() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_scale", BENCHMARKS / "scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cli = _load_cli()


def settings(*argv: str) -> dict[str, Any]:
    result: dict[str, Any] = cli.settings_of(cli.build_parser().parse_args(list(argv)))
    return result


# -- the command line -------------------------------------------------------------------------


def test_quick_is_the_smoke_grid() -> None:
    s = settings("--quick")
    assert (s["members"], s["partitions"]) == ([2, 8], [64])
    assert s["idle_partitions"] == [1, 100]
    assert s["throughput_partitions"] == [1, 8]
    assert s["curves"] == ["rebalance", "idle", "throughput"]
    assert s["modes"] == ["zookeeper", "classic", "consumer"]


def test_full_grid_by_default_and_options_win_over_quick() -> None:
    s = settings()
    assert s["members"] == [2, 8, 32, 64]
    assert s["partitions"] == [64, 1024, 4096]
    assert s["idle_partitions"] == [1, 100, 1000, 10000]
    assert s["throughput_partitions"] == [1, 8, 64, 512]
    assert (s["events"], s["throughput_repeats"]) == (10, 3)
    q = settings("--quick", "--members", "16,4,4", "--events", "7", "--curves", "idle")
    assert (q["members"], q["events"], q["curves"]) == ([4, 16], 7, ["idle"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--curves", "rebalance,speed"), "speed"),
        (("--modes", "zookeeper,eager"), "eager"),
        (("--members", "0,2"), "positive"),
        (("--idle-clients", "kafka-python"), "kafka-python"),
    ],
)
def test_bad_choices_are_refused(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings(*argv)


def test_modes_map_to_rebalance_py() -> None:
    assert [report.rebalance_mode(m) for m in ("zookeeper", "classic", "consumer")] == [
        "azk",
        "azk-kafka",
        "azk-consumer",
    ]
    assert report.rebalance_mode("azk-kafka-coop") == "azk-kafka-coop"


@pytest.mark.parametrize(
    ("members", "per_process"), [(2, 1), (8, 2), (16, 4), (32, 4), (64, 8), (100, 13)]
)
def test_members_per_process_keeps_at_most_eight_processes(members: int, per_process: int) -> None:
    assert report.members_per_process(members) == per_process
    assert math.ceil(members / per_process) <= 8


# -- fits -------------------------------------------------------------------------------------


def test_fit_line_recovers_a_line() -> None:
    fit = report.fit_line([(1, 52.0), (100, 55.96), (1000, 91.96), (10000, 451.96)])
    assert fit is not None
    slope, intercept = fit
    assert slope == pytest.approx(0.04)
    assert intercept == pytest.approx(51.96)


def test_fit_line_needs_two_distinct_x_and_skips_missing_y() -> None:
    assert report.fit_line([(64, 10.0)]) is None
    assert report.fit_line([(64, 10.0), (64, 12.0)]) is None
    assert report.fit_line([(1, 1.0), (2, None), (3, float("nan"))]) is None
    assert report.fit_line([(1, 1.0), (3, 5.0), (2, None)]) == (2.0, -1.0)


def _idle(client: str, partitions: int, rss: float, cpu: float, ok: bool = True) -> dict[str, Any]:
    return {"client": client, "partitions": partitions, "rss_mib": rss, "cpu_pct": cpu, "ok": ok}


def test_idle_fits_state_rss_per_partition_in_kib() -> None:
    points = [
        _idle("azk", 1, 60.0, 0.5),
        _idle("azk", 1001, 70.0, 1.5),
        _idle("azk", 5001, 0.0, 0.0, ok=False),  # a failed point is left out
        _idle("aiokafka", 100, 50.0, 0.2),
    ]
    azk, aiokafka = report.idle_fits(points)
    assert azk["client"] == "azk" and azk["points"] == 2
    assert azk["rss_kib_per_partition"] == pytest.approx(10 * 1024 / 1000)
    assert azk["cpu_pct_per_1000_partitions"] == pytest.approx(1.0)
    assert aiokafka["rss_kib_per_partition"] is None  # one point: no slope


def test_rebalance_fits_per_mode_and_members() -> None:
    def pt(mode: str, members: int, partitions: int, p50: float, p99: float) -> dict[str, Any]:
        return {
            "mode": mode,
            "members": members,
            "partitions": partitions,
            "p50_ms": p50,
            "p99_ms": p99,
            "ok": True,
        }

    rows = report.rebalance_fits(
        [
            pt("zookeeper", 2, 64, 100, 200),
            pt("zookeeper", 2, 1064, 300, 700),
            pt("classic", 2, 64, 1, 1),
        ]
    )
    assert rows[0]["p50_ms_per_1000_partitions"] == pytest.approx(200)
    assert rows[0]["p99_ms_per_1000_partitions"] == pytest.approx(500)
    assert rows[1]["points"] == 1 and rows[1]["p50_ms_per_1000_partitions"] is None


# -- points from the tools' files -------------------------------------------------------------


def test_rebalance_point_from_a_rebalance_py_config() -> None:
    config = {
        "mode": "azk",
        "members": 8,
        "partitions": 64,
        "events": 4,
        "settled": 4,
        "p50_s": 0.25,
        "p99_s": 1.5,
        "max_s": 1.5,
        "unmoved_gap_p50_s": 0.3,
        "baseline_gap_max_s": 0.2,
        "heartbeat_ms": None,
        "process_ready_max_s": 3.2,
        "double_ownership": [],
        "owner_node_problems": 0,
        "errors": [],
    }
    p = report.rebalance_point("zookeeper", config)
    assert (p["mode"], p["rebalance_mode"], p["ok"]) == ("zookeeper", "azk", True)
    assert (p["p50_ms"], p["p99_ms"], p["baseline_gap_ms"]) == (250.0, 1500.0, 200.0)
    assert p["double_ownership"] == 0
    nothing = report.rebalance_point("consumer", {**config, "settled": 0, "p50_s": float("nan")})
    assert not nothing["ok"] and nothing["p50_ms"] is None


def test_throughput_points_and_relative_rates() -> None:
    def summary(steady: float) -> dict[str, Any]:
        return {
            "runs": 1,
            "ok_runs": 1,
            "records": 20_000.0,
            "records_per_s": steady / 2,
            "steady_records_per_s": steady,
            "mib_per_s": 10.0,
            "first_record_s": 0.5,
            "import_s": 0.1,
            "window_cpu_s": 2.0,
            "maxrss_mib": 80.0,
        }

    one = report.throughput_points(1, {"summary": {"1KiB": {"azk-batch": summary(100_000)}}})
    eight = report.throughput_points(8, {"summary": {"1KiB": {"azk-batch": summary(80_000)}}})
    assert one[0]["cpu_s_per_m"] == pytest.approx(100.0)
    rel = report.relative_rates(eight + one)
    assert rel[("azk-batch", 1)] == pytest.approx(1.0)
    assert rel[("azk-batch", 8)] == pytest.approx(0.8)
    assert report.throughput_points(8, {}) == []


# -- tables -----------------------------------------------------------------------------------


def test_markdown_has_a_section_per_curve_that_ran() -> None:
    idle = [_idle("azk", 1, 60.0, 0.5), _idle("azk", 101, 61.0, 0.6)]
    data = {
        "settings": {"quick": True, "idle_settle_s": 5.0, "idle_window_s": 10.0},
        "machine_before": {"cpus": 2, "uptime": "load average: 1.00"},
        "machine_after": {"uptime": "load average: 2.00"},
        "notes": ["consumer mode left out"],
        "curves": {"idle": idle},
    }
    text = report.markdown(data)
    assert "## Idle CPU and RSS against owned partitions" in text
    assert "## Rebalance" not in text and "## Throughput" not in text
    assert "Note: consumer mode left out" in text
    assert "| azk | 2 | 10.24 | 60.0 | 1.000 |" in text  # 1 MiB over 100 partitions
    assert "Start-up (apart)" in text
