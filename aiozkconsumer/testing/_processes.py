"""The local cluster's ``java`` child processes: start, signal, stop, and never leave one behind.

:class:`Server` wraps one server process (ZooKeeper or a broker), restartable on the same
port, its output appended to a log file. Every process started here dies with the test run:
``PR_SET_PDEATHSIG`` (when started from the main thread) and an ``atexit`` hook SIGKILL what
is left. :func:`free_ports` picks the servers' ports and :func:`tail` reads their logs.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiozkconsumer.testing._errors import LocalClusterError

__all__ = [
    "HOST",
    "STOP_GRACE_S",
    "Server",
    "free_ports",
    "make_preexec",
    "run_to_end",
    "tail",
    "terminate",
]

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
"""Every server listens on loopback only."""
STOP_GRACE_S = 15.0
"""How long a server may take to stop after SIGTERM before it is SIGKILLed."""

_PR_SET_PDEATHSIG = 1
_live_processes: set[subprocess.Popen[bytes]] = set()
_live_lock = threading.Lock()


def _load_libc() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:  # not Linux/glibc: rely on atexit alone
        return None


_libc = _load_libc()


def make_preexec() -> Callable[[], None] | None:
    """Return a ``preexec_fn`` making the child get SIGKILL when this thread exits.

    ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child exits, so it is only
    set for processes started from the main thread (a worker thread would take the servers
    down with it); the ``atexit`` handler covers the rest.
    """
    if _libc is None or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()
    libc = _libc

    def _die_with_parent() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent may have died between fork() and prctl(): then nobody would kill us.
        if os.getppid() != parent:
            os._exit(1)

    return _die_with_parent


def _kill_leftovers() -> None:
    """``atexit`` hook: SIGKILL every server process still running."""
    with _live_lock:
        procs = list(_live_processes)
        _live_processes.clear()
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            proc.wait(timeout=5)


atexit.register(_kill_leftovers)


class Server:
    """One ``java`` server process (ZooKeeper or a broker), restartable on the same port."""

    def __init__(self, name: str, port: int, cmd: list[str], log_file: Path) -> None:
        self.name = name
        self.port = port
        self.cmd = cmd
        self.log_file = log_file
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self) -> str:
        if self.proc is None:
            return "not started"
        code = self.proc.poll()
        if code is not None:
            return f"exited {code}"
        return "paused" if self.paused else "up"

    def spawn(self) -> None:
        """Start the process, its output appended to :attr:`log_file`.

        Raises:
            LocalClusterError: if it is already running.
        """
        if self.alive():
            raise LocalClusterError(f"{self.name} is already running")
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as out:
            out.write(f"\n==== {time.strftime('%H:%M:%S')} starting {self.name}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                self.cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.log_file.parent,
                start_new_session=True,
                preexec_fn=make_preexec(),
            )
        with _live_lock:
            _live_processes.add(proc)
        self.proc = proc
        self.paused = False
        log.debug("started %s (pid %d): %s", self.name, proc.pid, " ".join(self.cmd))

    def wait_stopped(self, timeout_s: float = 5.0) -> bool:
        """After a SIGSTOP, wait until every thread of the process is stopped (Linux:
        ``/proc/<pid>/task/*/stat`` state ``T``). A signal is delivered asynchronously: a
        thread running on the other core, or runnable and not yet scheduled, may still serve
        a request sent right after ``kill`` returned. Returns ``False`` on timeout; ``True``
        at once where ``/proc`` is not there (nothing to check)."""
        proc = self.proc
        if proc is None:
            return False
        tasks = Path(f"/proc/{proc.pid}/task")
        if not tasks.is_dir():
            return True
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = []
            for stat in tasks.glob("*/stat"):
                with contextlib.suppress(OSError):
                    # "pid (comm) S ...": the state follows the last ')'.
                    states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
            if states and all(state in ("T", "t") for state in states):
                return True
            time.sleep(0.005)
        return False

    def send_signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def kill_now(self) -> None:
        """SIGKILL and reap (a SIGKILLed process is gone within milliseconds)."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self.paused = False
        with _live_lock:
            _live_processes.discard(proc)

    def reaped(self) -> bool:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            if proc is not None:
                with _live_lock:
                    _live_processes.discard(proc)
            self.paused = False
            return True
        return False


async def terminate(servers: Sequence[Server], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM (and SIGCONT, for paused ones) then wait; SIGKILL what outlives ``grace``."""
    running = [s for s in servers if s.alive()]
    for server in running:
        server.send_signal(signal.SIGTERM)
        server.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + grace
    try:
        while running and time.monotonic() < deadline:
            running = [s for s in running if not s.reaped()]
            if running:
                await asyncio.sleep(0.05)
    finally:
        for server in running:
            if not server.reaped():
                log.warning("%s did not stop within %.0f s; killing it", server.name, grace)
                server.kill_now()


async def run_to_end(tool: Server, time_limit: float) -> int | None:
    """Start a short-lived process and wait until it exits (killed after ``time_limit``).

    Returns:
        Its exit code, or None if it did not exit within ``time_limit`` seconds.

    Raises:
        LocalClusterError: if it is already running.
    """
    deadline = time.monotonic() + time_limit
    tool.spawn()
    try:
        while not tool.reaped():
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.05)
    finally:
        tool.kill_now()
    return tool.proc.returncode if tool.proc is not None else None


def free_ports(count: int) -> list[int]:
    """Pick ``count`` distinct free loopback ports (bind to port 0, read, release)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind((HOST, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file (reads at most the last 1 MiB)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 1024 * 1024))
            data = f.read()
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:]) if lines > 0 else ""
