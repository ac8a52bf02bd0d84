"""Integration tests of the KRaft flavour of aiozkconsumer.testing (Kafka 4.x brokers).

The brokers run in KRaft mode and never touch ZooKeeper; ZooKeeper still runs for the
consumers. Most tests share the plugin's ``kraft_cluster``; the fault test starts its own
two-broker cluster (a combined broker+controller node and a broker-only node).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition
from aiozk import ZKClient

from aiozkconsumer.errors import UnknownTopicError
from aiozkconsumer.testing import (
    ClusterState,
    LocalCluster,
    LocalClusterError,
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
    out = subprocess.run(["pgrep", "-x", "java"], capture_output=True, text=True, check=False)
    return {int(line) for line in out.stdout.split()}


async def _zk(cluster: LocalCluster) -> ZKClient:
    zk = ZKClient(cluster.zookeeper_connect, session_timeout=10)
    await zk.start()
    return zk


@pytest.fixture
async def kraft_zk(kraft_cluster: LocalCluster) -> AsyncIterator[ZKClient]:
    """A ZooKeeper client on the KRaft session cluster's ZooKeeper."""
    zk = await _zk(kraft_cluster)
    try:
        yield zk
    finally:
        await zk.close()


async def _describe_cluster(cluster: LocalCluster) -> dict[str, Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    await admin.start()
    try:
        description: dict[str, Any] = await admin.describe_cluster()
    finally:
        await admin.close()
    return description


async def _read_all(cluster: LocalCluster, topic: str) -> dict[int, list[bytes]]:
    """Every record value of every partition, as ``{partition: [value, ...]}``."""
    end = await cluster.log_end_offsets(topic)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in end]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records: dict[int, list[bytes]] = {p: [] for p in end}
        async with asyncio.timeout(60):
            while any(len(records[p]) < end[p] for p in end):
                batch = await consumer.getmany(timeout_ms=500)
                for tp, msgs in batch.items():
                    records[tp.partition].extend(m.value for m in msgs)
    finally:
        await consumer.stop()
    return records


# ---- the session cluster -------------------------------------------------------------------


async def test_brokers_are_known_from_kafka_metadata_only(
    kraft_cluster: LocalCluster, kraft_zk: ZKClient
) -> None:
    cluster = kraft_cluster
    assert cluster.flavour == "kraft" and cluster.kraft
    assert cluster.state is ClusterState.RUNNING
    assert "kraft" in repr(cluster)
    assert _four_letter_word(cluster.zookeeper_connect, b"ruok") == b"imok"
    # The brokers never registered in ZooKeeper ...
    assert not await kraft_zk.exists("/brokers")
    # ... but Kafka metadata lists every one of them at its address.
    description = await _describe_cluster(cluster)
    brokers = {b["node_id"]: f"{b['host']}:{b['port']}" for b in description["brokers"]}
    assert brokers == {b: cluster.broker_address(b) for b in cluster.broker_ids}
    assert description["cluster_id"]
    log = cluster.log_tail("broker-0", lines=100_000)
    assert "KafkaRaftServer" in log and "Kafka Server started" in log
    assert (
        "zookeeper.connect" not in (cluster.work_dir / "broker-0" / "server.properties").read_text()
    )


async def test_create_topic_produce_and_offsets(
    kraft_cluster: LocalCluster, kraft_zk: ZKClient, unique_topic: str
) -> None:
    cluster = kraft_cluster
    await cluster.create_topic(unique_topic, 3, config={"retention.ms": "3600000"})
    assert not await kraft_zk.exists(f"/brokers/topics/{unique_topic}")
    assert await cluster.log_end_offsets(unique_topic) == {0: 0, 1: 0, 2: 0}
    with pytest.raises(LocalClusterError, match="TopicAlreadyExists"):
        await cluster.create_topic(unique_topic, 3)

    n = 5000
    assert await cluster.produce(unique_topic, ((None, b"v%05d" % i) for i in range(n))) == n
    assert (
        await cluster.produce(unique_topic, [(b"k", b"p1-%d" % i) for i in range(50)], partition=1)
        == 50
    )
    assert await cluster.produce_to_partitions(unique_topic, {2: [(None, b"p2")] * 20}) == 20
    end = await cluster.log_end_offsets(unique_topic)
    assert sorted(end) == [0, 1, 2] and sum(end.values()) == n + 70
    assert await cluster.beginning_offsets(unique_topic) == {0: 0, 1: 0, 2: 0}
    stored = await _read_all(cluster, unique_topic)
    assert stored[1][-50:] == [b"p1-%d" % i for i in range(50)]  # order kept per partition
    assert sorted(v for vs in stored.values() for v in vs if v.startswith(b"v")) == [
        b"v%05d" % i for i in range(n)
    ]


async def test_unknown_topic_is_reported(kraft_cluster: LocalCluster, unique_topic: str) -> None:
    with pytest.raises(UnknownTopicError):
        await kraft_cluster.produce(unique_topic, [(None, b"x")])
    with pytest.raises(UnknownTopicError):
        await kraft_cluster.log_end_offsets(unique_topic)


async def test_any_cluster_runs_the_test_on_each_flavour(
    any_cluster: LocalCluster,
    any_zk_client: ZKClient,
    unique_topic: str,
    request: pytest.FixtureRequest,
) -> None:
    flavour = {"zk": "zookeeper", "kraft": "kraft"}[request.node.callspec.id]
    assert any_cluster.flavour == flavour
    await any_cluster.create_topic(unique_topic, 2)
    assert await any_cluster.produce(unique_topic, [(None, b"x")] * 10) == 10
    assert sum((await any_cluster.log_end_offsets(unique_topic)).values()) == 10
    # Only ZooKeeper-mode brokers write the /brokers tree the old consumer reads.
    in_zookeeper = await any_zk_client.exists(f"/brokers/topics/{unique_topic}")
    assert bool(in_zookeeper) is (flavour == "zookeeper")


# ---- provisioning ---------------------------------------------------------------------------


def test_kraft_provisioning_is_idempotent(monkeypatch: pytest.MonkeyPatch) -> None:
    home = provision_kafka(flavour="kraft", quiet=True)  # the session cluster provisioned it
    assert home.name == f"kafka-{provision_module.KRAFT_KAFKA_VERSION}"
    libs = sorted(p.name for p in (home / "libs").glob("*.jar"))
    assert f"kafka_2.13-{provision_module.KRAFT_KAFKA_VERSION}.jar" in libs
    assert any(name.startswith("log4j-slf4j-impl-") for name in libs)
    assert not any(name.startswith("zookeeper-") for name in libs)
    pom_digest = hashlib.sha256(provision_module.KRAFT_POM_PATH.read_bytes()).hexdigest()
    assert (home / ".complete").read_text().strip() == pom_digest
    assert provision_kafka(quiet=True) != home  # the default is still the 3.9 runtime

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("provision_kafka ran a tool although the cache is complete")

    monkeypatch.setattr(subprocess, "Popen", forbidden)
    monkeypatch.setattr(shutil, "which", forbidden)
    assert provision_kafka(flavour="kraft", quiet=True) == home


def test_provision_cli_takes_a_flavour(capsys: pytest.CaptureFixture[str]) -> None:
    assert provision_module.main(["--flavour", "kraft", "--quiet"]) == 0
    (kraft_libs,) = capsys.readouterr().out.split()
    assert any(Path(kraft_libs).glob("kafka_2.13-4.*.jar"))
    assert provision_module.main(["--flavour", "all", "--quiet"]) == 0
    zk_libs, kraft_again = capsys.readouterr().out.split()
    assert any(Path(zk_libs).glob("kafka_2.13-3.9.*.jar")) and kraft_again == kraft_libs


def test_unknown_flavours_are_rejected() -> None:
    with pytest.raises(ValueError, match="flavour"):
        LocalCluster(flavour="zk")
    with pytest.raises(ValueError, match="flavour"):
        provision_kafka(flavour="kafka-2")
    with pytest.raises(SystemExit):
        provision_module.main(["--flavour", "kafka-2"])


# ---- an own cluster: faults and stop -------------------------------------------------------


async def test_two_broker_kraft_cluster_survives_faults_and_stops_cleanly(tmp_path: Path) -> None:
    cluster = LocalCluster(brokers=2, flavour="kraft", work_dir=tmp_path / "cluster")
    async with cluster:
        assert set(cluster.pids) == {"zookeeper", "broker-0", "broker-1"}
        props = (cluster.work_dir / "broker-1" / "server.properties").read_text()
        assert "process.roles=broker\n" in props  # broker-only; broker 0 is the controller
        topic = "faults"
        await cluster.create_topic(topic, 4)
        assert await cluster.produce(topic, [(None, b"a")] * 100) == 100

        cluster.pause_broker(1)
        assert "paused" in repr(cluster)
        cluster.resume_broker(1)

        old_pid = cluster.pids["broker-1"]
        cluster.kill_broker(1)
        assert _process_gone(old_pid) and "broker-1" not in cluster.pids
        began = time.monotonic()
        await cluster.restart_broker(1)  # no ZooKeeper registration to wait for
        assert time.monotonic() - began < 60
        assert cluster.pids["broker-1"] != old_pid

        old_pid = cluster.pids["broker-0"]
        await cluster.restart_broker(0)  # graceful restart of the controller node
        assert cluster.pids["broker-0"] != old_pid
        description = await _describe_cluster(cluster)
        assert sorted(b["node_id"] for b in description["brokers"]) == [0, 1]

        await cluster.create_topic("after-restarts", 2)
        assert await cluster.produce(topic, [(None, b"b")] * 10) == 10
        assert sum((await cluster.log_end_offsets(topic)).values()) == 110

        zk = await _zk(cluster)
        try:
            assert not await zk.exists("/brokers")
        finally:
            await zk.close()
        pids = cluster.pids
    assert cluster.state is ClusterState.STOPPED
    assert all(_process_gone(pid) for pid in pids.values())
    assert not (set(pids.values()) & _java_pids())
    assert cluster.pids == {}


# ---- the plugin -----------------------------------------------------------------------------


def test_any_cluster_is_parametrized_with_zk_and_kraft_ids(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_both(any_cluster):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_both[[]zk[]]", "*test_both[[]kraft[]]"])


def test_plugin_attaches_kraft_server_logs_to_failures(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("any_cluster", ["kraft"], indirect=True)
        def test_fails(any_cluster):
            assert any_cluster.flavour == "deliberately wrong"
        """
    )
    monkeypatch.delenv("AIOZKCONSUMER_BROKERS", raising=False)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    output = result.stdout.str()
    result.assert_outcomes(failed=1)
    assert "aiozkconsumer server logs (kraft)" in output
    assert "==== zookeeper (" in output and "==== broker-0 (" in output
    kept = re.search(r"work dir \(kept\): (\S+)", output)
    assert kept is not None
    work_dir = Path(kept.group(1))
    assert work_dir.is_dir()  # the failure was recorded, so the logs survive the session
    shutil.rmtree(work_dir)
