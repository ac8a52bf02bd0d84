"""A Spark driver in a process of its own, for tests that kill it or need a ``spark://`` master.

Usage: python _spark_driver.py CONF_JSON

CONF_JSON is ``{"conf": {<Spark settings, spark.master included>}, "source": {<zkkafka
options>}}``. The driver builds its SparkSession, registers the ``zkkafka`` source, prints
``@@ {"ready": true}`` and then reads one JSON command per line on stdin, answering each with
one ``@@ <json>`` line on stdout (Spark logs go to stderr):

- ``{"cmd": "start", "name": N, "checkpoint": DIR, "output": DIR, "wait": bool,
  "source": {<more options>}}``: start a query ``zkkafka`` -> Parquet at ``output`` with
  ``trigger(availableNow=True)`` (``"wait": true``: until it ends, answering its batch count)
  or the default trigger (``"wait": false``: answers at once).
- ``{"cmd": "drain", "name": N}``: ``processAllAvailable()``.
- ``{"cmd": "stop", "name": N}``: ``stop()``.
- ``{"cmd": "count", "output": DIR}``: read the Parquet table back (Spark honours the file
  sink's ``_spark_metadata`` log, so only committed files count) and answer, per partition,
  ``[rows, distinct offsets, min offset, max offset]``.
- ``{"cmd": "exit"}``.

Any error answers ``{"error": "..."}`` and the driver goes on reading commands. Besides the
answers, every finished micro-batch prints ``@@ {"progress": N, "batch": id, "rows": n}``
(from a ``StreamingQueryListener``), so a test can act on a batch boundary.
"""

from __future__ import annotations

import json
import sys
import threading
import traceback
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

from aiozkconsumer.spark import register

_out = threading.Lock()


def answer(payload: dict[str, Any]) -> None:
    with _out:
        sys.stdout.write("@@ " + json.dumps(payload) + "\n")
        sys.stdout.flush()


class Progress(StreamingQueryListener):  # type: ignore[misc]
    """Prints every finished micro-batch (Spark's listener bus thread)."""

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        answer({"progress": p.name, "batch": p.batchId, "rows": p.numInputRows})

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def main(raw: str) -> None:
    setup = json.loads(raw)
    builder = SparkSession.builder.appName("aiozkconsumer-standalone-test")
    for key, value in setup["conf"].items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.streams.addListener(Progress())
    queries: dict[str, Any] = {}
    context = spark.sparkContext
    answer({"ready": True, "master": context.master, "app_id": context.applicationId})
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        try:
            cmd = command["cmd"]
            if cmd == "exit":
                break
            if cmd == "start":
                reader = spark.readStream.format("zkkafka")
                for key, value in {**setup["source"], **command.get("source", {})}.items():
                    reader = reader.option(key, str(value))
                writer = (
                    reader.load()
                    .writeStream.format("parquet")
                    .option("path", command["output"])
                    .option("checkpointLocation", command["checkpoint"])
                    .queryName(command["name"])
                )
                if command.get("wait", True):
                    query = writer.trigger(availableNow=True).start()
                    query.awaitTermination()
                    batches = [p["batchId"] for p in query.recentProgress]
                    answer({"done": command["name"], "batches": batches})
                else:
                    queries[command["name"]] = writer.start()
                    answer({"started": command["name"]})
            elif cmd == "drain":
                queries[command["name"]].processAllAvailable()
                answer({"drained": command["name"]})
            elif cmd == "stop":
                queries.pop(command["name"]).stop()
                answer({"stopped": command["name"]})
            elif cmd == "count":
                rows = (
                    spark.read.parquet(command["output"])
                    .groupBy("partition")
                    .agg(
                        F.count("*").alias("n"),
                        F.countDistinct("offset").alias("distinct"),
                        F.min("offset").alias("lo"),
                        F.max("offset").alias("hi"),
                    )
                    .collect()
                )
                answer(
                    {
                        "partitions": {
                            str(r.partition): [r.n, r["distinct"], r.lo, r.hi] for r in rows
                        }
                    }
                )
            else:
                answer({"error": f"unknown command {cmd!r}"})
        except Exception as exc:  # report it and go on: the test decides
            traceback.print_exc()
            answer({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0:3]}"})
    for query in queries.values():
        query.stop()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
