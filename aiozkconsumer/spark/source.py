"""The ``zkkafka`` Structured Streaming source: a consumer group member that plans for Spark.

Three processes take part (PySpark's Python data source design):

- the **source runner** (one Python process per source per query, on the driver host) holds
  the :class:`ZkKafkaStreamReader` Spark plans with. On first use the reader starts a
  :class:`GroupMember`: the connector ``group.coordinator`` names
  (:func:`~aiozkconsumer.create_connector`: a ``ZookeeperConsumerConnector`` or a
  ``KafkaConsumerConnector``) with ``fetch=False``, on an event loop in a background thread.
  It joins the group (registration and owner nodes in ZooKeeper, or JoinGroup / SyncGroup
  with the broker's group coordinator), takes part in every rebalance and reads the
  committed offsets — and fetches nothing. ``latestOffset`` plans offset ranges for the
  partitions it owns; ``commit`` writes the offsets of a batch to the group's offset store
  once Spark committed it.
- **executors** run :meth:`ZkKafkaStreamReader.read` for each planned range: it fetches
  ``[start, end)`` straight from the partition's leader (:class:`~aiozkconsumer.simple_consumer.
  SimpleConsumer`) and yields Arrow record batches in the Kafka source's schema (see
  :mod:`~aiozkconsumer.spark.executor`: each worker keeps its consumers between tasks).
- the **application** only registers the source (:func:`register`) and starts the query.

Replays are deterministic: every range is derived from the checkpointed start and end
offsets alone (see ``planning``), never from the group's state at replay time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import anyio
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..base_connector import ConnectorState, ConsumerConnector
from ..cluster import EARLIEST, LATEST, ClusterView, KafkaClient
from ..config import ConsumerConfig
from ..consumer import create_connector
from ..errors import (
    BrokerNotAvailableError,
    ConsumerClosedError,
    GroupCoordinatorError,
    InvalidConfigError,
    NoBrokersError,
    OffsetStorageError,
    UnknownTopicError,
    ZookeeperError,
)
from ..kafka.stable_offsets import list_offsets
from ..kafka.transactions import isolation_level_id
from ..offsets import KafkaOffsetStore
from ..records import TopicPartition
from ..security import KafkaSecurity, ZookeeperSecurity
from ..subscription import Whitelist
from ..tools.admin import GroupActiveError, GroupAdmin
from .executor import (
    ZkKafkaBatchPartition,
    ZkKafkaInputPartition,
    read_offset_range,
)
from .planning import (
    INITIAL_KEY,
    SOURCE_NAME,
    BatchRead,
    DataLossError,
    OffsetRange,
    SourceOptions,
    batch_read_options,
    check_stream_options,
    decode_offsets,
    encode_offsets,
    initial_offset,
    parse_source_options,
    plan_batch,
    plan_ranges,
    plan_starts,
    rate_limit,
    security_properties,
)
from .runtime import LoopThread
from .schema import kafka_schema

__all__ = [
    "GroupMember",
    "MemberSnapshot",
    "ZkKafkaBatchReader",
    "ZkKafkaDataSource",
    "ZkKafkaStreamReader",
    "check_worker_python",
    "commit_batch",
    "register",
]

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0
"""How long the reader waits for the member's first rebalance."""

SETTLE_TIMEOUT_S = 30.0
"""How long planning waits for a running or requested rebalance to finish."""

CALL_TIMEOUT_S = 120.0
"""Time limit of one call into the member's event loop."""


# -- driver side: the group member ----------------------------------------------------------


@dataclass(frozen=True)
class MemberSnapshot:
    """What the member knows at one moment.

    Attributes:
        state: the connector's lifecycle state.
        owned: the partitions it owns, sorted.
        committed: the group's committed offsets of owned partitions (read when claimed, or
            committed since).
    """

    state: ConnectorState
    owned: tuple[TopicPartition, ...]
    committed: Mapping[TopicPartition, int]


class GroupMember:
    """A fetch-less group member on its own event loop thread, for synchronous callers.

    Joins the group when constructed and returns once the first rebalance is done. Every
    method runs on the member's loop and waits for the result, so the connector's state is
    only ever touched from its own thread.

    The member is the connector ``group.coordinator`` names (``create_connector``), so the
    source works the same in a ZooKeeper-coordinated and a Kafka-coordinated group; it is
    only used through the connectors' common API (statistics, ``commit_offsets``, the
    cluster view).

    Args:
        options: the source options (consumer config and subscription).
        start_timeout_s: how long to wait for the first rebalance.

    Raises:
        ConsumerError: joining failed (ZooKeeper or the group coordinator unreachable,
            rebalance failed, ...).
        TimeoutError: the first rebalance did not finish within ``start_timeout_s``.
    """

    def __init__(self, options: SourceOptions, *, start_timeout_s: float = START_TIMEOUT_S):
        self.options = options
        self._thread = LoopThread(f"zkkafka-{options.config.group_id}")
        self._connector: ConsumerConnector | None = None
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._main = self._thread.submit(self._run())
        try:
            self._ready.result(start_timeout_s)
        except BaseException:
            self.stop()
            raise

    async def _run(self) -> None:
        options = self.options
        stop = self._stop = asyncio.Event()
        try:
            async with create_connector(options.config, fetch=False) as connector:
                self._connector = connector
                if options.pattern is not None:
                    await connector.create_message_streams_by_filter(Whitelist(options.pattern))
                else:
                    await connector.create_message_streams(dict.fromkeys(options.topics or (), 1))
                log.info(
                    "[%s] joined group %s; owns %d partitions",
                    connector.consumer_id_string,
                    options.config.group_id,
                    len(connector.statistics().owned_partitions),
                )
                self._ready.set_result(None)
                await stop.wait()
        except BaseException as e:
            self._error = e
            if not self._ready.done():
                self._ready.set_exception(e)
            elif not isinstance(e, asyncio.CancelledError):
                log.error("group member of %s failed: %s", options.config.group_id, e)
            raise
        finally:
            self._connector = None

    def _require(self) -> ConsumerConnector:
        if self._error is not None:
            raise ConsumerClosedError(
                f"the group member of {self.options.config.group_id!r} failed: {self._error}"
            ) from self._error
        if self._connector is None:
            raise ConsumerClosedError("the group member is stopped")
        return self._connector

    @property
    def consumer_id(self) -> str:
        """The member's consumer id string (its registration under ``/consumers/<group>/ids``
        in a ZooKeeper-coordinated group)."""
        return self._require().consumer_id_string

    def snapshot(self) -> MemberSnapshot:
        """Ownership and committed offsets, after any running or requested rebalance.

        Returns:
            The snapshot.

        Raises:
            ConsumerClosedError: the member failed or was stopped.
        """
        return self._thread.run(self._snapshot(), CALL_TIMEOUT_S)

    async def _snapshot(self) -> MemberSnapshot:
        c = self._require()
        with anyio.move_on_after(SETTLE_TIMEOUT_S):
            while c.state is ConnectorState.REBALANCING or (
                c.rebalance_pending and c.state is not ConnectorState.SUSPENDED
            ):
                await c.wait_for_state_change()
        stats = self._require().statistics()
        return MemberSnapshot(stats.state, stats.owned_partitions, dict(stats.committed_offsets))

    def list_offsets(
        self, tps: Sequence[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        """Log start (``EARLIEST``) or log end (``LATEST``) offsets of partitions.

        Args:
            tps: the partitions.
            timestamp: ``EARLIEST`` (-2) or ``LATEST`` (-1).

        Returns:
            ``{tp: offset}`` for every partition.

        Raises:
            BrokerNotAvailableError: a leader could not be asked after a few retries.
            UnknownTopicError: a topic does not exist (any more).
        """
        if not tps:
            return {}
        return self._thread.run(self._list_offsets(list(tps), timestamp), CALL_TIMEOUT_S)

    async def _list_offsets(
        self, tps: list[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        c = self._require()
        kafka = await c.cluster.kafka()
        backoff_s = c.config.refresh_leader_backoff_ms / 1000
        attempts = 4
        for attempt in range(1, attempts + 1):
            try:
                return await _list_offsets_once(
                    kafka, tps, timestamp, isolation_level_id(c.config.isolation_level)
                )
            except (BrokerNotAvailableError, NoBrokersError) as e:
                if attempt == attempts:
                    raise
                log.info("listing offsets failed (%s); retrying in %.2f s", e, backoff_s)
                await anyio.sleep(backoff_s)
                backoff_s *= 2
        raise AssertionError("unreachable")

    def bootstrap_servers(self) -> str:
        """``host:port,...`` of the brokers, for executors (``bootstrap.servers`` or ZooKeeper)."""
        return self._thread.run(self._bootstrap(), CALL_TIMEOUT_S)

    async def _bootstrap(self) -> str:
        kafka = await self._require().cluster.kafka()
        return kafka.bootstrap_servers

    def commit(self, ends: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Commit the end offsets of a batch Spark committed, for partitions still owned.

        Partitions the member no longer owns are left out (their new owner commits them),
        and so are offsets not beyond what the group already has, so a late commit never
        moves another member's progress backwards. A failure is logged, not raised: the
        next batch's commit covers these partitions again.

        Args:
            ends: ``{tp: next offset to read}``.

        Returns:
            The offsets written.

        Raises:
            ConsumerClosedError: the member failed or was stopped.
        """
        return self._thread.run(self._commit(dict(ends)), CALL_TIMEOUT_S)

    async def _commit(self, ends: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        c = self._require()
        stats = c.statistics()
        owned = set(stats.owned_partitions)
        known = stats.committed_offsets
        todo = {tp: o for tp, o in ends.items() if tp in owned and o > known.get(tp, -1)}
        if not todo:
            return {}
        try:
            await c.commit_offsets(todo)
        except (ZookeeperError, OffsetStorageError, GroupCoordinatorError) as e:
            log.warning(
                "[%s] committing %d offsets failed (the next batch commits them): %s",
                c.consumer_id_string,
                len(todo),
                e,
            )
            return {}
        return todo

    def stop(self, timeout_s: float = 30.0) -> None:
        """Leave the group (the ZooKeeper session is closed, or LeaveGroup is sent to the group
        coordinator), so the others rebalance at once.

        Idempotent; never raises.
        """
        if self._thread.alive:
            stop = self._stop
            joined = self._ready.done() and self._ready.exception() is None
            if stop is not None and joined:
                self._thread.loop.call_soon_threadsafe(stop.set)
            else:
                self._main.cancel()  # still joining: give up at once
            try:
                self._main.result(timeout_s)
            except BaseException as e:  # stopping must not fail
                log.debug("group member ended with %r", e)
        self._thread.stop()

    def __repr__(self) -> str:
        c = self._connector
        return f"<GroupMember {c!r}>" if c is not None else "<GroupMember [stopped]>"


async def _list_offsets_once(
    kafka: KafkaClient, tps: list[TopicPartition], timestamp: int, isolation_level: int = 0
) -> dict[TopicPartition, int]:
    """Offsets of ``tps`` from their leaders; under read_committed (``isolation_level`` 1)
    ``LATEST`` is the last stable offset, so ranges end where a read_committed read can."""
    if not await kafka.refresh_metadata({tp.topic for tp in tps}):
        raise NoBrokersError(f"no broker of {kafka.bootstrap_servers!r} answered")
    by_leader: dict[int, dict[TopicPartition, int]] = {}
    for tp in tps:
        parts = kafka.partitions_for(tp.topic)
        if parts is None or tp.partition not in parts:
            raise UnknownTopicError(tp.topic, f"partition {tp} does not exist")
        leader = kafka.leader_for(tp)
        if leader is None:
            raise BrokerNotAvailableError(f"partition {tp} has no leader")
        by_leader.setdefault(leader, {})[tp] = timestamp
    result: dict[TopicPartition, int] = {}
    for leader, wanted in sorted(by_leader.items()):
        result.update(await list_offsets(kafka, leader, wanted, isolation_level=isolation_level))
    missing = sorted(set(tps) - set(result))
    if missing:
        raise BrokerNotAvailableError(f"no offset for {', '.join(map(str, missing))}")
    return result


# -- the Spark data source ------------------------------------------------------------------


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
            with _one_line_errors():
                raise self._invalid
        if self._member is None:
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
        if snap.state is not ConnectorState.RUNNING and not (
            snap.state is ConnectorState.REBALANCE_FAILED and not snap.owned
        ):
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
        ends: dict[TopicPartition, int] = {}
        for tp in owned:
            begin = starts[tp]
            end = latest[tp] if self._target is None else min(latest[tp], self._target[tp])
            if begin > latest[tp]:
                message = f"offset {begin} of {tp} is beyond its log end offset {latest[tp]}"
                if self.options.fail_on_data_loss:
                    raise DataLossError(f"{message}; set failOnDataLoss=false to skip ahead")
                log.warning("%s; continuing at the log end", message)
                starts[tp] = rebased[tp] = begin = latest[tp]
            ends[tp] = max(begin, end)
        if isinstance(limit, ReadMaxRows):
            ends = rate_limit({tp: (starts[tp], ends[tp]) for tp in owned}, limit.max_rows)
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
        return [_input_partition(self.options, r, self._bootstrap) for r in planned]

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
        """Leave the group; the other members take over this member's partitions."""
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


def _input_partition(
    options: SourceOptions, r: OffsetRange, bootstrap_servers: str, *, batch: bool = False
) -> ZkKafkaInputPartition:
    """The Spark task reading ``r``: what the executor needs, from the source options."""
    cfg = options.config
    fields: dict[str, Any] = {
        "topic": r.tp.topic,
        "partition": r.tp.partition,
        "start": r.start,
        "end": r.end,
        "bootstrap_servers": bootstrap_servers,
        "include_headers": options.include_headers,
        "fail_on_data_loss": options.fail_on_data_loss,
        "client_id": cfg.effective_client_id,
        "max_bytes": cfg.fetch_message_max_bytes,
        "socket_timeout_ms": cfg.socket_timeout_ms,
        "fetch_wait_max_ms": cfg.fetch_wait_max_ms,
        "retry_backoff_ms": cfg.refresh_leader_backoff_ms,
        "isolation_level": cfg.isolation_level,
        "security_properties": security_properties(cfg),
    }
    if batch:
        return ZkKafkaBatchPartition(
            **fields, config=cfg, commit_on_success=options.commit_on_success
        )
    return ZkKafkaInputPartition(**fields)


# -- batch reads ----------------------------------------------------------------------------


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

    async def __aenter__(self) -> _GroupOffsets:
        if self._admin is not None:
            await self._admin.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._admin is not None:
            await self._admin.close()
        else:
            with anyio.move_on_after(_CLOSE_LIMIT_S, shield=True):
                await self.cluster.close()

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
        return await _list_offsets_once(
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
    async with _GroupOffsets(options.config) as group:
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


def _on_loop_thread(name: str, coro: Any, timeout_s: float = CALL_TIMEOUT_S) -> Any:
    """Run ``coro`` on a private loop thread, stopped afterwards (Spark may reuse the
    process: nothing of ours is left running in it)."""
    thread = LoopThread(name)
    try:
        return thread.run(coro, timeout_s)
    finally:
        thread.stop()


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
        with _one_line_errors():
            ranges, bootstrap = _on_loop_thread(
                f"zkkafka-batch-{self.options.config.group_id}",
                _plan_batch_read(self.options, self.batch),
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
        return [_input_partition(self.options, r, bootstrap, batch=True) for r in sorted(planned)]

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
    tasks = _planned_batch_partitions(df)
    if not tasks:
        raise InvalidConfigError(
            "commitOnSuccess", "this DataFrame reads no zkkafka batch source: nothing to commit"
        )
    if not all(t.commit_on_success for t in tasks):
        raise InvalidConfigError(
            "commitOnSuccess",
            'the read was not made with .option("commitOnSuccess", "true"): nothing committed',
        )
    by_group: dict[ConsumerConfig, dict[TopicPartition, int]] = {}
    for t in tasks:
        assert t.config is not None
        ends = by_group.setdefault(t.config, {})
        tp = TopicPartition(t.topic, t.partition)
        ends[tp] = max(ends.get(tp, t.end), t.end)
    written: dict[TopicPartition, int] = {}
    for config, ends in by_group.items():
        written.update(_on_loop_thread("zkkafka-commit", _commit_ends(config, ends), timeout_s))
    return written


async def _commit_ends(
    config: ConsumerConfig, ends: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    async with _GroupOffsets(config) as group:
        members = await group.live_members()
        if members:
            raise GroupActiveError(
                config.group_id,
                members,
                f"group {config.group_id!r} has live members ({', '.join(members)}): a batch "
                "read's offsets are committed only while none runs (their commits would race)",
            )
        committed = await group.committed(sorted(ends))
        todo = {tp: o for tp, o in ends.items() if o > committed.get(tp, -1)}
        if todo:
            await group.commit(todo)
        log.info("committed %d offsets of group %s", len(todo), config.group_id)
        return todo


# -- errors the user reads ------------------------------------------------------------------


@contextlib.contextmanager
def _one_line_errors() -> Iterator[None]:
    """Let an option error reach the user as its one-line message, not a traceback.

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
        if os.environ.get("SPARK_PYTHON_RUNTIME") == "PYTHON_WORKER":
            os.environ["SPARK_HIDE_TRACEBACK"] = "1"
        raise


class ZkKafkaDataSource(DataSource):
    """``spark.readStream.format("zkkafka")``: Kafka records of a consumer group.

    The group is ZooKeeper-coordinated (``zookeeper.connect``), or Kafka-coordinated with
    ``group.coordinator=kafka`` and ``bootstrap.servers``.

    Options: see :func:`~aiozkconsumer.spark.planning.parse_source_options`. The schema is
    the Kafka source's (:data:`~aiozkconsumer.spark.schema.KAFKA_SCHEMA`, plus ``headers``
    with ``includeHeaders``).
    """

    @classmethod
    def name(cls) -> str:
        """``"zkkafka"``."""
        return SOURCE_NAME

    def _options(self) -> SourceOptions:
        with _one_line_errors():
            return parse_source_options(self.options)

    def schema(self) -> StructType:
        """The Kafka source's schema; checks the options (so ``load()`` reports bad ones).

        Returns:
            ``KAFKA_SCHEMA``, or ``KAFKA_SCHEMA_WITH_HEADERS`` with ``includeHeaders``.

        Raises:
            InvalidConfigError: an option is missing, unknown or invalid.
        """
        return kafka_schema(self._options().include_headers)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The stream reader.

        Args:
            schema: the schema Spark resolved; must be this source's.

        Returns:
            A :class:`ZkKafkaStreamReader`.

        Raises:
            InvalidConfigError: an option is invalid, or a user-given schema differs from
                the Kafka source's.
        """
        options = self._options()
        try:
            _check_schema(options, schema)
            check_stream_options(options)
        except InvalidConfigError as e:
            # Raised at the first planning call instead: PySpark's streaming source runner
            # masks an exception of streamReader() with its own UnboundLocalError (4.3).
            return ZkKafkaStreamReader(options, invalid=e)
        return ZkKafkaStreamReader(options)

    def reader(self, schema: StructType) -> DataSourceReader:
        """The batch reader: ``spark.read.format("zkkafka")``.

        Args:
            schema: the schema Spark resolved; must be this source's.

        Returns:
            A :class:`ZkKafkaBatchReader`.

        Raises:
            InvalidConfigError: an option is invalid for a batch read (``latest`` as
                ``startingOffsets``, ``earliest`` as ``endingOffsets``), or a user-given
                schema differs from the Kafka source's.
        """
        options = self._options()
        with _one_line_errors():
            _check_schema(options, schema)
            batch = batch_read_options(options)
        return ZkKafkaBatchReader(options, batch)


def _check_schema(options: SourceOptions, schema: StructType) -> None:
    expected = kafka_schema(options.include_headers)
    if schema != expected:
        raise InvalidConfigError(
            "schema",
            f"the zkkafka source has the Kafka source's fixed schema {expected.simpleString()}"
            f", got {schema.simpleString()}",
        )


def register(spark: SparkSession, *, check_python: bool = True) -> None:
    """Register the ``zkkafka`` format with a Spark session.

    Then ``spark.readStream.format("zkkafka").option(...).load()`` (or ``spark.read``). The
    package must be importable by the session's Python workers, which run the source's
    planning and ``read``: with ``check_python`` (and a classic session whose workers'
    Python exists on this host), that Python is asked once to import the source
    (:func:`check_worker_python`), so that a wrong ``PYSPARK_PYTHON`` is reported here in one
    line rather than as a worker's traceback at ``load()``.

    Args:
        spark: a classic (Py4J) or Spark Connect session.
        check_python: check the workers' Python (default true).

    Raises:
        InvalidConfigError: ``PYSPARK_PYTHON``: the workers' Python cannot import the
            package (the message names that Python and this one).
    """
    if check_python:
        context = getattr(spark, "_sc", None)
        python = getattr(context, "pythonExec", None)
        if isinstance(python, str):
            check_worker_python(python)
    spark.dataSource.register(ZkKafkaDataSource)


_WORKER_CHECK_TIMEOUT_S = 120.0
# (interpreter, PYTHONPATH) pairs that imported the source: each session of a process (a test
# suite, a service that restarts its queries) checks a Python once, not at every register().
_WORKERS_CHECKED: set[tuple[str, str]] = set()


def _worker_pythonpath() -> str:
    """``PYTHONPATH`` as Spark gives its Python workers: PySpark's zips, then ours."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    if not lib.is_dir() and os.environ.get("SPARK_HOME"):
        lib = Path(os.environ["SPARK_HOME"]) / "python" / "lib"
    zips = sorted(str(z) for z in lib.glob("*.zip")) if lib.is_dir() else []
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([*zips, *inherited])


def check_worker_python(python: str) -> None:
    """Check that Spark's Python workers (``python``) can import the ``zkkafka`` source.

    Runs ``python -c "import aiozkconsumer.spark.source"`` once per process (a success is
    remembered), with the ``PYTHONPATH`` Spark gives its workers (PySpark's own zips). A
    Python that does not exist on this host
    (e.g. the ``./environment/bin/python`` of a packed environment shipped with
    ``spark.archives``) is not checked.

    Args:
        python: the workers' Python (``spark.pyspark.python`` / ``PYSPARK_PYTHON``).

    Raises:
        InvalidConfigError: key ``PYSPARK_PYTHON``: the import failed; the message names the
            missing module, that Python and the one running now.
    """
    found = shutil.which(python)
    if found is None:
        log.debug("the workers' Python %s is not on this host: not checked", python)
        return
    pythonpath = _worker_pythonpath()
    if (found, pythonpath) in _WORKERS_CHECKED:
        return
    env = {**os.environ, "PYTHONPATH": pythonpath}
    try:
        done = subprocess.run(
            [found, "-c", "import aiozkconsumer.spark.source"],
            env=env,
            capture_output=True,
            text=True,
            timeout=_WORKER_CHECK_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("could not check the workers' Python %s: %s", python, e)
        return
    if done.returncode == 0:
        _WORKERS_CHECKED.add((found, pythonpath))
        return
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    reason = lines[-1] if lines else f"exit status {done.returncode}"
    raise InvalidConfigError(
        "PYSPARK_PYTHON",
        f"Spark's Python workers run {python}, which cannot import the zkkafka source "
        f"({reason}); install aiozkconsumer[spark] there, or point PYSPARK_PYTHON "
        f"(spark.pyspark.python) at {sys.executable}",
    )
