"""The rebalance benchmark's scenario: one configuration (mode, members, partitions) run
against the cluster. A topic, the producer and the member processes are started, the group
settles (:func:`running_group`), then members leave and join again in turn while every event
is timed and checked (:func:`run_config`), or each member in turn is restarted
(:func:`run_rolling_restart`); the member processes are driven through their stdin and heard
through their stdout (:func:`pump`, :func:`send`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import ClusterInfo, say, this_python, uptime
from _rebalance_settings import ZK_MODES, event_jitter_ms, kafka_timeouts
from _rebalance_stats import restart_stats, summarize
from _rebalance_view import (
    Run,
    SlotState,
    generations_seen,
    handle,
    member_rebalances,
    owner_snapshot,
    restart_settled_at,
    settled_at,
    unsettled_state,
)

# The member and producer processes run the benchmark's command line.
SCRIPT = str(Path(__file__).resolve().with_name("rebalance.py"))


def _member_log(log_dir: Path | None, name: str) -> int:
    """A member process's stderr: a new file ``<log_dir>/<name>.log`` (its descriptor, for
    the caller to close once the process is spawned), or ``DEVNULL`` without ``log_dir``."""
    if log_dir is None:
        return asyncio.subprocess.DEVNULL
    log_dir.mkdir(parents=True, exist_ok=True)
    return os.open(log_dir / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)


async def pump(run: Run, proc: asyncio.subprocess.Process) -> None:
    assert proc.stdout is not None
    while True:
        raw = await proc.stdout.readline()
        if not raw:
            return
        with contextlib.suppress(json.JSONDecodeError):
            handle(run, json.loads(raw))


async def send(proc: asyncio.subprocess.Process, text: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write((text + "\n").encode())
    await proc.stdin.drain()


async def wait_settled(run: Run, since: float, timeout_s: float) -> float | None:
    """Wait until settled and quiet (no new assignment for 1 s); the settle time or None."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        t = settled_at(run, since)
        if t is not None:
            marker = len(run.events)
            await asyncio.sleep(1.0)
            later = [e for e in run.events[marker:] if e["ev"] in ("assigned", "released")]
            if not later:
                return settled_at(run, since) or t
            continue
        run.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.changed.wait(), 0.05)
    return None


REPORT_TIMEOUT_S = 60
"""How long a member process may take to answer ``report``. 10 s was too short for a process
hosting 2,048 partitions of a topic written at 41,000 records/s on 2 cores (the 2 x 4,096
point of ``scale.py`` failed there)."""


async def request_gaps(run: Run) -> dict[str, dict[str, float]]:
    """Ask every member process for its per-partition max gaps since the last request."""
    merged: dict[str, dict[str, float]] = {}
    waiters = []
    for proc in run.procs:
        fut: asyncio.Future[dict[str, dict[str, float]]] = (
            asyncio.get_running_loop().create_future()
        )
        run.gaps_waiters.append(fut)
        waiters.append(fut)
        await send(proc, "report")
    for fut in waiters:
        try:
            merged.update(await asyncio.wait_for(fut, REPORT_TIMEOUT_S))
        except TimeoutError:
            raise RuntimeError(
                f"a member process did not report its gaps within {REPORT_TIMEOUT_S} s "
                "(busy with its partitions: a machine too small for the configuration?)"
            ) from None
    return merged


async def check_owner_nodes(run: Run, zk: Any) -> list[str]:
    """Owner nodes in ZooKeeper that disagree with what the members say they own."""
    from aiozkconsumer.zk import layout

    problems = []
    by_member = {st.member: s for s, st in run.slots.items() if st.live}
    owners = owner_snapshot(run)
    for p in range(run.partitions):
        data = await zk.get_data(layout.owner_path(run.group, run.topic, p))
        node = data.decode() if data else None
        slot = owners.get(p)
        expected = f"{run.slots[slot].member}-0" if slot is not None else None
        if node != expected:
            problems.append(f"p{p}: owner node {node!r}, members say {expected!r}")
        _ = by_member
    return problems


@dataclass
class Group:
    """A configuration's running group: the member processes, the producer, the ZooKeeper
    watch of the ZooKeeper modes, and what was measured before the first event."""

    run: Run
    producer: asyncio.subprocess.Process
    pumps: list[asyncio.Task[None]]
    spawned_at: float
    load_before: str
    zk: Any = None
    ids_changes: list[tuple[float, int]] = field(default_factory=list)
    watch_task: asyncio.Task[None] | None = None
    baseline: list[float] = field(default_factory=list)
    # The quiet window's largest gap per slot and its partitions over 1 s (slot -> figures).
    baseline_by_slot: dict[str, dict[str, float]] = field(default_factory=dict)


@contextlib.asynccontextmanager
async def running_group(
    info: ClusterInfo,
    mode: str,
    members: int,
    partitions: int,
    args: argparse.Namespace,
    membership: str = "dynamic",
) -> AsyncIterator[Group]:
    """A topic, its producer and ``members`` members of ``mode`` (static members with
    ``membership="static"``), settled, with the quiet window's gaps as the baseline; the
    processes are stopped on the way out.

    Raises:
        RuntimeError: if the member processes are not ready within 120 s or the group does
            not settle within three ``--settle-timeout``.
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from aiozkconsumer.zk import layout
    from aiozkconsumer.zk.client import ZkClient

    tag = uuid.uuid4().hex[:6]
    topic = f"rb-{mode}-{members}x{partitions}-{tag}"
    load_before = uptime()
    run = Run(mode, members, partitions, topic, f"rbg-{tag}", membership=membership)
    admin = AIOKafkaAdminClient(bootstrap_servers=info.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    await asyncio.sleep(1.0)
    script = SCRIPT
    common = ["--zookeeper", info.zookeeper_connect, "--bootstrap-server", info.bootstrap_servers]
    producer = await asyncio.create_subprocess_exec(
        this_python(),
        script,
        "producer",
        "--topic",
        topic,
        "--partitions",
        str(partitions),
        "--tick-ms",
        str(args.tick_ms),
        *common,
        stdout=asyncio.subprocess.PIPE,
    )
    per_proc = args.members_per_process or (1 if members <= 2 else 2 if members <= 8 else 4)
    n_procs = -(-members // per_proc)
    spawned_at = time.time()
    for i in range(n_procs):
        slots = [s for s in range(members) if s % n_procs == i]
        stderr = _member_log(getattr(args, "member_logs", None), f"{run.group}-member-{i}")
        proc = await asyncio.create_subprocess_exec(
            this_python(),
            script,
            "member",
            "--mode",
            mode,
            "--group",
            run.group,
            "--topic",
            topic,
            "--slots",
            ",".join(map(str, slots)),
            "--original-backoff-ms",
            str(args.original_backoff_ms),
            "--kafka",
            args.kafka,
            *(["--remote-assignor", args.remote_assignor] if args.remote_assignor else []),
            "--java-poll-ms",
            str(args.java_poll_ms),
            *(["--static"] if membership == "static" else []),
            *(["--log-level", "INFO"] if getattr(args, "member_logs", None) else []),
            *kafka_timeouts(args),
            *common,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
        if stderr != asyncio.subprocess.DEVNULL:
            os.close(stderr)  # the member process has its own descriptor
        run.procs.append(proc)
        for s in slots:
            run.slots[s] = SlotState(proc=i)
    group = Group(
        run,
        producer,
        [asyncio.create_task(pump(run, p)) for p in run.procs],
        spawned_at,
        load_before,
    )
    try:
        if mode in ZK_MODES:
            zk = group.zk = ZkClient(info.zookeeper_connect)
            await zk.start()
            await zk.ensure_path(layout.ids_dir(run.group))

            async def watch() -> None:
                async for children in zk.watch_children(layout.ids_dir(run.group)):
                    group.ids_changes.append((time.time(), len(children or [])))

            group.watch_task = asyncio.create_task(watch())
        run.expected_live = members
        ready_deadline = time.monotonic() + 120
        while sum(e["ev"] == "ready" for e in run.events) < len(run.procs):
            if time.monotonic() > ready_deadline:
                raise RuntimeError(f"{mode}: member processes not ready within 120 s")
            run.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.changed.wait(), 1)
        t_start = time.time()
        for s in range(members):
            await send(run.procs[run.slots[s].proc], f"start {s}")
            # Let members join one by one, as services do; the group settles at the end.
            await asyncio.sleep(0.05)
        if await wait_settled(run, t_start, args.settle_timeout * 3) is None:
            raise RuntimeError(
                f"{mode} {members}x{partitions}: the group never settled within "
                f"{args.settle_timeout * 3:.0f} s: {unsettled_state(run, t_start)}"
            )
        await asyncio.sleep(1.0)
        await request_gaps(run)
        await asyncio.sleep(3.0)
        quiet = await request_gaps(run)
        group.baseline = [g for per in quiet.values() for g in per.values()]
        group.baseline_by_slot = {
            slot: {
                "max_gap_s": max(per.values(), default=0.0),
                "over_1s": sum(1 for g in per.values() if g > 1.0),
            }
            for slot, per in quiet.items()
        }
        yield group
    finally:
        await stop_group(group)


async def stop_group(group: Group) -> None:
    """Quit the member processes, stop the producer and the watch (never raises)."""
    run = group.run
    for proc in run.procs:
        with contextlib.suppress(Exception):
            await send(proc, "quit")
    for proc in run.procs:
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    for t in group.pumps:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(t, 5)
    group.producer.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(group.producer.wait(), 30)
    except TimeoutError:
        group.producer.kill()
    if group.watch_task is not None:
        group.watch_task.cancel()
        with contextlib.suppress(BaseException):
            await group.watch_task
    if group.zk is not None:
        await group.zk.close()


async def wait_line(
    run: Run, marker: int, slot: int, kinds: tuple[str, ...], what: str, timeout_s: float = 120
) -> float:
    """The time of the first line of one of ``kinds`` from ``slot`` since ``marker``.

    Raises:
        RuntimeError: if none came within ``timeout_s`` (a Java member's JVM starts first),
            or a member reported an error meanwhile.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        for e in run.events[marker:]:
            if e["ev"] in kinds and e.get("slot") == slot:
                return float(e["t"])
        if time.monotonic() > deadline or run.errors:
            raise RuntimeError(f"{run.mode}: slot {slot} never began to {what}: {run.errors}")
        run.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.changed.wait(), 1)


async def run_config(
    info: ClusterInfo,
    mode: str,
    members: int,
    partitions: int,
    args: argparse.Namespace,
    membership: str = "dynamic",
) -> dict[str, Any]:
    """Run one (mode, members, partitions) configuration and return its measurements."""
    results: list[dict[str, Any]] = []
    async with running_group(info, mode, members, partitions, args, membership) as group:
        run, zk, ids_changes = group.run, group.zk, group.ids_changes
        rng = random.Random(members * 1000 + partitions)
        jitter_rng = random.Random(members * 1000 + partitions + 1)
        jitter_s = event_jitter_ms(mode, args) / 1000
        left: int | None = None
        for i in range(args.events):
            if jitter_s:
                # A random phase against the members' heartbeats (see --event-jitter-ms).
                await asyncio.sleep(jitter_rng.uniform(0, jitter_s))
            before = owner_snapshot(run)
            await request_gaps(run)  # resets the members' gap maxima: the window starts here
            if left is None:
                slot, kind = rng.randrange(members), "leave"
                left = slot
            else:
                slot, kind, left = left, "join", None
            run.expected_live = members - 1 if kind == "leave" else members
            marker = len(run.events)
            ids_mark = len(ids_changes)
            await send(
                run.procs[run.slots[slot].proc], f"{'stop' if kind == 'leave' else 'start'} {slot}"
            )
            t_cmd = await wait_line(run, marker, slot, ("stopping", "starting"), kind)
            settled = await wait_settled(run, t_cmd, args.settle_timeout)
            gaps = await request_gaps(run)
            after = owner_snapshot(run)
            unmoved = {p for p, s in after.items() if before.get(p) == s}
            unmoved_gaps = [gaps.get(str(before[p]), {}).get(str(p), 0.0) for p in unmoved]
            ids_t = next((t for t, _ in ids_changes[ids_mark:] if t >= t_cmd - 0.001), None)
            problems = []
            if zk is not None and settled:
                problems = await check_owner_nodes(run, zk)
            rebs, critical = member_rebalances(run, marker, t_cmd, ids_t, settled)
            rec: dict[str, Any] = {
                "event": i,
                "kind": kind,
                "slot": slot,
                "settled": settled is not None,
                "latency_s": (settled - t_cmd) if settled else None,
                "latency_from_ids_s": (settled - ids_t) if settled and ids_t else None,
                "moved": len([p for p in after if before.get(p) != after.get(p)]),
                "unmoved": len(unmoved),
                "unmoved_max_gap_s": max(unmoved_gaps) if unmoved_gaps else None,
                "owner_node_problems": problems,
                "rebalances": rebs,
                "critical": critical,
            }
            results.append(rec)
            say(
                f"  {mode:<9} {members:>2}x{partitions:<3} event {i:>2} {kind:<5} slot {slot:>2}: "
                + (f"{rec['latency_s'] * 1000:7.0f} ms" if settled else "NOT SETTLED")
                + f", moved {rec['moved']:>3}, unmoved max gap "
                + (f"{rec['unmoved_max_gap_s'] * 1000:.0f} ms" if unmoved_gaps else "-")
            )
            if settled is None:
                # Start over from a known state would be costly; record and carry on.
                await asyncio.sleep(1.0)
    summary = summarize(
        run,
        results,
        group.baseline,
        args,
        spawned_at=group.spawned_at,
        load_before=group.load_before,
        load_after=uptime(),
    )
    summary["membership"] = membership
    summary["baseline_by_slot"] = group.baseline_by_slot
    return summary


async def run_rolling_restart(
    info: ClusterInfo,
    mode: str,
    members: int,
    partitions: int,
    args: argparse.Namespace,
    membership: str = "dynamic",
) -> dict[str, Any]:
    """A rolling restart: each member in turn (``--rounds`` times over) is stopped (its
    connector closed: a static member does not leave the group) and started again at once
    with the same slot (static: the same ``group.instance.id``), well within the session
    timeout; the next one once the group settled (:func:`restart_settled_at`).

    Per restart: the generations (member epochs) the other members saw and their rebalances,
    the partitions moved, the longest gap of a partition that stayed with a member that was
    not restarted, the restarted member's own partitions' gap (its downtime), and the time
    from the stop command to settled. The whole restart's time runs from the first stop
    command to the last settle.
    """
    results: list[dict[str, Any]] = []
    async with running_group(info, mode, members, partitions, args, membership) as group:
        run = group.run
        jitter_rng = random.Random(members * 1000 + partitions + 1)
        jitter_s = event_jitter_ms(mode, args) / 1000
        t_first: float | None = None
        t_last: float | None = None
        for i, slot in enumerate(list(range(members)) * args.rounds):
            if jitter_s:
                await asyncio.sleep(jitter_rng.uniform(0, jitter_s))
            before = owner_snapshot(run)
            await request_gaps(run)  # resets the members' gap maxima: the window starts here
            marker = len(run.events)
            proc = run.procs[run.slots[slot].proc]
            await send(proc, f"stop {slot}")
            t_stop = await wait_line(run, marker, slot, ("stopping",), "stop")
            t_first = t_first if t_first is not None else t_stop
            t_stopped = await wait_line(run, marker, slot, ("stopped",), "stop", 60)
            await send(proc, f"start {slot}")
            t_start = await wait_line(run, marker, slot, ("starting",), "start")
            settled = await wait_restart_settled(run, slot, t_stop, args.settle_timeout)
            if settled is not None:
                t_last = settled
            gaps = await request_gaps(run)
            after = owner_snapshot(run)
            moved = [p for p in range(partitions) if before.get(p) != after.get(p)]
            # Partitions that stayed with a member that was not restarted: their records
            # should keep coming; the restarted member's own are down while it restarts.
            stayed = [p for p, s in after.items() if before.get(p) == s and s != slot]
            stayed_gaps = [gaps.get(str(after[p]), {}).get(str(p), 0.0) for p in stayed]
            own = [p for p, s in after.items() if before.get(p) == s == slot]
            own_gaps = [gaps.get(str(slot), {}).get(str(p), 0.0) for p in own]
            new_generations, rebalances = generations_seen(run, marker, slot)
            rec: dict[str, Any] = {
                "event": i,
                "kind": "restart",
                "slot": slot,
                "settled": settled is not None,
                "latency_s": (settled - t_stop) if settled else None,
                "stop_s": t_stopped - t_stop,
                "down_s": t_start - t_stop,
                "start_to_settled_s": (settled - t_start) if settled else None,
                "generations": new_generations,
                "other_rebalances": len(rebalances),
                "other_rebalance_lines": rebalances,
                "moved": len(moved),
                "unmoved": len(stayed),
                "unmoved_max_gap_s": max(stayed_gaps) if stayed_gaps else None,
                "own_kept": len(own),
                "own_max_gap_s": max(own_gaps) if own_gaps else None,
                "rebalances": [],
                "owner_node_problems": [],
                "latency_from_ids_s": None,
            }
            results.append(rec)
            say(
                f"  {mode:<9} {membership:<7} {members:>2}x{partitions:<3} restart {i:>2} "
                f"slot {slot:>2}: "
                + (f"{rec['latency_s'] * 1000:7.0f} ms" if settled else "NOT SETTLED")
                + f", generations {new_generations}, other rebalances {len(rebalances)}, moved "
                f"{len(moved):>3}, unmoved max gap "
                + (f"{rec['unmoved_max_gap_s'] * 1000:.0f} ms" if stayed_gaps else "-")
                + ", own gap "
                + (f"{rec['own_max_gap_s'] * 1000:.0f} ms" if own_gaps else "-")
            )
            if settled is None:
                await asyncio.sleep(1.0)
    summary = summarize(
        run,
        results,
        group.baseline,
        args,
        spawned_at=group.spawned_at,
        load_before=group.load_before,
        load_after=uptime(),
    )
    summary["membership"] = membership
    summary["baseline_by_slot"] = group.baseline_by_slot
    summary["restart"] = restart_stats(
        results, (t_last - t_first) if t_first is not None and t_last is not None else None
    )
    return summary


async def wait_restart_settled(run: Run, slot: int, since: float, timeout_s: float) -> float | None:
    """As :func:`wait_settled`, for a restart (:func:`restart_settled_at`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        t = restart_settled_at(run, slot, since)
        if t is not None:
            marker = len(run.events)
            await asyncio.sleep(1.0)
            later = [e for e in run.events[marker:] if e["ev"] in ("assigned", "released")]
            if not later:
                return restart_settled_at(run, slot, since) or t
            continue
        run.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.changed.wait(), 0.05)
    return None
