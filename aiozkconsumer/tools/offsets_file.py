"""The offsets file of ``ExportZkOffsets`` / ``ImportZkOffsets`` (Kafka 0.10.2): pure.

One ``<znode path>:<offset>`` per line, e.g. ``/consumers/g/offsets/t/0:4711``.
:func:`parse_offsets_file` reads it (checking every line first), :func:`format_offsets_file`
writes it; :class:`OffsetEntry` is one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import ConsumerError, MalformedZookeeperDataError
from ..zk import layout

__all__ = ["OffsetEntry", "OffsetsFileError", "format_offsets_file", "parse_offsets_file"]


class OffsetsFileError(ConsumerError, ValueError):
    """A line of an offsets file is not ``/consumers/<group>/offsets/<topic>/<partition>:<offset>``.

    Attributes:
        line_number: the 1-based line number.
        line: the line's text.
    """

    def __init__(self, line_number: int, line: str, reason: str) -> None:
        super().__init__(f"line {line_number}: {reason}: {line!r}")
        self.line_number = line_number
        self.line = line


@dataclass(frozen=True, order=True)
class OffsetEntry:
    """One committed offset: a line of an offsets file.

    Attributes:
        group: the group id.
        topic: the topic.
        partition: the partition number.
        offset: the next offset to read, as stored in ZooKeeper.
    """

    group: str
    topic: str
    partition: int
    offset: int

    @property
    def path(self) -> str:
        """The offset node, ``/consumers/<group>/offsets/<topic>/<partition>``."""
        return layout.offset_path(self.group, self.topic, self.partition)

    def line(self) -> str:
        """The line ``ExportZkOffsets`` writes: ``<path>:<offset>`` (no newline)."""
        return f"{self.path}:{self.offset}"


_OFFSET_PATH_RE = re.compile(r"/consumers/([^/]+)/offsets/([^/]+)/([0-9]+)")


def parse_offsets_file(lines: Iterable[str]) -> list[OffsetEntry]:
    """Parse an offsets file as ``ImportZkOffsets`` reads it (0.10.2).

    One ``<znode path>:<offset>`` per line, e.g. ``/consumers/g/offsets/t/0:4711``, the format
    ``ExportZkOffsets`` writes (so files of the original tools can be read). The path is split
    from the offset at the last ``:``. Blank lines and lines starting with ``#`` are skipped.
    Unlike the original, which wrote any path it was given and skipped lines it could not
    parse, the whole file is checked first: a path that is not an offset node, or an offset
    that is not a non-negative decimal number, is an error.

    Args:
        lines: the file's lines (trailing newlines are ignored).

    Returns:
        The entries, in file order.

    Raises:
        OffsetsFileError: a line is malformed; it carries the 1-based line number.
    """
    entries: list[OffsetEntry] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        path, colon, value = text.rpartition(":")
        if not colon:
            raise OffsetsFileError(number, line, "expected '<path>:<offset>'")
        match = _OFFSET_PATH_RE.fullmatch(path.strip())
        if match is None:
            raise OffsetsFileError(
                number, line, "not an offset node /consumers/<group>/offsets/<topic>/<partition>"
            )
        group, topic, partition = match.groups()
        try:
            offset = layout.decode_offset(value.strip().encode("ascii", "replace"))
            # layout's checks of group and topic as path elements
            layout.offset_path(group, topic, int(partition))
        except (MalformedZookeeperDataError, ValueError):
            raise OffsetsFileError(
                number, line, f"offset {value.strip()!r} is not a non-negative decimal number"
            ) from None
        entries.append(OffsetEntry(group, topic, int(partition), offset))
    return entries


def format_offsets_file(entries: Iterable[OffsetEntry]) -> str:
    """Write entries in ``ExportZkOffsets``'s format: ``<path>:<offset>\\n`` per entry.

    Args:
        entries: the offsets, written in the order given.

    Returns:
        The file's text (empty for no entries).
    """
    return "".join(f"{e.line()}\n" for e in entries)
