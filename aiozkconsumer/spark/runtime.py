"""An asyncio event loop in a background thread, for synchronous callers such as Spark.

Spark calls a stream reader's methods synchronously, from the JVM-driven Python process of
the source (``python_streaming_source_runner``). The group member behind the reader is a
connector (``ZookeeperConsumerConnector`` or ``KafkaConsumerConnector``), which needs a
running event loop to keep its session (ZooKeeper, or heartbeats to the group coordinator)
and follow rebalances between those calls: :class:`LoopThread` keeps one running in a daemon
thread and runs coroutines on it for the caller.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from .._loops import close_loop

__all__ = ["LoopThread"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class LoopThread:
    """A private event loop running in a daemon thread.

    A daemon thread, so that a process Spark ends without calling ``stop()`` on the reader
    does not hang at exit waiting for it.

    Args:
        name: the thread's name (shows in thread dumps and logs).
    """

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        loop.call_soon(self._started.set)
        try:
            loop.run_forever()
        finally:
            close_loop(loop)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop."""
        return self._loop

    @property
    def alive(self) -> bool:
        """Whether the loop's thread is running."""
        return self._thread.is_alive()

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Schedule a coroutine on the loop.

        Args:
            coro: the coroutine.

        Returns:
            A future of its result.

        Raises:
            RuntimeError: the loop was stopped.
        """
        if not self.alive:
            coro.close()
            raise RuntimeError("the event loop thread is stopped")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, _T], timeout_s: float | None = None) -> _T:
        """Run a coroutine on the loop and wait for its result (never from the loop itself).

        Args:
            coro: the coroutine.
            timeout_s: the longest wait in seconds; ``None`` waits for ever.

        Returns:
            Its result.

        Raises:
            TimeoutError: it did not finish within ``timeout_s`` (it is then cancelled).
            RuntimeError: the loop was stopped.
            BaseException: whatever the coroutine raised.
        """
        future = self.submit(coro)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no result within {timeout_s} s") from None

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the loop (its remaining tasks are cancelled) and join the thread. Idempotent."""
        if self.alive:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning(
                    "event loop thread %s did not stop in %.0f s", self._thread.name, timeout_s
                )

    def __repr__(self) -> str:
        return f"<LoopThread {self._thread.name} [{'running' if self.alive else 'stopped'}]>"
