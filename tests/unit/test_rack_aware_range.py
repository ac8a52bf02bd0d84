"""The rack-aware range assignor (KIP-881) against kafka-clients' own examples.

The cases are ``RangeAssignorTest.testRackAwareAssignmentWith*`` (kafka-clients 3.5+), with
their fixtures as ``AbstractPartitionAssignorTest`` builds them: brokers ``0..n-1`` on the
racks given, partition ``i`` of a topic on brokers ``i + j + offset`` (``j`` below the
replication factor; ``offset`` the partitions of the topics before it), consumers
``consumer0..`` on the racks given. The expected assignments are the Java test's, verbatim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from aiozkconsumer.group.assignors import assign
from aiozkconsumer.kafka.group import encode_subscription, subscription_rack

ALL_RACKS = "abcdef"
ALL = ["t1", "t2", "t3"]


def racks(n: int) -> list[str]:
    return [ALL_RACKS[i % len(ALL_RACKS)] for i in range(n)]


def run(
    topics: Mapping[str, int],
    replication_factor: int,
    broker_racks: Sequence[str],
    consumer_racks: Sequence[str | None],
    consumer_topics: Sequence[Sequence[str]],
) -> list[str]:
    partition_racks: dict[str, list[frozenset[str]]] = {}
    offset = 0
    for topic, count in topics.items():
        n = len(broker_racks)
        partition_racks[topic] = [
            frozenset(broker_racks[(i + j + offset) % n] for j in range(replication_factor))
            for i in range(count)
        ]
        offset += count
    subscriptions = {f"consumer{i}": list(ts) for i, ts in enumerate(consumer_topics)}
    member_racks = {f"consumer{i}": r for i, r in enumerate(consumer_racks)}
    plan = assign(
        "range", subscriptions, topics, member_racks=member_racks, partition_racks=partition_racks
    )
    return [
        ", ".join(f"{tp.topic}-{tp.partition}" for tp in plan[f"consumer{i}"])
        for i in range(len(consumer_topics))
    ]


UNEQUAL = {"t1": 6, "t2": 7, "t3": 2}
EQUAL = {"t1": 5, "t2": 5, "t3": 5}
NON_EQUAL_SUBSCRIPTION = [ALL, ALL, ["t1", "t3"]]


@pytest.mark.parametrize(
    ("topics", "rf", "brokers", "consumer_topics", "expected"),
    [
        # testRackAwareAssignmentWithUniformSubscription
        (UNEQUAL, 1, racks(3), [ALL] * 3,
         ["t1-0, t1-3, t2-0, t2-3, t2-6", "t1-1, t1-4, t2-1, t2-4, t3-0",
          "t1-2, t1-5, t2-2, t2-5, t3-1"]),
        (UNEQUAL, 2, racks(3), [ALL] * 3,
         ["t1-0, t1-2, t2-0, t2-2, t2-3, t3-1", "t1-1, t1-3, t2-1, t2-4, t3-0",
          "t1-4, t1-5, t2-5, t2-6"]),
        (UNEQUAL, 3, racks(2), [ALL] * 3,
         ["t1-0, t1-1, t2-0, t2-1, t2-2, t3-0", "t1-2, t1-3, t2-3, t2-4, t3-1",
          "t1-4, t1-5, t2-5, t2-6"]),
        # testRackAwareAssignmentWithNonEqualSubscription
        (UNEQUAL, 1, racks(3), NON_EQUAL_SUBSCRIPTION,
         ["t1-0, t1-3, t2-0, t2-2, t2-3, t2-6", "t1-1, t1-4, t2-1, t2-4, t2-5, t3-0",
          "t1-2, t1-5, t3-1"]),
        (UNEQUAL, 2, racks(3), NON_EQUAL_SUBSCRIPTION,
         ["t1-0, t1-2, t2-0, t2-2, t2-3, t2-5, t3-1", "t1-1, t1-3, t2-1, t2-4, t2-6, t3-0",
          "t1-4, t1-5"]),
        (UNEQUAL, 3, racks(2), NON_EQUAL_SUBSCRIPTION,
         ["t1-0, t1-1, t2-0, t2-1, t2-2, t2-3, t3-0", "t1-2, t1-3, t2-4, t2-5, t2-6, t3-1",
          "t1-4, t1-5"]),
        # testRackAwareAssignmentWithUniformPartitions: co-partitioning before racks
        *[
            (EQUAL, rf, brokers, [ALL] * 3,
             ["t1-0, t1-1, t2-0, t2-1, t3-0, t3-1", "t1-2, t1-3, t2-2, t2-3, t3-2, t3-3",
              "t1-4, t2-4, t3-4"])
            for rf, brokers in ((1, racks(3)), (2, racks(3)), (3, racks(2)))
        ],
        # testRackAwareAssignmentWithUniformPartitionsNonEqualSubscription
        (EQUAL, 1, racks(3), NON_EQUAL_SUBSCRIPTION,
         ["t1-0, t1-1, t2-0, t2-1, t2-4, t3-0, t3-1", "t1-2, t1-3, t2-2, t2-3, t3-2, t3-3",
          "t1-4, t3-4"]),
        (EQUAL, 2, racks(3), NON_EQUAL_SUBSCRIPTION,
         ["t1-2, t2-0, t2-1, t2-3, t3-2", "t1-0, t1-3, t2-2, t2-4, t3-0, t3-3",
          "t1-1, t1-4, t3-1, t3-4"]),
        (EQUAL, 3, racks(2), NON_EQUAL_SUBSCRIPTION,
         ["t1-0, t1-1, t2-0, t2-1, t2-2, t3-0, t3-1", "t1-2, t1-3, t2-3, t2-4, t3-2, t3-3",
          "t1-4, t3-4"]),
    ],
)  # fmt: skip
def test_the_java_assignors_examples(
    topics: Mapping[str, int],
    rf: int,
    brokers: Sequence[str],
    consumer_topics: Sequence[Sequence[str]],
    expected: list[str],
) -> None:
    assert run(topics, rf, brokers, racks(3), consumer_topics) == expected


def test_without_member_racks_it_is_plain_range() -> None:
    """verifyNonRackAwareAssignment: no consumer rack, or replicas on every rack."""
    plain = ["t1-0, t1-1, t2-0, t2-1, t2-2, t3-0", "t1-2, t1-3, t2-3, t2-4, t3-1",
             "t1-4, t1-5, t2-5, t2-6"]  # fmt: skip
    assert run(UNEQUAL, 1, racks(3), [None] * 3, [ALL] * 3) == plain
    assert run(UNEQUAL, 3, racks(3), racks(3), [ALL] * 3) == plain  # every rack everywhere
    assert run(UNEQUAL, 1, racks(3), ["x", "y", "z"], [ALL] * 3) == plain  # racks disjoint


def test_the_rack_of_a_subscription() -> None:
    assert subscription_rack(encode_subscription(["t"], rack="rack-a")) == "rack-a"
    assert subscription_rack(encode_subscription(["t"])) is None  # v0 has none
    with pytest.raises(ValueError, match="ends early"):
        subscription_rack(encode_subscription(["t"], rack="rack-a")[:-3])
