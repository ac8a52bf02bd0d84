"""``spark.read.format("zkkafka")``: a fixed range of every partition, and its commit.

A batch read is not a group member: it reads the group's committed offsets as the group
tools do (:class:`_GroupOffsets`), plans one task per partition and range in Spark's planning
worker (:class:`ZkKafkaBatchReader`), and executors fetch the ranges as the stream reader's
do. Python batch readers have no commit hook, so the driver commits the ends Spark planned
once the action succeeded (:func:`commit_batch`). Each call that needs ZooKeeper or Kafka runs
on a loop of its own, stopped afterwards (:func:`~aiozkconsumer.spark.runtime.run_on_portal`).
"""

from __future__ import annotations

import contextlib
import logging
import pickle
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Literal

import anyio
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..cluster import EARLIEST, LATEST, ClusterView, KafkaClient
from ..config import ConsumerConfig
from ..errors import UnknownTopicError
from ..kafka.transactions import isolation_level_id
from ..offsets import KafkaOffsetStore
from ..records import TopicPartition
from ..security import KafkaSecurity, ZookeeperSecurity
from ..subscription import Whitelist
from ..tools.admin import GroupActiveError, GroupAdmin
from .driver_plan import batch_read_ends, forward_offsets
from .executor import (
    ZkKafkaBatchPartition,
    ZkKafkaInputPartition,
    input_partition,
    read_offset_range,
)
from .member import CALL_TIMEOUT_S, list_log_offsets
from .planning import SOURCE_NAME, BatchRead, OffsetRange, SourceOptions, plan_batch, plan_ranges
from .runtime import run_on_portal
from .stream_reader import one_line_errors

__all__ = ["ZkKafkaBatchReader", "commit_batch"]

log = logging.getLogger(__name__)


_CLOSE_LIMIT_S = 5.0


class _GroupOffsets:
    """A group's committed offsets and its cluster, for batch reads: read without joining.

    A batch read is not a group member (a member would trigger a rebalance of the live ones
    and own only a share of the partitions): it reads the group's committed offsets as the
    group tools do, from ZooKeeper (``GroupAdmin``) or from the group's coordinator
    (OffsetFetch), per ``offsets.storage`` / ``dual.commit.enabled`` / ``group.coordinator``.
    """

    def __init__(self, config: ConsumerConfig) -> None:
        self.config = config
        self._admin: GroupAdmin | None = None
        if config.kafka_coordinated:
            self.cluster = ClusterView(
                None,
                bootstrap_servers=config.bootstrap_servers,
                client_id=config.effective_client_id,
                request_timeout_ms=config.socket_timeout_ms,
                retry_backoff_ms=config.refresh_leader_backoff_ms,
                security=KafkaSecurity.from_config(config),
            )
        else:
            self._admin = GroupAdmin(
                config.require_zookeeper_connect(),
                bootstrap_servers=config.bootstrap_servers,
                connection_timeout_ms=config.effective_zookeeper_connection_timeout_ms,
                session_timeout_ms=config.zookeeper_session_timeout_ms,
                request_timeout_ms=config.socket_timeout_ms,
                client_id=config.effective_client_id,
                zookeeper_security=ZookeeperSecurity.from_config(config),
                security=KafkaSecurity.from_config(config),
            )
            self.cluster = self._admin.cluster

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, config: ConsumerConfig) -> AsyncIterator[_GroupOffsets]:
        """Connect (ZooKeeper, or the brokers on first use), and close on the way out."""
        group = cls(config)
        if group._admin is not None:
            await group._admin.start()
        try:
            yield group
        finally:
            if group._admin is not None:
                await group._admin.close()
            else:
                with anyio.move_on_after(_CLOSE_LIMIT_S, shield=True):
                    await group.cluster.close()

    @property
    def _storage(self) -> Literal["zookeeper", "kafka", "dual"]:
        cfg = self.config
        if cfg.kafka_coordinated or cfg.offsets_storage != "kafka":
            return "kafka" if cfg.kafka_coordinated else "zookeeper"
        return "dual" if cfg.effective_dual_commit_enabled else "kafka"

    async def kafka(self) -> KafkaClient:
        if self._admin is not None:
            return await self._admin.kafka()
        return await self.cluster.kafka()

    def _offset_store(self) -> KafkaOffsetStore:
        return KafkaOffsetStore(
            self.cluster.kafka,
            self.config.group_id,
            backoff_ms=self.config.offsets_channel_backoff_ms,
            socket_timeout_ms=self.config.socket_timeout_ms,
        )

    async def partitions(
        self, topics: Sequence[str] | None, pattern: str | None
    ) -> list[TopicPartition]:
        """Every partition of the subscribed topics (``subscribe`` or ``subscribePattern``)."""
        if self._admin is not None:
            all_topics, partitions_for = self._admin.all_topics, self._admin.partitions_for
        else:
            all_topics, partitions_for = self.cluster.all_topics, self.cluster.partitions_for_topics
        if pattern is not None:
            wanted = Whitelist(pattern)
            exclude = self.config.exclude_internal_topics
            topics = [t for t in await all_topics() if wanted.is_topic_allowed(t, exclude)]
        found = await partitions_for(topics or ())
        tps: list[TopicPartition] = []
        for topic in topics or ():
            if not found.get(topic):
                raise UnknownTopicError(topic, f"subscribe: topic {topic!r} does not exist")
            tps.extend(TopicPartition(topic, p) for p in found[topic])
        return sorted(tps)

    async def list_offsets(
        self, tps: Sequence[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        return await list_log_offsets(
            await self.kafka(),
            list(tps),
            timestamp,
            isolation_level_id(self.config.isolation_level),
        )

    async def committed(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets (next offset to read) of the partitions it has one."""
        if not tps:
            return {}
        if self._admin is not None:
            return await self._admin.committed_offsets(
                self.config.group_id, tps, storage=self._storage
            )
        await self.cluster.kafka()
        store = self._offset_store()
        try:
            fetched = await store.fetch(tps)
        finally:
            await store.close()
        return {tp: o for tp, o in fetched.items() if o >= 0}

    async def live_members(self) -> list[str]:
        """The live members of a ZooKeeper-coordinated group (the coordinator of a
        Kafka-coordinated group refuses a commit from outside while it has members)."""
        if self._admin is None:
            return []
        return await self._admin.member_ids(self.config.group_id)

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if self._admin is not None:
            await self._admin.write_offsets(self.config.group_id, offsets, self._storage)
            return
        await self.cluster.kafka()
        store = self._offset_store()
        try:
            await store.commit(offsets, retries=2)
        finally:
            await store.close()


async def _plan_batch_read(
    options: SourceOptions, batch: BatchRead
) -> tuple[dict[TopicPartition, tuple[int, int]], str]:
    async with _GroupOffsets.open(options.config) as group:
        tps = await group.partitions(options.topics, options.pattern)
        committed = await group.committed(tps) if batch.starting is None else {}
        log_start = await group.list_offsets(tps, EARLIEST)
        log_end = await group.list_offsets(tps, LATEST)
        ranges = plan_batch(
            tps,
            batch,
            committed,
            log_start,
            log_end,
            fail_on_data_loss=options.fail_on_data_loss,
        )
        bootstrap = (await group.kafka()).bootstrap_servers if tps else ""
    return ranges, bootstrap


class ZkKafkaBatchReader(DataSourceReader):
    """The ``zkkafka`` batch reader: ``spark.read.format("zkkafka")``.

    ``partitions`` runs once per DataFrame in Spark's planning worker (Spark keeps the plan
    for every action on the DataFrame): it reads the group's committed offsets (or takes
    ``startingOffsets``) and the log offsets, and plans one task per partition and range,
    also for partitions with nothing to read (so the plan holds every end offset).
    ``read`` is the streaming reader's: executors fetch their ranges from the leaders.

    Args:
        options: the checked source options.
        batch: the batch read's start and end rules.
    """

    def __init__(self, options: SourceOptions, batch: BatchRead) -> None:
        self.options = options
        self.batch = batch

    def partitions(self) -> list[InputPartition]:
        """Plan the read: one task per partition (more with ``minPartitions``).

        Returns:
            ``ZkKafkaBatchPartition`` objects, sorted by partition and start.

        Raises:
            InvalidConfigError: an ``endingOffsets`` offset is beyond the log end or before
                the start.
            DataLossError: a start offset is beyond the log end (``failOnDataLoss``).
            UnknownTopicError: a ``subscribe`` topic does not exist.
            ConsumerError: ZooKeeper, the brokers or the group's coordinator could not be
                asked.
        """
        with one_line_errors(self.options):
            ranges, bootstrap = run_on_portal(
                f"zkkafka-batch-{self.options.config.group_id}",
                _plan_batch_read,
                self.options,
                self.batch,
                timeout_s=CALL_TIMEOUT_S,
            )
        planned = plan_ranges(ranges, self.options.min_partitions)
        covered = {r.tp for r in planned}
        planned += [OffsetRange(tp, s, e) for tp, (s, e) in ranges.items() if tp not in covered]
        log.info(
            "batch read of group %s: %d partitions, %d offsets",
            self.options.config.group_id,
            len(ranges),
            sum(e - s for s, e in ranges.values()),
        )
        return [input_partition(self.options, r, bootstrap, batch=True) for r in sorted(planned)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Fetch one planned range from the partition's leader (runs on an executor).

        Args:
            partition: a ``ZkKafkaBatchPartition`` (or Spark's empty placeholder when no
                partition matched).

        Returns:
            An iterator of Arrow record batches in the Kafka source's schema.

        Raises:
            DataLossError, BrokerNotAvailableError, ConsumerError: as
                :func:`read_offset_range`.
        """
        if not isinstance(partition, ZkKafkaInputPartition):
            return iter(())  # Spark's InputPartition(None) for a plan without partitions
        return read_offset_range(partition)


def _planned_batch_partitions(df: DataFrame) -> list[ZkKafkaBatchPartition]:
    """The tasks Spark planned for the ``zkkafka`` batch scans of ``df`` (classic sessions).

    Spark plans a Python data source's partitions once per DataFrame and keeps them (every
    action on it reads the same ranges), so these are the ranges the user's action read.
    """
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        raise TypeError("commit_batch needs a DataFrame of a classic (Py4J) Spark session")
    leaves = jdf.queryExecution().sparkPlan().collectLeaves()
    found: list[ZkKafkaBatchPartition] = []
    it = leaves.iterator()
    while it.hasNext():
        leaf = it.next()
        if leaf.nodeName() != "BatchScan " + SOURCE_NAME:
            continue
        for part in leaf.batch().planInputPartitions():
            task = pickle.loads(bytes(part.pickedPartition()))
            if isinstance(task, ZkKafkaBatchPartition):
                found.append(task)
    return found


def commit_batch(df: DataFrame, *, timeout_s: float = CALL_TIMEOUT_S) -> dict[TopicPartition, int]:
    """Commit the group's offsets to the end of a ``zkkafka`` batch read, after it succeeded.

    Call it in the driver once the action that consumed ``df`` (a write, a ``collect``...)
    returned: Python batch readers have no commit hook, and Spark cannot tell this source
    that an action succeeded, or read all of ``df`` (``df.show()`` reads a few rows only).
    The offsets committed are the ends Spark planned for ``df`` — the same ones every action
    on ``df`` read — not the log end offsets at the time of the call.

    Only forward: a partition whose committed offset is already at or beyond the read's end
    is left alone. A ZooKeeper-coordinated group must have no live members (their commits
    would race this one); a Kafka-coordinated group's coordinator refuses the commit while
    the group has members.

    Args:
        df: the DataFrame of ``spark.read.format("zkkafka")...load()`` with
            ``commitOnSuccess=true``, or one derived from it.
        timeout_s: the longest wait for ZooKeeper and Kafka, in seconds.

    Returns:
        ``{TopicPartition: offset}``: the offsets written.

    Raises:
        InvalidConfigError: ``df`` reads no ``zkkafka`` batch source, or not with
            ``commitOnSuccess=true``.
        GroupActiveError: the ZooKeeper-coordinated group has live members.
        TypeError: ``df`` belongs to a Spark Connect session.
        ConsumerError: the offsets could not be read or written (``OffsetCommitError``, ...).
    """
    by_group = batch_read_ends(_planned_batch_partitions(df))
    written: dict[TopicPartition, int] = {}
    for config, ends in by_group.items():
        written.update(
            run_on_portal("zkkafka-commit", _commit_ends, config, ends, timeout_s=timeout_s)
        )
    return written


async def _commit_ends(
    config: ConsumerConfig, ends: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    async with _GroupOffsets.open(config) as group:
        members = await group.live_members()
        if members:
            raise GroupActiveError(
                config.group_id,
                members,
                f"group {config.group_id!r} has live members ({', '.join(members)}): a batch "
                "read's offsets are committed only while none runs (their commits would race)",
            )
        committed = await group.committed(sorted(ends))
        todo = forward_offsets(ends, committed)
        if todo:
            await group.commit(todo)
        log.info("committed %d offsets of group %s", len(todo), config.group_id)
        return todo
