"""SIGTERM in a Spark Python worker: the members leave, then the process ends, and the signal
handler raises nothing into the main thread.

Each test runs a process of its own (signal handlers are per process) with the Spark worker's
environment (``SPARK_PYTHON_RUNTIME=PYTHON_WORKER``). Its main thread waits for futures a
pool's thread completes, over and over, as the planning process's main thread does through
the event loop's portal. An exception raised there by the handler (the old design) could come
between a lock's acquire and its release and leave the lock held; the tracked member's stop
is recorded in a file, and so is any exception the main thread sees.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

WORKER = textwrap.dedent(
    """
    import concurrent.futures, sys
    from pathlib import Path
    from aiozkconsumer.spark import termination

    out = Path(sys.argv[1])

    class Member:
        stopping = False  # (what the earlier, raising handler asked)

        def __init__(self, name):
            self.name = name

        def stop(self):
            with (out / "stopped").open("a") as f:
                f.write(self.name + "\\n")
            termination.forget(self)

    termination.track(Member("first"))
    termination.track(Member("second"))
    pool = concurrent.futures.ThreadPoolExecutor(1)
    print("ready", flush=True)
    try:
        while True:
            pool.submit(int).result()
    except BaseException as e:
        (out / "interrupted").write_text(repr(e))
        raise
    """
)


def _run_until_sigterm(tmp_path: Path, *, spark_worker: bool) -> int:
    env = dict(os.environ)
    env.pop("SPARK_PYTHON_RUNTIME", None)
    if spark_worker:
        env["SPARK_PYTHON_RUNTIME"] = "PYTHON_WORKER"
    with subprocess.Popen(
        [sys.executable, "-c", WORKER, str(tmp_path)], env=env, stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"
            proc.send_signal(signal.SIGTERM)
            return proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()


def test_sigterm_stops_every_member_newest_first_then_ends_the_worker_with_status_143(
    tmp_path: Path,
) -> None:
    status = _run_until_sigterm(tmp_path, spark_worker=True)
    assert not (tmp_path / "interrupted").exists(), (tmp_path / "interrupted").read_text()
    assert (tmp_path / "stopped").read_text().split() == ["second", "first"]
    assert status == 128 + signal.SIGTERM


def test_outside_a_spark_worker_sigterm_keeps_its_default(tmp_path: Path) -> None:
    status = _run_until_sigterm(tmp_path, spark_worker=False)
    assert status == -signal.SIGTERM
    assert not (tmp_path / "stopped").exists()


SLOW_LEAVE = textwrap.dedent(
    """
    import sys, threading
    from aiozkconsumer.spark import termination

    termination.LEAVE_DUMP_S = 0.1

    class Member:
        def slow_stop_waiting_for_stdin(self):
            sys.stdin.readline()  # the test answers once it has read the stacks

        def stop(self):
            self.slow_stop_waiting_for_stdin()
            termination.forget(self)

    termination.track(Member())
    print("ready", flush=True)
    threading.Event().wait()  # the main thread waits too (the runner reads its socket)
    """
)


def test_a_slow_leave_writes_every_threads_stack_to_stderr_then_still_ends(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "SPARK_PYTHON_RUNTIME": "PYTHON_WORKER"}
    with subprocess.Popen(
        [sys.executable, "-c", SLOW_LEAVE],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            assert proc.stdout.readline() == "ready\n"
            proc.send_signal(signal.SIGTERM)
            seen = []
            for line in proc.stderr:
                seen.append(line)
                if "slow_stop_waiting_for_stdin" in line:
                    break
            assert any("slow_stop_waiting_for_stdin" in line for line in seen), "".join(seen)
            proc.stdin.write("leave\n")
            proc.stdin.flush()
            assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        finally:
            if proc.poll() is None:
                proc.kill()
