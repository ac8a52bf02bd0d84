"""What a chaos run is made of and what it found: its config, fault outcomes and report."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiozkconsumer.testing.chaos.clients import NOT_APPLIED, NOT_RECORDED, MemberClient
from aiozkconsumer.testing.chaos.schedule import (
    CoordinatorMode,
    Fault,
    FaultKind,
    weights_for,
)
from aiozkconsumer.testing.history import (
    AnomalyKind,
    CheckResult,
    Handover,
    InjectedFault,
    duplicate_window_bound_s,
)

__all__ = ["ChaosConfig", "ChaosReport", "FaultOutcome", "HandoverStats"]

_NO_FAULT = "no fault"


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
        members: the consumer processes (event ``member`` names) it hit; ``None`` for a
            server restart (and for a fault skipped as busy).
    """

    fault: Fault
    status: Literal["injected", "skipped", "failed"]
    started_ts: float
    ended_ts: float
    detail: str = ""
    members: tuple[str, ...] | None = None

    def injected(self) -> InjectedFault:
        """The fault as the history checker takes it (``check_history(faults=...)``)."""
        return InjectedFault(
            kind=self.fault.kind.value,
            started_ts=self.started_ts,
            ended_ts=self.ended_ts,
            members=None if self.members is None else frozenset(self.members),
            number=self.fault.number,
        )

    def to_json(self) -> dict[str, Any]:
        """The outcome as a JSON-serializable dict."""
        return {
            **self.fault.to_json(),
            "status": self.status,
            "started_ts": self.started_ts,
            "ended_ts": self.ended_ts,
            "detail": self.detail,
            "members": None if self.members is None else list(self.members),
        }


def _percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 < q <= 1), nearest rank (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _p99(values: Sequence[float]) -> float:
    """The 99th percentile, nearest rank (0 for no values)."""
    return _percentile(values, 0.99)


def _gaps(handovers: Sequence[Handover]) -> list[float]:
    """The hand-overs' delivery gaps, where both owners handed something out."""
    return [h.gap_s for h in handovers if h.gap_s is not None]


@dataclass(frozen=True)
class HandoverStats:
    """The hand-overs after one kind of fault: duplicates and duplicate windows.

    Attributes:
        kind: the fault kind (a :class:`FaultKind` value), or ``"no fault"``.
        handovers: how many.
        duplicates_max: most records one hand-over delivered again.
        duplicates_p99: 99th percentile of that (nearest rank).
        window_max_s: longest duplicate window, seconds.
        window_p99_s: 99th percentile of the windows, seconds.
        bound_s: the window's bound for the kind; ``None``: no stated bound.
        exceeded: hand-overs whose window exceeds the bound.
        gap_p50_s: median delivery gap across the hand-overs (:attr:`Handover.gap_s`, the
            recovery a reader of the partition sees), seconds; ``None`` without gaps.
        gap_p99_s: 99th percentile of the gaps (nearest rank), seconds; ``None`` without.
    """

    kind: str
    handovers: int
    duplicates_max: int
    duplicates_p99: float
    window_max_s: float
    window_p99_s: float
    bound_s: float | None
    exceeded: int
    gap_p50_s: float | None = None
    gap_p99_s: float | None = None

    @classmethod
    def by_kind(
        cls, handovers: Sequence[Handover], commit_interval_ms: int, session_timeout_ms: int
    ) -> list[HandoverStats]:
        """One entry per fault kind with hand-overs: kinds in :class:`FaultKind` order, then
        ``"no fault"``."""
        grouped: dict[str, list[Handover]] = {}
        for h in handovers:
            grouped.setdefault(h.fault_kind or _NO_FAULT, []).append(h)
        order = [k.value for k in FaultKind] + [_NO_FAULT]
        stats = []
        for kind in sorted(grouped, key=lambda k: order.index(k) if k in order else len(order)):
            hs = grouped[kind]
            bound = duplicate_window_bound_s(
                None if kind == _NO_FAULT else kind, commit_interval_ms, session_timeout_ms
            )
            stats.append(
                cls(
                    kind=kind,
                    handovers=len(hs),
                    duplicates_max=max(h.duplicates for h in hs),
                    duplicates_p99=_p99([h.duplicates for h in hs]),
                    window_max_s=max(h.window_s for h in hs),
                    window_p99_s=_p99([h.window_s for h in hs]),
                    bound_s=bound,
                    exceeded=sum(1 for h in hs if h.exceeded),
                    gap_p50_s=_percentile(gaps, 0.5) if (gaps := _gaps(hs)) else None,
                    gap_p99_s=_p99(gaps) if gaps else None,
                )
            )
        return stats

    def __str__(self) -> str:
        bound = "no stated bound" if self.bound_s is None else f"bound {self.bound_s:.2f} s"
        over = f", {self.exceeded} over the bound" if self.exceeded else ""
        gap = (
            ""
            if self.gap_p50_s is None or self.gap_p99_s is None
            else f"; delivery gap p50 {self.gap_p50_s:.2f} s p99 {self.gap_p99_s:.2f} s"
        )
        return (
            f"{self.kind:<18} {self.handovers:>4} hand-overs: duplicates max {self.duplicates_max}"
            f" p99 {self.duplicates_p99:g}; window max {self.window_max_s:.2f} s"
            f" p99 {self.window_p99_s:.2f} s ({bound}){over}{gap}"
        )

    def to_json(self) -> dict[str, Any]:
        """The statistics as a JSON-serializable dict."""
        return {
            "handovers": self.handovers,
            "duplicates_max": self.duplicates_max,
            "duplicates_p99": self.duplicates_p99,
            "window_max_s": round(self.window_max_s, 3),
            "window_p99_s": round(self.window_p99_s, 3),
            "bound_s": None if self.bound_s is None else round(self.bound_s, 3),
            "exceeded": self.exceeded,
            "gap_p50_s": None if self.gap_p50_s is None else round(self.gap_p50_s, 3),
            "gap_p99_s": None if self.gap_p99_s is None else round(self.gap_p99_s, 3),
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
        mode: who coordinates the group (:class:`CoordinatorMode`); Kafka modes need a
            KRaft cluster (see :func:`~aiozkconsumer.testing.chaos.run_chaos`).
        heartbeat_interval_ms: the members' ``heartbeat.interval.ms`` (classic protocol; the
            consumer protocol's comes from the broker).
        transactions: the share of the producer's chunks written in transactions, 0 to 1
            (0: none); three in ten of those transactions are aborted. Members then read with
            ``isolation.level=read_committed``.
        replication_factor: the topic's replication factor (Kafka modes: 3).
        client: the client the members consume with (:class:`MemberClient`): ours, or
            aiokafka's ``AIOKafkaConsumer`` as a reference (``kafka-classic`` mode only).
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
    mode: CoordinatorMode = CoordinatorMode.ZOOKEEPER
    heartbeat_interval_ms: int = 1000
    transactions: float = 0.0
    replication_factor: int = 1
    client: MemberClient = MemberClient.AIOZKCONSUMER

    @property
    def kinds(self) -> list[FaultKind]:
        """The fault kinds the run may draw (its weights', or its mode's defaults)."""
        weights = self.weights if self.weights is not None else weights_for(self.mode)
        return [k for k in FaultKind if weights.get(k, 0) > 0]

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
            "weights": {k.value: w for k, w in (self.weights or weights_for(self.mode)).items()},
            "streams": self.streams,
            "commit_interval_ms": self.commit_interval_ms,
            "max_records": self.max_records,
            "processing_delay_ms": self.processing_delay_ms,
            "chunk_interval_s": self.chunk_interval_s,
            "finish_timeout_s": self.finish_timeout_s,
            "liveness_slack_s": self.liveness_slack_s,
            "consumer_properties": dict(self.consumer_properties),
            "consumer_log_level": self.consumer_log_level,
            "mode": self.mode.value,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            "transactions": self.transactions,
            "replication_factor": self.replication_factor,
            "client": self.client.value,
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
        transactions: the producer's transactions by outcome (``committed``, ``aborted``,
            ``failed``: the brokers' read-back tells); empty without transactions.
        rules_not_applied: the anomaly kinds left out of the verdict for the run's client
            (:data:`~aiozkconsumer.testing.chaos.clients.NOT_APPLIED`), each with how many
            anomalies of it the checker found; empty for our client.
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
    transactions: Mapping[str, int] = field(default_factory=dict)
    rules_not_applied: Mapping[str, int] = field(default_factory=dict)

    @property
    def seed(self) -> int:
        """The seed of the run."""
        return self.config.seed

    @property
    def faults(self) -> dict[str, int]:
        """Faults injected, by kind (every kind the run may draw listed, 0 included)."""
        counts = {k.value: 0 for k in self.config.kinds}
        for o in self.outcomes:
            if o.status == "injected":
                counts[o.fault.kind.value] = counts.get(o.fault.kind.value, 0) + 1
        return counts

    @property
    def skipped(self) -> dict[str, int]:
        """Planned faults not injected (target busy, nothing to do, or failed), by kind."""
        counts: dict[str, int] = {}
        for o in self.outcomes:
            if o.status != "injected":
                counts[o.fault.kind.value] = counts.get(o.fault.kind.value, 0) + 1
        return counts

    def handover_stats(self) -> list[HandoverStats]:
        """Duplicates and duplicate windows of the hand-overs, per fault kind."""
        return HandoverStats.by_kind(
            self.result.handovers, self.config.commit_interval_ms, self.config.session_timeout_ms
        )

    def fault_lines(self) -> list[str]:
        """Hand-overs per fault kind next to their bounds, and sessions expired per ZooKeeper
        restart (for :meth:`summary` and a soak's console)."""
        t = self.config.session_timeout_ms / 1000
        lines = [
            f"hand-overs by fault kind (C={self.config.commit_interval_ms / 1000:g} s, "
            f"T={t:g} s; window = span of the previous owner's deliveries of the duplicates):"
        ]
        stats = self.handover_stats()
        lines.extend(f"  {s}" for s in stats)
        if not stats:
            lines.append("  none")
        at = {f.number: f.at_s for f in self.schedule}
        restarts = self.result.zookeeper_restarts
        lines.append(
            f"ZooKeeper restarts: sessions expired (none may when down < T/2 = {t / 2:g} s):"
        )
        for r in restarts:
            when = f" @{at[r.number]:.1f}s" if r.number in at else ""
            names = f" ({', '.join(r.expired)})" if r.expired else ""
            blamed = f", {len(r.unexplained)} unexplained" if r.short and r.unexplained else ""
            lines.append(
                f"  #{r.number}{when} down {r.downtime_s:.1f} s{' (short)' if r.short else ''}: "
                f"{len(r.expired)} expired{names}{blamed}"
            )
        if not restarts:
            lines.append("  none")
        return lines

    def client_lines(self) -> list[str]:
        """Which client the members ran, and what the check did not judge or get for it."""
        client = self.config.client
        lines = [f"client: {client.value}"]
        reasons = {k.value: why for k, why in NOT_APPLIED[client].items()}
        for kind, n in self.rules_not_applied.items():
            lines.append(
                f"  rule not applied: {kind} ({n} left out of the verdict): {reasons.get(kind, '')}"
            )
        for what, why in NOT_RECORDED[client].items():
            lines.append(f"  not recorded: {what}: {why}")
        return lines

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
            f"mode={self.config.mode.value} client={self.config.client.value} "
            f"transactions={dict(self.transactions) or 'none'}",
            f"incarnations={self.incarnations} produce_failures={self.produce_failures} "
            f"finished={self.finished} phases="
            + " ".join(f"{k}={v:.0f}s" for k, v in self.phases_s.items()),
        ]
        lines.extend(f"unexpected exit: {e}" for e in self.unexpected_exits)
        lines.extend(f"harness problem: {p}" for p in self.harness_problems)
        if self.config.client is not MemberClient.AIOZKCONSUMER:
            lines.extend(self.client_lines())
        lines.extend(self.fault_lines())
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
            "transactions": dict(self.transactions),
            "client": self.config.client.value,
            "rules_not_applied": {
                kind: {
                    "left_out": n,
                    "reason": NOT_APPLIED[self.config.client].get(AnomalyKind(kind), ""),
                }
                for kind, n in self.rules_not_applied.items()
            },
            "not_recorded": dict(NOT_RECORDED[self.config.client]),
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
                "handovers_by_fault": {s.kind: s.to_json() for s in self.handover_stats()},
                "zookeeper_restarts": [
                    {
                        "number": z.number,
                        "downtime_s": round(z.downtime_s, 3),
                        "short": z.short,
                        "sessions_expired": list(z.expired),
                        "unexplained": list(z.unexplained),
                    }
                    for z in r.zookeeper_restarts
                ],
            },
            "events_dir": str(self.events_dir),
        }
