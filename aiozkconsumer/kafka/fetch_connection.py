"""A connection of a fetch loop's own for Fetch requests, read without re-buffering.

aiokafka's connections read through an asyncio ``StreamReader``: every byte of a fetch
response is copied four times on the one Python thread before the record parser sees it
(the transport's ``recv`` into a new ``bytes``, ``feed_data`` into the reader's buffer,
``readexactly`` out of it, then ``Bytes.decode`` into each partition's ``bytes``), and the
whole response is held in two or three of those forms at once (about 2x its size, traced).
Here a fetch loop writes its FetchRequest (built by aiokafka's protocol classes, at the
version aiokafka negotiated with the broker) on an ``asyncio.BufferedProtocol`` and parses the
response as it arrives (:class:`FetchResponseParser`): header fields are received into a
16 KiB read-ahead buffer and decoded in place, and each partition's record set is received
straight into a buffer of its exact size (from its length prefix). With the native record
decoder (``native.py``) that buffer *is* the record set the consumer reads: one copy, the
kernel's, and the buffers are recycled once their records are read (no page faults for a fresh
buffer per fetch). Without it, the buffer is turned into the ``bytes`` aiokafka's Cython
``MemoryRecords`` requires (it refuses a ``memoryview`` or a ``bytearray``): two copies.
Either way only one partition's record set is ever held twice, whatever the response's size.

Only plaintext connections exist today (``client.py`` configures neither SSL nor SASL), so
there is nothing this connection cannot do that the shared one does; a Fetch version outside
the layouts parsed here (v4-v11, the non-flexible ones aiokafka 0.14 builds) falls back to
aiokafka's shared connection, as does everything but Fetch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from ..errors import BrokerNotAvailableError
from . import native

__all__ = ["FetchConnection", "FetchResponse", "FetchResponseParser", "PartitionData"]

log = logging.getLogger(__name__)

_alloc: Callable[[int], bytearray] = native.native.alloc if native.AVAILABLE else bytearray
"""A buffer to receive a record set into (the native one is not zero-filled first)."""

READ_AHEAD = 16 * 1024
"""Bytes a receive may bring ahead of the field being parsed (header fields only)."""
MIN_VERSION = 4
MAX_VERSION = 11
"""The FetchResponse layouts :class:`FetchResponseParser` decodes (the non-flexible ones)."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_TOP_V7 = struct.Struct(">iihii")  # correlation id, throttle, error code, session id, topics
_TOP_V1 = struct.Struct(">iii")  # correlation id, throttle, topics
_PART_V4 = struct.Struct(">ihqqi")  # partition, error, high watermark, last stable, aborted
_PART_V5 = struct.Struct(">ihqqqi")  # ... + log start offset
_ABORTED = struct.Struct(">qq")

PartitionData = tuple[
    int, int, int, int, int, "list[tuple[int, int]] | None", "bytes | bytearray | None"
]
"""``(partition, error code, high watermark, last stable offset, log start offset (-1 before
v5), aborted transactions, records)``: the leading fields and the last one where aiokafka's
decoded ``FetchResponse`` has them, so the fetcher reads either the same way."""


@dataclass(slots=True)
class FetchResponse:
    """A decoded FetchResponse (the parts of aiokafka's the fetcher reads).

    Attributes:
        throttle_time_ms: the broker's throttle time.
        error_code: the top-level error (v7+; 0 before).
        topics: ``[(topic, [PartitionData, ...])]`` in response order.
        size: bytes of the response after its length prefix.
    """

    throttle_time_ms: int = 0
    error_code: int = 0
    topics: list[tuple[str, list[PartitionData]]] = field(default_factory=list)
    size: int = 0


class FetchResponseParser:
    """Decodes one FetchResponse as it arrives, without I/O (a push parser).

    :meth:`buffer` is where the next bytes go; :meth:`filled` says how many went there.
    Header fields are received into a small read-ahead buffer (up to :data:`READ_AHEAD` bytes,
    never past the response's end) and decoded in place, so one receive brings a partition's
    header and the start of its record set; a record set is then received whole into a buffer
    of its own size (what the read-ahead already holds of it copied in first). ``done`` is
    set, and ``response`` holds the result, once the length prefix's bytes have all come.

    Args:
        version: the FetchRequest's API version (:data:`MIN_VERSION` .. :data:`MAX_VERSION`).
        correlation_id: the request's correlation id.

    Raises (from :meth:`filled`):
        ValueError: the bytes do not form the expected response (wrong correlation id, a
            length beyond the response's end); the connection is out of sync.
    """

    def __init__(self, version: int, correlation_id: int) -> None:
        if not MIN_VERSION <= version <= MAX_VERSION:
            raise ValueError(f"FetchResponse v{version} is not parsed here")
        self.version = version
        self.correlation_id = correlation_id
        self.response = FetchResponse()
        self.done = False
        self.bytes_copied = 0
        """Record bytes copied from the receive buffers into ``bytes`` (one copy each)."""
        self._ahead = memoryview(bytearray(READ_AHEAD))
        self._start = self._end = 0  # the unparsed bytes in the read-ahead buffer
        self._unreceived = 4  # bytes of the response not received yet (the prefix first)
        self._record: memoryview | None = None  # the record set being received
        self._record_pos = 0
        self._steps = self._parse()
        self._need = next(self._steps)

    def buffer(self) -> memoryview:
        """Where the next received bytes go (never empty while not ``done``)."""
        if self._record is not None:
            return self._record[self._record_pos :]
        return self._ahead[self._end : min(len(self._ahead), self._end + self._unreceived)]

    def filled(self, nbytes: int) -> None:
        """Account for ``nbytes`` received into :meth:`buffer`; parse what is complete."""
        self._unreceived -= nbytes
        if self._record is not None:
            self._record_pos += nbytes
        else:
            self._end += nbytes
        self._advance()
        if not self.done and self._record is None and self._unreceived <= 0:
            raise ValueError("FetchResponse ended inside a field")

    def _advance(self) -> None:
        while not self.done:
            if self._record is not None:
                if self._record_pos < len(self._record):
                    return  # more of the record set to come
                value, self._record = self._record, None
            else:
                n, is_records = self._need
                have = self._end - self._start
                if is_records:
                    record = _alloc(n)
                    take = min(have, n)
                    record[:take] = self._ahead[self._start : self._start + take]
                    self._start += take
                    self._record, self._record_pos = memoryview(record), take
                    continue
                if have < n:
                    self._make_room(n)
                    return
                value = self._ahead[self._start : self._start + n]
                self._start += n
            try:
                self._need = self._steps.send(value)
            except StopIteration:
                self.done = True

    def _make_room(self, n: int) -> None:
        """Move the unparsed bytes to the front, in a bigger buffer if ``n`` needs it."""
        have = self._end - self._start
        if n > len(self._ahead):  # a long topic name or many aborted transactions
            bigger = memoryview(bytearray(n))
            bigger[:have] = self._ahead[self._start : self._end]
            self._ahead = bigger
        elif self._start:
            self._ahead[:have] = self._ahead[self._start : self._end]
        self._start, self._end = 0, have

    def _parse(self) -> Generator[tuple[int, bool], memoryview, None]:
        # yield (n, is_records): the next n bytes of the response (a view, read at once).
        v = self.version
        resp = self.response
        (size,) = _I32.unpack((yield 4, False))
        if size < 0:
            raise ValueError(f"FetchResponse length {size}")
        self._unreceived += size
        left = size
        top = _TOP_V7 if v >= 7 else _TOP_V1
        if left < top.size:
            raise ValueError(f"FetchResponse of {size} bytes is too short")
        left -= top.size
        if v >= 7:
            corr, resp.throttle_time_ms, resp.error_code, _session, n_topics = top.unpack(
                (yield top.size, False)
            )
        else:
            corr, resp.throttle_time_ms, n_topics = top.unpack((yield top.size, False))
        if corr != self.correlation_id:
            raise ValueError(f"correlation id {corr}, expected {self.correlation_id}")
        part = _PART_V5 if v >= 5 else _PART_V4
        tail = 8 if v >= 11 else 4  # (preferred read replica,) records length
        for _ in range(max(n_topics, 0)):
            left -= 2
            (name_len,) = _I16.unpack((yield 2, False))
            left -= name_len + 4
            if left < 0 or name_len < 0:
                raise ValueError("topic name beyond the response")
            head = yield name_len + 4, False
            topic = str(head[:name_len], "utf-8")
            (n_parts,) = _I32.unpack_from(head, name_len)
            parts: list[PartitionData] = []
            for _ in range(max(n_parts, 0)):
                left -= part.size
                if left < 0:
                    raise ValueError("partition header beyond the response")
                if v >= 5:
                    head = yield part.size, False
                    partition, error, hw, lso, log_start, n_aborted = part.unpack(head)
                else:
                    partition, error, hw, lso, n_aborted = part.unpack((yield part.size, False))
                    log_start = -1
                aborted: list[tuple[int, int]] | None = None
                if n_aborted >= 0:
                    left -= n_aborted * _ABORTED.size
                    if left < 0:
                        raise ValueError("aborted transactions beyond the response")
                    raw = (yield n_aborted * _ABORTED.size, False) if n_aborted else memoryview(b"")
                    aborted = [
                        _ABORTED.unpack_from(raw, i * _ABORTED.size) for i in range(n_aborted)
                    ]
                left -= tail
                if left < 0:
                    raise ValueError("record set length beyond the response")
                (length,) = _I32.unpack_from((yield tail, False), tail - 4)
                records: bytes | bytearray | None = None
                if length >= 0:
                    left -= length
                    if left < 0:
                        raise ValueError("record set beyond the response")
                    if not length:
                        records = b""
                    elif native.AVAILABLE:
                        # The native decoder reads the receive buffer itself: no copy.
                        received = (yield length, True).obj
                        assert isinstance(received, bytearray)
                        records = received
                    else:
                        # The one copy into the bytes MemoryRecords takes (it refuses buffers).
                        records = bytes((yield length, True))
                        self.bytes_copied += length
                parts.append((partition, error, hw, lso, log_start, aborted, records))
            resp.topics.append((topic, parts))
        if left:
            raise ValueError(f"{left} bytes left over at the end of a FetchResponse")
        resp.size = size


class _Protocol(asyncio.BufferedProtocol):
    """Receives into the current parser's buffer; one request in flight at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser: FetchResponseParser | None = None
        self.waiter: asyncio.Future[FetchResponse] | None = None
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
            waiter.set_exception(ConnectionError(f"connection lost: {exc!r}"))
        if not self.closed.done():
            self.closed.set_result(None)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost fails the request in flight


class FetchConnection:
    """A fetch loop's own connection to one broker, for Fetch requests only.

    Connects on first use and again after a failure. Every failure (cannot connect, timeout,
    connection lost, a response that does not parse) closes the connection and raises
    :class:`~aiozkconsumer.errors.BrokerNotAvailableError`, as a failed request on aiokafka's
    shared connection does; the next fetch reconnects.

    Args:
        node_id: the broker.
        address: returns the broker's current ``(host, port)`` (from the cluster metadata),
            or ``None`` when unknown.
        client_id: ``client.id`` for the request header.
        request_timeout_s: time limit of a connect and of a request, plus the request's own
            ``max_wait_time``.
    """

    def __init__(
        self,
        node_id: int,
        address: Any,
        client_id: str,
        request_timeout_s: float,
    ) -> None:
        self.node_id = node_id
        self._address = address
        self._client_id = client_id
        self._timeout_s = request_timeout_s
        self._protocol: _Protocol | None = None
        self._correlation_id = 0
        self.requests = 0
        self.bytes_copied = 0
        """Record bytes copied (once each) from the receive buffers; see the module doc."""

    @property
    def connected(self) -> bool:
        """Whether the connection is open."""
        p = self._protocol
        return p is not None and p.transport is not None and not p.transport.is_closing()

    async def _connect(self) -> _Protocol:
        address = self._address()
        if address is None:
            raise BrokerNotAvailableError(f"broker {self.node_id} has no known address")
        host, port = address
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._timeout_s):
                _, protocol = await loop.create_connection(_Protocol, host, port)
        except (OSError, TimeoutError) as e:
            raise BrokerNotAvailableError(
                f"fetch connection to {host}:{port} (broker {self.node_id}) failed: {e!r}"
            ) from e
        return protocol

    async def fetch(self, request_struct: Any, max_wait_ms: int) -> FetchResponse:
        """Send one FetchRequest and return its decoded response.

        Args:
            request_struct: aiokafka's FetchRequest struct at its chosen version
                (``FetchRequest(...).prepare(versions)``), v4-v11.
            max_wait_ms: the request's ``max_wait_time``, added to the time limit.

        Raises:
            BrokerNotAvailableError: the broker could not be reached, the connection failed
                or timed out, or the response did not parse; the connection was closed.
        """
        if not self.connected:
            self.close()
            self._protocol = await self._connect()
        protocol = self._protocol
        assert protocol is not None and protocol.transport is not None
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        correlation_id = self._correlation_id
        header = request_struct.build_request_header(
            correlation_id=correlation_id, client_id=self._client_id
        )
        message = header.encode() + request_struct.encode()
        parser = FetchResponseParser(request_struct.API_VERSION, correlation_id)
        waiter: asyncio.Future[FetchResponse] = asyncio.get_running_loop().create_future()
        protocol.parser, protocol.waiter = parser, waiter
        ok = False
        try:
            protocol.transport.write(_I32.pack(len(message)) + message)
            async with asyncio.timeout(self._timeout_s + max_wait_ms / 1000):
                response = await waiter
            ok = True
        except (OSError, ValueError, struct.error, UnicodeDecodeError, TimeoutError) as e:
            raise BrokerNotAvailableError(f"fetch from broker {self.node_id} failed: {e!r}") from e
        finally:
            if not ok:
                # Cancelled, timed out or failed with the response unread: out of sync.
                self.close()
        self.requests += 1
        self.bytes_copied += parser.bytes_copied
        return response

    def close(self) -> None:
        """Close the connection (never raises; a request in flight fails)."""
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None:
            with contextlib.suppress(Exception):
                protocol.transport.close()

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed"
        return f"<FetchConnection broker {self.node_id} [{state}, {self.requests} requests]>"
