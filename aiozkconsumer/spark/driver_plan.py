"""Pure decisions of the source's driver side: where a micro-batch ends, what to commit.

The group member (``member.py``), the stream and batch readers and the push-mode bridge gather
the facts — the member's ownership, the group's committed offsets, the log end offsets, the
ranges Spark planned — and these functions decide, without I/O: where the next micro-batch
ends (:func:`plan_ends`), which offsets a commit writes (:func:`forward_offsets`: forward
only, owned partitions only), and what a batch read's commit covers (:func:`batch_read_ends`).
Planning of ranges and the offsets JSON are in ``planning.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..config import ConsumerConfig
from ..errors import InvalidConfigError
from ..records import TopicPartition
from .planning import DataLossError, rate_limit

if TYPE_CHECKING:
    from .executor import ZkKafkaBatchPartition

__all__ = ["batch_read_ends", "forward_offsets", "plan_ends"]

log = logging.getLogger(__name__)


def plan_ends(
    owned: Sequence[TopicPartition],
    starts: Mapping[TopicPartition, int],
    rebased: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    target: Mapping[TopicPartition, int] | None,
    *,
    fail_on_data_loss: bool,
    max_rows: int | None,
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Where the next micro-batch ends in every owned partition.

    Each partition ends at its log end offset, or at the ``Trigger.AvailableNow`` target when
    that is lower, never before its start. A start beyond the log end (the log was deleted or
    truncated under the group's offset) fails the batch, or without ``failOnDataLoss`` moves
    to the log end and becomes a rebased start. ``maxOffsetsPerTrigger`` then shares the limit
    between the partitions (:func:`~aiozkconsumer.spark.planning.rate_limit`).

    Args:
        owned: the partitions the member owns.
        starts: ``{tp: start}`` of every owned partition (``plan_starts``).
        rebased: the starts that do not continue the previous batch (``plan_starts``).
        latest: ``{tp: log end offset}`` of every owned partition.
        target: ``{tp: offset}`` to stop at under ``Trigger.AvailableNow`` (every owned
            partition), or ``None``.
        fail_on_data_loss: the ``failOnDataLoss`` option.
        max_rows: the ``ReadMaxRows`` limit of the batch, or ``None`` to read all available.

    Returns:
        ``(ends, rebased)``: the end of every owned partition, and the rebased starts
        (``rebased`` plus the partitions moved to their log end).

    Raises:
        DataLossError: a start is beyond the log end and ``fail_on_data_loss`` is set.
    """
    starts = dict(starts)
    rebased = dict(rebased)
    ends: dict[TopicPartition, int] = {}
    for tp in owned:
        begin = starts[tp]
        end = latest[tp] if target is None else min(latest[tp], target[tp])
        if begin > latest[tp]:
            message = f"offset {begin} of {tp} is beyond its log end offset {latest[tp]}"
            if fail_on_data_loss:
                raise DataLossError(f"{message}; set failOnDataLoss=false to skip ahead")
            log.warning("%s; continuing at the log end", message)
            starts[tp] = rebased[tp] = begin = latest[tp]
        ends[tp] = max(begin, end)
    if max_rows is not None:
        ends = rate_limit({tp: (starts[tp], ends[tp]) for tp in owned}, max_rows)
    return ends, rebased


def forward_offsets(
    ends: Mapping[TopicPartition, int],
    known: Mapping[TopicPartition, int],
    owned: Collection[TopicPartition] | None = None,
) -> dict[TopicPartition, int]:
    """The offsets a commit may write: only forward, and only of owned partitions.

    A late commit must never move the group's progress backwards, nor write a partition
    another member owns now (its new owner commits it).

    Args:
        ends: ``{tp: next offset to read}`` to commit.
        known: the group's committed offsets, where it has one.
        owned: the partitions the committer owns; ``None`` when it is no member (a batch
            read, with no live member in the group).

    Returns:
        The entries of ``ends`` beyond ``known`` (of ``owned`` partitions), in their order.
    """
    return {
        tp: o for tp, o in ends.items() if (owned is None or tp in owned) and o > known.get(tp, -1)
    }


def batch_read_ends(
    tasks: Iterable[ZkKafkaBatchPartition],
) -> dict[ConsumerConfig, dict[TopicPartition, int]]:
    """The end offsets a batch read planned, per group: what ``commit_batch`` commits.

    Args:
        tasks: the Spark tasks planned for the ``zkkafka`` batch scans of a DataFrame.

    Returns:
        ``{config: {tp: largest end planned}}``, one entry per group read.

    Raises:
        InvalidConfigError: there are no tasks (the DataFrame reads no ``zkkafka`` batch
            source), or one was not read with ``commitOnSuccess=true``.
    """
    tasks = list(tasks)
    if not tasks:
        raise InvalidConfigError(
            "commitOnSuccess", "this DataFrame reads no zkkafka batch source: nothing to commit"
        )
    if not all(t.commit_on_success for t in tasks):
        raise InvalidConfigError(
            "commitOnSuccess",
            'the read was not made with .option("commitOnSuccess", "true"): nothing committed',
        )
    by_group: dict[ConsumerConfig, dict[TopicPartition, int]] = {}
    for t in tasks:
        assert t.config is not None
        ends = by_group.setdefault(t.config, {})
        tp = TopicPartition(t.topic, t.partition)
        ends[tp] = max(ends.get(tp, t.end), t.end)
    return by_group
