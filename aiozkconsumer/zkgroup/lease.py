"""The session lease: records flow only while the ZooKeeper session is proven alive.

Beyond the original, which kept handing out records while its session might already have
expired (a paused process, a cut link): each successful ZooKeeper round trip extends the
ownership gate's lease; a dropped connection ends it at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio

from ..errors import ZookeeperError
from ..records import OwnershipGate
from ..zk.client import ZkClient

__all__ = [
    "DETECTION_FRACTION",
    "LEASE_FRACTION",
    "RENEWAL_LIMIT_FRACTION",
    "RENEWAL_PERIOD_FRACTION",
    "SessionLease",
]

log = logging.getLogger(__name__)

LEASE_FRACTION = 0.8
"""Share of the session timeout for which a round trip proves the session ours: the server
cannot expire it sooner than one session timeout after it heard from us. An upper bound; the
lease a round trip grants is :data:`DETECTION_FRACTION`, shorter."""

DETECTION_FRACTION = 1 / 3
"""``D``: share of the session timeout after the start of the last answered round trip past
which records are held back, however busy the event loop (the gate checks the deadline before
every record). A cut link is thus detected within ``D`` = session timeout / 3, the interval at
which the Java ZooKeeper client pings (half its read timeout)."""

RENEWAL_PERIOD_FRACTION = 1 / 12
"""Share of the session timeout between the end of one renewal round trip and the next."""

RENEWAL_LIMIT_FRACTION = 1 / 4
"""Share of the session timeout a renewal round trip may take before it counts as missed
(ending the lease): period + limit = ``D``."""


class SessionLease:
    """Keeps an ownership gate's lease in step with the ZooKeeper session.

    Args:
        zk: the session.
        gate: the gate whose ``deadline`` is the lease.
        consumer_id: for the log.
        is_closing: whether the owner is shutting down (a dropped connection is then
            expected and not logged).
    """

    def __init__(
        self,
        zk: ZkClient,
        gate: OwnershipGate,
        consumer_id: str,
        is_closing: Callable[[], bool],
    ) -> None:
        self.zk = zk
        self.gate = gate
        self.consumer_id = consumer_id
        self.is_closing = is_closing

    def end_now(self) -> None:
        """End the lease at once (no record is handed out until a round trip succeeds).

        Called on a missed renewal, a dropped connection, and (through the committer's
        ``on_connection_lost``) an offset commit that failed for want of ZooKeeper.
        """
        self.gate.end_lease()

    def lease_s(self) -> float:
        """How long an answered round trip keeps records flowing, from its start, seconds.

        ``min(LEASE_FRACTION, DETECTION_FRACTION)`` x the negotiated session timeout: ``D``.
        """
        return min(LEASE_FRACTION, DETECTION_FRACTION) * self.zk.negotiated_timeout_s

    async def renew(self) -> None:
        """Keep the lease, forever: each ZooKeeper round trip proves the session alive.

        A round trip started at ``t0`` and answered extends the lease to ``t0 + D`` (``D`` =
        session timeout / 3; see :meth:`lease_s`); the server cannot expire the session sooner
        than a session timeout after it heard from us, so the session is ours meanwhile. A
        round trip every twelfth of the timeout keeps the lease from running out; one that
        fails, or takes longer than a quarter of the timeout, ends it at once. A process
        paused past the lease (or cut off) finds it over when it wakes up, and hands out
        nothing until the session is confirmed again. While aiozk reports the session
        suspended (the gate is closed meanwhile), the next round trip waits for it to be
        connected again, so records flow again as soon as it is.
        """
        while True:
            await self.zk.wait_for_state("connected")
            t0 = time.monotonic()
            timeout_s = self.zk.negotiated_timeout_s
            try:
                with anyio.fail_after(RENEWAL_LIMIT_FRACTION * timeout_s):
                    await self.zk.exists("/")
            except (ZookeeperError, TimeoutError) as e:
                log.debug("[%s] lease renewal failed: %r", self.consumer_id, e)
                self.end_now()
            else:
                self.gate.extend(t0 + self.lease_s())
            await anyio.sleep(RENEWAL_PERIOD_FRACTION * timeout_s)

    async def watch_connection(self) -> None:
        """End the lease the moment the ZooKeeper connection drops, forever."""
        async for _ in self.zk.connection_drops():
            if not self.is_closing():
                log.info("[%s] ZooKeeper connection dropped", self.consumer_id)
                self.end_now()

    def __repr__(self) -> str:
        return f"<SessionLease {self.consumer_id} deadline={self.gate.deadline:.3f}>"
