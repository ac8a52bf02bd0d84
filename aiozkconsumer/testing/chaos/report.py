"""What a chaos run is made of and what it found: its config, fault outcomes and report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiozkconsumer.testing.chaos.schedule import DEFAULT_WEIGHTS, Fault, FaultKind
from aiozkconsumer.testing.history import CheckResult

__all__ = ["ChaosConfig", "ChaosReport", "FaultOutcome"]


@dataclass(frozen=True)
class FaultOutcome:
    """What became of one planned fault.

    Attributes:
        fault: the planned fault.
        status: ``"injected"``; ``"skipped"`` (its target was busy, or there was nothing to
            do, e.g. the session was already gone); or ``"failed"`` (injecting or healing
            raised: the message says what).
        started_ts: ``time.time()`` when it started.
        ended_ts: ``time.time()`` when it was healed (or given up).
        detail: a few words: what was hit, why it was skipped, the error.
    """

    fault: Fault
    status: Literal["injected", "skipped", "failed"]
    started_ts: float
    ended_ts: float
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        """The outcome as a JSON-serializable dict."""
        return {
            **self.fault.to_json(),
            "status": self.status,
            "started_ts": self.started_ts,
            "ended_ts": self.ended_ts,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class ChaosConfig:
    """Everything a chaos run is made of (the arguments of :func:`run_chaos`).

    Attributes:
        duration_s: length of the fault phase, seconds.
        seed: seeds the fault schedule and the producer's choice of partitions.
        session_timeout_ms: the consumers' ``zookeeper.session.timeout.ms`` (within the
            ZooKeeper server's ``[2, 20] x tickTime``).
        consumers: consumer processes (slots; a killed one is replaced), >= 1.
        partitions: partitions of the topic, >= 1.
        records: records produced, spread over the fault phase in chunks, >= 0.
        interval_s: mean seconds between faults.
        weights: relative frequency per fault kind (default :data:`DEFAULT_WEIGHTS`).
        streams: streams per consumer.
        commit_interval_ms: how often each consumer commits.
        max_records: the largest batch a consumer takes at a time.
        processing_delay_ms: a pause after each batch in the consumers.
        chunk_interval_s: how often a chunk of records is produced.
        finish_timeout_s: how long the group may take, after the heal, to consume and commit
            everything.
        liveness_slack_s: seconds beyond the session timeout the checker allows for every
            partition to be owned again after the heal.
        consumer_properties: more consumer properties (dotted keys) for every consumer.
        consumer_log_level: the consumers' log level (their stderr goes to
            ``<events_dir>/<member>.stderr``); ``INFO`` shows every rebalance attempt.
    """

    duration_s: float
    seed: int
    session_timeout_ms: int
    consumers: int = 4
    partitions: int = 12
    records: int = 200_000
    interval_s: float = 2.0
    weights: Mapping[FaultKind, float] | None = None
    streams: int = 2
    commit_interval_ms: int = 250
    max_records: int = 200
    processing_delay_ms: int = 0
    chunk_interval_s: float = 1.0
    finish_timeout_s: float = 180.0
    liveness_slack_s: float = 20.0
    consumer_properties: Mapping[str, str] = field(default_factory=dict)
    consumer_log_level: str = "INFO"

    def to_json(self) -> dict[str, Any]:
        """The configuration as a JSON-serializable dict."""
        return {
            "duration_s": self.duration_s,
            "seed": self.seed,
            "session_timeout_ms": self.session_timeout_ms,
            "consumers": self.consumers,
            "partitions": self.partitions,
            "records": self.records,
            "interval_s": self.interval_s,
            "weights": {k.value: w for k, w in (self.weights or DEFAULT_WEIGHTS).items()},
            "streams": self.streams,
            "commit_interval_ms": self.commit_interval_ms,
            "max_records": self.max_records,
            "processing_delay_ms": self.processing_delay_ms,
            "chunk_interval_s": self.chunk_interval_s,
            "finish_timeout_s": self.finish_timeout_s,
            "liveness_slack_s": self.liveness_slack_s,
            "consumer_properties": dict(self.consumer_properties),
            "consumer_log_level": self.consumer_log_level,
        }


@dataclass(frozen=True)
class ChaosReport:
    """The outcome of :func:`run_chaos`.

    Attributes:
        config: the run's configuration (its ``seed`` reproduces the schedule).
        topic: the topic consumed.
        group: the consumer group.
        schedule: the planned faults.
        outcomes: what became of each planned fault, in schedule order.
        records: records in the topic (read back from the broker at the end).
        acknowledged: records the producer had acknowledged.
        produce_failures: chunks the producer could not get acknowledged (their records may
            or may not be in the topic: the read-back says).
        incarnations: consumer processes started in all.
        unexpected_exits: consumer processes that exited on their own (not killed by the
            nemesis, not stopped at the end), each as ``"<member>: exit <code>: <error>"``.
        finished: whether the group consumed and committed every record after the heal.
        harness_problems: anything that makes the run inconclusive (acknowledged records
            missing from the topic, processes that ignored SIGTERM, ...).
        last_fault_ts: ``time.time()`` once every fault was healed.
        phases_s: seconds spent per phase (``setup``, ``faults``, ``heal``, ``finish``,
            ``stop``, ``check``, ``total``).
        result: the history checker's result.
        events_dir: where the produced log, the event files and the fault log are.
    """

    config: ChaosConfig
    topic: str
    group: str
    schedule: tuple[Fault, ...]
    outcomes: tuple[FaultOutcome, ...]
    records: int
    acknowledged: int
    produce_failures: int
    incarnations: int
    unexpected_exits: tuple[str, ...]
    finished: bool
    harness_problems: tuple[str, ...]
    last_fault_ts: float
    phases_s: Mapping[str, float]
    result: CheckResult
    events_dir: Path

    @property
    def seed(self) -> int:
        """The seed of the run."""
        return self.config.seed

    @property
    def faults(self) -> dict[str, int]:
        """Faults injected, by kind (every kind listed, 0 included)."""
        counts = {k.value: 0 for k in FaultKind}
        for o in self.outcomes:
            if o.status == "injected":
                counts[o.fault.kind.value] += 1
        return counts

    @property
    def skipped(self) -> dict[str, int]:
        """Planned faults not injected (target busy, nothing to do, or failed), by kind."""
        counts: dict[str, int] = {}
        for o in self.outcomes:
            if o.status != "injected":
                counts[o.fault.kind.value] = counts.get(o.fault.kind.value, 0) + 1
        return counts

    @property
    def ok(self) -> bool:
        """No anomaly, no unexpected exit, the group finished, and the run was conclusive."""
        return (
            self.result.ok
            and self.finished
            and not self.unexpected_exits
            and not self.harness_problems
        )

    def summary(self) -> str:
        """A few lines for a log or a test failure: seed, faults, records, the check."""
        injected = sum(self.faults.values())
        kinds = ", ".join(f"{k}={n}" for k, n in self.faults.items())
        lines = [
            f"chaos run seed={self.seed} ({'ok' if self.ok else 'FAILED'}): "
            f"{self.config.consumers} consumers, {self.config.partitions} partitions, "
            f"{self.records} records, fault phase {self.config.duration_s:g} s",
            f"faults injected: {injected} ({kinds}); not injected: {self.skipped or 0}",
            f"incarnations={self.incarnations} produce_failures={self.produce_failures} "
            f"finished={self.finished} phases="
            + " ".join(f"{k}={v:.0f}s" for k, v in self.phases_s.items()),
        ]
        lines.extend(f"unexpected exit: {e}" for e in self.unexpected_exits)
        lines.extend(f"harness problem: {p}" for p in self.harness_problems)
        lines.append(self.result.summary())
        lines.append(f"events: {self.events_dir}")
        lines.append(f"reproduce: AIOZKCONSUMER_CHAOS_SEED={self.seed} (or --seed {self.seed})")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-serializable dict (anomalies as text)."""
        r = self.result
        return {
            "ok": self.ok,
            "seed": self.seed,
            "config": self.config.to_json(),
            "topic": self.topic,
            "group": self.group,
            "faults_injected": self.faults,
            "faults_not_injected": self.skipped,
            "records": self.records,
            "acknowledged": self.acknowledged,
            "produce_failures": self.produce_failures,
            "incarnations": self.incarnations,
            "unexpected_exits": list(self.unexpected_exits),
            "finished": self.finished,
            "harness_problems": list(self.harness_problems),
            "phases_s": {k: round(v, 1) for k, v in self.phases_s.items()},
            "check": {
                "ok": r.ok,
                "produced": r.produced,
                "delivered": r.delivered,
                "distinct_delivered": r.distinct_delivered,
                "duplicates": r.duplicates,
                "allowed_duplicates": r.allowed_duplicates,
                "lost": r.lost,
                "commits": r.commits,
                "epochs": r.epochs,
                "incarnations": r.incarnations,
                "crashes": r.crashes,
                "session_losses": r.session_losses,
                "suspensions": r.suspensions,
                "anomalies": {k.value: len(v) for k, v in r.by_kind().items()},
                "anomaly_list": [str(a) for a in r.anomalies],
            },
            "events_dir": str(self.events_dir),
        }
