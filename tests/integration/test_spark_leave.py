"""A stopped ``zkkafka`` query's member has left its group by the time its process ends.

Spark stops a streaming query's Python source by sending SIGTERM to its planning process and
returns from ``query.stop()`` without calling the reader's ``stop()`` and without waiting
for the process; the member leaves on that signal, before the process ends
(``aiozkconsumer/spark/termination.py``). These tests stop real queries (a local
SparkSession, a real ZooKeeper + Kafka 3.9) again and again. After each ``stop()`` they wait
for the planning process to end (a pidfd, not a sleep) and then look at the group at once,
through a ZooKeeper session (or Kafka admin client) of their own, with no retry. Before the
fix the process died on the signal without leaving, and the member stayed until its session
timed out (6 s here): every look failed. A look right when ``stop()`` returns is made and
logged too, not asserted (it races the process Spark does not wait for):

- ten stop/start cycles in one Spark session, ZooKeeper-coordinated: no registration under
  ``/consumers/<group>/ids``, no owner node, and the group's offsets at the log end (the
  last batch was committed before the member left);
- three cycles of a Kafka-coordinated group (``group.coordinator=kafka``): DescribeGroups
  lists no member, the offsets are at the log end;
- a driver process that exits right after the stop (a new driver, so a new JVM, per cycle);
- an unreachable ZooKeeper or broker fails the query with one line naming it and its address.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from _spark_session import spark_session  # noqa: F401  (the module's SparkSession)
from aiokafka.admin import AIOKafkaAdminClient
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.zk import layout
from aiozkconsumer.zk.client import ZkClient

pytestmark = pytest.mark.spark

log = logging.getLogger(__name__)

PARTITIONS = 2
PER_CYCLE = 5  # records per partition produced before each cycle
CYCLES = 10
KAFKA_CYCLES = 3
# Each driver-exit cycle starts a driver, its JVM and a planning process: 80 s on this
# test machine's 2 shared cores (load average near 10), so one cycle keeps the test near a
# minute; the ten in-session cycles cover the repetition.
DRIVER_CYCLES = 1
SESSION_TIMEOUT_MS = 6000


def _options(cluster: LocalCluster, group: str, topic: str, coordinator: str) -> dict[str, str]:
    if coordinator == "kafka":
        where = {"group.coordinator": "kafka", "kafka.bootstrap.servers": cluster.bootstrap_servers}
    else:
        where = {"zookeeper.connect": cluster.zookeeper_connect}
    return {
        **where,
        "group.id": group,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "session.timeout.ms": str(SESSION_TIMEOUT_MS),
    }


def _stream(spark: SparkSession, options: dict[str, str]) -> DataFrame:
    return spark.readStream.format("zkkafka").options(**options).load()


@dataclass(frozen=True)
class Look:
    """The group as a new client sees it: members, owner nodes (ZooKeeper), offsets."""

    members: list[str]
    owners: list[str]
    offsets: dict[int, int | None]


async def _zk_look(cluster: LocalCluster, group: str, topic: str) -> Look:
    zk = ZkClient(cluster.zookeeper_connect, session_timeout_ms=10000)
    await zk.start()
    try:
        ids = sorted(await zk.get_children(layout.ids_dir(group)) or [])
        owners = sorted(await zk.get_children(layout.owners_dir(group, topic)) or [])
        offsets: dict[int, int | None] = {}
        for p in range(PARTITIONS):
            data = await zk.get_data(layout.offset_path(group, topic, p))
            offsets[p] = None if data is None else layout.decode_offset(data)
        return Look(ids, owners, offsets)
    finally:
        await zk.close()


def zk_look(cluster: LocalCluster, group: str, topic: str) -> Look:
    """The group in ZooKeeper, through a session of its own opened now (as a tool would)."""
    return asyncio.run(_zk_look(cluster, group, topic))


async def _kafka_look(cluster: LocalCluster, group: str) -> Look:
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    await admin.start()
    try:
        [response] = await admin.describe_consumer_groups([group])
        [described] = response.groups  # (code, group, state, protocol type, protocol, members)
        members = [m[0] for m in described[5]]
        got = await admin.list_consumer_group_offsets(group)
        offsets: dict[int, int | None] = {tp.partition: m.offset for tp, m in got.items()}
        return Look(members, [], offsets)
    finally:
        await admin.close()


def kafka_look(cluster: LocalCluster, group: str) -> Look:
    """The group as DescribeGroups and OffsetFetch show it, from an admin client of its own."""
    return asyncio.run(_kafka_look(cluster, group))


def _produce(cluster: LocalCluster, topic: str, cycle: int) -> None:
    records = {
        p: [(b"k", b"c%d-p%d-%d" % (cycle, p, i)) for i in range(PER_CYCLE)]
        for p in range(PARTITIONS)
    }
    asyncio.run(cluster.produce_to_partitions(topic, records))


def _planning_processes(spark: SparkSession) -> set[int]:
    """Pids of the streaming sources' planning processes of this session's JVM.

    Spark starts them as ``python -m pyspark.sql.streaming.python_streaming_source_runner``
    children of the driver's JVM (``launch_gateway`` execs it: its pid is the Popen's).
    """
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            stat = (proc / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == jvm and b"python_streaming_source_runner" in cmdline:
            found.add(int(proc.name))
    return found


def _threads(pid: int) -> str:
    """The threads of process ``pid``: name, state and kernel wait channel, one per line."""
    lines = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            name = (task / "comm").read_text().strip()
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            wchan = (task / "wchan").read_text().strip()
        except OSError:
            continue
        lines.append(f"  {task.name} {name!r} {state} {wchan}")
    return "\n".join(lines)


def _wait_exit(pid: int, limit_s: float = 60.0) -> None:
    """Wait for process ``pid`` (not our child) to end: a pidfd becomes readable then.

    A process still running after ``limit_s`` fails the test with its threads listed, and is
    killed, so that the next query's planning process is the only one.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        readable, _, _ = select.select([fd], [], [], limit_s)
        if not readable:
            threads = _threads(pid)
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            raise AssertionError(f"process {pid} still running after {limit_s} s:\n{threads}")
    finally:
        os.close(fd)


def _run_cycles(
    spark: SparkSession,
    cluster: LocalCluster,
    topic: str,
    options: dict[str, str],
    checkpoint: Path,
    cycles: int,
    look: Callable[[], Look],
) -> None:
    """Produce, run the query until it has read everything, stop it, look at the group.

    The look comes as soon as the query's planning process has ended: Spark does not wait
    for it in ``stop()`` (it sends SIGTERM and returns), so that is the first moment the
    member can be held to; the old code's process ended at once without leaving. A look
    right when ``stop()`` returns is logged, not asserted: it races that process.
    """
    at_once = 0
    for cycle in range(cycles):
        _produce(cluster, topic, cycle)
        writer = _stream(spark, options).writeStream.format("noop")
        before = _planning_processes(spark)  # a previous query's may not have ended yet
        query = writer.option("checkpointLocation", str(checkpoint)).start()
        try:
            query.processAllAvailable()
            running = look()
            [planner] = _planning_processes(spark) - before
            assert len(running.members) == 1, f"cycle {cycle}: not in the group while running"
        finally:
            query.stop()
        stopped = time.monotonic()
        at_once += not look().members
        _wait_exit(planner)
        ended = time.monotonic() - stopped
        left = look()  # at once: no sleep, no retry
        assert (left.members, left.owners) == ([], []), f"cycle {cycle}: still in the group"
        end = (cycle + 1) * PER_CYCLE
        assert left.offsets == dict.fromkeys(range(PARTITIONS), end), f"cycle {cycle}"
        log.info("cycle %d: the planning process ended %.3f s after stop()", cycle, ended)
    log.info("member already gone at stop()'s return in %d of %d cycles", at_once, cycles)


def test_ten_stop_start_cycles_leave_the_zookeeper_group(
    spark: SparkSession,
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    cluster, topic, group = zk_kafka_cluster, unique_topic, unique_group_id
    asyncio.run(cluster.create_topic(topic, PARTITIONS))
    _run_cycles(
        spark,
        cluster,
        topic,
        _options(cluster, group, topic, "zookeeper"),
        tmp_path / "checkpoint",
        CYCLES,
        lambda: zk_look(cluster, group, topic),
    )


def test_stop_start_cycles_leave_the_kafka_group(
    spark: SparkSession,
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    cluster, topic, group = zk_kafka_cluster, unique_topic, unique_group_id
    asyncio.run(cluster.create_topic(topic, PARTITIONS))
    _run_cycles(
        spark,
        cluster,
        topic,
        _options(cluster, group, topic, "kafka"),
        tmp_path / "checkpoint",
        KAFKA_CYCLES,
        lambda: kafka_look(cluster, group),
    )


_DRIVER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from pyspark.sql import SparkSession
    from aiozkconsumer.spark import register

    conf = json.loads(sys.argv[1])
    builder = SparkSession.builder.master("local[2]").appName("zkkafka-leave")
    for key, value in conf["spark"].items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark, check_python=False)
    df = spark.readStream.format("zkkafka").options(**conf["source"]).load()
    query = (
        df.writeStream.format("noop").option("checkpointLocation", conf["checkpoint"]).start()
    )
    query.processAllAvailable()
    jvm = spark.sparkContext._gateway.proc.pid
    planners = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if parent == jvm and b"python_streaming_source_runner" in cmdline:
            planners.append(int(proc.name))
    query.stop()
    print("@@ " + json.dumps({"planners": planners}), flush=True)
    """
)


def test_a_driver_exiting_after_the_stop_leaves_the_group_first(
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    cluster, topic, group = zk_kafka_cluster, unique_topic, unique_group_id
    asyncio.run(cluster.create_topic(topic, PARTITIONS))
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    conf = {
        "spark": {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "512m",
        },
        "source": _options(cluster, group, topic, "zookeeper"),
        "checkpoint": str(tmp_path / "checkpoint"),
    }
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    for cycle in range(DRIVER_CYCLES):
        _produce(cluster, topic, cycle)
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, str(script), json.dumps(conf)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        took = time.monotonic() - began
        assert done.returncode == 0 and "@@ " in done.stdout, done.stderr[-3000:]
        answer = json.loads(done.stdout.split("@@ ", 1)[1])
        assert len(answer["planners"]) == 1, answer
        # Usually gone already: the driver's own exit takes longer than the leave.
        gone = not Path(f"/proc/{answer['planners'][0]}").exists()
        _wait_exit(answer["planners"][0])
        left = zk_look(cluster, group, topic)  # at once: no sleep, no retry
        assert (left.members, left.owners) == ([], []), f"cycle {cycle}: still in the group"
        end = (cycle + 1) * PER_CYCLE
        assert left.offsets == dict.fromkeys(range(PARTITIONS), end), f"cycle {cycle}"
        log.info(
            "driver cycle %d: %.1f s; planner gone at the driver's exit: %s", cycle, took, gone
        )


@pytest.mark.parametrize(
    ("coordinator", "expected"),
    [
        ("zookeeper", "ZooKeeper 127.0.0.1:1 unreachable: "),
        ("kafka", "Kafka broker(s) 127.0.0.1:1 unreachable: "),
    ],
)
def test_an_unreachable_zookeeper_or_broker_fails_the_query_in_one_line(
    spark: SparkSession, coordinator: str, expected: str, tmp_path: Path
) -> None:
    options: dict[str, str] = {"group.id": "unreachable", "subscribe": "nowhere"}
    if coordinator == "kafka":
        options |= {"group.coordinator": "kafka", "kafka.bootstrap.servers": "127.0.0.1:1"}
    else:
        options |= {"zookeeper.connect": "127.0.0.1:1", "zookeeper.connection.timeout.ms": "500"}
    query = (
        _stream(spark, options)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        with pytest.raises(StreamingQueryException) as raised:
            query.processAllAvailable()
    finally:
        query.stop()
    message = str(raised.value)
    ours = [
        line for line in message.splitlines() if "aiozkconsumer" in line or "127.0.0.1:1" in line
    ]
    assert len(ours) == 1, message
    assert expected in ours[0], message
    assert "Traceback" not in message, message
