"""Leaving the group when Spark ends the source's planning process with SIGTERM.

Spark stops a streaming query's Python source (``PythonStreamingSourceRunner.stop``, Spark
4.x) by sending SIGTERM to the planning process (``Process.destroy`` of its "simple worker")
and then closing its socket, without waiting for the process. Python's default for SIGTERM
ends the process at once, so the source runner's ``finally: reader.stop()`` never ran: the
group member's ZooKeeper session (or Kafka group membership) stayed until it timed out, and
the other members took its partitions over only then.

Every :class:`~aiozkconsumer.spark.member.GroupMember` of a Spark Python worker is
registered here. The first one installs a SIGTERM handler in the worker's main thread and
starts a daemon thread, the *leaver*, that waits for it. The handler only writes a byte to a
pipe; the leaver then stops every member (each finishes a commit under way and leaves: the
session is closed, or LeaveGroup sent) and ends the process with status 143 (128 + SIGTERM),
as the signal's default would have, only after the leave.

The handler raises nothing. An earlier version raised an exception in the main thread, to
unwind into the runner's ``finally: reader.stop()``; but a signal handler's exception comes
at an arbitrary point of the main thread's code (Python's documentation, "Note on Signal
Handlers and Exceptions"), and one that comes between a lock's acquire and the ``try`` that
releases it (in ``concurrent.futures.wait``, ``threading.Event``) leaves that lock held: the
event loop's thread then blocks for good on it, and neither the leave nor the process ends
(a CI run saw a planning process still running 60 s after the signal). The main thread now
goes on undisturbed: when Spark closes the socket the runner calls ``reader.stop()`` itself,
which waits for the leaver's stop of the same member (:meth:`GroupMember.stop` is
serialized) and returns once it has left.

A member no reader stops is stopped at interpreter exit. Outside a Spark Python worker
(``SPARK_PYTHON_RUNTIME`` is not ``PYTHON_WORKER``: the user's own process, a test) nothing
is installed: a process's signals belong to its owner.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Protocol

__all__ = ["EXIT_STATUS", "LEAVE_DUMP_S", "Leaving", "forget", "leave_all", "track"]

log = logging.getLogger(__name__)

EXIT_STATUS = 128 + signal.SIGTERM
"""The status a worker ends with after leaving on SIGTERM: 143 (128 + the signal number)."""


class Leaving(Protocol):
    """What is stopped on SIGTERM: a group member."""

    def stop(self) -> None:
        """Leave the group and return once left; idempotent, never raises, safe to call from
        two threads at once (the second call returns when the first has left)."""


LEAVE_DUMP_S = 10.0
"""After this many seconds of leaving on SIGTERM, every thread's stack is written to stderr."""

_members: list[Leaving] = []
_lock = threading.Lock()
_installed_in: int | None = None  # the pid the handler and leaver were installed in
_wake: int | None = None  # the pipe's write end the handler writes to


def track(member: Leaving) -> None:
    """Stop ``member`` when the process gets SIGTERM (in a Spark Python worker).

    Installs the handler and starts the leaver thread on first use, when called from the main
    thread of a Spark Python worker; elsewhere only remembers the member (for
    :func:`leave_all`).
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
    global _installed_in, _wake
    if _installed_in == os.getpid() or os.environ.get("SPARK_PYTHON_RUNTIME") != "PYTHON_WORKER":
        return
    if threading.current_thread() is not threading.main_thread():
        return  # signal.signal works in the main thread only
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # a signal storm must not block the main thread
    _wake = write_end
    threading.Thread(target=_leaver, args=(read_end,), name="zkkafka-leaver", daemon=True).start()
    signal.signal(signal.SIGTERM, _on_sigterm)
    if _installed_in is None:
        # A member no reader.stop() reaches still leaves before the interpreter ends.
        atexit.register(leave_all)
    _installed_in = os.getpid()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Runs in the main thread between two of its bytecodes, wherever it is: no lock taken,
    # nothing raised, only a write the leaver wakes on. Spark may signal twice (the worker's
    # stop, then its factory's): the leaver reads once.
    if _wake is not None:
        with contextlib.suppress(OSError):
            os.write(_wake, b"\x0f")


def _leaver(read_end: int) -> None:
    try:
        os.read(read_end, 1)
    except OSError:
        return
    log.info("SIGTERM: leaving the group before the process ends")
    # A leave that takes long says where it waits: every thread's stack goes to stderr
    # (which Spark copies into its driver's log) once, after LEAVE_DUMP_S.
    faulthandler.dump_traceback_later(LEAVE_DUMP_S, file=sys.stderr)
    try:
        leave_all()
    finally:
        faulthandler.cancel_dump_traceback_later()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    logging.shutdown()
    os._exit(EXIT_STATUS)
