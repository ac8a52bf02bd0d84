"""Option errors of the ``zkkafka`` source read as one line naming the option and the fix.

The checks themselves are pure (``parse_source_options``, ``batch_read_options``); what the
user sees is Spark's ``AnalysisException`` (or ``StreamingQueryException``) around the
message of the exception raised in Spark's Python worker — tested here through a real local
SparkSession, without a cluster (every error comes before anything is contacted).
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from _spark_session import spark_session  # noqa: F401
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import SparkSession

from aiozkconsumer import InvalidConfigError
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.spark import parse_source_options, register
from aiozkconsumer.spark.planning import (
    EARLIEST,
    LATEST,
    batch_read_options,
    check_stream_options,
)
from aiozkconsumer.spark.source import check_worker_python

pytestmark = pytest.mark.spark

BASE = {"zookeeper.connect": "127.0.0.1:1", "group.id": "g", "subscribe": "t"}

# (options, the option the error names, text the one line must hold)
BAD_OPTIONS: list[tuple[dict[str, str], str, str]] = [
    ({"zookeeper.connect": "127.0.0.1:1", "subscribe": "t"}, "group.id", "missing"),
    ({**BASE, "zookeeper.conect": "h:1"}, "zookeeper.conect", "did you mean zookeeper.connect?"),
    ({**BASE, "subscibe": "t"}, "subscibe", "did you mean subscribe?"),
    ({**BASE, "assign": '{"t": [0]}'}, "assign", "use subscribe or subscribePattern"),
    ({**BASE, "kafka.group.id": "g"}, "kafka.group.id", "use group.id"),
    ({**BASE, "kafka.socket.timeout.ms": "5"}, "kafka.socket.timeout.ms", "set socket.timeout.ms"),
    ({**BASE, "startingTimestamp": "1"}, "startingtimestamp", "use startingOffsets"),
    ({**BASE, "auto.offset.reset": "earliest"}, "auto.offset.reset", "'smallest'"),
    ({**BASE, "auto.offset.reset": "latest"}, "auto.offset.reset", "'largest'"),
    ({**BASE, "subscribePattern": "t.*"}, "subscribe", "exactly one of"),
    ({**BASE, "startingOffsets": "{not json"}, "startingOffsets", "expected earliest, latest"),
]


def one_line(error: BaseException) -> str:
    """The line of a Spark error that holds our message (and the whole text is no traceback)."""
    text = str(error)
    assert "Traceback" not in text and 'File "' not in text, text
    (line,) = [x for x in text.splitlines() if "InvalidConfigError" in x]
    return line


# -- pure checks ----------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "key", "hint"), BAD_OPTIONS)
def test_bad_option_is_one_line_naming_the_option(
    options: dict[str, str], key: str, hint: str
) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        parse_source_options(options)
    assert caught.value.key == key
    assert str(caught.value).startswith(f"{key}: ") and hint in str(caught.value)
    assert "\n" not in str(caught.value)


def test_kafka_coordinated_groups_keep_the_new_consumer_names() -> None:
    opts = parse_source_options(
        {
            "group.coordinator": "kafka",
            "bootstrap.servers": "127.0.0.1:1",
            "group.id": "g",
            "subscribe": "t",
            "auto.offset.reset": "earliest",
        }
    )
    assert opts.config.auto_offset_reset == "smallest"


def test_batch_options_follow_the_kafka_source() -> None:
    def batch(**extra: str) -> Any:
        return batch_read_options(parse_source_options({**BASE, **extra}))

    default = batch()
    assert default.starting is None and default.missing == EARLIEST
    assert default.ending.default == LATEST and not default.ending.specific
    assert batch(**{"auto.offset.reset": "largest"}).missing == LATEST
    json_read = batch(startingOffsets='{"t": {"0": 5}}', endingOffsets='{"t": {"1": 7}}')
    assert json_read.starting is not None
    assert json_read.starting.for_partition(TopicPartition("t", 0)) == 5
    assert json_read.starting.for_partition(TopicPartition("t", 1)) == EARLIEST
    assert json_read.ending.for_partition(TopicPartition("t", 0)) == LATEST
    assert json_read.ending.for_partition(TopicPartition("t", 1)) == 7
    for extra, key in (
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"startingOffsets": '{"t": {"0": -1}}'}, "startingOffsets"),
        ({"endingOffsets": "earliest"}, "endingOffsets"),
        ({"endingOffsets": '{"t": {"0": -2}}'}, "endingOffsets"),
    ):
        with pytest.raises(InvalidConfigError) as caught:
            batch(**extra)
        assert caught.value.key == key and "not allowed in a batch read" in str(caught.value)
    for extra, key in (
        ({"endingOffsets": "latest"}, "endingOffsets"),
        ({"commitOnSuccess": "true"}, "commitOnSuccess"),
    ):
        with pytest.raises(InvalidConfigError, match="only for batch reads") as caught:
            check_stream_options(parse_source_options({**BASE, **extra}))
        assert caught.value.key == key


# -- what the user sees through Spark -------------------------------------------------------


# Every bad option through spark.read; a few through spark.readStream too (the same check
# runs in schema() for both: each case costs Spark a fresh Python worker).
SPARK_CASES = [("read", *case) for case in BAD_OPTIONS] + [
    ("readStream", *BAD_OPTIONS[i]) for i in (0, 1, 3, 7)
]


@pytest.mark.parametrize(("mode", "options", "key", "hint"), SPARK_CASES)
def test_spark_shows_the_one_line(
    spark: SparkSession, mode: str, options: dict[str, str], key: str, hint: str
) -> None:
    reader = spark.read if mode == "read" else spark.readStream
    with pytest.raises(AnalysisException) as caught:
        reader.format("zkkafka").options(**options).load()
    line = one_line(caught.value)
    assert f"InvalidConfigError: {key}: " in line and hint in line


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"endingOffsets": "earliest"}, "endingOffsets"),
    ],
)
def test_batch_only_checks_show_one_line_at_the_first_action(
    spark: SparkSession, extra: dict[str, str], key: str
) -> None:
    df = spark.read.format("zkkafka").options(**BASE, **extra).load()  # mode unknown yet
    with pytest.raises(AnalysisException) as caught:
        df.collect()
    line = one_line(caught.value)
    assert f"InvalidConfigError: {key}: " in line and "not allowed in a batch read" in line


def test_streaming_query_with_ending_offsets_fails_with_one_line(
    spark: SparkSession, tmp_path: Path
) -> None:
    df = spark.readStream.format("zkkafka").options(**BASE, endingOffsets="latest").load()
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c")).start()
    try:
        with pytest.raises(StreamingQueryException) as caught:
            query.awaitTermination(120)
    finally:
        query.stop()
    line = one_line(caught.value)
    assert "InvalidConfigError: endingOffsets: only for batch reads" in line


def python_without_the_package(tmp_path: Path) -> Path:
    """An interpreter that sees only the standard library (isolated, no site-packages)."""
    wrapper = tmp_path / "bare-python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper


def test_register_names_a_workers_python_without_the_package(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bare = python_without_the_package(tmp_path)
    monkeypatch.setattr(spark.sparkContext, "pythonExec", str(bare))
    with pytest.raises(InvalidConfigError) as caught:
        register(spark)
    message = str(caught.value)
    assert caught.value.key == "PYSPARK_PYTHON" and "\n" not in message
    assert str(bare) in message and sys.executable in message
    assert "No module named 'aiozkconsumer'" in message
    check_worker_python(sys.executable)  # the test's own Python has it: no error
    check_worker_python(str(tmp_path / "not-on-this-host" / "python"))  # not checked
