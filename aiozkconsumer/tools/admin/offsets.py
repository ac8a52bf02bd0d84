"""A ZooKeeper-coordinated group's committed offsets: read, write, export, import, update.

:class:`OffsetTools` reads a group's offsets from ZooKeeper's offset nodes, from its Kafka
coordinator or from both (``offsets.storage``, ``dual.commit.enabled``) and writes them back;
on those it builds the old offset tools: ``ExportZkOffsets`` and ``ImportZkOffsets`` (the file
formats are the pure :mod:`aiozkconsumer.tools.offsets_file`) and ``UpdateOffsetsInZK``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from ...errors import UnknownTopicError
from ...offsets import dual_fetch_result
from ...records import TopicPartition
from ...zk import layout
from ..offsets_file import OffsetEntry
from .nodes import MalformedNode
from .session import AdminSession

__all__ = ["OffsetTools", "ResetStorage"]

ResetStorage = Literal["zookeeper", "kafka", "dual"]
"""Where :meth:`GroupAdmin.reset_offsets` reads and writes offsets: ZooKeeper's offset nodes,
the group's Kafka coordinator (``offsets.storage=kafka``), or both (``dual.commit.enabled``)."""


class OffsetTools(AdminSession):
    """``offsets export`` / ``import`` / ``update``, over a group's offsets in either storage."""

    async def export_offsets(
        self, groups: Iterable[str] | None = None, malformed: list[MalformedNode] | None = None
    ) -> list[OffsetEntry]:
        """Read every offset node of the given groups, as ``ExportZkOffsets`` (0.10.2).

        Args:
            groups: group ids; default every group under ``/consumers``. A group without
                offsets contributes nothing.
            malformed: where an offset node that does not hold a decimal number is reported
                (and left out, the rest exported, as ``describe_group`` does); without it,
                such a node fails the export.

        Returns:
            The entries sorted by group, topic and partition.

        Raises:
            UnknownGroupError: a group given explicitly does not exist.
            MalformedZookeeperDataError: an offset node does not hold a decimal number (only
                without ``malformed``).
        """
        if groups is None:
            chosen = await self.list_groups()
        else:
            chosen = sorted(set(groups))
            for group in chosen:
                await self._require_group(group)
        entries: list[OffsetEntry] = []
        for group in chosen:
            topics = await self.zk.get_children(f"{layout.group_dir(group)}/offsets") or []
            for topic in sorted(topics):
                found = await self._partition_nodes(
                    layout.offsets_dir(group, topic), layout.decode_offset, malformed
                )
                for partition, offset in sorted(found.items()):
                    entries.append(OffsetEntry(group, topic, partition, offset))
        return entries

    async def import_offsets(self, entries: Iterable[OffsetEntry]) -> int:
        """Write offset nodes, creating them where missing (``ImportZkOffsets``).

        As the original, live members are not checked for: a running group overwrites the
        imported offsets with its next commit.

        Returns:
            The number of nodes written.
        """
        n = 0
        for entry in entries:
            await self.zk.set_or_create(entry.path, layout.encode_offset(entry.offset))
            n += 1
        return n

    async def update_offsets(
        self, group: str, topic: str, to: Literal["earliest", "latest"]
    ) -> dict[int, int]:
        """Set a group's offsets of a topic to its earliest or latest offsets.

        As ``UpdateOffsetsInZK`` (0.10.2): for each partition the leader is asked for
        ``OffsetRequest(EarliestTime|LatestTime)`` and the answer is written to
        ``/consumers/<group>/offsets/<topic>/<p>``.

        Args:
            group: the group id (it need not exist yet).
            topic: the topic.
            to: ``"earliest"`` or ``"latest"``.

        Returns:
            Partition -> the offset written.

        Raises:
            UnknownTopicError: the topic does not exist.
            NoBrokersError, KafkaConnectionError, BrokerNotAvailableError: a leader could not
                be asked.
        """
        layout.group_dir(group)
        partitions = (await self.partitions_for([topic])).get(topic, ())
        if not partitions:
            raise UnknownTopicError(topic, f"Topic '{topic}' does not exist.")
        offsets = await self.list_offsets([TopicPartition(topic, p) for p in partitions], to)
        written: dict[int, int] = {}
        for tp, offset in sorted(offsets.items()):
            await self.zk.set_or_create(
                layout.offset_path(group, tp.topic, tp.partition), layout.encode_offset(offset)
            )
            written[tp.partition] = offset
        return written

    async def committed_offsets(
        self,
        group: str,
        tps: Iterable[TopicPartition] | None = None,
        *,
        storage: ResetStorage = "zookeeper",
        malformed: list[MalformedNode] | None = None,
    ) -> dict[TopicPartition, int]:
        """A group's committed offsets in ZooKeeper, in Kafka, or the larger of both.

        Args:
            group: the group id.
            tps: the partitions; ``None``: every partition the group has an offset for
                (in Kafka: OffsetFetch of all partitions, Kafka 0.10.2+).
            storage: ``"zookeeper"`` (the offset nodes), ``"kafka"`` (the group's
                coordinator) or ``"dual"`` (both; per partition the larger offset, as
                ``fetchOffsets`` with ``dual.commit.enabled``).
            malformed: where to list offset nodes that do not parse (they count as no
                offset); default: such a node raises.

        Returns:
            ``{tp: offset}`` for the partitions that have a committed offset.

        Raises:
            OffsetFetchError: Kafka-stored offsets could not be read.
            NoBrokersError, KafkaConnectionError: no broker to ask for Kafka-stored offsets.
            MalformedZookeeperDataError: an offset node does not parse (without
                ``malformed``).
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        wanted = None if tps is None else sorted(set(tps))
        in_zookeeper: dict[TopicPartition, int] = {}
        in_kafka: dict[TopicPartition, int] = {}
        if storage in ("zookeeper", "dual"):
            if wanted is None:
                topics = await self.zk.get_children(f"{layout.group_dir(group)}/offsets") or []
            else:
                topics = sorted({tp.topic for tp in wanted})
            for topic in sorted(topics):
                nodes = await self._partition_nodes(
                    layout.offsets_dir(group, topic), layout.decode_offset, malformed
                )
                in_zookeeper.update((TopicPartition(topic, p), o) for p, o in nodes.items())
            if wanted is not None:
                keep = set(wanted)
                in_zookeeper = {tp: o for tp, o in in_zookeeper.items() if tp in keep}
        if storage in ("kafka", "dual") and wanted != []:
            await self.kafka()  # unreachable brokers fail here, not after the fetch timeout
            store = self._kafka_offset_store(group)
            try:
                if wanted is None:
                    full = await store.fetch_metadata(None)
                    in_kafka = {tp: o for tp, (o, _) in full.items()}
                else:
                    in_kafka = await store.fetch(wanted)
            finally:
                await store.close()
        return {tp: o for tp, o in dual_fetch_result(in_zookeeper, in_kafka).items() if o >= 0}

    async def write_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int], storage: ResetStorage
    ) -> None:
        """Write a group's offsets to ZooKeeper, Kafka, or both (Kafka first, as
        :class:`~aiozkconsumer.offsets.DualOffsetStore`).

        Live members are not checked for here (:meth:`reset_offsets` does).

        Args:
            group: the group id.
            offsets: ``{tp: next offset to read}``, each >= 0.
            storage: ``"zookeeper"``, ``"kafka"`` (an OffsetCommit to the group's
                coordinator with generation -1) or ``"dual"``.

        Raises:
            OffsetCommitError: the coordinator did not accept every offset after 3 attempts
                (with ``"dual"``, ZooKeeper is then not written).
            NoBrokersError, KafkaConnectionError: no broker to commit to.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        if not offsets:
            return
        if storage in ("kafka", "dual"):
            await self.kafka()
            store = self._kafka_offset_store(group)
            try:
                await store.commit(offsets, retries=2)
            finally:
                await store.close()
        if storage in ("zookeeper", "dual"):
            for tp, offset in sorted(offsets.items()):
                await self.zk.set_or_create(
                    layout.offset_path(group, tp.topic, tp.partition),
                    layout.encode_offset(offset),
                )
