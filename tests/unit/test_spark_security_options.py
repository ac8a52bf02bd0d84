"""The zkkafka source's security options: the Kafka source's spelling, and what the executors get.

Pure option handling (no SparkSession): the end-to-end read over SASL_SSL is in
``tests/integration/test_security_e2e.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import trustme

from aiozkconsumer.config import kafka_security_from_properties
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.spark.executor import ZkKafkaInputPartition
from aiozkconsumer.spark.executor import input_partition as _input_partition
from aiozkconsumer.spark.planning import OffsetRange, parse_source_options, security_properties

CANARY = "spark-canary-91d2"


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    return path


def options(ca_file: Path) -> dict[str, str]:
    return {
        "subscribe": "payments",
        "group.id": "g",
        "group.coordinator": "kafka",
        "kafka.bootstrap.servers": "127.0.0.1:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        f'required username="alice" password="{CANARY}";',
        "kafka.ssl.truststore.location": str(ca_file),
        "kafka.ssl.truststore.type": "PEM",
    }


def test_the_kafka_source_spelling_configures_the_connection(ca_file: Path) -> None:
    parsed = parse_source_options(options(ca_file))
    config = parsed.config
    assert config.security_protocol == "SASL_SSL"
    assert (config.sasl_mechanism, config.sasl_username) == ("SCRAM-SHA-512", "alice")
    assert config.ssl_cafile == str(ca_file)
    assert CANARY not in repr(parsed)


def test_executors_get_the_security_without_it_showing(ca_file: Path) -> None:
    parsed = parse_source_options(options(ca_file))
    part = _input_partition(
        parsed, OffsetRange(TopicPartition("payments", 0), 0, 10), "127.0.0.1:9093"
    )
    assert isinstance(part, ZkKafkaInputPartition)
    assert CANARY not in repr(part)
    props = dict(part.security_properties)
    assert props["security.protocol"] == "SASL_SSL"
    security = kafka_security_from_properties(props)
    assert security.describe() == "SASL_SSL/SCRAM-SHA-512"
    assert security.sasl_password == CANARY and security.ssl_context is not None
    assert security_properties(parse_source_options(options(ca_file)).config) == tuple(
        sorted(props.items())
    )


def test_a_plaintext_source_sends_no_security() -> None:
    parsed = parse_source_options(
        {"subscribe": "t", "group.id": "g", "zookeeper.connect": "127.0.0.1:2181"}
    )
    assert security_properties(parsed.config) == ()
