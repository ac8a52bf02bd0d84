"""What the batch log holds, and its encodings: pure, no I/O.

``foreach_batch`` records the last batch it handed to ``fn`` (:class:`BatchRecord`) before
``fn`` runs and again once its offsets are committed, so that a new run replays an
unfinished batch with the same id and records. A ZooKeeper-coordinated group keeps the record
as JSON in a node (:meth:`BatchRecord.encode`, at :func:`batch_log_path`); a
Kafka-coordinated group keeps one :class:`BatchMark` per partition in the metadata of its
committed offsets (at :func:`mark_offsets`), read back with :func:`last_batch`. The stores
that read and write them are in ``batch_log.py``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from ..errors import MalformedZookeeperDataError
from ..records import TopicPartition
from ..zk import layout

__all__ = [
    "BATCH_LOG_VERSION",
    "DEFAULT_BATCH_LOG_NAME",
    "BatchMark",
    "BatchRecord",
    "batch_log_path",
    "last_batch",
    "mark_offsets",
]

BATCH_LOG_VERSION = 1
"""The ``version`` field of the batch log node's JSON."""

DEFAULT_BATCH_LOG_NAME = "batch_id"
"""The batch log's name unless ``foreach_batch(batch_log_name=...)`` gives another."""


def batch_log_path(group: str, name: str = DEFAULT_BATCH_LOG_NAME) -> str:
    """The batch log node of a group, ``/consumers/<group>/spark/<name>``.

    Args:
        group: the ``group.id``.
        name: the node's name, ``batch_id`` by default.

    Returns:
        The absolute path.

    Raises:
        ValueError: ``group`` or ``name`` cannot be a ZooKeeper path element.
    """
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"batch log name {name!r} cannot be a ZooKeeper path element")
    return f"{layout.group_dir(group)}/spark/{name}"


@dataclass(frozen=True)
class BatchRecord:
    """One entry of the batch log: the last batch handed to ``fn``.

    Attributes:
        batch_id: the batch id, from 0.
        committed: whether its offsets were committed (``fn`` returned and the commit
            succeeded).
        ranges: ``{tp: (first offset, next offset)}`` of the records in the batch.
    """

    batch_id: int
    committed: bool
    ranges: Mapping[TopicPartition, tuple[int, int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        """The node's JSON bytes (topics and partitions sorted)."""
        offsets: dict[str, dict[str, list[int]]] = {}
        for tp in sorted(self.ranges):
            first, end = self.ranges[tp]
            offsets.setdefault(tp.topic, {})[str(tp.partition)] = [first, end]
        body = {
            "version": BATCH_LOG_VERSION,
            "batch_id": self.batch_id,
            "committed": self.committed,
            "offsets": offsets,
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, path: str | None = None) -> BatchRecord:
        """Read a node written by :meth:`encode`.

        Args:
            data: the node's bytes.
            path: the node's path, for the error message.

        Returns:
            The record.

        Raises:
            MalformedZookeeperDataError: the bytes are not such a record.
        """
        try:
            body = json.loads(data)
            if body.get("version") != BATCH_LOG_VERSION:
                raise ValueError(f"unknown version {body.get('version')!r}")
            batch_id = body["batch_id"]
            committed = body["committed"]
            if not isinstance(batch_id, int) or batch_id < 0 or not isinstance(committed, bool):
                raise ValueError("bad batch_id or committed")
            ranges: dict[TopicPartition, tuple[int, int]] = {}
            for topic, parts in body["offsets"].items():
                for partition, (first, end) in parts.items():
                    ranges[TopicPartition(topic, int(partition))] = (int(first), int(end))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise MalformedZookeeperDataError(path or "?", data, f"not a batch log: {e}") from e
        return cls(batch_id, committed, ranges)


@dataclass(frozen=True)
class BatchMark:
    """One partition's entry in the Kafka batch log: the metadata committed with its offset.

    Encoded as compact JSON, ``{"b":7,"c":false,"r":[1200,1450]}`` (plus ``"n":<name>`` for a
    log not named ``batch_id``): far below the broker's ``offset.metadata.max.bytes`` (4096
    by default).

    Attributes:
        batch_id: the batch the partition was last part of.
        committed: whether that batch's offsets were committed (``fn`` returned).
        first: the batch's first offset of the partition.
        end: the batch's next offset of the partition (last offset + 1).
        name: the batch log's name (``foreach_batch(batch_log_name=...)``).
    """

    batch_id: int
    committed: bool
    first: int
    end: int
    name: str = DEFAULT_BATCH_LOG_NAME

    def encode(self) -> str:
        """The metadata string."""
        body: dict[str, object] = {
            "b": self.batch_id,
            "c": self.committed,
            "r": [self.first, self.end],
        }
        if self.name != DEFAULT_BATCH_LOG_NAME:
            body["n"] = self.name
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> BatchMark | None:
        """Read a metadata string written by :meth:`encode`.

        Args:
            text: the metadata committed with an offset.

        Returns:
            The mark; ``None`` for anything else (empty metadata, another client's), which
            is not an error: any consumer of the group may commit the partition.
        """
        if not text.startswith("{"):
            return None
        try:
            body = json.loads(text)
            batch_id, committed, (first, end) = body["b"], body["c"], body["r"]
            name = body.get("n", DEFAULT_BATCH_LOG_NAME)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        ints = (batch_id, first, end)
        if (
            not all(isinstance(v, int) and not isinstance(v, bool) for v in ints)
            or not isinstance(committed, bool)
            or not isinstance(name, str)
            or batch_id < 0
            or not 0 <= first < end
        ):
            return None
        return cls(batch_id, committed, first, end, name)


def last_batch(marks: Mapping[TopicPartition, BatchMark]) -> BatchRecord | None:
    """The last batch a Kafka batch log shows, from its partitions' marks.

    Args:
        marks: ``{tp: mark}`` of one log (one name).

    Returns:
        ``None`` without marks; else the largest batch id found, committed when every
        partition marked with it is (a batch's commit is one OffsetCommit, but a partition
        may fail in it), with the ranges of all those partitions.
    """
    if not marks:
        return None
    batch_id = max(m.batch_id for m in marks.values())
    of_last = {tp: m for tp, m in marks.items() if m.batch_id == batch_id}
    return BatchRecord(
        batch_id,
        all(m.committed for m in of_last.values()),
        {tp: (m.first, m.end) for tp, m in sorted(of_last.items())},
    )


def mark_offsets(
    record: BatchRecord,
    known: Mapping[TopicPartition, int],
    owned: Collection[TopicPartition],
    *,
    committed: bool,
) -> dict[TopicPartition, int]:
    """The offsets a Kafka batch log commits its marks with, for the batch's owned partitions.

    Before ``fn`` runs (``committed=False``) a mark must not move the group's offset: each
    partition is committed where the group is, or at the batch's first offset where the group
    has no offset. After ``fn`` returned, at the batch's end, never backwards.

    Args:
        record: the batch.
        known: the group's committed offsets, where it has one.
        owned: the partitions the member owns.
        committed: whether the marks say the batch is committed.

    Returns:
        ``{tp: offset}`` for the batch's partitions in ``owned``.
    """
    offsets: dict[TopicPartition, int] = {}
    for tp, (first, end) in record.ranges.items():
        if tp in owned:
            offsets[tp] = max(end, known.get(tp, -1)) if committed else known.get(tp, first)
    return offsets
