"""``spark/driver_plan.py``: where a micro-batch ends and which offsets a commit writes.

Pure functions, without servers.
"""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.errors import InvalidConfigError
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.spark.driver_plan import batch_read_ends, forward_offsets, plan_ends
from aiozkconsumer.spark.executor import ZkKafkaBatchPartition
from aiozkconsumer.spark.planning import DataLossError

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def test_a_batch_ends_at_the_log_end_or_the_available_now_target_never_before_its_start() -> None:
    owned = [A, B, C]
    starts = {A: 10, B: 50, C: 0}
    latest = {A: 100, B: 60, C: 0}
    assert plan_ends(owned, starts, {}, latest, None, fail_on_data_loss=True, max_rows=None) == (
        {A: 100, B: 60, C: 0},
        {},
    )
    # AvailableNow: the target caps the end, and a target behind the start stays at the start.
    target = {A: 40, B: 30, C: 0}
    assert plan_ends(owned, starts, {}, latest, target, fail_on_data_loss=True, max_rows=None) == (
        {A: 40, B: 50, C: 0},
        {},
    )


def test_max_rows_shares_the_limit_between_the_partitions() -> None:
    ends, rebased = plan_ends(
        [A, B],
        {A: 0, B: 0},
        {A: 0},
        {A: 300, B: 100},
        None,
        fail_on_data_loss=True,
        max_rows=40,
    )
    assert ends == {A: 30, B: 10} and rebased == {A: 0}


def test_a_start_beyond_the_log_end_fails_or_moves_to_the_log_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    starts = {A: 500, B: 5}
    rebased = {B: 5}
    latest = {A: 120, B: 9}
    with pytest.raises(
        DataLossError, match=r"offset 500 of \[t,0\] is beyond its log end offset 120"
    ):
        plan_ends([A, B], starts, rebased, latest, None, fail_on_data_loss=True, max_rows=None)
    with caplog.at_level(logging.WARNING, logger="aiozkconsumer.spark.driver_plan"):
        ends, new_rebased = plan_ends(
            [A, B], starts, rebased, latest, None, fail_on_data_loss=False, max_rows=3
        )
    # A starts again at its log end (recorded as a rebased start): nothing to read there, so
    # the rate limit gives all three rows to B.
    assert ends == {A: 120, B: 8} and new_rebased == {A: 120, B: 5}
    assert "continuing at the log end" in caplog.text
    assert starts == {A: 500, B: 5} and rebased == {B: 5}  # the inputs are left as they were


def test_commits_only_go_forward_and_only_for_owned_partitions() -> None:
    known = {A: 10, B: 20}
    ends = {A: 10, B: 25, C: 3}
    assert forward_offsets(ends, known, {A, B}) == {B: 25}
    assert forward_offsets(ends, known, {A, B, C}) == {B: 25, C: 3}
    assert forward_offsets(ends, known) == {B: 25, C: 3}  # no member: every partition
    assert forward_offsets({A: 0}, {}) == {A: 0}  # no committed offset yet
    assert forward_offsets(ends, known, set()) == {}


def _task(
    config: ConsumerConfig, tp: TopicPartition, start: int, end: int, *, commit: bool = True
) -> ZkKafkaBatchPartition:
    return ZkKafkaBatchPartition(
        topic=tp.topic,
        partition=tp.partition,
        start=start,
        end=end,
        bootstrap_servers="127.0.0.1:9092",
        config=config,
        commit_on_success=commit,
    )


def test_a_batch_read_commits_the_largest_end_planned_per_group_and_partition() -> None:
    one = ConsumerConfig(group_id="one", zookeeper_connect="127.0.0.1:2181")
    two = ConsumerConfig(group_id="two", zookeeper_connect="127.0.0.1:2181")
    tasks = [
        _task(one, A, 0, 50),
        _task(one, A, 50, 100),  # minPartitions split A in two
        _task(one, B, 7, 7),  # nothing to read: its end is still committed
        _task(two, A, 30, 40),
    ]
    assert batch_read_ends(tasks) == {one: {A: 100, B: 7}, two: {A: 40}}
    assert batch_read_ends(reversed(tasks)) == {one: {A: 100, B: 7}, two: {A: 40}}


def test_a_batch_read_without_commit_on_success_or_without_tasks_commits_nothing() -> None:
    config = ConsumerConfig(group_id="g", zookeeper_connect="127.0.0.1:2181")
    with pytest.raises(InvalidConfigError, match="reads no zkkafka batch source"):
        batch_read_ends([])
    with pytest.raises(InvalidConfigError, match="commitOnSuccess"):
        batch_read_ends([_task(config, A, 0, 5), _task(config, B, 0, 5, commit=False)])
