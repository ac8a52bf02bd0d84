"""``aiozkconsumer groups``: list, describe and delete consumer groups.

Both sides of ``kafka-consumer-groups.sh`` (``ConsumerGroupCommand``, 0.10.2): ``--zookeeper``
for the groups ZooKeeper coordinates (the default, ``--coordinator zookeeper``), and
``--bootstrap-server`` for the groups Kafka's group coordinators hold (``--coordinator kafka``:
``group.coordinator=kafka`` and today's Kafka clients), for ``list`` and ``describe``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from ..config_rules import validate_group_id
from ..errors import InvalidConfigError, UnknownTopicError
from ..tools import (
    GroupActiveError,
    GroupAdmin,
    GroupDescription,
    GroupMembers,
    GroupState,
    KafkaGroupListing,
    MalformedNode,
    UnknownGroupError,
    parse_topic_partitions,
)
from ..zk import layout
from ._common import (
    NAME,
    ExitCode,
    cluster_options,
    echo_json,
    exit_code_for,
    group_admin,
    output_option,
    run_async,
    zookeeper_given,
)
from .kafka_groups import (
    delete_kafka_groups,
    delete_kafka_offsets,
    describe_kafka,
    kafka_admin,
    print_kafka_listings,
)
from .tables import MISSING, format_table

__all__ = [
    "echo_malformed",
    "format_table",
    "groups",
    "print_description",
    "print_members",
    "print_state",
]

_F = TypeVar("_F", bound=Callable[..., Any])

def _admin(zookeeper: str, bootstrap_server: str | None, connect_timeout_ms: int) -> GroupAdmin:
    return group_admin(zookeeper, bootstrap_server, connect_timeout_ms)


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


def echo_malformed(malformed: Iterable[MalformedNode]) -> None:
    """One ``Malformed node <path>: <reason>`` line on stderr per node that does not parse."""
    for node in malformed:
        click.echo(f"Malformed node {node.path}: {node.reason}", err=True)


def _assignment_text(assignment: Any) -> str:
    """``topic(0,1);other(2)``, as ``ConsumerGroupCommand --members --verbose``; ``-`` for
    nothing."""
    return ";".join(f"{t}({','.join(map(str, ps))})" for t, ps in assignment.items()) or MISSING


def print_members(members: GroupMembers) -> None:
    """Print ``groups describe --members``' table (``ConsumerGroupCommand --members
    --verbose``'s columns, with the streams of each registration)."""
    rows: list[Sequence[object]] = [
        (
            m.consumer_id,
            m.host,
            m.client_id,
            ",".join(f"{t}:{n}" for t, n in m.streams.items()) or None,
            m.partition_count,
            _assignment_text(m.assignment),
        )
        for m in members.members
    ]
    headers = ("CONSUMER-ID", "HOST", "CLIENT-ID", "STREAMS", "#PARTITIONS", "ASSIGNMENT")
    for line in format_table(headers, rows, (50, 20, 10, 20, 11, 0)):
        click.echo(line)


def print_state(state: GroupState) -> None:
    """Print ``groups describe --state``' table (``ConsumerGroupCommand --state``'s columns
    without the coordinator, which a ZooKeeper group has none of)."""
    rows = [(state.group, state.assignment_strategy, state.state, len(state.members))]
    headers = ("GROUP", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
    for line in format_table(headers, rows, (30, 19, 11, 0)):
        click.echo(line)
    for tp, owner in state.partitions_without_live_owner:
        why = "no owner" if owner is None else f"owner {owner} is no live member"
        click.echo(f"Partition [{tp.topic},{tp.partition}]: {why}", err=True)


_COORDINATOR_HELP = (
    "Who coordinates the group. zookeeper: the old consumer's groups, read from ZooKeeper "
    "(/consumers). kafka: the groups of Kafka's group coordinators (group.coordinator=kafka, "
    "the Java KafkaConsumer, aiokafka, ...), read from the brokers: needs --bootstrap-server "
    "and refuses the ZooKeeper options (--zookeeper, --connect-timeout-ms)."
)

_ZOOKEEPER_ONLY = (
    "zookeeper",
    "connect_timeout_ms",
    "offsets_storage",
    "all_groups",
    "force",
    "force_malformed",
)
"""Options that only mean something with ``--coordinator zookeeper``."""


def coordinator_option(f: _F) -> _F:
    """``--coordinator zookeeper|kafka`` (unset: :func:`_coordinator` decides)."""
    return click.option(
        "--coordinator",
        type=click.Choice(["zookeeper", "kafka"]),
        default=None,
        help=_COORDINATOR_HELP
        + " Default: kafka when --bootstrap-server is given and --zookeeper is not (neither "
        "on the command line nor in $AIOZKCONSUMER_ZOOKEEPER), as kafka-consumer-groups.sh "
        "--bootstrap-server; zookeeper otherwise.",
    )(f)


def _coordinator(ctx: click.Context, coordinator: str | None, bootstrap_server: str | None) -> str:
    """``--coordinator`` as given, else ``kafka`` for a bootstrap address given alone.

    An operator of a cluster without ZooKeeper types ``--bootstrap-server`` only; dialling
    the ``--zookeeper`` default (localhost:2181) then would fail after the connection timeout
    without saying why.
    """
    if coordinator is not None:
        return coordinator
    return "kafka" if bootstrap_server and not zookeeper_given(ctx) else "zookeeper"


def _kafka_bootstrap(ctx: click.Context, bootstrap_server: str | None) -> str:
    """The brokers of ``--coordinator kafka``; a usage error for ZooKeeper-only options."""
    for name in _ZOOKEEPER_ONLY:
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            option = "--" + name.replace("_", "-")
            raise click.UsageError(f"{option} is not used with --coordinator kafka", ctx)
    if not bootstrap_server:
        raise click.UsageError(
            "--coordinator kafka needs --bootstrap-server (or $AIOZKCONSUMER_BOOTSTRAP_SERVER)",
            ctx,
        )
    return bootstrap_server


def _check_zk_name(ctx: click.Context, name: str, value: str) -> None:
    """Check a ZooKeeper-mode group id as the :data:`NAME` type would (Kafka group ids may
    hold what ZooKeeper paths may not)."""
    param = next(p for p in ctx.command.params if p.name == name)
    NAME.convert(value, param, ctx)


@click.group(short_help="List, describe and delete consumer groups.")
def groups() -> None:
    """List, describe and delete consumer groups (kafka-consumer-groups.sh).

    \b
    --coordinator zookeeper (the default): the groups ZooKeeper coordinates,
      read from /consumers (kafka-consumer-groups.sh --zookeeper).
    --coordinator kafka (list, describe): the groups Kafka's group coordinators
      hold: group.coordinator=kafka and today's Kafka clients, read from the
      brokers given with --bootstrap-server (kafka-consumer-groups.sh
      --bootstrap-server). No ZooKeeper is needed. The default when
      --bootstrap-server is given without --zookeeper.
    """


@groups.command("list")
@click.option(
    "--state",
    "with_state",
    is_flag=True,
    help="Kafka groups: also each group's state (Stable, Empty, ...), as --list --state.",
)
@click.option(
    "--type",
    "with_type",
    is_flag=True,
    help="Kafka groups: also each group's type, classic or consumer (KIP-848), as --list "
    "--type.",
)
@coordinator_option
@cluster_options
@output_option
@click.pass_context
def list_groups(
    ctx: click.Context,
    with_state: bool,
    with_type: bool,
    coordinator: str | None,
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
    output: str,
) -> None:
    """List the consumer groups, one per line.

    With --coordinator zookeeper (the default unless --bootstrap-server is given alone): the
    children of /consumers.

    With --coordinator kafka: the consumer groups the brokers' group coordinators know,
    classic and consumer (KIP-848) groups alike (protocol type "consumer", or none for
    groups that only commit offsets), as kafka-consumer-groups.sh --bootstrap-server
    --list; --state and --type add the columns STATE and TYPE. --output json gives each
    group's state (Stable, PreparingRebalance, CompletingRebalance, Empty; a consumer
    group's Assigning and Reconciling), protocol type and type.
    """
    if _coordinator(ctx, coordinator, bootstrap_server) == "kafka":
        bootstrap = _kafka_bootstrap(ctx, bootstrap_server)

        async def from_kafka() -> list[KafkaGroupListing]:
            async with kafka_admin(bootstrap) as admin:
                return await admin.list_groups()

        listings = run_async(from_kafka)
        if output == "json":
            names = [g.group for g in listings]
            echo_json({"groups": names, "listings": [g.to_json() for g in listings]})
        else:
            print_kafka_listings(listings, state=with_state, group_type=with_type)
        return
    if with_state or with_type:
        option = "--state" if with_state else "--type"
        raise click.UsageError(
            f"{option} lists Kafka groups (give --bootstrap-server, or --coordinator kafka); "
            "for a ZooKeeper group use 'groups describe --state'",
            ctx,
        )

    async def go() -> list[str]:
        async with _admin(zookeeper, bootstrap_server, connect_timeout_ms) as admin:
            return await admin.list_groups()

    names = run_async(go)
    if output == "json":
        echo_json({"groups": names})
        return
    for name in names:
        click.echo(name)


@groups.command("describe", short_help="Offsets, log end offsets, lag and owners of a group.")
@click.option("--group", "-g", metavar="NAME", help="The consumer group (or --all-groups).")
@click.option(
    "--all-groups",
    is_flag=True,
    help="Describe every group under /consumers, one after the other.",
)
@click.option(
    "--members",
    is_flag=True,
    help="The live members instead: consumer id, host (from a generated consumer id), "
    "client id (not recorded in ZooKeeper: -), streams and assigned partitions.",
)
@click.option(
    "--state",
    is_flag=True,
    help="The group's state instead: Stable, Rebalancing (a subscribed partition has no "
    "owner, or one that is no live member) or Empty; the assignment strategy its owners "
    "match; the number of live members.",
)
@click.option(
    "--topic",
    "topics",
    multiple=True,
    type=NAME,
    help="Show only this topic (repeatable). Default: every topic the group has owner or "
    "offset nodes for (--coordinator kafka: committed offsets or assigned partitions).",
)
@click.option(
    "--offsets-storage",
    type=click.Choice(["zookeeper", "kafka"]),
    default="zookeeper",
    show_default=True,
    help="Where the committed offsets are read: ZooKeeper's offset nodes, or the group's "
    "Kafka coordinator (OffsetFetch; ZooKeeper where Kafka has none). Not with "
    "--coordinator kafka, whose groups keep their offsets in Kafka.",
)
@click.option(
    "--isolation-level",
    "isolation_level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
    help="LOG-END-OFFSET and LAG of a group whose members read with isolation.level="
    "read_committed: the last stable offset instead of the high watermark, so records of "
    "open transactions do not count as lag.",
)
@coordinator_option
@cluster_options
@output_option
@click.pass_context
def describe(
    ctx: click.Context,
    group: str | None,
    all_groups: bool,
    members: bool,
    state: bool,
    topics: tuple[str, ...],
    offsets_storage: str,
    isolation_level: str,
    coordinator: str | None,
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
    output: str,
) -> None:
    """Describe a group: offset, log end offset, lag and owner of each partition.

    \b
    --coordinator zookeeper (the default), the columns of ConsumerGroupCommand
    0.10.2 with --zookeeper:
      TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID
    --coordinator kafka, with --bootstrap-server:
      ... LAG CONSUMER-ID HOST CLIENT-ID

    CONSUMER-ID is the owning member ("-": no owner): the ZooKeeper consumer id, or the
    member id the Kafka coordinator gave. Live members that own no partition follow in rows
    of their own. Log end offsets come from the partition leaders. With --coordinator kafka,
    --output json also gives the group's state, assignor and coordinator, and each member's
    client id, host and assigned partitions.

    \b
    --coordinator zookeeper also has (one at a time):
      --members  CONSUMER-ID HOST CLIENT-ID STREAMS #PARTITIONS ASSIGNMENT
      --state    GROUP ASSIGNMENT-STRATEGY STATE #MEMBERS
    and --all-groups for every group. A registration, owner or offset node
    that does not parse is reported on a line of its own on stderr
    ("Malformed node <path>: <reason>"; in JSON, "malformed") and the rest
    of the group is shown.
    """
    if members and state:
        raise click.UsageError("give --members or --state, not both", ctx)
    if topics and (members or state):
        raise click.UsageError("--topic narrows the offsets view: not with --members/--state", ctx)
    view = "members" if members else "state" if state else "offsets"
    if _coordinator(ctx, coordinator, bootstrap_server) == "kafka":
        bootstrap = _kafka_bootstrap(ctx, bootstrap_server)  # refuses ZooKeeper-only options
        if group is None:
            raise click.UsageError("Missing option '--group' / '-g'.", ctx)
        describe_kafka(
            bootstrap,
            group,
            topics=topics,
            output=output,
            isolation_level=isolation_level,
            view=view,
        )
        return
    if group is None and not all_groups:
        raise click.UsageError("Missing option '--group' / '-g' (or give --all-groups).", ctx)
    if group is not None and all_groups:
        raise click.UsageError("give --group or --all-groups, not both", ctx)
    if group is not None:
        _check_zk_name(ctx, "group", group)

    async def one(admin: GroupAdmin, name: str) -> GroupDescription | GroupMembers | GroupState:
        if view == "members":
            return await admin.describe_members(name)
        if view == "state":
            return await admin.describe_state(name)
        return await admin.describe_group(
            name,
            topics=topics or None,
            offsets_storage="kafka" if offsets_storage == "kafka" else "zookeeper",
            isolation_level=isolation_level,
        )

    async def go() -> list[GroupDescription | GroupMembers | GroupState]:
        async with _admin(zookeeper, bootstrap_server, connect_timeout_ms) as admin:
            if group is not None:
                return [await one(admin, group)]
            found = []
            for name in await admin.list_groups():
                try:
                    found.append(await one(admin, name))
                except UnknownGroupError:
                    continue  # deleted since listed
            return found

    described = run_async(go)
    if output == "json":
        if all_groups:
            echo_json({"groups": [d.to_json() for d in described]})
        else:
            echo_json(described[0].to_json())
        for d in described:
            echo_malformed(d.malformed)
        return
    for i, d in enumerate(described):
        if all_groups:
            if i:
                click.echo("")
            click.echo(f"GROUP {d.group}")
        echo_malformed(d.malformed)
        if isinstance(d, GroupMembers):
            if not d.members:
                click.echo(f"Consumer group '{d.group}' has no active members.", err=True)
            print_members(d)
        elif isinstance(d, GroupState):
            print_state(d)
        else:
            if not d.members and not d.malformed:
                click.echo(f"Consumer group '{d.group}' has no active members.", err=True)
            print_description(d)


def _check_group_to_delete(ctx: click.Context, group: str, force: bool) -> None:
    """``group.id``'s rule for ``--group`` (the one of every command), or with ``--force`` only
    that it names a ZooKeeper node: a group made by hand with another name can be deleted."""
    param = next(p for p in ctx.command.params if p.name == "group_ids")
    try:
        if force:
            layout.group_dir(group)
        else:
            validate_group_id(group)
    except InvalidConfigError as e:
        raise click.BadParameter(
            f"{e}; a group of that name made by hand can be deleted with --force", ctx, param
        ) from None
    except ValueError as e:
        raise click.BadParameter(str(e), ctx, param) from None


@groups.command("delete", short_help="Delete inactive groups, or one topic of them.")
@click.option(
    "--group",
    "-g",
    "group_ids",
    multiple=True,
    help="A group to delete (repeatable). Its id must keep group.id's rule unless --force.",
)
@click.option(
    "--topic",
    type=NAME,
    help="Delete only this topic's owner and offset nodes (the whole group when it is the "
    "group's only topic). Without --group: from every inactive group that has offsets for it.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Accept a group id that breaks group.id's rule ([a-zA-Z0-9._-]+), as 'groups list' "
    "may show for a group made by hand in ZooKeeper, so that it can be deleted.",
)
@click.option(
    "--force-malformed",
    is_flag=True,
    help="Also delete a group whose live members are all malformed registration nodes (left "
    "by hand); a member whose registration parses still refuses the deletion.",
)
@coordinator_option
@cluster_options
@output_option
@click.pass_context
def delete(
    ctx: click.Context,
    group_ids: tuple[str, ...],
    topic: str | None,
    force: bool,
    force_malformed: bool,
    coordinator: str | None,
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

    A registration node that does not parse counts as a live member, as the original's
    check of /consumers/<group>/ids did. When every live member is such a node (written by
    hand), --force-malformed deletes the group anyway; any member whose registration parses
    still refuses it.

    With --coordinator kafka (the default for --bootstrap-server given alone): the groups
    of Kafka's coordinators, classic and consumer alike, are deleted with their committed
    offsets (DeleteGroups, as kafka-consumer-groups.sh --bootstrap-server --delete); a
    group with live members is refused (exit status 1), an unknown one exits 4. A topic's
    offsets of a Kafka group: 'groups delete-offsets'.
    """
    if _coordinator(ctx, coordinator, bootstrap_server) == "kafka":
        bootstrap = _kafka_bootstrap(ctx, bootstrap_server)
        if topic is not None:
            raise click.UsageError(
                "--topic is for ZooKeeper groups; a Kafka group's offsets of a topic are "
                "deleted with 'groups delete-offsets --group G --topic T'",
                ctx,
            )
        if not group_ids:
            raise click.UsageError("give --group", ctx)
        for group in group_ids:
            _check_group_to_delete(ctx, group, False)
        status = delete_kafka_groups(bootstrap, group_ids, output)
        if status:
            raise click.exceptions.Exit(status)
        return
    if not group_ids and topic is None:
        raise click.UsageError("give --group, --topic, or both")
    for group in group_ids:
        _check_group_to_delete(ctx, group, force)
    if force_malformed and (topic is not None or not group_ids):
        raise click.UsageError("--force-malformed deletes whole groups: give --group, no --topic")

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
                        await admin.delete_group(group, force_malformed=force_malformed)
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


@groups.command(
    "delete-offsets", short_help="Delete a Kafka group's offsets of topics (--delete-offsets)."
)
@click.option("--group", "-g", required=True, type=NAME, help="The consumer group.")
@click.option(
    "--topic",
    "-t",
    "topics",
    multiple=True,
    required=True,
    metavar="TOPIC[:P,...]",
    help="A topic whose offsets to delete, all its partitions or those listed (repeatable), "
    "e.g. payments:0,2.",
)
@coordinator_option
@cluster_options
@output_option
@click.pass_context
def delete_offsets(
    ctx: click.Context,
    group: str,
    topics: tuple[str, ...],
    coordinator: str | None,
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
    output: str,
) -> None:
    """Delete a Kafka group's committed offsets of some topics (OffsetDelete, KIP-496).

    As kafka-consumer-groups.sh --bootstrap-server --delete-offsets: one line per partition,
    TOPIC PARTITION STATUS ("Successful", or "Error: ..."). The coordinator refuses a topic
    that a live member of the group reads (GROUP_SUBSCRIBED_TO_TOPIC); the other topics'
    offsets are deleted. Exit status 1 when a partition's offset was not deleted, 4 for an
    unknown group or topic.

    Kafka groups only (--bootstrap-server); a ZooKeeper group's topic: 'groups delete
    --group G --topic T'.
    """
    if _coordinator(ctx, coordinator, bootstrap_server) != "kafka":
        raise click.UsageError(
            "delete-offsets deletes a Kafka group's offsets: give --bootstrap-server without "
            "--zookeeper (or --coordinator kafka); a ZooKeeper group's topic: 'groups delete "
            "--group G --topic T'",
            ctx,
        )
    bootstrap = _kafka_bootstrap(ctx, bootstrap_server)
    try:
        scope = parse_topic_partitions(topics)
    except ValueError as e:
        raise click.BadParameter(str(e), ctx, param_hint="'--topic'") from None
    status = delete_kafka_offsets(
        bootstrap,
        group,
        dict(scope.topics),
        output,
    )
    if status:
        raise click.exceptions.Exit(status)
