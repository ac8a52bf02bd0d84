"""The fetch connection's threaded mode: a blocking socket that a worker thread sends on and
receives from, so that the kernel's receive copy and the TLS decryption of fetch responses run
off the event loop's thread (both release the GIL).

A :class:`SocketLink` is one open connection (plain or TLS, ``ssl.SSLContext.wrap_socket`` with
the context and server name the asyncio mode uses). :meth:`SocketLink.transfer` runs one
request in a worker thread (``anyio.to_thread.run_sync``, a limiter of one per link, so a
link never has two requests in flight nor takes tokens from the default limiter the Spark
calls use): it sends the frame, then ``recv_into`` the receiver's :meth:`buffer` and tells it
:meth:`filled` until it is ``done`` (the same push parsers as the asyncio mode's protocol:
``FetchResponseParser``, or the SASL exchange's frame reader), then runs ``after`` on the
result, still in the thread (the fetcher checks the record sets' CRCs there, see
``records.read_record_sets``).

A request given up on (cancelled, or the time limit passed) closes the link: the socket is
shut down (a thread blocked in ``recv_into`` returns at once) and closed by whichever of the
loop and the thread is last done with it, so a descriptor is never closed under a thread still
using it. The thread only ever writes into its own request's receiver, which nothing else
reads once the request is given up on, and the receive buffers it made are not recycled while
it holds them (the native pool reuses a buffer only once nothing but the pool refers to it).
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from typing import Any, Protocol

import anyio
import anyio.to_thread

__all__ = ["Receiver", "SocketLink"]

_READABLE = select.POLLIN | select.POLLRDHUP
_GONE = select.POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL


class Receiver(Protocol):
    """A push parser of one response (``FetchResponseParser``, the SASL frame reader)."""

    done: bool

    @property
    def response(self) -> Any: ...

    def buffer(self) -> memoryview: ...

    def filled(self, nbytes: int) -> None: ...


def _set_kernel_timeouts(sock: socket.socket, timeout_s: float) -> None:
    """Block (no Python-level timeout), with ``timeout_s`` as SO_RCVTIMEO and SO_SNDTIMEO."""
    if sock.gettimeout() is not None:
        sock.settimeout(None)
    sec = int(timeout_s)
    timeval = struct.pack("ll", sec, int((timeout_s - sec) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)


class SocketLink:
    """One open connection of the threaded mode (see the module doc).

    Made by :meth:`connect`; the owner (``FetchConnection``) closes it.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()
        self._busy = False  # a worker thread is using the socket
        self._closed = False
        self._limiter = anyio.CapacityLimiter(1)

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        timeout_s: float,
        context: ssl.SSLContext | None,
        server_hostname: str | None,
    ) -> SocketLink:
        """Connect (and do the TLS handshake) in a worker thread.

        Raises:
            OSError: the connection or the handshake failed (``ssl.SSLError`` for TLS
                failures), or took longer than ``timeout_s`` (``TimeoutError``).
        """
        done: list[socket.socket] = []
        abandoned = threading.Event()

        def connect() -> socket.socket:
            sock = socket.create_connection((host, port), timeout=timeout_s)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if context is not None:
                    sock = context.wrap_socket(sock, server_hostname=server_hostname)
            except BaseException:
                sock.close()
                raise
            done.append(sock)
            if abandoned.is_set():  # the loop gave up on it: nobody else closes it
                sock.close()
            return sock

        try:
            with anyio.fail_after(timeout_s + 1):
                sock = await anyio.to_thread.run_sync(connect, abandon_on_cancel=True)
        except BaseException:
            abandoned.set()
            for sock in done:  # connected just as the loop gave up
                sock.close()
            raise
        return cls(sock)

    @property
    def is_open(self) -> bool:
        """Whether the link can take a request: not closed, and, between requests, not
        closed by the broker either (a restarted or idle-timed-out broker's end of stream
        is waiting to be read: closed here, so the next request reconnects first, as the
        asyncio mode's ``connection_lost`` does)."""
        if self._closed:
            return False
        if self._busy:
            return True
        # Never blocks. Between requests nothing should be readable: an end of stream (or a
        # reset) means the broker closed, anything else is out of sync, except over TLS,
        # where records the TLS layer has yet to read (TLS 1.3 session tickets) may wait.
        poller = select.poll()
        poller.register(self._sock.fileno(), _READABLE)
        events = poller.poll(0)
        if not events:
            return True
        flags = events[0][1]
        if flags & _GONE == 0 and isinstance(self._sock, ssl.SSLSocket):
            return True
        self.close()
        return False

    async def transfer(
        self,
        frame: bytes,
        receiver: Receiver,
        timeout_s: float,
        after: Callable[[Any], None] | None = None,
    ) -> Any:
        """Send ``frame`` and receive the answer into ``receiver``, in a worker thread.

        Args:
            frame: the request, size prefix included.
            receiver: where the answer goes (a new one per request).
            timeout_s: time limit of the whole exchange (socket and loop side).
            after: called with ``receiver.response`` in the thread once it is done.

        Returns:
            ``receiver.response``.

        Raises:
            OSError: the connection failed, was closed, or the time limit passed
                (``TimeoutError``); the link is closed.
            ValueError: the answer did not parse (what ``receiver.filled`` raises); the link is
                closed.
            Exception: what ``after`` raises; the link is closed.
        """

        def run() -> Any:
            with self._lock:
                if self._closed:
                    raise ConnectionError("connection closed")
                self._busy = True
            try:
                sock = self._sock
                buffer, filled = receiver.buffer, receiver.filled
                if isinstance(sock, ssl.SSLSocket):
                    sock.settimeout(timeout_s)
                    sock.sendall(frame)
                    recv_into = sock.recv_into
                    while not receiver.done:
                        n = recv_into(buffer())
                        if not n:
                            raise ConnectionResetError("the broker closed the connection")
                        filled(n)
                else:
                    # Blocking, with the kernel's time limits, so that MSG_WAITALL fills each
                    # buffer the parser hands out (never more than the response's rest) in
                    # one call: the GIL is taken back once per buffer, not per segment,
                    # however busy the event loop's thread keeps it.
                    _set_kernel_timeouts(sock, timeout_s)
                    sock.sendall(frame)
                    recv_all = sock.recv_into
                    try:
                        while not receiver.done:
                            n = recv_all(buffer(), 0, socket.MSG_WAITALL)
                            if not n:
                                raise ConnectionResetError("the broker closed the connection")
                            filled(n)
                    except BlockingIOError as e:  # SO_RCVTIMEO passed with nothing received
                        raise TimeoutError(f"no answer within {timeout_s} s") from e
            except BaseException:
                self._close_in_thread()
                raise
            finally:
                self._release()
            response = receiver.response
            if after is not None:
                after(response)
            return response

        ok = False
        try:
            # The socket's own time limit normally ends a late answer; the loop's is the
            # backstop (a thread cannot be interrupted: closing the socket ends its wait).
            with anyio.fail_after(timeout_s + 1):
                response = await anyio.to_thread.run_sync(
                    run, abandon_on_cancel=True, limiter=self._limiter
                )
            ok = True
        finally:
            if not ok:
                self.close()
        return response

    def _release(self) -> None:
        with self._lock:
            self._busy = False
            if self._closed:
                self._sock.close()  # closed meanwhile by the loop: left to the thread

    def _close_in_thread(self) -> None:
        with self._lock:
            self._closed = True

    def close(self) -> None:
        """Shut the socket down (a thread blocked on it returns) and close it once no thread
        uses it (never raises)."""
        with self._lock:
            if self._closed and not self._busy:
                with contextlib.suppress(OSError):
                    self._sock.close()
                return
            self._closed = True
            # socket.socket's shutdown, not SSLSocket's (which drops the TLS object a thread
            # may be reading with): no close_notify, Kafka needs none.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(self._sock, socket.SHUT_RDWR)
            if not self._busy:
                with contextlib.suppress(OSError):
                    self._sock.close()
