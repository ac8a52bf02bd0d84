"""Unit tests of aiozkconsumer.config: defaults, derived defaults, validation, properties."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiozkconsumer.config import (
    DEFAULT_QUEUED_MAX_MESSAGES_KBYTES,
    ConsumerConfig,
    UnknownConfigWarning,
    validate_bootstrap_servers,
    validate_group_id,
    validate_zookeeper_connect,
)
from aiozkconsumer.errors import InvalidConfigError

REQUIRED: dict[str, Any] = {"group_id": "g", "zookeeper_connect": "127.0.0.1:2181"}
REQUIRED_PROPS = {"group.id": "g", "zookeeper.connect": "127.0.0.1:2181"}

# The table of reference/old-consumer.md §1 (ConsumerConfig.scala + ZKConfig, 0.10.2).
ORIGINAL_DEFAULTS: dict[str, object] = {
    "consumer.id": None,
    "zookeeper.session.timeout.ms": 6000,
    "zookeeper.sync.time.ms": 2000,
    "socket.timeout.ms": 30000,
    "socket.receive.buffer.bytes": 65536,
    "fetch.message.max.bytes": 1048576,
    "fetch.max.bytes": 52428800,
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": 100,
    "num.consumer.fetchers": 1,
    "check.crcs": True,
    "fetch.io.thread.enable": False,
    "crc.error.action": "raise",
    "auto.commit.enable": True,
    "auto.commit.interval.ms": 60000,
    "rebalance.max.retries": 4,
    "refresh.leader.backoff.ms": 200,
    "auto.offset.reset": "largest",
    "consumer.timeout.ms": -1,
    "exclude.internal.topics": True,
    "offsets.storage": "zookeeper",
    "offsets.channel.backoff.ms": 1000,
    "offsets.channel.socket.timeout.ms": 10000,
    "offsets.commit.max.retries": 5,
    "bootstrap.servers": None,
    "cluster.metadata.source": "auto",
    # New keys; the Kafka-coordinated ones take the Java KafkaConsumer's defaults.
    "group.coordinator": "zookeeper",
    "session.timeout.ms": 45000,
    "heartbeat.interval.ms": 3000,
    "max.poll.interval.ms": 300000,
    "group.protocol": "classic",
    "group.remote.assignor": None,
    "group.instance.id": None,
    "interceptor.classes": None,
    "offsets.malformed.reset": False,
    "zookeeper.poll.liveness.enable": False,
    # Kafka connection security and what is read: the Java KafkaConsumer's keys and defaults.
    "security.protocol": "PLAINTEXT",
    "ssl.cafile": None,
    "ssl.certfile": None,
    "ssl.keyfile": None,
    "ssl.password": None,
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.check.hostname": None,
    "sasl.mechanism": "GSSAPI",
    "sasl.username": None,
    "sasl.password": None,
    "sasl.jaas.config": None,
    "sasl.kerberos.service.name": "kafka",
    "sasl.kerberos.domain.name": None,
    "sasl.oauthbearer.token.endpoint.url": None,
    "sasl.oauthbearer.client.id": None,
    "sasl.oauthbearer.client.secret": None,
    "sasl.oauthbearer.scope": None,
    "reconnect.backoff.max.ms": 1000,
    "isolation.level": "read_uncommitted",
    "client.rack": None,
    "metadata.max.age.ms": 300_000,
    # ZooKeeper security: Kafka's own ZooKeeper client keys.
    "zookeeper.auth": None,
    "zookeeper.set.acl": False,
    "zookeeper.ssl.client.enable": False,
    "zookeeper.ssl.cafile": None,
    "zookeeper.ssl.certfile": None,
    "zookeeper.ssl.keyfile": None,
    "zookeeper.ssl.password": None,
    "zookeeper.ssl.endpoint.identification.algorithm": "https",
}
# Objects given from code only (no properties key).
OBJECT_FIELDS = ("ssl.context", "sasl.oauthbearer.token.provider")
DERIVED = (
    "partition.assignment.strategy",
    "zookeeper.connection.timeout.ms",
    "rebalance.backoff.ms",
    "client.id",
    "dual.commit.enabled",
    # The original bounded each stream's queue at 2 chunks; unset, a byte budget bounds it.
    "queued.max.message.chunks",
    "queued.max.messages.kbytes",
)


def make(**changes: Any) -> ConsumerConfig:
    return ConsumerConfig(**{**REQUIRED, **changes})


def raises_for(key: str, **changes: Any) -> InvalidConfigError:
    with pytest.raises(InvalidConfigError) as info:
        make(**changes)
    assert info.value.key == key, str(info.value)
    return info.value


# --- defaults ---------------------------------------------------------------------------------


def test_defaults_equal_the_original_table() -> None:
    config = make()
    for key, default in ORIGINAL_DEFAULTS.items():
        value = getattr(config, key.replace(".", "_"))
        assert value == default and type(value) is type(default), key


def test_the_queue_bound_is_a_byte_budget_unless_chunks_are_set() -> None:
    assert make().effective_queued_max_messages_kbytes == DEFAULT_QUEUED_MAX_MESSAGES_KBYTES
    # The original's key alone keeps its meaning: chunks only, no byte bound.
    chunks = make(queued_max_message_chunks=2)
    assert (chunks.queued_max_message_chunks, chunks.effective_queued_max_messages_kbytes) == (
        2,
        None,
    )
    both = make(queued_max_message_chunks=4, queued_max_messages_kbytes=1024)
    assert both.effective_queued_max_messages_kbytes == 1024
    props = ConsumerConfig.from_properties({**REQUIRED_PROPS, "queued.max.messages.kbytes": "64"})
    assert props.effective_queued_max_messages_kbytes == 64


def test_every_field_is_a_known_key() -> None:
    keys = {f.name.replace("_", ".") for f in dataclasses.fields(ConsumerConfig)}
    assert keys == set(ORIGINAL_DEFAULTS) | set(DERIVED) | set(OBJECT_FIELDS) | {
        "group.id",
        "zookeeper.connect",
    }


def test_group_id_and_zookeeper_connect_are_required_arguments() -> None:
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig(group_id="g")  # zookeeper.connect: required by the default coordinator
    assert info.value.key == "zookeeper.connect"
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig(zookeeper_connect="h:1")  # type: ignore[call-arg]
    assert info.value.key == "group.id"


def test_an_unknown_keyword_names_the_key_and_the_nearest_known_one() -> None:
    with pytest.raises(InvalidConfigError) as info:
        make(zookeeper_conect="h:1")
    assert info.value.key == "zookeeper.conect"
    assert "zookeeper_connect" in str(info.value)
    with pytest.raises(InvalidConfigError, match="unknown consumer property 'bogus'"):
        make(bogus=1)


def test_from_properties_suggests_the_nearest_key_of_a_misspelt_one() -> None:
    with pytest.warns(
        UnknownConfigWarning, match=r"auto\.comit\.enable \(did you mean auto\.commit\.enable\?\)"
    ):
        ConsumerConfig.from_properties({**REQUIRED_PROPS, "auto.comit.enable": "true"})


def test_config_is_frozen_and_hashable() -> None:
    config = make()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.group_id = "other"  # type: ignore[misc]
    assert hash(config) == hash(make())


# --- derived defaults -------------------------------------------------------------------------


def test_client_id_defaults_to_group_id() -> None:
    config = make(group_id="billing")
    assert config.client_id is None
    assert config.effective_client_id == "billing"
    assert make(client_id="c-1").effective_client_id == "c-1"
    assert config.replace(group_id="other").effective_client_id == "other"


def test_connection_timeout_defaults_to_session_timeout() -> None:
    config = make(zookeeper_session_timeout_ms=4000)
    assert config.zookeeper_connection_timeout_ms is None
    assert config.effective_zookeeper_connection_timeout_ms == 4000
    assert make().effective_zookeeper_connection_timeout_ms == 6000
    explicit = make(zookeeper_connection_timeout_ms=1234)
    assert explicit.effective_zookeeper_connection_timeout_ms == 1234


def test_rebalance_backoff_defaults_to_sync_time() -> None:
    assert make().effective_rebalance_backoff_ms == 2000
    assert make(zookeeper_sync_time_ms=500).effective_rebalance_backoff_ms == 500
    assert make(rebalance_backoff_ms=0).effective_rebalance_backoff_ms == 0


def test_dual_commit_defaults_to_kafka_storage() -> None:
    assert make().effective_dual_commit_enabled is False
    assert make(offsets_storage="kafka").effective_dual_commit_enabled is True
    assert (
        make(offsets_storage="kafka", dual_commit_enabled=False).effective_dual_commit_enabled
        is False
    )
    assert make(dual_commit_enabled=True).effective_dual_commit_enabled is True


def test_offsets_storage_is_lower_cased() -> None:
    config = make(offsets_storage="Kafka")
    assert config.offsets_storage == "kafka"
    assert config.effective_dual_commit_enabled is True


def test_auto_offset_reset_is_case_sensitive_as_the_original() -> None:
    raises_for("auto.offset.reset", auto_offset_reset="Smallest")


@pytest.mark.parametrize(
    ("connect", "hosts", "chroot"),
    [
        ("h:2181", "h:2181", None),
        ("h:2181/", "h:2181", None),
        ("a:1,b:2/kafka", "a:1,b:2", "/kafka"),
        ("[::1]:2181/a/b", "[::1]:2181", "/a/b"),
    ],
)
def test_zookeeper_hosts_and_chroot(connect: str, hosts: str, chroot: str | None) -> None:
    config = make(zookeeper_connect=connect)
    assert config.zookeeper_hosts == hosts
    assert config.zookeeper_chroot == chroot


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "a b", "grüppe", "g/1", "g:1", "g\n", "*"])
def test_group_id_rejects_illegal_or_empty(value: str) -> None:
    error = raises_for("group.id", group_id=value)
    assert "ASCII alphanumerics" in str(error)


@pytest.mark.parametrize("value", ["g", "A-z_0.9", "-", "..."])
def test_group_id_accepts_legal_characters(value: str) -> None:
    assert make(group_id=value).group_id == value


@pytest.mark.parametrize("field", ["client_id", "consumer_id"])
@pytest.mark.parametrize("value", ["", "a b", "x/y", "é"])
def test_client_and_consumer_id_reject_illegal(field: str, value: str) -> None:
    raises_for(field.replace("_", "."), **{field: value})


@pytest.mark.parametrize(
    "connect",
    [
        "",
        "localhost",
        "localhost:",
        ":2181",
        "h:0",
        "h:65536",
        "h:-1",
        "h:+1",
        "h:2181,",
        "h:2181,,i:2181",
        "h :2181",
        "::1:2181",
        "h:2181/a/",
        "h:2181//a",
        "h:2181/a/./b",
        "h:2181/a/../b",
        "h:2181/a\x01",
        "/chroot",
    ],
)
def test_zookeeper_connect_syntax(connect: str) -> None:
    raises_for("zookeeper.connect", zookeeper_connect=connect)


@pytest.mark.parametrize(
    "connect", ["h:1", "h:65535", "a.b-c_d:2181,10.0.0.1:2182/kafka/x", "[::1]:2181,[fe80::1]:1"]
)
def test_zookeeper_connect_accepts(connect: str) -> None:
    assert make(zookeeper_connect=connect).zookeeper_connect == connect


@pytest.mark.parametrize("servers", ["", "b", "b:0", "b:1,", "b:1/x", "b 1:9092"])
def test_bootstrap_servers_syntax(servers: str) -> None:
    raises_for("bootstrap.servers", bootstrap_servers=servers)


def test_bootstrap_servers_accepts_host_port_list() -> None:
    assert make(bootstrap_servers="k1:9092,[::1]:9093").bootstrap_servers == "k1:9092,[::1]:9093"


POSITIVE = [
    "zookeeper_session_timeout_ms",
    "zookeeper_connection_timeout_ms",
    "socket_timeout_ms",
    "fetch_message_max_bytes",
    "fetch_max_bytes",
    "fetch_min_bytes",
    "fetch_wait_max_ms",
    "num_consumer_fetchers",
    "auto_commit_interval_ms",
    "queued_max_message_chunks",
    "queued_max_messages_kbytes",
    "rebalance_max_retries",
    "refresh_leader_backoff_ms",
    "offsets_channel_backoff_ms",
    "offsets_channel_socket_timeout_ms",
]
NON_NEGATIVE = ["zookeeper_sync_time_ms", "rebalance_backoff_ms", "offsets_commit_max_retries"]


@pytest.mark.parametrize("field", POSITIVE)
def test_positive_ints_reject_zero_and_negative(field: str) -> None:
    for bad in (0, -1):
        raises_for(field.replace("_", "."), **{field: bad})
    # fetch.wait.max.ms (100 by default) must stay within socket.timeout.ms.
    assert getattr(make(**{"fetch_wait_max_ms": 1, field: 1}), field) == 1


@pytest.mark.parametrize("field", NON_NEGATIVE)
def test_non_negative_ints(field: str) -> None:
    raises_for(field.replace("_", "."), **{field: -1})
    assert getattr(make(**{field: 0}), field) == 0


@pytest.mark.parametrize("field", [*POSITIVE, *NON_NEGATIVE, "consumer_timeout_ms"])
def test_ints_are_bounded_by_java_int(field: str) -> None:
    raises_for(field.replace("_", "."), **{field: 2**31})


def test_socket_receive_buffer_allows_minus_one_only_below_one() -> None:
    assert make(socket_receive_buffer_bytes=-1).socket_receive_buffer_bytes == -1
    raises_for("socket.receive.buffer.bytes", socket_receive_buffer_bytes=0)
    raises_for("socket.receive.buffer.bytes", socket_receive_buffer_bytes=-2)


@pytest.mark.parametrize("value", [-1, 0, 1, 2**31 - 1])
def test_consumer_timeout_may_be_minus_one(value: int) -> None:
    assert make(consumer_timeout_ms=value).consumer_timeout_ms == value


@pytest.mark.parametrize("value", [-(2**31), -5, -2])
def test_consumer_timeout_below_minus_one_is_refused(value: int) -> None:
    raises_for("consumer.timeout.ms", consumer_timeout_ms=value)


@pytest.mark.parametrize(
    ("field", "good", "bad"),
    [
        ("auto_offset_reset", ["smallest", "largest"], ["earliest", "latest", "none", ""]),
        ("offsets_storage", ["zookeeper", "kafka", "ZooKeeper"], ["zk", "", "kafka "]),
        ("partition_assignment_strategy", ["range", "roundrobin"], ["sticky", "Range", ""]),
        ("cluster_metadata_source", ["auto", "zookeeper", "kafka"], ["kraft", "Auto", ""]),
    ],
)
def test_enumerated_values(field: str, good: list[str], bad: list[str]) -> None:
    for value in good:
        make(**{field: value})
    for value in bad:
        error = raises_for(field.replace("_", "."), **{field: value})
        assert "must be one of" in str(error)


def test_fetch_wait_may_not_exceed_socket_timeout() -> None:
    """As ConsumerConfig.scala's require (KAFKA-1147)."""
    assert make(fetch_wait_max_ms=30000).fetch_wait_max_ms == 30000
    error = raises_for("socket.timeout.ms", fetch_wait_max_ms=30001)
    assert "fetch.wait.max.ms" in str(error)
    raises_for("socket.timeout.ms", socket_timeout_ms=99)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("auto_commit_enable", 1),
        ("auto_commit_enable", "true"),
        ("exclude_internal_topics", None),
        ("dual_commit_enabled", 0),
        ("fetch_min_bytes", True),
        ("fetch_min_bytes", 1.0),
        ("socket_timeout_ms", "30000"),
        ("rebalance_backoff_ms", False),
        ("consumer_timeout_ms", None),
        ("group_id", 7),
        ("group_id", None),
        ("client_id", b"c"),
        ("offsets_storage", None),
        ("bootstrap_servers", ["k:9092"]),
    ],
)
def test_types_are_checked(field: str, value: object) -> None:
    error = raises_for(field.replace("_", "."), **{field: value})
    assert "must be" in str(error)


def test_replace_validates() -> None:
    config = make()
    assert config.replace(fetch_min_bytes=10).fetch_min_bytes == 10
    assert config.fetch_min_bytes == 1
    with pytest.raises(InvalidConfigError) as info:
        config.replace(num_consumer_fetchers=0)
    assert info.value.key == "num.consumer.fetchers"


# --- from_properties / to_properties ----------------------------------------------------------


def test_from_properties_parses_strings() -> None:
    config = ConsumerConfig.from_properties(
        {
            **REQUIRED_PROPS,
            "zookeeper.session.timeout.ms": "4000",
            "auto.commit.enable": "FALSE",
            "exclude.internal.topics": " True ",
            "consumer.timeout.ms": "-1",
            "fetch.min.bytes": "+5",
            "offsets.storage": "KAFKA",
            "dual.commit.enabled": "false",
            "client.id": "c1",
            "bootstrap.servers": "k:9092",
            "cluster.metadata.source": "kafka",
        }
    )
    assert config == make(
        zookeeper_session_timeout_ms=4000,
        auto_commit_enable=False,
        exclude_internal_topics=True,
        fetch_min_bytes=5,
        offsets_storage="kafka",
        dual_commit_enabled=False,
        client_id="c1",
        bootstrap_servers="k:9092",
        cluster_metadata_source="kafka",
    )


def test_from_properties_with_only_required_keys_gives_defaults() -> None:
    assert ConsumerConfig.from_properties(REQUIRED_PROPS) == make()


def test_from_properties_accepts_typed_values_and_none_as_absent() -> None:
    config = ConsumerConfig.from_properties(
        {**REQUIRED_PROPS, "fetch.min.bytes": 7, "auto.commit.enable": False, "client.id": None}
    )
    assert config == make(fetch_min_bytes=7, auto_commit_enable=False)


@pytest.mark.parametrize("missing", ["group.id", "zookeeper.connect"])
def test_from_properties_missing_required(missing: str) -> None:
    props = {k: v for k, v in REQUIRED_PROPS.items() if k != missing}
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig.from_properties(props)
    assert info.value.key == missing
    assert "missing required property" in str(info.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("fetch.min.bytes", "abc"),
        ("fetch.min.bytes", ""),
        ("fetch.min.bytes", "1.5"),
        ("fetch.min.bytes", "1_000"),
        ("fetch.min.bytes", "0x10"),
        ("zookeeper.connection.timeout.ms", "6s"),
        ("consumer.timeout.ms", "--1"),
        ("rebalance.backoff.ms", "١٢"),
    ],
)
def test_from_properties_rejects_bad_ints(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig.from_properties({**REQUIRED_PROPS, key: value})
    assert info.value.key == key
    assert "integer" in str(info.value)


@pytest.mark.parametrize("value", ["yes", "1", "0", "", "t", "truee", "on"])
@pytest.mark.parametrize(
    "key", ["auto.commit.enable", "exclude.internal.topics", "dual.commit.enabled"]
)
def test_from_properties_rejects_bad_booleans(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig.from_properties({**REQUIRED_PROPS, key: value})
    assert info.value.key == key
    assert "'true' or 'false'" in str(info.value)


def test_from_properties_validates_parsed_values() -> None:
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig.from_properties({**REQUIRED_PROPS, "queued.max.message.chunks": "0"})
    assert info.value.key == "queued.max.message.chunks"


def test_from_properties_warns_once_naming_unknown_keys() -> None:
    with pytest.warns(UnknownConfigWarning) as record:
        config = ConsumerConfig.from_properties(
            {**REQUIRED_PROPS, "no.such.key": "1", "kafka.metrics.reporters": "x", "group_id": "h"}
        )
    assert len(record) == 1
    message = str(record[0].message)
    assert "no.such.key" in message
    assert "kafka.metrics.reporters" in message
    assert "group_id (did you mean group.id?)" in message
    assert config == make()


def test_from_properties_does_not_warn_for_known_keys() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ConsumerConfig.from_properties(make(client_id="c").to_properties())


def test_to_properties_uses_dotted_keys_and_property_spelling() -> None:
    props = make(auto_commit_enable=False, rebalance_backoff_ms=10).to_properties()
    assert props["group.id"] == "g"
    assert props["auto.commit.enable"] == "false"
    assert props["exclude.internal.topics"] == "true"
    assert props["rebalance.backoff.ms"] == "10"
    assert props["consumer.timeout.ms"] == "-1"
    assert "client.id" not in props  # unset: keeps following group.id
    assert all(isinstance(v, str) for v in props.values())


def test_to_properties_round_trip_keeps_derived_defaults_derived() -> None:
    config = make(client_id=None, offsets_storage="kafka")
    back = ConsumerConfig.from_properties(config.to_properties())
    assert back == config
    assert back.replace(group_id="other").effective_client_id == "other"


LEGAL = st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True)
HOST = st.one_of(
    st.from_regex(r"[a-z0-9][a-z0-9.-]{0,15}", fullmatch=True),
    st.just("[::1]"),
)
HOST_PORT = st.builds("{}:{}".format, HOST, st.integers(1, 65535))
HOST_PORTS = st.lists(HOST_PORT, min_size=1, max_size=3).map(",".join)
CHROOT = st.one_of(
    st.just(""),
    st.just("/"),
    st.lists(LEGAL.filter(lambda s: s not in (".", "..")), min_size=1, max_size=3).map(
        lambda parts: "/" + "/".join(parts)
    ),
)
INT32 = st.integers(1, 2**31 - 1)


@st.composite
def configs(draw: st.DrawFn) -> ConsumerConfig:
    socket_timeout = draw(INT32)
    return ConsumerConfig(
        group_id=draw(LEGAL.filter(lambda s: s not in (".", ".."))),
        consumer_id=draw(st.none() | LEGAL),
        zookeeper_connect=draw(HOST_PORTS) + draw(CHROOT),
        zookeeper_session_timeout_ms=draw(INT32),
        zookeeper_connection_timeout_ms=draw(st.none() | INT32),
        zookeeper_sync_time_ms=draw(st.integers(0, 2**31 - 1)),
        socket_timeout_ms=socket_timeout,
        socket_receive_buffer_bytes=draw(st.just(-1) | INT32),
        fetch_message_max_bytes=draw(INT32),
        fetch_max_bytes=draw(INT32),
        fetch_min_bytes=draw(INT32),
        fetch_wait_max_ms=draw(st.integers(1, socket_timeout)),
        num_consumer_fetchers=draw(INT32),
        auto_commit_enable=draw(st.booleans()),
        auto_commit_interval_ms=draw(INT32),
        queued_max_message_chunks=draw(INT32),
        rebalance_max_retries=draw(INT32),
        rebalance_backoff_ms=draw(st.none() | st.integers(0, 2**31 - 1)),
        refresh_leader_backoff_ms=draw(INT32),
        auto_offset_reset=draw(st.sampled_from(["smallest", "largest"])),
        consumer_timeout_ms=draw(st.integers(-1, 2**31 - 1)),
        exclude_internal_topics=draw(st.booleans()),
        client_id=draw(st.none() | LEGAL),
        offsets_storage=draw(st.sampled_from(["zookeeper", "kafka"])),
        dual_commit_enabled=draw(st.none() | st.booleans()),
        offsets_channel_backoff_ms=draw(INT32),
        offsets_channel_socket_timeout_ms=draw(INT32),
        offsets_commit_max_retries=draw(st.integers(0, 2**31 - 1)),
        partition_assignment_strategy=draw(st.sampled_from(["range", "roundrobin"])),
        bootstrap_servers=draw(st.none() | HOST_PORTS),
        cluster_metadata_source=draw(st.sampled_from(["auto", "zookeeper", "kafka"])),
    )


@given(configs())
def test_properties_round_trip(config: ConsumerConfig) -> None:
    props = config.to_properties()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in props.items())
    assert ConsumerConfig.from_properties(props) == config


# --- group.coordinator=kafka ------------------------------------------------------------------


def kafka_config(**changes: Any) -> ConsumerConfig:
    return ConsumerConfig(
        group_id="g", group_coordinator="kafka", bootstrap_servers="127.0.0.1:9092", **changes
    )


def test_kafka_coordinated_group_needs_bootstrap_servers_not_zookeeper() -> None:
    config = kafka_config()
    assert config.kafka_coordinated and config.zookeeper_connect is None
    assert config.offsets_storage == "kafka" and not config.effective_dual_commit_enabled
    assert config.cluster_metadata_source == "kafka"
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig(group_id="g", group_coordinator="kafka")
    assert info.value.key == "bootstrap.servers"
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig(group_id="g")
    assert info.value.key == "zookeeper.connect"


def test_kafka_coordinated_group_refuses_zookeeper_only_settings() -> None:
    with pytest.raises(InvalidConfigError) as info:
        kafka_config(dual_commit_enabled=True)
    assert info.value.key == "dual.commit.enabled"
    with pytest.raises(InvalidConfigError) as info:
        kafka_config(cluster_metadata_source="zookeeper")
    assert info.value.key == "cluster.metadata.source"
    with pytest.raises(InvalidConfigError) as info:
        kafka_config().require_zookeeper_connect()
    assert info.value.key == "zookeeper.connect"


def test_kafka_coordinated_group_reads_the_java_clients_names() -> None:
    assert kafka_config(auto_offset_reset="earliest").auto_offset_reset == "smallest"
    assert kafka_config(auto_offset_reset="latest").auto_offset_reset == "largest"
    with pytest.raises(InvalidConfigError):
        make(auto_offset_reset="earliest")  # the old consumer's words only, in ZooKeeper mode
    config = ConsumerConfig.from_properties(
        {
            "group.id": "g",
            "group.coordinator": "kafka",
            "bootstrap.servers": "127.0.0.1:9092",
            "enable.auto.commit": "false",
            "session.timeout.ms": "10000",
        }
    )
    assert config.auto_commit_enable is False and config.session_timeout_ms == 10000


def test_heartbeat_interval_must_be_below_session_timeout() -> None:
    with pytest.raises(InvalidConfigError) as info:
        kafka_config(session_timeout_ms=3000, heartbeat_interval_ms=3000)
    assert info.value.key == "heartbeat.interval.ms"


def test_interceptor_classes_are_checked_for_syntax() -> None:
    assert kafka_config(interceptor_classes="pkg.mod:Audit, pkg.Other").interceptor_classes
    with pytest.raises(InvalidConfigError) as info:
        kafka_config(interceptor_classes="not a class")
    assert info.value.key == "interceptor.classes"


# --- public validators (shared with the command line) -----------------------------------------


@pytest.mark.parametrize("value", [".", ".."])
def test_group_id_refuses_dot_and_dot_dot(value: str) -> None:
    error = raises_for("group.id", group_id=value)
    assert "cannot be a ZooKeeper path element" in str(error)


@pytest.mark.parametrize("value", ["", "a b", "grüppe", "g/1", ".", "..", "g\x00"])
def test_validate_group_id_is_the_configs_rule(value: str) -> None:
    with pytest.raises(InvalidConfigError) as from_validator:
        validate_group_id(value)
    error = raises_for("group.id", group_id=value)
    assert str(from_validator.value) == str(error)


@pytest.mark.parametrize("value", ["g", "A-z_0.9", "..."])
def test_validate_group_id_returns_a_legal_id(value: str) -> None:
    assert validate_group_id(value) == value


@pytest.mark.parametrize("value", ["foo", "host:notaport", "", "h:2181,", "h:2181/a/"])
def test_validate_zookeeper_connect_is_the_configs_rule(value: str) -> None:
    with pytest.raises(InvalidConfigError) as from_validator:
        validate_zookeeper_connect(value)
    assert from_validator.value.key == "zookeeper.connect"
    error = raises_for("zookeeper.connect", zookeeper_connect=value)
    assert str(from_validator.value) == str(error)


@pytest.mark.parametrize("value", ["foo", "host:notaport", "", "b:1,"])
def test_validate_bootstrap_servers_is_the_configs_rule(value: str) -> None:
    with pytest.raises(InvalidConfigError) as from_validator:
        validate_bootstrap_servers(value)
    assert from_validator.value.key == "bootstrap.servers"
    error = raises_for("bootstrap.servers", bootstrap_servers=value)
    assert str(from_validator.value) == str(error)


def test_validators_return_what_they_accept() -> None:
    assert validate_zookeeper_connect("h:1,[::1]:2/kafka") == "h:1,[::1]:2/kafka"
    assert validate_bootstrap_servers("k1:9092,[::1]:9093") == "k1:9092,[::1]:9093"


def test_offsets_malformed_reset_is_a_boolean_property() -> None:
    assert make().offsets_malformed_reset is False
    props = {**REQUIRED_PROPS, "offsets.malformed.reset": "true"}
    config = ConsumerConfig.from_properties(props)
    assert config.offsets_malformed_reset is True
    assert config.to_properties()["offsets.malformed.reset"] == "true"
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig.from_properties({**REQUIRED_PROPS, "offsets.malformed.reset": "yes"})
    assert info.value.key == "offsets.malformed.reset"
    raises_for("offsets.malformed.reset", offsets_malformed_reset="true")


def test_zookeeper_poll_liveness_enable_is_a_boolean_property() -> None:
    assert make().zookeeper_poll_liveness_enable is False
    props = {**REQUIRED_PROPS, "zookeeper.poll.liveness.enable": "true"}
    config = ConsumerConfig.from_properties(props)
    assert config.zookeeper_poll_liveness_enable is True
    assert config.to_properties()["zookeeper.poll.liveness.enable"] == "true"
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig.from_properties({**REQUIRED_PROPS, "zookeeper.poll.liveness.enable": "on"})
    assert info.value.key == "zookeeper.poll.liveness.enable"
    raises_for("zookeeper.poll.liveness.enable", zookeeper_poll_liveness_enable="true")
