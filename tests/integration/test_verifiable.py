"""The verifiable consumer and the checkable producer, ending in a history check.

The integration test runs two verifiable consumer processes on a real cluster, SIGKILLs one
halfway, lets the other take over and finish, SIGTERMs it, and expects the checker to find no
anomaly. The other tests are fast (no servers).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.history import (
    AnomalyKind,
    CheckResult,
    ProducedLog,
    check_history,
    load_events,
    load_produced_log,
)
from aiozkconsumer.testing.verifiable import (
    EventWriter,
    VerifiableOptions,
    produce_checkable,
    verifiable_consumer_command,
)

SESSION_TIMEOUT_MS = 3000
POLL_S = 0.05
"""Poll interval for the other processes' event files (no event crosses processes)."""
RECORDS = 4000
PARTITIONS = 4


# -- fast tests ------------------------------------------------------------------------------


def test_event_writer_writes_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path, "m1")
    try:
        writer.write("startup", consumer_id="g_c1")
        writer.write("consumed", topic="t", partition=0, min_offset=0, max_offset=1, count=2)
    finally:
        writer.close()
    lines = path.read_text().splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["type"] for e in events] == ["startup", "consumed"]
    assert all(e["member"] == "m1" and e["pid"] == os.getpid() for e in events)
    assert events[0]["ts"] <= events[1]["ts"]
    writer.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        writer.write("x")


def test_options_force_explicit_commits() -> None:
    options = VerifiableOptions(
        zookeeper="127.0.0.1:1",
        group="g",
        topic="t",
        events=Path("e"),
        properties={"auto.commit.enable": "true", "auto.offset.reset": "largest"},
    )
    props = options.consumer_properties()
    assert props["auto.commit.enable"] == "false"
    assert props["auto.offset.reset"] == "largest"
    assert (props["group.id"], props["zookeeper.connect"]) == ("g", "127.0.0.1:1")


def test_command_line_round_trip() -> None:
    argv = verifiable_consumer_command(
        zookeeper="z:1",
        group="g",
        topic="t",
        events="/tmp/e.jsonl",
        streams=2,
        properties={"zookeeper.session.timeout.ms": 3000, "exclude.internal.topics": True},
        member_id="c1",
        commit_interval_ms=200,
    )
    assert argv[:3] == [sys.executable, "-m", "aiozkconsumer.testing.verifiable"]
    assert "exclude.internal.topics=true" in argv
    assert argv[argv.index("--member-id") + 1] == "c1"
    assert argv[argv.index("--commit-interval-ms") + 1] == "200"


def test_bad_property_is_a_usage_error(tmp_path: Path) -> None:
    argv = verifiable_consumer_command(
        zookeeper="z:1", group="g", topic="t", events=tmp_path / "e.jsonl"
    )
    done = subprocess.run(
        [*argv, "--consumer-property", "novalue"], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert b"key=value" in done.stderr


# -- integration -----------------------------------------------------------------------------


def _delivered(events: list[dict[str, Any]]) -> dict[int, int]:
    """Highest delivered offset per partition."""
    top: dict[int, int] = {}
    for e in events:
        if e["type"] == "consumed":
            top[e["partition"]] = max(top.get(e["partition"], -1), e["max_offset"])
    return top


def _owned(events: list[dict[str, Any]]) -> set[int]:
    owned: set[int] = set()
    for e in events:
        if e["type"] == "assigned":
            owned |= {p["partition"] for p in e["partitions"]}
        elif e["type"] == "revoked":
            owned -= {p["partition"] for p in e["partitions"]}
    return owned


class _Member:
    def __init__(self, name: str, proc: asyncio.subprocess.Process, events: Path) -> None:
        self.name = name
        self.proc = proc
        self.events = events

    def read(self) -> list[dict[str, Any]]:
        return load_events(self.events) if self.events.exists() else []


async def _wait_until(
    what: str,
    predicate: Callable[[], bool],
    members: list[_Member],
    limit_s: float,
    *,
    expect_exit: _Member | None = None,
) -> None:
    """Poll the members' event files (bounded); fail early if one exits unexpectedly."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        for m in members:
            if m is not expect_exit and m.proc.returncode is not None:
                pytest.fail(f"{m.name} exited with {m.proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {limit_s:.0f} s waiting for {what}")
        await asyncio.sleep(POLL_S)


@contextlib.asynccontextmanager
async def _members(
    cluster: LocalCluster, group: str, topic: str, tmp_path: Path, names: list[str]
) -> AsyncIterator[list[_Member]]:
    started: list[_Member] = []
    try:
        for name in names:
            events = tmp_path / f"{name}.jsonl"
            argv = verifiable_consumer_command(
                zookeeper=cluster.zookeeper_connect,
                group=group,
                topic=topic,
                events=events,
                streams=2,
                properties={
                    "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
                    "rebalance.backoff.ms": 500,
                    "rebalance.max.retries": 20,
                },
                member_id=name,
                commit_interval_ms=200,
                max_records=20,
                processing_delay_ms=40,
            )
            with (tmp_path / f"{name}.stderr").open("wb") as err:
                proc = await asyncio.create_subprocess_exec(
                    *argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
                )
            started.append(_Member(name, proc, events))
        yield started
    finally:
        for m in started:
            if m.proc.returncode is None:
                m.proc.kill()
                await m.proc.wait()


async def _two_member_run(
    cluster: LocalCluster, topic: str, group: str, tmp_path: Path, fault: str
) -> tuple[ProducedLog, list[dict[str, Any]], float, set[int]]:
    """Two members share the topic; ``fault`` hits member a halfway; everything gets read.

    ``"kill"``: SIGKILL a; b takes over and reads everything; b is SIGTERMed.
    ``"pause"``: SIGSTOP a until b owns every partition (a's session expired), then SIGCONT:
    a comes back with a new session and rejoins; both are SIGTERMed once all is read.

    Returns:
        The produced log, the merged events, the time the fault ended, a's partitions at
        the fault.
    """
    await cluster.create_topic(topic, PARTITIONS)
    produced = await produce_checkable(
        cluster, topic, PARTITIONS, RECORDS, seed=7, log_file=tmp_path / "produced.jsonl"
    )
    assert len(produced) == RECORDS
    assert load_produced_log(tmp_path / "produced.jsonl") == produced
    ends = {p: pairs[-1][0] for (_, p), pairs in produced.records.items()}
    assert sorted(ends) == list(range(PARTITIONS))

    async with _members(cluster, group, topic, tmp_path, ["a", "b"]) as ms:
        a, b = ms
        # Both own a share (the group settled), and a is well into its partitions.
        await _wait_until(
            "both members to own partitions",
            lambda: bool(_owned(a.read())) and bool(_owned(b.read())),
            ms,
            60,
        )
        await _wait_until(
            "a to consume a few hundred records",
            lambda: sum(e["count"] for e in a.read() if e["type"] == "consumed") >= 300,
            ms,
            60,
        )
        a_partitions = _owned(a.read())
        assert any(_delivered(a.read()).get(p, -1) < ends[p] for p in a_partitions), (
            "a finished before the fault: slow the consumers down"
        )
        survivors = [b]
        if fault == "kill":
            a.proc.send_signal(signal.SIGKILL)
            assert await a.proc.wait() == -signal.SIGKILL
        else:
            a.proc.send_signal(signal.SIGSTOP)
            try:
                await _wait_until(
                    "b to take a's partitions over",
                    lambda: _owned(b.read()) == set(range(PARTITIONS)),
                    ms,
                    60,
                )
            finally:
                a.proc.send_signal(signal.SIGCONT)
            survivors.append(a)
        last_fault_ts = time.time()

        def all_read() -> bool:
            top = _delivered(load_events(a.events, b.events))
            return all(top.get(p, -1) >= end for p, end in ends.items())

        killed = a if fault == "kill" else None
        await _wait_until("everything to be read", all_read, ms, 60, expect_exit=killed)
        for m in survivors:
            m.proc.send_signal(signal.SIGTERM)
        for m in survivors:
            assert await asyncio.wait_for(m.proc.wait(), 30) == 0, m.name

    events = load_events(a.events, b.events)
    assert events[-1]["type"] == "shutdown"
    return produced, events, last_fault_ts, a_partitions


def _check(
    produced: ProducedLog, events: list[dict[str, Any]], last_fault_ts: float
) -> CheckResult:
    result = check_history(
        produced,
        events,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        last_fault_ts=last_fault_ts,
        liveness_slack_s=15,
    )
    assert result.ok, result.summary()
    assert (result.produced, result.distinct_delivered, result.lost) == (RECORDS, RECORDS, 0)
    assert result.commits > 0
    assert not result.by_kind().get(AnomalyKind.DUPLICATE)
    return result


@pytest.mark.integration
async def test_kill_one_of_two_members_halfway_leaves_a_clean_history(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str, tmp_path: Path
) -> None:
    produced, events, fault_ts, a_partitions = await _two_member_run(
        zk_kafka_cluster, unique_topic, unique_group_id, tmp_path, "kill"
    )
    assert events[-1]["member"] == "b"
    assert not any(e["type"] == "shutdown" for e in events if e["member"] == "a")
    result = _check(produced, events, fault_ts)
    assert (result.incarnations, result.crashes) == (2, 1)
    assert result.epochs >= PARTITIONS + len(a_partitions)
    # b's final commit is the log end of every partition.
    final = {
        o["partition"]: o["offset"]
        for e in events
        if e["type"] == "committed" and e["member"] == "b"
        for o in e["offsets"]
    }
    ends = {p: pairs[-1][0] for (_, p), pairs in produced.records.items()}
    assert final == {p: end + 1 for p, end in ends.items()}


@pytest.mark.integration
async def test_member_paused_past_its_session_timeout_leaves_a_clean_history(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str, tmp_path: Path
) -> None:
    """The classic zombie: a wakes up after b took its partitions; it must not hand out or
    commit anything of them, and rejoins with a new session."""
    produced, events, fault_ts, _ = await _two_member_run(
        zk_kafka_cluster, unique_topic, unique_group_id, tmp_path, "pause"
    )
    result = _check(produced, events, fault_ts)
    assert (result.incarnations, result.crashes) == (2, 0)
    assert result.session_losses >= 1 and result.suspensions >= 1
    a_revokes = [e for e in events if e["type"] == "revoked" and e["member"] == "a"]
    assert any(e["reason"] == "session_lost" for e in a_revokes)


async def test_produce_checkable_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="count"):
        await produce_checkable("127.0.0.1:1", "t", 1, -1, seed=0)
    with pytest.raises(ValueError, match="no partition"):
        await produce_checkable("127.0.0.1:1", "t", [], 1, seed=0)


def test_produced_log_values_encode_partition_and_sequence() -> None:
    log = ProducedLog.from_records([("t", 1, 5, b"1:0"), ("t", 1, 6, b"1:1")])
    assert log.records[("t", 1)] == ((5, "1:0"), (6, "1:1"))
