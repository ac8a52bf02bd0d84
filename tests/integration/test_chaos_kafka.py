"""Chaos for Kafka-coordinated groups: one seeded run per protocol (classic, KIP-848's consumer
protocol) on three KRaft brokers, with transactions in the history.

The module's cluster: Kafka 4.3, three brokers (broker 0 is also the single KRaft
controller), ``__consumer_offsets``, ``__transaction_state`` and the topic at replication
factor 3 with ``min.insync.replicas=2``, and a proxied link per member (so that a member's link
to one broker can be cut). Both runs share it, one after the other.

Each run: 3 member processes read 6 partitions while the producer writes 60,000 records, half
of its chunks in transactions (three in ten of those aborted), and the nemesis injects a fault
every ~3 s for five minutes: member kills, pauses shorter and longer than the session timeout, the
group coordinator's broker killed and restarted (the coordinator moves), a partition leader's
broker killed and restarted, a member's link to one broker cut, and a rolling restart of every
broker. Then heal, let the group finish, and check (``aiozkconsumer.testing.history``): nothing
lost, no aborted or uncommitted read, no ownership overlap, no offset regression, duplicates
only within the at-least-once window. Each run takes 6 to 7 minutes of CI time.

The seed is fixed (``DEFAULT_SEED``; its schedule has every Kafka fault kind, which
``test_kafka_schedule_has_every_fault_kind`` checks) and can be overridden with
``AIOZKCONSUMER_CHAOS_SEED``; the failure message names it and the history directory (the
test's ``tmp_path``, which pytest keeps), with ``schedule.txt``, ``faults.jsonl``, the event
files, ``produced.jsonl`` and ``report.json``.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.chaos import (
    KAFKA_WEIGHTS,
    ChaosReport,
    CoordinatorMode,
    FaultKind,
    FaultScheduler,
    kafka_chaos_broker_properties,
    run_chaos,
)
from aiozkconsumer.testing.history import AnomalyKind

SEED_ENV = "AIOZKCONSUMER_CHAOS_SEED"
DEFAULT_SEED = 20260311
CONSUMERS = 3
PARTITIONS = 6
RECORDS = 60_000
FAULT_PHASE_S = 300.0
INTERVAL_S = 3.0
SESSION_TIMEOUT_MS = 6000
"""The classic members' ``session.timeout.ms`` and the brokers'
``group.consumer.session.timeout.ms`` (the consumer protocol's session timeout is the
broker's)."""
HEARTBEAT_INTERVAL_MS = 1000
TRANSACTIONS = 0.5
BROKERS = 3

BROKER_PROPERTIES = kafka_chaos_broker_properties(SESSION_TIMEOUT_MS, HEARTBEAT_INTERVAL_MS)


def _seed() -> int:
    raw = os.environ.get(SEED_ENV, "").strip()
    return int(raw) if raw else DEFAULT_SEED


@pytest.fixture(scope="module")
def kafka_chaos_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three KRaft brokers (Kafka 4.3) with a proxied link per member."""
    cluster = LocalCluster(
        brokers=BROKERS,
        flavour="kraft",
        proxy_links=CONSUMERS,
        broker_properties=BROKER_PROPERTIES,
        work_dir=tmp_path_factory.mktemp("chaos-kafka-cluster"),
    )
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(cluster.start())
        yield cluster
    finally:
        loop.run_until_complete(cluster.stop())
        loop.close()


def _plan(seed: int) -> list[str]:
    scheduler = FaultScheduler(
        seed,
        consumers=CONSUMERS,
        brokers=list(range(BROKERS)),
        session_timeout_ms=SESSION_TIMEOUT_MS,
        interval_s=INTERVAL_S,
        mode=CoordinatorMode.KAFKA_CLASSIC,
    )
    return [str(f) for f in scheduler.plan(FAULT_PHASE_S)]


def test_kafka_schedule_has_every_fault_kind() -> None:
    """The CI seed's schedule has every Kafka fault kind and no ZooKeeper one; pauses both
    shorter and longer than the session timeout; link cuts to one broker."""
    scheduler = FaultScheduler(
        _seed(),
        consumers=CONSUMERS,
        brokers=list(range(BROKERS)),
        session_timeout_ms=SESSION_TIMEOUT_MS,
        interval_s=INTERVAL_S,
        mode=CoordinatorMode.KAFKA_CLASSIC,
    )
    faults = scheduler.plan(FAULT_PHASE_S)
    kinds = {f.kind for f in faults}
    assert kinds == set(KAFKA_WEIGHTS), [str(f) for f in faults]
    pauses = [f.duration_s for f in faults if f.kind is FaultKind.PAUSE]
    t = SESSION_TIMEOUT_MS / 1000
    assert any(p < t for p in pauses) and any(p > t for p in pauses), pauses
    assert any(f.kind is FaultKind.BROKER_LINK and f.broker is not None for f in faults)
    assert _plan(_seed()) == _plan(_seed()) != _plan(_seed() + 1)
    broker_faults = [f for f in faults if f.resources(CONSUMERS) == {"brokers"}]
    for a, b in zip(broker_faults, broker_faults[1:], strict=False):
        assert a.at_s < b.at_s


def _failure(report: ChaosReport, protocol: str) -> str:
    lines = [
        f"Kafka chaos run ({protocol}) with seed {report.seed} failed; history in "
        f"{report.events_dir}; reproduce with {SEED_ENV}={report.seed} "
        f".venv/bin/pytest tests/integration/test_chaos_kafka.py -k {protocol}",
        report.summary(),
    ]
    lines += [f"  {a}" for a in report.result.anomalies[20:60]]
    lines += _around_first_overlap(report)
    return "\n".join(lines)


_LOG_TS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (.*)$")
_HOLDER = re.compile(r"while (c\d+\.\d+) \(")
_QUIET_EVENTS = {"consumed", "committed"}


def _around_first_overlap(
    report: ChaosReport, before_s: float = 25.0, after_s: float = 10.0, most: int = 60
) -> list[str]:
    """The faults, group events and log lines of the members named in the first ownership
    anomaly, from ``before_s`` before it to ``after_s`` after: a CI failure's output is all
    there is to read once its machine is gone."""
    first = next(
        (
            a
            for a in report.result.anomalies
            if a.kind in (AnomalyKind.OWNERSHIP_OVERLAP, AnomalyKind.UNOWNED_DELIVERY)
            and a.member
            and a.ts is not None
        ),
        None,
    )
    if first is None or first.ts is None or first.member is None:
        return []
    lo, hi = first.ts - before_s, first.ts + after_s
    entries: list[tuple[float, str]] = []
    directory = report.events_dir
    try:
        for line in (directory / "faults.jsonl").read_text().splitlines():
            fault = json.loads(line)
            start, end = fault.get("started_ts"), fault.get("ended_ts")
            if start is not None and start <= hi and (end is None or end >= lo):
                entries.append((start, f"fault {fault['text']} (until {end or 0:.3f})"))
        for member in dict.fromkeys([first.member, *_HOLDER.findall(first.message)]):
            for line in (directory / f"{member}.jsonl").read_text().splitlines():
                event = json.loads(line)
                if event["type"] not in _QUIET_EVENTS and lo <= event["ts"] <= hi:
                    parts = [p.get("partition") for p in event.get("partitions", [])]
                    entries.append(
                        (
                            event["ts"],
                            f"{member} {event['type']} generation={event.get('generation')} "
                            f"{parts or ''} {event.get('reason') or event.get('state') or ''}",
                        )
                    )
            for line in (directory / f"{member}.stderr").read_text().splitlines():
                match = _LOG_TS.match(line)
                if match is None:
                    continue
                ts = datetime.datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                if lo <= ts <= hi:
                    entries.append((ts, f"{member} log {match[2][:300]}"))
    except (OSError, ValueError, KeyError) as e:
        return [f"  (the members' files could not be read: {e})"]
    entries.sort(key=lambda entry: entry[0])
    out = [f"around the first ownership anomaly ({first.ts:.3f}):"]
    out += [f"  {ts:.3f} {text}" for ts, text in entries[-most:]]
    return out


async def _run(cluster: LocalCluster, mode: CoordinatorMode, events_dir: Path) -> ChaosReport:
    seed = _seed()
    logging.getLogger(__name__).info("Kafka chaos run (%s), seed %d", mode.value, seed)
    began = time.monotonic()
    report = await run_chaos(
        cluster,
        consumers=CONSUMERS,
        partitions=PARTITIONS,
        records=RECORDS,
        duration_s=FAULT_PHASE_S,
        seed=seed,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        events_dir=events_dir,
        interval_s=INTERVAL_S,
        finish_timeout_s=90.0,
        mode=mode,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        transactions=TRANSACTIONS,
    )
    logging.getLogger(__name__).info(
        "Kafka chaos run (%s) took %.0f s:\n%s",
        mode.value,
        time.monotonic() - began,
        report.summary(),
    )
    return report


def _assert_clean(report: ChaosReport, protocol: str) -> None:
    why = _failure(report, protocol)
    by_kind = report.result.by_kind()
    for kind in (
        AnomalyKind.LOST,
        AnomalyKind.ABORTED_READ,
        AnomalyKind.UNCOMMITTED_READ,
        AnomalyKind.OWNERSHIP_OVERLAP,
        AnomalyKind.UNOWNED_DELIVERY,
        AnomalyKind.NONMONOTONIC,
        AnomalyKind.COMMIT_DECREASED,
        AnomalyKind.COMMIT_AHEAD,
        AnomalyKind.HANDOVER_GAP,
        AnomalyKind.DUPLICATE,
    ):
        assert kind not in by_kind, why
    assert report.result.safety_ok, why
    assert report.finished and not report.harness_problems, why
    assert not report.unexpected_exits, why
    assert report.result.lost == 0, why
    injected = report.faults
    # The group coordinator moved at least once: killed on its own, or restarted with every
    # broker (a coordinator kill drawn while a rolling restart still runs is skipped).
    moves = injected.get(FaultKind.COORDINATOR_KILL.value, 0) + injected.get(
        FaultKind.ROLLING_RESTART.value, 0
    )
    assert moves > 0, why
    assert report.transactions.get("aborted", 0) > 0, why
    assert report.result.distinct_delivered == report.records > 0, why


@pytest.mark.integration
@pytest.mark.chaos
@pytest.mark.timeout(900)
async def test_kafka_classic_chaos_run_leaves_a_clean_history(
    kafka_chaos_cluster: LocalCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Classic protocol (JoinGroup/SyncGroup, eager range assignment)."""
    caplog.set_level(logging.INFO, logger="aiozkconsumer.testing.chaos")
    report = await _run(kafka_chaos_cluster, CoordinatorMode.KAFKA_CLASSIC, tmp_path / "chaos")
    _assert_clean(report, "classic")


@pytest.mark.integration
@pytest.mark.chaos
@pytest.mark.timeout(900)
async def test_kafka_consumer_protocol_chaos_run_leaves_a_clean_history(
    kafka_chaos_cluster: LocalCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``group.protocol=consumer`` (KIP-848: the broker assigns, the member reconciles)."""
    caplog.set_level(logging.INFO, logger="aiozkconsumer.testing.chaos")
    report = await _run(kafka_chaos_cluster, CoordinatorMode.KAFKA_CONSUMER, tmp_path / "chaos")
    _assert_clean(report, "consumer_protocol")
