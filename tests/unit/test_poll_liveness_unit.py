"""Poll liveness (``max.poll.interval.ms``) without servers: the pure check, the STALE state,
and what a stream reports of its reader's hold."""

from __future__ import annotations

import struct

import anyio
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from aiozkconsumer.group.state import (
    TRANSITIONS,
    MemberEvent,
    MemberState,
    MemberStateMachine,
    PollCheck,
    check_poll_interval,
)
from aiozkconsumer.interceptors import Interceptors
from aiozkconsumer.records import FetchedDataChunk, MessageAndMetadata, PartitionTopicInfo
from aiozkconsumer.stream import ChunkQueue, KafkaStream

S, E = MemberState, MemberEvent

# -- the pure check ---------------------------------------------------------------------


def test_nobody_holds_nothing_expires_and_the_next_look_is_an_interval_away() -> None:
    assert check_poll_interval({}, 100.0, 3.0) == PollCheck((), 0.0, 3.0)
    assert check_poll_interval({"a-0": None, "b-0": None}, 100.0, 3.0) == PollCheck((), 0.0, 3.0)


def test_a_hold_below_the_interval_sets_the_next_look_at_its_expiry() -> None:
    check = check_poll_interval({"a-0": 99.0, "b-0": 98.5, "c-0": None}, 100.0, 3.0)
    assert check.expired == ()
    assert check.longest_s == pytest.approx(1.5)
    assert check.next_check_s == pytest.approx(1.5)  # b-0 expires at 101.5


def test_a_hold_of_the_interval_or_more_expires_as_the_java_poll_timer() -> None:
    # Timer.isExpired: elapsed >= timeout.
    check = check_poll_interval({"b-1": 97.0, "a-0": 90.0, "c-0": 99.9}, 100.0, 3.0)
    assert check.expired == ("a-0", "b-1")
    assert check.longest_s == pytest.approx(10.0)
    assert check.next_check_s == 0.0


# -- the STALE state ----------------------------------------------------------------------


@pytest.mark.parametrize("state", [S.STABLE, S.UNJOINED, S.FENCED])
def test_a_poll_timeout_makes_a_member_stale_and_a_join_ends_it(state: MemberState) -> None:
    m = MemberStateMachine()
    m.state = state
    assert m.handle(E.POLL_EXPIRED) is S.STALE
    assert not m.may_heartbeat and not m.is_member and not m.rebalancing
    # A heartbeat sent before the leave may still be answered, or fenced: it stays stale.
    assert m.handle(E.HEARTBEAT_ANSWERED) is S.STALE
    assert m.handle(E.FENCED) is S.STALE
    assert m.handle(E.JOIN) is S.JOINING


def test_only_a_settled_member_can_expire_and_a_stale_one_can_leave_for_good() -> None:
    expiring = {s for s, row in TRANSITIONS.items() if E.POLL_EXPIRED in row}
    assert expiring == {S.STABLE, S.UNJOINED, S.FENCED}
    assert TRANSITIONS[S.STALE][E.LEAVE] is S.LEAVING
    assert E.SYNCED not in TRANSITIONS[S.STALE]  # nothing is taken without a join


# -- the reader's hold, as a stream reports it --------------------------------------------


def _batch(base: int, n: int) -> object:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(n):
        builder.append(i, 1_700_000_000_000 + i, None, b"v", [])
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", base)
    records = MemoryRecords(bytes(raw))
    return records.next_batch()


def _stream(interceptors: Interceptors | None = None) -> tuple[KafkaStream, ChunkQueue, object]:
    queue = ChunkQueue(maxsize=4)
    info = PartitionTopicInfo("t", 0, queue, 0, 0, 1 << 20, "c")
    return KafkaStream(queue, -1, "c", "t-0", interceptors=interceptors), queue, info


async def test_a_stream_registers_with_its_queue_and_holds_nothing_before_its_first_ask() -> None:
    stream, queue, _ = _stream()
    assert queue.reader is stream and stream.name == "t-0"
    assert stream.held_since() is None


async def test_the_hold_starts_at_the_ask_and_a_waiting_reader_holds_nothing() -> None:
    stream, queue, info = _stream()
    queue.put_nowait(FetchedDataChunk([_batch(0, 3)], info, 0))  # type: ignore[arg-type]
    it = stream.__aiter__()
    await it.__anext__()
    first = stream.held_since()
    assert first is not None
    await it.__anext__()  # the next ask moves the clock on
    second = stream.held_since()
    assert second is not None and second >= first
    await it.__anext__()
    woken = anyio.Event()
    stream.wake_on_poll(woken)
    async with anyio.create_task_group() as tg:
        tg.start_soon(it.__anext__)  # nothing queued: it waits, i.e. it polls
        await woken.wait()
        assert stream.held_since() is None
        queue.put_nowait(FetchedDataChunk([_batch(3, 1)], info, 3))  # type: ignore[arg-type]
    # Handed out after the wait: held since the wait ended, not since the ask.
    after = stream.held_since()
    assert after is not None and after >= second
    stream.wake_on_poll(None)


async def test_batches_count_as_asks_too() -> None:
    stream, queue, info = _stream()
    queue.put_nowait(FetchedDataChunk([_batch(0, 5)], info, 0))  # type: ignore[arg-type]
    batches = stream.batches(max_records=2)
    assert len(await batches.__anext__()) == 2
    held = stream.held_since()
    assert held is not None
    assert len(await batches.__anext__()) == 2
    again = stream.held_since()
    assert again is not None and again >= held


class _Twice:
    """An interceptor that doubles every record (the second comes from the buffer)."""

    def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
        return [r for r in records for _ in range(2)]

    def on_commit(self, offsets: object) -> None:
        pass

    def close(self) -> None:
        pass


async def test_an_intercepting_reader_asking_for_a_buffered_record_is_polling() -> None:
    stream, queue, info = _stream(Interceptors([_Twice()]))  # type: ignore[list-item]
    queue.put_nowait(FetchedDataChunk([_batch(0, 1)], info, 0))  # type: ignore[arg-type]
    it = stream.__aiter__()
    await it.__anext__()
    held = stream.held_since()
    assert held is not None
    await it.__anext__()  # from the interceptor's buffer: the iterator is not asked
    again = stream.held_since()
    assert again is not None and again >= held
