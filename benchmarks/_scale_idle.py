"""The scale benchmark's idle curve: one consumer process owning every partition of an empty
topic, and what it costs while nothing arrives.

The child (``scale.py idle-member``) imports its client, says ``imported`` (with the import
time), joins a fresh group for the topic and says ``ready`` once it owns every partition and
fetches them; it then idles until its stdin closes. The parent (:func:`measure_idle`) waits
``settle_s`` after ``ready``, then reads the child's CPU time (``/proc/<pid>/stat``: user +
system, every thread, librdkafka's included) and RSS (``/proc/<pid>/status``) once a second
over ``window_s``; start-up (spawn to owning, its CPU seconds, the import) is kept apart.

Clients, each at its library's defaults otherwise: ``azk`` (a ZooKeeper-coordinated
connector), ``azk-kafka`` (``group.coordinator=kafka``, classic protocol, session 10 s,
heartbeat 1 s), ``aiokafka`` (``AIOKafkaConsumer.subscribe()`` + ``getmany(timeout_ms=1000)``),
``confluent`` (``confluent_kafka.Consumer.subscribe()`` + ``consume(timeout=1)``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from _common import ClusterInfo, proc_cpu_s, proc_rss_mib, say, this_python

SCRIPT = str(Path(__file__).resolve().with_name("scale.py"))


# -- the child --------------------------------------------------------------------------------


def _say(ev: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"ev": ev, **fields}) + "\n")
    sys.stdout.flush()


def _stdin_closed() -> threading.Event:
    """An event set once stdin reaches its end (the parent's signal to stop)."""
    closed = threading.Event()

    def read() -> None:
        with contextlib.suppress(OSError, ValueError):
            while sys.stdin.buffer.readline():
                pass
        closed.set()

    threading.Thread(target=read, daemon=True).start()
    return closed


async def _azk(args: argparse.Namespace, stop: threading.Event) -> None:
    from aiozkconsumer import ConsumerConfig, create_connector

    group = f"idle-{uuid.uuid4().hex[:8]}"
    if args.client == "azk-kafka":
        config = ConsumerConfig(
            group_id=group,
            group_coordinator="kafka",
            bootstrap_servers=args.bootstrap_server,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
        )
    else:
        # A KRaft broker has no /brokers in ZooKeeper: metadata from the broker then.
        kraft = {"bootstrap_servers": args.bootstrap_server} if args.kafka == "4.3" else {}
        config = ConsumerConfig(group_id=group, zookeeper_connect=args.zookeeper, **kraft)
    async with create_connector(config) as connector:
        stream = (await connector.create_message_streams({args.topic: 1}))[args.topic][0]

        async def consume() -> None:
            async for _ in stream:
                pass

        task = asyncio.create_task(consume())
        while True:
            s = connector.statistics()
            if (
                len(s.owned_partitions) == args.partitions
                and not s.partitions_without_leader
                and s.seconds_since_fetch is not None
            ):
                break
            await asyncio.sleep(0.1)
        _say("ready", owned=len(s.owned_partitions))
        await asyncio.to_thread(stop.wait)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _aiokafka(args: argparse.Namespace, stop: threading.Event) -> None:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap_server, group_id=f"idle-{uuid.uuid4().hex[:8]}"
    )
    await consumer.start()
    try:
        consumer.subscribe([args.topic])
        said = False
        while not stop.is_set():
            await consumer.getmany(timeout_ms=1000)
            if not said and len(consumer.assignment()) == args.partitions:
                said = True
                _say("ready", owned=len(consumer.assignment()))
    finally:
        await consumer.stop()


def _confluent(args: argparse.Namespace, stop: threading.Event) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {"bootstrap.servers": args.bootstrap_server, "group.id": f"idle-{uuid.uuid4().hex[:8]}"}
    )
    try:
        consumer.subscribe([args.topic])
        said = False
        while not stop.is_set():
            consumer.consume(num_messages=1000, timeout=1.0)
            if not said and len(consumer.assignment()) == args.partitions:
                said = True
                _say("ready", owned=len(consumer.assignment()))
    finally:
        consumer.close()


def idle_member_main(args: argparse.Namespace) -> None:
    """The child: import the client, own every partition, idle until stdin closes."""
    stop = _stdin_closed()
    t0 = time.perf_counter()
    if args.client.startswith("azk"):
        import aiozkconsumer  # noqa: F401
    elif args.client == "aiokafka":
        import aiokafka  # noqa: F401
    else:
        import confluent_kafka  # noqa: F401
    _say("imported", import_s=time.perf_counter() - t0)
    if args.client == "confluent":
        _confluent(args, stop)
    else:
        asyncio.run((_aiokafka if args.client == "aiokafka" else _azk)(args, stop))
    _say("stopped")


# -- the parent -------------------------------------------------------------------------------


def _stop(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> int:
    """Close the child's stdin, wait for it (SIGKILL to its process group after ``grace_s``);
    its exit code."""
    with contextlib.suppress(OSError):
        assert proc.stdin is not None
        proc.stdin.close()
    timer = threading.Timer(grace_s, lambda: kill_group(proc.pid))
    timer.start()
    try:
        _, status = os.waitpid(proc.pid, 0)
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process group ``pgid`` (a child started in a session of its own,
    and everything it started), if it still exists."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def measure_idle(
    info: ClusterInfo,
    client: str,
    topic: str,
    partitions: int,
    *,
    kafka: str,
    settle_s: float,
    window_s: float,
    ready_timeout_s: float,
) -> dict[str, Any]:
    """One point of the idle curve: ``client`` owning the ``partitions`` of ``topic``.

    Returns:
        the point: ``ok``, ``owned``, ``cpu_pct`` (idle CPU, % of one core over the window),
        ``rss_mib`` (at the window's end), ``rss_max_mib``, ``import_s``, ``ready_s`` (spawn
        to owning every partition), ``startup_cpu_s`` (CPU seconds until then),
        ``peak_rss_mib`` (``VmHWM``: the process's peak, start-up included), ``error`` when
        it failed.
    """
    point: dict[str, Any] = {"client": client, "partitions": partitions, "ok": False}
    cmd = [
        this_python(),
        SCRIPT,
        "idle-member",
        "--client",
        client,
        "--topic",
        topic,
        "--partitions",
        str(partitions),
        "--zookeeper",
        info.zookeeper_connect,
        "--bootstrap-server",
        info.bootstrap_servers,
        "--kafka",
        kafka,
    ]
    t0 = time.monotonic()
    # A session of its own: a Ctrl-C at the terminal reaches the orchestrator only, which
    # stops this child (and whatever it started) itself.
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
    )
    lines: list[dict[str, Any]] = []
    got_line = threading.Condition()

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                with got_line:
                    lines.append(json.loads(raw))
                    got_line.notify_all()
        with got_line:
            lines.append({"ev": "eof"})
            got_line.notify_all()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        with got_line:
            got_line.wait_for(
                lambda: any(x["ev"] in ("ready", "eof") for x in lines),
                timeout=ready_timeout_s,
            )
        ready = next((x for x in lines if x["ev"] == "ready"), None)
        imported = next((x for x in lines if x["ev"] == "imported"), {})
        point["import_s"] = imported.get("import_s")
        if ready is None:
            point["error"] = f"not owning {partitions} partitions within {ready_timeout_s:.0f} s"
            return point
        point["ready_s"] = time.monotonic() - t0
        point["startup_cpu_s"] = proc_cpu_s(proc.pid)
        point["owned"] = ready.get("owned")
        time.sleep(settle_s)
        cpu0, w0 = proc_cpu_s(proc.pid), time.monotonic()
        rss: list[float] = []
        while time.monotonic() - w0 < window_s:
            time.sleep(min(1.0, max(0.0, window_s - (time.monotonic() - w0))))
            rss.append(proc_rss_mib(proc.pid))
        cpu1, w1 = proc_cpu_s(proc.pid), time.monotonic()
        point["peak_rss_mib"] = proc_rss_mib(proc.pid, "VmHWM")
        point.update(
            ok=True,
            cpu_pct=(cpu1 - cpu0) / (w1 - w0) * 100,
            rss_mib=rss[-1],
            rss_max_mib=max(rss),
            window_s=w1 - w0,
        )
        return point
    except FileNotFoundError:  # /proc/<pid> gone: the child died
        point["ok"] = False
        point["error"] = "the member process exited"
        return point
    finally:
        if proc.poll() is None:
            point["rc"] = _stop(proc)
        else:
            kill_group(proc.pid)
        reader.join(timeout=5)
        if not point.get("ok"):
            say(f"  idle {client} {partitions}: {point.get('error')}")


# -- the topics -------------------------------------------------------------------------------


async def _create_empty_topic(info: ClusterInfo, topic: str, partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    # The broker answers CreateTopics once every partition is set up: 10,000 take it longer
    # than aiokafka's default request timeout (40 s).
    admin = AIOKafkaAdminClient(
        bootstrap_servers=info.bootstrap_servers, request_timeout_ms=300_000
    )
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)], timeout_ms=300_000)
        # Created is not led yet: 10,000 partitions take the broker a while.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            described = await admin.describe_topics([topic])
            parts = described[0].get("partitions", []) if described else []
            if sum(1 for p in parts if p.get("leader", -1) >= 0) == partitions:
                return
            await asyncio.sleep(1.0)
        raise RuntimeError(f"{topic}: {partitions} partitions not all led within 300 s")
    finally:
        await admin.close()


async def _delete_topic(info: ClusterInfo, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    # The broker answers CreateTopics once every partition is set up: 10,000 take it longer
    # than aiokafka's default request timeout (40 s).
    admin = AIOKafkaAdminClient(
        bootstrap_servers=info.bootstrap_servers, request_timeout_ms=300_000
    )
    await admin.start()
    try:
        await admin.delete_topics([topic], timeout_ms=120_000)
    finally:
        await admin.close()


def create_empty_topic(info: ClusterInfo, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions (replication 1, no records) and wait
    until every partition has a leader.

    Raises:
        RuntimeError: if some partition has no leader within 300 s.
    """
    asyncio.run(_create_empty_topic(info, topic, partitions))


def delete_topic(info: ClusterInfo, topic: str) -> None:
    """Delete ``topic`` (best effort: a failure is reported, not raised)."""
    try:
        asyncio.run(_delete_topic(info, topic))
    except Exception as exc:
        say(f"  could not delete {topic}: {exc!r}")
