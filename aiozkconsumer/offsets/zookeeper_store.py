"""Offsets in ZooKeeper (``offsets.storage=zookeeper``): ``ZookeeperOffsetStore``.

A decimal string at ``/consumers/<group>/offsets/<topic>/<partition>``, as the original. A
partition's node is written only when its offset differs from the last value read or written
(the original's ``checkpointedZkOffsets``), so an idle consumer causes no writes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from .._concurrency import gather, gather_outcomes
from ..errors import CommitFencedError, MalformedZookeeperDataError
from ..records import TopicPartition
from ..zk import layout
from ..zk.client import ZkClient
from .rules import NO_OFFSET, check_retries

__all__ = ["ZookeeperOffsetStore"]

log = logging.getLogger(__name__)

_WRITTEN, _FENCED, _UNCHANGED = object(), object(), object()


class ZookeeperOffsetStore:
    """Reads and commits a group's offsets in ZooKeeper (``offsets.storage=zookeeper``).

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

    @property
    def zookeeper_commits(self) -> int:
        """Offset nodes written so far (same as ``commits``)."""
        return self.commits

    @property
    def kafka_commits(self) -> int:
        """Always 0: this store does not talk to Kafka."""
        return 0

    async def fetch(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Read the committed offsets of ``tps`` (``fetchOffsets`` with ZooKeeper storage).

        As ``fetchOffsetFromZooKeeper`` in ``ZookeeperConsumerConnector.scala``, 0.10.2, where
        a node that did not parse failed the rebalance (``NumberFormatException``). Such a node
        is never read as "no offset": that would apply ``auto.offset.reset`` and, with
        ``largest``, silently skip the partition's backlog. The rebalance decides what to do
        (``offsets.malformed.reset``).

        Args:
            tps: the partitions.

        Returns:
            ``{tp: offset}``, ``NO_OFFSET`` (-1) where no offset node exists. Each value also
            becomes the partition's checkpoint, so committing it unchanged writes nothing.

        Raises:
            MalformedZookeeperDataError: an offset node does not hold a decimal offset; its
                ``path`` and ``data`` name the node and its bytes (the first such partition
                in order, if several). Nothing is returned for the others: read them again
                without it. The partition's checkpoint is dropped, so a commit of it writes
                the node.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        result: dict[TopicPartition, int] = {}
        tps = sorted(set(tps))
        paths = [layout.offset_path(self.group, tp.topic, tp.partition) for tp in tps]
        # Pipelined: ZooKeeper answers in order on one connection.
        datas = await gather(self.zk.get_data(path) for path in paths)
        malformed: MalformedZookeeperDataError | None = None
        for tp, path, data in zip(tps, paths, datas, strict=True):
            try:
                offset = NO_OFFSET if data is None else layout.decode_offset(data, path)
            except MalformedZookeeperDataError as e:
                self._checkpoint.pop(tp, None)
                malformed = malformed or e
                continue
            result[tp] = offset
            self._checkpoint[tp] = offset
        if malformed is not None:
            raise malformed
        return result

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        retries: int = 0,
        fences: Mapping[TopicPartition, int] | None = None,
    ) -> int:
        """Write offsets that changed since the last read or write.

        As ``commitOffsetToZooKeeper`` in ``ZookeeperConsumerConnector.scala``, 0.10.2: a node
        is written only if the offset differs from the partition's checkpoint. Negative
        offsets (nothing consumed, no starting offset known yet) are skipped.

        Args:
            offsets: ``{partition: next offset to read}``.
            retries: accepted for the :class:`OffsetStore` protocol and ignored: as in the
                original, retries only matter for Kafka storage; a ZooKeeper failure is
                raised at once (the ZooKeeper client already waits out a short disconnect).
            fences: ``{partition: fencing token}``: each such partition is written only while
                its fencing node still has that version, in one multi-op with the write.

        Returns:
            The number of offset nodes written.

        Raises:
            ValueError: ``retries`` is negative.
            ZookeeperConnectionError: ZooKeeper is unreachable; offsets not yet written keep
                their old checkpoint and are written by the next commit.
            CommitFencedError: another member claimed some fenced partitions since; the
                others were written.
        """
        check_retries(retries)
        fences = fences or {}
        todo = sorted((tp, o) for tp, o in offsets.items() if o >= 0)
        # One request per partition, all in flight at once (ZooKeeper applies one session's
        # requests in order and groups their log writes): a commit of n partitions takes
        # about one round trip, not n.
        outcomes = await gather_outcomes(
            self._commit_one(tp, offset, fences.get(tp)) for tp, offset in todo
        )
        written = sum(1 for outcome in outcomes if outcome is _WRITTEN)
        fenced = [tp for (tp, _), outcome in zip(todo, outcomes, strict=True) if outcome is _FENCED]
        self.commits += written
        errors = [o for o in outcomes if isinstance(o, Exception)]
        if errors:
            raise errors[0]
        if fenced:
            raise CommitFencedError(self.group, fenced)
        if written:
            log.debug("committed %d offsets of group %s to ZooKeeper", written, self.group)
        return written

    async def _commit_one(self, tp: TopicPartition, offset: int, token: int | None) -> object:
        """Write one partition's offset node; ``_WRITTEN``, ``_FENCED`` or ``_UNCHANGED``."""
        if self._checkpoint.get(tp) == offset:
            # Nothing to write; but a fenced member must still learn it lost the partition.
            if token is not None and not await self._fence_holds(tp, token):
                return _FENCED
            return _UNCHANGED
        path = layout.offset_path(self.group, tp.topic, tp.partition)
        if token is None:
            await self.zk.set_or_create(path, layout.encode_offset(offset))
        elif not await self.zk.fenced_write(
            path,
            layout.encode_offset(offset),
            layout.fencing_path(self.group, tp.topic, tp.partition),
            token,
        ):
            return _FENCED
        self._checkpoint[tp] = offset
        return _WRITTEN

    async def _fence_holds(self, tp: TopicPartition, token: int) -> bool:
        got = await self.zk.get(layout.fencing_path(self.group, tp.topic, tp.partition))
        return got is not None and int(got[1].version) == token

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Drop the checkpoints of released partitions."""
        for tp in tps:
            self._checkpoint.pop(tp, None)

    async def close(self) -> None:
        """Nothing to release: the ZooKeeper client belongs to the connector."""

    def __repr__(self) -> str:
        return (
            f"<ZookeeperOffsetStore group={self.group} [{len(self._checkpoint)} checkpoints, "
            f"{self.commits} commits]>"
        )
