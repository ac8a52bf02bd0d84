"""``aiozkconsumer offsets reset`` and the CSV of ``offsets import``.

The planning (:mod:`aiozkconsumer.tools.reset`) and the file formats
(:mod:`aiozkconsumer.tools.offsets_file`) are tested without servers; the command against the
session's ZooKeeper + Kafka cluster, reading back what it wrote from ZooKeeper and from the
group's Kafka coordinator. The CLI runs its own event loop (``asyncio.run``), so it is invoked
through click's ``CliRunner`` in a worker thread while the test's loop runs a connector.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import UTC, timedelta, timezone
from pathlib import Path
from typing import Any

import anyio
import pytest
from _support import config_for, wait_settled
from aiokafka import AIOKafkaProducer
from click.testing import CliRunner, Result

from aiozkconsumer import ZookeeperConsumerConnector
from aiozkconsumer.cli import cli
from aiozkconsumer.errors import UnknownTopicError
from aiozkconsumer.offsets import KafkaOffsetStore
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.tools import (
    AllTopics,
    FromOffsets,
    GroupAdmin,
    OffsetEntry,
    OffsetsFileError,
    ResetPlanError,
    ShiftBy,
    ToEarliest,
    ToLatest,
    ToOffset,
    TopicsScope,
    ToTimestamp,
    detect_offsets_format,
    format_offsets_csv,
    format_timestamp_ms,
    parse_datetime_ms,
    parse_duration,
    parse_offsets_csv,
    parse_topic_partitions,
    plan_reset,
    select_partitions,
)
from aiozkconsumer.zk import layout

integration = pytest.mark.integration

PARTITIONS = 4


def tp(p: int, topic: str = "t") -> TopicPartition:
    return TopicPartition(topic, p)


# ---- arguments ---------------------------------------------------------------------------------


def test_topic_values_name_whole_topics_or_partitions() -> None:
    scope = parse_topic_partitions(["a", "b:2,0", "b:1", "c:3", "c"])
    assert dict(scope.topics) == {"a": None, "b": (0, 1, 2), "c": None}
    assert scope.covers(tp(9, "a")) and scope.covers(tp(1, "b"))
    assert not scope.covers(tp(3, "b")) and not scope.covers(tp(0, "d"))


@pytest.mark.parametrize("value", ["", ":1", "t:", "t:x", "t:1,,2", "t:-1", "t:1:2"])
def test_bad_topic_values_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match=r"expected TOPIC|not a non-negative number"):
        parse_topic_partitions([value])


def test_datetimes_are_iso_8601_and_local_time_without_a_zone() -> None:
    assert parse_datetime_ms("2024-05-01T12:30:00.123Z") == 1714566600123
    assert parse_datetime_ms("2024-05-01T14:30:00.123+02:00") == 1714566600123
    assert parse_datetime_ms("2024-05-01T12:30:00.123", local_tz=UTC) == 1714566600123
    plus_one = timezone(timedelta(hours=1))
    assert parse_datetime_ms("2024-05-01T13:30:00.123", local_tz=plus_one) == 1714566600123
    assert format_timestamp_ms(1714566600123) == "2024-05-01T12:30:00.123Z"
    with pytest.raises(ValueError, match="not an ISO 8601 date-time"):
        parse_datetime_ms("yesterday")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("P1DT2H30M", timedelta(days=1, hours=2, minutes=30)),
        ("PT30M", timedelta(minutes=30)),
        ("pt1.5s", timedelta(seconds=1.5)),
        ("P2D", timedelta(days=2)),
        ("PT0S", timedelta(0)),
    ],
)
def test_durations_are_javas_duration_format(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["P", "PT", "1H", "-PT1H", "P1H", "PT1D", "P1DT", "PT1M2H"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not an ISO 8601 duration"):
        parse_duration(text)


# ---- which partitions --------------------------------------------------------------------------

TOPICS = {"t": (0, 1, 2), "u": (0,)}


def test_a_topic_scope_takes_all_or_the_named_partitions() -> None:
    scope = parse_topic_partitions(["t:2,0", "u"])
    assert select_partitions(scope, ToEarliest(), TOPICS, []) == [tp(0), tp(2), tp(0, "u")]
    whole = parse_topic_partitions(["t"])
    assert select_partitions(whole, ToLatest(), TOPICS, [tp(0, "u")]) == [tp(0), tp(1), tp(2)]


def test_all_topics_is_the_committed_partitions() -> None:
    committed = [tp(1), tp(0, "u"), tp(1)]
    assert select_partitions(AllTopics(), ToLatest(), TOPICS, committed) == [tp(1), tp(0, "u")]


def test_a_file_gives_its_partitions_narrowed_by_a_scope() -> None:
    spec = FromOffsets({tp(2): 5, tp(0, "u"): 1, tp(0): 7})
    assert select_partitions(None, spec, TOPICS, []) == [tp(0), tp(2), tp(0, "u")]
    narrowed = parse_topic_partitions(["t:2"])
    assert select_partitions(narrowed, spec, TOPICS, []) == [tp(2)]
    assert select_partitions(AllTopics(), spec, TOPICS, []) == [tp(0), tp(2), tp(0, "u")]


@pytest.mark.parametrize(
    ("scope", "spec", "message"),
    [
        (parse_topic_partitions(["v"]), ToLatest(), "Topic 'v' does not exist."),
        (parse_topic_partitions(["t:3"]), ToLatest(), "Topic 't' has no partition 3."),
        (None, FromOffsets({tp(0, "v"): 1}), "Topic 'v' does not exist."),
        (None, FromOffsets({tp(7): 1}), "Topic 't' has no partition 7."),
    ],
)
def test_unknown_topics_and_partitions_are_refused(
    scope: TopicsScope | None, spec: Any, message: str
) -> None:
    with pytest.raises(UnknownTopicError) as info:
        select_partitions(scope, spec, TOPICS, [])
    assert str(info.value) == message


def test_no_scope_needs_a_file() -> None:
    with pytest.raises(ValueError, match="--topic or --all-topics"):
        select_partitions(None, ToLatest(), TOPICS, [])


# ---- the new offsets ---------------------------------------------------------------------------

# Partition 0 holds offsets [10, 20), partition 1 [0, 5), partition 2 is empty at 3.
START = {tp(0): 10, tp(1): 0, tp(2): 3}
END = {tp(0): 20, tp(1): 5, tp(2): 3}
CURRENT = {tp(0): 15, tp(1): 4, tp(2): -1}  # -1: no committed offset


def _plan(spec: Any, **kw: Any) -> list[tuple[int, int | None, int]]:
    plan = plan_reset("g", START, spec, current=CURRENT, log_start=START, log_end=END, **kw)
    return [(p.partition, p.current, p.new) for p in plan.partitions]


def test_to_earliest_and_latest_are_the_log_bounds() -> None:
    assert _plan(ToEarliest()) == [(0, 15, 10), (1, 4, 0), (2, None, 3)]
    assert _plan(ToLatest()) == [(0, 15, 20), (1, 4, 5), (2, None, 3)]


def test_offsets_are_clamped_to_the_log_with_a_warning() -> None:
    plan = plan_reset("g", START, ToOffset(4), current=CURRENT, log_start=START, log_end=END)
    assert [(p.partition, p.requested, p.new) for p in plan.partitions] == [
        (0, 4, 10),
        (1, 4, 4),
        (2, 4, 3),
    ]
    assert plan.warnings == (
        "new offset 4 of [t,0] is below its log start offset 10: set to 10",
        "new offset 4 of [t,2] is above its log end offset 3: set to 3",
    )
    assert plan.new_offsets == {tp(0): 10, tp(1): 4, tp(2): 3}


def test_shift_by_moves_the_committed_offset_and_needs_one() -> None:
    committed = {tp(0): 15, tp(1): 4}
    plan = plan_reset(
        "g", [tp(0), tp(1)], ShiftBy(-3), current=committed, log_start=START, log_end=END
    )
    assert [(p.current, p.new) for p in plan.partitions] == [(15, 12), (4, 1)]
    forward = plan_reset(
        "g", [tp(0), tp(1)], ShiftBy(3), current=committed, log_start=START, log_end=END
    )
    assert [p.new for p in forward.partitions] == [18, 5]
    assert forward.warnings == ("new offset 7 of [t,1] is above its log end offset 5: set to 5",)
    with pytest.raises(ResetPlanError, match=r"Cannot shift the offsets of \[t,2\] of group 'g'"):
        _plan(ShiftBy(1))


def test_a_time_takes_the_brokers_answer_or_the_log_end() -> None:
    at = parse_datetime_ms("2024-05-01T12:30:00Z")
    plan = plan_reset(
        "g",
        START,
        ToTimestamp(at),
        current=CURRENT,
        log_start=START,
        log_end=END,
        by_time={tp(0): 12, tp(1): -1},
    )
    assert [p.new for p in plan.partitions] == [12, 5, 3]
    assert plan.warnings == (
        "no record of [t,1] at or after 2024-05-01T12:30:00.000Z: set to its log end offset 5",
        "no record of [t,2] at or after 2024-05-01T12:30:00.000Z: set to its log end offset 3",
    )


def test_a_files_offsets_are_clamped_too() -> None:
    spec = FromOffsets({tp(0): 25, tp(1): 2})
    plan = plan_reset("g", [tp(0), tp(1)], spec, current=CURRENT, log_start=START, log_end=END)
    assert [p.new for p in plan.partitions] == [20, 2]
    assert plan.to_json() == {
        "group": "g",
        "partitions": [
            {"topic": "t", "partition": 0, "current_offset": 15, "new_offset": 20},
            {"topic": "t", "partition": 1, "current_offset": 4, "new_offset": 2},
        ],
        "warnings": ["new offset 25 of [t,0] is above its log end offset 20: set to 20"],
    }


def test_a_partition_without_log_offsets_cannot_be_planned() -> None:
    with pytest.raises(ValueError, match=r"^no log start / end offset for \[t,3\]$"):
        plan_reset("g", [tp(3)], ToEarliest(), current={}, log_start=START, log_end=END)


# ---- the CSV -----------------------------------------------------------------------------------


def test_csv_round_trips_and_takes_the_group_apart_or_per_line() -> None:
    entries = [OffsetEntry("g", "t", 0, 5), OffsetEntry("g", "u", 12, 0)]
    text = format_offsets_csv(entries)
    assert text == "t,0,5\nu,12,0\n"
    assert parse_offsets_csv(text.splitlines(), "g") == entries
    several = [*entries, OffsetEntry("h", "t", 1, 9)]
    text = format_offsets_csv(several)
    assert text == "g,t,0,5\ng,u,12,0\nh,t,1,9\n"
    assert parse_offsets_csv(text.splitlines()) == several
    lines = ["# plan", "topic,partition,offset", " t , 3 , 7 ", ""]
    assert parse_offsets_csv(lines, "g") == [OffsetEntry("g", "t", 3, 7)]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("t,0,5", "needs the group given apart"),
        ("t,0", "expected 'topic,partition,offset'"),
        ("a,b,t,0,5", "expected 'topic,partition,offset'"),
        ("g,t,x,5", "partition 'x' is not a non-negative decimal number"),
        ("g,t,0,-5", "offset '-5' is not a non-negative decimal number"),
        ("g,a/b,0,5", "cannot be a ZooKeeper path element"),
    ],
)
def test_malformed_csv_lines_name_their_line(line: str, reason: str) -> None:
    with pytest.raises(OffsetsFileError, match=reason) as info:
        parse_offsets_csv(["g,t,1,1", line])
    assert info.value.line_number == 2


def test_the_format_is_told_by_the_first_line() -> None:
    assert detect_offsets_format(["# x", "", "/consumers/g/offsets/t/0:1"]) == "zookeeper"
    assert detect_offsets_format(["t,0,1"]) == "csv"
    assert detect_offsets_format([]) == "zookeeper"


# ---- usage ---------------------------------------------------------------------------------------


def invoke(*args: str, input: str | None = None) -> Result:
    """Run the CLI in-process; an exception other than the exit itself fails the test."""
    result = CliRunner().invoke(cli, list(args), input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


async def ainvoke(*args: str, input: str | None = None) -> Result:
    """``invoke`` from an async test: in a worker thread, off the test's event loop."""
    return await anyio.to_thread.run_sync(lambda: invoke(*args, input=input))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-t", "t", "--to-earliest"], "exactly one of --dry-run or --execute"),
        (["-t", "t", "--to-earliest", "--dry-run", "--execute"], "exactly one of --dry-run"),
        (["-t", "t", "--dry-run"], "got none"),
        (
            ["-t", "t", "--dry-run", "--to-earliest", "--to-offset", "3"],
            "got --to-earliest, --to-offset",
        ),
        (["--dry-run", "--to-earliest"], "give --topic or --all-topics"),
        (["-t", "t", "--all-topics", "--dry-run", "--to-latest"], "not both"),
        (["-t", "t:x", "--dry-run", "--to-latest"], "not a non-negative number"),
        (["-t", "a/b", "--dry-run", "--to-latest"], "cannot be a ZooKeeper path element"),
        (["-t", "t", "--dry-run", "--to-datetime", "noon"], "not an ISO 8601 date-time"),
        (["-t", "t", "--dry-run", "--by-duration", "1h"], "not an ISO 8601 duration"),
        (["-t", "t", "--dry-run", "--to-offset", "-1"], "x>=0"),
        (["-t", "t", "--dry-run", "--to-latest", "--export", "-o", "json"], "--export prints CSV"),
    ],
)
def test_reset_usage_errors_exit_2(args: list[str], message: str) -> None:
    result = invoke("offsets", "reset", "-g", "g", *args, "--zookeeper", "127.0.0.1:1")
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stdout == ""


def test_a_file_without_the_groups_offsets_is_a_usage_error(tmp_path: Path) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text("h,t,0,5\n")
    result = invoke(
        "offsets", "reset", "-g", "g", "--from-file", str(plan), "--dry-run", "--zookeeper", "x:1"
    )
    assert result.exit_code == 2
    assert result.stderr == f"Error: {plan} holds no offsets of group 'g'\n"
    plan.write_text("t,0,5\nt,x,5\n")
    result = invoke(
        "offsets", "reset", "-g", "g", "--from-file", str(plan), "--dry-run", "--zookeeper", "x:1"
    )
    assert result.exit_code == 2
    assert "line 2: partition 'x' is not a non-negative decimal number" in result.stderr


def test_import_of_a_groupless_csv_needs_the_group() -> None:
    result = invoke("offsets", "import", "-f", "-", "--zookeeper", "x:1", input="t,0,5\n")
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: -, line 1: a 'topic,partition,offset' line needs the group given apart: "
        "'t,0,5' (give the group with --group)\n"
    )
    paths = "/consumers/g/offsets/t/0:5\n"
    result = invoke("offsets", "import", "-f", "-", "-g", "g", "--zookeeper", "x:1", input=paths)
    assert result.exit_code == 2
    assert "--group is for CSV files" in result.stderr


# ---- against a cluster ---------------------------------------------------------------------------


async def _make_topic(cluster: LocalCluster, name: str) -> dict[int, int]:
    """Create ``name``; partition ``p`` gets ``5 * (p + 1)`` records. Returns the log ends."""
    await cluster.create_topic(name, PARTITIONS)
    await cluster.produce_to_partitions(
        name, {p: [(b"k", b"v")] * (5 * (p + 1)) for p in range(PARTITIONS)}
    )
    return await cluster.log_end_offsets(name)


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


async def _kafka_offsets(cluster: LocalCluster, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of ``topic`` as its Kafka coordinator holds them."""
    async with GroupAdmin(cluster.zookeeper_connect) as admin:
        store = KafkaOffsetStore(admin.kafka, group, backoff_ms=100, socket_timeout_ms=10000)
        try:
            fetched = await store.fetch([TopicPartition(topic, p) for p in range(PARTITIONS)])
        finally:
            await store.close()
    return {t.partition: o for t, o in fetched.items() if o >= 0}


def _planned(result: Result) -> dict[int, int]:
    """Partition -> new offset of a ``-o json`` plan."""
    assert result.exit_code == 0, result.output
    return {p["partition"]: p["new_offset"] for p in json.loads(result.stdout)["partitions"]}


def _rows(result: Result) -> list[list[str]]:
    return [line.split() for line in result.stdout.splitlines()]


@integration
async def test_dry_run_changes_nothing_and_execute_writes_the_plan_in_zookeeper(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    topic, group = unique_topic, unique_group_id
    ends = await _make_topic(zk_kafka_cluster, topic)
    assert ends == {0: 5, 1: 10, 2: 15, 3: 20}
    await _set_zk_offsets(zk_client, group, topic, {0: 3, 1: 10, 2: 1})
    common = ["offsets", "reset", "--zookeeper", zk, "-g", group, "--topic", topic]

    dry = await ainvoke(*common, "--to-offset", "7", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert _rows(dry) == [
        ["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        [topic, "0", "3", "5"],
        [topic, "1", "10", "7"],
        [topic, "2", "1", "7"],
        [topic, "3", "-", "7"],
    ]
    assert dry.stderr.splitlines() == [
        f"Warning: new offset 7 of [{topic},0] is above its log end offset 5: set to 5",
        "dry run: nothing was written (--execute writes the plan)",
    ]
    assert await _zk_offsets(zk_client, group, topic) == {0: 3, 1: 10, 2: 1}

    shift = ["offsets", "reset", "--zookeeper", zk, "-g", group, "--shift-by", "-2"]
    planned = _planned(await ainvoke(*shift, "-t", f"{topic}:0,1,2", "--dry-run", "-o", "json"))
    assert planned == {0: 1, 1: 8, 2: 0}
    refused = await ainvoke(*shift, "-t", topic, "--execute")  # partition 3 has no offset
    assert refused.exit_code == 1
    assert refused.stderr == (
        f"Error: Cannot shift the offsets of [{topic},3] of group '{group}': no committed offset.\n"
    )
    assert await _zk_offsets(zk_client, group, topic) == {0: 3, 1: 10, 2: 1}

    planned = _planned(await ainvoke(*common, "--to-offset", "7", "--dry-run", "-o", "json"))
    executed = await ainvoke(*common, "--to-offset", "7", "--execute", "-o", "json")
    assert _planned(executed) == planned == {0: 5, 1: 7, 2: 7, 3: 7}
    assert json.loads(executed.stdout)["executed"] is True
    assert await _zk_offsets(zk_client, group, topic) == planned

    partial = await ainvoke(
        "offsets", "reset", "--zookeeper", zk, "-g", group, "-t", f"{topic}:1,3",
        "--shift-by", "-2", "--execute",
    )  # fmt: skip
    assert partial.exit_code == 0, partial.output
    assert await _zk_offsets(zk_client, group, topic) == {0: 5, 1: 5, 2: 7, 3: 5}
    assert "reset 2 offsets of group" in partial.stderr


@integration
async def test_kafka_and_dual_storage_are_read_and_written(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    topic, group = unique_topic, unique_group_id
    ends = await _make_topic(zk_kafka_cluster, topic)
    kafka = ["offsets", "reset", "--zookeeper", zk, "-g", group, "--offsets-storage", "kafka"]

    first = await ainvoke(*kafka, "-t", f"{topic}:0,2", "--to-latest", "--execute", "-o", "json")
    assert _planned(first) == {0: ends[0], 2: ends[2]}
    assert await _kafka_offsets(zk_kafka_cluster, group, topic) == {0: ends[0], 2: ends[2]}
    assert not await zk_client.exists(layout.group_dir(group))  # nothing in ZooKeeper

    dry = await ainvoke(*kafka, "--all-topics", "--shift-by", "-3", "--dry-run", "-o", "json")
    assert json.loads(dry.stdout)["partitions"] == [
        {"topic": topic, "partition": 0, "current_offset": 5, "new_offset": 2},
        {"topic": topic, "partition": 2, "current_offset": 15, "new_offset": 12},
    ]
    assert await _kafka_offsets(zk_kafka_cluster, group, topic) == {0: 5, 2: 15}
    shifted = await ainvoke(*kafka, "--all-topics", "--shift-by", "-3", "--execute", "-o", "json")
    assert _planned(shifted) == {0: 2, 2: 12}
    assert await _kafka_offsets(zk_kafka_cluster, group, topic) == {0: 2, 2: 12}

    # dual: the current offset is the larger of the two stores; both are written
    await _set_zk_offsets(zk_client, group, topic, {0: 4, 1: 1})
    dual = ["offsets", "reset", "--zookeeper", zk, "-g", group, "--offsets-storage", "dual"]
    seen = await ainvoke(*dual, "-t", topic, "--shift-by", "1", "--dry-run", "-o", "json")
    assert seen.exit_code == 1
    assert f"[{topic},3]" in seen.stderr  # no offset in either store
    seen = await ainvoke(
        *dual, "-t", f"{topic}:0,1,2", "--shift-by", "1", "--dry-run", "-o", "json"
    )
    assert [p["current_offset"] for p in json.loads(seen.stdout)["partitions"]] == [4, 1, 12]
    written = await ainvoke(*dual, "-t", f"{topic}:0,1,2", "--shift-by", "1", "--execute")
    assert written.exit_code == 0, written.output
    assert await _zk_offsets(zk_client, group, topic) == {0: 5, 1: 2, 2: 13}
    assert await _kafka_offsets(zk_kafka_cluster, group, topic) == {0: 5, 1: 2, 2: 13}


async def _produce_at(bootstrap: str, topic: str, stamps: dict[int, Sequence[int]]) -> None:
    """Produce one record per timestamp (epoch ms), in order, to each partition."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for partition, times in stamps.items():
            for i, ts in enumerate(times):
                await producer.send_and_wait(
                    topic, f"r{i}".encode(), partition=partition, timestamp_ms=ts
                )
    finally:
        await producer.stop()


@integration
async def test_to_datetime_and_by_duration_land_on_the_first_record_at_or_after(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    topic, group = unique_topic, unique_group_id
    await zk_kafka_cluster.create_topic(topic, 3)
    base = parse_datetime_ms("2024-05-01T12:00:00Z")
    now = int(time.time() * 1000)
    hour = 3_600_000
    await _produce_at(
        zk_kafka_cluster.bootstrap_servers,
        topic,
        {
            0: [base + 1000 * i for i in range(10)],  # a record a second from 12:00:00
            1: [base - 5000 + 1000 * i for i in range(5)],  # all before 12:00:00
            2: [now - 3 * hour, now - 2 * hour, now - 90 * 60_000, now - 10 * 60_000, now],
        },
    )
    common = ["offsets", "reset", "--zookeeper", zk, "-g", group, "-t", f"{topic}:0,1"]
    at = await ainvoke(*common, "--to-datetime", "2024-05-01T12:00:04.500Z", "--execute")
    assert at.exit_code == 0, at.output
    assert _rows(at)[1:] == [[topic, "0", "-", "5"], [topic, "1", "-", "5"]]
    assert at.stderr.splitlines()[0] == (
        f"Warning: no record of [{topic},1] at or after 2024-05-01T12:00:04.500Z: set to its "
        "log end offset 5"
    )
    assert await _zk_offsets(zk_client, group, topic) == {0: 5, 1: 5}

    exact = await ainvoke(*common, "--to-datetime", "2024-05-01T14:00:07+02:00", "--execute")
    assert exact.exit_code == 0, exact.output
    assert await _zk_offsets(zk_client, group, topic) == {0: 7, 1: 5}  # at, not after

    recent = await ainvoke(
        "offsets", "reset", "--zookeeper", zk, "-g", group, "-t", f"{topic}:2",
        "--by-duration", "PT1H", "--execute",
    )  # fmt: skip
    assert recent.exit_code == 0, recent.output
    assert await zk_client.get_data(layout.offset_path(group, topic, 2)) == b"3"
    longer = await ainvoke(
        "offsets", "reset", "--zookeeper", zk, "-g", group, "-t", f"{topic}:2",
        "--by-duration", "PT2H30M", "--execute", "-o", "json",
    )  # fmt: skip
    assert _planned(longer) == {2: 1}


@integration
async def test_execute_is_refused_while_the_group_has_live_members(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    topic, group = unique_topic, unique_group_id
    await _make_topic(zk_kafka_cluster, topic)
    config = config_for(zk_kafka_cluster, group, auto_commit_enable=False, consumer_id="live")
    async with ZookeeperConsumerConnector(config) as connector:
        await connector.create_message_streams({topic: 1})
        await wait_settled([connector])
        await connector.commit_offsets({TopicPartition(topic, 0): 2})
        before = await _zk_offsets(zk_client, group, topic)
        common = ["offsets", "reset", "--zookeeper", zk, "-g", group, "-t", topic, "--to-latest"]
        refused = await ainvoke(*common, "--execute")
        dry = await ainvoke(*common, "--dry-run")
        assert await _zk_offsets(zk_client, group, topic) == before == {0: 2}
    assert refused.exit_code == 1
    assert refused.stdout == ""
    assert refused.stderr == (
        f"Error: Offsets of group '{group}' can only be reset while it has no live members; "
        f"live now: {group}_live. Stop them first (their next commit would overwrite the "
        "reset).\n"
    )
    assert dry.exit_code == 0, dry.output
    assert (
        f"Warning: group '{group}' has live members ({group}_live): --execute is refused "
        "until they stop."
    ) in dry.stderr.splitlines()


@integration
async def test_export_csv_round_trips_through_import_and_from_file(
    zk_kafka_cluster: LocalCluster,
    zk_client: Any,
    tmp_path: Path,
    unique_topic: str,
    unique_group_id: str,
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    topic, group = unique_topic, unique_group_id
    other = f"{group}-copy"
    ends = await _make_topic(zk_kafka_cluster, topic)
    await _set_zk_offsets(zk_client, group, topic, {0: 1, 1: 2, 2: 3, 3: 4})
    exported = await ainvoke(
        "offsets", "reset", "--zookeeper", zk, "-g", group, "--all-topics",
        "--shift-by", "2", "--dry-run", "--export",
    )  # fmt: skip
    assert exported.exit_code == 0, exported.output
    csv = f"{topic},0,3\n{topic},1,4\n{topic},2,5\n{topic},3,6\n"
    assert exported.stdout == csv
    assert await _zk_offsets(zk_client, group, topic) == {0: 1, 1: 2, 2: 3, 3: 4}

    plan = tmp_path / "plan.csv"
    plan.write_text(exported.stdout)
    imported = await ainvoke("offsets", "import", "--zookeeper", zk, "-f", str(plan), "-g", other)
    assert imported.exit_code == 0, imported.output
    assert imported.stdout == f"imported 4 offsets from {plan}\n"
    assert await _zk_offsets(zk_client, other, topic) == {0: 3, 1: 4, 2: 5, 3: 6}

    # the same plan, as --from-file of the reset itself (narrowed by a scope)
    applied = await ainvoke(
        "offsets", "reset", "--zookeeper", zk, "-g", group, "-t", f"{topic}:1,2",
        "--from-file", str(plan), "--execute",
    )  # fmt: skip
    assert applied.exit_code == 0, applied.output
    assert await _zk_offsets(zk_client, group, topic) == {0: 1, 1: 4, 2: 5, 3: 4}

    # a multi-group CSV from stdin, beside the znode-path files import always read
    both = f"{group},{topic},0,{ends[0]}\n{other},{topic},3,0\n"
    piped = await ainvoke("offsets", "import", "--zookeeper", zk, "-f", "-", input=both)
    assert piped.exit_code == 0, piped.output
    assert (await _zk_offsets(zk_client, group, topic))[0] == ends[0]
    assert (await _zk_offsets(zk_client, other, topic))[3] == 0


@integration
async def test_all_topics_takes_the_committed_partitions_of_every_topic(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    a, b, group = f"{unique_topic}-a", f"{unique_topic}-b", unique_group_id
    ends_a = await _make_topic(zk_kafka_cluster, a)
    ends_b = await _make_topic(zk_kafka_cluster, b)
    await _set_zk_offsets(zk_client, group, a, {1: 0})
    await _set_zk_offsets(zk_client, group, b, {0: 0, 3: 0})
    result = await ainvoke(
        "offsets", "reset", "--zookeeper", zk, "-g", group, "--all-topics", "--to-latest",
        "--execute", "-o", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "storage": "zookeeper",
        "executed": True,
        "group": group,
        "partitions": [
            {"topic": a, "partition": 1, "current_offset": 0, "new_offset": ends_a[1]},
            {"topic": b, "partition": 0, "current_offset": 0, "new_offset": ends_b[0]},
            {"topic": b, "partition": 3, "current_offset": 0, "new_offset": ends_b[3]},
        ],
        "warnings": [],
    }
    assert await _zk_offsets(zk_client, group, a) == {1: ends_a[1]}
    assert await _zk_offsets(zk_client, group, b) == {0: ends_b[0], 3: ends_b[3]}

    nothing = await ainvoke(
        "offsets", "reset", "--zookeeper", zk, "-g", f"{group}-none", "--all-topics",
        "--to-latest", "--dry-run",
    )  # fmt: skip
    assert nothing.exit_code == 4
    assert nothing.stderr == (
        f"Error: Consumer group '{group}-none' has no committed offsets in zookeeper: nothing "
        "to reset with --all-topics.\n"
    )
    unknown = await ainvoke(
        "offsets", "reset", "--zookeeper", zk, "-g", group, "-t", f"{a}-nope", "--to-latest",
        "--dry-run",
    )  # fmt: skip
    assert unknown.exit_code == 4
    assert unknown.stderr == f"Error: Topic '{a}-nope' does not exist.\n"
