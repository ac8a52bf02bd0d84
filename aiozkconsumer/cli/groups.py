"""``aiozkconsumer groups``: list, describe and delete consumer groups in ZooKeeper.

The ``--zookeeper`` side of ``kafka-consumer-groups.sh`` (``ConsumerGroupCommand``, 0.10.2).
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from ..errors import UnknownTopicError
from ..tools import GroupActiveError, GroupAdmin, GroupDescription, UnknownGroupError
from ._common import (
    NAME,
    ExitCode,
    cluster_options,
    echo_json,
    exit_code_for,
    output_option,
    run_async,
)

__all__ = ["format_table", "groups", "print_description"]

MISSING = "-"
"""What a table shows for an unknown value (``MISSING_COLUMN_VALUE``)."""


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], widths: Sequence[int]
) -> list[str]:
    """Left-aligned columns, each at least its ``widths`` entry and wide enough for its cells.

    ``None`` cells show as ``-``.
    """
    cells = [[MISSING if c is None else str(c) for c in row] for row in rows]
    sizes = [
        max([w, len(h), *(len(r[i]) for r in cells)])
        for i, (h, w) in enumerate(zip(headers, widths, strict=True))
    ]
    return [
        " ".join(c.ljust(n) for c, n in zip(row, sizes, strict=True)).rstrip()
        for row in [list(headers), *cells]
    ]


def _admin(zookeeper: str, bootstrap_server: str | None, connect_timeout_ms: int) -> GroupAdmin:
    return GroupAdmin(
        zookeeper, bootstrap_servers=bootstrap_server, connection_timeout_ms=connect_timeout_ms
    )


def print_description(description: GroupDescription) -> None:
    """Print ``groups describe``'s table, as ``ConsumerGroupCommand`` 0.10.2 with --zookeeper."""
    rows: list[Sequence[object]] = [
        (p.topic, p.partition, p.offset, p.log_end_offset, p.lag, p.consumer_id)
        for p in description.partitions
    ]
    rows += [(None, None, None, None, None, c) for c in description.members_without_partitions]
    headers = ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID")
    for line in format_table(headers, rows, (30, 10, 15, 15, 10, 50)):
        click.echo(line)


@click.group(short_help="List, describe and delete consumer groups.")
def groups() -> None:
    """List, describe and delete consumer groups (kafka-consumer-groups.sh --zookeeper)."""


@groups.command("list")
@cluster_options
@output_option
def list_groups(
    zookeeper: str, bootstrap_server: str | None, connect_timeout_ms: int, output: str
) -> None:
    """List the consumer groups: the children of /consumers."""

    async def go() -> list[str]:
        async with _admin(zookeeper, bootstrap_server, connect_timeout_ms) as admin:
            return await admin.list_groups()

    names = run_async(go)
    if output == "json":
        echo_json({"groups": names})
    else:
        for name in names:
            click.echo(name)


@groups.command("describe", short_help="Offsets, log end offsets, lag and owners of a group.")
@click.option("--group", "-g", required=True, type=NAME, help="The consumer group.")
@click.option(
    "--topic",
    "topics",
    multiple=True,
    type=NAME,
    help="Show only this topic (repeatable). Default: every topic the group has owner or "
    "offset nodes for.",
)
@click.option(
    "--offsets-storage",
    type=click.Choice(["zookeeper", "kafka"]),
    default="zookeeper",
    show_default=True,
    help="Where the committed offsets are read: ZooKeeper's offset nodes, or the group's "
    "Kafka coordinator (OffsetFetch; ZooKeeper where Kafka has none).",
)
@cluster_options
@output_option
def describe(
    group: str,
    topics: tuple[str, ...],
    offsets_storage: str,
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
    output: str,
) -> None:
    """Describe a group: offset, log end offset, lag and owner of each partition.

    \b
    Columns as ConsumerGroupCommand 0.10.2 with --zookeeper:
      TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID

    CONSUMER-ID is the owning member ("-": no owner); live members that own no partition
    follow in rows of their own. Log end offsets come from the partition leaders.
    """

    async def go() -> GroupDescription:
        async with _admin(zookeeper, bootstrap_server, connect_timeout_ms) as admin:
            return await admin.describe_group(
                group,
                topics=topics or None,
                offsets_storage="kafka" if offsets_storage == "kafka" else "zookeeper",
            )

    description = run_async(go)
    if output == "json":
        echo_json(description.to_json())
        return
    if not description.members:
        click.echo(f"Consumer group '{group}' has no active members.", err=True)
    print_description(description)


@groups.command("delete", short_help="Delete inactive groups, or one topic of them.")
@click.option(
    "--group", "-g", "group_ids", multiple=True, type=NAME, help="A group to delete (repeatable)."
)
@click.option(
    "--topic",
    type=NAME,
    help="Delete only this topic's owner and offset nodes (the whole group when it is the "
    "group's only topic). Without --group: from every inactive group that has offsets for it.",
)
@cluster_options
@output_option
def delete(
    group_ids: tuple[str, ...],
    topic: str | None,
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
    output: str,
) -> None:
    """Delete groups (or one topic of them) from ZooKeeper, if they have no live members.

    As ConsumerGroupCommand --delete --zookeeper (0.10.2): a group whose
    /consumers/<group>/ids has children is refused ("... failed because its consumers are
    still active.", exit status 1). Several groups are each tried; the exit status is that of
    the first failure.
    """
    if not group_ids and topic is None:
        raise click.UsageError("give --group, --topic, or both")

    async def go() -> tuple[list[dict[str, object]], int]:
        results: list[dict[str, object]] = []
        status = 0
        async with _admin(zookeeper, bootstrap_server, connect_timeout_ms) as admin:
            if not group_ids and topic is not None:
                cleaned, skipped = await admin.delete_topic_from_groups(topic)
                results += [{"group": g, "topic": topic, "deleted": True} for g in cleaned]
                for g in skipped:
                    results.append(
                        {
                            "group": g,
                            "topic": topic,
                            "deleted": False,
                            "error": f"Delete for group '{g}' topic '{topic}' failed because "
                            "its consumers are still active.",
                        }
                    )
                    status = status or ExitCode.FAILED
                return results, status
            for group in group_ids:
                try:
                    if topic is None:
                        await admin.delete_group(group)
                        message = (
                            f"Deleted all consumer group information for group '{group}' in "
                            "zookeeper."
                        )
                    else:
                        whole = await admin.delete_group_topic(group, topic)
                        message = (
                            f"Deleted consumer group information for group '{group}' topic "
                            f"'{topic}' in zookeeper."
                            + (
                                " It was the group's only topic: the group is gone."
                                if whole
                                else ""
                            )
                        )
                    results.append(
                        {"group": group, "topic": topic, "deleted": True, "message": message}
                    )
                except (GroupActiveError, UnknownGroupError, UnknownTopicError) as e:
                    reason = str(e)
                    if isinstance(e, UnknownGroupError):
                        what = f"group '{group}'" + (f" topic '{topic}'" if topic else "")
                        reason = f"Delete for {what} failed because group does not exist."
                    results.append(
                        {"group": group, "topic": topic, "deleted": False, "error": reason}
                    )
                    status = status or exit_code_for(e)
        return results, status

    results, status = run_async(go)
    if output == "json":
        echo_json({"results": results})
    else:
        for r in results:
            if r["deleted"]:
                click.echo(
                    r.get("message")
                    or f"Deleted consumer group information for group '{r['group']}' topic "
                    f"'{r['topic']}' in zookeeper."
                )
            else:
                click.echo(f"Error: {r['error']}", err=True)
    if status:
        raise click.exceptions.Exit(status)
