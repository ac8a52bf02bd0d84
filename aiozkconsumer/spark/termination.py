"""Leaving the group when Spark ends the source's planning process with SIGTERM.

Spark stops a streaming query's Python source (``PythonStreamingSourceRunner.stop``, Spark
4.x) by sending SIGTERM to the planning process (``Process.destroy`` of its "simple worker")
and then closing its socket, without waiting for the process. Python's default for SIGTERM
ends the process at once, so the source runner's ``finally: reader.stop()`` never ran: the
group member's ZooKeeper session (or Kafka group membership) stayed until it timed out, and
the other members took its partitions over only then.

Every :class:`~aiozkconsumer.spark.member.GroupMember` of a Spark Python worker is
registered here, and the worker's main thread gets a SIGTERM handler that turns the signal
into the stop Spark meant: it raises :class:`Terminated` in the main thread, which unwinds
out of whatever planning call was running (releasing its locks) into the runner's
``finally: reader.stop()``, so the member finishes a commit under way and leaves (the
session is closed, or LeaveGroup sent) before the process ends. A member stop already under
way is left to finish; a member no reader stops is stopped at interpreter exit. Outside a
Spark Python worker (``SPARK_PYTHON_RUNTIME`` is not ``PYTHON_WORKER``: the user's own
process, a test) nothing is installed: a process's signals belong to its owner.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from types import FrameType
from typing import Protocol

__all__ = ["Leaving", "Terminated", "forget", "leave_all", "track"]

log = logging.getLogger(__name__)


class Terminated(SystemExit):
    """Raised in the main thread of a Spark Python worker that got SIGTERM (exit status 143)."""


class Leaving(Protocol):
    """What is stopped on SIGTERM: a group member."""

    @property
    def stopping(self) -> bool:
        """Whether a ``stop()`` is under way (or done)."""

    def stop(self) -> None:
        """Leave the group; idempotent, never raises."""


_members: list[Leaving] = []
_lock = threading.Lock()
_terminating = False
_installed = False


def track(member: Leaving) -> None:
    """Stop ``member`` when the process gets SIGTERM (in a Spark Python worker).

    Installs the handler on first use, when called from the main thread of a Spark Python
    worker; elsewhere only remembers the member (for :func:`leave_all`).
    """
    with _lock:
        _members.append(member)
    _install()


def forget(member: Leaving) -> None:
    """``member`` stopped: no longer stop it on SIGTERM."""
    with _lock:
        if member in _members:
            _members.remove(member)


def leave_all() -> None:
    """Stop every tracked member, newest first (each waits for its leave). Never raises."""
    with _lock:
        members = list(reversed(_members))
    for member in members:
        try:
            member.stop()
        except Exception as e:  # stop() never raises; a process going down must not either
            log.warning("stopping %r failed: %r", member, e)


def _install() -> None:
    global _installed
    if _installed or os.environ.get("SPARK_PYTHON_RUNTIME") != "PYTHON_WORKER":
        return
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _on_sigterm)
    # A member no reader.stop() reaches (the signal came between its start and the
    # reader keeping it) still leaves before the interpreter ends.
    atexit.register(leave_all)
    _installed = True


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _terminating
    if _terminating:
        # Spark may signal twice (the worker's stop, then its factory's): once is enough.
        return
    _terminating = True
    with _lock:
        stopping = any(m.stopping for m in _members)
    if stopping:
        # A stop() is under way further up this thread's stack (the runner's finally, after
        # Spark closed the socket): let it finish leaving; the runner then ends the process.
        return
    raise Terminated(128 + signum)
