"""Where the console consumer's records go, and how many of them got out.

An :class:`OutputSink` writes formatted records and says how many were delivered in full:
:class:`FdSink` writes to a file descriptor from a worker thread (on a pipe, optionally
counting a record only once the reader took it), :class:`StreamSink` wraps a file-like object.
:func:`records_written` is the pure count of the records a partial write got out.
"""

from __future__ import annotations

import os
import select
import stat
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import anyio

from ...errors import ConsumerError

if sys.platform != "win32":
    import fcntl
    import termios

__all__ = ["FdSink", "OutputSink", "StreamSink", "records_written"]


def records_written(sizes: Sequence[int], nbytes: int) -> int:
    """How many records went out in full when ``nbytes`` of their concatenation were written.

    Args:
        sizes: the records' sizes in bytes, in write order.
        nbytes: the bytes written from the start of the first record.

    Returns:
        The number of leading records whose every byte was written.
    """
    done = 0
    for n, size in enumerate(sizes):
        done += size
        if done > nbytes:
            return n
    return len(sizes)


class OutputSink(Protocol):
    """Where the console consumer writes the formatted records.

    Attributes:
        closed: whether the reader went away (a broken pipe): nothing more can be written.
    """

    closed: bool

    async def write_records(self, records: Sequence[bytes]) -> int:
        """Write the records in order; return how many were delivered in full.

        Fewer than ``len(records)`` only when the reader went away (then :attr:`closed` is
        set) or :meth:`abort` was called.

        Raises:
            ConsumerError: the output failed otherwise (disk full, I/O error).
        """
        ...

    def reader_gone(self) -> bool:
        """Whether the reader of the output went away (checked without writing)."""
        ...

    def abort(self) -> None:
        """Stop waiting for a slow reader: the record in flight counts as not delivered."""
        ...


class StreamSink:
    """An :class:`OutputSink` over a file-like object's ``write`` and ``flush``.

    For outputs without a file descriptor (e.g. a test runner's captured stdout). Each record
    is written with ``write``, each batch ends with ``flush``. A ``BrokenPipeError`` from
    ``write`` counts the records before it as delivered; from ``flush``, none of the batch
    (what a buffered writer had passed on is unknown).

    Args:
        write: called with each formatted record.
        flush: called after each batch.
    """

    def __init__(
        self, write: Callable[[bytes], object], flush: Callable[[], object] = lambda: None
    ) -> None:
        self.write = write
        self.flush = flush
        self.closed = False

    async def write_records(self, records: Sequence[bytes]) -> int:
        """See :meth:`OutputSink.write_records`."""
        if self.closed:
            return 0
        write = self.write
        for n, record in enumerate(records):
            try:
                write(record)
            except BrokenPipeError:
                self.closed = True
                return n
        try:
            self.flush()
        except BrokenPipeError:
            self.closed = True
            return 0
        return len(records)

    def reader_gone(self) -> bool:
        """Always ``False``: a file-like object does not tell."""
        return False

    def abort(self) -> None:
        """Nothing to abort: writes do not wait for a reader."""

    def __repr__(self) -> str:
        return f"<StreamSink{' closed' if self.closed else ''}>"


_HANDOFF_SPIN_S = 0.00005
_HANDOFF_FIRST_SLEEP_S = 0.00005
_HANDOFF_MAX_SLEEP_S = 0.005


def _unread_bytes(fd: int) -> int | None:
    """Bytes written to the pipe ``fd`` that its reader has not read (``FIONREAD``)."""
    if sys.platform == "win32":
        return None
    try:
        raw = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return None
    unread: int = struct.unpack("i", raw)[0]
    return unread


def _is_pipe(fd: int) -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False


class FdSink:
    """An :class:`OutputSink` writing to a file descriptor, counting exactly what got out.

    Records are written with ``os.write`` in a worker thread, so a reader that does not keep
    up blocks neither the event loop (the ZooKeeper session, the fetchers) nor the
    accounting: the bytes ``os.write`` took tell exactly which records were written in full.

    With ``handoff`` on a pipe (Linux), a record counts as delivered only once the reader has
    read it out of the pipe: each record is written into an empty pipe and the next waits
    until the pipe is empty again (``FIONREAD``), or until the reader goes away (the pipe
    reports ``POLLERR``). So ``consume ... | head -3`` delivers, and commits, exactly 3: the
    records ``head`` never read are not counted, though they were written into the pipe's
    buffer. Without ``handoff``, a record counts once it is in the pipe's buffer, which is
    faster (no wait for the reader per record) but counts what a reader that exits leaves
    unread. ``handoff`` is ignored where it cannot work (not a pipe, not Linux).

    Args:
        fd: the file descriptor (e.g. ``sys.stdout.fileno()``); blocking.
        handoff: count records as delivered only once the reader took them (pipes only).

    Attributes:
        handoff: whether the handoff is in effect.
        closed: whether the reader went away.
    """

    def __init__(self, fd: int, *, handoff: bool = False) -> None:
        self.fd = fd
        pipe = _is_pipe(fd)
        self.handoff = (
            handoff and pipe and sys.platform.startswith("linux") and _unread_bytes(fd) is not None
        )
        self.closed = False
        self._aborted = threading.Event()
        self._pipe = pipe and hasattr(select, "poll")

    async def write_records(self, records: Sequence[bytes]) -> int:
        """See :meth:`OutputSink.write_records`."""
        if self.closed or not records:
            return 0
        return await anyio.to_thread.run_sync(self._write_records, list(records))

    def reader_gone(self) -> bool:
        """Whether the pipe has no reader any more (``POLLERR``); ``False`` for non-pipes."""
        if self.closed:
            return True
        if not self._pipe:
            return False
        # A poll object per call: the event loop and the writing thread both ask.
        poller = select.poll()
        poller.register(self.fd, 0)  # POLLERR and POLLHUP are always reported
        if poller.poll(0):
            self.closed = True
        return self.closed

    def abort(self) -> None:
        """Stop waiting for the reader to take the record in flight (see the class doc)."""
        self._aborted.set()

    # -- in the worker thread --

    def _write_records(self, records: list[bytes]) -> int:
        if not self.handoff:
            data = b"".join(records)
            sent = self._write_all(data)
            return (
                len(records)
                if sent == len(data)
                else records_written(list(map(len, records)), sent)
            )
        for n, record in enumerate(records):
            if self._write_all(record) < len(record) or not self._wait_taken():
                return n
        return len(records)

    def _write_all(self, data: bytes) -> int:
        """Write ``data``; return the bytes written (fewer when the reader went away)."""
        view = memoryview(data)
        sent = 0
        while sent < len(data):
            try:
                sent += os.write(self.fd, view[sent:])
            except BrokenPipeError:
                self.closed = True
                return sent
            except InterruptedError:  # pragma: no cover - PEP 475 retries these itself
                continue
            except OSError as e:
                raise ConsumerError(f"cannot write the records: {e}") from e
        return sent

    def _wait_taken(self) -> bool:
        """Wait until the reader emptied the pipe: ``True``; ``False`` if it went away first."""
        # A pipe's write end has no "drained" event to wait for: poll. A reader that keeps
        # up takes the record within microseconds, less than the shortest sleep (the
        # kernel's timer slack): yield first, then sleep, backing off.
        spin_until = time.perf_counter() + _HANDOFF_SPIN_S
        delay = _HANDOFF_FIRST_SLEEP_S
        while True:
            if not _unread_bytes(self.fd):  # None: the pipe no longer tells; do not wait
                return True
            if time.perf_counter() < spin_until:
                os.sched_yield()
                continue
            if self.reader_gone() or self._aborted.is_set():
                # The reader may have taken the record between the look above and going away
                # (``head`` reads its last line and exits): then it was delivered.
                return not _unread_bytes(self.fd)
            time.sleep(delay)
            delay = min(delay * 2, _HANDOFF_MAX_SLEEP_S)

    def __repr__(self) -> str:
        flags = (" handoff" if self.handoff else "") + (" closed" if self.closed else "")
        return f"<FdSink fd={self.fd}{flags}>"
