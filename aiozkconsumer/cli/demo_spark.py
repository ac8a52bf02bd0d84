"""The demo's Spark section: the demo's topic through the ``zkkafka`` source into Parquet.

A Structured Streaming query on ``local[*]`` reads the topic as a member of a group of its
own (``<demo group>-spark``) and writes a Parquet table; it is stopped after two batches and
started again from its checkpoint, runs to the end (``availableNow``), and the table is read
back: every record of the topic exactly once (Spark's file sink is exactly-once through its
``_spark_metadata`` log), and the group's committed offsets at the log end.

Needs PySpark (the ``spark`` extra) and Java 17; without PySpark the section is skipped with
a message naming the extra.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

__all__ = [
    "SPARK_MISSING",
    "SparkDemoResult",
    "print_spark_summary",
    "pyspark_installed",
    "run_spark_section",
]

SPARK_MISSING = (
    "Spark section skipped: PySpark is not installed "
    "(pip install 'aiozkconsumer[spark]'; --no-spark skips it silently)"
)
_STOP_AFTER_BATCHES = 2
_BATCHES = 5
"""The run is cut into about this many micro-batches (``maxOffsetsPerTrigger``)."""


@dataclass
class SparkDemoResult:
    """What the Spark section measured.

    Attributes:
        rows: rows in the Parquet table.
        distinct: distinct ``(partition, offset)`` pairs in it.
        lost: records of the topic (below the log end) not in the table.
        duplicated: rows beyond the first of their ``(partition, offset)``.
        batches: micro-batches that read records, over both runs of the query.
        stopped_after: the batches committed when the first run was stopped.
        seconds: time of both runs, from the first query's start to the second's end.
        session_seconds: time to create the SparkSession (the JVM's start).
        offsets: per partition ``(committed offset or -1, log end offset)``.
        offsets_source: ``"ZooKeeper"`` or ``"Kafka"``.
        error: the first lines of the error that stopped the section, if one did.
    """

    rows: int = 0
    distinct: int = 0
    lost: int = 0
    duplicated: int = 0
    batches: int = 0
    stopped_after: int = 0
    seconds: float = 0.0
    session_seconds: float = 0.0
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    offsets_source: str = "ZooKeeper"
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Every record once, and the group's offsets at the log end."""
        return (
            self.error is None
            and self.rows > 0
            and self.lost == 0
            and self.duplicated == 0
            and all(c == e for c, e in self.offsets.values())
        )


def pyspark_installed() -> bool:
    """Whether PySpark can be imported (without importing it)."""
    return importlib.util.find_spec("pyspark") is not None


class _Progress:
    """A ``StreamingQueryListener``'s view: rows per finished micro-batch, and an event."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.batches: list[int] = []
        self.changed = threading.Condition()

    def finished(self, batch_id: int, rows: int) -> None:
        if rows <= 0:
            return
        with self.changed:
            self.batches.append(rows)
            self.changed.notify_all()
        self.say(f"spark batch {batch_id}: {rows:,} rows")

    def wait_batches(self, count: int, query: Any) -> None:
        """Block until ``count`` batches with rows finished, or the query ended."""
        with self.changed:
            while len(self.batches) < count and query.isActive:
                self.changed.wait(timeout=1.0)  # wakes to notice a query that ended


def _listener(progress: _Progress) -> Any:
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            progress.finished(event.progress.batchId, event.progress.numInputRows)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return Listener()


@contextlib.contextmanager
def _session(master: str) -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from ..spark import register

    spark = (
        SparkSession.builder.master(master)
        .appName("aiozkconsumer-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        yield spark
    finally:
        spark.stop()


def _rows_per_batch(query: Any) -> list[int]:
    """Rows of each batch that read any, from the query's progress (complete once it ended)."""
    return [int(p["numInputRows"]) for p in query.recentProgress if p["numInputRows"] > 0]


def _run_query(
    options: Mapping[str, str],
    work: Path,
    total: int,
    ends: Mapping[int, int],
    say: Callable[[str], None],
    master: str,
) -> SparkDemoResult:
    """The blocking part (Spark calls), run in a worker thread."""
    from pyspark.sql import functions as F

    result = SparkDemoResult()
    table, checkpoint = work / "table", work / "checkpoint"
    per_batch = max(1, -(-total // _BATCHES))
    say(f"starting Spark ({master}) ...")
    began = time.monotonic()
    with _session(master) as spark:
        progress = _Progress(say)
        spark.streams.addListener(_listener(progress))

        def start(available_now: bool) -> Any:
            reader = spark.readStream.format("zkkafka").options(**options)
            writer = (
                reader.option("maxOffsetsPerTrigger", str(per_batch))
                .load()
                .writeStream.format("parquet")
                .option("path", str(table))
                .option("checkpointLocation", str(checkpoint))
            )
            if available_now:
                writer = writer.trigger(availableNow=True)
            return writer.start()

        result.session_seconds = time.monotonic() - began
        began = time.monotonic()
        query = start(available_now=False)
        progress.wait_batches(_STOP_AFTER_BATCHES, query)
        # Stopping interrupts the batch in flight (replayed after the restart); Spark logs the
        # interruption as errors, which are none.
        spark.sparkContext.setLogLevel("OFF")
        query.stop()
        spark.sparkContext.setLogLevel("ERROR")
        first = _rows_per_batch(query)
        result.stopped_after = len(first)
        say(
            f"stopped the query after {len(first)} batches ({sum(first):,} rows); "
            "restarting it from its checkpoint"
        )
        query = start(available_now=True)
        query.awaitTermination()
        result.seconds = time.monotonic() - began
        result.batches = len(first) + len(_rows_per_batch(query))
        rows = (
            spark.read.parquet(str(table))
            .groupBy("partition")
            .agg(F.count("*").alias("n"), F.countDistinct("offset").alias("distinct"))
            .collect()
        )
    result.rows = sum(int(r.n) for r in rows)
    result.distinct = sum(int(r["distinct"]) for r in rows)
    result.duplicated = result.rows - result.distinct
    # Offsets in the table beyond the log end cannot exist, so distinct < total means lost.
    result.lost = sum(ends.values()) - result.distinct
    return result


async def run_spark_section(
    *,
    options: Mapping[str, str],
    ends: Mapping[int, int],
    read_committed: Callable[[], Awaitable[dict[int, int]]],
    offsets_source: str,
    say: Callable[[str], None],
    master: str = "local[*]",
) -> SparkDemoResult | None:
    """Run the topic through ``zkkafka`` into Parquet, stop, restart, and check the table.

    Args:
        options: the ``zkkafka`` source options (connection, ``group.id``, ``subscribe``).
        ends: the topic's log end offsets, per partition.
        read_committed: reads the group's committed offsets (``-1`` where none).
        offsets_source: where ``read_committed`` reads (for the summary).
        say: prints a progress line.
        master: the Spark master.

    Returns:
        The result, or None if PySpark is not installed (the section was skipped; ``say``
        told why).
    """
    if not pyspark_installed():
        say(SPARK_MISSING)
        return None
    work = Path(tempfile.mkdtemp(prefix="aiozkconsumer-demo-spark-"))
    total = sum(ends.values())
    try:
        result = await anyio.to_thread.run_sync(
            lambda: _run_query(options, work, total, ends, say, master)
        )
    except Exception as exc:  # Spark's errors (Py4J, AnalysisException, ...) end the section
        first = "\n".join(str(exc).splitlines()[:3])
        say(f"the Spark section failed: {type(exc).__name__}: {first}")
        return SparkDemoResult(error=f"{type(exc).__name__}: {first}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.offsets_source = offsets_source
    # The source commits the last batch in its commit(), before the query ends; a store that
    # is read back a moment later may still lag, so give it a bounded while.
    with anyio.move_on_after(15):
        while True:
            committed = await read_committed()
            if all(committed.get(p, -1) >= e for p, e in ends.items()):
                break
            await anyio.sleep(0.2)
    result.offsets = {p: (committed.get(p, -1), e) for p, e in sorted(ends.items())}
    return result


def print_spark_summary(result: SparkDemoResult, master: str = "local[*]") -> None:
    """Print the Spark section's summary to stdout, ending in its ``RESULT:`` line."""
    rate = result.distinct / result.seconds if result.seconds else 0.0
    print(f"== Spark: zkkafka source -> Parquet ({master}) ==")
    if result.error is not None:
        print(f"error: {result.error}")
    print(f"rows in the table         {result.rows:>12,}")
    print(f"distinct records          {result.distinct:>12,}")
    print(f"lost                      {result.lost:>12,}")
    print(f"duplicated                {result.duplicated:>12,}")
    print(
        f"Spark batches             {result.batches:>12,}  "
        f"(stopped after {result.stopped_after}, restarted from the checkpoint)"
    )
    print(f"records/s                 {rate:>12,.0f}  ({result.seconds:.1f} s for both runs)")
    print(f"Spark session started in  {result.session_seconds:>10.1f} s")
    print(f"partition  {f'committed({result.offsets_source})':>20}  log-end-offset  equal")
    for p, (committed, end) in sorted(result.offsets.items()):
        print(f"{p:>9}  {committed:>20,}  {end:>14,}  {'yes' if committed == end else 'NO'}")
    print("RESULT:", "OK" if result.ok else "FAILED")
