"""Registering the ``zkkafka`` format: the data source Spark asks for readers, and the check
that Spark's Python workers can import it.

After :func:`register`, ``spark.readStream.format("zkkafka")`` and ``spark.read`` with that
format resolve to :class:`ZkKafkaDataSource`, which checks the options and the schema and
hands out a :class:`~aiozkconsumer.spark.stream_reader.ZkKafkaStreamReader` or a
:class:`~aiozkconsumer.spark.batch_reader.ZkKafkaBatchReader`.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from ..errors import InvalidConfigError
from .batch_reader import ZkKafkaBatchReader
from .planning import (
    SOURCE_NAME,
    SourceOptions,
    batch_read_options,
    check_stream_options,
    parse_source_options,
)
from .schema import kafka_schema
from .stream_reader import ZkKafkaStreamReader, one_line_errors

__all__ = ["ZkKafkaDataSource", "check_worker_python", "register"]

log = logging.getLogger(__name__)


class ZkKafkaDataSource(DataSource):
    """``spark.readStream.format("zkkafka")``: Kafka records of a consumer group.

    The group is ZooKeeper-coordinated (``zookeeper.connect``), or Kafka-coordinated with
    ``group.coordinator=kafka`` and ``bootstrap.servers``.

    Options: see :func:`~aiozkconsumer.spark.planning.parse_source_options`. The schema is
    the Kafka source's (:data:`~aiozkconsumer.spark.schema.KAFKA_SCHEMA`, plus ``headers``
    with ``includeHeaders``).
    """

    @classmethod
    def name(cls) -> str:
        """``"zkkafka"``."""
        return SOURCE_NAME

    def _options(self) -> SourceOptions:
        with one_line_errors():
            return parse_source_options(self.options)

    def schema(self) -> StructType:
        """The Kafka source's schema; checks the options (so ``load()`` reports bad ones).

        Returns:
            ``KAFKA_SCHEMA``, or ``KAFKA_SCHEMA_WITH_HEADERS`` with ``includeHeaders``.

        Raises:
            InvalidConfigError: an option is missing, unknown or invalid.
        """
        return kafka_schema(self._options().include_headers)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The stream reader.

        Args:
            schema: the schema Spark resolved; must be this source's.

        Returns:
            A :class:`ZkKafkaStreamReader`.

        Raises:
            InvalidConfigError: an option is invalid, or a user-given schema differs from
                the Kafka source's.
        """
        options = self._options()
        try:
            _check_schema(options, schema)
            check_stream_options(options)
        except InvalidConfigError as e:
            # Raised at the first planning call instead: PySpark's streaming source runner
            # masks an exception of streamReader() with its own UnboundLocalError (4.3).
            return ZkKafkaStreamReader(options, invalid=e)
        return ZkKafkaStreamReader(options)

    def reader(self, schema: StructType) -> DataSourceReader:
        """The batch reader of ``spark.read.format("zkkafka")``, for ``schema`` (which must be
        this source's): a :class:`ZkKafkaBatchReader`.

        Raises:
            InvalidConfigError: an option is invalid for a batch read (``latest`` as
                ``startingOffsets``, ``earliest`` as ``endingOffsets``), or a user-given
                schema differs from the Kafka source's.
        """
        options = self._options()
        with one_line_errors():
            _check_schema(options, schema)
            batch = batch_read_options(options)
        return ZkKafkaBatchReader(options, batch)


def _check_schema(options: SourceOptions, schema: StructType) -> None:
    expected = kafka_schema(options.include_headers)
    if schema != expected:
        raise InvalidConfigError(
            "schema",
            f"the zkkafka source has the Kafka source's fixed schema {expected.simpleString()}"
            f", got {schema.simpleString()}",
        )


def register(spark: SparkSession, *, check_python: bool = True) -> None:
    """Register the ``zkkafka`` format with a Spark session.

    Then ``spark.readStream.format("zkkafka").option(...).load()`` (or ``spark.read``). The
    package must be importable by the session's Python workers, which run the source's
    planning and ``read``: with ``check_python`` (and a classic session whose workers'
    Python exists on this host), that Python is asked once to import the source
    (:func:`check_worker_python`), so that a wrong ``PYSPARK_PYTHON`` is reported here in one
    line rather than as a worker's traceback at ``load()``.

    Args:
        spark: a classic (Py4J) or Spark Connect session.
        check_python: check the workers' Python (default true).

    Raises:
        InvalidConfigError: ``PYSPARK_PYTHON``: the workers' Python cannot import the
            package (the message names that Python and this one).
    """
    if check_python:
        context = getattr(spark, "_sc", None)
        python = getattr(context, "pythonExec", None)
        if isinstance(python, str):
            check_worker_python(python)
    spark.dataSource.register(ZkKafkaDataSource)


_WORKER_CHECK_TIMEOUT_S = 120.0
# (interpreter, PYTHONPATH) pairs that imported the source: each session of a process (a test
# suite, a service that restarts its queries) checks a Python once, not at every register().
_WORKERS_CHECKED: set[tuple[str, str]] = set()


def _worker_pythonpath() -> str:
    """``PYTHONPATH`` as Spark gives its Python workers: PySpark's zips, then ours."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    if not lib.is_dir() and os.environ.get("SPARK_HOME"):
        lib = Path(os.environ["SPARK_HOME"]) / "python" / "lib"
    zips = sorted(str(z) for z in lib.glob("*.zip")) if lib.is_dir() else []
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([*zips, *inherited])


def check_worker_python(python: str) -> None:
    """Check that Spark's Python workers (``python``) can import the ``zkkafka`` source.

    Runs ``python -c "import aiozkconsumer.spark.source"`` once per process (a success is
    remembered), with the ``PYTHONPATH`` Spark gives its workers (PySpark's own zips). A
    Python that does not exist on this host
    (e.g. the ``./environment/bin/python`` of a packed environment shipped with
    ``spark.archives``) is not checked.

    Args:
        python: the workers' Python (``spark.pyspark.python`` / ``PYSPARK_PYTHON``).

    Raises:
        InvalidConfigError: key ``PYSPARK_PYTHON``: the import failed; the message names the
            missing module, that Python and the one running now.
    """
    found = shutil.which(python)
    if found is None:
        log.debug("the workers' Python %s is not on this host: not checked", python)
        return
    pythonpath = _worker_pythonpath()
    if (found, pythonpath) in _WORKERS_CHECKED:
        return
    env = {**os.environ, "PYTHONPATH": pythonpath}
    try:
        done = subprocess.run(
            [found, "-c", "import aiozkconsumer.spark.source"],
            env=env,
            capture_output=True,
            text=True,
            timeout=_WORKER_CHECK_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("could not check the workers' Python %s: %s", python, e)
        return
    if done.returncode == 0:
        _WORKERS_CHECKED.add((found, pythonpath))
        return
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    reason = lines[-1] if lines else f"exit status {done.returncode}"
    raise InvalidConfigError(
        "PYSPARK_PYTHON",
        f"Spark's Python workers run {python}, which cannot import the zkkafka source "
        f"({reason}); install aiozkconsumer[spark] there, or point PYSPARK_PYTHON "
        f"(spark.pyspark.python) at {sys.executable}",
    )
