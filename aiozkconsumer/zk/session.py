"""aiozk's session and connection, patched: prompt reconnects, session-bound requests, security.

aiozk 0.32's ``Session`` and ``Connection`` cannot be configured to do what the consumer
needs of a ZooKeeper session; :class:`_PromptSession` and :class:`_NotifyingConnection`
change them in small, self-contained overrides (each could go upstream as it is): reconnect
within a tenth of the session timeout (a ZooKeeper restart keeps the session), notice a
dropped connection at once, never send a request under a session other than its own
(:data:`_BOUND_SESSION`), speak TLS to a ``secureClientPort``, send AddAuth on every new
connection before any request, and end for good on a refusal retrying cannot cure.
:mod:`aiozkconsumer.zk.client` builds them (``ZkClient``); nothing else uses them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import re
import ssl
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from aiozk import exc as zk_exc
from aiozk import protocol as zk_protocol
from aiozk.connection import Connection as _AiozkConnection
from aiozk.connection import reply_header_struct, size_struct
from aiozk.session import Session as _AiozkSession
from aiozk.states import SessionStateMachine as _AiozkStateMachine
from aiozk.states import States

from ..errors import ZookeeperAuthError, ZookeeperConnectionError, ZookeeperError

__all__ = [
    "RECONNECT_BACKOFF_CAP_FRACTION",
    "RECONNECT_BACKOFF_START_S",
    "describe_connect_error",
    "reconnect_backoff_s",
]

log = logging.getLogger(__name__)


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
    """An aiozk connection that reports the end of its read loop, and speaks TLS and AddAuth.

    aiozk's ``Connection.read_loop`` returns quietly when the server closes the connection
    (a ZooKeeper restart), leaving the session ``CONNECTED`` and its pending requests
    unanswered until the next heartbeat times out, up to a session timeout later.

    aiozk opens its sockets with ``asyncio.open_connection(host, port)``; with an
    ``ssl_context`` both of them (the ``srvr`` probe and the session's own) are TLS
    connections checked against ``host``, as the Java client's ``ClientX509Util`` does for a
    ``secureClientPort``.
    """

    def __init__(
        self,
        *args: Any,
        on_dropped: Callable[[Any], None],
        ssl_context: ssl.SSLContext | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._on_dropped = on_dropped
        self._ssl_context = ssl_context
        self._outbox: list[bytes] = []
        self._flush_scheduled = False
        self._drop_reported = False

    async def connect(self) -> None:
        if self._ssl_context is None:
            await super().connect()
            return
        self.reader, self.writer = await self._open_tls()
        try:
            await self._probe_tls()
        finally:
            self.writer.close()
        self.reader, self.writer = await self._open_tls()

    async def _open_tls(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(
                    self.host, self.port, ssl=self._ssl_context, server_hostname=self.host
                ),
                timeout=self.read_timeout,
            )
        except TimeoutError:
            raise TimeoutError(
                f"TLS connection to {self.host}:{self.port} timed out after "
                f"{self.read_timeout} seconds"
            ) from None
        except ssl.SSLCertVerificationError:
            raise
        except (ssl.SSLError, ConnectionResetError, ConnectionAbortedError) as e:
            # The server cut the handshake short: a plain port resets on a ClientHello.
            raise _TlsHandshakeError(getattr(e, "reason", None) or repr(e)) from e

    async def _probe_tls(self) -> None:
        """aiozk's ``srvr`` handshake (server version, read-only mode), over TLS.

        aiozk reads the answer to its end with one ``read()``; a TLS server may end the
        connection without a ``close_notify`` after answering, which is not an error here.
        """
        self.host_ip = self.writer.transport.get_extra_info("peername")[0]
        self.writer.write(b"srvr")
        chunks: list[bytes] = []
        try:
            while chunk := await self.reader.read(4096):
                chunks.append(chunk)
        except (ssl.SSLError, ConnectionResetError):
            if not chunks:
                raise
        answer = b"".join(chunks)
        match = _VERSION_LINE.match(answer.split(b"\n")[0])
        if match is None:
            raise _NoSrvrAnswer(tls=True)
        self.version_info = tuple(map(int, match.groups()))
        self.start_read_only = b"READ_ONLY" in answer

    async def read_response(self, initial_connect: bool = False) -> Any:
        try:
            answer = await super().read_response(initial_connect)
        except ssl.SSLError as e:  # a TLS connection the server dropped: not an error to log
            raise ConnectionAbortedError(f"TLS connection lost: {e}") from e
        xid = answer[0]
        if xid is not None and xid > 0 and self.pending:
            # Requests enter ``pending`` in the order sent (ascending xids) and leave it when
            # answered: the first is the oldest still waiting (O(1) per answer, however many
            # a rebalance pipelines).
            oldest = next(iter(self.pending))
            if 0 < oldest < xid and xid - oldest < _XID_WRAP_GUARD:
                lost = [x for x in itertools.islice(self.pending, 5) if 0 < x < xid]
                # After this answer is handed to its request (the read loop does that next).
                asyncio.get_running_loop().call_soon(self._answered_out_of_order, xid, lost)
        return answer

    def _answered_out_of_order(self, xid: int, lost: list[int]) -> None:
        """The server answered request ``xid`` while earlier ones wait: those never reached it.

        ZooKeeper answers one session's requests in the order sent, so an earlier request
        still unanswered was lost on the way (bytes dropped by a middlebox while the TCP
        connection stayed up). Its caller would wait for the request timeout while later
        requests, the session lease's among them, go through. As the Java client's
        ``ClientCnxn`` does ("Xid out of order"), the connection is dropped: the session
        sends the lost requests again on the next one.
        """
        if self.closing or self._drop_reported:
            return
        log.warning(
            "ZooKeeper at %s:%s answered request %d before %s: lost on the way; reconnecting",
            self.host,
            self.port,
            xid,
            ", ".join(map(str, lost)),
        )
        self._drop_reported = True
        self._on_dropped(self)

    async def authenticate(self, scheme: str, credentials: bytes) -> int:
        """Send AddAuth and wait for its answer, before the read loop runs.

        As the Java client's ``ClientCnxn`` (and kazoo's ``_connect``) do after each
        ``ConnectResponse``: the credentials reach the server before any other request on
        this connection, so every request is checked against them.

        Returns:
            The answer's error code (0, or ``AUTH_FAILED``'s -115).

        Raises:
            ConnectionAbortedError: the server closed the connection before answering.
            OSError: the connection failed otherwise.
        """
        request = zk_protocol.AuthRequest(type=0, scheme=scheme, auth=credentials)
        payload = request.serialize(zk_protocol.AUTH_XID)
        self.writer.write(size_struct.pack(len(payload)) + payload)
        while True:
            try:
                (size,) = size_struct.unpack(await self.reader.readexactly(size_struct.size))
                body = await self.reader.readexactly(size)
            except asyncio.IncompleteReadError as e:
                raise ConnectionAbortedError(
                    f"{self.host}:{self.port} closed the connection before answering AddAuth"
                ) from e
            xid, _zxid, error_code = reply_header_struct.unpack_from(body)
            if xid == zk_protocol.AUTH_XID:
                return int(error_code)
            # Nothing else is asked before the answer: a watch event (none is armed yet on
            # this connection) or a stray reply would be dropped by the server's ordering.
            log.debug("ignoring a reply (xid %s) that came before AddAuth's", xid)

    def send(self, request: Any, xid: int | None = None) -> asyncio.Future[Any]:
        """As aiozk's ``Connection.send``, but what one turn of the event loop sends goes out
        in one write.

        aiozk writes each request to the socket at once: a rebalance's dozens of pipelined
        requests (gathered creates, reads, deletes) become as many system calls and TCP
        segments, each read and dispatched by the server on its own. Here they are queued and
        written together when the loop turn ends (``call_soon``), in the order made, so the
        server reads them in one go; nothing waits longer than that turn.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self.closing:
            future.set_exception(zk_exc.ConnectError(self.host, self.port))
            return future
        if request.special_xid:
            xid = request.special_xid
        payload = request.serialize(xid)
        self.opcode_xref[xid] = request.opcode
        if xid in zk_protocol.SPECIAL_XIDS:
            self.pending_specials[xid].append(future)
        else:
            self.pending[xid] = future
        self._outbox.append(size_struct.pack(len(payload)))
        self._outbox.append(payload)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        """Write what :meth:`send` queued, in one write (nothing once the connection is
        closed or aborted: its requests' futures failed, and the session sends them again)."""
        self._flush_scheduled = False
        data = b"".join(self._outbox)
        self._outbox.clear()
        if not data or self.writer is None or self.writer.is_closing():
            return
        try:
            self.writer.write(data)
        except Exception:
            log.exception("writing to ZooKeeper %s:%s failed", self.host, self.port)
            self.abort()

    def abort(self, exception: type[Exception] = zk_exc.ConnectError) -> None:
        self._outbox.clear()
        super().abort(exception)

    def start_read_loop(self) -> None:
        super().start_read_loop()
        self.read_loop_task.add_done_callback(self._read_loop_done)

    def _read_loop_done(self, _task: asyncio.Task[None]) -> None:
        # Not a close of ours (the server or the network dropped it), nor told already.
        if not self.closing and not self._drop_reported:
            self._drop_reported = True
            self._on_dropped(self)


_XID_WRAP_GUARD = 1 << 30
"""An unanswered xid this far below an answered one was issued after the counter wrapped
(``Session.send`` restarts at 1 after ``0x7FFFFFFF``): it is newer, not lost."""

_VERSION_LINE = re.compile(rb"Zookeeper version: (\d+)\.(\d+)\.(\d+)-.*")
"""The first line of ``srvr``'s answer (aiozk's ``connection.version_regex``)."""


class _TlsHandshakeError(ConnectionError):
    """The server ended a TLS handshake without a certificate error: not a TLS port, or it
    wants a client certificate this client does not have."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _NoSrvrAnswer(ConnectionError):
    """A server took the connection but did not answer aiozk's ``srvr`` probe with its
    version: not serving yet, ``srvr`` not in its ``4lw.commands.whitelist``, or (plain)
    a TLS port whose TLS layer waits for a handshake."""

    def __init__(self, *, tls: bool) -> None:
        super().__init__("no answer to 'srvr'")
        self.tls = tls


class _Refused(Exception):
    """A server refused this client for good (retrying cannot help): the credentials, or at
    start the server's certificate. ``make`` builds the error every waiting request gets."""

    def __init__(self, make: Callable[[], ZookeeperError]) -> None:
        super().__init__()
        self.make = make


class _ObservedStateMachine(_AiozkStateMachine):  # type: ignore[misc]  # aiozk is untyped
    """aiozk's session state machine, calling listeners synchronously on each transition.

    aiozk only offers futures (``wait_for``), which wake their waiters on a later turn of the
    event loop: between the transition and the waiter running, another task may still act
    on the old state (hand out a record after the connection dropped). A listener runs
    inside ``transition_to``, before any other task does.
    """

    def __init__(self, session: Any, listeners: list[Callable[[str], None]]) -> None:
        super().__init__(session)
        self.listeners = listeners

    def transition_to(self, state: str) -> None:
        super().transition_to(state)
        for listener in list(self.listeners):
            try:
                listener(state)
            except Exception:  # a listener's bug must not break the session
                log.exception("ZooKeeper state listener %r failed", listener)


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

    And the security aiozk lacks (:class:`~aiozkconsumer.security.ZookeeperSecurity`):

    - each new connection is TLS with ``ssl_context``, and sends ``auth`` (AddAuth) right
      after the ConnectResponse, before the session counts as connected, so that no
      request (nor the re-armed watches) goes out unauthenticated, on the first connection
      as on every prompt reconnect;
    - a refusal retrying cannot cure ends the session for good instead of reconnecting in a
      loop: ``AUTH_FAILED`` for the credentials, and, before the first session, a server
      certificate that does not verify on every server. Every request waiting for the
      session then fails with the error (:class:`_Refused`), and :meth:`ZkClient.start`
      raises it.
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
    heartbeat_handle: Any
    heartbeat_task: Any
    allow_read_only: bool
    password: bytes

    _known_session_id: int | None = None
    """The last session id the server granted (it stays while ``session_id`` is reset to
    ``None`` after an expiry, until a new session is granted)."""

    def __init__(
        self,
        *args: Any,
        ssl_context: ssl.SSLContext | None = None,
        auth: tuple[str, str] | None = None,
        state_listeners: list[Callable[[str], None]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        # The caller's list itself (an empty one too): listeners it adds later are called.
        self.state = _ObservedStateMachine(
            self, state_listeners if state_listeners is not None else []
        )
        self.ssl_context = ssl_context
        self._auth = auth
        self._established = False
        self._refusal: Callable[[], ZookeeperError] | None = None
        self._state_waiters: set[asyncio.Future[None]] = set()
        self.last_connect_error: tuple[str, BaseException] | None = None
        """The server (``host:port``) and the error of the last failed connection attempt."""
        self._attempt: Any = None  # the connection attempt under way

    async def establish_session(self) -> None:
        await super().establish_session()
        self._known_session_id = self.session_id
        if self._auth is not None:
            await self._authenticate(*self._auth)
        self._established = True

    async def _authenticate(self, scheme: str, credentials: str) -> None:
        """AddAuth on the new connection, bounded by a third of the session timeout.

        Raises:
            _Refused: the server answered ``AUTH_FAILED`` (or another error).
            ConnectionAbortedError: no answer in time, or the connection dropped first: the
                session itself is fine, the repair loop connects again.
        """
        try:
            error_code = await asyncio.wait_for(
                self.conn.authenticate(scheme, credentials.encode("utf-8")), self.timeout / 3
            )
        except TimeoutError:
            raise ConnectionAbortedError(
                f"ZooKeeper at {self.conn.host}:{self.conn.port} did not answer AddAuth within "
                f"{self.timeout / 3:.1f} s"
            ) from None
        if error_code == 0:
            log.debug("authenticated to ZooKeeper (scheme %s)", scheme)
            return
        message = f"ZooKeeper refused the credentials of zookeeper.auth (scheme {scheme})"
        if error_code != zk_exc.AuthFailed.error_code:
            known = zk_exc.response_error_xref.get(error_code)
            message += f": {known.__name__ if known else f'error {error_code}'}"
        raise _Refused(lambda: ZookeeperAuthError(None, message))

    async def ensure_safe_state(self, writing: bool = False) -> None:
        """As aiozk's, but fails at once with the refusal once the session was refused."""
        if self._refusal is not None:
            raise self._refusal()
        if self._auth is None and self.ssl_context is None:  # nothing can refuse it
            await super().ensure_safe_state(writing)
            return
        safe = [States.CONNECTED]
        if self.allow_read_only and not writing:
            safe.append(States.READ_ONLY)
        if self.state.current_state in safe:
            return
        waiter = self.state.wait_for(*safe)
        self._state_waiters.add(waiter)  # a refusal resolves it too
        try:
            await waiter
        finally:
            self._state_waiters.discard(waiter)
        if self._refusal is not None:
            raise self._refusal()

    async def repair_loop(self) -> None:
        """aiozk 0.32's ``Session.repair_loop``, with two more outcomes of a reconnect: a
        connection lost during AddAuth is retried (the session is fine), and a refusal
        (:class:`_Refused`) ends the session for good."""
        while not self.closing:
            await self.state.wait_for(States.SUSPENDED, States.LOST)
            if self.closing:
                break
            try:
                await self.find_server(allow_read_only=self.allow_read_only)
                try:
                    await asyncio.wait_for(self.establish_session(), self.timeout)
                except (zk_exc.SessionLost, TimeoutError) as e:  # as aiozk
                    log.info("ZooKeeper session closed: %r", e)
                    self.conn.abort(zk_exc.SessionLost)
                    await self.conn.close(self.timeout)
                    self.session_id = None
                    self.password = b"\x00"
                    continue
                except OSError as e:
                    log.info("ZooKeeper connection lost while authenticating: %s", e)
                    _abandon(self.conn)
                    continue
            except _Refused as e:
                self._refuse(e.make)
                return
            if self.conn.start_read_only:
                self.state.transition_to(States.READ_ONLY)
            else:
                self.state.transition_to(States.CONNECTED)
            self.conn.start_read_loop()
            await self.set_existing_watches()

    def _refuse(self, make: Callable[[], ZookeeperError]) -> None:
        """End the session for good: stop its tasks and connection, fail its waiters."""
        log.error("%s", make())
        self._refusal = make
        self.closing = True  # the repair loop and the heartbeat stop
        if self.heartbeat_handle is not None:
            self.heartbeat_handle.cancel()
            self.heartbeat_handle = None
        if self.heartbeat_task is not None and not self.heartbeat_task.done():
            self.heartbeat_task.cancel()
        if self.conn is not None:
            self.conn.abort(zk_exc.ConnectError)
            _abandon(self.conn)
        if self.state.current_state != States.LOST:
            self.state.transition_to(States.LOST)
        for waiter in self._state_waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def send(self, request: Any) -> Any:
        """As aiozk's ``Session.send``, bound to one session.

        The session is the one the caller bound its requests to (:meth:`ZkClient.bound_to`),
        else the one current when this is called.

        Raises:
            aiozk.exc.SessionLost: the session is not (or no longer) that one: it was
                replaced (the old one expired) before the request could be sent, or while its
                answer was awaited on a connection that dropped.
            ZookeeperAuthError, ZookeeperConnectionError: the session was refused for good
                (:class:`_Refused`: its credentials, or at start every server's certificate).
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

    async def send_in_order(self, requests: list[Any]) -> list[Any]:
        """Send ``requests`` back to back on one connection, bound as :meth:`send`.

        The server handles one session's requests in the order sent, so each is answered
        after the ones before it were applied (a read behind a transaction sees it), and all
        of them take one round trip. Unlike :meth:`send`, nothing is sent again on a new
        connection: the order would not hold.

        Returns:
            Per request, in order, its response, or the exception the server answered it with
            (``NoNode`` ...).

        Raises:
            aiozk.exc.ConnectError: the connection dropped before every answer came (the
                requests may or may not have been applied).
            aiozk.exc.SessionLost: as :meth:`send`.
        """
        bound = _BOUND_SESSION.get()
        pinned = bound if bound is not None else self._known_session_id
        await self.ensure_safe_state(writing=any(r.writes_data for r in requests))
        if pinned is not None and self.session_id != pinned:
            raise zk_exc.SessionLost()
        futures = []
        for request in requests:
            self.xid = 1 if self.xid >= 0x7FFFFFFF else self.xid + 1
            futures.append(self.conn.send(request, xid=self.xid))
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
        responses: list[Any] = []
        for outcome in outcomes:
            if isinstance(outcome, zk_exc.ConnectError):
                if self.state != States.SUSPENDED:
                    self.state.transition_to(States.SUSPENDED)
                raise outcome
            if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                raise outcome
            if isinstance(outcome, Exception):
                responses.append(outcome)
                continue
            zxid, response = outcome
            self.last_zxid = zxid
            responses.append(response)
        self.set_heartbeat()
        return responses

    async def find_server(self, allow_read_only: bool) -> None:
        attempt = 0
        conn: Any = None
        while conn is None:
            failures: list[BaseException | None] = []
            for host, port in random.sample(self.hosts, len(self.hosts)):
                before = self.last_connect_error
                conn = await self._try_server(host, port, allow_read_only)
                if conn is not None:
                    break
                failed = self.last_connect_error
                failures.append(failed[1] if failed is not None and failed is not before else None)
            else:
                if not self._established and all(
                    isinstance(f, ssl.SSLCertVerificationError) for f in failures
                ):
                    # No server's certificate verifies, before any session: a configuration
                    # error that waiting out zookeeper.connection.timeout.ms cannot cure.
                    raise _Refused(self._certificate_error)
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
        self._attempt = None
        try:
            conn = await asyncio.wait_for(self.make_connection(host, port), limit)
        except TimeoutError as e:
            log.info("ZooKeeper at %s:%s did not answer within %.1f s", host, port, limit)
            reached = self._attempt is not None and self._attempt.writer is not None
            error = _NoSrvrAnswer(tls=self.ssl_context is not None) if reached else e
            self.last_connect_error = (f"{host}:{port}", error)
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
            ssl_context=self.ssl_context,
        )
        self._attempt = conn
        try:
            await conn.connect()
        except asyncio.CancelledError:  # _try_server's bound: no socket left behind
            _abandon(conn)
            raise
        except Exception as e:  # refused, reset, not serving: the next server or round
            self.last_connect_error = (f"{host}:{port}", e)
            if isinstance(e, ssl.SSLCertVerificationError):
                log.warning("%s", describe_connect_error(f"{host}:{port}", e))
            else:
                log.debug("could not connect to ZooKeeper at %s:%s: %r", host, port, e)
            _abandon(conn)
            return None
        return conn

    def _certificate_error(self) -> ZookeeperError:
        where, error = self.last_connect_error or ("?", ssl.SSLCertVerificationError())
        return ZookeeperConnectionError(describe_connect_error(where, error))

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


def describe_connect_error(where: str, error: BaseException) -> str:
    """Say why a connection attempt to a ZooKeeper server failed, for errors and logs.

    Args:
        where: the server, ``host:port``.
        error: what the attempt raised.

    Returns:
        A sentence naming the server, the reason and, for TLS, the key to check.
    """
    if isinstance(error, ssl.SSLCertVerificationError):
        detail = error.verify_message or getattr(error, "reason", None) or str(error)
        if "mismatch" in detail.lower():
            return (
                f"TLS handshake with ZooKeeper at {where} failed: its certificate is not valid "
                f"for that host ({detail}); connect by a name the certificate holds"
            )
        return (
            f"TLS handshake with ZooKeeper at {where} failed: its certificate is not trusted "
            f"({detail}); check zookeeper.ssl.cafile"
        )
    if isinstance(error, (ssl.SSLError, _TlsHandshakeError)):
        return (
            f"TLS handshake with ZooKeeper at {where} failed "
            f"({getattr(error, 'reason', None) or error}); is it "
            "ZooKeeper's secureClientPort, and does it accept this client's certificate?"
        )
    if isinstance(error, TimeoutError):
        return f"ZooKeeper at {where} did not answer in time"
    if isinstance(error, _NoSrvrAnswer) and error.tls:
        return (
            f"ZooKeeper at {where} took the TLS connection but did not answer 'srvr' (not "
            "serving yet, or 'srvr' not in its 4lw.commands.whitelist)"
        )
    if type(error) is ConnectionError or isinstance(error, _NoSrvrAnswer):  # aiozk's, or ours
        return (
            f"ZooKeeper at {where} did not answer 'srvr' (not serving yet; or a TLS port, "
            "which needs zookeeper.ssl.client.enable=true)"
        )
    if isinstance(error, ConnectionRefusedError):
        return f"ZooKeeper at {where} refused the connection (nothing listening on that port?)"
    if isinstance(error, OSError) and error.strerror:
        return f"could not connect to ZooKeeper at {where}: {error.strerror}"
    return f"could not connect to ZooKeeper at {where}: {error!r}"


_closing_connections: set[asyncio.Task[None]] = set()
"""Closes of replaced connections under way (a task must be referenced until it ends)."""


def _abandon(conn: Any) -> None:
    """Drop a connection that never carried a session (never raises)."""
    writer = getattr(conn, "writer", None)
    if writer is not None:
        with contextlib.suppress(Exception):
            writer.close()
