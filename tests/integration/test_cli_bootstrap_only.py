"""An operator's day with ``--bootstrap-server`` alone, on a KRaft cluster (Kafka 4.3).

Every ``groups`` and ``offsets`` command is run against a bootstrap address only, for a
classic and a ``consumer`` (KIP-848) group of ours: nothing listens where ``--zookeeper``
defaults to (``localhost:2181``, checked first), so a command that dialled ZooKeeper would
fail. What the CLI says of a group is compared with Kafka's own ``kafka-consumer-groups.sh``
(``ConsumerGroupCommand`` from the kit's Kafka 4.3 jars) on the same group: members,
assignment, offsets and lag. Writes are refused while the group has live members, with
nothing written; after the members stop, reset, export, import, delete-offsets and delete
work as the tool's do. ``consume --bootstrap-server -g`` joins a Kafka group.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner, Result

from aiozkconsumer import ConsumerConfig, TopicPartition, create_connector
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.cli import cli
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.provision import provision_kafka

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 10
CONSUMED = 7  # records read (and committed) per partition by the live member


def invoke(*args: str, stdin: str | None = None) -> Result:
    """Run the CLI in-process, with no ZooKeeper in the environment."""
    env = {"AIOZKCONSUMER_ZOOKEEPER": None, "AIOZKCONSUMER_BOOTSTRAP_SERVER": None}
    result = CliRunner().invoke(cli, list(args), input=stdin, env=env)  # type: ignore[arg-type]
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


async def ainvoke(*args: str, stdin: str | None = None) -> Result:
    """``invoke`` from an async test: in a worker thread, off the test's event loop."""
    return await anyio.to_thread.run_sync(lambda: invoke(*args, stdin=stdin))


def kafka_tool(bootstrap: str, *args: str) -> str:
    """Kafka's ``kafka-consumer-groups.sh`` (``ConsumerGroupCommand``, Kafka 4.3) output."""
    libs = provision_kafka(flavour="kraft", quiet=True) / "libs"
    done = subprocess.run(
        [
            "java",
            "-Xmx256m",
            "-Dlog4j2.level=ERROR",
            "-Dlog4j2.rootLogger.level=ERROR",
            "-cp",
            f"{libs}/*",
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            "--bootstrap-server",
            bootstrap,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "KAFKA_LOG4J_OPTS": ""},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def tool_rows(output: str, header_start: str) -> list[dict[str, str]]:
    """The rows of a ``kafka-consumer-groups.sh`` table whose header begins with
    ``header_start``, as ``{column: value}``."""
    lines = [line for line in output.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    headers = lines[start].split()
    return [dict(zip(headers, line.split(), strict=False)) for line in lines[start + 1 :]]


def _refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture(scope="module", autouse=True)
def no_default_zookeeper() -> None:
    """Nothing listens at ``--zookeeper``'s default: a command that dialled it would fail."""
    assert _refused(2181), "something listens on 127.0.0.1:2181: the test could not tell"


def _config(cluster: LocalCluster, group: str, protocol: str) -> ConsumerConfig:
    classic: dict[str, Any] = (
        {"session_timeout_ms": 10000, "heartbeat_interval_ms": 1000}
        if protocol == "classic"
        else {}
    )
    return ConsumerConfig(
        group_id=group,
        group_coordinator="kafka",
        group_protocol=protocol,
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        auto_commit_enable=False,
        client_id="ops-day",
        **classic,
    )


async def _read_exactly(connector: ConsumerConnector, topic: str) -> None:
    """Read up to offset CONSUMED on every partition, commit those offsets."""
    streams = await connector.create_message_streams({topic: 1})
    positions: dict[int, int] = {}
    with anyio.fail_after(60):
        async for m in streams[topic][0]:
            positions[m.partition] = m.offset + 1
            if len(positions) == PARTITIONS and all(o >= PER_PARTITION for o in positions.values()):
                break
    await connector.commit_offsets({TopicPartition(topic, p): CONSUMED for p in positions})


def _rows_of_ours(result: Result) -> list[list[str]]:
    assert result.exit_code == 0, result.output
    return [line.split() for line in result.stdout.splitlines()[1:]]


async def _topic_with_records(cluster: LocalCluster, topic: str) -> None:
    await cluster.create_topic(topic, PARTITIONS)
    await cluster.produce_to_partitions(
        topic, {p: [(b"k", b"v%d" % i) for i in range(PER_PARTITION)] for p in range(PARTITIONS)}
    )


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_describe_list_and_refusals_of_a_live_group(
    kraft_cluster: LocalCluster, unique_topic: str, unique_group_id: str, protocol: str
) -> None:
    """A group of ours with one live member that read every record and committed offset
    :data:`CONSUMED` of each partition (lag 3 per partition)."""
    topic, group = unique_topic, unique_group_id
    await _topic_with_records(kraft_cluster, topic)
    async with create_connector(_config(kraft_cluster, group, protocol)) as connector:
        await _read_exactly(connector, topic)
        await _live_group_checks(kraft_cluster, topic, group)


async def _live_group_checks(kraft_cluster: LocalCluster, topic: str, group: str) -> None:
    bootstrap = kraft_cluster.bootstrap_servers
    b = ("--bootstrap-server", bootstrap)

    # What Kafka's own tool says of the group.
    tool_offsets = tool_rows(
        await anyio.to_thread.run_sync(kafka_tool, bootstrap, "--describe", "--group", group),
        "GROUP",
    )
    tool_members = tool_rows(
        await anyio.to_thread.run_sync(
            kafka_tool, bootstrap, "--describe", "--group", group, "--members", "--verbose"
        ),
        "GROUP",
    )
    tool_state = tool_rows(
        await anyio.to_thread.run_sync(
            kafka_tool, bootstrap, "--describe", "--group", group, "--state"
        ),
        "GROUP",
    )

    described = json.loads(
        (await ainvoke("groups", "describe", "-g", group, *b, "-o", "json")).stdout
    )
    ours = {
        (p["topic"], p["partition"]): (
            p["current_offset"],
            p["log_end_offset"],
            p["lag"],
            p["consumer_id"],
        )
        for p in described["partitions"]
    }
    theirs = {
        (r["TOPIC"], int(r["PARTITION"])): (
            int(r["CURRENT-OFFSET"]),
            int(r["LOG-END-OFFSET"]),
            int(r["LAG"]),
            r["CONSUMER-ID"],
        )
        for r in tool_offsets
    }
    assert ours == theirs
    assert {v[:3] for v in ours.values()} == {(CONSUMED, PER_PARTITION, PER_PARTITION - CONSUMED)}

    members = _rows_of_ours(await ainvoke("groups", "describe", "-g", group, *b, "--members"))
    assert [(m[0], m[-2], m[-1]) for m in members] == [
        (r["CONSUMER-ID"], r["#PARTITIONS"], r["CURRENT-ASSIGNMENT"]) for r in tool_members
    ]
    assert members[0][-1] == f"{topic}:0,1,2"

    state = _rows_of_ours(await ainvoke("groups", "describe", "-g", group, *b, "--state"))
    (row,) = tool_state
    assert (state[0][0], state[0][-3], state[0][-2], state[0][-1]) == (
        group,
        row["ASSIGNMENT-STRATEGY"],
        row["STATE"],
        row["#MEMBERS"],
    )
    assert described["type"] == ("consumer" if described["assignor"] == "uniform" else "classic")

    listed = await ainvoke("groups", "list", *b, "--state", "--type")
    assert listed.exit_code == 0, listed.output
    mine = [line.split() for line in listed.stdout.splitlines() if line.startswith(group + " ")]
    assert mine == [[group, described["type"].capitalize(), "Stable"]]
    tool_listed = tool_rows(
        await anyio.to_thread.run_sync(kafka_tool, bootstrap, "--list", "--state", "--type"),
        "GROUP",
    )
    assert [[r["GROUP"], r["TYPE"], r["STATE"]] for r in tool_listed if r["GROUP"] == group] == mine

    # Writes are refused while the member is live, before anything is written.
    reset = await ainvoke(
        "offsets", "reset", "-g", group, "--topic", topic, "--to-earliest", "--execute", *b
    )
    assert reset.exit_code == 1
    assert "live members" in reset.stderr and "Stop them first" in reset.stderr
    deleted = await ainvoke("groups", "delete", "-g", group, *b)
    assert deleted.exit_code == 1
    assert "not empty" in deleted.stderr and "live members" in deleted.stderr
    offsets_deleted = await ainvoke("groups", "delete-offsets", "-g", group, "-t", topic, *b)
    assert offsets_deleted.exit_code == 1
    assert "GROUP_SUBSCRIBED_TO_TOPIC" in offsets_deleted.stdout
    imported = await ainvoke(
        "offsets", "import", "-f", "-", *b, stdin=f"/consumers/{group}/offsets/{topic}/0:1\n"
    )
    assert imported.exit_code == 1
    assert "has live members" in imported.stderr and "nothing was imported" in imported.stderr
    after = json.loads((await ainvoke("groups", "describe", "-g", group, *b, "-o", "json")).stdout)
    assert [p["current_offset"] for p in after["partitions"]] == [CONSUMED] * PARTITIONS


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_writes_of_a_stopped_group_match_the_tools(
    kraft_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    protocol: str,
    tmp_path: Path,
) -> None:
    topic, group = unique_topic, unique_group_id
    b = ("--bootstrap-server", kraft_cluster.bootstrap_servers)
    await _topic_with_records(kraft_cluster, topic)
    async with create_connector(_config(kraft_cluster, group, protocol)) as connector:
        await _read_exactly(connector, topic)
    # The member left: the group is empty, its offsets stay.

    dry = await ainvoke(
        "offsets", "reset", "-g", group, "-t", topic, "--to-offset", "3", "--dry-run", *b
    )
    assert [r[2:] for r in _rows_of_ours(dry)] == [[str(CONSUMED), "3"]] * PARTITIONS
    assert "nothing was written" in dry.stderr
    done = await ainvoke(
        "offsets", "reset", "-g", group, "-t", topic, "--to-offset", "3", "--execute", *b
    )
    assert done.exit_code == 0, done.output
    tool = tool_rows(
        await anyio.to_thread.run_sync(
            kafka_tool, kraft_cluster.bootstrap_servers, "--describe", "--group", group
        ),
        "GROUP",
    )
    assert sorted((int(r["PARTITION"]), int(r["CURRENT-OFFSET"])) for r in tool) == [
        (p, 3) for p in range(PARTITIONS)
    ]

    exported = await ainvoke("offsets", "export", "-g", group, "-f", "-", *b)
    assert exported.exit_code == 0, exported.output
    assert exported.stdout.splitlines() == [
        f"/consumers/{group}/offsets/{topic}/{p}:3" for p in range(PARTITIONS)
    ]
    file = tmp_path / "offsets.txt"
    file.write_text(f"/consumers/{group}/offsets/{topic}/1:9\n", encoding="utf-8")
    imported = await ainvoke("offsets", "import", "-f", str(file), *b)
    assert imported.exit_code == 0, imported.output

    checked = await ainvoke("offsets", "check", "-g", group, *b, "-o", "json")
    assert checked.exit_code == 0, checked.output
    assert [p["offset"] for p in json.loads(checked.stdout)["partitions"]] == [3, 9, 3]

    dropped = await ainvoke("groups", "delete-offsets", "-g", group, "-t", f"{topic}:2", *b)
    assert dropped.exit_code == 0, dropped.output
    assert dropped.stdout.splitlines()[1].split() == [topic, "2", "Successful"]
    tool = tool_rows(
        await anyio.to_thread.run_sync(
            kafka_tool, kraft_cluster.bootstrap_servers, "--describe", "--group", group
        ),
        "GROUP",
    )
    assert sorted(int(r["PARTITION"]) for r in tool) == [0, 1]

    gone = await ainvoke("groups", "delete", "-g", group, *b)
    assert gone.exit_code == 0, gone.output
    unknown = await ainvoke("groups", "describe", "-g", group, *b)
    assert unknown.exit_code == 4
    assert "does not exist" in unknown.stderr
    again = await ainvoke("groups", "delete", "-g", group, *b)
    assert again.exit_code == 4
    assert "does not exist" in again.stderr


async def test_console_consumer_joins_a_kafka_group(
    kraft_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = unique_topic, unique_group_id
    b = ("--bootstrap-server", kraft_cluster.bootstrap_servers)
    await kraft_cluster.create_topic(topic, 2)
    await kraft_cluster.produce_to_partitions(
        topic, {p: [(b"k", b"v%d-%d" % (p, i)) for i in range(5)] for p in range(2)}
    )
    consumed = await ainvoke(
        "consume", "--topic", topic, "-g", group, "--from-beginning", "--max-messages", "10", *b
    )
    assert consumed.exit_code == 0, consumed.output
    assert sorted(consumed.stdout.splitlines()) == sorted(
        f"v{p}-{i}" for p in range(2) for i in range(5)
    )
    described = json.loads(
        (await ainvoke("groups", "describe", "-g", group, *b, "-o", "json")).stdout
    )
    assert [p["current_offset"] for p in described["partitions"]] == [5, 5]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [
                "offsets",
                "reset",
                "-g",
                "g",
                "-t",
                "t",
                "--to-earliest",
                "--dry-run",
                "--offsets-storage",
                "zookeeper",
            ],
            "--offsets-storage zookeeper needs --zookeeper",
        ),
        (["offsets", "update", "earliest", "-g", "g", "-t", "t"], "offsets reset --group g"),
        (["groups", "delete", "-g", "g", "--topic", "t"], "groups delete-offsets"),
        (["groups", "delete", "-g", "g", "--force"], "--force is not used with"),
    ],
    ids=["reset-zk-storage", "update", "delete-topic", "delete-force"],
)
def test_bootstrap_alone_refuses_what_needs_zookeeper(args: Sequence[str], message: str) -> None:
    result = invoke(*args, "--bootstrap-server", "127.0.0.1:1")
    assert result.exit_code == 2
    assert message in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["groups", "list", "--state"], "--state lists Kafka groups"),
        (["groups", "delete-offsets", "-g", "g", "-t", "t"], "delete-offsets deletes a Kafka"),
    ],
    ids=["list-state", "delete-offsets"],
)
def test_kafka_only_options_say_what_they_need(args: Sequence[str], message: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2
    assert message in result.stderr
