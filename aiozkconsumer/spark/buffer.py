"""What the push-mode bridge keeps for one connector between calls: records and a held batch.

Records the streams handed out and no batch took yet, as partition runs in arrival order,
each partition tagged with the ownership it was handed out under (so a rebalance's release
drops them), and the batch handed to ``fn`` and not committed yet (so a retry in this process
replays it). Synchronous state: the pump (``pump.py``) fills it and cuts batches from it,
``foreach_batch`` holds and reclaims batches; only :meth:`BridgeBuffer.wait_change` waits.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

import anyio
import pyarrow as pa

from ..records import PartitionTopicInfo, TopicPartition
from .batch_records import BatchRecord
from .runs import PartitionRun, batch_ranges, count_rows, partition_runs, take_rows

__all__ = ["BridgeBuffer", "HeldBatch"]

log = logging.getLogger(__name__)


def _current(
    registry: Mapping[TopicPartition, PartitionTopicInfo],
    tp: TopicPartition,
    source: PartitionTopicInfo | None,
) -> bool:
    """Whether records handed out under ``source`` still belong to this member's ownership of
    ``tp``: the partition was not released (nor released and claimed again) since."""
    return source is not None and source.active and registry.get(tp) is source


@dataclass(frozen=True)
class HeldBatch:
    """A batch taken for ``fn`` and not committed yet, kept until it is.

    The streams handed its records out (the consumed offsets are past them), so a retry in
    this process gets them from here; partitions released meanwhile are read again by the
    streams from the committed offset instead.

    Attributes:
        batch_id: its batch id.
        runs: its records, as handed to ``fn``.
        sources: per partition, the ``PartitionTopicInfo`` (the ownership) the records were
            handed out under.
    """

    batch_id: int
    runs: list[PartitionRun]
    sources: Mapping[TopicPartition, PartitionTopicInfo | None]


class BridgeBuffer:
    """What the bridge keeps for one connector across calls: records taken from the streams
    and not yet in a batch (Arrow runs, in arrival order), and the batch handed to ``fn`` and
    not yet committed.

    Every buffered partition is tagged with the ``PartitionTopicInfo`` its records were
    handed out under. A rebalance that releases a partition (and maybe claims it again)
    replaces that object, and the new one starts at the committed offset: the buffered
    records of the old one are dropped, or they would be delivered twice and, worse, make a
    replay believe it had reached the end of a partition it had not read yet.
    """

    def __init__(self) -> None:
        self.runs: list[PartitionRun] = []
        self.sources: dict[TopicPartition, PartitionTopicInfo | None] = {}
        self.held: HeldBatch | None = None
        self.replaying = False
        self.ended = 0
        # Set when records the streams handed out could not be buffered: nothing of this
        # connector may be committed any more (later offsets would skip them).
        self.failed: BaseException | None = None
        self._changed = anyio.Event()

    @property
    def size(self) -> int:
        """The records buffered (not counting the held batch)."""
        return count_rows(self.runs)

    def notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_change(self) -> None:
        await self._changed.wait()

    def adopt(self, tp: TopicPartition, source: PartitionTopicInfo | None) -> None:
        """Tag ``tp`` with ``source``, dropping its records buffered under another one."""
        if tp in self.sources and self.sources[tp] is source:
            return
        if tp in self.sources:
            self._drop({tp})
        self.sources[tp] = source

    def add(
        self,
        batch: pa.RecordBatch,
        registry: Mapping[TopicPartition, PartitionTopicInfo],
    ) -> None:
        """Append a record batch a stream just handed out, as runs.

        Must run without awaiting after the stream returned it: ``registry`` then still
        holds the ``PartitionTopicInfo`` each record was handed out under (an iterator hands
        out records of active partitions only, and a release replaces the registry).
        """
        runs = partition_runs(batch)
        for tp in dict.fromkeys(run.tp for run in runs):
            self.adopt(tp, registry.get(tp))
        self.runs.extend(runs)

    def take(self, max_records: int) -> list[PartitionRun]:
        """Take the first ``max_records`` buffered records (all when fewer)."""
        batch, self.runs = take_rows(self.runs, max_records)
        return batch

    def drop_stale(self, registry: Mapping[TopicPartition, PartitionTopicInfo]) -> None:
        """Forget buffered records of partitions released since they were handed out."""
        stale = [tp for tp, source in self.sources.items() if not _current(registry, tp, source)]
        for tp in stale:
            del self.sources[tp]
        if stale:
            self._drop(set(stale))

    def _drop(self, tps: set[TopicPartition]) -> None:
        kept = [run for run in self.runs if run.tp not in tps]
        if len(kept) != len(self.runs):
            log.info(
                "dropping %d buffered records of released partitions", self.size - count_rows(kept)
            )
            self.runs = kept

    def hold(self, batch_id: int, runs: list[PartitionRun]) -> None:
        """Keep a batch until it is committed (taken right after it left the buffer)."""
        tps = {run.tp for run in runs}
        self.held = HeldBatch(batch_id, runs, {tp: self.sources.get(tp) for tp in tps})

    def without_headers(self) -> bool:
        """Whether some records kept (buffered or held) were read without headers."""
        kept = [*self.runs, *(self.held.runs if self.held is not None else ())]
        return any("headers" not in run.rows.schema.names for run in kept)

    def reclaim(
        self,
        registry: Mapping[TopicPartition, PartitionTopicInfo],
        next_id: int,
        replay: BatchRecord | None,
    ) -> list[PartitionRun]:
        """At the start of a call: what becomes of the batch a previous call left uncommitted.

        Only records of partitions whose ownership did not change are kept (the others are
        read again by the streams, from the committed offset).

        Args:
            registry: the connector's topic registry now.
            next_id: the batch id the batch log says comes next.
            replay: the unfinished batch the batch log says to replay first, if any.

        Returns:
            The records of the held batch to replay (empty when nothing is held, or the held
            batch is not the one to replay); the batch stays held until the replay replaces
            it (a call cancelled before leaves it for the next one). A held batch the log
            never recorded (writing the log failed before ``fn`` ran) goes back to the front
            of the buffer instead, and so do held partitions the replayed batch's log entry
            leaves out (a Kafka batch log whose first write failed for some of them: ``fn``
            never saw them); one the log shows finished is dropped.
        """
        held = self.held
        if held is None:
            return []
        current = {tp for tp, source in held.sources.items() if _current(registry, tp, source)}
        if replay is not None and replay.batch_id == held.batch_id:
            ranges = batch_ranges(held.runs)
            keep = {tp for tp, r in replay.ranges.items() if tp in current and ranges.get(tp) == r}
            back = {tp for tp in current if tp not in replay.ranges}
            if back:
                log.info(
                    "batch %d: %d partitions are not in its log entry; their records go back "
                    "to the buffer",
                    held.batch_id,
                    len(back),
                )
                for tp in back:
                    self.adopt(tp, held.sources[tp])
                self.runs[:0] = [run for run in held.runs if run.tp in back]
                held = self.held = replace(
                    held,
                    runs=[run for run in held.runs if run.tp not in back],
                    sources={tp: s for tp, s in held.sources.items() if tp not in back},
                )
            log.info(
                "batch %d: replaying %d partitions from the records held, %d from the streams",
                held.batch_id,
                len(keep),
                len(replay.ranges) - len(keep),
            )
        elif replay is None and held.batch_id == next_id:
            keep = current
            log.info("batch %d never reached fn: its records go back to the buffer", next_id)
        else:
            self.held = None  # the batch log shows it finished
            return []
        for tp in keep:
            self.adopt(tp, held.sources[tp])
        runs = [run for run in held.runs if run.tp in keep]
        if replay is None:
            self.held = None
            self.runs[:0] = runs
            return []
        return runs
