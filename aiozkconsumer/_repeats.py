"""Repeated warnings, rate-limited: one line per key per interval, with a count of the rest.

With every broker down, the leader finder retries every ``refresh.leader.backoff.ms``
(200 ms) and aiokafka logs each failed connection and metadata request: about 30 lines a
second, which bury everything else. :class:`Repeats` lets the first of a run through, then
one line per :data:`REPEAT_INTERVAL_S` saying how many were left out; :func:`throttle_aiokafka`
applies it to aiokafka's two connection errors (a filter on its logger, per broker).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable

__all__ = ["REPEAT_INTERVAL_S", "Repeats", "throttle_aiokafka"]

REPEAT_INTERVAL_S = 10.0
"""How often a repeated warning is logged again (seconds)."""


class Repeats:
    """Decides which of a run of repeated log lines to write.

    Args:
        interval_s: the least time between two lines of one key.
        clock: the clock (``time.monotonic``; a test's own).
    """

    def __init__(
        self, interval_s: float = REPEAT_INTERVAL_S, clock: Callable[[], float] | None = None
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock or time.monotonic
        self._runs: dict[Hashable, tuple[float, int]] = {}
        self._lock = threading.Lock()  # logging filters may run on any thread

    def allow(self, key: Hashable) -> int | None:
        """Whether to log the line of ``key`` now.

        Returns:
            ``None``: leave it out (counted). A number: log it, and say that this many like it
            were left out since the last one logged (0: none).
        """
        now = self._clock()
        with self._lock:
            last, left_out = self._runs.get(key, (-float("inf"), 0))
            if now - last < self.interval_s:
                self._runs[key] = (last, left_out + 1)
                return None
            self._runs[key] = (now, 0)
            return left_out

    def forget(self, key: Hashable) -> None:
        """End the run of ``key`` (the condition cleared): its next line is logged at once."""
        with self._lock:
            self._runs.pop(key, None)

    def warning(self, logger: logging.Logger, key: Hashable, msg: str, *args: object) -> None:
        """``logger.warning(msg, *args)`` unless ``key`` was logged within the interval; the
        line logged after a run says how many were left out."""
        left_out = self.allow(key)
        if left_out is not None:
            logger.warning("%s%s", msg % args if args else msg, self.suffix(left_out))

    def suffix(self, left_out: int) -> str:
        """`` (N more like it in the last S s)`` for a count from :meth:`allow`; ``""`` for 0."""
        if not left_out:
            return ""
        return f" ({left_out} more like it in the last {self.interval_s:.0f} s)"


_AIOKAFKA_REPEATED = frozenset(
    {
        "Unable connect to node with id %s: %s",
        "Unable to update metadata from %s",
    }
)
"""aiokafka's messages (``aiokafka/client.py``) logged at every retry against a down broker."""


class _AiokafkaFilter(logging.Filter):
    def __init__(self, repeats: Repeats) -> None:
        super().__init__()
        self.repeats = repeats

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg not in _AIOKAFKA_REPEATED or not isinstance(record.args, tuple):
            return True
        # One run per message and broker (the first argument: the node id or ids).
        left_out = self.repeats.allow((record.msg, str(record.args[:1])))
        if left_out is None:
            return False
        if left_out:
            record.msg = f"{record.msg}{self.repeats.suffix(left_out)}"
        return True


_installed: _AiokafkaFilter | None = None


def throttle_aiokafka() -> None:
    """Rate-limit aiokafka's repeated connection errors on its ``aiokafka`` logger (once per
    process; every other aiokafka line passes untouched)."""
    global _installed
    if _installed is None:
        _installed = _AiokafkaFilter(Repeats())
        logging.getLogger("aiokafka").addFilter(_installed)
