"""ZooKeeper paths and codecs against the literal bytes Kafka writes (0.8.2 to 3.9)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiozkconsumer.errors import InvalidConfigError, MalformedZookeeperDataError
from aiozkconsumer.testing._layout import (
    PartitionState,
    decode_partition_state,
    encode_broker,
    encode_partition_state,
    encode_topic_partitions,
)
from aiozkconsumer.zk import layout
from aiozkconsumer.zk.layout import (
    BrokerEndPoint,
    BrokerInfo,
    Registration,
    decode_broker,
    decode_offset,
    decode_owner,
    decode_registration,
    decode_topic_partitions,
    encode_offset,
    encode_owner,
    encode_registration,
    json_escape_string,
)

# --------------------------------------------------------------------------------------------
# paths
# --------------------------------------------------------------------------------------------


def test_root_paths() -> None:
    assert layout.CONSUMERS_PATH == "/consumers"
    assert layout.BROKER_IDS_PATH == "/brokers/ids"
    assert layout.BROKER_TOPICS_PATH == "/brokers/topics"


def test_group_paths_match_zkgroupdirs() -> None:
    assert layout.group_dir("billing") == "/consumers/billing"
    assert layout.ids_dir("billing") == "/consumers/billing/ids"
    assert (
        layout.ids_path("billing", "billing_host-1490000000000-1a2b3c4d")
        == "/consumers/billing/ids/billing_host-1490000000000-1a2b3c4d"
    )
    assert layout.owners_dir("billing", "payments") == "/consumers/billing/owners/payments"
    assert layout.owner_path("billing", "payments", 3) == "/consumers/billing/owners/payments/3"
    assert layout.offsets_dir("billing", "payments") == "/consumers/billing/offsets/payments"
    assert layout.offset_path("billing", "payments", 0) == "/consumers/billing/offsets/payments/0"


def test_broker_and_topic_paths() -> None:
    assert layout.broker_path(0) == "/brokers/ids/0"
    assert layout.broker_path(1001) == "/brokers/ids/1001"
    assert layout.topic_path("payments") == "/brokers/topics/payments"
    assert (
        layout.partition_state_path("payments", 7) == "/brokers/topics/payments/partitions/7/state"
    )


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "nul\x00"])
def test_path_elements_that_zookeeper_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="path element"):
        layout.group_dir(bad)
    with pytest.raises(ValueError, match="path element"):
        layout.topic_path(bad)
    with pytest.raises(ValueError, match="path element"):
        layout.ids_path("g", bad)


def test_partition_must_be_a_non_negative_int() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        layout.owner_path("g", "t", -1)
    with pytest.raises(TypeError):
        layout.offset_path("g", "t", True)
    with pytest.raises(TypeError):
        layout.partition_state_path("t", "0")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# JSONEscapeString
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("plain.topic-1", "plain.topic-1"),
        ('a"b', 'a\\"b'),
        ("a\\.b", "a\\\\.b"),
        ("a/b", "a\\/b"),
        ("\b\f\n\r\t", "\\b\\f\\n\\r\\t"),
        ("\x00\x1f", "\\u0000\\u001f"),
        ("\x7f\x85\x9f", "\\u007f\\u0085\\u009f"),
        ("\xa0é€😀", "\xa0é€😀"),
        ("\x1b", "\\u001b"),
    ],
)
def test_json_escape_string_matches_coreutils(raw: str, escaped: str) -> None:
    assert json_escape_string(raw) == escaped


@given(st.text())
def test_json_escape_string_is_valid_json_that_reads_back(s: str) -> None:
    escaped = json_escape_string(s)
    assert json.loads(f'"{escaped}"') == s


# --------------------------------------------------------------------------------------------
# registration
# --------------------------------------------------------------------------------------------

STATIC_JSON = (
    b'{"version":1,"subscription":{"topicA":2,"topicB":1},"pattern":"static",'
    b'"timestamp":"1490000000000"}'
)


def test_encode_static_registration_is_byte_identical() -> None:
    data = encode_registration({"topicA": 2, "topicB": 1}, "static", 1490000000000)
    assert data == STATIC_JSON


def test_encode_keeps_insertion_order() -> None:
    data = encode_registration({"b": 1, "a": 3}, "static", 5)
    assert data == b'{"version":1,"subscription":{"b":1,"a":3},"pattern":"static","timestamp":"5"}'


def test_encode_wildcard_registration_with_escaped_regex() -> None:
    escaped = json_escape_string("logs\\..*/x")
    data = encode_registration({escaped: 3}, "white_list", 1490000000000)
    assert data == (
        b'{"version":1,"subscription":{"logs\\\\..*\\/x":3},"pattern":"white_list",'
        b'"timestamp":"1490000000000"}'
    )
    assert decode_registration(data).subscription == {"logs\\..*/x": 3}


def test_encode_empty_subscription() -> None:
    assert encode_registration({}, "static", 1) == (
        b'{"version":1,"subscription":{},"pattern":"static","timestamp":"1"}'
    )


@pytest.mark.parametrize(
    ("subscription", "pattern", "timestamp"),
    [
        ({"t": 1}, "regex", 1),
        ({"t": 0}, "static", 1),
        ({"t": True}, "static", 1),
        ({'a"b': 1}, "static", 1),
        ({"a\\": 1}, "white_list", 1),
        ({"t": 1}, "static", -1),
    ],
)
def test_encode_rejects_what_would_not_read_back(
    subscription: dict[str, int], pattern: str, timestamp: int
) -> None:
    with pytest.raises(ValueError):
        encode_registration(subscription, pattern, timestamp)


def test_decode_static_registration() -> None:
    reg = decode_registration(STATIC_JSON, "/consumers/g/ids/c1")
    assert reg == Registration("static", {"topicA": 2, "topicB": 1}, 1490000000000, 1)
    assert list(reg.subscription) == ["topicA", "topicB"]
    assert not reg.is_wildcard


def test_decode_tolerates_missing_or_odd_version_and_timestamp() -> None:
    reg = decode_registration(b'{"subscription":{"t":1},"pattern":"static"}')
    assert (reg.version, reg.timestamp_ms) == (None, None)
    reg = decode_registration(
        b'{"version":"1","subscription":{"t":1},"pattern":"static","timestamp":1490000000000}'
    )
    assert (reg.version, reg.timestamp_ms) == (1, 1490000000000)
    reg = decode_registration(
        b'{"version":[1],"subscription":{"t":1},"pattern":"static","timestamp":"soon","x":0}'
    )
    assert (reg.version, reg.timestamp_ms) == (None, None)
    assert reg.subscription == {"t": 1}


def test_decode_keeps_unknown_pattern_as_read() -> None:
    reg = decode_registration(b'{"subscription":{"t":1},"pattern":"regex"}')
    assert reg.pattern == "regex"
    assert not reg.is_wildcard


def test_registration_is_hashable_and_order_insensitive() -> None:
    a = Registration("static", {"x": 1, "y": 2})
    b = Registration("static", {"y": 2, "x": 1})
    assert a == b
    assert hash(a) == hash(b)
    assert a != Registration("static", {"x": 1, "y": 3})


def test_registration_subscription_is_read_only_copy() -> None:
    source = {"x": 1}
    reg = Registration("static", source)
    source["y"] = 2
    assert reg.subscription == {"x": 1}
    with pytest.raises(TypeError):
        reg.subscription["z"] = 3  # type: ignore[index]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b"", "JSON"),
        (b"\xff\xfe", "UTF-8"),
        (b"not json", "JSON"),
        (b"[1,2]", "object"),
        (b"null", "object"),
        (b'{"subscription":{"t":1}}', "'pattern'"),
        (b'{"pattern":"static"}', "'subscription'"),
        (b'{"pattern":1,"subscription":{}}', "'pattern'"),
        (b'{"pattern":"static","subscription":["t"]}', "'subscription'"),
        (b'{"pattern":"static","subscription":{"t":"2"}}', "'t'"),
        (b'{"pattern":"static","subscription":{"t":2.0}}', "'t'"),
        (b'{"pattern":"static","subscription":{"t":true}}', "'t'"),
        (b'{"pattern":"static","subscription":{"t":0}}', "'t'"),
        (b'{"pattern":"static","subscription":{"t":-1}}', "'t'"),
        (b'{"pattern":"static","subscription":{"t":2147483648}}', "'t'"),
        (b'{"pattern":"static","subscription":{"t":NaN}}', "JSON"),
    ],
)
def test_decode_registration_rejects_malformed(data: bytes, field: str) -> None:
    path = "/consumers/g/ids/bad"
    with pytest.raises(MalformedZookeeperDataError) as info:
        decode_registration(data, path)
    assert info.value.path == path
    assert path in str(info.value)
    assert field in str(info.value)


def test_decode_registration_without_data() -> None:
    with pytest.raises(MalformedZookeeperDataError, match="no data"):
        decode_registration(None, "/consumers/g/ids/c")


_topic_names = st.text(alphabet=st.sampled_from("abcxyzABC0123456789._-"), min_size=1, max_size=20)


@given(
    st.dictionaries(_topic_names, st.integers(1, 2**31 - 1), max_size=6),
    st.sampled_from(["static", "white_list", "black_list"]),
    st.integers(0, 2**63 - 1),
)
def test_registration_round_trip(subscription: dict[str, int], pattern: str, ts: int) -> None:
    reg = decode_registration(encode_registration(subscription, pattern, ts))
    assert reg == Registration(pattern, subscription, ts, 1)
    assert list(reg.subscription) == list(subscription)


@given(st.text(max_size=30), st.integers(1, 50))
def test_wildcard_registration_round_trip_of_any_regex(regex: str, n: int) -> None:
    data = encode_registration({json_escape_string(regex): n}, "black_list", 0)
    assert decode_registration(data).subscription == {regex: n}


# --------------------------------------------------------------------------------------------
# owners and offsets
# --------------------------------------------------------------------------------------------


def test_owner_value_is_the_plain_thread_id() -> None:
    assert encode_owner("g1_host-1490000000000-1a2b3c4d-0") == b"g1_host-1490000000000-1a2b3c4d-0"
    assert decode_owner(b"g1_host-1490000000000-1a2b3c4d-0") == "g1_host-1490000000000-1a2b3c4d-0"


def test_owner_errors() -> None:
    path = "/consumers/g/owners/t/0"
    with pytest.raises(MalformedZookeeperDataError) as info:
        decode_owner(b"", path)
    assert info.value.path == path
    with pytest.raises(MalformedZookeeperDataError, match="UTF-8"):
        decode_owner(b"\xc3", path)
    with pytest.raises(ValueError):
        encode_owner("")


def test_offset_value_is_a_decimal_string() -> None:
    assert encode_offset(4711) == b"4711"
    assert encode_offset(0) == b"0"
    assert decode_offset(b"4711") == 4711
    assert decode_offset(b" 4711\n") == 4711
    assert decode_offset(b"9223372036854775807") == 2**63 - 1


@pytest.mark.parametrize(
    "data", [None, b"", b"-1", b"+5", b"12a", b"1.5", b"1_000", b"\xd9\xa3", b"9223372036854775808"]
)
def test_decode_offset_rejects_malformed(data: bytes | None) -> None:
    path = "/consumers/g/offsets/t/0"
    with pytest.raises(MalformedZookeeperDataError) as info:
        decode_offset(data, path)
    assert info.value.path == path


@pytest.mark.parametrize("offset", [-1, 2**63])
def test_encode_offset_range(offset: int) -> None:
    with pytest.raises(ValueError):
        encode_offset(offset)


@given(st.integers(0, 2**63 - 1))
def test_offset_round_trip(offset: int) -> None:
    assert decode_offset(encode_offset(offset)) == offset


# --------------------------------------------------------------------------------------------
# brokers
# --------------------------------------------------------------------------------------------

# Kafka 0.8.2 (version 1).
BROKER_V1 = (
    b'{"jmx_port":9999,"timestamp":"1490000000000","host":"broker1.example.com",'
    b'"version":1,"port":9092}'
)
# Kafka 0.9 (version 2): endpoints become authoritative.
BROKER_V2 = (
    b'{"jmx_port":-1,"timestamp":"1490000000000","endpoints":["SSL://broker2.example.com:9093",'
    b'"PLAINTEXT://broker2.example.com:9092"],"host":"broker2.example.com","version":2,'
    b'"port":9092}'
)
# Kafka 0.10.0 (version 3): rack.
BROKER_V3 = (
    b'{"jmx_port":-1,"timestamp":"1490000000000","endpoints":["PLAINTEXT://10.0.0.3:9092"],'
    b'"rack":"rack-a","host":"10.0.0.3","version":3,"port":9092}'
)
# Kafka 0.10.2 / 2.x (version 4): named listeners mapped to security protocols.
BROKER_V4 = (
    b'{"listener_security_protocol_map":{"EXTERNAL":"SASL_SSL","INTERNAL":"PLAINTEXT"},'
    b'"endpoints":["EXTERNAL://public.example.com:9094","INTERNAL://10.0.0.4:19092"],'
    b'"rack":null,"jmx_port":9999,"host":"10.0.0.4","timestamp":"1490000000000","port":19092,'
    b'"version":4}'
)
# Kafka 3.9 in ZooKeeper mode (version 5): features.
BROKER_V5 = (
    b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
    b'"endpoints":["PLAINTEXT://127.0.0.1:9092"],"jmx_port":-1,"port":9092,'
    b'"host":"127.0.0.1","version":5,"timestamp":"1700000000000"}'
)


def test_broker_v1() -> None:
    info = decode_broker(1, BROKER_V1)
    assert info == BrokerInfo(
        broker_id=1,
        host="broker1.example.com",
        port=9092,
        endpoints=("PLAINTEXT://broker1.example.com:9092",),
        rack=None,
        version=1,
        jmx_port=9999,
        timestamp_ms=1490000000000,
    )
    assert info.plaintext_address() == ("broker1.example.com", 9092)


def test_broker_v2_picks_the_plaintext_endpoint() -> None:
    info = decode_broker(2, BROKER_V2)
    assert info.version == 2
    assert info.endpoints == (
        "SSL://broker2.example.com:9093",
        "PLAINTEXT://broker2.example.com:9092",
    )
    assert info.plaintext_address() == ("broker2.example.com", 9092)


def test_broker_v3_rack() -> None:
    info = decode_broker(3, BROKER_V3)
    assert info.rack == "rack-a"
    assert info.plaintext_address() == ("10.0.0.3", 9092)


def test_broker_v4_maps_listener_names_to_protocols() -> None:
    info = decode_broker(4, BROKER_V4)
    assert info.rack is None
    assert info.listener_security_protocol_map == {
        "EXTERNAL": "SASL_SSL",
        "INTERNAL": "PLAINTEXT",
    }
    assert info.parsed_endpoints() == (
        BrokerEndPoint("EXTERNAL", "public.example.com", 9094, "SASL_SSL"),
        BrokerEndPoint("INTERNAL", "10.0.0.4", 19092, "PLAINTEXT"),
    )
    assert info.plaintext_address() == ("10.0.0.4", 19092)


def test_broker_v5_kafka_3_9() -> None:
    info = decode_broker(0, BROKER_V5, "/brokers/ids/0")
    assert info == BrokerInfo(
        broker_id=0,
        host="127.0.0.1",
        port=9092,
        endpoints=("PLAINTEXT://127.0.0.1:9092",),
        rack=None,
        version=5,
        jmx_port=-1,
        timestamp_ms=1700000000000,
        listener_security_protocol_map={"PLAINTEXT": "PLAINTEXT"},
    )
    assert info.plaintext_address() == ("127.0.0.1", 9092)


def test_broker_without_plaintext_listener() -> None:
    # Kafka 3.9 writes host null and port -1 when no listener speaks PLAINTEXT.
    data = (
        b'{"features":{},"listener_security_protocol_map":{"SSL":"SSL"},'
        b'"endpoints":["SSL://10.0.0.9:9093"],"jmx_port":-1,"port":-1,"host":null,'
        b'"version":5,"timestamp":"1700000000000"}'
    )
    info = decode_broker(9, data)
    assert (info.host, info.port) == (None, -1)
    # Not malformed: the client's security.protocol (PLAINTEXT) is not one the broker offers.
    with pytest.raises(InvalidConfigError, match="broker 9 has no endpoint") as exc:
        info.plaintext_address()
    assert exc.value.key == "security.protocol"
    assert "/brokers/ids/9" in str(exc.value)
    assert "it offers SSL: set security.protocol" in str(exc.value)


def test_broker_listener_named_plaintext_but_mapped_to_ssl_is_not_plaintext() -> None:
    data = (
        b'{"listener_security_protocol_map":{"PLAINTEXT":"SSL","CLIENT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://h:9093","CLIENT://h:9092"],"jmx_port":-1,"port":9092,'
        b'"host":"h","version":4,"timestamp":"1"}'
    )
    assert decode_broker(5, data).plaintext_address() == ("h", 9092)


def test_broker_ipv6_and_unknown_listener_without_map() -> None:
    data = (
        b'{"jmx_port":-1,"timestamp":"1","endpoints":["REPLICATION://[::1]:9999",'
        b'"PLAINTEXT://[::1]:9092"],"host":"::1","version":2,"port":9092}'
    )
    info = decode_broker(6, data)
    assert info.parsed_endpoints()[0].security_protocol is None
    assert info.plaintext_address() == ("::1", 9092)


def test_broker_plaintext_endpoint_without_host() -> None:
    data = b'{"endpoints":["PLAINTEXT://:9092"],"host":null,"port":9092,"version":4}'
    with pytest.raises(MalformedZookeeperDataError, match="has no host"):
        decode_broker(7, data).plaintext_address()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b"", "JSON"),
        (b"\x80", "UTF-8"),
        (b"[]", "object"),
        (b'{"host":"h","port":1}', "'version'"),
        (b'{"version":"1","host":"h","port":1}', "'version'"),
        (b'{"version":0,"host":"h","port":1}', "version 0"),
        (b'{"version":1,"port":9092}', "'host'"),
        (b'{"version":1,"host":"h"}', "'port'"),
        (b'{"version":1,"host":"h","port":"9092"}', "'port'"),
        (b'{"version":1,"host":7,"port":9092}', "'host'"),
        (b'{"version":2,"host":"h","port":9092}', "'endpoints'"),
        (b'{"version":2,"endpoints":"PLAINTEXT://h:1"}', "'endpoints'"),
        (b'{"version":2,"endpoints":["h:9092"]}', "'endpoints'"),
        (b'{"version":3,"endpoints":["PLAINTEXT://h:1"],"rack":3}', "'rack'"),
        (
            b'{"version":4,"endpoints":["PLAINTEXT://h:1"],"listener_security_protocol_map":[]}',
            "'listener_security_protocol_map'",
        ),
        (b'{"version":2,"endpoints":["PLAINTEXT://h:1"],"jmx_port":1.5}', "'jmx_port'"),
    ],
)
def test_decode_broker_rejects_malformed(data: bytes, field: str) -> None:
    with pytest.raises(MalformedZookeeperDataError) as info:
        decode_broker(3, data)
    assert info.value.path == "/brokers/ids/3"
    assert "/brokers/ids/3" in str(info.value)
    assert field in str(info.value)


@pytest.mark.parametrize("data", [BROKER_V1, BROKER_V2, BROKER_V3, BROKER_V4, BROKER_V5])
def test_encode_broker_reads_back(data: bytes) -> None:
    info = decode_broker(11, data)
    assert decode_broker(11, encode_broker(info)) == info


def test_encode_broker_v5_matches_kafka_3_9_shape() -> None:
    assert encode_broker(decode_broker(0, BROKER_V5)) == BROKER_V5


# --------------------------------------------------------------------------------------------
# topics and partition state
# --------------------------------------------------------------------------------------------


def test_topic_v1() -> None:
    data = b'{"version":1,"partitions":{"0":[1,2],"1":[2,3]}}'
    assert decode_topic_partitions(data) == {0: [1, 2], 1: [2, 3]}


def test_topic_v3_kafka_3_9_extra_keys_ignored() -> None:
    data = (
        b'{"removing_replicas":{},"partitions":{"2":[0],"10":[0],"1":[0],"0":[0]},'
        b'"topic_id":"kTqJoZ8YTUWyuLx0uO1Hjg","adding_replicas":{},"version":3}'
    )
    partitions = decode_topic_partitions(data, "/brokers/topics/events")
    assert list(partitions) == [0, 1, 2, 10]
    assert partitions[10] == [0]


def test_topic_encode_is_v1_in_partition_order() -> None:
    assert encode_topic_partitions({1: [2, 3], 0: [1, 2]}) == (
        b'{"version":1,"partitions":{"0":[1,2],"1":[2,3]}}'
    )
    assert decode_topic_partitions(encode_topic_partitions({5: [1], 3: []})) == {3: [], 5: [1]}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b"", "JSON"),
        (b'{"version":1}', "'partitions'"),
        (b'{"version":1,"partitions":[]}', "'partitions'"),
        (b'{"version":1,"partitions":{"x":[1]}}', "'x'"),
        (b'{"version":1,"partitions":{"-1":[1]}}', "'-1'"),
        (b'{"version":1,"partitions":{"0":1}}', "'0'"),
        (b'{"version":1,"partitions":{"0":["1"]}}', "'0'"),
    ],
)
def test_decode_topic_rejects_malformed(data: bytes, field: str) -> None:
    path = "/brokers/topics/t"
    with pytest.raises(MalformedZookeeperDataError) as info:
        decode_topic_partitions(data, path)
    assert info.value.path == path
    assert field in str(info.value)


def test_partition_state() -> None:
    data = b'{"controller_epoch":3,"leader":1,"version":1,"leader_epoch":7,"isr":[1,2]}'
    state = decode_partition_state(data)
    assert state == PartitionState(leader=1, leader_epoch=7, isr=(1, 2), controller_epoch=3)
    assert encode_partition_state(state) == data
    kafka_39 = (
        b'{"controller_epoch":1,"leader":-1,"version":1,"leader_epoch":0,"isr":[],'
        b'"leader_recovery_state":0}'
    )
    assert decode_partition_state(kafka_39).leader == -1


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b'{"controller_epoch":1,"version":1,"leader_epoch":0,"isr":[1]}', "'leader'"),
        (b'{"controller_epoch":1,"leader":1,"leader_epoch":0}', "'isr'"),
        (b'{"controller_epoch":1,"leader":1,"leader_epoch":0,"isr":[true]}', "'isr'"),
        (b'{"leader":1,"leader_epoch":0,"isr":[1]}', "'controller_epoch'"),
        (b'{"controller_epoch":1,"leader":"1","leader_epoch":0,"isr":[1]}', "'leader'"),
    ],
)
def test_partition_state_rejects_malformed(data: bytes, field: str) -> None:
    path = "/brokers/topics/t/partitions/0/state"
    with pytest.raises(MalformedZookeeperDataError) as info:
        decode_partition_state(data, path)
    assert info.value.path == path
    assert field in str(info.value)
