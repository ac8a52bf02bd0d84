"""read_committed's filter (``kafka/transactions.py``) on synthetic logs (no servers).

Logs are generated as a transaction coordinator and producers would write them: transactional
batches of several producers interleaved with plain ones, each transaction ended by a COMMIT
or ABORT control batch, a producer starting a new transaction after its last one ended. What
read_committed must deliver is known from the generation (the records of committed
transactions and the plain ones), independently of the algorithm under test; the aborted
transaction list is the broker's for a fetch from a given offset (every aborted transaction
whose marker is at or past it). Every reader of fetched record sets is checked against it:
the fetcher's hand-over read through a stream (records and Arrow), ``parse_records``
(SimpleConsumer) and ``RecordColumns`` (Spark executors), with the native decoder and with
aiokafka's parser, compressed and not.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiozkconsumer import ConsumerConfig
from aiozkconsumer.fetcher import ConsumerFetcher, FetcherManager
from aiozkconsumer.kafka import native
from aiozkconsumer.kafka.transactions import (
    ABORT,
    COMMIT,
    AbortedBatch,
    AbortedTransactions,
    control_type,
    drop_aborted,
    isolation_level_id,
    stable_and_aborted,
)
from aiozkconsumer.records import PartitionTopicInfo, TopicPartition
from aiozkconsumer.simple_consumer import parse_records
from aiozkconsumer.stream import SHUTDOWN_COMMAND, ChunkQueue, KafkaStream

TP = TopicPartition("txn", 2)
TS = 1_700_000_000_000
PRODUCERS = (1000, 1001, 1002)
IDEMPOTENT = 2000  # a non-transactional producer with a producer id (idempotence)


@pytest.fixture(params=["native", "aiokafka"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each reader with the native decoder and with aiokafka's parser (as without the
    extension: ``AIOZKCONSUMER_NATIVE=0``)."""
    if request.param == "native":
        if not native.AVAILABLE:
            pytest.skip("the native decoder is not built")
    else:
        monkeypatch.setattr(native, "native", None)
        monkeypatch.setattr(native, "AVAILABLE", False)
    return str(request.param)


# ---- building logs ---------------------------------------------------------------------------


def data_batch(
    base_offset: int,
    values: list[bytes],
    *,
    producer_id: int = -1,
    transactional: bool = False,
    compression: int = 0,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        2, compression, int(transactional), producer_id, 0 if producer_id >= 0 else -1, 0, 1 << 22
    )
    for i, value in enumerate(values):
        assert builder.append(i, TS + i, b"k", value, [("h", value)]) is not None
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", base_offset)
    return bytes(raw)


def marker(offset: int, producer_id: int, kind: int) -> bytes:
    """A control batch (transactional + control attributes) holding one marker record."""
    builder = DefaultRecordBatchBuilder(2, 0, 1, producer_id, 0, -1, 1 << 20)
    key = struct.pack(">hh", 0, kind)
    assert builder.append(0, TS, key, struct.pack(">hi", 0, 7), []) is not None
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", offset)
    attrs = struct.unpack_from(">h", raw, 21)[0] | 0x30
    struct.pack_into(">h", raw, 21, attrs)
    struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))
    return bytes(raw)


@dataclass
class Log:
    """A partition's log: its batches' bytes, what read_committed must deliver, the aborts."""

    batches: list[tuple[int, int, bytes]] = field(default_factory=list)  # (base, next, bytes)
    committed: list[tuple[int, bytes]] = field(default_factory=list)  # (offset, value)
    everything: list[tuple[int, bytes]] = field(default_factory=list)
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, first, marker)
    end: int = 0

    def fetch_from(self, start_index: int) -> tuple[int, bytes, list[tuple[int, int]]]:
        """What a fetch from the start of batch ``start_index`` returns: ``(offset, records
        bytes, aborted transactions)`` (the broker's: every aborted transaction ending at or
        after the fetch offset and starting before the data's end)."""
        offset = self.batches[start_index][0]
        data = b"".join(raw for _, _, raw in self.batches[start_index:])
        aborted = [(pid, first) for pid, first, last in self.aborted if last >= offset]
        return offset, data, aborted


def build_log(ops: list[tuple[str, int, int, int]], finish: list[bool]) -> Log:
    """Turn generated operations into a log.

    ``("data", producer index, records, codec)``: a transactional batch (a transaction
    starts when its producer has none open); ``("end", producer index, commit?, _)``: the
    producer's marker, when it has a transaction open; ``("plain", idempotent?, records,
    codec)``: a non-transactional batch. ``finish``: how each transaction still open at the
    end ends (commit if true).
    """
    log = Log()
    open_txns: dict[int, tuple[int, list[tuple[int, bytes]]]] = {}  # pid -> (first, records)
    offset = 0

    def add(raw: bytes, n: int) -> None:
        nonlocal offset
        log.batches.append((offset, offset + n, raw))
        offset += n

    def end(pid: int, commit: bool) -> None:
        first, records = open_txns.pop(pid)
        if commit:
            log.committed.extend(records)
        else:
            log.aborted.append((pid, first, offset))
        add(marker(offset, pid, COMMIT if commit else ABORT), 1)

    for kind, a, b, codec in ops:
        if kind == "data":
            pid = PRODUCERS[a % len(PRODUCERS)]
            values = [b"t%d-%d" % (pid, offset + i) for i in range(b)]
            first, records = open_txns.setdefault(pid, (offset, []))
            records.extend((offset + i, v) for i, v in enumerate(values))
            log.everything.extend((offset + i, v) for i, v in enumerate(values))
            add(
                data_batch(offset, values, producer_id=pid, transactional=True, compression=codec),
                b,
            )
        elif kind == "end":
            pid = PRODUCERS[a % len(PRODUCERS)]
            if pid in open_txns:
                end(pid, bool(b))
        else:
            values = [b"p-%d" % (offset + i) for i in range(b)]
            log.committed.extend((offset + i, v) for i, v in enumerate(values))
            log.everything.extend((offset + i, v) for i, v in enumerate(values))
            pid = IDEMPOTENT if a else -1
            add(data_batch(offset, values, producer_id=pid, compression=codec), b)
    for i, pid in enumerate(sorted(open_txns)):
        end(pid, finish[i % len(finish)] if finish else True)
    log.committed.sort()
    log.end = offset
    return log


_op = st.one_of(
    st.tuples(st.just("data"), st.integers(0, 2), st.integers(1, 4), st.sampled_from([0, 0, 1, 3])),
    st.tuples(st.just("end"), st.integers(0, 2), st.integers(0, 1), st.just(0)),
    st.tuples(st.just("plain"), st.integers(0, 1), st.integers(1, 3), st.sampled_from([0, 2])),
)
logs = st.builds(
    build_log, st.lists(_op, min_size=1, max_size=30), st.lists(st.booleans(), max_size=3)
).filter(lambda log: bool(log.batches))


# ---- the algorithm on header fields ------------------------------------------------------------


def test_an_aborted_transaction_is_dropped_up_to_its_marker_only() -> None:
    state = AbortedTransactions([(7, 10)])
    assert not state.step(9, 7, True, None)  # before the transaction's first offset
    assert state.step(12, 7, True, None)  # in it
    assert not state.step(13, 8, True, None)  # another producer's
    assert not state.step(14, 7, False, None)  # the same producer, not transactional
    assert not state.step(15, 7, True, ABORT)  # its marker: the transaction ends
    assert not state.step(20, 7, True, None)  # the producer's next transaction
    assert not state


def test_a_commit_marker_does_not_end_an_aborted_transaction_of_the_producer() -> None:
    # As the Java client: only an ABORT marker takes the producer out of the set.
    state = AbortedTransactions([(7, 0)])
    assert state.step(3, 7, True, None)
    assert not state.step(4, 7, True, COMMIT)
    assert state.step(6, 7, True, None)


def test_no_aborted_transactions_drop_nothing() -> None:
    for aborted in (None, []):
        state = AbortedTransactions(aborted)
        assert not state and not state.step(5, 1, True, None)


def test_stable_and_aborted_of_every_response_shape() -> None:
    aborted = [(7, 10)]
    # aiokafka's v4 (no log start offset), v5-v10, v11 (a preferred read replica), and the
    # fetch connection's PartitionData (log start -1 before v5, no preferred read replica)
    assert stable_and_aborted([30, aborted, b"r"]) == (30, aborted)
    assert stable_and_aborted([30, 0, aborted, b"r"]) == (30, aborted)
    assert stable_and_aborted([30, 0, aborted, -1, b"r"]) == (30, aborted)
    assert stable_and_aborted([30, -1, None, b"r"]) == (30, None)
    assert stable_and_aborted([b"r"]) == (-1, None)  # before v4


def test_isolation_level_ids() -> None:
    assert isolation_level_id("read_uncommitted") == 0
    assert isolation_level_id("read_committed") == 1
    with pytest.raises(ValueError, match="isolation.level"):
        isolation_level_id("serializable")


def test_control_type_of_both_parsers() -> None:
    from aiokafka.record.memory_records import MemoryRecords

    raw = marker(5, 7, ABORT) + marker(6, 7, COMMIT)
    records = MemoryRecords(raw)
    kinds = []
    while records.has_next():
        batch = records.next_batch()
        assert batch is not None
        kinds.append(control_type(batch))
    assert kinds == [ABORT, COMMIT]
    if native.AVAILABLE:
        parsed = native.parse_record_set(raw, TP, True)
        assert parsed is not None
        assert [b.control_type for b in parsed[0]] == [ABORT, COMMIT]
        plain = native.parse_record_set(data_batch(0, [b"x"]), TP, True)
        assert plain is not None and plain[0][0].control_type == -1


# ---- every reader, on generated logs ------------------------------------------------------------


def _expected(log: Log, start: int, committed_only: bool) -> list[tuple[int, bytes]]:
    wanted = log.committed if committed_only else sorted(log.everything)
    return [(o, v) for o, v in wanted if o >= start]


def _config(isolation: str) -> ConsumerConfig:
    return ConsumerConfig(group_id="g", zookeeper_connect="h:1", isolation_level=isolation)


async def _through_stream(
    offset: int, data: bytes, aborted: list[tuple[int, int]], isolation: str, arrow: bool
) -> tuple[list[tuple[int, bytes]], int]:
    """The fetcher's hand-over of one fetch response, read through a stream to its end."""
    manager = FetcherManager(None, _config(isolation))  # type: ignore[arg-type]  # no fetches
    fetcher = ConsumerFetcher(manager, 0, 0)
    queue: ChunkQueue = ChunkQueue(maxsize=4)
    info = PartitionTopicInfo(TP.topic, TP.partition, queue, offset, offset, 1 << 24, "c")
    fetcher.add_partitions([info])
    await fetcher._enqueue(info, offset, bytearray(data), aborted)
    queue.put_nowait(SHUTDOWN_COMMAND)
    stream = KafkaStream(queue, -1, "c", "txn-0")
    got: list[tuple[int, bytes]] = []
    if arrow:
        async for rb in stream.arrow_batches(max_records=3):
            offsets, values = rb.column("offset").to_pylist(), rb.column("value").to_pylist()
            got.extend(zip(offsets, values, strict=True))
    else:
        async for batch in stream.batches(max_records=3):
            got.extend((m.offset, m.value) for m in batch if m.value is not None)
    return got, info.consumed_offset


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(log=logs, start=st.integers(0, 1000), arrow=st.booleans())
def test_a_stream_delivers_exactly_the_committed_records(
    decoder: str, log: Log, start: int, arrow: bool
) -> None:
    if arrow:
        pytest.importorskip("pyarrow")
    index = start % len(log.batches)
    offset, data, aborted = log.fetch_from(index)
    for isolation, committed_only in (("read_committed", True), ("read_uncommitted", False)):
        got, consumed = asyncio.run(_through_stream(offset, data, aborted, isolation, arrow))
        assert got == _expected(log, offset, committed_only)
        # Past every batch, aborted ones and markers included: a commit now is the log end.
        assert consumed == log.end


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(log=logs, start=st.integers(0, 1000))
def test_parse_records_delivers_exactly_the_committed_records(
    decoder: str, log: Log, start: int
) -> None:
    offset, data, aborted = log.fetch_from(start % len(log.batches))
    records, next_offset = parse_records(TP, offset, data, 1 << 24, aborted=aborted)
    assert [(m.offset, m.value) for m in records] == _expected(log, offset, True)
    assert next_offset == log.end
    records, _ = parse_records(TP, offset, data, 1 << 24)
    assert [(m.offset, m.value) for m in records] == _expected(log, offset, False)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(log=logs, start=st.integers(0, 1000))
def test_record_columns_hold_exactly_the_committed_records(
    decoder: str, log: Log, start: int
) -> None:
    pytest.importorskip("pyarrow")
    from aiozkconsumer.spark.columns import RecordColumns

    offset, data, aborted = log.fetch_from(start % len(log.batches))
    for given_aborted, committed_only in ((aborted, True), (None, False)):
        columns = RecordColumns(TP)
        assert columns.add_fetch(data, offset, 1 << 40, 1 << 24, given_aborted) == log.end
        rb = columns.take_batch()
        offsets, values = rb.column("offset").to_pylist(), rb.column("value").to_pylist()
        got = list(zip(offsets, values, strict=True))
        assert got == _expected(log, offset, committed_only)


def _batches(decoder: str, data: bytes) -> Iterator[Any]:
    if decoder == "native":
        parsed = native.parse_record_set(data, TP, True)
        assert parsed is not None
        yield from parsed[0]
        return
    from aiokafka.record.memory_records import MemoryRecords

    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch is not None
        yield batch


def test_drop_aborted_marks_native_batches_and_replaces_aiokafkas(decoder: str) -> None:
    log = build_log(
        [("data", 0, 2, 0), ("plain", 0, 1, 0), ("end", 0, 0, 0), ("data", 0, 1, 0)], [True]
    )
    offset, data, aborted = log.fetch_from(0)
    assert aborted == [(1000, 0)]
    batches = list(_batches(decoder, data))
    assert drop_aborted(batches, aborted) == 1
    if decoder == "native":
        assert [b.aborted for b in batches] == [True, False, False, False, False]
    else:
        assert batches[0] == AbortedBatch(0, 2, 1000)
        assert not any(isinstance(b, AbortedBatch) for b in batches[1:])
    assert drop_aborted(list(_batches(decoder, data)), None) == 0
