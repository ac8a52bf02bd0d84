"""Chaos runs: a seeded fault scheduler, and a runner that drives a whole Jepsen-style run.

A run (:func:`run_chaos`) follows Jepsen's phases (``reference/reliability-and-style.md``
§1a): verifiable consumer processes (:mod:`aiozkconsumer.testing.verifiable`) consume a topic
while a producer keeps writing checkable records to it and a *nemesis* injects a fault every
couple of seconds; then everything is healed, the group is left to recover and finish (every
connector running, every record consumed and committed), the consumers are stopped with
SIGTERM, the topic is read back from the broker, and the history is checked
(:func:`aiozkconsumer.testing.history.check_history`).

The faults (:class:`FaultKind`), on consumers, ZooKeeper and the network, never on the data:
the broker, with ``acks=all`` and an idempotent producer on a direct listener, is the trusted
substrate.

- ``kill``: SIGKILL a consumer process and start a replacement (a new incarnation).
- ``pause``: SIGSTOP a consumer past its session timeout, then SIGCONT: the classic zombie,
  which wakes up believing it still owns its partitions.
- ``expire``: expire a consumer's ZooKeeper session on the server, for real (its id and
  password come from the consumer's ``state`` events).
- ``zookeeper_restart``: stop ZooKeeper, wait, start it again (sessions survive if their
  clients come back in time).
- ``broker_restart``: restart a broker (controlled shutdown, start, wait until it serves).
- ``zookeeper_link`` / ``broker_link``: cut the link between one consumer (or every consumer)
  and ZooKeeper or the brokers through the cluster's proxies
  (``LocalCluster(proxy_links=...)``): ``blackhole`` (bytes dropped, connections stay up),
  ``reset`` (connections reset, new ones too) or ``delay`` (latency), one direction or both,
  then heal.

:class:`FaultScheduler` draws the schedule from ``random.Random(seed)`` alone: the same seed
gives the same faults at the same offsets, so a failing run is reproduced by running again
with its seed. The schedule is logged before the run starts and written to
``<events_dir>/schedule.txt``; what each fault did (injected, or skipped because its target
was busy) goes to ``<events_dir>/faults.jsonl``. (What the servers and processes do in
between is up to the machine: a reproduction re-injects the same faults, not the same
interleaving.)
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import math
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as kafka_errors
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from aiozkconsumer.errors import ConsumerError, ZookeeperError
from aiozkconsumer.testing.cluster import (
    LinkTarget,
    LocalCluster,
    LocalClusterError,
    ProxyLink,
    _make_preexec,
)
from aiozkconsumer.testing.history import CheckResult, ProducedLog, check_history, load_events
from aiozkconsumer.testing.proxy import Direction, FaultMode
from aiozkconsumer.testing.verifiable import verifiable_consumer_command

__all__ = [
    "DEFAULT_WEIGHTS",
    "ChaosConfig",
    "ChaosReport",
    "Fault",
    "FaultKind",
    "FaultOutcome",
    "FaultScheduler",
    "run_chaos",
]

log = logging.getLogger(__name__)

_CLIENT_ID = "aiozkconsumer-chaos"
_POLL_S = 0.25
"""How often the runner reads the consumers' event files and checks their processes."""
_MEMBER_START_S = 60.0
"""How long a started consumer may take to write its first ``state`` event."""
_STOP_GRACE_S = 30.0
"""How long a consumer may take to shut down after SIGTERM before it is SIGKILLed."""
_EXPIRE_TIMEOUT_S = 20.0
_RESTART_TIMEOUT_S = 120.0
_PRODUCE_TIMEOUT_S = 120.0
_DETAIL_CHARS = 400


class FaultKind(enum.StrEnum):
    """The faults a chaos run injects (see the module docstring)."""

    KILL = "kill"
    PAUSE = "pause"
    EXPIRE = "expire"
    ZOOKEEPER_RESTART = "zookeeper_restart"
    BROKER_RESTART = "broker_restart"
    ZOOKEEPER_LINK = "zookeeper_link"
    BROKER_LINK = "broker_link"


DEFAULT_WEIGHTS: Mapping[FaultKind, float] = {
    FaultKind.KILL: 3,
    FaultKind.PAUSE: 2,
    FaultKind.EXPIRE: 3,
    FaultKind.ZOOKEEPER_RESTART: 1,
    FaultKind.BROKER_RESTART: 1,
    FaultKind.ZOOKEEPER_LINK: 3,
    FaultKind.BROKER_LINK: 2,
}
"""Relative frequency of each kind. Server restarts are rarer: each takes seconds to tens of
seconds of a two-core machine, and a broker restart holds the producer back meanwhile."""

_LINK_KINDS = frozenset({FaultKind.ZOOKEEPER_LINK, FaultKind.BROKER_LINK})


@dataclass(frozen=True)
class Fault:
    """One planned fault (an entry of a :class:`FaultScheduler` schedule).

    Attributes:
        number: its position in the schedule, from 1.
        at_s: when to inject it, in seconds from the start of the fault phase.
        kind: what it is.
        member: the consumer slot it hits (``0 .. consumers-1``); ``None`` for a link fault
            on every consumer, and for server restarts.
        broker: the broker a ``broker_restart`` restarts.
        duration_s: how long the fault lasts before it is healed: the pause, the link cut,
            the time ZooKeeper stays down. 0 for instant faults (kill, expire, broker restart).
        mode: a link fault's proxy mode (``BLACKHOLE``, ``RESET`` or ``DELAY``).
        direction: a link fault's direction: ``"up"`` (consumer to server), ``"down"`` or
            ``"both"``.
        delay_s: the latency of a ``DELAY`` link fault, seconds.
    """

    number: int
    at_s: float
    kind: FaultKind
    member: int | None = None
    broker: int | None = None
    duration_s: float = 0.0
    mode: FaultMode | None = None
    direction: Direction = "both"
    delay_s: float = 0.0

    def resources(self, consumers: int) -> frozenset[str]:
        """What the fault occupies while it runs; faults sharing one never overlap.

        A consumer process (``c<slot>``), a consumer's link to ZooKeeper or to the brokers
        (``zk-link-<slot>``, ``kafka-link-<slot>``), ZooKeeper, or a broker.

        An expiry also needs the consumer's ZooKeeper link intact: a session is never
        expired while its owner cannot hear of it (its link cut, or the process paused).
        ZooKeeper itself never expires a session sooner than a session timeout after it last
        heard from the client, and the connector's ownership lease relies on that; closing
        the session from outside while the client is cut off would be a fault no client can
        detect in time, not a fault of the consumer.

        A broker restart also occupies ZooKeeper: a Kafka 3.9 broker in ZooKeeper mode that
        loses its session while it starts exits (a fault of the trusted substrate, not of the
        consumers).
        """
        if self.kind in (FaultKind.KILL, FaultKind.PAUSE):
            return frozenset({f"c{self.member}"})
        if self.kind is FaultKind.EXPIRE:
            return frozenset({f"c{self.member}", f"zk-link-{self.member}", "zookeeper"})
        if self.kind is FaultKind.ZOOKEEPER_RESTART:
            return frozenset({"zookeeper"})
        if self.kind is FaultKind.BROKER_RESTART:
            return frozenset({f"broker-{self.broker}", "zookeeper"})
        prefix = "zk-link" if self.kind is FaultKind.ZOOKEEPER_LINK else "kafka-link"
        slots = range(consumers) if self.member is None else (self.member,)
        return frozenset(f"{prefix}-{slot}" for slot in slots)

    def __str__(self) -> str:
        who = "every consumer" if self.member is None else f"c{self.member}"
        if self.kind is FaultKind.KILL:
            what = f"kill {who} (SIGKILL) and start a replacement"
        elif self.kind is FaultKind.PAUSE:
            what = f"pause {who} (SIGSTOP) for {self.duration_s:.1f} s"
        elif self.kind is FaultKind.EXPIRE:
            what = f"expire the ZooKeeper session of {who}"
        elif self.kind is FaultKind.ZOOKEEPER_RESTART:
            what = f"restart ZooKeeper (down {self.duration_s:.1f} s)"
        elif self.kind is FaultKind.BROKER_RESTART:
            what = f"restart broker {self.broker}"
        else:
            server = "ZooKeeper" if self.kind is FaultKind.ZOOKEEPER_LINK else "broker"
            mode = self.mode.value if self.mode is not None else "?"
            if self.mode is FaultMode.DELAY:
                mode = f"delay {self.delay_s:.2f} s"
            direction = "" if self.mode is FaultMode.RESET else f" {self.direction}"
            what = f"cut the {server} link of {who}: {mode}{direction} for {self.duration_s:.1f} s"
        return f"#{self.number} @{self.at_s:.1f}s {what}"

    def to_json(self) -> dict[str, Any]:
        """The fault as a JSON-serializable dict."""
        return {
            "number": self.number,
            "at_s": round(self.at_s, 3),
            "kind": self.kind.value,
            "member": self.member,
            "broker": self.broker,
            "duration_s": round(self.duration_s, 3),
            "mode": self.mode.value if self.mode is not None else None,
            "direction": self.direction,
            "delay_s": round(self.delay_s, 3),
            "text": str(self),
        }


class FaultScheduler:
    """A seeded plan of faults: the nemesis of a chaos run (pure, no I/O).

    Faults come every ``interval_s`` on average (uniformly between half and one and a half
    times it), their kind drawn with ``weights``. The scheduler keeps a model of what each
    planned fault occupies (see :meth:`Fault.resources`) and for how long (its duration, plus
    an estimate for the ones whose length only the servers know: a replacement consumer's
    start, a server restart), and draws again (up to 8 times) when a draw would hit something
    still busy; a tick with nothing free plans no fault.

    Args:
        seed: seeds the :class:`random.Random` every draw comes from.
        consumers: consumer slots, >= 1.
        brokers: broker ids that may be restarted.
        session_timeout_ms: the consumers' ``zookeeper.session.timeout.ms``: pauses last
            1.3 to 2 times it, link cuts 0.3 to 2 times it (some shorter than a session
            timeout, which the session should survive, some longer).
        interval_s: mean seconds between faults, > 0 (default 2).
        weights: relative frequency per kind (default :data:`DEFAULT_WEIGHTS`); a kind left
            out, or weighted 0, is never drawn.
        links: whether link faults are possible (the cluster has a proxied link per consumer).

    Raises:
        ValueError: if ``consumers < 1``, ``interval_s <= 0``, ``session_timeout_ms <= 0``,
            or no kind has a positive weight.
    """

    def __init__(
        self,
        seed: int,
        *,
        consumers: int,
        brokers: Sequence[int] = (0,),
        session_timeout_ms: int,
        interval_s: float = 2.0,
        weights: Mapping[FaultKind, float] | None = None,
        links: bool = True,
    ) -> None:
        if consumers < 1:
            raise ValueError(f"consumers must be >= 1, got {consumers}")
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        if session_timeout_ms <= 0:
            raise ValueError(f"session_timeout_ms must be > 0, got {session_timeout_ms}")
        chosen = dict(DEFAULT_WEIGHTS if weights is None else weights)
        if not links:
            chosen = {k: w for k, w in chosen.items() if k not in _LINK_KINDS}
        if not brokers:
            chosen.pop(FaultKind.BROKER_RESTART, None)
        self.kinds = [k for k in FaultKind if chosen.get(k, 0) > 0]
        if not self.kinds:
            raise ValueError("no fault kind has a positive weight")
        self.weights = [float(chosen[k]) for k in self.kinds]
        self.seed = seed
        self.consumers = consumers
        self.brokers = list(brokers)
        self.session_s = session_timeout_ms / 1000
        self.interval_s = float(interval_s)

    def plan(self, duration_s: float) -> list[Fault]:
        """The faults of a fault phase of ``duration_s`` seconds, in time order.

        Deterministic: the same scheduler arguments and ``duration_s`` give the same list.
        """
        rng = random.Random(self.seed)
        busy_until: dict[str, float] = {}
        faults: list[Fault] = []
        t = rng.uniform(0.5, 1.5) * self.interval_s
        while t < duration_s:
            for _ in range(8):
                fault, hold_s = self._draw(rng, len(faults) + 1, t)
                needs = fault.resources(self.consumers)
                if all(busy_until.get(r, -math.inf) <= t for r in needs):
                    for r in needs:
                        busy_until[r] = t + hold_s
                    faults.append(fault)
                    break
            t += rng.uniform(0.5, 1.5) * self.interval_s
        return faults

    def _draw(self, rng: random.Random, number: int, at_s: float) -> tuple[Fault, float]:
        """One fault and how long the scheduler should consider its resources busy."""
        kind = rng.choices(self.kinds, self.weights)[0]
        member = rng.randrange(self.consumers)
        session = self.session_s
        if kind is FaultKind.KILL:
            # The replacement needs a few seconds to start and join.
            return Fault(number, at_s, kind, member=member), 8.0
        if kind is FaultKind.PAUSE:
            pause = session * rng.uniform(1.3, 2.0)
            return Fault(number, at_s, kind, member=member, duration_s=pause), pause + 1.0
        if kind is FaultKind.EXPIRE:
            return Fault(number, at_s, kind, member=member), 3.0
        if kind is FaultKind.ZOOKEEPER_RESTART:
            down = rng.uniform(0.5, 3.0)
            return Fault(number, at_s, kind, duration_s=down), down + 8.0
        if kind is FaultKind.BROKER_RESTART:
            broker = rng.choice(self.brokers)
            return Fault(number, at_s, kind, broker=broker), 25.0
        scope: int | None = member if rng.random() < 0.75 else None
        mode = rng.choices(
            (FaultMode.BLACKHOLE, FaultMode.RESET, FaultMode.DELAY), (0.5, 0.25, 0.25)
        )[0]
        direction: Direction = rng.choices(("both", "up", "down"), (0.5, 0.25, 0.25))[0]
        delay = 0.0
        if mode is FaultMode.RESET:
            direction = "both"
        if mode is FaultMode.DELAY:
            delay = (
                session * rng.uniform(0.1, 0.8)
                if kind is FaultKind.ZOOKEEPER_LINK
                else rng.uniform(0.2, 2.0)
            )
            length = session * rng.uniform(1.0, 2.0)
        else:
            length = session * rng.uniform(0.3, 2.0)
        fault = Fault(
            number,
            at_s,
            kind,
            member=scope,
            duration_s=length,
            mode=mode,
            direction=direction,
            delay_s=delay,
        )
        return fault, length + 0.5


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


# -- the runner's pieces ---------------------------------------------------------------------


class _Tail:
    """Reads the complete lines a JSON-lines file gained since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pos = 0
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self._pos)
                data = f.read()
        except FileNotFoundError:
            return []
        self._pos += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        events = []
        for line in lines:
            if line.strip():
                with contextlib.suppress(ValueError):
                    events.append(json.loads(line))
        return events


@dataclass(eq=False)
class _Member:
    """One consumer process (an incarnation of a slot)."""

    slot: int
    incarnation: int
    name: str
    events: Path
    proc: asyncio.subprocess.Process
    tail: _Tail
    expected_exit: bool = False
    started: bool = False
    state: str | None = None
    session: str | None = None
    password: str | None = None
    last_error: str | None = None
    reported: bool = False
    replaced: bool = False


class _Run:
    """The state of one chaos run (used by :func:`run_chaos` only)."""

    def __init__(self, cluster: LocalCluster, config: ChaosConfig, events_dir: Path) -> None:
        self.cluster = cluster
        self.config = config
        self.events_dir = events_dir
        tag = uuid.uuid4().hex[:8]
        self.topic = f"chaos-{config.seed}-{tag}"
        self.group = f"chaos-{tag}"
        self.links: list[ProxyLink | None] = []
        self.members: list[_Member] = []
        self.slots: dict[int, _Member] = {}
        self.incarnations: dict[int, int] = {}
        self.busy: set[str] = set()
        self.outcomes: dict[int, FaultOutcome] = {}
        self.unexpected: list[str] = []
        self.problems: list[str] = []
        self.commits: dict[int, tuple[float, int]] = {}
        self.produce_lock = anyio.Lock()
        self.acked: list[tuple[str, int, int, str]] = []
        self.produce_failures = 0
        self.respawn = True
        self.produced = anyio.Event()
        self._polled = anyio.Event()
        self.fault_log = (events_dir / "faults.jsonl").open("a", encoding="utf-8")

    # -- consumers -----------------------------------------------------------------------

    def link_of(self, slot: int) -> ProxyLink | None:
        return self.links[slot] if slot < len(self.links) else None

    async def spawn(self, slot: int) -> _Member:
        """Start a consumer process in ``slot`` (a new incarnation)."""
        cfg = self.config
        number = self.incarnations.get(slot, 0) + 1
        self.incarnations[slot] = number
        name = f"c{slot}" if number == 1 else f"c{slot}.{number}"
        events = self.events_dir / f"{name}.jsonl"
        link = self.link_of(slot)
        properties: dict[str, object] = {
            "zookeeper.session.timeout.ms": cfg.session_timeout_ms,
            "zookeeper.connection.timeout.ms": 30_000,
            "rebalance.backoff.ms": 500,
            "rebalance.max.retries": 60,
            "socket.timeout.ms": 10_000,
            # Explicit: "auto" decides once, at start, from /brokers/ids, which is empty
            # while the only broker restarts.
            "cluster.metadata.source": "kafka" if self.cluster.kraft else "zookeeper",
            "bootstrap.servers": (
                link.bootstrap_servers if link is not None else self.cluster.bootstrap_servers
            ),
            **cfg.consumer_properties,
        }
        argv = verifiable_consumer_command(
            zookeeper=(
                link.zookeeper_connect if link is not None else self.cluster.zookeeper_connect
            ),
            group=self.group,
            topic=self.topic,
            events=events,
            streams=cfg.streams,
            properties=properties,
            member_id=name,
            commit_interval_ms=cfg.commit_interval_ms,
            max_records=cfg.max_records,
            processing_delay_ms=cfg.processing_delay_ms,
        )
        argv += ["--log-level", cfg.consumer_log_level]
        with (self.events_dir / f"{name}.stderr").open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                preexec_fn=_make_preexec(),
            )
        member = _Member(slot, number, name, events, proc, _Tail(events))
        self.members.append(member)
        self.slots[slot] = member
        log.info("started consumer %s (pid %d)", name, proc.pid)
        return member

    async def next_poll(self) -> None:
        """Wait for the monitor's next look at the event files and processes."""
        await self._polled.wait()

    def poll(self) -> None:
        """Read new events; notice processes that exited on their own."""
        self._polled.set()
        self._polled = anyio.Event()
        for m in self.members:
            for e in m.tail.read():
                kind = e.get("type")
                if kind == "state":
                    m.started = True
                    m.state = str(e.get("state"))
                    if e.get("session") and e.get("session_password"):
                        m.session, m.password = e["session"], e["session_password"]
                elif kind == "committed":
                    ts = float(e["ts"])
                    for entry in e.get("offsets") or ():
                        p = int(entry["partition"])
                        if ts >= self.commits.get(p, (-math.inf, 0))[0]:
                            self.commits[p] = (ts, int(entry["offset"]))
                elif kind == "error":
                    m.last_error = str(e.get("error"))
        for m in list(self.slots.values()):
            code = m.proc.returncode
            if code is None or m.expected_exit or m.reported:
                continue
            m.reported = True
            note = f"{m.name}: exit {code}: {m.last_error or _stderr_tail(self.events_dir, m)}"
            log.error("consumer exited on its own: %s", note)
            self.unexpected.append(note)

    async def replace_exited(self) -> None:
        """Start a replacement for every slot whose process exited on its own."""
        if not self.respawn:
            return
        for slot, m in list(self.slots.items()):
            if (
                m.proc.returncode is not None
                and not m.expected_exit
                and not m.replaced
                and f"c{slot}" not in self.busy
            ):
                m.replaced = True
                await self.spawn(slot)

    async def wait_started(self, member: _Member, limit_s: float = _MEMBER_START_S) -> bool:
        with anyio.move_on_after(limit_s):
            while not member.started and member.proc.returncode is None:
                await self.next_poll()
        return member.started

    async def monitor(self) -> None:
        while True:
            self.poll()
            await self.replace_exited()
            await anyio.sleep(_POLL_S)

    # -- production ----------------------------------------------------------------------

    async def produce(self) -> None:
        """Produce ``records`` checkable records in chunks over the fault phase."""
        cfg = self.config
        rng = random.Random(f"producer-{cfg.seed}")
        chunks = max(1, math.ceil(cfg.duration_s / cfg.chunk_interval_s))
        per_chunk = math.ceil(cfg.records / chunks) if cfg.records else 0
        next_seq = dict.fromkeys(range(cfg.partitions), 0)
        producer = await self._new_producer()
        try:
            began = anyio.current_time()
            left = cfg.records
            k = 0
            while left > 0:
                await anyio.sleep_until(began + k * cfg.chunk_interval_s)
                n = min(per_chunk, left)
                batch = []
                for _ in range(n):
                    p = rng.randrange(cfg.partitions)
                    seq = next_seq[p]
                    next_seq[p] = seq + 1
                    batch.append((p, seq))
                async with self.produce_lock:
                    if not await self._send_chunk(producer, batch):
                        # An idempotent producer whose sends were abandoned may be stuck
                        # with sequence numbers the broker never saw: start afresh.
                        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                            await producer.stop()
                        producer = await self._new_producer()
                left -= n
                k += 1
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await producer.stop()
            self.produced.set()

    async def _new_producer(self) -> AIOKafkaProducer:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.cluster.bootstrap_servers,
            client_id=_CLIENT_ID,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=30_000,
        )
        await producer.start()
        return producer

    async def _send_chunk(self, producer: AIOKafkaProducer, batch: list[tuple[int, int]]) -> bool:
        """Send one chunk and wait for its acknowledgements; ``False`` if any failed."""
        futures = []
        values = []
        try:
            with anyio.fail_after(_PRODUCE_TIMEOUT_S):
                for p, seq in batch:
                    value = f"{p}:{seq}"
                    futures.append(
                        await producer.send(
                            self.topic, value.encode(), key=str(seq).encode(), partition=p
                        )
                    )
                    values.append((p, value))
                outcomes = await asyncio.gather(*futures, return_exceptions=True)
        except (kafka_errors.KafkaError, TimeoutError) as e:
            self.produce_failures += 1
            log.warning("producing a chunk failed (%r); the read-back will tell", e)
            for f in futures:
                f.cancel()
            return False
        failed = 0
        for (p, value), meta in zip(values, outcomes, strict=True):
            if isinstance(meta, BaseException):
                failed += 1
                continue
            self.acked.append((self.topic, p, int(meta.offset), value))
        if failed:
            self.produce_failures += 1
            log.warning("%d records of a chunk were not acknowledged", failed)
        return not failed

    async def read_back(self) -> ProducedLog:
        """Read the whole topic directly from the brokers: the log the consumers must read."""
        ends = await self.cluster.log_end_offsets(self.topic)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.cluster.bootstrap_servers,
            client_id=_CLIENT_ID,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            group_id=None,
            max_partition_fetch_bytes=4 * 1024 * 1024,
        )
        records: list[tuple[str, int, int, bytes]] = []
        await consumer.start()
        try:
            tps = [KafkaTopicPartition(self.topic, p) for p in sorted(ends)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            remaining = {tp for tp in tps if ends[tp.partition] > 0}
            with anyio.fail_after(300):
                while remaining:
                    got = await consumer.getmany(*remaining, timeout_ms=1000, max_records=50_000)
                    for tp, msgs in got.items():
                        records.extend(
                            (self.topic, tp.partition, m.offset, m.value or b"") for m in msgs
                        )
                        if msgs and msgs[-1].offset + 1 >= ends[tp.partition]:
                            remaining.discard(tp)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await consumer.stop()
        return ProducedLog.from_records(records)

    # -- faults --------------------------------------------------------------------------

    def record(self, outcome: FaultOutcome) -> None:
        self.outcomes[outcome.fault.number] = outcome
        self.fault_log.write(json.dumps(outcome.to_json()) + "\n")
        self.fault_log.flush()
        level = logging.WARNING if outcome.status == "failed" else logging.INFO
        log.log(level, "fault %s: %s %s", outcome.fault, outcome.status, outcome.detail)

    async def inject(self, fault: Fault) -> None:
        """Inject one fault and heal it; skip it if what it needs is busy."""
        started = time.time()
        needs = fault.resources(self.config.consumers)
        if needs & self.busy:
            busy = ", ".join(sorted(needs & self.busy))
            self.record(FaultOutcome(fault, "skipped", started, started, f"busy: {busy}"))
            return
        self.busy |= needs
        status: Literal["injected", "skipped", "failed"] = "injected"
        detail = ""
        try:
            detail = await self._inject(fault)
            if detail.startswith("skipped:"):
                status, detail = "skipped", detail.removeprefix("skipped:").strip()
        except Exception as e:  # reported in the outcome; the run goes on
            status, detail = "failed", repr(e)[:_DETAIL_CHARS]
        finally:
            self.busy -= needs
            self.record(FaultOutcome(fault, status, started, time.time(), detail))

    async def _inject(self, fault: Fault) -> str:
        kind = fault.kind
        if kind is FaultKind.KILL:
            return await self._kill(self._slot(fault))
        if kind is FaultKind.PAUSE:
            return await self._pause(self._slot(fault), fault.duration_s)
        if kind is FaultKind.EXPIRE:
            return await self._expire(self._slot(fault))
        if kind is FaultKind.ZOOKEEPER_RESTART:
            return await self._restart_zookeeper(fault.duration_s)
        if kind is FaultKind.BROKER_RESTART:
            assert fault.broker is not None
            return await self._restart_broker(fault.broker)
        return await self._cut(fault)

    @staticmethod
    def _slot(fault: Fault) -> int:
        assert fault.member is not None
        return fault.member

    async def _kill(self, slot: int) -> str:
        victim = self.slots[slot]
        victim.expected_exit = True
        with contextlib.suppress(ProcessLookupError):
            victim.proc.send_signal(signal.SIGKILL)
        await victim.proc.wait()
        member = await self.spawn(slot)
        ok = await self.wait_started(member)
        return f"{victim.name} killed; {member.name} {'started' if ok else 'slow to start'}"

    async def _pause(self, slot: int, seconds: float) -> str:
        victim = self.slots[slot]
        if victim.proc.returncode is not None:
            return f"skipped: {victim.name} is not running"
        victim.proc.send_signal(signal.SIGSTOP)
        try:
            await anyio.sleep(seconds)
        finally:
            with contextlib.suppress(ProcessLookupError):
                victim.proc.send_signal(signal.SIGCONT)
        return f"{victim.name} paused {seconds:.1f} s"

    async def _expire(self, slot: int) -> str:
        victim = self.slots[slot]
        self.poll()
        if victim.session is None or victim.password is None:
            return f"skipped: {victim.name} has no session yet"
        try:
            with anyio.fail_after(_EXPIRE_TIMEOUT_S):
                await self.cluster.expire_session(
                    int(victim.session, 16), bytes.fromhex(victim.password)
                )
        except ZookeeperError as e:
            return f"skipped: {victim.name}'s session {victim.session}: {e}"
        return f"{victim.name}'s session {victim.session} expired"

    async def _restart_zookeeper(self, down_s: float) -> str:
        await self.cluster.stop_zookeeper()
        try:
            await anyio.sleep(down_s)
        finally:
            with anyio.CancelScope(shield=True), anyio.fail_after(_RESTART_TIMEOUT_S):
                await self.cluster.start_zookeeper()
        return f"ZooKeeper down {down_s:.1f} s"

    async def _restart_broker(self, broker: int) -> str:
        began = time.monotonic()
        # The producer waits: the broker is the trusted substrate, its clients' errors are
        # not what is under test.
        async with self.produce_lock:
            with anyio.CancelScope(shield=True), anyio.fail_after(_RESTART_TIMEOUT_S):
                try:
                    await self.cluster.restart_broker(broker)
                except LocalClusterError as e:
                    # Not left down for the rest of the run: once more, then the fault fails.
                    log.warning("restarting broker %d failed (%s); trying again", broker, e)
                    await self.cluster.restart_broker(broker)
                    raise
        return f"broker {broker} restarted in {time.monotonic() - began:.1f} s"

    async def _cut(self, fault: Fault) -> str:
        target: LinkTarget = "zookeeper" if fault.kind is FaultKind.ZOOKEEPER_LINK else "brokers"
        slots = range(self.config.consumers) if fault.member is None else [fault.member]
        links = [link for s in slots if (link := self.link_of(s)) is not None]
        if not links:
            return "skipped: no proxied link"
        assert fault.mode is not None
        try:
            for link in links:
                await link.cut(target, fault.mode, fault.direction, delay_s=fault.delay_s)
            await anyio.sleep(fault.duration_s)
        finally:
            with anyio.CancelScope(shield=True):
                for link in links:
                    await link.heal(target)
        return f"{len(links)} link(s) cut"

    async def schedule(self, faults: Sequence[Fault]) -> None:
        """Inject each fault at its time; return once every one has been healed."""
        began = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for fault in faults:
                await anyio.sleep_until(began + fault.at_s)
                tg.start_soon(self.inject, fault, name=f"fault #{fault.number}")

    async def heal_everything(self) -> None:
        """Make sure nothing is left broken: links, paused processes, servers, slots."""
        await self.cluster.heal_links()
        for m in self.slots.values():
            if m.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    m.proc.send_signal(signal.SIGCONT)
        running = self.cluster.pids
        if "zookeeper" not in running:
            await self.cluster.start_zookeeper()
        for broker in self.cluster.broker_ids:
            if f"broker-{broker}" not in running:
                async with self.produce_lock:
                    await self.cluster.restart_broker(broker)
        self.poll()
        await self.replace_exited()

    # -- the end -------------------------------------------------------------------------

    def unsettled(self) -> list[str]:
        """Live consumers whose connector is not running (suspended, rebalancing, ...)."""
        return [
            f"{m.name}: {m.state}"
            for m in self.slots.values()
            if m.proc.returncode is None and m.state != "running"
        ]

    def finished(self, ends: Mapping[int, int]) -> bool:
        return not self.unsettled() and all(
            self.commits.get(p, (0.0, -1))[1] >= end for p, end in ends.items() if end
        )

    async def wait_finished(self, limit_s: float) -> tuple[bool, dict[int, int]]:
        """Wait until the group recovered and committed the log end of every partition.

        Recovered: every consumer's connector is running again. A member still suspended
        when the faults end must first learn whether its session survived (and, if not,
        give its partitions up) — Jepsen's "waiting for recovery" before the final reads.
        """
        with anyio.move_on_after(limit_s):
            await self.produced.wait()
        ends = await self.cluster.log_end_offsets(self.topic)
        with anyio.move_on_after(limit_s):
            while not self.finished(ends):
                await self.next_poll()
        self.poll()
        return self.finished(ends), ends

    async def stop_members(self) -> None:
        """SIGTERM every consumer; SIGKILL what does not stop within the grace period."""
        self.respawn = False
        live = [m for m in self.slots.values() if m.proc.returncode is None]
        for m in live:
            m.expected_exit = True
            with contextlib.suppress(ProcessLookupError):
                m.proc.send_signal(signal.SIGCONT)
                m.proc.send_signal(signal.SIGTERM)
        for m in live:
            try:
                with anyio.fail_after(_STOP_GRACE_S):
                    code = await m.proc.wait()
            except TimeoutError:
                self.problems.append(f"{m.name} ignored SIGTERM for {_STOP_GRACE_S:.0f} s")
                with contextlib.suppress(ProcessLookupError):
                    m.proc.kill()
                await m.proc.wait()
                continue
            if code != 0:
                self.problems.append(
                    f"{m.name} exited {code} after SIGTERM: "
                    f"{m.last_error or _stderr_tail(self.events_dir, m)}"
                )

    async def kill_all(self) -> None:
        """SIGKILL every consumer still running (the safety net on the way out)."""
        for m in self.members:
            if m.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    m.proc.kill()
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    await m.proc.wait()
        self.fault_log.close()


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one error of a task group's failure (cancellations aside), or the group itself."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        elif not isinstance(exc, anyio.get_cancelled_exc_class()):
            leaves.append(exc)

    walk(group)
    return leaves[0] if len(leaves) == 1 else group


def _stderr_tail(events_dir: Path, member: _Member, lines: int = 5) -> str:
    try:
        text = (events_dir / f"{member.name}.stderr").read_text(errors="replace")
    except OSError:
        return "no stderr"
    tail = [line for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(tail) or "no stderr"


def _write_schedule(path: Path, seed: int, faults: Iterable[Fault]) -> None:
    with path.open("w", encoding="utf-8") as out:
        out.write(f"# chaos schedule, seed {seed}\n")
        for fault in faults:
            out.write(f"{fault}\n")


# -- the runner ------------------------------------------------------------------------------


async def run_chaos(
    cluster: LocalCluster,
    *,
    consumers: int = 4,
    partitions: int = 12,
    records: int = 200_000,
    duration_s: float,
    seed: int,
    session_timeout_ms: int,
    events_dir: str | Path,
    interval_s: float = 2.0,
    weights: Mapping[FaultKind, float] | None = None,
    finish_timeout_s: float = 180.0,
    liveness_slack_s: float = 20.0,
    on_progress: Callable[[str], None] | None = None,
    **options: Any,
) -> ChaosReport:
    """Run a whole chaos run against a running cluster; return what it found.

    Phases: create a topic; start ``consumers`` verifiable consumer processes, each through
    its own proxied link when the cluster has enough (``LocalCluster(proxy_links=n)``,
    ``n >= consumers``; otherwise directly, and link faults are not drawn); once every
    consumer is up, produce ``records`` records in chunks over ``duration_s`` seconds while
    the :class:`FaultScheduler` injects faults; heal everything (and restart anything still
    down); wait until the group has consumed and committed every record (at most
    ``finish_timeout_s``); SIGTERM the consumers; read the topic back from the brokers and
    check the history against it. The producer uses the cluster's direct listeners
    (:attr:`LocalCluster.bootstrap_servers`) and waits while a broker restarts.

    Args:
        cluster: a running :class:`LocalCluster`; its ZooKeeper and brokers are restarted by
            the faults, so it should not be shared with other tests meanwhile.
        consumers: consumer processes, >= 1.
        partitions: partitions of the (new) topic, >= 1.
        records: records to produce, >= 0.
        duration_s: length of the fault phase, seconds, > 0.
        seed: seeds the schedule and the producer; the same seed replays the same faults.
        session_timeout_ms: the consumers' ``zookeeper.session.timeout.ms``.
        events_dir: where everything is written (created if needed): ``schedule.txt``,
            ``faults.jsonl``, one ``<member>.jsonl`` and ``<member>.stderr`` per consumer
            process, ``produced.jsonl`` (the read-back), ``report.json``.
        interval_s: mean seconds between faults (default 2).
        weights: relative frequency per :class:`FaultKind` (default :data:`DEFAULT_WEIGHTS`).
        finish_timeout_s: how long the group may take to finish after the heal.
        liveness_slack_s: the checker's slack beyond the session timeout for every partition
            to be owned again after the heal.
        on_progress: called with a line of text at each phase (for a soak's console).
        options: further :class:`ChaosConfig` fields (``streams``, ``commit_interval_ms``,
            ``max_records``, ``processing_delay_ms``, ``chunk_interval_s``,
            ``consumer_properties``, ``consumer_log_level``).

    Returns:
        The report; ``report.ok`` is the verdict, ``report.summary()`` the explanation.

    Raises:
        ValueError: if an argument is out of range.
        LocalClusterError: if the cluster is not running, or a server cannot be brought back
            up after the faults.
        BrokerNotAvailableError: if the brokers cannot be reached to create the topic, start
            the producer or read the topic back.
    """
    if consumers < 1 or partitions < 1 or records < 0 or not duration_s > 0:
        raise ValueError("consumers and partitions must be >= 1, records >= 0, duration_s > 0")
    config = ChaosConfig(
        duration_s=duration_s,
        seed=seed,
        session_timeout_ms=session_timeout_ms,
        consumers=consumers,
        partitions=partitions,
        records=records,
        interval_s=interval_s,
        weights=weights,
        finish_timeout_s=finish_timeout_s,
        liveness_slack_s=liveness_slack_s,
        **options,
    )
    directory = Path(events_dir)
    await anyio.Path(directory).mkdir(parents=True, exist_ok=True)
    say = on_progress or (lambda text: log.info("%s", text))
    links = list(cluster.links)
    use_links = len(links) >= consumers
    if not use_links:
        log.warning(
            "the cluster has %d proxied links for %d consumers: no link faults",
            len(links),
            consumers,
        )
    scheduler = FaultScheduler(
        seed,
        consumers=consumers,
        brokers=cluster.broker_ids,
        session_timeout_ms=session_timeout_ms,
        interval_s=interval_s,
        weights=weights,
        links=use_links,
    )
    schedule = scheduler.plan(duration_s)
    _write_schedule(directory / "schedule.txt", seed, schedule)
    log.info(
        "chaos schedule (seed %d, %d faults):\n%s",
        seed,
        len(schedule),
        "\n".join(str(f) for f in schedule),
    )
    run = _Run(cluster, config, directory)
    run.links = list(links[:consumers]) if use_links else []
    phases: dict[str, float] = {}
    t0 = mark = time.monotonic()

    def phase(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        phases[name] = now - mark
        mark = now

    last_fault_ts = math.nan
    finished = False
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.monitor, name="chaos monitor")
            await cluster.create_topic(run.topic, partitions)
            for slot in range(consumers):
                await run.spawn(slot)
            for m in list(run.slots.values()):
                if not await run.wait_started(m):
                    raise ConsumerError(
                        f"consumer {m.name} did not start: {_stderr_tail(directory, m)}"
                    )
            say(
                f"seed {seed}: {consumers} consumers up; "
                f"{len(schedule)} faults over {duration_s:g} s"
            )
            phase("setup")
            async with anyio.create_task_group() as work:
                work.start_soon(run.produce, name="chaos producer")
                await run.schedule(schedule)
            phase("faults")
            say(f"fault phase over ({len(run.acked)} records acknowledged); healing")
            await run.heal_everything()
            last_fault_ts = time.time()
            phase("heal")
            finished, ends = await run.wait_finished(finish_timeout_s)
            phase("finish")
            say(f"group {'finished' if finished else 'did NOT finish'}; stopping consumers")
            if not finished:
                behind = {
                    p: (run.commits.get(p, (0.0, -1))[1], end)
                    for p, end in ends.items()
                    if run.commits.get(p, (0.0, -1))[1] < end
                }
                run.problems.append(
                    f"the group did not recover and commit every record within "
                    f"{finish_timeout_s:.0f} s after the heal (partition: (committed, log end)): "
                    f"{behind}; consumers not running: {run.unsettled()}"
                )
            run.respawn = False
            tg.cancel_scope.cancel()
        await run.stop_members()
        run.poll()
        phase("stop")
    except BaseExceptionGroup as group:
        # One failure (a consumer that never started, the producer): raise it as itself.
        single = _single(group)
        if single is group:
            raise
        raise single from group
    finally:
        await run.kill_all()
    produced = await run.read_back()
    await anyio.to_thread.run_sync(produced.write, directory / "produced.jsonl")
    acked_log = ProducedLog.from_records(run.acked)
    missing = 0
    for tp, pairs in acked_log.records.items():
        present = set(produced.records.get(tp, ()))
        missing += sum(1 for pair in pairs if pair not in present)
    if missing:
        run.problems.append(f"{missing} acknowledged records are not in the topic (broker?)")
    events = load_events(*(m.events for m in run.members if m.events.exists()))
    result = await anyio.to_thread.run_sync(
        lambda: check_history(
            produced,
            events,
            session_timeout_ms=session_timeout_ms,
            last_fault_ts=last_fault_ts,
            liveness_slack_s=liveness_slack_s,
        )
    )
    phase("check")
    phases["total"] = time.monotonic() - t0
    report = ChaosReport(
        config=config,
        topic=run.topic,
        group=run.group,
        schedule=tuple(schedule),
        outcomes=tuple(run.outcomes[f.number] for f in schedule if f.number in run.outcomes),
        records=len(produced),
        acknowledged=len(run.acked),
        produce_failures=run.produce_failures,
        incarnations=len(run.members),
        unexpected_exits=tuple(run.unexpected),
        finished=finished,
        harness_problems=tuple(run.problems),
        last_fault_ts=last_fault_ts,
        phases_s=phases,
        result=result,
        events_dir=directory,
    )
    (directory / "report.json").write_text(json.dumps(report.to_json(), indent=2))
    say(report.summary())
    return report
