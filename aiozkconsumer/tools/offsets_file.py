"""The offsets files of the tools: pure.

Two formats, told apart per file by :func:`detect_offsets_format`:

- ``ExportZkOffsets`` / ``ImportZkOffsets`` (Kafka 0.10.2): one ``<znode path>:<offset>`` per
  line, e.g. ``/consumers/g/offsets/t/0:4711``. :func:`parse_offsets_file` reads it (checking
  every line first), :func:`format_offsets_file` writes it.
- ``kafka-consumer-groups.sh --reset-offsets --export`` (Kafka 2.x): CSV, one
  ``topic,partition,offset`` per line for one group (the group is given apart), or
  ``group,topic,partition,offset`` for several. :func:`parse_offsets_csv` reads it,
  :func:`format_offsets_csv` writes it.

:class:`OffsetEntry` is one line of either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from ..config_rules import validate_group_id
from ..errors import ConsumerError, InvalidConfigError, MalformedZookeeperDataError
from ..zk import layout

__all__ = [
    "OffsetEntry",
    "OffsetsFileError",
    "OffsetsFormat",
    "detect_offsets_format",
    "format_offsets_csv",
    "format_offsets_file",
    "parse_offsets_csv",
    "parse_offsets_file",
]

OffsetsFormat = Literal["zookeeper", "csv"]
"""An offsets file's format: ``ExportZkOffsets``' paths, or ``kafka-consumer-groups`` CSV."""


class OffsetsFileError(ConsumerError, ValueError):
    """A line of an offsets file does not parse.

    In the ``ExportZkOffsets`` format a line must be
    ``/consumers/<group>/offsets/<topic>/<partition>:<offset>``; in CSV,
    ``[group,]topic,partition,offset``.

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


def _check_group(number: int, line: str, group: str) -> None:
    """Refuse a group id that breaks ``group.id``'s rule (the one rule of every command: a
    group imported here must be one ``groups describe`` and ``offsets reset`` accept)."""
    try:
        validate_group_id(group)
    except InvalidConfigError as e:
        raise OffsetsFileError(number, line, str(e)) from None


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
        _check_group(number, line, group)
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


def detect_offsets_format(lines: Iterable[str]) -> OffsetsFormat:
    """Tell an offsets file's format by its first line that is not blank or a ``#`` comment.

    A line starting with ``/`` (a znode path) is the ``ExportZkOffsets`` format; anything
    else is CSV. An empty file counts as the ``ExportZkOffsets`` format.

    Args:
        lines: the file's lines.

    Returns:
        ``"zookeeper"`` or ``"csv"``.
    """
    for raw in lines:
        text = raw.strip()
        if text and not text.startswith("#"):
            return "zookeeper" if text.startswith("/") else "csv"
    return "zookeeper"


_CSV_HEADERS = ("topic,partition,offset", "group,topic,partition,offset")


def parse_offsets_csv(lines: Iterable[str], group: str | None = None) -> list[OffsetEntry]:
    """Parse the CSV of ``kafka-consumer-groups.sh --reset-offsets --export`` (Kafka 2.x).

    Each line is ``topic,partition,offset`` (the one group's, given as ``group``) or
    ``group,topic,partition,offset`` (the form Kafka 2.4+ writes for several groups); blank
    lines, ``#`` comments and a header line of those column names are skipped, and spaces
    around fields are ignored. The whole file is checked first.

    Args:
        lines: the file's lines (trailing newlines are ignored).
        group: the group of ``topic,partition,offset`` lines; ``None`` makes such a line an
            error.

    Returns:
        The entries, in file order.

    Raises:
        OffsetsFileError: a line has neither 3 nor 4 fields, a 3-field line and no
            ``group``, a group or topic that cannot be a ZooKeeper path element, or a
            partition or offset that is not a non-negative decimal number; it carries the
            1-based line number.
    """
    entries: list[OffsetEntry] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        fields = [f.strip() for f in text.split(",")]
        if ",".join(fields).lower() in _CSV_HEADERS:
            continue
        if len(fields) == 3:
            if group is None:
                raise OffsetsFileError(
                    number, line, "a 'topic,partition,offset' line needs the group given apart"
                )
            row_group, (topic, partition, offset) = group, fields
        elif len(fields) == 4:
            row_group, topic, partition, offset = fields
        else:
            raise OffsetsFileError(
                number, line, "expected 'topic,partition,offset' or 'group,topic,partition,offset'"
            )
        if not (partition.isascii() and partition.isdecimal()):
            raise OffsetsFileError(
                number, line, f"partition {partition!r} is not a non-negative decimal number"
            )
        try:
            value = layout.decode_offset(offset.encode("ascii", "replace"))
        except MalformedZookeeperDataError:
            raise OffsetsFileError(
                number, line, f"offset {offset!r} is not a non-negative decimal number"
            ) from None
        _check_group(number, line, row_group)
        try:
            layout.offset_path(row_group, topic, int(partition))
        except ValueError as e:
            raise OffsetsFileError(number, line, str(e)) from None
        entries.append(OffsetEntry(row_group, topic, int(partition), value))
    return entries


def format_offsets_csv(entries: Iterable[OffsetEntry]) -> str:
    """Write entries as ``kafka-consumer-groups.sh --reset-offsets --export`` does.

    ``topic,partition,offset\\n`` per entry when they are all of one group (Kafka 2.x's
    format); ``group,topic,partition,offset\\n`` when there are several (Kafka 2.4+'s).

    Args:
        entries: the offsets, written in the order given.

    Returns:
        The file's text (empty for no entries).
    """
    entries = list(entries)
    several = len({e.group for e in entries}) > 1
    return "".join(
        (f"{e.group}," if several else "") + f"{e.topic},{e.partition},{e.offset}\n"
        for e in entries
    )
