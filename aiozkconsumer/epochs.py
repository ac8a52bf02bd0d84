"""Leader epochs and log truncation (KIP-320): the decisions, without I/O.

A consumer's position is an offset *and* the leader epoch of the record before it (the Java
client's ``SubscriptionState.FetchPosition.offsetEpoch``). When a partition's leader changes,
the position is checked against the new leader's log with OffsetsForLeaderEpoch
(``kafka/leader_epoch.py``): if the new leader's log for that epoch ends before the position,
the log was truncated under the consumer (an unclean leader election elected a replica that
lacked the records fetched) and the records fetched past that end are gone. The fetcher
(``fetcher.py``) asks and acts; this module decides, as data in, data out:

- :func:`batch_epochs` reads the ``partitionLeaderEpoch`` of each record batch of a fetched
  record set, and :class:`EpochMarks` keeps them per partition, so the epoch of any offset
  fetched and not yet committed is known (for the next validation and for commits);
- :func:`needs_validation` is ``SubscriptionState.maybeValidatePositionForCurrentLeader``;
- :func:`classify_epoch_error` is ``OffsetsForLeaderEpochUtils.handleResponse``;
- :func:`validate_position` is ``SubscriptionState.maybeCompleteValidation``.
"""

from __future__ import annotations

import bisect
import enum
import struct
from dataclasses import dataclass

__all__ = [
    "NO_EPOCH",
    "EpochError",
    "EpochMarks",
    "Outcome",
    "Verdict",
    "batch_epochs",
    "classify_epoch_error",
    "needs_validation",
    "validate_position",
]

NO_EPOCH = -1
"""No leader epoch known (``RecordBatch.NO_PARTITION_LEADER_EPOCH``, ``UNDEFINED_EPOCH``)."""
NO_OFFSET = -1
"""``UNDEFINED_EPOCH_OFFSET``."""

_HEADER = struct.Struct(">qiib")  # base offset, batch length, partition leader epoch, magic
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta, at byte 23 of a v2 batch
_LAST_DELTA_AT = 23


def batch_epochs(data: bytes | bytearray | memoryview, end: int) -> list[tuple[int, int]]:
    """The leader epoch of each magic-2 batch of a record set that starts before ``end``.

    Reads only the batch headers (``DefaultRecordBatch``: base offset, length, partition
    leader epoch, magic). A legacy message (magic 0/1) has no epoch: it gives -1. A trailing
    partial batch is left out.

    Args:
        data: a fetched record set.
        end: the offset after the last batch handed out.

    Returns:
        ``[(base offset, epoch)]`` in offset order, one per batch whose epoch differs from
        the previous one's (the first always).
    """
    out: list[tuple[int, int]] = []
    pos = 0
    size = len(data)
    last = None
    while pos + _HEADER.size <= size:
        base, length, epoch, magic = _HEADER.unpack_from(data, pos)
        if base >= end or pos + 12 + length > size:
            break
        if magic < 2:
            epoch = NO_EPOCH
        if epoch != last:
            out.append((base, epoch))
            last = epoch
        pos += 12 + length
    return out


class EpochMarks:
    """Where the leader epoch changes in a partition's fetched records: a small leader epoch
    cache on the consumer's side (the broker keeps the same, ``LeaderEpochFileCache``).

    ``marks`` is ``[(first offset, epoch)]`` in offset order: the records from each first
    offset up to the next mark were written in that epoch. Only what the positions still
    need is kept (:meth:`prune`).
    """

    __slots__ = ("marks",)

    def __init__(self) -> None:
        self.marks: list[tuple[int, int]] = []

    def add(self, marks: list[tuple[int, int]]) -> None:
        """Append the marks of a record set fetched after the ones already kept."""
        for mark in marks:
            if self.marks and mark[0] <= self.marks[-1][0]:
                # A re-fetched range (a compressed batch starts before the fetch offset):
                # what came later wins from here on.
                del self.marks[bisect.bisect_left(self.marks, (mark[0], NO_EPOCH - 1)) :]
            if not self.marks or self.marks[-1][1] != mark[1]:
                self.marks.append(mark)

    def epoch_before(self, offset: int) -> int:
        """The epoch of the record at ``offset - 1`` (the epoch of a position at ``offset``),
        -1 when unknown."""
        i = bisect.bisect_right(self.marks, (offset - 1, 1 << 31)) - 1
        return self.marks[i][1] if i >= 0 else NO_EPOCH

    def prune(self, below: int) -> None:
        """Forget marks no offset at or above ``below - 1`` needs."""
        marks = self.marks
        i = bisect.bisect_right(marks, (below - 1, 1 << 31)) - 1
        if i > 0:
            del marks[:i]

    def reset(self, offset: int = 0, epoch: int = NO_EPOCH) -> None:
        """After a seek: only the position's epoch is known (``epoch`` of ``offset - 1``)."""
        self.marks = [] if epoch == NO_EPOCH else [(max(0, offset - 1), epoch)]

    def __repr__(self) -> str:
        return f"<EpochMarks {self.marks}>"


def needs_validation(position_epoch: int, known_leader_epoch: int, new_leader_epoch: int) -> bool:
    """Whether a position must be checked with OffsetsForLeaderEpoch before fetching on.

    As ``SubscriptionState.maybeValidatePositionForCurrentLeader`` / ``validatePosition``: when
    the leader (epoch) changed and both the position's epoch and the new leader's are known.
    Without epochs (a message format before v2, a broker older than 2.1) there is nothing
    to check.

    Args:
        position_epoch: the epoch of the record before the position, -1 unknown.
        known_leader_epoch: the leader epoch the position was fetched under, -1 unknown.
        new_leader_epoch: the leader epoch from fresh metadata, -1 unknown.
    """
    return (
        position_epoch != NO_EPOCH
        and new_leader_epoch != NO_EPOCH
        and new_leader_epoch != known_leader_epoch
    )


class EpochError(enum.Enum):
    """What an OffsetsForLeaderEpoch partition error asks of the consumer
    (``OffsetsForLeaderEpochUtils.handleResponse``)."""

    NONE = "none"
    """An answer: decide with :func:`validate_position`."""
    RETRY = "retry"
    """Refresh metadata and ask again (``NOT_LEADER_OR_FOLLOWER``, ``FENCED_LEADER_EPOCH``,
    ``UNKNOWN_LEADER_EPOCH``, ``UNKNOWN_TOPIC_OR_PARTITION`` ... and any unknown code)."""
    FATAL = "fatal"
    """``TOPIC_AUTHORIZATION_FAILED``: asking again cannot help."""


_TOPIC_AUTHORIZATION_FAILED = 29


def classify_epoch_error(code: int) -> EpochError:
    """Classify an OffsetsForLeaderEpoch partition error, as ``handleResponse``: NONE is an
    answer, TOPIC_AUTHORIZATION_FAILED is fatal, every other code is retried."""
    if code == 0:
        return EpochError.NONE
    if code == _TOPIC_AUTHORIZATION_FAILED:
        return EpochError.FATAL
    return EpochError.RETRY


class Outcome(enum.Enum):
    """The result of checking a position against the leader's log."""

    VALID = "valid"
    """The leader's log holds the position: fetch on."""
    TRUNCATED = "truncated"
    """The log ends before the position at a known offset: seek there."""
    TRUNCATED_UNKNOWN = "truncated_unknown"
    """The leader knows no epoch up to the position's: where the log diverged is unknown;
    apply ``auto.offset.reset``."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What :func:`validate_position` decided.

    Attributes:
        outcome: see :class:`Outcome`.
        offset: ``TRUNCATED``: the first offset known to diverge (the leader's end offset of
            the epoch), where the position goes; else the position's offset.
        epoch: ``TRUNCATED``: the epoch of the record before ``offset``; else the
            position's epoch.
        truncated: ``TRUNCATED``: how many offsets were fetched past the divergence point
            (``position - offset``): records no longer in the log, whose offsets will be
            read again with what the new leader holds there. 0 otherwise.
    """

    outcome: Outcome
    offset: int
    epoch: int
    truncated: int = 0


def validate_position(
    position: int, position_epoch: int, leader_epoch: int, end_offset: int
) -> Verdict:
    """Check a position against the leader's answer for its epoch.

    As ``SubscriptionState.maybeCompleteValidation`` with a reset policy set (``auto.offset
    .reset`` is always ``smallest`` or ``largest`` here): an undefined answer (end offset or
    epoch -1: the leader knows no epoch up to the position's) is a truncation at an unknown
    point, reset by policy; an end offset before the position is a truncation at that offset,
    where the position goes (the first offset known to diverge, with the answer's epoch);
    otherwise the position is valid.

    Args:
        position: the fetch position's offset.
        position_epoch: the epoch of the record before it.
        leader_epoch: the answer's ``LeaderEpoch``.
        end_offset: the answer's ``EndOffset``.

    Returns:
        The verdict.
    """
    if end_offset == NO_OFFSET or leader_epoch == NO_EPOCH:
        return Verdict(Outcome.TRUNCATED_UNKNOWN, position, position_epoch)
    if end_offset < position:
        return Verdict(Outcome.TRUNCATED, end_offset, leader_epoch, position - end_offset)
    return Verdict(Outcome.VALID, position, position_epoch)
