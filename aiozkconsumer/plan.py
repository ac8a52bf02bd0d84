"""The rebalance decisions, as pure functions: data in, the I/O to do out.

The rebalance worker (``rebalance.py``) reads a view of the group, asks these functions what
to do and performs it; nothing here awaits or touches ZooKeeper or Kafka, so the rules are
unit- and property-tested without servers (as httpcore's ``_assign_requests_to_connections``
returns the connections to close and the caller closes them).

- :func:`plan_assignment`: the group's assignment from one view (the original's assignors).
- :func:`plan_moves`: what this member keeps, releases and acquires (incremental rebalance).
- :func:`decide_claims`: after creating owner nodes, whether the attempt holds and which of
  its own nodes to delete again (``reflectPartitionOwnershipDecision``).
- :func:`decide_fencing`: after bumping the fencing tokens of the claimed partitions, the
  tokens, or the claims to undo when a bump failed (no owner node may stay orphaned).
- :func:`registrations_still_valid`: whether the members' registrations read with the
  previous view are still those of the same nodes (so only new members' are read again).
- :func:`claim_transaction`, :func:`fence_transaction`, :func:`delete_transaction`: the
  ZooKeeper transactions (one ``multi`` each) that claim owner nodes and bump their fencing
  tokens together, bump tokens alone, and delete owner nodes; :func:`fencing_tokens` reads the
  tokens out of an applied one.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from .assignors import Assignment, AssignmentContext, get_assignor
from .records import TopicPartition
from .subscription import ConsumerThreadId, TopicCount
from .zk import layout
from .zk.ops import Create, Delete, MultiResult, Op, SetData

__all__ = [
    "ClaimOutcome",
    "FencingOutcome",
    "Moves",
    "claim_transaction",
    "decide_claims",
    "decide_fencing",
    "delete_transaction",
    "fence_transaction",
    "fencing_tokens",
    "plan_assignment",
    "plan_moves",
    "registrations_still_valid",
]

_S = TypeVar("_S", bound=Hashable)


def plan_assignment(
    *,
    group: str,
    consumer_id: str,
    topic_counts: Mapping[str, TopicCount],
    partitions_for_topic: Mapping[str, Iterable[int]],
    strategy: str,
) -> Assignment:
    """Compute the group's assignment from one view of it.

    Every member computes the same plan from the same view (``PartitionAssignor``, 0.10.2).

    Args:
        group: ``group.id``.
        consumer_id: the consumer id string of the member computing the plan.
        topic_counts: every member's subscription, by consumer id string.
        partitions_for_topic: partition ids of each subscribed topic.
        strategy: ``partition.assignment.strategy`` (``range`` or ``roundrobin``).

    Returns:
        ``{consumer id: {TopicPartition: ConsumerThreadId}}`` with an entry (maybe empty) for
        every member, as the original's assignors return.

    Raises:
        InvalidConfigError: unknown strategy.
    """
    ctx = AssignmentContext.build(group, consumer_id, topic_counts, partitions_for_topic)
    return get_assignor(strategy)(ctx)


@dataclass(frozen=True)
class Moves(Generic[_S]):
    """What one member does with its partitions in a rebalance.

    Attributes:
        keep: owned partitions that stay with this member and feed the same stream: their
            owner node, fetcher and queued records stay untouched.
        release: owned partitions to give up (stop, commit, listener, delete owner node).
        acquire: partitions to claim, with the stream each is to feed.
    """

    keep: frozenset[TopicPartition]
    release: frozenset[TopicPartition]
    acquire: Mapping[TopicPartition, _S]

    @property
    def counts(self) -> tuple[int, int, int]:
        """``(kept, released, acquired)`` partition counts."""
        return (len(self.keep), len(self.release), len(self.acquire))


def plan_moves(
    owned: Mapping[TopicPartition, _S | None], wanted: Mapping[TopicPartition, _S]
) -> Moves[_S]:
    """Decide keep / release / acquire from what is owned and what the plan gives.

    Incremental, beyond the original (which released and re-claimed everything): a partition
    is kept only when the plan gives it to this member *for the same stream*. Every member
    computes the same plan, so nobody else claims what one member keeps.

    Args:
        owned: ``{tp: stream it feeds}`` for every partition this member owns now; ``None``
            for one that may not be kept as it is (already inactive: it is released and, if
            the plan gives it back, claimed afresh).
        wanted: ``{tp: stream}`` this member's share of the plan.

    Returns:
        The moves. ``keep`` and ``acquire`` partition ``wanted``; ``keep`` and ``release``
        partition ``owned``; a partition whose stream does not change is never released.
    """
    keep = frozenset(
        tp
        for tp, stream in wanted.items()
        if tp in owned and owned[tp] is not None and owned[tp] == stream
    )
    release = frozenset(tp for tp in owned if tp not in keep)
    acquire = {tp: stream for tp, stream in wanted.items() if tp not in keep}
    return Moves(keep=keep, release=release, acquire=acquire)


@dataclass(frozen=True)
class ClaimOutcome:
    """The result of one attempt's owner-node creations.

    Attributes:
        created: partitions whose owner node this attempt created (or found holding exactly
            its own value, a create retried over a connection loss).
        blocking: partitions whose owner node holds another member's value.
        error: the first failure of a create, if any.
    """

    created: frozenset[TopicPartition]
    blocking: frozenset[TopicPartition]
    error: Exception | None

    @property
    def succeeded(self) -> bool:
        """Whether every claim holds (the attempt may go on)."""
        return not self.blocking and self.error is None

    @property
    def undo(self) -> frozenset[TopicPartition]:
        """The owner nodes to delete again: all this attempt created, if it failed."""
        return frozenset() if self.succeeded else self.created


def decide_claims(results: Mapping[TopicPartition, bool | Exception]) -> ClaimOutcome:
    """Judge the creations of an attempt's owner nodes.

    As ``reflectPartitionOwnershipDecision`` (0.10.2), all are tried. The original failed the
    attempt on any conflict and deleted the nodes it did create; the rebalancer keeps them and
    waits on the blocking ones while the membership is unchanged, and deletes them (``undo``)
    when the attempt fails, so a half-claimed plan never holds partitions others wait for.

    Args:
        results: per partition, ``True`` (created), ``False`` (another value is there) or the
            exception its create raised.

    Returns:
        The outcome; ``error`` is the failure of the smallest partition that failed.
    """
    created = frozenset(tp for tp, r in results.items() if r is True)
    blocking = frozenset(tp for tp, r in results.items() if r is False)
    errors = [results[tp] for tp in sorted(results) if isinstance(results[tp], Exception)]
    error = errors[0] if errors else None
    assert error is None or isinstance(error, Exception)
    return ClaimOutcome(created=created, blocking=blocking, error=error)


@dataclass(frozen=True)
class FencingOutcome:
    """The result of bumping the fencing tokens of freshly claimed partitions.

    Attributes:
        tokens: ``{tp: new fencing token}`` when every bump succeeded, else empty.
        undo: the claimed partitions to release again (all of them) when a bump failed, so no
            owner node stays without an entry in the ownership state.
        error: the first failure, if any.
    """

    tokens: Mapping[TopicPartition, int]
    undo: frozenset[TopicPartition]
    error: Exception | None


def decide_fencing(results: Mapping[TopicPartition, int | Exception]) -> FencingOutcome:
    """Judge the fencing bumps of the partitions an attempt claimed.

    Args:
        results: per claimed partition, the new fencing token or the exception its bump raised.

    Returns:
        The tokens if all succeeded; otherwise the claims to undo (every one of them) and the
        failure of the smallest partition that failed.
    """
    errors = [results[tp] for tp in sorted(results) if isinstance(results[tp], Exception)]
    if errors:
        error = errors[0]
        assert isinstance(error, Exception)
        return FencingOutcome(tokens={}, undo=frozenset(results), error=error)
    tokens = {tp: r for tp, r in results.items() if not isinstance(r, Exception)}
    return FencingOutcome(tokens=tokens, undo=frozenset(), error=None)


def registrations_still_valid(
    previous: Iterable[str], previous_version: int, current: Iterable[str], current_version: int
) -> bool:
    """Whether the registration data read with a previous view is still the data of the nodes
    listed now.

    A registration node is written once, when the member registers (``ZKCheckedEphemeral``,
    0.10.2), and never updated; it changes only by being deleted and created again (a member
    re-registering under the same consumer id). ZooKeeper's child version of ``/ids``
    (``cversion``) counts every creation and deletion of a child. Between the previous list
    and the current one, each member that joined or left accounts for at least one change; a
    member deleted and registered again, invisible in the lists, for two more. So when the
    version moved by exactly the number of members that joined or left, no member present in
    both lists was registered again, and its data read with the previous view still holds.

    Args:
        previous: the members listed by the previous view.
        previous_version: the child version read with that list in one snapshot
            (``getChildren2``), or before it (so that every change after it is counted).
        current: the members listed now.
        current_version: the child version read with this list, or after it (likewise).

    Returns:
        ``True`` when the previous data may be used for the members in both lists; ``False``
        when some change is unaccounted for (every registration must be read again).
    """
    joined_or_left = len(set(previous) ^ set(current))
    return current_version - previous_version == joined_or_left


def claim_transaction(
    group: str,
    claims: Mapping[TopicPartition, ConsumerThreadId],
    held: Mapping[TopicPartition, ConsumerThreadId] | None = None,
) -> list[Op]:
    """The transaction that claims ``claims`` and moves their fencing tokens on, all or none.

    An ephemeral owner node per partition with the thread id (the original's
    ``reflectPartitionOwnershipDecision``, byte for byte), then a write of each partition's
    fencing node (its version is the token; the data the thread id, as ``bump``). Applied,
    every claim holds and no former owner can commit any more; failed (an owner node another
    member still holds, a missing ``owners/<topic>`` or fencing node), nothing happened.

    Args:
        group: ``group.id``.
        claims: ``{partition: the thread id that will consume it}``.
        held: partitions whose owner node this attempt holds already (claimed one by one
            before a wait) and whose fencing tokens it has not moved on yet: their fencing
            nodes are written in the same transaction.

    Returns:
        The operations: the creates in partition order, then the fencing writes of
        ``claims`` and ``held`` in partition order.
    """
    items = sorted(claims.items())
    creates: list[Op] = [
        Create(
            layout.owner_path(group, tp.topic, tp.partition),
            layout.encode_owner(str(tid)),
            ephemeral=True,
        )
        for tp, tid in items
    ]
    return creates + fence_transaction(group, {**(held or {}), **claims})


def fence_transaction(group: str, claimed: Mapping[TopicPartition, ConsumerThreadId]) -> list[Op]:
    """The transaction that moves the fencing tokens of ``claimed`` on: a write of each
    partition's existing fencing node (any version), in partition order. Fails whole on a
    missing fencing node (a partition never claimed before: ``bump`` creates it)."""
    return [
        SetData(layout.fencing_path(group, tp.topic, tp.partition), layout.encode_owner(str(tid)))
        for tp, tid in sorted(claimed.items())
    ]


def fencing_tokens(
    group: str, partitions: Iterable[TopicPartition], result: MultiResult
) -> dict[TopicPartition, int]:
    """The new fencing token of each of ``partitions`` that an applied transaction wrote.

    Args:
        group: ``group.id``.
        partitions: the partitions whose fencing nodes the transaction wrote.
        result: the applied transaction (:func:`claim_transaction` or
            :func:`fence_transaction`).

    Returns:
        ``{partition: token}``; empty when the transaction was not applied.
    """
    if not result.applied:
        return {}
    written = {
        op.path: version
        for op, version in zip(result.ops, result.versions, strict=True)
        if isinstance(op, SetData) and version is not None
    }
    tokens: dict[TopicPartition, int] = {}
    for tp in partitions:
        version = written.get(layout.fencing_path(group, tp.topic, tp.partition))
        if version is not None:
            tokens[tp] = version
    return tokens


def delete_transaction(group: str, partitions: Iterable[TopicPartition]) -> list[Op]:
    """The transaction that deletes the owner nodes of ``partitions`` (any version), in
    partition order. Fails whole when one is gone already (then each is deleted alone)."""
    return [
        Delete(layout.owner_path(group, tp.topic, tp.partition)) for tp in sorted(set(partitions))
    ]
