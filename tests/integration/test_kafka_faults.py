"""One deterministic fault per kind for Kafka-coordinated groups: its recovery time and its
duplicate window, each against the bound ``docs/failure-semantics.md`` states.

The seeded chaos runs (``test_chaos_kafka.py``) mix every fault kind and check safety and the
duplicate window; they cannot say how long one fault took to recover from, since the next one
comes within seconds. Here each test injects exactly ONE fault, at a known moment, into a
small steady group (3 members, 6 partitions, a producer writing 300 records/s in chunks every
0.25 s), through the chaos runner with an explicit schedule (``run_chaos(faults=[...])``), and
lets the group recover and finish. Then it asserts:

1. the history is clean: the checker finds no anomaly (nothing lost, no ownership overlap, no
   unowned delivery, no stalled partition, ...), the group finished, no member died;
2. every hand-over the fault caused stayed within the fault's duplicate window
   (``I + T + ε`` for these three kinds: the checker's ``duplicate_window_exceeded``);
3. the recovery: for every partition, the longest delivery gap around the fault (between two
   consecutive hand-outs of the partition, by any member, the later one after the fault
   began) is within the kind's recovery bound, derived below from the table's recovery
   column.

The faults (the module's cluster: three KRaft brokers, broker 0 the single controller):

- ``coordinator_kill``: the group's id is chosen so that its coordinator is broker 1 or 2
  (never the controller, whose death would freeze every leadership: the runner would stop it
  gracefully instead), which is SIGKILLed and kept down for ``F + 2`` s: the controller
  fences it after ``F``, and the coordinator moves to another replica of the group's
  ``__consumer_offsets`` partition while it is down.
- ``leader_kill``: the group's coordinator is broker 0, and the broker killed is another
  one leading some of the topic's partitions: a leader moves, the coordinator does not (the
  table's "otherwise no hand-over" case, which the test asserts).
- ``broker_link``: member ``c0``'s link to its coordinator's broker is blackholed both ways
  for ``T + 4`` s (its links to the other brokers carry on): the coordinator expels it after
  ``T``, the others take its partitions, and it rejoins when the link heals.

With ``T`` the session timeout (6 s: the classic members' ``session.timeout.ms`` and the
brokers' ``group.consumer.session.timeout.ms``), ``H`` the heartbeat interval (1 s, both
protocols), ``I`` the commit interval (0.25 s), ``F`` the brokers' ``broker.session.timeout.ms``
(4 s: the controller fences a dead broker after it) and ``S`` the slack of
:data:`RECOVERY_SLACK_S`, the recovery bounds are:

- coordinator kill: ``F + 2 H + S``: the coordinator has moved ``F`` after the kill; a
  member's first heartbeat to the new one may come before it has loaded the group (answered
  ``NOT_COORDINATOR`` / ``COORDINATOR_LOAD_IN_PROGRESS``, or failed on a connection the offset
  store dropped meanwhile), and the next one, a heartbeat interval later, is answered; no
  rebalance (a member that rejoined instead took ``F + T`` and more: the defect this test
  found, fixed in ``group/classic.py``).
- leader kill: ``F + S``: the new leader is elected ``F`` after the kill; the producer and
  the members find it at their next metadata refresh (``refresh.leader.backoff.ms``).
- link cut to the coordinator: ``T + H + S``: the coordinator expels the member ``T`` after
  its last heartbeat, the others learn of the rebalance at their next heartbeat and take its
  partitions; after the heal the member's rejoin moves partitions once more, within ``H + S``.

Each bound is below what a broken recovery takes: a partition never resumed fails it, and so
does one resumed only after a second session timeout (``F + T`` or ``2 T`` exceed them all).

The consumer protocol (``group.protocol=consumer``) runs the same tests when
``AIOZKCONSUMER_FAULT_PROTOCOLS=classic,consumer`` is set; CI runs the classic protocol only,
which alone takes the file's time budget.

One more test injects no fault: a ``group.protocol=consumer`` member whose revocation listener
takes 1.5 ``T`` must keep heartbeating while it reconciles, and keep its membership.

Run time (the CI budget): one cluster for the module; each test takes about 40-70 s, most of
it the killed broker's restart and its replicas catching up (the runner waits until they are
in sync, so the next test may kill another broker).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from _support import until_any

from aiozkconsumer import ConsumerConfig, KafkaConsumerConnector
from aiozkconsumer.kafka.client import KafkaClient
from aiozkconsumer.kafka.consumer_group import ConsumerGroupClient
from aiozkconsumer.kafka.group import GroupRequestError
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.chaos import (
    ChaosReport,
    CoordinatorMode,
    Fault,
    FaultKind,
    _explicit_schedule,
    kafka_chaos_broker_properties,
    run_chaos,
)
from aiozkconsumer.testing.chaos._brokers import BrokerLookup
from aiozkconsumer.testing.history import (
    DUPLICATE_WINDOW_TOLERANCE_S,
    AnomalyKind,
    Handover,
    load_events,
)
from aiozkconsumer.testing.proxy import FaultMode

log = logging.getLogger(__name__)

CONSUMERS = 3
PARTITIONS = 6
BROKERS = 3
CONTROLLER = 0
"""The KRaft controller (``LocalCluster``'s node 0): never SIGKILLed by the runner."""
SEED = 20260318
"""Seeds the producer's choice of partitions (the schedule is explicit)."""
SESSION_TIMEOUT_MS = 6000
"""``T``: the classic members' ``session.timeout.ms`` and the brokers'
``group.consumer.session.timeout.ms``."""
HEARTBEAT_INTERVAL_MS = 1000
"""``H``: the classic members' ``heartbeat.interval.ms`` and the brokers'
``group.consumer.heartbeat.interval.ms``."""
COMMIT_INTERVAL_MS = 250
"""``I``: the verifiable consumers commit this often."""
BROKER_SESSION_TIMEOUT_MS = 4000
"""``F``: the brokers' ``broker.session.timeout.ms`` (set explicitly, the kit's value): the
KRaft controller fences a broker that has not heartbeated for this long."""
RATE = 300
"""Records produced per second."""
CHUNK_INTERVAL_S = 0.25
"""The producer writes a chunk this often (about 12 records per partition): a partition's
deliveries come at most this far apart when nothing is wrong."""
FAULT_AT_S = 8.0
"""When the fault is injected, seconds into the fault phase (which starts once every member
has started): the group's initial rebalances are over by then."""
RECOVERY_SLACK_S = 3.0
"""``S``, slack on top of each recovery bound: on a loaded two-core machine, the controller's
election and its metadata reaching the brokers, the new coordinator loading the group, the
members' retry backoffs (``refresh.leader.backoff.ms``, the FindCoordinator retry), a
JoinGroup/SyncGroup round or the consumer protocol's reconciliation with the commit before a
revocation, the first fetch from the new leader, the producer's own retry for partitions
whose leader died, and the chunk interval. Below ``T - H``, so that a recovery that waited
for a second session timeout still exceeds the link cut's bound ``T + H + S``."""

T = SESSION_TIMEOUT_MS / 1000
H = HEARTBEAT_INTERVAL_MS / 1000
I = COMMIT_INTERVAL_MS / 1000  # noqa: E741 - the table's name
F = BROKER_SESSION_TIMEOUT_MS / 1000
DUPLICATE_BOUND_S = I + T + DUPLICATE_WINDOW_TOLERANCE_S
"""The table's duplicate window for the three kinds: ``I + T + ε``."""
RECOVERY_BOUND_S: Mapping[FaultKind, float] = {
    FaultKind.COORDINATOR_KILL: F + 2 * H + RECOVERY_SLACK_S,
    FaultKind.LEADER_KILL: F + RECOVERY_SLACK_S,
    FaultKind.BROKER_LINK: T + H + RECOVERY_SLACK_S,
}
assert RECOVERY_SLACK_S < T - H, "the link cut's bound must stay below a second timeout"

BROKER_PROPERTIES = {
    **kafka_chaos_broker_properties(SESSION_TIMEOUT_MS, HEARTBEAT_INTERVAL_MS),
    "broker.session.timeout.ms": str(BROKER_SESSION_TIMEOUT_MS),
    # No leadership moves but the fault's: the controller's periodic preferred-leader
    # election (every 300 s) would otherwise hand a restarted broker its leaderships back,
    # moving the coordinator a second time in the middle of a later test.
    "auto.leader.rebalance.enable": "false",
}

PROTOCOLS_ENV = "AIOZKCONSUMER_FAULT_PROTOCOLS"
_MODE_OF = {"classic": CoordinatorMode.KAFKA_CLASSIC, "consumer": CoordinatorMode.KAFKA_CONSUMER}
MODES = [
    pytest.param(_MODE_OF[name], id=name)
    for name in os.environ.get(PROTOCOLS_ENV, "classic").replace(" ", "").split(",")
    if name
]


@pytest.fixture(scope="module")
def kafka_faults_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three KRaft brokers (Kafka 4.3) with a proxied link per member, for the module."""
    cluster = LocalCluster(
        brokers=BROKERS,
        flavour="kraft",
        proxy_links=CONSUMERS,
        broker_properties=BROKER_PROPERTIES,
        work_dir=tmp_path_factory.mktemp("kafka-faults-cluster"),
    )
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(cluster.start())
        yield cluster
    finally:
        loop.run_until_complete(cluster.stop())
        loop.close()


# -- choosing where the coordinator is --------------------------------------------------------


def _java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _offsets_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: ``Utils.abs(groupId.hashCode()) %
    partitions`` (``GroupCoordinatorService.partitionFor``; both protocols)."""
    h = _java_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


async def _group_on(cluster: LocalCluster, wanted: Callable[[int], bool], prefix: str) -> str:
    """A group id whose coordinator is a broker ``wanted`` accepts, as FindCoordinator says."""
    lookup = BrokerLookup(cluster)
    # FindCoordinator creates __consumer_offsets on a fresh cluster.
    assert await lookup.coordinator(f"{prefix}-probe") is not None
    rows = await lookup.partitions(["__consumer_offsets"]) or []
    leaders = {r["partition"]: r["leader"] for r in rows}
    assert leaders and all(b >= 0 for b in leaders.values()), leaders
    for i in range(500):
        group = f"{prefix}-{i}"
        broker = leaders[_offsets_partition(group, len(leaders))]
        if wanted(broker):
            found = await lookup.coordinator(group)
            assert found == broker, (group, found, leaders)
            return group
    pytest.fail(f"no group of {prefix} has its coordinator where wanted: leaders {leaders}")


# -- measuring the recovery -------------------------------------------------------------------


@dataclass(frozen=True)
class Gap:
    """A partition's longest delivery gap around the fault."""

    partition: int
    seconds: float
    after_ts: float
    """When the delivery that opened the gap was handed out."""


def _hand_outs(events_dir: Path, topic: str) -> dict[int, list[float]]:
    """Per partition, when its records were handed out (``consumed`` events, any member),
    in time order."""
    events = load_events(*sorted(events_dir.glob("c*.jsonl")))
    times: dict[int, list[float]] = {}
    for e in events:
        if e.get("type") == "consumed" and e.get("topic") == topic:
            times.setdefault(int(e["partition"]), []).append(float(e["ts"]))
    for ts in times.values():
        ts.sort()
    return times


def _longest_gaps(times: Mapping[int, list[float]], since_ts: float) -> dict[int, Gap]:
    """Per partition, the longest time between two consecutive hand-outs whose later one
    came after ``since_ts``."""
    gaps: dict[int, Gap] = {}
    for p, ts in times.items():
        best = Gap(p, 0.0, since_ts)
        for a, b in zip(ts, ts[1:], strict=False):
            if b >= since_ts and b - a > best.seconds:
                best = Gap(p, b - a, a)
        gaps[p] = best
    return gaps


# -- the run ----------------------------------------------------------------------------------


async def _run(
    cluster: LocalCluster,
    mode: CoordinatorMode,
    fault: Fault,
    group: str,
    duration_s: float,
    events_dir: Path,
) -> ChaosReport:
    return await run_chaos(
        cluster,
        consumers=CONSUMERS,
        partitions=PARTITIONS,
        records=int(RATE * duration_s),
        duration_s=duration_s,
        seed=SEED,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        events_dir=events_dir,
        faults=[fault],
        group=group,
        finish_timeout_s=60.0,
        liveness_slack_s=10.0,
        mode=mode,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        commit_interval_ms=COMMIT_INTERVAL_MS,
        chunk_interval_s=CHUNK_INTERVAL_S,
    )


def _check(report: ChaosReport, kind: FaultKind) -> tuple[dict[int, Gap], list[Handover]]:
    """Assert (1) a clean history, (2) the duplicate bound, (3) the recovery bound; return
    the gaps and the hand-overs in the fault's window, for the test's own assertions."""
    assert len(report.outcomes) == 1, report.summary()
    outcome = report.outcomes[0]
    why = (
        f"{kind.value}: {outcome.status} {outcome.detail}\n{report.summary()}\n"
        f"history: {report.events_dir}"
    )
    assert outcome.status == "injected", why
    # (1) the history is clean.
    assert report.ok, why
    assert report.result.lost == 0 and report.result.distinct_delivered == report.records, why
    # (2) the duplicate window of every hand-over the fault caused.
    assert AnomalyKind.DUPLICATE_WINDOW_EXCEEDED not in report.result.by_kind(), why
    judged = [h for h in report.result.handovers if h.fault_kind == kind.value]
    for h in judged:
        assert h.bound_s == pytest.approx(DUPLICATE_BOUND_S), (h, why)
        assert h.window_s <= DUPLICATE_BOUND_S, (h, why)
    # (3) the recovery: every partition's longest delivery gap around the fault.
    times = _hand_outs(report.events_dir, report.topic)
    gaps = _longest_gaps(times, outcome.started_ts)
    assert set(gaps) == set(range(PARTITIONS)), (gaps, why)
    # The premise: the group had settled and every partition flowed in the second before the
    # fault (otherwise a gap could start in the group's initial rebalances, not at the fault).
    idle = [
        p
        for p, ts in times.items()
        if not any(outcome.started_ts - 1.0 <= t <= outcome.started_ts for t in ts)
    ]
    assert not idle, (f"partitions {idle} were not flowing before the fault", why)
    bound = RECOVERY_BOUND_S[kind]
    worst = max(gaps.values(), key=lambda g: g.seconds)
    window = [
        h
        for h in report.result.handovers
        if outcome.started_ts <= h.ts <= outcome.ended_ts + T + 2 * H + RECOVERY_SLACK_S
    ]
    measured = {
        "kind": kind.value,
        "mode": report.config.mode.value,
        "detail": outcome.detail,
        "fault_s": round(outcome.ended_ts - outcome.started_ts, 2),
        "bound_s": bound,
        "gaps_s": {p: round(g.seconds, 2) for p, g in sorted(gaps.items())},
        "gap_after_fault_s": {
            p: round(g.after_ts - outcome.started_ts, 2) for p, g in sorted(gaps.items())
        },
        "handovers_in_window": len(window),
        "judged_handovers": len(judged),
        "duplicates_max": max((h.duplicates for h in judged), default=0),
        "window_max_s": round(max((h.window_s for h in judged), default=0.0), 2),
        "handover_gap_max_s": round(
            max((h.gap_s for h in window if h.gap_s is not None), default=0.0), 2
        ),
        "phases_s": {k: round(v, 1) for k, v in report.phases_s.items()},
    }
    (report.events_dir / "recovery.json").write_text(json.dumps(measured, indent=2))
    log.info("%s recovery: %s", kind.value, json.dumps(measured))
    assert worst.seconds <= bound, (
        f"partition {worst.partition} handed out nothing for {worst.seconds:.2f} s from "
        f"{worst.after_ts - outcome.started_ts:+.2f} s after the fault began; the recovery "
        f"bound of {kind.value} is {bound:.2f} s; gaps {measured['gaps_s']}; {why}"
    )
    return gaps, window


def test_explicit_schedule_is_checked() -> None:
    """``run_chaos(faults=...)`` takes exactly the faults given, in time order, and refuses
    one the run could not inject."""
    kafka = CoordinatorMode.KAFKA_CLASSIC
    late = Fault(2, 5.0, FaultKind.LEADER_KILL, duration_s=6.0)
    early = Fault(1, 1.0, FaultKind.BROKER_LINK, member=0, broker=1, mode=FaultMode.RESET)
    assert _explicit_schedule([late, early], 10.0, 3, kafka, links=True) == [early, late]
    for faults, links in (
        ([Fault(1, 10.0, FaultKind.LEADER_KILL)], True),  # outside the fault phase
        ([Fault(1, 1.0, FaultKind.EXPIRE, member=0)], True),  # a ZooKeeper-mode fault
        ([early], False),  # a link fault without proxied links
        ([Fault(1, 1.0, FaultKind.KILL, member=3)], True),  # no slot 3
        ([Fault(1, 1.0, FaultKind.PAUSE, duration_s=1.0)], True),  # no slot at all
        ([early, Fault(1, 2.0, FaultKind.LEADER_KILL)], True),  # two number 1
    ):
        with pytest.raises(ValueError):
            _explicit_schedule(faults, 10.0, 3, kafka, links=links)
    with pytest.raises(ValueError):
        _explicit_schedule([late], 10.0, 3, CoordinatorMode.ZOOKEEPER, links=True)


@pytest.mark.integration
@pytest.mark.chaos
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", MODES)
async def test_coordinator_failover(
    kafka_faults_cluster: LocalCluster, tmp_path: Path, mode: CoordinatorMode
) -> None:
    """The group coordinator's broker SIGKILLed: the coordinator moves; every partition
    flows again within ``F + H + S``; hand-overs (if any) within ``I + T + ε``."""
    cluster = kafka_faults_cluster
    group = await _group_on(
        cluster, lambda b: b != CONTROLLER, f"faults-coordinator-{uuid.uuid4().hex[:6]}"
    )
    coordinator = await BrokerLookup(cluster).coordinator(group)
    fault = Fault(1, FAULT_AT_S, FaultKind.COORDINATOR_KILL, duration_s=F + 2.0)
    report = await _run(cluster, mode, fault, group, FAULT_AT_S + 14.0, tmp_path / "run")
    detail = report.outcomes[0].detail if report.outcomes else ""
    # SIGKILLed, not stopped gracefully as the controller would have been.
    assert detail.startswith(f"broker {coordinator} (the group coordinator) killed"), detail
    _check(report, FaultKind.COORDINATOR_KILL)
    # The coordinator moved (a restarted broker gets no leadership back by itself).
    assert await BrokerLookup(cluster).coordinator(group) != coordinator, report.summary()


@pytest.mark.integration
@pytest.mark.chaos
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", MODES)
async def test_partition_leader_kill(
    kafka_faults_cluster: LocalCluster, tmp_path: Path, mode: CoordinatorMode
) -> None:
    """A partition leader (not the coordinator) SIGKILLed: fetching resumes from the new
    leader within ``F + S``, without a rebalance."""
    cluster = kafka_faults_cluster
    group = await _group_on(
        cluster, lambda b: b == CONTROLLER, f"faults-leader-{uuid.uuid4().hex[:6]}"
    )
    fault = Fault(1, FAULT_AT_S, FaultKind.LEADER_KILL, duration_s=F + 2.0)
    report = await _run(cluster, mode, fault, group, FAULT_AT_S + 14.0, tmp_path / "run")
    detail = report.outcomes[0].detail if report.outcomes else ""
    # The runner never kills the controller, which is the coordinator here.
    assert detail.startswith("broker ") and " killed" in detail, detail
    assert not detail.startswith(f"broker {CONTROLLER} "), detail
    _, window = _check(report, FaultKind.LEADER_KILL)
    # "otherwise no hand-over": no partition changed owner around the fault.
    assert not window, [str(h) for h in window]


@pytest.mark.integration
@pytest.mark.chaos
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", MODES)
async def test_link_cut_to_coordinator(
    kafka_faults_cluster: LocalCluster, tmp_path: Path, mode: CoordinatorMode
) -> None:
    """Member c0's link to its coordinator blackholed past ``T``: it is expelled, its
    partitions move within ``T + H + S`` with duplicates within ``I + T + ε``, and it
    rejoins at the heal."""
    cluster = kafka_faults_cluster
    group = await _group_on(cluster, lambda b: True, f"faults-link-{uuid.uuid4().hex[:6]}")
    coordinator = await BrokerLookup(cluster).coordinator(group)
    fault = Fault(
        1,
        FAULT_AT_S,
        FaultKind.BROKER_LINK,
        member=0,
        broker=coordinator,
        duration_s=T + 4.0,
        mode=FaultMode.BLACKHOLE,
        direction="both",
    )
    report = await _run(cluster, mode, fault, group, FAULT_AT_S + T + 16.0, tmp_path / "run")
    _, window = _check(report, FaultKind.BROKER_LINK)
    # Expelled: some of c0's partitions were handed over, judged by the link cut.
    moved = [h for h in window if h.previous == "c0" and h.fault_kind == "broker_link"]
    assert moved, [str(h) for h in report.result.handovers]


# -- a slow revocation listener (no fault injected) -------------------------------------------


class _SlowRevocation:
    """A rebalance listener whose first revocation takes ``hold_s`` seconds."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.revoked: list[set[int]] = []
        self.done = anyio.Event()

    async def before_releasing_partitions(self, partition_ownership: dict[str, set[int]]) -> None:
        parts = {p for ps in partition_ownership.values() for p in ps}
        if parts and not self.revoked:
            self.revoked.append(parts)
            await anyio.sleep(self.hold_s)  # the application's slow clean-up, not a wait
            self.done.set()

    async def before_starting_fetchers(self, consumer_id: str, assignment: object) -> None:
        return None


@pytest.mark.integration
@pytest.mark.timeout(120)
async def test_a_consumer_protocol_member_heartbeats_through_a_slow_revocation_listener(
    kafka_faults_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """KIP-848: member a's revocation listener takes 1.5 ``T`` when b joins. a goes on
    heartbeating while it reconciles (the Java client's heartbeat runs apart from the
    callbacks), so the coordinator keeps it: no fence, and a and b end up owning the four
    partitions between them. Without those heartbeats the coordinator expelled a after
    ``T``, and its acknowledgement was answered ``UNKNOWN_MEMBER_ID``."""
    cluster = kafka_faults_cluster
    await cluster.create_topic(unique_topic, 4, replication_factor=BROKERS)

    def config() -> ConsumerConfig:
        return ConsumerConfig(
            group_id=unique_group_id,
            group_coordinator="kafka",
            group_protocol="consumer",
            bootstrap_servers=cluster.bootstrap_servers,
            auto_offset_reset="smallest",
        )

    listener = _SlowRevocation(1.5 * T)
    caplog.set_level(logging.INFO, logger="aiozkconsumer")
    async with KafkaConsumerConnector(config()) as a:
        a.set_consumer_rebalance_listener(listener)
        await a.create_message_streams({unique_topic: 1})
        await until_any([a], lambda: len(a.statistics().owned_partitions) == 4)
        async with KafkaConsumerConnector(config()) as b:
            await b.create_message_streams({unique_topic: 1})
            with anyio.fail_after(60):
                await listener.done.wait()

            def split() -> bool:
                mine = set(a.statistics().owned_partitions)
                theirs = set(b.statistics().owned_partitions)
                return len(mine | theirs) == 4 and not mine & theirs and bool(theirs)

            await until_any([a, b], split)
    needle = "fenced by the group coordinator"
    fenced = [r.getMessage() for r in caplog.records if needle in r.getMessage()]
    assert not fenced, fenced
    assert listener.revoked


# -- the consumer protocol's session timeout with brokers out of reach ------------------------


@pytest.mark.integration
@pytest.mark.timeout(120)
async def test_the_group_session_timeout_is_asked_of_the_coordinator_and_no_answer_is_no_answer(
    kafka_faults_cluster: LocalCluster,
) -> None:
    """A ``group.protocol=consumer`` member bounds its hand-outs by the group's session
    timeout on the broker (``T`` here), which it asks with DescribeConfigs. It asks the
    coordinator, which its join needs anyway: with its links to the two other brokers
    refused, every answer is ``T`` (asked of a random broker, two in three asks came back
    empty and the member assumed ``session.timeout.ms``'s 45 s: in a chaos run, an expelled
    member went on handing out a partition its heir held). With no broker answering, the
    ask raises instead of saying "not told"."""
    cluster = kafka_faults_cluster
    group = await _group_on(cluster, lambda b: True, f"faults-ask-{uuid.uuid4().hex[:6]}")
    coordinator = await BrokerLookup(cluster).coordinator(group)
    assert coordinator is not None
    link = cluster.link(0)
    kafka = KafkaClient(link.bootstrap_servers, client_id="session-timeout-ask")
    await kafka.start()

    async def get_kafka() -> KafkaClient:
        return kafka

    asker = ConsumerGroupClient(get_kafka, group, request_timeout_ms=3000)
    try:
        # Found before the cut, as a member's join finds it (FindCoordinator goes to any
        # broker, and a join attempt that reached a refused one is retried).
        await asker.find_coordinator()
        # RESET: the connections open now are reset too, and new ones (REFUSE would leave
        # open ones carrying).
        for broker in range(BROKERS):
            if broker != coordinator:
                await link.cut(broker, FaultMode.RESET)
        answers = [await asker.session_timeout_ms() for _ in range(6)]
        assert answers == [SESSION_TIMEOUT_MS] * 6
        await link.cut(coordinator, FaultMode.RESET)
        asker.forget_coordinator()
        with pytest.raises(GroupRequestError) as info:
            await asker.session_timeout_ms()
        assert not info.value.fatal
    finally:
        await link.heal("brokers")
        await kafka.close()
