"""The owner nodes and fencing tokens of a ZooKeeper group: claiming, waiting, undoing.

``/consumers/<group>/owners/<topic>/<partition>`` (ephemeral, the original's layout) says who
owns a partition; ``fencing/<topic>/<partition>`` (ours) carries a token each claim moves on,
so that a former owner that has not noticed can no longer commit. A claim that conflicts
with a member that has not yet released keeps the claims already made and waits (a watch,
at most ``rebalance.backoff.ms`` per wait) only on the blocking owner nodes, for as long as
the group's membership is unchanged.

Each step is one ZooKeeper transaction where it can be (``multi``: one request, one entry in
the server's log, all or nothing): the claims together with their fencing bumps, the deletes.
When a transaction fails (a claim another member still holds, a node already gone, a fencing
node never written), nothing of it happened, and the step is done one request per node, as
the original did, so that each node's outcome is known.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from .._concurrency import gather, gather_outcomes
from ..config import ConsumerConfig
from ..errors import ZookeeperError, ZookeeperSessionExpiredError
from ..plan import (
    claim_transaction,
    decide_claims,
    decide_fencing,
    delete_transaction,
    fence_transaction,
    fencing_tokens,
)
from ..records import TopicPartition
from ..subscription import ConsumerThreadId
from ..zk import layout
from ..zk.client import ZkClient
from ..zk.ops import MAX_TRANSACTION_PARTITIONS
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
        # Fencing tokens bumped together with the claims of the current attempt.
        self._tokens: dict[TopicPartition, int] = {}
        self.read_with_claims: dict[str, bytes | None] | None = None
        """``{path: data or None}`` of the nodes read with the claims of the last
        :meth:`claim` (``None``: not read with them)."""

    async def claim(
        self,
        mine: Mapping[TopicPartition, ConsumerThreadId],
        blocking: list[str],
        *,
        read_after: Sequence[str] = (),
    ) -> set[TopicPartition] | None:
        """Create our owner nodes (``reflectPartitionOwnershipDecision``), waiting out conflicts.

        All in one transaction with their fencing bumps (:func:`plan.claim_transaction`)
        first; when that fails, nothing of it happened, and each node is created alone. Tries
        all, not stopping at the first conflict. On a conflict it keeps the nodes it
        created and waits for the blocking ones to be deleted (all watched at once, at most
        ``rebalance.backoff.ms`` per wait, as many waits as the rebalance has attempts left),
        then claims those again, as long as the membership read with the view is unchanged
        (read again with those claims, in the same round trip). When it changed, or the waits
        ran out, it deletes every node this attempt created and returns ``None`` (``blocking``
        then names the owner nodes still in the way).

        With ``read_after``, those nodes are read right behind each transaction, in the same
        round trip (it is applied before they are read); when one was applied, every claim
        of the attempt held and every token had moved on (a round after a wait writes the
        fences of the claims it holds already too), and :attr:`read_with_claims` holds what
        they read, so that the caller need not read them again.

        Returns:
            The partitions whose claim had to wait, or ``None`` when the attempt failed.

        Raises:
            ZookeeperError: a create, a wait or the membership read failed; every node this
                attempt created was deleted first (best effort).
        """
        group = self.config.group_id
        backoff_s = self.config.effective_rebalance_backoff_ms / 1000
        self._tokens = {}
        self.read_with_claims = None
        pending = dict(mine)
        held: set[TopicPartition] = set()
        waited: set[TopicPartition] = set()
        after_wait = False
        while True:
            items = sorted(pending.items())
            unfenced = {tp: mine[tp] for tp in held if tp not in self._tokens}
            results, changed = await self._create(
                items, check_membership=after_wait, read_after=read_after, unfenced=unfenced
            )
            outcome = decide_claims(dict(zip((tp for tp, _ in items), results, strict=True)))
            self.lap("claim")
            held |= outcome.created
            error = outcome.error if outcome.error is not None else changed
            if isinstance(error, Exception) or changed:
                self.read_with_claims = None
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
        self,
        items: Iterable[tuple[TopicPartition, ConsumerThreadId]],
        *,
        check_membership: bool,
        read_after: Sequence[str] = (),
        unfenced: Mapping[TopicPartition, ConsumerThreadId] | None = None,
    ) -> tuple[list[bool | Exception], bool | Exception]:
        """Create the owner nodes of ``items`` and with them (when ``check_membership``) read
        whether the membership changed since the view.

        The creates and the fencing bumps of ``items`` (and of ``unfenced``, the claims
        held from an earlier round) are one transaction first: applied, every claim holds and
        its token is kept for :meth:`fence`, and ``read_after`` is read right behind it
        (:attr:`read_with_claims`). Failed (a node another member holds, a missing parent or
        fencing node), nothing happened, and the owner nodes are created one request each,
        all in flight at once.

        Returns:
            ``(per item: True created / False another value there / the exception its create
            raised, membership changed: a bool or the exception its read raised)``; never
            raises but cancellation (every create runs to its end, so each one that succeeded
            is known and can be undone).
        """
        group = self.config.group_id
        items = list(items)
        results: list[bool | Exception] = []
        changed: bool | Exception = False

        async def create_all() -> None:
            claims = dict(items)
            if 0 < len(claims) + len(unfenced or {}) <= MAX_TRANSACTION_PARTITIONS:
                try:
                    result, read = await self.zk.multi_and_read(
                        claim_transaction(group, claims, unfenced), read_after
                    )
                except ZookeeperError as e:
                    results.extend([e] * len(items))
                    return
                if result.applied:
                    # Every claim of the attempt holds now, and every token moved on.
                    self._tokens.update(
                        fencing_tokens(group, {**(unfenced or {}), **claims}, result)
                    )
                    if read is not None:
                        self.read_with_claims = {
                            path: None if got is None else got[0]
                            for path, got in zip(read_after, read, strict=True)
                        }
                    results.extend([True] * len(items))
                    return
                log.debug("[%s] claim transaction not applied: %s", self.consumer_id, result.error)
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
        """Delete owner nodes this attempt created (best effort when ``swallow``): one
        transaction, or one request each when it fails (a node already gone)."""
        tps = sorted(set(tps))
        for tp in tps:
            self._tokens.pop(tp, None)
        if not tps:
            return
        if swallow:
            await gather_outcomes([self._delete(tps, swallow=True)])
        else:
            await self._delete(tps)

    async def _delete(self, tps: list[TopicPartition], *, swallow: bool = False) -> None:
        """Delete the owner nodes of ``tps``: one transaction; when it fails (a node already
        gone), each alone, all in flight at once (a missing node is fine; with ``swallow``
        every delete runs to its end and failures are ignored)."""
        group = self.config.group_id
        if len(tps) <= MAX_TRANSACTION_PARTITIONS:
            result = await self.zk.multi(delete_transaction(group, tps))
            if result.applied:
                return
        deletes = (self.zk.delete(layout.owner_path(group, tp.topic, tp.partition)) for tp in tps)
        if swallow:
            await gather_outcomes(deletes)
        else:
            await gather(deletes)

    async def fence(
        self, claimed: Mapping[TopicPartition, ConsumerThreadId]
    ) -> dict[TopicPartition, int]:
        """Move each claimed partition's fencing token on, so a former owner (a zombie that
        has not noticed yet) can no longer commit it.

        A claim made in one transaction with its bump already did (:meth:`claim`); the others
        are bumped in one transaction, or one request each (creating the fencing node) when
        it fails (a partition never claimed before).

        Returns:
            ``{partition: its new fencing token}``.

        Raises:
            ZookeeperError: a bump failed; every claim of this attempt was deleted again
                first (no owner node stays without an entry in the ownership state).
        """
        group = self.config.group_id
        tokens = {tp: self._tokens[tp] for tp in claimed if tp in self._tokens}
        self._tokens = {}
        rest = {tp: tid for tp, tid in claimed.items() if tp not in tokens}
        if not rest:
            return tokens
        if len(rest) <= MAX_TRANSACTION_PARTITIONS:
            try:
                result = await self.zk.multi(fence_transaction(group, rest))
            except ZookeeperError:
                await self.undo(claimed, swallow=True)
                raise
            if result.applied:
                tokens.update(fencing_tokens(group, rest, result))
                return tokens
        items = sorted(rest.items())
        results = await gather_outcomes(
            self.zk.bump(
                layout.fencing_path(group, tp.topic, tp.partition), layout.encode_owner(str(tid))
            )
            for tp, tid in items
        )
        outcome = decide_fencing(dict(zip((tp for tp, _ in items), results, strict=True)))
        if outcome.error is not None:
            await self.undo(claimed, swallow=True)
            raise outcome.error
        tokens.update(outcome.tokens)
        return tokens

    async def delete_owned(self, tps: Iterable[TopicPartition]) -> None:
        """Delete our owner nodes of ``tps``, only our own: after a session expiry a node may
        be another member's by now.

        The deletes are bound to the session that registered this member, which claimed
        every owned partition (a new session drops the ownership before it claims anything):
        while that session lives, an owner node of an owned partition is its own (no other
        session can delete an ephemeral node it holds, nor create one at its path), so a
        delete is one round trip, without reading the node's owner first. Once that session
        was replaced, its nodes are gone with it and nothing is deleted. One transaction for
        all, or one request each when it fails (a node already gone).

        Raises:
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        tps = sorted(set(tps))
        if not tps:
            return
        try:
            with self.zk.bound_to(self.membership.registered_session):
                await self._delete(tps)
        except ZookeeperSessionExpiredError:
            log.info(
                "[%s] the session that claimed %d partition(s) expired: their owner nodes are "
                "gone with it",
                self.consumer_id,
                len(tps),
            )
