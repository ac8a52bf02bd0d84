"""The ``--bootstrap-server`` side of ``aiozkconsumer groups``: groups of Kafka's coordinators.

``kafka-consumer-groups.sh --bootstrap-server`` for the groups of ``group.coordinator=kafka``
and of every other Kafka client, classic and ``consumer`` (KIP-848) alike: the tables of
``--list --state --type``, ``--describe --members --verbose`` and ``--describe --state``, and
the deletions (``--delete``, ``--delete-offsets``). No ZooKeeper is dialled. The commands
themselves (their options and help) are in :mod:`aiozkconsumer.cli.groups`.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from ..errors import UnknownTopicError
from ..records import TopicPartition
from ..tools import (
    GroupActiveError,
    KafkaGroupAdmin,
    KafkaGroupDescription,
    KafkaGroupListing,
    UnknownGroupError,
)
from ._common import ExitCode, connection_security, echo_json, exit_code_for, run_async
from .tables import format_table

__all__ = [
    "delete_kafka_groups",
    "delete_kafka_offsets",
    "describe_kafka",
    "kafka_admin",
    "print_kafka_description",
    "print_kafka_listings",
    "print_kafka_members",
    "print_kafka_state",
]


def kafka_admin(bootstrap: str) -> KafkaGroupAdmin:
    """A :class:`KafkaGroupAdmin` of ``bootstrap`` with the ``--command-config`` security."""
    return KafkaGroupAdmin(bootstrap, security=connection_security()[0])


def print_kafka_listings(
    listings: Sequence[KafkaGroupListing], *, state: bool, group_type: bool
) -> None:
    """Print ``groups list``: the names, or with ``--state`` / ``--type`` the table
    ``GROUP [TYPE] [STATE]`` of ``kafka-consumer-groups.sh --list --state --type`` (types
    ``Classic``, ``Consumer``)."""
    if not (state or group_type):
        for listing in listings:
            click.echo(listing.group)
        return
    headers = ["GROUP"] + (["TYPE"] if group_type else []) + (["STATE"] if state else [])
    rows = [
        [g.group]
        + ([g.group_type.capitalize()] if group_type else [])
        + ([g.state] if state else [])
        for g in listings
    ]
    for line in format_table(headers, rows, [30] * len(headers)):
        click.echo(line)


def print_kafka_description(description: KafkaGroupDescription) -> None:
    """Print ``groups describe --coordinator kafka``'s table, as ``ConsumerGroupCommand``
    0.10.2 with --bootstrap-server."""
    rows: list[Sequence[object]] = [
        (
            p.topic,
            p.partition,
            p.offset,
            p.log_end_offset,
            p.lag,
            p.member_id,
            p.host,
            p.client_id,
        )
        for p in description.partitions
    ]
    idle = set(description.members_without_partitions)
    rows += [
        (None, None, None, None, None, m.member_id, m.host, m.client_id)
        for m in description.members
        if m.member_id in idle
    ]
    headers = (
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    )
    for line in format_table(headers, rows, (30, 10, 15, 15, 10, 50, 30, 0)):
        click.echo(line)


def _assignment_text(partitions: Sequence[TopicPartition]) -> str:
    """``t:0,1;u:2`` as ``kafka-consumer-groups.sh`` (Kafka 4) prints an assignment; ``-``
    for none."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in by_topic.items()) or "-"


def print_kafka_members(description: KafkaGroupDescription) -> None:
    """Print ``groups describe --members`` of a Kafka group: the columns of
    ``kafka-consumer-groups.sh --describe --members --verbose`` (Kafka 4): CONSUMER-ID,
    GROUP-INSTANCE-ID (when a member is static), HOST, CLIENT-ID, #PARTITIONS and the
    ASSIGNMENT (``topic:0,1;other:2``)."""
    static = any(m.instance_id is not None for m in description.members)
    rows = [
        (m.member_id,)
        + ((m.instance_id,) if static else ())
        + (m.host, m.client_id, len(m.assignment), _assignment_text(m.assignment))
        for m in description.members
    ]
    headers = (
        ("CONSUMER-ID",)
        + (("GROUP-INSTANCE-ID",) if static else ())
        + ("HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT")
    )
    widths = (40,) + ((17,) if static else ()) + (15, 15, 11, 0)
    for line in format_table(headers, rows, widths):
        click.echo(line)


def print_kafka_state(description: KafkaGroupDescription) -> None:
    """Print ``groups describe --state`` of a Kafka group: the columns of
    ``kafka-consumer-groups.sh --describe --state`` (GROUP COORDINATOR (ID)
    ASSIGNMENT-STRATEGY STATE #MEMBERS)."""
    rows = [
        (
            description.group,
            f"{description.coordinator} ({description.coordinator_id})",
            description.assignor or "",
            description.state,
            len(description.members),
        )
    ]
    headers = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
    for line in format_table(headers, rows, (30, 25, 19, 11, 0)):
        click.echo(line)


def describe_kafka(
    bootstrap: str,
    group: str,
    *,
    topics: Sequence[str],
    output: str,
    isolation_level: str,
    view: str,
) -> None:
    """``groups describe`` of a Kafka group: ``view`` is ``"offsets"``, ``"members"`` or
    ``"state"``.

    Raises:
        CliError: the group is unknown (status 4), or the brokers failed (status 3).
    """

    async def go() -> KafkaGroupDescription:
        async with kafka_admin(bootstrap) as admin:
            return await admin.describe_group(
                group, topics=topics or None, isolation_level=isolation_level
            )

    description = run_async(go)
    if output == "json":
        echo_json(description.to_json())
        return
    if not description.members:
        click.echo(f"Consumer group '{group}' has no active members.", err=True)
    elif description.rebalancing:
        click.echo(f"Consumer group '{group}' is rebalancing.", err=True)
    if view == "members":
        print_kafka_members(description)
    elif view == "state":
        print_kafka_state(description)
    else:
        print_kafka_description(description)


def delete_kafka_groups(bootstrap: str, groups: Sequence[str], output: str) -> int:
    """``groups delete`` of Kafka groups (DeleteGroups); each group is tried; returns the exit
    status of the first failure (0: all deleted)."""

    async def go() -> tuple[list[dict[str, object]], int]:
        results: list[dict[str, object]] = []
        status = 0
        async with kafka_admin(bootstrap) as admin:
            for group in groups:
                try:
                    await admin.delete_group(group)
                    results.append(
                        {
                            "group": group,
                            "deleted": True,
                            "message": f"Deletion of requested consumer groups ('{group}') "
                            "was successful.",
                        }
                    )
                except (GroupActiveError, UnknownGroupError) as e:
                    reason = str(e)
                    if isinstance(e, UnknownGroupError):
                        reason = f"Deletion of group '{group}' failed: the group does not exist."
                    results.append({"group": group, "deleted": False, "error": reason})
                    status = status or exit_code_for(e)
        return results, status

    results, status = run_async(go)
    if output == "json":
        echo_json({"results": results})
    else:
        for r in results:
            if r["deleted"]:
                click.echo(str(r["message"]))
            else:
                click.echo(f"Error: {r['error']}", err=True)
    return status


def delete_kafka_offsets(
    bootstrap: str, group: str, scope: dict[str, tuple[int, ...] | None], output: str
) -> int:
    """``groups delete-offsets`` (OffsetDelete): ``scope`` is ``{topic: partitions or None for
    all}``. Prints ``TOPIC PARTITION STATUS`` as ``kafka-consumer-groups.sh --delete-offsets``;
    returns 0, or 1 when a partition's offset was not deleted.

    Raises:
        CliError: the group or a topic is unknown, or the brokers failed.
    """

    async def go() -> dict[TopicPartition, str | None]:
        async with kafka_admin(bootstrap) as admin:
            partitions = await admin.partitions_for(scope)
            tps: list[TopicPartition] = []
            for topic, wanted in sorted(scope.items()):
                existing = partitions.get(topic, ())
                if not existing:
                    raise UnknownTopicError(topic, f"Topic '{topic}' does not exist.")
                missing = sorted(set(wanted or ()) - set(existing))
                if missing:
                    raise UnknownTopicError(
                        topic,
                        f"Topic '{topic}' has no partition {', '.join(map(str, missing))}."
                    )
                tps += [TopicPartition(topic, p) for p in (wanted or existing)]
            return await admin.delete_offsets(group, tps)

    results = run_async(go)
    failed = {tp: e for tp, e in results.items() if e is not None}
    if output == "json":
        echo_json(
            {
                "group": group,
                "partitions": [
                    {"topic": tp.topic, "partition": tp.partition, "error": e}
                    for tp, e in sorted(results.items())
                ],
            }
        )
    else:
        rows = [
            (tp.topic, tp.partition, "Successful" if e is None else f"Error: {e}")
            for tp, e in sorted(results.items())
        ]
        for line in format_table(("TOPIC", "PARTITION", "STATUS"), rows, (30, 10, 0)):
            click.echo(line)
    return ExitCode.FAILED if failed else 0
