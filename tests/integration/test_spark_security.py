"""The ``zkkafka`` Spark source on a SASL_SSL cluster, with the Kafka source's option names.

The driver plans with the secured cluster view and the executors rebuild the TLS context and
SCRAM credentials from the task; every record is read exactly once, and the password is not
in the query plan.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from _spark_session import spark_session  # noqa: F401  (the module's SparkSession)
from pyspark.sql import SparkSession

from aiozkconsumer.testing import LocalCluster

pytestmark = [pytest.mark.spark, pytest.mark.integration]

PARTITIONS = 2
PER_PARTITION = 60


async def _prepare(cluster: LocalCluster, topic: str) -> None:
    await cluster.create_topic(topic, PARTITIONS)
    await cluster.produce_to_partitions(
        topic,
        {
            p: [(b"k%d" % i, b"v-%d-%d" % (p, i)) for i in range(PER_PARTITION)]
            for p in range(PARTITIONS)
        },
    )


def test_the_source_reads_a_sasl_ssl_topic_exactly_once(
    spark: SparkSession, secure_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    cluster = secure_cluster
    asyncio.run(_prepare(cluster, unique_topic))
    props = cluster.client_properties("SASL_SSL", "SCRAM-SHA-512")
    password = props["sasl.password"]
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{props["sasl.username"]}" password="{password}";'
    )
    df = (
        spark.read.format("zkkafka")
        .option("group.id", unique_group_id)
        .option("group.coordinator", "kafka")
        .option("kafka.bootstrap.servers", props["bootstrap.servers"])
        .option("kafka.security.protocol", "SASL_SSL")
        .option("kafka.sasl.mechanism", "SCRAM-SHA-512")
        .option("kafka.sasl.jaas.config", jaas)
        .option("kafka.ssl.truststore.location", props["ssl.cafile"])
        .option("kafka.ssl.truststore.type", "PEM")
        .option("subscribe", unique_topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    rows = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert rows == sorted((p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION))
    values = {r.value for r in df.select("value").collect()}
    assert b"v-1-59" in values
    assert password not in df._jdf.queryExecution().toString()
    asyncio.run(cluster.wait_for_principal("User:alice", listener="SASL_SSL"))
