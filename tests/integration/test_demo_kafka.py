"""``aiozkconsumer demo --group-coordinator kafka``: the demo with a Kafka-coordinated group.

The end-to-end run uses only ``--bootstrap-server`` (no ZooKeeper), on Kafka 3.9 and on the
KRaft flavour (Kafka 4), and checks the RESULT line, the exit status, that the committed
offsets were read from Kafka, and that every member left the group (LeaveGroup: a member
that had not would stay listed until its session timeout).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from click.testing import CliRunner, Result

from aiozkconsumer.cli import cli
from aiozkconsumer.cli.demo import DemoResult, print_summary
from aiozkconsumer.testing import LocalCluster

PARTITIONS = 4
RECORDS = 4000


def invoke(*args: str) -> Result:
    """Run the CLI in-process; an exception other than the exit itself fails the test."""
    result = CliRunner().invoke(cli, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


async def _describe_group(bootstrap_servers: str, group: str) -> tuple[str, str, list[Any]]:
    """``(state, protocol type, members)`` of ``group``, from DescribeGroups."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        [response] = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    [(error_code, group_id, state, protocol_type, _protocol, members, *_)] = response.groups
    assert (error_code, group_id) == (0, group)
    return state, protocol_type, list(members)


@pytest.mark.integration
async def test_demo_with_a_kafka_coordinated_group_needs_only_bootstrap_servers(
    any_cluster: LocalCluster, unique_group_id: str, unique_topic: str
) -> None:
    args = (
        "demo",
        "--group-coordinator",
        "kafka",
        "--bootstrap-server",
        any_cluster.bootstrap_servers,
        "--records",
        str(RECORDS),
        "--partitions",
        str(PARTITIONS),
        "--consumers",
        "3",
        "--streams",
        "1",
        "--topic",
        unique_topic,
        "--group",
        unique_group_id,
        "--stall-timeout",
        "60",
        "--no-progress",
        "--no-spark",  # tests/integration/test_demo_spark.py runs the Spark section
    )
    result = await anyio.to_thread.run_sync(lambda: invoke(*args))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[-1] == "RESULT: OK"
    assert f"records produced          {RECORDS:>12,}" in lines
    assert f"lost                      {0:>12,}" in lines
    assert "coordinated by Kafka" in result.stderr
    assert "stopping member 2" in result.stderr
    header = lines.index("partition      committed(Kafka)  log-end-offset  equal")
    rows = [line.split() for line in lines[header + 1 : -1]]
    assert [row[0] for row in rows] == [str(p) for p in range(PARTITIONS)]
    per_partition = f"{RECORDS // PARTITIONS:,}"
    assert all(row[1:] == [per_partition, per_partition, "yes"] for row in rows), rows

    state, protocol_type, members = await _describe_group(
        any_cluster.bootstrap_servers, unique_group_id
    )
    assert (state, protocol_type, members) == ("Empty", "consumer", [])


def test_demo_summary_fails_when_a_kafka_offset_is_short(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = DemoResult(
        produced=20, distinct=20, offsets={0: (10, 10), 1: (9, 10)}, offsets_source="Kafka"
    )
    print_summary(result)
    lines = capsys.readouterr().out.splitlines()
    assert "partition      committed(Kafka)  log-end-offset  equal" in lines
    assert lines[-2].split() == ["1", "9", "10", "NO"]
    assert lines[-1] == "RESULT: FAILED"


def test_demo_group_coordinator_options_are_checked() -> None:
    bad = invoke("demo", "--group-coordinator", "broker")
    assert bad.exit_code == 2
    assert "'broker' is not one of 'zookeeper', 'kafka'" in bad.stderr
    no_brokers = invoke("demo", "--group-coordinator", "kafka", "--zookeeper", "127.0.0.1:1")
    assert no_brokers.exit_code == 2
    assert "--zookeeper needs --bootstrap-server too" in no_brokers.stderr
    no_zookeeper = invoke("demo", "--bootstrap-server", "127.0.0.1:1")
    assert no_zookeeper.exit_code == 2
    assert "--bootstrap-server needs --zookeeper too (or --group-coordinator kafka)" in (
        no_zookeeper.stderr
    )
    usage = invoke("demo", "--help")
    assert "--group-coordinator [zookeeper|kafka]" in usage.stdout
