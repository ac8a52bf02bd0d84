"""Spark bridges: the ``zkkafka`` Structured Streaming source and push-mode ``foreach_batch``.

Pull mode — a streaming query whose source is a member of a consumer group (ZooKeeper-
coordinated, or Kafka-coordinated with ``group.coordinator=kafka`` and ``bootstrap.servers``)::

    from aiozkconsumer import spark as zkspark

    zkspark.register(spark)
    df = (spark.readStream.format("zkkafka")
          .option("zookeeper.connect", "127.0.0.1:2181").option("group.id", "billing")
          .option("subscribe", "payments").option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", 100000).load())
    query = df.writeStream.foreachBatch(fn).option("checkpointLocation", ckpt).start()

Push mode — an async service hands its connector's records to ``fn(df, batch_id)``::

    await zkspark.foreach_batch(connector, spark, fn, max_records=10000, max_interval_ms=1000)

Batch reads — a fixed range of every partition, then the group's offsets moved to its end::

    df = (spark.read.format("zkkafka").option("zookeeper.connect", "127.0.0.1:2181")
          .option("group.id", "billing").option("subscribe", "payments")
          .option("commitOnSuccess", "true").load())
    df.write.parquet(path)
    zkspark.commit_batch(df)

All give DataFrames with the schema of Spark's Kafka source (:data:`KAFKA_SCHEMA`). Needs the
``spark`` extra: ``pip install 'aiozkconsumer[spark]'`` (PySpark >= 4.2, pyarrow, pandas < 3).
See ``docs/spark.md``.
"""

from __future__ import annotations

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "aiozkconsumer.spark needs PySpark >= 4.2 and pyarrow: pip install 'aiozkconsumer[spark]'"
    ) from e

from .bridge import (
    BatchLog,
    BatchLogConflictError,
    BatchLogStore,
    BatchMark,
    BatchRecord,
    KafkaBatchLog,
    ZookeeperBatchLog,
    batch_log_path,
    foreach_batch,
    open_batch_log,
)
from .columns import RecordColumns
from .executor import DataLossError, ZkKafkaInputPartition
from .planning import SOURCE_NAME, SourceOptions, StartingOffsets, parse_source_options
from .schema import (
    KAFKA_SCHEMA,
    KAFKA_SCHEMA_WITH_HEADERS,
    arrow_schema,
    kafka_schema,
    records_to_arrow,
)
from .source import (
    ZkKafkaBatchReader,
    ZkKafkaDataSource,
    ZkKafkaStreamReader,
    commit_batch,
    register,
)

__all__ = [
    "KAFKA_SCHEMA",
    "KAFKA_SCHEMA_WITH_HEADERS",
    "SOURCE_NAME",
    "BatchLog",
    "BatchLogConflictError",
    "BatchLogStore",
    "BatchMark",
    "BatchRecord",
    "DataLossError",
    "KafkaBatchLog",
    "RecordColumns",
    "SourceOptions",
    "StartingOffsets",
    "ZkKafkaBatchReader",
    "ZkKafkaDataSource",
    "ZkKafkaInputPartition",
    "ZkKafkaStreamReader",
    "ZookeeperBatchLog",
    "arrow_schema",
    "batch_log_path",
    "commit_batch",
    "foreach_batch",
    "kafka_schema",
    "open_batch_log",
    "parse_source_options",
    "records_to_arrow",
    "register",
]
