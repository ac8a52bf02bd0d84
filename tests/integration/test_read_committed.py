"""``isolation.level=read_committed`` on every read path, against Kafka 3.9 and 4.3.

A Java producer (:class:`~aiozkconsumer.testing.java_producer.JavaProducer`) writes committed
and aborted transactions (lz4) interleaved with plain records (some inside the transactions'
offset ranges), then a transaction it leaves open, with plain records after it. Every read
path (``async for`` with either coordinator, ``batches()``, ``arrow_batches()``,
``SimpleConsumer``, the Spark executors, the CLI with ``--isolation-level``, by partition and
as a group member with ``--exit-at-end``), with the native
decoder and with aiokafka's parser, must deliver:

- under read_committed exactly the committed and plain records below the open transaction's
  first offset (the last stable offset), and nothing past it; the consumed offset stops at the
  last stable offset, markers and aborted batches stepped over;
- under read_uncommitted every record written.

With a live producer: lag while the transaction is open is the last stable offset minus the
committed offset (statistics and the ConsumerLag gauge), and once it commits the rest arrives
and the committed offsets equal the log end, the final markers included.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from typing import Any

import anyio
import pytest
from _read_paths import PATHS, ConnectorReader, config_for, read_path, without_native

from aiozkconsumer import SimpleConsumer
from aiozkconsumer.cluster import LATEST, KafkaClient
from aiozkconsumer.kafka.stable_offsets import list_offsets
from aiozkconsumer.kafka.transactions import READ_COMMITTED
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.java_producer import JavaProducer, ProducedRecord
from aiozkconsumer.tools.admin import GroupAdmin
from aiozkconsumer.tools.kafka_groups import KafkaGroupAdmin

pytestmark = pytest.mark.integration

PARTITIONS = 2
COMMITTED = 10
ABORTED = 10
PER_TRANSACTION = 6
PLAIN = 2
OPEN_RECORDS = 4
PLAIN_AFTER = 3
QUIET_S = 1.5
"""How long a reader keeps reading after the last stable offset, to see nothing more come."""


@pytest.fixture(params=["native", "aiokafka"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    with without_native(monkeypatch, request.param):
        yield request.param


def report_counts(row: dict[str, Any]) -> None:
    """Append a row of the codec x path x isolation table (``AIOZKCONSUMER_COUNTS`` file)."""
    path = os.environ.get("AIOZKCONSUMER_COUNTS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


async def write_transactions(
    producer: JavaProducer, cluster: LocalCluster, topic: str
) -> list[ProducedRecord]:
    """The topic with its transactions, and one left open (see the module docstring)."""
    await cluster.create_topic(topic, PARTITIONS)
    written = await producer.produce_transactions(
        topic,
        committed=COMMITTED,
        aborted=ABORTED,
        records_per_transaction=PER_TRANSACTION,
        plain=PLAIN,
        partitions=PARTITIONS,
        codec="lz4",
    )
    written += await producer.open_transaction(
        topic, records=OPEN_RECORDS, plain_after=PLAIN_AFTER, partitions=PARTITIONS
    )
    return written


def last_stable(written: list[ProducedRecord], topic: str) -> dict[TopicPartition, int]:
    """Each partition's last stable offset: the open transaction's first offset in it."""
    stable: dict[TopicPartition, int] = {}
    for r in written:
        if r.kind == "open":
            tp = TopicPartition(topic, r.partition)
            stable[tp] = min(stable.get(tp, r.offset), r.offset)
    assert len(stable) == PARTITIONS
    return stable


def committed_below(
    written: list[ProducedRecord], stable: Mapping[TopicPartition, int]
) -> list[Any]:
    return sorted(
        (r.topic, r.identity)
        for r in written
        if r.kind in ("committed", "plain")
        and r.offset < stable[TopicPartition(r.topic, r.partition)]
    )


_SHARED: dict[str, tuple[str, list[ProducedRecord]]] = {}
"""Per cluster flavour: the topic whose transaction stays open, and what was written to it."""


async def open_topic(cluster: LocalCluster) -> tuple[str, list[ProducedRecord]]:
    """Written once per session cluster; the producer exits leaving its transaction open (the
    broker aborts it 10 minutes later, long after this module's tests)."""
    if cluster.flavour not in _SHARED:
        topic = f"txn-open-{uuid.uuid4().hex[:10]}"
        producer = JavaProducer(cluster)
        await producer.start()
        try:
            written = await write_transactions(producer, cluster, topic)
        finally:
            await producer.stop(keep_open=True)
        kinds = {k: sum(r.kind == k for r in written) for k in ("committed", "aborted", "open")}
        assert kinds == {
            "committed": COMMITTED * PER_TRANSACTION,
            "aborted": ABORTED * PER_TRANSACTION,
            "open": OPEN_RECORDS,
        }
        _SHARED[cluster.flavour] = (topic, written)
    return _SHARED[cluster.flavour]


def _path_and_coordinator(path: str) -> tuple[str, str]:
    if path == "kafka-group":
        return "records", "kafka"
    return path.removesuffix("-group"), "zookeeper"


@pytest.mark.parametrize("path", [*PATHS, "kafka-group", "cli-group"])
async def test_read_committed_delivers_committed_records_up_to_the_open_transaction(
    any_cluster: LocalCluster, decoder: str, path: str, unique_group_id: str
) -> None:
    topic, written = await open_topic(any_cluster)
    stable = last_stable(written, topic)
    expected = committed_below(written, stable)
    read, coordinator = _path_and_coordinator(path)
    seen: dict[str, Any] = {}

    async def nothing_past_the_open_transaction(reader: ConnectorReader) -> None:
        before = len(reader.delivered)
        await reader.read_for(QUIET_S)
        seen["more"] = reader.delivered[before:]
        seen["consumed"] = dict(reader.consumed())

    delivered = await read_path(
        read,
        any_cluster,
        unique_group_id,
        topic,
        stable,
        isolation="read_committed",
        decoder=decoder,
        coordinator=coordinator,
        on_reader=nothing_past_the_open_transaction,
        cli_group=path == "cli-group",  # --exit-at-end stops at the last stable offset
    )
    report_counts(
        {
            "test": "read_committed",
            "flavour": any_cluster.flavour,
            "codec": "lz4+none",
            "path": path,
            "decoder": decoder,
            "isolation": "read_committed",
            "produced": len(expected),
            "delivered": len(delivered),
        }
    )
    assert sorted(delivered) == expected
    if "consumed" in seen:
        assert seen["more"] == []
        assert seen["consumed"] == stable  # past markers and aborted batches, not past the LSO


@pytest.mark.parametrize("path", PATHS)
async def test_read_uncommitted_delivers_every_record(
    any_cluster: LocalCluster, decoder: str, path: str, unique_group_id: str
) -> None:
    topic, written = await open_topic(any_cluster)
    ends = {
        TopicPartition(topic, p): end
        for p, end in (await any_cluster.log_end_offsets(topic)).items()
    }
    expected = sorted((r.topic, r.identity) for r in written)
    delivered = await read_path(
        path,
        any_cluster,
        unique_group_id,
        topic,
        ends,
        isolation="read_uncommitted",
        decoder=decoder,
    )
    report_counts(
        {
            "test": "read_committed",
            "flavour": any_cluster.flavour,
            "codec": "lz4+none",
            "path": path,
            "decoder": decoder,
            "isolation": "read_uncommitted",
            "produced": len(expected),
            "delivered": len(delivered),
        }
    )
    assert sorted(delivered) == expected


async def test_the_latest_offset_under_read_committed_is_the_last_stable_offset(
    any_cluster: LocalCluster,
) -> None:
    topic, written = await open_topic(any_cluster)
    stable = last_stable(written, topic)
    ends = await any_cluster.log_end_offsets(topic)
    kafka = KafkaClient(any_cluster.bootstrap_servers, client_id="lso")
    await kafka.start()
    try:
        await kafka.refresh_metadata({topic})
        for tp, lso in stable.items():
            leader = kafka.leader_for(tp)
            assert leader is not None
            got = await list_offsets(kafka, leader, {tp: LATEST}, isolation_level=READ_COMMITTED)
            assert got == {tp: lso}
            assert ends[tp.partition] > lso  # the open transaction and the plain records after
    finally:
        await kafka.close()
    async with (
        SimpleConsumer(
            any_cluster.bootstrap_servers, isolation_level="read_committed"
        ) as committed,
        SimpleConsumer(any_cluster.bootstrap_servers) as uncommitted,
    ):
        for tp, lso in stable.items():
            assert await committed.latest_offset(tp) == lso
            assert await uncommitted.latest_offset(tp) == ends[tp.partition]
            at_lso = await committed.fetch(tp, lso)
            assert (at_lso.records, at_lso.next_offset) == ([], lso)
            assert (at_lso.last_stable_offset, at_lso.high_watermark) == (lso, ends[tp.partition])


async def _described_lag(
    cluster: LocalCluster, coordinator: str, config: Any, isolation: str
) -> dict[TopicPartition, int | None]:
    """The lag ``groups describe`` shows, per partition, at ``isolation``."""
    if coordinator == "kafka":
        async with KafkaGroupAdmin(cluster.bootstrap_servers) as kafka_admin:
            kafka_view = await kafka_admin.describe_group(
                config.group_id, isolation_level=isolation
            )
        return {TopicPartition(p.topic, p.partition): p.lag for p in kafka_view.partitions}
    async with GroupAdmin(
        cluster.zookeeper_connect, bootstrap_servers=cluster.bootstrap_servers
    ) as admin:
        view = await admin.describe_group(config.group_id, isolation_level=isolation)
    return {TopicPartition(p.topic, p.partition): p.lag for p in view.partitions}


def _lag_gauges(reader: ConnectorReader) -> dict[int, float]:
    out: dict[int, float] = {}
    for metric in reader.connector.metrics:
        name = metric.mbean_name
        if ",name=ConsumerLag," in name:
            out[int(name.rsplit("partition=", 1)[1])] = float(metric.value)  # type: ignore[union-attr]
    return out


@pytest.mark.parametrize(
    ("coordinator", "decoder"),
    [("zookeeper", "native"), ("kafka", "native"), ("zookeeper", "aiokafka")],
    indirect=["decoder"],
)
async def test_lag_is_measured_to_the_last_stable_offset_and_commits_reach_the_log_end(
    any_cluster: LocalCluster, coordinator: str, decoder: str, unique_group_id: str
) -> None:
    topic = f"txn-live-{uuid.uuid4().hex[:10]}"
    async with JavaProducer(any_cluster) as producer:
        written = await write_transactions(producer, any_cluster, topic)
        stable = last_stable(written, topic)
        config = config_for(
            any_cluster,
            unique_group_id,
            coordinator=coordinator,
            isolation_level="read_committed",
            fetch_message_max_bytes=4096,  # several fetches, so that reading stops midway
        )
        async with ConnectorReader(config, topic, "records") as reader:
            # A few records only, then commit: the committed offsets lie below the LSO (the
            # fetcher fetches on to the LSO meanwhile).
            await reader.read_records(3)
            await reader.connector.commit_offsets()
            fetcher = reader.connector.fetcher
            with anyio.fail_after(30):
                # No event says a fetch response arrived: poll the fetcher's record of it.
                while {tp: fetcher.lag_end.get(tp) for tp in stable} != stable:  # noqa: ASYNC110
                    await anyio.sleep(0.1)
            stats = reader.connector.statistics()
            ends = await any_cluster.log_end_offsets(topic)
            for tp, lso in stable.items():
                committed = stats.committed_offsets.get(tp, 0)
                assert stats.lag[tp] == lso - committed, tp
                assert ends[tp.partition] - committed > stats.lag[tp]  # not the HW's lag
            # `groups describe --isolation-level`: the same lag from outside the member.
            for isolation, end_of in (("read_committed", stable), ("read_uncommitted", None)):
                described = await _described_lag(any_cluster, coordinator, config, isolation)
                for tp, lso in stable.items():
                    end = lso if end_of is not None else ends[tp.partition]
                    committed = stats.committed_offsets.get(tp, 0)
                    assert described[tp] == end - committed, (isolation, tp)
            # Everything below the last stable offset, then nothing more while it is open.
            await reader.read_until(stable)
            await reader.read_for(QUIET_S)
            assert dict(reader.consumed()) == stable
            assert sorted(reader.delivered) == committed_below(written, stable)
            await reader.connector.commit_offsets()
            stats = reader.connector.statistics()
            assert dict(stats.committed_offsets) == stable
            assert all(stats.lag[tp] == 0 for tp in stable)
            assert all(v == 0 for v in _lag_gauges(reader).values())
            assert _lag_gauges(reader).keys() == {tp.partition for tp in stable}

            # The transaction commits: the rest arrives, up to the log end after its markers.
            written = [r for r in written if r.kind != "open"] + await producer.commit_open()
            ends = {
                TopicPartition(topic, p): end
                for p, end in (await any_cluster.log_end_offsets(topic)).items()
            }
            assert all(ends[tp] > lso for tp, lso in stable.items())
            await reader.read_until(ends)
            await reader.read_for(0.5)
            assert sorted(reader.delivered) == sorted(
                (r.topic, r.identity) for r in written if r.kind in ("committed", "plain")
            )
            await reader.connector.commit_offsets()
            assert dict(reader.connector.statistics().committed_offsets) == ends
