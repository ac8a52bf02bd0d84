"""A module-scoped local SparkSession for the Spark test modules that share one (2 cores)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from pyspark import SparkContext
from pyspark.sql import SparkSession

from aiozkconsumer.spark import register


@pytest.fixture(scope="module", name="spark")
def spark_session() -> Iterator[SparkSession]:
    """The running local SparkSession (another module's), or a new one stopped afterwards."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    owned = SparkContext._active_spark_context is None
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
    if owned:
        session.stop()
