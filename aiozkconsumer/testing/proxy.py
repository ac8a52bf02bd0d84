"""A TCP proxy for injecting network faults between consumers and their servers.

:class:`TcpProxy` listens on a loopback port and forwards every connection it accepts to
one upstream server. At runtime it can cut the link in one direction or both, add latency,
reset every connection, or stop accepting connections. These are the network faults of a
Jepsen-style test: a partition that keeps TCP up (blackhole), a crashed peer (reset), a
server that is down (refuse), and a slow network (delay). Process faults (SIGKILL,
SIGSTOP) need no proxy.

ZooKeeper: start one proxy per server and give the consumers the proxies' addresses::

    async with TcpProxy("127.0.0.1", zk_port) as proxy:
        config = ConsumerConfig(group_id=..., zookeeper_connect=proxy.address)
        ...
        proxy.blackhole()  # heartbeats stop: the session expires while TCP stays up
        ...
        proxy.pass_through()  # the client reconnects (to a new session if it expired)

Kafka brokers: after bootstrap, a client connects to the address the broker *advertises*
in its metadata, and that would bypass the proxy. So the broker must advertise the
proxy's address, and the proxy must point at the broker's real listener. With
:class:`~aiozkconsumer.testing.LocalCluster`, that means
``broker_properties={"advertised.listeners": "PLAINTEXT://127.0.0.1:<proxy port>"}``, a
proxy bound to that port (``TcpProxy(..., listen_port=<proxy port>)``), and one proxy
per broker. The upstream is resolved at each connection, so the proxy may start before
the broker does. Other brokers and the controller use the advertised address too. To
keep their traffic off the proxy, give them a listener of their own
(``inter.broker.listener.name``).

The modes (:class:`FaultMode`):

- ``pass_through()``: bytes are forwarded as they come.
- ``blackhole(direction)``: bytes are read and dropped, so the peer hears nothing. A
  connection's end-of-stream is held back until the direction carries again. The
  connections stay open, as over a cut link.
- ``delay(seconds, direction)``: each chunk is forwarded ``seconds`` after it was read,
  in order. This is latency, not a bandwidth limit.
- ``reset()``: every connection is closed with a TCP RST (``SO_LINGER`` 0) on both
  sides. New connections are accepted and reset at once, until the mode changes.
- ``refuse()``: the listener stops accepting, so connects fail with ``ECONNREFUSED``.
  The port stays reserved, and any other mode listens on it again. Open connections are
  left alone. For a crashed server, call ``reset()`` and then ``refuse()``.

``blackhole`` and ``delay`` apply to a direction: ``"up"`` (client to server),
``"down"`` (server to client) or ``"both"``. ``reset`` and ``refuse`` act on whole
connections, so they always cover both directions. Setting any other mode, in any
direction, leaves them: the other direction then becomes pass-through.

Each connection is served by four coroutines: a reader and a writer per direction, joined
by a buffer of at most :data:`BUFFER_CHUNKS` chunks of :data:`READ_SIZE` bytes. They run in
one task group per connection, inside the proxy's task group. A read or write error on
either side (for example the peer's RST) resets the whole connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import math
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from aiozkconsumer._resource import AsyncService
from aiozkconsumer.errors import ConsumerError

__all__ = [
    "BUFFER_CHUNKS",
    "CLOSE_TIMEOUT_S",
    "CONNECT_TIMEOUT_S",
    "READ_SIZE",
    "Direction",
    "FaultMode",
    "ProxyError",
    "ProxyStatistics",
    "TcpProxy",
]

log = logging.getLogger(__name__)

READ_SIZE = 64 * 1024
"""Most bytes read from a socket at a time (one chunk)."""
BUFFER_CHUNKS = 16
"""Chunks one direction of a connection may hold between reading and writing (1 MiB)."""
CONNECT_TIMEOUT_S = 10.0
"""Seconds the proxy waits for the upstream to accept a connection."""
CLOSE_TIMEOUT_S = 10.0
"""Seconds :meth:`TcpProxy.close` waits for the proxy's tasks to end."""

_BACKLOG = 128
_ACCEPT_BACKOFF_S = 0.05  # after an accept error such as EMFILE, so the loop does not spin
_LINGER_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, not FIN
_DIRECTIONS: tuple[Literal["up"], Literal["down"]] = ("up", "down")

_SockAddr = tuple[Any, ...]  # (host, port) for IPv4, (host, port, flowinfo, scope_id) for IPv6

Direction = Literal["up", "down", "both"]
"""``"up"`` is client to server, ``"down"`` server to client, ``"both"`` both of them."""


class ProxyError(ConsumerError):
    """The proxy cannot listen (for example, the port is taken) or was used out of order."""


class FaultMode(enum.Enum):
    """What a :class:`TcpProxy` does with one direction of its connections."""

    PASS_THROUGH = "pass_through"
    """Forward bytes as they come."""
    BLACKHOLE = "blackhole"
    """Read and drop bytes. The connection stays open, and its end-of-stream waits."""
    DELAY = "delay"
    """Forward each chunk a fixed time after it was read, in order."""
    RESET = "reset"
    """Reset every connection with RST, including new ones (both directions)."""
    REFUSE = "refuse"
    """Do not accept connections; open ones pass through (both directions)."""


_CONNECTION_MODES = frozenset({FaultMode.RESET, FaultMode.REFUSE})


@dataclass(frozen=True)
class ProxyStatistics:
    """A snapshot of a :class:`TcpProxy` (from :meth:`TcpProxy.statistics`).

    Attributes:
        mode_up: mode of the client-to-server direction.
        mode_down: mode of the server-to-client direction.
        delay_up_s: delay of the client-to-server direction, in seconds (0 unless
            ``mode_up`` is ``DELAY``).
        delay_down_s: delay of the server-to-client direction, in seconds.
        listening: whether connects are accepted now. False before start, after close,
            and while refusing.
        connections_accepted: connections accepted since start, including those reset at
            once in ``RESET`` mode.
        connections_open: connections being served now.
        connections_reset: connections the proxy closed with RST (``reset()``, an
            unreachable upstream, or an error on either side).
        bytes_up: bytes forwarded client to server. A chunk is counted when its write
            starts, so a reply the client has read is always counted.
        bytes_down: bytes forwarded server to client.
        bytes_dropped_up: bytes dropped client to server by ``BLACKHOLE``.
        bytes_dropped_down: bytes dropped server to client by ``BLACKHOLE``.
    """

    mode_up: FaultMode
    mode_down: FaultMode
    delay_up_s: float
    delay_down_s: float
    listening: bool
    connections_accepted: int
    connections_open: int
    connections_reset: int
    bytes_up: int
    bytes_down: int
    bytes_dropped_up: int
    bytes_dropped_down: int


@dataclass(frozen=True)
class _Chunk:
    data: bytes
    due: float  # anyio.current_time() at which the chunk may be written


@dataclass(eq=False)
class _Connection:
    """One accepted connection: its sockets and the scope its coroutines run in."""

    number: int
    client: socket.socket
    peer: str
    upstream: socket.socket | None = None
    rst: bool = False
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def fail(self, side: str, exc: OSError) -> None:
        """Tear the connection down with RST on both sides after an error on one."""
        log.debug(
            "proxy connection #%d (%s): %s side failed: %r", self.number, self.peer, side, exc
        )
        self.rst = True
        self.scope.cancel()

    def close(self) -> None:
        """Close both sockets, with RST if :attr:`rst` is set. Never raises."""
        for sock in (self.client, self.upstream):
            if sock is not None:
                _close_socket(sock, rst=self.rst)


def _close_socket(sock: socket.socket, *, rst: bool) -> None:
    if rst:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    sock.close()


def _targets(direction: Direction) -> tuple[Literal["up", "down"], ...]:
    if direction == "both":
        return _DIRECTIONS
    if direction in _DIRECTIONS:
        return (direction,)
    raise ValueError(f"direction must be 'up', 'down' or 'both', got {direction!r}")


def _with_port(sockaddr: _SockAddr, port: int) -> _SockAddr:
    return (sockaddr[0], port, *sockaddr[2:])


def _format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class TcpProxy(AsyncService):
    """An asyncio TCP proxy to one upstream server, with switchable faults.

    Use it as an async context manager, or call :meth:`start` and :meth:`close`. The two
    may run in different tasks, such as a pytest-asyncio fixture's setup and teardown, but
    they must run in the same event loop. The fault methods may be called at any time,
    even before start; a closed proxy cannot be started again. Not thread-safe: use it from
    its event loop's thread.

    Args:
        upstream_host: host name or address of the server to forward to.
        upstream_port: its TCP port.
        listen_host: address to listen on (default ``"127.0.0.1"``).
        listen_port: port to listen on; 0 (the default) picks a free one. The port is kept
            for the proxy's lifetime, including while it refuses connections.
    """

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
    ) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listen_host = listen_host
        self._listen_port = listen_port
        self._modes: dict[str, FaultMode] = dict.fromkeys(_DIRECTIONS, FaultMode.PASS_THROUGH)
        self._delays: dict[str, float] = dict.fromkeys(_DIRECTIONS, 0.0)
        self._forwarded: dict[str, int] = dict.fromkeys(_DIRECTIONS, 0)
        self._dropped: dict[str, int] = dict.fromkeys(_DIRECTIONS, 0)
        self._accepted = 0
        self._reset_count = 0
        self._numbers = itertools.count(1)
        self._connections: set[_Connection] = set()
        self._family = socket.AF_INET
        self._bind_address: _SockAddr | None = None
        self._sock: socket.socket | None = None
        self._listening = False
        self._accept_scope: anyio.CancelScope | None = None
        self._tg: TaskGroup | None = None
        self._runner: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False
        self._changed: anyio.Event | None = None  # created by the first waiter

    # -- description ------------------------------------------------------------------------

    def __repr__(self) -> str:
        try:
            here = self.address
        except ProxyError:
            here = _format_address(self._listen_host, self._listen_port)
        state = "closed" if self._closed else "running" if self._tg is not None else "new"
        return (
            f"<TcpProxy {here} -> {self.upstream} [{state}, up={self._describe('up')}, "
            f"down={self._describe('down')}, open={len(self._connections)}]>"
        )

    def _describe(self, direction: str) -> str:
        mode = self._modes[direction]
        if mode is FaultMode.DELAY:
            return f"delay {self._delays[direction]:g}s"
        return str(mode.value)

    @property
    def port(self) -> int:
        """The port the proxy listens on.

        Raises:
            ProxyError: if ``listen_port`` was 0 and the proxy has not been started.
        """
        if self._bind_address is not None:
            port: int = self._bind_address[1]
            return port
        if self._listen_port:
            return self._listen_port
        raise ProxyError("the proxy has no port before start()")

    @property
    def address(self) -> str:
        """``"host:port"`` of the listener, for a connect string (``zookeeper_connect``).

        Raises:
            ProxyError: if ``listen_port`` was 0 and the proxy has not been started.
        """
        return _format_address(self._listen_host, self.port)

    @property
    def upstream(self) -> str:
        """``"host:port"`` of the server the proxy forwards to."""
        return _format_address(*self._upstream)

    def statistics(self) -> ProxyStatistics:
        """Return a snapshot of the modes and counters.

        Returns:
            A frozen :class:`ProxyStatistics`.
        """
        return ProxyStatistics(
            mode_up=self._modes["up"],
            mode_down=self._modes["down"],
            delay_up_s=self._delays["up"],
            delay_down_s=self._delays["down"],
            listening=self._listening,
            connections_accepted=self._accepted,
            connections_open=len(self._connections),
            connections_reset=self._reset_count,
            bytes_up=self._forwarded["up"],
            bytes_down=self._forwarded["down"],
            bytes_dropped_up=self._dropped["up"],
            bytes_dropped_down=self._dropped["down"],
        )

    async def wait_statistics(
        self, predicate: Callable[[ProxyStatistics], bool]
    ) -> ProxyStatistics:
        """Wait until ``predicate(self.statistics())`` is true.

        The predicate is checked now and after every change: a mode, the listener, a
        connection opening or closing, or bytes forwarded or dropped. Bound the wait with
        ``anyio.fail_after``.

        Args:
            predicate: called with each new snapshot.

        Returns:
            The first snapshot for which ``predicate`` returned true.
        """
        while True:
            snapshot = self.statistics()
            if predicate(snapshot):
                return snapshot
            await self._next_change()

    # -- lifecycle --------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Leaving ``async with``: :meth:`close`."""
        await self.close()

    async def start(self) -> None:
        """Bind the listener and start serving, in the current mode.

        When this returns, connects succeed, unless the mode is ``REFUSE``.

        Raises:
            ProxyError: if the proxy was started or closed before, or it cannot listen on
                ``listen_host:listen_port`` (address unknown or taken).
        """
        if self._started or self._closed:
            raise ProxyError(f"{self!r} was started before; a proxy runs once")
        self._started = True
        try:
            infos = await anyio.getaddrinfo(
                self._listen_host,
                self._listen_port,
                type=socket.SOCK_STREAM,
                flags=socket.AI_PASSIVE,
            )
            family, _, _, _, sockaddr = infos[0]
            self._family = family
            self._sock = self._bind(sockaddr)
            if not self._refusing():
                self._start_listening()
        except BaseException as exc:
            self._release_listener()
            self._started = False  # nothing runs: it may be started again
            if isinstance(exc, OSError):
                raise ProxyError(f"cannot listen on {self._listen_host!r}: {exc}") from exc
            raise
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # A task of our own hosts the task group, so that start() and close() may run in
        # different tasks (anyio scopes must be left by the task that entered them).
        self._runner = asyncio.create_task(self._run(ready), name=f"TcpProxy {self.address}")
        self._runner.add_done_callback(self._runner_done)
        try:
            await asyncio.wait({ready, self._runner}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled: leave nothing running
            await self.close()
            raise
        if not ready.done():  # the runner died before it was ready; close() tells why
            await self.close()
        log.info("%r started", self)

    async def close(self) -> None:
        """Close the listener and every connection; idempotent.

        Open connections are closed plainly (FIN), not reset. Every task is cancelled, and
        only synchronous clean-up runs after that, so this returns quickly. It waits at most
        :data:`CLOSE_TIMEOUT_S`, shielded from the caller's cancellation.

        Raises:
            ProxyError: if the proxy's tasks did not end within :data:`CLOSE_TIMEOUT_S`.
            Exception: whatever unexpected error stopped the proxy's task group (a bug).
        """
        self._closed = True
        runner, self._runner = self._runner, None
        if runner is None:
            self._release_listener()
            return
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            done, _ = await asyncio.wait({runner}, timeout=CLOSE_TIMEOUT_S)
        if not done:
            raise ProxyError(f"{self!r} did not stop within {CLOSE_TIMEOUT_S} s")
        log.info("%r closed", self)
        if not runner.cancelled() and (exc := runner.exception()) is not None:
            raise exc

    async def _run(self, ready: asyncio.Future[None]) -> None:
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._listener)
                ready.set_result(None)
        finally:
            self._tg = None
            self._release_listener()
            for conn in self._connections:  # each closes its own; this is a safety net
                conn.close()
            self._connections.clear()
            self._notify()

    def _runner_done(self, runner: asyncio.Task[None]) -> None:
        if not runner.cancelled() and (exc := runner.exception()) is not None:
            log.error("%r failed: %r", self, exc, exc_info=exc)

    # -- fault modes ------------------------------------------------------------------------

    def pass_through(self, direction: Direction = "both") -> None:
        """Forward bytes as they come, and accept connections again after ``refuse()``.

        Chunks still waiting out a delay are forwarded when due, so the order is kept.

        Args:
            direction: ``"up"``, ``"down"`` or ``"both"`` (default).

        Raises:
            ValueError: if ``direction`` is none of those.
            ProxyError: if the proxy was refusing and cannot listen on its port again.
        """
        self._switch(_targets(direction), FaultMode.PASS_THROUGH)

    def blackhole(self, direction: Direction = "both") -> None:
        """Read and drop bytes, so the peer hears nothing while the connection stays open.

        Also applies to chunks still waiting out a delay. A connection's end-of-stream in
        that direction is held back until the mode changes.

        Args:
            direction: ``"up"``, ``"down"`` or ``"both"`` (default).

        Raises:
            ValueError: if ``direction`` is none of those.
            ProxyError: if the proxy was refusing and cannot listen on its port again.
        """
        self._switch(_targets(direction), FaultMode.BLACKHOLE)

    def delay(self, seconds: float, direction: Direction = "both") -> None:
        """Forward each chunk ``seconds`` after it was read, keeping the order.

        Chunks read before the call keep the delay they were read with.

        Args:
            seconds: added latency per direction, in seconds; 0 or more.
            direction: ``"up"``, ``"down"`` or ``"both"`` (default).

        Raises:
            ValueError: if ``seconds`` is negative or not finite, or ``direction`` is
                invalid.
            ProxyError: if the proxy was refusing and cannot listen on its port again.
        """
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
        self._switch(_targets(direction), FaultMode.DELAY, float(seconds))

    async def reset(self) -> None:
        """Reset every open connection with RST, and each new one as soon as it is accepted.

        Applies to both directions, until another mode is set.

        Raises:
            ProxyError: if the proxy was refusing and cannot listen on its port again.
        """
        self._switch(_DIRECTIONS, FaultMode.RESET)
        doomed = set(self._connections)
        for conn in doomed:
            conn.rst = True
            conn.scope.cancel()
        while doomed & self._connections:
            await self._next_change()

    async def refuse(self) -> None:
        """Stop accepting connections, so connects are refused, and keep the port.

        Applies to both directions. Open connections are left alone. Any other mode listens
        on the same port again.
        """
        self._switch(_DIRECTIONS, FaultMode.REFUSE)
        while self._tg is not None and self._listening and self._refusing():
            await self._next_change()

    def _switch(self, targets: tuple[str, ...], mode: FaultMode, delay_s: float = 0.0) -> None:
        if self._modes["up"] in _CONNECTION_MODES and mode not in _CONNECTION_MODES:
            for direction in _DIRECTIONS:  # leaving reset/refuse heals the whole link
                self._modes[direction] = FaultMode.PASS_THROUGH
                self._delays[direction] = 0.0
        for target in targets:
            self._modes[target] = mode
            self._delays[target] = delay_s
        log.info("%r: mode changed", self)
        try:
            if self._refusing():
                if self._accept_scope is not None:
                    self._accept_scope.cancel()  # the listener loop then stops listening
            elif self._tg is not None and not self._listening:
                # Synchronously, so that connects succeed as soon as this returns.
                self._start_listening()
        finally:
            self._notify()

    def _refusing(self) -> bool:
        return self._modes["up"] is FaultMode.REFUSE

    # -- change notification ----------------------------------------------------------------

    async def _next_change(self) -> None:
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    # -- listener ---------------------------------------------------------------------------

    def _bind(self, sockaddr: _SockAddr) -> socket.socket:
        """Bind a non-blocking listening socket (not yet listening) to ``sockaddr``.

        The port is always bound explicitly, even when it was chosen by the kernel: on
        Linux a socket bound to an explicit port keeps it after ``shutdown()`` stops it
        listening, which is how :meth:`refuse` holds the port.
        """
        probe: socket.socket | None = None
        sock = socket.socket(self._family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if sockaddr[1] == 0:
                # Both sockets have SO_REUSEADDR and neither listens, so both may hold the
                # port for a moment; no other socket can take it in between.
                probe = socket.socket(self._family, socket.SOCK_STREAM)
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(sockaddr)
                sockaddr = _with_port(sockaddr, probe.getsockname()[1])
            sock.bind(sockaddr)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise ProxyError(
                f"cannot listen on {_format_address(self._listen_host, sockaddr[1])}: {exc}"
            ) from exc
        finally:
            if probe is not None:
                probe.close()
        self._bind_address = sockaddr
        return sock

    def _start_listening(self) -> None:
        if self._sock is None:  # released by _stop_listening on a platform without shutdown
            assert self._bind_address is not None
            self._sock = self._bind(self._bind_address)
        try:
            self._sock.listen(_BACKLOG)
        except OSError as exc:
            raise ProxyError(f"cannot listen on {self.address}: {exc}") from exc
        self._listening = True
        log.debug("%r listening", self)

    def _stop_listening(self) -> None:
        """Stop accepting; only called while no task waits on the socket."""
        assert self._sock is not None
        try:
            # Linux: the socket stops listening (queued connects are reset) but keeps its
            # port, so nothing else can take it before we listen again.
            self._sock.shutdown(socket.SHUT_RD)
        except OSError:
            # Elsewhere: give the port up and bind it again later.
            self._sock.close()
            self._sock = None
        self._listening = False
        log.debug("%r stopped listening", self)
        self._notify()

    def _release_listener(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._listening = False

    async def _listener(self) -> None:
        """Accept connections for the proxy's lifetime, following the mode."""
        while True:
            if self._refusing():
                if self._listening:
                    self._stop_listening()
                while self._refusing():
                    await self._next_change()
                continue
            if not self._listening or self._sock is None:
                # _switch could not listen again; it raised to its caller. Wait for news.
                await self._next_change()
                continue
            with anyio.CancelScope() as scope:
                self._accept_scope = scope
                try:
                    await self._accept_forever(self._sock)
                finally:
                    self._accept_scope = None

    async def _accept_forever(self, listener: socket.socket) -> None:
        assert self._tg is not None
        while True:
            await anyio.wait_readable(listener)
            # No await from accept() to start_soon(): a cancellation cannot strand a socket.
            try:
                client, peer_address = listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue
            except OSError as exc:  # EMFILE and the like
                log.warning("%r: accept failed: %r", self, exc)
                await anyio.sleep(_ACCEPT_BACKOFF_S)
                continue
            self._accepted += 1
            peer = _format_address(*peer_address[:2])
            if self._modes["up"] is FaultMode.RESET:
                log.debug("%r: resetting new connection from %s", self, peer)
                _close_socket(client, rst=True)
                self._reset_count += 1
                self._notify()
                continue
            try:
                client.setblocking(False)
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError as exc:  # the client is gone already
                log.debug("%r: dropping connection from %s: %r", self, peer, exc)
                _close_socket(client, rst=True)
                continue
            conn = _Connection(next(self._numbers), client, peer)
            self._connections.add(conn)
            self._notify()
            self._tg.start_soon(self._serve, conn, name=f"TcpProxy connection #{conn.number}")

    # -- connections ------------------------------------------------------------------------

    async def _serve(self, conn: _Connection) -> None:
        log.debug("%r: connection #%d from %s", self, conn.number, conn.peer)
        try:
            with conn.scope:
                try:
                    conn.upstream = await self._connect_upstream()
                except OSError as exc:
                    log.warning("%r: cannot reach the upstream: %r", self, exc)
                    conn.rst = True  # the client sees a reset, as near to "refused" as it gets
                    return
                async with anyio.create_task_group() as tg:
                    for direction, source, target in (
                        ("up", conn.client, conn.upstream),
                        ("down", conn.upstream, conn.client),
                    ):
                        send, receive = anyio.create_memory_object_stream[_Chunk](BUFFER_CHUNKS)
                        tg.start_soon(self._read_side, conn, direction, source, send)
                        tg.start_soon(self._write_side, conn, direction, target, receive)
        finally:
            conn.close()
            self._connections.discard(conn)
            if conn.rst:
                self._reset_count += 1
            log.debug(
                "%r: connection #%d closed%s", self, conn.number, " with RST" if conn.rst else ""
            )
            self._notify()

    async def _connect_upstream(self) -> socket.socket:
        """Connect to the upstream, trying each address it resolves to.

        Raises:
            OSError: if no address accepts within :data:`CONNECT_TIMEOUT_S` (``TimeoutError``
                when the time runs out).
        """
        loop = asyncio.get_running_loop()
        host, port = self._upstream
        error: OSError = OSError(f"{self.upstream} resolved to no address")
        with anyio.fail_after(CONNECT_TIMEOUT_S):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            for family, type_, proto, _, sockaddr in infos:
                sock = socket.socket(family, type_, proto)
                try:
                    sock.setblocking(False)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    await loop.sock_connect(sock, sockaddr)
                except OSError as exc:
                    sock.close()
                    error = exc
                    continue
                except BaseException:
                    sock.close()
                    raise
                return sock
        raise error

    async def _read_side(
        self,
        conn: _Connection,
        direction: str,
        source: socket.socket,
        chunks: MemoryObjectSendStream[_Chunk],
    ) -> None:
        """Read from ``source`` into ``chunks``, dropping or delaying by the mode."""
        loop = asyncio.get_running_loop()
        side = "client" if direction == "up" else "server"
        async with chunks:  # closing it is the end-of-stream for the writer
            while True:
                try:
                    data = await loop.sock_recv(source, READ_SIZE)
                except OSError as exc:
                    conn.fail(side, exc)
                    return
                if not data:
                    return
                mode = self._modes[direction]
                if mode is FaultMode.BLACKHOLE:
                    self._dropped[direction] += len(data)
                    self._notify()
                    continue
                due = anyio.current_time()
                if mode is FaultMode.DELAY:
                    due += self._delays[direction]
                try:
                    await chunks.send(_Chunk(data, due))
                except anyio.BrokenResourceError:  # the writer gave up: the connection is failing
                    return

    async def _write_side(
        self,
        conn: _Connection,
        direction: str,
        target: socket.socket,
        chunks: MemoryObjectReceiveStream[_Chunk],
    ) -> None:
        """Write ``chunks`` to ``target`` when due, then pass the end-of-stream on."""
        loop = asyncio.get_running_loop()
        side = "server" if direction == "up" else "client"
        async with chunks:
            async for chunk in chunks:
                if chunk.due > anyio.current_time():
                    await anyio.sleep_until(chunk.due)
                if self._modes[direction] is FaultMode.BLACKHOLE:
                    self._dropped[direction] += len(chunk.data)
                    self._notify()
                    continue
                self._forwarded[direction] += len(chunk.data)
                self._notify()
                try:
                    await loop.sock_sendall(target, chunk.data)
                except OSError as exc:
                    conn.fail(side, exc)
                    return
        # Over a cut link the FIN would not arrive either: it waits until the link carries.
        while self._modes[direction] is FaultMode.BLACKHOLE:
            await self._next_change()
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError as exc:
            conn.fail(side, exc)
