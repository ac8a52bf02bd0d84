"""Offset storage in ZooKeeper, as the original's ``offsets.storage=zookeeper``.

Offsets are "next offset to read", stored as a decimal string at
``/consumers/<group>/offsets/<topic>/<partition>``. A partition's offset is written only when
it differs from the last value read or written (the original's ``checkpointedZkOffsets``), so
an idle consumer causes no ZooKeeper writes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from .records import TopicPartition
from .zk import layout
from .zk.client import ZkClient

__all__ = ["NO_OFFSET", "ZookeeperOffsetStore"]

log = logging.getLogger(__name__)

NO_OFFSET = -1
"""The offset of a partition with no committed offset (``OffsetMetadataAndError.NoOffset``)."""


class ZookeeperOffsetStore:
    """Reads and commits a group's offsets in ZooKeeper.

    Args:
        zk: the connector's ZooKeeper client.
        group: ``group.id``.
    """

    def __init__(self, zk: ZkClient, group: str) -> None:
        self.zk = zk
        self.group = group
        self._checkpoint: dict[TopicPartition, int] = {}
        self.commits = 0
        """Number of offset nodes written (the original's ``ZooKeeperCommitsPerSec`` count)."""

    async def fetch(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Read the committed offsets of ``tps`` (``fetchOffsets`` with ZooKeeper storage).

        Returns:
            ``{tp: offset}``, ``NO_OFFSET`` (-1) where no offset node exists. Each value also
            becomes the partition's checkpoint, so committing it unchanged writes nothing.

        Raises:
            MalformedZookeeperDataError: an offset node does not hold a decimal offset.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        result: dict[TopicPartition, int] = {}
        for tp in tps:
            path = layout.offset_path(self.group, tp.topic, tp.partition)
            data = await self.zk.get_data(path)
            offset = NO_OFFSET if data is None else layout.decode_offset(data, path)
            result[tp] = offset
            self._checkpoint[tp] = offset
        return result

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> int:
        """Write offsets that changed since the last read or write (``commitOffsetToZooKeeper``).

        Negative offsets (nothing consumed, no starting offset known yet) are skipped.

        Returns:
            The number of offset nodes written.

        Raises:
            ZookeeperConnectionError: ZooKeeper is unreachable; offsets not yet written keep
                their old checkpoint and are written by the next commit.
        """
        written = 0
        for tp, offset in sorted(offsets.items()):
            if offset < 0 or self._checkpoint.get(tp) == offset:
                continue
            path = layout.offset_path(self.group, tp.topic, tp.partition)
            await self.zk.set_or_create(path, layout.encode_offset(offset))
            self._checkpoint[tp] = offset
            written += 1
        self.commits += written
        if written:
            log.debug("committed %d offsets of group %s to ZooKeeper", written, self.group)
        return written

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Drop the checkpoints of released partitions."""
        for tp in tps:
            self._checkpoint.pop(tp, None)
