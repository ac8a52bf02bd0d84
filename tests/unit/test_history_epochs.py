"""The history checker's records on their own: the indexed produced log of a partition, an
epoch's holding (the rule that decides ownership overlaps) and the partition lists of events."""

from __future__ import annotations

import math

import pytest

from aiozkconsumer.testing._history_epochs import Epoch, PartitionLog, partition_entries


def epoch(end: float = math.inf, reason: str = "", last_delivery: float | None = None) -> Epoch:
    return Epoch(
        id=0,
        member="a",
        incarnation=1,
        session="0x1",
        generation=1,
        tp=("t", 0),
        start=10.0,
        claim_offset=-1,
        group_commit=-1,
        end=end,
        end_reason=reason,
        last_delivery_ts=last_delivery,
    )


# -- the indexed log -------------------------------------------------------------------------


def test_a_partition_log_indexes_offsets_with_gaps() -> None:
    log = PartitionLog.build([(0, "a"), (1, "b"), (5, "c"), (9, "d")])
    assert log.index == {0: 0, 1: 1, 5: 2, 9: 3}
    assert log.values == ["a", "b", "c", "d"]
    assert log.deliveries == [0, 0, 0, 0] and log.last_epoch == [-1, -1, -1, -1]
    assert all(math.isnan(t) for t in log.last_ts)
    assert log.max_delivered == -1
    # a gap (compacted records, transaction markers) is not a record
    assert log.first_index_at_or_after(2) == 2
    assert log.first_index_at_or_after(5) == 2
    assert log.first_index_at_or_after(10) == 4
    assert log.records_between(1, 9) == [1, 5]
    assert log.records_between(2, 5) == []
    assert log.records_between(6, 100) == [9]


# -- holding ---------------------------------------------------------------------------------


def test_an_epoch_ended_by_its_member_holds_until_that_end() -> None:
    assert epoch(20, "rebalance", last_delivery=12).hold_end == 20
    assert epoch(20, "shutdown", last_delivery=12).hold_end == 20
    assert epoch().hold_end == math.inf  # still open


@pytest.mark.parametrize("reason", ["session_lost", "crashed", "restarted", "lost"])
def test_an_epoch_lost_without_notice_holds_until_its_last_delivery(reason: str) -> None:
    assert epoch(20, reason, last_delivery=12).hold_end == 12
    assert epoch(20, reason).hold_end == 10  # nothing delivered: its start
    # a delivery recorded after the end (handed out as a zombie) does not extend it
    assert epoch(20, reason, last_delivery=25).hold_end == 20


def test_a_superseded_epoch_holds_until_its_last_delivery() -> None:
    superseded = epoch(20, "rebalance", last_delivery=12)
    superseded.superseded = True
    assert superseded.hold_end == 12


# -- partition lists of events ---------------------------------------------------------------


def test_partition_entries_read_topics_partitions_and_offsets() -> None:
    event = {
        "partitions": [
            {"topic": "t", "partition": "3", "offset": "7"},
            {"topic": "u", "partition": 0},
            {"topic": "u", "partition": 1, "offset": None},
        ]
    }
    assert partition_entries(event, "partitions") == [(("t", 3), 7), (("u", 0), -1), (("u", 1), -1)]
    assert partition_entries({}, "partitions") == []
    assert partition_entries({"offsets": None}, "offsets") == []
    with pytest.raises(KeyError):
        partition_entries({"offsets": [{"topic": "t"}]}, "offsets")
