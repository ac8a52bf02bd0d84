"""The value rules on their own: types, Java int ranges, the rules that tie keys together, and
the order in which the first broken rule is reported (no servers)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.config_rules import (
    check_group_protocol,
    check_kafka_coordinated,
    check_range,
    check_type,
)
from aiozkconsumer.errors import InvalidConfigError

INT32_MAX = 2**31 - 1


def key_of(error: pytest.ExceptionInfo[InvalidConfigError]) -> str:
    return error.value.key


def test_check_type_wants_an_int_that_is_not_a_bool() -> None:
    check_type("fetch_min_bytes", 1, int, False)
    check_type("client_id", None, str, True)
    with pytest.raises(InvalidConfigError, match=r"must be an int, got True \(bool\)") as info:
        check_type("fetch_min_bytes", True, int, False)
    assert key_of(info) == "fetch.min.bytes"
    with pytest.raises(InvalidConfigError, match=r"must be a str or None, got 3 \(int\)"):
        check_type("client_id", 3, str, True)
    with pytest.raises(InvalidConfigError, match="must be a bool"):
        check_type("auto_commit_enable", None, bool, False)


def test_check_type_never_shows_a_secret() -> None:
    with pytest.raises(InvalidConfigError) as info:
        check_type("sasl_password", 12345, str, True)
    assert "12345" not in str(info.value)
    assert "got [hidden] (int)" in str(info.value)


def test_check_range_is_bounded_by_a_java_int() -> None:
    check_range("k", 0, 0)
    check_range("k", INT32_MAX, 1)
    with pytest.raises(InvalidConfigError, match=f"between 1 and {INT32_MAX}, got 0"):
        check_range("k", 0, 1)
    with pytest.raises(InvalidConfigError, match=f"got {INT32_MAX + 1}"):
        check_range("k", INT32_MAX + 1, 1)
    with pytest.raises(InvalidConfigError, match=r"2147483647 \(or -1\), got -2"):
        check_range("k", -2, 1, extra=" (or -1)")


def group(**values: Any) -> SimpleNamespace:
    base = {
        "group_protocol": "classic",
        "group_remote_assignor": None,
        "group_coordinator": "kafka",
        "partition_assignment_strategy": None,
        "session_timeout_ms": 45000,
        "heartbeat_interval_ms": 3000,
    }
    return SimpleNamespace(**{**base, **values})


def test_group_protocol_rules() -> None:
    check_group_protocol(group())  # type: ignore[arg-type]
    check_group_protocol(group(group_protocol="consumer", group_remote_assignor="uniform"))  # type: ignore[arg-type]
    broken = [
        (group(group_protocol="eager"), "group.protocol"),
        (group(group_remote_assignor="uniform"), "group.remote.assignor"),  # classic
        (group(group_protocol="consumer", group_remote_assignor="sticky"), "group.remote.assignor"),
        (group(group_protocol="consumer", group_coordinator="zookeeper"), "group.protocol"),
        (group(group_protocol="consumer", session_timeout_ms=10000), "session.timeout.ms"),
        (group(group_protocol="consumer", heartbeat_interval_ms=1), "heartbeat.interval.ms"),
        (
            group(group_protocol="consumer", partition_assignment_strategy="roundrobin"),
            "partition.assignment.strategy",
        ),
    ]
    for config, key in broken:
        with pytest.raises(InvalidConfigError) as info:
            check_group_protocol(config)  # type: ignore[arg-type]
        assert key_of(info) == key, config


def test_a_kafka_coordinated_group_stores_offsets_in_kafka_with_the_java_reset_names() -> None:
    config = SimpleNamespace(
        bootstrap_servers="b:1",
        dual_commit_enabled=None,
        cluster_metadata_source="auto",
        auto_offset_reset="earliest",
        offsets_storage="zookeeper",
    )
    check_kafka_coordinated(config)  # type: ignore[arg-type]
    assert (config.offsets_storage, config.dual_commit_enabled) == ("kafka", False)
    assert (config.cluster_metadata_source, config.auto_offset_reset) == ("kafka", "smallest")
    for changes, key in [
        ({"bootstrap_servers": None}, "bootstrap.servers"),
        ({"bootstrap_servers": ""}, "bootstrap.servers"),
        ({"dual_commit_enabled": True}, "dual.commit.enabled"),
        ({"cluster_metadata_source": "zookeeper"}, "cluster.metadata.source"),
    ]:
        broken = SimpleNamespace(**{**vars(config), **changes})
        with pytest.raises(InvalidConfigError) as info:
            check_kafka_coordinated(broken)  # type: ignore[arg-type]
        assert key_of(info) == key


@pytest.mark.parametrize(
    ("values", "key"),
    [
        # the type check comes first, then the group, then the ranges, then the choices
        ({"fetch_min_bytes": "1", "group_id": ""}, "fetch.min.bytes"),
        ({"group_id": "", "fetch_min_bytes": 0}, "group.id"),
        ({"fetch_min_bytes": 0, "auto_offset_reset": "earliest"}, "fetch.min.bytes"),
        ({"auto_offset_reset": "earliest", "client_rack": " "}, "auto.offset.reset"),
        # the security keys after the value rules, the socket/poll rule last
        ({"client_rack": " ", "security_protocol": "TLS"}, "client.rack"),
        ({"security_protocol": "TLS", "fetch_wait_max_ms": 40000}, "security.protocol"),
        ({"fetch_wait_max_ms": 40000}, "socket.timeout.ms"),
    ],
)
def test_the_first_broken_rule_is_reported(values: dict[str, Any], key: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig(**{"group_id": "g", "zookeeper_connect": "h:1", **values})
    assert key_of(info) == key


def test_zookeeper_poll_liveness_is_for_zookeeper_coordinated_groups_only() -> None:
    on = ConsumerConfig(group_id="g", zookeeper_connect="h:1", zookeeper_poll_liveness_enable=True)
    assert on.zookeeper_poll_liveness_enable and on.max_poll_interval_ms == 300000
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig(
            group_id="g",
            group_coordinator="kafka",
            bootstrap_servers="b:1",
            zookeeper_poll_liveness_enable=True,
        )
    assert key_of(info) == "zookeeper.poll.liveness.enable"
    assert "max.poll.interval.ms" in str(info.value)
    # The interval's own range rule holds in ZooKeeper mode too.
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig(
            group_id="g",
            zookeeper_connect="h:1",
            zookeeper_poll_liveness_enable=True,
            max_poll_interval_ms=0,
        )
    assert key_of(info) == "max.poll.interval.ms"
