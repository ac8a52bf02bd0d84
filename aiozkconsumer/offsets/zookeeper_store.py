"""Offsets in ZooKeeper (``offsets.storage=zookeeper``): ``ZookeeperOffsetStore``.

A decimal string at ``/consumers/<group>/offsets/<topic>/<partition>``, as the original. A
partition's node is written only when its offset differs from the last value read or written
(the original's ``checkpointedZkOffsets``), so an idle consumer causes no writes. A fenced
commit is one ZooKeeper transaction (:mod:`aiozkconsumer.zk.fenced_commit`): the checks of
every partition's fencing token with the writes of the changed offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from .._concurrency import gather_outcomes
from ..errors import CommitFencedError, MalformedZookeeperDataError, ZookeeperError
from ..records import TopicPartition
from ..zk import layout
from ..zk.client import ZkClient
from ..zk.fenced_commit import FencedCommit, judge_fenced_commit
from ..zk.ops import MAX_TRANSACTION_PARTITIONS
from .rules import NO_OFFSET, check_retries

__all__ = ["ZookeeperOffsetStore"]

log = logging.getLogger(__name__)

_WRITTEN, _UNCHANGED = object(), object()


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
        # Partitions whose offset node the last read found missing (a fenced commit creates
        # it rather than writes it).
        self._missing: set[TopicPartition] = set()
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

    async def fetch(
        self,
        tps: Iterable[TopicPartition],
        *,
        read: Mapping[TopicPartition, bytes | None] | None = None,
    ) -> dict[TopicPartition, int]:
        """Read the committed offsets of ``tps`` (``fetchOffsets`` with ZooKeeper storage).

        As ``fetchOffsetFromZooKeeper`` in ``ZookeeperConsumerConnector.scala``, 0.10.2, where
        a node that did not parse failed the rebalance (``NumberFormatException``). Such a node
        is never read as "no offset": that would apply ``auto.offset.reset`` and, with
        ``largest``, silently skip the partition's backlog. The rebalance decides what to do
        (``offsets.malformed.reset``).

        Args:
            tps: the partitions.
            read: their offset nodes' data, read already (``None``: no node), when every
                partition of ``tps`` is in it (read together with the claims); nothing is
                read then.

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
        if read is not None and all(tp in read for tp in tps):
            datas = [read[tp] for tp in tps]
        else:  # one request (multiRead) for all of them
            datas = [None if got is None else got[0] for got in await self.zk.get_many(paths)]
        malformed: MalformedZookeeperDataError | None = None
        for tp, path, data in zip(tps, paths, datas, strict=True):
            if data is None:
                self._missing.add(tp)
            else:
                self._missing.discard(tp)
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
        fenced_todo = [(tp, o) for tp, o in todo if tp in fences]
        # Unfenced: one request per partition, all in flight at once (ZooKeeper applies one
        # session's requests in order and groups their log writes). Fenced: one transaction
        # per (at most MAX_TRANSACTION_PARTITIONS) partitions.
        plain = [(tp, o) for tp, o in todo if tp not in fences]
        chunks = [
            fenced_todo[i : i + MAX_TRANSACTION_PARTITIONS]
            for i in range(0, len(fenced_todo), MAX_TRANSACTION_PARTITIONS)
        ]
        outcomes = await gather_outcomes(
            [
                *(self._commit_one(tp, offset) for tp, offset in plain),
                *(self._commit_fenced(dict(chunk), fences) for chunk in chunks),
            ]
        )
        written = 0
        fenced: set[TopicPartition] = set()
        errors: list[Exception] = []
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                errors.append(outcome)
            elif outcome is _WRITTEN:
                written += 1
            elif isinstance(outcome, tuple):
                written += outcome[0]
                fenced |= outcome[1]
        self.commits += written
        if errors:
            raise errors[0]
        if fenced:
            raise CommitFencedError(self.group, fenced)
        if written:
            log.debug("committed %d offsets of group %s to ZooKeeper", written, self.group)
        return written

    async def _commit_fenced(
        self, offsets: Mapping[TopicPartition, int], fences: Mapping[TopicPartition, int]
    ) -> tuple[int, set[TopicPartition]]:
        """Commit ``offsets`` each only while its fence holds, in one transaction.

        The fences of all of them are checked, the changed offsets written, together. When
        nothing changed, the fences are only read (no transaction, no entry in the server's
        log). A failed transaction wrote nothing; the next round leaves out what it found
        fenced (after reading the other fences once) or creates what was missing.

        Returns:
            ``(offset nodes written, partitions found fenced)``.

        Raises:
            ZookeeperError: as ``ZkClient.multi`` (nothing of this call's rounds was written
                but the rounds applied before), or no round was applied after as many rounds
                as the commit has partitions and three more.
        """
        tokens = {tp: fences[tp] for tp in offsets}
        changed = {tp: o for tp, o in offsets.items() if self._checkpoint.get(tp) != o}
        if not changed:
            # Nothing to write; but a fenced member must still learn it lost the partitions.
            return 0, await self._moved_fences(tokens)
        commit = FencedCommit(
            group=self.group,
            offsets=changed,
            tokens=tokens,
            create=frozenset(tp for tp in changed if tp in self._missing),
        )
        fenced: set[TopicPartition] = set()
        for _ in range(len(tokens) + 3):
            if not commit.tokens:
                return 0, fenced
            result = await self.zk.multi(commit.ops())
            if result.applied:
                for tp, offset in commit.offsets.items():
                    self._checkpoint[tp] = offset
                    self._missing.discard(tp)
                return len(commit.offsets), fenced
            step = judge_fenced_commit(commit, result)
            if step.fenced is not None:
                moved = {step.fenced}
                rest = {tp: t for tp, t in commit.tokens.items() if tp != step.fenced}
                if rest:
                    moved |= await self._moved_fences(rest)
                fenced |= moved
                commit = commit.without(moved)
                continue
            if step.make_parent is not None:
                await self.zk.ensure_path(step.make_parent)
            if step.retry is not None:
                commit = step.retry
        raise ZookeeperError(
            f"fenced offset commit of group {self.group!r} not applied after "
            f"{len(tokens) + 3} transactions (its offset nodes keep changing)"
        )

    async def _moved_fences(self, tokens: Mapping[TopicPartition, int]) -> set[TopicPartition]:
        """The partitions of ``tokens`` whose fence moved on or vanished (one read for all)."""
        items = sorted(tokens.items())
        got = await self.zk.get_many(
            layout.fencing_path(self.group, tp.topic, tp.partition) for tp, _ in items
        )
        return {
            tp
            for (tp, token), node in zip(items, got, strict=True)
            if node is None or int(node[1].version) != token
        }

    async def _commit_one(self, tp: TopicPartition, offset: int) -> object:
        """Write one unfenced partition's offset node; ``_WRITTEN`` or ``_UNCHANGED``."""
        if self._checkpoint.get(tp) == offset:
            return _UNCHANGED
        path = layout.offset_path(self.group, tp.topic, tp.partition)
        await self.zk.set_or_create(path, layout.encode_offset(offset))
        self._checkpoint[tp] = offset
        self._missing.discard(tp)
        return _WRITTEN

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Drop the checkpoints of released partitions."""
        for tp in tps:
            self._checkpoint.pop(tp, None)
            self._missing.discard(tp)

    async def close(self) -> None:
        """Nothing to release: the ZooKeeper client belongs to the connector."""

    def __repr__(self) -> str:
        return (
            f"<ZookeeperOffsetStore group={self.group} [{len(self._checkpoint)} checkpoints, "
            f"{self.commits} commits]>"
        )
