"""``LocalCluster`` as one object over its parts, without starting a server: its public
names, what it says before a start, and its lifecycle refusals."""

from __future__ import annotations

import asyncio

import pytest

from aiozkconsumer.testing import ClusterState as ExportedState
from aiozkconsumer.testing.cluster import ClusterState, LocalCluster, LocalClusterError

PUBLIC = {
    "aclose", "beginning_offsets", "bootstrap_servers", "bootstrap_servers_for", "broker_address",
    "broker_ids", "broker_racks", "client_properties", "create_topic", "expire_session",
    "failed", "flavour", "heal_links", "kill_broker", "kraft", "link", "links", "log_end_offsets",
    "log_files", "log_tail", "mark_failed", "pause_broker", "pids", "principals_seen", "produce",
    "produce_to_partitions", "request_log_files", "requests_logged", "restart_broker",
    "resume_broker", "secured", "security", "security_options", "start", "start_seconds",
    "start_zookeeper", "state", "stop", "stop_zookeeper", "wait_for_principal", "work_dir",
    "zookeeper_client_properties", "zookeeper_connect", "zookeeper_secure_connect",
}  # fmt: skip


def test_every_public_name_is_on_the_facade() -> None:
    assert PUBLIC <= set(dir(LocalCluster))
    assert LocalCluster.__module__ == "aiozkconsumer.testing.cluster"
    assert ExportedState is ClusterState


def test_a_new_cluster_describes_itself_without_servers() -> None:
    cluster = LocalCluster(brokers=2, flavour="kraft", proxy_links=1, security=True)
    assert repr(cluster) == "<LocalCluster [NEW, kraft, 1 proxied links, secured]>"
    assert cluster.state is ClusterState.NEW
    assert cluster.kraft and cluster.flavour == "kraft" and cluster.secured
    assert cluster.broker_ids == [0, 1]
    assert cluster.broker_racks == {}
    assert cluster.log_files == {} and cluster.pids == {}
    assert cluster.log_tail() == ""
    assert cluster.start_seconds is None and not cluster.failed
    racked = LocalCluster(brokers=2, broker_racks=["a", "b"])
    assert racked.broker_racks == {0: "a", 1: "b"}


@pytest.mark.parametrize(
    "read",
    [
        lambda c: c.zookeeper_connect,
        lambda c: c.bootstrap_servers,
        lambda c: c.work_dir,
        lambda c: c.links,
        lambda c: c.security,
        lambda c: c.bootstrap_servers_for("SSL"),
    ],
)
def test_what_a_start_makes_is_refused_before_it(read: object) -> None:
    cluster = LocalCluster(proxy_links=1, security=True)
    with pytest.raises(LocalClusterError):
        read(cluster)  # type: ignore[operator]


def test_no_broker_before_a_start() -> None:
    with pytest.raises(KeyError, match="no broker 0"):
        LocalCluster().kill_broker(0)


def test_a_failure_is_recorded_by_the_async_with_block() -> None:
    cluster = LocalCluster()
    cluster._block_failed(RuntimeError("boom"))
    assert cluster.failed and "failed" in repr(cluster)


def test_a_stopped_cluster_cannot_start_or_run_anything() -> None:
    async def scenario() -> None:
        cluster = LocalCluster()
        await cluster.stop()  # nothing was started: nothing to stop
        assert cluster.state is ClusterState.STOPPED
        await cluster.stop()  # idempotent
        with pytest.raises(LocalClusterError, match="start\\(\\) on a STOPPED cluster"):
            await cluster.start()
        with pytest.raises(LocalClusterError, match="not running \\(STOPPED\\)"):
            await cluster.create_topic("t", 1)
        with pytest.raises(LocalClusterError, match="not running"):
            await cluster.stop_zookeeper()

    asyncio.run(scenario())
