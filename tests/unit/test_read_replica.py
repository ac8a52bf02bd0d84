"""Fetch from the closest replica (KIP-392) without servers: the rules, then the fetch loops.

The rules (``read_replica.py``) are the Java client's (``SubscriptionState`` /
``AbstractFetch.selectReadReplica`` / ``FetchCollector.handleInitializeErrors``); the loops
(``fetcher.py``) are driven with hand-made fetch responses and a metadata stand-in, and must
move a partition to the loop of the broker the rules choose, with its position unchanged.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from aiozkconsumer import ConsumerConfig, fetcher
from aiozkconsumer.fetcher import ConsumerFetcher, FetcherManager
from aiozkconsumer.kafka.fetch_response import FetchResponse
from aiozkconsumer.kafka.replicas import preferred_read_replicas
from aiozkconsumer.queues import ChunkQueue
from aiozkconsumer.read_replica import (
    CLEARING_ERRORS,
    OFFSET_OUT_OF_RANGE,
    ErrorRoute,
    ReadReplicas,
    Selection,
)
from aiozkconsumer.records import PartitionTopicInfo, TopicPartition

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)
LEADER, REPLICA, THIRD = 0, 2, 1
NOT_LEADER_OR_FOLLOWER = 6
UNKNOWN_LEADER_EPOCH = 75


def everywhere(node: int) -> bool:
    return True


def nowhere(node: int) -> bool:
    return False


# -- the rules --------------------------------------------------------------------------------


def test_a_named_replica_is_followed_until_it_expires() -> None:
    r: ReadReplicas[TopicPartition] = ReadReplicas(1000)
    assert r.select(TP, LEADER, 0, everywhere) == Selection(LEADER)
    assert r.update(TP, REPLICA, 100)
    assert r.select(TP, LEADER, 100, everywhere) == Selection(REPLICA)
    assert r.select(TP, LEADER, 1100, everywhere) == Selection(REPLICA)  # not past it yet
    assert r.select(TP, LEADER, 1101, everywhere) == Selection(LEADER)
    assert TP not in r
    assert r.statistics().expired == 1


def test_naming_the_same_replica_again_does_not_extend_it() -> None:
    r: ReadReplicas[TopicPartition] = ReadReplicas(1000)
    assert r.update(TP, REPLICA, 0)
    assert not r.update(TP, REPLICA, 900)
    assert r.expires_at_ms(TP) == 1000
    assert r.update(TP, THIRD, 950)  # another replica: a new lease
    assert r.expires_at_ms(TP) == 1950
    assert r.preferred(TP, 1500) == THIRD


def test_no_replica_named_changes_nothing() -> None:
    r: ReadReplicas[TopicPartition] = ReadReplicas(1000)
    assert not r.update(TP, -1, 0)
    assert TP not in r
    r.update(TP, REPLICA, 0)
    assert not r.update(TP, -1, 10)
    assert r.preferred(TP, 10) == REPLICA


def test_a_replica_not_online_sends_the_partition_to_its_leader_with_a_refresh() -> None:
    r: ReadReplicas[TopicPartition] = ReadReplicas(1000)
    r.update(TP, REPLICA, 0)
    assert r.select(TP, LEADER, 10, nowhere) == Selection(LEADER, refresh_metadata=True)
    assert TP not in r  # forgotten: the leader names one again
    assert r.select(TP, LEADER, 10, everywhere) == Selection(LEADER)
    assert r.statistics().offline == 1


def test_the_online_check_is_asked_about_the_replica() -> None:
    r: ReadReplicas[TopicPartition] = ReadReplicas(1000)
    r.update(TP, REPLICA, 0)
    asked: list[int] = []

    def online(node: int) -> bool:
        asked.append(node)
        return node == REPLICA

    assert r.select(TP, LEADER, 1, online).node_id == REPLICA
    assert asked == [REPLICA]


def test_out_of_range_from_the_leader_resets_and_from_a_replica_goes_to_the_leader() -> None:
    r: ReadReplicas[TopicPartition] = ReadReplicas(1000)
    assert r.on_error(TP, OFFSET_OUT_OF_RANGE, from_leader=True) is ErrorRoute.RESET
    r.update(TP, REPLICA, 0)
    assert r.on_error(TP, OFFSET_OUT_OF_RANGE, from_leader=False) is ErrorRoute.LEADER
    assert TP not in r
    assert r.statistics().out_of_range == 1
    # A replica whose lease ended while its answer was on the way: still not a reset.
    assert r.on_error(TP, OFFSET_OUT_OF_RANGE, from_leader=False) is ErrorRoute.LEADER


@pytest.mark.parametrize("code", sorted(CLEARING_ERRORS))
def test_errors_that_refresh_metadata_forget_the_replica(code: int) -> None:
    r: ReadReplicas[TopicPartition] = ReadReplicas(1000)
    r.update(TP, REPLICA, 0)
    assert r.on_error(TP, code, from_leader=False) is ErrorRoute.REFRESH
    assert TP not in r
    assert r.statistics().errors == 1


def test_other_errors_keep_the_replica() -> None:
    r: ReadReplicas[TopicPartition] = ReadReplicas(1000)
    r.update(TP, REPLICA, 0)
    assert r.on_error(TP, UNKNOWN_LEADER_EPOCH, from_leader=False) is ErrorRoute.REFRESH
    assert r.preferred(TP, 1) == REPLICA


def test_a_failed_request_forgets_the_replicas_of_its_partitions() -> None:
    r: ReadReplicas[TopicPartition] = ReadReplicas(1000)
    r.update(TP, REPLICA, 0)
    r.update(OTHER, REPLICA, 0)
    assert r.on_failure([TP, TopicPartition("t", 9)]) == [TP]
    assert TP not in r and OTHER in r


def test_retain_keeps_the_owned_partitions_only() -> None:
    r: ReadReplicas[TopicPartition] = ReadReplicas(1000)
    r.update(TP, REPLICA, 0)
    r.update(OTHER, REPLICA, 0)
    r.retain([OTHER])
    assert len(r) == 1 and OTHER in r


def test_the_expiry_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        ReadReplicas(0)


# -- the fetch loops ----------------------------------------------------------------------------


class _TaskGroup:
    """Records the fetch loops the manager starts (they are not run here)."""

    def __init__(self) -> None:
        self.started: list[Any] = []

    def start_soon(self, fn: Any, *args: Any) -> None:
        self.started.append(args)


def _kafka(brokers: set[int], replicas: list[int]) -> Any:
    """The parts of a KafkaClient the loops read: aiokafka's metadata of one topic."""
    cluster = SimpleNamespace(
        _brokers=dict.fromkeys(brokers),
        _partitions={"t": {p: SimpleNamespace(replicas=replicas) for p in (0, 1)}},
        _last_successful_refresh_ms=1.0,
    )
    return SimpleNamespace(raw=SimpleNamespace(cluster=cluster), broker_address=str)


class Clock:
    def __init__(self) -> None:
        self.ms = 1000.0

    def __call__(self) -> float:
        return self.ms


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(fetcher, "_now_ms", c)
    return c


def _manager(rack: str | None = "r2") -> FetcherManager:
    config = ConsumerConfig(
        group_id="g", zookeeper_connect="h:1", client_rack=rack, refresh_leader_backoff_ms=1
    )
    manager = FetcherManager(_kafka({0, 1, 2}, [0, 1, 2]), config)
    manager._tg = _TaskGroup()
    manager.read_replicas = ReadReplicas(60_000)
    return manager


def _info(tp: TopicPartition = TP, offset: int = 5) -> PartitionTopicInfo:
    queue: ChunkQueue = ChunkQueue(4)
    return PartitionTopicInfo(tp.topic, tp.partition, queue, offset, offset, 1 << 20, "c")


def _response(
    error: int = 0, preferred: dict[TopicPartition, int] | None = None, tp: TopicPartition = TP
) -> FetchResponse:
    return FetchResponse(
        topics=[(tp.topic, [(tp.partition, error, 10, -1, 0, None, None)])],
        preferred_read_replicas=dict(preferred or {}),
    )


def _hand_out(manager: FetcherManager, pti: PartitionTopicInfo) -> ConsumerFetcher:
    """As the leader finder does: the loop of the broker ``_read_from`` chooses."""
    node = manager._read_from(pti, LEADER)
    loop = manager._fetcher((node, 0))
    loop.add_partitions([pti])
    return loop


def _where(manager: FetcherManager, tp: TopicPartition = TP) -> list[int]:
    return [node for (node, _), f in manager.fetchers.items() if tp in f.partitions]


async def test_the_leader_names_a_replica_and_the_partition_moves_there(clock: Clock) -> None:
    manager = _manager()
    pti = _info()
    leader_loop = _hand_out(manager, pti)
    assert manager.rack_id == "r2"
    assert await leader_loop._process_response(_response(preferred={TP: REPLICA}), {TP: 5}) == []
    assert _where(manager) == [LEADER]  # moved before the next fetch, not during this one
    leader_loop._reroute()
    assert _where(manager) == [REPLICA]
    assert pti.fetched_offset == 5  # the same position, asked of the replica
    started = manager._tg.started
    assert [loop.node_id for (loop,) in started] == [LEADER, REPLICA]
    # Named again later (back at the leader before it expired): the lease is not extended.
    expiry = manager.read_replicas.expires_at_ms(TP)
    clock.ms += 1000
    assert not manager.read_replicas.update(TP, REPLICA, clock.ms)
    assert manager.read_replicas.expires_at_ms(TP) == expiry


async def test_the_partition_goes_back_to_its_leader_when_the_replica_expires(
    clock: Clock,
) -> None:
    manager = _manager()
    pti = _info()
    leader_loop = _hand_out(manager, pti)
    await leader_loop._process_response(_response(preferred={TP: REPLICA}), {TP: 5})
    leader_loop._reroute()
    replica_loop = manager.fetchers[(REPLICA, 0)]
    replica_loop._reroute()
    assert _where(manager) == [REPLICA]  # nothing due
    clock.ms += 60_000
    replica_loop._reroute()
    assert _where(manager) == [REPLICA]  # at the expiry, not yet past it
    clock.ms += 1
    replica_loop._reroute()
    assert _where(manager) == [LEADER]
    assert manager.read_replica_statistics().expired == 1


async def test_out_of_range_from_the_replica_is_fetched_again_at_the_leader(clock: Clock) -> None:
    manager = _manager()
    pti = _info()
    leader_loop = _hand_out(manager, pti)
    await leader_loop._process_response(_response(preferred={TP: REPLICA}), {TP: 5})
    leader_loop._reroute()
    replica_loop = manager.fetchers[(REPLICA, 0)]
    await replica_loop._process_response(_response(error=OFFSET_OUT_OF_RANGE), {TP: 5})
    assert _where(manager) == [LEADER]
    assert pti.fetched_offset == 5  # not reset
    assert TP not in manager.read_replicas
    assert manager.read_replica_statistics().out_of_range == 1


async def test_not_leader_or_follower_from_the_replica_asks_the_leader_finder(clock: Clock) -> None:
    manager = _manager()
    manager.partition_map[TP] = pti = _info()
    leader_loop = _hand_out(manager, pti)
    await leader_loop._process_response(_response(preferred={TP: REPLICA}), {TP: 5})
    leader_loop._reroute()
    replica_loop = manager.fetchers[(REPLICA, 0)]
    await replica_loop._process_response(_response(error=NOT_LEADER_OR_FOLLOWER), {TP: 5})
    assert _where(manager) == []
    assert TP in manager._no_leader  # metadata refreshed, then handed out again
    assert TP not in manager.read_replicas
    assert _hand_out(manager, pti).node_id == LEADER


async def test_an_unknown_leader_epoch_at_the_replica_keeps_it(clock: Clock) -> None:
    manager = _manager()
    manager.partition_map[TP] = pti = _info()
    leader_loop = _hand_out(manager, pti)
    await leader_loop._process_response(_response(preferred={TP: REPLICA}), {TP: 5})
    leader_loop._reroute()
    replica_loop = manager.fetchers[(REPLICA, 0)]
    await replica_loop._process_response(_response(error=UNKNOWN_LEADER_EPOCH), {TP: 5})
    assert TP in manager._no_leader
    del manager._no_leader[TP]
    assert _hand_out(manager, pti).node_id == REPLICA  # as the Java client: asked again


async def test_a_replica_gone_from_the_metadata_sends_the_partition_back(clock: Clock) -> None:
    manager = _manager()
    manager.partition_map[TP] = pti = _info()
    leader_loop = _hand_out(manager, pti)
    await leader_loop._process_response(_response(preferred={TP: REPLICA}), {TP: 5})
    leader_loop._reroute()
    replica_loop = manager.fetchers[(REPLICA, 0)]
    manager.kafka = _kafka({0, 1}, [0, 1, 2])  # the replica's broker left the metadata
    replica_loop._reroute()
    assert _where(manager) == [] and TP in manager._no_leader
    assert manager.read_replica_statistics().offline == 1
    del manager._no_leader[TP]
    assert _hand_out(manager, pti).node_id == LEADER


async def test_a_replica_reassigned_away_is_not_followed(clock: Clock) -> None:
    manager = _manager()
    manager.kafka = _kafka({0, 1, 2}, [0, 1])  # broker 2 is no replica of the partition
    manager.partition_map[TP] = pti = _info()
    leader_loop = _hand_out(manager, pti)
    await leader_loop._process_response(_response(preferred={TP: REPLICA}), {TP: 5})
    leader_loop._reroute()
    assert _where(manager) == [] and TP in manager._no_leader


async def test_a_failed_fetch_forgets_the_replicas_and_the_leader_finder_uses_the_leader(
    clock: Clock,
) -> None:
    manager = _manager()
    manager.partition_map[TP] = pti = _info()
    manager.read_replicas.update(TP, REPLICA, clock.ms)
    replica_loop = _hand_out(manager, pti)
    assert replica_loop.node_id == REPLICA
    manager.read_replicas.on_failure(replica_loop.partitions)
    replica_loop._remove_with_error(list(replica_loop.partitions))
    del manager._no_leader[TP]
    assert _hand_out(manager, pti).node_id == LEADER


async def test_a_partition_to_reset_goes_to_its_leader(clock: Clock) -> None:
    manager = _manager()
    pti = _info(offset=-1)
    manager.read_replicas.update(TP, REPLICA, clock.ms)
    assert _hand_out(manager, pti).node_id == LEADER  # ListOffsets is the leader's
    assert TP not in manager.read_replicas
    pti = _info(OTHER)
    manager.read_replicas.update(OTHER, REPLICA, clock.ms)
    replica_loop = _hand_out(manager, pti)
    assert replica_loop.node_id == REPLICA
    pti.fetched_offset = -1  # reset meanwhile
    replica_loop._routed_changed = True
    replica_loop._reroute()
    assert _where(manager, OTHER) == [LEADER]


async def test_removed_partitions_forget_their_replica(clock: Clock) -> None:
    manager = _manager()
    manager.partition_map[TP] = pti = _info()
    manager.read_replicas.update(TP, REPLICA, clock.ms)
    _hand_out(manager, pti)
    manager.remove_partitions([TP])
    assert TP not in manager.read_replicas and TP not in manager.leaders
    assert _where(manager) == []


async def test_without_a_preferred_replica_nothing_moves(clock: Clock) -> None:
    manager = _manager(rack=None)
    assert manager.rack_id == ""
    pti = _info()
    leader_loop = _hand_out(manager, pti)
    await leader_loop._process_response(_response(), {TP: 5})
    assert not leader_loop._routed
    assert _where(manager) == [LEADER]


def test_aiokafkas_v11_response_names_the_replica_too() -> None:
    response = SimpleNamespace(
        topics=[("t", [(0, 0, 10, -1, 0, None, 2, b""), (1, 0, 10, -1, 0, None, -1, b"")])]
    )
    assert preferred_read_replicas(response) == {TP: 2}
    old = SimpleNamespace(topics=[("t", [(0, 0, 10, -1, 0, None, b"")])])
    assert preferred_read_replicas(old) == {}
