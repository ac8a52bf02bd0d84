"""``aiozkconsumer demo``: a consumer group reads a real topic end to end.

Starts a ``LocalCluster`` (ZooKeeper + one Kafka 3.9 broker in ZooKeeper mode) unless
``--zookeeper`` and ``--bootstrap-server`` name an existing cluster, creates a topic, produces
keyed records with aiokafka's producer, consumes them with a group of connectors, stops one
connector halfway to force a rebalance, and checks that nothing was lost and that the offsets
committed in ZooKeeper equal the log end offsets.

With ``--group-coordinator kafka`` the group is coordinated by the broker (the Java
client's protocol, ``KafkaConsumerConnector``), the stopped connector leaves with LeaveGroup,
and the committed offsets are read from Kafka; an existing cluster then needs only
``--bootstrap-server``.

Then the Spark section (unless ``--no-spark``; skipped with a message without PySpark): the
same topic through the ``zkkafka`` source into a Parquet table on ``local[*]``, the query
stopped after two batches and restarted from its checkpoint, and the table checked: every
record exactly once, the Spark group's offsets at the log end. It prints its own summary and
``RESULT:`` line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import click
from tqdm import tqdm

from ..base_connector import ConsumerConnector
from ..config import ConsumerConfig
from ..consumer import create_connector
from ..records import RebalanceRecord
from ..stream import KafkaStream
from ..zk import layout
from ..zk.client import ZkClient
from ._common import BOOTSTRAP_SERVERS, ZOOKEEPER_CONNECT, run_async
from .demo_spark import print_spark_summary, run_spark_section

__all__ = ["DemoResult", "demo", "run_demo"]


class Cluster(Protocol):
    """What the demo needs of a cluster (``LocalCluster`` or an existing one).

    ``zookeeper_connect`` is ``None`` for an existing cluster given without ``--zookeeper``
    (only with ``--group-coordinator kafka``).
    """

    @property
    def zookeeper_connect(self) -> str | None: ...

    @property
    def bootstrap_servers(self) -> str: ...

    async def create_topic(self, name: str, partitions: int) -> None: ...

    async def produce_to_partitions(
        self, topic: str, records_by_partition: Mapping[int, Sequence[tuple[bytes | None, bytes]]]
    ) -> int: ...

    async def log_end_offsets(self, topic: str) -> dict[int, int]: ...


@click.command("demo", help=__doc__, short_help="Run a consumer group end to end and verify it.")
@click.option(
    "--group-coordinator",
    type=click.Choice(["zookeeper", "kafka"]),
    default="zookeeper",
    show_default=True,
    help="Who coordinates the group: ZooKeeper (ZookeeperConsumerConnector, offsets in "
    "ZooKeeper) or the Kafka broker (KafkaConsumerConnector, offsets in Kafka).",
)
@click.option(
    "--zookeeper",
    type=ZOOKEEPER_CONNECT,
    help="Use this ZooKeeper (host:port[/chroot]) instead of a local cluster; not used with "
    "--group-coordinator kafka.",
)
@click.option(
    "--bootstrap-server",
    type=BOOTSTRAP_SERVERS,
    help="Kafka brokers of an existing cluster (host:port,...) instead of a local one; "
    "needs --zookeeper unless --group-coordinator kafka.",
)
@click.option(
    "--records",
    type=click.IntRange(min=1),
    default=1_000_000,
    show_default=True,
    help="Records to produce.",
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Partitions of the topic.",
)
@click.option(
    "--consumers",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Connectors in the group.",
)
@click.option(
    "--streams",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Streams per connector.",
)
@click.option(
    "--value-size",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Bytes per value.",
)
@click.option("--topic", help="Topic name (default: a new unique one).")
@click.option("--group", help="Group id (default: a new unique one).")
@click.option(
    "--stall-timeout",
    type=float,
    default=120.0,
    show_default=True,
    help="Give up when no new record arrives for this many seconds.",
)
@click.option("--no-progress", is_flag=True, help="Do not show progress bars.")
@click.option(
    "--no-spark",
    is_flag=True,
    help="Skip the Spark section (the topic through the zkkafka source into Parquet).",
)
def demo(**options: Any) -> None:
    args = argparse.Namespace(**options)
    if args.zookeeper and not args.bootstrap_server:
        raise click.UsageError("--zookeeper needs --bootstrap-server too")
    if args.bootstrap_server and not args.zookeeper and args.group_coordinator == "zookeeper":
        raise click.UsageError(
            "--bootstrap-server needs --zookeeper too (or --group-coordinator kafka)"
        )
    code = run_async(lambda: _amain(args))
    if code:
        raise click.exceptions.Exit(code)


@dataclass
class DemoResult:
    """What the demo measured.

    Attributes:
        produced: records acknowledged by the broker.
        distinct: distinct (partition, offset) pairs consumed.
        duplicates: records handed out more than once.
        lost: produced records never consumed.
        seconds: consume time, first record to last, seconds.
        rebalances: ``(member index, record)`` of every rebalance.
        offsets: per partition ``(committed offset or -1, log end offset)``.
        offsets_source: where the committed offsets were read: ``"ZooKeeper"`` or
            ``"Kafka"``.
        topic: the topic the demo produced to.
        group: the consumer group's id.
    """

    produced: int = 0
    distinct: int = 0
    duplicates: int = 0
    lost: int = 0
    seconds: float = 0.0
    rebalances: list[tuple[int, RebalanceRecord]] = field(default_factory=list)
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    offsets_source: str = "ZooKeeper"
    topic: str = ""
    group: str = ""

    @property
    def offsets_match(self) -> bool:
        """Whether every committed offset equals its log end offset."""
        return all(c == e for c, e in self.offsets.values())

    @property
    def ok(self) -> bool:
        """Nothing lost and offsets committed up to the log end."""
        return self.lost == 0 and self.offsets_match and self.produced > 0


class _Tracker:
    """Counts distinct and duplicate (partition, offset) pairs with one bitmap per partition."""

    def __init__(self, end_offsets: Mapping[int, int]) -> None:
        self.seen = {p: bytearray(n) for p, n in end_offsets.items()}
        self.total = sum(end_offsets.values())
        self.distinct = 0
        self.duplicates = 0
        self.first: float | None = None
        self.last = time.monotonic()
        self.changed = anyio.Event()

    def add(self, partition: int, offset: int) -> None:
        seen = self.seen[partition]
        if seen[offset]:
            self.duplicates += 1
            return
        seen[offset] = 1
        self.distinct += 1
        self.last = time.monotonic()
        if self.first is None:
            self.first = self.last


async def _consume(stream: KafkaStream, tracker: _Tracker, bar: tqdm[Any] | None) -> None:
    add = tracker.add
    n = 0
    async for msg in stream:
        add(msg.partition, msg.offset)
        n += 1
        if n % 2000 == 0:
            if bar is not None:
                bar.update(tracker.distinct - bar.n)  # redraws at most every mininterval
            tracker.changed.set()
            tracker.changed = anyio.Event()
            await asyncio.sleep(0)  # let fetchers and other streams run
    tracker.changed.set()


async def _member(
    index: int,
    config: ConsumerConfig,
    topic: str,
    streams_per_member: int,
    tracker: _Tracker,
    stop: anyio.Event,
    bar: tqdm[Any] | None,
    connectors: dict[int, ConsumerConnector],
) -> None:
    # Leaving the block commits what was consumed; a Kafka-coordinated member then sends
    # LeaveGroup, so the group rebalances at once rather than after session.timeout.ms.
    async with create_connector(config) as connector:
        connectors[index] = connector
        streams = await connector.create_message_streams({topic: streams_per_member})
        async with anyio.create_task_group() as tg:
            for stream in streams[topic]:
                tg.start_soon(_consume, stream, tracker, bar)
            await stop.wait()
            # Shutdown ends every stream: the consumers above finish on their own.
            await connector.shutdown()


def _records(i0: int, n: int, value_size: int) -> list[tuple[bytes | None, bytes]]:
    pad = b"x" * max(0, value_size - 12)
    return [(b"key-%d" % i, (b"%012d" % i + pad)[:value_size]) for i in range(i0, i0 + n)]


async def _produce(cluster: Cluster, topic: str, args: argparse.Namespace) -> int:
    per_round = 50_000
    produced = 0
    with tqdm(
        total=args.records,
        desc="produce",
        unit="rec",
        unit_scale=True,
        disable=args.no_progress,
        file=sys.stderr,
        mininterval=1,
    ) as bar:
        for start in range(0, args.records, per_round):
            n = min(per_round, args.records - start)
            records = _records(start, n, args.value_size)
            by_partition: dict[int, list[tuple[bytes | None, bytes]]] = {}
            for j, rec in enumerate(records):
                by_partition.setdefault((start + j) % args.partitions, []).append(rec)
            produced += await cluster.produce_to_partitions(topic, by_partition)
            bar.update(n)
    return produced


async def _read_committed_zookeeper(
    zk_connect: str, group: str, topic: str, partitions: int
) -> dict[int, int]:
    zk = ZkClient(zk_connect)
    await zk.start()
    try:
        result = {}
        for p in range(partitions):
            data = await zk.get_data(layout.offset_path(group, topic, p))
            result[p] = -1 if data is None else layout.decode_offset(data)
        return result
    finally:
        await zk.close()


async def _read_committed_kafka(
    bootstrap_servers: str, group: str, topic: str, partitions: int
) -> dict[int, int]:
    # An independent reader (aiokafka's admin client, OffsetFetch v1+), not the connector's
    # own offset store, so the check does not trust the code it checks.
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.structs import TopicPartition as AioTopicPartition

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="aiozkconsumer-demo")
    await admin.start()
    try:
        tps = [AioTopicPartition(topic, p) for p in range(partitions)]
        fetched = await admin.list_consumer_group_offsets(group, partitions=tps)
    finally:
        await admin.close()
    # The broker answers -1 for a partition the group has no offset for.
    return {p: fetched[tp].offset if tp in fetched else -1 for p, tp in enumerate(tps)}


def _consumer_config(cluster: Cluster, group: str, coordinator: str) -> ConsumerConfig:
    if coordinator == "kafka":
        return ConsumerConfig(
            group_id=group,
            group_coordinator="kafka",
            bootstrap_servers=cluster.bootstrap_servers,
            auto_offset_reset="earliest",
            auto_commit_interval_ms=1000,
            # A stopped member sends LeaveGroup; these bound the rebalance when one does not
            # (killed, partitioned): the coordinator evicts it after 10 s, not the Java 45 s.
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
        )
    return ConsumerConfig(
        group_id=group,
        zookeeper_connect=cluster.zookeeper_connect,
        auto_offset_reset="smallest",
        auto_commit_interval_ms=1000,
    )


async def run_demo(cluster: Cluster, args: argparse.Namespace) -> DemoResult:
    """Produce, consume with a group, stop one member halfway, verify. See the module doc."""
    topic = args.topic or f"demo-{uuid.uuid4().hex[:8]}"
    group = args.group or f"demo-group-{uuid.uuid4().hex[:8]}"
    coordinator = args.group_coordinator
    config = _consumer_config(cluster, group, coordinator)
    result = DemoResult(topic=topic, group=group)
    _say(
        f"topic {topic} ({args.partitions} partitions), group {group} "
        f"(coordinated by {'Kafka' if coordinator == 'kafka' else 'ZooKeeper'})"
    )
    await cluster.create_topic(topic, args.partitions)
    t0 = time.monotonic()
    result.produced = await _produce(cluster, topic, args)
    _say(f"produced {result.produced:,} records in {time.monotonic() - t0:.1f} s")
    end_offsets = await cluster.log_end_offsets(topic)

    tracker = _Tracker(end_offsets)
    stops = [anyio.Event() for _ in range(args.consumers)]
    connectors: dict[int, ConsumerConnector] = {}
    bar = (
        None
        if args.no_progress
        else tqdm(
            total=tracker.total,
            desc="consume",
            unit="rec",
            unit_scale=True,
            file=sys.stderr,
            mininterval=1,
        )
    )
    stalled = False
    try:
        async with anyio.create_task_group() as tg:
            for i in range(args.consumers):
                tg.start_soon(
                    _member, i, config, topic, args.streams, tracker, stops[i], bar, connectors
                )
            stopped_one = args.consumers < 2
            while tracker.distinct < tracker.total:
                with anyio.move_on_after(1):
                    await tracker.changed.wait()
                if not stopped_one and tracker.distinct >= tracker.total // 2:
                    stopped_one = True
                    _say(
                        f"stopping member {args.consumers - 1} at {tracker.distinct:,} records "
                        "to force a rebalance"
                    )
                    stops[-1].set()
                if time.monotonic() - tracker.last > args.stall_timeout:
                    stalled = True
                    break
            for stop in stops:
                stop.set()
    finally:
        if bar is not None:
            bar.n = tracker.distinct
            bar.close()
    if stalled:
        _say(f"no new record for {args.stall_timeout:.0f} s: giving up")
    result.distinct = tracker.distinct
    result.duplicates = tracker.duplicates
    result.lost = tracker.total - tracker.distinct
    if tracker.first is not None:
        result.seconds = max(tracker.last - tracker.first, 1e-9)
    for i, connector in sorted(connectors.items()):
        for rec in connector.statistics().rebalances:
            result.rebalances.append((i, rec))
    # A ZooKeeper-coordinated config always has zookeeper.connect (ConsumerConfig checks it).
    if config.kafka_coordinated or config.zookeeper_connect is None:
        result.offsets_source = "Kafka"
        committed = await _read_committed_kafka(
            cluster.bootstrap_servers, group, topic, args.partitions
        )
    else:
        committed = await _read_committed_zookeeper(
            config.zookeeper_connect, group, topic, args.partitions
        )
    result.offsets = {p: (committed[p], end_offsets.get(p, 0)) for p in range(args.partitions)}
    return result


def _say(text: str) -> None:
    # Through tqdm, so a line said while a progress bar is drawn gets a line of its own.
    tqdm.write(text, file=sys.stderr)


def print_summary(result: DemoResult) -> None:
    """Print the demo's summary to stdout."""
    rate = result.distinct / result.seconds if result.seconds else 0.0
    print("== aiozkconsumer demo summary ==")
    print(f"records produced          {result.produced:>12,}")
    print(f"distinct records consumed {result.distinct:>12,}")
    print(f"duplicates                {result.duplicates:>12,}")
    print(f"lost                      {result.lost:>12,}")
    print(f"records/s                 {rate:>12,.0f}")
    print("rebalances:")
    for member, rec in sorted(result.rebalances, key=lambda r: r[1].started_at):
        print(
            f"  member {member}: {rec.reason:<34} {rec.duration_s * 1000:8.1f} ms  "
            f"attempts={rec.attempts} {'ok' if rec.succeeded else 'FAILED'} "
            f"owns={len(rec.partitions)} kept={rec.kept} released={rec.released} "
            f"acquired={rec.acquired}"
        )
    print(f"partition  {f'committed({result.offsets_source})':>20}  log-end-offset  equal")
    for p, (committed, end) in sorted(result.offsets.items()):
        print(f"{p:>9}  {committed:>20,}  {end:>14,}  {'yes' if committed == end else 'NO'}")
    print("RESULT:", "OK" if result.ok else "FAILED")


@dataclass
class ExistingCluster:
    """A cluster the user runs, reached through ``--bootstrap-server`` (and ``--zookeeper``)."""

    zookeeper_connect: str | None
    bootstrap_servers: str

    async def create_topic(self, name: str, partitions: int) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(name, partitions, 1)])
        finally:
            await admin.close()
        await self.log_end_offsets(name)

    async def produce_to_partitions(
        self, topic: str, records_by_partition: Mapping[int, Sequence[tuple[bytes | None, bytes]]]
    ) -> int:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap_servers, acks="all")
        await producer.start()
        try:
            futures = []
            for partition, records in records_by_partition.items():
                batch = producer.create_batch()
                for key, value in records:
                    if batch.append(key=key, value=value, timestamp=None) is None:
                        futures.append(await producer.send_batch(batch, topic, partition=partition))
                        batch = producer.create_batch()
                        batch.append(key=key, value=value, timestamp=None)
                futures.append(await producer.send_batch(batch, topic, partition=partition))
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        return sum(len(r) for r in records_by_partition.values())

    async def log_end_offsets(self, topic: str) -> dict[int, int]:
        from ..kafka.client import KafkaClient
        from ..records import TopicPartition

        kafka = KafkaClient(self.bootstrap_servers, client_id="aiozkconsumer-demo")
        await kafka.start()
        try:
            parts = (await kafka.partitions_for_topics([topic]))[topic]
            ends = await kafka.log_end_offsets([TopicPartition(topic, p) for p in parts])
            return {tp.partition: off for tp, off in ends.items()}
        finally:
            await kafka.close()


@contextlib.asynccontextmanager
async def _cluster(args: argparse.Namespace) -> AsyncIterator[Cluster]:
    if args.bootstrap_server:
        yield ExistingCluster(args.zookeeper, args.bootstrap_server)
        return
    from ..testing import LocalCluster

    _say("starting a local ZooKeeper + Kafka 3.9 cluster (first run downloads the jars) ...")
    t0 = time.monotonic()
    async with LocalCluster() as cluster:
        _say(
            f"cluster up in {time.monotonic() - t0:.1f} s: ZooKeeper {cluster.zookeeper_connect}, "
            f"Kafka {cluster.bootstrap_servers}"
        )
        yield cluster


async def _spark_section(cluster: Cluster, args: argparse.Namespace, result: DemoResult) -> bool:
    """Run the Spark section on the demo's topic; print its summary. False if it failed."""
    group = f"{result.group}-spark"
    options = {
        "group.id": group,
        "subscribe": result.topic,
        "startingOffsets": "earliest",
        "kafka.bootstrap.servers": cluster.bootstrap_servers,
    }
    read_committed: Any
    if args.group_coordinator == "kafka" or cluster.zookeeper_connect is None:
        options["group.coordinator"] = "kafka"
        source = "Kafka"

        async def read_committed() -> dict[int, int]:
            return await _read_committed_kafka(
                cluster.bootstrap_servers, group, result.topic, args.partitions
            )
    else:
        options["zookeeper.connect"] = zk_connect = cluster.zookeeper_connect
        source = "ZooKeeper"

        async def read_committed() -> dict[int, int]:
            return await _read_committed_zookeeper(zk_connect, group, result.topic, args.partitions)

    _say(f"Spark: the topic through the zkkafka source into Parquet, group {group}")
    spark_result = await run_spark_section(
        options=options,
        ends={p: end for p, (_, end) in result.offsets.items()},
        read_committed=read_committed,
        offsets_source=source,
        say=_say,
    )
    if spark_result is None:  # PySpark missing: said so, and nothing to check
        return True
    print_spark_summary(spark_result)
    return spark_result.ok


async def _amain(args: argparse.Namespace) -> int:
    async with _cluster(args) as cluster:
        result = await run_demo(cluster, args)
        print_summary(result)
        spark_ok = True
        if not args.no_spark:
            if result.ok:
                sys.stdout.flush()
                spark_ok = await _spark_section(cluster, args, result)
            else:
                _say("Spark section skipped: the consumer group's run failed")
    return 0 if result.ok and spark_ok else 1
