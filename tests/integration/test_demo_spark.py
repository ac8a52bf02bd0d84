"""The demo's Spark section: the demo's topic through the ``zkkafka`` source into Parquet.

The end-to-end run starts ``aiozkconsumer demo`` as a process of its own (its Spark section
creates and stops a ``local[*]`` SparkSession, which must not meet the test session's own),
against the session cluster, and reads its summary: every record once in the table, the query
stopped after two batches and restarted, the Spark group's offsets at the log end.
"""

from __future__ import annotations

import asyncio
import re
import sys

import anyio
import pytest
from click.testing import CliRunner

from aiozkconsumer.cli import cli, demo_spark
from aiozkconsumer.cli.demo_spark import SparkDemoResult, print_spark_summary
from aiozkconsumer.testing import LocalCluster

RECORDS = 20_000
PARTITIONS = 4


@pytest.mark.integration
@pytest.mark.spark
async def test_demo_ends_with_a_spark_section_that_checks_exactly_once(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    pytest.importorskip("pyspark")
    args = [
        "demo",
        "--zookeeper",
        zk_kafka_cluster.zookeeper_connect,
        "--bootstrap-server",
        zk_kafka_cluster.bootstrap_servers,
        "--records",
        str(RECORDS),
        "--partitions",
        str(PARTITIONS),
        "--consumers",
        "2",
        "--streams",
        "1",
        "--topic",
        unique_topic,
        "--group",
        unique_group_id,
        "--no-progress",
    ]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiozkconsumer",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    with anyio.fail_after(240):
        out, err = await proc.communicate()
    stdout, stderr = out.decode(), err.decode()
    assert proc.returncode == 0, stdout + stderr[-3000:]
    lines = stdout.splitlines()
    spark = lines.index("== Spark: zkkafka source -> Parquet (local[*]) ==")
    assert lines[spark - 1] == "RESULT: OK"  # the consumer group's part
    section = lines[spark:]
    assert f"rows in the table         {RECORDS:>12,}" in section
    assert f"distinct records          {RECORDS:>12,}" in section
    assert f"lost                      {0:>12,}" in section
    assert f"duplicated                {0:>12,}" in section
    [batches] = [line for line in section if line.startswith("Spark batches")]
    match = re.fullmatch(
        r"Spark batches +(\d+)  \(stopped after (\d+), restarted from the checkpoint\)", batches
    )
    assert match is not None, batches
    assert int(match[1]) > int(match[2]) >= 2  # the restart had batches left to run
    header = section.index("partition  committed(ZooKeeper)  log-end-offset  equal")
    rows = [line.split() for line in section[header + 1 : -1]]
    per_partition = f"{RECORDS // PARTITIONS:,}"
    assert rows == [[str(p), per_partition, per_partition, "yes"] for p in range(PARTITIONS)]
    assert section[-1] == "RESULT: OK"
    assert f"group {unique_group_id}-spark" in stderr
    assert "restarting it from its checkpoint" in stderr


def test_spark_summary_fails_on_a_duplicate_or_a_short_offset(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ok = SparkDemoResult(rows=8, distinct=8, batches=2, stopped_after=1, offsets={0: (8, 8)})
    assert ok.ok
    for bad in (
        SparkDemoResult(rows=9, distinct=8, duplicated=1, offsets={0: (8, 8)}),
        SparkDemoResult(rows=7, distinct=7, lost=1, offsets={0: (8, 8)}),
        SparkDemoResult(rows=8, distinct=8, offsets={0: (7, 8)}),
        SparkDemoResult(error="Py4JError: boom"),
    ):
        print_spark_summary(bad)
        lines = capsys.readouterr().out.splitlines()
        assert lines[-1] == "RESULT: FAILED", bad


async def test_without_pyspark_the_section_is_skipped_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(demo_spark, "pyspark_installed", lambda: False)
    said: list[str] = []

    async def never() -> dict[int, int]:
        raise AssertionError("no offsets to read without Spark")

    result = await demo_spark.run_spark_section(
        options={}, ends={0: 1}, read_committed=never, offsets_source="ZooKeeper", say=said.append
    )
    assert result is None
    assert said == [demo_spark.SPARK_MISSING]
    assert "pip install 'aiozkconsumer[spark]'" in said[0]


def test_no_spark_is_an_option_of_the_demo() -> None:
    usage = CliRunner().invoke(cli, ["demo", "--help"])
    assert usage.exit_code == 0
    assert "--no-spark" in usage.stdout
