"""Where a ZooKeeper rebalance's time goes: its phases, a clock that sums them, the record.

Every rebalance is timed by phase (:class:`RebalancePhases`, :data:`PHASES`): kept in
``Rebalancer.phase_history`` next to ``history`` and logged at DEBUG, so that a slow rebalance
says where its time went. Pure: no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["PHASES", "PhaseClock", "RebalancePhases"]

PHASES = (
    "session",
    "view",
    "plan",
    "release_commit",
    "release_listener",
    "release_delete",
    "claim",
    "claim_wait",
    "fence",
    "offsets",
    "start_listener",
    "start_fetchers",
    "retry_wait",
)
"""The phases of a rebalance, in order (each summed over the rebalance's attempts):

- ``session``: a replaced session dropped and registered again.
- ``view``: the own registration, brokers, topics, the members and their subscriptions,
  partitions per topic (read concurrently).
- ``plan``: the assignment and the moves (pure, CPU only).
- ``release_commit``: the consumed offsets of the partitions that move committed.
- ``release_listener``: ``before_releasing_partitions``.
- ``release_delete``: their owner nodes deleted.
- ``claim``: the acquired partitions' owner nodes created (each round of creates, with the
  membership read again after a wait).
- ``claim_wait``: waiting for blocking owner nodes' deletion (all watched at once).
- ``fence``: the fencing tokens bumped.
- ``offsets``: the committed offsets of the acquired partitions read, once the claims hold
  (a malformed node's claim is deleted again).
- ``start_listener``: ``before_starting_fetchers``.
- ``start_fetchers``: the fetchers started or given the new partitions.
- ``retry_wait``: between failed attempts (back-off, owner nodes, the connection).
"""


class PhaseClock:
    """Sums the time between successive :meth:`lap` calls into named phases.

    Synchronous and never blocking: the rebalance worker calls ``lap(phase)`` when a phase
    ends; the time since the previous lap (or since the clock was made) is added to it.

    Args:
        clock: the time source, seconds (``time.monotonic``).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last = clock()
        self._totals: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        """End ``phase`` now: add the time since the previous lap to it."""
        now = self._clock()
        self._totals[phase] = self._totals.get(phase, 0.0) + (now - self._last)
        self._last = now

    def totals_ms(self) -> dict[str, float]:
        """``{phase: milliseconds}`` of the phases lapped so far, in :data:`PHASES` order
        (others after them, in the order first lapped)."""
        order = {p: i for i, p in enumerate(PHASES)}
        names = sorted(self._totals, key=lambda p: order.get(p, len(order)))
        return {p: self._totals[p] * 1000.0 for p in names}


@dataclass(frozen=True)
class RebalancePhases:
    """Where one rebalance's time went.

    Attributes:
        started_at: wall-clock start, seconds since the epoch (the ``started_at`` of the
            ``RebalanceRecord`` of the same rebalance).
        queued_ms: from the first trigger since the previous rebalance started (a watch
            firing, a new session) to this rebalance's start: coalescing and waiting for the
            rebalance lock; ``None`` for a rebalance nobody triggered (the initial one).
        phases: ``{phase: milliseconds}``, see :data:`PHASES`; phases not reached are absent.
    """

    started_at: float
    queued_ms: float | None
    phases: Mapping[str, float]

    def describe(self) -> str:
        """``"queued 3 ms, view 12 ms, ..."`` for the log."""
        parts = [] if self.queued_ms is None else [f"queued {self.queued_ms:.0f} ms"]
        parts += [f"{p} {v:.0f} ms" for p, v in self.phases.items()]
        return ", ".join(parts) or "-"
