"""Fenced offset commits and the auto-commit task.

Every commit of a member is fenced: it lands only for partitions whose fencing token (the
version of ``/consumers/<g>/fencing/<t>/<p>``, bumped by each claim) is still the one this
member saw when it claimed them, so a zombie — a member paused past its session timeout — can
never move the new owner's committed offset back. Beyond the original, which had no fencing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import nullcontext

import anyio

from .config import ConsumerConfig
from .errors import (
    CommitFencedError,
    OffsetStorageError,
    ZookeeperConnectionError,
    ZookeeperError,
    ZookeeperSessionExpiredError,
)
from .metrics import ConsumerMetrics
from .offsets import OffsetStore, ZookeeperOffsetStore
from .ownership import OwnershipState
from .records import TopicPartition
from .zk import layout
from .zk.client import ZkClient

__all__ = ["FencedCommitter"]

log = logging.getLogger(__name__)


class FencedCommitter:
    """Commits offsets of owned partitions through the offset store, fenced.

    Args:
        config: the consumer configuration (``group.id``, ``offsets.commit.max.retries``).
        consumer_id: the consumer id string, for the log.
        zk: the ZooKeeper session (fencing nodes); ``None`` for a Kafka-coordinated group,
            whose commits the group coordinator fences by generation.
        store: the offset store (``offsets.storage``).
        ownership: the member's ownership state (what it owns, the tokens it holds).
        metrics: the metrics whose commit meters each write marks.
        on_fenced: called with the partitions found fenced (another member claimed them
            since): the owner drops them and requests a rebalance.
        on_commit: called with the offsets committed, after each commit that wrote some
            (the interceptors' ``on_commit``).
        session_replaced: whether the ZooKeeper session that claimed the partitions was
            replaced and the member has not yet dropped that ownership (nothing is then
            committed). Settable after construction.
        claiming_session: the id of the ZooKeeper session that claimed the partitions (the
            registration's); a commit's requests are bound to it, so that none of them lands
            under a session that replaced it meanwhile. Settable after construction.
        on_connection_lost: called when a commit fails because ZooKeeper is unreachable or
            the session expired (the commit cannot land, so the partitions may soon be
            another member's): the owner ends its session lease, so that no more records are
            handed out. Settable after construction (the lease is built later).
        auto_commit_paused: whether the auto-commit skips its round now (a
            Kafka-coordinated member between JoinGroup and taking its assignment: the Java
            client's auto-commit runs in ``poll()`` and never while a join is under way; a
            cooperative member keeps its partitions then, and the coordinator would answer
            ``REBALANCE_IN_PROGRESS`` or ``ILLEGAL_GENERATION``). Settable after construction.
    """

    def __init__(
        self,
        config: ConsumerConfig,
        consumer_id: str,
        zk: ZkClient | None,
        store: OffsetStore,
        ownership: OwnershipState,
        metrics: ConsumerMetrics,
        on_fenced: Callable[[set[TopicPartition]], None],
        on_commit: Callable[[Mapping[TopicPartition, int]], None] = lambda offsets: None,
        session_replaced: Callable[[], bool] = lambda: False,
        on_connection_lost: Callable[[], None] = lambda: None,
        claiming_session: Callable[[], int | None] = lambda: None,
        auto_commit_paused: Callable[[], bool] = lambda: False,
    ) -> None:
        self.config = config
        self.consumer_id = consumer_id
        self.zk = zk
        self.store = store
        self.ownership = ownership
        self.metrics = metrics
        self.on_fenced = on_fenced
        self.on_commit = on_commit
        self.session_replaced = session_replaced
        self.on_connection_lost = on_connection_lost
        self.claiming_session = claiming_session
        self.auto_commit_paused = auto_commit_paused

    async def commit(self, offsets: Mapping[TopicPartition, int], retries: int) -> int:
        """Commit owned partitions' offsets, fenced, counting the writes in the commit meters.

        Owned partitions are committed only while their fencing token is unchanged: in the
        same ZooKeeper multi-op with ZooKeeper storage, by a check just before with Kafka
        storage. A partition found fenced, or not owned, is not committed; ``on_fenced`` is
        called with those found fenced.

        Args:
            offsets: ``{tp: next offset to read}``.
            retries: Kafka commit retries (``offsets.commit.max.retries`` or 0).

        Returns:
            The number of partitions written.

        Raises:
            CommitFencedError: some partitions were fenced or not owned (the others were
                committed).
            ZookeeperConnectionError: ZooKeeper is unreachable (or a request timed out);
                ``on_connection_lost`` was called.
            ZookeeperSessionExpiredError: the session expired (``on_connection_lost`` was
                called), or nothing was written: the session that claimed the partitions was
                replaced and the member has not yet dropped that ownership (its owner nodes
                died with the old session: another member may own them).
            OffsetCommitError: Kafka refused some offsets after every attempt.
        """
        if self.session_replaced():
            raise ZookeeperSessionExpiredError(
                "the ZooKeeper session that claimed the partitions expired: not committing "
                "until the member has registered again"
            )
        zk = self.zk
        bound = zk.bound_to(self.claiming_session()) if zk is not None else nullcontext()
        try:
            with bound:
                return await self._commit(offsets, retries)
        except (ZookeeperConnectionError, ZookeeperSessionExpiredError):
            self.on_connection_lost()
            raise

    async def _commit(self, offsets: Mapping[TopicPartition, int], retries: int) -> int:
        store = self.store
        owned = self.ownership
        # Only what this member owns now: a partition it lost (session expiry, fencing) is
        # someone else's to commit.
        fenced: set[TopicPartition] = {tp for tp in offsets if tp not in owned}
        offsets = {tp: o for tp, o in offsets.items() if tp in owned}
        fences = owned.fences(offsets)
        if fences and not isinstance(store, ZookeeperOffsetStore):
            fenced |= await self._fenced(fences)
            offsets = {tp: o for tp, o in offsets.items() if tp not in fenced}
        zk_before, kafka_before = store.zookeeper_commits, store.kafka_commits
        try:
            written = await store.commit(offsets, retries=retries, fences=fences)
        except CommitFencedError as e:
            fenced |= e.fenced
            written = 0
        finally:
            if store.zookeeper_commits > zk_before:
                self.metrics.zookeeper_commits_per_sec().mark(store.zookeeper_commits - zk_before)
            if store.kafka_commits > kafka_before:
                self.metrics.kafka_commits_per_sec().mark(store.kafka_commits - kafka_before)
            done = {tp: o for tp, o in offsets.items() if tp not in fenced}
            owned.record_committed(done)
        if done and written:
            self.on_commit(done)
        if fenced:
            self.on_fenced({tp for tp in fenced if tp in owned})
            raise CommitFencedError(self.config.group_id, fenced)
        return written

    async def _fenced(self, fences: Mapping[TopicPartition, int]) -> set[TopicPartition]:
        """Partitions whose fencing node moved past the token we hold (one read for all)."""
        group = self.config.group_id
        zk = self.zk
        if zk is None:
            return set()
        items = sorted(fences.items())
        got = await zk.get_many(
            layout.fencing_path(group, tp.topic, tp.partition) for tp, _ in items
        )
        return {
            tp
            for (tp, token), node in zip(items, got, strict=True)
            if node is None or node[1].version != token
        }

    async def auto_commit(self, interval_s: float) -> None:
        """Commit the consumed offsets every ``interval_s`` seconds, forever.

        Skipped while the gate is closed (the session is in doubt: another member may own the
        partitions) and while ``auto_commit_paused()`` says so (a Kafka-coordinated member's
        JoinGroup/SyncGroup is under way: the coordinator would refuse the commit); a failure
        is logged and the next round tries again.

        The interval runs from one round's start to the next, as the Java client's auto-commit
        timer (reset when a commit is sent): a commit that took longer than the interval
        (held up by a link cut that healed within the session timeout) is followed by the
        next one at once, rather than a whole interval after it landed, so a crash soon after
        the heal repeats only what was handed out during the cut and not the interval after.
        """
        next_round = anyio.current_time() + interval_s
        while True:
            await anyio.sleep_until(next_round)
            next_round = anyio.current_time() + interval_s
            if not self.ownership.gate.passable() or self.auto_commit_paused():
                continue
            try:
                await self.commit(
                    self.ownership.consumed_offsets(), self.config.offsets_commit_max_retries
                )
            except (ZookeeperError, OffsetStorageError) as e:
                log.warning("[%s] auto-commit failed: %s", self.consumer_id, e)

    def __repr__(self) -> str:
        return f"<FencedCommitter {self.consumer_id} store={type(self.store).__name__}>"
