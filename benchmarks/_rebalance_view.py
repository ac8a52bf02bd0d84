"""The rebalance benchmark orchestrator's view of a group, from its members' JSON lines:
who is live and owns what since when (:func:`handle`), when the group settled
(:func:`settled_at`; after a member's restart, :func:`restart_settled_at`), who handed out a
partition's records at the same time as another (:func:`overlaps`), the member rebalances
behind an event (:func:`member_rebalances`) and the group generations the other members saw
(:func:`generations_seen`).
Pure (lines in, answers out), so tested without processes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from _rebalance_settings import CONSUMER_PROTOCOL_MODES


@dataclass
class SlotState:
    """What the orchestrator knows of one member slot."""

    proc: int
    live: bool = False
    owned: dict[int, float] = field(default_factory=dict)  # partition -> acquired at
    assigned_at: float = 0.0
    firsts: dict[int, float] = field(default_factory=dict)
    member: str = ""


@dataclass
class Run:
    """One configuration in one mode."""

    mode: str
    members: int
    partitions: int
    topic: str
    group: str
    procs: list[asyncio.subprocess.Process] = field(default_factory=list)
    slots: dict[int, SlotState] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)  # every JSON line received
    gaps_waiters: list[asyncio.Future[dict[str, dict[str, float]]]] = field(default_factory=list)
    gap_parts: dict[str, dict[str, float]] = field(default_factory=dict)
    tenures: list[tuple[int, int, float, float | None]] = field(default_factory=list)
    open_tenure: dict[tuple[int, int], float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    expected_live: int = 0  # members that should be live once the group settles
    membership: str = "dynamic"  # or "static": group.instance.id per slot (KIP-345)


def handle(run: Run, line: dict[str, Any]) -> None:
    """Apply one member line to the orchestrator's view."""
    run.events.append(line)
    ev = line["ev"]
    slot: int = line.get("slot", -1)
    st = run.slots.get(slot)
    if ev == "assigned" and st is not None:
        t = line["t"]
        new = set(line["partitions"])
        st.owned = {p: st.owned.get(p, t) for p in new}
        st.assigned_at = t
        st.member = line.get("member", st.member)
    elif ev == "released" and st is not None:
        for p in line["partitions"]:
            st.owned.pop(p, None)
            st.firsts.pop(p, None)
            first = run.open_tenure.pop((p, slot), None)
            last = line["last"].get(str(p))
            if first is not None:
                run.tenures.append((p, slot, first, last))
    elif ev == "first" and st is not None:
        st.firsts[line["p"]] = line["t"]
        run.open_tenure[(line["p"], slot)] = line["t"]
    elif ev == "started" and st is not None:
        st.live = True
        st.member = line["member"]
    elif ev == "stopping" and st is not None:
        st.live = False
    elif ev == "error":
        run.errors.append(f"slot {slot}: {line['error']}")
    elif ev == "gaps":
        run.gap_parts.update(line["gaps"])
        if run.gaps_waiters:
            run.gaps_waiters[0].set_result(line["gaps"])
            run.gaps_waiters.pop(0)
    run.changed.set()


def settled_at(run: Run, since: float) -> float | None:
    """When the group settled after ``since``, or ``None`` if it has not (see the docstring
    of ``rebalance.py``).

    Every mode: the expected number of members is live, their partition sets are disjoint,
    cover the topic and are balanced (each owns the floor or the ceiling of partitions /
    members: what range, round-robin and uniform assignments of one topic give), and every
    partition acquired after ``since`` handed out a record. The eager and ZooKeeper modes:
    every live member also finished a rebalance after ``since``. The ``consumer``-protocol
    modes: a member whose partitions do not change hears nothing, so at least one member's
    assignment changed after ``since``.
    """
    live = [s for s in run.slots.values() if s.live]
    if not live or len(live) != run.expected_live:
        return None
    lo, hi = run.partitions // len(live), -(-run.partitions // len(live))
    incremental = run.mode in CONSUMER_PROTOCOL_MODES
    seen: set[int] = set()
    latest = since
    changed = False
    for st in live:
        if st.assigned_at < since and not incremental:
            return None
        if not lo <= len(st.owned) <= hi:
            return None
        if seen & st.owned.keys():
            return None
        seen |= st.owned.keys()
        if st.assigned_at >= since:
            changed = True
            latest = max(latest, st.assigned_at)
        for p, acquired in st.owned.items():
            if acquired >= since:
                first = st.firsts.get(p)
                if first is None or first < acquired:
                    return None
                latest = max(latest, first)
    if len(seen) != run.partitions or not changed:
        return None
    return latest


def unsettled_state(run: Run, since: float) -> str:
    """What keeps the group from settling after ``since`` (:func:`settled_at`'s conditions),
    in one line: for the message of a group that never settled."""
    live = [s for s in run.slots.values() if s.live]
    if not live:
        return f"no member live (expected {run.expected_live})"
    lo, hi = run.partitions // len(live), -(-run.partitions // len(live))
    owned: dict[int, int] = {}
    for st in live:
        for p in st.owned:
            owned[p] = owned.get(p, 0) + 1
    waiting = sum(
        1
        for st in live
        for p, acquired in st.owned.items()
        if acquired >= since and (st.firsts.get(p) is None or st.firsts[p] < acquired)
    )
    counts = sorted(len(st.owned) for st in live)
    return (
        f"{len(live)}/{run.expected_live} members live; "
        f"{sum(not lo <= c <= hi for c in counts)} outside {lo}..{hi} partitions "
        f"(owning {counts[0]}..{counts[-1]}); "
        f"{sum(st.assigned_at < since for st in live)} without a rebalance since; "
        f"{len(owned)}/{run.partitions} partitions owned, {sum(n > 1 for n in owned.values())} "
        f"by more than one; {waiting} acquired without a record yet"
    )


def restart_settled_at(run: Run, slot: int, since: float) -> float | None:
    """When the group settled after ``slot`` was stopped at ``since`` and started again, or
    ``None`` if it has not.

    A static member's restart within the session timeout makes no rebalance, so no other
    member hears of it: settled once every member is live again, their partition sets are
    disjoint, cover the topic and are balanced, the restarted member was given its
    partitions after ``since`` and handed out a record of each, and so did every other
    member of each partition it acquired after ``since`` (a dynamic restart moves some).
    """
    live = [s for s in run.slots.values() if s.live]
    restarted = run.slots.get(slot)
    if restarted is None or not restarted.live or len(live) != run.expected_live:
        return None
    if restarted.assigned_at < since:
        return None
    lo, hi = run.partitions // len(live), -(-run.partitions // len(live))
    seen: set[int] = set()
    latest = restarted.assigned_at
    for st in live:
        if not lo <= len(st.owned) <= hi or seen & st.owned.keys():
            return None
        seen |= st.owned.keys()
        if st.assigned_at >= since:
            latest = max(latest, st.assigned_at)
        for p, acquired in st.owned.items():
            if acquired >= since:
                first = st.firsts.get(p)
                if first is None or first < acquired:
                    return None
                latest = max(latest, first)
    if len(seen) != run.partitions:
        return None
    return latest


def generations_seen(
    run: Run, marker: int, slot: int, until: float | None = None
) -> tuple[list[int], list[dict[str, Any]]]:
    """The group generations (consumer protocol: member epochs) the members other than
    ``slot`` reported since ``marker`` (up to ``until``, ``time.time()`` seconds), new ones
    only (higher than any they reported before ``marker``), sorted; and their rebalances
    (``rebalance`` lines: slot, time, reason, partitions kept, released, acquired) in that
    window."""
    before = [
        e["generation"]
        for e in run.events[:marker]
        if e["ev"] == "generation" and e.get("slot") != slot
    ]
    floor = max(before, default=-1)
    window = [
        e
        for e in run.events[marker:]
        if e.get("slot") != slot and (until is None or e["t"] <= until)
    ]
    new = sorted(
        {e["generation"] for e in window if e["ev"] == "generation" and e["generation"] > floor}
    )
    rebalances = [
        {k: e.get(k) for k in ("slot", "t", "reason", "kept", "released", "acquired")}
        for e in window
        if e["ev"] == "rebalance"
    ]
    return new, rebalances


def owner_snapshot(run: Run) -> dict[int, int]:
    """partition -> slot, from the live slots' latest assignments."""
    return {p: s for s, st in run.slots.items() if st.live for p in st.owned}


def overlaps(run: Run) -> list[str]:
    """Partitions two members handed out records of in overlapping intervals."""
    by_p: dict[int, list[tuple[float, float, int]]] = {}
    now = time.time()
    for p, slot, first, last in run.tenures:
        by_p.setdefault(p, []).append((first, last if last is not None else first, slot))
    for (p, slot), first in run.open_tenure.items():
        by_p.setdefault(p, []).append((first, now, slot))
    found = []
    for p, tenures in by_p.items():
        tenures.sort()
        for (_f1, l1, s1), (f2, _l2, s2) in zip(tenures, tenures[1:], strict=False):
            if s1 != s2 and f2 < l1:
                found.append(f"p{p}: slot {s1} until {l1:.3f}, slot {s2} from {f2:.3f}")
    return found


def member_rebalances(
    run: Run, marker: int, t_cmd: float, ids_t: float | None, settled: float | None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The member rebalances of one event, with their phases, and the event's critical path.

    Each rebalance (a ``rebalance`` line since ``marker``) gets ``first_records_ms``: for the
    last rebalance of a slot, from its ``assigned`` line (the listener's
    ``before_starting_fetchers``, just before the fetchers are given the partitions) to the
    first record of the last partition it acquired; and ``from_ids_ms``: from the
    orchestrator's watch seeing the membership change to the rebalance's start.

    The critical path is that of the member whose rebalance end or first record came last
    (the one that decided the settle time): command -> ids change -> its rebalance start ->
    its rebalance end -> settled.
    """
    last_by_slot: dict[int, dict[str, Any]] = {}
    rebs: list[dict[str, Any]] = []
    for e in run.events[marker:]:
        if e["ev"] != "rebalance":
            continue
        r = {
            k: e.get(k)
            for k in (
                "slot",
                "started_at",
                "duration_s",
                "attempts",
                "kept",
                "released",
                "acquired",
                "reason",
                "queued_ms",
                "phases",
            )
        }
        r["from_ids_ms"] = (e["started_at"] - ids_t) * 1000 if ids_t else None
        rebs.append(r)
        last_by_slot[e["slot"]] = r
    contrib: dict[int, float] = {}
    for slot, r in last_by_slot.items():
        st = run.slots.get(slot)
        if st is None or not st.live:
            continue
        acquired = [p for p, at in st.owned.items() if at >= t_cmd]
        firsts = [st.firsts[p] for p in acquired if p in st.firsts]
        end = r["started_at"] + r["duration_s"]
        if firsts and len(firsts) == len(acquired):
            r["first_records_ms"] = (max(firsts) - st.assigned_at) * 1000
        contrib[slot] = max([end, st.assigned_at, *firsts])
    if settled is None or not contrib:
        return rebs, None
    slot = max(contrib, key=lambda s: contrib[s])
    r = last_by_slot[slot]
    end = r["started_at"] + r["duration_s"]
    critical = {
        "slot": slot,
        "cmd_to_ids_ms": (ids_t - t_cmd) * 1000 if ids_t else None,
        "ids_to_start_ms": (r["started_at"] - ids_t) * 1000 if ids_t else None,
        "rebalance_ms": r["duration_s"] * 1000,
        "end_to_settled_ms": (settled - end) * 1000,
        "queued_ms": r.get("queued_ms"),
        "phases": r.get("phases"),
        "first_records_ms": r.get("first_records_ms"),
        "reason": r.get("reason"),
    }
    return rebs, critical
