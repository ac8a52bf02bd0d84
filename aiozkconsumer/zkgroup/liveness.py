"""Poll liveness of a ZooKeeper member: ``zookeeper.poll.liveness.enable``.

The ZooKeeper counterpart of the Kafka members' ``max.poll.interval.ms`` check
(``group/base.py``), off by default: the original (0.10.2) had none. When a stream's reader
holds a record or batch for ``max.poll.interval.ms`` without asking for the next, the member
gives its partitions up through the hand-over (committing their consumed offsets first, as a
rebalance does) and deletes its registration node, so the other members' watches rebalance
and take the partitions over; the member is *stale* until the reader asks again, then it
registers anew and rebalances back in. Which readers expired is the pure
:func:`~aiozkconsumer.queues.check_poll_interval`, the rule both coordinators share.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import anyio

from ..errors import ConsumerError
from ..handover import MemberParts, ReleaseStep
from ..queues import PollCheck, PollingReader, check_poll_interval
from .membership import Membership

__all__ = ["PollLiveness"]

log = logging.getLogger(__name__)


class PollLiveness:
    """Deregisters this member while a reader holds past ``max.poll.interval.ms``.

    Args:
        parts: what the connector gives every coordinator (ownership, hand-over, config).
        membership: the registration node (deleted on expiry, written again on the rejoin).
        release_step: the rebalancer's owner-node delete, the hand-over's step.
        rebalance_lock: the lock the connector's rebalances hold: an expiry's release and
            deregistration never interleave with a rebalance.
        request_rebalance: asks the connector's rebalance worker for a rebalance (the rejoin).
        retry: runs a ZooKeeper step again across connection loss (the registration delete).

    Attributes:
        poll_timeouts: how often a reader held past the interval and the member deregistered
            for it, all time.
    """

    def __init__(
        self,
        parts: MemberParts,
        *,
        membership: Membership,
        release_step: ReleaseStep,
        rebalance_lock: anyio.Lock,
        request_rebalance: Callable[[str], None],
        retry: Callable[[str, Callable[[], Awaitable[bool]]], Awaitable[bool]],
    ) -> None:
        self.config = parts.config
        self.consumer_id = parts.consumer_id
        self.ownership = parts.ownership
        self.handover = parts.handover
        self.is_closing = parts.is_closing
        self.on_change = parts.on_attempt_failed
        self.membership = membership
        self.release_step = release_step
        self.rebalance_lock = rebalance_lock
        self.request_rebalance = request_rebalance
        self.retry = retry
        self.poll_timeouts = 0

    @property
    def interval_s(self) -> float:
        """``max.poll.interval.ms`` in seconds."""
        return self.config.max_poll_interval_ms / 1000

    def _readers(self) -> list[PollingReader]:
        return [q.reader for q in self.ownership.queues() if q.reader is not None]

    def _check(self) -> PollCheck:
        return check_poll_interval(
            {r.name: r.held_since() for r in self._readers()}, time.monotonic(), self.interval_s
        )

    async def run(self) -> None:
        """The liveness task: deregister on expiry, register again when the reader asks.

        Wakes at the earliest moment a reader can expire and, while stale, whenever a reader
        starts waiting for records. Never raises a ZooKeeper or consumer error (logged); the
        connector's task group cancels it at shutdown.
        """
        while not self.is_closing():
            check = self._check()
            if self.membership.stale:
                if check.expired:
                    await self._wait_for_poll(self.interval_s)
                    continue
                log.info(
                    "[%s] the reader asks for records again after the poll timeout: "
                    "registering in group %s again",
                    self.consumer_id,
                    self.config.group_id,
                )
                self.membership.end_stale()
                self.request_rebalance("the reader asked for records after a poll timeout")
                continue
            if check.expired:
                await self._expire()
                continue
            await anyio.sleep(check.next_check_s or self.interval_s)

    async def _wait_for_poll(self, limit_s: float) -> None:
        """Until a reader starts waiting for records, or ``limit_s`` seconds."""
        readers = self._readers()
        woken = anyio.Event()
        for reader in readers:
            reader.wake_on_poll(woken)
        try:
            with anyio.move_on_after(limit_s):
                await woken.wait()
        finally:
            for reader in readers:
                reader.wake_on_poll(None)

    async def _expire(self) -> None:
        """A reader held past the interval: WARNING, release with commit, deregister.

        Under the rebalance lock and re-checked there (a rebalance may have run meanwhile).
        The release is the hand-over's (consumed offsets committed first with auto-commit on,
        the listener's ``before_releasing_partitions``, then the owner nodes deleted); the
        registration node is deleted last, so the others' rebalance finds the partitions free.
        A failed release or delete is logged; the member stays stale all the same (a
        registration left behind goes with the session, or with the rejoin's next write).
        """
        async with self.rebalance_lock:
            if self.is_closing() or self.membership.stale:
                return
            check = self._check()
            if not check.expired:
                return
            log.warning(
                "[%s] consumer poll timeout has expired: stream %s held what it was handed "
                "for %.1f s without asking for more, longer than max.poll.interval.ms=%d; "
                "committing its consumed offsets and leaving ZooKeeper group %s (it registers "
                "again when the stream is read again)",
                self.consumer_id,
                ", ".join(check.expired),
                check.longest_s,
                self.config.max_poll_interval_ms,
                self.config.group_id,
            )
            self.poll_timeouts += 1
            self.membership.stale = True
            owned = self.ownership.owned()
            try:
                if owned:
                    await self.handover.release(owned, step=self.release_step)
                await self.retry("deregistration", self.membership.deregister)
            except ConsumerError as e:
                log.warning("[%s] leaving the group on the poll timeout: %s", self.consumer_id, e)
            self.on_change()
