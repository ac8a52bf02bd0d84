"""``spark/runtime.py``: the blocking portal synchronous Spark callbacks run coroutines through.

Without servers: results and errors come back to the calling thread as they were, a call past
its time limit is cancelled on the loop, stopping cancels what still runs and is bounded even
when a task ignores its cancellation, and nothing of the loop is left behind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from aiozkconsumer.errors import ConsumerClosedError
from aiozkconsumer.spark.runtime import LoopPortal, run_on_portal


class _Failed(Exception):
    pass


async def _add(a: int, b: int) -> int:
    await anyio.lowlevel.checkpoint()
    return a + b


async def _raise(error: BaseException) -> None:
    await anyio.lowlevel.checkpoint()
    raise error


async def _on_which_thread() -> str:
    return threading.current_thread().name


def _threads_named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(name)]


@pytest.fixture
def portal() -> Iterator[LoopPortal]:
    made = LoopPortal("test-portal")
    try:
        yield made
    finally:
        made.stop()
    assert _threads_named("test-portal") == []


def test_calls_run_on_the_portal_thread_and_return_their_result(portal: LoopPortal) -> None:
    assert portal.call(_add, 2, 3, timeout_s=10) == 5
    assert portal.call(_on_which_thread) == "test-portal"
    (thread,) = _threads_named("test-portal")
    assert thread.daemon  # a process that never stops it must still exit
    assert repr(portal) == "<LoopPortal test-portal [running]>"
    portal.stop()
    assert repr(portal) == "<LoopPortal test-portal [stopped]>"


@pytest.mark.parametrize(
    "error",
    [_Failed("no"), ConsumerClosedError("gone"), TimeoutError("the coroutine's own")],
    ids=["exception", "consumer-error", "timeout-from-the-coroutine"],
)
def test_errors_reach_the_caller_as_raised(portal: LoopPortal, error: Exception) -> None:
    with pytest.raises(type(error)) as raised:
        portal.call(_raise, error, timeout_s=10)
    assert raised.value is error
    assert portal.call(_add, 1, 1) == 2  # the loop goes on after a failed call


def test_a_call_past_its_time_limit_is_cancelled_on_the_loop(portal: LoopPortal) -> None:
    cancelled = threading.Event()

    async def slow() -> None:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise

    started = time.monotonic()
    with pytest.raises(TimeoutError, match="no result within 0.2 s"):
        portal.call(slow, timeout_s=0.2)
    assert time.monotonic() - started < 5
    assert cancelled.wait(5)


def test_stop_cancels_what_still_runs_is_idempotent_and_refuses_later_calls() -> None:
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    portal = LoopPortal("test-portal-stop")
    future = portal.start(forever)
    portal.stop()
    assert cancelled.is_set() and future.cancelled()
    assert not portal.running and _threads_named("test-portal-stop") == []
    portal.stop()  # again: nothing happens
    with pytest.raises(RuntimeError, match="stopped"):
        portal.call(_add, 1, 2)
    with pytest.raises(RuntimeError, match="stopped"):
        portal.start(_add, 1, 2)


def test_stop_is_bounded_when_a_task_ignores_its_cancellation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()

    async def stubborn() -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(release.wait)

    portal = LoopPortal("test-portal-stubborn")
    portal.start(stubborn)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="aiozkconsumer.spark.runtime"):
        portal.stop(timeout_s=0.3)
    assert time.monotonic() - started < 5
    assert "event loop thread test-portal-stubborn did not stop in 0.3 s" in caplog.text
    release.set()  # the portal then exits on its own
    for thread in _threads_named("test-portal-stubborn"):
        thread.join(5)
    assert _threads_named("test-portal-stubborn") == []


def test_run_on_portal_stops_its_loop_after_the_call() -> None:
    assert run_on_portal("test-portal-once", _add, 4, 5, timeout_s=10) == 9
    with pytest.raises(_Failed):
        run_on_portal("test-portal-once", _raise, _Failed("x"))
    with pytest.raises(TimeoutError):
        run_on_portal("test-portal-once", anyio.sleep, 30, timeout_s=0.1)
    assert _threads_named("test-portal-once") == []


def test_a_portal_whose_loop_died_refuses_calls_and_still_stops() -> None:
    class Fatal(BaseException):
        """Not an Exception: it ends the portal's loop, as anyio lets it."""

    portal = LoopPortal("test-portal-dead")
    with pytest.raises(Fatal):
        portal.call(_raise, Fatal(), timeout_s=10)
    deadline = time.monotonic() + 5
    while _threads_named("test-portal-dead") != [] and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(RuntimeError):
        portal.call(_add, 1, 2, timeout_s=1)
    portal.stop(timeout_s=5)
    assert _threads_named("test-portal-dead") == []
