"""``seek`` and ``pause`` during a rebalance of the consumer group protocol (KIP-848), on
Kafka 4.3.

A member owns every partition of a topic; a second member joins. The broker takes half of
the first member's partitions away; the first member gives them up (its consumed offsets
committed, then its listener's ``before_releasing_partitions``), acknowledges, and only then
does the broker give them to the joiner. The listener holds the reconciliation open, and
while it does (an event, not a sleep) the test issues the verbs from another task, as an
application would:

- a seek on a partition kept through the rebalance applies at once (``position`` moves, the
  next record handed out is the one sought, before the rebalance ends);
- a pause on a kept partition holds it through the rest of the rebalance and after it
  (``paused()``; none of its records handed out) until ``resume``; so does a pause made
  before the join on a partition that is kept, while one made on a partition that is
  given up ends with it (the joiner reads that partition from the commit);
- ``seek``, ``pause``, ``resume``, ``position`` and ``seek_to_beginning`` on a partition being
  given up raise ``PartitionNotAssignedError`` naming it (and a verb naming a kept and a
  revoked partition changes neither);
- nothing is lost: every record is handed out once across the two members, except the ones
  the seek asked for again.

A verb that waited for the rebalance to end (or applied to the wrong assignment), a pause
lost by the reconciliation, or a partition given up that still took a seek, fails one of the
assertions.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from aiozkconsumer import ConnectorState, ConsumerConfig, TopicPartition, create_connector
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.errors import PartitionNotAssignedError
from aiozkconsumer.group.consumer_protocol import ConsumerProtocolCoordinator
from aiozkconsumer.group.state import MemberState
from aiozkconsumer.stream import KafkaStream
from aiozkconsumer.subscription import ConsumerThreadId
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.verbs import ConnectorVerbs

pytestmark = pytest.mark.integration

PARTITIONS = 6
FIRST = 30  # records per partition before the join
MORE = 20  # records per partition after it
SEEK_TO = 5
LIMIT_S = 60


class Deliveries:
    """Who handed out which (partition, offset), in order, with the time."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int, int, float]] = []

    def add(self, member: str, partition: int, offset: int) -> None:
        self.log.append((member, partition, offset, time.monotonic()))

    def offsets(self, member: str, partition: int, since: int = 0) -> list[int]:
        """The offsets of ``partition`` ``member`` handed out, from log entry ``since`` on."""
        return [o for m, p, o, _ in self.log[since:] if m == member and p == partition]


class HoldingListener:
    """Holds the first reconciliation that gives partitions up, once armed."""

    def __init__(self) -> None:
        self.armed = False
        self.revoking: set[TopicPartition] = set()
        self.holding = anyio.Event()
        self.go = anyio.Event()

    async def before_releasing_partitions(self, partition_ownership: dict[str, set[int]]) -> None:
        if not self.armed or self.holding.is_set():
            return
        self.revoking = {TopicPartition(t, p) for t, ps in partition_ownership.items() for p in ps}
        self.holding.set()
        await self.go.wait()

    async def before_starting_fetchers(
        self, consumer_id: str, assignment: dict[str, dict[int, ConsumerThreadId]]
    ) -> None:
        return None


def _config(cluster: LocalCluster, group: str) -> ConsumerConfig:
    return ConsumerConfig(
        group_id=group,
        group_coordinator="kafka",
        group_protocol="consumer",
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        auto_commit_interval_ms=500,
    )


def _member(c: ConsumerConnector) -> ConsumerProtocolCoordinator:
    member = c.coordinator
    assert isinstance(member, ConsumerProtocolCoordinator)
    return member


async def _until(condition: Callable[[], bool], limit_s: float = LIMIT_S) -> None:
    # Conditions over two members and their readers: no single event says they hold.
    with anyio.fail_after(limit_s):
        while True:
            if condition():
                return
            await anyio.sleep(0.05)


async def _drain(stream: KafkaStream, member: str, seen: Deliveries) -> None:
    async for msg in stream:
        seen.add(member, msg.partition, msg.offset)


async def _produce(cluster: LocalCluster, topic: str, first: int, n: int) -> None:
    await cluster.produce_to_partitions(
        topic, {p: [(b"k", b"%d" % (first + i)) for i in range(n)] for p in range(PARTITIONS)}
    )


def _refused(call: Callable[[], Any], tp: TopicPartition) -> PartitionNotAssignedError:
    with pytest.raises(PartitionNotAssignedError) as caught:
        call()
    assert caught.value.partition == tp
    assert tp not in caught.value.owned
    return caught.value


async def test_seek_and_pause_while_partitions_are_reconciled(
    kraft_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    cluster, topic = kraft_cluster, unique_topic
    await cluster.create_topic(topic, PARTITIONS)
    await _produce(cluster, topic, 0, FIRST)
    tps = {p: TopicPartition(topic, p) for p in range(PARTITIONS)}
    tp0 = tps[0]
    seen = Deliveries()
    listener = HoldingListener()
    async with (
        create_connector(_config(cluster, unique_group_id)) as a,
        create_connector(_config(cluster, unique_group_id)) as b,
        anyio.create_task_group() as tg,
    ):
        assert isinstance(a, ConnectorVerbs) and isinstance(b, ConnectorVerbs)
        try:
            a.set_consumer_rebalance_listener(listener)
            streams = await a.create_message_streams({topic: 1})
            tg.start_soon(_drain, streams[topic][0], "a", seen)
            assert a.assignment() == set(tps.values())
            # Partition 0 paused part-way, before the join; the rest read to the end.
            await _until(lambda: len(seen.offsets("a", 0)) >= 10)
            a.pause([tp0])
            paused_at = await a.position(tp0)
            await _until(
                lambda: all(len(seen.offsets("a", p)) == FIRST for p in range(1, PARTITIONS))
            )
            assert seen.offsets("a", 0) == list(range(paused_at))

            # b joins; a's reconciliation is held where it gives partitions up.
            listener.armed = True
            streams_b = await b.create_message_streams({topic: 1})
            tg.start_soon(_drain, streams_b[topic][0], "b", seen)
            with anyio.fail_after(LIMIT_S):
                await listener.holding.wait()

            # -- during the rebalance --------------------------------------------------
            assert _member(a).machine.state is MemberState.RECONCILING
            revoking = listener.revoking
            kept = a.assignment()
            assert len(revoking) == len(kept) == PARTITIONS // 2
            assert kept | revoking == set(tps.values()) and not kept & revoking
            assert not b.assignment() & revoking  # the broker waits for a's acknowledgement
            assert a.paused() == {tp0} & kept  # a pause on a partition given up ends with it
            sought, held = sorted(kept - {tp0})[:2]
            given_up = min(revoking)

            # A seek on a kept partition applies at once: the next record is the one sought.
            assert await a.position(sought) == FIRST
            mark = len(seen.log)
            a.seek(sought, SEEK_TO)
            assert await a.position(sought) == SEEK_TO
            a.pause([held])
            assert held in a.paused()
            assert await a.position(held) == FIRST
            # Refused on a partition being given up, with nothing done to the others.
            _refused(lambda: a.seek(given_up, 0), given_up)
            _refused(lambda: a.pause([given_up]), given_up)
            _refused(lambda: a.resume([given_up]), given_up)
            _refused(lambda: a.pause([sought, given_up]), given_up)
            assert sought not in a.paused()
            with pytest.raises(PartitionNotAssignedError):
                await a.position(given_up)
            with pytest.raises(PartitionNotAssignedError):
                await a.seek_to_beginning([sought, given_up])
            assert await a.position(sought) == SEEK_TO
            # Still inside the rebalance, the sought records arrive, in order.
            await _until(lambda: len(seen.offsets("a", sought.partition, mark)) >= 3)
            assert _member(a).machine.state is MemberState.RECONCILING
            assert seen.offsets("a", sought.partition, mark)[:3] == [
                SEEK_TO,
                SEEK_TO + 1,
                SEEK_TO + 2,
            ]
        finally:
            listener.go.set()

        # -- after it ----------------------------------------------------------------------
        def settled() -> bool:
            return (
                a.state is ConnectorState.RUNNING
                and b.state is ConnectorState.RUNNING
                and _member(a).machine.state is MemberState.STABLE
                and _member(b).machine.state is MemberState.STABLE
                and a.assignment() == kept
                and b.assignment() == revoking
            )

        await _until(settled)
        paused_now = {held} | ({tp0} & kept)
        assert a.paused() == paused_now
        await _produce(cluster, topic, FIRST, MORE)
        end = FIRST + MORE
        flowing = set(tps.values()) - paused_now

        def delivered(tp: TopicPartition) -> set[int]:
            return {o for _, p, o, _ in seen.log if p == tp.partition}

        await _until(lambda: all(delivered(tp) >= set(range(end)) for tp in flowing))
        # The paused partitions stayed paused: nothing more of them, the position unchanged.
        assert a.paused() == paused_now
        assert seen.offsets("a", held.partition)[-1] == FIRST - 1
        assert await a.position(held) == FIRST
        if tp0 in kept:
            assert seen.offsets("a", 0) == list(range(paused_at))
            assert await a.position(tp0) == paused_at
        else:  # given up while paused: b reads it from a's commit
            assert seen.offsets("b", 0) == list(range(paused_at, end))
        a.resume(paused_now)
        await _until(lambda: all(delivered(tp) >= set(range(end)) for tp in tps.values()))
        assert a.paused() == set()
        tg.cancel_scope.cancel()

    # Nothing lost; nothing twice but what the seek asked for again.
    counts = Counter((p, o) for _, p, o, _ in seen.log)
    assert set(counts) == {(p, o) for p in range(PARTITIONS) for o in range(FIRST + MORE)}
    again = {(sought.partition, o) for o in range(SEEK_TO, FIRST)}
    assert {k: n for k, n in counts.items() if n > 1} == dict.fromkeys(again, 2)
    for tp in revoking:  # the joiner started where a committed
        first_b = seen.offsets("b", tp.partition)[0]
        assert first_b == (paused_at if tp == tp0 else FIRST)
