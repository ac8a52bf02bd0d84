"""``aiozkconsumer.tools.admin.judges``: the group tools' pure decisions, without servers.

What ``GroupAdmin`` reads from ZooKeeper goes in as plain data here: owner node values,
members' topic counts, partitions. ``owner_consumer_id``, ``check_ownership``,
``consumer_id_host`` and ``group_state`` have cases in ``test_admin.py`` and
``test_cli_describe.py`` too; this file covers the rest and the edges.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiozkconsumer.records import TopicPartition
from aiozkconsumer.subscription import StaticTopicCount
from aiozkconsumer.tools import GroupActiveError
from aiozkconsumer.tools.admin.judges import (
    GROUP_STABILITY,
    check_ownership,
    group_deletion_refusal,
    group_state,
    infer_assignment_strategy,
    member_assignments,
    no_brokers_reason,
    owner_consumer_id,
    subscribed_thread_ids,
)

G = "g"
A, B = "g_a", "g_b"

# ---- group_deletion_refusal ------------------------------------------------------------------


def test_a_group_without_live_members_is_deleted() -> None:
    assert group_deletion_refusal(G, [], [], []) is None
    assert group_deletion_refusal(G, [], [], [], force_malformed=True) is None


def test_live_members_refuse_the_deletion_naming_every_member() -> None:
    refusal = group_deletion_refusal(G, [A, B], [A], [])
    assert isinstance(refusal, GroupActiveError)
    assert refusal.group == G
    assert refusal.members == (A, B)
    assert str(refusal) == "Delete for group 'g' failed because its consumers are still active."


def test_a_vanished_registration_still_counts_as_a_live_member() -> None:
    # The member's node was gone when read: neither parsed nor malformed, but it was live.
    refusal = group_deletion_refusal(G, [A], [], [])
    assert refusal is not None
    assert refusal.members == (A,)
    assert "--force-malformed" not in str(refusal)


def test_only_malformed_members_point_to_force_malformed() -> None:
    paths = ["/consumers/g/ids/g_a", "/consumers/g/ids/g_b"]
    refusal = group_deletion_refusal(G, [A, B], [], paths)
    assert refusal is not None
    assert refusal.members == (A, B)
    assert str(refusal) == (
        "Delete for group 'g' failed because its consumers are still active. Its only live "
        "members are malformed registration nodes (/consumers/g/ids/g_a, /consumers/g/ids/g_b): "
        "--force-malformed deletes the group."
    )


def test_force_malformed_deletes_a_group_of_malformed_registrations_only() -> None:
    assert (
        group_deletion_refusal(G, [A], [], ["/consumers/g/ids/g_a"], force_malformed=True) is None
    )


def test_force_malformed_still_refuses_a_member_whose_registration_parses() -> None:
    refusal = group_deletion_refusal(G, [A, B], [B], ["/consumers/g/ids/g_a"], force_malformed=True)
    assert refusal is not None
    assert refusal.members == (B,)  # only the members that keep the group alive for real
    assert str(refusal).endswith(
        "--force-malformed only deletes a group whose live members are all malformed "
        "registrations; these parse: g_b."
    )


# ---- member_assignments -----------------------------------------------------------------------


def test_members_own_what_their_threads_own_partitions_sorted() -> None:
    owners = {
        "t": {3: "g_a-1", 0: "g_a-0", 1: "g_b-0"},
        "u": {0: "g_b-1"},
    }
    assert member_assignments(owners) == {
        A: {"t": [0, 3]},
        B: {"t": [1], "u": [0]},
    }


def test_no_owner_nodes_assign_nothing() -> None:
    assert member_assignments({}) == {}
    assert member_assignments({"t": {}}) == {}


@given(
    st.dictionaries(
        st.sampled_from(["t", "u", "v"]),
        st.dictionaries(
            st.integers(0, 20),
            st.builds(
                lambda member, thread: f"g_{member}-{thread}",
                st.sampled_from(["a", "b", "c-x"]),
                st.integers(0, 3),
            ),
        ),
    )
)
def test_every_owned_partition_is_assigned_once_to_its_owner(
    owners: dict[str, dict[int, str]],
) -> None:
    assignment = member_assignments(owners)
    placed = [
        (consumer, topic, p)
        for consumer, share in assignment.items()
        for topic, parts in share.items()
        for p in parts
    ]
    expected = [
        (owner_consumer_id(owner), topic, p)
        for topic, owned in owners.items()
        for p, owner in owned.items()
    ]
    assert sorted(placed) == sorted(expected)
    for share in assignment.values():
        for parts in share.values():
            assert parts == sorted(parts)


# ---- subscribed_thread_ids --------------------------------------------------------------------


def test_thread_ids_are_collected_per_topic_over_all_members() -> None:
    counts = [StaticTopicCount(A, {"t": 2}), StaticTopicCount(B, {"t": 1, "u": 1})]
    assert subscribed_thread_ids(counts) == {
        "t": {"g_a-0", "g_a-1", "g_b-0"},
        "u": {"g_b-0"},
    }
    assert subscribed_thread_ids([]) == {}


def test_collected_thread_ids_are_what_check_ownership_accepts() -> None:
    thread_ids = subscribed_thread_ids(
        [StaticTopicCount(A, {"t": 1}), StaticTopicCount(B, {"t": 1})]
    )
    partitions = {"t": [0, 1]}
    assert check_ownership(partitions, {"t": {0: "g_a-0", 1: "g_b-0"}}, thread_ids, G) == []
    assert check_ownership(partitions, {"t": {0: "g_a-0", 1: "g_a-1"}}, thread_ids, G) == [
        "Owner g_a-1 for partition [t,1] is not a valid member of consumer group g"
    ]


# ---- infer_assignment_strategy ---------------------------------------------------------------

TWO_MEMBERS = {A: StaticTopicCount(A, {"t": 1}), B: StaticTopicCount(B, {"t": 1})}
FOUR_PARTITIONS = {"t": [0, 1, 2, 3]}


def test_contiguous_ranges_are_the_range_strategy() -> None:
    owners = {"t": {0: "g_a-0", 1: "g_a-0", 2: "g_b-0", 3: "g_b-0"}}
    assert infer_assignment_strategy(G, TWO_MEMBERS, FOUR_PARTITIONS, owners) == "range"


def test_alternating_partitions_are_the_roundrobin_strategy() -> None:
    owners = {"t": {0: "g_a-0", 1: "g_b-0", 2: "g_a-0", 3: "g_b-0"}}
    assert infer_assignment_strategy(G, TWO_MEMBERS, FOUR_PARTITIONS, owners) == "roundrobin"


def test_an_assignment_both_strategies_give_is_called_range() -> None:
    one = {A: StaticTopicCount(A, {"t": 1})}
    owners = {"t": dict.fromkeys(FOUR_PARTITIONS["t"], "g_a-0")}
    assert infer_assignment_strategy(G, one, FOUR_PARTITIONS, owners) == "range"


@pytest.mark.parametrize(
    "owners",
    [
        {"t": {0: "g_a-0", 1: "g_a-0", 2: "g_a-0", 3: "g_b-0"}},  # neither strategy's plan
        {"t": {0: "g_a-0", 1: "g_a-0", 2: "g_b-0"}},  # a partition between owners
        # the range plan, and an owner node of a partition the topic no longer has
        {"t": {0: "g_a-0", 1: "g_a-0", 2: "g_b-0", 3: "g_b-0", 4: "g_b-0"}},
        {},  # nothing assigned
        {"other": {0: "g_a-0"}},  # only topics nobody subscribes to
    ],
)
def test_no_strategy_is_named_when_none_gives_the_owner_nodes(
    owners: dict[str, dict[int, str]],
) -> None:
    assert infer_assignment_strategy(G, TWO_MEMBERS, FOUR_PARTITIONS, owners) is None


def test_no_strategy_without_members() -> None:
    owners = {"t": {0: "g_a-0"}}
    assert infer_assignment_strategy(G, {}, FOUR_PARTITIONS, owners) is None


def test_owner_nodes_of_unsubscribed_topics_do_not_spoil_the_match() -> None:
    owners = {
        "t": {0: "g_a-0", 1: "g_a-0", 2: "g_b-0", 3: "g_b-0"},
        "old": {0: "g_gone-0"},
    }
    assert infer_assignment_strategy(G, TWO_MEMBERS, FOUR_PARTITIONS, owners) == "range"


# ---- group_state ---------------------------------------------------------------------------------


def test_group_states_are_the_three_named() -> None:
    assert GROUP_STABILITY == ("Empty", "Rebalancing", "Stable")


def test_orphans_are_sorted_and_partitions_counted_once() -> None:
    partitions = {"u": [1, 0, 1], "t": [0]}
    owners = {"t": {0: "g_gone-0"}, "u": {1: "g_a-0"}}
    assert group_state([A], partitions, owners) == (
        "Rebalancing",
        [(TopicPartition("t", 0), "g_gone-0"), (TopicPartition("u", 0), None)],
    )


def test_owners_outside_the_subscription_do_not_make_a_group_rebalance() -> None:
    assert group_state([A], {"t": [0]}, {"t": {0: "g_a-0"}, "x": {0: "g_gone-0"}}) == (
        "Stable",
        [],
    )


@pytest.mark.parametrize(
    ("ids", "brokers", "consumers", "chroot", "says"),
    [
        (True, True, True, "/kafka", "/brokers/ids is empty: every broker"),
        (True, True, False, None, "/brokers/ids is empty: every broker"),
        (False, False, False, "/kafak", "The chroot '/kafak' holds neither /brokers nor"),
        (False, False, True, "/kafka", "(A KRaft cluster? Give --bootstrap-server.)"),
        (False, False, False, None, "(A KRaft cluster? Give --bootstrap-server.)"),
        (False, True, False, "/kafka", "(A KRaft cluster? Give --bootstrap-server.)"),
    ],
)
def test_no_brokers_reason_tells_down_brokers_a_mistyped_chroot_and_kraft_apart(
    ids: bool, brokers: bool, consumers: bool, chroot: str | None, says: str
) -> None:
    reason = no_brokers_reason(
        ids_exists=ids,
        brokers_exists=brokers,
        consumers_exists=consumers,
        chroot=chroot,
        give="--bootstrap-server",
    )
    assert reason.startswith("No brokers found in ZK. ")  # the console consumer's words
    assert says in reason
