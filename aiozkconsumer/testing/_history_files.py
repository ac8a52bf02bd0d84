"""The history checker's inputs on disk: the produced log and the members' event files.

A run records what the brokers acknowledged as a :class:`ProducedLog` (JSON lines, written by
:meth:`ProducedLog.write`, read back by :func:`load_produced_log`) and one JSON-lines event file
per consumer process (written by :mod:`aiozkconsumer.testing.verifiable`, merged in time order
by :func:`load_events`). Only this module reads or writes files; the checker takes the parsed
data. Import the names from :mod:`aiozkconsumer.testing.history`.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ProducedLog",
    "TopicPartitionKey",
    "load_events",
    "load_produced_log",
]

TopicPartitionKey = tuple[str, int]
"""``(topic, partition)``."""


@dataclass(frozen=True)
class ProducedLog:
    """What the brokers acknowledged: per partition, ``(offset, value)`` in offset order.

    Attributes:
        records: ``{(topic, partition): ((offset, value), ...)}``, offsets strictly
            increasing; values as text (the checkable producer's values are ASCII). The
            records the consumers must read: with transactions, the committed ones.
        aborted: the records of aborted transactions, in the same form: in the topic (a
            ``read_uncommitted`` reader sees them), never to be delivered under
            ``isolation.level=read_committed``. Empty without transactions.
    """

    records: Mapping[TopicPartitionKey, tuple[tuple[int, str], ...]]
    aborted: Mapping[TopicPartitionKey, tuple[tuple[int, str], ...]] = field(default_factory=dict)

    @classmethod
    def from_records(
        cls,
        records: Iterable[tuple[str, int, int, str | bytes]],
        aborted: Iterable[tuple[str, int, int, str | bytes]] = (),
    ) -> ProducedLog:
        """Build a log from ``(topic, partition, offset, value)`` in any order.

        Args:
            records: the records to read.
            aborted: the records of aborted transactions.

        Raises:
            ValueError: an offset appears twice in a partition (in either, or in both).
        """
        frozen = _by_partition(records)
        dropped = _by_partition(aborted)
        for tp, pairs in dropped.items():
            both = {o for o, _ in pairs} & {o for o, _ in frozen.get(tp, ())}
            if both:
                raise ValueError(f"offset {min(both)} of {tp[0]}/{tp[1]} is aborted and not")
        return cls(frozen, dropped)

    def __len__(self) -> int:
        return sum(len(pairs) for pairs in self.records.values())

    def partitions(self) -> list[TopicPartitionKey]:
        """The partitions, sorted."""
        return sorted(self.records)

    def json_lines(self) -> Iterable[str]:
        """The log as JSON lines (``{"topic", "partition", "offset", "value"}``, no newline;
        an aborted record has ``"aborted": true`` too)."""
        for flag, records in ((False, self.records), (True, self.aborted)):
            for (topic, partition), pairs in sorted(records.items()):
                for offset, value in pairs:
                    line: dict[str, Any] = {
                        "topic": topic,
                        "partition": partition,
                        "offset": offset,
                        "value": value,
                    }
                    if flag:
                        line["aborted"] = True
                    yield json.dumps(line, separators=(",", ":"))

    def write(self, path: str | Path) -> None:
        """Write the log to ``path`` as JSON lines (see :meth:`json_lines`)."""
        with Path(path).open("w", encoding="utf-8") as out:
            for line in self.json_lines():
                out.write(line + "\n")


def _by_partition(
    records: Iterable[tuple[str, int, int, str | bytes]],
) -> dict[TopicPartitionKey, tuple[tuple[int, str], ...]]:
    by_tp: dict[TopicPartitionKey, list[tuple[int, str]]] = {}
    for topic, partition, offset, value in records:
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        by_tp.setdefault((topic, int(partition)), []).append((int(offset), text))
    frozen: dict[TopicPartitionKey, tuple[tuple[int, str], ...]] = {}
    for tp, pairs in sorted(by_tp.items()):
        pairs.sort()
        for (a, _), (b, _) in zip(pairs, pairs[1:], strict=False):
            if a == b:
                raise ValueError(f"offset {a} of {tp[0]}/{tp[1]} appears twice")
        frozen[tp] = tuple(pairs)
    return frozen


def load_produced_log(path: str | Path) -> ProducedLog:
    """Read a produced log written by :meth:`ProducedLog.write`.

    Raises:
        OSError: the file cannot be read.
        ValueError: a line is not a JSON object with ``topic``, ``partition``, ``offset``,
            ``value``, or an offset appears twice.
    """
    records: list[tuple[str, int, int, str]] = []
    aborted: list[tuple[str, int, int, str]] = []
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                (aborted if obj.get("aborted") else records).append(
                    (str(obj["topic"]), int(obj["partition"]), int(obj["offset"]), obj["value"])
                )
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise ValueError(f"{path}:{number}: not a produced record: {e}") from e
    return ProducedLog.from_records(records, aborted)


def _read_event_file(path: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        lines = f.read().split("\n")
    # A killed writer may leave a partial last line (no newline): that one is dropped.
    complete, tail = lines[:-1], lines[-1]
    for number, line in enumerate(complete, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{path}:{number}: not JSON: {e}") from e
        if not isinstance(event, dict) or "ts" not in event or "type" not in event:
            raise ValueError(f"{path}:{number}: not an event (needs 'ts' and 'type')")
        events.append(event)
    if tail.strip():
        try:
            event = json.loads(tail)
        except ValueError:
            return events
        if isinstance(event, dict) and "ts" in event and "type" in event:
            events.append(event)
    return events


def load_events(*paths: str | Path) -> list[dict[str, Any]]:
    """Read JSON-lines event files and merge them into one history in time order.

    Each file keeps its own order; files are interleaved by ``ts``. A partial last line (a
    writer killed mid-line) is dropped.

    Args:
        paths: event files, one per consumer process.

    Returns:
        The events, as dicts.

    Raises:
        OSError: a file cannot be read.
        ValueError: a complete line is not a JSON object with ``ts`` and ``type``.
    """
    per_file = [_read_event_file(Path(p)) for p in paths]
    return list(heapq.merge(*per_file, key=lambda e: float(e["ts"])))
