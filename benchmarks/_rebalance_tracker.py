"""The member processes' side of the rebalance benchmark's line protocol: one JSON line on
stdout per event (:func:`out`), and the per-partition record arrival bookkeeping of a member
slot (:class:`Tracker`), which times the gaps between records.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

_out_lock = threading.Lock()  # confluent-kafka members write from their poll threads


def out(ev: str, **fields: Any) -> None:
    """One JSON line on stdout for the orchestrator."""
    fields["ev"] = ev
    fields.setdefault("t", time.time())
    line = json.dumps(fields) + "\n"
    with _out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


class Tracker:
    """Per-partition record arrival bookkeeping of one member slot.

    The last arrival time of a partition survives its release, so that when the same member
    gets the partition back (an eager or emulated-original rebalance revokes everything), the
    gap across the revocation is measured too.
    """

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.last: dict[int, float] = {}
        self.max_gap: dict[int, float] = {}
        self.seen: set[int] = set()
        self.released_in_window: set[int] = set()
        # confluent-kafka members record from their poll thread, reports come from the loop.
        self._lock = threading.Lock()

    def record(self, partition: int, at: float | None = None) -> None:
        """A record of ``partition`` handed out now (or at ``at``, ``time.time()`` seconds:
        a Java member's records are timed when its line is read)."""
        now = time.time() if at is None else at
        with self._lock:
            if partition not in self.seen:
                self.seen.add(partition)
                out("first", slot=self.slot, p=partition, t=now)
            last = self.last.get(partition)
            if last is not None:
                gap = now - last
                if gap > self.max_gap.get(partition, 0.0):
                    self.max_gap[partition] = gap
            self.last[partition] = now

    def released(self, partitions: Iterable[int]) -> None:
        parts = sorted(set(partitions))
        with self._lock:
            last = {p: self.last.get(p) for p in parts if p in self.seen}
            self.seen.difference_update(parts)
            self.released_in_window.update(parts)
            out("released", slot=self.slot, partitions=parts, last=last)

    def report(self) -> dict[int, float]:
        """Max gap per partition since the last report (an open gap counts up to now)."""
        now = time.time()
        with self._lock:
            gaps = dict(self.max_gap)
            for p in self.seen | self.released_in_window:
                last = self.last.get(p)
                if last is not None:
                    gaps[p] = max(gaps.get(p, 0.0), now - last)
            self.max_gap = {}
            self.released_in_window = set()
        return gaps
