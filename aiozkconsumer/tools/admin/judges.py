"""The group tools' pure judges: decisions computed from what ZooKeeper holds, without I/O.

What :class:`~aiozkconsumer.tools.GroupAdmin` reads (member ids, registrations, owner nodes,
the partitions of the subscribed topics) goes in as plain data; what comes out is the verdict:
the host in a generated consumer id (:func:`consumer_id_host`), the consumer id of an owner
node (:func:`owner_consumer_id`), whether a group is stable (:func:`group_state`), which
assignment strategy gave its owner nodes (:func:`infer_assignment_strategy`), whether a
rebalance succeeded (:func:`check_ownership`, ``VerifyConsumerRebalance``'s rules), what each
member owns (:func:`member_assignments`), the thread ids the members subscribe with
(:func:`subscribed_thread_ids`), whether a group may be deleted
(:func:`group_deletion_refusal`) and why no broker is found (:func:`no_brokers_reason`).
Tested without servers (``tests/unit/test_admin_judges.py``).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence

from ...assignors import ASSIGNORS, AssignmentContext
from ...records import TopicPartition
from ...subscription import TopicCount
from .errors import GroupActiveError

__all__ = [
    "GROUP_STABILITY",
    "check_ownership",
    "consumer_id_host",
    "group_deletion_refusal",
    "no_brokers_reason",
    "group_state",
    "infer_assignment_strategy",
    "member_assignments",
    "owner_consumer_id",
    "subscribed_thread_ids",
]

GROUP_STABILITY = ("Empty", "Rebalancing", "Stable")
"""The states :func:`group_state` tells apart."""

_GENERATED_ID_RE = re.compile(r"(?P<host>.+)-[0-9]{10,}-[0-9a-f]{8}")


def consumer_id_host(group: str, consumer_id: str) -> str | None:
    """The host in a generated consumer id, ``<group>_<host>-<epoch ms>-<8 hex digits>``.

    The old consumer names a member ``<group>_<consumer.id>``, and without ``consumer.id``
    generates ``<hostname>-<epoch ms>-<first 8 hex digits of a UUID>``
    (``ZookeeperConsumerConnector``, 0.10.2): the only place ZooKeeper records the host.

    Args:
        group: the group id.
        consumer_id: the member's consumer id.

    Returns:
        The host name, ``None`` when the id is not a generated one (``consumer.id`` set).
    """
    prefix = f"{group}_"
    if not consumer_id.startswith(prefix):
        return None
    match = _GENERATED_ID_RE.fullmatch(consumer_id[len(prefix) :])
    return None if match is None else match["host"]


def group_state(
    live_members: Iterable[str],
    partitions: Mapping[str, Iterable[int]],
    owners: Mapping[str, Mapping[int, str]],
) -> tuple[str, list[tuple[TopicPartition, str | None]]]:
    """Whether a ZooKeeper-coordinated group is stable, from its owner nodes.

    ``"Empty"`` without live members; ``"Rebalancing"`` when some partition the members
    subscribe to has no owner node, or one whose thread id belongs to no live member (the
    members are between releasing and claiming, or one died and the others have not yet
    rebalanced); ``"Stable"`` otherwise.

    Args:
        live_members: the consumer ids under ``/consumers/<g>/ids``.
        partitions: topic -> partition ids, for every topic the members subscribe to.
        owners: topic -> partition -> owner node value.

    Returns:
        The state (one of :data:`GROUP_STABILITY`) and the partitions without a live owner,
        each with its owner node's value (``None``: no owner node), sorted.
    """
    live = set(live_members)
    if not live:
        return "Empty", []
    orphans: list[tuple[TopicPartition, str | None]] = []
    for topic in sorted(partitions):
        for partition in sorted(set(partitions[topic])):
            owner = owners.get(topic, {}).get(partition)
            if owner is None or owner_consumer_id(owner) not in live:
                orphans.append((TopicPartition(topic, partition), owner))
    return ("Rebalancing" if orphans else "Stable"), orphans


@contextlib.contextmanager
def _quiet_assignors() -> Iterator[None]:
    """Silence the assignors' "No broker partitions consumed" warnings: a replay is not a
    rebalance, and its warnings would reach the tools' stderr."""
    logger = logging.getLogger(ASSIGNORS["range"].__module__)
    previous = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = previous


def infer_assignment_strategy(
    group: str,
    topic_counts: Mapping[str, TopicCount],
    partitions: Mapping[str, Iterable[int]],
    owners: Mapping[str, Mapping[int, str]],
) -> str | None:
    """Which ``partition.assignment.strategy`` gave the owner nodes of a group.

    ZooKeeper does not record a member's strategy, so each of ``range`` and ``roundrobin``
    (``PartitionAssignor.scala``, 0.10.2) is replayed on the members' subscriptions and
    compared with the owner nodes of the subscribed partitions.

    Args:
        group: the group id.
        topic_counts: consumer id -> its topic count, for every live member whose
            registration parsed (wildcards evaluated).
        partitions: topic -> partition ids, for every topic the members subscribe to.
        owners: topic -> partition -> owner node value.

    Returns:
        The first of ``"range"``, ``"roundrobin"`` whose plan equals the owner nodes
        (``"range"`` when both would give them); ``None`` when neither does (a rebalance is
        under way, or a member uses a strategy of its own) or there is nothing assigned.
    """
    actual = {
        TopicPartition(topic, p): owner
        for topic, parts in owners.items()
        if topic in partitions
        for p, owner in parts.items()
    }
    if not topic_counts or not actual:
        return None
    for name, assignor in ASSIGNORS.items():
        planned: dict[TopicPartition, str] = {}
        with _quiet_assignors():
            for member in sorted(topic_counts):
                ctx = AssignmentContext.build(group, member, topic_counts, partitions)
                for share in assignor(ctx).values():
                    planned.update((tp, str(thread)) for tp, thread in share.items())
        if planned == actual:
            return name
    return None


def owner_consumer_id(owner: str) -> str:
    """The consumer id of an owner node's value: the thread id without its ``-<index>``.

    As ``ConsumerGroupCommand`` (0.10.2), ``o.substring(0, o.lastIndexOf('-'))``.

    Args:
        owner: the owner node's data, e.g. ``"g_host-1490000000000-1a2b3c4d-0"``.

    Returns:
        The consumer id, e.g. ``"g_host-1490000000000-1a2b3c4d"``; ``owner`` itself when it
        has no ``-``.
    """
    head, dash, _ = owner.rpartition("-")
    return head if dash else owner


def check_ownership(
    partitions: Mapping[str, Sequence[int]],
    owners: Mapping[str, Mapping[int, str]],
    thread_ids: Mapping[str, Iterable[str]],
    group: str,
) -> list[str]:
    """The rules of ``VerifyConsumerRebalance.validateRebalancingOperation`` (0.10.2.1).

    Every partition of every topic the group subscribes to must have an owner node, and its
    value must be one of the thread ids the group's live members have for that topic.

    Args:
        partitions: topic -> its partition ids, for every topic the members subscribe to.
        owners: topic -> partition -> owner node value (absent: no owner node).
        thread_ids: topic -> the valid ``ConsumerThreadId`` strings of the live members.
        group: the group id, for the messages.

    Returns:
        The problems found, in the original's wording (empty: the rebalance succeeded).
    """
    problems: list[str] = []
    for topic in sorted(partitions):
        topic_owners = owners.get(topic, {})
        valid = set(thread_ids.get(topic, ()))
        if not topic_owners:
            problems.append(f"No owners for any partitions for topic {topic}")
        for partition in partitions[topic]:
            owner = topic_owners.get(partition)
            if owner is None:
                problems.append(f"No owner for partition [{topic},{partition}]")
            elif not valid:
                problems.append(f"No consumer ids registered for topic {topic}")
            elif owner not in valid:
                problems.append(
                    f"Owner {owner} for partition [{topic},{partition}] is not a valid member "
                    f"of consumer group {group}"
                )
    return problems


def member_assignments(
    owners: Mapping[str, Mapping[int, str]],
) -> dict[str, dict[str, list[int]]]:
    """What each member owns, from the owner nodes (``groups describe --members``).

    Args:
        owners: topic -> partition -> owner node value (a thread id).

    Returns:
        Consumer id (:func:`owner_consumer_id` of the owner) -> topic -> its partitions,
        sorted; topics in the order of ``owners``.
    """
    assignment: dict[str, dict[str, list[int]]] = {}
    for topic, owned in owners.items():
        for partition, owner in sorted(owned.items()):
            share = assignment.setdefault(owner_consumer_id(owner), {})
            share.setdefault(topic, []).append(partition)
    return assignment


def subscribed_thread_ids(topic_counts: Iterable[TopicCount]) -> dict[str, set[str]]:
    """The thread ids the members have per topic, as ``VerifyConsumerRebalance`` collects them.

    Args:
        topic_counts: the live members' topic counts (wildcards evaluated).

    Returns:
        Topic -> the ``ConsumerThreadId`` strings of every member subscribed to it; the keys
        are the topics the group subscribes to.
    """
    thread_ids: dict[str, set[str]] = {}
    for topic_count in topic_counts:
        for topic, ids in topic_count.get_consumer_thread_ids_per_topic().items():
            thread_ids.setdefault(topic, set()).update(str(t) for t in ids)
    return thread_ids


def group_deletion_refusal(
    group: str,
    members: Sequence[str],
    parsed: Sequence[str],
    malformed: Sequence[str],
    *,
    force_malformed: bool = False,
) -> GroupActiveError | None:
    """Whether ``groups delete`` must refuse a group, and with which error.

    As ``AdminUtils.deleteConsumerGroupInZK`` (0.10.2), a group with live members is not
    deleted; with ``force_malformed``, a group whose live members are all malformed
    registration nodes (left by hand: no consumer can have written them) is.

    Args:
        group: the group id.
        members: the live members' consumer ids (``/consumers/<g>/ids``).
        parsed: those of them whose registration parses.
        malformed: the paths of the registration nodes that do not parse.
        force_malformed: ``--force-malformed``.

    Returns:
        ``None``: delete the group. Otherwise the :class:`GroupActiveError` to raise, naming
        the live members (with ``force_malformed``: those whose registration parses) and,
        when only malformed nodes keep the group alive, the way out.
    """
    if not members:
        return None
    message = f"Delete for group '{group}' failed because its consumers are still active."
    if force_malformed and parsed:
        return GroupActiveError(
            group,
            parsed,
            f"{message} --force-malformed only deletes a group whose live members are "
            f"all malformed registrations; these parse: {', '.join(parsed)}.",
        )
    if force_malformed:
        return None
    if malformed and not parsed:
        paths = ", ".join(malformed)
        message += (
            f" Its only live members are malformed registration nodes ({paths}): "
            "--force-malformed deletes the group."
        )
    return GroupActiveError(group, members, message)


def no_brokers_reason(
    *, ids_exists: bool, brokers_exists: bool, consumers_exists: bool, chroot: str | None, give: str
) -> str:
    """Why ZooKeeper names no broker to bootstrap from (for a ``NoBrokersError``).

    Starts with the console consumer's "No brokers found in ZK." and tells the three causes
    apart: a ZooKeeper-mode cluster whose brokers are all down (``/brokers/ids`` exists and is
    empty: registrations are ephemeral), a connect string whose chroot holds nothing Kafka
    writes (no ``/brokers``, no ``/consumers``: mistyped?), and a KRaft cluster (brokers
    never register in ZooKeeper).

    Args:
        ids_exists: whether ``/brokers/ids`` exists.
        brokers_exists: whether ``/brokers`` exists.
        consumers_exists: whether ``/consumers`` exists.
        chroot: the connect string's chroot (``"/kafka"``), ``None`` without one.
        give: how to give the brokers instead (``"--bootstrap-server"``).

    Returns:
        The message.
    """
    head = "No brokers found in ZK."
    if ids_exists:
        return (
            f"{head} /brokers/ids is empty: every broker of this ZooKeeper-mode cluster is down "
            f"(or still starting), or give a reachable one with {give}."
        )
    if not brokers_exists and not consumers_exists and chroot:
        return (
            f"{head} The chroot {chroot!r} holds neither /brokers nor /consumers: a mistyped "
            f"chroot in the ZooKeeper connect string? (A KRaft cluster keeps no brokers in "
            f"ZooKeeper: give {give}.)"
        )
    return f"{head} (A KRaft cluster? Give {give}.)"
