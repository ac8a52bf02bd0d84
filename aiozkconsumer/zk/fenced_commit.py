"""A fenced offset commit to ZooKeeper as one transaction: its operations, and what a failed
one means. Pure: the ZooKeeper offset store sends them and acts on the verdicts.

Each partition's offset node (``/consumers/<group>/offsets/<topic>/<p>``, the original's
decimal string) is written only while its fencing node (``fencing/<topic>/<p>``) still has
the version the member saw when it claimed the partition. One ``multi`` holds the check of
every partition's fence and the write of every changed offset: applied, all were written and
no partition was fenced, in one round trip (there used to be an existence check and a
transaction per partition). When it fails, nothing was written, and the operation that
failed says why: a fence moved on (that partition is left out, and the other fences are read
once to leave out every fenced one), an offset node missing (it is created instead) or there
already (written instead), its topic's node missing (created first).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import ZookeeperError, ZookeeperNodeExistsError, ZookeeperNoNodeError
from ..records import TopicPartition
from . import layout
from .ops import Check, Create, MultiResult, Op, SetData

__all__ = ["FencedCommit", "FencedCommitStep", "judge_fenced_commit"]


@dataclass(frozen=True)
class FencedCommit:
    """One round of a fenced commit: the partitions whose fences it checks, the offsets it
    writes.

    Attributes:
        group: ``group.id``.
        offsets: ``{partition: next offset to read}`` to write (each also in ``tokens``).
        tokens: ``{partition: fencing token}`` of every partition whose fence is checked:
            those written, and those whose offset is unchanged (a fenced member must still
            learn that it lost them).
        create: partitions whose offset node is believed missing: created, not written.
    """

    group: str
    offsets: Mapping[TopicPartition, int]
    tokens: Mapping[TopicPartition, int]
    create: frozenset[TopicPartition] = frozenset()

    def ops(self) -> list[Op]:
        """The transaction: per partition, in order, the check of its fence, then the write
        (or create) of its offset node when it has one to write."""
        ops: list[Op] = []
        for tp in sorted(self.tokens):
            ops.append(
                Check(layout.fencing_path(self.group, tp.topic, tp.partition), self.tokens[tp])
            )
            offset = self.offsets.get(tp)
            if offset is None:
                continue
            path = layout.offset_path(self.group, tp.topic, tp.partition)
            data = layout.encode_offset(offset)
            ops.append(Create(path, data) if tp in self.create else SetData(path, data))
        return ops

    def without(self, fenced: Iterable[TopicPartition]) -> FencedCommit:
        """This round without ``fenced`` (neither checked nor written)."""
        out = set(fenced)
        return FencedCommit(
            group=self.group,
            offsets={tp: o for tp, o in self.offsets.items() if tp not in out},
            tokens={tp: t for tp, t in self.tokens.items() if tp not in out},
            create=self.create - out,
        )

    def partition_of(self, path: str) -> TopicPartition | None:
        """The partition whose fencing or offset node ``path`` is (``None``: neither)."""
        for tp in self.tokens:
            if path in (
                layout.fencing_path(self.group, tp.topic, tp.partition),
                layout.offset_path(self.group, tp.topic, tp.partition),
            ):
                return tp
        return None


@dataclass(frozen=True)
class FencedCommitStep:
    """What to do after a fenced commit's transaction failed (nothing was written).

    Attributes:
        fenced: the partition whose fence check failed (its fence moved on or vanished:
            another member claimed it since), or ``None``. The others may be fenced too:
            read their fences (:meth:`FencedCommit.without` those that moved) before the
            next round, unless none is left.
        make_parent: a node to create first (with its parents): an offset node's topic
            node was missing; or ``None``.
        retry: the next round (``None`` when the step is to read the fences first: the
            round without ``fenced`` and any other fenced one).
    """

    fenced: TopicPartition | None = None
    make_parent: str | None = None
    retry: FencedCommit | None = None


def judge_fenced_commit(commit: FencedCommit, result: MultiResult) -> FencedCommitStep:
    """Say why ``commit``'s transaction failed and what the next round is.

    Args:
        commit: the round sent.
        result: its transaction's result, not applied.

    Returns:
        The step.

    Raises:
        ZookeeperError: a failure no round can mend (a write with a version refused); the
            failed operation's error.
    """
    op, error = result.failed_op, result.error
    if op is None or error is None:
        raise ValueError("judge_fenced_commit needs a transaction that was not applied")
    tp = commit.partition_of(op.path)
    if tp is None:
        raise error
    if isinstance(op, Check):
        return FencedCommitStep(fenced=tp)
    if isinstance(op, SetData) and isinstance(error, ZookeeperNoNodeError):
        return FencedCommitStep(retry=_with_create(commit, commit.create | {tp}))
    if isinstance(op, Create) and isinstance(error, ZookeeperNodeExistsError):
        return FencedCommitStep(retry=_with_create(commit, commit.create - {tp}))
    if isinstance(op, Create) and isinstance(error, ZookeeperNoNodeError):
        return FencedCommitStep(make_parent=posixpath.dirname(op.path), retry=commit)
    raise ZookeeperError(f"fenced offset commit refused: {error}") from error


def _with_create(commit: FencedCommit, create: frozenset[TopicPartition]) -> FencedCommit:
    return FencedCommit(
        group=commit.group, offsets=commit.offsets, tokens=commit.tokens, create=create
    )
