"""Consumer interceptors: the chain's rules and the streams' use of it (no servers)."""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping

import pytest
from _interceptor_fixtures import Failing, Recording
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from aiozkconsumer.errors import ConsumerTimeoutError, InvalidConfigError, MessageSizeTooLargeError
from aiozkconsumer.interceptors import ConsumerInterceptor, Interceptors
from aiozkconsumer.records import (
    FetchedDataChunk,
    MessageAndMetadata,
    PartitionTopicInfo,
    TopicPartition,
)
from aiozkconsumer.stream import (
    SHUTDOWN_COMMAND,
    ChunkQueue,
    ConsumerIterator,
    InterceptingIterator,
    KafkaStream,
)

LOGGER = "aiozkconsumer.interceptors"


def batch(base_offset: int, n: int) -> object:
    """One magic-2 record batch holding offsets base_offset .. base_offset + n - 1."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(n):
        builder.append(i, 1_700_000_000_000 + i, b"k%d" % (base_offset + i), b"v%d" % i, [])
    raw = bytearray(builder.build())
    raw[0:8] = struct.pack(">q", base_offset)
    records = MemoryRecords(bytes(raw))
    b = records.next_batch()
    assert b is not None and not records.has_next()
    return b


def chunk(info: PartitionTopicInfo, base_offset: int, n: int) -> FetchedDataChunk:
    return FetchedDataChunk([batch(base_offset, n)], info, base_offset)


def setup(
    *interceptors: ConsumerInterceptor, timeout_ms: int = -1, maxsize: int = 4
) -> tuple[ChunkQueue, PartitionTopicInfo, KafkaStream]:
    queue: ChunkQueue = ChunkQueue(maxsize=maxsize)
    info = PartitionTopicInfo("t", 0, queue, 0, 0, 1 << 20, "c")
    stream = KafkaStream(queue, timeout_ms, "c", "t-0", interceptors=Interceptors(interceptors))
    return queue, info, stream


class DropEven(Recording):
    def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
        super().on_consume(records)
        return [r for r in records if r.offset % 2]


class DropAll(Recording):
    def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
        super().on_consume(records)
        return []


class Upper(Recording):
    def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
        return [r._replace(value=(r.value or b"").upper()) for r in records]


class Twice(Recording):
    def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
        return [r for r in records for _ in range(2)]


class ReturnsNone(Recording):
    def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
        return None  # type: ignore[return-value]


# -- the streams -------------------------------------------------------------------------


def test_without_interceptors_the_plain_iterator_is_used() -> None:
    queue: ChunkQueue = ChunkQueue(maxsize=1)
    for given in (None, Interceptors()):
        stream = KafkaStream(queue, -1, "c", "t-0", interceptors=given)
        assert stream.__aiter__() is stream.iterator
        assert type(stream.iterator) is ConsumerIterator
    _, _, stream = setup(Recording())
    assert isinstance(stream.__aiter__(), InterceptingIterator)
    assert stream.__aiter__() is stream.__aiter__()
    assert type(stream.iterator) is ConsumerIterator


async def test_every_record_passes_once_through_on_consume() -> None:
    seen = Recording()
    queue, info, stream = setup(seen)
    queue.put_nowait(chunk(info, 0, 3))
    queue.put_nowait(chunk(info, 3, 2))
    queue.put_nowait(SHUTDOWN_COMMAND)
    got = [m.offset async for m in stream]
    assert got == [0, 1, 2, 3, 4]
    assert [m.offset for m in seen.consumed] == got
    assert seen.calls == 5  # one record per call when iterating record by record
    assert info.consumed_offset == 5


async def test_every_batch_passes_once_through_on_consume() -> None:
    seen = Recording()
    queue, info, stream = setup(seen)
    queue.put_nowait(chunk(info, 0, 5))
    queue.put_nowait(chunk(info, 5, 5))
    queue.put_nowait(SHUTDOWN_COMMAND)
    sizes = [len(b) async for b in stream.batches(max_records=4)]
    assert sizes == [4, 4, 2]
    assert seen.calls == 3
    assert [m.offset for m in seen.consumed] == list(range(10))


async def test_filtered_records_are_not_seen_but_count_as_consumed() -> None:
    drop = DropEven()
    queue, info, stream = setup(drop)
    queue.put_nowait(chunk(info, 0, 6))
    it = stream.__aiter__()
    assert [(await it.__anext__()).offset for _ in range(3)] == [1, 3, 5]
    assert info.consumed_offset == 6
    assert len(drop.consumed) == 6

    queue.put_nowait(chunk(info, 6, 4))
    queue.put_nowait(SHUTDOWN_COMMAND)
    assert [[m.offset for m in b] async for b in stream.batches()] == [[7, 9]]
    assert info.consumed_offset == 10


async def test_everything_filtered_keeps_waiting_for_the_next_record() -> None:
    class DropFirstChunk(Recording):
        def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
            return [r for r in records if r.offset >= 3]

    queue, info, stream = setup(DropFirstChunk())
    queue.put_nowait(chunk(info, 0, 3))
    queue.put_nowait(chunk(info, 3, 1))
    assert (await stream.__aiter__().__anext__()).offset == 3

    queue, info, stream = setup(DropFirstChunk())
    queue.put_nowait(chunk(info, 0, 3))
    queue.put_nowait(chunk(info, 3, 2))
    batches = stream.batches(max_records=10)
    # The first chunk's batch is all removed: the next batch is what the reader gets.
    assert [m.offset for m in await batches.__anext__()] == [3, 4]
    assert info.consumed_offset == 5


async def test_consumer_timeout_still_applies_when_everything_is_filtered() -> None:
    queue, info, stream = setup(DropAll(), timeout_ms=50)
    queue.put_nowait(chunk(info, 0, 2))
    with pytest.raises(ConsumerTimeoutError):
        await stream.__aiter__().__anext__()
    assert info.consumed_offset == 2
    with pytest.raises(ConsumerTimeoutError):
        await stream.batches().__anext__()


async def test_transforming_interceptor_changes_values_in_order() -> None:
    queue, info, stream = setup(Upper(), Recording())
    queue.put_nowait(chunk(info, 0, 2))
    queue.put_nowait(chunk(info, 2, 1))
    queue.put_nowait(SHUTDOWN_COMMAND)
    it = stream.__aiter__()
    assert (await it.__anext__()).value == b"V0"
    assert [[m.value for m in b] async for b in stream.batches()] == [[b"V1", b"V0"]]


async def test_extra_records_are_kept_and_handed_out_in_order() -> None:
    queue, info, stream = setup(Twice())
    queue.put_nowait(chunk(info, 0, 3))
    queue.put_nowait(SHUTDOWN_COMMAND)
    it = stream.__aiter__()
    assert [(await it.__anext__()).offset for _ in range(3)] == [0, 0, 1]
    # A batch never exceeds max_records: the rest waits for the next call.
    assert [[m.offset for m in b] async for b in stream.batches(max_records=2)] == [
        [1],
        [2, 2],
    ]
    assert info.consumed_offset == 3


async def test_raising_interceptor_is_skipped_and_loses_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    after = Recording()
    queue, info, stream = setup(Failing(), after)
    queue.put_nowait(chunk(info, 0, 3))
    queue.put_nowait(chunk(info, 3, 3))
    queue.put_nowait(SHUTDOWN_COMMAND)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        it = stream.__aiter__()
        first = [(await it.__anext__()).offset for _ in range(3)]
        rest = [m.offset for b in [b async for b in stream.batches()] for m in b]
    assert first + rest == [0, 1, 2, 3, 4, 5]
    assert [m.offset for m in after.consumed] == [0, 1, 2, 3, 4, 5]
    warnings = [r for r in caplog.records if r.name == LOGGER]
    assert len(warnings) == 4
    assert all("_interceptor_fixtures.Failing" in r.getMessage() for r in warnings)
    assert all(r.levelno == logging.WARNING and r.exc_info for r in warnings)


async def test_interceptor_returning_no_list_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    queue, info, stream = setup(ReturnsNone())
    queue.put_nowait(chunk(info, 0, 1))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert (await stream.__aiter__().__anext__()).offset == 0
    assert "returned NoneType" in caplog.text


async def test_errors_pass_through_the_intercepting_iterator() -> None:
    queue, info, stream = setup(Recording(), maxsize=3)
    info.consumed_offset = 42
    queue.put_nowait(FetchedDataChunk((), info, 42, too_large=True))
    queue.put_nowait(SHUTDOWN_COMMAND)
    it = stream.__aiter__()
    with pytest.raises(MessageSizeTooLargeError):
        await it.__anext__()
    with pytest.raises(StopAsyncIteration):
        await it.__anext__()
    assert [b async for b in stream.batches()] == []


# -- the chain ---------------------------------------------------------------------------


def test_chain_runs_in_order_and_leaves_its_input_alone() -> None:
    chain = Interceptors([Failing(), Upper(), DropEven()])
    records = [MessageAndMetadata("t", 0, o, None, b"v", -1, -1, ()) for o in range(3)]
    out = chain.on_consume(records)
    assert [(m.offset, m.value) for m in out] == [(1, b"V")]
    assert len(records) == 3 and records[0].value == b"v"
    assert chain and not Interceptors()
    assert Interceptors().on_consume(records) is records


def test_on_commit_and_close_reach_every_interceptor_and_errors_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, last = Recording(), Recording()
    chain = Interceptors([first, Failing(), last])
    offsets = {TopicPartition("t", 0): 5, TopicPartition("t", 1): 7}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        chain.on_commit(offsets)
        chain.close()
        chain.close()  # idempotent
    assert first.commits == last.commits == [offsets]
    assert first.closed == last.closed == 1
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 2
    assert "Failing failed in on_commit" in messages[0]
    assert "Failing failed in close" in messages[1]
    assert "closed" in repr(chain)


def test_on_commit_gets_a_read_only_view() -> None:
    class Mutating(Recording):
        def on_commit(self, offsets: Mapping[TopicPartition, int]) -> None:
            offsets[TopicPartition("t", 9)] = 0  # type: ignore[index]

    offsets = {TopicPartition("t", 0): 5}
    Interceptors([Mutating()]).on_commit(offsets)  # the TypeError is logged
    assert offsets == {TopicPartition("t", 0): 5}


def test_items_are_checked() -> None:
    from _interceptor_fixtures import AsyncConsume, LacksClose

    with pytest.raises(TypeError, match="lacks close"):
        Interceptors([LacksClose()])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="async on_consume"):
        Interceptors([AsyncConsume()])  # type: ignore[list-item]
    assert isinstance(Recording(), ConsumerInterceptor)
    assert not isinstance(LacksClose(), ConsumerInterceptor)


def test_repr_lists_the_classes() -> None:
    chain = Interceptors([Recording(), Upper()])
    assert repr(chain) == (
        "<Interceptors [_interceptor_fixtures.Recording, test_interceptors.Upper]>"
    )


# -- from_config -------------------------------------------------------------------------


def test_from_config_loads_classes_in_order_then_extra() -> None:
    extra = Recording()
    chain = Interceptors.from_config(
        "_interceptor_fixtures:Recording, _interceptor_fixtures.Failing,"
        "_interceptor_fixtures:Outer.Inner",
        [extra],
    )
    kinds = [type(i).__name__ for i in chain.items]
    assert kinds == ["Recording", "Failing", "Inner", "Recording"]
    assert chain.items[-1] is extra
    assert chain.items[0] is not extra
    assert "_interceptor_fixtures.Recording, _interceptor_fixtures.Failing" in repr(chain)


@pytest.mark.parametrize("spec", [None, "", "  "])
def test_from_config_without_classes_is_empty(spec: str | None) -> None:
    assert not Interceptors.from_config(spec)
    assert Interceptors.from_config(spec, [Recording()])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("_interceptor_fixtures:Missing", "'_interceptor_fixtures:Missing'.*AttributeError"),
        ("no_such_module_here:Audit", "'no_such_module_here:Audit'.*ModuleNotFoundError"),
        ("no_such_module_here.Audit", "'no_such_module_here.Audit'.*ModuleNotFoundError"),
        ("Recording", "'Recording' is not a module:Class or module.Class name"),
        ("_interceptor_fixtures:NOT_A_CLASS", "names a int, not a class"),
        ("_interceptor_fixtures:LacksClose", "LacksClose' is not a ConsumerInterceptor.*close"),
        ("_interceptor_fixtures:AsyncConsume", "async on_consume"),
        ("_interceptor_fixtures:NeedsArguments", "NeedsArguments' with no arguments"),
        ("_interceptor_fixtures:Recording,", "empty class name"),
    ],
)
def test_from_config_rejects_bad_names(spec: str, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message) as info:
        Interceptors.from_config(spec)
    assert info.value.key == "interceptor.classes"


def test_from_config_closes_what_it_built_when_a_later_name_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import _interceptor_fixtures

    built: list[Recording] = []

    class Tracked(Recording):
        def __init__(self) -> None:
            super().__init__()
            built.append(self)

    monkeypatch.setattr(_interceptor_fixtures, "Tracked", Tracked, raising=False)
    with pytest.raises(InvalidConfigError):
        Interceptors.from_config("_interceptor_fixtures:Tracked, _interceptor_fixtures:Missing")
    assert [r.closed for r in built] == [1]


def test_from_config_rejects_bad_extra() -> None:
    from _interceptor_fixtures import LacksClose

    with pytest.raises(TypeError):
        Interceptors.from_config("_interceptor_fixtures:Recording", [LacksClose()])  # type: ignore[list-item]


# -- the optional hooks: configure, on_poll, on_rebalance -----------------------------------


class Hooked(Recording):
    """Has every optional hook and remembers the calls."""

    def __init__(self) -> None:
        super().__init__()
        self.configured: list[object] = []
        self.polls = 0
        self.rebalances: list[object] = []

    def configure(self, config: object) -> None:
        self.configured.append(config)

    def on_poll(self) -> None:
        self.polls += 1

    def on_rebalance(self, record: object) -> None:
        self.rebalances.append(record)


class FailingHooks(Hooked):
    def on_poll(self) -> None:
        raise RuntimeError("on_poll broke")

    def on_rebalance(self, record: object) -> None:
        raise RuntimeError("on_rebalance broke")


def test_configure_gets_the_config_of_built_and_given_interceptors() -> None:
    from aiozkconsumer.config import ConsumerConfig

    config = ConsumerConfig(group_id="g", zookeeper_connect="127.0.0.1:2181")
    given = Hooked()
    chain = Interceptors.from_config("_interceptor_fixtures:Recording", [given], config=config)
    assert given.configured == [config]
    assert chain.polls and chain.observes_rebalances
    assert not Interceptors([Recording()]).polls
    Interceptors.from_config(None, [given])  # no config: configure is not called
    assert given.configured == [config]


def test_a_failing_configure_is_a_config_error_and_closes_what_was_built() -> None:
    from aiozkconsumer.config import ConsumerConfig

    class BadConfigure(Hooked):
        def configure(self, config: object) -> None:
            raise ValueError("no tracer")

    given = BadConfigure()
    config = ConsumerConfig(group_id="g", zookeeper_connect="127.0.0.1:2181")
    with pytest.raises(InvalidConfigError, match="failed in configure: ValueError: no tracer"):
        Interceptors.from_config(None, [given], config=config)


def test_an_async_optional_hook_is_refused() -> None:
    class AsyncPoll(Recording):
        async def on_poll(self) -> None:
            pass

    with pytest.raises(TypeError, match="async on_poll"):
        Interceptors([AsyncPoll()])


def test_on_poll_and_on_rebalance_errors_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    after = Hooked()
    chain = Interceptors([FailingHooks(), after])
    with caplog.at_level(logging.WARNING, LOGGER):
        chain.on_poll()
        chain.on_rebalance("record")  # type: ignore[arg-type]
    assert after.polls == 1 and after.rebalances == ["record"]
    assert "failed in on_poll" in caplog.text and "failed in on_rebalance" in caplog.text


async def test_on_poll_runs_before_each_ask_of_the_underlying_iterator() -> None:
    hooked = Hooked()
    queue, info, stream = setup(Twice(), hooked)
    queue.put_nowait(chunk(info, 0, 2))
    queue.put_nowait(SHUTDOWN_COMMAND)
    polls = [hooked.polls async for _ in stream]
    # Twice doubles each record: the copy kept in the buffer goes out without an ask.
    assert polls == [1, 1, 2, 2]
    assert hooked.polls == 3  # the last ask met the end of the stream
    queue, info, stream = setup(hooked)
    queue.put_nowait(chunk(info, 0, 3))
    queue.put_nowait(SHUTDOWN_COMMAND)
    assert [len(b) async for b in stream.batches(2)] == [2, 1]
    assert hooked.polls == 3 + 3
