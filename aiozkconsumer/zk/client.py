"""The aiozk adapter: one ZooKeeper session with the original consumer's node idioms.

Everything the consumer does with ZooKeeper goes through ``ZkClient``: it translates aiozk's
exceptions into ``aiozkconsumer.errors`` (no ``aiozk.exc`` escapes), bounds connection set-up
by ``zookeeper.connection.timeout.ms``, implements the original's ephemeral-node rules
(``ZKCheckedEphemeral`` for registrations, ``createEphemeralPathExpectConflict`` for owner
nodes) and turns watches and session state into awaitable events owned by the caller's tasks
(no fire-and-forget callbacks).

It also reconnects promptly, which aiozk 0.32 cannot be configured to do (see
:class:`_PromptSession`): a ZooKeeper server that restarts restores its sessions with a fresh
timeout, so a client that is back within that timeout keeps its session and ephemeral nodes.
And it never sends a request under a session other than the one it was made for (aiozk sends
a pending request again on whatever session it reconnects with): see :meth:`ZkClient.bound_to`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import posixpath
import random
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any

import aiozk
import anyio
from aiozk import exc as zk_exc
from aiozk.connection import Connection as _AiozkConnection
from aiozk.session import Session as _AiozkSession
from aiozk.states import States

from ..errors import (
    ZookeeperBadVersionError,
    ZookeeperConnectionError,
    ZookeeperError,
    ZookeeperNodeExistsError,
    ZookeeperNoNodeError,
    ZookeeperSessionExpiredError,
)

__all__ = [
    "RECONNECT_BACKOFF_CAP_FRACTION",
    "RECONNECT_BACKOFF_START_S",
    "SessionState",
    "ZkClient",
    "close_raw",
    "force_close",
    "parse_connect_string",
    "reconnect_backoff_s",
]

log = logging.getLogger(__name__)

SessionState = str  # one of aiozk's States: "connected", "suspended", "read_only", "lost"


def parse_connect_string(connect: str) -> tuple[str, str | None]:
    """Split ``host:port[,host:port...][/chroot]`` into servers and chroot.

    Returns:
        ``(servers, chroot)``; ``chroot`` is ``None`` when absent or ``"/"``.
    """
    servers, slash, chroot = connect.partition("/")
    root = "/" + chroot.rstrip("/") if slash and chroot.strip("/") else None
    return servers, root


RECONNECT_BACKOFF_START_S = 0.1
"""The pause after the first round of reconnect attempts that reached no server, seconds
(before jitter, which takes it down to 50–100 ms)."""

RECONNECT_BACKOFF_CAP_FRACTION = 0.1
"""The longest pause between rounds of reconnect attempts, as a share of the session
timeout: a server that is back is found within a tenth of the session timeout."""


def reconnect_backoff_s(attempt: int, session_timeout_s: float, jitter: float = 1.0) -> float:
    """The pause before the next round of reconnect attempts, seconds.

    Doubles from :data:`RECONNECT_BACKOFF_START_S` with each round that reached no server,
    up to :data:`RECONNECT_BACKOFF_CAP_FRACTION` of the session timeout (never below the
    start), then scaled by ``jitter`` so that the members of a group do not all knock at
    once on a server that has just come back. aiozk's own back-off (``Session.find_server``,
    0.32) waits 4, 8, 16 ... 60 s: a ZooKeeper restart of a few seconds outlived the session.

    Args:
        attempt: rounds of attempts that failed so far, minus one (0 after the first).
        session_timeout_s: the (negotiated) session timeout, seconds.
        jitter: a factor in ``[0, 1]``; callers draw it from ``[0.5, 1]``.

    Returns:
        ``min(start x 2**attempt, max(start, cap x session timeout)) x jitter``.

    Raises:
        ValueError: ``attempt`` < 0, ``session_timeout_s`` <= 0 or ``jitter`` outside
            ``[0, 1]``.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, not {attempt}")
    if not session_timeout_s > 0:
        raise ValueError(f"session_timeout_s must be > 0, not {session_timeout_s}")
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be within [0, 1], not {jitter}")
    cap = max(RECONNECT_BACKOFF_START_S, RECONNECT_BACKOFF_CAP_FRACTION * session_timeout_s)
    return min(RECONNECT_BACKOFF_START_S * 2.0 ** min(attempt, 32), cap) * jitter


_BOUND_SESSION: ContextVar[int | None] = ContextVar("aiozkconsumer_zk_bound_session", default=None)
"""The session the requests of the current task are bound to (:meth:`ZkClient.bound_to`)."""


class _NotifyingConnection(_AiozkConnection):  # type: ignore[misc]  # aiozk is untyped
    """An aiozk connection that reports the end of its read loop.

    aiozk's ``Connection.read_loop`` returns quietly when the server closes the connection
    (a ZooKeeper restart), leaving the session ``CONNECTED`` and its pending requests
    unanswered until the next heartbeat times out, up to a session timeout later.
    """

    def __init__(self, *args: Any, on_dropped: Callable[[Any], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_dropped = on_dropped

    def start_read_loop(self) -> None:
        super().start_read_loop()
        self.read_loop_task.add_done_callback(self._read_loop_done)

    def _read_loop_done(self, _task: asyncio.Task[None]) -> None:
        if not self.closing:  # not a close of ours: the server or the network dropped it
            self._on_dropped(self)


class _PromptSession(_AiozkSession):  # type: ignore[misc]  # aiozk is untyped
    """aiozk's session, reconnecting promptly after a dropped connection.

    Four changes to aiozk 0.32's ``Session``, none of which its public API can configure
    (``ZKClient(retry_policy=...)`` only governs requests). Each is a small, self-contained
    patch that could go upstream as it is:

    - ``find_server`` retries the servers with :func:`reconnect_backoff_s` (50–100 ms,
      doubling, capped at a tenth of the session timeout) instead of its hard-coded
      ``RetryPolicy.exponential_backoff(maximum=MAX_FIND_WAIT)`` (4, 8, 16 ... 60 s), and
      bounds each connection attempt (connect, ``srvr`` handshake) by a third of the session
      timeout, split among the servers as the Java client does, where aiozk waits for the
      handshake's answer for ever (a black-holed server);
    - a connection whose read loop ends (the server closed it) suspends the session at once
      and fails its pending requests with ``ConnectError`` (``Session.send`` sends them again
      once reconnected), instead of waiting for a heartbeat to time out;
    - ``set_existing_watches`` after a reconnect is bounded by a third of the session
      timeout: in aiozk a connection lost during it leaves the repair loop waiting for a
      connected state that only the repair loop itself can bring;
    - ``send`` sends a request again after a reconnect only on the session it was issued
      on. aiozk's ``send`` waits for *a* connected session and sends the request again
      there, a new one too if the old one expired meanwhile: a fenced offset commit, an
      owner node's create or a fencing bump issued for the old session's ownership then
      landed under the new session, after the server had deleted the old session's owner
      nodes and another member may have claimed the partitions (and read their offsets).
      Here such a request fails with ``SessionLost`` instead, as every pending request of
      an expired session does in the Java client.
    """

    # Attributes of aiozk's Session this class uses (set in its __init__ / repair loop).
    conn: Any
    hosts: list[tuple[str, Any]]
    timeout: float
    closing: bool
    state: Any
    session_id: int | None
    xid: int
    last_zxid: Any
    retry_policy: Any

    _known_session_id: int | None = None
    """The last session id the server granted (it stays while ``session_id`` is reset to
    ``None`` after an expiry, until a new session is granted)."""

    async def establish_session(self) -> None:
        await super().establish_session()
        self._known_session_id = self.session_id

    async def send(self, request: Any) -> Any:
        """As aiozk's ``Session.send``, bound to one session.

        The session is the one the caller bound its requests to (:meth:`ZkClient.bound_to`),
        else the one current when this is called.

        Raises:
            aiozk.exc.SessionLost: the session is not (or no longer) that one: it was
                replaced (the old one expired) before the request could be sent, or while its
                answer was awaited on a connection that dropped.
        """
        bound = _BOUND_SESSION.get()
        pinned = bound if bound is not None else self._known_session_id
        while True:
            await self.retry_policy.enforce(request)
            await self.ensure_safe_state(writing=request.writes_data)
            if pinned is not None and self.session_id != pinned:
                self.retry_policy.clear(request)
                raise zk_exc.SessionLost()
            try:
                self.xid = 1 if self.xid >= 0x7FFFFFFF else self.xid + 1
                zxid, response = await self.conn.send(request, xid=self.xid)
            except (zk_exc.NodeExists, zk_exc.NoNode, zk_exc.NotEmpty, zk_exc.BadVersion):
                self.retry_policy.clear(request)
                raise
            except asyncio.CancelledError:
                self.retry_policy.clear(request)
                raise
            except zk_exc.ConnectError:
                if self.state != States.SUSPENDED:
                    self.state.transition_to(States.SUSPENDED)
                continue
            except Exception:
                self.retry_policy.clear(request)
                raise
            self.last_zxid = zxid
            self.set_heartbeat()
            self.retry_policy.clear(request)
            if response:
                return response

    async def find_server(self, allow_read_only: bool) -> None:
        attempt = 0
        conn: Any = None
        while conn is None:
            for host, port in random.sample(self.hosts, len(self.hosts)):
                conn = await self._try_server(host, port, allow_read_only)
                if conn is not None:
                    break
            else:
                pause = reconnect_backoff_s(attempt, self.timeout, random.uniform(0.5, 1.0))
                log.log(
                    logging.INFO if attempt == 0 else logging.DEBUG,
                    "no ZooKeeper server of %s answered; trying again in %.0f ms",
                    ",".join(f"{h}:{p}" for h, p in self.hosts),
                    pause * 1000,
                )
                attempt += 1
                await asyncio.sleep(pause)
        old_conn: Any = self.conn
        self.conn = conn
        if old_conn is not None:  # as aiozk: closed in the background (its close may wait)
            closing = asyncio.create_task(old_conn.close(self.timeout), name="aiozk-close-old")
            _closing_connections.add(closing)
            closing.add_done_callback(_closing_connections.discard)

    async def _try_server(self, host: str, port: Any, allow_read_only: bool) -> Any:
        """One connection attempt, bounded; the connection, or ``None``."""
        limit = self.timeout / max(3, len(self.hosts))
        log.debug("connecting to ZooKeeper at %s:%s", host, port)
        try:
            conn = await asyncio.wait_for(self.make_connection(host, port), limit)
        except TimeoutError:
            log.info("ZooKeeper at %s:%s did not answer within %.1f s", host, port, limit)
            return None
        if conn is not None and conn.start_read_only and not allow_read_only:
            _abandon(conn)
            return None
        return conn

    async def make_connection(self, host: str, port: Any) -> Any:
        conn = _NotifyingConnection(
            host,
            port,
            watch_handler=self.event_dispatch,
            read_timeout=self.read_timeout,
            on_dropped=self._connection_dropped,
        )
        try:
            await conn.connect()
        except Exception as e:  # refused, reset, not serving: the next server or round
            log.debug("could not connect to ZooKeeper at %s:%s: %r", host, port, e)
            _abandon(conn)
            return None
        return conn

    def _connection_dropped(self, conn: Any) -> None:
        if self.closing or conn is not self.conn:
            return
        log.warning("connection to ZooKeeper at %s:%s dropped", conn.host, conn.port)
        conn.abort(zk_exc.ConnectError)  # Session.send sends them again once reconnected
        if self.state.current_state in (States.CONNECTED, States.READ_ONLY):
            self.state.transition_to(States.SUSPENDED)

    async def set_existing_watches(self) -> None:
        try:
            await asyncio.wait_for(super().set_existing_watches(), self.timeout / 3)
        except TimeoutError:
            log.warning("re-arming watches timed out; reconnecting")
            if self.state.current_state in (States.CONNECTED, States.READ_ONLY):
                self.state.transition_to(States.SUSPENDED)


_closing_connections: set[asyncio.Task[None]] = set()
"""Closes of replaced connections under way (a task must be referenced until it ends)."""


def _abandon(conn: Any) -> None:
    """Drop a connection that never carried a session (never raises)."""
    writer = getattr(conn, "writer", None)
    if writer is not None:
        with contextlib.suppress(Exception):
            writer.close()


def _prompt_client(servers: str, chroot: str | None, session_timeout_s: float) -> Any:
    """An ``aiozk.ZKClient`` whose session is a :class:`_PromptSession`.

    ``ZKClient.__init__`` builds its ``Session`` itself; nothing holds it before ``start()``,
    so it is swapped for the prompt one, built with the same arguments.
    """
    client = aiozk.ZKClient(servers, chroot=chroot, session_timeout=session_timeout_s)
    client.session = _PromptSession(servers, session_timeout_s, None, False, None)
    return client


_FORCE_CLOSE_WAIT_S = 1.0


async def force_close(raw: Any) -> None:
    """Tear an ``aiozk.ZKClient`` down without talking to the server (never raises).

    ``Session.close`` first sends a CloseRequest, which waits for a connected state; with the
    server down (or the link cut) it times out before cancelling the heartbeat and repair
    loop. This cancels them, aborts the connection and waits (bounded) for the tasks to end.
    The server expires the session after its timeout. Used by ``ZkClient`` and the test kit.

    Args:
        raw: the ``aiozk.ZKClient``.
    """
    session = raw.session
    session.closing = True
    if getattr(session, "heartbeat_handle", None) is not None:
        session.heartbeat_handle.cancel()
        session.heartbeat_handle = None
    conn = getattr(session, "conn", None)
    tasks = [
        t
        for t in (
            getattr(session, "repair_loop_task", None),
            getattr(session, "heartbeat_task", None),
            getattr(conn, "read_loop_task", None),
        )
        if t is not None and not t.done()
    ]
    for task in tasks:
        task.cancel()
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.abort()
        writer = getattr(conn, "writer", None)
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()
    if tasks:
        await asyncio.wait(tasks, timeout=_FORCE_CLOSE_WAIT_S)
    session.started = False


async def close_raw(raw: Any, time_limit: float = 5.0) -> None:
    """Close an ``aiozk.ZKClient`` within ``time_limit`` seconds, forcing it if need be.

    A graceful close (the server deletes the session's ephemeral nodes at once) when the
    session is connected; :func:`force_close` otherwise or when the close fails or times out.
    Never raises except cancellation (after forcing the close).
    """
    session = raw.session
    if session.started and session.state.current_state != States.CONNECTED:
        await force_close(raw)
        return
    try:
        with anyio.fail_after(time_limit):
            await raw.close()
    except Exception as exc:  # ZooKeeper down or already gone, or the limit passed
        log.debug("aiozk close failed (%r); forcing it", exc)
        await force_close(raw)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await force_close(raw)
        raise


@contextlib.contextmanager
def map_zk_errors(path: str | None = None) -> Iterator[None]:
    """Translate aiozk exceptions raised inside the block into ``ZookeeperError``s.

    ``NoNode``, ``NodeExists`` and ``BadVersion`` become their own classes, as kazoo's
    ``NoNodeError`` / ``NodeExistsError`` / ``BadVersionError``: callers catch the class.
    """
    try:
        yield
    except zk_exc.NodeExists as e:
        raise ZookeeperNodeExistsError(path or "?") from e
    except zk_exc.NoNode as e:
        raise ZookeeperNoNodeError(path or "?") from e
    except zk_exc.BadVersion as e:
        raise ZookeeperBadVersionError(path or "?") from e
    except (zk_exc.SessionLost, zk_exc.SessionExpired) as e:
        raise ZookeeperSessionExpiredError(
            f"ZooKeeper session expired{f' (at {path})' if path else ''}"
        ) from e
    except (zk_exc.ConnectError, zk_exc.ConnectionLoss, zk_exc.TimeoutError) as e:
        raise ZookeeperConnectionError(
            f"ZooKeeper connection lost{f' (at {path})' if path else ''}: {e!r}"
        ) from e
    except zk_exc.ZKError as e:
        raise ZookeeperError(f"ZooKeeper error {type(e).__name__} at {path}: {e}") from e


class ZkClient:
    """One ZooKeeper session (an ``aiozk.ZKClient``) with the consumer's idioms.

    Args:
        connect: ``zookeeper.connect``, ``host:port[,host:port...][/chroot]``.
        session_timeout_ms: ``zookeeper.session.timeout.ms`` (the server may negotiate it
            into its ``[2, 20] x tickTime`` range).
        connection_timeout_ms: ``zookeeper.connection.timeout.ms``: how long ``start()``
            waits for the first session.
        request_timeout_ms: bound on a single request while the connection is down; aiozk
            would otherwise wait forever for the session to come back. Defaults to the
            session timeout.
    """

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 6000,
        connection_timeout_ms: int = 6000,
        request_timeout_ms: int | None = None,
    ) -> None:
        self.connect = connect
        self._servers, self._chroot = parse_connect_string(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        self.request_timeout_s = (request_timeout_ms or session_timeout_ms) / 1000
        self._zk: Any = None
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Open the session.

        While disconnected later on, the client retries the servers of ``connect`` with a
        short back-off (:func:`reconnect_backoff_s`: from 50–100 ms up to a tenth of the
        session timeout), so a ZooKeeper restart that the server's restored sessions
        outlive expires none.

        Raises:
            ZookeeperConnectionError: no server of ``connect`` answered within
                ``connection_timeout_ms``; every background task aiozk started is stopped.
        """
        self._zk = _prompt_client(self._servers, self._chroot, self.session_timeout_ms / 1000)
        try:
            with anyio.fail_after(self.connection_timeout_ms / 1000):
                await self._zk.start()
        except (TimeoutError, zk_exc.ZKError, OSError) as e:
            await self._abort()
            raise ZookeeperConnectionError(
                f"could not connect to ZooKeeper at {self.connect!r} within "
                f"zookeeper.connection.timeout.ms={self.connection_timeout_ms}"
            ) from e
        except BaseException:
            await self._abort()
            raise

    async def _abort(self) -> None:
        """Stop aiozk's background tasks without talking to the server."""
        if self._zk is not None:
            await force_close(self._zk)

    async def close(self, timeout_s: float = 5.0) -> None:
        """Close the session: the server deletes its ephemeral nodes at once.

        Never raises; bounded by ``timeout_s`` (then the connection is dropped, and the
        server expires the session after its timeout).
        """
        if self._zk is None or self._closed:
            return
        self._closed = True
        try:
            with anyio.CancelScope(shield=True), anyio.fail_after(timeout_s):
                await self._zk.close()
        except BaseException as e:
            log.debug("ZooKeeper close did not finish cleanly: %r", e)
            await self._abort()

    @contextlib.contextmanager
    def bound_to(self, session_id: int | None) -> Iterator[None]:
        """Bind the requests made in the block (and in tasks it starts) to one session.

        Each request is sent only while ``session_id`` is the current session: once it was
        replaced by a new one (it expired), a request fails with
        ``ZookeeperSessionExpiredError`` instead of landing under the new session. Without
        a binding, a request is bound to the session current when it is made. For steps of
        several requests that act for one session's ownership (a fenced offset commit).

        Args:
            session_id: the session; ``None`` binds nothing.
        """
        token = _BOUND_SESSION.set(session_id) if session_id is not None else None
        try:
            yield
        finally:
            if token is not None:
                _BOUND_SESSION.reset(token)

    @property
    def raw(self) -> Any:
        """The underlying ``aiozk.ZKClient`` (for tools and tests)."""
        return self._zk

    @property
    def session_password(self) -> bytes | None:
        """The current session's password (``None`` before the first session).

        With the session id it lets a second client take the session over, which is how the
        test kit expires a session for real.
        """
        if self._zk is None or self.session_id is None:
            return None
        password = getattr(self._zk.session, "password", None)
        return password if isinstance(password, bytes) else None

    @property
    def session_id(self) -> int | None:
        """The current session id, ``None`` before the first session."""
        return None if self._zk is None else self._zk.session.session_id

    @property
    def state(self) -> SessionState:
        """The session state: ``"connected"``, ``"suspended"``, ``"read_only"`` or ``"lost"``."""
        if self._zk is None:
            return str(States.LOST)
        return str(self._zk.session.state.current_state)

    async def wait_for_state(self, *states: SessionState) -> None:
        """Wait until the session is in one of ``states`` (returns at once if it is)."""
        await self._zk.session.state.wait_for(*states)

    async def session_events(self) -> AsyncIterator[tuple[str, int | None]]:
        """Yield ``("suspended"|"lost", old_id)`` and ``("connected", new_id)`` transitions.

        ``("connected", id)`` with an id different from the previous one means the old session
        expired and aiozk opened a new one: its ephemeral nodes are gone.
        """
        last_id = self.session_id
        while True:
            await self.wait_for_state(States.SUSPENDED, States.LOST)
            yield (self.state, last_id)
            await self.wait_for_state(States.CONNECTED)
            last_id = self.session_id
            yield (States.CONNECTED, last_id)

    async def connection_drops(self) -> AsyncIterator[None]:
        """Yield each time the connection to the server drops, the moment it does.

        aiozk notices a connection the server closed (for example because it expired the
        session) only at the next request; until then the session state still says connected.
        This follows the connection's read loop instead, so the caller learns at once.
        """
        dead: Any = None
        while True:
            session = self._zk.session if self._zk is not None else None
            conn = getattr(session, "conn", None)
            task = getattr(conn, "read_loop_task", None)
            if conn is None or conn is dead or task is None:
                await anyio.sleep(0.05)  # aiozk offers no event for a new connection
                continue
            await asyncio.wait({task})
            dead = conn
            yield

    # -- requests ------------------------------------------------------------------------

    async def _call(self, path: str, coro: Any) -> Any:
        with map_zk_errors(path):
            try:
                with anyio.fail_after(self.request_timeout_s):
                    return await coro
            except TimeoutError:
                raise ZookeeperConnectionError(
                    f"ZooKeeper request on {path} timed out after {self.request_timeout_s:.1f} s "
                    f"(connection to {self.connect!r} lost?)"
                ) from None

    async def get(self, path: str) -> tuple[bytes, Any] | None:
        """Return ``(data, stat)`` of a node, or ``None`` if it does not exist."""
        try:
            data, stat = await self._call(path, self._zk.get(path))
        except ZookeeperNoNodeError:
            return None
        return (data or b"", stat)

    async def get_data(self, path: str) -> bytes | None:
        """Return a node's data, or ``None`` if it does not exist."""
        got = await self.get(path)
        return None if got is None else got[0]

    async def get_children(self, path: str, *, watch: bool = False) -> list[str] | None:
        """Return a node's children (unsorted), or ``None`` if the node does not exist."""
        try:
            return list(await self._call(path, self._zk.get_children(path, watch=watch)))
        except ZookeeperNoNodeError:
            return None

    async def exists(self, path: str, *, watch: bool = False) -> bool:
        """Whether a node exists (optionally leaving an exists-watch)."""
        return bool(await self._call(path, self._zk.exists(path, watch=watch)))

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents as persistent nodes where missing."""
        await self._call(path, self._zk.ensure_path(path))

    async def create(
        self, path: str, data: bytes, *, ephemeral: bool = False, make_parents: bool = True
    ) -> None:
        """Create a node, creating missing parents as persistent nodes.

        Raises:
            ZookeeperNodeExistsError: the node exists.
            ZookeeperConnectionError: the connection was lost and did not come back in time.
        """
        try:
            await self._call(path, self._zk.create(path, data, ephemeral=ephemeral))
        except ZookeeperNoNodeError:
            if not make_parents:
                raise
            await self.ensure_path(posixpath.dirname(path))
            await self._call(path, self._zk.create(path, data, ephemeral=ephemeral))

    async def create_ephemeral_checked(self, path: str, data: bytes) -> None:
        """Create an ephemeral node the way ``ZKCheckedEphemeral`` (0.9+, KAFKA-1387) does.

        If the node exists and is owned by *this* session (a retried create after a connection
        loss), that counts as success.

        Raises:
            ZookeeperNodeExistsError: the node exists and belongs to another session.
        """
        try:
            await self.create(path, data, ephemeral=True)
        except ZookeeperNodeExistsError:
            got = await self.get(path)
            if got is None:
                await self.create(path, data, ephemeral=True)
                return
            if got[1].ephemeral_owner != self.session_id:
                raise ZookeeperNodeExistsError(
                    path,
                    f"ZooKeeper node {path} exists and belongs to another session "
                    f"(0x{got[1].ephemeral_owner:x}); is another consumer using the same "
                    "consumer.id?",
                ) from None

    async def create_ephemeral_expect_conflict(self, path: str, data: bytes) -> bool:
        """Create an ephemeral node as ``createEphemeralPathExpectConflict`` does.

        Returns:
            ``True`` if the node was created, or already holds exactly ``data`` (a create
            retried over a connection loss); ``False`` if another value is there.
        """
        try:
            await self.create(path, data, ephemeral=True)
            return True
        except ZookeeperNodeExistsError:
            return await self.get_data(path) == data

    async def set_or_create(self, path: str, data: bytes) -> None:
        """Write a persistent node, creating it and its parents if missing.

        As ``ZkUtils.updatePersistentPath``.
        """
        await self.bump(path, data)

    async def bump(self, path: str, data: bytes) -> int:
        """Write a persistent node (creating it and its parents) and return its new version.

        Used for fencing tokens: every write increments the version.
        """
        try:
            stat = await self._call(path, self._zk.set(path, data, -1))
        except ZookeeperNoNodeError:
            try:
                await self.create(path, data)
                return 0
            except ZookeeperNodeExistsError:
                stat = await self._call(path, self._zk.set(path, data, -1))
        return int(stat.version)

    async def set_data(self, path: str, data: bytes, version: int = -1) -> int:
        """Write an existing node, only if it has ``version`` (``-1``: any version).

        Returns:
            The node's new version.

        Raises:
            ZookeeperNoNodeError: the node does not exist.
            ZookeeperBadVersionError: the node has another version.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        stat = await self._call(path, self._zk.set(path, data, version))
        return int(stat.version)

    async def fenced_write(
        self, path: str, data: bytes, fence_path: str, fence_version: int
    ) -> bool:
        """Write a persistent node only while ``fence_path`` still has ``fence_version``.

        One ZooKeeper multi-op (``check`` + ``setData``, or ``check`` + ``create`` when the
        node does not exist yet): either both happen or neither.

        Returns:
            ``True`` if written; ``False`` if the fence moved on (or vanished).

        Raises:
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        for _ in range(3):  # the node may appear or vanish between the look and the write
            exists = await self.exists(path)
            txn = self._zk.begin_transaction()
            txn.check_version(fence_path, fence_version)
            if exists:
                txn.set_data(path, data, -1)
            else:
                await self.ensure_path(posixpath.dirname(path))
                txn.create(path, data)
            result = await self._call(path, txn.commit())
            if path in result.updated or path in result.created:
                return True
            got = await self.get(fence_path)
            if got is None or got[1].version != fence_version:
                return False
        return False

    async def delete_if_owned(self, path: str) -> bool:
        """Delete an ephemeral node only if this session owns it.

        After a session expiry another member may have created the node anew; deleting it
        would take its ownership away. Returns whether a node was deleted.
        """
        got = await self.get(path)
        if got is None or got[1].ephemeral_owner != self.session_id:
            return False
        return await self.delete(path)

    @property
    def negotiated_timeout_s(self) -> float:
        """The session timeout the server granted, seconds (the requested one before)."""
        if self._zk is None:
            return self.session_timeout_ms / 1000
        return float(self._zk.session.timeout)

    async def delete(self, path: str) -> bool:
        """Delete a node (any version). Returns ``False`` if it did not exist."""
        try:
            await self._call(path, self._zk.delete(path, force=True))
            return True
        except ZookeeperNoNodeError:
            return False

    async def delete_recursive(self, path: str) -> None:
        """Delete a node and everything below it (not atomic; missing nodes are fine)."""
        children = await self.get_children(path)
        if children is None:
            return
        for child in children:
            await self.delete_recursive(f"{path.rstrip('/')}/{child}")
        await self.delete(path)

    # -- watches -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _watch_event(self, path: str, kinds: Iterable[Any]) -> AsyncIterator[asyncio.Event]:
        """Register a callback for ``kinds`` of watch events on ``path``; yield an Event it sets."""
        event = asyncio.Event()

        def fire(_path: str) -> None:
            event.set()

        session = self._zk.session
        full = self._zk.normalize_path(path)
        kinds = list(kinds)
        for kind in kinds:
            session.add_watch_callback(kind, full, fire)
        try:
            yield event
        finally:
            for kind in kinds:
                session.remove_watch_callback(kind, full, fire)

    async def watch_children(self, path: str) -> AsyncIterator[list[str] | None]:
        """Yield the children of ``path`` now and after every change (``None``: no node).

        ZooKeeper coalesces changes: each value is the state after one or more changes. While
        the node is missing, an exists-watch waits for its creation. Watches survive
        reconnects (aiozk re-arms them with SetWatches).
        """
        kinds = (
            aiozk.WatchEvent.CHILDREN_CHANGED,
            aiozk.WatchEvent.DELETED,
            aiozk.WatchEvent.CREATED,
        )
        async with self._watch_event(path, kinds) as event:
            while True:
                event.clear()
                children = await self.get_children(path, watch=True)
                if children is None and await self.exists(path, watch=True):
                    continue  # created in between: read it again
                yield children
                await event.wait()

    async def watch_data(self, path: str) -> AsyncIterator[bytes | None]:
        """Yield the data of ``path`` now and after every change (``None``: no node)."""
        kinds = (
            aiozk.WatchEvent.DATA_CHANGED,
            aiozk.WatchEvent.DELETED,
            aiozk.WatchEvent.CREATED,
        )
        async with self._watch_event(path, kinds) as event:
            while True:
                event.clear()
                try:
                    data: bytes | None = await self._call(path, self._zk.get_data(path, watch=True))
                except ZookeeperNoNodeError:
                    if await self.exists(path, watch=True):
                        continue
                    data = None
                yield data
                await event.wait()

    async def wait_deleted(self, paths: Iterable[str], timeout_s: float) -> bool:
        """Wait until every node of ``paths`` is gone, at most ``timeout_s`` seconds.

        Used instead of sleeping ``rebalance.backoff.ms`` when an owner node of a previous
        owner is in the way.

        Returns:
            ``True`` if all are gone, ``False`` on timeout.
        """
        deadline = anyio.current_time() + timeout_s
        for path in paths:
            async with self._watch_event(path, (aiozk.WatchEvent.DELETED,)) as event:
                while await self.exists(path, watch=True):
                    with anyio.move_on_after(deadline - anyio.current_time()) as scope:
                        await event.wait()
                    if scope.cancelled_caught:
                        return False
                    event.clear()
        return True

    def __repr__(self) -> str:
        sid = self.session_id
        return (
            f"<ZkClient {self.connect} [{self.state}, session {'-' if sid is None else hex(sid)}]>"
        )
