"""The sticky and cooperative-sticky assignors: cases ported from kafka-clients'
``AbstractStickyAssignorTest`` and ``CooperativeStickyAssignorTest``, properties, and the wire
encodings the assignors read (user data, owned partitions, generation)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiozkconsumer import ConsumerConfig
from aiozkconsumer.errors import InvalidConfigError
from aiozkconsumer.group.assignors import assign
from aiozkconsumer.group.sticky import (
    DEFAULT_GENERATION,
    MemberData,
    StickyResult,
    cooperative_sticky_assign,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    member_data,
    sticky_assign,
)
from aiozkconsumer.kafka.group import encode_subscription, parse_subscription
from aiozkconsumer.records import TopicPartition


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def sub(
    topics: list[str], owned: Sequence[TopicPartition] = (), generation: int | None = 1
) -> MemberData:
    """``buildSubscriptionV2Above``: owned partitions with the subscription's generation."""
    return member_data(
        "cooperative-sticky",
        topics,
        user_data=None,
        owned_partitions=list(owned),
        generation_id=generation,
    )


def verify(
    members: Mapping[str, MemberData], counts: Mapping[str, int], result: StickyResult
) -> None:
    """``verifyValidityAndBalance``: each partition once, to a subscriber; balanced among
    members with the same subscription."""
    assignment = result.assignment
    assert set(assignment) == set(members)
    owners = Counter(p for tps in assignment.values() for p in tps)
    assert all(n == 1 for n in owners.values())
    for member, tps in assignment.items():
        assert all(p.topic in members[member].topics for p in tps)
    for a in members:
        for b in members:
            if members[a].topics == members[b].topics:
                assert abs(len(assignment[a]) - len(assignment[b])) <= 1, assignment


def fully_balanced(result: StickyResult) -> bool:
    sizes = [len(v) for v in result.assignment.values()]
    return max(sizes) - min(sizes) <= 1


# --- AbstractStickyAssignorTest ---------------------------------------------------------


def test_two_consumers_two_topics_six_partitions() -> None:
    members = {c: sub(["topic1", "topic2"], generation=None) for c in ("consumer1", "consumer2")}
    result = sticky_assign(members, {"topic1": 3, "topic2": 3})
    assert result.assignment["consumer1"] == [tp("topic1", 0), tp("topic1", 2), tp("topic2", 1)]
    assert result.assignment["consumer2"] == [tp("topic1", 1), tp("topic2", 0), tp("topic2", 2)]
    verify(members, {"topic1": 3, "topic2": 3}, result)


def test_consumer_owning_min_quota_expected_max_quota() -> None:
    topics = ["topic1", "topic2"]
    members = {
        "consumer1": sub(topics, [tp("topic1", 0), tp("topic2", 1)]),
        "consumer2": sub(topics, [tp("topic1", 1), tp("topic2", 2)]),
    }
    result = sticky_assign(members, {"topic1": 2, "topic2": 3})
    assert result.assignment["consumer1"] == [tp("topic1", 0), tp("topic2", 0), tp("topic2", 1)]
    assert result.assignment["consumer2"] == [tp("topic1", 1), tp("topic2", 2)]
    assert result.transferring == {}
    assert fully_balanced(result)


def test_max_quota_consumers_more_than_expected() -> None:
    topics = ["topic1", "topic2"]
    members = {
        "consumer1": sub(topics, [tp("topic1", 0), tp("topic2", 0)]),
        "consumer2": sub(topics, [tp("topic1", 1), tp("topic2", 1)]),
        "consumer3": sub(topics),
    }
    result = sticky_assign(members, {"topic1": 2, "topic2": 2})
    assert result.transferring == {tp("topic2", 0): "consumer3"}
    assert result.assignment == {
        "consumer1": [tp("topic1", 0)],
        "consumer2": [tp("topic1", 1), tp("topic2", 1)],
        "consumer3": [tp("topic2", 0)],
    }


def test_all_consumers_under_min_quota() -> None:
    topics = ["topic1", "topic2"]
    members = {
        "consumer1": sub(topics, [tp("topic1", 0)]),
        "consumer2": sub(topics, [tp("topic1", 1)]),
        "consumer3": sub(topics),
    }
    result = sticky_assign(members, {"topic1": 2, "topic2": 3})
    assert result.transferring == {}
    assert result.assignment == {
        "consumer1": [tp("topic1", 0), tp("topic2", 1)],
        "consumer2": [tp("topic1", 1), tp("topic2", 2)],
        "consumer3": [tp("topic2", 0)],
    }


def test_add_remove_consumer_one_topic() -> None:
    counts = {"topic": 3}
    members = {"consumer1": sub(["topic"], generation=None)}
    first = sticky_assign(members, counts)
    assert first.assignment["consumer1"] == [tp("topic", p) for p in range(3)]

    members = {
        "consumer1": sub(["topic"], first.assignment["consumer1"]),
        "consumer2": sub(["topic"]),
    }
    second = sticky_assign(members, counts)
    assert second.transferring == {tp("topic", 2): "consumer2"}
    assert second.assignment == {
        "consumer1": [tp("topic", 0), tp("topic", 1)],
        "consumer2": [tp("topic", 2)],
    }

    members = {"consumer2": sub(["topic"], second.assignment["consumer2"])}
    third = sticky_assign(members, counts)
    assert set(third.assignment["consumer2"]) == {tp("topic", p) for p in range(3)}
    assert third.transferring == {}


def test_multiple_consumers_mixed_topic_subscriptions() -> None:
    # Not every member subscribes to the same topics: the general path.
    members = {
        "consumer1": sub(["topic1"], generation=None),
        "consumer2": sub(["topic1", "topic2"], generation=None),
        "consumer3": sub(["topic1"], generation=None),
    }
    result = sticky_assign(members, {"topic1": 3, "topic2": 2})
    assert result.assignment == {
        "consumer1": [tp("topic1", 0), tp("topic1", 2)],
        "consumer2": [tp("topic2", 0), tp("topic2", 1)],
        "consumer3": [tp("topic1", 1)],
    }
    assert result.transferring is None
    assert result.sticky


def test_stickiness_after_the_leader_leaves() -> None:
    counts = {"topic1": 3}
    names = ["consumer1", "consumer2", "consumer3", "consumer4"]
    first = sticky_assign({c: sub(["topic1"], generation=None) for c in names}, counts)
    assert all(len(v) <= 1 for v in first.assignment.values())
    members = {c: sub(["topic1"], first.assignment[c]) for c in names[1:]}
    second = sticky_assign(members, counts)
    assert second.transferring == {}
    for consumer in names[1:]:
        assert len(second.assignment[consumer]) == 1
        assert set(first.assignment[consumer]) <= set(second.assignment[consumer])


def test_owned_partitions_invalidated_for_stale_generation() -> None:
    owned = [tp("topic", 0), tp("topic", 2), tp("topic2", 1)]
    members = {
        "consumer1": sub(["topic", "topic2"], owned, 10),
        "consumer2": sub(["topic", "topic2"], owned, 9),
    }
    result = sticky_assign(members, {"topic": 3, "topic2": 3})
    assert set(result.assignment["consumer1"]) == set(owned)
    assert set(result.assignment["consumer2"]) == {tp("topic", 1), tp("topic2", 0), tp("topic2", 2)}
    assert result.transferring == {}


def test_owned_partitions_invalidated_for_no_generation() -> None:
    owned = [tp("topic", 0), tp("topic", 2), tp("topic2", 1)]
    members = {
        "consumer1": sub(["topic", "topic2"], owned, 10),
        "consumer2": sub(["topic", "topic2"], owned, DEFAULT_GENERATION),
    }
    result = sticky_assign(members, {"topic": 3, "topic2": 3})
    assert set(result.assignment["consumer1"]) == set(owned)
    assert result.transferring == {}


def test_partition_claimed_by_two_members_in_one_generation_is_transferring() -> None:
    members = {
        "consumer1": sub(["topic"], [tp("topic", 0), tp("topic", 1)]),
        "consumer2": sub(["topic"], [tp("topic", 0), tp("topic", 2)]),
        "consumer3": sub(["topic"]),
    }
    result = sticky_assign(members, {"topic": 3})
    assert result.transferring == {tp("topic", 0): "consumer3"}
    assert result.assignment == {
        "consumer1": [tp("topic", 1)],
        "consumer2": [tp("topic", 2)],
        "consumer3": [tp("topic", 0)],
    }


def test_partitions_go_to_the_highest_generation() -> None:
    topics = ["topic", "topic2", "topic3"]
    members = {
        "consumer1": sub(topics, [tp("topic", 0), tp("topic2", 0), tp("topic3", 0)], 10),
        "consumer2": sub(topics, [tp("topic", 1), tp("topic2", 1), tp("topic3", 1)], 9),
        "consumer3": sub(topics, [tp("topic2", 1), tp("topic3", 0), tp("topic3", 2)], 8),
    }
    result = sticky_assign(members, dict.fromkeys(topics, 3))
    for i, consumer in enumerate(("consumer1", "consumer2", "consumer3")):
        assert set(result.assignment[consumer]) == {tp(t, i) for t in topics}
    assert result.transferring == {}


def test_no_reassignment_on_current_members() -> None:
    topics = ["topic", "topic2", "topic3", "topic1"]
    members = {
        "consumer1": sub(topics, [], DEFAULT_GENERATION),
        "consumer2": sub(topics, [tp("topic", 0), tp("topic2", 0), tp("topic1", 0)], 9),
        "consumer3": sub(topics, [tp("topic3", 2), tp("topic2", 2), tp("topic1", 1)], 8),
        "consumer4": sub(topics, [tp("topic3", 1), tp("topic", 1), tp("topic", 2)], 7),
    }
    result = sticky_assign(members, dict.fromkeys(topics, 3))
    assert set(result.assignment["consumer1"]) == {
        tp("topic1", 2),
        tp("topic2", 1),
        tp("topic3", 0),
    }
    assert result.transferring == {}
    assert fully_balanced(result)


def test_general_path_keeps_valid_ownership_when_a_member_joins() -> None:
    # Different subscriptions (general path): what stays valid stays where it was.
    counts = {"a": 4, "b": 2}
    members = {
        "m1": sub(["a", "b"], [tp("a", 0), tp("a", 1), tp("a", 2), tp("b", 0), tp("b", 1)], 3),
        "m2": sub(["a"], [tp("a", 3)], 3),
        "m3": sub(["a"], [], DEFAULT_GENERATION),
    }
    result = sticky_assign(members, counts)
    verify(members, counts, result)
    assert result.sticky
    assert tp("a", 3) in result.assignment["m2"]
    assert {tp("b", 0), tp("b", 1)} <= set(result.assignment["m1"])
    assert max(len(v) for v in result.assignment.values()) == 2


# --- CooperativeStickyAssignorTest ------------------------------------------------------


def test_cooperative_claimed_by_two_in_one_generation_equal_partitions() -> None:
    members = {
        "consumer1": sub(["topic"], [tp("topic", 0), tp("topic", 1)]),
        "consumer2": sub(["topic"], [tp("topic", 0), tp("topic", 2)]),
        "consumer3": sub(["topic"]),
    }
    result = cooperative_sticky_assign(members, {"topic": 3})
    # topic-0 counts as owned: nobody gets it until both gave it up.
    assert result.assignment == {
        "consumer1": [tp("topic", 1)],
        "consumer2": [tp("topic", 2)],
        "consumer3": [],
    }


def test_cooperative_claimed_by_two_in_one_generation_unequal_partitions() -> None:
    members = {
        "consumer1": sub(["topic"], [tp("topic", 0), tp("topic", 1)]),
        "consumer2": sub(["topic"], [tp("topic", 0), tp("topic", 2)]),
        "consumer3": sub(["topic"]),
    }
    result = cooperative_sticky_assign(members, {"topic": 4})
    assert result.assignment["consumer1"] == [tp("topic", 1), tp("topic", 3)]
    assert result.assignment["consumer2"] == [tp("topic", 2)]
    assert result.assignment["consumer3"] == []


def two_phase(
    members: dict[str, MemberData], counts: Mapping[str, int], generation: int
) -> tuple[StickyResult, StickyResult]:
    """One cooperative rebalance and its follow-up: each member then owns what it kept."""
    first = cooperative_sticky_assign(members, counts)
    again = {m: sub(sorted(d.topics), first.assignment[m], generation) for m, d in members.items()}
    return first, cooperative_sticky_assign(again, counts)


def test_cooperative_two_phase_move_to_a_joiner() -> None:
    counts = {"topic": 6}
    alone = cooperative_sticky_assign({"c1": sub(["topic"], generation=None)}, counts)
    assert len(alone.assignment["c1"]) == 6
    members = {"c1": sub(["topic"], alone.assignment["c1"], 1), "c2": sub(["topic"])}
    first, second = two_phase(members, counts, 2)
    # First rebalance: c1 gives three up (revoked), nobody gets them yet.
    assert len(first.assignment["c1"]) == 3
    assert first.assignment["c2"] == []
    assert set(first.transferring or {}) == set(alone.assignment["c1"]) - set(
        first.assignment["c1"]
    )
    assert set(first.transferring.values()) == {"c2"}  # type: ignore[union-attr]
    # Follow-up: c2 takes exactly what c1 gave up; c1 keeps its three.
    assert second.assignment["c1"] == first.assignment["c1"]
    assert set(second.assignment["c2"]) == set(first.transferring)  # type: ignore[arg-type]
    assert second.transferring == {}


def test_cooperative_general_path_computes_transfers_from_owned() -> None:
    counts = {"a": 4, "b": 1}
    members = {
        "m1": sub(["a", "b"], [tp("a", 0), tp("a", 1), tp("a", 2), tp("a", 3), tp("b", 0)], 3),
        "m2": sub(["a"], [], DEFAULT_GENERATION),
    }
    eager = sticky_assign(members, counts)
    coop = cooperative_sticky_assign(members, counts)
    moved = set(eager.assignment["m2"])
    assert moved and moved <= set(members["m1"].owned_partitions)
    assert coop.transferring == dict.fromkeys(moved, "m2")
    assert coop.assignment["m2"] == []
    assert set(coop.assignment["m1"]) == set(eager.assignment["m1"])


def test_cooperative_generation_user_data() -> None:
    assert decode_cooperative_user_data(encode_cooperative_user_data(-1)) == -1
    assert decode_cooperative_user_data(encode_cooperative_user_data(10)) == 10
    assert decode_cooperative_user_data(None) is None
    assert decode_cooperative_user_data(b"\x01") == DEFAULT_GENERATION
    # An old member (subscription v1, no generation_id): the generation from the user data.
    data = member_data(
        "cooperative-sticky",
        ["t"],
        user_data=encode_cooperative_user_data(7),
        owned_partitions=[tp("t", 0)],
        generation_id=None,
    )
    assert data.generation == 7 and data.partitions == (tp("t", 0),)


# --- StickyAssignor user data (eager) ---------------------------------------------------


def test_sticky_user_data_round_trip_and_bytes() -> None:
    data = encode_sticky_user_data([tp("t1", 1), tp("t0", 0), tp("t1", 0)], 5)
    # StickyAssignorUserData v1: [(topic, [int32])], int32 generation.
    assert data == (
        b"\x00\x00\x00\x02"
        + b"\x00\x02t0\x00\x00\x00\x01\x00\x00\x00\x00"
        + b"\x00\x02t1\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01"
        + b"\x00\x00\x00\x05"
    )
    assert decode_sticky_user_data(data) == ([tp("t0", 0), tp("t1", 0), tp("t1", 1)], 5)
    v0 = encode_sticky_user_data([tp("t0", 0)], None)
    assert decode_sticky_user_data(v0) == ([tp("t0", 0)], None)
    assert decode_sticky_user_data(None) == ([], None)
    assert decode_sticky_user_data(b"\x00\x00\x00\x09garbage") == ([], DEFAULT_GENERATION)


def test_sticky_member_data_reads_user_data_not_owned_partitions() -> None:
    data = member_data(
        "sticky",
        ["t0"],
        user_data=encode_sticky_user_data([tp("t0", 1)], 4),
        owned_partitions=[],
        generation_id=4,
    )
    assert data.partitions == (tp("t0", 1),) and data.generation == 4
    with pytest.raises(ValueError):
        member_data("range", ["t0"], user_data=None, owned_partitions=[], generation_id=None)


def test_assign_entry_point_sticky_keeps_previous_assignment() -> None:
    subscriptions = {"a": ["t"], "b": ["t"], "c": ["t"]}
    previous = {
        "a": member_data(
            "sticky",
            ["t"],
            user_data=encode_sticky_user_data([tp("t", 0), tp("t", 2), tp("t", 4)], 3),
            owned_partitions=[],
            generation_id=3,
        ),
        "b": member_data(
            "sticky",
            ["t"],
            user_data=encode_sticky_user_data([tp("t", 1), tp("t", 3), tp("t", 5)], 3),
            owned_partitions=[],
            generation_id=3,
        ),
    }
    result = assign("sticky", subscriptions, {"t": 6}, member_data=previous)
    assert set(result["a"]) <= {tp("t", 0), tp("t", 2), tp("t", 4)}
    assert set(result["b"]) <= {tp("t", 1), tp("t", 3), tp("t", 5)}
    assert [len(result[m]) for m in "abc"] == [2, 2, 2]
    # range would have moved everything
    assert assign("range", subscriptions, {"t": 6})["a"] == [tp("t", 0), tp("t", 1)]


# --- properties -------------------------------------------------------------------------

TOPICS = ["t0", "t1", "t2"]


@st.composite
def uniform_groups(draw: st.DrawFn) -> tuple[list[str], dict[str, int], list[list[str]]]:
    topics = draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))
    counts = {t: draw(st.integers(0, 9)) for t in topics}
    names = [f"m{i}" for i in range(draw(st.integers(1, 7)))]
    # A sequence of generations: which members are in the group at each.
    rounds = draw(
        st.lists(st.lists(st.sampled_from(names), min_size=1, unique=True), min_size=1, max_size=5)
    )
    return topics, counts, rounds


@settings(max_examples=200, deadline=None)
@given(group=uniform_groups(), cooperative=st.booleans())
def test_balanced_and_each_partition_once_across_generations(
    group: tuple[list[str], dict[str, int], list[list[str]]], cooperative: bool
) -> None:
    topics, counts, rounds = group
    owned: dict[str, list[TopicPartition]] = {}
    expected = {tp(t, p) for t, n in counts.items() for p in range(n)}
    generation = 1
    for present in rounds:
        members = {m: sub(topics, owned.get(m, []), generation - 1) for m in present}
        if cooperative:
            first, result = two_phase(members, counts, generation)
            # No partition goes straight from one member to another.
            for m, tps in first.assignment.items():
                for p in tps:
                    assert p in owned.get(m, []) or all(p not in owned.get(o, []) for o in present)
            generation += 1
        else:
            result = sticky_assign(members, counts)
        owners = Counter(p for tps in result.assignment.values() for p in tps)
        assert set(owners) == expected and all(n == 1 for n in owners.values())
        sizes = [len(result.assignment[m]) for m in present]
        assert max(sizes) - min(sizes) <= 1
        # Sticky: a member that stays keeps min(what it had, its quota) of its partitions.
        low = len(expected) // len(present)
        for m in present:
            kept = set(owned.get(m, [])) & set(result.assignment[m])
            assert len(kept) >= min(len(owned.get(m, [])), low)
        owned = {m: result.assignment[m] for m in present}
        generation += 1


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_general_path_each_partition_once_to_a_subscriber(data: st.DataObject) -> None:
    counts = {t: data.draw(st.integers(0, 6)) for t in TOPICS}
    names = [f"m{i}" for i in range(data.draw(st.integers(1, 6)))]
    previous: dict[str, list[TopicPartition]] = {}
    for generation in range(3):
        members = {}
        for m in names:
            topics = data.draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))
            members[m] = sub(topics, previous.get(m, []), generation)
        result = sticky_assign(members, counts)
        subscribed = {t for d in members.values() for t in d.topics}
        expected = {tp(t, p) for t in subscribed for p in range(counts[t])}
        owners = Counter(p for tps in result.assignment.values() for p in tps)
        assert set(owners) == expected and all(n == 1 for n in owners.values())
        for m, tps in result.assignment.items():
            assert all(p.topic in members[m].topics for p in tps)
        previous = result.assignment


# --- the subscription's wire form -------------------------------------------------------


def test_subscription_v0_without_extras_and_v3_with_owned_and_generation() -> None:
    plain = encode_subscription(["b", "a"])
    assert plain[:2] == b"\x00\x00"
    parsed = parse_subscription(plain)
    assert parsed.topics == ("a", "b") and parsed.generation_id is None
    assert parsed.owned_partitions == ()

    full = encode_subscription(
        ["t"],
        user_data=encode_cooperative_user_data(4),
        owned_partitions=[tp("t", 2), tp("t", 0)],
        generation=4,
        rack="r1",
    )
    parsed = parse_subscription(full)
    assert parsed.version == 3
    assert parsed.owned_partitions == (tp("t", 0), tp("t", 2))
    assert parsed.generation_id == 4 and parsed.rack == "r1"
    assert parsed.user_data == b"\x00\x00\x00\x04"
    # The null rack of a v3 subscription without client.rack.
    assert parse_subscription(encode_subscription(["t"], generation=2)).rack is None
    with pytest.raises(ValueError):
        parse_subscription(full[:-3])


# --- configuration ----------------------------------------------------------------------


def kafka_config(strategy: str) -> ConsumerConfig:
    return ConsumerConfig(
        group_id="g",
        group_coordinator="kafka",
        bootstrap_servers="127.0.0.1:9092",
        partition_assignment_strategy=strategy,
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("cooperative-sticky", ("cooperative-sticky",)),
        ("org.apache.kafka.clients.consumer.CooperativeStickyAssignor", ("cooperative-sticky",)),
        (
            "org.apache.kafka.clients.consumer.RangeAssignor, cooperative-sticky",
            ("range", "cooperative-sticky"),
        ),
        ("org.apache.kafka.clients.consumer.StickyAssignor", ("sticky",)),
        ("range", ("range",)),
    ],
)
def test_strategy_list_by_name_or_java_class(value: str, expected: tuple[str, ...]) -> None:
    config = kafka_config(value)
    assert config.assignment_strategies == expected
    assert config.partition_assignment_strategy == ",".join(expected)


@pytest.mark.parametrize("value", ["", "sticky,sticky", "uniform", "range,"])
def test_strategy_list_errors(value: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        kafka_config(value)
    assert info.value.key == "partition.assignment.strategy"


def test_zookeeper_groups_keep_range_and_roundrobin_only() -> None:
    with pytest.raises(InvalidConfigError):
        ConsumerConfig(
            group_id="g",
            zookeeper_connect="127.0.0.1:2181",
            partition_assignment_strategy="cooperative-sticky",
        )


# --- rack-aware (KIP-881): AbstractStickyAssignorTest.testRackAwareAssignmentWith* ---------

RACK_TOPICS = {"t1": 6, "t2": 7, "t3": 2}
ALIGNED = [
    "t1-0, t1-3, t2-0, t2-3, t2-6",
    "t1-1, t1-4, t2-1, t2-4, t3-0",
    "t1-2, t1-5, t2-2, t2-5, t3-1",
]


def racks(n: int) -> list[str]:
    return ["abcdef"[i % 6] for i in range(n)]


def parse(text: str) -> list[TopicPartition]:
    return [tp(t, int(p)) for t, p in (x.strip().split("-") for x in text.split(",") if x.strip())]


def rack_run(
    replication_factor: int,
    broker_racks: list[str],
    consumer_racks: list[str | None],
    owned: list[str] | None,
    *,
    cooperative: bool = False,
) -> tuple[list[str], int]:
    """``verifyRackAssignment``'s fixture (as ``AbstractPartitionAssignorTest``: partition
    ``i`` on brokers ``i + j + offset``); returns the assignment and its rack mismatches."""
    partition_racks: dict[str, list[frozenset[str]]] = {}
    offset = 0
    for topic, count in RACK_TOPICS.items():
        n = len(broker_racks)
        partition_racks[topic] = [
            frozenset(broker_racks[(i + j + offset) % n] for j in range(replication_factor))
            for i in range(count)
        ]
        offset += count
    members = {
        f"consumer{i}": member_data(
            "cooperative-sticky",
            list(RACK_TOPICS),
            user_data=None,
            owned_partitions=parse(owned[i]) if owned else [],
            generation_id=1 if owned else None,
            rack=rack,
        )
        for i, rack in enumerate(consumer_racks)
    }
    run = cooperative_sticky_assign if cooperative else sticky_assign
    result = run(members, RACK_TOPICS, partition_racks)
    texts = [
        ", ".join(f"{p.topic}-{p.partition}" for p in result.assignment[f"consumer{i}"])
        for i in range(len(consumer_racks))
    ]
    mismatches = sum(
        1
        for i, rack in enumerate(consumer_racks)
        for p in result.assignment[f"consumer{i}"]
        if rack is not None and rack not in partition_racks[p.topic][p.partition]
    )
    return texts, mismatches


@pytest.mark.parametrize(
    ("rf", "brokers", "consumers", "mismatches"),
    [
        (1, racks(3), racks(3), 0),
        (2, racks(3), racks(3), 0),
        # One consumer on a rack without partitions: balance first, 5 misaligned.
        (3, racks(2), racks(3), 5),
        # No consumer racks, or no rack in common: the plain assignment.
        (3, racks(3), [None, None, None], 0),
        (3, racks(3), ["d", "e", "f"], 15),
    ],
)
def test_rack_aware_uniform_subscription(
    rf: int, brokers: list[str], consumers: list[str | None], mismatches: int
) -> None:
    for owned in (None, ALIGNED):
        texts, found = rack_run(rf, brokers, consumers, owned)
        assert texts == ALIGNED
        assert found == mismatches


def test_rack_aware_moves_misaligned_owned_partitions() -> None:
    owned = [
        "t1-0, t1-1, t1-2, t1-3, t1-4",
        "t1-5, t2-0, t2-1, t2-2, t2-3",
        "t2-4, t2-5, t2-6, t3-0, t3-1",
    ]
    texts, found = rack_run(1, racks(3), racks(3), owned)
    assert texts == ALIGNED and found == 0
    # Cooperative: each keeps only what is on its rack; the rest moves next time.
    texts, _ = rack_run(1, racks(3), racks(3), owned, cooperative=True)
    assert texts == ["t1-0, t1-3", "t2-1", "t2-5, t3-1"]
