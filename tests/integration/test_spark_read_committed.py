"""The ``zkkafka`` source with ``kafka.isolation.level`` (Spark's spelling), local Spark.

A batch read under read_committed plans its ranges up to the last stable offset and its tasks
leave out the records of aborted transactions: with a transaction left open, it returns the
committed and plain records below the open transaction's first offset; under the default
read_uncommitted, every record up to the log end. The records are the Java producer's
(:class:`~aiozkconsumer.testing.java_producer.JavaProducer`).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from _read_paths import arrow_identities
from _spark_session import spark_session  # noqa: F401
from pyspark.sql import SparkSession
from test_read_committed import committed_below, last_stable, write_transactions
from test_spark import arun

from aiozkconsumer.spark.planning import parse_source_options
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.java_producer import JavaProducer, ProducedRecord

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def test_kafka_isolation_level_is_the_consumers_isolation_level() -> None:
    options = parse_source_options(
        {
            "subscribe": "t",
            "group.id": "g",
            "zookeeper.connect": "h:1",
            "kafka.isolation.level": "read_committed",
        }
    )
    assert options.config.read_committed
    assert not parse_source_options(
        {"subscribe": "t", "group.id": "g", "zookeeper.connect": "h:1"}
    ).config.read_committed


def _write(cluster: LocalCluster, topic: str) -> list[ProducedRecord]:
    async def go() -> list[ProducedRecord]:
        producer = JavaProducer(cluster)
        await producer.start()
        try:
            return await write_transactions(producer, cluster, topic)
        finally:
            await producer.stop(keep_open=True)  # the broker aborts it after 10 minutes

    return arun(go())


def _rows(spark: SparkSession, cluster: LocalCluster, topic: str, **options: str) -> list[Any]:
    reader = (
        spark.read.format("zkkafka")
        .option("zookeeper.connect", cluster.zookeeper_connect)
        .option("group.id", f"spark-{uuid.uuid4().hex[:8]}")
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    table = reader.load().toArrow()
    return sorted(row for rb in table.to_batches() for row in arrow_identities(rb))


def test_a_batch_read_under_read_committed_stops_at_the_open_transaction(
    spark: SparkSession, zk_kafka_cluster: LocalCluster
) -> None:
    topic = f"txn-spark-{uuid.uuid4().hex[:10]}"
    written = _write(zk_kafka_cluster, topic)
    stable = last_stable(written, topic)

    committed = _rows(spark, zk_kafka_cluster, topic, **{"kafka.isolation.level": "read_committed"})
    assert committed == committed_below(written, stable)
    everything = _rows(spark, zk_kafka_cluster, topic)
    assert everything == sorted((r.topic, r.identity) for r in written)
