"""The owner nodes and fencing tokens of a ZooKeeper group: claiming, waiting, undoing.

``/consumers/<group>/owners/<topic>/<partition>`` (ephemeral, the original's layout) says who
owns a partition; ``fencing/<topic>/<partition>`` (ours) carries a token each claim moves on,
so that a former owner that has not noticed can no longer commit. A claim that conflicts
with a member that has not yet released keeps the claims already made and waits (a watch,
at most ``rebalance.backoff.ms`` per wait) only on the blocking owner nodes, for as long as
the group's membership is unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from .._concurrency import gather, gather_outcomes
from ..config import ConsumerConfig
from ..errors import ZookeeperError, ZookeeperSessionExpiredError
from ..plan import decide_claims, decide_fencing
from ..records import TopicPartition
from ..subscription import ConsumerThreadId
from ..zk import layout
from ..zk.client import ZkClient
from .membership import Membership

__all__ = ["OwnerNodes"]

log = logging.getLogger(__name__)


class OwnerNodes:
    """One member's owner nodes and fencing tokens.

    Args:
        config: the consumer configuration (``group.id``, ``rebalance.backoff.ms``).
        consumer_id: this member's consumer id string.
        zk: the ZooKeeper session.
        membership: this member's registration (the session its claims are bound to).
        membership_changed: whether the group's membership changed since the view.
        is_closing: whether the member is shutting down (waits stop).
        lap: ends a phase of the rebalance's clock (``claim``, ``claim_wait``).

    Attributes:
        waits_left: how many waits on blocking owner nodes the attempt may still make.
        replan_now: the membership changed while claiming: plan again at once.
    """

    def __init__(
        self,
        *,
        config: ConsumerConfig,
        consumer_id: str,
        zk: ZkClient,
        membership: Membership,
        membership_changed: Callable[[], Awaitable[bool]],
        is_closing: Callable[[], bool],
        lap: Callable[[str], None],
    ) -> None:
        self.config = config
        self.consumer_id = consumer_id
        self.zk = zk
        self.membership = membership
        self.membership_changed = membership_changed
        self.is_closing = is_closing
        self.lap = lap
        self.waits_left = 0
        self.replan_now = False

    async def claim(
        self, mine: Mapping[TopicPartition, ConsumerThreadId], blocking: list[str]
    ) -> set[TopicPartition] | None:
        """Create our owner nodes (``reflectPartitionOwnershipDecision``), waiting out conflicts.

        Tries all, not stopping at the first conflict. On a conflict it keeps the nodes it
        created and waits for the blocking ones to be deleted (all watched at once, at most
        ``rebalance.backoff.ms`` per wait, as many waits as the rebalance has attempts left),
        then claims those again, as long as the membership read with the view is unchanged
        (read again with those claims, in the same round trip). When it changed, or the waits
        ran out, it deletes every node this attempt created and returns ``None`` (``blocking``
        then names the owner nodes still in the way).

        Returns:
            The partitions whose claim had to wait, or ``None`` when the attempt failed.

        Raises:
            ZookeeperError: a create, a wait or the membership read failed; every node this
                attempt created was deleted first (best effort).
        """
        group = self.config.group_id
        backoff_s = self.config.effective_rebalance_backoff_ms / 1000
        pending = dict(mine)
        held: set[TopicPartition] = set()
        waited: set[TopicPartition] = set()
        after_wait = False
        while True:
            items = sorted(pending.items())
            results, changed = await self._create(items, check_membership=after_wait)
            outcome = decide_claims(dict(zip((tp for tp, _ in items), results, strict=True)))
            self.lap("claim")
            held |= outcome.created
            error = outcome.error if outcome.error is not None else changed
            if isinstance(error, Exception):
                await self.undo(held, swallow=True)
                raise error
            if changed:
                log.info("[%s] the group's membership changed: planning again", self.consumer_id)
                self.replan_now = True
                await self.undo(held, swallow=False)
                return None
            if not outcome.blocking:
                return waited
            paths = []
            for tp in sorted(outcome.blocking):
                log.info(
                    "[%s] waiting for the partition ownership to be deleted: %s for topic %s",
                    self.consumer_id,
                    tp.partition,
                    tp.topic,
                )
                paths.append(layout.owner_path(group, tp.topic, tp.partition))
            if self.waits_left <= 0 or self.is_closing():
                blocking.extend(paths)
                await self.undo(held, swallow=False)
                return None
            self.waits_left -= 1
            try:
                await self.wait_deleted(paths, backoff_s)
            except ZookeeperError:
                await self.undo(held, swallow=True)
                raise
            self.lap("claim_wait")
            waited |= outcome.blocking
            pending = {tp: mine[tp] for tp in outcome.blocking}
            after_wait = True

    async def _create(
        self, items: Iterable[tuple[TopicPartition, ConsumerThreadId]], *, check_membership: bool
    ) -> tuple[list[bool | Exception], bool | Exception]:
        """Create the owner nodes of ``items``, all in flight at once, and with them (when
        ``check_membership``) read whether the membership changed since the view.

        Returns:
            ``(per item: True created / False another value there / the exception its create
            raised, membership changed: a bool or the exception its read raised)``; never
            raises but cancellation (every create runs to its end, so each one that succeeded
            is known and can be undone).
        """
        group = self.config.group_id
        results: list[bool | Exception] = []
        changed: bool | Exception = False

        async def create_all() -> None:
            results.extend(
                await gather_outcomes(
                    self.zk.create_ephemeral_expect_conflict(
                        layout.owner_path(group, tp.topic, tp.partition),
                        layout.encode_owner(str(tid)),
                    )
                    for tp, tid in items
                )
            )

        async def read_membership() -> None:
            nonlocal changed
            try:
                changed = await self.membership_changed()
            except ZookeeperError as e:
                changed = e

        await gather([create_all(), read_membership()] if check_membership else [create_all()])
        return results, changed

    async def wait_deleted(self, paths: Iterable[str], timeout_s: float) -> None:
        """Wait until every node of ``paths`` is gone, at most ``timeout_s`` seconds, all
        watched at once (``ZkClient.wait_deleted`` looks at one after the other: a round trip
        each, even when they are gone already)."""
        await gather(self.zk.wait_deleted([path], timeout_s) for path in paths)

    async def undo(self, tps: Iterable[TopicPartition], *, swallow: bool) -> None:
        """Delete owner nodes this attempt created (best effort when ``swallow``)."""
        group = self.config.group_id
        paths = [layout.owner_path(group, tp.topic, tp.partition) for tp in sorted(tps)]
        if not paths:
            return
        if swallow:
            await gather_outcomes(self.zk.delete(p) for p in paths)
        else:
            await gather(self.zk.delete(p) for p in paths)

    async def fence(
        self, claimed: Mapping[TopicPartition, ConsumerThreadId]
    ) -> dict[TopicPartition, int]:
        """Move each claimed partition's fencing token on, so a former owner (a zombie that
        has not noticed yet) can no longer commit it.

        Returns:
            ``{partition: its new fencing token}``.

        Raises:
            ZookeeperError: a bump failed; every claim of this attempt was deleted again
                first (no owner node stays without an entry in the ownership state).
        """
        group = self.config.group_id
        items = sorted(claimed.items())
        results = await gather_outcomes(
            self.zk.bump(
                layout.fencing_path(group, tp.topic, tp.partition), layout.encode_owner(str(tid))
            )
            for tp, tid in items
        )
        outcome = decide_fencing(dict(zip((tp for tp, _ in items), results, strict=True)))
        if outcome.error is not None:
            await self.undo(outcome.undo, swallow=True)
            raise outcome.error
        return dict(outcome.tokens)
    async def delete_owned(self, tps: Iterable[TopicPartition]) -> None:
        """Delete our owner nodes of ``tps``, only our own: after a session expiry a node may
        be another member's by now.

        The deletes are bound to the session that registered this member, which claimed
        every owned partition (a new session drops the ownership before it claims anything):
        while that session lives, an owner node of an owned partition is its own (no other
        session can delete an ephemeral node it holds, nor create one at its path), so a
        delete is one round trip, without reading the node's owner first. Once that session
        was replaced, its nodes are gone with it and nothing is deleted.

        Raises:
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        group = self.config.group_id
        paths = [layout.owner_path(group, tp.topic, tp.partition) for tp in sorted(tps)]
        try:
            with self.zk.bound_to(self.membership.registered_session):
                await gather(self.zk.delete(path) for path in paths)
        except ZookeeperSessionExpiredError:
            log.info(
                "[%s] the session that claimed %d partition(s) expired: their owner nodes are "
                "gone with it",
                self.consumer_id,
                len(paths),
            )
