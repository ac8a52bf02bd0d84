"""The console consumer of the old mode (``ConsoleConsumer --zookeeper``, Kafka 0.10.2), and more.

:class:`ConsoleConsumer` runs one connector with one stream and writes each record through a
formatter: :class:`MessageFormatter` (the original's ``DefaultMessageFormatter``),
:class:`JsonFormatter` (one JSON object a line) or :class:`KcatFormatter` (kcat's ``-f``
format strings). :class:`PartitionConsoleConsumer` reads one partition from an offset through
a :class:`~aiozkconsumer.simple_consumer.SimpleConsumer`, without a group (the console
consumer's ``--partition``/``--offset``). Both write to an :class:`OutputSink`:
:class:`FdSink` writes to a file descriptor and knows exactly which records got out (and,
on a pipe, which the reader took), so that only those are committed; :class:`StreamSink`
wraps a file-like object. :func:`parse_properties` reads the ``consumer.properties`` file the
console consumer may be given, and :func:`random_console_group` makes the group id it uses
when none is given.
"""

from __future__ import annotations

import base64
import json
import os
import random
import select
import stat
import struct
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import anyio

from ..base_connector import ConnectorState
from ..config import ConsumerConfig
from ..connector import ZookeeperConsumerConnector
from ..errors import ConsumerError, ConsumerTimeoutError, InvalidConfigError
from ..records import MessageAndMetadata, TopicPartition
from ..simple_consumer import SimpleConsumer
from ..stream import ConsumerIterator
from ..subscription import TopicFilter

if sys.platform != "win32":
    import fcntl
    import termios

__all__ = [
    "ConsoleConsumer",
    "FdSink",
    "JsonFormatter",
    "KcatFormatter",
    "MessageFormatter",
    "OffsetSpec",
    "OutputSink",
    "PartitionConsoleConsumer",
    "RecordFormatter",
    "StreamSink",
    "at_log_end",
    "parse_offset_spec",
    "parse_properties",
    "random_console_group",
    "records_written",
    "resolve_start_offset",
    "rewind_offsets",
]

_T = TypeVar("_T")


def _unescape_properties(value: str) -> str:
    out: list[str] = []
    it = iter(value)
    for ch in it:
        if ch != "\\":
            out.append(ch)
            continue
        nxt = next(it, "")
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Parse a Java ``.properties`` file (``consumer.properties``), as ``Properties.load``.

    ``key=value``, ``key: value`` or ``key value``; ``#`` and ``!`` start comment lines; a line
    ending in an odd number of backslashes continues on the next line; ``\\t``, ``\\n``,
    ``\\=``, ``\\:`` and ``\\\\`` are unescaped. Unicode escapes (``\\uXXXX``) are not
    supported. Later keys override earlier ones.

    Args:
        text: the file's text.

    Returns:
        Key -> value, in file order.
    """
    props: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        i = 0
        key_chars: list[str] = []
        while i < len(line):
            ch = line[i]
            if ch == "\\" and i + 1 < len(line):
                key_chars.append(line[i : i + 2])
                i += 2
                continue
            if ch in "=: \t\f":
                break
            key_chars.append(ch)
            i += 1
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        props[_unescape_properties("".join(key_chars))] = _unescape_properties(rest)
    return props


def random_console_group() -> str:
    """A group id as the console consumer makes one: ``console-consumer-<0..99999>``."""
    return f"console-consumer-{random.randint(0, 99999)}"


# ---- formatters -------------------------------------------------------------------------------


class RecordFormatter(Protocol):
    """Turns a record into the bytes the console consumer writes for it."""

    def format(self, msg: MessageAndMetadata) -> bytes:
        """The bytes written for ``msg`` (separators included)."""
        ...


_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
_FORMATTER_FLAGS = (
    "print.key",
    "print.timestamp",
    "print.partition",
    "print.offset",
    "print.headers",
)
_FORMATTER_KEYS = (
    *_FORMATTER_FLAGS,
    "print.value",
    "key.separator",
    "line.separator",
    "headers.separator",
    "null.literal",
)


@dataclass(frozen=True)
class MessageFormatter:
    """The console consumer's ``DefaultMessageFormatter`` (0.10.2, plus Kafka 2.x's fields).

    Writes, in this order and each followed by ``key_separator``: ``<type>:<timestamp>``
    (``CreateTime:1490000000000``, or ``NO_TIMESTAMP``), ``Partition:<p>``, ``Offset:<o>``,
    the headers as ``key:value`` pairs separated by ``headers_separator`` (``NO_HEADERS``
    when there are none), the key; then the value followed by ``line_separator``. A null
    key, value or header value is written as ``null_literal``. The partition, offset and
    headers fields and ``null.literal`` are Kafka 2.x's (``print.headers`` is KIP-431, 2.7);
    the separators keep 0.10.2's rule (one after every field printed, even the last).

    Attributes:
        print_key: ``print.key``.
        print_timestamp: ``print.timestamp``.
        print_partition: ``print.partition``.
        print_offset: ``print.offset``.
        print_headers: ``print.headers``.
        print_value: ``print.value`` (default true).
        key_separator: ``key.separator`` (default a tab).
        line_separator: ``line.separator`` (default a newline).
        headers_separator: ``headers.separator`` (default ``,``).
        null_literal: ``null.literal`` (default ``null``).
    """

    print_key: bool = False
    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    print_headers: bool = False
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> MessageFormatter:
        """Build a formatter from ``--property`` values, as ``DefaultMessageFormatter.init``.

        Booleans are true when the trimmed value equals ``true`` in any case.

        Args:
            props: formatter property -> value.

        Returns:
            The formatter.

        Raises:
            InvalidConfigError: an unknown property (the original ignored it silently).
        """
        unknown = sorted(set(props) - set(_FORMATTER_KEYS))
        if unknown:
            raise InvalidConfigError(
                unknown[0],
                f"unknown formatter property; known: {', '.join(_FORMATTER_KEYS)}",
            )

        def flag(key: str, default: bool) -> bool:
            return props[key].strip().lower() == "true" if key in props else default

        return cls(
            print_key=flag("print.key", False),
            print_timestamp=flag("print.timestamp", False),
            print_partition=flag("print.partition", False),
            print_offset=flag("print.offset", False),
            print_headers=flag("print.headers", False),
            print_value=flag("print.value", True),
            key_separator=props.get("key.separator", "\t").encode(),
            line_separator=props.get("line.separator", "\n").encode(),
            headers_separator=props.get("headers.separator", ",").encode(),
            null_literal=props.get("null.literal", "null").encode(),
        )

    def format(self, msg: MessageAndMetadata) -> bytes:
        """The bytes written for one record.

        Args:
            msg: the record.

        Returns:
            Its formatted bytes, ending with ``line_separator``.
        """
        parts: list[bytes] = []
        sep = self.key_separator
        null = self.null_literal
        if self.print_timestamp:
            kind = _TIMESTAMP_TYPES.get(msg.timestamp_type)
            parts.append(b"NO_TIMESTAMP" if kind is None else f"{kind}:{msg.timestamp}".encode())
            parts.append(sep)
        if self.print_partition:
            parts += (b"Partition:%d" % msg.partition, sep)
        if self.print_offset:
            parts += (b"Offset:%d" % msg.offset, sep)
        if self.print_headers:
            if msg.headers:
                parts.append(
                    self.headers_separator.join(
                        k.encode() + b":" + (null if v is None else v) for k, v in msg.headers
                    )
                )
            else:
                parts.append(b"NO_HEADERS")
            parts.append(sep)
        if self.print_key:
            parts += (null if msg.key is None else msg.key, sep)
        if self.print_value:
            parts.append(null if msg.value is None else msg.value)
        parts.append(self.line_separator)
        return b"".join(parts)


def _text_or_base64(data: bytes | None) -> tuple[str | None, str | None]:
    """``(text, encoding)``: UTF-8 text when ``data`` decodes, else base64; nulls stay null."""
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


@dataclass(frozen=True)
class JsonFormatter:
    """One JSON object per record, on one line (JSON Lines).

    ``{"topic", "partition", "offset", "timestamp", "timestamp_type", "key", "key_encoding",
    "value", "value_encoding", "headers"}``: ``timestamp`` is milliseconds since the epoch and
    ``timestamp_type`` ``"CreateTime"`` or ``"LogAppendTime"`` (both ``null`` for a record
    without a timestamp). ``key`` and ``value`` are the UTF-8 text when the bytes decode as
    UTF-8 (``*_encoding: "utf-8"``), else their base64 (``*_encoding: "base64"``); a null key
    or value is ``null`` with a ``null`` encoding. ``headers`` is a list of ``{"key",
    "value", "value_encoding"}`` objects in record order (a header key may repeat).

    Attributes:
        line_separator: written after each object (default a newline).
    """

    line_separator: bytes = b"\n"

    def format(self, msg: MessageAndMetadata) -> bytes:
        """The bytes written for one record.

        Args:
            msg: the record.

        Returns:
            The JSON object, UTF-8, followed by ``line_separator``.
        """
        key, key_encoding = _text_or_base64(msg.key)
        value, value_encoding = _text_or_base64(msg.value)
        headers = []
        for name, raw in msg.headers:
            text, encoding = _text_or_base64(raw)
            headers.append({"key": name, "value": text, "value_encoding": encoding})
        kind = _TIMESTAMP_TYPES.get(msg.timestamp_type)
        obj = {
            "topic": msg.topic,
            "partition": msg.partition,
            "offset": msg.offset,
            "timestamp": None if kind is None else msg.timestamp,
            "timestamp_type": kind,
            "key": key,
            "key_encoding": key_encoding,
            "value": value,
            "value_encoding": value_encoding,
            "headers": headers,
        }
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        return text.encode() + self.line_separator


KCAT_TOKENS: Mapping[str, str] = {
    "t": "topic",
    "p": "partition",
    "o": "offset",
    "k": "key (nothing for a null key)",
    "K": "key size in bytes (-1 for a null key)",
    "s": "value (nothing for a null value)",
    "S": "value size in bytes (-1 for a null value)",
    "R": "value size as a 4-byte big-endian signed integer (-1 for a null value)",
    "h": "headers as name=value,... (NULL for a null header value)",
    "T": "timestamp, ms since the epoch (-1 when the record has none)",
    "%": "a literal %",
}
"""kcat's ``-f`` tokens :class:`KcatFormatter` supports (all of kcat 1.7's), and what each
writes."""

_KCAT_ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t"}
_HEX = "0123456789abcdefABCDEF"


def _kcat_unescape(text: str) -> bytes:
    r"""Literal text of a format string with kcat's escapes: ``\n``, ``\r``, ``\t``, ``\xHH``.

    Any other escaped character stands for itself (``\\`` is a backslash); a trailing lone
    backslash is kept.
    """
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out += ch.encode()
            i += 1
            continue
        nxt = text[i + 1]
        i += 2
        if nxt in _KCAT_ESCAPES:
            out += _KCAT_ESCAPES[nxt]
        elif nxt == "x":
            digits = ""
            while i < len(text) and len(digits) < 2 and text[i] in _HEX:
                digits += text[i]
                i += 1
            out += bytes([int(digits, 16)]) if digits else b"x"
        else:
            out += nxt.encode()
    return bytes(out)


def _kcat_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    return b",".join(k.encode() + b"=" + (b"NULL" if v is None else v) for k, v in headers)


_KCAT_FIELDS: Mapping[str, Callable[[MessageAndMetadata], bytes]] = {
    "t": lambda m: m.topic.encode(),
    "p": lambda m: b"%d" % m.partition,
    "o": lambda m: b"%d" % m.offset,
    "k": lambda m: m.key or b"",
    "K": lambda m: b"%d" % (-1 if m.key is None else len(m.key)),
    "s": lambda m: m.value or b"",
    "S": lambda m: b"%d" % (-1 if m.value is None else len(m.value)),
    "R": lambda m: struct.pack(">i", -1 if m.value is None else len(m.value)),
    "h": lambda m: _kcat_headers(m.headers),
    "T": lambda m: b"%d" % m.timestamp,
}


@dataclass(frozen=True)
class KcatFormatter:
    r"""Records written through a kcat ``-f`` format string (kcat 1.7's ``fmt_parse``).

    The tokens of :data:`KCAT_TOKENS` are replaced by the record's fields; the text between
    them is written as is, with the escapes ``\n``, ``\r``, ``\t`` and ``\xHH`` (any other
    escaped character stands for itself). As kcat, nothing is added: end the format with
    ``\n`` for one record a line.

    Args:
        fmt: the format string, e.g. ``'%t [%p] at offset %o: key %k: %s\n'``.

    Raises:
        InvalidConfigError: an unknown token, or a ``%`` at the end (kcat's "Unsupported
            formatter" and "Empty formatter").
    """

    fmt: str
    _parts: tuple[bytes | Callable[[MessageAndMetadata], bytes], ...] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        parts: list[bytes | Callable[[MessageAndMetadata], bytes]] = []
        literal: list[str] = []
        i = 0
        fmt = self.fmt
        while i < len(fmt):
            ch = fmt[i]
            if ch != "%":
                literal.append(ch)
                i += 1
                continue
            if i + 1 == len(fmt):
                raise InvalidConfigError("format", "empty token: a % at the end")
            token = fmt[i + 1]
            i += 2
            if token == "%":
                literal.append("%")  # not unescaped: kcat copies it as is
                continue
            getter = _KCAT_FIELDS.get(token)
            if getter is None:
                raise InvalidConfigError(
                    "format",
                    f"unsupported token %{token}; supported: "
                    + " ".join(f"%{t}" for t in KCAT_TOKENS),
                )
            if literal:
                parts.append(_kcat_unescape("".join(literal)))
                literal = []
            parts.append(getter)
        if literal:
            parts.append(_kcat_unescape("".join(literal)))
        object.__setattr__(self, "_parts", tuple(p for p in parts if p != b""))

    def format(self, msg: MessageAndMetadata) -> bytes:
        """The bytes written for one record.

        Args:
            msg: the record.

        Returns:
            The format string with the record's fields in place of its tokens.
        """
        return b"".join(p if isinstance(p, bytes) else p(msg) for p in self._parts)


# ---- where the records go ------------------------------------------------------------------


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
                return False
            time.sleep(delay)
            delay = min(delay * 2, _HANDOFF_MAX_SLEEP_S)

    def __repr__(self) -> str:
        flags = (" handoff" if self.handoff else "") + (" closed" if self.closed else "")
        return f"<FdSink fd={self.fd}{flags}>"


# ---- the pure rules of the run ------------------------------------------------------------


def rewind_offsets(undelivered: Sequence[MessageAndMetadata]) -> dict[TopicPartition, int]:
    """Where each partition's consumed offset must go back to when records were not delivered.

    Args:
        undelivered: records handed out by the stream but not delivered, in any order.

    Returns:
        ``{tp: the lowest offset among its undelivered records}`` (the next offset to read).
    """
    back: dict[TopicPartition, int] = {}
    for msg in undelivered:
        tp = TopicPartition(msg.topic, msg.partition)
        if msg.offset < back.get(tp, msg.offset + 1):
            back[tp] = msg.offset
    return back


def at_log_end(positions: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int]) -> bool:
    """Whether every partition reached its log end offset (kcat's ``-e``).

    Args:
        positions: ``{tp: next offset to hand out}``; ``-1`` where not known yet (no committed
            offset, ``auto.offset.reset`` not applied yet).
        ends: ``{tp: log end offset when the run started}``.

    Returns:
        ``True`` when each partition of ``positions`` has a known position at or past its end
        (vacuously for no partition); ``False`` while one has no end in ``ends``.
    """
    return all(0 <= pos and tp in ends and pos >= ends[tp] for tp, pos in positions.items())


OffsetSpec = int | Literal["earliest", "latest"]
"""A start offset: ``"earliest"``, ``"latest"``, an offset (>= 0), or ``-N``: N records before
the log end offset (kcat's relative offsets)."""

_OFFSET_ALIASES: Mapping[str, Literal["earliest", "latest"]] = {
    "earliest": "earliest",
    "beginning": "earliest",
    "smallest": "earliest",
    "latest": "latest",
    "end": "latest",
    "largest": "latest",
}


def parse_offset_spec(text: str) -> OffsetSpec:
    """Parse ``--offset``: ``earliest`` / ``latest`` (kcat's ``beginning`` / ``end`` too), an
    offset, or ``-N`` (N records before the log end).

    Raises:
        ValueError: anything else.
    """
    word = text.strip().lower()
    if word in _OFFSET_ALIASES:
        return _OFFSET_ALIASES[word]
    try:
        return int(word)
    except ValueError:
        raise ValueError(
            f"expected earliest, latest, an offset or -N (N before the end), got {text!r}"
        ) from None


def resolve_start_offset(spec: OffsetSpec, earliest: int, latest: int) -> int:
    """The offset to start reading at.

    Args:
        spec: the start, as :func:`parse_offset_spec` returns it.
        earliest: the partition's log start offset.
        latest: its log end offset.

    Returns:
        The offset; a ``-N`` that reaches before the log start starts at the log start. An
        absolute offset is returned as given (out of range, the fetch says so).
    """
    if spec == "earliest":
        return earliest
    if spec == "latest":
        return latest
    if spec < 0:
        return max(earliest, latest + spec)
    return spec


# ---- the consumers ----------------------------------------------------------------------------

_END_POLL_S = 0.1
_OUTPUT_POLL_S = 0.2
_BATCH = 500


class _ConsoleRun:
    """What both console consumers share: the sink, the counters, and stopping.

    Stopping cancels only the wait for records (``_until_stopped``), never a write in
    progress: the records written are always counted.
    """

    sink: OutputSink

    def __init__(
        self,
        sink: OutputSink,
        formatter: RecordFormatter | None,
        max_messages: int | None,
        exit_at_end: bool,
    ) -> None:
        self.sink = sink
        self.formatter: RecordFormatter = formatter or MessageFormatter()
        self.max_messages = max_messages
        self.exit_at_end = exit_at_end
        self.count = 0
        self.timed_out = False
        self.output_closed = False
        self.reached_end = False
        self._stopping = False
        self._waiting: anyio.CancelScope | None = None

    def stop(self) -> None:
        """Ask :meth:`run` to end (e.g. from a signal handler in the event loop's thread).

        A wait for records ends at once; a record being handed to a slow pipe reader counts
        as not delivered.
        """
        self._interrupt()
        self.sink.abort()

    def _interrupt(self) -> None:
        self._stopping = True
        if self._waiting is not None:
            self._waiting.cancel()

    async def _until_stopped(
        self, fn: Callable[..., Awaitable[_T]], *args: Any
    ) -> tuple[bool, _T | None]:
        """``(True, await fn(*args))``, or ``(False, None)`` if stopped first."""
        if self._stopping:
            return False, None
        with anyio.CancelScope() as scope:
            self._waiting = scope
            try:
                return True, await fn(*args)
            finally:
                self._waiting = None
        return False, None

    async def _supervised(
        self, body: Callable[[], Awaitable[None]], watchers: Sequence[Callable[[], Awaitable[None]]]
    ) -> None:
        """Run ``body`` with ``watchers`` beside it; the first error is raised, unwrapped.

        A watcher's error stops the run (as :meth:`stop`); the watchers end with the body.
        """
        errors: list[Exception] = []

        async def guarded(fn: Callable[[], Awaitable[None]]) -> None:
            try:
                await fn()
            except Exception as e:
                errors.append(e)
                self._interrupt()

        async with anyio.create_task_group() as tg:
            for watcher in watchers:
                tg.start_soon(guarded, watcher)
            try:
                await body()
            except Exception as e:  # raised below, not as the task group's ExceptionGroup
                errors.append(e)
            finally:
                tg.cancel_scope.cancel()
        if errors:
            raise errors[0]

    async def _watch_output(self) -> None:
        """End the run when the reader of the output goes away, even while idle."""
        while not self._stopping:
            if self.sink.reader_gone():
                self.output_closed = True
                self._interrupt()
                return
            await anyio.sleep(_OUTPUT_POLL_S)

    def _wanted(self) -> int:
        if self.max_messages is None:
            return _BATCH
        return min(_BATCH, self.max_messages - self.count)

    async def _deliver(self, batch: Sequence[MessageAndMetadata]) -> int:
        """Write ``batch``; count and return the records delivered."""
        fmt = self.formatter.format
        written = await self.sink.write_records([fmt(m) for m in batch])
        self.count += written
        if self.sink.closed:
            self.output_closed = True
        return written


class ConsoleConsumer(_ConsoleRun):
    """The console consumer of the old mode (``ConsoleConsumer --zookeeper``, 0.10.2).

    One connector with one stream over a topic filter (``createMessageStreamsByFilter(filter,
    1)``); records go to the sink through the formatter until ``max_messages`` were
    delivered, ``consumer.timeout.ms`` passes without a record, every owned partition reached
    its log end (``exit_at_end``), the reader of the output went away, or :meth:`stop` is
    called. Leaving commits the consumed offsets (with ``auto.commit.enable``) and closes the
    session. The offsets count exactly the records delivered: a batch never holds more than
    the records still wanted, and the consumed offsets of records the sink did not deliver
    (a closed pipe; see :class:`FdSink` for what "delivered" means on a pipe) are set back
    before the final commit. The original lost those records.

    Args:
        config: the consumer configuration.
        topic_filter: a ``Whitelist`` or ``Blacklist``.
        write: called with each formatted record, when no ``sink`` is given (wrapped in a
            :class:`StreamSink` with ``flush``).
        flush: called after each batch of records (with ``write``).
        sink: where the records go (instead of ``write``/``flush``).
        formatter: the record formatter (default :class:`MessageFormatter`).
        max_messages: stop after this many records (``None``: no limit).
        exit_at_end: stop once every partition this member owns has been read up to its log
            end offset as of the start (kcat's ``-e``); needs ``end_offsets``. Partitions
            acquired later are read up to their log end when first owned.
        end_offsets: ``await end_offsets(tps)`` -> ``{tp: log end offset}`` (for
            ``exit_at_end``); the caller may cache, answering with the offsets at start.

    Attributes:
        count: records delivered so far.
        timed_out: whether the run ended because ``consumer.timeout.ms`` passed.
        output_closed: whether the run ended because the reader of the output went away.
        reached_end: whether the run ended because every owned partition reached its end.
        connector: the connector, while :meth:`run` runs.

    Raises:
        ValueError: neither ``write`` nor ``sink``, or ``exit_at_end`` without
            ``end_offsets``.
    """

    def __init__(
        self,
        config: ConsumerConfig,
        topic_filter: TopicFilter,
        write: Callable[[bytes], object] | None = None,
        flush: Callable[[], object] = lambda: None,
        *,
        sink: OutputSink | None = None,
        formatter: RecordFormatter | None = None,
        max_messages: int | None = None,
        exit_at_end: bool = False,
        end_offsets: Callable[[Collection[TopicPartition]], Awaitable[Mapping[TopicPartition, int]]]
        | None = None,
    ) -> None:
        if sink is None:
            if write is None:
                raise ValueError("give write or sink")
            sink = StreamSink(write, flush)
        if exit_at_end and end_offsets is None:
            raise ValueError("exit_at_end needs end_offsets")
        super().__init__(sink, formatter, max_messages, exit_at_end)
        self.config = config
        self.topic_filter = topic_filter
        self.end_offsets = end_offsets
        self.connector: ZookeeperConsumerConnector | None = None

    async def run(self) -> int:
        """Consume until one of the ends of the class doc; then shut down.

        Returns:
            The number of records delivered.

        Raises:
            ConsumerError: from the connector (``ZookeeperConnectionError``,
                ``ConsumerRebalanceFailedError``, ...), from ``end_offsets``, or the output
                failed.
        """
        async with ZookeeperConsumerConnector(self.config) as connector:
            self.connector = connector
            watchers = [self._watch_output]
            if self.exit_at_end:
                watchers.append(lambda: self._watch_log_end(connector))

            async def body() -> None:
                ok, streams = await self._until_stopped(
                    connector.create_message_streams_by_filter, self.topic_filter, 1
                )
                if ok and streams:
                    await self._consume(streams[0].iterator, connector)

            await self._supervised(body, watchers)
        return self.count

    async def _consume(
        self, iterator: ConsumerIterator, connector: ZookeeperConsumerConnector
    ) -> None:
        next_batch = iterator.next_batch
        while not self._stopping and self._wanted() > 0:
            try:
                ok, batch = await self._until_stopped(next_batch, self._wanted())
            except StopAsyncIteration:
                break
            except ConsumerTimeoutError:
                self.timed_out = True
                break
            if not ok or not batch:
                break
            written = await self._deliver(batch)
            if written < len(batch):
                self._rewind(connector, batch[written:])
                break
            if self.exit_at_end and await self._check_log_end(connector):
                break

    @staticmethod
    def _rewind(
        connector: ZookeeperConsumerConnector, undelivered: Sequence[MessageAndMetadata]
    ) -> None:
        """Set the consumed offsets back to the first record not delivered, per partition."""
        registry = connector.topic_registry
        for tp, offset in rewind_offsets(undelivered).items():
            pti = registry.get(tp)
            if pti is not None and pti.consumed_offset > offset:
                pti.consumed_offset = offset

    async def _check_log_end(self, connector: ZookeeperConsumerConnector) -> bool:
        if connector.state is not ConnectorState.RUNNING:
            return False  # mid-rebalance, suspended: what is owned is about to change
        positions = {tp: pti.consumed_offset for tp, pti in connector.topic_registry.items()}
        assert self.end_offsets is not None
        ends = await self.end_offsets(list(positions))
        if connector.state is ConnectorState.RUNNING and at_log_end(positions, ends):
            self.reached_end = True
            self._interrupt()
        return self.reached_end

    async def _watch_log_end(self, connector: ZookeeperConsumerConnector) -> None:
        """Catch the end while no record comes (e.g. the log was read up to its end already)."""
        # Consumed offsets advance without an event to wait for: poll them.
        while not self._stopping:
            if await self._check_log_end(connector):
                return
            await anyio.sleep(_END_POLL_S)


class PartitionConsoleConsumer(_ConsoleRun):
    """Reads one partition from an offset without a group (the console consumer's
    ``--partition`` / ``--offset``; kcat's ``-p`` / ``-o``).

    Nothing is registered anywhere and nothing is committed: the records of ``tp`` from
    ``start`` on are fetched from the partition's leader with ``consumer`` and written to the
    sink, until ``max_messages`` were delivered, ``timeout_ms`` passes without a record, the
    log end offset as of the start is reached (``exit_at_end``), the reader of the output
    went away, or :meth:`stop` is called.

    Args:
        consumer: a started :class:`~aiozkconsumer.simple_consumer.SimpleConsumer`.
        tp: the partition.
        start: where to start (see :data:`OffsetSpec`).
        sink: where the records go.
        formatter: the record formatter (default :class:`MessageFormatter`).
        max_messages: stop after this many records (``None``: no limit).
        timeout_ms: stop when no record came for this long (``None``: wait forever).
        exit_at_end: stop at the log end offset read at the start (records past it are not
            written).
        fetch_max_bytes: the size of each fetch (``fetch.message.max.bytes``).

    Attributes:
        count, timed_out, output_closed, reached_end: as :class:`ConsoleConsumer`.
        start_offset: the offset the read started at, once resolved.
        next_offset: the offset after the last record delivered (or skipped as a control
            record), where a later read would go on.
    """

    def __init__(
        self,
        consumer: SimpleConsumer,
        tp: TopicPartition,
        start: OffsetSpec,
        sink: OutputSink,
        *,
        formatter: RecordFormatter | None = None,
        max_messages: int | None = None,
        timeout_ms: int | None = None,
        exit_at_end: bool = False,
        fetch_max_bytes: int = 1048576,
    ) -> None:
        super().__init__(sink, formatter, max_messages, exit_at_end)
        self.consumer = consumer
        self.tp = tp
        self.start = start
        self.timeout_ms = timeout_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.start_offset: int | None = None
        self.next_offset: int | None = None

    async def run(self) -> int:
        """Read and write until one of the ends of the class doc.

        Returns:
            The number of records delivered.

        Raises:
            OffsetOutOfRangeError: the start offset is not in the partition (the error
                carries the valid range).
            UnknownTopicError: the topic or the partition does not exist.
            BrokerNotAvailableError: the partition's leader cannot be reached.
            ConsumerError: another fetch error, or the output failed.
        """
        await self._supervised(self._read, [self._watch_output])
        return self.count

    async def _read(self) -> None:
        consumer, tp = self.consumer, self.tp
        need_latest = (
            self.exit_at_end
            or self.start == "latest"
            or (isinstance(self.start, int) and self.start < 0)
        )
        latest = await consumer.latest_offset(tp) if need_latest else -1
        earliest = (
            await consumer.earliest_offset(tp)
            if self.start == "earliest" or (isinstance(self.start, int) and self.start < 0)
            else -1
        )
        offset = resolve_start_offset(self.start, earliest, latest)
        self.start_offset = self.next_offset = offset
        end = latest if self.exit_at_end else None
        timeout_s = None if self.timeout_ms is None else self.timeout_ms / 1000
        last_record = anyio.current_time()
        while not self._stopping and self._wanted() > 0:
            if end is not None and offset >= end:
                self.reached_end = True
                break
            ok, result = await self._until_stopped(consumer.fetch, tp, offset, self.fetch_max_bytes)
            if not ok or result is None:
                break
            records = result.records
            if end is not None:
                records = [r for r in records if r.offset < end]
            records = records[: self._wanted()]
            if records:
                written = await self._deliver(records)
                if written < len(records):
                    self.next_offset = records[written].offset
                    break
                last_record = anyio.current_time()
                if len(records) < len(result.records):
                    self.next_offset = records[-1].offset + 1
                    offset = self.next_offset
                    continue
            elif timeout_s is not None and anyio.current_time() - last_record >= timeout_s:
                self.timed_out = True
                break
            offset = self.next_offset = max(offset, result.next_offset)
