"""The ``zkkafka`` source's group member: a fetch-less consumer on its own event loop thread.

The stream reader (``stream_reader.py``) plans for Spark in the source runner, a synchronous
process; the member joins the consumer group there and keeps the connector's session and
ownership on a loop of its own (:class:`~aiozkconsumer.spark.runtime.LoopPortal`), and every
call waits for its result. :func:`list_log_offsets` asks the partitions' leaders for their
log start or end offsets, for the member and for batch reads.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import anyio

from ..base_connector import ConnectorState, ConsumerConnector
from ..cluster import KafkaClient
from ..consumer import create_connector
from ..errors import (
    BrokerNotAvailableError,
    ConsumerClosedError,
    GroupCoordinatorError,
    NoBrokersError,
    OffsetStorageError,
    UnknownTopicError,
    ZookeeperError,
)
from ..kafka.stable_offsets import list_offsets
from ..kafka.transactions import isolation_level_id
from ..records import TopicPartition
from ..subscription import Whitelist
from . import termination
from .driver_plan import forward_offsets
from .planning import SourceOptions
from .runtime import LoopPortal

__all__ = [
    "CALL_TIMEOUT_S",
    "SETTLE_TIMEOUT_S",
    "START_TIMEOUT_S",
    "GroupMember",
    "MemberSnapshot",
    "list_log_offsets",
]

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0
"""How long the reader waits for the member's first rebalance."""

SETTLE_TIMEOUT_S = 30.0
"""How long planning waits for a running or requested rebalance to finish."""

CALL_TIMEOUT_S = 120.0
"""Time limit of one call into the member's event loop."""


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

    @property
    def may_plan(self) -> bool:
        """Whether ownership is certain enough to plan a batch with new data.

        ``RUNNING``, or ``REBALANCE_FAILED`` owning nothing (a failed rebalance left it no
        partition); not while suspended or rebalancing, when another member may own the
        partitions.
        """
        return self.state is ConnectorState.RUNNING or (
            self.state is ConnectorState.REBALANCE_FAILED and not self.owned
        )


class GroupMember:
    """A fetch-less group member on its own event loop thread, for synchronous callers.

    Joins the group when constructed and returns once the first rebalance is done. Every
    method runs on the member's loop and waits for the result, so the connector's state is
    only ever touched from its own thread. In a Spark Python worker the member also leaves
    when the process gets SIGTERM, which is how Spark stops a query's source: the signal
    unwinds into the reader's ``stop()`` (:mod:`~aiozkconsumer.spark.termination`).

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
        self._portal = LoopPortal(f"zkkafka-{options.config.group_id}")
        self._connector: ConsumerConnector | None = None
        self._error: BaseException | None = None
        self._stop: anyio.Event | None = None
        # Held by a commit; leaving takes it first, so a commit under way is finished (or
        # fails) before the member leaves, and none starts after.
        self._commit_lock: anyio.Lock | None = None
        self._leaving = False
        self._stopping = False
        # One stop() at a time: the runner's (socket closed) and the SIGTERM leaver's may
        # come together; the second returns once the first has left.
        self._stop_lock = threading.Lock()
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._main = self._portal.start(self._run)
        termination.track(self)
        try:
            self._ready.result(start_timeout_s)
        except BaseException:
            self.stop()
            raise

    async def _run(self) -> None:
        options = self.options
        stop = self._stop = anyio.Event()
        self._commit_lock = anyio.Lock()
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
            elif not isinstance(e, anyio.get_cancelled_exc_class()):
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
        return self._portal.call(self._snapshot, timeout_s=CALL_TIMEOUT_S)

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
        return self._portal.call(self._list_offsets, list(tps), timestamp, timeout_s=CALL_TIMEOUT_S)

    async def _list_offsets(
        self, tps: list[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        c = self._require()
        kafka = await c.cluster.kafka()
        backoff_s = c.config.refresh_leader_backoff_ms / 1000
        attempts = 4
        for attempt in range(1, attempts + 1):
            try:
                return await list_log_offsets(
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
        return self._portal.call(self._bootstrap, timeout_s=CALL_TIMEOUT_S)

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
        return self._portal.call(self._commit, dict(ends), timeout_s=CALL_TIMEOUT_S)

    async def _commit(self, ends: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        self._require()
        if self._leaving:
            raise ConsumerClosedError("the group member is leaving the group")
        assert self._commit_lock is not None
        async with self._commit_lock:
            return await self._commit_owned(ends)

    async def _commit_owned(self, ends: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        c = self._require()
        stats = c.statistics()
        todo = forward_offsets(ends, stats.committed_offsets, set(stats.owned_partitions))
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
        coordinator), so the others rebalance at once; returns once it has left.

        A commit under way is finished first (:meth:`commit`), so every offset it was asked
        to commit is in the group's store before the member leaves.

        Args:
            timeout_s: the longest wait for the leave, in seconds (default 30); past it the
                member's loop is stopped anyway (the session then times out).

        Idempotent; never raises. Safe from two threads at once: the second call waits for the
        first one's leave (each bounded by its ``timeout_s`` and the portal's stop).
        """
        self._stopping = True
        with self._stop_lock:
            self._stop_once(timeout_s)

    def _stop_once(self, timeout_s: float) -> None:
        if not self._portal.running:
            return
        stop = self._stop
        joined = self._ready.done() and self._ready.exception() is None
        try:
            if stop is not None and joined:
                self._portal.start(self._leave, stop)
            else:
                self._main.cancel()  # still joining: give up at once
            self._main.result(timeout_s)
        except BaseException as e:  # stopping must not fail
            log.debug("group member ended with %r", e)
        self._portal.stop()
        termination.forget(self)

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called (it may still be leaving)."""
        return self._stopping

    async def _leave(self, stop: anyio.Event) -> None:
        if self._leaving:
            return
        self._leaving = True
        lock = self._commit_lock
        if lock is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CALL_TIMEOUT_S):
                await lock.acquire()  # never released: no commit after the leave
        stop.set()

    def __repr__(self) -> str:
        c = self._connector
        return f"<GroupMember {c!r}>" if c is not None else "<GroupMember [stopped]>"


async def list_log_offsets(
    kafka: KafkaClient, tps: list[TopicPartition], timestamp: int, isolation_level: int = 0
) -> dict[TopicPartition, int]:
    """Log start or end offsets of ``tps`` from their leaders, once (no retries).

    Under read_committed (``isolation_level`` 1) ``LATEST`` is the last stable offset, so
    ranges end where a read_committed read can.

    Args:
        kafka: a started Kafka client.
        tps: the partitions.
        timestamp: ``EARLIEST`` (-2) or ``LATEST`` (-1).
        isolation_level: 0 (read_uncommitted) or 1 (read_committed).

    Returns:
        ``{tp: offset}`` for every partition.

    Raises:
        NoBrokersError: no broker answered the metadata request.
        UnknownTopicError: a partition does not exist.
        BrokerNotAvailableError: a partition has no leader, or a leader gave no offset.
    """
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
