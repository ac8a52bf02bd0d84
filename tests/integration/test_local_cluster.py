"""Integration tests of aiozkconsumer.testing: LocalCluster, provisioning and the pytest plugin.

Everything here runs against real ZooKeeper 3.8 and Kafka 3.9 (ZooKeeper mode) processes.
Most tests share the plugin's session cluster; the lifecycle and fault tests start their own.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import TopicPartition
from aiozk import ZKClient
from aiozk.states import States

from aiozkconsumer.errors import UnknownTopicError, ZookeeperSessionExpiredError
from aiozkconsumer.testing import (
    ClusterStartError,
    ClusterState,
    LocalCluster,
    LocalClusterError,
    ProvisioningError,
    _cluster_config,
    _processes,
    provision_kafka,
)
from aiozkconsumer.testing import provision as provision_module

pytestmark = pytest.mark.integration

pytest_plugins = ["pytester"]


def _four_letter_word(address: str, word: bytes) -> bytes:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(word)
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


def _process_gone(pid: int) -> bool:
    """True if ``pid`` no longer runs (absent, or a zombie nobody reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _java_pids() -> set[int]:
    """Java processes started by this test process (others may run on the machine)."""
    out = subprocess.run(
        ["pgrep", "-x", "-P", str(os.getpid()), "java"], capture_output=True, text=True, check=False
    )
    return {int(line) for line in out.stdout.split()}


async def _read_all(cluster: LocalCluster, topic: str) -> dict[int, list[tuple[Any, Any]]]:
    """Every record of every partition, as ``{partition: [(key, value), ...]}``."""
    end = await cluster.log_end_offsets(topic)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in end]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records: dict[int, list[tuple[Any, Any]]] = {p: [] for p in end}
        async with asyncio.timeout(60):
            while any(len(records[p]) < end[p] for p in end):
                batch = await consumer.getmany(timeout_ms=500)
                for tp, msgs in batch.items():
                    records[tp.partition].extend((m.key, m.value) for m in msgs)
    finally:
        await consumer.stop()
    return records


# ---- the session cluster -------------------------------------------------------------------


def test_zookeeper_answers_and_brokers_are_registered(zk_kafka_cluster: LocalCluster) -> None:
    cluster = zk_kafka_cluster
    assert cluster.state is ClusterState.RUNNING
    assert _four_letter_word(cluster.zookeeper_connect, b"ruok") == b"imok"
    assert cluster.bootstrap_servers.count(",") == len(cluster.broker_ids) - 1
    assert set(cluster.log_files) == {"zookeeper", *(f"broker-{b}" for b in cluster.broker_ids)}
    assert all(path.is_file() for path in cluster.log_files.values())
    assert "binding to port" in cluster.log_tail("zookeeper", lines=10_000)
    assert cluster.log_tail().count("==== ") == 1 + len(cluster.broker_ids)
    assert "RUNNING" in repr(cluster)
    assert cluster.zookeeper_connect in repr(cluster)


async def test_broker_registration_has_plaintext_endpoint(
    zk_kafka_cluster: LocalCluster, zk_client: ZKClient
) -> None:
    cluster = zk_kafka_cluster
    ids = sorted(int(i) for i in await zk_client.get_children("/brokers/ids"))
    assert ids == cluster.broker_ids
    for broker_id in cluster.broker_ids:
        data = json.loads(await zk_client.get_data(f"/brokers/ids/{broker_id}"))
        address = cluster.broker_address(broker_id)
        host, port = address.rsplit(":", 1)
        assert f"PLAINTEXT://{address}" in data["endpoints"]
        assert data["port"] == int(port)
        assert data["host"] == host


async def test_create_topic_registers_partitions_in_zookeeper(
    zk_kafka_cluster: LocalCluster, zk_client: ZKClient, unique_topic: str
) -> None:
    await zk_kafka_cluster.create_topic(unique_topic, 3, config={"retention.ms": "3600000"})
    data = json.loads(await zk_client.get_data(f"/brokers/topics/{unique_topic}"))
    assert sorted(data["partitions"]) == ["0", "1", "2"]
    assert await zk_kafka_cluster.log_end_offsets(unique_topic) == {0: 0, 1: 0, 2: 0}
    assert await zk_kafka_cluster.beginning_offsets(unique_topic) == {0: 0, 1: 0, 2: 0}
    with pytest.raises(LocalClusterError, match="TopicAlreadyExists"):
        await zk_kafka_cluster.create_topic(unique_topic, 3)


async def test_produce_then_log_end_offsets_sum_to_count(
    zk_kafka_cluster: LocalCluster, unique_topic: str
) -> None:
    cluster = zk_kafka_cluster
    await cluster.create_topic(unique_topic, 4)
    n = 20_000
    assert await cluster.produce(unique_topic, ((None, b"v%06d" % i) for i in range(n))) == n
    assert await cluster.produce(unique_topic, [(b"k", b"x")] * 100, partition=2) == 100
    by_partition = {p: [(None, b"p%d-%d" % (p, i)) for i in range(1000)] for p in range(4)}
    assert await cluster.produce_to_partitions(unique_topic, by_partition) == 4000
    end = await cluster.log_end_offsets(unique_topic)
    assert sorted(end) == [0, 1, 2, 3]
    assert sum(end.values()) == n + 100 + 4000
    assert all(offset >= 1000 for offset in end.values())  # random spread + explicit ones


async def test_produce_keeps_order_and_uses_the_default_partitioner(
    zk_kafka_cluster: LocalCluster, unique_topic: str
) -> None:
    cluster = zk_kafka_cluster
    await cluster.create_topic(unique_topic, 3)
    records = [(b"key-%d" % (i % 17), b"value-%d" % i) for i in range(500)]
    assert await cluster.produce(unique_topic, records) == 500
    stored = await _read_all(cluster, unique_topic)
    partitioner = DefaultPartitioner()
    expected: dict[int, list[tuple[Any, Any]]] = {0: [], 1: [], 2: []}
    for key, value in records:
        expected[partitioner(key, [0, 1, 2], [0, 1, 2])].append((key, value))
    assert stored == expected


async def test_unknown_topic_is_reported(zk_kafka_cluster: LocalCluster, unique_topic: str) -> None:
    with pytest.raises(UnknownTopicError):
        await zk_kafka_cluster.produce(unique_topic, [(None, b"x")])
    with pytest.raises(UnknownTopicError):
        await zk_kafka_cluster.log_end_offsets(unique_topic)


async def test_expire_session_drops_the_session_and_its_ephemerals(
    zk_kafka_cluster: LocalCluster, zk_client: ZKClient, unique_group_id: str
) -> None:
    path = f"/{unique_group_id}"
    # A short session timeout: the owner notices the expiry within about one timeout.
    owner = ZKClient(zk_kafka_cluster.zookeeper_connect, session_timeout=2)
    await owner.start()
    try:
        await owner.create(path, b"owner", ephemeral=True)
        assert await zk_client.exists(path)
        old_session = owner.session.session_id
        lost = owner.session.state.wait_for(States.LOST)
        await zk_kafka_cluster.expire_session(old_session, owner.session.password)
        assert not await zk_client.exists(path)  # gone on the server at once
        async with asyncio.timeout(30):
            await lost
            # aiozk then silently opens a fresh session
            await owner.session.state.wait_for(States.CONNECTED)
        assert owner.session.session_id not in (None, old_session)
        assert not await owner.exists(path)
    finally:
        await owner.close()
    with pytest.raises(ZookeeperSessionExpiredError):
        await zk_kafka_cluster.expire_session(old_session, owner.session.password)


def test_the_unique_names_are_legal_and_fresh(unique_topic: str, unique_group_id: str) -> None:
    for name in (unique_topic, unique_group_id):
        assert re.fullmatch(r"[a-zA-Z0-9-]{1,249}", name)
    assert unique_topic != unique_group_id


# ---- provisioning ---------------------------------------------------------------------------


def test_provisioning_is_idempotent(monkeypatch: pytest.MonkeyPatch) -> None:
    home = provision_kafka(quiet=True)  # the session cluster already provisioned it
    libs = sorted(p.name for p in (home / "libs").glob("*.jar"))
    assert "kafka_2.13-3.9.1.jar" in libs
    assert any(name.startswith("zookeeper-3.8") for name in libs)
    pom_digest = hashlib.sha256(provision_module.POM_PATH.read_bytes()).hexdigest()
    assert (home / ".complete").read_text().strip() == pom_digest

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("provision_kafka ran a tool although the cache is complete")

    monkeypatch.setattr(subprocess, "Popen", forbidden)
    monkeypatch.setattr(shutil, "which", forbidden)
    assert provision_kafka(quiet=True) == home
    assert sorted(p.name for p in (home / "libs").glob("*.jar")) == libs


def test_provisioning_without_maven_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_which = shutil.which
    monkeypatch.setattr(
        shutil,
        "which",
        lambda name, *a, **kw: None if name == "mvn" else real_which(name, *a, **kw),
    )
    with pytest.raises(ProvisioningError, match="apt-get install openjdk-17-jdk-headless maven"):
        provision_kafka(tmp_path / "cache")
    assert not (tmp_path / "cache" / "kafka-3.9.1" / ".complete").exists()


def test_provision_cli_prints_the_libs_directory(capsys: pytest.CaptureFixture[str]) -> None:
    assert provision_module.main(["--quiet"]) == 0
    libs = Path(capsys.readouterr().out.strip())
    assert libs.name == "libs" and any(libs.glob("kafka_2.13-*.jar"))


# ---- own clusters: lifecycle and faults ----------------------------------------------------


async def test_stop_leaves_no_process_and_is_idempotent() -> None:
    cluster = LocalCluster()
    with pytest.raises(LocalClusterError):
        _ = cluster.zookeeper_connect
    await cluster.start()
    try:
        pids = cluster.pids
        assert set(pids) == {"zookeeper", "broker-0"}
        assert pids.keys() <= set(cluster.log_files)
        assert not any(_process_gone(pid) for pid in pids.values())
        assert set(pids.values()) <= _java_pids()
        work_dir = cluster.work_dir
        assert cluster.start_seconds is not None
    finally:
        await cluster.stop()
    assert cluster.state is ClusterState.STOPPED
    assert all(_process_gone(pid) for pid in pids.values())
    assert not (set(pids.values()) & _java_pids())
    assert cluster.pids == {}
    assert not work_dir.exists()  # removed: nothing failed
    await cluster.stop()  # idempotent
    assert cluster.state is ClusterState.STOPPED
    with pytest.raises(LocalClusterError):
        await cluster.start()


async def test_failed_start_raises_with_log_tail_and_kills_everything() -> None:
    before = _java_pids()
    cluster = LocalCluster(broker_properties={"broker.id": "not-a-number"}, startup_timeout_s=60)
    try:
        with pytest.raises(ClusterStartError, match="broker-0") as failure:
            await cluster.start()
        assert failure.value.server == "broker-0"
        assert "exited with code" in str(failure.value)
        assert "not-a-number" in failure.value.log_tail or "broker.id" in failure.value.log_tail
        assert cluster.failed and cluster.state is ClusterState.STOPPED
        assert _java_pids() <= before
        await cluster.stop()
        assert cluster.work_dir.is_dir()  # kept for inspection
        assert (cluster.work_dir / "broker-0" / "server.properties").is_file()
    finally:
        await cluster.stop()
        shutil.rmtree(cluster.work_dir, ignore_errors=True)


async def test_a_start_whose_broker_port_was_taken_meanwhile_starts_again_on_other_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first attempt's broker port is one this test listens on (as another process may
    # take a picked port before the broker binds it); later attempts pick ports as usual.
    picks = []

    def pick(count: int) -> list[int]:
        ports = _processes.free_ports(count)
        if not picks:
            ports[1] = taken.getsockname()[1]  # broker 0 (plan_ports: ZooKeeper first)
        picks.append(ports)
        return ports

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setattr(_cluster_config, "free_ports", pick)
        async with LocalCluster(work_dir=tmp_path / "cluster", startup_timeout_s=60) as cluster:
            assert len(picks) == 2
            assert cluster.work_dir == tmp_path / "cluster" / "start-attempt-2"
            assert cluster.bootstrap_servers == f"127.0.0.1:{picks[1][1]}"
            await cluster.create_topic("after-a-retry", 1)
            await cluster.produce("after-a-retry", [(b"k", b"v")])
            assert await cluster.log_end_offsets("after-a-retry") == {0: 1}
        # The failed attempt's directory is kept, with the broker's bind failure in its log.
        failed_log = tmp_path / "cluster" / "logs" / "broker-0.log"
        assert "Address already in use" in failed_log.read_text()


async def test_fault_tools(tmp_path: Path) -> None:
    async with LocalCluster(work_dir=tmp_path / "cluster") as cluster:
        topic = "faults"
        await cluster.create_topic(topic, 2)
        assert await cluster.produce(topic, [(None, b"a")] * 100) == 100

        cluster.pause_broker(0)
        assert "paused" in repr(cluster)
        cluster.resume_broker(0)
        assert await cluster.produce(topic, [(None, b"b")] * 10) == 10

        old_pid = cluster.pids["broker-0"]
        cluster.kill_broker(0)
        assert _process_gone(old_pid) and "broker-0" not in cluster.pids
        began = time.monotonic()
        await cluster.restart_broker(0)  # waits for the dead broker's session to expire
        assert time.monotonic() - began < 60
        assert cluster.pids["broker-0"] != old_pid
        await cluster.create_topic("after-restart", 1)
        assert sum((await cluster.log_end_offsets(topic)).values()) == 110

        await cluster.stop_zookeeper()
        assert "zookeeper" not in cluster.pids
        await cluster.start_zookeeper()
        assert _four_letter_word(cluster.zookeeper_connect, b"ruok") == b"imok"
        zk = ZKClient(cluster.zookeeper_connect, session_timeout=10)
        await zk.start()
        try:
            assert await zk.exists(f"/brokers/topics/{topic}")  # same data directory
        finally:
            await zk.close()
        pids = cluster.pids
    assert all(_process_gone(pid) for pid in pids.values())
    assert (tmp_path / "cluster" / "logs" / "broker-0.log").is_file()  # caller's dir is kept


def _plugin_registered_by_entry_point() -> bool:
    return any(
        ep.value == "aiozkconsumer.testing.plugin"
        for ep in importlib.metadata.entry_points(group="pytest11")
    )


def test_plugin_attaches_server_logs_to_failures(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        """
        def test_fails(zk_kafka_cluster):
            assert zk_kafka_cluster.broker_ids == ["deliberately wrong"]
        """
    )
    args = ["-p", "no:cacheprovider"]
    if not _plugin_registered_by_entry_point():
        args += ["-p", "aiozkconsumer.testing.plugin"]
    monkeypatch.delenv("AIOZKCONSUMER_BROKERS", raising=False)
    result = pytester.runpytest_subprocess(*args)
    output = result.stdout.str()
    result.assert_outcomes(failed=1)
    assert "aiozkconsumer server logs" in output
    assert "==== zookeeper (" in output and "==== broker-0 (" in output
    kept = re.search(r"work dir \(kept\): (\S+)", output)
    assert kept is not None
    work_dir = Path(kept.group(1))
    assert work_dir.is_dir()  # the failure was recorded, so the logs survive the session
    shutil.rmtree(work_dir)
