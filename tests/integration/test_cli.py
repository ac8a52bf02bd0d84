"""The ``aiozkconsumer`` command line against a real ZooKeeper + Kafka (LocalCluster).

Commands run through click's ``CliRunner`` (in a worker thread when the test's own loop runs
a connector: the CLI runs its own loop with ``asyncio.run``), or as a subprocess where a real
process matters (signals, what reaches stderr).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from _support import config_for, wait_settled
from click.testing import CliRunner, Result

from aiozkconsumer import ZookeeperConsumerConnector
from aiozkconsumer.cli import cli, main
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.zk import layout

integration = pytest.mark.integration

PARTITIONS = 4


def invoke(*args: str, input: str | None = None) -> Result:
    """Run the CLI in-process; an exception other than the exit itself fails the test."""
    result = CliRunner().invoke(cli, list(args), input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


async def ainvoke(*args: str) -> Result:
    """``invoke`` from an async test: in a worker thread, off the test's event loop."""
    return await anyio.to_thread.run_sync(lambda: invoke(*args))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _make_topic(cluster: LocalCluster, name: str, per_partition: int = 5) -> dict[int, int]:
    """Create ``name`` and fill partition ``p`` with ``per_partition * (p + 1)`` records."""
    await cluster.create_topic(name, PARTITIONS)
    await cluster.produce_to_partitions(
        name,
        {
            p: [
                (f"k{p}-{i}".encode(), f"v{p}-{i}".encode()) for i in range(per_partition * (p + 1))
            ]
            for p in range(PARTITIONS)
        },
    )
    return await cluster.log_end_offsets(name)


async def _set_offsets(zk_client: Any, group: str, topic: str, offsets: dict[int, int]) -> None:
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


def _cells(line: str) -> list[str]:
    return line.split()


# ---- usage -----------------------------------------------------------------------------------

COMMANDS = [
    [],
    ["consume"],
    ["groups"],
    ["groups", "list"],
    ["groups", "describe"],
    ["groups", "delete"],
    ["offsets"],
    ["offsets", "check"],
    ["offsets", "export"],
    ["offsets", "import"],
    ["offsets", "update"],
    ["offsets", "reset"],
    ["verify-rebalance"],
    ["demo"],
    ["provision"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c) or "top")
def test_every_command_has_help(command: list[str]) -> None:
    result = invoke(*command, "--help")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Usage: {' '.join(['cli', *command])}".rstrip())
    if not command:
        assert "Exit statuses:" in result.stdout
        for line in ("0    success", "2    usage error", "3    ZooKeeper", "4    unknown"):
            assert line in result.stdout


def test_main_returns_the_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert main(["groups", "describe"]) == 2  # --group is required
    assert "Missing option '--group'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["consume", "--topic", "a", "--whitelist", "b"], "exactly one of --topic"),
        (["consume"], "exactly one of --topic"),
        (["consume", "--topic", "a", "--property", "print.keys=true"], "print.keys"),
        (["consume", "--topic", "a", "--consumer-property", "novalue"], "KEY=VALUE"),
        (
            [
                "consume",
                "--topic",
                "a",
                "--from-beginning",
                "--consumer-property",
                "auto.offset.reset=largest",
            ],
            "Can't simultaneously specify --from-beginning",
        ),
        (["consume", "--topic", "a", "--max-messages", "0"], "--max-messages"),
        (["groups", "delete"], "give --group, --topic, or both"),
        (["groups", "describe", "--group", "a/b"], "cannot be a ZooKeeper path element"),
        (["offsets", "update", "sideways", "-g", "g", "-t", "t"], "sideways"),
        (["offsets", "import", "-f", "/nonexistent/file"], "No such file or directory"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], message: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_bad_consumer_property_values_exit_2() -> None:
    result = invoke("consume", "--topic", "t", "--consumer-property", "fetch.min.bytes=lots")
    assert result.exit_code == 2
    assert "Error: invalid consumer configuration: fetch.min.bytes" in result.stderr


# ---- unreachable ZooKeeper ---------------------------------------------------------------------


@integration
def test_unreachable_zookeeper_exits_3_with_a_single_line() -> None:
    zk = f"127.0.0.1:{_free_port()}"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aiozkconsumer",
            "groups",
            "list",
            "--zookeeper",
            zk,
            "--connect-timeout-ms",
            "500",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line == (
        f"Error: could not connect to ZooKeeper at '{zk}' within "
        f"zookeeper.connection.timeout.ms=500; last attempt: ZooKeeper at {zk} refused the "
        "connection (nothing listening on that port?)"
    )


@integration
@pytest.mark.parametrize(
    "args",
    [
        ["offsets", "check", "-g", "g"],
        ["groups", "describe", "-g", "g", "-o", "json"],
        ["verify-rebalance", "-g", "g"],
        ["offsets", "export", "-f", "-"],
        ["consume", "--topic", "t"],
    ],
    ids=lambda a: "-".join(a[:2]),
)
def test_every_command_exits_3_when_zookeeper_is_unreachable(args: list[str]) -> None:
    result = invoke(
        *args, "--zookeeper", f"127.0.0.1:{_free_port()}", "--connect-timeout-ms", "300"
    )
    assert result.exit_code == 3, result.output
    assert "Error: could not connect to ZooKeeper" in result.stderr
    assert result.stdout == ""


# ---- groups ------------------------------------------------------------------------------------


@integration
async def test_groups_list_and_describe_in_text_and_json(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    topic, group = unique_topic, unique_group_id
    ends = await _make_topic(zk_kafka_cluster, topic)
    config = config_for(zk_kafka_cluster, group, auto_commit_enable=False)
    async with (
        ZookeeperConsumerConnector(config.replace(consumer_id="one")) as one,
        ZookeeperConsumerConnector(config.replace(consumer_id="two")) as two,
    ):
        await one.create_message_streams({topic: PARTITIONS})
        await two.create_message_streams({topic: 1})
        await wait_settled([one, two])
        await one.commit_offsets({TopicPartition(topic, 0): 2, TopicPartition(topic, 1): 10})

        listed = await ainvoke("groups", "list", "--zookeeper", zk)
        listed_json = await ainvoke("groups", "list", "--zookeeper", zk, "--output", "json")
        text = await ainvoke("groups", "describe", "--zookeeper", zk, "--group", group)
        as_json = await ainvoke("groups", "describe", "--zookeeper", zk, "-g", group, "-o", "json")

    assert listed.exit_code == 0 and group in listed.stdout.splitlines()
    assert group in json.loads(listed_json.stdout)["groups"]

    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert _cells(lines[0]) == [
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
    ]
    # The original's "%-30s " first column, widened for longer topic names.
    assert lines[0].index("PARTITION") == max(30, len(topic)) + 1
    owner = f"{group}_one"
    assert _cells(lines[1]) == [topic, "0", "2", str(ends[0]), str(ends[0] - 2), owner]
    assert _cells(lines[2]) == [topic, "1", "10", "10", "0", owner]
    assert _cells(lines[3]) == [topic, "2", "-", str(ends[2]), "-", owner]
    assert _cells(lines[5]) == ["-", "-", "-", "-", "-", f"{group}_two"]  # owns nothing
    assert len(lines) == 6

    described = json.loads(as_json.stdout)
    assert described["group"] == group
    assert [p["log_end_offset"] for p in described["partitions"]] == [ends[p] for p in range(4)]
    assert described["partitions"][0] == {
        "topic": topic,
        "partition": 0,
        "current_offset": 2,
        "log_end_offset": ends[0],
        "lag": ends[0] - 2,
        "consumer_id": owner,
        "owner": f"{owner}-0",
    }
    assert described["members_without_partitions"] == [f"{group}_two"]
    assert [m["consumer_id"] for m in described["members"]] == [owner, f"{group}_two"]


@integration
def test_unknown_group_exits_4(zk_kafka_cluster: LocalCluster, unique_group_id: str) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    for args in (
        ["groups", "describe", "-g", unique_group_id],
        ["groups", "describe", "-g", unique_group_id, "-o", "json"],
        ["offsets", "check", "-g", unique_group_id],
        ["verify-rebalance", "-g", unique_group_id],
        ["offsets", "export", "-f", "-", "-g", unique_group_id],
    ):
        result = invoke(*args, "--zookeeper", zk)
        assert result.exit_code == 4, (args, result.output)
        assert result.stderr == f"Error: Consumer group '{unique_group_id}' does not exist.\n"
        assert result.stdout == ""


@integration
async def test_groups_delete_refuses_an_active_group(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    topic, group = unique_topic, unique_group_id
    await _make_topic(zk_kafka_cluster, topic)
    async with ZookeeperConsumerConnector(config_for(zk_kafka_cluster, group)) as connector:
        await connector.create_message_streams({topic: 1})
        refused = await ainvoke("groups", "delete", "--zookeeper", zk, "--group", group)
        refused_topic = await ainvoke(
            "groups", "delete", "--zookeeper", zk, "-g", group, "--topic", topic
        )
    assert refused.exit_code == 1
    assert refused.stderr == (
        f"Error: Delete for group '{group}' failed because its consumers are still active.\n"
    )
    assert refused_topic.exit_code == 1
    assert "failed because its consumers are still active." in refused_topic.stderr
    assert await zk_client.exists(layout.group_dir(group))

    deleted = await ainvoke("groups", "delete", "--zookeeper", zk, "--group", group)
    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout == (
        f"Deleted all consumer group information for group '{group}' in zookeeper.\n"
    )
    assert not await zk_client.exists(layout.group_dir(group))
    again = await ainvoke("groups", "delete", "--zookeeper", zk, "-g", group, "-o", "json")
    assert again.exit_code == 4
    assert json.loads(again.stdout)["results"][0]["deleted"] is False


@integration
async def test_groups_delete_of_a_topic_in_every_inactive_group(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    g1, g2 = f"{unique_group_id}-1", f"{unique_group_id}-2"
    topic = f"t-{unique_group_id}"
    await _set_offsets(zk_client, g1, topic, {0: 1})
    await _set_offsets(zk_client, g1, "other", {0: 1})
    await _set_offsets(zk_client, g2, topic, {0: 1})
    result = await ainvoke("groups", "delete", "--zookeeper", zk, "--topic", topic)
    assert result.exit_code == 0, result.output
    assert not await zk_client.exists(layout.offsets_dir(g1, topic))
    assert await zk_client.exists(layout.offsets_dir(g1, "other"))
    assert not await zk_client.exists(layout.group_dir(g2))  # its only topic


# ---- offsets -----------------------------------------------------------------------------------


@integration
async def test_offsets_check_with_broker_info(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    topic, group = unique_topic, unique_group_id
    ends = await _make_topic(zk_kafka_cluster, topic)
    await _set_offsets(zk_client, group, topic, {0: 1, 1: 2, 2: 3})
    text = await ainvoke("offsets", "check", "--zookeeper", zk, "-g", group, "--broker-info")
    as_json = await ainvoke(
        "offsets",
        "check",
        "--zookeeper",
        zk,
        "-g",
        group,
        "--topic",
        topic,
        "-o",
        "json",
        "--broker-info",
    )
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert _cells(lines[0]) == ["Group", "Topic", "Pid", "Offset", "logSize", "Lag", "Owner"]
    assert _cells(lines[1]) == [group, topic, "0", "1", str(ends[0]), str(ends[0] - 1), "none"]
    assert _cells(lines[4]) == [group, topic, "3", "unknown", str(ends[3]), "unknown", "none"]
    broker = zk_kafka_cluster.bootstrap_servers.split(",")[0]
    assert lines[5:] == ["BROKER INFO", f"0 -> {broker}"]

    checked = json.loads(as_json.stdout)
    assert checked["brokers"] == {"0": broker}
    assert checked["partitions"][2] == {
        "group": group,
        "topic": topic,
        "pid": 2,
        "offset": 3,
        "log_size": ends[2],
        "lag": ends[2] - 3,
        "owner": None,
    }


@integration
async def test_export_then_import_round_trips_offsets_exactly(
    zk_kafka_cluster: LocalCluster, zk_client: Any, tmp_path: Path, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    g1, g2 = f"{unique_group_id}-a", f"{unique_group_id}-b"
    await _set_offsets(zk_client, g1, "topic-x", {0: 0, 1: 4711, 3: 2**42})
    await _set_offsets(zk_client, g2, "topic-y", {2: 9})
    exported = tmp_path / "offsets.txt"
    result = await ainvoke(
        "offsets", "export", "--zookeeper", zk, "-f", str(exported), "-g", g2, "-g", g1
    )
    assert result.exit_code == 0, result.output
    assert exported.read_text() == (
        f"/consumers/{g1}/offsets/topic-x/0:0\n"
        f"/consumers/{g1}/offsets/topic-x/1:4711\n"
        f"/consumers/{g1}/offsets/topic-x/3:{2**42}\n"
        f"/consumers/{g2}/offsets/topic-y/2:9\n"
    )
    assert "exported 4 offsets of 2 groups" in result.stderr

    for g in (g1, g2):
        assert (await ainvoke("groups", "delete", "--zookeeper", zk, "-g", g)).exit_code == 0
    imported = await ainvoke("offsets", "import", "--zookeeper", zk, "-f", str(exported))
    assert imported.exit_code == 0, imported.output
    assert imported.stdout == f"imported 4 offsets from {exported}\n"
    assert await _zk_offsets(zk_client, g1, "topic-x") == {0: 0, 1: 4711, 3: 2**42}
    assert await zk_client.get_data(layout.offset_path(g2, "topic-y", 2)) == b"9"

    again = tmp_path / "again.txt"
    as_json = await ainvoke(
        "offsets", "export", "--zookeeper", zk, "-f", str(again), "-g", g1, "-g", g2, "-o", "json"
    )
    assert again.read_text() == exported.read_text()
    summary = json.loads(as_json.stdout)
    assert summary["groups"] == [g1, g2]
    assert summary["offsets"][1] == {
        "group": g1,
        "topic": "topic-x",
        "partition": 1,
        "offset": 4711,
        "path": f"/consumers/{g1}/offsets/topic-x/1",
    }
    # -o json with --output-file -: the JSON document on stdout, not the file's lines.
    to_stdout = await ainvoke(
        "offsets", "export", "--zookeeper", zk, "-f", "-", "-g", g1, "-g", g2, "-o", "json"
    )
    assert to_stdout.exit_code == 0, to_stdout.output
    assert json.loads(to_stdout.stdout) == {**summary, "file": "-"}


@integration
async def test_import_of_a_malformed_file_names_the_line_and_writes_nothing(
    zk_kafka_cluster: LocalCluster, zk_client: Any, tmp_path: Path, unique_group_id: str
) -> None:
    bad = tmp_path / "bad.txt"
    good, broken = f"/consumers/{unique_group_id}/offsets/t/0:5", "/consumers/g/offsets/t/1 7"
    bad.write_text(f"{good}\n\n{broken}\n")
    result = await ainvoke(
        "offsets", "import", "--zookeeper", zk_kafka_cluster.zookeeper_connect, "-f", str(bad)
    )
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {bad}, line 3: expected '<path>:<offset>'")
    assert len(result.stderr.splitlines()) == 1
    assert not await zk_client.exists(layout.group_dir(unique_group_id))


@integration
async def test_offsets_update_to_earliest_and_latest(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    topic, group = unique_topic, unique_group_id
    ends = await _make_topic(zk_kafka_cluster, topic)
    latest = await ainvoke(
        "offsets", "update", "latest", "--zookeeper", zk, "-g", group, "-t", topic
    )
    assert latest.exit_code == 0, latest.output
    assert latest.stdout.splitlines()[-1] == f"updated the offset for {PARTITIONS} partitions"
    assert latest.stdout.splitlines()[0] == f"updating partition 0 with new offset: {ends[0]}"
    assert await _zk_offsets(zk_client, group, topic) == ends

    earliest = await ainvoke(
        "offsets", "update", "earliest", "--zookeeper", zk, "-g", group, "-t", topic, "-o", "json"
    )
    assert json.loads(earliest.stdout)["offsets"] == {str(p): 0 for p in range(PARTITIONS)}
    assert await _zk_offsets(zk_client, group, topic) == dict.fromkeys(range(PARTITIONS), 0)

    missing = await ainvoke(
        "offsets", "update", "latest", "--zookeeper", zk, "-g", group, "-t", f"{topic}-nope"
    )
    assert missing.exit_code == 4
    assert missing.stderr == f"Error: Topic '{topic}-nope' does not exist.\n"


# ---- verify-rebalance ----------------------------------------------------------------------------


@integration
async def test_verify_rebalance_succeeds_then_fails_on_a_broken_owner(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    topic, group = unique_topic, unique_group_id
    await _make_topic(zk_kafka_cluster, topic)
    config = config_for(zk_kafka_cluster, group)
    async with (
        ZookeeperConsumerConnector(config) as a,
        ZookeeperConsumerConnector(config) as b,
    ):
        await a.create_message_streams({topic: 1})
        await b.create_message_streams({topic: 1})
        await wait_settled([a, b])
        ok = await ainvoke("verify-rebalance", "--zookeeper", zk, "--group", group)
        await zk_client.set_data(layout.owner_path(group, topic, 1), b"someone-else-0")
        failed = await ainvoke("verify-rebalance", "--zookeeper", zk, "--group", group)
        failed_json = await ainvoke(
            "verify-rebalance", "--zookeeper", zk, "-g", group, "-o", "json"
        )
    assert ok.exit_code == 0, ok.output
    assert ok.stdout == "Rebalance operation successful !\n"
    assert failed.exit_code == 1
    assert failed.stdout.splitlines() == [
        f"Owner someone-else-0 for partition [{topic},1] is not a valid member of consumer "
        f"group {group}",
        "Rebalance operation failed !",
    ]
    assert failed_json.exit_code == 1
    report = json.loads(failed_json.stdout)
    assert report["ok"] is False
    assert report["owners"][topic]["1"] == "someone-else-0"


# ---- consume -------------------------------------------------------------------------------------


def _console_groups(zk: str) -> set[str]:
    listed = invoke("groups", "list", "--zookeeper", zk)
    return {g for g in listed.stdout.split() if g.startswith("console-consumer-")}


@integration
def test_consume_from_beginning_formats_records_and_removes_its_generated_group(
    zk_kafka_cluster: LocalCluster, unique_topic: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    asyncio.run(_make_topic(zk_kafka_cluster, unique_topic, per_partition=2))
    before = _console_groups(zk)
    result = invoke(
        "consume",
        "--zookeeper",
        zk,
        "--topic",
        unique_topic,
        "--from-beginning",
        "--max-messages",
        "20",
        "--property",
        "print.key=true",
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
        "--property",
        "key.separator=|",
    )
    assert result.exit_code == 0, result.output
    expected = {
        f"Partition:{p}|Offset:{i}|k{p}-{i}|v{p}-{i}"
        for p in range(PARTITIONS)
        for i in range(2 * (p + 1))
    }
    assert set(result.stdout.splitlines()) == expected  # 2 + 4 + 6 + 8 = 20 records
    assert result.stderr.splitlines()[-1] == "Processed a total of 20 messages"
    assert _console_groups(zk) <= before  # the generated group was deleted


@integration
async def test_consume_until_timeout_commits_and_guards_from_beginning(
    zk_kafka_cluster: LocalCluster,
    zk_client: Any,
    tmp_path: Path,
    unique_topic: str,
    unique_group_id: str,
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    topic, group = unique_topic, unique_group_id
    ends = await _make_topic(zk_kafka_cluster, topic)
    total = sum(ends.values())
    properties = tmp_path / "consumer.properties"
    properties.write_text(
        f"group.id={group}\n# only the shutdown commits\nauto.commit.interval.ms=600000\n"
    )
    common = [
        "consume",
        "--zookeeper",
        zk,
        "--whitelist",
        topic,
        "--consumer.config",
        str(properties),
    ]

    first = await ainvoke(*common, "--from-beginning", "--timeout-ms", "1500")
    assert first.exit_code == 0, first.output
    assert len(first.stdout.splitlines()) == total
    assert first.stderr.splitlines()[-1] == f"Processed a total of {total} messages"
    assert await _zk_offsets(zk_client, group, topic) == ends  # committed at shutdown
    assert await zk_client.get_children(layout.ids_dir(group)) == []  # released

    refused = await ainvoke(*common, "--from-beginning", "--timeout-ms", "200")
    assert refused.exit_code == 1
    assert (
        f"Error: Found previous offset information for this group {group}. Please use "
        "--delete-consumer-offsets to delete previous offsets metadata"
    ) in refused.stderr

    again = await ainvoke(
        *common, "--from-beginning", "--delete-consumer-offsets", "--timeout-ms", "1500"
    )
    assert again.exit_code == 0, again.output
    assert len(again.stdout.splitlines()) == total

    nothing_new = await ainvoke(*common, "--timeout-ms", "300")
    assert nothing_new.exit_code == 0
    assert nothing_new.stdout == ""
    assert nothing_new.stderr.splitlines()[-1] == "Processed a total of 0 messages"


@integration
async def test_consume_whitelist_and_blacklist_select_topics(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    a, b = f"{unique_topic}-a", f"{unique_topic}-b"
    ends_a = await _make_topic(zk_kafka_cluster, a, per_partition=1)
    ends_b = await _make_topic(zk_kafka_cluster, b, per_partition=2)
    both = await ainvoke(
        "consume",
        "--zookeeper",
        zk,
        "--whitelist",
        f"{unique_topic}-(a|b)",
        "--from-beginning",
        "--timeout-ms",
        "1500",
        "--group",
        f"{unique_group_id}-w",
    )
    assert len(both.stdout.splitlines()) == sum(ends_a.values()) + sum(ends_b.values())
    # A blacklist matching every topic but a (the session cluster has many): only a is read.
    not_b = await ainvoke(
        "consume",
        "--zookeeper",
        zk,
        "--blacklist",
        f"(?!{unique_topic}-a$).*",
        "--from-beginning",
        "--timeout-ms",
        "1500",
        "--group",
        f"{unique_group_id}-b",
    )
    assert {line.split("-")[0] for line in not_b.stdout.splitlines()} == {"v0", "v1", "v2", "v3"}
    assert len(not_b.stdout.splitlines()) == sum(ends_a.values())


@integration
async def test_consume_shuts_down_cleanly_on_sigterm(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = unique_topic, unique_group_id
    ends = await _make_topic(zk_kafka_cluster, topic)
    total = sum(ends.values())
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiozkconsumer",
        "consume",
        "--zookeeper",
        zk_kafka_cluster.zookeeper_connect,
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--consumer-property",
        "auto.commit.interval.ms=600000",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        with anyio.fail_after(60):
            lines = [await proc.stdout.readline() for _ in range(total)]
        assert all(line.startswith(b"v") for line in lines)
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(60):
            rest, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert rest == b""
    assert err.decode().splitlines()[-1] == f"Processed a total of {total} messages"
    assert await _zk_offsets(zk_client, group, topic) == ends
    assert await zk_client.get_children(layout.ids_dir(group)) == []


# ---- demo and provision --------------------------------------------------------------------------


@integration
def test_demo_runs_against_an_existing_cluster(zk_kafka_cluster: LocalCluster) -> None:
    result = invoke(
        "demo",
        "--zookeeper",
        zk_kafka_cluster.zookeeper_connect,
        "--bootstrap-server",
        zk_kafka_cluster.bootstrap_servers,
        "--records",
        "2000",
        "--partitions",
        "4",
        "--consumers",
        "2",
        "--streams",
        "1",
        "--no-progress",
        "--no-spark",  # tests/integration/test_demo_spark.py runs the Spark section
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "RESULT: OK"


def test_demo_options_are_checked() -> None:
    assert invoke("demo", "--records", "0").exit_code == 2
    result = invoke("demo", "--zookeeper", "127.0.0.1:1")
    assert result.exit_code == 2
    assert "--zookeeper needs --bootstrap-server too" in result.stderr


@integration
def test_provision_prints_the_libs_directory(zk_kafka_cluster: LocalCluster) -> None:
    result = invoke("provision")
    assert result.exit_code == 0, result.output
    assert Path(result.stdout.split()[-1]).name == "libs"


# ---- KRaft: no brokers in ZooKeeper ----------------------------------------------------------


@integration
async def test_kraft_cluster_works_with_bootstrap_server(
    kraft_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    zk, bootstrap = kraft_cluster.zookeeper_connect, kraft_cluster.bootstrap_servers
    topic, group = unique_topic, unique_group_id
    ends = await _make_topic(kraft_cluster, topic)

    for args in (
        ["offsets", "update", "latest", "-g", group, "-t", topic],
        ["consume", "--topic", topic, "--timeout-ms", "100"],
    ):
        without = await ainvoke(*args, "--zookeeper", zk)
        assert without.exit_code == 3, without.output
        assert "Error: No brokers found in ZK." in without.stderr

    consumed = await ainvoke(
        "consume", "--zookeeper", zk, "--bootstrap-server", bootstrap, "--topic", topic,
        "--group", group, "--from-beginning", "--timeout-ms", "2000",
    )  # fmt: skip
    assert consumed.exit_code == 0, consumed.output
    assert len(consumed.stdout.splitlines()) == sum(ends.values())

    described = await ainvoke(
        "groups", "describe", "--zookeeper", zk, "--bootstrap-server", bootstrap, "-g", group,
        "-o", "json",
    )  # fmt: skip
    assert described.exit_code == 0, described.output
    rows = json.loads(described.stdout)["partitions"]
    assert {r["partition"]: (r["current_offset"], r["log_end_offset"]) for r in rows} == {
        p: (end, end) for p, end in ends.items()
    }
    earliest = await ainvoke(
        "offsets", "update", "earliest", "--zookeeper", zk, "--bootstrap-server", bootstrap,
        "-g", group, "-t", topic,
    )  # fmt: skip
    assert earliest.stdout.splitlines()[-1] == f"updated the offset for {PARTITIONS} partitions"


@integration
async def test_consume_max_messages_commits_exactly_what_was_printed(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    await _make_topic(zk_kafka_cluster, unique_topic, per_partition=50)
    result = await ainvoke(
        "consume", "--zookeeper", zk_kafka_cluster.zookeeper_connect, "--topic", unique_topic,
        "--group", unique_group_id, "--from-beginning", "--max-messages", "7",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 7
    committed = await _zk_offsets(zk_client, unique_group_id, unique_topic)
    assert sum(committed.values()) == 7


@pytest.mark.parametrize("option", ["--to-datetime=2024-05-01T12:30:00", "--shift-by"])
def test_offsets_update_points_at_offsets_reset_for_its_targets(option: str) -> None:
    result = invoke("offsets", "update", "latest", "-g", "g", "-t", "t", option, "-5")
    assert result.exit_code == 2, result.output
    name = option.split("=")[0]
    assert (
        f"Error: offsets update sets the earliest or latest offsets only; {name} is an "
        "option of 'offsets reset'"
    ) in result.stderr
    assert result.stdout == ""


@integration
async def test_one_rule_for_group_names_and_force_deletes_one_made_by_hand(
    zk_kafka_cluster: LocalCluster, zk_client: Any, tmp_path: Path, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    odd = f"has space {unique_group_id}"  # made by hand: ZooKeeper takes it, group.id does not
    await zk_client.ensure_path(f"/consumers/{odd}/offsets/t")
    await zk_client.create(f"/consumers/{odd}/offsets/t/0", b"5")
    listed = await ainvoke("groups", "list", "--zookeeper", zk)
    assert odd in listed.stdout.splitlines()  # shown
    described = await ainvoke("groups", "describe", "--zookeeper", zk, "-g", odd)
    assert described.exit_code == 2, described.output
    assert f"{odd!r} is illegal; allowed characters are ASCII" in described.stderr
    refused = await ainvoke("groups", "delete", "--zookeeper", zk, "-g", odd)
    assert refused.exit_code == 2, refused.output
    assert "a group of that name made by hand can be deleted with --force" in refused.stderr
    assert await zk_client.exists(f"/consumers/{odd}")
    forced = await ainvoke("groups", "delete", "--zookeeper", zk, "-g", odd, "--force")
    assert forced.exit_code == 0, forced.output
    assert not await zk_client.exists(f"/consumers/{odd}")
    # offsets import does not create such a group (the rule of every other command)
    offsets = tmp_path / "offsets.txt"
    offsets.write_text(
        f"/consumers/{unique_group_id}/offsets/t/0:1\n/consumers/{odd}/offsets/t/0:5\n"
    )
    imported = await ainvoke("offsets", "import", "--zookeeper", zk, "-f", str(offsets))
    assert imported.exit_code == 2, imported.output
    assert "line 2" in imported.stderr and f"{odd!r} is illegal" in imported.stderr
    assert not await zk_client.exists(f"/consumers/{odd}")
    assert not await zk_client.exists(f"/consumers/{unique_group_id}")  # nothing written
