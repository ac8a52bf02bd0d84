"""The connection-loss retry policy of ZooKeeper steps: the original's ``retryUntilConnected``.

The original's ZkClient blocked a call until the connection was back rather than failing
it, for ever. Here a step that is safe to repeat is run again once the session is connected
again, within a window long enough for the session to expire and a new one to be opened
(:func:`connection_retry_window_s`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from ..errors import ZookeeperConnectionError, ZookeeperSessionExpiredError
from .client import ZkClient

__all__ = ["RETRY_PAUSE_S", "connection_retry_window_s", "retry_until_connected"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

RETRY_PAUSE_S = 0.5
"""Pause before retrying a ZooKeeper step after connection loss (once connected again)."""


def connection_retry_window_s(session_timeout_ms: int, connection_timeout_ms: int) -> float:
    """How long a ZooKeeper step is retried across connection loss, in seconds.

    ``2 * zookeeper.session.timeout.ms + zookeeper.connection.timeout.ms``: long enough for
    the session to expire and a new one to be opened once the server is reachable again.
    The original's ZkClient retried for ever (``retryUntilConnected``).
    """
    return (2 * session_timeout_ms + connection_timeout_ms) / 1000


async def retry_until_connected(
    zk: ZkClient,
    what: str,
    op: Callable[[], Awaitable[_T]],
    *,
    window_s: float,
    give_up: Callable[[], bool] = lambda: False,
    log_prefix: str = "",
    logger: logging.Logger = log,
) -> _T:
    """Run a ZooKeeper step; after connection loss or session expiry, run it again.

    Only for steps that are safe to repeat: the step is retried once the session is
    connected again (and :data:`RETRY_PAUSE_S` later: the state may still say connected
    while requests time out), for up to ``window_s`` seconds.

    Args:
        zk: the session.
        what: the step, for the log.
        op: makes and awaits the step.
        window_s: how long to keep retrying, seconds.
        give_up: whether to stop retrying now (the member is closing).
        log_prefix: the member's consumer id, for the log.
        logger: where each retry is logged (WARNING); default this module's.

    Returns:
        What ``op`` returned.

    Raises:
        ZookeeperConnectionError, ZookeeperSessionExpiredError: still failing at the end of
            the window (or ``give_up()``).
        ZookeeperError: any other ZooKeeper failure, at once.
    """
    deadline = anyio.current_time() + window_s
    while True:
        try:
            return await op()
        except (ZookeeperConnectionError, ZookeeperSessionExpiredError) as e:
            remaining = deadline - anyio.current_time()
            if remaining <= 0 or give_up():
                raise
            logger.warning(
                "[%s] %s: %s; retrying when ZooKeeper is back (for up to %.0f s)",
                log_prefix,
                what,
                e,
                remaining,
            )
            with anyio.move_on_after(remaining):
                await zk.wait_for_state("connected")
                await anyio.sleep(min(RETRY_PAUSE_S, remaining))
