"""The fetcher: a leader finder and one fetch loop per broker, as coroutines.

The structure of ``ConsumerFetcherManager`` / ``ConsumerFetcherThread`` (0.10.2): every
partition starts in the *no-leader* set; the leader finder refreshes metadata, hands each
partition to the fetch loop of its leader (``(broker, fetcher id)`` with fetcher id
``abs(31*hash(topic)+partition) % num.consumer.fetchers``), and takes partitions back when a
fetch fails for them. A fetch loop sends FetchRequests through aiokafka's client, parses the
record batches with aiokafka's (Cython) ``MemoryRecords`` and puts one ``FetchedDataChunk`` per
partition into the partition's stream queue — a bounded queue, so a slow reader applies
backpressure.

Differences from the original, on purpose: an unexpected error in a fetch loop is not
swallowed by a dying thread (the partitions would stall silently); it propagates to the
connector's task group. ``fetch.max.bytes`` is honoured (the original sent ``Int.MaxValue``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

import anyio
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords

from .assignors import java_string_hash
from .cluster import EARLIEST, LATEST, KafkaClient
from .errors import BrokerNotAvailableError, ConsumerError, CorruptRecordError, UnknownTopicError
from .kafka.crc import SkippedBatch, corrupt_batches
from .kafka.errors import PartitionError, classify_partition_error, error_name
from .records import FetchedDataChunk, PartitionTopicInfo, TopicPartition

__all__ = ["ConsumerFetcher", "FetcherManager", "fetcher_id_for"]

log = logging.getLogger(__name__)


def fetcher_id_for(tp: TopicPartition, num_fetchers: int) -> int:
    """The fetcher a partition goes to: ``abs(31 * topic.hashCode + partition) % n``.

    As ``AbstractFetcherManager.getFetcherId`` (Java ``String.hashCode``, 32-bit overflow).
    """
    v = (31 * java_string_hash(tp.topic) + tp.partition) & 0xFFFFFFFF
    v = v - (1 << 32) if v >= (1 << 31) else v
    return abs(v) % num_fetchers


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
        self.partitions: dict[TopicPartition, PartitionTopicInfo] = {}
        self._delivering: set[TopicPartition] = set()
        self._wakeup = anyio.Event()
        self.requests = 0

    def add_partitions(self, ptis: Iterable[PartitionTopicInfo]) -> None:
        """Start fetching these partitions (their leader is this fetcher's broker)."""
        for pti in ptis:
            self.partitions[pti.tp] = pti
        self._wakeup.set()

    def _remove_with_error(self, tps: Iterable[TopicPartition]) -> None:
        removed = [self.partitions.pop(tp) for tp in list(tps) if tp in self.partitions]
        if removed:
            self.manager.add_partitions_with_error(removed)

    async def _reset_offsets(self, ptis: list[PartitionTopicInfo]) -> None:
        """Apply ``auto.offset.reset`` to partitions without a valid offset.

        As ``ConsumerFetcherThread.handleOffsetOutOfRange``: ``smallest`` asks for the log
        start offset, anything else for the log end offset.
        """
        config = self.manager.config
        ts = EARLIEST if config.auto_offset_reset == "smallest" else LATEST
        try:
            offsets = await self.manager.kafka.list_offsets(self.node_id, {p.tp: ts for p in ptis})
        except (BrokerNotAvailableError, UnknownTopicError) as e:
            log.warning("offset reset on broker %s failed: %s", self.node_id, e)
            self._remove_with_error(p.tp for p in ptis)
            return
        for pti in ptis:
            new = offsets.get(pti.tp)
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
        config = self.manager.config
        kafka = self.manager.kafka
        backoff_s = config.refresh_leader_backoff_ms / 1000
        delivering = self._delivering
        while True:
            fetchable = [p for tp, p in self.partitions.items() if tp not in delivering]
            if not fetchable:
                # Nothing to fetch until a partition is added or a full queue takes its chunk.
                self._wakeup = anyio.Event()
                await self._wakeup.wait()
                continue
            to_reset = [p for p in fetchable if p.fetched_offset < 0]
            if to_reset:
                await self._reset_offsets(to_reset)
                continue
            by_topic: dict[str, list[tuple[int, int, int]]] = {}
            offsets: dict[TopicPartition, int] = {}
            for pti in fetchable:
                tp = pti.tp
                by_topic.setdefault(tp.topic, []).append(
                    (tp.partition, pti.fetched_offset, pti.fetch_size)
                )
                offsets[tp] = pti.fetched_offset
            request = FetchRequest(
                config.fetch_wait_max_ms,
                config.fetch_min_bytes,
                config.fetch_max_bytes,
                0,  # read_uncommitted, as the original (no transactions then)
                list(by_topic.items()),
            )
            started = time.monotonic()
            try:
                response = await kafka.send(self.node_id, request)
            except BrokerNotAvailableError as e:
                log.warning("fetch from broker %s failed: %s", self.node_id, e)
                self._remove_with_error(list(self.partitions))
                await anyio.sleep(backoff_s)
                continue
            self.requests += 1
            metrics = self.manager.metrics
            if metrics is not None:
                size = sum(len(part[-1] or b"") for _, parts in response.topics for part in parts)
                metrics.record_fetch(
                    kafka.broker_address(self.node_id),
                    (time.monotonic() - started) * 1000.0,
                    size,
                    float(getattr(response, "throttle_time_ms", 0) or 0),
                )
            await self._process_response(response, offsets)

    async def _process_response(self, response: Any, offsets: dict[TopicPartition, int]) -> None:
        errored: list[TopicPartition] = []
        out_of_range: list[PartitionTopicInfo] = []
        for topic, parts in response.topics:
            for partition, error_code, highwater, *part_data in parts:
                tp = TopicPartition(topic, partition)
                pti = self.partitions.get(tp)
                fetch_offset = offsets.get(tp)
                if pti is None or fetch_offset is None or pti.fetched_offset != fetch_offset:
                    continue  # removed or reset while the fetch was in flight
                err = classify_partition_error(error_code)
                if err is PartitionError.NONE:
                    self.manager.record_highwater(tp, highwater)
                    await self._enqueue(pti, fetch_offset, part_data[-1])
                elif err is PartitionError.OFFSET_OUT_OF_RANGE:
                    out_of_range.append(pti)
                else:
                    log.info(
                        "fetch of %s from broker %s: %s", tp, self.node_id, error_name(error_code)
                    )
                    errored.append(tp)
        if out_of_range:
            await self._reset_offsets(out_of_range)
        if errored:
            self._remove_with_error(errored)
            await anyio.sleep(self.manager.config.refresh_leader_backoff_ms / 1000)

    async def _enqueue(self, pti: PartitionTopicInfo, fetch_offset: int, data: Any) -> None:
        """Parse a partition's record set and hand it to its stream's queue.

        As ``PartitionTopicInfo.enqueue``, but without its head-of-line blocking: when the
        queue is full the chunk waits in a delivery task of its own, and only this partition
        stops being fetched until the reader takes it; the other partitions of this broker go
        on. Backpressure stays per stream (``queued.max.message.chunks`` chunks, plus one
        waiting chunk per partition).

        With ``check.crcs``, every batch's CRC is checked here, before the chunk is handed
        over (as the original's iterator checked each message, ``ensureValid()``). A corrupt
        batch is never handed out: with ``crc.error.action=skip`` it is logged, counted and
        stood in for by a :class:`~aiozkconsumer.kafka.crc.SkippedBatch`; with ``raise`` the
        batches before it are handed over and the next fetch starts at it; when it is the
        first, the iterator gets a chunk that raises ``CorruptRecordError`` and the partition
        stops being fetched (as for a batch that is too large).
        """
        if not data:
            return
        config = self.manager.config
        records = MemoryRecords(data)
        batches: list[Any] = []
        next_offset = fetch_offset
        corrupt: CorruptRecordError | None = None
        bad = corrupt_batches(data, pti.tp) if config.check_crcs else None
        while records.has_next():
            batch = records.next_batch()
            if batch is None:
                break
            if bad and batch.next_offset in bad:
                e = bad[batch.next_offset]
                if not self._skip_corrupt(pti, e, next_offset):
                    corrupt = e
                    break
                batch = SkippedBatch(e.offset, batch.next_offset)
            batches.append(batch)
            next_offset = batch.next_offset
        if batches:
            metrics = self.manager.metrics
            if metrics is not None:
                size = records.size_in_bytes()
                metrics.bytes_per_sec(pti.topic).mark(size)
                metrics.bytes_per_sec().mark(size)
            self._hand_over(FetchedDataChunk(batches, pti, fetch_offset), next_offset)
        elif corrupt is not None:
            log.error(
                "%s; not delivered, %s stops at offset %s (crc.error.action=raise)",
                corrupt,
                pti.tp,
                fetch_offset,
            )
            self._mark_corrupt(pti)
            self.partitions.pop(pti.tp, None)
            self._hand_over(FetchedDataChunk((), pti, fetch_offset, error=corrupt), fetch_offset)
        elif records.size_in_bytes() > 0:
            # A batch larger than fetch.message.max.bytes: it can never be returned. Hand the
            # iterator a chunk that raises MessageSizeTooLargeError and stop fetching it.
            self.partitions.pop(pti.tp, None)
            self._hand_over(FetchedDataChunk((), pti, fetch_offset, too_large=True), fetch_offset)

    def _skip_corrupt(
        self, pti: PartitionTopicInfo, error: CorruptRecordError, position: int
    ) -> bool:
        """Whether to step over a corrupt batch (``crc.error.action=skip``); logs and counts it.

        A batch whose header does not lead past ``position`` (the offset after the batches
        before it) cannot be stepped over: where it ends is itself corrupt. It raises.
        """
        end = error.last_offset
        if self.manager.config.crc_error_action != "skip" or end is None or end < position:
            return False
        log.error("%s; skipped (crc.error.action=skip)", error)
        self._mark_corrupt(pti)
        return True

    def _mark_corrupt(self, pti: PartitionTopicInfo) -> None:
        metrics = self.manager.metrics
        if metrics is not None:
            metrics.corrupt_batches_per_sec(pti.topic).mark()
            metrics.corrupt_batches_per_sec().mark()

    def _hand_over(self, chunk: FetchedDataChunk, next_offset: int) -> None:
        pti = chunk.topic_info
        try:
            pti.queue.put_nowait(chunk)
        except asyncio.QueueFull:
            self._delivering.add(pti.tp)
            self.manager.spawn(self._deliver, chunk, next_offset)
            return
        if pti.active and pti.fetched_offset == chunk.fetch_offset:
            pti.fetched_offset = next_offset

    async def _deliver(self, chunk: FetchedDataChunk, next_offset: int) -> None:
        """Wait for room in a full queue, then let the partition be fetched again."""
        pti = chunk.topic_info
        try:
            await pti.queue.put(chunk)
            if pti.active and pti.fetched_offset == chunk.fetch_offset:
                pti.fetched_offset = next_offset
        finally:
            self._delivering.discard(pti.tp)
            self._wakeup.set()


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
        self._lag_gauges: dict[TopicPartition, Any] = {}
        self.partition_map: dict[TopicPartition, PartitionTopicInfo] = {}
        self.fetchers: dict[tuple[int, int], ConsumerFetcher] = {}
        self.highwater: dict[TopicPartition, int] = {}
        self._no_leader: dict[TopicPartition, PartitionTopicInfo] = {}
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
        self._register_lag(self.partition_map.values())
        self._no_leader = dict(self.partition_map)
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
        them), else add the ``new`` partitions to the running ones.

        Args:
            owned: every partition owned now.
            new: the partitions acquired by this rebalance (a subset of ``owned``).
            task_group: the connector's task group, which owns the fetcher tasks.
        """
        if not self.running:
            await self.start_connections(owned, task_group)
        else:
            new = list(new)
            if new:
                self.add_partitions(new)

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
        self._unregister_lag(list(self.partition_map))
        self.partition_map = {}
        self._no_leader = {}

    def add_partitions(self, ptis: Iterable[PartitionTopicInfo]) -> None:
        """Start fetching more partitions while the others go on (incremental rebalance)."""
        ptis = list(ptis)
        for pti in ptis:
            self.partition_map[pti.tp] = pti
            self._no_leader[pti.tp] = pti
        self._register_lag(ptis)
        if self._no_leader:
            self._no_leader_event.set()

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching partitions; the others go on.

        A fetch in flight for them is discarded when it returns; a chunk already being put into
        a queue reaches it marked inactive and is dropped by the iterator.
        """
        tps = list(tps)
        for tp in tps:
            self.partition_map.pop(tp, None)
            self._no_leader.pop(tp, None)
            for fetcher in self.fetchers.values():
                fetcher.partitions.pop(tp, None)
        self._unregister_lag(tps)

    def _register_lag(self, ptis: Iterable[PartitionTopicInfo]) -> None:
        """``ConsumerLag`` gauges: high watermark minus fetch offset, -1 before a fetch."""
        if self.metrics is None:
            return
        for pti in ptis:

            def lag(pti: PartitionTopicInfo = pti) -> float:
                hw = self.highwater.get(pti.tp)
                return -1.0 if hw is None else float(max(0, hw - pti.fetched_offset))

            self._lag_gauges[pti.tp] = self.metrics.consumer_lag(pti.topic, pti.partition, lag)

    def _unregister_lag(self, tps: Iterable[TopicPartition]) -> None:
        if self.metrics is None:
            return
        for tp in tps:
            gauge = self._lag_gauges.pop(tp, None)
            if gauge is not None:
                self.metrics.remove(gauge)

    def add_partitions_with_error(self, ptis: Iterable[PartitionTopicInfo]) -> None:
        """Give partitions back to the leader finder (``addPartitionsWithError``)."""
        for pti in ptis:
            if pti.active and pti.tp in self.partition_map:
                self._no_leader[pti.tp] = pti
        if self._no_leader:
            self._no_leader_event.set()

    def spawn(self, fn: Any, *args: Any) -> None:
        """Run a task owned by the fetchers' task group (cancelled with them)."""
        self._tg.start_soon(fn, *args)

    def record_highwater(self, tp: TopicPartition, highwater: int) -> None:
        """Remember a partition's high watermark from a fetch response."""
        self.highwater[tp] = highwater

    async def _leader_finder(self) -> None:
        """The ``LeaderFinderThread``: find leaders of partitions that have none."""
        backoff_s = self.config.refresh_leader_backoff_ms / 1000
        while True:
            await self._no_leader_event.wait()
            pending = dict(self._no_leader)
            if not pending:
                self._no_leader_event = anyio.Event()
                continue
            ok = await self.kafka.refresh_metadata({tp.topic for tp in pending})
            if not ok:
                log.warning("Failed to find leader for %s: no broker answered", sorted(pending))
            found: dict[tuple[int, int], list[PartitionTopicInfo]] = {}
            for tp, pti in pending.items():
                leader = self.kafka.leader_for(tp)
                if leader is None or not pti.active:
                    continue
                key = (leader, fetcher_id_for(tp, self.config.num_consumer_fetchers))
                found.setdefault(key, []).append(pti)
                del self._no_leader[tp]
            for key, ptis in found.items():
                fetcher = self.fetchers.get(key)
                if fetcher is None:
                    fetcher = self.fetchers[key] = ConsumerFetcher(self, *key)
                    self._tg.start_soon(self._run_fetcher, fetcher)
                fetcher.add_partitions(ptis)
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
