"""A connection of a fetch loop's own for Fetch requests, read without re-buffering.

aiokafka's connections read through an asyncio ``StreamReader``: every byte of a fetch
response is copied four times on the one Python thread before the record parser sees it
(the transport's ``recv`` into a new ``bytes``, ``feed_data`` into the reader's buffer,
``readexactly`` out of it, then ``Bytes.decode`` into each partition's ``bytes``), and the
whole response is held in two or three of those forms at once (about 2x its size, traced).
Here a fetch loop writes its FetchRequest (v12+ built by ``fetch_request.py``, older ones by
aiokafka's protocol classes) on an ``asyncio.BufferedProtocol`` and parses the
response as it arrives (:class:`FetchResponseParser`): header fields are received into a
16 KiB read-ahead buffer and decoded in place, and each partition's record set is received
straight into a buffer of its exact size (from its length prefix). With the native record
decoder (``native.py``) that buffer *is* the record set the consumer reads: one copy, the
kernel's, and the buffers are recycled once their records are read (no page faults for a fresh
buffer per fetch). Without it, the buffer is turned into the ``bytes`` aiokafka's Cython
``MemoryRecords`` requires (it refuses a ``memoryview`` or a ``bytearray``): two copies.
Either way only one partition's record set is ever held twice, whatever the response's size.

Two modes receive the same way (``io_thread``, the fetcher's ``fetch.io.thread.enable``): by
default the connection is an ``asyncio.BufferedProtocol`` on the event loop's thread; with
``io_thread=True`` the socket is a blocking one owned by a worker thread (``socket_link.py``),
which sends the request and runs the parser's ``recv_into`` loop, so the kernel's receive copy
and the TLS decryption (both with the GIL released) run beside the event loop instead of on
it, and the fetcher's ``after`` step (the record sets' header pass and CRCs,
``records.read_record_sets``) runs there too, the loop getting the response with its record
sets parsed and checked.

The connection is secured as every other connection of the client (``security.py``'s
``KafkaSecurity``): TLS is the same ``ssl.SSLContext`` and server name either way
(``wrap_socket`` in the thread, asyncio's SSL transport under the ``BufferedProtocol``); both
decrypt straight into the buffer the parser hands out, so a record set is still received
into its own buffer, the decryption being the one copy. With SASL the SaslHandshake and
SaslAuthenticate exchange (``auth.py``, with aiokafka's mechanisms) runs from the event loop
before the first Fetch, each answer received whole by a small frame reader (in the thread in
the threaded mode), then again on the same connection before the session the broker granted
ends (KIP-368).

The parser reads FetchResponse v4-v11 (the versions aiokafka 0.14 builds requests for) and the
flexible v12-v18 (requests built by ``fetch_request.py``): compact arrays and strings, tagged
fields (``DivergingEpoch``, ``CurrentLeader``, ``NodeEndpoints`` kept), topic ids instead of
names from v13 on, mapped back to names from the request's. A version outside these falls
back to aiokafka's shared connection (``client.py``'s ``FetchChannel`` decides), as does
every request but Fetch and the MetadataRequest that asks for topic ids
(:meth:`FetchConnection.request_raw`).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..errors import AuthenticationError, BrokerNotAvailableError, SslAuthenticationError
from ..security import KafkaSecurity
from .auth import SaslSession, authenticate, tls_failure_reason
from .fetch_request import FlexibleFetchRequest
from .fetch_response import (
    _I32,
    MAX_NON_FLEXIBLE,
    MAX_VERSION,
    MIN_VERSION,
    READ_AHEAD,
    FetchResponse,
    FetchResponseParser,
    PartitionData,
)
from .socket_link import SocketLink

__all__ = [
    "MAX_NON_FLEXIBLE",
    "MAX_VERSION",
    "MIN_VERSION",
    "READ_AHEAD",
    "FetchConnection",
    "FetchResponse",
    "FetchResponseParser",
    "PartitionData",
    "TlsAnswerError",
]

log = logging.getLogger(__name__)

class TlsAnswerError(ValueError):
    """A request sent in the clear was answered with a TLS record: the port speaks TLS."""


_TLS_RECORD_TYPES = frozenset((0x15, 0x16))  # alert, handshake
MAX_FRAME = 100 * 1024 * 1024
"""Largest response :class:`_FrameReader` takes (the broker's ``socket.request.max.bytes``
default): a larger length prefix means the bytes are not a Kafka response."""


class _FrameReader:
    """Receives one size-prefixed response whole: the SASL exchange's (small) answers.

    The same shape as :class:`FetchResponseParser` (``buffer``, ``filled``, ``done``,
    ``response``), so the protocol receives either; ``response`` is the frame after its
    length prefix.

    Raises (from :meth:`filled`):
        TlsAnswerError: the prefix is a TLS record header (a TLS port answering a request
            sent in the clear with an alert: 0x15 0x03 ...).
        ValueError: a length below 0 or beyond :data:`MAX_FRAME`.
    """

    def __init__(self) -> None:
        self._prefix = bytearray(4)
        self._body: bytearray | None = None
        self._pos = 0
        self.done = False
        self.response = b""

    def buffer(self) -> memoryview:
        """Where the next received bytes go."""
        target = self._prefix if self._body is None else self._body
        return memoryview(target)[self._pos :]

    def filled(self, nbytes: int) -> None:
        """Account for ``nbytes`` received into :meth:`buffer`."""
        self._pos += nbytes
        if self._body is None:
            if self._pos < 4:
                return
            head = self._prefix
            if head[0] in _TLS_RECORD_TYPES and head[1] == 0x03 and head[2] <= 0x04:
                raise TlsAnswerError("the broker answered with a TLS record")
            (size,) = _I32.unpack(head)
            if not 0 <= size <= MAX_FRAME:
                raise ValueError(f"response length {size} is not a Kafka response's")
            self._body, self._pos = bytearray(size), 0
        if self._pos >= len(self._body):
            self.done = True
            self.response = bytes(self._body)


class _Receiver(Protocol):
    done: bool

    @property
    def response(self) -> Any: ...

    def buffer(self) -> memoryview: ...

    def filled(self, nbytes: int) -> None: ...


class _Protocol(asyncio.BufferedProtocol):
    """Receives into the current receiver's buffer; one request in flight at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser: _Receiver | None = None
        self.waiter: asyncio.Future[Any] | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._spare = bytearray(1)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        parser = self.parser
        if parser is None or parser.done:
            return memoryview(self._spare)  # unasked-for bytes: buffer_updated fails on them
        return parser.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        parser, waiter = self.parser, self.waiter
        if parser is None or waiter is None or parser.done:
            self._fail(ValueError("bytes from the broker with no request in flight"))
            return
        try:
            parser.filled(nbytes)
        except (ValueError, struct.error, UnicodeDecodeError) as e:
            self._fail(e)
            return
        if parser.done:
            self.parser = self.waiter = None
            if not waiter.done():
                waiter.set_result(parser.response)

    def _fail(self, error: BaseException) -> None:
        waiter = self.waiter
        self.parser = self.waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        waiter = self.waiter
        self.parser = self.waiter = None
        if waiter is not None and not waiter.done():
            # The cause (an ssl.SSLError: a TLS alert from the broker) says what went wrong.
            lost = ConnectionError(f"connection lost: {exc!r}")
            lost.__cause__ = exc
            waiter.set_exception(lost)
        if not self.closed.done():
            self.closed.set_result(None)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost fails the request in flight


_IO_ERRORS = (OSError, ValueError, struct.error, UnicodeDecodeError, TimeoutError)
"""What a failed connection, a timeout or an out-of-sync answer raises (ssl errors are
``OSError``s)."""


class FetchConnection:
    """A fetch loop's own connection to one broker, for Fetch requests (and the Metadata
    request that names their topics' ids).

    Connects on first use and again after a failure, with TLS and SASL as ``security`` says
    (:meth:`open`). An authenticated session the broker gave a lifetime (KIP-368:
    ``connections.max.reauth.ms``, or an OAUTHBEARER token's expiry) is re-authenticated on
    the same connection before the first fetch after 85-95% of its lifetime has passed, so
    the broker does not drop it.

    Failures of the connection (cannot connect, timeout, connection lost, a response that does
    not parse) close it and raise :class:`~aiozkconsumer.errors.BrokerNotAvailableError`, as a
    failed request on aiokafka's shared connection does; the next fetch reconnects. Failures of
    authentication raise :class:`~aiozkconsumer.errors.AuthenticationError` (a TLS one
    :class:`~aiozkconsumer.errors.SslAuthenticationError`), and the next attempt to connect
    waits until ``reconnect.backoff.max.ms`` has passed since: a wrong password is not tried
    in a loop.

    Args:
        node_id: the broker.
        address: returns the broker's current ``(host, port)`` (from the cluster metadata),
            or ``None`` when unknown.
        client_id: ``client.id`` for the request header.
        request_timeout_s: time limit of a connect and of a request, plus the request's own
            ``max_wait_time``.
        security: TLS and SASL (default plaintext).
        token_provider: OAUTHBEARER's token provider, the one the client's other connections
            share; default :func:`~aiozkconsumer.kafka.oauth.refreshing` of
            ``security.token_provider`` (which gives that same one).
        io_thread: receive in a worker thread on a blocking socket rather than on the event
            loop's thread (default ``False``; see the module doc).

    Raises:
        InvalidConfigError: OAUTHBEARER settings that cannot give a token (see
            :func:`~aiozkconsumer.kafka.oauth.refreshing`).
    """

    def __init__(
        self,
        node_id: int,
        address: Any,
        client_id: str,
        request_timeout_s: float,
        *,
        security: KafkaSecurity | None = None,
        token_provider: Any = None,
        io_thread: bool = False,
    ) -> None:
        self.node_id = node_id
        self.io_thread = io_thread
        self._address = address
        self._client_id = client_id
        self._timeout_s = request_timeout_s
        self.security = security = security or KafkaSecurity()
        if token_provider is None and security.sasl_mechanism == "OAUTHBEARER":
            from .oauth import refreshing  # one provider per source: the client's own

            token_provider = refreshing(security.token_provider)
        self._token_provider = token_provider
        self._protocol: _Protocol | None = None
        self._link: SocketLink | None = None
        self._host_port: tuple[str, int] | None = None
        self._session: SaslSession | None = None
        self._auth_failed_at: float | None = None
        self._correlation_id = 0
        self.requests = 0
        self.connects = 0
        """Connections opened (and authenticated) so far."""
        self.reauthentications = 0
        """Re-authentications of an open connection (KIP-368) so far."""
        self.bytes_copied = 0
        """Record bytes copied (once each) from the receive buffers; see the module doc."""
        self.bytes_sent = 0
        """Bytes of the FetchRequests sent, size prefixes included."""

    @property
    def connected(self) -> bool:
        """Whether the connection is open."""
        link = self._link
        if link is not None:
            return link.is_open
        p = self._protocol
        return p is not None and p.transport is not None and not p.transport.is_closing()

    @property
    def session(self) -> SaslSession | None:
        """The connection's SASL session (``None`` without SASL or when closed)."""
        return self._session if self.connected else None

    @property
    def broker(self) -> str:
        """``host:port`` of the broker (last connected to), or ``broker <id>``."""
        if self._host_port is None:
            return f"broker {self.node_id}"
        host, port = self._host_port
        return f"{host}:{port}"

    def _next_correlation_id(self) -> int:
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        return self._correlation_id

    def _failure(self, exc: BaseException, what: str, *, handshake: bool = False) -> Exception:
        """The error to raise for ``exc`` (the connection already closed or to be closed)."""
        host = self._host_port[0] if self._host_port else ""
        if _caused_by(exc, TlsAnswerError):
            return AuthenticationError(
                self.broker,
                self.security.sasl_mechanism,
                "this port speaks TLS (it answered a request sent in the clear with a TLS "
                "record): set security.protocol=SSL or SASL_SSL",
            )
        if self.security.tls:
            reason = tls_failure_reason(exc, host, handshake=handshake)
            if reason is not None:
                return SslAuthenticationError(self.broker, reason)
        return BrokerNotAvailableError(f"{what} broker {self.node_id} failed: {exc!r}")

    async def _connect(self) -> None:
        address = self._address()
        if address is None:
            raise BrokerNotAvailableError(f"broker {self.node_id} has no known address")
        host, port = address
        self._host_port = (str(host), int(port))
        context = self.security.ssl_context if self.security.tls else None
        server_hostname = host if context is not None else None
        try:
            if self.io_thread:
                self._link = await SocketLink.connect(
                    host, port, self._timeout_s, context, server_hostname
                )
                return
            loop = asyncio.get_running_loop()
            async with asyncio.timeout(self._timeout_s):
                _, self._protocol = await loop.create_connection(
                    _Protocol, host, port, ssl=context, server_hostname=server_hostname
                )
        except (OSError, TimeoutError) as e:
            error = self._failure(e, f"fetch connection to {host}:{port}", handshake=True)
            raise error from e

    async def _wait_after_auth_failure(self) -> None:
        """At most one authentication attempt per ``reconnect.backoff.max.ms``."""
        if self._auth_failed_at is None:
            return
        left = self._auth_failed_at + self.security.reconnect_backoff_max_ms / 1000
        delay = left - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    async def open(self) -> None:
        """Connect (TLS when ``security`` says) and authenticate (SASL), unless connected.

        Raises:
            BrokerNotAvailableError: the broker could not be reached, or the connection
                failed or timed out.
            SslAuthenticationError: the TLS handshake failed (an untrusted or wrong-host
                certificate, a client certificate required or refused, a port that does not
                speak TLS).
            AuthenticationError: SASL authentication failed (the broker's reason), the port
                speaks TLS to a client in the clear, or it does not use SASL.
        """
        if self.connected:
            return
        self.close()
        await self._wait_after_auth_failure()
        try:
            await self._connect()
            if self.security.sasl:
                self._session = await self._authenticate()
        except AuthenticationError as e:
            self.close()
            self._auth_failed_at = time.monotonic()
            log.debug("fetch connection to %s: %s", self.broker, e)
            raise
        except BaseException:
            self.close()
            raise
        self._auth_failed_at = None
        self.connects += 1

    async def _authenticate(self) -> SaslSession:
        host = self._host_port[0] if self._host_port else ""

        async def exchange(request_struct: Any) -> Any:
            return await self._exchange(request_struct)

        try:
            return await authenticate(
                exchange,
                self.security,
                host=host,
                broker=self.broker,
                token_provider=self._token_provider,
            )
        except _IO_ERRORS as e:
            raise self._failure(e, "SASL authentication with") from e

    async def _round_trip(
        self,
        frame: bytes,
        receiver: _Receiver,
        timeout_s: float,
        after: Callable[[Any], None] | None = None,
    ) -> Any:
        """Send ``frame`` and receive its answer into ``receiver`` (the caller closes the
        connection on failure); ``after`` runs on the answer in the I/O thread (threaded mode
        only: on the event loop it would only move the work the caller does anyway).

        Raises:
            OSError, TimeoutError: the connection failed or the answer did not come in time.
            ValueError, struct.error, UnicodeDecodeError: the answer did not parse.
        """
        link = self._link
        if link is not None:
            return await link.transfer(frame, receiver, timeout_s, after)
        protocol = self._protocol
        transport = protocol.transport if protocol is not None else None
        if protocol is None or transport is None or transport.is_closing():
            raise ConnectionError("connection closed")
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        protocol.parser, protocol.waiter = receiver, waiter
        transport.write(frame)
        async with asyncio.timeout(timeout_s):
            return await waiter

    async def _exchange(self, request_struct: Any) -> Any:
        """Send one request struct and decode its answer (the caller closes on failure).

        Raises:
            OSError, TimeoutError: the connection failed or the answer did not come in time.
            ValueError: the answer is not the request's (``TlsAnswerError``: a TLS record).
        """
        correlation_id = self._next_correlation_id()
        header = request_struct.build_request_header(
            correlation_id=correlation_id, client_id=self._client_id
        )
        message = header.encode() + request_struct.encode()
        frame = _I32.pack(len(message)) + message
        body = await self._round_trip(frame, _FrameReader(), self._timeout_s)
        buf = io.BytesIO(body)
        answer = request_struct.parse_response_header(buf).correlation_id
        if answer != correlation_id:
            raise ValueError(f"correlation id {answer}, expected {correlation_id}")
        return request_struct.RESPONSE_TYPE.decode(buf)

    async def request(self, request_struct: Any) -> Any:
        """Send one request other than Fetch (an aiokafka request struct at its version) and
        return the decoded response; connects first if needed.

        Raises:
            BrokerNotAvailableError: as :meth:`open`, or the request failed or timed out (the
                connection was closed).
            SslAuthenticationError: as :meth:`open`, or the broker refused the client's
                certificate after the handshake (TLS 1.3).
            AuthenticationError: as :meth:`open`, or the answer was a TLS record (the port
                speaks TLS).
        """
        await self.open()
        try:
            return await self._exchange(request_struct)
        except _IO_ERRORS as e:
            self.close()
            raise self._failure(e, "request to") from e
        except BaseException:
            self.close()
            raise

    async def _ready(self) -> None:
        """Open the connection, or re-authenticate it when its session is due (KIP-368).

        A session found past its end (the fetch loop was idle, or a long poll outlasted it)
        is re-authenticated all the same: the broker closes an expired connection on the next
        request other than a SaslHandshake (``SocketServer.processCompletedReceives``), and
        takes a SaslHandshake as the start of a re-authentication.
        """
        session = self.session
        if (
            session is not None
            and session.reauthenticate_at is not None
            and time.monotonic() >= session.reauthenticate_at
        ):
            await self._reauthenticate()
        await self.open()

    async def _reauthenticate(self) -> None:
        try:
            self._session = await self._authenticate()
        except AuthenticationError:
            self.close()
            self._auth_failed_at = time.monotonic()
            raise
        except BaseException:
            self.close()
            raise
        self.reauthentications += 1
        log.debug("re-authenticated the fetch connection to %s", self.broker)

    async def fetch(
        self,
        request: Any,
        max_wait_ms: int,
        *,
        topic_names: Mapping[bytes, str] | None = None,
        after: Callable[[FetchResponse], None] | None = None,
    ) -> FetchResponse:
        """Send one FetchRequest and return its decoded response.

        Args:
            request: a :class:`~.fetch_request.FlexibleFetchRequest` (v12-v18), or aiokafka's
                FetchRequest struct at its chosen version (``FetchRequest(...).prepare(
                versions)``), v4-v11.
            max_wait_ms: the request's ``max_wait_time``, added to the time limit.
            topic_names: v13+: topic id -> name for the topics the response may hold (see
                :class:`FetchResponseParser`).
            after: in the threaded mode, called with the response in the I/O thread once it
                has arrived (not called otherwise): e.g. the record sets' header pass and
                CRCs, ``records.read_record_sets``. What it raises fails the fetch (the
                connection is closed).

        Raises:
            ValueError: the request's version is not one parsed here, or it cannot be
                encoded (see :meth:`~.fetch_request.FlexibleFetchRequest.encode`); nothing
                was sent.
            BrokerNotAvailableError: the broker could not be reached, the connection failed
                or timed out, or the response did not parse; the connection was closed.
            SslAuthenticationError: the TLS handshake failed, or the broker refused the
                client's certificate (see :meth:`open`).
            AuthenticationError: SASL authentication or re-authentication failed (see
                :meth:`open`); the next attempt waits ``reconnect.backoff.max.ms``.
        """
        version = request.API_VERSION
        if not MIN_VERSION <= version <= MAX_VERSION or (
            version > MAX_NON_FLEXIBLE and not isinstance(request, FlexibleFetchRequest)
        ):
            raise ValueError(f"a FetchRequest v{version} is not sent over this connection")
        await self._ready()
        correlation_id = self._next_correlation_id()
        if isinstance(request, FlexibleFetchRequest):
            frame = request.frame(correlation_id, self._client_id)
        else:
            header = request.build_request_header(
                correlation_id=correlation_id, client_id=self._client_id
            )
            message = header.encode() + request.encode()
            frame = _I32.pack(len(message)) + message
        parser = FetchResponseParser(version, correlation_id, topic_names)
        ok = False
        try:
            response: FetchResponse = await self._round_trip(
                frame, parser, self._timeout_s + max_wait_ms / 1000, after
            )
            ok = True
        except _IO_ERRORS as e:
            raise self._failure(e, "fetch from") from e
        finally:
            if not ok:
                # Cancelled, timed out or failed with the response unread: out of sync.
                self.close()
        self.requests += 1
        self.bytes_copied += parser.bytes_copied
        self.bytes_sent += len(frame)
        return response

    async def request_raw(self, encode: Callable[[int, str], bytes]) -> bytes:
        """Send one request encoded by the caller and return its answer's bytes.

        For requests of ours other than Fetch (``topic_ids.py``'s MetadataRequest); connects
        first if needed.

        Args:
            encode: ``(correlation id, client id) -> the request`` with its header, without
                the size prefix.

        Returns:
            The response after its size prefix (its header included: the caller checks the
            correlation id, passed to ``encode``).

        Raises:
            BrokerNotAvailableError: as :meth:`open`, or the request failed or timed out (the
                connection was closed).
            SslAuthenticationError: as :meth:`open`.
            AuthenticationError: as :meth:`open`, or the answer was a TLS record.
            Exception: whatever ``encode`` raises (nothing was sent).
        """
        await self._ready()
        message = encode(self._next_correlation_id(), self._client_id)
        ok = False
        try:
            body: bytes = await self._round_trip(
                _I32.pack(len(message)) + message, _FrameReader(), self._timeout_s
            )
            ok = True
        except _IO_ERRORS as e:
            raise self._failure(e, "request to") from e
        finally:
            if not ok:
                self.close()
        return body

    def close(self) -> None:
        """Close the connection (never raises; a request in flight fails)."""
        protocol, self._protocol = self._protocol, None
        link, self._link = self._link, None
        self._session = None
        if link is not None:
            link.close()
        if protocol is not None and protocol.transport is not None:
            with contextlib.suppress(Exception):
                if self.security.tls:
                    # asyncio's TLS close waits for the broker's close_notify, over the
                    # network, before it closes the socket: an event loop closed meanwhile
                    # leaks it. Nothing is left to send (a request given up on is dropped
                    # anyway), and Kafka needs no close_notify: close the socket at once.
                    protocol.transport.abort()
                else:
                    protocol.transport.close()

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed"
        how = self.security.describe() + (", I/O thread" if self.io_thread else "")
        return (
            f"<FetchConnection broker {self.node_id} [{state}, {how}, {self.requests} requests, "
            f"{self.connects} connects, {self.reauthentications} re-authentications]>"
        )


def _caused_by(exc: BaseException | None, kind: type[BaseException]) -> bool:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
