"""Records/s through ``foreachBatch``: the ``zkkafka`` source against Spark's Kafka source.

Both sources read the same topic of a local Kafka 3.9 cluster (``LocalCluster``) in the same
Spark session, with the same trigger (``availableNow``), the same ``maxOffsetsPerTrigger`` and
the same sink (an aggregation over ``value``, so every record is materialised). Each source
first runs once on a small warm-up topic, so that both measured runs find the JVM and Spark's
Python workers warm.

Each query is reported three ways: its start-up (``start()`` to the end of the first batch:
for a Python source that includes PySpark's planning process and, for ``zkkafka``, joining
the group), its steady state (records/s over batches 2..n, from the end of batch 1 to the end
of the last), and end to end (``start()`` to termination). The whole run is repeated on each
master of ``--masters``: ``local`` (``local[*]``) and ``standalone`` (a Spark standalone
master and two workers of 1 core each, ``aiozkconsumer.testing.SparkStandaloneCluster``:
executors in JVMs of their own); the session's creation is timed apart.

Spark's Kafka source (``spark-sql-kafka-0-10_2.13``) is not in the PySpark wheel: its jars are
resolved from Maven Central by ``mvn dependency:copy-dependencies`` from the pinned pom next to
this file, into ``~/.cache/aiozkconsumer/spark-sql-kafka-<version>/libs`` (like the broker
jars), and passed with ``spark.jars``.

Usage::

    .venv/bin/python benchmarks/spark_bench.py --records 500000 --max-offsets-per-trigger 100000

Prints, per master and source, start-up, steady state and end to end; writes
``spark_bench.json`` and ``spark_bench.md`` into ``--out-dir``. Not a test: nothing here
asserts on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

POM = Path(__file__).with_name("spark-sql-kafka-pom.xml")
MARKER = ".complete"
_T = TypeVar("_T")

log = logging.getLogger("spark_bench")


def arun(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine on a private event loop."""
    return asyncio.run(coro)


# -- the Kafka connector's jars --------------------------------------------------------------


def connector_jars(
    connector_version: str, token_version: str, cache: Path, pyspark_jars: Path
) -> list[Path]:
    """Resolve ``spark-sql-kafka-0-10`` into the cache (once) and return the jars to add.

    Jars whose artifact PySpark already ships (scala-library, slf4j, lz4, ...) are left out,
    so Spark's own versions stay in force.

    Raises:
        SystemExit: Maven is missing or the artifacts cannot be resolved.
    """
    target = cache / f"spark-sql-kafka-{connector_version}"
    libs = target / "libs"
    digest = hashlib.sha256(
        POM.read_bytes() + f"{connector_version}/{token_version}".encode()
    ).hexdigest()
    marker = target / MARKER
    if not (marker.exists() and marker.read_text().strip() == digest):
        mvn = shutil.which("mvn")
        if mvn is None:
            raise SystemExit("mvn not found: install Maven (apt-get install maven)")
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=cache))
        cmd = [
            mvn,
            "-B",
            "-q",
            "-Dstyle.color=never",
            "-f",
            str(POM),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-Dspark.kafka.version={connector_version}",
            f"-Dspark.token.version={token_version}",
            f"-DoutputDirectory={staging / 'libs'}",
        ]
        log.info("resolving spark-sql-kafka-0-10 %s: %s", connector_version, " ".join(cmd))
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise SystemExit(
                f"Maven could not resolve spark-sql-kafka-0-10_2.13 {connector_version} "
                f"(token provider {token_version}):\n{tail}\n"
                "If your Maven Central mirror lacks that release, pick available ones with "
                "--connector-version / --token-provider-version."
            )
        (staging / MARKER).write_text(digest + "\n")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    shipped = {_artifact(p.name) for p in pyspark_jars.glob("*.jar")}
    return sorted(p for p in libs.glob("*.jar") if _artifact(p.name) not in shipped)


def _artifact(jar_name: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients`` (the name before the version)."""
    parts = jar_name.removesuffix(".jar").split("-")
    for i, part in enumerate(parts):
        if part[:1].isdigit():
            return "-".join(parts[:i])
    return "-".join(parts)


# -- measuring --------------------------------------------------------------------------------


@dataclass
class Run:
    """One measured query."""

    source: str
    records: int
    batches: int
    seconds: float
    records_per_s: float
    max_batch_rows: int
    mean_batch_ms: float
    outside_batches_s: float
    """Query time outside the batches' ``triggerExecution``: start-up (for a Python source,
    PySpark's planning process), the first planning and stop."""
    startup_s: float = 0.0
    """``start()`` to the end of the first batch."""
    steady_records_per_s: float = 0.0
    """Records of batches 2..n over the time from the end of batch 1 to the end of the last."""
    master: str = "local[*]"


def _batch_end(progress: dict[str, Any]) -> float:
    """Epoch seconds at which a batch ended (its trigger's start plus its duration)."""
    started = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00"))
    return started.timestamp() + progress["durationMs"]["triggerExecution"] / 1000


def run_query(spark: Any, df: Any, expected: int, label: str) -> Run:
    """Run ``df`` to the end with availableNow into an aggregating foreachBatch sink."""
    from pyspark.sql import functions as F

    rows: list[int] = []

    def sink(batch: Any, batch_id: int) -> None:
        got = batch.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).first()
        rows.append(int(got.n))

    checkpoint = tempfile.mkdtemp(prefix=f"spark-bench-{label}-")
    started_wall = time.time()  # Spark's progress timestamps are wall-clock
    started = time.perf_counter()
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    shutil.rmtree(checkpoint, ignore_errors=True)
    total = sum(rows)
    if total != expected:
        raise SystemExit(f"{label}: read {total} records, expected {expected}")
    durations = [p["durationMs"]["triggerExecution"] for p in progress]
    startup = _batch_end(progress[0]) - started_wall if progress else seconds
    steady = 0.0
    if len(progress) > 1:
        steady_rows = sum(p["numInputRows"] for p in progress[1:])
        steady_s = _batch_end(progress[-1]) - _batch_end(progress[0])
        steady = steady_rows / steady_s if steady_s > 0 else 0.0
    return Run(
        source=label,
        records=total,
        batches=len(rows),
        seconds=round(seconds, 3),
        records_per_s=round(total / seconds, 1),
        max_batch_rows=max(rows, default=0),
        mean_batch_ms=round(sum(durations) / len(durations), 1) if durations else 0.0,
        outside_batches_s=round(seconds - sum(durations) / 1000, 3),
        startup_s=round(startup, 3),
        steady_records_per_s=round(steady, 1),
        master=spark.sparkContext.master,
    )


def zkkafka_df(spark: Any, cluster: Any, topic: str, max_offsets: int) -> Any:
    return (
        spark.readStream.format("zkkafka")
        .option("zookeeper.connect", cluster.zookeeper_connect)
        .option("group.id", f"bench-{uuid.uuid4().hex[:8]}")
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_offsets)
        .load()
    )


def kafka_df(spark: Any, cluster: Any, topic: str, max_offsets: int) -> Any:
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_offsets)
        .load()
    )


async def make_topic(cluster: Any, topic: str, partitions: int, records: int, size: int) -> None:
    await cluster.create_topic(topic, partitions)
    value = b"x" * size
    per = {
        p: [(b"%d" % i, value) for i in range(p, records, partitions)] for p in range(partitions)
    }
    await cluster.produce_to_partitions(topic, per)


# -- the floor: a Python data source that reads nothing -------------------------------------


def floor_df(spark: Any, cluster: Any, topic: str, max_offsets: int) -> Any:
    """The same rows as the topic, made up in the executors: no Kafka, no ZooKeeper.

    What any PySpark Python streaming source costs at the least on this machine (its planning
    process, Arrow from the Python workers into the JVM), for comparison with ``zkkafka``.
    """
    del cluster
    return (
        spark.readStream.format("python-floor")
        .option("records", str(_FLOOR[topic]))
        .option("partitions", str(_FLOOR["partitions"]))
        .option("valueBytes", str(_FLOOR["value_bytes"]))
        .option("maxOffsetsPerTrigger", str(max_offsets))
        .load()
    )


_FLOOR: dict[str, int] = {}


def register_floor(spark: Any, records: dict[str, int], partitions: int, value_bytes: int) -> None:
    """Register the ``python-floor`` source (defined here, pickled by value to the workers).

    ``records`` gives, per topic name, how many rows the source makes up in its stead.
    """
    import numpy as np
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    from aiozkconsumer.spark import KAFKA_SCHEMA, arrow_schema

    _FLOOR.update(records, partitions=partitions, value_bytes=value_bytes)

    class Range(InputPartition):
        def __init__(self, partition: int, start: int, end: int) -> None:
            self.partition, self.start, self.end = partition, start, end

    class Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options: Any) -> None:
            self.total = int(options["records"])
            self.parts = int(options["partitions"])
            self.value_bytes = int(options["valueBytes"])
            self.limit = int(options["maxOffsetsPerTrigger"])

        def initialOffset(self) -> dict[str, int]:
            return {"next": 0}

        def getDefaultReadLimit(self) -> Any:
            return ReadMaxRows(self.limit)

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            step = limit.max_rows if isinstance(limit, ReadMaxRows) else self.total
            return {"next": min(self.total, start["next"] + step)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            first, last = start["next"], end["next"]
            step = -(-(last - first) // self.parts)
            return [
                Range(i, a, min(last, a + step)) for i, a in enumerate(range(first, last, step))
            ]

        def read(self, part: Any) -> Any:
            schema = arrow_schema(False)
            value = b"x" * self.value_bytes
            offset = part.start
            while offset < part.end:
                n = min(32768, part.end - offset)
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array([b"%d" % i for i in range(offset, offset + n)], pa.binary()),
                        pa.array([value] * n, pa.binary()),
                        pa.array(["floor"] * n, pa.string()),
                        pa.array(np.full(n, part.partition, np.int32)),
                        pa.array(np.arange(offset, offset + n, dtype=np.int64)),
                        pa.array(
                            np.full(n, time.time_ns() // 1000, np.int64),
                            schema.field("timestamp").type,
                        ),
                        pa.array(np.zeros(n, np.int32)),
                    ],
                    schema=schema,
                )
                offset += n

    class Floor(DataSource):
        @classmethod
        def name(cls) -> str:
            return "python-floor"

        def schema(self) -> Any:
            return KAFKA_SCHEMA

        def streamReader(self, schema: Any) -> Any:
            return Reader(self.options)

    spark.dataSource.register(Floor)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=1, help="measured runs per source")
    parser.add_argument(
        "--connector-version", help="spark-sql-kafka-0-10 version (default: PySpark's)"
    )
    parser.add_argument(
        "--token-provider-version",
        help="spark-token-provider-kafka-0-10 version (default: the connector's)",
    )
    parser.add_argument(
        "--with-floor",
        action="store_true",
        help="also run a Python data source that reads nothing (the Python source floor)",
    )
    parser.add_argument(
        "--masters",
        default="local,standalone",
        help="comma-separated: local (local[*]) and/or standalone (a master and 2 workers)",
    )
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import pyspark
    from pyspark.sql import SparkSession

    from aiozkconsumer.spark import register
    from aiozkconsumer.testing import LocalCluster
    from aiozkconsumer.testing.provision import default_cache_dir

    cache = default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    connector_version = args.connector_version or pyspark.__version__
    token_version = args.token_provider_version or connector_version
    jars = connector_jars(
        connector_version, token_version, cache, Path(pyspark.__file__).parent / "jars"
    )
    out_dir = args.out_dir or cache / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)

    masters = [m.strip() for m in args.masters.split(",") if m.strip()]
    if not masters or set(masters) - {"local", "standalone"}:
        parser.error("--masters: a comma-separated list of 'local' and 'standalone'")

    cluster = LocalCluster()
    arun(cluster.start())
    runs: list[Run] = []
    sessions: dict[str, float] = {}
    sources: dict[str, Any] = {}
    try:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        warm = f"warm-{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        arun(make_topic(cluster, topic, args.partitions, args.records, args.value_bytes))
        arun(make_topic(cluster, warm, args.partitions, 10_000, args.value_bytes))
        log.info("produced %d records in %.1f s", args.records, time.perf_counter() - t0)
        for master in masters:
            with _master_conf(master) as conf:
                t0 = time.perf_counter()
                builder = (
                    SparkSession.builder.appName("aiozkconsumer-spark-bench")
                    .config("spark.jars", ",".join(str(j) for j in jars))
                    .config("spark.sql.shuffle.partitions", "2")
                    .config("spark.ui.enabled", "false")
                    .config("spark.ui.showConsoleProgress", "false")
                    .config("spark.driver.memory", "2g")
                )
                for key, value in conf.items():
                    builder = builder.config(key, value)
                spark = builder.getOrCreate()
                # The standalone session reuses the driver JVM the local one started (a Py4J
                # gateway lives as long as the process): its time excludes the JVM's start.
                label = "local[*]" if master == "local" else "standalone"
                sessions[label] = round(time.perf_counter() - t0, 3)
                log.info("%s: session in %.1f s", label, sessions[label])
                try:
                    spark.sparkContext.setLogLevel("ERROR")
                    register(spark)
                    sources = {"zkkafka": zkkafka_df, "kafka": kafka_df}
                    if args.with_floor:
                        counts = {topic: args.records, warm: 10_000}
                        register_floor(spark, counts, args.partitions, args.value_bytes)
                        sources["python-floor"] = floor_df
                    for name, make in sources.items():
                        df = make(spark, cluster, warm, args.max_offsets_per_trigger)
                        run_query(spark, df, 10_000, name)
                    for _ in range(args.repeat):
                        for name, make in sources.items():
                            df = make(spark, cluster, topic, args.max_offsets_per_trigger)
                            run = run_query(spark, df, args.records, name)
                            run.master = label
                            log.info("%s", run)
                            runs.append(run)
                finally:
                    spark.stop()
    finally:
        arun(cluster.stop())

    labels = list(sessions)
    best = {
        (label, name): max(
            (r for r in runs if r.source == name and r.master == label),
            key=lambda r: r.steady_records_per_s,
        )
        for label in labels
        for name in sources
    }
    ratios = {
        label: {
            "steady_zkkafka_to_kafka": round(
                best[(label, "zkkafka")].steady_records_per_s
                / max(best[(label, "kafka")].steady_records_per_s, 1e-9),
                3,
            ),
            "end_to_end_zkkafka_to_kafka": round(
                best[(label, "zkkafka")].records_per_s
                / max(best[(label, "kafka")].records_per_s, 1e-9),
                3,
            ),
            "startup_zkkafka_minus_kafka_s": round(
                best[(label, "zkkafka")].startup_s - best[(label, "kafka")].startup_s, 3
            ),
        }
        for label in labels
    }
    result = {
        "pyspark": pyspark.__version__,
        "spark_sql_kafka": connector_version,
        "spark_token_provider_kafka": token_version,
        "kafka_broker": "3.9.1 (LocalCluster, 1 broker)",
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        ),
        "masters": labels,
        "session_start_s": sessions,
        "trigger": "availableNow",
        "records": args.records,
        "partitions": args.partitions,
        "value_bytes": args.value_bytes,
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "runs": [asdict(r) for r in runs],
        "ratios": ratios,
    }
    (out_dir / "spark_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    table = [
        "| master | source | records | batches | start-up s | steady records/s "
        "| end-to-end s | end-to-end records/s | mean batch ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {r.master} | {r.source} | {r.records} | {r.batches} | {r.startup_s:.2f} "
            f"| {r.steady_records_per_s:,.0f} | {r.seconds:.2f} | {r.records_per_s:,.0f} "
            f"| {r.mean_batch_ms} |"
            for r in runs
        ),
    ]
    header = (
        f"PySpark {pyspark.__version__}, spark-sql-kafka {connector_version}, availableNow, "
        f"maxOffsetsPerTrigger={args.max_offsets_per_trigger}, {args.partitions} partitions, "
        f"{args.value_bytes}-byte values; session start: "
        + ", ".join(f"{label} {t:.1f} s" for label, t in sessions.items())
        + "\n\n"
    )
    footer = "\n\n" + "\n".join(
        f"{label}: steady zkkafka/kafka = {r['steady_zkkafka_to_kafka']:.2f}, "
        f"end-to-end zkkafka/kafka = {r['end_to_end_zkkafka_to_kafka']:.2f}, "
        f"start-up zkkafka - kafka = {r['startup_zkkafka_minus_kafka_s']:+.2f} s"
        for label, r in ratios.items()
    )
    (out_dir / "spark_bench.md").write_text(header + "\n".join(table) + footer + "\n")
    print(header + "\n".join(table) + footer)
    print(f"wrote {out_dir / 'spark_bench.json'} and {out_dir / 'spark_bench.md'}")
    return 0


@contextlib.contextmanager
def _master_conf(master: str) -> Iterator[dict[str, str]]:
    """Spark settings for a master: ``local[*]``, or a standalone cluster started here."""
    if master == "local":
        yield {"spark.master": "local[*]"}
        return
    from aiozkconsumer.testing import SparkStandaloneCluster

    spark_cluster = SparkStandaloneCluster(workers=2, worker_cores=1, worker_memory="1g")
    arun(spark_cluster.start())
    try:
        log.info("standalone cluster up in %.1f s", spark_cluster.start_seconds or 0.0)
        yield spark_cluster.app_conf()
    finally:
        arun(spark_cluster.stop())


if __name__ == "__main__":
    sys.exit(main())
