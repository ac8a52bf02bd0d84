"""The leader-epoch decisions (``aiozkconsumer.epochs``), without servers."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from aiozkconsumer.epochs import (
    NO_EPOCH,
    EpochError,
    EpochMarks,
    Outcome,
    batch_epochs,
    classify_epoch_error,
    needs_validation,
    validate_position,
)


def batch(base: int, records: int, epoch: int, magic: int = 2) -> bytes:
    """A record batch header with a body of the right length (contents irrelevant here)."""
    body = b"\0" * 4 + b"\0\0" + struct.pack(">i", records - 1) + b"\0" * 40
    return struct.pack(">qiib", base, 4 + 1 + len(body), epoch, magic) + body


def test_batch_epochs_reads_each_batch_header_and_keeps_only_changes() -> None:
    data = batch(0, 5, 0) + batch(5, 5, 0) + batch(10, 5, 3) + batch(15, 5, 4)
    assert batch_epochs(data, 20) == [(0, 0), (10, 3), (15, 4)]
    assert batch_epochs(data, 15) == [(0, 0), (10, 3)]  # batches past the end left out
    assert batch_epochs(data[:-3], 20) == [(0, 0), (10, 3)]  # a partial batch left out
    assert batch_epochs(batch(0, 1, 7, magic=1), 1) == [(0, NO_EPOCH)]  # legacy: no epoch
    assert batch_epochs(b"", 10) == []


def test_validation_follows_maybe_complete_validation() -> None:
    # The leader's log of the position's epoch ends at or after the position: valid.
    assert validate_position(100, 3, 3, 100).outcome is Outcome.VALID
    assert validate_position(100, 3, 3, 150).outcome is Outcome.VALID
    # It ends before: truncated there, position moves to the first diverging offset.
    v = validate_position(100, 3, 2, 70)
    assert (v.outcome, v.offset, v.epoch, v.truncated) == (Outcome.TRUNCATED, 70, 2, 30)
    # Undefined answers: where the logs diverge is unknown.
    assert validate_position(100, 3, NO_EPOCH, 70).outcome is Outcome.TRUNCATED_UNKNOWN
    assert validate_position(100, 3, 2, -1).outcome is Outcome.TRUNCATED_UNKNOWN


def test_validation_is_needed_only_when_the_leader_epoch_moved_and_both_are_known() -> None:
    assert needs_validation(0, 0, 1)
    assert needs_validation(0, NO_EPOCH, 1)  # epoch of the position known, leader's new
    assert not needs_validation(0, 1, 1)  # same leader epoch
    assert not needs_validation(NO_EPOCH, 0, 1)  # no epoch for the position (magic < 2)
    assert not needs_validation(0, 0, NO_EPOCH)  # the broker gives none (before 2.1)


def test_epoch_errors_as_offsets_for_leader_epoch_utils() -> None:
    assert classify_epoch_error(0) is EpochError.NONE
    assert classify_epoch_error(29) is EpochError.FATAL
    for code in (3, 5, 6, 9, 56, 74, 75, 78, -1):
        assert classify_epoch_error(code) is EpochError.RETRY


def test_epoch_marks_answer_the_epoch_before_an_offset() -> None:
    marks = EpochMarks()
    assert marks.epoch_before(10) == NO_EPOCH
    marks.add([(0, 0), (10, 3)])
    marks.add([(20, 3), (25, 5)])
    assert marks.marks == [(0, 0), (10, 3), (25, 5)]
    assert marks.epoch_before(0) == NO_EPOCH
    assert [marks.epoch_before(o) for o in (1, 10, 11, 25, 26, 99)] == [0, 0, 3, 3, 5, 5]
    marks.prune(12)
    assert marks.marks == [(10, 3), (25, 5)]
    assert marks.epoch_before(12) == 3
    marks.add([(24, 6)])  # re-fetched from 24 on: what came later wins
    assert marks.marks == [(10, 3), (24, 6)]
    marks.reset(50, 7)
    assert marks.epoch_before(50) == 7
    marks.reset(50)
    assert marks.marks == []


@given(
    st.lists(st.tuples(st.integers(1, 20), st.integers(0, 5)), min_size=1, max_size=30),
    st.integers(0, 700),
)
def test_epoch_marks_agree_with_the_batches_they_came_from(
    batches: list[tuple[int, int]], prune_at: int
) -> None:
    """Marks built from record sets (in several fetches) give every offset's epoch."""
    epochs: list[int] = []  # per offset
    data = b""
    for records, step in batches:
        epoch = (epochs[-1] if epochs else 0) + (step == 0)  # epochs never go down
        data += batch(len(epochs), records, epoch)
        epochs += [epoch] * records
    marks = EpochMarks()
    # Fetched in two record sets, split at a batch boundary.
    cut = len(batch(0, batches[0][0], 0))
    marks.add(batch_epochs(data[:cut], len(epochs)))
    marks.add(batch_epochs(data[cut:], len(epochs)))
    low = min(prune_at, len(epochs))
    marks.prune(low)
    for offset in range(max(1, low), len(epochs) + 1):
        assert marks.epoch_before(offset) == epochs[offset - 1]
