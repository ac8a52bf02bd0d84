"""The "Off ZooKeeper" runbook of docs/migration.md, step by step, on a real cluster.

A steady producer writes to every partition the whole time. A ZooKeeper-coordinated group of
two members (``ZookeeperConsumerConnector``) consumes with ZooKeeper storage, then
(step 1) is rolled, one member at a time, to ``offsets.storage=kafka`` +
``dual.commit.enabled=true``; (step 2) is stopped, its offsets are migrated with
``aiozkconsumer offsets migrate --to kafka`` (a no-op after dual commit: it verifies), and a
Kafka-coordinated group takes over from the migrated offsets — ours (``create_connector`` with
``group.coordinator=kafka``, no ZooKeeper at all) in one run, aiokafka's ``AIOKafkaConsumer``
in the other; (step 3) the group's ZooKeeper data is deleted. Checked: every produced record is
delivered; the new group delivers nothing below the migrated offsets (so duplicates are at most
what one commit interval leaves uncommitted — here none: the stopped members committed on
shutdown); no partition is delivered by both groups at once. The pause (last record of the
ZooKeeper group to first record of the Kafka group) is printed, not asserted.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from _support import config_for, wait_settled
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from anyio.abc import TaskStatus
from click.testing import CliRunner, Result

from aiozkconsumer import ConsumerConfig, ZookeeperConsumerConnector, create_connector
from aiozkconsumer.cli import cli
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.tools import GroupAdmin
from aiozkconsumer.zk import layout

pytestmark = pytest.mark.integration

PARTITIONS = 4
RECORDS_PER_S = 80  # the producer's steady rate, over all partitions
COMMIT_INTERVAL_MS = 500
ZK, KAFKA = "zookeeper group", "kafka group"


@dataclass(frozen=True)
class Delivery:
    member: str
    group: str
    partition: int
    offset: int
    at: float  # time.monotonic() when handed out


@dataclass
class Ledger:
    """What was produced and delivered, with an event per delivery."""

    produced: set[tuple[int, int]] = field(default_factory=set)
    producer_done: anyio.Event = field(default_factory=anyio.Event)
    deliveries: list[Delivery] = field(default_factory=list)
    _grew: anyio.Event = field(default_factory=anyio.Event)

    def deliver(self, member: str, group: str, partition: int, offset: int) -> None:
        self.deliveries.append(Delivery(member, group, partition, offset, time.monotonic()))
        self._grew.set()
        self._grew = anyio.Event()

    def of(self, group: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.group == group]

    def delivered(self) -> set[tuple[int, int]]:
        return {(d.partition, d.offset) for d in self.deliveries}

    async def wait_until(self, predicate: Callable[[], bool], limit_s: float = 60) -> None:
        with anyio.fail_after(limit_s):
            while not predicate():
                await self._grew.wait()


async def produce_steadily(bootstrap: str, topic: str, ledger: Ledger, stop: anyio.Event) -> None:
    """One record every 1/RECORDS_PER_S s, round-robin over the partitions, until ``stop``."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    try:
        n = 0
        while not stop.is_set():
            p = n % PARTITIONS
            meta = await producer.send_and_wait(topic, b"v%d" % n, key=b"k", partition=p)
            ledger.produced.add((meta.partition, meta.offset))
            n += 1
            await anyio.sleep(1 / RECORDS_PER_S)  # the steady rate itself, not a wait
    finally:
        await producer.stop()
        ledger.producer_done.set()


class ZkMember:
    """A ZooKeeper-coordinated member run as a task: ``await tg.start(member.run)``."""

    def __init__(self, name: str, config: ConsumerConfig, topic: str, ledger: Ledger) -> None:
        self.name, self.config, self.topic, self.ledger = name, config, topic, ledger
        self.stop = anyio.Event()
        self.done = anyio.Event()

    async def run(self, *, task_status: TaskStatus[ZookeeperConsumerConnector]) -> None:
        try:
            await self._run(task_status)
        finally:
            self.done.set()

    async def _run(self, task_status: TaskStatus[ZookeeperConsumerConnector]) -> None:
        async with ZookeeperConsumerConnector(self.config) as connector:
            (stream,) = (await connector.create_message_streams({self.topic: 1}))[self.topic]
            async with anyio.create_task_group() as tg:

                async def drain() -> None:
                    async for msg in stream:
                        self.ledger.deliver(self.name, ZK, msg.partition, msg.offset)

                tg.start_soon(drain)
                task_status.started(connector)
                await self.stop.wait()
                tg.cancel_scope.cancel()
        # Leaving the block committed the consumed offsets and released the partitions.


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


async def ainvoke(*args: str) -> Result:
    return await anyio.to_thread.run_sync(lambda: invoke(*args))


async def _ours(
    cluster: LocalCluster, group: str, topic: str, ledger: Ledger, stop: anyio.Event
) -> None:
    """Two members of ours with ``group.coordinator=kafka``: no ZooKeeper in their config."""
    config = ConsumerConfig(
        group_id=group,
        group_coordinator="kafka",
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        auto_commit_interval_ms=COMMIT_INTERVAL_MS,
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
    )
    async with (
        create_connector(config) as a,
        create_connector(config) as b,
        anyio.create_task_group() as tg,
    ):
        for name, connector in (("ours-a", a), ("ours-b", b)):
            (stream,) = (await connector.create_message_streams({topic: 1}))[topic]

            async def drain(name: str = name, stream: Any = stream) -> None:
                async for msg in stream:
                    ledger.deliver(name, KAFKA, msg.partition, msg.offset)

            tg.start_soon(drain)
        await stop.wait()
        tg.cancel_scope.cancel()


async def _aiokafka(
    cluster: LocalCluster, group: str, topic: str, ledger: Ledger, stop: anyio.Event
) -> None:
    """Two aiokafka consumers in the group, auto-committing."""
    consumers = [
        AIOKafkaConsumer(
            topic,
            bootstrap_servers=cluster.bootstrap_servers,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=True,
            auto_commit_interval_ms=COMMIT_INTERVAL_MS,
            session_timeout_ms=10000,
            heartbeat_interval_ms=1000,
        )
        for _ in range(2)
    ]
    try:
        async with anyio.create_task_group() as tg:
            for i, consumer in enumerate(consumers):
                await consumer.start()

                async def drain(name: str = f"aiokafka-{i}", consumer: Any = consumer) -> None:
                    async for msg in consumer:
                        ledger.deliver(name, KAFKA, msg.partition, msg.offset)

                tg.start_soon(drain)
            await stop.wait()
            tg.cancel_scope.cancel()
    finally:
        for consumer in consumers:
            await consumer.stop()  # commits the consumed offsets, leaves the group


KafkaGroup = Callable[[LocalCluster, str, str, Ledger, anyio.Event], Awaitable[None]]


@pytest.mark.parametrize("kafka_group", [_ours, _aiokafka], ids=["ours", "aiokafka"])
async def test_the_runbook_moves_a_group_off_zookeeper_without_loss_or_overlap(
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    kafka_group: KafkaGroup,
    record_property: Callable[[str, object], None],
) -> None:
    cluster, topic, group = zk_kafka_cluster, unique_topic, unique_group_id
    zk, bootstrap = cluster.zookeeper_connect, cluster.bootstrap_servers
    await cluster.create_topic(topic, PARTITIONS)
    ledger = Ledger()
    stop_producing, stop_kafka_group = anyio.Event(), anyio.Event()
    zk_storage = config_for(
        cluster, group, auto_commit_interval_ms=COMMIT_INTERVAL_MS, offsets_storage="zookeeper"
    )
    dual = config_for(
        cluster,
        group,
        auto_commit_interval_ms=COMMIT_INTERVAL_MS,
        offsets_storage="kafka",
        dual_commit_enabled=True,
    )

    def zk_delivered() -> int:
        return len(ledger.of(ZK))

    async with anyio.create_task_group() as tg:
        tg.start_soon(produce_steadily, bootstrap, topic, ledger, stop_producing)

        # The ZooKeeper group as it runs today: two members, ZooKeeper storage.
        members = [ZkMember(n, zk_storage, topic, ledger) for n in ("zk-a", "zk-b")]
        connectors = [await tg.start(m.run) for m in members]
        await wait_settled(connectors)
        floor = zk_delivered()
        await ledger.wait_until(lambda: zk_delivered() >= floor + 80)

        # Step 1: roll the members, one at a time, to offsets.storage=kafka + dual commit.
        for i in range(2):
            members[i].stop.set()
            members[i] = ZkMember(f"zk-{'ab'[i]}-dual", dual, topic, ledger)
            connectors[i] = await tg.start(members[i].run)
            await wait_settled(connectors)
            floor = zk_delivered()
            await ledger.wait_until(lambda floor=floor: zk_delivered() >= floor + 40)
        assert {d.member for d in ledger.of(ZK)} >= {"zk-a-dual", "zk-b-dual"}

        # Step 2: stop every ZooKeeper member (their last commits land in both stores) ...
        stop_at = time.monotonic()
        for m in members:
            m.stop.set()
        with anyio.fail_after(30):
            for m in members:
                await m.done.wait()
        stopped_at = time.monotonic()
        last_zk = max(d.at for d in ledger.of(ZK))

        state = await ainvoke("groups", "describe", "-g", group, "--state", "--zookeeper", zk)
        assert state.exit_code == 0, state.output
        assert state.stdout.splitlines()[1].split() == [group, "-", "Empty", "0"]

        # ... migrate (verifies: dual commit already wrote Kafka) ...
        common = ["offsets", "migrate", "-g", group, "--zookeeper", zk]
        migrated = await ainvoke(*common, "--bootstrap-server", bootstrap, "-o", "json")
        assert migrated.exit_code == 0, migrated.output
        plan = json.loads(migrated.stdout)
        assert plan["migrated"] == 0, plan  # dual commit wrote every offset to Kafka already
        assert plan["warnings"] == []
        start_at = {p["partition"]: p["source_offset"] for p in plan["partitions"]}
        assert sorted(start_at) == list(range(PARTITIONS))
        migrated_at = time.monotonic()

        # ... and start the Kafka-coordinated group from the migrated offsets.
        tg.start_soon(kafka_group, cluster, group, topic, ledger, stop_kafka_group)
        await ledger.wait_until(lambda: len(ledger.of(KAFKA)) >= 160)
        stop_producing.set()
        with anyio.fail_after(30):
            await ledger.producer_done.wait()
        # Every record produced is delivered by one of the groups before the new one stops.
        await ledger.wait_until(lambda: ledger.produced <= ledger.delivered())
        stop_kafka_group.set()

    # Step 3: retire ZooKeeper — the group's data there is no longer read by anyone.
    retired = await ainvoke("groups", "delete", "-g", group, "--zookeeper", zk)
    assert retired.exit_code == 0, retired.output
    assert not await _group_exists(cluster, group)

    zk_records, kafka_records = ledger.of(ZK), ledger.of(KAFKA)
    # Nothing lost.
    assert ledger.produced and ledger.produced <= ledger.delivered()
    # Duplicates only within one commit interval: the new group never goes below the migrated
    # offsets (the stopped members' committed positions).
    below = [d for d in kafka_records if d.offset < start_at[d.partition]]
    assert below == []
    # No partition delivered by both groups at once.
    for p in range(PARTITIONS):
        zk_times = [d.at for d in zk_records if d.partition == p]
        kafka_times = [d.at for d in kafka_records if d.partition == p]
        assert zk_times and kafka_times, p
        assert max(zk_times) < min(kafka_times), p
    # The ZooKeeper group stopped exactly where it committed: the Kafka group starts there.
    for p in range(PARTITIONS):
        assert max(d.offset for d in zk_records if d.partition == p) + 1 == start_at[p]
        assert min(d.offset for d in kafka_records if d.partition == p) == start_at[p]

    seen: dict[tuple[int, int], int] = {}
    for d in ledger.deliveries:
        seen[(d.partition, d.offset)] = seen.get((d.partition, d.offset), 0) + 1
    duplicates = sum(n - 1 for n in seen.values() if n > 1)
    across = {(d.partition, d.offset) for d in zk_records} & {
        (d.partition, d.offset) for d in kafka_records
    }
    first_kafka = min(d.at for d in kafka_records)
    pause_s = first_kafka - last_zk
    record_property("pause_s", round(pause_s, 3))
    record_property("duplicates", duplicates)
    print(  # noqa: T201 - the figures the runbook quotes
        f"\nmigration runbook [{kafka_group.__name__.strip('_')}]: produced "
        f"{len(ledger.produced)} records at {RECORDS_PER_S}/s; pause (last ZooKeeper-group "
        f"record -> first Kafka-group record) {pause_s:.2f} s (from the stop request: members "
        f"stopped {stopped_at - stop_at:.2f} s, migrate {migrated_at - stopped_at:.2f} s, the "
        f"Kafka group's join and first fetch {first_kafka - migrated_at:.2f} s); duplicates "
        f"{duplicates} ({len(across)} across the switch)",
        file=sys.stderr,
    )


async def _group_exists(cluster: LocalCluster, group: str) -> bool:
    async with GroupAdmin(cluster.zookeeper_connect) as admin:
        return await admin.zk.exists(layout.group_dir(group))
