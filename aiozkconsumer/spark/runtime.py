"""An event loop for synchronous callers such as Spark, through anyio's blocking portal.

Spark calls a stream reader's methods synchronously, from the JVM-driven Python process of
the source (``python_streaming_source_runner``). The group member behind the reader is a
connector (``ZookeeperConsumerConnector`` or ``KafkaConsumerConnector``), which needs a
running event loop to keep its session (ZooKeeper, or heartbeats to the group coordinator)
and follow rebalances between those calls: :class:`LoopPortal` keeps one running in a daemon
thread — ``anyio.from_thread.start_blocking_portal``, entered when it is made and exited when
it is stopped — and runs coroutines on it for the caller. :func:`run_on_portal` does the same
for one call that needs a loop only while it runs (a batch read's planning, ``commit_batch``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar, TypeVarTuple, Unpack

from anyio.from_thread import start_blocking_portal

__all__ = ["STOP_TIMEOUT_S", "LoopPortal", "run_on_portal"]

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 30.0
"""How long stopping a :class:`LoopPortal` waits for its loop's thread to end, in seconds."""

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")


class LoopPortal:
    """An event loop in a daemon thread, for synchronous callers: an anyio blocking portal.

    The portal (``start_blocking_portal``) is entered when this object is made and exited by
    :meth:`stop`. Its thread is a daemon, so that a process Spark ends without calling
    ``stop()`` on the reader does not hang at exit waiting for it.

    Args:
        name: the thread's name (shows in thread dumps and logs).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._exit = contextlib.ExitStack()
        self._portal = self._exit.enter_context(start_blocking_portal("asyncio", name=name))
        self._stopped = False

    @property
    def running(self) -> bool:
        """Whether the portal takes calls (it was not stopped)."""
        return not self._stopped

    def start(
        self, func: Callable[[Unpack[_Ts]], Awaitable[_T]], *args: *_Ts
    ) -> concurrent.futures.Future[_T]:
        """Start ``func(*args)`` as a task on the loop.

        Args:
            func: an async function.
            args: its arguments.

        Returns:
            A future of its result; cancelling the future cancels the task.

        Raises:
            RuntimeError: the portal was stopped.
        """
        if self._stopped:
            raise RuntimeError(f"the event loop thread {self.name} is stopped")
        return self._portal.start_task_soon(func, *args)

    def call(
        self,
        func: Callable[[Unpack[_Ts]], Awaitable[_T]],
        *args: *_Ts,
        timeout_s: float | None = None,
    ) -> _T:
        """Run ``func(*args)`` on the loop and wait for its result (never from the loop itself).

        Args:
            func: an async function.
            args: its arguments.
            timeout_s: the longest wait in seconds; ``None`` waits for ever.

        Returns:
            Its result.

        Raises:
            TimeoutError: it did not finish within ``timeout_s`` (it is then cancelled).
            RuntimeError: the portal was stopped.
            BaseException: whatever ``func`` raised.
        """
        future = self.start(func, *args)
        done, _ = concurrent.futures.wait([future], timeout_s)
        if not done:
            future.cancel()
            raise TimeoutError(f"no result within {timeout_s} s")
        return future.result()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Cancel the loop's remaining tasks, exit the portal and join its thread. Idempotent;
        never raises.

        Waits at most ``timeout_s``: the portal is exited in a helper thread, so that a task
        that does not end when cancelled is left behind in the daemon thread (with a warning)
        instead of holding up Spark's call for good.
        """
        if self._stopped:
            return
        self._stopped = True
        exiting = threading.Thread(target=self._exit_portal, name=f"{self.name}-stop", daemon=True)
        exiting.start()
        exiting.join(timeout_s)
        if exiting.is_alive():
            log.warning("event loop thread %s did not stop in %g s", self.name, timeout_s)

    def _exit_portal(self) -> None:
        try:
            # As the portal's own exit after an error: what still runs is cancelled, not
            # waited for. A RuntimeError: the loop has ended already.
            with contextlib.suppress(RuntimeError):
                self._portal.call(self._portal.stop, True)
            self._exit.close()
        except Exception as e:
            log.warning("stopping event loop thread %s failed: %r", self.name, e)

    def __repr__(self) -> str:
        return f"<LoopPortal {self.name} [{'running' if self.running else 'stopped'}]>"


def run_on_portal(
    name: str,
    func: Callable[[Unpack[_Ts]], Awaitable[_T]],
    *args: *_Ts,
    timeout_s: float | None = None,
) -> _T:
    """:meth:`LoopPortal.call` on a portal of its own named ``name``, stopped afterwards.

    Spark may reuse the process for other work: nothing of ours is left running in it.
    Returns and raises what the call does (``TimeoutError`` past ``timeout_s``).
    """
    portal = LoopPortal(name)
    try:
        return portal.call(func, *args, timeout_s=timeout_s)
    finally:
        portal.stop()
