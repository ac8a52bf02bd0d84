"""The ``zkkafka`` source on a real Spark standalone cluster: a master, two workers, executors
in JVMs of their own (``spark_standalone_cluster``), and a ZooKeeper + Kafka 3.9 cluster.

The Spark driver runs in a process of its own (``_spark_driver.py``, the venv's Python):
the test process may hold a ``local[2]`` session already
(``tests/integration/test_spark.py``), and one test SIGKILLs the driver. The Parquet file
sink with its ``_spark_metadata`` log is exactly-once, so the table read back must hold every
record of the topic exactly once; the group's offsets (ZooKeeper) must reach the log end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("pyspark")

from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.spark_cluster import SparkStandaloneCluster
from aiozkconsumer.zk import layout
from aiozkconsumer.zk.client import ZkClient

# A standalone cluster's batches cost more than local mode's (task launch on other JVMs): on a
# loaded 2-core machine a test may take minutes, not the ~40 s of an idle one.
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(600)]

DRIVER = Path(__file__).resolve().parents[1] / "_spark_driver.py"
PARTITIONS = 4
WAIT_S = 180.0
SESSION_TIMEOUT_MS = 6000


class Driver:
    """A ``_spark_driver.py`` process: JSON commands on stdin, ``@@`` answers on stdout."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.proc = proc
        self.log = log
        self.answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.progress: list[dict[str, Any]] = []
        self.progressed = asyncio.Event()
        self.app_id = ""
        self._reader = asyncio.create_task(self._read())

    @classmethod
    @contextlib.asynccontextmanager
    async def running(
        cls,
        spark_cluster: SparkStandaloneCluster,
        cluster: LocalCluster,
        group: str,
        topic: str,
        log: Path,
    ) -> AsyncIterator[Driver]:
        setup = {
            "conf": {
                **spark_cluster.app_conf(),
                "spark.driver.memory": "512m",
                "spark.sql.execution.arrow.pyspark.enabled": "true",
            },
            "source": {
                "zookeeper.connect": cluster.zookeeper_connect,
                "group.id": group,
                "subscribe": topic,
                "startingOffsets": "earliest",
                "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
            },
        }
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        with log.open("ab") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                str(DRIVER),
                json.dumps(setup),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                env=env,
                start_new_session=True,  # its own process group: the JVM and Python workers
            )
        driver = cls(proc, log)
        try:
            ready = await driver.answer()
            assert ready.get("ready"), ready
            driver.app_id = ready["app_id"]
            yield driver
        finally:
            await driver.close()

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace")
            if not line.startswith("@@ "):
                continue
            payload = json.loads(line[3:])
            if "progress" in payload:
                self.progress.append(payload)
                self.progressed.set()
            else:
                self.answers.put_nowait(payload)
        self.answers.put_nowait({"error": f"driver exited ({self.proc.returncode})"})

    def send(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(command) + "\n").encode())

    async def answer(self) -> dict[str, Any]:
        with anyio.fail_after(WAIT_S):
            got = await self.answers.get()
        assert "error" not in got, f"{got['error']}\n{self.log.read_text()[-4000:]}"
        return got

    async def call(self, **command: Any) -> dict[str, Any]:
        self.send(**command)
        return await self.answer()

    async def wait_batches(self, name: str, count: int) -> None:
        """Wait until ``count`` micro-batches of query ``name`` have finished."""
        with anyio.fail_after(WAIT_S):
            while sum(p["progress"] == name for p in self.progress) < count:
                self.progressed.clear()
                await self.progressed.wait()

    def kill(self) -> None:
        """SIGKILL the driver's whole process group: Python, its JVM, the source's planner."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def close(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(OSError):
                self.send(cmd="exit")
            with anyio.move_on_after(60):
                await self.proc.wait()
        self.kill()  # whatever outlived the driver (or a driver that did not exit)
        await self.proc.wait()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


# -- ZooKeeper: the group as the old consumer's tools see it ----------------------------------


@contextlib.asynccontextmanager
async def zk_of(cluster: LocalCluster) -> AsyncIterator[ZkClient]:
    zk = ZkClient(cluster.zookeeper_connect, session_timeout_ms=10000)
    await zk.start()
    try:
        yield zk
    finally:
        await zk.close()


async def wait_children(
    cluster: LocalCluster, path: str, predicate: Callable[[list[str]], bool]
) -> list[str]:
    """Wait (on a ZooKeeper watch) until the children of ``path`` satisfy ``predicate``."""
    async with zk_of(cluster) as zk:
        with anyio.fail_after(WAIT_S):
            async for children in zk.watch_children(path):
                if predicate(sorted(children or [])):
                    return sorted(children or [])
    raise AssertionError("unreachable")


async def wait_offsets(
    cluster: LocalCluster, group: str, topic: str, wanted: int
) -> dict[int, int]:
    """Wait (on watches) until every partition's committed offset reaches ``wanted``."""
    got: dict[int, int] = {}
    async with zk_of(cluster) as zk:
        with anyio.fail_after(WAIT_S):
            for p in range(PARTITIONS):
                async for data in zk.watch_data(layout.offset_path(group, topic, p)):
                    if data is not None and layout.decode_offset(data) >= wanted:
                        got[p] = layout.decode_offset(data)
                        break
    return got


async def owners(cluster: LocalCluster, group: str, topic: str) -> dict[int, str]:
    """``{partition: owning consumer id}`` from the owner nodes."""
    owners_dir = layout.owners_dir(group, topic)
    async with zk_of(cluster) as zk:
        out: dict[int, str] = {}
        for child in await zk.get_children(owners_dir) or []:
            data = await zk.get_data(f"{owners_dir}/{child}")
            if data is not None:
                out[int(child)] = data.decode().rsplit("-", 1)[0]
        return out


async def produce(cluster: LocalCluster, topic: str, first: int, per_partition: int) -> None:
    await cluster.produce_to_partitions(
        topic,
        {
            p: [(b"k%d" % i, b"v-%d-%d" % (p, i)) for i in range(first, first + per_partition)]
            for p in range(PARTITIONS)
        },
    )


def exactly_once(counts: dict[str, list[int]], per_partition: int) -> None:
    """The table holds offsets ``[0, per_partition)`` of every partition, each once."""
    assert counts == {
        str(p): [per_partition, per_partition, 0, per_partition - 1] for p in range(PARTITIONS)
    }


def ran_on_both_workers(spark_cluster: SparkStandaloneCluster, app_id: str) -> None:
    """Each worker started an executor (a JVM of its own) for the application."""
    for i in range(spark_cluster.workers):
        assert (spark_cluster.work_dir / f"worker-{i}" / app_id).is_dir(), i


# -- the tests -------------------------------------------------------------------------------


async def test_parquet_pipeline_stopped_and_restarted_holds_every_record_once(
    spark_standalone_cluster: SparkStandaloneCluster,
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    cluster, topic, group = zk_kafka_cluster, unique_topic, unique_group_id
    await cluster.create_topic(topic, PARTITIONS)
    await produce(cluster, topic, 0, 5000)
    query = {
        "cmd": "start",
        "name": "pipeline",
        "checkpoint": str(tmp_path / "checkpoint"),
        "output": str(tmp_path / "table"),
        "source": {"maxOffsetsPerTrigger": 10_000},
    }
    async with Driver.running(
        spark_standalone_cluster, cluster, group, topic, tmp_path / "driver.log"
    ) as driver:
        first = await driver.call(**query)
        assert first["batches"] == [0, 1]  # 20,000 records, 10,000 a batch
        assert await wait_offsets(cluster, group, topic, 5000) == dict.fromkeys(range(4), 5000)
        # The query stopped (availableNow): its member left the group.
        await wait_children(cluster, layout.ids_dir(group), lambda ids: not ids)

        await produce(cluster, topic, 5000, 5000)
        again = await driver.call(**query)  # the same checkpoint: continues at batch 2
        assert again["batches"] == [2, 3]
        counts = await driver.call(cmd="count", output=query["output"])
        app_id = driver.app_id
    exactly_once(counts["partitions"], 10_000)
    ends = await cluster.log_end_offsets(topic)
    assert ends == dict.fromkeys(range(4), 10_000)
    assert await wait_offsets(cluster, group, topic, 10_000) == ends
    ran_on_both_workers(spark_standalone_cluster, app_id)


async def test_driver_killed_mid_run_restarts_from_its_checkpoint_and_loses_nothing(
    spark_standalone_cluster: SparkStandaloneCluster,
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    cluster, topic, group = zk_kafka_cluster, unique_topic, unique_group_id
    await cluster.create_topic(topic, PARTITIONS)
    await produce(cluster, topic, 0, 5000)
    query = {
        "cmd": "start",
        "name": "killed",
        "checkpoint": str(tmp_path / "checkpoint"),
        "output": str(tmp_path / "table"),
        "source": {"maxOffsetsPerTrigger": 4000},  # 5 batches for 20,000 records
    }
    log = tmp_path / "driver.log"
    async with Driver.running(spark_standalone_cluster, cluster, group, topic, log) as driver:
        driver.send(**query)
        await driver.wait_batches("killed", 2)
        [member] = await wait_children(cluster, layout.ids_dir(group), lambda ids: len(ids) == 1)
        driver.kill()  # the next batch is in flight: availableNow runs them back to back
        await driver.proc.wait()
        finished_before_kill = len(driver.progress)
    assert 2 <= finished_before_kill < 5
    commits = {p.name for p in (tmp_path / "checkpoint" / "commits").iterdir()}
    assert str(finished_before_kill - 1) in commits and "4" not in commits

    # Nobody closed the killed member's session: its node goes when the session expires.
    await wait_children(cluster, layout.ids_dir(group), lambda ids: member not in ids)

    async with Driver.running(spark_standalone_cluster, cluster, group, topic, log) as driver:
        done = await driver.call(**query)
        # Restarted at the first batch without a commit (replayed with the same offsets).
        assert done["batches"][0] <= finished_before_kill and done["batches"][-1] == 4
        counts = await driver.call(cmd="count", output=query["output"])
    exactly_once(counts["partitions"], 5000)
    ends = await cluster.log_end_offsets(topic)
    assert await wait_offsets(cluster, group, topic, 5000) == ends


async def test_two_queries_in_one_group_split_the_partitions_and_cover_every_record_once(
    spark_standalone_cluster: SparkStandaloneCluster,
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    cluster, topic, group = zk_kafka_cluster, unique_topic, unique_group_id
    await cluster.create_topic(topic, PARTITIONS)
    await produce(cluster, topic, 0, 2500)

    def query(name: str) -> dict[str, Any]:
        return {
            "cmd": "start",
            "name": name,
            "checkpoint": str(tmp_path / f"checkpoint-{name}"),
            "output": str(tmp_path / f"table-{name}"),
            "wait": False,
        }

    async with Driver.running(
        spark_standalone_cluster, cluster, group, topic, tmp_path / "driver.log"
    ) as driver:
        await driver.call(**query("a"))
        await driver.call(cmd="drain", name="a")  # a alone: all four partitions
        [member_a] = await wait_children(cluster, layout.ids_dir(group), lambda i: len(i) == 1)
        assert set((await owners(cluster, group, topic)).values()) == {member_a}

        await driver.call(**query("b"))
        await wait_children(cluster, layout.ids_dir(group), lambda ids: len(ids) == 2)
        async with zk_of(cluster) as zk:
            with anyio.fail_after(WAIT_S):
                async for children in zk.watch_children(layout.owners_dir(group, topic)):
                    owned = await owners(cluster, group, topic)
                    if len(children or []) == PARTITIONS and len(set(owned.values())) == 2:
                        break
        owned_a = {p for p, m in owned.items() if m == member_a}
        owned_b = set(range(PARTITIONS)) - owned_a
        assert len(owned_a) == len(owned_b) == 2  # range assignment over two members

        await produce(cluster, topic, 2500, 2500)
        await driver.call(cmd="drain", name="a")
        await driver.call(cmd="drain", name="b")
        assert await wait_offsets(cluster, group, topic, 5000) == dict.fromkeys(range(4), 5000)
        await driver.call(cmd="stop", name="a")
        await driver.call(cmd="stop", name="b")
        table_a = (await driver.call(cmd="count", output=query("a")["output"]))["partitions"]
        table_b = (await driver.call(cmd="count", output=query("b")["output"]))["partitions"]
    # a read everything before b joined, then only its own partitions; b only its own, from
    # the offsets a had committed: together every record once.
    for p in range(PARTITIONS):
        if p in owned_a:
            assert table_a[str(p)] == [5000, 5000, 0, 4999]
            assert str(p) not in table_b
        else:
            assert table_a[str(p)] == [2500, 2500, 0, 2499]
            assert table_b[str(p)] == [2500, 2500, 2500, 4999]


async def test_a_standalone_cluster_leaves_no_process_behind(tmp_path: Path) -> None:
    spark_cluster = SparkStandaloneCluster(workers=1, work_dir=tmp_path)
    async with spark_cluster:
        status = spark_cluster.status()
        assert status["url"] == spark_cluster.master_url
        assert [(w["state"], w["cores"], w["memory"]) for w in status["workers"]] == [
            ("ALIVE", 1, 512)
        ]
        pids = spark_cluster.pids
        assert sorted(pids) == ["spark-master", "spark-worker-0"]
    assert spark_cluster.pids == {}
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert "Starting Spark master" in (tmp_path / "spark-master.log").read_text()
