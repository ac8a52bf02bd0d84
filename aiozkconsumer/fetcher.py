"""The fetcher: a leader finder and one fetch loop per broker, as coroutines.

The structure of ``ConsumerFetcherManager`` / ``ConsumerFetcherThread`` (0.10.2): every
partition starts in the *no-leader* set; the leader finder refreshes metadata, hands each
partition to the fetch loop of its leader (``(broker, fetcher id)`` with fetcher id
``abs(31*hash(topic)+partition) % num.consumer.fetchers``), and takes partitions back when a
fetch fails for them. A fetch loop sends FetchRequests built by aiokafka's classes, reads the
record batches' headers (and checks their CRCs) with the parser ``kafka/records.py`` chooses
(the native record decoder; aiokafka's Cython ``MemoryRecords`` without it, or for a record set
holding a magic 0/1 batch) and puts one ``FetchedDataChunk`` per partition into the
partition's stream queue — a bounded queue, so a slow reader applies backpressure.

Memory: the fetch responses in flight count in each stream's budget. By default a stream's
queue is bounded in bytes (``queued.max.messages.kbytes``, 16 MiB): queued chunks count their
actual bytes and a fetch in flight a whole ``fetch.message.max.bytes`` per slot it reserved.
With ``queued.max.message.chunks`` set (the original's bound, 2 by its default) the queue holds
that many chunks of at most ``fetch.message.max.bytes``, and one more chunk may wait for room
(as the original's fetcher thread, blocked in ``chunkQueue.put``, held one). Either way a
fetch asks only for partitions whose stream has a free slot left once the queued, waiting and
in-flight data are counted, and caps the response (``max_bytes``) at the free slots times the
fetch size (:func:`plan_fetch`). So a reader 10x slower than the fetcher holds about the
budget plus the chunk it reads per stream, or
``(queued.max.message.chunks + 2) x fetch.message.max.bytes`` under a chunk bound, however
many partitions feed it.

The responses come over a connection of the fetch loop's own (``kafka/fetch_connection.py``),
parsed as they arrive: each partition's record set is received straight into a buffer of its
size, so a response is never held whole in several copies.

Beyond the original (which had no transactions and no codec but gzip and snappy): with
``isolation.level=read_committed`` the fetch asks for data up to the last stable offset and
the batches of aborted transactions are dropped here, per batch
(:mod:`~aiozkconsumer.kafka.transactions`, the Java client's ``CompletedFetch`` algorithm);
the stream's iterator steps over them as over the transaction markers, so consumed offsets,
commits and lag count them as read. Lag is measured to the last stable offset then. A batch
compressed with a codec that cannot be decompressed here stops its partition with an
:class:`~aiozkconsumer.errors.UnsupportedCodecError` (the batches before it are handed out
first); the other partitions go on.

Fetch from the closest replica (KIP-392): every fetch carries ``client.rack``; a partition
whose leader names a preferred read replica in its response moves to the fetch loop of that
replica's broker, and back to its leader's when the replica expires (``metadata.max.age.ms``),
leaves the metadata, or answers with an error (the rules of the Java client, decided in
:mod:`~aiozkconsumer.read_replica`). The loop it leaves forgets it in its fetch session with
its next request.

Differences from the original, on purpose: an unexpected error in a fetch loop is not
swallowed by a dying thread (the partitions would stall silently); it propagates to the
connector's task group. ``fetch.max.bytes`` is honoured (the original sent ``Int.MaxValue``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel

from ._repeats import Repeats
from .cluster import EARLIEST, LATEST, KafkaClient
from .epochs import (
    needs_validation,
)
from .errors import (
    AuthenticationError,
    BrokerNotAvailableError,
    ConsumerError,
    UnknownTopicError,
)
from .fetch_chunk import chunk_from
from .fetch_lag import LagGauges
from .fetch_leaders import find_leaders, validate_positions
from .fetch_plan import FetchPlan, chunk_continues, fetcher_id_for, plan_fetch
from .fetch_reuse import CountedPartitions, PlannedRequest, plan_request
from .kafka.client import FetchChannel
from .kafka.errors import PartitionError, classify_partition_error, error_name
from .kafka.records import RecordSet, read_record_sets
from .kafka.replicas import metadata_version, preferred_read_replicas, replica_online
from .kafka.stable_offsets import list_offsets
from .kafka.transactions import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    stable_and_aborted,
)
from .queues import ChunkQueue, notify_on_room
from .read_replica import ErrorRoute, ReadReplicas, ReadReplicaStatistics
from .records import (
    FetchedDataChunk,
    PartitionTopicInfo,
    TopicPartition,
    note_fetch_change,
)

__all__ = ["ConsumerFetcher", "FetchPlan", "FetcherManager", "fetcher_id_for", "plan_fetch"]

log = logging.getLogger(__name__)


@dataclass
class Reservation:
    """A fetch's hold on queue slots (:meth:`FetcherManager.reserve`).

    Attributes:
        woke: set on release when a loop was waiting for room in one of the queues.
    """

    woke: bool = False


class ConsumerFetcher:
    """The fetch loop of one ``(broker, fetcher id)`` (``ConsumerFetcherThread``).

    Args:
        manager: the owning manager (errored partitions go back to its leader finder).
        node_id: the broker fetched from.
        fetcher_id: index among ``num.consumer.fetchers`` loops for this broker.
    """

    def __init__(self, manager: FetcherManager, node_id: int, fetcher_id: int) -> None:
        self.manager = manager
        self.node_id = node_id
        self.fetcher_id = fetcher_id
        self.partitions: dict[TopicPartition, PartitionTopicInfo] = CountedPartitions()
        self._delivering: dict[TopicPartition, PartitionTopicInfo] = CountedPartitions()
        """Per partition, the ``PartitionTopicInfo`` whose chunk waits for room in its queue
        (by identity: a partition taken again onto another stream meanwhile is not held
        back by its old stream's wait)."""
        self._delivery_scopes: dict[TopicPartition, anyio.CancelScope] = {}
        self._wakeup = anyio.Event()
        self.requests = 0
        # KIP-392: the partitions whose broker may change (fetched here from a replica that
        # is not their leader, or with a preferred read replica named), looked at again
        # before a fetch when one is due to expire, the metadata changed, or one was added.
        self._routed: set[TopicPartition] = set()
        self._routed_changed = False
        self._recheck_at_ms = 0.0
        self._metadata_seen: Any = None
        # In the fetch connection's I/O thread: the record sets' header pass and CRCs, so
        # the loop gets them parsed and checked (kafka/records.py).
        self._parse_ahead = functools.partial(
            read_record_sets, check_crcs=manager.config.check_crcs
        )

    def add_partitions(self, ptis: Iterable[PartitionTopicInfo]) -> None:
        """Start fetching these partitions (this fetcher's broker is their leader, or their
        preferred read replica)."""
        leaders = self.manager.leaders
        replicas = self.manager.read_replicas
        for pti in ptis:
            tp = pti.tp
            self.partitions[tp] = pti
            if leaders.get(tp, self.node_id) != self.node_id or tp in replicas:
                self._routed.add(tp)
                self._routed_changed = True
        self._wakeup.set()

    def _reroute(self) -> None:
        """Send partitions to the loop of the broker they are to be fetched from now.

        A partition fetched here from a replica goes back to its leader's loop once the
        replica expired, or before its offset is reset (ListOffsets goes to the leader); one
        fetched here from its leader goes to its preferred read replica's loop once one is
        named. A preferred replica not online in the metadata sends the partition to the
        leader finder (which refreshes the metadata). A partition whose chunk still waits
        for room in its queue moves once the chunk is in.
        """
        routed = self._routed
        manager = self.manager
        now = _now_ms()
        version = metadata_version(manager.kafka)
        if (
            not self._routed_changed
            and now < self._recheck_at_ms
            and version == self._metadata_seen
        ):
            return
        self._routed_changed = False
        self._metadata_seen = version
        recheck = float("inf")
        leaders, replicas = manager.leaders, manager.read_replicas
        moves: dict[int, list[PartitionTopicInfo]] = {}
        refresh: list[TopicPartition] = []
        for tp in list(routed):
            pti = self.partitions.get(tp)
            leader = leaders.get(tp)
            if pti is None or leader is None:
                routed.discard(tp)
                continue
            if self._delivering.get(tp) is pti:
                continue
            if pti.fetched_offset < 0 and replicas.clear(tp) is not None:
                log.debug("%s: its offset is reset at its leader, broker %s", tp, leader)
            chosen = replicas.select(
                tp, leader, now, functools.partial(replica_online, manager.kafka, tp)
            )
            if chosen.refresh_metadata:
                log.info(
                    "%s: its preferred read replica is not online in the metadata; back to "
                    "its leader after a metadata refresh",
                    tp,
                )
                refresh.append(tp)
            elif chosen.node_id != self.node_id:
                moves.setdefault(chosen.node_id, []).append(pti)
            elif tp not in replicas:
                routed.discard(tp)  # fetched from its leader, no replica named
            else:
                recheck = min(recheck, replicas.expires_at_ms(tp) or recheck)
        self._recheck_at_ms = recheck
        if refresh:
            self._remove_with_error(refresh)
        for node, ptis in moves.items():
            self._move(ptis, node)

    def _move(self, ptis: list[PartitionTopicInfo], node: int) -> None:
        """Hand partitions over to the fetch loop of ``node`` (their leader or preferred read
        replica); this loop's next fetch request forgets them in its session."""
        leaders = self.manager.leaders
        for pti in ptis:
            self.partitions.pop(pti.tp, None)
            self._routed.discard(pti.tp)
            log.debug(
                "fetching %s from broker %s (%s) instead of broker %s",
                pti.tp,
                node,
                "its leader" if leaders.get(pti.tp) == node else "its preferred read replica",
                self.node_id,
            )
        self.manager.hand_to(node, ptis)

    def repositioned(self, tp: TopicPartition) -> None:
        """A seek or pause moved ``tp``'s position, or it was released: a chunk of it still
        waiting for room in its queue is stale (the iterator would drop it), so its wait
        stops and frees the room; the loop plans its next fetch again (a resumed partition
        is fetched)."""
        scope = self._delivery_scopes.get(tp)
        if scope is not None:
            scope.cancel()
        if scope is not None or tp in self.partitions:
            self._wakeup.set()

    def _remove_with_error(self, tps: Iterable[TopicPartition]) -> None:
        removed = [self.partitions.pop(tp) for tp in list(tps) if tp in self.partitions]
        if removed:
            self.manager.add_partitions_with_error(removed)

    async def _reset_offsets(self, ptis: list[PartitionTopicInfo]) -> None:
        """Apply ``auto.offset.reset`` to partitions without a valid offset.

        As ``ConsumerFetcherThread.handleOffsetOutOfRange``: ``smallest`` asks for the log
        start offset, anything else for the log end offset: under read_committed, the last
        stable offset (as the Java client's ``seekToEnd``), so that records of a transaction
        open now are read once it commits.
        """
        config = self.manager.config
        ts = EARLIEST if config.auto_offset_reset == "smallest" else LATEST
        moves = {p.tp: p.truncations for p in ptis}
        try:
            offsets = await list_offsets(
                self.manager.kafka,
                self.node_id,
                {p.tp: ts for p in ptis},
                isolation_level=self.manager.isolation_level,
            )
        except (BrokerNotAvailableError, UnknownTopicError) as e:
            log.warning("offset reset on broker %s failed: %s", self.node_id, e)
            self._remove_with_error(p.tp for p in ptis)
            return
        for pti in ptis:
            new = offsets.get(pti.tp)
            if pti.truncations != moves[pti.tp]:
                continue  # a seek (or pause) moved it while the offsets were asked for
            if new is None:
                self._remove_with_error([pti.tp])
                continue
            if pti.fetched_offset >= 0:
                log.error(
                    "Current offset %s for partition %s out of range; reset offset to %s",
                    pti.fetched_offset,
                    pti.tp,
                    new,
                )
            else:
                log.info(
                    "no committed offset for %s; starting at %s (%s)",
                    pti.tp,
                    new,
                    config.auto_offset_reset,
                )
            pti.reset_offsets(new)

    async def run(self) -> None:
        """Fetch until cancelled."""
        channel = self.manager.kafka.fetch_channel(self.node_id)
        channel.connection.io_thread = self.manager.config.fetch_io_thread_enable
        try:
            await self._run(channel)
        finally:
            # Free the broker's fetch-session slot now (KIP-227), not at its eviction.
            with anyio.move_on_after(1, shield=True):
                await channel.close_session()
            channel.close()

    async def _run(self, channel: FetchChannel) -> None:
        config = self.manager.config
        kafka = self.manager.kafka
        backoff_s = config.refresh_leader_backoff_ms / 1000
        delivering = self._delivering
        manager = self.manager
        planned: PlannedRequest | None = None
        while True:
            if self._routed:
                self._reroute()
            if planned is not None and planned.still_current(manager.free_slots):
                # Nothing the plan depends on changed (an idle partition set): the same
                # request again, with no work per partition.
                plan, partitions, offsets = planned.plan, planned.partitions, planned.offsets
            else:
                planned = None
                plan = plan_fetch(
                    self.partitions.values(), delivering, manager.free_slots, config.fetch_max_bytes
                )
                if not plan.reset and plan.fetch:
                    planned = plan_request(plan, manager.free_slots)
                    partitions, offsets = planned.partitions, planned.offsets
            if plan.reset:
                if any(p.tp in self._routed for p in plan.reset):
                    # Reset at the leader (ListOffsets): a partition fetched here from
                    # another replica goes back to its leader's loop first.
                    self._routed_changed = True
                    self._reroute()
                    continue
                await self._reset_offsets(plan.reset)
                continue
            if not plan.fetch:
                # Nothing to fetch until a partition is added, a waiting chunk enters its
                # queue, or a reader makes room in a full one.
                self._wakeup = anyio.Event()
                with manager.notify_on_room(plan.blocked.values(), self._wakeup):
                    await self._wakeup.wait()
                continue
            with manager.reserve(plan.slots.values()) as reservation:
                started = time.monotonic()
                try:
                    response = await channel.fetch_partitions(
                        partitions,
                        max_wait_ms=config.fetch_wait_max_ms,
                        min_bytes=config.fetch_min_bytes,
                        max_bytes=plan.max_bytes,
                        isolation_level=manager.isolation_level,
                        rack_id=manager.rack_id,
                        after=self._parse_ahead,
                    )
                except AuthenticationError as e:
                    # Credentials or TLS refused on the loop's own connection: a leader refresh
                    # cannot help. The connection waits reconnect.backoff.max.ms between
                    # attempts, so this logs at most once per that period, and a rotated secret
                    # or renewed certificate recovers without a restart.
                    log.error("fetch from broker %s: %s", self.node_id, e)
                    manager.read_replicas.on_failure(self.partitions)
                    self._remove_with_error(list(self.partitions))
                    await anyio.sleep(backoff_s)
                    continue
                except BrokerNotAvailableError as e:
                    # The error names the broker and the request ("fetch from broker 0
                    # failed: ..."): logged as it is, not wrapped in a second prefix.
                    msg = "%s; its partitions go back to the leader finder"
                    manager.repeats.warning(log, ("fetch", self.node_id), msg, e)
                    manager.read_replicas.on_failure(self.partitions)
                    self._remove_with_error(list(self.partitions))
                    await anyio.sleep(backoff_s)
                    continue
                self.requests += 1
                manager.last_response_at = time.monotonic()
                size = sum(len(part[-1] or b"") for _, parts in response.topics for part in parts)
                node = self.node_id
                manager.fetch_requests[node] = manager.fetch_requests.get(node, 0) + 1
                manager.fetch_bytes[node] = manager.fetch_bytes.get(node, 0) + size
                metrics = manager.metrics
                if metrics is not None:
                    metrics.record_fetch(
                        kafka.broker_address(self.node_id),
                        (time.monotonic() - started) * 1000.0,
                        size,
                        float(getattr(response, "throttle_time_ms", 0) or 0),
                    )
                fetched = await self._process_response(response, offsets)
            if reservation.woke:
                # Another broker's loop waits for room this fetch held: let it plan before
                # this loop reserves again, or an idle long poll here could starve it.
                await anyio.lowlevel.checkpoint()
            # The partitions that got data go to the back: when the response is capped, the
            # ones left out come first next time.
            for tp in fetched:
                if tp in self.partitions:
                    self.partitions[tp] = self.partitions.pop(tp)

    async def _process_response(
        self, response: Any, offsets: dict[TopicPartition, int]
    ) -> list[TopicPartition]:
        """Hand the response's chunks over; returns the partitions that got records.

        A preferred read replica the response names (KIP-392) is kept for the partition
        (:meth:`_reroute` moves it before the next fetch); an error from a replica that is not
        the partition's leader is handled as :meth:`~.read_replica.ReadReplicas.on_error`
        says: ``OFFSET_OUT_OF_RANGE`` fetches the same offset from the leader instead of
        resetting it.
        """
        fetched: list[TopicPartition] = []
        errored: list[TopicPartition] = []
        out_of_range: list[PartitionTopicInfo] = []
        to_leader: dict[int, list[PartitionTopicInfo]] = {}
        manager = self.manager
        leaders, replicas = manager.leaders, manager.read_replicas
        preferred = preferred_read_replicas(response)
        record_sets = getattr(response, "record_sets", None)  # aiokafka's responses: none
        for topic, parts in response.topics:
            for partition, error_code, highwater, *part_data in parts:
                tp = TopicPartition(topic, partition)
                pti = self.partitions.get(tp)
                fetch_offset = offsets.get(tp)
                if (
                    pti is None
                    or fetch_offset is None
                    or pti.fetched_offset != fetch_offset
                    or pti.paused
                ):
                    continue  # removed, reset, moved or paused while the fetch was in flight
                err = classify_partition_error(error_code)
                leader = leaders.get(tp, self.node_id)
                if err is PartitionError.NONE:
                    stable, aborted = stable_and_aborted(part_data)
                    self.manager.record_highwater(tp, highwater, stable)
                    parsed = record_sets.get(tp) if record_sets else None
                    if await self._enqueue(pti, fetch_offset, part_data[-1], aborted, parsed):
                        fetched.append(tp)
                    replica = preferred.get(tp) if preferred else None
                    if replica is not None and replica >= 0:
                        if replicas.update(tp, replica, _now_ms()):
                            log.debug(
                                "broker %s names broker %s the preferred read replica of %s",
                                self.node_id,
                                replica,
                                tp,
                            )
                        self._routed.add(tp)
                        self._routed_changed = True
                    continue
                route = replicas.on_error(tp, error_code, from_leader=leader == self.node_id)
                if route is ErrorRoute.LEADER:
                    # A follower behind (or ahead of a truncated leader): the leader decides.
                    log.info(
                        "fetch of %s at offset %d from broker %s, a replica that is not its "
                        "leader: %s; fetching it from its leader, broker %s",
                        tp,
                        fetch_offset,
                        self.node_id,
                        error_name(error_code),
                        leader,
                    )
                    to_leader.setdefault(leader, []).append(pti)
                elif err is PartitionError.OFFSET_OUT_OF_RANGE:
                    out_of_range.append(pti)
                elif error_code in _EPOCH_ERRORS:
                    # Our metadata is older (FENCED) or newer (UNKNOWN) than the broker's:
                    # the leader finder refreshes it and hands the partition on again.
                    log.info(
                        "fetch of %s from broker %s at leader epoch %d: %s; refreshing metadata",
                        tp,
                        self.node_id,
                        pti.leader_epoch,
                        _EPOCH_ERRORS[error_code],
                    )
                    errored.append(tp)
                else:
                    log.info(
                        "fetch of %s from broker %s: %s", tp, self.node_id, error_name(error_code)
                    )
                    errored.append(tp)
        for node, ptis in to_leader.items():
            self._move(ptis, node)
        if out_of_range:
            await self._reset_offsets(out_of_range)
        if errored:
            self._remove_with_error(errored)
            await anyio.sleep(self.manager.config.refresh_leader_backoff_ms / 1000)
        return fetched

    async def _enqueue(
        self,
        pti: PartitionTopicInfo,
        fetch_offset: int,
        data: Any,
        aborted: list[tuple[int, int]] | None = None,
        record_set: RecordSet | None = None,
    ) -> bool:
        """Hand a partition's record set to its stream's queue as a chunk
        (:func:`~aiozkconsumer.fetch_chunk.chunk_from` makes it: corrupt batches, aborted
        transactions, the too-large case); an error chunk stops the partition's fetching.

        As ``PartitionTopicInfo.enqueue``, but without its head-of-line blocking: when the
        queue is full the chunk waits in a delivery task of its own, and only this partition
        stops being fetched until the reader takes it; the other partitions of this broker go
        on. Backpressure stays per stream (``queued.max.message.chunks`` chunks, plus one
        waiting chunk per partition).

        Returns whether a chunk was handed over.
        """
        manager = self.manager
        outcome = chunk_from(
            pti,
            fetch_offset,
            data,
            aborted,
            config=manager.config,
            read_committed=manager.read_committed,
            metrics=manager.metrics,
            record_set=record_set,
        )
        if outcome.chunk is None:
            return False
        if outcome.stop:
            self.partitions.pop(pti.tp, None)
        self._hand_over(outcome.chunk, outcome.next_offset)
        return True

    def _hand_over(self, chunk: FetchedDataChunk, next_offset: int) -> None:
        pti = chunk.topic_info
        try:
            pti.queue.put_nowait(chunk)
        except asyncio.QueueFull:
            self._delivering[pti.tp] = pti
            self.manager.waiting_chunk(pti.queue, +1)
            # Registered now, not when the task starts: a release (repositioned) before then
            # cancels it all the same.
            scope = self._delivery_scopes[pti.tp] = anyio.CancelScope()
            self.manager.spawn(self._deliver, chunk, next_offset, scope)
            return
        if chunk_continues(pti, chunk):
            pti.fetched_offset = next_offset
            note_fetch_change()

    async def _deliver(
        self, chunk: FetchedDataChunk, next_offset: int, scope: anyio.CancelScope
    ) -> None:
        """Wait for room in a full queue, then let the partition be fetched again."""
        pti = chunk.topic_info
        try:
            with scope:
                await pti.queue.put(chunk)
                if chunk_continues(pti, chunk):
                    pti.fetched_offset = next_offset
                    note_fetch_change()
        finally:
            self.manager.waiting_chunk(pti.queue, -1)
            if self._delivering.get(pti.tp) is pti:
                del self._delivering[pti.tp]
                self._delivery_scopes.pop(pti.tp, None)
            if pti.tp in self._routed:
                self._routed_changed = True  # its move waited for this chunk
            self._wakeup.set()


_EPOCH_ERRORS = {74: "FENCED_LEADER_EPOCH (74)", 75: "UNKNOWN_LEADER_EPOCH (75)"}
"""The Fetch errors of a ``CurrentLeaderEpoch`` the broker does not hold (KIP-320)."""


def _now_ms() -> float:
    """The monotonic clock in milliseconds (preferred read replicas' expiry)."""
    return time.monotonic() * 1000.0


class FetcherManager:
    """Owns the leader finder and the fetch loops of one connector (``ConsumerFetcherManager``).

    ``start_connections`` runs them in a task group of their own, started in the connector's
    task group; ``stop_connections`` cancels that group and waits until every loop has ended,
    so no chunk is enqueued after it returns.

    Args:
        kafka: the connector's Kafka client.
        config: the connector's ``ConsumerConfig``.
    """

    def __init__(self, kafka: KafkaClient, config: Any, metrics: Any = None) -> None:
        self.kafka = kafka
        self.config = config
        self.metrics = metrics
        self.partition_map: dict[TopicPartition, PartitionTopicInfo] = {}
        self.fetchers: dict[tuple[int, int], ConsumerFetcher] = {}
        self.read_committed: bool = getattr(config, "isolation_level", "") == "read_committed"
        """``isolation.level=read_committed``: fetch up to the last stable offset, drop the
        batches of aborted transactions, measure lag to the last stable offset."""
        self.isolation_level = READ_COMMITTED if self.read_committed else READ_UNCOMMITTED
        """The fetch's (and offset reset's) ``isolation_level`` (0 or 1)."""
        self.highwater: dict[TopicPartition, int] = {}
        """Per partition, the high watermark of its last fetch response."""
        self.last_stable: dict[TopicPartition, int] = {}
        """Per partition, the last stable offset of its last fetch response (-1 when the
        broker gave none)."""
        self.lag_end: dict[TopicPartition, int] = {}
        """Per partition, where lag is measured to: the last stable offset of the last fetch
        response under read_committed, its high watermark otherwise (as the Java client's
        ``records-lag``)."""
        self._lag = LagGauges(metrics, self.lag_end)
        self.rack_id: str = getattr(config, "client_rack", None) or ""
        """``client.rack``, sent with every fetch (KIP-392; "" none)."""
        self.leaders: dict[TopicPartition, int] = {}
        """Per partition handed to a fetch loop, its leader then (the loop may be its
        preferred read replica's)."""
        self.read_replicas: ReadReplicas[TopicPartition] = ReadReplicas(config.metadata_max_age_ms)
        """The preferred read replicas named by the partitions' leaders (KIP-392), followed
        for ``metadata.max.age.ms`` (the Java client's; 5 minutes)."""
        self.fetch_requests: dict[int, int] = {}
        """Per broker id, the fetch requests answered so far."""
        self.fetch_bytes: dict[int, int] = {}
        """Per broker id, the record bytes its fetch responses carried so far."""
        self.repeats = Repeats()
        """Rate-limits the warnings a down broker repeats at every retry (the leader finder's
        and the fetch loops'): one line per :data:`~._repeats.REPEAT_INTERVAL_S`."""
        self.last_response_at: float | None = None
        """``time.monotonic()`` of the last fetch response from any broker (or of the start
        of fetching, before the first); ``None`` while not fetching. A fetch is answered
        within ``fetch.wait.max.ms`` even with no data, so a healthy consumer keeps it
        recent."""
        self._no_leader: dict[TopicPartition, PartitionTopicInfo] = {}
        self._no_leader_since: dict[TopicPartition, float] = {}  # monotonic, per partition
        self._no_leader_event = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._done: anyio.Event | None = None
        self._tg: Any = None

    @property
    def running(self) -> bool:
        """Whether fetchers are running."""
        return self._scope is not None

    async def start_connections(self, ptis: Iterable[PartitionTopicInfo], task_group: Any) -> None:
        """Start fetching ``ptis`` (all start in the no-leader set).

        Args:
            ptis: the partitions this consumer owns now.
            task_group: the connector's task group, which owns the fetcher tasks.
        """
        await self.stop_connections()
        self.partition_map = {p.tp: p for p in ptis}
        self.read_replicas.retain(self.partition_map)
        self._lag.register(self.partition_map.values())
        self.last_response_at = time.monotonic()
        self._no_leader = dict(self.partition_map)
        self._no_leader_since = dict.fromkeys(self._no_leader, self.last_response_at)
        self._no_leader_event = anyio.Event()
        if self._no_leader:
            self._no_leader_event.set()
        await task_group.start(self._run)

    async def ensure_fetching(
        self,
        owned: Iterable[PartitionTopicInfo],
        new: Iterable[PartitionTopicInfo],
        task_group: Any,
    ) -> None:
        """After a rebalance: fetch everything ``owned`` if the fetchers are stopped (start
        them), else add to the running ones every owned partition they do not fetch.

        Not only ``new``: an attempt that failed after acquiring its partitions (the
        listener raised, the Kafka client could not start) left them owned and unfetched,
        and the attempt that follows acquires nothing new for them; they stalled until the
        next rebalance.

        Args:
            owned: every partition owned now.
            new: the partitions acquired by this rebalance (a subset of ``owned``, fetched
                whether or not they were before).
            task_group: the connector's task group, which owns the fetcher tasks.
        """
        if not self.running:
            await self.start_connections(owned, task_group)
        else:
            fetched = self.partition_map
            missing = [p for p in (*new, *owned) if fetched.get(p.tp) is not p]
            unique = list({p.tp: p for p in missing}.values())
            if unique:
                self.add_partitions(unique)

    async def _run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        done = self._done = anyio.Event()
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    tg.start_soon(self._leader_finder)
                    task_status.started()
        finally:
            self._tg = None
            self.fetchers = {}
            done.set()

    async def stop_connections(self) -> None:
        """Stop the leader finder and every fetch loop, and wait until they have ended."""
        scope, done = self._scope, self._done
        self._scope = None
        if scope is not None and done is not None:
            scope.cancel()
            with anyio.CancelScope(shield=True):
                await done.wait()
        self._lag.unregister(list(self.partition_map))
        self.partition_map = {}
        self.leaders = {}
        self._no_leader = {}
        self._no_leader_since = {}
        self.last_response_at = None

    def without_leader(self) -> dict[TopicPartition, float]:
        """The partitions no fetch loop fetches now, with the seconds since they left one (or
        since fetching started): their leader is unknown, or the fetch from it failed (its
        broker unreachable), and the leader finder looks for it."""
        now = time.monotonic()
        since = self._no_leader_since
        return {
            tp: max(0.0, now - since.get(tp, now))
            for tp in sorted(self._no_leader)
            if tp in self.partition_map
        }

    def _lost_leader(self, pti: PartitionTopicInfo) -> None:
        """Put ``pti`` in the no-leader set (the leader finder looks for its leader)."""
        self._no_leader[pti.tp] = pti
        self._no_leader_since.setdefault(pti.tp, time.monotonic())

    def _found_leader(self, tp: TopicPartition) -> PartitionTopicInfo | None:
        """Take ``tp`` out of the no-leader set; the partition, or ``None`` if not in it."""
        self._no_leader_since.pop(tp, None)
        return self._no_leader.pop(tp, None)

    def add_partitions(self, ptis: Iterable[PartitionTopicInfo]) -> None:
        """Start fetching more partitions while the others go on (incremental rebalance)."""
        ptis = list(ptis)
        for pti in ptis:
            self.partition_map[pti.tp] = pti
            self._lost_leader(pti)
        self._lag.register(ptis)
        if self._no_leader:
            self._no_leader_event.set()

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching partitions; the others go on.

        A fetch in flight for them is discarded when it returns; a chunk already in a queue is
        dropped by the iterator (it is marked inactive); a chunk of a released (inactive)
        partition still waiting for room in its queue stops waiting.
        """
        tps = list(tps)
        for tp in tps:
            self.partition_map.pop(tp, None)
            self._found_leader(tp)
            self.leaders.pop(tp, None)
            self.read_replicas.clear(tp)
            for fetcher in self.fetchers.values():
                fetcher.partitions.pop(tp, None)
                fetcher.repositioned(tp)  # a chunk of the released partition stops waiting
        self._lag.unregister(tps)

    def repositioned(self, tps: Iterable[TopicPartition]) -> None:
        """Partitions a seek, pause or resume moved: their fetch loops drop a chunk of theirs
        waiting for room and plan again (:meth:`ConsumerFetcher.repositioned`)."""
        tps = list(tps)
        for fetcher in self.fetchers.values():
            for tp in tps:
                fetcher.repositioned(tp)

    def add_partitions_with_error(self, ptis: Iterable[PartitionTopicInfo]) -> None:
        """Give partitions back to the leader finder (``addPartitionsWithError``)."""
        for pti in ptis:
            if pti.active and pti.tp in self.partition_map:
                self._lost_leader(pti)
        if self._no_leader:
            self._no_leader_event.set()

    def hand_to(self, node: int, ptis: Iterable[PartitionTopicInfo]) -> None:
        """Give partitions to the fetch loops of broker ``node`` (started if need be), each
        to its fetcher id's; to the leader finder when the loops are stopping."""
        ptis = list(ptis)
        if self._tg is None:
            self.add_partitions_with_error(ptis)
            return
        by_key: dict[tuple[int, int], list[PartitionTopicInfo]] = {}
        for pti in ptis:
            key = (node, fetcher_id_for(pti.tp, self.config.num_consumer_fetchers))
            by_key.setdefault(key, []).append(pti)
        for key, group in by_key.items():
            self._fetcher(key).add_partitions(group)

    def _fetcher(self, key: tuple[int, int]) -> ConsumerFetcher:
        """The fetch loop of ``(broker, fetcher id)``, started if there is none."""
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = self.fetchers[key] = ConsumerFetcher(self, *key)
            self._tg.start_soon(self._run_fetcher, fetcher)
        return fetcher

    def _read_from(self, pti: PartitionTopicInfo, leader: int) -> int:
        """The broker to fetch a partition from: its preferred read replica while that is
        kept and online in the metadata, else ``leader`` (recorded as its leader); the
        leader for a partition whose offset is to be reset."""
        tp = pti.tp
        self.leaders[tp] = leader
        if tp not in self.read_replicas:
            return leader
        if pti.fetched_offset < 0:
            self.read_replicas.clear(tp)
            return leader
        chosen = self.read_replicas.select(
            tp, leader, _now_ms(), functools.partial(replica_online, self.kafka, tp)
        )
        return chosen.node_id

    def read_replica_statistics(self) -> ReadReplicaStatistics:
        """A snapshot of the preferred read replicas' counters (KIP-392)."""
        return self.read_replicas.statistics()

    @staticmethod
    def free_slots(queue: ChunkQueue) -> int:
        """Chunks a fetch may still bring for a stream (:meth:`ChunkQueue.free_slots`)."""
        return queue.free_slots()

    @contextlib.contextmanager
    def reserve(self, slots: Iterable[tuple[ChunkQueue, int]]) -> Iterator[Reservation]:
        """Hold queue slots for a fetch in flight (released when its chunks are handed over,
        or the fetch failed or was cancelled; the release wakes the loops waiting for room
        in those queues, and :attr:`Reservation.woke` tells whether there were any)."""
        held = list(slots)
        reservation = Reservation()
        for queue, n in held:
            queue.reserved += n
        try:
            yield reservation
        finally:
            for queue, n in held:
                if queue.release(n):
                    reservation.woke = True

    @staticmethod
    def waiting_chunk(queue: ChunkQueue, delta: int) -> None:
        """Count a chunk starting (+1) or ending (-1) its wait for room in ``queue``."""
        queue.waiting = max(0, queue.waiting + delta)

    @staticmethod
    def notify_on_room(queues: Iterable[ChunkQueue], event: anyio.Event) -> Any:
        """Set ``event`` when a reader takes a chunk from one of ``queues`` (while inside)."""
        return notify_on_room(queues, event)

    def spawn(self, fn: Any, *args: Any) -> None:
        """Run a task owned by the fetchers' task group (cancelled with them)."""
        self._tg.start_soon(fn, *args)

    def record_highwater(self, tp: TopicPartition, highwater: int, last_stable: int = -1) -> None:
        """Remember a partition's high watermark and last stable offset from a fetch response.

        Args:
            tp: the partition.
            highwater: the response's high watermark.
            last_stable: its last stable offset (-1 when the response has none).
        """
        self.highwater[tp] = highwater
        self.last_stable[tp] = last_stable
        self.lag_end[tp] = last_stable if self.read_committed and last_stable >= 0 else highwater

    async def _leader_finder(self) -> None:
        """The ``LeaderFinderThread``: find leaders of partitions that have none.

        Beyond the original (KIP-320): each partition's leader epoch comes with its leader
        (Metadata v7, :func:`~.kafka.leader_epoch.leaders_and_epochs`) and is sent with
        every fetch. When the leader epoch moved on since the partition was last fetched,
        its position is checked with the new leader before fetching on
        (:func:`~.fetch_leaders.validate_positions`).
        """
        backoff_s = self.config.refresh_leader_backoff_ms / 1000
        while True:
            await self._no_leader_event.wait()
            pending = dict(self._no_leader)
            if not pending:
                self._no_leader_event = anyio.Event()
                continue
            epochs = await find_leaders(self.kafka, pending, self.repeats)
            found: dict[tuple[int, int], list[PartitionTopicInfo]] = {}
            to_validate: dict[int, dict[PartitionTopicInfo, int]] = {}
            for tp, pti in pending.items():
                leader: int | None
                if epochs is not None:
                    # A broker without epochs (before 2.1, or a partition it has no
                    # leader for) answers -1: fetched as before KIP-320.
                    answer = epochs.get(tp)
                    if answer is not None and answer.leader >= 0:
                        leader, epoch = answer
                    else:
                        leader, epoch = self.kafka.leader_for(tp), -1
                elif pti.leader_epoch < 0:
                    leader, epoch = self.kafka.leader_for(tp), -1
                else:
                    # The epoch was known: never hand the partition on without it (a new
                    # leader's position must be validated first). Asked again next round.
                    continue
                if leader is None or not pti.active:
                    continue
                if pti.fetched_offset >= 0 and needs_validation(
                    pti.offset_epoch(pti.fetched_offset), pti.leader_epoch, epoch
                ):
                    to_validate.setdefault(leader, {})[pti] = epoch
                    continue
                pti.leader_epoch = epoch
                note_fetch_change()
                node = self._read_from(pti, leader)
                key = (node, fetcher_id_for(tp, self.config.num_consumer_fetchers))
                found.setdefault(key, []).append(pti)
                self._found_leader(tp)
            for leader, checks in to_validate.items():
                for pti in await validate_positions(
                    self.kafka,
                    leader,
                    checks,
                    auto_offset_reset=self.config.auto_offset_reset,
                    isolation_level=self.isolation_level,
                ):
                    if self._found_leader(pti.tp) is None:
                        continue  # removed while the leader was asked
                    node = self._read_from(pti, leader)
                    key = (node, fetcher_id_for(pti.tp, self.config.num_consumer_fetchers))
                    found.setdefault(key, []).append(pti)
            for key, ptis in found.items():
                self._fetcher(key).add_partitions(ptis)
            if not self._no_leader:
                self._no_leader_event = anyio.Event()
            await anyio.sleep(backoff_s)

    async def _run_fetcher(self, fetcher: ConsumerFetcher) -> None:
        try:
            await fetcher.run()
        except ConsumerError:
            raise
        except Exception as e:
            raise ConsumerError(
                f"fetcher for broker {fetcher.node_id} (fetcher {fetcher.fetcher_id}) failed: {e!r}"
            ) from e

    def __repr__(self) -> str:
        return (
            f"<FetcherManager [{'running' if self.running else 'stopped'}, "
            f"{len(self.partition_map)} partitions, {len(self.fetchers)} fetchers, "
            f"{len(self._no_leader)} without leader]>"
        )
