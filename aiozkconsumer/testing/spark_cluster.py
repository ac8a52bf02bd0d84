"""A real Spark standalone cluster for tests: one master and N workers, as separate JVMs.

Spark's ``local[*]`` mode runs the executors inside the driver's JVM; a standalone cluster
runs them in other processes, started by a worker on the master's orders — as on a real
cluster, only on loopback. :class:`SparkStandaloneCluster` starts
``org.apache.spark.deploy.master.Master`` and ``org.apache.spark.deploy.worker.Worker``
through ``bin/spark-class`` of the installed PySpark (the pip package ships the scripts and
the jars; no separate Spark download), on free loopback ports, with small heaps, and waits
until the master's JSON status (``http://127.0.0.1:<webui>/json/``) lists every worker
``ALIVE``. Its processes get the same no-process-left-behind guarantee as
:class:`~aiozkconsumer.testing.LocalCluster`'s (``PR_SET_PDEATHSIG`` and an ``atexit`` hook,
see :mod:`aiozkconsumer.testing._processes`); the executors die with their worker.

Applications connect with :attr:`SparkStandaloneCluster.master_url`; :meth:`app_conf` gives
the settings that fit the cluster's small workers, among them ``spark.pyspark.python``: the
executors run this Python (the test virtualenv, where the package is installed). On a real
cluster the package has to reach the executors some other way (``docs/spark.md``,
"Deploying to a cluster").
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from aiozkconsumer._resource import AsyncService
from aiozkconsumer.testing._errors import ClusterStartError, LocalClusterError
from aiozkconsumer.testing._processes import HOST, Server, free_ports, tail, terminate

__all__ = ["SparkStandaloneCluster", "pyspark_home"]

log = logging.getLogger(__name__)

_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_POLL_S = 0.2
_DAEMON_MEMORY = "256m"
"""Heap of the master and worker daemons themselves (executors get ``worker_memory``)."""


def pyspark_home() -> Path:
    """The installed PySpark package's directory: a ``SPARK_HOME`` (``bin/``, ``jars/``).

    Raises:
        LocalClusterError: if PySpark is not installed (``pip install 'aiozkconsumer[spark]'``).
    """
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise LocalClusterError(
            "PySpark is not installed: pip install 'aiozkconsumer[spark]' (a Spark standalone "
            "cluster runs from the pyspark package's bin/ and jars/)"
        )
    home = Path(spec.origin).parent
    if not (home / "bin" / "spark-class").exists():
        raise LocalClusterError(f"{home} has no bin/spark-class: not a full PySpark install")
    return home


class SparkStandaloneCluster(AsyncService):
    """A Spark standalone master and ``workers`` workers on loopback, each a ``java`` process.

    Use as an async context manager (or :meth:`start` / :meth:`stop`)::

        async with SparkStandaloneCluster(workers=2) as spark_cluster:
            spark = (SparkSession.builder.master(spark_cluster.master_url)
                     .config(map=spark_cluster.app_conf()).getOrCreate())

    Args:
        workers: number of workers (each a JVM of its own).
        worker_cores: cores each worker offers to executors.
        worker_memory: memory each worker offers to executors (Spark size, e.g. ``"512m"``);
            :meth:`app_conf` asks for executors of exactly that size, one per worker.
        python: the Python the executors run (``spark.pyspark.python``); default: this
            interpreter, so the executors import the same installed packages.
        spark_home: a Spark distribution; default: the installed PySpark (:func:`pyspark_home`),
            whose version then matches the driver's.
        work_dir: where logs and the workers' directories go; default: a new temporary
            directory, removed by :meth:`stop` unless a start failed or ``keep_work_dir``.
        startup_timeout_s: how long the master and the workers may take to be ready.
        keep_work_dir: keep the work directory after :meth:`stop`.
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        worker_cores: int = 1,
        worker_memory: str = "512m",
        python: str | None = None,
        spark_home: Path | None = None,
        work_dir: Path | None = None,
        startup_timeout_s: float = 120.0,
        keep_work_dir: bool = False,
    ) -> None:
        if workers < 1 or worker_cores < 1:
            raise ValueError("workers and worker_cores must be positive")
        self.workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.python = python or sys.executable
        self._spark_home = spark_home
        self._given_work_dir = work_dir is not None
        self._work_dir = work_dir
        self._startup_timeout_s = startup_timeout_s
        self._keep_work_dir = keep_work_dir
        self._master: Server | None = None
        self._workers: list[Server] = []
        self._webui_port = 0
        self._failed = False
        self._running = False
        self._start_seconds: float | None = None

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        url = self.master_url if self._master is not None else "-"
        return f"<SparkStandaloneCluster [{state}, {url}, workers={self.workers}]>"

    # ---- what applications and tests need ----------------------------------------------

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``, for ``SparkSession.builder.master(...)``.

        Raises:
            LocalClusterError: if the cluster was never started.
        """
        return f"spark://{self._require_master().address}"

    @property
    def webui_url(self) -> str:
        """The master's web UI; ``<webui_url>/json/`` is its status as JSON."""
        self._require_master()
        return f"http://{HOST}:{self._webui_port}"

    @property
    def work_dir(self) -> Path:
        """The directory holding the logs and the workers' (executors') directories."""
        if self._work_dir is None:
            raise LocalClusterError("the Spark cluster has not been started")
        return self._work_dir

    @property
    def start_seconds(self) -> float | None:
        """How long :meth:`start` took (None before it finished)."""
        return self._start_seconds

    @property
    def pids(self) -> dict[str, int]:
        """``{"master": pid, "worker-0": pid, ...}`` of the running daemons."""
        return {s.name: s.proc.pid for s in self._servers() if s.proc is not None and s.alive()}

    def app_conf(self) -> dict[str, str]:
        """Settings for an application (``SparkSession.builder.config(map=...)``).

        One executor per worker, of the worker's cores and memory; executors run
        :attr:`python`; the UI and console progress bar off; loopback addresses.

        A driver started as a plain ``python`` program must also have ``PYSPARK_PYTHON``
        set to :attr:`python` in its environment before the session starts: PySpark takes the
        interpreter of Python data sources (their planning process and ``read()``) from that
        variable, not from ``spark.pyspark.python`` (which ``spark-submit`` exports to it).
        """
        total_cores = self.workers * self.worker_cores
        return {
            "spark.master": self.master_url,
            "spark.pyspark.python": self.python,
            "spark.pyspark.driver.python": self.python,
            "spark.executor.memory": self.worker_memory,
            "spark.executor.cores": str(self.worker_cores),
            "spark.cores.max": str(total_cores),
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.executorEnv.SPARK_LOCAL_IP": HOST,
            "spark.default.parallelism": str(total_cores),
            "spark.sql.shuffle.partitions": str(total_cores),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
        }

    def status(self) -> dict[str, Any]:
        """The master's JSON status (``/json/``): workers, their state, applications.

        Raises:
            LocalClusterError: if the master does not answer.
        """
        status = self._fetch_status()
        if status is None:
            raise LocalClusterError(f"the Spark master at {self.webui_url} does not answer")
        return status

    def log_tail(self, lines: int = 60) -> str:
        """The last ``lines`` of every daemon's log, and of every executor's stderr."""
        parts = [
            f"--- {s.name} ({s.status()}) ---\n{tail(s.log_file, lines)}" for s in self._servers()
        ]
        if self._work_dir is not None:
            for stderr in sorted(self._work_dir.glob("worker-*/app-*/*/stderr")):
                rel = stderr.relative_to(self._work_dir)
                parts.append(f"--- executor {rel} ---\n{tail(stderr, lines)}")
        return "\n".join(parts)

    # ---- lifecycle ------------------------------------------------------------------------

    def _block_failed(self, exc: BaseException) -> None:
        if isinstance(exc, Exception):
            self._failed = True

    async def aclose(self) -> None:
        """Leaving ``async with``: :meth:`stop`."""
        await self.stop()

    async def start(self) -> None:
        """Start the master, wait until it is ``ALIVE``, start the workers, wait for them.

        Ready means the master's JSON status lists ``workers`` workers in state ``ALIVE``
        (each registered with its cores and memory). The workers start only once the master
        listens: a worker that finds no master retries only after 5 to 15 s. On failure or
        cancellation everything started is killed and the work directory kept.

        Raises:
            LocalClusterError: if PySpark (or ``java``) is missing, or already started.
            ClusterStartError: if a daemon exits or is not ready within
                ``startup_timeout_s``; the message ends with the tail of its log.
        """
        if self._master is not None:
            raise LocalClusterError("the Spark cluster was already started")
        home = self._spark_home or pyspark_home()
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise LocalClusterError("java not found: install Java 17 (Spark 4 needs it)")
        if self._work_dir is None:
            self._work_dir = Path(tempfile.mkdtemp(prefix="aiozkconsumer-spark-"))
        began = time.monotonic()
        try:
            self._configure(home)
            master = self._require_master()
            master.spawn()
            await self._wait_ready(0, [master])
            for worker in self._workers:
                worker.spawn()
            await self._wait_ready(self.workers, [master, *self._workers])
        except BaseException:
            self._failed = True
            self._kill_all()
            raise
        self._running = True
        self._start_seconds = time.monotonic() - began
        log.info("%r started in %.1f s", self, self._start_seconds)

    async def stop(self) -> None:
        """SIGTERM the workers (they kill their executors), then the master; SIGKILL after 15 s.

        Idempotent; removes the work directory unless it is to be kept.
        """
        try:
            await terminate(self._workers)
            if self._master is not None:
                await terminate([self._master])
        finally:
            self._kill_all()
            self._running = False
            work = self._work_dir
            if work is not None and not (
                self._keep_work_dir or self._failed or self._given_work_dir
            ):
                shutil.rmtree(work, ignore_errors=True)

    def mark_failed(self) -> None:
        """Keep the work directory (logs) when the cluster is stopped: a test failed."""
        self._failed = True

    # ---- internals --------------------------------------------------------------------

    def _servers(self) -> list[Server]:
        return [s for s in (self._master, *self._workers) if s is not None]

    def _require_master(self) -> Server:
        if self._master is None:
            raise LocalClusterError("the Spark cluster has not been started")
        return self._master

    def _kill_all(self) -> None:
        for server in self._servers():
            server.kill_now()

    def _configure(self, home: Path) -> None:
        work = self.work_dir
        master_port, self._webui_port, *ports = free_ports(2 + 2 * self.workers)
        properties = work / "spark-daemon.properties"
        # No REST submission server (it would take port 6066, shared by every cluster).
        properties.write_text("spark.master.rest.enabled false\nspark.ui.killEnabled false\n")
        env = [
            "env",
            f"SPARK_HOME={home}",
            f"SPARK_LOCAL_IP={HOST}",
            f"SPARK_DAEMON_MEMORY={_DAEMON_MEMORY}",
            f"SPARK_LOG_DIR={work}",
            f"PYSPARK_PYTHON={self.python}",
            # spark-class would otherwise read a conf/spark-env.sh of the user's SPARK_HOME.
            f"SPARK_CONF_DIR={work}",
        ]
        spark_class = str(home / "bin" / "spark-class")
        self._master = Server(
            "spark-master",
            master_port,
            [
                *env,
                spark_class,
                _MASTER_CLASS,
                "--host",
                HOST,
                "--port",
                str(master_port),
                "--webui-port",
                str(self._webui_port),
                "--properties-file",
                str(properties),
            ],
            work / "spark-master.log",
        )
        url = f"spark://{HOST}:{master_port}"
        self._workers = []
        for i in range(self.workers):
            port, webui = ports[2 * i], ports[2 * i + 1]
            worker_dir = work / f"worker-{i}"
            worker_dir.mkdir(parents=True, exist_ok=True)
            self._workers.append(
                Server(
                    f"spark-worker-{i}",
                    port,
                    [
                        *env,
                        spark_class,
                        _WORKER_CLASS,
                        "--host",
                        HOST,
                        "--port",
                        str(port),
                        "--webui-port",
                        str(webui),
                        "--cores",
                        str(self.worker_cores),
                        "--memory",
                        self.worker_memory,
                        "--work-dir",
                        str(worker_dir),
                        "--properties-file",
                        str(properties),
                        url,
                    ],
                    work / f"spark-worker-{i}.log",
                )
            )

    def _fetch_status(self) -> dict[str, Any] | None:
        """The master's ``/json/`` status, or None if it does not answer (yet)."""
        url = f"http://{HOST}:{self._webui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=2.0) as response:
                data: dict[str, Any] = json.loads(response.read())
                return data
        except (OSError, urllib.error.URLError, ValueError):
            return None

    async def _wait_ready(self, alive_workers: int, servers: list[Server]) -> None:
        """Poll the master's status until it is ALIVE with ``alive_workers`` ALIVE workers."""
        deadline = time.monotonic() + self._startup_timeout_s
        while True:
            for server in servers:
                code = server.proc.poll() if server.proc is not None else None
                if code is not None:
                    raise self._start_error(server, f"the java process exited with code {code}")
            status = await asyncio.to_thread(self._fetch_status)
            if status is not None and status.get("status") == "ALIVE":
                alive = [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]
                if len(alive) >= alive_workers:
                    return
            if time.monotonic() > deadline:
                laggard = servers[-1] if alive_workers else servers[0]
                raise self._start_error(
                    laggard,
                    f"the master did not list {alive_workers} ALIVE workers within "
                    f"{self._startup_timeout_s:.0f} s",
                )
            await asyncio.sleep(_POLL_S)

    def _start_error(self, server: Server, reason: str) -> ClusterStartError:
        self._failed = True
        return ClusterStartError(server.name, reason, tail(server.log_file, 60), self._work_dir)
