"""Groups on a secured cluster, end to end: every listener, both flavours, both coordinators.

For each of SSL, mTLS, SASL_SSL/PLAIN, SASL_SSL/SCRAM-SHA-512, SASL_PLAINTEXT/SCRAM-SHA-256
and SASL_SSL/OAUTHBEARER, on Kafka 3.9 (ZooKeeper mode) and 4.3 (KRaft): a
ZooKeeper-coordinated group and a Kafka-coordinated group read a topic to its end, commit,
and a second member takes over exactly at the commits; between them the three read paths
(``async for``, ``batches()``, ``arrow_batches()``) are used. The brokers' request logs show
the connections authenticated as the expected principal. Also: a Java ``KafkaConsumer`` and
ours in one group over SASL_SSL, brokers found in ZooKeeper at their SASL_SSL endpoint, and
the Spark source over SASL_SSL is in ``tests/integration/test_spark_security.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from _read_paths import ConnectorReader

from aiozkconsumer import ConsumerConfig
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.security import unsecured_jwt

pytestmark = pytest.mark.integration

PARTITIONS = 2
FIRST = 60  # records per partition before the hand-over
SECOND = 20  # and after it

CASES = [
    pytest.param("SSL", None, id="ssl"),
    pytest.param("MTLS", None, id="mtls"),
    pytest.param("SASL_SSL", "PLAIN", id="sasl_ssl-plain"),
    pytest.param("SASL_SSL", "SCRAM-SHA-512", id="sasl_ssl-scram512"),
    pytest.param("SASL_PLAINTEXT", "SCRAM-SHA-256", id="sasl_plaintext-scram256"),
    pytest.param("SASL_SSL", "OAUTHBEARER", id="sasl_ssl-oauthbearer"),
]


class AliceTokens:
    """An OAUTHBEARER token provider named in a properties file (``module:Class``): unsigned
    tokens the brokers' unsecured validator accepts, for ``alice``."""

    async def token(self) -> str:
        return unsecured_jwt("alice", 3600)


def client_properties(
    cluster: LocalCluster, listener: str, mechanism: str | None
) -> dict[str, str]:
    props = dict(cluster.client_properties(listener, mechanism))
    if mechanism == "OAUTHBEARER":
        props["sasl.oauthbearer.token.provider"] = f"{__name__}:AliceTokens"
    return props


def secured_config(
    cluster: LocalCluster,
    listener: str,
    mechanism: str | None,
    group: str,
    coordinator: str,
    **extra: str,
) -> ConsumerConfig:
    props: dict[str, Any] = {
        **client_properties(cluster, listener, mechanism),
        "group.id": group,
        "auto.offset.reset": "smallest",
        "auto.commit.enable": "false",
        "consumer.timeout.ms": "200",
        "rebalance.backoff.ms": "500",
        **extra,
    }
    if coordinator == "kafka":
        props["group.coordinator"] = "kafka"
    else:
        props["zookeeper.connect"] = cluster.zookeeper_connect
    return ConsumerConfig.from_properties(props)


async def produce(cluster: LocalCluster, topic: str, tag: str, per_partition: int) -> None:
    await cluster.produce_to_partitions(
        topic,
        {
            p: [(b"k%d" % i, b"%s-%d-%d" % (tag.encode(), p, i)) for i in range(per_partition)]
            for p in range(PARTITIONS)
        },
    )


async def ends(cluster: LocalCluster, topic: str) -> dict[TopicPartition, int]:
    return {TopicPartition(topic, p): e for p, e in (await cluster.log_end_offsets(topic)).items()}


def delivered_offsets(reader: ConnectorReader) -> list[tuple[int, int]]:
    return sorted((ident[0], ident[1]) for _, ident in reader.delivered)


async def hand_over(
    cluster: LocalCluster,
    topic: str,
    listener: str,
    mechanism: str | None,
    group: str,
    coordinator: str,
    paths: tuple[str, str],
) -> None:
    """Member one reads to the end and commits; member two starts at exactly the commits."""
    first_ends = await ends(cluster, topic)
    config = secured_config(cluster, listener, mechanism, group, coordinator)
    async with ConnectorReader(config, topic, paths[0]) as one:
        await one.read_until(first_ends)
        await one.connector.commit_offsets()
    assert delivered_offsets(one) == sorted(
        (tp.partition, o) for tp, end in first_ends.items() for o in range(end)
    )
    await produce(cluster, topic, f"{group}-second", SECOND)
    second_ends = await ends(cluster, topic)
    async with ConnectorReader(config, topic, paths[1]) as two:
        await two.read_until(second_ends)
    assert delivered_offsets(two) == sorted(
        (tp.partition, o) for tp, end in second_ends.items() for o in range(first_ends[tp], end)
    ), "the second member must start exactly at the first one's commits"


@pytest.mark.parametrize(("listener", "mechanism"), CASES)
async def test_groups_consume_commit_and_hand_over_on_a_secured_listener(
    any_secure_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    listener: str,
    mechanism: str | None,
) -> None:
    cluster = any_secure_cluster
    await cluster.create_topic(unique_topic, PARTITIONS)
    await produce(cluster, unique_topic, "first", FIRST)
    await hand_over(
        cluster,
        unique_topic,
        listener,
        mechanism,
        f"{unique_group_id}-zk",
        "zookeeper",
        ("records", "batches"),
    )
    await produce(cluster, unique_topic, "third", SECOND)
    await hand_over(
        cluster,
        unique_topic,
        listener,
        mechanism,
        f"{unique_group_id}-kafka",
        "kafka",
        ("arrow", "records"),
    )
    if listener != "SSL":  # server-only TLS has no client identity (User:ANONYMOUS)
        await cluster.wait_for_principal("User:alice", listener=listener)


async def test_brokers_found_in_zookeeper_are_reached_at_their_sasl_ssl_endpoint(
    secure_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    cluster = secure_cluster
    await cluster.create_topic(unique_topic, PARTITIONS)
    await produce(cluster, unique_topic, "zk", FIRST)
    props = client_properties(cluster, "SASL_SSL", "SCRAM-SHA-512")
    props.pop("bootstrap.servers")  # brokers from /brokers/ids, by listener protocol
    config = ConsumerConfig.from_properties(
        {
            **props,
            "group.id": unique_group_id,
            "zookeeper.connect": cluster.zookeeper_connect,
            "auto.offset.reset": "smallest",
            "consumer.timeout.ms": "200",
            "cluster.metadata.source": "zookeeper",
        }
    )
    target = await ends(cluster, unique_topic)
    async with ConnectorReader(config, unique_topic, "batches") as reader:
        await reader.read_until(target)
    assert len(reader.delivered) == PARTITIONS * FIRST
    await cluster.wait_for_principal("User:alice", listener="SASL_SSL")


async def test_a_java_consumer_and_ours_share_a_group_over_sasl_ssl(
    secure_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    from aiozkconsumer.testing.java_member import JavaConsumerMember

    cluster = secure_cluster
    await cluster.create_topic(unique_topic, 4)
    await cluster.produce_to_partitions(
        unique_topic, {p: [(None, b"v%d-%d" % (p, i)) for i in range(50)] for p in range(4)}
    )
    ours = client_properties(cluster, "SASL_SSL", "SCRAM-SHA-512")
    java = {
        "bootstrap.servers": ours["bootstrap.servers"],
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{cluster.security.password("alice")}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(cluster.security.ca_file),
    }
    config = secured_config(cluster, "SASL_SSL", "SCRAM-SHA-512", unique_group_id, "kafka")
    target = await ends(cluster, unique_topic)
    async with JavaConsumerMember(
        cluster, unique_group_id, [unique_topic], extra_properties=java, commit="sync"
    ) as member:
        await member.wait_for(lambda records: True, timeout_s=60)
        async with ConnectorReader(config, unique_topic, "records") as reader:
            # Both members own partitions of the one group once the rebalance settles.
            for _ in range(600):
                mine = set(reader.connector.statistics().consumed_offsets)
                theirs = member.assigned_partitions()
                if mine and theirs and not mine & theirs and len(mine | theirs) == 4:
                    break
                await reader.read_for(0.1)
            else:
                pytest.fail(f"no shared assignment: ours {mine}, java {theirs}")
            mine_ends = {tp: e for tp, e in target.items() if tp in mine}
            await reader.read_until(mine_ends)
    assert {tp.partition for tp in mine} | {tp.partition for tp in theirs} == {0, 1, 2, 3}
    await cluster.wait_for_principal("User:alice", listener="SASL_SSL")
