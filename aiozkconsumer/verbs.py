"""The runtime verbs of a running connector, in the Java ``KafkaConsumer``'s meaning.

``seek``, ``seek_to_beginning``/``seek_to_end``/``seek_to_timestamp``, ``pause``/``resume``/
``paused``, ``position``, ``committed``, ``beginning_offsets``/``end_offsets``/
``offsets_for_times``, ``assignment``, and ``assign``: a group-less member that reads the
partitions it is given. Both coordinators' connectors (``ZookeeperConsumerConnector``,
``KafkaConsumerConnector``) are :class:`ConnectorVerbs`, a layer over the shared
``base_connector.ConsumerConnector``.

How they reach the records: a partition's state (``PartitionTopicInfo``) carries a move
count (``truncations``) that every chunk is stamped with when fetched. ``seek`` and ``pause``
move it on, so the iterator drops every chunk fetched before (queued, or the one it is
reading) and the fetch loop discards a fetch in flight for the old position — the same
mechanism that voids chunks after a log truncation. A paused partition is skipped by the fetch
plan; its room in the stream's queue goes to the others.

Rules (documented in ``docs/usage.md``, "Runtime verbs"):

- The verbs that act on the position (``seek*``, ``pause``, ``resume``, ``position``) accept
  only partitions the member owns now and still hands out; otherwise
  :class:`~aiozkconsumer.errors.PartitionNotAssignedError` (Java: ``IllegalStateException``).
  During a rebalance a partition that stays (incremental: ZooKeeper coordination, KIP-848,
  cooperative-sticky) takes a seek at once; one being given up is refused.
- Pause state belongs to the assignment (as Java's): a partition released and taken again is
  not paused, and neither is a partition acquired by a later rebalance.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Literal

from .base_connector import ConnectorState, ConsumerConnector
from .errors import (
    BrokerNotAvailableError,
    ConsumerClosedError,
    MessageStreamsExistError,
    PartitionNotAssignedError,
)
from .kafka.client import EARLIEST, LATEST
from .kafka.stable_offsets import leader_offsets_for
from .queues import ChunkQueue
from .records import PartitionTopicInfo, TopicPartition
from .stream import Decoder, KafkaStream

__all__ = ["ConnectorVerbs"]

log = logging.getLogger(__name__)


class ConnectorVerbs(ConsumerConnector):
    """A consumer connector with the Java ``KafkaConsumer``'s runtime verbs.

    Not built directly: ``ZookeeperConsumerConnector`` and ``KafkaConsumerConnector`` are
    ones. The verbs are called from any task of the connector's event loop, between records
    or while a reader waits; none of them blocks the streams.
    """

    _manual_queues: list[ChunkQueue] | None = None
    _manual_streams: list[KafkaStream] | None = None

    @property
    def manual(self) -> bool:
        """Whether this member was given its partitions with :meth:`assign` (no group)."""
        return self._manual_streams is not None

    # -- the assignment ------------------------------------------------------------------

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this member owns and hands out now (``KafkaConsumer.assignment``).

        During a rebalance, the partitions being given up are no longer in it.

        Returns:
            A frozen set of ``TopicPartition``; empty before the first assignment.
        """
        return frozenset(tp for tp, p in self.ownership.registry.items() if p.active)

    def _owned_info(self, verb: str, tp: TopicPartition) -> PartitionTopicInfo:
        pti = self.ownership.registry.get(tp)
        if pti is None or not pti.active:
            raise PartitionNotAssignedError(verb, tp, self.assignment())
        return pti

    def _owned_infos(
        self, verb: str, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, PartitionTopicInfo]:
        """Every one of ``tps`` owned, or nothing done (the first not owned raises)."""
        return {tp: self._owned_info(verb, tp) for tp in tps}

    def _check_open(self) -> None:
        if self.state in (ConnectorState.NEW, ConnectorState.CLOSING, ConnectorState.CLOSED):
            raise ConsumerClosedError(f"the connector is {self.state.value}")

    # -- seek ----------------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next offset handed out of partition ``tp``.

        As ``KafkaConsumer.seek(TopicPartition, long)``: the position moves at once; no
        record fetched before the seek is handed out after it (chunks queued or half read
        are dropped, a fetch in flight is discarded) and fetching starts again at
        ``offset``. Nothing is committed: the consumed offset (``position``) is what the
        next commit (auto or ``commit_offsets()``) writes. An offset outside the log is
        handled at the next fetch as ``auto.offset.reset`` says, as in the Java client.

        Args:
            tp: an owned partition.
            offset: the next offset to hand out, >= 0.

        Raises:
            ValueError: ``offset`` is negative.
            PartitionNotAssignedError: ``tp`` is not owned now, or is being given up by a
                rebalance under way (the seek is refused, not deferred).
        """
        if offset < 0:
            raise ValueError(f"seek offset must be >= 0, got {offset}")
        self._seek_all("seek", {tp: offset})

    def _seek_all(self, verb: str, offsets: Mapping[TopicPartition, int]) -> None:
        infos = self._owned_infos(verb, offsets)
        for tp, pti in infos.items():
            pti.seek(offsets[tp])
        self.fetcher.repositioned(infos)
        log.debug("[%s] %s: %s", self.consumer_id_string, verb, dict(offsets))

    async def seek_to_beginning(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Seek partitions to their log start offset (``KafkaConsumer.seekToBeginning``).

        The Java client evaluates it lazily, at the next ``poll`` or ``position``; here the
        log start offsets are asked for (ListOffsets) and the seeks applied before this
        returns.

        Args:
            tps: owned partitions.

        Returns:
            ``{tp: offset sought}``.

        Raises:
            PartitionNotAssignedError: a partition is not owned (checked before and after
                the offsets are read; nothing is sought then).
            NoBrokersError, BrokerNotAvailableError: the leaders could not be asked.
            ConsumerClosedError: the connector is not running.
        """
        return await self._seek_to("seek_to_beginning", tps, "earliest")

    async def seek_to_end(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Seek partitions to their log end offset (``KafkaConsumer.seekToEnd``): the high
        watermark, or the last stable offset under ``isolation.level=read_committed``.

        Args, Returns, Raises: as :meth:`seek_to_beginning`.
        """
        return await self._seek_to("seek_to_end", tps, "latest")

    async def seek_to_timestamp(
        self, tps: Iterable[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int]:
        """Seek partitions to their first record at or after a time.

        The Java idiom ``offsetsForTimes`` + ``seek`` in one verb: a partition with no record
        that recent is sought to its log end offset (as ``seekToEnd``), so that only records
        written from now on are handed out.

        Args:
            tps: owned partitions.
            timestamp_ms: the time, epoch milliseconds, >= 0.

        Returns:
            ``{tp: offset sought}``.

        Raises:
            ValueError: ``timestamp_ms`` is negative.
            PartitionNotAssignedError, NoBrokersError, BrokerNotAvailableError,
            ConsumerClosedError: as :meth:`seek_to_beginning`.
        """
        tps = sorted(set(tps))
        self._owned_infos("seek_to_timestamp", tps)
        found = await self.offsets_for_times(dict.fromkeys(tps, timestamp_ms))
        missing = [tp for tp, offset in found.items() if offset is None]
        ends = await self.end_offsets(missing) if missing else {}
        offsets = {tp: (o if o is not None else ends[tp]) for tp, o in found.items()}
        self._seek_all("seek_to_timestamp", offsets)
        return offsets

    async def _seek_to(
        self, verb: str, tps: Iterable[TopicPartition], which: Literal["earliest", "latest"]
    ) -> dict[TopicPartition, int]:
        tps = sorted(set(tps))
        self._owned_infos(verb, tps)
        if which == "earliest":
            offsets = await self.beginning_offsets(tps)
        else:
            offsets = await self.end_offsets(tps)
        self._seek_all(verb, offsets)
        return offsets

    # -- pause / resume ------------------------------------------------------------------

    def pause(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching partitions and handing out their records (``KafkaConsumer.pause``).

        Membership goes on (heartbeats, ZooKeeper session, commits); the streams simply get
        nothing more of these partitions, and the other partitions of the same stream keep
        flowing (a paused partition takes no room in the stream's queue). Records already
        fetched are dropped and fetched again after :meth:`resume` from the consumed offset
        (the Java client keeps them buffered but does not return them while paused; the
        records handed out are the same). A batch already returned by ``next_batch`` is the
        reader's. Pausing a paused partition does nothing.

        Pause state belongs to the current assignment, as in the Java client: a partition
        given up by a rebalance and taken again (or newly taken) is not paused.

        Args:
            tps: owned partitions.

        Raises:
            PartitionNotAssignedError: one of ``tps`` is not owned now (none is paused then).
        """
        infos = self._owned_infos("pause", tps)
        for pti in infos.values():
            pti.pause()
        self.fetcher.repositioned(infos)

    def resume(self, tps: Iterable[TopicPartition]) -> None:
        """Fetch and hand out paused partitions again, from their consumed offset
        (``KafkaConsumer.resume``). Resuming a partition that is not paused does nothing.

        Args:
            tps: owned partitions.

        Raises:
            PartitionNotAssignedError: one of ``tps`` is not owned now (none is resumed then).
        """
        infos = self._owned_infos("resume", tps)
        for pti in infos.values():
            pti.resume()
        self.fetcher.repositioned(infos)

    def paused(self) -> frozenset[TopicPartition]:
        """The owned partitions paused now (``KafkaConsumer.paused``)."""
        return frozenset(tp for tp, p in self.ownership.registry.items() if p.active and p.paused)

    # -- offsets -------------------------------------------------------------------------

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record of ``tp`` to hand out (``KafkaConsumer.position``).

        That is the consumed offset, which a commit with no arguments writes. Before the
        partition's start is known (no committed offset, the first fetch has not applied
        ``auto.offset.reset``), it is looked up as ``auto.offset.reset`` says and made the
        position, as the Java client does.

        Args:
            tp: an owned partition.

        Returns:
            The offset (>= 0).

        Raises:
            PartitionNotAssignedError: ``tp`` is not owned now.
            NoBrokersError, BrokerNotAvailableError: the start had to be looked up and the
                leader could not be asked.
        """
        pti = self._owned_info("position", tp)
        if pti.consumed_offset >= 0:
            return pti.consumed_offset
        smallest = self.config.auto_offset_reset == "smallest"
        offsets = await (self.beginning_offsets if smallest else self.end_offsets)([tp])
        pti = self._owned_info("position", tp)
        if pti.consumed_offset < 0:
            self._seek_all("position", offsets)
        return pti.consumed_offset

    async def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's last committed offsets of partitions (``KafkaConsumer.committed``).

        Read from the group's offset storage (``offsets.storage``: ZooKeeper nodes, Kafka's
        OffsetFetch, or both with dual commit), for any partition, owned or not.

        Args:
            tps: the partitions.

        Returns:
            ``{tp: next offset to read, or None where nothing is committed}``.

        Raises:
            OffsetFetchError: Kafka could not answer after every attempt.
            ZookeeperError: (ZooKeeper storage) ZooKeeper is unreachable, or an offset node
                does not hold a number.
            ConsumerClosedError: the connector is not running.
        """
        self._check_open()
        tps = sorted(set(tps))
        offsets = await self.offset_store.fetch(tps)
        return {tp: (o if (o := offsets.get(tp, -1)) >= 0 else None) for tp in tps}

    async def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's log start offset (``KafkaConsumer.beginningOffsets``), from its
        leader; for any partition, owned or not.

        Returns:
            ``{tp: offset}``.

        Raises:
            NoBrokersError: no broker answered a metadata request.
            BrokerNotAvailableError: a partition has no leader, or its leader did not
                answer for it.
            UnknownTopicError: a partition's topic does not exist.
            ConsumerClosedError: the connector is not running.
        """
        return await self._list_offsets(dict.fromkeys(tps, EARLIEST))

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's log end offset (``KafkaConsumer.endOffsets``): the high
        watermark, or the last stable offset under ``isolation.level=read_committed``.

        Returns, Raises: as :meth:`beginning_offsets`.
        """
        return await self._list_offsets(dict.fromkeys(tps, LATEST))

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """The first offset at or after a time, per partition (``KafkaConsumer.
        offsetsForTimes``; the offset only, not Java's ``OffsetAndTimestamp``).

        Args:
            timestamps: ``{tp: epoch milliseconds >= 0}``.

        Returns:
            ``{tp: offset, or None where the partition has no record that recent}``.

        Raises:
            ValueError: a timestamp is negative.
            NoBrokersError, BrokerNotAvailableError, UnknownTopicError, ConsumerClosedError:
                as :meth:`beginning_offsets`.
        """
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"timestamp of {tp} must be >= 0, got {ts}")
        found = await self._list_offsets(timestamps, isolation=False)
        return {tp: (o if o >= 0 else None) for tp, o in found.items()}

    async def _list_offsets(
        self, timestamps: Mapping[TopicPartition, int], *, isolation: bool = True
    ) -> dict[TopicPartition, int]:
        self._check_open()
        if not timestamps:
            return {}
        kafka = await self.cluster.kafka()
        level = self.fetcher.isolation_level if isolation else 0
        found = await leader_offsets_for(kafka, timestamps, level)
        missing = sorted(set(timestamps) - found.keys())
        if missing:
            raise BrokerNotAvailableError(
                "ListOffsets: no answer for " + ", ".join(map(str, missing))
            )
        return found

    # -- assign: no group ----------------------------------------------------------------

    async def assign(
        self,
        partitions: Iterable[TopicPartition],
        num_streams: int = 1,
        *,
        key_decoder: Decoder | None = None,
        value_decoder: Decoder | None = None,
    ) -> list[KafkaStream]:
        """Read exactly these partitions, with no group membership (``KafkaConsumer.assign``).

        Instead of ``create_message_streams``: no registration in ZooKeeper, no JoinGroup
        or heartbeat, no rebalance; the member owns what it is given until the next
        ``assign``. ``group.id`` still names where committed offsets are read (each partition
        starts at its committed offset, else as ``auto.offset.reset`` says) and written:
        commits are optional — with ``auto.commit.enable=false`` nothing is committed unless
        ``commit_offsets()`` is called; a commit is not fenced (Kafka: generation -1, as the
        Java client's commits in assign mode; ZooKeeper: the offset nodes are written), so
        do not share the group id with a running group.

        Called again, it replaces the assignment (as Java's): partitions no longer given are
        released (their consumed offsets committed first with auto-commit on), new ones start
        at their committed offset; the streams stay the same. Partition ``p`` feeds stream
        ``p mod num_streams``.

        Args:
            partitions: the partitions to read (possibly empty).
            num_streams: streams to create at the first call, >= 1 (later calls keep them).
            key_decoder: applied to each non-null key as a record is handed out (first call).
            value_decoder: applied to each non-null value likewise (first call).

        Returns:
            The streams (the same list at every call).

        Raises:
            ValueError: ``num_streams`` < 1.
            MessageStreamsExistError: streams were created with ``create_message_streams``.
            ConsumerClosedError: the connector is not started or is closed.
            UnknownTopicError, BrokerNotAvailableError: (at fetch) a partition does not exist
                or has no leader — fetching retries, as for a subscribed partition.
            OffsetFetchError, ZookeeperError: the committed offsets could not be read.
        """
        if num_streams < 1:
            raise ValueError(f"num_streams must be >= 1, got {num_streams}")
        if self._manual_streams is None:
            if self.topic_count is not None:
                raise MessageStreamsExistError("streams exist: assign() or streams, not both")
            if self.state is not ConnectorState.CONNECTED:
                raise ConsumerClosedError(f"cannot assign: connector is {self.state.value}")
            queues = [self._new_queue("assigned", i) for i in range(num_streams)]
            for queue in queues:
                self.ownership.add_wildcard_queue(queue)
            self._manual_queues = queues
            self._manual_streams = [
                self._new_stream(q, f"assigned-{i}", key_decoder, value_decoder)
                for i, q in enumerate(queues)
            ]
            self._streams["<assigned>"] = self._manual_streams
            if self.config.auto_commit_enable:
                self.task_group.start_soon(
                    self.committer.auto_commit, self.config.auto_commit_interval_ms / 1000
                )
        self._check_open()
        assert self._manual_queues is not None
        queues = self._manual_queues
        wanted = set(partitions)
        async with self._rebalance_lock:
            owned = set(self.ownership.registry)
            await self.handover.release(owned - wanted)
            added = sorted(wanted - owned)
            offsets = await self.offset_store.fetch(added) if added else {}
            new = self.handover.acquire(
                {tp: queues[tp.partition % len(queues)] for tp in added},
                {tp: offsets.get(tp, -1) for tp in added},
            )
            await self.handover.start(new, None)
            self._set_state(ConnectorState.RUNNING)
        return list(self._manual_streams)

    def _check_can_subscribe(self) -> None:
        if self._manual_streams is not None:
            raise MessageStreamsExistError("partitions were assigned: assign() or streams")
        super()._check_can_subscribe()
