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

from .errors import ZookeeperError
from .records import OwnershipGate
from .zk.client import ZkClient

__all__ = ["LEASE_FRACTION", "SessionLease"]

log = logging.getLogger(__name__)

LEASE_FRACTION = 0.8
"""Share of the session timeout a successful ZooKeeper round trip extends the lease by."""


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
        """End the lease at once (no record is handed out until a round trip succeeds)."""
        self.gate.extend(min(self.gate.deadline, time.monotonic()))

    async def renew(self) -> None:
        """Keep the lease, forever: each ZooKeeper round trip proves the session alive.

        The server cannot expire the session sooner than one (negotiated) session timeout
        after it heard from us, so a round trip started at ``t0`` extends the lease to
        ``t0 + 0.8 x timeout``. A process paused past that (or cut off) finds its lease over
        when it wakes up, and hands out nothing until the session is confirmed again.
        """
        while True:
            t0 = time.monotonic()
            timeout_s = self.zk.negotiated_timeout_s
            try:
                with anyio.fail_after(timeout_s / 2):
                    await self.zk.exists("/")
            except (ZookeeperError, TimeoutError) as e:
                log.debug("[%s] lease renewal failed: %r", self.consumer_id, e)
                self.end_now()
            else:
                self.gate.extend(t0 + LEASE_FRACTION * timeout_s)
            await anyio.sleep(timeout_s / 4)

    async def watch_connection(self) -> None:
        """End the lease the moment the ZooKeeper connection drops, forever."""
        async for _ in self.zk.connection_drops():
            if not self.is_closing():
                log.info("[%s] ZooKeeper connection dropped", self.consumer_id)
                self.end_now()

    def __repr__(self) -> str:
        return f"<SessionLease {self.consumer_id} deadline={self.gate.deadline:.3f}>"
