"""Laying a local cluster out, without starting a server: the work directory, the configs
and command lines of ZooKeeper and the brokers in both flavours, the KRaft storage format
commands, and a secured cluster's listeners (``java`` is never run)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from aiozkconsumer.testing._render import KRAFT_CONTROLLER_ID
from aiozkconsumer.testing.cluster import ClusterState, LocalCluster
from aiozkconsumer.testing.security import SECURE_LISTENERS, ClusterSecurity

# start() gives the ZooKeeper flavour's brokers ZooKeeper's jars, the KRaft nodes Kafka 4's.
ZK_LIBS = Path("/jars/zookeeper/libs")
BROKER_LIBS = Path("/jars/broker/libs")


def properties(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs if not key.startswith("#")}


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def configured(cluster: LocalCluster) -> Path:
    cluster._configure("java", ZK_LIBS, BROKER_LIBS)
    return cluster.work_dir


def test_zookeeper_flavour_brokers_register_in_zookeeper(tmp_path: Path) -> None:
    cluster = LocalCluster(
        brokers=2,
        work_dir=tmp_path,
        zk_tick_time_ms=250,
        broker_racks=["r1", "r2"],
        broker_properties={"num.partitions": "3"},
        request_log=True,
    )
    work = configured(cluster)
    assert work == tmp_path.resolve()
    zoo = properties(work / "zookeeper" / "zoo.cfg")
    assert zoo["tickTime"] == "250"
    assert int(zoo["clientPort"]) == port_of(cluster.zookeeper_connect)
    assert "secureClientPort" not in zoo
    addresses = cluster.bootstrap_servers.split(",")
    assert len(set(addresses + [cluster.zookeeper_connect])) == 3  # one port each
    for broker_id in (0, 1):
        props = properties(work / f"broker-{broker_id}" / "server.properties")
        assert props["broker.id"] == str(broker_id)
        assert props["zookeeper.connect"] == cluster.zookeeper_connect
        assert props["broker.rack"] == f"r{broker_id + 1}"
        assert props["num.partitions"] == "3"
        assert str(port_of(cluster.broker_address(broker_id))) in props["listeners"]
        log_config = (work / f"broker-{broker_id}" / "log4j.properties").read_text()
        assert str(cluster.request_log_files[broker_id]) in log_config
    assert set(cluster.log_files) == {"zookeeper", "broker-0", "broker-1"}
    assert cluster.request_log_files[1] == work / "logs" / "broker-1-requests.log"
    assert cluster._format_cmds == {}
    assert any(str(ZK_LIBS) in arg for arg in cluster._zk().cmd)
    assert any(str(BROKER_LIBS) in arg for arg in cluster._broker(1).cmd)
    assert cluster.state is ClusterState.NEW and cluster.pids == {}


def test_kraft_nodes_get_a_controller_and_storage_format_commands(tmp_path: Path) -> None:
    cluster = LocalCluster(brokers=2, flavour="kraft", work_dir=tmp_path)
    work = configured(cluster)
    controller = properties(work / "broker-0" / "server.properties")
    broker = properties(work / "broker-1" / "server.properties")
    assert controller["process.roles"] == "broker,controller"
    assert broker["process.roles"] == "broker"
    assert controller["node.id"] == "0" and broker["node.id"] == "1"
    assert "zookeeper.connect" not in broker
    assert (work / "broker-1" / "log4j2.properties").exists()
    assert any(str(BROKER_LIBS) in arg for arg in cluster._broker(0).cmd)
    assert any(str(ZK_LIBS) in arg for arg in cluster._zk().cmd)  # ZooKeeper stays on 3.9
    commands = cluster._format_cmds
    assert set(commands) == {0, 1}
    assert "--standalone" in commands[KRAFT_CONTROLLER_ID]
    assert "--no-initial-controllers" in commands[1]
    ids = {cmd[cmd.index("--cluster-id") + 1] for cmd in commands.values()}
    assert len(ids) == 1  # one cluster


def test_a_reused_kraft_work_dir_keeps_its_cluster_id(tmp_path: Path) -> None:
    data = tmp_path / "broker-0" / "data"
    data.mkdir(parents=True)
    (data / "meta.properties").write_text("version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n")
    cluster = LocalCluster(flavour="kraft", work_dir=tmp_path)
    configured(cluster)
    (command,) = cluster._format_cmds.values()
    assert command[command.index("--cluster-id") + 1] == "AAAAAAAAAAAAAAAAAAAAAA"


def test_a_secured_cluster_gets_its_listeners_and_zookeepers_tls_port(tmp_path: Path) -> None:
    pytest.importorskip("trustme")
    cluster = LocalCluster(
        brokers=2, work_dir=tmp_path, security=ClusterSecurity(zookeeper_tls=True)
    )
    work = configured(cluster)
    assert cluster.security.ca_file.parent == work / "security"
    zoo = properties(work / "zookeeper" / "zoo.cfg")
    assert int(zoo["secureClientPort"]) == port_of(cluster.zookeeper_secure_connect)
    ports = {
        port_of(a)
        for name in SECURE_LISTENERS
        for a in cluster.bootstrap_servers_for(name).split(",")
    }
    assert len(ports) == 2 * len(SECURE_LISTENERS)
    assert port_of(cluster.zookeeper_connect) not in ports
    listeners = properties(work / "broker-0" / "server.properties")["listeners"]
    assert all(f"{name}://" in listeners for name in SECURE_LISTENERS)
    mtls = cluster.client_properties("MTLS")
    assert mtls["ssl.certfile"] == str(cluster.security.client_cert_file)
    assert set(cluster.request_log_files) == {0, 1}


def test_a_configured_cluster_that_never_ran_stops_and_keeps_a_given_work_dir(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(work_dir=tmp_path)
    configured(cluster)
    asyncio.run(cluster.stop())
    assert cluster.state is ClusterState.STOPPED
    assert (tmp_path / "zookeeper" / "zoo.cfg").exists()  # the caller's directory
