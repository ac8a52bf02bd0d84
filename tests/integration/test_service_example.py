"""``examples/service.py``: the aiohttp service embedding a connector, over real HTTP.

Started as a subprocess (stopped with SIGTERM) and in-process (its task cancelled by the
host); both must leave the group with the consumed offsets committed in ZooKeeper.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import anyio
import pytest

from aiozkconsumer import ConnectorState, ConnectorStatistics
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.zk import layout

pytestmark = pytest.mark.integration

SERVICE_PY = Path(__file__).resolve().parents[2] / "examples" / "service.py"
PARTITIONS = 3


def _load_service() -> ModuleType:
    spec = importlib.util.spec_from_file_location("aiozkconsumer_example_service", SERVICE_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


service = _load_service()


@pytest.fixture
async def topic(zk_kafka_cluster: LocalCluster, unique_topic: str) -> str:
    await zk_kafka_cluster.create_topic(unique_topic, PARTITIONS)
    return unique_topic


async def _produce(cluster: LocalCluster, topic: str, per_partition: int) -> dict[int, int]:
    await cluster.produce_to_partitions(
        topic, {p: [(None, b"x" * 50)] * per_partition for p in range(PARTITIONS)}
    )
    return await cluster.log_end_offsets(topic)


async def _committed(zk_client: Any, group: str, topic: str) -> dict[int, int]:
    result = {}
    for p in range(PARTITIONS):
        path = layout.offset_path(group, topic, p)
        if await zk_client.exists(path):
            result[p] = int(await zk_client.get_data(path))
    return result


async def _get_json(session: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any]]:
    async with session.get(url) as response:
        return response.status, await response.json()


async def _wait_consumed(
    session: aiohttp.ClientSession, url: str, ends: dict[int, int]
) -> dict[str, Any]:
    """Poll ``/health`` until every partition's consumed offset reached the log end.

    Another process's progress has no event to wait on: polling over HTTP is the interface.
    """
    with anyio.fail_after(60):
        while True:
            status, body = await _get_json(session, f"{url}/health")
            consumed = {p["partition"]: p["consumed_offset"] for p in body["owned_partitions"]}
            if status == 200 and consumed == ends:
                return body
            await anyio.sleep(0.1)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_service_subprocess_serves_health_and_metrics_and_commits_on_sigterm(
    zk_kafka_cluster: LocalCluster,
    zk_client: Any,
    http: aiohttp.ClientSession,
    topic: str,
    unique_group_id: str,
) -> None:
    group = unique_group_id
    await _produce(zk_kafka_cluster, topic, 100)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SERVICE_PY), "--port", "0", "--streams", "2",
        # Only the shutdown commits: what ZooKeeper holds afterwards is its work.
        "--property", "auto.commit.interval.ms=600000",
        stderr=asyncio.subprocess.PIPE,
        env={
            **os.environ,
            "AIOZKCONSUMER_ZOOKEEPER": zk_kafka_cluster.zookeeper_connect,
            "AIOZKCONSUMER_GROUP": group,
            "AIOZKCONSUMER_TOPIC": topic,
            "PYTHONUNBUFFERED": "1",
        },
    )  # fmt: skip
    log: list[str] = []
    try:
        assert proc.stderr is not None
        with anyio.fail_after(60):
            while not (match := re.search(r"listening on (http://\S+)", "".join(log[-1:]))):
                line = (await proc.stderr.readline()).decode()
                assert line, "".join(log)
                log.append(line)
        url = match.group(1)

        ends = await _produce(zk_kafka_cluster, topic, 50)  # more, while it runs
        body = await _wait_consumed(http, url, ends)
        assert body["state"] == "running"
        assert body["consumer_id"].startswith(f"{group}_")
        assert body["session_id"].startswith("0x")
        assert body["last_error"] is None
        assert body["records_handled"] == sum(ends.values())
        assert sorted(p["partition"] for p in body["owned_partitions"]) == list(range(PARTITIONS))

        async with http.get(f"{url}/metrics") as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            metrics = await response.text()
        assert "# TYPE kafka_consumer_rebalance_duration_seconds histogram" in metrics
        assert f'client_id="{group}"' in metrics
        assert await _committed(zk_client, group, topic) == {}  # nothing committed yet

        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(60):
            _, err = await proc.communicate()
        log.append(err.decode())
        assert proc.returncode == 0, "".join(log)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert await _committed(zk_client, group, topic) == ends
    assert await zk_client.get_children(layout.ids_dir(group)) == []
    assert await zk_client.get_children(layout.owners_dir(group, topic)) == []


async def test_service_in_process_survives_cancellation_of_its_task(
    zk_kafka_cluster: LocalCluster,
    zk_client: Any,
    http: aiohttp.ClientSession,
    topic: str,
    unique_group_id: str,
) -> None:
    group = unique_group_id
    ends = await _produce(zk_kafka_cluster, topic, 200)
    settings = service.Settings(
        zookeeper=zk_kafka_cluster.zookeeper_connect,
        group=group,
        topic=topic,
        streams=2,
        port=0,
        properties={"auto.commit.interval.ms": "600000"},
    )
    app = service.create_app(settings)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(service.serve(app, "127.0.0.1", 0, on_ready=ready.set_result))
    try:
        with anyio.fail_after(60):
            url = await asyncio.shield(ready)
        consumer = app[service.SERVICE]
        with anyio.fail_after(60):
            await consumer.wait_handled(sum(ends.values()))
        status, body = await _get_json(http, f"{url}/health")
        assert status == 200
        assert {p["partition"]: p["consumed_offset"] for p in body["owned_partitions"]} == ends
    finally:
        server.cancel()
        with anyio.fail_after(60), contextlib.suppress(asyncio.CancelledError):
            await server
    assert server.cancelled()
    assert consumer.connector.statistics().state.value == "closed"
    assert await _committed(zk_client, group, topic) == ends
    assert await zk_client.get_children(layout.ids_dir(group)) == []


async def test_health_is_503_when_a_consumer_task_fails(
    zk_kafka_cluster: LocalCluster,
    http: aiohttp.ClientSession,
    topic: str,
    unique_group_id: str,
) -> None:
    await _produce(zk_kafka_cluster, topic, 1)
    failed = asyncio.Event()

    async def broken_handler(msg: Any) -> None:
        failed.set()
        raise RuntimeError(f"cannot handle offset {msg.offset}")

    settings = service.Settings(
        zookeeper=zk_kafka_cluster.zookeeper_connect, group=unique_group_id, topic=topic, port=0
    )
    app = service.create_app(settings, broken_handler)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(service.serve(app, "127.0.0.1", 0, on_ready=ready.set_result))
    try:
        with anyio.fail_after(60):
            url = await asyncio.shield(ready)
            await failed.wait()
            await app[service.SERVICE].failed.wait()
        status, body = await _get_json(http, f"{url}/health")
        assert status == 503
        assert body["state"] == "running"
        assert body["last_error"] == "RuntimeError: cannot handle offset 0"
    finally:
        server.cancel()
        with anyio.fail_after(60), contextlib.suppress(asyncio.CancelledError):
            await server


# -- bad input: one error line, or a degraded (not failing) /health ---------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _run_service(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SERVICE_PY), "--group", "g", "--topic", "t", "--port", "0", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    with anyio.fail_after(60):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, (out + err).decode()


async def test_unreachable_zookeeper_gives_one_error_line_and_exit_1() -> None:
    code, output = await _run_service(
        "--zookeeper", f"127.0.0.1:{_free_port()}",
        "--property", "zookeeper.connection.timeout.ms=1000",
    )  # fmt: skip
    assert code == 1, output
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if " ERROR " in line]
    assert len(errors) == 1, output
    assert "ZookeeperConnectionError: could not connect to ZooKeeper" in errors[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--zookeeper", "foo"], "argument --zookeeper: zookeeper.connect: 'foo' is not host:port"),
        (
            ["--zookeeper", "h:1", "--bootstrap-server", "k:notaport"],
            "argument --bootstrap-server: bootstrap.servers: port 'notaport'",
        ),
        (
            ["--zookeeper", "h:1", "--property", "fetch.min.bytes=lots"],
            "invalid configuration: fetch.min.bytes: must be an integer, got 'lots'",
        ),
    ],
)
async def test_malformed_arguments_exit_2_at_once(args: list[str], message: str) -> None:
    code, output = await _run_service(*args)
    assert code == 2, output
    assert "Traceback" not in output
    assert message in output


async def _health_of(http: aiohttp.ClientSession, settings: Any) -> tuple[int, dict[str, Any]]:
    """Start the service in-process with ``settings``, read ``/health`` once, stop it."""
    app = service.create_app(settings)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(service.serve(app, "127.0.0.1", 0, on_ready=ready.set_result))
    try:
        with anyio.fail_after(60):
            url = await asyncio.shield(ready)
        return await _get_json(http, f"{url}/health")
    finally:
        server.cancel()
        with anyio.fail_after(60), contextlib.suppress(asyncio.CancelledError):
            await server


async def test_health_is_degraded_when_the_topic_does_not_exist(
    zk_kafka_cluster: LocalCluster,
    http: aiohttp.ClientSession,
    unique_topic: str,
    unique_group_id: str,
) -> None:
    settings = service.Settings(
        zookeeper=zk_kafka_cluster.zookeeper_connect,
        group=unique_group_id,
        topic=unique_topic,  # never created
        port=0,
    )
    status, body = await _health_of(http, settings)
    assert status == 200
    assert (body["status"], body["state"]) == ("degraded", "running")
    assert body["reasons"] == [
        f"topic {unique_topic!r} does not exist: this member owns no partition"
    ]
    assert body["owned_partitions"] == []


async def test_health_is_degraded_when_an_offset_node_is_malformed(
    zk_kafka_cluster: LocalCluster,
    zk_client: Any,
    http: aiohttp.ClientSession,
    topic: str,
    unique_group_id: str,
) -> None:
    path = layout.offset_path(unique_group_id, topic, 1)
    await zk_client.ensure_path(layout.offsets_dir(unique_group_id, topic))
    await zk_client.create(path, b"oops")
    settings = service.Settings(
        zookeeper=zk_kafka_cluster.zookeeper_connect, group=unique_group_id, topic=topic, port=0
    )
    status, body = await _health_of(http, settings)
    assert status == 200
    assert (body["status"], body["state"]) == ("degraded", "running")
    [unowned] = body["unowned_partitions"]
    assert (unowned["topic"], unowned["partition"]) == (topic, 1)
    assert path in unowned["reason"] and "b'oops'" in unowned["reason"]
    [reason] = body["reasons"]
    assert reason.startswith(f"partition [{topic},1] is not consumed by any member: ")
    assert sorted(p["partition"] for p in body["owned_partitions"]) == [0, 2]


async def test_health_is_ok_when_nothing_is_wrong(
    zk_kafka_cluster: LocalCluster, http: aiohttp.ClientSession, topic: str, unique_group_id: str
) -> None:
    settings = service.Settings(
        zookeeper=zk_kafka_cluster.zookeeper_connect, group=unique_group_id, topic=topic, port=0
    )
    status, body = await _health_of(http, settings)
    assert (status, body["status"], body["reasons"]) == (200, "ok", [])
    assert body["unowned_partitions"] == []


def _stats(
    owned: int,
    since_fetch: float | None,
    without_leader: dict[int, float],
    since_coordinator: float | None = None,
) -> ConnectorStatistics:
    tps = tuple(TopicPartition("t", p) for p in range(owned))
    return ConnectorStatistics(
        state=ConnectorState.RUNNING,
        consumer_id="g_c",
        owned_partitions=tps,
        consumed_offsets={},
        committed_offsets={},
        lag={},
        completed_rebalances=1,
        rebalances=(),
        failed_rebalance_attempts=0,
        session_id=1,
        zookeeper_commits=0,
        kafka_commits=0,
        last_error=None,
        seconds_since_fetch=since_fetch,
        partitions_without_leader={TopicPartition("t", p): s for p, s in without_leader.items()},
        seconds_since_coordinator=since_coordinator,
    )


def test_fetch_stalls_name_silent_brokers_and_partitions_without_a_broker() -> None:
    """The readiness rule of ``/health`` (the only broker killed answered 200 "ok" before)."""
    assert service.fetch_stalls(_stats(2, 0.1, {}), 30.0) == []
    assert service.fetch_stalls(_stats(2, 29.0, {0: 29.0}), 30.0) == []  # within the bound
    assert service.fetch_stalls(_stats(0, 100.0, {}), 30.0) == []  # owns nothing to fetch
    [silent] = service.fetch_stalls(_stats(2, 45.0, {}), 30.0)
    assert silent.startswith("no broker has answered a fetch for 45 s (socket.timeout.ms is 30000")
    [stalled] = service.fetch_stalls(_stats(3, 0.2, {1: 31.0, 2: 5.0}), 30.0)
    assert stalled.startswith("1 owned partition(s) had no broker to fetch from for more than 30 s")
    assert stalled.endswith(": t-1")


def test_fetch_stalls_name_a_group_coordinator_that_does_not_answer() -> None:
    """Kafka coordination: a coordinator silent past the bound fails readiness, owned
    partitions or not; ZooKeeper coordination (``None``) never does."""
    assert service.fetch_stalls(_stats(2, 0.1, {}, since_coordinator=1.0), 30.0) == []
    assert service.fetch_stalls(_stats(0, None, {}, since_coordinator=None), 30.0) == []
    [silent] = service.fetch_stalls(_stats(0, None, {}, since_coordinator=42.0), 30.0)
    assert silent.startswith("the group coordinator has not answered for 42 s")
    assert "unknown or unreachable" in silent


_CONNECTION_WARNINGS = ("Unable connect to node", "Unable to update metadata")
"""aiokafka's lines at every retry against a down broker (throttled by the project)."""


@pytest.fixture(scope="module")
def own_cluster() -> Any:
    """A cluster of this module's own: its only broker is killed."""
    cluster = LocalCluster()
    asyncio.run(cluster.start())  # started outside any test's loop, as the session clusters
    try:
        yield cluster
    finally:
        asyncio.run(cluster.stop())


async def _until_health(
    http: aiohttp.ClientSession, url: str, status: int, limit_s: float
) -> dict[str, Any]:
    """Poll ``/health`` until it answers ``status``; the body then."""
    with anyio.fail_after(limit_s):
        while True:
            got, body = await _get_json(http, f"{url}/health")
            if got == status:
                return body
            # /health is a snapshot with a clock in it: nothing announces its change.
            await anyio.sleep(0.1)


async def test_health_fails_within_the_timeout_of_a_killed_broker_and_recovers(
    own_cluster: LocalCluster,
    http: aiohttp.ClientSession,
    unique_topic: str,
    unique_group_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The only broker killed: ``/health`` turns 503 within ``socket.timeout.ms`` + 1 s (it
    answered 200 "ok" for a minute before) and 200 again once the broker is back; the
    client's connection warnings stay at one line per broker per back-off window."""
    import time

    from aiozkconsumer._repeats import REPEAT_INTERVAL_S

    timeout_s = 3.0
    await own_cluster.create_topic(unique_topic, PARTITIONS)
    ends = await _produce(own_cluster, unique_topic, 5)
    settings = service.Settings(
        zookeeper=own_cluster.zookeeper_connect,
        group=unique_group_id,
        topic=unique_topic,
        port=0,
        properties={"socket.timeout.ms": str(int(timeout_s * 1000))},
    )
    app = service.create_app(settings)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(service.serve(app, "127.0.0.1", 0, on_ready=ready.set_result))
    broker = own_cluster.broker_ids[0]
    try:
        with anyio.fail_after(60):
            url = await asyncio.shield(ready)
        await _wait_consumed(http, url, ends)
        assert (await _get_json(http, f"{url}/health"))[0] == 200
        caplog.clear()
        caplog.set_level(logging.WARNING, logger="aiokafka")
        own_cluster.kill_broker(broker)
        killed = time.monotonic()
        body = await _until_health(http, url, 503, timeout_s + 30)
        failed_after = time.monotonic() - killed
        assert failed_after <= timeout_s + 1 + 0.5, body  # + one poll and the clock's slack
        assert any("no broker has answered a fetch" in r for r in body["reasons"]), body
        down_s = time.monotonic() - killed
        await own_cluster.restart_broker(broker)
        await _until_health(http, url, 200, 90)
        # Per message and broker, as the throttle keys them (its own count suffix aside).
        by_key: dict[tuple[str, str], int] = {}
        for r in caplog.records:
            if r.name.startswith("aiokafka") and str(r.msg).startswith(_CONNECTION_WARNINGS):
                args = r.args if isinstance(r.args, tuple) else ()
                key = (str(r.msg).split("%s")[0], str(args[:1]))
                by_key[key] = by_key.get(key, 0) + 1
        assert by_key, "the outage logged no connection warning: nothing was checked"
        windows = int((time.monotonic() - killed) / REPEAT_INTERVAL_S) + 1
        assert all(n <= windows for n in by_key.values()), (by_key, windows, down_s)
    finally:
        server.cancel()
        with anyio.fail_after(60), contextlib.suppress(asyncio.CancelledError):
            await server
