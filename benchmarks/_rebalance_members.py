"""The rebalance benchmark's child processes: the producer, and a member process hosting
member slots of one mode (aiozkconsumer in its ZooKeeper, Kafka and ``consumer``-protocol
groups and as the emulated 0.10.2 consumer; aiokafka; a Java ``KafkaConsumer``;
confluent-kafka), driven by ``start i`` / ``stop i`` / ``report`` lines on stdin and
answering with JSON lines on stdout (:mod:`_rebalance_tracker`).

Started by the orchestrator as ``rebalance.py producer ...`` and ``rebalance.py member ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from _rebalance_settings import JAVA_MODES
from _rebalance_tracker import Tracker, out

# -- the producer ----------------------------------------------------------------------------


AIOKAFKA_PRODUCER_MAX_PARTITIONS = 1024
"""Above this many partitions the load is written with confluent-kafka's producer."""


async def producer_main(args: argparse.Namespace) -> None:
    """Write one 100 B record to every partition every ``--tick-ms`` until SIGTERM.

    Up to :data:`AIOKAFKA_PRODUCER_MAX_PARTITIONS` partitions with aiokafka's producer (as
    every earlier run of this benchmark); above, with confluent-kafka's (the ``bench`` extra)
    when it is installed. aiokafka's ``send`` lists every partition of the topic on each call
    (``ClusterMetadata.partitions_for_topic``), so a tick costs O(partitions²): at 4,096
    partitions its producer alone took a whole core and fell behind its ticks (py-spy),
    leaving the group too little CPU to settle.
    """
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    value = b"r" * 100
    tick = args.tick_ms / 1000
    Producer = None
    if args.partitions > AIOKAFKA_PRODUCER_MAX_PARTITIONS:
        with contextlib.suppress(ImportError):
            from confluent_kafka import Producer
    if Producer is not None:
        producer = Producer({"bootstrap.servers": args.bootstrap_server, "acks": 1, "linger.ms": 5})

        async def write_tick() -> None:
            for p in range(args.partitions):
                while True:
                    try:
                        producer.produce(args.topic, value, partition=p)
                        break
                    except BufferError:  # the local queue is full: let it drain
                        producer.poll(0.01)
            producer.poll(0)

        out("producing")
        try:
            await _ticks(write_tick, tick, stop)
        finally:
            producer.flush(10)
        return
    from aiokafka import AIOKafkaProducer

    aio = AIOKafkaProducer(bootstrap_servers=args.bootstrap_server, acks=1, linger_ms=5)
    await aio.start()
    try:
        out("producing")

        async def write_tick_aio() -> None:
            for p in range(args.partitions):
                await aio.send(args.topic, value, partition=p)

        await _ticks(write_tick_aio, tick, stop)
    finally:
        await aio.stop()


async def _ticks(write: Callable[[], Awaitable[None]], tick: float, stop: asyncio.Event) -> None:
    """Await ``write()`` every ``tick`` seconds until ``stop``; a tick that overran starts
    the next one at once."""
    next_t = time.monotonic()
    while not stop.is_set():
        await write()
        next_t += tick
        delay = next_t - time.monotonic()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
        else:
            next_t = time.monotonic()


# -- a member process ------------------------------------------------------------------------


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
    # Static membership (KIP-345): the slot's instance id survives its restarts.
    static = instance_id(args, slot) if args.static else None
    if args.mode in ("azk-kafka", "azk-kafka-coop"):
        config = ConsumerConfig(
            group_id=args.group,
            group_coordinator="kafka",
            partition_assignment_strategy=(
                "cooperative-sticky" if args.mode == "azk-kafka-coop" else "range"
            ),
            bootstrap_servers=args.bootstrap_server,
            consumer_id=member_id,
            auto_offset_reset="largest",
            session_timeout_ms=args.kafka_session_ms,
            heartbeat_interval_ms=args.kafka_heartbeat_ms,
            group_instance_id=static,
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
            group_instance_id=static,
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

        async def generations() -> None:
            # The Kafka group's generation (consumer protocol: the member epoch) as this
            # member sees it: the rolling restart counts the ones the other members saw.
            seen: int | None = None
            while True:
                generation = connector.statistics().group_generation
                if generation is not None and generation != seen:
                    seen = generation
                    out("generation", slot=slot, generation=generation)
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            tg.start_soon(history)
            if args.mode != "azk" and args.mode != "original":
                tg.start_soon(generations)
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


def instance_id(args: argparse.Namespace, slot: int) -> str:
    """The ``group.instance.id`` of a static member slot (the same across its restarts)."""
    return f"{args.group}-s{slot}"


async def java_member(
    args: argparse.Namespace, slot: int, tracker: Tracker, stop: asyncio.Event
) -> None:
    """A Java ``KafkaConsumer`` in a JVM of its own; its events are timed when this process
    reads its output lines. ``java-consumer``: ``group.protocol=consumer`` (kafka-clients
    4.3.1 only); ``java-kafka-coop`` / ``java-kafka``: the classic protocol with
    ``cooperative-sticky`` / ``range``, session and heartbeat as the azk-kafka modes
    (kafka-clients 4.3.1 with ``--kafka 4.3``, 3.9.1 otherwise).

    The join is timed from the moment the consumer was built and subscribed (the ``STARTED``
    line), not from the command: the JVM's start-up is reported apart (``jvm_started``).
    """
    from aiozkconsumer.testing.java_member import JavaAssignment, JavaConsumerMember

    owned: set[int] = set()

    generation = -1

    def on_event(ev: Any) -> None:
        nonlocal generation
        if not isinstance(ev, JavaAssignment):
            tracker.record(ev.partition, ev.received_at)
            return
        if ev.generation >= 0 and ev.generation != generation:
            generation = ev.generation
            out("generation", slot=slot, generation=generation, t=ev.received_at)
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

    extra = {"auto.offset.reset": "latest"}
    if args.static:
        extra["group.instance.id"] = instance_id(args, slot)
    if args.mode == "java-consumer":
        protocol: dict[str, Any] = {
            "group_protocol": "consumer",
            "assignor": args.remote_assignor or "uniform",
        }
    else:
        protocol = {
            "group_protocol": "classic",
            "assignor": "cooperative-sticky" if args.mode == "java-kafka-coop" else "range",
            "session_timeout_ms": args.kafka_session_ms,
        }
        extra["heartbeat.interval.ms"] = str(args.kafka_heartbeat_ms)
    t_spawn = time.time()
    member = JavaConsumerMember(
        args.bootstrap_server,
        args.group,
        [args.topic],
        flavour="kraft" if args.kafka == "4.3" else "zookeeper",
        commit="auto",
        extra_properties=extra,
        **protocol,
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
    logging.basicConfig(
        level=getattr(args, "log_level", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    if args.mode == "original":
        patch_original(args.original_backoff_ms / 1000)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    run = {
        "aiokafka": aiokafka_member,
        "confluent-consumer": confluent_member,
        **dict.fromkeys(JAVA_MODES, java_member),
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
            out("spawning" if args.mode in JAVA_MODES else "starting", slot=slot)
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
