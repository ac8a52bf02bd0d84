"""Fetch sessions (``kafka/fetch_session.py``: the Java client's ``FetchSessionHandler``).

No servers.

Example tests walk the handler through the Java client's cases (full then incremental
requests, added / altered / forgotten / replaced partitions, each session error, invalid
responses, throttling, closing). A Hypothesis test runs it against a model of the broker's side
(``kafka.server.FetchSession``/``FetchManager.newContext``, Kafka 3.9: sessions created in a
cache with limited room, incremental requests applied to the cached partitions, epochs checked)
through random partition churn and faults (broker restarts, evictions, lost requests and
responses): whenever the broker accepts a request, the partitions and fetch offsets it fetches
are exactly those the fetch loop asked for — nothing lost, nothing duplicated, nothing stale —
and an incremental request carries only the partitions that changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiozkconsumer.kafka.fetch_request import ZERO_UUID, FetchPartition
from aiozkconsumer.kafka.fetch_session import (
    FETCH_SESSION_ID_NOT_FOUND,
    FETCH_SESSION_TOPIC_ID_ERROR,
    FINAL_EPOCH,
    INITIAL,
    INVALID_FETCH_SESSION_EPOCH,
    FetchMetadata,
    FetchSessionHandler,
    next_epoch,
)

ID_A = bytes([1] * 16)
ID_B = bytes([2] * 16)
ID_A2 = bytes([3] * 16)  # topic "a" re-created
IDS = {"a": ID_A, "b": ID_B}


def _p(topic: str, partition: int, offset: int, epoch: int = -1) -> FetchPartition:
    return FetchPartition(topic, partition, offset, 1000, current_leader_epoch=epoch)


def _keys(partitions: list[FetchPartition]) -> list[tuple[str, int]]:
    return [(p.topic, p.partition) for p in partitions]


def _open_session(
    handler: FetchSessionHandler, partitions: list[FetchPartition], session_id: int = 99
) -> None:
    data = handler.build(partitions, IDS)
    assert data.is_full
    assert handler.handle_response(
        error_code=0, session_id=session_id, partitions=_keys(partitions), version=13
    )


# -- FetchMetadata ------------------------------------------------------------------------


def test_epochs_wrap_to_one_and_final_stays_final() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1  # never 0: that would ask for a new session
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_metadata_transitions() -> None:
    assert INITIAL.is_full and FetchMetadata(0, FINAL_EPOCH).is_full
    m = FetchMetadata.new_incremental(7)
    assert (m.session_id, m.epoch, m.is_full) == (7, 1, False)
    assert m.next_incremental() == FetchMetadata(7, 2)
    assert m.next_close_existing() == FetchMetadata(7, FINAL_EPOCH)
    assert m.next_close_existing_attempt_new() == FetchMetadata(7, 0)
    assert str(INITIAL) == "(sessionId=INVALID, epoch=INITIAL)"
    assert str(m) == "(sessionId=7, epoch=1)"


# -- the handler, case by case ------------------------------------------------------------


def test_the_same_tuple_again_carries_nothing_unless_the_session_or_a_topic_id_changed() -> (
    None
):
    h = FetchSessionHandler(1)
    wanted = (_p("a", 0, 10), _p("b", 0, 5))
    _open_session(h, list(wanted))
    h.build(wanted, IDS)  # a new tuple: compared with the session
    assert h.handle_response(error_code=0, session_id=99, partitions=[], version=13)
    data = h.build(wanted, IDS)  # the same tuple: known at once
    assert not data.is_full and data.to_send == [] and data.to_forget == []
    assert data.can_use_topic_ids and dict(data.topic_ids) == IDS and data.session_size == 2
    assert h.handle_response(error_code=0, session_id=99, partitions=[], version=13)
    # Topic "a" re-created: its partitions are sent again under the new id.
    data = h.build(wanted, {"a": ID_A2, "b": ID_B})
    assert data.to_send == [_p("a", 0, 10)] and data.to_replace == [("a", 0, ID_A)]
    h.handle_error()  # the request was lost: the next one is full, whatever is asked
    data = h.build(wanted, {"a": ID_A2, "b": ID_B})
    assert data.to_send == list(wanted) and data.metadata.epoch == 0
    assert h.statistics().incremental_requests == 3


def test_the_first_request_is_full_and_the_next_carries_nothing_unchanged() -> None:
    h = FetchSessionHandler(1)
    wanted = [_p("a", 0, 10), _p("a", 1, 20), _p("b", 0, 5)]
    data = h.build(wanted, IDS)
    assert data.is_full and data.metadata == INITIAL
    assert data.to_send == wanted and data.to_forget == [] and data.can_use_topic_ids
    assert dict(data.topic_ids) == IDS
    assert h.handle_response(error_code=0, session_id=99, partitions=_keys(wanted), version=13)
    assert h.next_metadata == FetchMetadata(99, 1)
    assert dict(h.session_topic_names) == {ID_A: "a", ID_B: "b"}
    data = h.build(wanted, IDS)
    assert not data.is_full and data.metadata == FetchMetadata(99, 1)
    assert data.to_send == [] and data.to_forget == [] and data.session_size == 3
    # The broker answers only partitions with news: a subset is fine.
    assert h.handle_response(error_code=0, session_id=99, partitions=[("a", 1)], version=13)
    assert h.next_metadata == FetchMetadata(99, 2)
    stats = h.statistics()
    assert (stats.full_requests, stats.incremental_requests, stats.sessions_opened) == (1, 1, 1)
    assert stats.partitions == 3 and stats.session_id == 99 and stats.epoch == 2


def test_an_incremental_request_sends_added_and_altered_and_forgets_the_dropped() -> None:
    h = FetchSessionHandler(1)
    _open_session(h, [_p("a", 0, 10), _p("a", 1, 20), _p("a", 2, 30)])
    data = h.build([_p("a", 0, 10), _p("a", 2, 31), _p("a", 3, 0), _p("a", 1, 20)], IDS)
    assert data.to_send == [_p("a", 2, 31), _p("a", 3, 0)]  # in the order wanted
    assert data.to_forget == []
    assert h.handle_response(error_code=0, session_id=99, partitions=[], version=13)
    data = h.build([_p("a", 0, 10), _p("a", 2, 31), _p("a", 3, 0)], IDS)
    assert data.to_send == [] and data.to_forget == [("a", 1, ID_A)]
    assert data.forgotten(13) == [("a", 1, ID_A)] and data.session_size == 3
    assert list(h.session_partitions) == [("a", 0), ("a", 2), ("a", 3)]


def test_a_changed_leader_epoch_or_max_bytes_is_an_alteration() -> None:
    h = FetchSessionHandler(1)
    _open_session(h, [_p("a", 0, 10), _p("a", 1, 10)])
    data = h.build([_p("a", 0, 10, epoch=5), _p("a", 1, 10)], IDS)
    assert _keys(data.to_send) == [("a", 0)]
    h.handle_response(error_code=0, session_id=99, partitions=[], version=13)
    bigger = FetchPartition("a", 1, 10, 2000)
    assert _keys(h.build([_p("a", 0, 10, epoch=5), bigger], IDS).to_send) == [("a", 1)]


def test_a_recreated_topic_is_sent_again_and_forgotten_under_its_old_id() -> None:
    h = FetchSessionHandler(1)
    _open_session(h, [_p("a", 0, 10), _p("b", 0, 3)])
    data = h.build([_p("a", 0, 10), _p("b", 0, 3)], {"a": ID_A2, "b": ID_B})
    assert data.to_send == [_p("a", 0, 10)]
    assert data.to_replace == [("a", 0, ID_A)] and data.to_forget == []
    # By id (v13+) the old partition is forgotten; by name it must not be (it would drop
    # the one just sent): FetchRequest.Builder.build.
    assert data.forgotten(13) == [("a", 0, ID_A)]
    assert data.forgotten(12) == []
    assert dict(h.session_topic_names) == {ID_A2: "a", ID_B: "b"}


def test_a_topic_id_learnt_later_sends_its_partitions_again() -> None:
    h = FetchSessionHandler(1)
    wanted = [_p("a", 0, 10), _p("a", 1, 10), _p("b", 0, 3)]
    data = h.build(wanted, {"a": ID_A})  # no id known for "b"
    assert not data.can_use_topic_ids and dict(data.topic_ids)["b"] == ZERO_UUID
    assert dict(h.session_topic_names) == {}
    assert h.handle_response(error_code=0, session_id=99, partitions=_keys(wanted), version=12)
    data = h.build(wanted, IDS)
    assert data.can_use_topic_ids and data.to_send == [_p("b", 0, 3)] and not data.to_replace


def test_forgetting_a_partition_without_topic_id_keeps_the_request_by_name() -> None:
    h = FetchSessionHandler(1)
    wanted = [_p("a", 0, 10), _p("a", 1, 10), _p("b", 0, 3)]
    h.build(wanted, {"a": ID_A})
    assert h.handle_response(error_code=0, session_id=99, partitions=_keys(wanted), version=12)
    data = h.build([_p("a", 0, 11), _p("a", 1, 10)], {"a": ID_A})
    assert not data.can_use_topic_ids and data.to_forget == [("b", 0, ZERO_UUID)]


def test_replacing_every_partition_is_a_new_full_session() -> None:
    # A reassignment: none of the session's partitions is wanted any more.
    h = FetchSessionHandler(1)
    _open_session(h, [_p("a", 0, 10), _p("a", 1, 20)])
    data = h.build([_p("b", 1, 25), _p("b", 0, 0)], IDS)
    assert data.is_full and data.metadata == FetchMetadata(99, 0)  # closes 99, opens anew
    assert data.to_send == [_p("b", 1, 25), _p("b", 0, 0)] and data.to_forget == []
    assert list(h.session_partitions) == [("b", 1), ("b", 0)]
    # Forgetting some, even with every other one changed, stays incremental.
    _open_session(h, [_p("a", 0, 10), _p("a", 1, 20)], session_id=100)
    data = h.build([_p("a", 0, 11), _p("b", 0, 0)], IDS)
    assert not data.is_full and data.to_forget == [("a", 1, ID_A)]
    assert data.to_send == [_p("a", 0, 11), _p("b", 0, 0)]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (FETCH_SESSION_ID_NOT_FOUND, INITIAL),  # the broker lost it: a new session
        (INVALID_FETCH_SESSION_EPOCH, FetchMetadata(99, 0)),  # close it, open another
        (FETCH_SESSION_TOPIC_ID_ERROR, FetchMetadata(99, 0)),
    ],
)
def test_a_session_error_makes_the_next_request_full(error: int, expected: FetchMetadata) -> None:
    h = FetchSessionHandler(1)
    wanted = [_p("a", 0, 10)]
    _open_session(h, wanted)
    h.build(wanted, IDS)
    assert not h.handle_response(error_code=error, session_id=0, partitions=[], version=13)
    assert h.next_metadata == expected
    data = h.build(wanted, IDS)
    assert data.is_full and data.to_send == wanted
    assert h.statistics().session_errors == 1


def test_a_lost_request_makes_the_next_request_full() -> None:
    h = FetchSessionHandler(1)
    wanted = [_p("a", 0, 10)]
    _open_session(h, wanted)
    h.build(wanted, IDS)
    h.handle_error()
    assert h.next_metadata == FetchMetadata(99, 0)
    assert h.build(wanted, IDS).is_full
    assert h.statistics().send_failures == 1


def test_a_full_response_must_answer_every_partition() -> None:
    h = FetchSessionHandler(1)
    h.build([_p("a", 0, 10), _p("a", 1, 10)], IDS)
    assert not h.handle_response(error_code=0, session_id=99, partitions=[("a", 0)], version=13)
    assert h.next_metadata == INITIAL
    h.build([_p("a", 0, 10)], IDS)
    assert not h.handle_response(
        error_code=0, session_id=99, partitions=[("a", 0), ("z", 1)], version=13
    )


def test_an_incremental_response_must_stay_in_the_session() -> None:
    h = FetchSessionHandler(1)
    _open_session(h, [_p("a", 0, 10)])
    h.build([_p("a", 0, 10)], IDS)
    assert not h.handle_response(error_code=0, session_id=99, partitions=[("b", 0)], version=13)
    assert h.next_metadata == FetchMetadata(99, 0)
    _open_session(h, [_p("a", 0, 10)], session_id=5)
    h.build([_p("a", 0, 10)], IDS)
    assert not h.handle_response(
        error_code=0, session_id=5, partitions=[], topic_ids=[ID_B], version=13
    )  # an id the session does not hold (checked from v13)


def test_no_session_from_the_broker_keeps_every_request_full() -> None:
    h = FetchSessionHandler(1)
    wanted = [_p("a", 0, 10)]
    for _ in range(3):
        assert h.build(wanted, IDS).is_full
        assert h.handle_response(error_code=0, session_id=0, partitions=_keys(wanted), version=13)
        assert h.next_metadata == INITIAL


def test_an_incremental_response_without_session_id_ends_the_session() -> None:
    h = FetchSessionHandler(1)
    _open_session(h, [_p("a", 0, 10)])
    h.build([_p("a", 0, 10)], IDS)
    assert h.handle_response(error_code=0, session_id=0, partitions=[], version=13)
    assert h.next_metadata == INITIAL


def test_a_throttled_empty_full_response_is_not_used() -> None:
    h = FetchSessionHandler(1)
    h.build([_p("a", 0, 10)], IDS)
    assert not h.handle_response(
        error_code=0, session_id=0, partitions=[], throttle_time_ms=100, version=13
    )
    assert h.next_metadata == INITIAL
    assert h.statistics().session_errors == 0


def test_closing_sends_a_final_full_request_without_partitions() -> None:
    h = FetchSessionHandler(1)
    _open_session(h, [_p("a", 0, 10)])
    h.notify_close()
    data = h.build([], {})
    assert data.is_full and data.metadata == FetchMetadata(99, FINAL_EPOCH) and not data.to_send
    assert h.handle_response(error_code=0, session_id=0, partitions=[], version=13)
    assert h.next_metadata == INITIAL
    assert "FetchSessionHandler broker 1" in repr(h)


# -- against a model of the broker's fetch sessions ------------------------------------------

Key = tuple[str, int]


@dataclass
class _Session:
    epoch: int
    partitions: dict[tuple[str, int, bytes | None], tuple[FetchPartition, bytes]]
    uses_ids: bool


@dataclass
class ModelBroker:
    """``FetchManager.newContext`` and ``FetchSession.update`` (Kafka 3.9), kept small."""

    slots: int
    sessions: dict[int, _Session] = field(default_factory=dict)
    next_id: int = 1

    def fetch(
        self,
        version: int,
        session_id: int,
        epoch: int,
        partitions: list[FetchPartition],
        ids: Mapping[str, bytes],
        forgotten: list[tuple[str, int, bytes]],
    ) -> tuple[int, int, dict[Key, tuple[FetchPartition, bytes]] | None]:
        """``(error, response session id, {partition: (request data, topic id) fetched})``."""
        by_id = version >= 13
        to_send = [(p, ids[p.topic]) for p in partitions]

        def key(topic: str, partition: int, topic_id: bytes) -> tuple[str, int, bytes | None]:
            return (topic, partition, topic_id if by_id else None)

        if epoch in (0, FINAL_EPOCH):
            if session_id:
                self.sessions.pop(session_id, None)  # a full request closes its session
            fetched = {(p.topic, p.partition): (p, i) for p, i in to_send}
            if epoch == FINAL_EPOCH or len(self.sessions) >= self.slots:
                return 0, 0, fetched
            sid, self.next_id = self.next_id, self.next_id + 1
            parts = {key(p.topic, p.partition, i): (p, i) for p, i in to_send}
            self.sessions[sid] = _Session(1, parts, by_id)
            return 0, sid, fetched
        session = self.sessions.get(session_id)
        if session is None:
            return FETCH_SESSION_ID_NOT_FOUND, 0, None
        if session.epoch != epoch:
            return INVALID_FETCH_SESSION_EPOCH, 0, None
        if session.uses_ids != by_id:
            return FETCH_SESSION_TOPIC_ID_ERROR, 0, None
        for p, i in to_send:
            session.partitions[key(p.topic, p.partition, i)] = (p, i)
        for topic, partition, i in forgotten:
            session.partitions.pop(key(topic, partition, i), None)
        fetched = {}
        for (topic, partition, _), entry in session.partitions.items():
            assert (topic, partition) not in fetched, "a partition twice in the session"
            fetched[(topic, partition)] = entry
        if not session.partitions:
            del self.sessions[session_id]
            return 0, 0, fetched
        session.epoch = next_epoch(session.epoch)
        return 0, session_id, fetched


_TOPICS = ("a", "b")
_IDS = {"a": [ID_A, ID_A2, ZERO_UUID], "b": [ID_B, ZERO_UUID]}

_change = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(_TOPICS), st.integers(0, 5)),
    st.tuples(st.just("drop"), st.sampled_from(_TOPICS), st.integers(0, 5)),
    st.tuples(st.just("advance"), st.sampled_from(_TOPICS), st.integers(0, 5)),
    st.tuples(st.just("epoch"), st.sampled_from(_TOPICS), st.integers(0, 5)),
    st.tuples(st.just("recreate"), st.sampled_from(_TOPICS), st.integers(0, 2)),
)
_fault = st.sampled_from(
    ["none"] * 6 + ["restart", "evict", "request_lost", "response_lost", "partial"]
)


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(st.tuples(st.lists(_change, max_size=4), _fault), min_size=1, max_size=40),
    slots=st.integers(0, 3),
    max_version=st.sampled_from([12, 13, 18]),
)
def test_the_broker_always_fetches_exactly_what_the_loop_wants(
    steps: list[tuple[list[tuple[str, str, int]], str]], slots: int, max_version: int
) -> None:
    broker = ModelBroker(slots)
    handler = FetchSessionHandler(1)
    wanted: dict[Key, FetchPartition] = {("a", 0): FetchPartition("a", 0, 0, 1000)}
    topic_ids = {"a": ID_A, "b": ID_B}
    sent_ids: dict[str, bytes] = {}
    request: tuple[FetchPartition, ...] = ()
    for changes, fault in steps:
        for op, topic, n in changes:
            k = (topic, n)
            if op == "add" and k not in wanted:
                wanted[k] = FetchPartition(topic, n, 0, 1000)
            elif op == "drop" and len(wanted) > 1:
                wanted.pop(k, None)
            elif op == "advance" and k in wanted:
                wanted[k] = wanted[k]._replace(fetch_offset=wanted[k].fetch_offset + 7)
            elif op == "epoch" and k in wanted:
                wanted[k] = wanted[k]._replace(
                    current_leader_epoch=wanted[k].current_leader_epoch + 1
                )
            elif op == "recreate":
                topic_ids[topic] = _IDS[topic][n % len(_IDS[topic])]
        before = dict(handler.session_partitions)
        # As a fetch loop does: the very same tuple again while its partitions are unchanged
        # (the handler then skips the comparison), a new one when they changed.
        if tuple(wanted.values()) != request:
            request = tuple(wanted.values())
        data = handler.build(request, topic_ids)
        version = max_version if data.can_use_topic_ids else 12
        if not data.is_full:
            # Only what changed travels: added partitions, those whose data changed, and
            # those of a topic whose id changed.
            changed = {
                k
                for k, p in wanted.items()
                if before.get(k) != p or sent_ids.get(k[0]) != topic_ids[k[0]]
            }
            assert set(_keys(data.to_send)) == changed
            forgotten = {(t, p) for t, p, _ in data.to_forget}
            assert forgotten == set(before) - set(wanted)
        else:
            assert data.to_send == list(wanted.values())
        sent_ids = dict(data.topic_ids)
        if fault == "restart":
            broker.sessions.clear()
        elif fault == "evict":
            broker.sessions.pop(data.metadata.session_id, None)
        if fault == "request_lost":
            handler.handle_error()
            continue
        error, session_id, fetched = broker.fetch(
            version,
            data.metadata.session_id,
            data.metadata.epoch,
            data.to_send,
            data.topic_ids,
            data.forgotten(version),
        )
        if fault == "response_lost":
            handler.handle_error()
            continue
        if fetched is not None:
            # The invariant: what the broker fetches is what the loop wants, exactly.
            assert fetched == {
                (p.topic, p.partition): (p, topic_ids[p.topic]) for p in wanted.values()
            }
        answered = sorted(fetched or {})
        if fetched is not None and not data.is_full and fault == "partial":
            answered = answered[: len(answered) // 2]  # only partitions with news
        ok = handler.handle_response(
            error_code=error,
            session_id=session_id,
            partitions=answered,
            topic_ids=sorted({fetched[k][1] for k in answered if fetched[k][1] != ZERO_UUID})
            if fetched
            else [],
            version=version,
        )
        assert ok == (error == 0)
        if error:
            assert handler.next_metadata.is_full
        elif session_id:
            assert not handler.next_metadata.is_full
            assert handler.next_metadata.session_id == session_id
            assert broker.sessions[session_id].epoch == handler.next_metadata.epoch
        else:
            assert handler.next_metadata == INITIAL
