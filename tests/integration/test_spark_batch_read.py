"""Batch reads of the ``zkkafka`` source against a real ZooKeeper + Kafka 3.9 and local Spark.

``spark.read.format("zkkafka")`` reads ``[startingOffsets, endingOffsets)`` of every partition
of the subscribed topics — by default from the group's committed offsets to the log end —
with the Kafka source's schema; ``commit_batch`` commits the read's ends to the group once
the action succeeded. The group's offsets are observed in ZooKeeper.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from _spark_session import spark_session  # noqa: F401
from _support import config_for
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from test_spark import KAFKA_SOURCE_SCHEMA, arun, group_offsets, new_topic, produce

from aiozkconsumer import InvalidConfigError, ZookeeperConsumerConnector
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.spark.source import commit_batch
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.tools import GroupActiveError

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def batch(
    spark: SparkSession, cluster: LocalCluster, group: str, topic: str, **options: Any
) -> DataFrame:
    reader = (
        spark.read.format("zkkafka")
        .option("zookeeper.connect", cluster.zookeeper_connect)
        .option("group.id", group)
        .option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, value if isinstance(value, str) else json.dumps(value))
    return reader.load()


def pairs(df: DataFrame) -> list[tuple[int, int]]:
    """(partition, offset) of every row, sorted; a record read twice shows twice."""
    return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())


def offsets(partitions: dict[int, range]) -> list[tuple[int, int]]:
    return sorted((p, o) for p, r in partitions.items() for o in r)


def test_default_read_starts_at_the_group_and_commit_batch_moves_it(
    spark: SparkSession,
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    topic, group = new_topic(zk_kafka_cluster, unique_topic, 3), unique_group_id
    produce(zk_kafka_cluster, topic, 100, 3, "a")

    first = batch(spark, zk_kafka_cluster, group, topic, commitOnSuccess="true")
    assert first.schema == KAFKA_SOURCE_SCHEMA
    # The group has no offsets yet: earliest (the Kafka source's batch default).
    first.write.parquet(str(tmp_path / "run1"))
    written = spark.read.parquet(str(tmp_path / "run1"))
    assert pairs(written) == offsets(dict.fromkeys(range(3), range(100)))
    row = written.filter("partition = 1 AND offset = 7").first()
    assert row is not None and (row.topic, row.key, row.value) == (topic, b"k7", b"a-1-7")
    assert group_offsets(zk_kafka_cluster, group, topic, 3) == dict.fromkeys(range(3))

    assert commit_batch(first) == {TopicPartition(topic, p): 100 for p in range(3)}
    assert group_offsets(zk_kafka_cluster, group, topic, 3) == dict.fromkeys(range(3), 100)

    produce(zk_kafka_cluster, topic, 50, 3, "b")
    # Spark planned `first` once: every action on it reads the same ranges.
    assert pairs(first) == offsets(dict.fromkeys(range(3), range(100)))
    second = batch(spark, zk_kafka_cluster, group, topic, commitOnSuccess="true")
    assert pairs(second) == offsets(dict.fromkeys(range(3), range(100, 150)))
    assert commit_batch(second) == {TopicPartition(topic, p): 150 for p in range(3)}
    assert commit_batch(first) == {}  # only forward
    assert group_offsets(zk_kafka_cluster, group, topic, 3) == dict.fromkeys(range(3), 150)
    assert pairs(batch(spark, zk_kafka_cluster, group, topic)) == []  # nothing new


def test_starting_and_ending_offsets_as_the_kafka_source(
    spark: SparkSession, zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = new_topic(zk_kafka_cluster, unique_topic, 2), unique_group_id
    produce(zk_kafka_cluster, topic, 20, 2, "a")

    def read(**options: Any) -> list[tuple[int, int]]:
        return pairs(batch(spark, zk_kafka_cluster, group, topic, **options))

    everything = offsets({0: range(20), 1: range(20)})
    assert read(startingOffsets="earliest", endingOffsets="latest") == everything
    assert read(
        startingOffsets={topic: {"0": 5, "1": -2}}, endingOffsets={topic: {"0": 15, "1": -1}}
    ) == offsets({0: range(5, 15), 1: range(20)})
    # Partitions the JSON leaves out: earliest to start, latest to end.
    assert read(startingOffsets={topic: {"0": 10}}, endingOffsets={topic: {"1": 3}}) == offsets(
        {0: range(10, 20), 1: range(3)}
    )
    # minPartitions splits the ranges; the rows stay the same.
    split = batch(spark, zk_kafka_cluster, group, topic, minPartitions="6")
    assert split.rdd.getNumPartitions() >= 6 and pairs(split) == everything

    # The group reached 10 on both partitions; without startingOffsets the read starts there,
    # with startingOffsets the group's offsets do not matter (as the Kafka source).
    up_to_ten = batch(
        spark,
        zk_kafka_cluster,
        group,
        topic,
        endingOffsets={topic: {"0": 10, "1": 10}},
        commitOnSuccess="true",
    )
    assert pairs(up_to_ten) == offsets({0: range(10), 1: range(10)})
    commit_batch(up_to_ten)
    assert group_offsets(zk_kafka_cluster, group, topic, 2) == {0: 10, 1: 10}
    assert read() == offsets({0: range(10, 20), 1: range(10, 20)})
    assert read(startingOffsets="earliest") == everything

    # An end beyond the log end or before the start is refused in one line.
    for ending in ({topic: {"0": 21}}, {topic: {"0": 5}}):
        with pytest.raises(AnalysisException) as caught:
            read(endingOffsets=ending)
        text = str(caught.value)
        assert "InvalidConfigError: endingOffsets: " in text and "Traceback" not in text


def test_commit_batch_needs_commit_on_success_and_an_idle_group(
    spark: SparkSession, zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = new_topic(zk_kafka_cluster, unique_topic, 2), unique_group_id
    produce(zk_kafka_cluster, topic, 10, 2, "a")
    plain = batch(spark, zk_kafka_cluster, group, topic)
    assert len(pairs(plain)) == 20
    with pytest.raises(InvalidConfigError, match="commitOnSuccess"):
        commit_batch(plain)
    committing = batch(spark, zk_kafka_cluster, group, topic, commitOnSuccess="true")
    assert len(pairs(committing)) == 20

    async def with_a_live_member() -> None:
        config = config_for(zk_kafka_cluster, group, auto_commit_enable=False)
        async with ZookeeperConsumerConnector(config) as member:
            await member.create_message_streams({topic: 1})
            with pytest.raises(GroupActiveError, match=member.consumer_id_string):
                commit_batch(committing)

    arun(with_a_live_member())
    assert group_offsets(zk_kafka_cluster, group, topic, 2) == {0: None, 1: None}
    # The ends Spark planned for the read are committed, not the log end at commit time.
    produce(zk_kafka_cluster, topic, 5, 2, "b")
    assert commit_batch(committing) == {TopicPartition(topic, p): 10 for p in range(2)}
    assert group_offsets(zk_kafka_cluster, group, topic, 2) == {0: 10, 1: 10}
