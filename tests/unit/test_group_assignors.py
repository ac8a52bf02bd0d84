"""Range and roundrobin for the classic group protocol, as kafka-clients' assignors."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiozkconsumer.errors import InvalidConfigError
from aiozkconsumer.group.assignors import (
    SUPPORTED_STRATEGIES,
    GroupAssignment,
    RangeAssignor,
    RoundRobinAssignor,
    assign,
)
from aiozkconsumer.records import TopicPartition


def tps(*names: str) -> list[TopicPartition]:
    """``tps("t0p1", "t1p0")`` -> the partitions, in the Javadoc's notation."""
    out: list[TopicPartition] = []
    for name in names:
        topic, _, partition = name.partition("p")
        out.append(TopicPartition(topic, int(partition)))
    return out


# --- the Javadoc examples ---------------------------------------------------------------


def test_range_javadoc_example() -> None:
    result = assign("range", {"C0": ["t0", "t1"], "C1": ["t0", "t1"]}, {"t0": 3, "t1": 3})
    assert result == {
        "C0": tps("t0p0", "t0p1", "t1p0", "t1p1"),
        "C1": tps("t0p2", "t1p2"),
    }


def test_roundrobin_javadoc_example() -> None:
    result = assign("roundrobin", {"C0": ["t0", "t1"], "C1": ["t0", "t1"]}, {"t0": 3, "t1": 3})
    assert result == {
        "C0": tps("t0p0", "t0p2", "t1p1"),
        "C1": tps("t0p1", "t1p0", "t1p2"),
    }


def test_roundrobin_javadoc_uneven_subscriptions() -> None:
    subscriptions = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    result = assign("roundrobin", subscriptions, {"t0": 1, "t1": 2, "t2": 3})
    assert result == {
        "C0": tps("t0p0"),
        "C1": tps("t1p0"),
        "C2": tps("t1p1", "t2p0", "t2p1", "t2p2"),
    }


def test_range_uneven_subscriptions() -> None:
    subscriptions = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    result = assign("range", subscriptions, {"t0": 1, "t1": 2, "t2": 3})
    assert result == {
        "C0": tps("t0p0"),
        "C1": tps("t1p0"),
        "C2": tps("t1p1", "t2p0", "t2p1", "t2p2"),
    }


# --- names, edges and errors ------------------------------------------------------------


def test_names() -> None:
    assert SUPPORTED_STRATEGIES == ("range", "roundrobin", "sticky", "cooperative-sticky")
    assert RangeAssignor.name == RangeAssignor().name == "range"
    assert RoundRobinAssignor.name == RoundRobinAssignor().name == "roundrobin"


@pytest.mark.parametrize("strategy", ["Sticky", "cooperative_sticky", "Range", ""])
def test_unknown_strategy(strategy: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        assign(strategy, {"C0": ["t0"]}, {"t0": 1})
    assert info.value.key == "partition.assignment.strategy"


@pytest.mark.parametrize("strategy", SUPPORTED_STRATEGIES)
def test_every_member_has_an_entry(strategy: str) -> None:
    subscriptions = {"C0": ["t0"], "C1": [], "C2": ["unknown"], "C3": ["empty"]}
    result = assign(strategy, subscriptions, {"t0": 2, "empty": 0, "unsubscribed": 4})
    assert result == {"C0": tps("t0p0", "t0p1"), "C1": [], "C2": [], "C3": []}


@pytest.mark.parametrize("strategy", SUPPORTED_STRATEGIES)
def test_no_members(strategy: str) -> None:
    assert assign(strategy, {}, {"t0": 3}) == {}


@pytest.mark.parametrize("strategy", SUPPORTED_STRATEGIES)
def test_more_members_than_partitions(strategy: str) -> None:
    subscriptions = {f"C{i}": ["t0"] for i in range(4)}
    result = assign(strategy, subscriptions, {"t0": 2})
    assert result == {"C0": tps("t0p0"), "C1": tps("t0p1"), "C2": [], "C3": []}


def test_static_members_sort_first_by_instance_id() -> None:
    # MemberInfo.compareTo: instance ids (z-, y-) before member ids; a, b are dynamic.
    subscriptions = {m: ["t0"] for m in ("a", "b", "m1", "m2")}
    instance_ids: dict[str, str | None] = {"m1": "z", "m2": "y", "a": None}
    ranged = assign("range", subscriptions, {"t0": 4}, instance_ids)
    assert ranged == {"m2": tps("t0p0"), "m1": tps("t0p1"), "a": tps("t0p2"), "b": tps("t0p3")}
    rounded = assign("roundrobin", subscriptions, {"t0": 5}, instance_ids)
    assert rounded == {
        "m2": tps("t0p0", "t0p4"),
        "m1": tps("t0p1"),
        "a": tps("t0p2"),
        "b": tps("t0p3"),
    }


def test_members_ordered_as_java_strings() -> None:
    # U+10000 is the surrogate pair D800 DC00, below U+FFFF in UTF-16 (Java's order) but above
    # it by code point (Python's).
    subscriptions = {"\uffff": ["t0"], "\U00010000": ["t0"]}
    assert assign("range", subscriptions, {"t0": 1}) == {"\U00010000": tps("t0p0"), "\uffff": []}
    instance_ids = {"a": "\uffff", "b": "\U00010000"}
    result = assign("roundrobin", {"a": ["t0"], "b": ["t0"]}, {"t0": 1}, instance_ids)
    assert result == {"a": [], "b": tps("t0p0")}


def test_string_subscription_rejected() -> None:
    with pytest.raises(TypeError):
        assign("range", {"C0": "t0"}, {"t0": 1})


def test_negative_partition_count_rejected() -> None:
    with pytest.raises(ValueError, match="negative"):
        assign("roundrobin", {"C0": ["t0"]}, {"t0": -1})


def test_instance_id_of_unknown_member_rejected() -> None:
    with pytest.raises(ValueError, match="without a subscription"):
        assign("range", {"C0": ["t0"]}, {"t0": 1}, {"C9": "static"})


# --- properties -------------------------------------------------------------------------

TOPICS = [f"t{i}" for i in range(5)]


@st.composite
def groups(
    draw: st.DrawFn,
) -> tuple[dict[str, list[str]], dict[str, int], dict[str, str | None]]:
    """A group: subscriptions, partition counts (some topics unknown), instance ids."""
    members = draw(st.lists(st.text("abcC0123", min_size=1, max_size=4), max_size=7, unique=True))
    subscriptions = {
        m: draw(st.lists(st.sampled_from(TOPICS), unique=True, max_size=len(TOPICS)))
        for m in members
    }
    known = draw(st.lists(st.sampled_from(TOPICS), unique=True, max_size=len(TOPICS)))
    counts = {t: draw(st.integers(0, 12)) for t in known}
    static = draw(st.lists(st.sampled_from(members), unique=True)) if members else []
    names = draw(st.lists(st.text("xyz9", min_size=1, max_size=3), min_size=len(static)))
    unique_names = list(dict.fromkeys(names))
    instance_ids: dict[str, str | None] = {
        m: (unique_names[i] if i < len(unique_names) else None) for i, m in enumerate(static)
    }
    return subscriptions, counts, instance_ids


def assigned_owners(result: GroupAssignment) -> Counter[TopicPartition]:
    return Counter(tp for partitions in result.values() for tp in partitions)


@settings(max_examples=300, deadline=None)
@given(group=groups(), strategy=st.sampled_from(SUPPORTED_STRATEGIES))
def test_every_partition_assigned_once_to_a_subscriber(
    group: tuple[dict[str, list[str]], dict[str, int], dict[str, str | None]], strategy: str
) -> None:
    subscriptions, counts, instance_ids = group
    result = assign(strategy, subscriptions, counts, instance_ids)

    assert set(result) == set(subscriptions)
    subscribed = {t for topics in subscriptions.values() for t in topics}
    expected = {TopicPartition(t, p) for t in subscribed & counts.keys() for p in range(counts[t])}
    owners = assigned_owners(result)
    assert set(owners) == expected
    assert all(n == 1 for n in owners.values())
    for member, partitions in result.items():
        assert partitions == sorted(partitions)
        assert all(tp.topic in subscriptions[member] for tp in partitions)


@settings(max_examples=300, deadline=None)
@given(group=groups(), strategy=st.sampled_from(SUPPORTED_STRATEGIES), data=st.data())
def test_result_does_not_depend_on_input_order(
    group: tuple[dict[str, list[str]], dict[str, int], dict[str, str | None]],
    strategy: str,
    data: st.DataObject,
) -> None:
    # Every member computes it from its own decoding of the JoinGroup response; insertion
    # order of the mappings and order of the topic lists must not matter.
    subscriptions, counts, instance_ids = group
    expected = assign(strategy, subscriptions, counts, instance_ids)

    def permute(keys: list[str]) -> list[str]:
        return data.draw(st.permutations(keys))

    subscriptions2 = {m: permute(subscriptions[m]) for m in permute(list(subscriptions))}
    counts2 = {t: counts[t] for t in permute(list(counts))}
    instance_ids2 = {m: instance_ids[m] for m in permute(list(instance_ids))}
    result = assign(strategy, subscriptions2, counts2, instance_ids2)

    assert result == expected
    assert list(result) == list(expected)


@settings(max_examples=300, deadline=None)
@given(group=groups())
def test_range_gives_each_subscriber_floor_or_ceil(
    group: tuple[dict[str, list[str]], dict[str, int], dict[str, str | None]],
) -> None:
    subscriptions, counts, instance_ids = group
    result = assign("range", subscriptions, counts, instance_ids)

    for topic, n in counts.items():
        consumers = [m for m, topics in subscriptions.items() if topic in topics]
        if not consumers:
            continue
        floor, ceil = n // len(consumers), -(-n // len(consumers))
        for member in consumers:
            got = [tp.partition for tp in result[member] if tp.topic == topic]
            assert len(got) in (floor, ceil)
            if got:  # a range: contiguous partition numbers
                assert got == list(range(got[0], got[0] + len(got)))


@settings(max_examples=200, deadline=None)
@given(
    members=st.lists(st.text("abc", min_size=1, max_size=3), min_size=1, max_size=6, unique=True),
    topics=st.lists(st.sampled_from(TOPICS), min_size=1, unique=True),
    counts=st.lists(st.integers(0, 9), min_size=len(TOPICS), max_size=len(TOPICS)),
)
def test_roundrobin_identical_subscriptions_balanced(
    members: list[str], topics: list[str], counts: list[int]
) -> None:
    # The Javadoc's promise: identical subscriptions give counts within one of each other.
    per_topic = dict(zip(TOPICS, counts, strict=True))
    result = assign("roundrobin", dict.fromkeys(members, topics), per_topic)
    sizes = [len(partitions) for partitions in result.values()]
    assert max(sizes) - min(sizes) <= 1
    assert sum(sizes) == sum(per_topic[t] for t in topics)
