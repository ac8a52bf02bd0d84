"""The Spark bridges against a real ZooKeeper + Kafka 3.9 and a local SparkSession.

The ``zkkafka`` streaming source (pull mode) and ``foreach_batch`` (push mode). Spark runs in
local mode (``local[2]``); the source's planning methods run in a Python process Spark starts
per query, its ``read`` in Spark's Python workers — so these tests observe the group through
ZooKeeper (owner and offset nodes) and the data through ``foreachBatch``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

pyspark = pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from pyspark.errors import StreamingQueryException  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aiozkconsumer import (  # noqa: E402
    ConsumerConfig,
    InvalidConfigError,
    ZookeeperConsumerConnector,
)
from aiozkconsumer.records import MessageAndMetadata, TopicPartition  # noqa: E402
from aiozkconsumer.spark import (  # noqa: E402
    BatchRecord,
    arrow_schema,
    batch_log_path,
    foreach_batch,
    parse_source_options,
    records_to_arrow,
    register,
)
from aiozkconsumer.spark.planning import (  # noqa: E402
    EARLIEST,
    LATEST,
    decode_offsets,
    encode_offsets,
    plan_ranges,
    plan_starts,
    rate_limit,
)
from aiozkconsumer.testing import LocalCluster  # noqa: E402
from aiozkconsumer.zk import layout  # noqa: E402
from aiozkconsumer.zk.client import ZkClient  # noqa: E402

pytestmark = pytest.mark.spark

_T = TypeVar("_T")

# The Kafka source's schema, written out (KafkaRecordToRowConverter), not taken from the code.
KAFKA_SOURCE_SCHEMA = StructType(
    [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
)
KAFKA_SOURCE_SCHEMA_WITH_HEADERS = StructType(
    [
        *KAFKA_SOURCE_SCHEMA.fields,
        StructField(
            "headers",
            ArrayType(
                StructType(
                    [
                        StructField("key", StringType(), True),
                        StructField("value", BinaryType(), True),
                    ]
                ),
                True,
            ),
            True,
        ),
    ]
)

WAIT_S = 120.0


def arun(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine on a private event loop (from a sync test or a Spark callback)."""
    return asyncio.run(coro)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local SparkSession (2 cores, UI off) with the ``zkkafka`` source registered."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("aiozkconsumer-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def source(
    spark: SparkSession, cluster: LocalCluster, group: str, topic: str, **options: Any
) -> DataFrame:
    reader = (
        spark.readStream.format("zkkafka")
        .option("zookeeper.connect", cluster.zookeeper_connect)
        .option("group.id", group)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("zookeeper.session.timeout.ms", "6000")
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def start(df: DataFrame, sink: Callable[[DataFrame, int], None], checkpoint: Path) -> Any:
    return df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)).start()


class Batches:
    """What a foreachBatch sink saw: per batch, (partition, offset) pairs."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.fail_on = fail_on
        self.ids: list[int] = []
        self.pairs: dict[int, set[tuple[int, int]]] = {}
        self.failed: set[tuple[int, int]] | None = None
        self.group_offsets_at: dict[int, dict[int, int | None]] = {}
        self.offsets_reader: Callable[[], dict[int, int | None]] | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = df.select("partition", "offset").collect()
        pairs = {(r.partition, r.offset) for r in rows}
        assert len(pairs) == len(rows), "a batch holds a record twice"
        if self.offsets_reader is not None:
            self.group_offsets_at[batch_id] = self.offsets_reader()
        if batch_id == self.fail_on:
            self.failed = pairs
            raise RuntimeError(f"sink down at batch {batch_id}")
        self.ids.append(batch_id)
        self.pairs[batch_id] = pairs

    def all_pairs(self) -> list[tuple[int, int]]:
        return [p for pairs in self.pairs.values() for p in pairs]


async def _group_offsets(connect: str, group: str, topic: str, n: int) -> dict[int, int | None]:
    zk = ZkClient(connect, session_timeout_ms=10000)
    await zk.start()
    try:
        out: dict[int, int | None] = {}
        for p in range(n):
            data = await zk.get_data(layout.offset_path(group, topic, p))
            out[p] = None if data is None else layout.decode_offset(data)
        return out
    finally:
        await zk.close()


def group_offsets(cluster: LocalCluster, group: str, topic: str, n: int) -> dict[int, int | None]:
    return arun(_group_offsets(cluster.zookeeper_connect, group, topic, n))


async def _wait_offsets(
    connect: str, group: str, topic: str, wanted: dict[int, int]
) -> dict[int, int]:
    zk = ZkClient(connect, session_timeout_ms=10000)
    await zk.start()
    try:
        got: dict[int, int] = {}
        with anyio.fail_after(WAIT_S):
            for p, target in sorted(wanted.items()):
                async for data in zk.watch_data(layout.offset_path(group, topic, p)):
                    if data is not None and layout.decode_offset(data) >= target:
                        got[p] = layout.decode_offset(data)
                        break
        return got
    finally:
        await zk.close()


def wait_group_offsets(
    cluster: LocalCluster, group: str, topic: str, wanted: dict[int, int]
) -> dict[int, int]:
    """Wait (on ZooKeeper watches) until each partition's committed offset reaches ``wanted``."""
    return arun(_wait_offsets(cluster.zookeeper_connect, group, topic, wanted))


async def _wait_owners(
    connect: str, group: str, topic: str, predicate: Callable[[dict[int, str]], bool]
) -> dict[int, str]:
    zk = ZkClient(connect, session_timeout_ms=10000)
    await zk.start()
    owners_dir = layout.owners_dir(group, topic)
    try:
        with anyio.fail_after(WAIT_S):
            async for children in zk.watch_children(owners_dir):
                owners: dict[int, str] = {}
                for child in children or []:
                    data = await zk.get_data(f"{owners_dir}/{child}")
                    if data is not None:
                        owners[int(child)] = data.decode()
                if predicate(owners):
                    return owners
        raise AssertionError("unreachable")
    finally:
        await zk.close()


def wait_owners(
    cluster: LocalCluster, group: str, topic: str, predicate: Callable[[dict[int, str]], bool]
) -> dict[int, str]:
    """Wait (on a ZooKeeper watch) until the owner nodes of ``topic`` satisfy ``predicate``."""
    return arun(_wait_owners(cluster.zookeeper_connect, group, topic, predicate))


def member_of(owner_thread_id: str) -> str:
    """``<consumer id>-<thread index>`` -> the consumer id."""
    return owner_thread_id.rsplit("-", 1)[0]


def produce(
    cluster: LocalCluster, topic: str, per_partition: int, partitions: int, tag: str
) -> None:
    arun(
        cluster.produce_to_partitions(
            topic,
            {
                p: [(b"k%d" % i, b"%s-%d-%d" % (tag.encode(), p, i)) for i in range(per_partition)]
                for p in range(partitions)
            },
        )
    )


def new_topic(cluster: LocalCluster, topic: str, partitions: int) -> str:
    arun(cluster.create_topic(topic, partitions))
    return topic


# -- pure parts -----------------------------------------------------------------------------


def test_rate_limit_never_exceeds_the_limit_and_does_not_starve() -> None:
    a, b, c = (TopicPartition("t", p) for p in range(3))
    ends = rate_limit({a: (0, 1000), b: (0, 10), c: (5, 5)}, 100)
    assert (ends[a] - 0) + (ends[b] - 0) + (ends[c] - 5) <= 100
    assert ends[b] > 0 and ends[c] == 5 and ends[a] + ends[b] == 100
    assert rate_limit({a: (0, 10)}, 100) == {a: 10}
    for limit in (1, 2, 3, 7):
        ends = rate_limit({a: (0, 5), b: (0, 5), c: (0, 5)}, limit)
        assert sum(ends.values()) == limit


def test_plan_starts_continues_rebases_and_uses_starting_offsets() -> None:
    a, b, c = (TopicPartition("t", p) for p in range(3))
    starts, rebased = plan_starts(
        previous={a: 10, b: 10}, owned=[a, b, c], committed={a: 5, b: 20}, starting={c: 7}
    )
    assert starts == {a: 10, b: 20, c: 7}
    assert rebased == {b: 20, c: 7}


def test_offsets_json_has_the_kafka_source_shape_and_round_trips() -> None:
    a, b = TopicPartition("t", 0), TopicPartition("t", 10)
    encoded = encode_offsets({b: 5, a: 3}, {b: 1})
    assert json.dumps(encoded) == '{"t": {"0": 3, "10": 5}, "@start": {"t": {"10": 1}}}'
    assert decode_offsets(json.loads(json.dumps(encoded))) == ({a: 3, b: 5}, {b: 1})


def test_plan_ranges_splits_for_min_partitions() -> None:
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    ranges = plan_ranges({a: (0, 90), b: (0, 10), TopicPartition("t", 2): (4, 4)}, 10)
    assert [(r.tp, r.start, r.end) for r in ranges if r.tp == b] == [(b, 0, 10)]
    parts_a = [(r.start, r.end) for r in ranges if r.tp == a]
    assert len(parts_a) == 9 and parts_a[0][0] == 0 and parts_a[-1][1] == 90
    assert all(x[1] == y[0] for x, y in zip(parts_a, parts_a[1:], strict=False))


def test_source_options_checked_and_consumer_keys_pass_through() -> None:
    base = {"zookeeper.connect": "127.0.0.1:2181", "group.id": "billing", "subscribe": "a,b"}
    opts = parse_source_options(
        {
            **base,
            "offsets.storage": "kafka",
            "maxOffsetsPerTrigger": "10",
            "STARTINGOFFSETS": "earliest",
        }
    )
    assert opts.config.offsets_storage == "kafka" and not opts.config.auto_commit_enable
    assert opts.topics == ("a", "b") and opts.max_offsets_per_trigger == 10
    assert opts.starting_offsets.for_partition(TopicPartition("a", 0)) == EARLIEST
    json_start = parse_source_options({**base, "startingOffsets": '{"a": {"1": 5}}'})
    assert json_start.starting_offsets.for_partition(TopicPartition("a", 1)) == 5
    assert json_start.starting_offsets.for_partition(TopicPartition("a", 0)) == LATEST
    for bad in (
        {"assign": '{"a": [0]}'},
        {"subscribePattern": "a.*"},
        {"auto.commit.enable": "true"},
        {"no.such.property": "1"},
        {"maxOffsetsPerTrigger": "0"},
    ):
        with pytest.raises(InvalidConfigError):
            parse_source_options({**base, **bad})


def test_schema_equals_the_kafka_source_schema(spark: SparkSession) -> None:
    options = {"zookeeper.connect": "127.0.0.1:1", "group.id": "g", "subscribe": "t"}
    df = spark.readStream.format("zkkafka").options(**options).load()
    assert df.schema == KAFKA_SOURCE_SCHEMA
    with_headers = (
        spark.readStream.format("zkkafka").options(**options, includeHeaders="true").load()
    )
    assert with_headers.schema == KAFKA_SOURCE_SCHEMA_WITH_HEADERS
    # Push mode: the DataFrame built through Arrow has the same schema.
    records = [MessageAndMetadata("t", 0, 5, None, b"v", 1_700_000_000_123, 0, (("h", b"x"),))]
    for include in (False, True):
        batch = records_to_arrow(records, include_headers=include)
        assert batch.schema.equals(arrow_schema(include))
        pushed = spark.createDataFrame(pa.Table.from_batches([batch]))
        expected = KAFKA_SOURCE_SCHEMA_WITH_HEADERS if include else KAFKA_SOURCE_SCHEMA
        assert pushed.schema == expected
    row = pushed.first()
    assert row is not None
    assert (row.key, row.value, row.topic, row.partition, row.offset) == (None, b"v", "t", 0, 5)
    assert row.timestampType == 0 and [(h.key, h.value) for h in row.headers] == [("h", b"x")]


# -- pull mode: the zkkafka source -----------------------------------------------------------


@pytest.mark.integration
def test_100k_records_end_to_end_none_lost(
    spark: SparkSession,
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    topic = new_topic(zk_kafka_cluster, unique_topic, 4)
    produce(zk_kafka_cluster, topic, 25_000, 4, "a")
    seen: list[tuple[int, int, int, int, int]] = []  # batch, partition, count, min, max

    def sink(df: DataFrame, batch_id: int) -> None:
        rows = (
            df.groupBy("partition")
            .agg(
                F.count("*").alias("n"),
                F.countDistinct("offset").alias("distinct"),
                F.min("offset").alias("lo"),
                F.max("offset").alias("hi"),
            )
            .collect()
        )
        assert all(r.n == r.distinct for r in rows), "a batch holds a record twice"
        seen.extend((batch_id, r.partition, r.n, r.lo, r.hi) for r in rows)

    df = source(spark, zk_kafka_cluster, unique_group_id, topic, maxOffsetsPerTrigger=60_000)
    query = start(df, sink, tmp_path / "ckpt")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert sum(n for _, _, n, _, _ in seen) == 100_000
    for p in range(4):
        ranges = sorted((lo, hi, n) for _, part, n, lo, hi in seen if part == p)
        assert ranges[0][0] == 0 and ranges[-1][1] == 24_999
        assert all(hi - lo + 1 == n for lo, hi, n in ranges)  # every offset once, no gap
        assert all(x[1] + 1 == y[0] for x, y in zip(ranges, ranges[1:], strict=False))
    # The group's committed offsets reached the log end (committed after Spark's commits).
    ends = dict.fromkeys(range(4), 25_000)
    assert wait_group_offsets(zk_kafka_cluster, unique_group_id, topic, ends) == ends


@pytest.mark.integration
def test_max_offsets_per_trigger_bounds_every_batch(
    spark: SparkSession,
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    topic = new_topic(zk_kafka_cluster, unique_topic, 4)
    produce(zk_kafka_cluster, topic, 1000, 4, "a")
    batches = Batches()
    df = source(spark, zk_kafka_cluster, unique_group_id, topic, maxOffsetsPerTrigger=1500)
    query = start(df, batches, tmp_path / "ckpt")
    try:
        query.processAllAvailable()
        progress = query.recentProgress
    finally:
        query.stop()
    sizes = [len(batches.pairs[i]) for i in batches.ids]
    assert sizes == [1500, 1500, 1000]
    assert sorted(batches.all_pairs()) == [(p, o) for p in range(4) for o in range(1000)]
    # Spark's own accounting agrees: no batch read more than the limit.
    assert all(p["numInputRows"] <= 1500 for p in progress)
    assert max(p["numInputRows"] for p in progress) == 1500


@pytest.mark.integration
def test_batch_ids_start_at_zero_and_are_contiguous_across_a_restart(
    spark: SparkSession,
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    topic = new_topic(zk_kafka_cluster, unique_topic, 2)
    produce(zk_kafka_cluster, topic, 500, 2, "a")
    checkpoint = tmp_path / "ckpt"
    first, second = Batches(), Batches()
    df = source(spark, zk_kafka_cluster, unique_group_id, topic, maxOffsetsPerTrigger=400)
    query = start(df, first, checkpoint)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert first.ids == [0, 1, 2]

    produce(zk_kafka_cluster, topic, 300, 2, "b")
    query = start(df, second, checkpoint)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert second.ids == [3, 4]
    everything = sorted(first.all_pairs() + second.all_pairs())
    assert everything == [(p, o) for p in range(2) for o in range(800)]  # once each


@pytest.mark.integration
def test_failed_batch_is_replayed_with_the_same_offsets_and_group_never_runs_ahead(
    spark: SparkSession,
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    topic, group = new_topic(zk_kafka_cluster, unique_topic, 4), unique_group_id
    produce(zk_kafka_cluster, topic, 750, 4, "a")
    checkpoint = tmp_path / "ckpt"
    failing, recovered = Batches(fail_on=2), Batches()
    for batches in (failing, recovered):
        batches.offsets_reader = lambda: group_offsets(zk_kafka_cluster, group, topic, 4)
    df = source(spark, zk_kafka_cluster, group, topic, maxOffsetsPerTrigger=1000)

    query = start(df, failing, checkpoint)
    with pytest.raises(StreamingQueryException, match="sink down at batch 2"):
        query.awaitTermination(WAIT_S)
    assert failing.ids == [0, 1] and failing.failed is not None
    assert not (checkpoint / "commits" / "2").exists()
    # The group holds exactly the end of batch 1, Spark's last committed batch.
    committed_end = {p: max(o for q, o in failing.all_pairs() if q == p) + 1 for p in range(4)}
    assert group_offsets(zk_kafka_cluster, group, topic, 4) == committed_end

    query = start(df, recovered, checkpoint)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert recovered.ids[0] == 2
    assert recovered.pairs[2] == failing.failed  # the same (partition, offset) set
    everything = sorted(failing.all_pairs() + recovered.all_pairs())
    assert everything == [(p, o) for p in range(4) for o in range(750)]
    # While any batch ran, the group held exactly the end of the batches Spark had committed
    # before it (nothing while batch 0 ran): never ahead of what Spark had committed, and not
    # behind it either.
    assert failing.failed is not None
    done = {0: failing.pairs[0], 1: failing.pairs[1], 2: failing.failed, **recovered.pairs}

    def committed_before(batch_id: int) -> dict[int, int | None]:
        pairs = [pair for b, ps in done.items() if b < batch_id for pair in ps]
        return {p: max((o + 1 for q, o in pairs if q == p), default=None) for p in range(4)}

    assert sorted(failing.group_offsets_at) == [0, 1, 2]
    assert failing.group_offsets_at[0] == dict.fromkeys(range(4))
    assert sorted(recovered.group_offsets_at) == recovered.ids
    for batches in (failing, recovered):
        for batch_id, at in batches.group_offsets_at.items():
            assert at == committed_before(batch_id), batch_id
            if batch_id > 0:
                assert None not in at.values(), batch_id
    assert recovered.group_offsets_at[2] == committed_end


@pytest.mark.integration
def test_two_queries_in_one_group_split_the_partitions_and_take_over(
    spark: SparkSession,
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    topic, group = new_topic(zk_kafka_cluster, unique_topic, 4), unique_group_id
    produce(zk_kafka_cluster, topic, 1000, 4, "a")
    batches_a, batches_b = Batches(), Batches()
    query_a = start(source(spark, zk_kafka_cluster, group, topic), batches_a, tmp_path / "a")
    query_b = None
    try:
        query_a.processAllAvailable()
        owners = wait_owners(zk_kafka_cluster, group, topic, lambda o: len(o) == 4)
        (member_a,) = {member_of(t) for t in owners.values()}

        query_b = start(source(spark, zk_kafka_cluster, group, topic), batches_b, tmp_path / "b")
        owners = wait_owners(
            zk_kafka_cluster,
            group,
            topic,
            lambda o: len(o) == 4 and len({member_of(t) for t in o.values()}) == 2,
        )
        owned_a = {p for p, t in owners.items() if member_of(t) == member_a}
        owned_b = set(range(4)) - owned_a
        assert len(owned_a) == len(owned_b) == 2  # range assignment over two members

        produce(zk_kafka_cluster, topic, 1000, 4, "b")
        query_a.processAllAvailable()
        query_b.processAllAvailable()
        new_a = {p for p, o in batches_a.all_pairs() if o >= 1000}
        new_b = {p for p, o in batches_b.all_pairs() if o >= 1000}
        assert new_a == owned_a and new_b == owned_b  # disjoint, and together all four

        query_b.stop()  # its member leaves the group: A takes over B's partitions
        wait_owners(
            zk_kafka_cluster,
            group,
            topic,
            lambda o: len(o) == 4 and {member_of(t) for t in o.values()} == {member_a},
        )
        produce(zk_kafka_cluster, topic, 1000, 4, "c")
        query_a.processAllAvailable()
    finally:
        query_a.stop()
        if query_b is not None:
            query_b.stop()
    # Nothing lost: every offset of every partition went through one sink or the other.
    everything = set(batches_a.all_pairs()) | set(batches_b.all_pairs())
    assert everything == {(p, o) for p in range(4) for o in range(3000)}
    # A took B's partitions over exactly where B's committed offsets were: the end of B's
    # last batch (Spark had committed it before processAllAvailable returned).
    for p in owned_b:
        assert sorted(o for q, o in batches_a.all_pairs() if q == p and o >= 1000) == list(
            range(2000, 3000)
        )
    ends = dict.fromkeys(range(4), 3000)
    assert wait_group_offsets(zk_kafka_cluster, group, topic, ends) == ends


# -- push mode: foreach_batch ----------------------------------------------------------------


def bridge_config(cluster: LocalCluster, group: str, **kw: Any) -> ConsumerConfig:
    return ConsumerConfig(
        group_id=group,
        zookeeper_connect=cluster.zookeeper_connect,
        auto_offset_reset="smallest",
        auto_commit_enable=False,
        **kw,
    )


@pytest.mark.integration
async def test_bridge_commits_only_after_fn_returns_and_keeps_the_session_alive(
    spark: SparkSession, zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = unique_topic, unique_group_id
    await zk_kafka_cluster.create_topic(topic, 2)
    await zk_kafka_cluster.produce_to_partitions(
        topic, {p: [(None, b"v%d" % i) for i in range(250)] for p in range(2)}
    )
    session_timeout_ms = 2000
    config = bridge_config(zk_kafka_cluster, group, zookeeper_session_timeout_ms=session_timeout_ms)
    entered, release = threading.Event(), threading.Event()
    seen: list[tuple[int, int]] = []

    def fn(df: DataFrame, batch_id: int) -> None:
        seen.append((batch_id, df.count()))
        entered.set()
        assert release.wait(WAIT_S), "the test never released fn"

    async with ZookeeperConsumerConnector(config) as connector:
        await connector.create_message_streams({topic: 1})
        session = connector.statistics().session_id
        async with anyio.create_task_group() as tg:
            done: list[int] = []

            async def bridge() -> None:
                done.append(
                    await foreach_batch(
                        connector, spark, fn, max_records=500, max_interval_ms=5000, max_batches=1
                    )
                )

            tg.start_soon(bridge)
            await anyio.to_thread.run_sync(entered.wait, WAIT_S)
            # fn is running; its batch is logged but nothing is committed.
            assert connector.statistics().committed_offsets == {}
            log_node = await connector.zk.get_data(batch_log_path(group))
            assert log_node is not None and not BatchRecord.decode(log_node).committed
            # Keep fn running past the session timeout: time itself is what is tested here.
            await anyio.sleep(2 * session_timeout_ms / 1000)
            registration = await connector.zk.get(
                layout.ids_path(group, connector.consumer_id_string)
            )
            assert registration is not None and registration[1].ephemeral_owner == session
            assert connector.statistics().session_id == session
            assert connector.statistics().committed_offsets == {}
            assert await _group_offsets(zk_kafka_cluster.zookeeper_connect, group, topic, 2) == {
                0: None,
                1: None,
            }
            release.set()
        assert done == [1]
        assert seen == [(0, 500)]
        assert await _group_offsets(zk_kafka_cluster.zookeeper_connect, group, topic, 2) == {
            0: 250,
            1: 250,
        }
        log_node = await connector.zk.get_data(batch_log_path(group))
        assert log_node is not None
        record = BatchRecord.decode(log_node)
        assert record.batch_id == 0 and record.committed
        assert record.ranges == {TopicPartition(topic, p): (0, 250) for p in range(2)}


@pytest.mark.integration
async def test_bridge_batch_ids_survive_restarts_and_a_failed_batch_is_replayed(
    spark: SparkSession, zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = unique_topic, unique_group_id
    await zk_kafka_cluster.create_topic(topic, 2)
    await zk_kafka_cluster.produce_to_partitions(
        topic, {p: [(None, b"v%d" % i) for i in range(150)] for p in range(2)}
    )
    config = bridge_config(zk_kafka_cluster, group)
    calls: list[tuple[int, frozenset[tuple[int, int]]]] = []

    def recording(fail_on: int | None) -> Callable[[DataFrame, int], None]:
        def fn(df: DataFrame, batch_id: int) -> None:
            pairs = frozenset(
                (r.partition, r.offset) for r in df.select("partition", "offset").collect()
            )
            calls.append((batch_id, pairs))
            if batch_id == fail_on:
                raise RuntimeError(f"sink down at batch {batch_id}")

        return fn

    async def run(fail_on: int | None, max_batches: int) -> int:
        async with ZookeeperConsumerConnector(config) as connector:
            await connector.create_message_streams({topic: 1})
            bridge = foreach_batch(
                connector,
                spark,
                recording(fail_on),
                max_records=100,
                max_interval_ms=30_000,
                max_batches=max_batches,
            )
            if fail_on is None:
                return await bridge
            # fn's exception reaches the caller as itself, and nothing of its batch is
            # committed.
            with pytest.raises(RuntimeError, match=f"sink down at batch {fail_on}"):
                await bridge
            assert connector.statistics().committed_offsets == committed_before_failure()
            return -1

    def committed_before_failure() -> dict[TopicPartition, int]:
        first_two = [p for _, pairs in calls[:2] for p in pairs]
        return {
            TopicPartition(topic, p): max(o for q, o in first_two if q == p) + 1 for p in range(2)
        }

    assert await run(None, 2) == 2  # batches 0 and 1, then the service stops
    assert await run(2, 5) == -1
    committed = await _group_offsets(zk_kafka_cluster.zookeeper_connect, group, topic, 2)
    first_two = [p for _, pairs in calls[:2] for p in pairs]
    assert committed == {p: max(o for q, o in first_two if q == p) + 1 for p in range(2)}
    assert await run(None, 1) == 1  # the restart replays batch 2 first

    assert [batch_id for batch_id, _ in calls] == [0, 1, 2, 2]
    assert calls[3][1] == calls[2][1] and len(calls[2][1]) == 100
    everything = sorted(p for _, pairs in calls[:2] + calls[3:] for p in pairs)
    assert everything == [(p, o) for p in range(2) for o in range(150)]
    assert await _group_offsets(zk_kafka_cluster.zookeeper_connect, group, topic, 2) == {
        0: 150,
        1: 150,
    }
