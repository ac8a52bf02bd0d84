"""``aiozkconsumer offsets migrate``: a group's offsets from ZooKeeper to Kafka and back.

The decision (:func:`aiozkconsumer.tools.plan_migration`) is tested without servers; the
command against the session's ZooKeeper + Kafka cluster, reading back from ZooKeeper's offset
nodes and from the group's Kafka coordinator what it wrote (or did not). Live members of the
target group are real connectors: ours in ZooKeeper mode, ours with ``group.coordinator=kafka``.
The CLI runs its own event loop, so it is invoked through click's ``CliRunner`` in a worker
thread while the test's loop runs the connectors.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from _support import config_for, wait_settled
from click.testing import CliRunner, Result

from aiozkconsumer import ConsumerConfig, ZookeeperConsumerConnector, create_connector
from aiozkconsumer.cli import cli
from aiozkconsumer.offsets import KafkaOffsetStore
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.tools import GroupAdmin, plan_migration
from aiozkconsumer.zk import layout

integration = pytest.mark.integration

PARTITIONS = 4


def tp(p: int, topic: str = "t") -> TopicPartition:
    return TopicPartition(topic, p)


# ---- the plan -----------------------------------------------------------------------------------


def test_offsets_are_copied_where_the_target_has_none_or_less() -> None:
    plan = plan_migration(
        "g",
        "kafka",
        source_offsets={tp(0): 3, tp(1): 10, tp(2): 1, tp(3): 7},
        target_offsets={tp(1): 10, tp(2): 5, tp(3): 2},
        partitions_for_topic={"t": range(4)},
    )
    assert (plan.source, plan.target) == ("zookeeper", "kafka")
    rows = [(p.partition, p.source, p.target, p.new) for p in plan.partitions]
    assert rows == [(0, 3, None, 3), (1, 10, 10, None), (2, 1, 5, None), (3, 7, 2, 7)]
    assert plan.new_offsets == {tp(0): 3, tp(3): 7}
    assert plan.warnings == (
        "[t,2] is at 5 in kafka, ahead of 1 in zookeeper: kept at 5 (a migration never moves "
        "an offset back)",
    )


def test_a_second_plan_over_the_first_ones_result_sets_nothing() -> None:
    source = {tp(0): 3, tp(1): 10}
    first = plan_migration(
        "g",
        "zookeeper",
        source_offsets=source,
        target_offsets={},
        partitions_for_topic={"t": [0, 1]},
    )
    assert (first.source, first.target) == ("kafka", "zookeeper")
    again = plan_migration(
        "g",
        "zookeeper",
        source_offsets=source,
        target_offsets=first.new_offsets,
        partitions_for_topic={"t": [0, 1]},
    )
    assert first.new_offsets == source
    assert again.new_offsets == {} and again.warnings == ()
    assert [p.target for p in again.partitions] == [3, 10]


def test_partitions_that_no_longer_exist_and_negative_offsets_are_left_out() -> None:
    plan = plan_migration(
        "g",
        "kafka",
        source_offsets={tp(0): 3, tp(5): 4, tp(0, "gone"): 9, tp(1): -1},
        target_offsets={tp(0): -1},
        partitions_for_topic={"t": (0, 1)},
    )
    assert plan.new_offsets == {tp(0): 3}
    assert plan.partitions[0].target is None
    assert plan.warnings == (
        "[gone,0] has offset 9 in zookeeper but no longer exists: not migrated",
        "[t,5] has offset 4 in zookeeper but no longer exists: not migrated",
    )


# ---- usage --------------------------------------------------------------------------------------


def invoke(*args: str) -> Result:
    """Run the CLI in-process; an exception other than the exit itself fails the test."""
    result = CliRunner().invoke(cli, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


async def ainvoke(*args: str) -> Result:
    """``invoke`` from an async test: in a worker thread, off the test's event loop."""
    return await anyio.to_thread.run_sync(lambda: invoke(*args))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-g", "g", "--to", "etcd"], "'etcd' is not one of 'kafka', 'zookeeper'"),
        (["--to", "kafka"], "Missing option '--group'"),
        (["-g", "a/b"], "cannot be a ZooKeeper path element"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    result = invoke("offsets", "migrate", *args, "--zookeeper", "127.0.0.1:1")
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stdout == ""


# ---- against a cluster --------------------------------------------------------------------------


async def _make_topic(cluster: LocalCluster, name: str) -> None:
    await cluster.create_topic(name, PARTITIONS)
    await cluster.produce_to_partitions(
        name, {p: [(b"k", b"v")] * (5 * (p + 1)) for p in range(PARTITIONS)}
    )


async def _set_zk_offsets(zk_client: Any, group: str, topic: str, offsets: dict[int, int]) -> None:
    await zk_client.ensure_path(layout.offsets_dir(group, topic))
    for p, o in offsets.items():
        path = layout.offset_path(group, topic, p)
        if await zk_client.exists(path):
            await zk_client.set_data(path, str(o).encode())
        else:
            await zk_client.create(path, str(o).encode())


async def _zk_offsets(zk_client: Any, group: str, topic: str) -> dict[int, int]:
    result = {}
    for p in range(PARTITIONS):
        path = layout.offset_path(group, topic, p)
        if await zk_client.exists(path):
            result[p] = int(await zk_client.get_data(path))
    return result


async def _kafka_store_op(cluster: LocalCluster, group: str, op: Any) -> Any:
    async with GroupAdmin(cluster.zookeeper_connect) as admin:
        store = KafkaOffsetStore(admin.kafka, group, backoff_ms=100, socket_timeout_ms=10000)
        try:
            return await op(store)
        finally:
            await store.close()


async def _kafka_offsets(cluster: LocalCluster, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of ``topic`` as its Kafka coordinator holds them."""

    async def fetch(store: KafkaOffsetStore) -> dict[TopicPartition, int]:
        return await store.fetch([TopicPartition(topic, p) for p in range(PARTITIONS)])

    fetched = await _kafka_store_op(cluster, group, fetch)
    return {t.partition: o for t, o in fetched.items() if o >= 0}


async def _set_kafka_offsets(
    cluster: LocalCluster, group: str, topic: str, offsets: dict[int, int]
) -> None:
    async def commit(store: KafkaOffsetStore) -> int:
        tps = {TopicPartition(topic, p): o for p, o in offsets.items()}
        return await store.commit(tps, retries=30)  # a new cluster loads __consumer_offsets

    await _kafka_store_op(cluster, group, commit)


def _rows(result: Result) -> list[list[str]]:
    return [line.split() for line in result.stdout.splitlines()]


@integration
async def test_dry_run_changes_nothing_migrate_prints_what_it_sets_and_a_rerun_sets_nothing(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk, bootstrap = zk_kafka_cluster.zookeeper_connect, zk_kafka_cluster.bootstrap_servers
    topic, group = unique_topic, unique_group_id
    await _make_topic(zk_kafka_cluster, topic)
    await _set_zk_offsets(zk_client, group, topic, {0: 3, 1: 10, 2: 1})
    await _set_kafka_offsets(zk_kafka_cluster, group, topic, {1: 10, 2: 5})
    common = ["offsets", "migrate", "-g", group, "--zookeeper", zk, "--bootstrap-server", bootstrap]
    table = [
        ["TOPIC", "PARTITION", "SOURCE-OFFSET", "TARGET-OFFSET", "NEW-OFFSET"],
        [topic, "0", "3", "-", "3"],
        [topic, "1", "10", "10", "-"],
        [topic, "2", "1", "5", "-"],
    ]
    ahead = (
        f"Warning: [{topic},2] is at 5 in kafka, ahead of 1 in zookeeper: kept at 5 (a "
        "migration never moves an offset back)"
    )

    dry = await ainvoke(*common, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert _rows(dry) == table
    assert dry.stderr.splitlines() == [
        ahead,
        f"dry run: would set 1 offsets of group '{group}' from zookeeper to kafka; nothing "
        "was written",
    ]
    assert await _kafka_offsets(zk_kafka_cluster, group, topic) == {1: 10, 2: 5}

    done = await ainvoke(*common, "--to", "kafka")
    assert done.exit_code == 0, done.output
    assert _rows(done) == table
    assert done.stderr.splitlines() == [
        ahead,
        f"migrated 1 offsets of group '{group}' from zookeeper to kafka",
    ]
    assert await _kafka_offsets(zk_kafka_cluster, group, topic) == {0: 3, 1: 10, 2: 5}
    assert await _zk_offsets(zk_client, group, topic) == {0: 3, 1: 10, 2: 1}  # the source

    again = await ainvoke(*common, "-o", "json")
    assert again.exit_code == 0, again.output
    as_json = json.loads(again.stdout)
    assert as_json["migrated"] == 0 and as_json["dry_run"] is False
    assert [
        (p["partition"], p["target_offset"], p["new_offset"]) for p in as_json["partitions"]
    ] == [
        (0, 3, None),
        (1, 10, None),
        (2, 5, None),
    ]
    text_again = await ainvoke(*common)
    assert text_again.stderr.splitlines()[-1] == (
        f"nothing to migrate: kafka already holds every offset of group '{group}' that "
        "zookeeper has"
    )
    assert await _kafka_offsets(zk_kafka_cluster, group, topic) == {0: 3, 1: 10, 2: 5}


@integration
async def test_back_to_zookeeper_copies_the_kafka_groups_progress(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk, bootstrap = zk_kafka_cluster.zookeeper_connect, zk_kafka_cluster.bootstrap_servers
    topic, group = unique_topic, unique_group_id
    await _make_topic(zk_kafka_cluster, topic)
    await _set_zk_offsets(zk_client, group, topic, {0: 1, 1: 2})  # before the move to Kafka
    await _set_kafka_offsets(zk_kafka_cluster, group, topic, {0: 5, 1: 9, 3: 20})
    common = ["offsets", "migrate", "-g", group, "--zookeeper", zk, "--bootstrap-server", bootstrap]

    dry = await ainvoke(*common, "--to", "zookeeper", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert await _zk_offsets(zk_client, group, topic) == {0: 1, 1: 2}

    back = await ainvoke(*common, "--to", "zookeeper")
    assert back.exit_code == 0, back.output
    assert _rows(back) == [
        ["TOPIC", "PARTITION", "SOURCE-OFFSET", "TARGET-OFFSET", "NEW-OFFSET"],
        [topic, "0", "5", "1", "5"],
        [topic, "1", "9", "2", "9"],
        [topic, "3", "20", "-", "20"],
    ]
    assert back.stderr == f"migrated 3 offsets of group '{group}' from kafka to zookeeper\n"
    assert await _zk_offsets(zk_client, group, topic) == {0: 5, 1: 9, 3: 20}
    again = await ainvoke(*common, "--to", "zookeeper")
    assert again.exit_code == 0 and "nothing to migrate" in again.stderr
    # Without --bootstrap-server the brokers registered in ZooKeeper are used.
    zk_only = ["offsets", "migrate", "-g", group, "--zookeeper", zk, "--to", "zookeeper"]
    assert (await ainvoke(*zk_only)).exit_code == 0


@integration
async def test_refused_while_the_kafka_group_has_live_members(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk, bootstrap = zk_kafka_cluster.zookeeper_connect, zk_kafka_cluster.bootstrap_servers
    topic, group = unique_topic, unique_group_id
    await _make_topic(zk_kafka_cluster, topic)
    await _set_zk_offsets(zk_client, group, topic, {0: 4})
    common = ["offsets", "migrate", "-g", group, "--zookeeper", zk, "--bootstrap-server", bootstrap]
    config = ConsumerConfig(
        group_id=group,
        group_coordinator="kafka",
        bootstrap_servers=bootstrap,
        auto_commit_enable=False,
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
    )
    async with create_connector(config) as member:
        await member.create_message_streams({topic: 1})  # returns once it joined
        member_id = member.statistics().member_id
        refused = await ainvoke(*common)
        dry = await ainvoke(*common, "--dry-run")
        assert await _kafka_offsets(zk_kafka_cluster, group, topic) == {}
    assert refused.exit_code == 1
    assert refused.stdout == ""
    assert refused.stderr == (
        f"Error: Offsets of group '{group}' can only be migrated to kafka while the group has "
        f"no live members there; live now: {member_id}. Stop them first (their next commit "
        "would overwrite the migrated offsets).\n"
    )
    assert dry.exit_code == 0, dry.output
    assert (
        f"Warning: group '{group}' has live members in kafka ({member_id}): the migration is "
        "refused until they stop."
    ) in dry.stderr.splitlines()
    # The member left (LeaveGroup): the group is Empty and the migration goes through.
    done = await ainvoke(*common)
    assert done.exit_code == 0, done.output
    assert await _kafka_offsets(zk_kafka_cluster, group, topic) == {0: 4}


@integration
async def test_refused_while_the_zookeeper_group_has_live_members(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    topic, group = unique_topic, unique_group_id
    await _make_topic(zk_kafka_cluster, topic)
    await _set_kafka_offsets(zk_kafka_cluster, group, topic, {0: 4})
    config = config_for(zk_kafka_cluster, group, auto_commit_enable=False, consumer_id="live")
    back = ["offsets", "migrate", "-g", group, "--zookeeper", zk, "--to", "zookeeper"]
    forth = ["offsets", "migrate", "-g", group, "--zookeeper", zk, "--to", "kafka"]
    async with ZookeeperConsumerConnector(config) as connector:
        await connector.create_message_streams({topic: 1})
        await wait_settled([connector])
        await connector.commit_offsets({TopicPartition(topic, 1): 2})
        refused = await ainvoke(*back)
        source_live = await ainvoke(*forth, "--dry-run")
        assert await _zk_offsets(zk_client, group, topic) == {1: 2}
    assert refused.exit_code == 1
    assert refused.stderr == (
        f"Error: Offsets of group '{group}' can only be migrated to zookeeper while the group "
        f"has no live members there; live now: {group}_live. Stop them first (their next "
        "commit would overwrite the migrated offsets).\n"
    )
    # Live members of the *source* are only a warning: their later commits are not copied.
    assert source_live.exit_code == 0, source_live.output
    assert (
        f"Warning: group '{group}' still has live members in zookeeper ({group}_live): their "
        "later commits are not migrated; stop them and run this again"
    ) in source_live.stderr.splitlines()


@integration
async def test_a_group_without_offsets_in_the_source_is_unknown(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk, bootstrap = zk_kafka_cluster.zookeeper_connect, zk_kafka_cluster.bootstrap_servers
    group = unique_group_id
    common = ["offsets", "migrate", "-g", group, "--zookeeper", zk, "--bootstrap-server", bootstrap]
    missing = await ainvoke(*common)
    assert missing.exit_code == 4
    assert missing.stderr == f"Error: Consumer group '{group}' does not exist in zookeeper.\n"
    await zk_client.ensure_path(layout.ids_dir(group))  # a group, but no offsets
    empty = await ainvoke(*common)
    assert empty.exit_code == 4
    assert empty.stderr == (
        f"Error: Consumer group '{group}' has no committed offsets in zookeeper: nothing to "
        "migrate.\n"
    )
    back = await ainvoke(*common, "--to", "zookeeper")
    assert back.exit_code == 4
    assert back.stderr == (
        f"Error: Consumer group '{group}' has no committed offsets in kafka: nothing to migrate.\n"
    )
    unreachable = await ainvoke(
        "offsets", "migrate", "-g", group, "--zookeeper", "127.0.0.1:1",
        "--connect-timeout-ms", "500",
    )  # fmt: skip
    assert unreachable.exit_code == 3
