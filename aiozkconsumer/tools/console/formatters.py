"""The console consumer's record formatters: what it writes for each record.

:class:`MessageFormatter` is the original's ``DefaultMessageFormatter`` (0.10.2, with Kafka
2.x's fields), :class:`JsonFormatter` writes one JSON object a line and :class:`KcatFormatter`
follows a kcat ``-f`` format string (:data:`KCAT_TOKENS`). Each is a pure
:class:`RecordFormatter`: a record in, its bytes out.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ...errors import InvalidConfigError
from ...records import MessageAndMetadata

__all__ = [
    "KCAT_TOKENS",
    "DecodedJsonFormatter",
    "JsonFormatter",
    "KcatFormatter",
    "MessageFormatter",
    "RecordFormatter",
]


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
        value, value_encoding = self._value(msg.value)
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
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=_jsonable)
        return text.encode() + self.line_separator

    def _value(self, value: bytes | None) -> tuple[object, str | None]:
        """The value as written and its ``value_encoding``."""
        return _text_or_base64(value)


@dataclass(frozen=True)
class DecodedJsonFormatter(JsonFormatter):
    """:class:`JsonFormatter` for records whose value was decoded (a Schema Registry format).

    ``value`` is the decoded value as JSON (Avro records and JSON objects as objects,
    Protobuf messages through ``MessageToDict`` with the .proto field names; bytes as base64,
    decimals, dates, times and UUIDs as strings) and ``value_encoding`` the format's name
    (``"avro"``, ``"protobuf"``, ``"json-schema"``); a null value stays ``null``.

    Attributes:
        value_format: the name written as ``value_encoding``.
    """

    value_format: str = "avro"

    def _value(self, value: object) -> tuple[object, str | None]:
        if value is None:
            return None, None
        return _plain(value), self.value_format


def _plain(value: object) -> object:
    """A Protobuf message as a dict; anything else as it is (``_jsonable`` does the rest)."""
    if hasattr(value, "DESCRIPTOR") and hasattr(value, "ListFields"):
        from google.protobuf.json_format import MessageToDict

        return MessageToDict(value, preserving_proto_field_name=True)
    return value


def _jsonable(value: object) -> object:
    """``json.dumps``' fallback for what decoded values hold besides JSON's types."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    plain = _plain(value)
    if plain is not value:
        return plain
    return str(value)  # Decimal, UUID


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
