"""Cooperative-sticky (KIP-429) at group scale with a Java member, on a real Kafka 3.9 broker.

A fifth member joins four members of ours and a Java ``KafkaConsumer`` with the
``CooperativeStickyAssignor`` (the group's leader) while a producer writes to every partition
steadily. What is observed, and how each can fail:

- Only the moved partitions pause. The join takes two rebalances: the first revokes the
  partitions that move (each member with a surplus gives one up), the follow-up gives them to
  the joiner. The last member of ours to give a partition up is held in its listener's
  ``before_releasing_partitions`` (after its commit) while the follow-up rebalance is under
  way on the broker (every other member of ours waits in JoinGroup, which cannot end without
  the held one), until every unmoved partition has handed out ``DURING_HOLD`` records written
  after the hold began. A member that stopped fetching what it keeps while it rejoins (eager
  revocation, a gate closed for the join) hands out nothing then and the wait fails; a moved
  partition handed out during the hold (its old owner going on after giving it up, a new owner
  too early) fails. The Java member may give its surplus up after the hold began (it revokes in
  its next poll): what it handed out before that is its own.
  The pause is measured as a record's wait, from its write (its CreateTime) to its delivery:
  unlike the gap between two deliveries it does not grow when the producer stalls. Around the
  join, the longest wait of an unmoved partition's record must stay under half of the longest
  wait of each moved partition. No tuned bound: the hold lasts three times the longest wait
  the unmoved partitions had until then (up to half the lease below), and a moved partition's
  records written during the hold wait for all of it.
- Every record exactly once across the group: the Java member commits in
  ``onPartitionsRevoked``, ours before the listener; the new owner starts at that commit. A
  missed or late commit shows as a duplicate, one past what was handed out as a gap.
- The assignment is the Java assignor's: the Java leader computes it on the broker; our port
  (:func:`~aiozkconsumer.group.sticky.cooperative_sticky_assign`) given the same input (the
  five members' owned partitions and generation, the joiner owning nothing) names the same
  partitions as moving and the same final shares. With 12 partitions over 6 members the quotas
  are equal, so the answer is unique (each member keeps its lowest two partitions,
  ``ConstrainedAssignmentBuilder``), and the rule is asserted as well: nothing moves between
  the five members that were there, exactly the surplus moves.

The hold stays far below 0.8 x ``session.timeout.ms``: a member of ours waiting in JoinGroup
sends no heartbeat, and its hand-out lease (the ownership gate) ends then.

And a member of ours whose listener takes longer than ``session.timeout.ms`` while it takes
an assignment keeps its membership, as a Java member does (its heartbeat thread runs during
the rebalance callbacks; only ``max.poll.interval.ms`` bounds them).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaProducer

from aiozkconsumer import ConnectorState, ConsumerConfig, TopicPartition, create_connector
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.group.classic import KafkaCoordinator
from aiozkconsumer.group.state import MemberEvent, MemberState
from aiozkconsumer.group.sticky import MemberData, StickyResult, cooperative_sticky_assign
from aiozkconsumer.stream import KafkaStream
from aiozkconsumer.subscription import ConsumerThreadId
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing._clients import bounded_close
from aiozkconsumer.testing.java_member import JavaConsumerMember

pytestmark = pytest.mark.integration

PARTITIONS = 12  # 5 members: 3,3,2,2,2; 6 members: 2 each (a unique sticky answer)
OURS = 4
PERIOD_S = 0.05  # the producer writes one record to every partition this often
DURING_HOLD = 10  # records written during the hold each unmoved partition hands out
HEARTBEAT_MS = 500
SESSION_MS = 30_000  # the lease of a member in JoinGroup: 24 s, far beyond the hold
MAX_HOLD_S = 0.4 * SESSION_MS / 1000  # half that lease
LIMIT_S = 60

Delivery = tuple[float, float, int, str]
"""(delivered at, written at, offset, member), ``time.time()`` seconds."""


class Deliveries:
    """Every record handed out by a member of ours, per partition."""

    def __init__(self) -> None:
        self.by_partition: dict[int, list[Delivery]] = {}

    def add(self, member: str, partition: int, offset: int, written_ms: int) -> None:
        entry = (time.time(), written_ms / 1000, offset, member)
        self.by_partition.setdefault(partition, []).append(entry)


class Hold:
    """Holds the last member of ours to give a partition up in the join's first rebalance.

    ``expected`` is how many members of ours give one up; the call that makes that many
    blocks until :attr:`go` is set. Calls before :attr:`armed` (the group forming) pass.
    """

    def __init__(self) -> None:
        self.armed = False
        self.expected = 0
        self.calls = 0
        self.holder: str | None = None
        self.holding = anyio.Event()
        self.go = anyio.Event()


class Listener:
    """A member's rebalance listener: what it gave up, and the hold."""

    def __init__(self, name: str, hold: Hold) -> None:
        self.name = name
        self.hold = hold
        self.released: list[set[int]] = []

    async def before_releasing_partitions(self, partition_ownership: dict[str, set[int]]) -> None:
        parts = {p for ps in partition_ownership.values() for p in ps}
        hold = self.hold
        if not hold.armed or hold.go.is_set():
            return
        self.released.append(parts)
        hold.calls += 1
        if hold.calls == hold.expected:
            hold.holder = self.name
            hold.holding.set()
            await hold.go.wait()

    async def before_starting_fetchers(
        self, consumer_id: str, global_partition_assignment: dict[str, dict[int, ConsumerThreadId]]
    ) -> None:
        return None


def _config(cluster: LocalCluster, group: str, **kw: Any) -> ConsumerConfig:
    kw.setdefault("session_timeout_ms", SESSION_MS)
    return ConsumerConfig(
        group_id=group,
        group_coordinator="kafka",
        bootstrap_servers=cluster.bootstrap_servers,
        partition_assignment_strategy="cooperative-sticky",
        auto_offset_reset="earliest",
        auto_commit_interval_ms=500,
        heartbeat_interval_ms=HEARTBEAT_MS,
        **kw,
    )


def _member(c: ConsumerConnector) -> KafkaCoordinator:
    member = c.coordinator
    assert isinstance(member, KafkaCoordinator)
    return member


def _owned(c: ConsumerConnector) -> set[int]:
    return {tp.partition for tp in c.statistics().owned_partitions}


def _stable(c: ConsumerConnector) -> bool:
    return c.state is ConnectorState.RUNNING and _member(c).machine.state is MemberState.STABLE


async def _until(condition: Callable[[], bool], limit_s: float = LIMIT_S) -> None:
    # Conditions over several members and a Java process: no single event says they hold.
    with anyio.fail_after(limit_s):
        while True:
            if condition():
                return
            await anyio.sleep(0.05)


async def _drain(stream: KafkaStream, member: str, seen: Deliveries) -> None:
    async for msg in stream:
        seen.add(member, msg.partition, msg.offset, msg.timestamp)


async def _produce_steadily(
    bootstrap: str, topic: str, stop: anyio.Event, stopped: anyio.Event
) -> None:
    """One record to every partition each ``PERIOD_S`` until ``stop``; then ``stopped``."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    await producer.start()
    try:
        n = 0
        while not stop.is_set():
            sent = [
                await producer.send(topic, b"%d" % n, key=b"k", partition=p)
                for p in range(PARTITIONS)
            ]
            for future in sent:
                await future
            n += 1
            await anyio.sleep(PERIOD_S)  # the pace of the writes, not a wait for a condition
    finally:
        # Closed even when the test's task group is cancelled (a failure elsewhere).
        await bounded_close(producer.stop(), time_limit=10, what="producer")
    stopped.set()


def _timeline(seen: Deliveries, java: JavaConsumerMember) -> dict[int, list[Delivery]]:
    """Every delivery of the group, per partition, in delivery order."""
    out = {p: list(seen.by_partition.get(p, ())) for p in range(PARTITIONS)}
    for r in list(java.records):
        out[r.partition].append((r.received_at, r.timestamp_ms / 1000, r.offset, "java"))
    for events in out.values():
        events.sort()
    return out


def _longest_wait(events: list[Delivery], since: float, until: float = float("inf")) -> float:
    """The longest wait (delivery - write) of a record written in ``[since, until]``."""
    return max((d - w for d, w, _, _ in events if since <= w <= until), default=0.0)


def _port(topic: str, before: dict[str, set[int]], generation: int, joiner: str) -> StickyResult:
    """Our port of CooperativeStickyAssignor on the leader's input for the join."""
    members = {
        mid: MemberData(
            topics=frozenset({topic}),
            partitions=tuple(TopicPartition(topic, p) for p in sorted(parts)),
            generation=generation,
            subscription_generation=generation,
            owned_partitions=tuple(TopicPartition(topic, p) for p in sorted(parts)),
        )
        for mid, parts in before.items()
    }
    members[joiner] = MemberData(topics=frozenset({topic}))
    return cooperative_sticky_assign(members, {topic: PARTITIONS})


async def test_a_fifth_member_joins_four_of_ours_and_a_java_cooperative_sticky_leader(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    cluster, topic, group = zk_kafka_cluster, unique_topic, unique_group_id
    await cluster.create_topic(topic, PARTITIONS)
    seen = Deliveries()
    hold = Hold()
    listeners = {f"ours{i}": Listener(f"ours{i}", hold) for i in range(OURS + 1)}
    joiner = f"ours{OURS}"
    stop_producing, produced_all = anyio.Event(), anyio.Event()
    java = JavaConsumerMember(
        cluster,
        group,
        [topic],
        assignor="cooperative-sticky",
        commit="sync",
        session_timeout_ms=SESSION_MS,
        extra_properties={"heartbeat.interval.ms": str(HEARTBEAT_MS), "fetch.max.wait.ms": "100"},
        poll_timeout_ms=200,
    )
    ours: dict[str, ConsumerConnector] = {}  # the members of ours in the group

    def java_owned() -> set[int]:
        return {tp.partition for tp in java.assigned_partitions()}

    def settled(members: int) -> bool:
        shares = [_owned(c) for c in ours.values()] + [java_owned()]
        quota = PARTITIONS // members
        return (
            len(shares) == members
            and all(_stable(c) for c in ours.values())
            and all(quota <= len(s) <= quota + 1 for s in shares)
            and sum(len(s) for s in shares) == PARTITIONS
            and set().union(*shares) == set(range(PARTITIONS))
        )

    # Every process and connector is opened (and closed) by this task, outside the readers'
    # task group; the Java member first: it joins an empty group, so it leads.
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(java)
        opened = {
            name: await stack.enter_async_context(create_connector(_config(cluster, group)))
            for name in listeners
        }
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    _produce_steadily,
                    cluster.bootstrap_servers,
                    topic,
                    stop_producing,
                    produced_all,
                )
                await java.wait_for_assignment(lambda tps: len(tps) == PARTITIONS, LIMIT_S)

                async def subscribe(name: str) -> None:
                    c = opened[name]
                    c.set_consumer_rebalance_listener(listeners[name])
                    ours[name] = c
                    streams = await c.create_message_streams({topic: 1})
                    tg.start_soon(_drain, streams[topic][0], name, seen)

                async with anyio.create_task_group() as joining:
                    for i in range(OURS):
                        joining.start_soon(subscribe, f"ours{i}")
                await _until(lambda: settled(OURS + 1))

                # The group before the join, as the leader will see it.
                members = {name: _member(c) for name, c in ours.items()}
                assert {m.leader for m in members.values()} == {java.member_id}
                generation = members["ours0"].generation
                assert {m.generation for m in members.values()} == {generation}
                before = {m.member_id: _owned(ours[n]) for n, m in members.items()}
                before[java.member_id] = java_owned()
                name_of = {m.member_id: n for n, m in members.items()} | {java.member_id: "java"}
                surplus = {mid for mid, parts in before.items() if len(parts) == 3}
                assert len(surplus) == PARTITIONS % (OURS + 1)
                hold.expected = sum(1 for mid in surplus if name_of[mid] != "java")
                java_changes_before = len(java.assignments)
                hold.armed = True

                # The fifth member joins; the last of ours to give a partition up is held.
                t_join = time.time()
                tg.start_soon(subscribe, joiner)
                with anyio.fail_after(LIMIT_S):
                    await hold.holding.wait()
                others = [c for n, c in ours.items() if n != hold.holder]
                if hold.expected == 1:
                    # The Java member had the other surplus: it may have revoked and rejoined
                    # a generation before the held member got its revocation (the others'
                    # SyncGroups then answered REBALANCE_IN_PROGRESS), and then nobody starts
                    # the follow-up rebalance but the held member. Another member of ours
                    # asks for it, as that member's rejoin would have.
                    starter = next(c for n, c in ours.items() if n not in (hold.holder, joiner))
                    starter.request_rebalance("the test starts the follow-up rebalance")

                def in_join_group() -> bool:
                    return all(_member(c).machine.state is MemberState.JOINING for c in others)

                # The follow-up rebalance is under way on the broker: every other member of
                # ours was told REBALANCE_IN_PROGRESS and waits in JoinGroup for the held one.
                await _until(in_join_group)
                t_hold = time.time()
                joiner_id = _member(ours[joiner]).member_id
                port = _port(topic, before, generation, joiner_id)
                transferring = port.transferring
                assert transferring is not None
                moved = {tp.partition for tp in transferring}
                unmoved = set(range(PARTITIONS)) - moved

                def held_long_enough() -> bool:
                    timeline = _timeline(seen, java)
                    if any(
                        sum(1 for _, w, _, _ in timeline[p] if w > t_hold) < DURING_HOLD
                        for p in unmoved
                    ):
                        return False
                    waits = [_longest_wait(timeline[p], t_join) for p in unmoved]
                    held = time.time() - t_hold
                    return held >= 3 * max(waits) or held >= MAX_HOLD_S

                await _until(held_long_enough)
                assert in_join_group(), "the rebalance ended while a member of ours was held"
                # A Java member hands a partition out until its listener revokes it, which may
                # be after the hold began (it learns of the rebalance from a heartbeat answer
                # and revokes in its next poll): those deliveries are its own, before the
                # partition moved, and count as nobody's during the hold.
                java_revoked: dict[int, float] = {}
                for a in java.assignments[java_changes_before:]:
                    if a.change in ("revoked", "lost"):
                        for tp in a.changed:
                            java_revoked.setdefault(tp.partition, a.received_at)

                def counts_during(p: int, e: Delivery) -> bool:
                    owner_before = e[3] == "java" and e[0] < java_revoked.get(p, float("inf"))
                    return e[0] > t_hold and not owner_before

                during = {
                    p: [e for e in events if counts_during(p, e)]
                    for p, events in _timeline(seen, java).items()
                }
                hold.go.set()

                await _until(lambda: settled(OURS + 2))
                t_settled = time.time()
                after = {m.member_id: _owned(ours[n]) for n, m in members.items()}
                after[joiner_id] = _owned(ours[joiner])
                after[java.member_id] = java_owned()
                java_changes = list(java.assignments[java_changes_before:])

                stop_producing.set()
                with anyio.fail_after(LIMIT_S):
                    await produced_all.wait()
                ends = await cluster.log_end_offsets(topic)
                everything = {(p, o) for p, end in ends.items() for o in range(end)}

                def all_delivered() -> bool:
                    timeline = _timeline(seen, java)
                    return {(p, o) for p, es in timeline.items() for *_, o, _ in es} >= everything

                await _until(all_delivered)
                timeline = _timeline(seen, java)
                tg.cancel_scope.cancel()
        finally:
            hold.go.set()  # a failed test leaves no member held
        await java.stop()  # while the group is stable: its last commit is taken

    # The assignment is the Java leader's, and our port's on the same input.
    assert transferring is not None
    assert set(transferring.values()) == {joiner_id}
    port_final = {mid: {tp.partition for tp in tps} for mid, tps in port.assignment.items()}
    for tp, mid in transferring.items():
        port_final[mid].add(tp.partition)
    assert after == port_final
    # The rule behind it: each member keeps its lowest two, exactly the surplus moves, and
    # nothing moves between the five members that were there.
    for mid, parts in before.items():
        assert after[mid] == set(sorted(parts)[:2]), name_of[mid]
    assert after[joiner_id] == moved and len(moved) == len(surplus)
    # What each member gave up in the join is exactly what moved from it.
    java_revoked = {
        tp.partition for a in java_changes if a.change in ("revoked", "lost") for tp in a.changed
    }
    assert not any(a.change == "lost" for a in java_changes)
    assert (
        java_revoked
        == {p for mid in surplus if name_of[mid] == "java" for p in before[mid]} & moved
    )
    for name, listener in listeners.items():
        mine = [mid for mid, n in name_of.items() if n == name]
        gave = before[mine[0]] - after[mine[0]] if mine else set()
        assert listener.released == ([gave] if gave else []), name

    # Only the moved partitions paused: nobody handed them out during the hold, and the
    # unmoved ones' records waited far less than the moved ones' around the join.
    assert {p: len(events) for p, events in during.items() if p in moved} == dict.fromkeys(moved, 0)
    unmoved_waits = {p: _longest_wait(timeline[p], t_join, t_settled) for p in sorted(unmoved)}
    moved_waits = {p: _longest_wait(timeline[p], t_join, t_settled) for p in sorted(moved)}
    assert max(unmoved_waits.values()) < min(moved_waits.values()) / 2, (unmoved_waits, moved_waits)

    # Every record exactly once across the group.
    pairs = Counter((p, o) for p, events in timeline.items() for *_, o, _ in events)
    assert {x: n for x, n in pairs.items() if n > 1} == {}
    assert set(pairs) == everything


class SlowListener:
    """Takes ``seconds`` to let partitions go, once armed (a listener that commits to a slow
    external store, say)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.armed = False
        self.took: list[float] = []

    async def before_releasing_partitions(self, partition_ownership: dict[str, set[int]]) -> None:
        if self.armed:
            t0 = time.monotonic()
            await anyio.sleep(self.seconds)  # the slow work itself, not a wait for a condition
            self.took.append(time.monotonic() - t0)

    async def before_starting_fetchers(
        self, consumer_id: str, global_partition_assignment: dict[str, dict[int, ConsumerThreadId]]
    ) -> None:
        return None


async def test_a_listener_slower_than_the_session_timeout_keeps_the_membership(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    # The Java client's heartbeat thread beats from the JoinGroup answer on, through the
    # rebalance callbacks (AbstractCoordinator.JoinGroupResponseHandler enables it): a slow
    # onPartitionsRevoked is bounded by max.poll.interval.ms, not session.timeout.ms. A member
    # that stopped heartbeating while it took its assignment would be expelled by the
    # coordinator after the session timeout: the group would rebalance without it, and it
    # would come back fenced, with a new member id and two more generations.
    cluster, topic, group = zk_kafka_cluster, unique_topic, unique_group_id
    session_ms = 6000  # the broker's group.min.session.timeout.ms
    await cluster.create_topic(topic, 4)
    slow = SlowListener(1.5 * session_ms / 1000)
    config = _config(cluster, group, session_timeout_ms=session_ms)
    async with create_connector(config) as a:
        a.set_consumer_rebalance_listener(slow)
        await a.create_message_streams({topic: 1})
        await _until(lambda: _owned(a) == {0, 1, 2, 3} and _stable(a))
        first = _member(a)
        member_id, generation = first.member_id, first.generation
        slow.armed = True
        async with create_connector(config) as b:
            await b.create_message_streams({topic: 1})
            await _until(
                lambda: len(_owned(a)) == len(_owned(b)) == 2 and _stable(a) and _stable(b)
            )
            assert len(slow.took) == 1 and slow.took[0] >= session_ms / 1000
            # Still the same member: the join took its two rebalances and nothing more.
            assert first.member_id == member_id
            assert first.generation == _member(b).generation == generation + 2
            assert not {e for e, _ in first.machine.history} & {MemberEvent.FENCED}
