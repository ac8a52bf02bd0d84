"""Unit tests of aiozkconsumer.offsets: the pure decisions and the stores' bookkeeping.

No servers here. Kafka's and ZooKeeper's own behaviour is tested against the real cluster in
``test_offsets_integration.py``; the small in-memory ZooKeeper below only records which nodes
the ZooKeeper store writes (checkpoint bookkeeping).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiozkconsumer.cluster import KafkaClient
from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.errors import (
    CommitFencedError,
    ConsumerClosedError,
    KafkaConnectionError,
    NoBrokersError,
    OffsetCommitError,
    OffsetFetchError,
    OffsetStorageError,
    ZookeeperConnectionError,
)
from aiozkconsumer.kafka.channel import ChannelError
from aiozkconsumer.offsets import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NO_ANSWER,
    NO_OFFSET,
    NONE,
    NOT_COORDINATOR,
    OFFSET_METADATA_TOO_LARGE,
    UNKNOWN_TOPIC_OR_PARTITION,
    DualOffsetStore,
    FetchAction,
    KafkaOffsetStore,
    ZookeeperOffsetStore,
    classify_commit_errors,
    classify_fetch_response,
    default_fetch_timeout_ms,
    dual_fetch_result,
    error_name,
    make_offset_store,
)
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.zk import layout

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
T2 = TopicPartition("t", 2)
U0 = TopicPartition("u", 0)

REQUEST_TIMED_OUT = 7
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
ILLEGAL_GENERATION = 22


# -- commit classification (commitOffsets' fold) ---------------------------------------


def test_commit_all_accepted() -> None:
    v = classify_commit_errors({T0: NONE, T1: NONE})
    assert v.committed
    assert v.accepted == {T0, T1}
    assert not v.failed and not v.refresh_coordinator and not v.to_retry


@pytest.mark.parametrize("code", [NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE])
def test_commit_coordinator_moved_means_rediscover_and_retry(code: int) -> None:
    v = classify_commit_errors({T0: NONE, T1: code})
    assert not v.committed
    assert v.refresh_coordinator
    assert v.accepted == {T0}
    assert v.to_retry == {T1}


def test_commit_metadata_too_large_alone_counts_as_committed() -> None:
    v = classify_commit_errors({T0: NONE, T1: OFFSET_METADATA_TOO_LARGE})
    assert v.committed
    assert not v.retryable
    assert v.failed == {T1: OFFSET_METADATA_TOO_LARGE}
    assert v.to_retry == frozenset()


def test_commit_metadata_too_large_with_another_error_retries_only_the_other() -> None:
    v = classify_commit_errors({T0: OFFSET_METADATA_TOO_LARGE, T1: COORDINATOR_LOAD_IN_PROGRESS})
    assert not v.committed
    assert not v.refresh_coordinator
    assert v.to_retry == {T1}


@pytest.mark.parametrize(
    "code",
    [
        COORDINATOR_LOAD_IN_PROGRESS,
        UNKNOWN_TOPIC_OR_PARTITION,
        ILLEGAL_GENERATION,
        TOPIC_AUTHORIZATION_FAILED,
        NO_ANSWER,
    ],
)
def test_commit_other_errors_are_retryable_failures(code: int) -> None:
    v = classify_commit_errors({T0: code})
    assert not v.committed and v.retryable and not v.refresh_coordinator
    assert v.to_retry == {T0}


@given(st.dictionaries(st.integers(0, 20), st.sampled_from([0, 3, 12, 14, 15, 16, 22, -1])))
def test_commit_verdict_partitions_the_input(codes_by_partition: dict[int, int]) -> None:
    errors = {TopicPartition("t", p): c for p, c in codes_by_partition.items()}
    v = classify_commit_errors(errors)
    assert v.accepted | set(v.failed) == set(errors)
    assert not v.accepted & set(v.failed)
    assert v.to_retry <= set(v.failed)
    assert v.committed == all(c in (NONE, OFFSET_METADATA_TOO_LARGE) for c in errors.values())


# -- fetch classification (fetchOffsets' loop) -----------------------------------------


def test_fetch_done_fills_every_requested_partition() -> None:
    v = classify_fetch_response(
        [T0, T1, T2, U0],
        NONE,
        {T0: (5, NONE), T1: (-1, NONE), U0: (9, UNKNOWN_TOPIC_OR_PARTITION)},
    )
    assert v.action is FetchAction.DONE
    assert v.offsets == {T0: 5, T1: NO_OFFSET, T2: NO_OFFSET, U0: NO_OFFSET}


@pytest.mark.parametrize("code", [NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE])
def test_fetch_coordinator_moved_on_a_partition(code: int) -> None:
    v = classify_fetch_response([T0, T1], NONE, {T0: (5, NONE), T1: (-1, code)})
    assert v.action is FetchAction.REDISCOVER
    assert not v.offsets


@pytest.mark.parametrize("code", [NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE])
def test_fetch_group_level_error_is_never_read_as_no_offset(code: int) -> None:
    # OffsetFetch v2+ puts coordinator errors at the top and may list partitions as -1/NONE.
    v = classify_fetch_response([T0], code, {T0: (-1, NONE)})
    assert v.action is FetchAction.REDISCOVER
    assert None in v.errors


def test_fetch_load_in_progress_retries() -> None:
    assert (
        classify_fetch_response([T0], COORDINATOR_LOAD_IN_PROGRESS, {}).action is FetchAction.RETRY
    )
    v = classify_fetch_response([T0], NONE, {T0: (-1, COORDINATOR_LOAD_IN_PROGRESS)})
    assert v.action is FetchAction.RETRY


def test_fetch_other_retriable_error_retries() -> None:
    v = classify_fetch_response([T0], NONE, {T0: (-1, REQUEST_TIMED_OUT)})
    assert v.action is FetchAction.RETRY


@pytest.mark.parametrize(
    ("group_error", "partition_error"),
    [(GROUP_AUTHORIZATION_FAILED, NONE), (NONE, TOPIC_AUTHORIZATION_FAILED)],
)
def test_fetch_non_retriable_error_fails(group_error: int, partition_error: int) -> None:
    v = classify_fetch_response([T0], group_error, {T0: (-1, partition_error)})
    assert v.action is FetchAction.FAIL
    assert "AUTHORIZATION_FAILED" in v.describe()


def test_error_name() -> None:
    assert error_name(NOT_COORDINATOR) == "NOT_COORDINATOR (16)"
    assert error_name(OFFSET_METADATA_TOO_LARGE) == "OFFSET_METADATA_TOO_LARGE (12)"


# -- dual: the max rule ----------------------------------------------------------------


def test_dual_takes_the_larger_offset_per_partition() -> None:
    zk = {T0: 50, T1: 20, T2: NO_OFFSET}
    kafka = {T0: 10, T1: 30, T2: NO_OFFSET, U0: 4}
    assert dual_fetch_result(zk, kafka) == {T0: 50, T1: 30, T2: NO_OFFSET, U0: 4}


offsets_maps = st.dictionaries(
    st.builds(TopicPartition, st.sampled_from(["a", "b"]), st.integers(0, 5)),
    st.integers(-1, 10**12),
)


@given(offsets_maps, offsets_maps)
def test_dual_max_rule_property(
    zk: dict[TopicPartition, int], kafka: dict[TopicPartition, int]
) -> None:
    result = dual_fetch_result(zk, kafka)
    assert set(result) == set(zk) | set(kafka)
    for tp, offset in result.items():
        assert offset == max(zk.get(tp, NO_OFFSET), kafka.get(tp, NO_OFFSET))
        assert offset in (zk.get(tp), kafka.get(tp))


# -- retry count and time limits (driver bookkeeping; no Kafka reached) -----------------


class CountingGetter:
    """A Kafka getter whose every call fails the way the connector's does without brokers."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls = 0
        self.error = error or NoBrokersError("no brokers found in ZooKeeper under /brokers/ids")

    async def __call__(self) -> KafkaClient:
        self.calls += 1
        raise self.error


def _kafka_store(getter: CountingGetter, **kw: Any) -> KafkaOffsetStore:
    kw.setdefault("backoff_ms", 1)
    kw.setdefault("socket_timeout_ms", 1000)
    return KafkaOffsetStore(getter, "g", **kw)


@pytest.mark.parametrize("retries", [0, 1, 3])
async def test_commit_makes_one_plus_retries_attempts(retries: int) -> None:
    getter = CountingGetter()
    store = _kafka_store(getter)
    with pytest.raises(OffsetCommitError) as info:
        await store.commit({T0: 5, T1: 6}, retries=retries)
    assert getter.calls == 1 + retries
    assert info.value.attempts == 1 + retries
    assert info.value.committed == 0
    assert set(info.value.failed) == {T0, T1}
    assert "no brokers" in info.value.failed[T0]
    assert isinstance(info.value, OffsetStorageError)
    assert store.kafka_commits == 0


async def test_commit_backs_off_between_attempts() -> None:
    getter = CountingGetter(KafkaConnectionError("refused"))
    store = _kafka_store(getter, backoff_ms=50)
    began = time.monotonic()
    with pytest.raises(OffsetCommitError):
        await store.commit({T0: 1}, retries=2)
    assert time.monotonic() - began >= 2 * 0.05
    assert getter.calls == 3


async def test_commit_of_nothing_contacts_nobody() -> None:
    getter = CountingGetter()
    store = _kafka_store(getter)
    assert await store.commit({}, retries=5) == 0
    assert await store.commit({T0: -1, T1: NO_OFFSET}, retries=5) == 0
    assert getter.calls == 0


async def test_negative_retries_rejected() -> None:
    with pytest.raises(ValueError, match="retries"):
        await _kafka_store(CountingGetter()).commit({T0: 1}, retries=-1)
    with pytest.raises(ValueError, match="retries"):
        await ZookeeperOffsetStore(FakeZk(), "g").commit({T0: 1}, retries=-1)  # type: ignore[arg-type]


async def test_fetch_gives_up_after_its_time_limit() -> None:
    getter = CountingGetter()
    store = _kafka_store(getter, backoff_ms=20, fetch_timeout_ms=200)
    began = time.monotonic()
    with pytest.raises(OffsetFetchError) as info:
        await store.fetch([T1, T0])
    elapsed = time.monotonic() - began
    assert 0.2 <= elapsed < 2
    assert getter.calls >= 2
    # The time limit may cut the last attempt off before it reaches the getter.
    assert getter.calls <= info.value.attempts <= getter.calls + 1
    assert info.value.partitions == (T0, T1)
    assert "200 ms" in str(info.value) and "no brokers" in str(info.value)


async def test_fetch_of_nothing_contacts_nobody() -> None:
    getter = CountingGetter()
    assert await _kafka_store(getter).fetch([]) == {}
    assert getter.calls == 0


async def test_closed_kafka_store_refuses_work() -> None:
    store = _kafka_store(CountingGetter())
    await store.close()
    with pytest.raises(ConsumerClosedError):
        await store.commit({T0: 1})
    with pytest.raises(ConsumerClosedError):
        await store.fetch([T0])
    assert "closed" in repr(store)


def test_kafka_store_rejects_non_positive_times() -> None:
    with pytest.raises(ValueError, match="backoff_ms"):
        _kafka_store(CountingGetter(), backoff_ms=0)
    with pytest.raises(ValueError, match="fetch_timeout_ms"):
        _kafka_store(CountingGetter(), fetch_timeout_ms=0)


def test_default_fetch_timeout() -> None:
    assert default_fetch_timeout_ms(10000, 5) == 60000
    store = KafkaOffsetStore(CountingGetter(), "g", backoff_ms=1000, socket_timeout_ms=10000)
    assert store.fetch_timeout_ms == 60000


# -- the Kafka store over a scripted channel (the answers the channel would return) ------


class ScriptedChannel:
    """Stands in for the store's ``OffsetsChannel``: each call returns or raises the next
    scripted answer and records what was asked."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked: list[Any] = []
        self.forgotten = 0
        self.coordinator: int | None = 1
        self.generations: list[dict[str, Any]] = []

    def _next(self, asked: Any) -> Any:
        self.asked.append(asked)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def commit(self, offsets: dict[TopicPartition, int], **generation: Any) -> Any:
        self.generations.append(generation)
        return self._next(dict(offsets))

    async def fetch(self, tps: list[TopicPartition]) -> Any:
        return self._next(list(tps))

    def forget_coordinator(self) -> None:
        self.forgotten += 1
        self.coordinator = None

    def close(self) -> None:
        self.coordinator = None


def _scripted_store(*answers: Any) -> tuple[KafkaOffsetStore, ScriptedChannel]:
    store = _kafka_store(CountingGetter())
    channel = ScriptedChannel(*answers)
    store._channel = channel  # type: ignore[assignment]
    return store, channel


async def test_commit_resends_only_the_failing_partitions() -> None:
    store, channel = _scripted_store(
        {T0: NONE, T1: NOT_COORDINATOR, T2: OFFSET_METADATA_TOO_LARGE},
        {T1: NONE},
    )
    assert await store.commit({T0: 5, T1: 6, T2: 7}, retries=1) == 2
    assert channel.asked == [{T0: 5, T1: 6, T2: 7}, {T1: 6}]
    assert channel.forgotten == 1  # NOT_COORDINATOR: look the coordinator up again
    assert store.kafka_commits == 2


async def test_commit_result_names_what_failed_and_why() -> None:
    store, _ = _scripted_store({T0: NONE, T1: ILLEGAL_GENERATION}, ChannelError("no answer"))
    result = await store.commit_with_result({T0: 5, T1: 6}, retries=1)
    assert result.accepted == {T0: 5}
    assert result.failed == {T1: "no answer"}
    assert result.attempts == 2


async def test_generation_over_refuses_a_kafka_coordinated_commit_without_retrying() -> None:
    store, channel = _scripted_store({T0: ILLEGAL_GENERATION, T1: ILLEGAL_GENERATION})
    store._group_generation = lambda: (7, "member-1")
    with pytest.raises(CommitFencedError) as info:
        await store.commit({T0: 5, T1: 6}, retries=3)
    assert info.value.fenced == {T0, T1}
    assert len(channel.asked) == 1  # not retried
    assert channel.generations == [{"generation": 7, "member_id": "member-1"}]
    assert store.kafka_commits == 0


async def test_fatal_channel_error_stops_the_retries() -> None:
    store, channel = _scripted_store(ChannelError("broker too old", fatal=True))
    with pytest.raises(OffsetCommitError) as info:
        await store.commit({T0: 5}, retries=3)
    assert info.value.attempts == 1 and len(channel.asked) == 1
    store, _ = _scripted_store(ChannelError("broker too old", fatal=True))
    with pytest.raises(OffsetFetchError, match="broker too old"):
        await store.fetch([T0])


async def test_fetch_rediscovers_then_reads_the_answer() -> None:
    store, channel = _scripted_store(
        (NONE, {T0: (0, NOT_COORDINATOR)}),
        (NONE, {T0: (42, NONE), T1: (-1, UNKNOWN_TOPIC_OR_PARTITION)}),
    )
    assert await store.fetch([T1, T0]) == {T0: 42, T1: NO_OFFSET}
    assert channel.asked == [[T0, T1], [T0, T1]]
    assert channel.forgotten == 1
    assert "coordinator unknown" in repr(store)


# -- ZooKeeper store checkpoint bookkeeping --------------------------------------------


class FakeZk:
    """The ZkClient calls the ZooKeeper offset store makes unfenced, over a dict; records
    writes."""

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.writes: list[str] = []

    async def get_data(self, path: str) -> bytes | None:
        return self.nodes.get(path)

    async def get_many(self, paths: Iterable[str]) -> list[tuple[bytes, None] | None]:
        datas = [await self.get_data(path) for path in paths]
        return [None if data is None else (data, None) for data in datas]

    async def set_or_create(self, path: str, data: bytes) -> None:
        self.nodes[path] = data
        self.writes.append(path)


def _zk_store() -> tuple[ZookeeperOffsetStore, FakeZk]:
    zk = FakeZk()
    return ZookeeperOffsetStore(zk, "g"), zk  # type: ignore[arg-type]


async def test_zk_store_writes_only_changed_offsets() -> None:
    store, zk = _zk_store()
    assert await store.commit({T0: 5, T1: 6}) == 2
    assert await store.commit({T0: 5, T1: 6}) == 0
    assert await store.commit({T0: 5, T1: 7}) == 1
    assert zk.writes == [
        layout.offset_path("g", "t", 0),
        layout.offset_path("g", "t", 1),
        layout.offset_path("g", "t", 1),
    ]
    assert zk.nodes[layout.offset_path("g", "t", 1)] == b"7"
    assert store.commits == store.zookeeper_commits == 3
    assert store.kafka_commits == 0


async def test_zk_store_fetch_seeds_the_checkpoint() -> None:
    store, zk = _zk_store()
    zk.nodes[layout.offset_path("g", "t", 0)] = b"42"
    assert await store.fetch([T0, T1]) == {T0: 42, T1: NO_OFFSET}
    assert await store.commit({T0: 42}) == 0
    assert zk.writes == []


async def test_zk_store_skips_negative_offsets_and_ignores_retries() -> None:
    store, zk = _zk_store()
    assert await store.commit({T0: -1}, retries=3) == 0
    assert zk.writes == []


async def test_zk_store_forget_drops_the_checkpoint() -> None:
    store, zk = _zk_store()
    await store.commit({T0: 5})
    store.forget([T0])
    assert await store.commit({T0: 5}) == 1
    assert len(zk.writes) == 2
    await store.close()  # a no-op; the store stays usable
    assert await store.commit({T0: 6}) == 1


class FailingZk(FakeZk):
    """A FakeZk whose calls on one path fail as the ZooKeeper client does when cut off."""

    def __init__(self, failing: str) -> None:
        super().__init__()
        self.failing = failing

    async def get_data(self, path: str) -> bytes | None:
        if path == self.failing:
            raise ZookeeperConnectionError("connection lost")
        return await super().get_data(path)

    async def set_or_create(self, path: str, data: bytes) -> None:
        if path == self.failing:
            raise ZookeeperConnectionError("connection lost")
        await super().set_or_create(path, data)


async def test_zk_commit_writes_the_others_when_one_write_fails() -> None:
    zk = FailingZk(layout.offset_path("g", "t", 1))
    store = ZookeeperOffsetStore(zk, "g")  # type: ignore[arg-type]
    with pytest.raises(ZookeeperConnectionError):  # the failure itself, not a group
        await store.commit({T0: 5, T1: 6, T2: 7})
    assert sorted(zk.writes) == [layout.offset_path("g", "t", 0), layout.offset_path("g", "t", 2)]
    assert store.commits == 2
    # The failed partition kept no checkpoint: the next commit writes it, and only it.
    zk.failing = ""
    assert await store.commit({T0: 5, T1: 6, T2: 7}) == 1


async def test_zk_fetch_raises_the_failure_itself() -> None:
    zk = FailingZk(layout.offset_path("g", "t", 1))
    zk.nodes[layout.offset_path("g", "t", 0)] = b"3"
    store = ZookeeperOffsetStore(zk, "g")  # type: ignore[arg-type]
    with pytest.raises(ZookeeperConnectionError):
        await store.fetch([T0, T1, T2])


async def test_dual_commit_writes_nothing_to_zookeeper_when_kafka_fails() -> None:
    zk_store, zk = _zk_store()
    getter = CountingGetter()
    dual = DualOffsetStore(zk_store, _kafka_store(getter))
    with pytest.raises(OffsetCommitError):
        await dual.commit({T0: 5}, retries=1)
    assert getter.calls == 2
    assert zk.writes == []
    assert dual.zookeeper_commits == dual.kafka_commits == 0


# -- choosing a store ------------------------------------------------------------------


def _config(**kw: Any) -> ConsumerConfig:
    return ConsumerConfig(group_id="g", zookeeper_connect="127.0.0.1:2181", **kw)


@pytest.mark.parametrize(
    ("storage", "dual", "expected"),
    [
        ("zookeeper", None, ZookeeperOffsetStore),
        ("zookeeper", False, ZookeeperOffsetStore),
        ("zookeeper", True, DualOffsetStore),
        ("kafka", None, DualOffsetStore),
        ("kafka", True, DualOffsetStore),
        ("kafka", False, KafkaOffsetStore),
    ],
)
def test_make_offset_store(storage: str, dual: bool | None, expected: type) -> None:
    config = _config(offsets_storage=storage, dual_commit_enabled=dual)
    store = make_offset_store(config, FakeZk(), CountingGetter())  # type: ignore[arg-type]
    assert type(store) is expected


def test_make_offset_store_passes_the_channel_settings() -> None:
    config = _config(
        offsets_storage="kafka",
        dual_commit_enabled=False,
        offsets_channel_backoff_ms=250,
        offsets_channel_socket_timeout_ms=3000,
        offsets_commit_max_retries=2,
    )
    store = make_offset_store(config, FakeZk(), CountingGetter())  # type: ignore[arg-type]
    assert isinstance(store, KafkaOffsetStore)
    assert (store.group, store.backoff_ms, store.socket_timeout_ms) == ("g", 250, 3000)
    assert store.fetch_timeout_ms == 3000 * 3
