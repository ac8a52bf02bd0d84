"""The runtime verbs (seek, pause/resume, position, committed, offsets, assign) on real brokers.

Each verb on both coordinators: a ZooKeeper-coordinated member and a Kafka-coordinated one
(classic protocol on Kafka 3.9; the consumer protocol, KIP-848, on Kafka 4 for the seek and
assign tests), reading a real topic. Records are produced in many small batches, so a stream's
queue holds chunks ahead of the reader: a seek or pause that let a stale chunk through would
hand out an offset out of order, which the assertions catch.
"""

from __future__ import annotations

from typing import Any

import pytest
from _support import config_for, until_any

from aiozkconsumer import (
    ConnectorState,
    ConsumerConfig,
    TopicPartition,
    create_connector,
)
from aiozkconsumer.errors import MessageStreamsExistError, PartitionNotAssignedError
from aiozkconsumer.records import MessageAndMetadata
from aiozkconsumer.stream import KafkaStream
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.verbs import ConnectorVerbs
from aiozkconsumer.zk import layout

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 120
ROUNDS = 6  # produce calls: each partition's records arrive in several batches

# (coordinator, cluster flavour)
KINDS = [
    pytest.param("zookeeper", "zookeeper", id="zookeeper"),
    pytest.param("classic", "zookeeper", id="kafka-classic"),
]
KINDS_848 = [*KINDS, pytest.param("consumer", "kraft", id="kafka-consumer")]


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> LocalCluster:
    flavour = request.node.callspec.params["flavour"]
    fixture = "zk_kafka_cluster" if flavour == "zookeeper" else "kraft_cluster"
    found: LocalCluster = request.getfixturevalue(fixture)
    return found


def _config(cluster: LocalCluster, group: str, kind: str, **kw: Any) -> ConsumerConfig:
    # Small chunks and a short queue: chunks of every partition wait ahead of the reader.
    kw.setdefault("fetch_message_max_bytes", 2048)
    kw.setdefault("queued_max_message_chunks", 2)
    kw.setdefault("auto_commit_enable", False)
    if kind == "zookeeper":
        return config_for(cluster, group, **kw)
    return ConsumerConfig(
        group_id=group,
        group_coordinator="kafka",
        group_protocol=kind,
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="smallest",
        **kw,
    )


async def _topic(cluster: LocalCluster, topic: str) -> list[TopicPartition]:
    await cluster.create_topic(topic, PARTITIONS)
    per_round = PER_PARTITION // ROUNDS
    for r in range(ROUNDS):
        await cluster.produce_to_partitions(
            topic,
            {
                p: [(b"k", b"%d-%d" % (p, r * per_round + i)) for i in range(per_round)]
                for p in range(PARTITIONS)
            },
        )
    return [TopicPartition(topic, p) for p in range(PARTITIONS)]


async def _take(stream: KafkaStream, n: int) -> list[MessageAndMetadata]:
    it = stream.__aiter__()
    return [await it.__anext__() for _ in range(n)]


async def _take_until(
    stream: KafkaStream, done: Any, limit: int = 10_000
) -> list[MessageAndMetadata]:
    """Records until ``done(records so far)`` holds."""
    out: list[MessageAndMetadata] = []
    it = stream.__aiter__()
    while not done(out):
        out.append(await it.__anext__())
        assert len(out) < limit
    return out


def _offsets_of(msgs: list[MessageAndMetadata], partition: int) -> list[int]:
    return [m.offset for m in msgs if m.partition == partition]


async def _subscribed(connector: ConnectorVerbs, topic: str) -> KafkaStream:
    streams = await connector.create_message_streams({topic: 1})
    assert connector.state is ConnectorState.RUNNING
    return streams[topic][0]


@pytest.mark.parametrize(("kind", "flavour"), KINDS_848)
async def test_seek_during_delivery_and_the_offset_queries(
    cluster: LocalCluster, kind: str, flavour: str, unique_topic: str, unique_group_id: str
) -> None:
    tps = await _topic(cluster, unique_topic)
    tp0 = tps[0]
    async with create_connector(_config(cluster, unique_group_id, kind)) as c:
        assert isinstance(c, ConnectorVerbs)
        stream = await _subscribed(c, unique_topic)
        assert c.assignment() == set(tps)
        assert await c.beginning_offsets(tps) == dict.fromkeys(tps, 0)
        assert await c.end_offsets(tps) == dict.fromkeys(tps, PER_PARTITION)

        # Read into partition 0, with chunks of it queued ahead; seek back to 7.
        before = await _take_until(stream, lambda out: len(_offsets_of(out, 0)) >= 30)
        assert _offsets_of(before, 0) == list(range(30))
        assert await c.position(tp0) == 30
        c.seek(tp0, 7)
        assert await c.position(tp0) == 7
        # Partition 0 again from 7, in order: no record fetched before the seek got out.
        after = await _take_until(stream, lambda out: len(_offsets_of(out, 0)) >= 40)
        assert _offsets_of(after, 0) == list(range(7, 47))

        # Forward past everything queued, then to the beginning and the end.
        c.seek(tp0, 100)
        after = await _take_until(stream, lambda out: len(_offsets_of(out, 0)) >= 5)
        assert _offsets_of(after, 0) == list(range(100, 105))
        assert await c.seek_to_beginning([tp0]) == {tp0: 0}
        after = await _take_until(stream, lambda out: len(_offsets_of(out, 0)) >= 3)
        assert _offsets_of(after, 0) == [0, 1, 2]
        assert await c.seek_to_end([tp0]) == {tp0: PER_PARTITION}
        assert await c.position(tp0) == PER_PARTITION
        await cluster.produce_to_partitions(unique_topic, {0: [(b"k", b"new")]})
        after = await _take_until(stream, lambda out: len(_offsets_of(out, 0)) >= 1)
        assert [(m.offset, m.value) for m in after if m.partition == 0] == [(PER_PARTITION, b"new")]

        # offsets_for_times / seek_to_timestamp: the first record at or after a record's
        # timestamp (the records of one produce call may share a millisecond).
        c.seek(tp0, 0)
        timeline = await _take_until(stream, lambda out: len(_offsets_of(out, 0)) > PER_PARTITION)
        stamps = {m.offset: m.timestamp for m in timeline if m.partition == 0}
        ts = stamps[60]
        first = min(o for o, t in stamps.items() if t >= ts)
        assert await c.offsets_for_times({tp0: ts}) == {tp0: first}
        assert await c.offsets_for_times({tp0: stamps[PER_PARTITION] + 3_600_000}) == {tp0: None}
        assert await c.seek_to_timestamp([tp0], ts) == {tp0: first}
        after = await _take_until(stream, lambda out: len(_offsets_of(out, 0)) >= 2)
        assert _offsets_of(after, 0) == [first, first + 1]

        # committed: what was committed, None where nothing was.
        assert await c.committed(tps) == dict.fromkeys(tps, None)
        await c.commit_offsets({tp0: 42})
        assert await c.committed([tp0, tps[1]]) == {tp0: 42, tps[1]: None}

        # A partition this member does not own: a clear error naming both.
        other = TopicPartition(unique_topic, PARTITIONS + 1)
        with pytest.raises(PartitionNotAssignedError) as caught:
            c.seek(other, 0)
        assert caught.value.partition == other and caught.value.owned == set(tps)
        assert str(other) in str(caught.value) and str(tp0) in str(caught.value)
        with pytest.raises(PartitionNotAssignedError):
            await c.position(other)
        with pytest.raises(PartitionNotAssignedError):
            await c.seek_to_end([tp0, other])
        assert c.state is ConnectorState.RUNNING


@pytest.mark.parametrize(("kind", "flavour"), KINDS)
async def test_pause_with_backpressure_keeps_the_other_partitions_flowing(
    cluster: LocalCluster, kind: str, flavour: str, unique_topic: str, unique_group_id: str
) -> None:
    tps = await _topic(cluster, unique_topic)
    tp0 = tps[0]
    # One chunk of room per stream: a paused partition holding it would stall the others.
    config = _config(cluster, unique_group_id, kind, queued_max_message_chunks=1)
    async with create_connector(config) as c:
        assert isinstance(c, ConnectorVerbs)
        stream = await _subscribed(c, unique_topic)
        generation = c.statistics().group_generation
        before = await _take_until(stream, lambda out: len(_offsets_of(out, 0)) >= 10)
        assert _offsets_of(before, 0) == list(range(10))
        c.pause([tp0])
        assert c.paused() == {tp0}
        at = await c.position(tp0)
        assert at == 10
        # Every other record of the topic arrives; none of partition 0 while paused.
        others_left = {p: PER_PARTITION - len(_offsets_of(before, p)) for p in range(1, PARTITIONS)}
        during = await _take_until(
            stream,
            lambda out: all(len(_offsets_of(out, p)) >= n for p, n in others_left.items()),
        )
        assert _offsets_of(during, 0) == []
        for p in range(1, PARTITIONS):
            assert _offsets_of(before + during, p) == list(range(PER_PARTITION))
        assert await c.position(tp0) == at
        # Membership went on: still running, the same generation, the same partitions.
        assert c.state is ConnectorState.RUNNING
        assert c.statistics().group_generation == generation
        assert c.assignment() == set(tps)
        c.resume([tp0])
        assert c.paused() == set()
        after = await _take_until(
            stream, lambda out: len(_offsets_of(out, 0)) >= PER_PARTITION - at
        )
        assert _offsets_of(after, 0) == list(range(at, PER_PARTITION))
        with pytest.raises(PartitionNotAssignedError):
            c.pause([TopicPartition(unique_topic, PARTITIONS)])


@pytest.mark.parametrize(("kind", "flavour"), KINDS)
async def test_a_seek_on_a_partition_given_up_by_a_rebalance_is_refused_and_pause_ends_with_it(
    cluster: LocalCluster, kind: str, flavour: str, unique_topic: str, unique_group_id: str
) -> None:
    """While a rebalance gives partitions up (the listener runs then), a seek on one of them
    is refused; a partition this member keeps or takes again after it is not paused."""
    tps = await _topic(cluster, unique_topic)
    refused: list[BaseException] = []

    class Listener:
        connector: ConnectorVerbs

        async def before_releasing_partitions(self, ownership: dict[str, set[int]]) -> None:
            for p in sorted(ownership.get(unique_topic, ())):
                try:
                    self.connector.seek(TopicPartition(unique_topic, p), 0)
                except PartitionNotAssignedError as e:
                    refused.append(e)

        async def before_starting_fetchers(self, consumer_id: str, assignment: Any) -> None:
            pass

    listener = Listener()
    # Classic: the eager range assignor (everything is given up at each rebalance).
    config = _config(cluster, unique_group_id, kind, partition_assignment_strategy="range")
    async with create_connector(config) as a:
        assert isinstance(a, ConnectorVerbs)
        listener.connector = a
        a.set_consumer_rebalance_listener(listener)
        await _subscribed(a, unique_topic)
        a.pause(tps)
        assert a.paused() == set(tps)
        async with create_connector(config) as b:
            assert isinstance(b, ConnectorVerbs)
            await b.create_message_streams({unique_topic: 1})
            await until_any(
                [a, b],
                lambda: (
                    a.state is ConnectorState.RUNNING
                    and b.assignment()
                    and a.assignment() | b.assignment() == set(tps)
                    and not a.assignment() & b.assignment()
                ),
            )
            kept = a.assignment()
            assert len(kept) < PARTITIONS  # b took some
            assert refused, "the listener saw partitions given up"
            assert all(e.partition not in e.owned for e in refused)  # type: ignore[attr-defined]
            # Partitions kept through an incremental rebalance stay paused (ZooKeeper);
            # an eager one (classic range) gave everything up and took some back: unpaused.
            if kind == "zookeeper":
                assert a.paused() == kept
            else:
                assert a.paused() == set()
        # b left: a takes every partition again; those taken anew are not paused.
        await until_any([a], lambda: a.assignment() == set(tps))
        assert a.paused() == (kept if kind == "zookeeper" else set())


@pytest.mark.parametrize(("kind", "flavour"), KINDS_848)
async def test_assign_reads_partitions_without_a_group(
    cluster: LocalCluster, kind: str, flavour: str, unique_topic: str, unique_group_id: str
) -> None:
    tps = await _topic(cluster, unique_topic)
    tp0, tp1 = tps[0], tps[1]
    async with create_connector(_config(cluster, unique_group_id, kind)) as c:
        assert isinstance(c, ConnectorVerbs)
        (stream,) = await c.assign([tp0, tp1])
        assert c.manual and c.assignment() == {tp0, tp1}
        assert c.state is ConnectorState.RUNNING
        got = await _take_until(
            stream,
            lambda out: len(_offsets_of(out, 0)) + len(_offsets_of(out, 1)) >= 2 * PER_PARTITION,
        )
        assert _offsets_of(got, 0) == list(range(PER_PARTITION))
        assert _offsets_of(got, 1) == list(range(PER_PARTITION))
        assert _offsets_of(got, 2) == []
        # No membership: no registration, no generation, no member id.
        stats = c.statistics()
        assert stats.group_generation is None and stats.member_id is None
        if kind == "zookeeper":
            assert not await c.zk.exists(layout.ids_dir(unique_group_id))
        # Commits are optional (auto-commit off here): nothing until asked, then unfenced.
        assert await c.committed([tp0, tp1]) == {tp0: None, tp1: None}
        assert await c.commit_offsets() == 2
        assert await c.committed([tp0, tp1]) == {tp0: PER_PARTITION, tp1: PER_PARTITION}
        # Verbs work as with a group.
        c.seek(tp1, 5)
        assert _offsets_of(await _take(stream, 2), 1) == [5, 6]
        # A new assign replaces the assignment; the stream stays.
        assert await c.assign([tps[2]]) == [stream]
        assert c.assignment() == {tps[2]}
        got = await _take(stream, PER_PARTITION)
        assert {m.partition for m in got} == {2}
        assert _offsets_of(got, 2) == list(range(PER_PARTITION))
        with pytest.raises(PartitionNotAssignedError):
            c.seek(tp0, 0)
        with pytest.raises(MessageStreamsExistError):
            await c.create_message_streams({unique_topic: 1})
    # A later member of the group starts from the commit.
    async with create_connector(_config(cluster, unique_group_id, kind)) as d:
        assert isinstance(d, ConnectorVerbs)
        await d.assign([tp0])
        assert await d.position(tp0) == PER_PARTITION
