"""The local cluster's settings and port plan on their own: what ``LocalCluster(...)``
refuses, which reserved port serves what, where the request logs go (no servers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiozkconsumer.testing._cluster_settings import (
    DEFAULT_BROKER_HEAP,
    ClusterSettings,
    PortPlan,
    heap_bytes,
    plan_ports,
    request_log_paths,
    security_options,
)
from aiozkconsumer.testing._render import broker_command
from aiozkconsumer.testing.cluster import LocalCluster
from aiozkconsumer.testing.security import SECURE_LISTENERS, ClusterSecurity


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"flavour": "kraft4"}, "flavour must be one of zookeeper, kraft, got 'kraft4'"),
        ({"brokers": 0}, "brokers must be at least 1, got 0"),
        ({"zk_tick_time_ms": 0}, "zk_tick_time_ms must be positive, got 0"),
        ({"startup_timeout_s": 0}, "startup_timeout_s must be positive, got 0$"),
        ({"proxy_links": -1}, "proxy_links must be >= 0, got -1"),
        (
            {"brokers": 2, "broker_racks": ["a"]},
            r"a non-blank rack for each of the 2 brokers, got \['a'\]",
        ),
        ({"brokers": 2, "broker_racks": ["a", " "]}, "non-blank rack"),
        ({"broker_heap": "1G "}, "broker_heap must be a JVM heap size .* got '1G '"),
        ({"broker_heap": "128m"}, "at least 256m"),
        ({"broker_heap": "1024"}, "digits and k, m or g"),
    ],
)
def test_bad_settings_are_refused(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LocalCluster(**arguments)
    racks = arguments.get("broker_racks")
    if racks is not None:
        arguments["broker_racks"] = tuple(racks)
    with pytest.raises(ValueError, match=message):
        ClusterSettings(**arguments)


def test_heap_sizes_read_as_the_jvm_reads_them() -> None:
    assert heap_bytes("512m") == 512 << 20
    assert heap_bytes("1g") == heap_bytes("1G") == heap_bytes("1024M") == 1 << 30
    assert heap_bytes("262144k") == 256 << 20
    for bad in ("255m", "1.5g", "g", "-1g", "1t", "", " 1g"):
        assert heap_bytes(bad) is None, bad


def test_the_broker_heap_reaches_the_broker_command_line() -> None:
    assert ClusterSettings().broker_heap == DEFAULT_BROKER_HEAP == "512m"
    cmd = broker_command("java", Path("/libs"), "-Dlog", Path("/c"), heap="1g")
    assert [a for a in cmd if a.startswith("-Xmx")] == ["-Xmx1g"]
    assert cmd.index("-Xmx1g") < cmd.index("kafka.Kafka")
    default = broker_command("java", Path("/libs"), "-Dlog", Path("/c"))
    assert [a for a in default if a.startswith("-Xmx")] == ["-Xmx512m"]


def test_the_first_bad_setting_is_named() -> None:
    with pytest.raises(ValueError, match="flavour"):
        LocalCluster(flavour="x", brokers=0)
    with pytest.raises(ValueError, match="proxy_links"):
        LocalCluster(proxy_links=-1, security="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="security"):
        LocalCluster(security="yes", broker_racks=[])  # type: ignore[arg-type]


def test_security_is_a_bool_an_options_object_or_none() -> None:
    assert security_options(True) == ClusterSecurity()
    assert security_options(False) is None and security_options(None) is None
    options = ClusterSecurity(zookeeper_tls=True)
    assert security_options(options) is options
    assert LocalCluster(security=options).security_options is options
    with pytest.raises(TypeError, match="security must be a bool, a ClusterSecurity or None"):
        ClusterSettings(security="yes")  # type: ignore[arg-type]


def test_the_arguments_are_copied_and_normalised(tmp_path: Path) -> None:
    overrides = {"num.partitions": "3"}
    cluster = LocalCluster(
        brokers=2,
        work_dir=str(tmp_path),  # type: ignore[arg-type]
        broker_properties=overrides,
        broker_racks=iter(["r1", "r2"]),  # type: ignore[arg-type]
    )
    overrides["num.partitions"] = "9"
    settings = cluster._settings
    assert settings.broker_properties == {"num.partitions": "3"}
    assert settings.work_dir == tmp_path
    assert settings.broker_racks == ("r1", "r2")
    assert settings.broker_ids == [0, 1]
    assert not settings.kraft and ClusterSettings(flavour="kraft").kraft


def test_broker_overrides_put_the_rack_under_the_given_properties() -> None:
    settings = ClusterSettings(
        brokers=2, broker_racks=("r1", "r2"), broker_properties={"broker.rack": "forced"}
    )
    props = settings.broker_overrides(1)
    assert props["broker.rack"] == "forced"
    assert "replica.selector.class" in props
    racks = ClusterSettings(brokers=2, broker_racks=("r1", "r2")).broker_overrides(1)
    assert racks["broker.rack"] == "r2"
    assert ClusterSettings(broker_properties={"a": "b"}).broker_overrides(0) == {"a": "b"}


def test_a_plain_cluster_needs_zookeeper_and_one_port_a_broker() -> None:
    settings = ClusterSettings(brokers=3)
    assert PortPlan.count(settings) == 4
    plan = plan_ports(settings, [10, 11, 12, 13])
    assert plan.zookeeper == 10
    assert plan.brokers == {0: 11, 1: 12, 2: 13}
    assert plan.controller == 13  # unused in the ZooKeeper flavour
    assert list(plan.links) == [] and plan.secure_listeners == {}
    assert plan.zookeeper_tls is None


def test_kraft_adds_the_controller_port_after_the_brokers() -> None:
    settings = ClusterSettings(brokers=2, flavour="kraft")
    plan = plan_ports(settings, [10, 11, 12, 13])
    assert plan.brokers == {0: 11, 1: 12}
    assert plan.controller == 13


def test_links_take_a_listener_and_a_proxy_per_broker_and_a_zookeeper_proxy() -> None:
    settings = ClusterSettings(brokers=2, proxy_links=2, flavour="kraft")
    count = PortPlan.count(settings)
    assert count == 4 + 2 * (1 + 2 * 2)
    plan = plan_ports(settings, list(range(100, 100 + count)))
    assert plan.controller == 103
    assert list(plan.links) == list(range(104, 114))


def test_secured_listeners_come_last_then_zookeepers_tls_port() -> None:
    settings = ClusterSettings(
        brokers=2, proxy_links=1, security=ClusterSecurity(zookeeper_tls=True)
    )
    n = len(SECURE_LISTENERS)
    assert PortPlan.count(settings) == 3 + 5 + 2 * n + 1
    ports = list(range(200, 200 + PortPlan.count(settings)))
    plan = plan_ports(settings, ports)
    assert list(plan.links) == ports[3:8]
    assert plan.secure_listeners[0] == dict(zip(SECURE_LISTENERS, ports[8 : 8 + n], strict=True))
    assert list(plan.secure_listeners[1].values()) == ports[8 + n : 8 + 2 * n]
    assert plan.zookeeper_tls == ports[-1]
    without_tls = ClusterSettings(brokers=1, security=ClusterSecurity())
    assert plan_ports(without_tls, list(range(2 + n))).zookeeper_tls is None


def test_every_reserved_port_serves_one_thing() -> None:
    settings = ClusterSettings(
        brokers=3, proxy_links=2, flavour="kraft", security=ClusterSecurity(zookeeper_tls=True)
    )
    ports = list(range(1000, 1000 + PortPlan.count(settings)))
    plan = plan_ports(settings, ports)
    used = [
        plan.zookeeper,
        *plan.brokers.values(),
        plan.controller,
        *plan.links,
        *(p for listeners in plan.secure_listeners.values() for p in listeners.values()),
        plan.zookeeper_tls,
    ]
    assert sorted(used) == ports


def test_the_plan_needs_exactly_the_ports_it_counts() -> None:
    settings = ClusterSettings(brokers=2)
    with pytest.raises(ValueError, match="3 ports needed, got 2"):
        plan_ports(settings, [1, 2])
    with pytest.raises(ValueError, match="3 ports needed, got 4"):
        plan_ports(settings, [1, 2, 3, 4])


def test_request_logs_are_kept_when_asked_for_or_by_a_secured_cluster(tmp_path: Path) -> None:
    assert request_log_paths(ClusterSettings(brokers=2), tmp_path) == {}
    expected = {b: tmp_path / f"broker-{b}-requests.log" for b in (0, 1)}
    asked = ClusterSettings(brokers=2, request_log=True)
    assert request_log_paths(asked, tmp_path) == expected
    assert (
        request_log_paths(ClusterSettings(brokers=2, security=ClusterSecurity()), tmp_path)
        == expected
    )
    quiet = ClusterSettings(brokers=2, security=ClusterSecurity(request_log=False))
    assert request_log_paths(quiet, tmp_path) == {}
