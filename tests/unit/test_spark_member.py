"""``spark/member.py``: the source's group member, driven from synchronous calls.

Without servers: which member states allow planning, and the member's life on its portal —
joining, calls, leaving, a failed or hanging join — around a stand-in for the connector (the
member only uses the connectors' common API). ``tests/integration/test_spark.py`` and
``tests/integration/test_spark_kafka_groups.py`` run it against real groups.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from aiozkconsumer.base_connector import ConnectorState
from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.errors import NoBrokersError, OffsetStorageError
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.spark import member as member_module
from aiozkconsumer.spark.member import GroupMember, MemberSnapshot
from aiozkconsumer.spark.planning import parse_source_options

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)

OPTIONS = parse_source_options(
    {"zookeeper.connect": "127.0.0.1:1", "group.id": "member-test", "subscribe": "t"}
)


@pytest.mark.parametrize("state", list(ConnectorState))
def test_only_a_running_member_or_one_a_failed_rebalance_left_empty_plans(
    state: ConnectorState,
) -> None:
    owning = MemberSnapshot(state, (A,), {})
    empty = MemberSnapshot(state, (), {})
    assert owning.may_plan is (state is ConnectorState.RUNNING)
    assert empty.may_plan is (state in (ConnectorState.RUNNING, ConnectorState.REBALANCE_FAILED))


@dataclass
class _Stats:
    state: ConnectorState
    owned_partitions: tuple[TopicPartition, ...]
    committed_offsets: Mapping[TopicPartition, int]


@dataclass
class _Connector:
    """What ``GroupMember`` uses of a connector; records what it was asked."""

    config: ConsumerConfig
    join: Any = None  # awaited by create_message_streams: raise or hang there
    commit_error: Exception | None = None
    owned: tuple[TopicPartition, ...] = (A, B)
    committed: dict[TopicPartition, int] = field(default_factory=lambda: {A: 10, B: 20})
    subscribed: dict[str, int] | None = None
    commits: list[dict[TopicPartition, int]] = field(default_factory=list)
    left_on: list[str] = field(default_factory=list)
    consumer_id_string: str = "member-test_host-1"
    state: ConnectorState = ConnectorState.RUNNING
    rebalance_pending: bool = False

    async def create_message_streams(self, topic_count: dict[str, int]) -> None:
        self.subscribed = topic_count
        if self.join is not None:
            await self.join()

    def statistics(self) -> _Stats:
        return _Stats(self.state, self.owned, dict(self.committed))

    async def commit_offsets(self, offsets: dict[TopicPartition, int]) -> None:
        if self.commit_error is not None:
            raise self.commit_error
        self.commits.append(dict(offsets))
        self.committed.update(offsets)


@pytest.fixture
def connector(monkeypatch: pytest.MonkeyPatch) -> _Connector:
    made = _Connector(OPTIONS.config)

    @contextlib.asynccontextmanager
    async def create_connector(
        config: ConsumerConfig, *, fetch: bool = True
    ) -> AsyncIterator[_Connector]:
        assert config is OPTIONS.config and not fetch
        try:
            yield made
        finally:
            made.left_on.append(threading.current_thread().name)

    monkeypatch.setattr(member_module, "create_connector", create_connector)
    return made


def _member_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("zkkafka-member-test")]


def test_member_joins_answers_on_its_loop_and_leaves_when_stopped(connector: _Connector) -> None:
    member = GroupMember(OPTIONS)
    try:
        assert connector.subscribed == {"t": 1}
        assert member.consumer_id == "member-test_host-1"
        assert member.snapshot() == MemberSnapshot(ConnectorState.RUNNING, (A, B), {A: 10, B: 20})
        # Forward only, owned only: A goes back, C is another member's.
        assert member.commit({A: 5, B: 25, C: 7}) == {B: 25}
        assert connector.commits == [{B: 25}]
        assert member.commit({B: 25}) == {}  # nothing new: no request
        connector.commit_error = OffsetStorageError("offsets unreachable")
        assert member.commit({A: 11}) == {}  # logged; the next batch commits it
    finally:
        member.stop()
    assert connector.left_on == ["zkkafka-member-test"]  # left on the member's own loop
    assert _member_threads() == []
    with pytest.raises(RuntimeError, match="stopped"):  # its loop is gone
        member.snapshot()
    member.stop()  # idempotent


def test_a_failed_join_raises_its_error_and_leaves_no_thread(connector: _Connector) -> None:
    async def refused() -> None:
        raise NoBrokersError("nobody home")

    connector.join = refused
    with pytest.raises(NoBrokersError, match="nobody home"):
        GroupMember(OPTIONS)
    assert connector.left_on and _member_threads() == []


def test_a_join_past_its_time_limit_is_given_up(connector: _Connector) -> None:
    connector.join = anyio.sleep_forever
    with pytest.raises(TimeoutError):
        GroupMember(OPTIONS, start_timeout_s=0.2)
    assert connector.left_on and _member_threads() == []
