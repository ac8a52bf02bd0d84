"""``benchmarks/_common.py``'s reading of another process's CPU time (the broker's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the benchmarks import each other by file name

from _common import _broker_pids, process_cpu_s  # noqa: E402


def test_process_cpu_s_sums_what_the_processes_used() -> None:
    # A child that burns CPU until it has used 0.3 s of it, then waits for its stdin to close.
    burn = (
        "import sys, time\n"
        "while time.process_time() < 0.3: pass\n"
        "print('burnt', flush=True); sys.stdin.read()"
    )
    with subprocess.Popen(
        [sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == "burnt\n"
        used = process_cpu_s([child.pid])
        both = process_cpu_s([child.pid, os.getpid()])
        child.stdin.close()
    assert used is not None and both is not None
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert 0.3 - 2 * tick <= used < 5  # what it burnt, rounded down to ticks (user, system)
    assert both > used


def test_process_cpu_s_is_none_without_pids_or_for_a_process_gone() -> None:
    assert process_cpu_s([]) is None
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert process_cpu_s([int(done.stdout)]) is None


def test_broker_pids_are_read_or_refused_clearly() -> None:
    assert _broker_pids("") == ()
    assert _broker_pids("12, 34") == (12, 34)
    with pytest.raises(SystemExit, match="--broker-pids"):
        _broker_pids("12,broker")
