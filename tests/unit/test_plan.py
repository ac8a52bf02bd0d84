"""The pure rebalance decisions (``aiozkconsumer.plan``): assignment, moves, claims, fencing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiozkconsumer.errors import ZookeeperConnectionError
from aiozkconsumer.plan import (
    decide_claims,
    decide_fencing,
    plan_assignment,
    plan_moves,
)
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.subscription import ConsumerThreadId, StaticTopicCount, TopicCount

TOPICS = ("a", "b", "c")

Stream = tuple[str, str, int]  # (member, topic, thread index): the stream a partition feeds


def tp(topic: str, p: int) -> TopicPartition:
    return TopicPartition(topic, p)


def plans(
    members: Mapping[str, Mapping[str, int]], partitions: Mapping[str, int], strategy: str
) -> dict[str, dict[TopicPartition, ConsumerThreadId]]:
    """Every member's own computation of the plan, from one view; returns its own share.

    Each member computes the plan of the topics it subscribes to (as the original's
    assignors); that the members agree shows in every partition having exactly one owner.
    """
    counts: dict[str, TopicCount] = {m: StaticTopicCount(m, subs) for m, subs in members.items()}
    parts = {t: range(n) for t, n in partitions.items()}
    shares = {}
    for me in members:
        assignment = plan_assignment(
            group="g",
            consumer_id=me,
            topic_counts=counts,
            partitions_for_topic=parts,
            strategy=strategy,
        )
        shares[me] = dict(assignment.get(me, {}))
    return shares


def streams_of(share: Mapping[TopicPartition, ConsumerThreadId], member: str) -> dict:
    return {p: (member, p.topic, tid.thread_id) for p, tid in share.items()}


subscriptions = st.dictionaries(
    st.sampled_from(TOPICS), st.integers(min_value=1, max_value=3), min_size=0, max_size=3
)
views = st.tuples(
    st.dictionaries(
        st.sampled_from([f"m{i}" for i in range(6)]), subscriptions, min_size=1, max_size=6
    ),
    st.fixed_dictionaries({t: st.integers(min_value=0, max_value=12) for t in TOPICS}),
    st.sampled_from(["range", "roundrobin"]),
)


@settings(max_examples=150, deadline=None)
@given(before=views, after_members=st.data())
def test_every_partition_ends_with_exactly_one_owner_and_moves_are_minimal(
    before: tuple, after_members: st.DataObject
) -> None:
    members, partitions, strategy = before
    # Roundrobin needs every member to subscribe to the same topics with the same counts.
    if strategy == "roundrobin":
        first = next(iter(members.values()))
        members = dict.fromkeys(members, first)
    old = plans(members, partitions, strategy)
    # The next view: some members left, some joined (same subscriptions shape).
    leaving = after_members.draw(st.sets(st.sampled_from(sorted(members))))
    joining = after_members.draw(
        st.sets(st.sampled_from([f"n{i}" for i in range(3)]), max_size=3)
    )
    template = next(iter(members.values()))
    new_members = {m: s for m, s in members.items() if m not in leaving}
    new_members.update(dict.fromkeys(joining, template))
    if not new_members:
        return
    new = plans(new_members, partitions, strategy)

    owners: Counter[TopicPartition] = Counter()
    for member in new_members:
        owned = streams_of(old.get(member, {}), member)
        wanted = streams_of(new[member], member)
        moves = plan_moves(owned, wanted)
        # keep + acquire is exactly the new share; keep + release exactly what was owned.
        assert set(moves.keep) | set(moves.acquire) == set(wanted)
        assert not set(moves.keep) & set(moves.acquire)
        assert set(moves.keep) | set(moves.release) == set(owned)
        assert not set(moves.keep) & set(moves.release)
        # Minimal: a partition that stays with this member on the same stream is never released.
        for p, stream in wanted.items():
            if owned.get(p) == stream:
                assert p in moves.keep
        for p in set(owned) - set(moves.release):
            owners[p] += 1
        for p in moves.acquire:
            owners[p] += 1
    # Departed members release everything (they left the group).
    subscribed = {t for subs in new_members.values() for t in subs}
    expected = {tp(t, i) for t in subscribed for i in range(partitions[t])}
    assert set(owners) == expected
    assert all(n == 1 for n in owners.values()), owners


def test_inactive_partition_is_released_and_claimed_again() -> None:
    p = tp("a", 0)
    moves = plan_moves({p: None}, {p: "s0"})
    assert moves.keep == frozenset()
    assert moves.release == frozenset({p})
    assert dict(moves.acquire) == {p: "s0"}


def test_partition_moving_to_another_stream_of_the_same_member_moves() -> None:
    p, q = tp("a", 0), tp("a", 1)
    moves = plan_moves({p: "s0", q: "s1"}, {p: "s1", q: "s1"})
    assert moves.keep == frozenset({q})
    assert moves.release == frozenset({p})
    assert dict(moves.acquire) == {p: "s1"}
    assert moves.counts == (1, 1, 1)


@given(
    st.dictionaries(
        st.builds(tp, st.sampled_from(TOPICS), st.integers(min_value=0, max_value=20)),
        st.sampled_from(["created", "taken", "error"]),
        max_size=30,
    )
)
def test_failed_claim_undoes_exactly_what_it_created(kinds: dict[TopicPartition, str]) -> None:
    errors = {p: ZookeeperConnectionError(f"lost at {p}") for p in kinds}
    results: dict[TopicPartition, bool | Exception] = {
        p: (True if k == "created" else False if k == "taken" else errors[p])
        for p, k in kinds.items()
    }
    outcome = decide_claims(results)
    created = {p for p, k in kinds.items() if k == "created"}
    assert outcome.created == created
    assert outcome.blocking == {p for p, k in kinds.items() if k == "taken"}
    failed = any(k != "created" for k in kinds.values())
    assert outcome.succeeded is not failed
    assert outcome.undo == (created if failed else frozenset())
    failing = sorted(p for p, k in kinds.items() if k == "error")
    assert outcome.error is (errors[failing[0]] if failing else None)


def test_fencing_failure_undoes_every_claim() -> None:
    p, q = tp("a", 0), tp("a", 1)
    ok = decide_fencing({p: 3, q: 0})
    assert dict(ok.tokens) == {p: 3, q: 0}
    assert ok.undo == frozenset() and ok.error is None
    boom = ZookeeperConnectionError("cut")
    failed = decide_fencing({p: 3, q: boom})
    assert failed.tokens == {}
    assert failed.undo == frozenset({p, q})
    assert failed.error is boom


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_plan_assignment_names_every_member(strategy: str) -> None:
    shares = plans({"m1": {"a": 1}, "m2": {"a": 1}}, {"a": 3, "b": 0, "c": 0}, strategy)
    assert set(shares) == {"m1", "m2"}
    assert sorted(p for s in shares.values() for p in s) == [tp("a", i) for i in range(3)]
