"""Rebalance latency: how long a group needs, after a member joins or leaves, until every
partition is owned and fetching again; and whether the members whose partitions did not move
kept receiving records meanwhile.

Setup per configuration (members x partitions): a topic with P partitions; a producer process
writes one record to every partition every ``--tick-ms``; M group members, spread over a few
member processes (``--members-per-process``), each member one stream. Then ``--events``
membership changes alternate: a member leaves (graceful shutdown), then joins again (a new
connector, a new consumer id), a different member each pair.

Per event the orchestrator records:

- latency from the command (the member process starting to leave / to join) to *settled*:
  every live member has finished a rebalance after the command, their partition sets are
  disjoint and cover the topic, and every partition a member acquired has handed out a record
  (so: owned and fetching again). Settled time = the latest of those rebalance ends and first
  records. For ZooKeeper modes also from the moment the orchestrator's own watch on
  ``/consumers/<group>/ids`` saw the membership change.
- the largest gap between two records of a partition whose owner did not change (measured by
  the members, per partition, over a window from just before the command to 1 s after
  settling), against the same gap measured in a quiet window (baseline).
- double ownership: two members handing out records of one partition in overlapping
  intervals (each member reports, per tenure, its first and last record time), and for the
  ZooKeeper modes the owner nodes read back after each event (the node's owner must be the
  member that says it owns the partition).

Modes (``--modes``):

- ``azk``: aiozkconsumer as it is (incremental rebalance; claims wait for the blocking owner
  node's deletion).
- ``original``: aiozkconsumer patched in the member process to behave like the 0.10.2 consumer:
  every rebalance first releases every partition (stop, commit, delete owner nodes), and a
  conflicting claim sleeps ``rebalance.backoff.ms`` (2,000 ms, the default) instead of
  watching the owner node. An emulation, not the Scala code.
- ``azk-kafka``: aiozkconsumer with a Kafka-coordinated group (``group.coordinator=kafka``:
  the classic protocol through the broker's group coordinator, eager: every rebalance
  releases everything; ``range`` assignor), session ``--kafka-session-ms`` (10 s) and
  heartbeat ``--kafka-heartbeat-ms`` (1 s). No ZooKeeper: no "from ids" and no owner nodes.
- ``aiokafka``: ``AIOKafkaConsumer.subscribe()`` with Kafka's group coordinator (eager
  protocol: every rebalance revokes everything; its default round-robin assignor), session
  ``--aiokafka-session-ms`` and heartbeat ``--aiokafka-heartbeat-ms`` (aiokafka's defaults,
  10 s and 3 s).

Kafka-coordinated members learn of a rebalance from a heartbeat answer, so their latency
includes up to one heartbeat interval: compare ``azk-kafka`` and ``aiokafka`` at the same
``--*-heartbeat-ms`` (the table has a column for it). Before each event of those modes the
orchestrator waits a random 0 to one heartbeat interval (``--event-jitter-ms``), or the fixed
pauses of the procedure would keep every event at one phase against the heartbeats.

Usage::

    .venv/bin/python benchmarks/rebalance.py [--quick] [--grid diagonal|full]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    RESULTS_DIR,
    ClusterInfo,
    add_cluster_args,
    cluster_from_args,
    fmt,
    machine,
    md_table,
    percentile,
    say,
    this_python,
    uptime,
    versions,
    write_results,
)

SCRIPT = str(Path(__file__).resolve())
CLASSIC_MODES = ("azk", "azk-kafka", "original", "aiokafka")
# group.protocol=consumer (KIP-848): Kafka 4.x brokers only (--kafka 4.3).
CONSUMER_PROTOCOL_MODES = ("azk-consumer", "java-consumer", "confluent-consumer")
MODES = CLASSIC_MODES + CONSUMER_PROTOCOL_MODES
ZK_MODES = ("azk", "original")  # modes whose group lives in ZooKeeper (ids, owner nodes)
# The broker's group.consumer.* defaults (Kafka 4.3), for the table.
BROKER_CONSUMER_SESSION_MS = 45_000
BROKER_CONSUMER_HEARTBEAT_MS = 5_000
DIAGONAL = ((2, 16), (8, 128), (16, 256))
TARGET_P99_S = 0.5  # issue 17: rebalance p99 < 500 ms for azk at 16 members x 256 partitions
FULL = tuple((m, p) for m in (2, 8, 16) for p in (16, 128, 256))


_out_lock = threading.Lock()  # confluent-kafka members write from their poll threads


def out(ev: str, **fields: Any) -> None:
    """One JSON line on stdout for the orchestrator."""
    fields["ev"] = ev
    fields.setdefault("t", time.time())
    line = json.dumps(fields) + "\n"
    with _out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


# -- the producer ----------------------------------------------------------------------------


async def producer_main(args: argparse.Namespace) -> None:
    """Write one 100 B record to every partition every ``--tick-ms`` until SIGTERM."""
    from aiokafka import AIOKafkaProducer

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap_server, acks=1, linger_ms=5)
    await producer.start()
    value = b"r" * 100
    try:
        out("producing")
        tick = args.tick_ms / 1000
        next_t = time.monotonic()
        while not stop.is_set():
            for p in range(args.partitions):
                await producer.send(args.topic, value, partition=p)
            next_t += tick
            delay = next_t - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
            else:
                next_t = time.monotonic()
    finally:
        await producer.stop()


# -- a member process ------------------------------------------------------------------------


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


def patch_original(backoff_s: float) -> None:
    """Make aiozkconsumer rebalance like the 0.10.2 consumer (emulation, member side only)."""
    import anyio

    from aiozkconsumer.zk.client import ZkClient
    from aiozkconsumer.zkgroup.rebalancer import Rebalancer

    incremental = Rebalancer._rebalance

    async def release_everything_first(self: Any, blocking: list[str]) -> bool:
        await self._release(self.ownership.owned())
        return await incremental(self, blocking)

    async def sleep_backoff(self: Any, paths: Iterable[str], timeout_s: float) -> bool:
        await anyio.sleep(backoff_s)
        return True

    Rebalancer._rebalance = release_everything_first  # type: ignore[method-assign]
    ZkClient.wait_deleted = sleep_backoff  # type: ignore[method-assign]


async def azk_member(
    args: argparse.Namespace, slot: int, tracker: Tracker, stop: asyncio.Event
) -> None:
    import anyio

    from aiozkconsumer import ConsumerConfig, create_connector

    member_id = f"s{slot}-{uuid.uuid4().hex[:6]}"
    if args.mode == "azk-kafka":
        config = ConsumerConfig(
            group_id=args.group,
            group_coordinator="kafka",
            bootstrap_servers=args.bootstrap_server,
            consumer_id=member_id,
            auto_offset_reset="largest",
            session_timeout_ms=args.kafka_session_ms,
            heartbeat_interval_ms=args.kafka_heartbeat_ms,
        )
    elif args.mode == "azk-consumer":
        # Session and heartbeat interval are the broker's (group.consumer.*).
        config = ConsumerConfig(
            group_id=args.group,
            group_coordinator="kafka",
            group_protocol="consumer",
            group_remote_assignor=args.remote_assignor,
            bootstrap_servers=args.bootstrap_server,
            consumer_id=member_id,
            auto_offset_reset="largest",
        )
    else:
        # Kafka 4.3 (KRaft) has no /brokers in ZooKeeper: metadata from the brokers.
        kraft = {"bootstrap_servers": args.bootstrap_server} if args.kafka == "4.3" else {}
        config = ConsumerConfig(
            group_id=args.group,
            zookeeper_connect=args.zookeeper,
            consumer_id=member_id,
            auto_offset_reset="largest",
            **kraft,
        )
    connector = create_connector(config)

    class Listener:
        async def before_releasing_partitions(self, ownership: dict[str, set[int]]) -> None:
            tracker.released(ownership.get(args.topic, set()))

        async def before_starting_fetchers(self, consumer_id: str, global_view: Any) -> None:
            mine = sorted(
                p
                for p, tid in global_view.get(args.topic, {}).items()
                if tid.consumer == consumer_id
            )
            out("assigned", slot=slot, member=consumer_id, partitions=mine)

    connector.set_consumer_rebalance_listener(Listener())
    async with connector:
        streams = await connector.create_message_streams({args.topic: 1})
        out("started", slot=slot, member=connector.consumer_id_string)
        stream = streams[args.topic][0]

        async def consume() -> None:
            async for msg in stream:
                tracker.record(msg.partition)

        # The ZooKeeper coordinator times each rebalance by phase (Rebalancer.phase_history).
        phase_history = getattr(getattr(connector, "coordinator", None), "phase_history", ())

        def phases_of(started_at: float) -> tuple[float | None, dict[str, float] | None]:
            for ph in reversed(phase_history):
                if ph.started_at == started_at:
                    return ph.queued_ms, dict(ph.phases)
            return None, None

        async def history() -> None:
            reported = 0
            while True:
                # The initial subscription's rebalance is reported at once, not at the next.
                recs = connector.statistics().rebalances
                for rec in recs[reported:]:
                    queued_ms, phases = phases_of(rec.started_at)
                    out(
                        "rebalance",
                        slot=slot,
                        member=connector.consumer_id_string,
                        started_at=rec.started_at,
                        duration_s=rec.duration_s,
                        attempts=rec.attempts,
                        succeeded=rec.succeeded,
                        kept=rec.kept,
                        released=rec.released,
                        acquired=rec.acquired,
                        owns=len(rec.partitions),
                        reason=rec.reason,
                        queued_ms=queued_ms,
                        phases=phases,
                    )
                reported = len(recs)
                await connector.wait_for_state_change()

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            tg.start_soon(history)
            await stop.wait()
            tg.cancel_scope.cancel()
        owned = [tp.partition for tp in connector.statistics().owned_partitions]
    tracker.released(owned)


async def aiokafka_member(
    args: argparse.Namespace, slot: int, tracker: Tracker, stop: asyncio.Event
) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap_server,
        group_id=args.group,
        auto_offset_reset="latest",
        session_timeout_ms=args.aiokafka_session_ms,
        heartbeat_interval_ms=args.aiokafka_heartbeat_ms,
    )

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def __init__(self) -> None:
            self.revoked_at = time.time()

        async def on_partitions_revoked(self, revoked: Any) -> None:
            self.revoked_at = time.time()
            tracker.released(tp.partition for tp in revoked)

        async def on_partitions_assigned(self, assigned: Any) -> None:
            now = time.time()
            parts = sorted(tp.partition for tp in assigned)
            out("assigned", slot=slot, member=f"s{slot}", partitions=parts, t=now)
            out(
                "rebalance",
                slot=slot,
                member=f"s{slot}",
                started_at=self.revoked_at,
                duration_s=now - self.revoked_at,
                attempts=1,
                succeeded=True,
                kept=0,
                released=-1,
                acquired=len(parts),
                owns=len(parts),
            )

    await consumer.start()
    try:
        consumer.subscribe([args.topic], listener=Listener())
        out("started", slot=slot, member=f"s{slot}")
        while not stop.is_set():
            got = await consumer.getmany(timeout_ms=100)
            for tp, msgs in got.items():
                for _ in msgs:
                    tracker.record(tp.partition)
        owned = [tp.partition for tp in consumer.assignment()]
    finally:
        await consumer.stop()
    tracker.released(owned)


async def java_member(
    args: argparse.Namespace, slot: int, tracker: Tracker, stop: asyncio.Event
) -> None:
    """A Java ``KafkaConsumer`` (kafka-clients 4.3.1, ``group.protocol=consumer``) in a JVM of
    its own; its events are timed when this process reads its output lines.

    The join is timed from the moment the consumer was built and subscribed (the ``STARTED``
    line), not from the command: the JVM's start-up is reported apart (``jvm_started``).
    """
    from aiozkconsumer.testing.java_member import JavaAssignment, JavaConsumerMember

    owned: set[int] = set()

    def on_event(ev: Any) -> None:
        if not isinstance(ev, JavaAssignment):
            tracker.record(ev.partition, ev.received_at)
            return
        parts = {tp.partition for tp in ev.changed if tp.topic == args.topic}
        if ev.change == "assigned":
            owned.update(parts)
            out(
                "assigned",
                slot=slot,
                member=ev.member_id,
                partitions=sorted(owned),
                t=ev.received_at,
            )
        else:  # revoked, lost
            owned.difference_update(parts)
            tracker.released(parts)

    t_spawn = time.time()
    member = JavaConsumerMember(
        args.bootstrap_server,
        args.group,
        [args.topic],
        flavour="kraft",
        group_protocol="consumer",
        assignor=args.remote_assignor or "uniform",
        commit="auto",
        extra_properties={"auto.offset.reset": "latest"},
        client_id=f"s{slot}-{uuid.uuid4().hex[:6]}",
        on_event=on_event,
        keep_records=False,
        start_timeout_s=120,
        poll_timeout_ms=args.java_poll_ms,
    )
    try:
        await member.start()
        started = member.started_at or time.time()
        out("jvm_started", slot=slot, startup_s=started - t_spawn)
        out("starting", slot=slot, t=started)  # the join's clock starts here
        out("started", slot=slot, member=member.client_id)
        await stop.wait()
    finally:
        await member.stop()
        if member.errors:
            out("error", slot=slot, error="; ".join(member.errors))
    tracker.released(owned)


async def confluent_member(
    args: argparse.Namespace, slot: int, tracker: Tracker, stop: asyncio.Event
) -> None:
    """A confluent-kafka ``Consumer`` with ``group.protocol=consumer``, polled in a thread
    (its calls block); the rebalance callbacks run in that thread, within ``consume()``."""
    from confluent_kafka import Consumer

    halt = threading.Event()
    owned: set[int] = set()
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "group.id": args.group,
        "group.protocol": "consumer",
        "client.id": f"s{slot}",
        "auto.offset.reset": "latest",
        "enable.auto.commit": True,
    }
    if args.remote_assignor:
        conf["group.remote.assignor"] = args.remote_assignor

    def on_assign(consumer: Any, partitions: list[Any]) -> None:
        # The consumer protocol is incremental: these are the partitions added.
        owned.update(tp.partition for tp in partitions)
        out("assigned", slot=slot, member=f"s{slot}", partitions=sorted(owned))

    def on_revoke(consumer: Any, partitions: list[Any]) -> None:
        parts = {tp.partition for tp in partitions}
        owned.difference_update(parts)
        tracker.released(parts)

    def run() -> None:
        consumer = Consumer(conf)
        try:
            consumer.subscribe(
                [args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke
            )
            out("started", slot=slot, member=f"s{slot}")
            while not halt.is_set():
                for msg in consumer.consume(num_messages=1000, timeout=0.1):
                    partition = msg.partition()
                    if msg.error() is None and partition is not None:
                        tracker.record(partition)
        finally:
            consumer.close()  # leaves the group (epoch -1); on_revoke is called first

    task = asyncio.ensure_future(asyncio.to_thread(run))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    halt.set()
    stopped.cancel()
    await task
    tracker.released(owned)


async def member_main(args: argparse.Namespace) -> None:
    """Host ``--slots`` member slots; obey ``start i`` / ``stop i`` / ``report`` on stdin."""
    if args.mode == "original":
        patch_original(args.original_backoff_ms / 1000)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    run = {
        "aiokafka": aiokafka_member,
        "java-consumer": java_member,
        "confluent-consumer": confluent_member,
    }.get(args.mode, azk_member)
    tasks: dict[int, tuple[asyncio.Task[None], asyncio.Event]] = {}
    stopping: list[asyncio.Task[None]] = []
    trackers = {i: Tracker(i) for i in args.slots}

    async def life(slot: int, stop: asyncio.Event) -> None:
        try:
            await run(args, slot, trackers[slot], stop)
        except Exception as e:
            out("error", slot=slot, error=repr(e))
        out("stopped", slot=slot)

    out("ready")
    while True:
        line = (await reader.readline()).decode().strip()
        if not line or line == "quit":
            break
        cmd, _, arg = line.partition(" ")
        if cmd == "start":
            slot = int(arg)
            # A Java member says "starting" once its JVM is up and it subscribed.
            out("spawning" if args.mode == "java-consumer" else "starting", slot=slot)
            stop = asyncio.Event()
            tasks[slot] = (asyncio.create_task(life(slot, stop)), stop)
        elif cmd == "stop":
            slot = int(arg)
            out("stopping", slot=slot)
            task, stop_slot = tasks.pop(slot)
            stop_slot.set()
            stopping.append(task)
        elif cmd == "report":
            out("gaps", gaps={str(s): tr.report() for s, tr in trackers.items()})
    for _, stop in tasks.values():
        stop.set()
    await asyncio.gather(*stopping, *(t for t, _ in tasks.values()), return_exceptions=True)


# -- the orchestrator ------------------------------------------------------------------------


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


def settled_at(run: Run, since: float) -> float | None:
    """When the group settled after ``since``, or ``None`` if it has not (see module doc).

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


def owner_snapshot(run: Run) -> dict[int, int]:
    """partition -> slot, from the live slots' latest assignments."""
    return {p: s for s, st in run.slots.items() if st.live for p in st.owned}


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
    lat = [r["latency_s"] for r in results if r["latency_s"] is not None]
    gaps_ = [r["unmoved_max_gap_s"] for r in results if r["unmoved_max_gap_s"] is not None]
    ready = [e["t"] - spawned_at for e in run.events if e["ev"] == "ready"]
    jvm = [e["startup_s"] for e in run.events if e["ev"] == "jvm_started"]
    return {
        "mode": mode,
        "members": members,
        "partitions": partitions,
        "kafka": args.kafka,
        "heartbeat_ms": heartbeat_ms(mode, args),
        "session_ms": (
            args.kafka_session_ms
            if mode == "azk-kafka"
            else args.aiokafka_session_ms
            if mode == "aiokafka"
            else BROKER_CONSUMER_SESSION_MS
            if mode in CONSUMER_PROTOCOL_MODES
            else None
        ),
        # Start-up, apart from the rebalance figures: member processes from spawn to ready
        # to take commands (interpreter and imports), and Java members' JVMs (spawn to
        # consumer built and subscribed), once per member start.
        "process_ready_max_s": max(ready) if ready else None,
        "jvm_start_p50_s": percentile(jvm, 50) if jvm else None,
        "jvm_start_max_s": max(jvm) if jvm else None,
        "load_before": load_before,
        "load_after": uptime(),
        "events": len(results),
        "settled": len(lat),
        "p50_s": percentile(lat, 50),
        "p99_s": percentile(lat, 99),
        "max_s": max(lat) if lat else None,
        "from_ids_p50_s": percentile(
            [r["latency_from_ids_s"] for r in results if r["latency_from_ids_s"]], 50
        ),
        "from_ids_p99_s": percentile(
            [r["latency_from_ids_s"] for r in results if r["latency_from_ids_s"]], 99
        ),
        "moved_median": percentile([r["moved"] for r in results], 50),
        "unmoved_gap_p50_s": percentile(gaps_, 50),
        "unmoved_gap_max_s": max(gaps_) if gaps_ else None,
        "baseline_gap_max_s": max(baseline) if baseline else None,
        "owner_node_problems": sum(len(r["owner_node_problems"]) for r in results),
        "phases": phase_stats(results),
        "critical_path": critical_stats(results),
        "double_ownership": overlaps(run),
        "errors": run.errors,
        "event_details": results,
    }


def _phase_order() -> tuple[str, ...]:
    from aiozkconsumer.zkgroup.phases import PHASES

    return ("queued", *PHASES, "total", "first_records")


PHASE_ORDER = _phase_order()


def phase_stats(results: list[dict[str, Any]]) -> dict[str, dict[str, float | int]]:
    """Per phase, over the member rebalances of every event that report phases (the
    ZooKeeper modes): how many spent time in it (``n``), and p50 / p99 / max ms (a phase a
    rebalance did not reach counts as 0). ``total`` is the rebalance's duration,
    ``first_records`` from its fetchers' start to the first record of the last partition it
    acquired, ``queued`` from the trigger to its start (triggered rebalances only)."""
    rows: dict[str, list[float]] = {p: [] for p in PHASE_ORDER}
    for r in (r for ev in results for r in ev["rebalances"] if r.get("phases") is not None):
        for p in PHASE_ORDER:
            if p == "total":
                v = r["duration_s"] * 1000
            elif p == "first_records":
                v = r.get("first_records_ms")
            elif p == "queued":
                v = r.get("queued_ms")
            else:
                v = r["phases"].get(p, 0.0)
            if v is not None:
                rows[p].append(v)
    return {
        p: {
            "n": sum(1 for v in vs if v > 0),
            "of": len(vs),
            "p50_ms": percentile(vs, 50),
            "p99_ms": percentile(vs, 99),
            "max_ms": max(vs) if vs else float("nan"),
        }
        for p, vs in rows.items()
        if vs
    }


CRITICAL_SEGMENTS = ("cmd_to_ids_ms", "ids_to_start_ms", "rebalance_ms", "end_to_settled_ms")


def critical_stats(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The events' critical paths by kind (``all``, ``join``, ``leave``): p50 / p99 / max ms
    of each segment, and how often each phase was the critical member's longest."""
    out_: dict[str, dict[str, Any]] = {}
    for kind in ("all", "join", "leave"):
        crits = [
            r["critical"]
            for r in results
            if r.get("critical") and (kind == "all" or r["kind"] == kind)
        ]
        if not crits:
            continue
        row: dict[str, Any] = {"n": len(crits)}
        for seg in CRITICAL_SEGMENTS:
            vs = [c[seg] for c in crits if c.get(seg) is not None]
            row[seg] = {
                "p50": percentile(vs, 50),
                "p99": percentile(vs, 99),
                "max": max(vs) if vs else float("nan"),
            }
        longest: dict[str, int] = {}
        for c in crits:
            if c.get("phases"):
                top = max(c["phases"], key=lambda p: c["phases"][p])
                longest[top] = longest.get(top, 0) + 1
        row["longest_phase"] = longest
        out_[kind] = row
    return out_


KAFKA_VERSIONS = ("3.9", "4.3")
KAFKA_TIMEOUT_OPTIONS = (
    ("--kafka-session-ms", 10_000, "session.timeout.ms of the azk-kafka members"),
    ("--kafka-heartbeat-ms", 1_000, "heartbeat.interval.ms of the azk-kafka members"),
    ("--aiokafka-session-ms", 10_000, "session_timeout_ms of the aiokafka members (its default)"),
    (
        "--aiokafka-heartbeat-ms",
        3_000,
        "heartbeat_interval_ms of the aiokafka members (its default)",
    ),
)


def kafka_timeouts(args: argparse.Namespace) -> list[str]:
    """The Kafka-coordinated members' timeouts as member-process options."""
    flags = []
    for opt, _, _ in KAFKA_TIMEOUT_OPTIONS:
        flags += [opt, str(getattr(args, opt[2:].replace("-", "_")))]
    return flags


def heartbeat_ms(mode: str, args: argparse.Namespace) -> int | None:
    """The heartbeat interval of a Kafka-coordinated mode (``None``: ZooKeeper modes); the
    ``consumer``-protocol modes get the broker's ``group.consumer.heartbeat.interval.ms``."""
    if mode == "azk-kafka":
        return int(args.kafka_heartbeat_ms)
    if mode == "aiokafka":
        return int(args.aiokafka_heartbeat_ms)
    if mode in CONSUMER_PROTOCOL_MODES:
        return int(args.consumer_heartbeat_ms or BROKER_CONSUMER_HEARTBEAT_MS)
    return None


def broker_properties(args: argparse.Namespace) -> dict[str, str]:
    """Kafka 4.3 broker settings for the ``consumer``-protocol groups (every such mode alike:
    the broker is shared); the classic groups and ZooKeeper do not read them."""
    hb = args.consumer_heartbeat_ms
    if args.kafka != "4.3" or not hb:
        return {}
    return {
        "group.consumer.heartbeat.interval.ms": str(hb),
        "group.consumer.min.heartbeat.interval.ms": str(min(hb, BROKER_CONSUMER_HEARTBEAT_MS)),
    }


def event_jitter_ms(mode: str, args: argparse.Namespace) -> int:
    """The random pause before each event: ``--event-jitter-ms``, or by default the mode's
    heartbeat interval (0 for the ZooKeeper modes)."""
    if args.event_jitter_ms >= 0:
        return int(args.event_jitter_ms)
    return heartbeat_ms(mode, args) or 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("producer", help="(internal) write to every partition every tick")
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--tick-ms", type=int, default=100)
    m = sub.add_parser("member", help="(internal) host member slots driven through stdin")
    m.add_argument("--mode", choices=MODES, required=True)
    m.add_argument("--group", required=True)
    m.add_argument("--topic", required=True)
    m.add_argument("--slots", required=True, help="comma-separated slot numbers")
    m.add_argument("--original-backoff-ms", type=int, default=2000)
    m.add_argument("--kafka", choices=KAFKA_VERSIONS, default="3.9")
    m.add_argument("--remote-assignor")
    m.add_argument("--java-poll-ms", type=int, default=1000)
    for opt, default, _ in KAFKA_TIMEOUT_OPTIONS:
        m.add_argument(opt, type=int, default=default)
    for sp in (p, m):
        sp.add_argument("--zookeeper", required=True)
        sp.add_argument("--bootstrap-server", required=True)

    parser.add_argument("--quick", action="store_true", help="smoke size: 6 events, small grid")
    parser.add_argument(
        "--grid",
        choices=("diagonal", "full"),
        default="diagonal",
        help="diagonal: 2x16, 8x128, 16x256; full: every members x partitions",
    )
    parser.add_argument(
        "--modes",
        help="comma-separated subset of "
        + ", ".join(MODES)
        + f" (default: {', '.join(CLASSIC_MODES)} with --kafka 3.9, all with --kafka 4.3; "
        f"{', '.join(CONSUMER_PROTOCOL_MODES)} need --kafka 4.3)",
    )
    parser.add_argument(
        "--kafka",
        choices=KAFKA_VERSIONS,
        default="3.9",
        help="the LocalCluster's broker: 3.9 (ZooKeeper mode, default) or 4.3 (KRaft; a "
        "standalone ZooKeeper next to it for the ZooKeeper-coordinated modes). With "
        "--zookeeper/--bootstrap-server: the version of that cluster",
    )
    parser.add_argument(
        "--consumer-heartbeat-ms",
        type=int,
        default=1000,
        help="Kafka 4.3: the broker's group.consumer.heartbeat.interval.ms (and "
        "group.consumer.min.heartbeat.interval.ms when lower than its 5000 default), the "
        "heartbeat interval of every consumer-protocol member; 0: the broker default 5000 "
        "(default 1000, as azk-kafka's heartbeat)",
    )
    parser.add_argument(
        "--java-poll-ms",
        type=int,
        default=1000,
        help="java-consumer: the KafkaConsumer.poll timeout (the rebalance listener runs "
        "within poll; default 1000)",
    )
    parser.add_argument(
        "--remote-assignor",
        choices=("uniform", "range"),
        default=None,
        help="group.remote.assignor of the consumer-protocol members (default: unset, the "
        "broker's default, uniform; the Java member is given uniform explicitly)",
    )
    parser.add_argument(
        "--configs", help="comma-separated MEMBERSxPARTITIONS (e.g. 16x256); overrides --grid"
    )
    parser.add_argument("--events", type=int, default=20, help="join/leave events per config")
    parser.add_argument("--tick-ms", type=int, default=100, help="producer interval per partition")
    parser.add_argument(
        "--members-per-process", type=int, default=0, help="0: 1 for 2 members, 2 for 8, 4 for 16"
    )
    parser.add_argument("--settle-timeout", type=float, default=30.0, help="seconds per event")
    parser.add_argument(
        "--original-backoff-ms",
        type=int,
        default=2000,
        help="rebalance.backoff.ms of the emulated original",
    )
    for opt, default, text in KAFKA_TIMEOUT_OPTIONS:
        parser.add_argument(opt, type=int, default=default, help=f"{text} (default {default})")
    parser.add_argument(
        "--event-jitter-ms",
        type=int,
        default=-1,
        help="wait a random 0..N ms before each event, so that events do not keep one phase "
        "against the members' heartbeats (the settle check's fixed 1 s pause would lock it); "
        "default -1: the mode's heartbeat interval, 0 for the ZooKeeper modes",
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--name", default="rebalance", help="result file stem (<name>.json, <name>.md)"
    )
    add_cluster_args(parser)
    args = parser.parse_args(argv)
    if args.command == "producer":
        asyncio.run(producer_main(args))
        return
    if args.command == "member":
        args.slots = [int(s) for s in args.slots.split(",")]
        asyncio.run(member_main(args))
        return
    grid = FULL if args.grid == "full" else DIAGONAL
    if args.quick:
        args.events = min(args.events, 6)
        grid = ((2, 16), (8, 64))
    if args.configs:
        grid = tuple(
            (int(m), int(p)) for m, p in (c.split("x") for c in args.configs.split(",") if c)
        )
    default_modes = MODES if args.kafka == "4.3" else CLASSIC_MODES
    modes = [x for x in (args.modes or ",".join(default_modes)).split(",") if x]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes: {', '.join(sorted(unknown))} (known: {', '.join(MODES)})")
    if args.kafka != "4.3" and set(modes) & set(CONSUMER_PROTOCOL_MODES):
        parser.error(f"{', '.join(CONSUMER_PROTOCOL_MODES)} need --kafka 4.3")
    flavour = "kraft" if args.kafka == "4.3" else "zookeeper"
    with cluster_from_args(
        args, flavour=flavour, broker_properties=broker_properties(args)
    ) as info:
        before = machine()
        say(f"machine before: {before['uptime']}; {before['java_processes']} java processes")
        configs = []
        loads = []
        for members, partitions in grid:
            for mode in modes:
                say(f"{mode}: {members} members x {partitions} partitions, {args.events} events")
                configs.append(asyncio.run(run_config(info, mode, members, partitions, args)))
                loads.append(f"{mode} {members}x{partitions}: {uptime()}")
        data = {
            "benchmark": "rebalance",
            "settings": {
                "events": args.events,
                "tick_ms": args.tick_ms,
                "grid": [list(g) for g in grid],
                "modes": modes,
                "original_backoff_ms": args.original_backoff_ms,
                "kafka_session_ms": args.kafka_session_ms,
                "kafka_heartbeat_ms": args.kafka_heartbeat_ms,
                "aiokafka_session_ms": args.aiokafka_session_ms,
                "aiokafka_heartbeat_ms": args.aiokafka_heartbeat_ms,
                "event_jitter_ms": {mode: event_jitter_ms(mode, args) for mode in modes},
                "quick": args.quick,
                "kafka": args.kafka,
                "broker_properties": broker_properties(args),
                "remote_assignor": args.remote_assignor,
                "java_poll_ms": args.java_poll_ms,
            },
            "command": " ".join(sys.argv),
            "machine_before": before,
            "machine_after": machine(),
            "uptime_per_config": loads,
            "versions": {
                **versions("aiozkconsumer", "aiokafka", "aiozk", "confluent-kafka"),
                "librdkafka": librdkafka_version(),
                "kafka-clients (Java member)": "4.3.1" if args.kafka == "4.3" else "-",
                "broker": "4.3.1 (KRaft)" if args.kafka == "4.3" else "3.9.1 (ZooKeeper mode)",
            },
            "configs": configs,
        }
        write_results(args.out_dir, args.name, data, markdown(data))


def librdkafka_version() -> str:
    """The librdkafka confluent-kafka runs on (``-`` if not installed)."""
    try:
        import confluent_kafka
    except ImportError:
        return "-"
    return str(confluent_kafka.libversion()[0])


def ms(seconds: float | None) -> str:
    """Seconds as whole milliseconds, ``-`` for None/NaN."""
    return fmt(seconds * 1000 if seconds is not None and seconds == seconds else None)


def by_kind(events: list[dict[str, Any]], kind: str) -> list[str]:
    """Cells for the join/leave table: count, latency p50/p99/max, unmoved gap p50/max."""
    mine = [e for e in events if e["kind"] == kind]
    lat = [e["latency_s"] for e in mine if e["latency_s"] is not None]
    gaps = [e["unmoved_max_gap_s"] for e in mine if e["unmoved_max_gap_s"] is not None]
    return [
        f"{len(lat)}/{len(mine)}",
        ms(percentile(lat, 50)),
        ms(percentile(lat, 99)),
        ms(max(lat) if lat else None),
        f"{ms(percentile(gaps, 50))} / {ms(max(gaps) if gaps else None)}",
    ]


def markdown(data: dict[str, Any]) -> str:
    """The result tables."""
    s = data["settings"]
    rows = [
        [
            c["mode"],
            f"{c['members']} x {c['partitions']}",
            fmt(c.get("heartbeat_ms")),
            f"{c['settled']}/{c['events']}",
            ms(c["p50_s"]),
            ms(c["p99_s"]),
            ms(c["max_s"]),
            ms(c["from_ids_p99_s"]),
            fmt(c["moved_median"]),
            ms(c["unmoved_gap_p50_s"]),
            ms(c["unmoved_gap_max_s"]),
            ms(c["baseline_gap_max_s"]),
            len(c["double_ownership"]),
            c["owner_node_problems"] if c["mode"] in ZK_MODES else "n/a",
        ]
        for c in data["configs"]
    ]
    target = [
        c
        for c in data["configs"]
        if c["mode"] == "azk" and c["members"] == 16 and c["partitions"] == 256
    ]
    lines = [
        "# Rebalance latency",
        "",
        f"{s['events']} alternating leave/join events per row; a producer writes one record to "
        f"every partition every {s['tick_ms']} ms. Latency: from the member process starting "
        "to leave/join to every partition owned and handing out records again (ms). "
        "'from ids': from the ZooKeeper membership change seen by a watch. Unmoved gap: the "
        "largest gap between two records of a partition whose owner did not change, per event "
        "(p50 over events, and max); baseline: the same in a quiet 3 s window. Double: "
        "partitions two members handed out in overlapping intervals. Owner nodes: owner nodes "
        "disagreeing with the members after settling. `original` emulates the 0.10.2 consumer "
        f"(release everything every rebalance, sleep {s['original_backoff_ms']} ms per "
        "conflict). `azk-kafka`: aiozkconsumer with `group.coordinator=kafka` (eager, range "
        "assignor); heartbeat ms: the heartbeat interval of the Kafka-coordinated modes "
        f"(session: azk-kafka {s.get('kafka_session_ms', '-')} ms, aiokafka "
        f"{s.get('aiokafka_session_ms', '-')} ms), who learn of a rebalance from a heartbeat "
        "answer; before each event the orchestrator waits a random 0 to "
        + ", ".join(f"{m} {j} ms" for m, j in s.get("event_jitter_ms", {}).items())
        + " (a random phase against the heartbeats).",
        "",
        f"Broker: {data['versions'].get('broker', 'Kafka 3.9.1 (ZooKeeper mode)')}"
        + (
            "; the ZooKeeper modes use a standalone ZooKeeper next to it (metadata from the "
            "broker). Consumer-protocol modes (`group.protocol=consumer`, KIP-848, broker-side "
            f"assignor {s.get('remote_assignor') or 'uniform (the broker default)'}): "
            "`azk-consumer` (aiozkconsumer), `java-consumer` (kafka-clients 4.3.1 "
            "`KafkaConsumer`, one JVM per member, its events timed as this harness reads its "
            "output; the join clock starts once the consumer is built and subscribed, the "
            "JVM start-up is in the start-up table), `confluent-consumer` (confluent-kafka "
            f"{data['versions'].get('confluent-kafka', '-')}, librdkafka "
            f"{data['versions'].get('librdkafka', '-')}); their heartbeat interval is the "
            "broker's: "
            + (
                ", ".join(f"`{k}={v}`" for k, v in s["broker_properties"].items())
                or "`group.consumer.heartbeat.interval.ms` 5000 (default)"
            )
            + ", the same for every consumer-protocol mode (the broker is shared); session: "
            f"the broker's {BROKER_CONSUMER_SESSION_MS} ms. Settled, for them: balanced, "
            "covering, disjoint, fetching (a member whose partitions stay hears nothing)."
            if s.get("kafka") == "4.3"
            else "."
        ),
        "",
        f"Command: `{data.get('command', '-')}`",
        "",
        f"Machine: {data['machine_before']['cpus']} CPUs; load before: "
        f"`{data['machine_before']['uptime']}`; after: `{data['machine_after']['uptime']}`; "
        f"java processes: {data['machine_before']['java_processes']}.",
        "",
        md_table(
            [
                "mode",
                "members x partitions",
                "heartbeat ms",
                "settled",
                "p50 ms",
                "p99 ms",
                "max ms",
                "p99 from ids ms",
                "moved (median)",
                "unmoved gap p50 ms",
                "unmoved gap max ms",
                "baseline gap ms",
                "double",
                "owner nodes",
            ],
            rows,
        ),
        "",
    ]
    lines += [
        "Joins and leaves apart (latency ms over the events of that kind; unmoved gap ms: "
        "p50 and max over them):",
        "",
        md_table(
            [
                "mode",
                "members x partitions",
                "join n",
                "join p50",
                "join p99",
                "join max",
                "join unmoved gap p50 / max",
                "leave n",
                "leave p50",
                "leave p99",
                "leave max",
                "leave unmoved gap p50 / max",
            ],
            [
                [c["mode"], f"{c['members']} x {c['partitions']}"]
                + by_kind(c["event_details"], "join")
                + by_kind(c["event_details"], "leave")
                for c in data["configs"]
            ],
        ),
        "",
    ]
    phased = [c for c in data["configs"] if c.get("phases")]
    for c in phased:
        lines += [
            f"Rebalance phases, `{c['mode']}` {c['members']} x {c['partitions']} (ms, over the "
            "member rebalances of every event; a phase a rebalance did not reach counts as 0; "
            "n: rebalances that spent time in it). queued: trigger to start; total: the "
            "rebalance; first_records: its fetchers' start to the first record of the last "
            "partition it acquired:",
            "",
            md_table(
                ["phase", "n", "p50", "p99", "max"],
                [
                    [
                        p,
                        f"{v['n']}/{v['of']}",
                        fmt(v["p50_ms"], 1),
                        fmt(v["p99_ms"], 1),
                        fmt(v["max_ms"], 1),
                    ]
                    for p, v in c["phases"].items()
                ],
            ),
            "",
        ]
        cp = c.get("critical_path") or {}
        if cp:
            lines += [
                "Critical path per event (the member that settled last): command -> ids "
                "change (seen by the orchestrator's watch) -> its rebalance start -> its end "
                "-> settled (its and others' first records), ms p50 / p99 / max; longest "
                "phase: how often each phase was that member's longest:",
                "",
                md_table(
                    [
                        "events",
                        "n",
                        *(s.removesuffix("_ms") for s in CRITICAL_SEGMENTS),
                        "longest phase",
                    ],
                    [
                        [kind, row["n"]]
                        + [
                            " / ".join(fmt(row[s][q]) for q in ("p50", "p99", "max"))
                            for s in CRITICAL_SEGMENTS
                        ]
                        + [
                            ", ".join(
                                f"{p} {n}"
                                for p, n in sorted(
                                    row["longest_phase"].items(), key=lambda x: -x[1]
                                )
                            )
                        ]
                        for kind, row in cp.items()
                    ],
                ),
                "",
            ]
    if target:
        t = target[0]
        ok = t["p99_s"] == t["p99_s"] and t["p99_s"] < TARGET_P99_S
        lines.append(
            f"Target (azk, 16 x 256, p99 < {TARGET_P99_S * 1000:.0f} ms): "
            f"p99 = {fmt(t['p99_s'] * 1000)} ms -> "
            f"{'met' if ok else 'NOT met'}."
        )
    lines += [
        "",
        "Start-up, apart from the figures above (s): member processes from spawn to ready for "
        "commands (interpreter, imports); Java members: a JVM from spawn to the consumer "
        "built and subscribed, per member start (p50 / max). Load (1-minute average) before "
        "and after each row:",
        "",
        md_table(
            [
                "mode",
                "members x partitions",
                "processes ready (max)",
                "JVM start p50 / max",
                "load before",
                "load after",
            ],
            [
                [
                    c["mode"],
                    f"{c['members']} x {c['partitions']}",
                    fmt(c.get("process_ready_max_s"), 1),
                    (
                        f"{fmt(c.get('jvm_start_p50_s'), 1)} / {fmt(c.get('jvm_start_max_s'), 1)}"
                        if c.get("jvm_start_p50_s") is not None
                        else "-"
                    ),
                    load1(c.get("load_before", "")),
                    load1(c.get("load_after", "")),
                ]
                for c in data["configs"]
            ],
        ),
    ]
    lines += ["", "Load per configuration:", ""] + [f"- `{u}`" for u in data["uptime_per_config"]]
    return "\n".join(lines)


def load1(uptime_line: str) -> str:
    """The 1-minute load average of an ``uptime`` line (``-`` if none)."""
    _, _, loads = uptime_line.partition("load average:")
    return loads.split(",")[0].strip() or "-"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
