"""The console consumers' pure rules: their arguments, and the decisions of a run.

Arguments: :func:`parse_properties` reads the ``consumer.properties`` file the console
consumer may be given, :func:`random_console_group` makes the group id it uses when none is
given, :func:`parse_offset_spec` and :func:`resolve_start_offset` turn ``--offset`` into the
offset to start at. A run's decisions: where the consumed offsets go back to when records
were not delivered (:func:`rewind_offsets`) and whether every partition reached its log end
(:func:`at_log_end`). No I/O: tested without servers.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Literal

from ...records import MessageAndMetadata, TopicPartition

__all__ = [
    "OffsetSpec",
    "at_log_end",
    "parse_offset_spec",
    "parse_properties",
    "random_console_group",
    "resolve_start_offset",
    "rewind_offsets",
]


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
