"""Fetch from the closest replica (KIP-392) on a real 3-broker cluster with racks.

Each broker is in a rack of its own, with Kafka's ``RackAwareReplicaSelector``. A topic of two
partitions with replication factor 3 has a replica on every broker, and its two leaders leave
(at least) one broker leading neither partition: the consumer is put in that broker's rack, so
every record it reads must come from a follower. A member of a Kafka-coordinated group reads
the topic with ``client.rack`` set; where its fetches went is measured twice, by the consumer
(fetch requests and record bytes per broker, the per-broker fetch metrics) and by the brokers
(their request logs: Fetch requests with the consumer's ``client.id`` and its rack id). Without
``client.rack`` every fetch goes to the leaders. Every produced record must arrive exactly once
either way. One cluster per flavour (Kafka 3.9 in ZooKeeper mode, Kafka 4.3 in KRaft mode) is
shared by the module's tests.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import anyio
import pytest

from aiozkconsumer import ConsumerConfig, KafkaConsumerConnector, MessageAndMetadata
from aiozkconsumer.cluster import KafkaClient
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.stream import KafkaStream
from aiozkconsumer.testing import LocalCluster

log = logging.getLogger(__name__)

RACKS = ("rack-a", "rack-b", "rack-c")
PARTITIONS = 2
BEFORE = 400
"""Records per partition written before the consumer starts."""
AFTER = 200
"""Records per partition written while it reads (the followers must keep up for it)."""
FETCH = 1
"""Kafka's API key of Fetch."""
WAIT_S = 120.0


@pytest.fixture(scope="module", params=["zookeeper", "kraft"])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    c = LocalCluster(
        brokers=len(RACKS),
        flavour=request.param,
        work_dir=tmp_path_factory.mktemp(f"follower-fetch-{request.param}"),
        broker_racks=RACKS,
        request_log=True,
    )
    asyncio.run(c.start())
    try:
        yield c
    finally:
        asyncio.run(c.stop())


@pytest.fixture
def keep_logs_on_failure(
    request: pytest.FixtureRequest, cluster: LocalCluster
) -> Iterator[LocalCluster]:
    """Mark the module's cluster failed (its work directory, with the logs, is kept)."""
    failed = request.session.testsfailed
    yield cluster
    if request.session.testsfailed > failed:
        cluster.mark_failed()


async def _topic_with_a_broker_leading_nothing(
    cluster: LocalCluster, topic: str
) -> tuple[dict[int, int], int]:
    """Create the topic; return ``({partition: leader}, a broker leading no partition)``."""
    await cluster.create_topic(topic, PARTITIONS, replication_factor=len(RACKS))
    kafka = KafkaClient(cluster.bootstrap_servers, client_id="follower-fetch-setup")
    await kafka.start()
    try:
        with anyio.fail_after(30):
            while True:
                await kafka.refresh_metadata([topic])
                leaders = {p: kafka.leader_for(TopicPartition(topic, p)) for p in range(PARTITIONS)}
                if all(leader is not None for leader in leaders.values()):
                    break
                await anyio.sleep(0.2)
    finally:
        await kafka.close()
    found = {p: int(leader) for p, leader in leaders.items() if leader is not None}
    idle = [b for b in cluster.broker_ids if b not in found.values()]
    assert idle, f"two partitions led by three brokers: {found}"  # pigeonhole
    return found, idle[0]


def _records(topic: str, partition: int, first: int, n: int) -> list[tuple[bytes | None, bytes]]:
    return [(None, b"%s/%d/%d" % (topic.encode(), partition, first + i)) for i in range(n)]


async def _produce(cluster: LocalCluster, topic: str, first: int, n: int) -> set[bytes]:
    batches = {p: _records(topic, p, first, n) for p in range(PARTITIONS)}
    await cluster.produce_to_partitions(topic, batches)
    return {value for batch in batches.values() for _, value in batch}


class Received:
    """Every record handed out, by (partition, offset), with an event per growth."""

    def __init__(self) -> None:
        self.by_position: dict[tuple[int, int], list[bytes]] = {}
        self._grew = anyio.Event()

    def add(self, msg: MessageAndMetadata) -> None:
        assert msg.value is not None
        self.by_position.setdefault((msg.partition, msg.offset), []).append(msg.value)
        self._grew.set()
        self._grew = anyio.Event()

    async def wait_for(self, count: int, connector: KafkaConsumerConnector) -> None:
        """Until ``count`` records arrived; else fail naming what arrived per partition and
        the connector's state (owned partitions, those without a leader, fetch ages)."""
        with anyio.move_on_after(WAIT_S):
            while len(self.by_position) < count:
                await self._grew.wait()
            return
        per_partition: dict[int, int] = {}
        for p, _ in self.by_position:
            per_partition[p] = per_partition.get(p, 0) + 1
        stats = connector.statistics()
        fetcher = connector.fetcher
        pytest.fail(
            f"{len(self.by_position)} of {count} records in {WAIT_S:.0f} s, per partition "
            f"{per_partition}; state {stats.state}, owned {stats.owned_partitions}, consumed "
            f"{stats.consumed_offsets}, without leader {stats.partitions_without_leader}, "
            f"last fetch {stats.seconds_since_fetch} s ago, rebalances {stats.rebalances}, "
            f"fetch requests {fetcher.fetch_requests}, {fetcher!r}, loops "
            f"{ {k: sorted(f.partitions) for k, f in fetcher.fetchers.items()} }"
        )

    def values(self) -> list[bytes]:
        return [v for vs in self.by_position.values() for v in vs]


async def _drain(stream: KafkaStream, received: Received) -> None:
    async for msg in stream:
        received.add(msg)


async def _consume(
    cluster: LocalCluster, topic: str, group: str, client_rack: str | None
) -> tuple[KafkaConsumerConnector, set[bytes], Received, dict[int, tuple[float, ...]]]:
    """Read the topic with a Kafka-group member: what was produced, what arrived, and the
    per-broker ``FetchResponseSize`` metric (responses, record bytes) before leaving."""
    config = ConsumerConfig(
        group_id=group,
        client_id=group,
        group_coordinator="kafka",
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="smallest",
        client_rack=client_rack,
    )
    produced = await _produce(cluster, topic, 0, BEFORE)
    received = Received()
    async with KafkaConsumerConnector(config) as connector, anyio.create_task_group() as tg:
        streams = await connector.create_message_streams({topic: 1})
        tg.start_soon(_drain, streams[topic][0], received)
        await received.wait_for(PARTITIONS * BEFORE, connector)
        produced |= await _produce(cluster, topic, BEFORE, AFTER)
        await received.wait_for(PARTITIONS * (BEFORE + AFTER), connector)
        await anyio.sleep(0.5)  # anything delivered twice would show up now
        # The metric and the fetcher's own counts, read together (no await between: a fetch
        # that completes later would count in one and not the other).
        sizes = {
            b: connector.metrics.fetch_response_size(cluster.broker_address(b))
            for b in cluster.broker_ids
        }
        metric = {b: (h.count, h.sum) for b, h in sizes.items()}
        fetcher = connector.fetcher
        counted = {
            b: (fetcher.fetch_requests.get(b, 0), fetcher.fetch_bytes.get(b, 0))
            for b in cluster.broker_ids
        }
        metric = {b: (*metric[b], *counted[b]) for b in cluster.broker_ids}
        tg.cancel_scope.cancel()
    return connector, produced, received, metric


def _assert_exactly_once(produced: set[bytes], received: Received) -> None:
    twice = {pos: vs for pos, vs in received.by_position.items() if len(vs) > 1}
    assert not twice
    values = received.values()
    assert len(values) == len(set(values)) == len(produced)
    assert set(values) == produced


async def _requests_logged(cluster: LocalCluster, client_id: str) -> dict[int, int]:
    """The brokers' count of the consumer's Fetch requests, once the logs have settled (a
    request is logged just after its response is sent)."""
    counts = cluster.requests_logged(FETCH, client_id=client_id)
    for _ in range(20):
        await anyio.sleep(0.25)
        again = cluster.requests_logged(FETCH, client_id=client_id)
        if again == counts:
            break
        counts = again
    return counts


def _rack_ids_logged(cluster: LocalCluster, broker_id: int, client_id: str) -> set[str]:
    """The ``rackId`` of the consumer's Fetch requests in a broker's request log."""
    racks: set[str] = set()
    client = f'"clientId":"{client_id}"'
    with cluster.request_log_files[broker_id].open(encoding="utf-8") as f:
        for line in f:
            if '"requestApiKey":1,' in line and client in line:
                _, found, rest = line.partition('"rackId":"')
                if found:
                    racks.add(rest.split('"', 1)[0])
    return racks


@pytest.mark.integration
async def test_fetches_go_to_the_replica_in_the_consumers_rack(
    keep_logs_on_failure: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    cluster = keep_logs_on_failure
    leaders, local = await _topic_with_a_broker_leading_nothing(cluster, unique_topic)
    rack = RACKS[local]
    connector, produced, received, metric = await _consume(
        cluster, unique_topic, unique_group_id, rack
    )
    _assert_exactly_once(produced, received)

    fetcher = connector.fetcher
    stats = fetcher.read_replica_statistics()
    by_broker = {
        "requests": dict(fetcher.fetch_requests),
        "record bytes": dict(fetcher.fetch_bytes),
        "requests logged by the brokers": await _requests_logged(cluster, unique_group_id),
    }
    log.info(
        "%s: leaders %s, consumer in %s (broker %d): %s; %s",
        cluster.flavour,
        leaders,
        rack,
        local,
        by_broker,
        stats,
    )
    # The consumer's own count: every record byte came from the broker in its rack; the
    # leaders were asked only to be told where to go.
    assert fetcher.fetch_bytes.get(local, 0) > 0
    assert sum(fetcher.fetch_bytes.values()) == fetcher.fetch_bytes[local]
    assert fetcher.fetch_requests[local] > sum(
        n for b, n in fetcher.fetch_requests.items() if b != local
    )
    assert stats.named >= PARTITIONS  # each leader named the local replica
    # The brokers' count: the local broker served most of the consumer's Fetch requests,
    # with the consumer's rack in them.
    logged = by_broker["requests logged by the brokers"]
    assert logged[local] > sum(n for b, n in logged.items() if b != local)
    assert _rack_ids_logged(cluster, local, unique_group_id) == {rack}
    # The per-broker fetch metrics (FetchResponseSize: record bytes per response) agree.
    assert all(m[:2] == m[2:] for m in metric.values()), metric


@pytest.mark.integration
async def test_without_client_rack_fetches_go_to_the_leaders(
    keep_logs_on_failure: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    cluster = keep_logs_on_failure
    leaders, idle = await _topic_with_a_broker_leading_nothing(cluster, unique_topic)
    connector, produced, received, metric = await _consume(
        cluster, unique_topic, unique_group_id, None
    )
    _assert_exactly_once(produced, received)

    fetcher = connector.fetcher
    logged = await _requests_logged(cluster, unique_group_id)
    log.info(
        "%s: leaders %s, no client.rack: requests %s, record bytes %s, logged %s",
        cluster.flavour,
        leaders,
        fetcher.fetch_requests,
        fetcher.fetch_bytes,
        logged,
    )
    assert set(fetcher.fetch_requests) == set(leaders.values())
    assert all(fetcher.fetch_bytes[b] > 0 for b in set(leaders.values()))
    assert fetcher.read_replica_statistics().named == 0
    assert logged[idle] == 0
    assert metric[idle][:2] == (0, 0)
    assert all(logged[b] > 0 for b in set(leaders.values()))
    assert _rack_ids_logged(cluster, leaders[0], unique_group_id) == {""}


def test_racks_must_be_one_per_broker() -> None:
    with pytest.raises(ValueError, match="broker_racks"):
        LocalCluster(brokers=3, broker_racks=["a", "b"])
    with pytest.raises(ValueError, match="broker_racks"):
        LocalCluster(brokers=2, broker_racks=["a", " "])


async def test_a_rack_aware_range_assignment_gives_each_member_its_racks_partitions(
    cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    """KIP-881: three members of ours, one per rack (``client.rack``), over a topic whose six
    partitions have one replica each (two per broker, so two per rack): the range assignor of
    the leader, whichever member it is, gives every member exactly the partitions on its rack;
    plain ranges would give member 0 partitions 0 and 1 wherever they are."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from aiozkconsumer import create_connector

    topic = unique_topic
    brokers = list(cluster.broker_ids)
    # Partition p on broker p mod 3: two per rack, and plain ranges (0-1, 2-3, 4-5) would
    # put every member across two racks.
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    await admin.start()
    try:
        placement = {p: [brokers[p % len(brokers)]] for p in range(6)}
        await admin.create_topics(
            [
                NewTopic(
                    topic, num_partitions=-1, replication_factor=-1, replica_assignments=placement
                )
            ]
        )
    finally:
        await admin.close()
    kafka = KafkaClient(cluster.bootstrap_servers, client_id="rack-range-setup")
    await kafka.start()
    try:
        with anyio.fail_after(30):
            while True:
                await kafka.refresh_metadata([topic])
                leaders = {p: kafka.leader_for(TopicPartition(topic, p)) for p in range(6)}
                if all(leader is not None for leader in leaders.values()):
                    break
                await anyio.sleep(0.2)  # metadata has no change event
    finally:
        await kafka.close()
    rack_of_broker = dict(zip(brokers, RACKS, strict=True))
    on_rack = {
        rack: {p for p, b in leaders.items() if rack_of_broker[int(b or 0)] == rack}
        for rack in RACKS
    }
    assert all(len(ps) == 2 for ps in on_rack.values()), on_rack

    def config(rack: str) -> ConsumerConfig:
        return ConsumerConfig(
            group_id=unique_group_id,
            group_coordinator="kafka",
            bootstrap_servers=cluster.bootstrap_servers,
            client_rack=rack,
            auto_offset_reset="earliest",
            session_timeout_ms=10000,
            heartbeat_interval_ms=500,
        )

    connectors = [create_connector(config(rack)) for rack in RACKS]
    async with connectors[0], connectors[1], connectors[2]:
        for c in connectors:
            await c.create_message_streams({topic: 1})
        with anyio.fail_after(60):
            while True:
                owned = [
                    {tp.partition for tp in c.statistics().owned_partitions} for c in connectors
                ]
                if sum(len(o) for o in owned) == 6 and all(owned):
                    break
                # Three members' snapshots: no one event announces the group settled.
                await anyio.sleep(0.1)
    assert owned == [on_rack[rack] for rack in RACKS]
