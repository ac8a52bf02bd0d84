"""The rebalance benchmark's scenario: one configuration (mode, members, partitions) run
against the cluster. A topic, the producer and the member processes are started, the group
settles, then members leave and join again in turn while every event is timed and checked
(:func:`run_config`); the member processes are driven through their stdin and heard through
their stdout (:func:`pump`, :func:`send`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from _common import ClusterInfo, say, this_python, uptime
from _rebalance_settings import ZK_MODES, event_jitter_ms, kafka_timeouts
from _rebalance_stats import summarize
from _rebalance_view import (
    Run,
    SlotState,
    handle,
    member_rebalances,
    owner_snapshot,
    settled_at,
)

# The member and producer processes run the benchmark's command line.
SCRIPT = str(Path(__file__).resolve().with_name("rebalance.py"))


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
        merged.update(await asyncio.wait_for(fut, 10))
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


async def run_config(
    info: ClusterInfo, mode: str, members: int, partitions: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Run one (mode, members, partitions) configuration and return its measurements."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from aiozkconsumer.zk import layout
    from aiozkconsumer.zk.client import ZkClient

    tag = uuid.uuid4().hex[:6]
    topic = f"rb-{mode}-{members}x{partitions}-{tag}"
    load_before = uptime()
    run = Run(mode, members, partitions, topic, f"rbg-{tag}")
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
            *kafka_timeouts(args),
            *common,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        run.procs.append(proc)
        for s in slots:
            run.slots[s] = SlotState(proc=i)
    pumps = [asyncio.create_task(pump(run, p)) for p in run.procs]
    zk = None
    ids_changes: list[tuple[float, int]] = []
    watch_task = None
    if mode in ZK_MODES:
        zk = ZkClient(info.zookeeper_connect)
        await zk.start()
        await zk.ensure_path(layout.ids_dir(run.group))

        async def watch() -> None:
            assert zk is not None
            async for children in zk.watch_children(layout.ids_dir(run.group)):
                ids_changes.append((time.time(), len(children or [])))  # noqa: PERF401 - timestamps as they come

        watch_task = asyncio.create_task(watch())
    results: list[dict[str, Any]] = []
    baseline: list[float] = []
    run.expected_live = members
    try:
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
            raise RuntimeError(f"{mode} {members}x{partitions}: the group never settled")
        await asyncio.sleep(1.0)
        await request_gaps(run)
        await asyncio.sleep(3.0)
        quiet = await request_gaps(run)
        baseline = [g for per in quiet.values() for g in per.values()]
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
            t_cmd = None
            cmd_deadline = time.monotonic() + 120  # a Java member's JVM starts first
            while t_cmd is None:
                for e in run.events[marker:]:
                    if e["ev"] in ("stopping", "starting") and e.get("slot") == slot:
                        t_cmd = e["t"]
                if t_cmd is None:
                    if time.monotonic() > cmd_deadline or run.errors:
                        raise RuntimeError(f"{mode}: slot {slot} never began to {kind}")
                    run.changed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(run.changed.wait(), 1)
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
    finally:
        for proc in run.procs:
            with contextlib.suppress(Exception):
                await send(proc, "quit")
        for proc in run.procs:
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        for t in pumps:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(t, 5)
        producer.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(producer.wait(), 30)
        except TimeoutError:
            producer.kill()
        if watch_task is not None:
            watch_task.cancel()
            with contextlib.suppress(BaseException):
                await watch_task
        if zk is not None:
            await zk.close()
    return summarize(
        run,
        results,
        baseline,
        args,
        spawned_at=spawned_at,
        load_before=load_before,
        load_after=uptime(),
    )
