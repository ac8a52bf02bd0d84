"""The pieces of a chaos run: consumer processes, the producer, the fault injector.

:class:`Run` holds the state of one run of :func:`aiozkconsumer.testing.chaos.run_chaos`,
which drives its phases: it starts and replaces verifiable consumer processes (ZooKeeper- or
Kafka-coordinated), reads their event files, produces checkable records (some in
transactions, some of them aborted), injects and heals the planned faults, and stops the
consumers at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as kafka_errors
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from aiozkconsumer.errors import ZookeeperError
from aiozkconsumer.testing._processes import make_preexec
from aiozkconsumer.testing._render import KRAFT_CONTROLLER_ID
from aiozkconsumer.testing.chaos._brokers import BrokerLookup
from aiozkconsumer.testing.chaos.clients import MemberClient
from aiozkconsumer.testing.chaos.report import ChaosConfig, FaultOutcome
from aiozkconsumer.testing.chaos.schedule import CoordinatorMode, Fault, FaultKind
from aiozkconsumer.testing.cluster import LinkTarget, LocalCluster, LocalClusterError, ProxyLink
from aiozkconsumer.testing.history import ProducedLog
from aiozkconsumer.testing.verifiable import verifiable_consumer_command
from aiozkconsumer.testing.verifiable_aiokafka import aiokafka_consumer_command

__all__ = ["Member", "Run", "stderr_tail"]

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
_IN_SYNC_S = 90.0
"""How long the replicas may take to be in sync again after a broker came back."""
_TRANSACTION_TIMEOUT_MS = 15_000
"""The transactional producer's ``transaction.timeout.ms``: a transaction left open by a
producer that was replaced is aborted by its coordinator after this."""
_ABORTED_SHARE = 0.3
"""The share of the producer's transactions it aborts."""
_BROKER_FAULTS = frozenset(
    {
        FaultKind.ZOOKEEPER_RESTART,
        FaultKind.BROKER_RESTART,
        FaultKind.COORDINATOR_KILL,
        FaultKind.LEADER_KILL,
        FaultKind.ROLLING_RESTART,
    }
)
"""Faults on servers, on no member in particular."""


class Tail:
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
class Member:
    """One consumer process (an incarnation of a slot)."""

    slot: int
    incarnation: int
    name: str
    events: Path
    proc: asyncio.subprocess.Process
    tail: Tail
    spawned_ts: float = 0.0
    """``time.time()`` when the process was started."""
    expected_exit: bool = False
    started: bool = False
    state: str | None = None
    session: str | None = None
    password: str | None = None
    last_error: str | None = None
    reported: bool = False
    replaced: bool = False


class Run:
    """The state of one chaos run (used by :func:`run_chaos` only)."""

    def __init__(
        self,
        cluster: LocalCluster,
        config: ChaosConfig,
        events_dir: Path,
        group: str | None = None,
    ) -> None:
        self.cluster = cluster
        self.config = config
        self.events_dir = events_dir
        tag = uuid.uuid4().hex[:8]
        self.topic = f"chaos-{config.seed}-{tag}"
        self.group = group or f"chaos-{tag}"
        self.links: list[ProxyLink | None] = []
        self.members: list[Member] = []
        self.slots: dict[int, Member] = {}
        self.incarnations: dict[int, int] = {}
        self.busy: set[str] = set()
        self.outcomes: dict[int, FaultOutcome] = {}
        self.unexpected: list[str] = []
        self.problems: list[str] = []
        self.commits: dict[int, tuple[float, int]] = {}
        self.produce_lock = anyio.Lock()
        self.acked: list[tuple[str, int, int, str]] = []
        self.acked_at: dict[tuple[str, int], dict[int, float]] = {}
        """``{(topic, partition): {offset: time.time() of its acknowledgement}}``: from then
        the record waits for its owner (the checker's ``stalled`` rule)."""
        self.committed_at: dict[tuple[str, int], dict[int, float]] = {}
        """``{(topic, partition): {offset: time.time() when its transaction's commit
        began}}`` (the checker's ``uncommitted_read`` rule)."""
        self.aborted_sent: list[tuple[str, int, int, str]] = []
        """Records the producer wrote in transactions it aborted."""
        self.transactions = {"committed": 0, "aborted": 0, "failed": 0}
        self.brokers = BrokerLookup(cluster)
        self.produce_failures = 0
        self.respawn = True
        self.produced = anyio.Event()
        self._polled = anyio.Event()
        self.fault_log = (events_dir / "faults.jsonl").open("a", encoding="utf-8")

    # -- consumers -----------------------------------------------------------------------

    def link_of(self, slot: int) -> ProxyLink | None:
        return self.links[slot] if slot < len(self.links) else None

    async def spawn(self, slot: int) -> Member:
        """Start a consumer process in ``slot`` (a new incarnation): our verifiable consumer, or
        aiokafka's with ``client="aiokafka"`` (given the same properties)."""
        cfg = self.config
        number = self.incarnations.get(slot, 0) + 1
        self.incarnations[slot] = number
        name = f"c{slot}" if number == 1 else f"c{slot}.{number}"
        events = self.events_dir / f"{name}.jsonl"
        link = self.link_of(slot)
        bootstrap = link.bootstrap_servers if link is not None else self.cluster.bootstrap_servers
        zookeeper: str | None = (
            link.zookeeper_connect if link is not None else self.cluster.zookeeper_connect
        )
        properties: dict[str, object]
        if cfg.mode.kafka:
            zookeeper = None
            properties = self.kafka_properties(bootstrap)
        else:
            properties = self.zookeeper_properties(bootstrap)
        command = (
            aiokafka_consumer_command
            if cfg.client is MemberClient.AIOKAFKA
            else verifiable_consumer_command
        )
        argv = command(
            zookeeper=zookeeper,
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
        spawned_ts = time.time()
        with (self.events_dir / f"{name}.stderr").open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                preexec_fn=make_preexec(),
            )
        member = Member(slot, number, name, events, proc, Tail(events), spawned_ts)
        self.members.append(member)
        self.slots[slot] = member
        log.info("started consumer %s (pid %d)", name, proc.pid)
        return member

    def zookeeper_properties(self, bootstrap: str) -> dict[str, object]:
        """A ZooKeeper-coordinated member's properties."""
        cfg = self.config
        return {
            "zookeeper.session.timeout.ms": cfg.session_timeout_ms,
            "zookeeper.connection.timeout.ms": 30_000,
            "rebalance.backoff.ms": 500,
            "rebalance.max.retries": 60,
            "socket.timeout.ms": 10_000,
            # Explicit: "auto" decides once, at start, from /brokers/ids, which is empty
            # while the only broker restarts.
            "cluster.metadata.source": "kafka" if self.cluster.kraft else "zookeeper",
            "bootstrap.servers": bootstrap,
            **self.isolation(),
            **cfg.consumer_properties,
        }

    def kafka_properties(self, bootstrap: str) -> dict[str, object]:
        """A Kafka-coordinated member's properties (classic, or ``group.protocol=consumer``:
        then the session timeout and heartbeat interval are the broker's)."""
        cfg = self.config
        protocol: dict[str, object] = (
            {"group.protocol": "consumer"}
            if cfg.mode is CoordinatorMode.KAFKA_CONSUMER
            else {
                "session.timeout.ms": cfg.session_timeout_ms,
                "heartbeat.interval.ms": cfg.heartbeat_interval_ms,
            }
        )
        return {
            "group.coordinator": "kafka",
            "bootstrap.servers": bootstrap,
            "socket.timeout.ms": 10_000,
            **protocol,
            **self.isolation(),
            **cfg.consumer_properties,
        }

    def isolation(self) -> dict[str, object]:
        """``isolation.level=read_committed`` when the producer writes transactions."""
        return {"isolation.level": "read_committed"} if self.config.transactions > 0 else {}

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
            note = f"{m.name}: exit {code}: {m.last_error or stderr_tail(self.events_dir, m)}"
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

    async def wait_started(self, member: Member, limit_s: float = _MEMBER_START_S) -> bool:
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
        # A generator of its own: the ZooKeeper runs' partitions stay what they were.
        transactions = random.Random(f"transactions-{cfg.seed}")
        chunks = max(1, math.ceil(cfg.duration_s / cfg.chunk_interval_s))
        per_chunk = math.ceil(cfg.records / chunks) if cfg.records else 0
        next_seq = dict.fromkeys(range(cfg.partitions), 0)
        aborted_seq = 0
        producer = await self._new_producer()
        transactional = await self._new_producer(transactional=True) if cfg.transactions else None
        try:
            began = anyio.current_time()
            left = cfg.records
            k = 0
            while left > 0:
                await anyio.sleep_until(began + k * cfg.chunk_interval_s)
                n = min(per_chunk, left)
                targets = [rng.randrange(cfg.partitions) for _ in range(n)]
                how = "plain"
                if transactional is not None and transactions.random() < cfg.transactions:
                    how = "abort" if transactions.random() < _ABORTED_SHARE else "commit"
                batch = []
                for p in targets:
                    if how == "abort":
                        # Never read: no sequence number of the partition is used up.
                        batch.append((p, f"{p}:aborted-{aborted_seq}"))
                        aborted_seq += 1
                        continue
                    seq = next_seq[p]
                    next_seq[p] = seq + 1
                    batch.append((p, f"{p}:{seq}"))
                async with self.produce_lock:
                    if how == "plain":
                        if not await self._send_chunk(producer, batch):
                            # An idempotent producer whose sends were abandoned may be stuck
                            # with sequence numbers the broker never saw: start afresh.
                            producer = await self._renew(producer)
                    elif transactional is not None and not await self._send_transaction(
                        transactional, batch, commit=how == "commit"
                    ):
                        # A new producer with the same transactional id fences the old one
                        # and has its open transaction aborted.
                        transactional = await self._renew(transactional, transactional=True)
                left -= n
                k += 1
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await producer.stop()
                if transactional is not None:
                    await transactional.stop()
            self.produced.set()

    async def _renew(
        self, producer: AIOKafkaProducer, *, transactional: bool = False
    ) -> AIOKafkaProducer:
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            await producer.stop()
        with anyio.fail_after(_PRODUCE_TIMEOUT_S):
            while True:
                try:
                    return await self._new_producer(transactional=transactional)
                except kafka_errors.KafkaError as e:
                    log.warning("starting a producer failed (%r); trying again", e)
                    await anyio.sleep(1)

    async def _new_producer(self, *, transactional: bool = False) -> AIOKafkaProducer:
        extra: dict[str, Any] = {}
        if transactional:
            extra = {
                "transactional_id": f"{self.group}-producer",
                "transaction_timeout_ms": _TRANSACTION_TIMEOUT_MS,
            }
        producer = AIOKafkaProducer(
            bootstrap_servers=self.cluster.bootstrap_servers,
            client_id=_CLIENT_ID,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=30_000,
            **extra,
        )
        try:
            await producer.start()
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await producer.stop()
            raise
        return producer

    async def _send_transaction(
        self, producer: AIOKafkaProducer, batch: list[tuple[int, str]], *, commit: bool
    ) -> bool:
        """Send one chunk in a transaction, then commit or abort it; ``False`` if anything
        failed (the outcome is then the brokers' to tell: the read-back says)."""
        committing = math.nan
        try:
            with anyio.fail_after(_PRODUCE_TIMEOUT_S):
                await producer.begin_transaction()
                futures = [
                    await producer.send(self.topic, value.encode(), key=value.encode(), partition=p)
                    for p, value in batch
                ]
                metas = await asyncio.gather(*futures)
                if commit:
                    committing = time.time()
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        except (kafka_errors.KafkaError, TimeoutError) as e:
            self.produce_failures += 1
            self.transactions["failed"] += 1
            log.warning("a transaction failed (%r); the read-back will tell", e)
            return False
        now = time.time()
        self.transactions["committed" if commit else "aborted"] += 1
        for (p, value), meta in zip(batch, metas, strict=True):
            offset = int(meta.offset)
            if commit:
                self.acked.append((self.topic, p, offset, value))
                self.acked_at.setdefault((self.topic, p), {})[offset] = now
                self.committed_at.setdefault((self.topic, p), {})[offset] = committing
            else:
                self.aborted_sent.append((self.topic, p, offset, value))
        return True

    async def _send_chunk(self, producer: AIOKafkaProducer, batch: list[tuple[int, str]]) -> bool:
        """Send one chunk and wait for its acknowledgements; ``False`` if any failed."""
        futures = []
        values = []
        try:
            with anyio.fail_after(_PRODUCE_TIMEOUT_S):
                for p, value in batch:
                    key = value.partition(":")[2]
                    futures.append(
                        await producer.send(
                            self.topic, value.encode(), key=key.encode(), partition=p
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
        now = time.time()
        for (p, value), meta in zip(values, outcomes, strict=True):
            if isinstance(meta, BaseException):
                failed += 1
                continue
            self.acked.append((self.topic, p, int(meta.offset), value))
            self.acked_at.setdefault((self.topic, p), {})[int(meta.offset)] = now
        if failed:
            self.produce_failures += 1
            log.warning("%d records of a chunk were not acknowledged", failed)
        return not failed

    async def read_back(self) -> ProducedLog:
        """Read the whole topic directly from the brokers: the log the consumers must read.

        With transactions, twice: ``read_committed`` gives the records to read, and what a
        ``read_uncommitted`` reader sees besides them are the aborted ones.
        """
        committed = await self._read_topic("read_committed")
        if not self.config.transactions:
            return ProducedLog.from_records(committed)
        everything = await self._read_topic("read_uncommitted")
        kept = {(p, o) for _, p, o, _ in committed}
        return ProducedLog.from_records(
            committed, [r for r in everything if (r[1], r[2]) not in kept]
        )

    async def _read_topic(self, isolation: str) -> list[tuple[str, int, int, bytes]]:
        ends = await self.cluster.log_end_offsets(self.topic)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.cluster.bootstrap_servers,
            client_id=_CLIENT_ID,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            group_id=None,
            isolation_level=isolation,
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
                    # The position, not the last record: aborted records and transaction
                    # markers at the end of a partition are never handed out.
                    for tp in list(remaining):
                        if await consumer.position(tp) >= ends[tp.partition]:
                            remaining.discard(tp)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await consumer.stop()
        return records

    # -- faults --------------------------------------------------------------------------

    def record(self, outcome: FaultOutcome) -> None:
        self.outcomes[outcome.fault.number] = outcome
        self.fault_log.write(json.dumps(outcome.to_json()) + "\n")
        self.fault_log.flush()
        level = logging.WARNING if outcome.status == "failed" else logging.INFO
        log.log(level, "fault %s: %s %s", outcome.fault, outcome.status, outcome.detail)

    def members_hit(
        self, fault: Fault, before: Mapping[int, Member], started: float
    ) -> tuple[str, ...] | None:
        """The consumer processes a fault hit (``None``: a server restart, on no member).

        ``before`` is the slots' processes when the fault began. A process fault hits the
        one in its slot then; a link fault also hits the processes started in its slots
        while the link was cut (a kill's replacement uses the same link).
        """
        if fault.kind in _BROKER_FAULTS:
            return None
        slots = range(self.config.consumers) if fault.member is None else (fault.member,)
        names = [before[s].name for s in slots if s in before]
        if fault.kind in (FaultKind.ZOOKEEPER_LINK, FaultKind.BROKER_LINK):
            names += [
                m.name
                for m in self.members
                if m.slot in slots and m.spawned_ts >= started and m.name not in names
            ]
        return tuple(names)

    async def inject(self, fault: Fault) -> None:
        """Inject one fault and heal it; skip it if what it needs is busy."""
        started = time.time()
        needs = fault.resources(self.config.consumers)
        if needs & self.busy:
            busy = ", ".join(sorted(needs & self.busy))
            self.record(FaultOutcome(fault, "skipped", started, started, f"busy: {busy}"))
            return
        before = dict(self.slots)
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
            hit = self.members_hit(fault, before, started)
            self.record(FaultOutcome(fault, status, started, time.time(), detail, hit))

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
        if kind in (FaultKind.COORDINATOR_KILL, FaultKind.LEADER_KILL):
            return await self._kill_broker(fault)
        if kind is FaultKind.ROLLING_RESTART:
            return await self._rolling_restart()
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

    def in_sync_topics(self) -> list[str]:
        """The topics whose replicas must be in sync before the next broker fault."""
        topics = [self.topic, "__consumer_offsets"]
        if self.config.transactions:
            topics.append("__transaction_state")
        return topics

    async def _kill_broker(self, fault: Fault) -> str:
        """``coordinator_kill`` / ``leader_kill``: SIGKILL the broker (a graceful stop if it
        is the KRaft controller, whose death would freeze every leadership), keep it down,
        restart it, and wait until the replicas are in sync again."""
        if fault.kind is FaultKind.COORDINATOR_KILL:
            target = await self.brokers.coordinator(self.group)
            what = "the group coordinator"
            if target is None:
                return "skipped: the group coordinator is unknown"
        else:
            leaders = await self.brokers.leaders(self.topic)
            rng = random.Random(f"leader-{self.config.seed}-{fault.number}")
            followers = sorted({b for b in leaders.values() if b != KRAFT_CONTROLLER_ID})
            choices = followers or sorted(set(leaders.values()))
            if not choices:
                return "skipped: no partition leader is known"
            target = rng.choice(choices)
            led = sorted(p for p, b in leaders.items() if b == target)
            what = f"the leader of partitions {led}"
        graceful = target == KRAFT_CONTROLLER_ID
        began = time.monotonic()
        try:
            if graceful:
                await self.cluster.stop_broker(target)
            else:
                self.cluster.kill_broker(target)
            await anyio.sleep(fault.duration_s)
        finally:
            with anyio.CancelScope(shield=True), anyio.fail_after(_RESTART_TIMEOUT_S):
                await self.cluster.restart_broker(target)
        back = time.monotonic() - began
        synced = await self.brokers.wait_in_sync(self.in_sync_topics(), _IN_SYNC_S)
        how = "stopped (the KRaft controller)" if graceful else "killed"
        return (
            f"broker {target} ({what}) {how}, back after {back:.1f} s, "
            f"replicas {'in sync' if synced else 'NOT in sync'} after "
            f"{time.monotonic() - began:.1f} s"
        )

    async def _rolling_restart(self) -> str:
        """Restart every broker (controlled shutdown, start), waiting after each until every
        replica is in sync again (as an operator's rolling restart does)."""
        began = time.monotonic()
        steps = []
        for broker in self.cluster.broker_ids:
            t0 = time.monotonic()
            with anyio.CancelScope(shield=True), anyio.fail_after(_RESTART_TIMEOUT_S):
                await self.cluster.restart_broker(broker)
            synced = await self.brokers.wait_in_sync(self.in_sync_topics(), _IN_SYNC_S)
            steps.append(f"{broker}: {time.monotonic() - t0:.1f} s{'' if synced else ' (ISR!)'}")
        return f"rolling restart in {time.monotonic() - began:.1f} s ({', '.join(steps)})"

    async def _cut(self, fault: Fault) -> str:
        if fault.kind is FaultKind.BROKER_LINK and fault.broker is not None:
            return await self._cut_one_broker(fault, fault.broker)
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

    async def _cut_one_broker(self, fault: Fault, broker: int) -> str:
        """A member's link to one broker only (Kafka mode)."""
        link = self.link_of(self._slot(fault))
        if link is None:
            return "skipped: no proxied link"
        assert fault.mode is not None
        try:
            await link.cut(broker, fault.mode, fault.direction, delay_s=fault.delay_s)
            await anyio.sleep(fault.duration_s)
        finally:
            with anyio.CancelScope(shield=True):
                await link.heal(broker)
        return f"link {link.index} to broker {broker} cut"

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
        restarted = False
        for broker in self.cluster.broker_ids:
            if f"broker-{broker}" not in running:
                restarted = True
                async with self.produce_lock:
                    await self.cluster.restart_broker(broker)
        if restarted and self.config.mode.kafka:
            await self.brokers.wait_in_sync(self.in_sync_topics(), _IN_SYNC_S)
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
        if self.config.transactions:
            # A member commits the offset after the last record it read: past it there may
            # be only aborted records and transaction markers, never handed out.
            last: dict[int, int] = {}
            for _, p, offset, _ in await self._read_topic("read_committed"):
                last[p] = max(last.get(p, -1), offset)
            ends = {p: last[p] + 1 if p in last else 0 for p in ends}
        with anyio.move_on_after(limit_s):
            while True:
                while not self.finished(ends):
                    await self.next_poll()
                # Read what came since the monitor's last look: a member that has just begun
                # a rebalance (a replacement joining) is not finished yet, so wait on for it
                # rather than judge the run by a look it has already made stale.
                self.poll()
                if self.finished(ends):
                    break
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
                    f"{m.last_error or stderr_tail(self.events_dir, m)}"
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


def stderr_tail(events_dir: Path, member: Member, lines: int = 5) -> str:
    try:
        text = (events_dir / f"{member.name}.stderr").read_text(errors="replace")
    except OSError:
        return "no stderr"
    tail = [line for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(tail) or "no stderr"
