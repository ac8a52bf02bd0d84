"""The ``zkkafka`` stream reader: Spark's micro-batch planning, backed by a group member.

Spark makes the reader in the source runner (one Python process per source per query, on the
driver host) and again, pickled, for the executors' ``read``. Planning calls join the group on
first use (:class:`~aiozkconsumer.spark.member.GroupMember`) and plan offset ranges of the
partitions the member owns; ``commit`` writes a batch's offsets to the group once Spark
committed it. The decisions are pure (``planning.py``, ``driver_plan.py``): only two
checkpointed offsets decide a batch's ranges, so a replay reads what the first attempt read.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ..cluster import EARLIEST, LATEST
from ..errors import (
    ConsumerError,
    InvalidConfigError,
    KafkaConnectionError,
    NoBrokersError,
    UnknownTopicError,
    ZookeeperConnectionError,
)
from ..records import TopicPartition
from ..tools.admin import GroupActiveError
from .driver_plan import plan_ends
from .executor import ZkKafkaInputPartition, input_partition, read_offset_range
from .member import GroupMember
from .planning import (
    INITIAL_KEY,
    DataLossError,
    SourceOptions,
    decode_offsets,
    encode_offsets,
    initial_offset,
    plan_ranges,
    plan_starts,
)

__all__ = ["ZkKafkaStreamReader", "one_line_errors", "unreachable"]

log = logging.getLogger(__name__)


@contextlib.contextmanager
def one_line_errors(options: SourceOptions | None = None) -> Iterator[None]:
    """Let an option error reach the user as its one-line message, not a traceback.

    With ``options``, an unreachable ZooKeeper or broker too, named with its address and
    the option that gave it (:func:`unreachable`).

    PySpark's workers report an exception with its traceback (``handle_worker_exception``),
    which Spark puts into the ``AnalysisException`` the user sees, unless
    ``SPARK_HIDE_TRACEBACK`` is set (``spark.sql.execution.pyspark.udf.hideTraceback.enabled``):
    then only ``<class>: <message>``. Every Python worker that calls into the source exits
    right after reporting an error (``worker_run``, the streaming source runner), so setting
    it there changes nothing else; outside a worker (a test calling the source directly) it
    is left alone.
    """
    try:
        yield
    except (InvalidConfigError, UnknownTopicError, DataLossError, GroupActiveError):
        _hide_traceback()
        raise
    except (ZookeeperConnectionError, KafkaConnectionError, NoBrokersError) as e:
        if options is None:
            raise
        _hide_traceback()
        raise unreachable(e, options) from e


def _hide_traceback() -> None:
    if os.environ.get("SPARK_PYTHON_RUNTIME") == "PYTHON_WORKER":
        os.environ["SPARK_HIDE_TRACEBACK"] = "1"


def unreachable(
    e: ZookeeperConnectionError | KafkaConnectionError | NoBrokersError, options: SourceOptions
) -> ConsumerError:
    """The one-line error of an unreachable ZooKeeper or broker, naming it and its option.

    ``ZooKeeper 127.0.0.1:1 unreachable: <why> (zookeeper.connect)``, or ``Kafka broker(s)
    <bootstrap.servers> unreachable: <why> (bootstrap.servers)`` (the brokers registered in
    ZooKeeper for a ZooKeeper-coordinated group without ``bootstrap.servers``).

    Args:
        e: the error.
        options: the source options (the addresses).

    Returns:
        An error of ``e``'s class with that message.
    """
    config = options.config
    if isinstance(e, ZookeeperConnectionError):
        return ZookeeperConnectionError(
            f"ZooKeeper {config.zookeeper_connect} unreachable: {e} (zookeeper.connect)"
        )
    if config.bootstrap_servers:
        where, key = config.bootstrap_servers, "bootstrap.servers"
    else:
        where, key = "registered in ZooKeeper", f"zookeeper.connect={config.zookeeper_connect}"
    return type(e)(f"Kafka broker(s) {where} unreachable: {e} ({key})")


class ZkKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The ``zkkafka`` stream reader (PySpark >= 4.2: admission control, AvailableNow).

    Created by Spark in the source runner (planning) and again, pickled, for the executors'
    ``read``: the group member is therefore started lazily, on the first planning call.

    Args:
        options: the checked source options.
        invalid: an option error found when the reader was made, raised by the first
            planning call.
    """

    def __init__(self, options: SourceOptions, *, invalid: InvalidConfigError | None = None):
        self.options = options
        self._invalid = invalid
        self._member: GroupMember | None = None
        self._bootstrap: str | None = None
        self._target: dict[TopicPartition, int] | None = None
        self._latest: dict[TopicPartition, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Executors need the options only; never ship a running member.
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._invalid = None
        self._member = None
        self._bootstrap = None
        self._target = None
        self._latest = {}

    def _group(self) -> GroupMember:
        if self._invalid is not None:
            with one_line_errors():
                raise self._invalid
        if self._member is None:
            with one_line_errors(self.options):
                self._member = GroupMember(self.options)
        return self._member

    # planning (source runner) ---------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """The offset of a new query: a marker; the first batch resolves the real starts.

        Joins the group (so ownership is known by the first ``latestOffset``).

        Returns:
            ``{"@initial": true}``.

        Raises:
            ConsumerError: joining the group failed.
        """
        self._group()
        return initial_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)``, or ``ReadAllAvailable()`` without the option."""
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Pin the log end offsets of the owned partitions: the query stops there.

        Partitions acquired later are pinned at their log end offset when acquired.

        Raises:
            ConsumerError: the member failed, or the offsets could not be listed.
        """
        member = self._group()
        snap = member.snapshot()
        self._target = member.list_offsets(snap.owned, LATEST)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Plan the next batch's end offset for the partitions this member owns now.

        Spark calls this only once the batch ending at ``start`` is committed to the
        checkpoint, so it first commits ``start`` to the group (owned partitions, forward
        only).

        Args:
            start: the previous batch's end offset (``{"@initial": true}`` for a new query).
            limit: ``ReadMaxRows(n)`` caps the offsets the batch covers; anything else reads
                all available.

        Returns:
            ``start`` itself when there is nothing new, else the new end offset:
            ``{"<topic>": {"<partition>": next offset}}`` for every owned partition, with
            ``"@start"`` for partitions that do not continue the previous batch.

        Raises:
            DataLossError: a start offset is beyond the log end (with ``failOnDataLoss``).
            ConsumerError: the member failed, or offsets could not be listed.
        """
        member = self._group()
        snap = member.snapshot()
        previous, _ = decode_offsets(start)
        if previous:
            # Spark plans batch N+1 only after it committed batch N (ending at ``start``) to
            # the checkpoint's commit log: commit it to the group now. ``commit(end)`` comes
            # only when batch N+1 is planned with new data, so without this the group would
            # lag a batch behind while the topic is idle, and a handover would replay it.
            # Synchronously: when the query stops, Spark stops this process without waiting
            # for the reader's stop(), so a commit left running in the background is lost.
            member.commit(previous)
        if not snap.may_plan:
            # Suspended or rebalancing: ownership is in doubt, plan nothing new.
            return start
        owned = list(snap.owned)
        need_start = [tp for tp in owned if tp not in previous and tp not in snap.committed]
        starting = self._resolve_starting(member, need_start)
        starts, rebased = plan_starts(previous, owned, snap.committed, starting)
        latest = member.list_offsets(owned, LATEST)
        self._latest = latest
        if self._target is not None:
            for tp in owned:
                self._target.setdefault(tp, latest[tp])
        ends, rebased = plan_ends(
            owned,
            starts,
            rebased,
            latest,
            self._target,
            fail_on_data_loss=self.options.fail_on_data_loss,
            max_rows=limit.max_rows if isinstance(limit, ReadMaxRows) else None,
        )
        if ends == previous and not rebased and INITIAL_KEY not in start:
            return start
        return encode_offsets(ends, rebased)

    def _resolve_starting(
        self, member: GroupMember, tps: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Concrete ``startingOffsets`` of partitions the group has no offset for."""
        wanted = {tp: self.options.starting_offsets.for_partition(tp) for tp in tps}
        resolved = {tp: o for tp, o in wanted.items() if o >= 0}
        for sentinel in (EARLIEST, LATEST):
            tps_of = [tp for tp, o in wanted.items() if o == sentinel]
            resolved.update(member.list_offsets(tps_of, sentinel))
        return resolved

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The log end offsets seen by the last ``latestOffset`` (for query progress)."""
        return encode_offsets(self._latest) if self._latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The Spark tasks of the batch ``(start, end]``: one range per partition (or more).

        Only the two checkpointed offsets decide the ranges, so a replay reads exactly what
        the first attempt read: a partition in ``end`` starts at its ``"@start"`` entry, else
        at its offset in ``start``, else (nothing to read) at its end.

        Args:
            start: the previous batch's end offset.
            end: this batch's end offset.

        Returns:
            ``ZkKafkaInputPartition`` objects, split for ``minPartitions``.

        Raises:
            ConsumerError: the brokers' addresses could not be found.
        """
        previous, _ = decode_offsets(start)
        ends, starts = decode_offsets(end)
        ranges = {tp: (starts.get(tp, previous.get(tp, e)), e) for tp, e in ends.items()}
        planned = plan_ranges(ranges, self.options.min_partitions)
        if not planned:
            return []
        if self._bootstrap is None:
            self._bootstrap = self._group().bootstrap_servers()
        return [input_partition(self.options, r, self._bootstrap) for r in planned]

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed the batch ending at ``end``: commit its offsets to the group.

        Only partitions this member still owns, and only forward (see
        :meth:`GroupMember.commit`).

        Args:
            end: the batch's end offset.

        Raises:
            ConsumerError: the member failed.
        """
        ends, _ = decode_offsets(end)
        written = self._group().commit(ends)
        log.debug("committed %d offsets of the batch ending at %s", len(written), end)

    def stop(self) -> None:
        """Leave the group; the other members take over this member's partitions.

        Returns once the member has left (a commit under way finished first). Spark's source
        runner calls it when its socket closes; when Spark ends the process with SIGTERM
        (how a query's stop reaches the source), a thread of :mod:`~aiozkconsumer.spark.termination`
        stops the member first, and this call then returns once that leave is done.
        """
        member, self._member = self._member, None
        if member is not None:
            member.stop()

    # executors ------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Fetch one planned range from the partition's leader (runs on an executor).

        Args:
            partition: a ``ZkKafkaInputPartition``.

        Returns:
            An iterator of Arrow record batches in the Kafka source's schema.

        Raises:
            TypeError: ``partition`` is not a ``ZkKafkaInputPartition``.
            DataLossError, BrokerNotAvailableError, ConsumerError: as
                :func:`read_offset_range`.
        """
        if not isinstance(partition, ZkKafkaInputPartition):
            raise TypeError(f"not a zkkafka partition: {partition!r}")
        return read_offset_range(partition)
