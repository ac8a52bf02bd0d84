"""``spark/batch_records.py``: the batch log's ZooKeeper node, path and JSON.

Pure, without servers (``BatchMark`` and ``last_batch``, the Kafka encoding, are checked in
``tests/integration/test_spark_kafka_groups.py``).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from aiozkconsumer.errors import MalformedZookeeperDataError
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.spark.batch_records import (
    BATCH_LOG_VERSION,
    BatchRecord,
    batch_log_path,
    mark_offsets,
)

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


def test_the_batch_log_node_lives_under_the_group() -> None:
    assert batch_log_path("billing") == "/consumers/billing/spark/batch_id"
    assert batch_log_path("billing", "sink-2") == "/consumers/billing/spark/sink-2"
    for bad in ("", "a/b", ".", ".."):
        with pytest.raises(ValueError, match="ZooKeeper path element"):
            batch_log_path("billing", bad)


def test_a_record_is_the_documented_json_and_round_trips() -> None:
    record = BatchRecord(
        7,
        False,
        {TopicPartition("payments", 3): (980, 1010), TopicPartition("payments", 0): (1200, 1450)},
    )
    data = record.encode()
    assert json.loads(data) == {
        "version": BATCH_LOG_VERSION,
        "batch_id": 7,
        "committed": False,
        "offsets": {"payments": {"0": [1200, 1450], "3": [980, 1010]}},
    }
    assert data.startswith(b'{"version":1,"batch_id":7,"committed":false,"offsets":{"payments":')
    assert BatchRecord.decode(data) == record
    assert BatchRecord.decode(BatchRecord(0, True).encode()) == BatchRecord(0, True, {})


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b'{"version":2,"batch_id":1,"committed":true,"offsets":{}}',
        b'{"version":1,"batch_id":-1,"committed":true,"offsets":{}}',
        b'{"version":1,"batch_id":1,"committed":"yes","offsets":{}}',
        b'{"version":1,"batch_id":1,"committed":true}',
        b'{"version":1,"batch_id":1,"committed":true,"offsets":{"t":{"x":[0,1]}}}',
        b'{"version":1,"batch_id":1,"committed":true,"offsets":{"t":{"0":[0]}}}',
    ],
    ids=[
        "empty",
        "not-an-object",
        "unknown-version",
        "negative-id",
        "committed-not-bool",
        "no-offsets",
        "partition-not-a-number",
        "range-not-a-pair",
    ],
)
def test_anything_else_in_the_node_is_malformed(data: bytes) -> None:
    with pytest.raises(MalformedZookeeperDataError, match="not a batch log"):
        BatchRecord.decode(data, "/consumers/g/spark/batch_id")


def test_marks_before_fn_leave_the_offsets_and_after_it_move_them_forward_only() -> None:
    record = BatchRecord(4, False, {A: (100, 150), B: (0, 10), C: (5, 6)})
    known = {A: 100, C: 9}  # B has no committed offset; C's is past the batch
    owned = {A, B}  # C went to another member
    assert mark_offsets(record, known, owned, committed=False) == {A: 100, B: 0}
    assert mark_offsets(record, known, owned, committed=True) == {A: 150, B: 10}
    assert mark_offsets(record, {A: 170}, {A, C}, committed=True) == {A: 170, C: 6}
    assert mark_offsets(record, known, set(), committed=True) == {}
