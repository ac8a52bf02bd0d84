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

Members are ZooKeeper-coordinated (the default) or Kafka-coordinated (:class:`CoordinatorMode`:
``group.coordinator=kafka`` with the classic protocol or ``group.protocol=consumer``), on a
KRaft cluster of three brokers with the topic and ``__consumer_offsets`` at replication factor
3 and ``min.insync.replicas=2`` (see ``tests/integration/test_chaos_kafka.py`` for the
brokers' settings). Kafka mode has faults of its own, on the brokers the group depends on:
``coordinator_kill`` (the group coordinator's broker is SIGKILLed, kept down a few seconds and
restarted: the coordinator moves to another replica of its ``__consumer_offsets`` partition),
``leader_kill`` (likewise the leader of some of the topic's partitions), ``broker_link`` cut to
one broker of a member's link, and ``rolling_restart`` (each broker in turn, waiting for its
replicas to be in sync again); ``kill`` and ``pause`` (shorter and longer than the session
timeout) as in ZooKeeper mode. The broker killed is never the KRaft controller (broker 0, the
only voter): a coordinator on it is stopped gracefully instead, since with the controller dead
no leadership moves at all. Broker faults come one at a time, replicas back in sync before the
next.

With ``transactions=`` the producer writes that share of its chunks in transactions and
aborts three in ten of them; members read with ``isolation.level=read_committed``. The
produced log is read back twice (``read_committed``: the records to read; what
``read_uncommitted`` adds: the aborted records), and the checker judges ``aborted_read`` and
``uncommitted_read`` with the producer's commit times.

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
was busy) and which consumer processes it hit goes to ``<events_dir>/faults.jsonl``. (What the
servers and processes do in between is up to the machine: a reproduction re-injects the same
faults, not the same interleaving.)

The check gets that fault log and the commit interval and session timeout, so it also judges
every hand-over's duplicate window against the bound for the fault that caused it and flags a
session expired by a ZooKeeper restart shorter than half a session timeout (see
:mod:`aiozkconsumer.testing.history`); the report lists the hand-overs' duplicates per fault
kind (max and p99, next to the bound) and the sessions expired per ZooKeeper restart
(:meth:`ChaosReport.fault_lines`).

The package is split by job: :mod:`~aiozkconsumer.testing.chaos.schedule` (the fault kinds
and the seeded scheduler, pure), :mod:`~aiozkconsumer.testing.chaos.report` (the run's
configuration, fault outcomes and report) and ``_runner`` (the processes, producer and fault
injector of a run); :func:`run_chaos` here drives the phases.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from aiozkconsumer.errors import ConsumerError
from aiozkconsumer.testing.chaos._runner import Run, stderr_tail
from aiozkconsumer.testing.chaos.clients import MemberClient, apply_client_rules, check_client
from aiozkconsumer.testing.chaos.report import (
    ChaosConfig,
    ChaosReport,
    FaultOutcome,
    HandoverStats,
)
from aiozkconsumer.testing.chaos.schedule import (
    _KAFKA_ONLY,
    _ZOOKEEPER_ONLY,
    DEFAULT_WEIGHTS,
    KAFKA_WEIGHTS,
    CoordinatorMode,
    Fault,
    FaultKind,
    FaultScheduler,
)
from aiozkconsumer.testing.cluster import LocalCluster
from aiozkconsumer.testing.history import ProducedLog, check_history, load_events

__all__ = [
    "DEFAULT_WEIGHTS",
    "KAFKA_WEIGHTS",
    "ChaosConfig",
    "CoordinatorMode",
    "ChaosReport",
    "Fault",
    "FaultKind",
    "FaultOutcome",
    "FaultScheduler",
    "HandoverStats",
    "MemberClient",
    "kafka_chaos_broker_properties",
    "run_chaos",
]

log = logging.getLogger(__name__)


def kafka_chaos_broker_properties(
    session_timeout_ms: int, heartbeat_interval_ms: int
) -> dict[str, str]:
    """The brokers' settings of a Kafka-mode chaos run (the CI runs' and the soaks').

    Everything the group and the producer depend on survives one broker down: the offsets,
    transaction-state and data topics at replication factor 3 with ``min.insync.replicas=2``,
    no unclean leader election. The consumer protocol's session timeout and heartbeat
    interval are the broker's (``group.consumer.*``), pinned to the classic members' values
    so both protocols are judged against the same bounds.

    Args:
        session_timeout_ms: ``group.consumer.session.timeout.ms`` (and its minimum).
        heartbeat_interval_ms: ``group.consumer.heartbeat.interval.ms`` (and its minimum).

    Returns:
        Broker properties for :class:`~aiozkconsumer.testing.LocalCluster`'s
        ``broker_properties`` (a cluster of at least three brokers).
    """
    return {
        "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "min.insync.replicas": "2",
        "default.replication.factor": "3",
        "unclean.leader.election.enable": "false",
        "group.consumer.session.timeout.ms": str(session_timeout_ms),
        "group.consumer.min.session.timeout.ms": str(session_timeout_ms),
        "group.consumer.heartbeat.interval.ms": str(heartbeat_interval_ms),
        "group.consumer.min.heartbeat.interval.ms": str(heartbeat_interval_ms),
    }


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


def _explicit_schedule(
    faults: Sequence[Fault],
    duration_s: float,
    consumers: int,
    mode: CoordinatorMode,
    *,
    links: bool,
) -> list[Fault]:
    """An explicit schedule (``run_chaos(faults=...)``) checked against the run, in time order.

    Raises:
        ValueError: if two faults share a number, one falls outside ``[0, duration_s)``, its
            kind belongs to the other coordinator mode, it is a link fault without proxied
            links, or it names a consumer slot the run does not have (or none, for a kill,
            pause or expiry).
    """
    numbers = [f.number for f in faults]
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"explicit faults need distinct numbers, got {numbers}")
    foreign = _ZOOKEEPER_ONLY if mode.kafka else _KAFKA_ONLY
    for f in faults:
        if not 0 <= f.at_s < duration_s:
            raise ValueError(f"fault {f} is outside the fault phase of {duration_s:g} s")
        if f.kind in foreign:
            raise ValueError(f"fault {f} is not a fault of mode {mode.value}")
        if f.kind in (FaultKind.ZOOKEEPER_LINK, FaultKind.BROKER_LINK) and not links:
            raise ValueError(f"fault {f} needs a proxied link per consumer")
        needs_member = f.kind in (FaultKind.KILL, FaultKind.PAUSE, FaultKind.EXPIRE)
        if (f.member is None and needs_member) or (
            f.member is not None and not 0 <= f.member < consumers
        ):
            raise ValueError(f"fault {f} names no consumer slot of 0..{consumers - 1}")
    return sorted(faults, key=lambda f: (f.at_s, f.number))


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
    mode: CoordinatorMode | str = CoordinatorMode.ZOOKEEPER,
    faults: Sequence[Fault] | None = None,
    group: str | None = None,
    compound: float = 0.0,
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
        mode: who coordinates the group (:class:`CoordinatorMode` or its value); a Kafka mode
            needs a KRaft cluster, and with 3 brokers or more the topic is created with
            replication factor 3. ``session_timeout_ms`` is then the classic members'
            ``session.timeout.ms``; with ``kafka-consumer`` it must match the brokers'
            ``group.consumer.session.timeout.ms`` (the faults' lengths are drawn from it).
        faults: an explicit schedule instead of the seeded one: exactly these faults, each
            injected ``at_s`` seconds into the fault phase (``weights`` and ``interval_s``
            then plan nothing; ``seed`` still seeds the producer). For a deterministic test
            of one fault (``tests/integration/test_kafka_faults.py``). ``None`` (the default):
            the :class:`FaultScheduler`'s plan.
        group: the consumer group's id (default: a fresh ``chaos-<tag>``); a test that needs
            the group coordinator on a given broker picks the id (the coordinator is the
            leader of the ``__consumer_offsets`` partition the id hashes to).
        compound: the probability that a seeded link cut of one member that heals within
            the session timeout is followed by a kill of that member within a session
            timeout of the heal (:class:`FaultScheduler`'s ``compound``; default 0: none).
        options: further :class:`ChaosConfig` fields (``streams``, ``commit_interval_ms``,
            ``max_records``, ``processing_delay_ms``, ``chunk_interval_s``,
            ``consumer_properties``, ``consumer_log_level``, ``heartbeat_interval_ms``,
            ``transactions``, ``client``). ``client`` (a :class:`MemberClient` or its value,
            default ``"aiozkconsumer"``) chooses the members' program: ``"aiokafka"`` runs
            :mod:`aiozkconsumer.testing.verifiable_aiokafka` (aiokafka's
            ``AIOKafkaConsumer``, mode ``kafka-classic`` only) under the same schedule, and
            the rules its members cannot be judged by are left out of the verdict
            (:attr:`ChaosReport.rules_not_applied`).

    Returns:
        The report; ``report.ok`` is the verdict, ``report.summary()`` the explanation.

    Raises:
        ValueError: if an argument is out of range, a Kafka mode is asked of a cluster that
            is not KRaft, the client is aiokafka and the mode not ``kafka-classic``, or an
            explicit fault does not fit the run (two with one number, outside the fault
            phase, a kind of the other mode, a link fault without proxied links, a consumer
            slot the run does not have).
        LocalClusterError: if the cluster is not running, or a server cannot be brought back
            up after the faults.
        BrokerNotAvailableError: if the brokers cannot be reached to create the topic, start
            the producer or read the topic back.
    """
    if consumers < 1 or partitions < 1 or records < 0 or not duration_s > 0:
        raise ValueError("consumers and partitions must be >= 1, records >= 0, duration_s > 0")
    mode = CoordinatorMode(mode)
    if mode.kafka and not cluster.kraft:
        raise ValueError(f"mode {mode.value} needs a KRaft cluster")
    options.setdefault("replication_factor", min(3, len(cluster.broker_ids)) if mode.kafka else 1)
    options["client"] = check_client(options.get("client", MemberClient.AIOZKCONSUMER), mode)
    config = ChaosConfig(
        mode=mode,
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
        mode=mode,
        compound=compound,
    )
    schedule = (
        scheduler.plan(duration_s)
        if faults is None
        else _explicit_schedule(faults, duration_s, consumers, mode, links=use_links)
    )
    _write_schedule(directory / "schedule.txt", seed, schedule)
    log.info(
        "chaos schedule (seed %d, %d faults):\n%s",
        seed,
        len(schedule),
        "\n".join(str(f) for f in schedule),
    )
    run = Run(cluster, config, directory, group=group)
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
            await cluster.create_topic(
                run.topic, partitions, replication_factor=config.replication_factor
            )
            for slot in range(consumers):
                await run.spawn(slot)
            for m in list(run.slots.values()):
                if not await run.wait_started(m):
                    raise ConsumerError(
                        f"consumer {m.name} did not start: {stderr_tail(directory, m)}"
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
    kept = {(tp[1], o) for tp, pairs in produced.records.items() for o, _ in pairs}
    resurrected = sum(1 for _, p, o, _ in run.aborted_sent if (p, o) in kept)
    if resurrected:
        run.problems.append(f"{resurrected} records of aborted transactions are committed")
    events = load_events(*(m.events for m in run.members if m.events.exists()))
    # Faults that failed half-way may still have hit something: they count too.
    injected = [o.injected() for o in run.outcomes.values() if o.status != "skipped"]
    result = await anyio.to_thread.run_sync(
        lambda: check_history(
            produced,
            events,
            session_timeout_ms=session_timeout_ms,
            last_fault_ts=last_fault_ts,
            liveness_slack_s=liveness_slack_s,
            commit_interval_ms=config.commit_interval_ms,
            faults=injected,
            acked_at=run.acked_at,
            committed_at=run.committed_at if config.transactions else None,
        )
    )
    result, rules_not_applied = apply_client_rules(result, config.client)
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
        transactions=dict(run.transactions) if config.transactions else {},
        incarnations=len(run.members),
        unexpected_exits=tuple(run.unexpected),
        finished=finished,
        harness_problems=tuple(run.problems),
        last_fault_ts=last_fault_ts,
        phases_s=phases,
        result=result,
        events_dir=directory,
        rules_not_applied=rules_not_applied,
    )
    (directory / "report.json").write_text(json.dumps(report.to_json(), indent=2))
    say(report.summary())
    return report
