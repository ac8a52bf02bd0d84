"""Range and roundrobin assignment, as PartitionAssignor.scala (Kafka 0.10.2)."""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiozkconsumer.assignors import (
    ASSIGNORS,
    Assignment,
    AssignmentContext,
    get_assignor,
    java_string_hash,
    range_assign,
    roundrobin_assign,
)
from aiozkconsumer.errors import InvalidConfigError
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.subscription import (
    ConsumerThreadId,
    StaticTopicCount,
    TopicCount,
    Whitelist,
    WildcardTopicCount,
)

Subscriptions = Mapping[str, Mapping[str, int]]


def ctx_for(
    me: str,
    subscriptions: Subscriptions,
    partitions: Mapping[str, int],
    version: str = "0.10.2",
) -> AssignmentContext:
    """Context for member ``me`` of a group of static members (topic -> partition count)."""
    registrations: dict[str, TopicCount] = {
        member: StaticTopicCount(member, topics) for member, topics in subscriptions.items()
    }
    return AssignmentContext.build(
        "g", me, registrations, {t: range(n) for t, n in partitions.items()}, version
    )


def tid(s: str) -> ConsumerThreadId:
    return ConsumerThreadId.parse(s)


def flat(plan: Assignment) -> dict[str, str]:
    """``"topic-p" -> "thread"`` over the whole plan, checking each thread's member."""
    out: dict[str, str] = {}
    for consumer, owned in plan.items():
        for tp, thread in owned.items():
            assert thread.consumer == consumer
            out[f"{tp.topic}-{tp.partition}"] = str(thread)
    return out


# --------------------------------------------------------------------------------------------
# java_string_hash
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        # Values printed by a JVM (jshell, "x".hashCode()).
        ("hello", 99162322),
        ("", 0),
        ("Kafka", 72255238),
        ("[t,0]", 87540032),
        ("[t,10]", -1581226645),
        ("[t1,0]", -1581082495),
        ("[events,3]", -670581246),
        ("polygenelubricants", -(2**31)),
        ("é", 233),
        ("\U0001f600", 1772899),  # two UTF-16 code units
        ("ab", 3105),
        ("bC", 3105),
    ],
)
def test_java_string_hash_known_values(s: str, expected: int) -> None:
    assert java_string_hash(s) == expected


def test_java_string_hash_formula() -> None:
    # "[t,0]" = s[0]*31^4 + s[1]*31^3 + s[2]*31^2 + s[3]*31 + s[4]
    expected = ord("[") * 31**4 + ord("t") * 31**3 + ord(",") * 31**2 + ord("0") * 31 + ord("]")
    assert java_string_hash("[t,0]") == expected == 87540032


def _reference_hash(s: str) -> int:
    units: list[int] = []
    for ch in s:
        cp = ord(ch)
        if cp > 0xFFFF:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    h: int = sum(u * 31 ** (len(units) - 1 - i) for i, u in enumerate(units)) % 2**32
    return h - 2**32 if h >= 2**31 else h


@given(st.text())
def test_java_string_hash_matches_the_big_integer_formula(s: str) -> None:
    h = java_string_hash(s)
    assert -(2**31) <= h < 2**31
    assert h == _reference_hash(s)


# --------------------------------------------------------------------------------------------
# range
# --------------------------------------------------------------------------------------------


def test_range_javadoc_example() -> None:
    # Two consumers with two streams each, five partitions:
    # p0, p1 -> C1-0; p2 -> C1-1; p3 -> C2-0; p4 -> C2-1.
    subs = {"C1": {"t": 2}, "C2": {"t": 2}}
    plan = range_assign(ctx_for("C1", subs, {"t": 5}))
    assert plan == {
        "C1": {
            TopicPartition("t", 0): tid("C1-0"),
            TopicPartition("t", 1): tid("C1-0"),
            TopicPartition("t", 2): tid("C1-1"),
        },
        "C2": {
            TopicPartition("t", 3): tid("C2-0"),
            TopicPartition("t", 4): tid("C2-1"),
        },
    }
    assert range_assign(ctx_for("C2", subs, {"t": 5})) == plan


@pytest.mark.parametrize(
    ("partitions", "expected"),
    [
        # seeds/000: t1 with 10 partitions, c1 with one thread, c2 with two threads.
        (10, {"c1-0": [0, 1, 2, 3], "c2-0": [4, 5, 6], "c2-1": [7, 8, 9]}),
        # ... and with 11 partitions.
        (11, {"c1-0": [0, 1, 2, 3], "c2-0": [4, 5, 6, 7], "c2-1": [8, 9, 10]}),
    ],
)
def test_range_seed_example(partitions: int, expected: dict[str, list[int]]) -> None:
    subs = {"c1": {"t1": 1}, "c2": {"t1": 2}}
    got: dict[str, list[int]] = {}
    for key, thread in flat(range_assign(ctx_for("c2", subs, {"t1": partitions}))).items():
        got.setdefault(thread, []).append(int(key.split("-")[1]))
    assert {k: sorted(v) for k, v in got.items()} == expected


def test_range_seed_example_two_by_two() -> None:
    # seeds/001: 2 consumers x 2 threads, 5 partitions (the document's last "P3 C2_1" is P4).
    plan = flat(range_assign(ctx_for("C1", {"C1": {"t": 2}, "C2": {"t": 2}}, {"t": 5})))
    assert plan == {"t-0": "C1-0", "t-1": "C1-0", "t-2": "C1-1", "t-3": "C2-0", "t-4": "C2-1"}


def test_range_orders_threads_as_strings_with_ten_or_more_streams() -> None:
    plan = flat(range_assign(ctx_for("c", {"c": {"t": 12}}, {"t": 12})))
    # Thread order is c-0, c-1, c-10, c-11, c-2, ..., c-9.
    assert plan["t-0"] == "c-0"
    assert plan["t-1"] == "c-1"
    assert plan["t-2"] == "c-10"
    assert plan["t-3"] == "c-11"
    assert plan["t-4"] == "c-2"
    assert plan["t-11"] == "c-9"


def test_range_orders_members_as_strings() -> None:
    subs = {"g_hostB": {"t": 1}, "g_hostA": {"t": 1}, "g_Z": {"t": 1}}
    plan = flat(range_assign(ctx_for("g_hostA", subs, {"t": 3})))
    assert plan == {"t-0": "g_Z-0", "t-1": "g_hostA-0", "t-2": "g_hostB-0"}


def test_range_more_threads_than_partitions(caplog: pytest.LogCaptureFixture) -> None:
    subs = {"a": {"t": 2}, "b": {"t": 2}}
    with caplog.at_level(logging.WARNING, logger="aiozkconsumer.assignors"):
        plan = range_assign(ctx_for("a", subs, {"t": 3}))
    assert flat(plan) == {"t-0": "a-0", "t-1": "a-1", "t-2": "b-0"}
    assert plan["b"] == {TopicPartition("t", 2): tid("b-0")}
    assert "No broker partitions consumed by consumer thread b-1 for topic t" in caplog.text


def test_range_covers_only_my_topics_but_lists_every_member() -> None:
    subs = {"a": {"x": 1}, "b": {"x": 1, "y": 1}, "idle": {}}
    plan = range_assign(ctx_for("a", subs, {"x": 2, "y": 2}))
    assert set(plan) == {"a", "b", "idle"}
    assert flat(plan) == {"x-0": "a-0", "x-1": "b-0"}
    assert plan["idle"] == {}
    plan_b = range_assign(ctx_for("b", subs, {"x": 2, "y": 2}))
    assert flat(plan_b) == {"x-0": "a-0", "x-1": "b-0", "y-0": "b-0", "y-1": "b-0"}


def test_range_topic_without_partitions() -> None:
    plan = range_assign(ctx_for("a", {"a": {"gone": 1}}, {}))
    assert plan == {"a": {}}


def test_range_with_a_wildcard_member() -> None:
    topics = ["logs.a", "logs.b", "other"]
    registrations: dict[str, TopicCount] = {
        "w": WildcardTopicCount("w", Whitelist("logs\\..*"), 1, topics, True),
        "s": StaticTopicCount("s", {"logs.a": 1}),
    }
    ctx = AssignmentContext.build("g", "s", registrations, {"logs.a": [0, 1], "logs.b": [0]})
    assert flat(range_assign(ctx)) == {"logs.a-0": "s-0", "logs.a-1": "w-0"}
    ctx_w = AssignmentContext.build("g", "w", registrations, {"logs.a": [0, 1], "logs.b": [0]})
    assert flat(range_assign(ctx_w)) == {"logs.a-0": "s-0", "logs.a-1": "w-0", "logs.b-0": "w-0"}


# --------------------------------------------------------------------------------------------
# roundrobin
# --------------------------------------------------------------------------------------------


def test_roundrobin_sorts_partitions_by_java_hash() -> None:
    # hashCode order of "[t,p]" for 12 partitions is 10, 11, 0, 1, ..., 9 ("[t,10]" < 0).
    plan = flat(roundrobin_assign(ctx_for("a", {"a": {"t": 1}, "b": {"t": 1}}, {"t": 12})))
    order = [10, 11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert [plan[f"t-{p}"] for p in order] == ["a-0", "b-0"] * 6


def test_roundrobin_seed_example_deals_in_hash_order() -> None:
    # seeds/000: t1 with 10 partitions, c1 and c2 with two threads each. The document's
    # partition order is illustrative; the real one is hashCode order, here 0..9.
    subs = {"c1": {"t1": 2}, "c2": {"t1": 2}}
    plan = flat(roundrobin_assign(ctx_for("c1", subs, {"t1": 10})))
    assert [plan[f"t1-{p}"] for p in range(10)] == [
        "c1-0", "c1-1", "c2-0", "c2-1", "c1-0", "c1-1", "c2-0", "c2-1", "c1-0", "c1-1",
    ]  # fmt: skip


def test_roundrobin_mixed_subscriptions_skips_and_consumes_threads() -> None:
    # Threads in string order: A-0, B-0, B-1, C-0. x: A-0, B-0; y: B-0, B-1, C-0.
    # Hash order: x-0, x-1, x-2, y-0, y-1, y-2.
    subs = {"A": {"x": 1}, "B": {"x": 1, "y": 2}, "C": {"y": 1}}
    plan = roundrobin_assign(ctx_for("C", subs, {"x": 3, "y": 3}))
    assert flat(plan) == {
        "x-0": "A-0",
        "x-1": "B-0",
        "x-2": "A-0",  # B-1 and C-0 are not on x: skipped and consumed
        "y-0": "B-0",
        "y-1": "B-1",
        "y-2": "C-0",
    }
    # Every member computes the same global plan (0.10.2 context holds all group topics).
    assert roundrobin_assign(ctx_for("A", subs, {"x": 3, "y": 3})) == plan
    assert roundrobin_assign(ctx_for("B", subs, {"x": 3, "y": 3})) == plan


def test_roundrobin_0_9_context_holds_only_my_topics() -> None:
    subs = {"A": {"x": 1}, "B": {"x": 1, "y": 1}}
    ctx = ctx_for("A", subs, {"x": 2, "y": 2}, version="0.9.0")
    assert set(ctx.partitions_for_topic) == {"x"}
    assert set(flat(roundrobin_assign(ctx))) == {"x-0", "x-1"}
    ctx_new = ctx_for("A", subs, {"x": 2, "y": 2})
    assert set(ctx_new.partitions_for_topic) == {"x", "y"}


def test_roundrobin_hash_tie_keeps_topic_order() -> None:
    # "[ab,0]" and "[bC,0]" have the same hashCode; ties keep topic-name order here.
    assert java_string_hash("[ab,0]") == java_string_hash("[bC,0]")
    subs = {"m": {"ab": 1, "bC": 1}, "n": {"ab": 1, "bC": 1}}
    plan = flat(roundrobin_assign(ctx_for("m", subs, {"ab": 1, "bC": 1})))
    assert plan == {"ab-0": "m-0", "bC-0": "n-0"}


def test_roundrobin_empty_group_topics() -> None:
    plan = roundrobin_assign(ctx_for("a", {"a": {}, "b": {}}, {"t": 3}))
    assert plan == {"a": {}, "b": {}}


# --------------------------------------------------------------------------------------------
# context and registry
# --------------------------------------------------------------------------------------------


def test_context_build_collects_sorted_threads() -> None:
    ctx = ctx_for("b", {"b": {"t": 2}, "a": {"t": 1, "u": 1}}, {"t": 2, "u": 3})
    assert ctx.consumers == ("a", "b")
    assert ctx.consumers_for_topic["t"] == (tid("a-0"), tid("b-0"), tid("b-1"))
    assert ctx.consumers_for_topic["u"] == (tid("a-0"),)
    assert ctx.my_topic_thread_ids == {"t": frozenset({tid("b-0"), tid("b-1")})}
    assert ctx.partitions_for_topic == {"t": (0, 1), "u": (0, 1, 2)}


def test_context_build_sorts_partitions_and_fills_missing_topics() -> None:
    registrations: dict[str, TopicCount] = {"a": StaticTopicCount("a", {"t": 1, "new": 1})}
    ctx = AssignmentContext.build("g", "a", registrations, {"t": [3, 1, 2], "unrelated": [0]})
    assert ctx.partitions_for_topic == {"t": (1, 2, 3), "new": ()}


def test_context_build_errors() -> None:
    registrations: dict[str, TopicCount] = {"a": StaticTopicCount("a", {"t": 1})}
    with pytest.raises(KeyError):
        AssignmentContext.build("g", "me", registrations, {})
    with pytest.raises(ValueError, match="belongs to"):
        AssignmentContext.build("g", "b", {"b": StaticTopicCount("a", {"t": 1})}, {})
    with pytest.raises(ValueError, match="version"):
        AssignmentContext.build("g", "a", registrations, {}, version="0.11.0")


def test_context_validates_direct_construction() -> None:
    with pytest.raises(ValueError, match="no consumer threads"):
        AssignmentContext("g", "a", {}, {}, {"t": (0,)}, ("a",))
    with pytest.raises(ValueError, match="lacks threads"):
        AssignmentContext("g", "a", {"t": frozenset({tid("a-0")})}, {"t": (tid("b-0"),)}, {}, ())


def test_registry() -> None:
    assert set(ASSIGNORS) == {"range", "roundrobin"}
    assert get_assignor("range") is range_assign
    assert get_assignor("roundrobin") is roundrobin_assign


@pytest.mark.parametrize("name", ["RANGE", "round-robin", "sticky", ""])
def test_unknown_strategy(name: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        get_assignor(name)
    assert info.value.key == "partition.assignment.strategy"
    assert f"Wrong value {name} of partition.assignment.strategy" in str(info.value)


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------

# Topic names include a hash-colliding pair ("ab"/"bC"); member ids include ones whose
# thread ids sort across each other ("c"/"c-1"/"c0").
_TOPICS = ["ab", "bC", "t", "logs.x"]
_MEMBERS = ["c", "c-1", "c0", "g_hostA", "g_hostB"]


@st.composite
def groups(draw: st.DrawFn) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    members = draw(st.lists(st.sampled_from(_MEMBERS), min_size=1, max_size=5, unique=True))
    subscriptions = {
        m: draw(st.dictionaries(st.sampled_from(_TOPICS), st.integers(1, 12), max_size=4))
        for m in members
    }
    partitions = draw(st.dictionaries(st.sampled_from(_TOPICS), st.integers(0, 25)))
    return subscriptions, partitions


def _check_plan(ctx: AssignmentContext, plan: Assignment, topics: set[str]) -> None:
    # Every member has an entry and threads belong to the member they are listed under.
    assert set(plan) == set(ctx.consumers)
    seen: Counter[TopicPartition] = Counter()
    for consumer, owned in plan.items():
        for tp, thread in owned.items():
            assert thread.consumer == consumer
            assert thread in ctx.consumers_for_topic[tp.topic]
            seen[tp] += 1
    expected = {TopicPartition(t, p) for t in topics for p in ctx.partitions_for_topic.get(t, ())}
    assert set(seen) == expected
    assert all(n == 1 for n in seen.values())


@settings(max_examples=200, deadline=None)
@given(groups())
def test_range_properties(group: tuple[dict[str, dict[str, int]], dict[str, int]]) -> None:
    subscriptions, partitions = group
    plans = {}
    for me in subscriptions:
        ctx = ctx_for(me, subscriptions, partitions)
        plan = range_assign(ctx)
        _check_plan(ctx, plan, set(subscriptions[me]))
        assert range_assign(ctx) == plan
        plans[me] = plan
        # Floor/ceil counts per thread, the extras going to the first threads.
        for topic in subscriptions[me]:
            threads = ctx.consumers_for_topic[topic]
            n = len(ctx.partitions_for_topic[topic])
            counts = Counter(
                thread
                for owned in plan.values()
                for tp, thread in owned.items()
                if tp.topic == topic
            )
            floor, extra = divmod(n, len(threads))
            assert [counts[t] for t in threads] == [
                floor + (1 if i < extra else 0) for i in range(len(threads))
            ]
    # Members agree on every topic they share.
    for a in subscriptions:
        for b in subscriptions:
            for topic in set(subscriptions[a]) & set(subscriptions[b]):
                assert _restrict(plans[a], topic) == _restrict(plans[b], topic)


def _restrict(plan: Assignment, topic: str) -> dict[TopicPartition, ConsumerThreadId]:
    return {tp: t for owned in plan.values() for tp, t in owned.items() if tp.topic == topic}


@settings(max_examples=200, deadline=None)
@given(groups())
def test_roundrobin_properties(group: tuple[dict[str, dict[str, int]], dict[str, int]]) -> None:
    subscriptions, partitions = group
    group_topics = {t for topics in subscriptions.values() for t in topics}
    first = None
    for me in subscriptions:
        ctx = ctx_for(me, subscriptions, partitions)
        plan = roundrobin_assign(ctx)
        _check_plan(ctx, plan, group_topics)
        assert roundrobin_assign(ctx) == plan
        if first is None:
            first = plan
        assert plan == first  # every member derives the same global plan


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(_MEMBERS), min_size=1, max_size=5, unique=True),
    st.lists(st.sampled_from(_TOPICS), min_size=1, unique=True),
    st.integers(1, 4),
    st.dictionaries(st.sampled_from(_TOPICS), st.integers(0, 25)),
)
def test_roundrobin_identical_subscriptions_are_balanced(
    members: list[str], topics: list[str], streams: int, partitions: dict[str, int]
) -> None:
    # The pre-KAFKA-2434 precondition: same topics, same stream count for every topic.
    subscription = dict.fromkeys(topics, streams)
    ctx = ctx_for(members[0], dict.fromkeys(members, subscription), partitions)
    plan = roundrobin_assign(ctx)
    per_thread = Counter(t for owned in plan.values() for t in owned.values())
    threads = {t for ts in ctx.consumers_for_topic.values() for t in ts}
    counts = [per_thread[t] for t in threads]
    assert max(counts) - min(counts) <= 1


@settings(max_examples=60, deadline=None)
@given(groups(), st.randoms(use_true_random=False))
def test_plans_do_not_depend_on_input_order(
    group: tuple[dict[str, dict[str, int]], dict[str, int]], rnd: random.Random
) -> None:
    subscriptions, partitions = group
    members = list(subscriptions)
    shuffled_members = members[:]
    rnd.shuffle(shuffled_members)
    shuffled = {
        m: dict(rnd.sample(sorted(subscriptions[m].items()), len(subscriptions[m])))
        for m in shuffled_members
    }
    parts = {
        t: rnd.sample(range(n), n)
        for t, n in rnd.sample(sorted(partitions.items()), len(partitions))
    }
    registrations: dict[str, TopicCount] = {m: StaticTopicCount(m, shuffled[m]) for m in shuffled}
    for me in members:
        ctx = AssignmentContext.build("g", me, registrations, parts)
        for assign in (range_assign, roundrobin_assign):
            assert assign(ctx) == assign(ctx_for(me, subscriptions, partitions))
