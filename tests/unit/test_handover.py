"""The hand-over's order on every coordinator, without servers: commit before the listener
before the coordinator's own step before the ownership drops the partitions; and the
acquisition at the committed offsets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import anyio
import pytest

from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.errors import ConsumerError, OffsetStorageError
from aiozkconsumer.fetcher import FetcherManager
from aiozkconsumer.group.classic import KafkaCoordinator
from aiozkconsumer.group.consumer_protocol import ConsumerProtocolCoordinator
from aiozkconsumer.group.state import MemberEvent, MemberState
from aiozkconsumer.handover import Handover, MemberParts
from aiozkconsumer.metrics import ConsumerMetrics
from aiozkconsumer.ownership import OwnershipState
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.subscription import ConsumerThreadId, StaticTopicCount

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


class _Journal:
    """Records each step of a hand-over, with what the ownership state held at the time."""

    def __init__(self, ownership: OwnershipState) -> None:
        self.ownership = ownership
        self.steps: list[tuple[str, Any]] = []
        self.commit_error: Exception | None = None
        self.committed: dict[TopicPartition, int] = {}

    def note(self, what: str, detail: Any) -> None:
        self.steps.append((what, detail))

    # the offset store's part
    async def fetch(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        tps = list(tps)
        self.note("fetch offsets", sorted(tps))
        return {tp: self.committed.get(tp, -1) for tp in tps}

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        self.note("forget", sorted(tps))

    # the committer's part
    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.note("commit", dict(offsets))
        if self.commit_error is not None:
            raise self.commit_error

    # the listener's part
    async def before_releasing_partitions(self, ownership: dict[str, set[int]]) -> None:
        tps = [TopicPartition(t, p) for t, ps in ownership.items() for p in ps]
        still_owned = all(tp in self.ownership for tp in tps)
        self.note("listener release", (ownership, still_owned))

    async def before_starting_fetchers(
        self, consumer_id: str, view: dict[str, dict[int, ConsumerThreadId]]
    ) -> None:
        self.note("listener start", view)


def _parts(*, auto_commit: bool = True) -> tuple[MemberParts, _Journal]:
    config = ConsumerConfig(
        group_id="g",
        group_coordinator="kafka",
        bootstrap_servers="127.0.0.1:1",
        auto_commit_enable=auto_commit,
    )
    metrics = ConsumerMetrics(config.effective_client_id, config.group_id)
    ownership = OwnershipState(4)
    ownership.add_queue("t", ConsumerThreadId("g_m", 0), ownership.new_queue())
    journal = _Journal(ownership)
    fetcher = FetcherManager(None, config, metrics)  # type: ignore[arg-type]
    handover = Handover(
        config=config,
        consumer_id="g_m",
        ownership=ownership,
        fetcher=fetcher,
        offset_store=journal,  # type: ignore[arg-type]
        metrics=metrics,
        cluster=None,  # type: ignore[arg-type]  # not fetching: never asked for a client
        commit=journal.commit,
        task_group=lambda: None,  # type: ignore[arg-type,return-value]
        fetch_enabled=False,
    )
    handover.listener = journal
    topic_count = StaticTopicCount("g_m", {"t": 1})
    parts = MemberParts(
        config=config,
        consumer_id="g_m",
        cluster=None,  # type: ignore[arg-type]
        offset_store=journal,  # type: ignore[arg-type]
        fetcher=fetcher,
        ownership=ownership,
        metrics=metrics,
        handover=handover,
        topic_count=lambda: topic_count,
        task_group=lambda: None,  # type: ignore[arg-type,return-value]
        is_closing=lambda: False,
        fetch_enabled=False,
    )
    return parts, journal


def _own(parts: MemberParts, offsets: Mapping[TopicPartition, int]) -> None:
    own = parts.ownership
    queues = {tp: own.queue_for(tp.topic, ConsumerThreadId("g_m", 0)) for tp in offsets}
    parts.handover.acquire(queues, offsets)


def _ignore(_reason: str) -> None:
    pass


def _names(journal: _Journal) -> list[str]:
    return [what for what, _ in journal.steps]


async def test_release_commits_then_tells_the_listener_then_steps_then_drops() -> None:
    parts, journal = _parts()
    _own(parts, {T0: 5, T1: 7})
    stepped: list[bool] = []

    async def step(released: Mapping[TopicPartition, Any]) -> None:
        journal.note("owner nodes", sorted(released))
        stepped.append(T0 in parts.ownership)

    released = await parts.handover.release([T0, T2], step=step)
    assert sorted(released) == [T0]  # T2 was not owned
    assert _names(journal) == ["commit", "listener release", "owner nodes", "forget"]
    assert journal.steps[0][1] == {T0: 5}
    assert journal.steps[1][1] == ({"t": {0}}, True)  # the listener sees it still owned
    assert stepped == [True]
    assert parts.ownership.owned() == (T1,)


async def test_a_failed_commit_is_logged_and_the_partitions_go_all_the_same(
    caplog: pytest.LogCaptureFixture,
) -> None:
    parts, journal = _parts()
    _own(parts, {T0: 5})
    journal.commit_error = OffsetStorageError("the coordinator is away")
    await parts.handover.release([T0])
    assert _names(journal) == ["commit", "listener release", "forget"]
    assert parts.ownership.owned() == ()
    assert "commit before releasing 1 partition(s) failed" in caplog.text


async def test_a_listener_that_raises_fails_the_release_and_keeps_the_partition_owned() -> None:
    parts, journal = _parts()
    _own(parts, {T0: 5})

    class Broken:
        async def before_releasing_partitions(self, _: object) -> None:
            raise ValueError("user bug")

    parts.handover.listener = Broken()
    with pytest.raises(ConsumerError, match="user bug"):
        await parts.handover.release([T0])
    assert parts.ownership.owned() == (T0,)  # the next attempt releases it again
    assert not parts.ownership.registry[T0].active  # but no record of it is handed out


async def test_no_commit_when_told_not_to_or_with_auto_commit_off() -> None:
    for auto_commit, commit in ((True, False), (False, True)):
        parts, journal = _parts(auto_commit=auto_commit)
        _own(parts, {T0: 5})
        await parts.handover.release([T0], commit=commit)
        assert _names(journal) == ["listener release", "forget"]


def test_drop_neither_commits_nor_tells_the_listener() -> None:
    parts, journal = _parts()
    _own(parts, {T0: 5, T1: 6})
    dropped = parts.handover.drop([T1])
    assert sorted(dropped) == [T1]
    assert _names(journal) == ["forget"]
    assert parts.ownership.owned() == (T0,)


async def test_acquire_starts_at_the_committed_offsets_with_their_fences() -> None:
    parts, _ = _parts()
    own = parts.ownership
    queue = own.queue_for("t", ConsumerThreadId("g_m", 0))
    new = parts.handover.acquire({T0: queue, T1: queue}, {T0: 3, T1: -1}, fences={T0: 9, T1: 10})
    assert {tp: (p.consumed_offset, p.fetched_offset, p.fence) for tp, p in new.items()} == {
        T0: (3, 3, 9),
        T1: (-1, -1, 10),
    }
    assert own.owned() == (T0, T1)
    assert dict(own.committed) == {T0: 3}  # none committed yet: nothing recorded


async def test_classic_member_gives_all_up_before_joining_committing_only_in_a_generation() -> None:
    for generation, commits in ((4, True), (-1, False)):
        parts, journal = _parts()
        _own(parts, {T0: 5, T1: 6})
        member = KafkaCoordinator(parts, group=None, request_rebalance=_ignore)  # type: ignore[arg-type]
        member.generation = generation
        totals = [0, 0, 0]
        await member._begin(totals)
        assert totals == [0, 2, 0]
        expected = ["listener release", "forget"]
        assert _names(journal) == (["commit", *expected] if commits else expected)
        assert parts.ownership.owned() == ()
        assert member.machine.state is MemberState.JOINING


async def test_consumer_protocol_member_revokes_only_what_the_broker_took_then_acquires() -> None:
    parts, journal = _parts()
    _own(parts, {T0: 5, T1: 6})
    journal.steps.clear()
    journal.committed = {T2: 11}
    member = ConsumerProtocolCoordinator(parts, group=None, request_rebalance=_ignore)  # type: ignore[arg-type]
    kept, released, acquired = await member._take({T1, T2}, always_tell_listener=False)
    assert (kept, released, acquired) == (1, 1, 1)
    assert _names(journal) == [
        "commit",
        "listener release",
        "forget",
        "fetch offsets",
        "listener start",
    ]
    assert journal.steps[0][1] == {T0: 5}
    assert parts.ownership.owned() == (T1, T2)
    assert parts.ownership.registry[T2].consumed_offset == 11
    journal.steps.clear()
    assert await member._take({T1, T2}, always_tell_listener=False) == (2, 0, 0)
    assert journal.steps == []  # nothing moved: nobody is told
    member.machine.handle(MemberEvent.JOIN)
    assert member.machine.state is MemberState.JOINING


async def test_a_running_fetcher_takes_up_owned_partitions_it_does_not_fetch() -> None:
    """An attempt that failed after acquiring (listener, Kafka client) left partitions owned
    and unfetched; the next start adds them, not only that attempt's new ones."""
    parts, _ = _parts()
    fetcher = parts.fetcher
    _own(parts, {T0: 1, T1: 2})
    own = parts.ownership
    t0, t1 = own.registry[T0], own.registry[T1]
    fetcher._scope = anyio.CancelScope()  # running (the loops themselves are not needed)
    try:
        await fetcher.ensure_fetching([t0], [t0], None)
        assert fetcher.partition_map == {T0: t0}
        await fetcher.ensure_fetching([t0, t1], [], None)  # t1 owned, never fetched
        assert fetcher.partition_map == {T0: t0, T1: t1}
        assert set(fetcher.without_leader()) == {T0, T1}  # the leader finder looks for them
    finally:
        fetcher._scope = None
