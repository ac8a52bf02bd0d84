"""Partition runs: the push-mode bridge's records as zero-copy Arrow slices of one partition.

``foreach_batch`` never makes a Python object per record: what the streams hand out
(``KafkaStream.arrow_batches``) is cut into runs of one partition (:func:`partition_runs`),
and batches are cut by row counts (:func:`take_rows`), replays by offsets
(:func:`split_replay`), and handed to Spark as one table (:func:`batch_table`). Nothing here
does I/O or waits: the buffer (``buffer.py``) and the pump (``pump.py``) call these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ..records import TopicPartition
from .schema import arrow_schema

__all__ = [
    "PartitionRun",
    "batch_ranges",
    "batch_table",
    "count_rows",
    "partition_runs",
    "split_replay",
    "take_rows",
]


@dataclass(frozen=True)
class PartitionRun:
    """Consecutive records of one partition with strictly increasing offsets, as Arrow.

    A zero-copy slice of a ``pyarrow.RecordBatch`` in the Kafka source's schema (as
    ``KafkaStream.arrow_batches`` hands them out); :func:`partition_runs` cuts a batch into
    runs. The bridge buffers, holds and replays records as runs: a batch is made by slicing
    and concatenating them, never with a Python object per record.

    Attributes:
        tp: the partition.
        rows: its records, at least one, in increasing offset order.
    """

    tp: TopicPartition
    rows: pa.RecordBatch

    def __len__(self) -> int:
        return int(self.rows.num_rows)

    @property
    def offsets(self) -> npt.NDArray[np.int64]:
        """The ``offset`` column as a numpy array (a view: no copy)."""
        offsets: npt.NDArray[np.int64] = self.rows.column("offset").to_numpy(zero_copy_only=False)
        return offsets

    @property
    def first(self) -> int:
        """The first offset."""
        return int(self.rows.column("offset")[0].as_py())

    @property
    def end(self) -> int:
        """The last offset + 1."""
        return int(self.rows.column("offset")[-1].as_py()) + 1

    def slice(self, start: int, length: int | None = None) -> PartitionRun:
        """Rows ``start`` to ``start + length`` (to the end without ``length``), no copy."""
        return PartitionRun(self.tp, self.rows.slice(start, length))

    def __repr__(self) -> str:
        return f"<PartitionRun {self.tp} [{self.first}, {self.end}) rows={len(self)}>"


def partition_runs(batch: pa.RecordBatch) -> list[PartitionRun]:
    """Cut a record batch into runs of one partition with strictly increasing offsets.

    The cuts come from comparing every row's ``topic``, ``partition`` and ``offset`` with the
    row before (pyarrow.compute and numpy, no loop over the rows); the runs are zero-copy
    slices of ``batch``.

    Args:
        batch: records in the Kafka source's schema, ``topic``, ``partition`` and ``offset``
            not null (as ``KafkaStream.arrow_batches`` and ``records_to_arrow`` make them).

    Returns:
        The runs in row order; ``[]`` for an empty batch.
    """
    rows = int(batch.num_rows)
    if rows == 0:
        return []
    topics = batch.column("topic")
    partitions = batch.column("partition").to_numpy(zero_copy_only=False)
    offsets = batch.column("offset").to_numpy(zero_copy_only=False)
    cuts = (partitions[1:] != partitions[:-1]) | (offsets[1:] <= offsets[:-1])
    changed = pc.not_equal(topics.slice(1), topics.slice(0, rows - 1))
    cuts |= changed.to_numpy(zero_copy_only=False)
    starts: list[int] = [0, *(np.flatnonzero(cuts) + 1).tolist()]
    ends = [*starts[1:], rows]
    return [
        PartitionRun(TopicPartition(topics[s].as_py(), int(partitions[s])), batch.slice(s, e - s))
        for s, e in zip(starts, ends, strict=True)
    ]


def batch_ranges(runs: Iterable[PartitionRun]) -> dict[TopicPartition, tuple[int, int]]:
    """``{tp: (first offset, last offset + 1)}`` of a batch's records.

    Args:
        runs: the batch, as runs (:func:`partition_runs`); a partition may have several.

    Returns:
        Per partition, its smallest offset and its largest + 1.
    """
    ranges: dict[TopicPartition, tuple[int, int]] = {}
    for run in runs:
        first, end = run.first, run.end
        got = ranges.get(run.tp)
        ranges[run.tp] = (first, end) if got is None else (min(got[0], first), max(got[1], end))
    return ranges


def take_rows(
    runs: Sequence[PartitionRun], count: int
) -> tuple[list[PartitionRun], list[PartitionRun]]:
    """Split runs after their first ``count`` rows, slicing the run the cut falls in.

    Args:
        runs: runs in arrival order.
        count: the rows to take, >= 0.

    Returns:
        ``(head, tail)``: runs holding the first ``count`` rows (all of them when there are
        fewer), and those holding the rest, both in order.
    """
    head: list[PartitionRun] = []
    left = count
    for i, run in enumerate(runs):
        if left <= 0:
            return head, list(runs[i:])
        if len(run) <= left:
            head.append(run)
            left -= len(run)
        else:
            head.append(run.slice(0, left))
            return head, [run.slice(left), *runs[i + 1 :]]
    return head, []


def split_replay(
    runs: Sequence[PartitionRun],
    targets: Mapping[TopicPartition, tuple[int, int]],
) -> tuple[list[PartitionRun], list[PartitionRun], set[TopicPartition]]:
    """Split buffered runs into the records of a batch being replayed and the rest.

    A target partition's run is cut at the target's end offset (a binary search in its
    offsets; the two parts are slices).

    Args:
        runs: buffered runs, in arrival order.
        targets: ``{tp: (first, end)}`` of the batch being replayed.

    Returns:
        ``(batch, rest, reached)``: the records of target partitions below their end
        offset, the others in their order, and the target partitions whose last offset
        (``end - 1``) or beyond has been seen.
    """
    batch: list[PartitionRun] = []
    rest: list[PartitionRun] = []
    reached: set[TopicPartition] = set()
    for run in runs:
        target = targets.get(run.tp)
        if target is None:
            rest.append(run)
            continue
        end = target[1]
        cut = int(np.searchsorted(run.offsets, end, side="left"))
        if cut == len(run):
            batch.append(run)
        elif cut == 0:
            rest.append(run)
        else:
            batch.append(run.slice(0, cut))
            rest.append(run.slice(cut))
        if run.end >= end:
            reached.add(run.tp)
    return batch, rest, reached


def batch_table(runs: Sequence[PartitionRun], include_headers: bool = False) -> pa.Table:
    """The batch's records as one Arrow table for ``spark.createDataFrame``.

    Args:
        runs: the batch.
        include_headers: with the ``headers`` column (dropped from runs that have it when
            ``False``).

    Returns:
        A ``pyarrow.Table`` with schema ``arrow_schema(include_headers)``, one chunk per run
        (but ``headers``: one chunk, copied).

    Raises:
        ValueError: ``include_headers`` and a run was read without headers.
    """
    schema = arrow_schema(include_headers)
    names = schema.names
    batches = []
    for run in runs:
        have = run.rows.schema.names
        if have == names:
            batches.append(run.rows)
        elif include_headers and "headers" not in have:
            raise ValueError(f"{run!r} was read without headers")
        else:
            batches.append(run.rows.select(names))
    table = pa.Table.from_batches(batches, schema=schema)
    if include_headers and table.num_rows:
        # createDataFrame rebuilds list columns chunk by chunk (pa.ListArray.from_arrays),
        # which refuses a slice whose offsets do not start at 0 once it has nulls: the
        # headers column goes as one new chunk (a copy of that column alone).
        i = schema.get_field_index("headers")
        headers = pa.concat_arrays(table.column(i).chunks)
        table = table.set_column(i, schema.field(i), pa.chunked_array([headers]))
    return table


def count_rows(runs: Iterable[PartitionRun]) -> int:
    """The records in ``runs``."""
    return sum(len(run) for run in runs)
