"""``aiozkconsumer offsets``: check, export, import, update and reset a group's offsets.

The old tools ``ConsumerOffsetChecker``, ``ExportZkOffsets``, ``ImportZkOffsets`` and
``UpdateOffsetsInZK`` (0.10.2), and ``kafka-consumer-groups.sh --reset-offsets`` (Kafka 2.x);
``migrate`` copies a group's offsets between ZooKeeper and Kafka, the way off ZooKeeper.
Export and import use the original's file format, one
``/consumers/<group>/offsets/<topic>/<partition>:<offset>`` per line, so files move between
these commands and the original tools; import also reads the CSV ``reset --export`` (and
``kafka-consumer-groups.sh``) writes.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Sequence
from pathlib import Path

import click
from click.core import ParameterSource

from ..records import TopicPartition
from ..tools import (
    AllTopics,
    FromOffsets,
    GroupAdmin,
    GroupDescription,
    KafkaGroupDescription,
    MalformedNode,
    MigrationPlan,
    MigrationTarget,
    OffsetEntry,
    OffsetsFileError,
    ResetPlan,
    ResetScope,
    ResetSpec,
    ResetStorage,
    ShiftBy,
    ToEarliest,
    ToLatest,
    ToOffset,
    ToTimestamp,
    detect_offsets_format,
    format_offsets_csv,
    format_offsets_file,
    migrate_offsets,
    parse_datetime_ms,
    parse_duration,
    parse_offsets_csv,
    parse_offsets_file,
    parse_topic_partitions,
)
from ._common import (
    NAME,
    CliError,
    ExitCode,
    cluster_options,
    echo_json,
    group_admin,
    output_option,
    run_async,
    zookeeper_given,
)
from .groups import echo_malformed
from .kafka_groups import kafka_admin
from .tables import format_table

__all__ = ["offsets"]


def _admin(zookeeper: str, bootstrap_server: str | None, connect_timeout_ms: int) -> GroupAdmin:
    return group_admin(zookeeper, bootstrap_server, connect_timeout_ms)


def _kafka_only(ctx: click.Context, bootstrap_server: str | None) -> str | None:
    """The brokers when ``--bootstrap-server`` is given without ``--zookeeper`` (a cluster
    without ZooKeeper, as ``kafka-consumer-groups.sh --bootstrap-server``: the groups are
    the Kafka coordinators'), else ``None``."""
    return bootstrap_server if bootstrap_server and not zookeeper_given(ctx) else None


def _read_text(path: Path) -> str:
    """A file's text ('-': stdin); unreadable or not UTF-8 is a usage error."""
    try:
        if str(path) == "-":
            return sys.stdin.read()
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror}", ExitCode.USAGE) from None
    except UnicodeDecodeError as e:
        raise CliError(f"cannot read {path}: not UTF-8 text ({e})", ExitCode.USAGE) from None


def _parse_any_offsets(path: Path, text: str, group: str | None) -> list[OffsetEntry]:
    """The entries of an offsets file in either format (the CSV's groupless lines get
    ``group``); a malformed line is a usage error naming it."""
    lines = text.splitlines()
    try:
        if detect_offsets_format(lines) == "csv":
            return parse_offsets_csv(lines, group)
        return parse_offsets_file(lines)
    except OffsetsFileError as e:
        hint = " (give the group with --group)" if "group given apart" in str(e) else ""
        raise CliError(f"{path}, {e}{hint}", ExitCode.USAGE) from None


@click.group(short_help="Check, export, import, update and reset offsets.")
def offsets() -> None:
    """Check, export, import, update and reset consumer offsets.

    \b
    check, export, import, update: ZooKeeper-stored offsets (check can also
      read Kafka-stored ones), as the old tools.
    reset: kafka-consumer-groups.sh --reset-offsets, for offsets in ZooKeeper,
      in Kafka or in both (--offsets-storage).
    migrate: copy a group's offsets from ZooKeeper to Kafka (or back), the way
      off ZooKeeper.
    """


@offsets.command("check", short_help="The ConsumerOffsetChecker view of a group.")
@click.option("--group", "-g", required=True, type=NAME, help="The consumer group.")
@click.option(
    "--topic",
    "topic_list",
    metavar="TOPIC[,TOPIC...]",
    help="Comma-separated topics to show. Default: every topic the group has owner or "
    "offset nodes for.",
)
@click.option(
    "--broker-info", is_flag=True, help="Also print the brokers: BROKER INFO, id -> host:port."
)
@click.option(
    "--offsets-storage",
    type=click.Choice(["zookeeper", "kafka"]),
    default="zookeeper",
    show_default=True,
    help="Where the committed offsets are read (kafka: the group's coordinator, then "
    "ZooKeeper where Kafka has none, as the original checker).",
)
@cluster_options
@output_option
@click.pass_context
def check(
    ctx: click.Context,
    group: str,
    topic_list: str | None,
    broker_info: bool,
    offsets_storage: str,
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
    output: str,
) -> None:
    """Show a group's offsets, log sizes and lag (the ConsumerOffsetChecker view).

    \b
    Columns as ConsumerOffsetChecker (0.10.2):
      Group Topic Pid Offset logSize Lag Owner

    Offset and Lag are "unknown" where no offset is committed; Owner is the owner node's
    thread id, or "none".

    A Kafka-coordinated group (Kafka 4 clusters, group.coordinator=kafka, the Java
    KafkaConsumer) has nothing in ZooKeeper: with --bootstrap-server given alone (no
    --zookeeper), or with --offsets-storage kafka for a group ZooKeeper does not know, its
    offsets come from its coordinator and Owner is the member id it is assigned to.
    """
    topics = [t.strip() for t in topic_list.split(",") if t.strip()] if topic_list else None
    for t in topics or ():
        NAME.convert(t, None, None)
    if bootstrap_server and not zookeeper_given(ctx):
        if ctx.get_parameter_source("offsets_storage") is ParameterSource.COMMANDLINE and (
            offsets_storage == "zookeeper"
        ):
            raise click.UsageError("--offsets-storage zookeeper needs --zookeeper", ctx)
        _check_kafka_group(group, topics, broker_info, bootstrap_server, output)
        return

    async def go() -> tuple[GroupDescription, list[tuple[int, str]]]:
        async with _admin(zookeeper, bootstrap_server, connect_timeout_ms) as admin:
            description = await admin.describe_group(
                group,
                topics=topics,
                offsets_storage="kafka" if offsets_storage == "kafka" else "zookeeper",
            )
            brokers: list[tuple[int, str]] = []
            if broker_info:
                kafka = await admin.kafka()
                for b in await admin.brokers():
                    host, port = b.plaintext_address()
                    brokers.append((b.broker_id, f"{host}:{port}"))
                if not brokers:  # KRaft: the brokers are known from Kafka metadata only
                    brokers = kafka.brokers()
            return description, brokers

    try:
        description, brokers = run_async(go)
    except CliError as e:
        if offsets_storage != "kafka" or not bootstrap_server or e.exit_code != ExitCode.UNKNOWN:
            raise
        # Not a ZooKeeper group: maybe a Kafka-coordinated one, whose offsets are in Kafka.
        _check_kafka_group(group, topics, broker_info, bootstrap_server, output)
        return
    echo_malformed(description.malformed)
    rows = [
        (p.topic, p.partition, p.offset, p.log_end_offset, p.lag, p.owner)
        for p in description.partitions
    ]
    _echo_checker(group, rows, brokers if broker_info else None, description.malformed, output)


_CheckerRow = tuple[str, int, int | None, int | None, int | None, str | None]
"""``(topic, partition, offset, log end offset, lag, owner)`` of one ``offsets check`` row."""


def _echo_checker(
    group: str,
    rows: list[_CheckerRow],
    brokers: list[tuple[int, str]] | None,
    malformed: Sequence[MalformedNode],
    output: str,
) -> None:
    """Print ``offsets check``'s view (ConsumerOffsetChecker's columns, or JSON) of either
    kind of group; ``brokers`` with ``--broker-info``, else ``None``."""
    if output == "json":
        echo_json(
            {
                "group": group,
                "partitions": [
                    {
                        "group": group,
                        "topic": topic,
                        "pid": pid,
                        "offset": offset,
                        "log_size": log_size,
                        "lag": lag,
                        "owner": owner,
                    }
                    for topic, pid, offset, log_size, lag, owner in rows
                ],
                **({"brokers": {str(i): a for i, a in brokers}} if brokers is not None else {}),
                "malformed": [m.to_json() for m in malformed],
            }
        )
        return
    def shown(value: int | None) -> object:
        return "unknown" if value is None else value

    table = [
        (group, topic, pid, shown(offset), shown(size), shown(lag), owner or "none")
        for topic, pid, offset, size, lag, owner in rows
    ]
    headers = ("Group", "Topic", "Pid", "Offset", "logSize", "Lag", "Owner")
    for line in format_table(headers, table, (15, 30, 3, 15, 15, 15, 0)):
        click.echo(line)
    if brokers is not None:
        click.echo("BROKER INFO")
        for broker_id, address in brokers:
            click.echo(f"{broker_id} -> {address}")


def _check_kafka_group(
    group: str,
    topics: list[str] | None,
    broker_info: bool,
    bootstrap_server: str,
    output: str,
) -> None:
    """``offsets check`` of a Kafka-coordinated group: its coordinator's view, in the checker's
    columns (Owner: the member id the partition is assigned to)."""

    async def go() -> tuple[KafkaGroupDescription, list[tuple[int, str]]]:
        async with kafka_admin(bootstrap_server) as admin:
            description = await admin.describe_group(group, topics=topics)
            return description, admin.brokers() if broker_info else []

    description, brokers = run_async(go)
    rows = [
        (p.topic, p.partition, p.offset, p.log_end_offset, p.lag, p.member_id)
        for p in description.partitions
    ]
    _echo_checker(group, rows, brokers if broker_info else None, (), output)


@offsets.command("export")
@click.option(
    "--output-file",
    "-f",
    required=True,
    type=click.Path(dir_okay=False, writable=True, allow_dash=True, path_type=Path),
    help="Where to write the offsets ('-' for stdout).",
)
@click.option(
    "--group",
    "-g",
    "group_ids",
    multiple=True,
    type=NAME,
    help="A group to export (repeatable). Default: every group.",
)
@cluster_options
@output_option
@click.pass_context
def export(
    ctx: click.Context,
    output_file: Path,
    group_ids: tuple[str, ...],
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
    output: str,
) -> None:
    """Write groups' committed offsets to a file (ExportZkOffsets).

    \b
    One line per offset node, in the original tool's format:
      /consumers/<group>/offsets/<topic>/<partition>:<offset>

    An offset node that does not hold a number is left out and reported ("Malformed node
    <path>: <reason>" on stderr; in JSON, "malformed"); the other offsets are exported.

    The summary goes to stderr (text) or stdout (json); with --output-file - the
    offsets themselves go to stdout, in the file's format (text) or in the JSON document
    (json, its "file" then "-").

    With --bootstrap-server given alone (no --zookeeper): the committed offsets of the
    Kafka coordinators' groups (OffsetFetch), in the same format.
    """

    malformed: list[MalformedNode] = []
    kafka = _kafka_only(ctx, bootstrap_server)

    async def go() -> list[OffsetEntry]:
        if kafka is not None:
            async with kafka_admin(kafka) as groups:
                return await groups.export_offsets(group_ids or None)
        async with _admin(zookeeper, bootstrap_server, connect_timeout_ms) as admin:
            return await admin.export_offsets(group_ids or None, malformed)

    entries = run_async(go)
    if output != "json":
        echo_malformed(malformed)  # left out of the file; the rest is exported
    to_stdout = str(output_file) == "-"
    if not to_stdout:
        try:
            output_file.write_text(format_offsets_file(entries), encoding="utf-8")
        except OSError as e:
            raise CliError(f"cannot write {output_file}: {e.strerror}", ExitCode.USAGE) from None
    groups = sorted({e.group for e in entries})
    if output == "json":
        # -o json means JSON on stdout, with --output-file - too: the offsets are in it.
        echo_json(
            {
                "file": str(output_file),
                "groups": groups,
                "malformed": [m.to_json() for m in malformed],
                "offsets": [
                    {
                        "group": e.group,
                        "topic": e.topic,
                        "partition": e.partition,
                        "offset": e.offset,
                        "path": e.path,
                    }
                    for e in entries
                ],
            }
        )
        return
    if to_stdout:
        click.echo(format_offsets_file(entries), nl=False)
    click.echo(
        f"exported {len(entries)} offsets of {len(groups)} groups to {output_file}", err=True
    )


@offsets.command("import")
@click.option(
    "--input-file",
    "-f",
    required=True,
    type=click.Path(dir_okay=False, readable=True, allow_dash=True, path_type=Path),
    help="An offsets file as `offsets export` (or ExportZkOffsets) writes it, or the CSV of "
    "`offsets reset --export` (kafka-consumer-groups --export) ('-': stdin).",
)
@click.option(
    "--group",
    "-g",
    type=NAME,
    help="The group of a topic,partition,offset CSV file (which does not name it). Not used "
    "with path:offset files, which name their groups.",
)
@cluster_options
@output_option
@click.pass_context
def import_(
    ctx: click.Context,
    input_file: Path,
    group: str | None,
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
    output: str,
) -> None:
    """Write the offsets of a file into ZooKeeper (ImportZkOffsets).

    \b
    The format is told per file, by its first line:
      /consumers/<group>/offsets/<topic>/<partition>:<offset>  (ExportZkOffsets)
      <topic>,<partition>,<offset>         (CSV of one group: give --group)
      <group>,<topic>,<partition>,<offset> (CSV of several groups)

    The whole file is checked first: a malformed line stops the import before anything is
    written, naming its line number (exit status 2). As the original, live members are not
    checked for: stop the group first, or its next commit overwrites what was imported.

    With --bootstrap-server given alone (no --zookeeper): the offsets are committed to the
    groups' Kafka coordinators (OffsetCommit, as kafka-consumer-groups.sh --reset-offsets
    --from-file), and a group of the file with live members refuses the whole import
    before anything is written (exit status 1): its coordinator would refuse the commit.
    """
    text = _read_text(input_file)
    if group is not None and detect_offsets_format(text.splitlines()) == "zookeeper":
        raise click.UsageError(
            f"--group is for CSV files; {input_file} holds znode paths, which name their groups"
        )
    entries = _parse_any_offsets(input_file, text, group)
    kafka = _kafka_only(ctx, bootstrap_server)

    async def go() -> tuple[int, list[str]]:
        if kafka is not None:
            async with kafka_admin(kafka) as groups:
                return await groups.import_offsets(entries), []
        async with _admin(zookeeper, bootstrap_server, connect_timeout_ms) as admin:
            active = [g for g in sorted({e.group for e in entries}) if await admin.member_ids(g)]
            return await admin.import_offsets(entries), active

    written, active = run_async(go)
    for group in active:
        click.echo(
            f"Warning: group '{group}' has live members; their next commit overwrites the "
            "imported offsets.",
            err=True,
        )
    if output == "json":
        echo_json({"file": str(input_file), "imported": written, "active_groups": active})
    else:
        click.echo(f"imported {written} offsets from {input_file}")


_RESET_ONLY = ("--to-datetime", "--to-offset", "--shift-by", "--by-duration", "--from-file")
"""Targets of ``offsets reset`` that ``offsets update`` (earliest or latest only) lacks."""


class _UpdateCommand(click.Command):
    """``offsets update``, pointing at ``offsets reset`` when given one of its targets."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        for arg in args:
            name = arg.split("=", 1)[0]
            if name in _RESET_ONLY:
                raise click.UsageError(
                    f"offsets update sets the earliest or latest offsets only; {name} is an "
                    "option of 'offsets reset' (kafka-consumer-groups --reset-offsets), e.g. "
                    f"'aiozkconsumer offsets reset --group G --topic T {name} ... --execute'",
                    ctx,
                )
        return super().parse_args(ctx, args)


@offsets.command(
    "update",
    cls=_UpdateCommand,
    short_help="Set offsets to the earliest or latest ones (UpdateOffsetsInZK).",
)
@click.argument("to", type=click.Choice(["earliest", "latest"]))
@click.option("--group", "-g", required=True, type=NAME, help="The consumer group.")
@click.option("--topic", "-t", required=True, type=NAME, help="The topic.")
@cluster_options
@output_option
@click.pass_context
def update(
    ctx: click.Context,
    to: str,
    group: str,
    topic: str,
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
    output: str,
) -> None:
    """Set a group's offsets of a topic to the earliest or latest offsets (UpdateOffsetsInZK).

    Each partition's leader is asked for its log start (earliest) or log end (latest)
    offset, which is written to /consumers/<group>/offsets/<topic>/<partition>.

    Other targets (an offset, a shift, a datetime, a duration, a file) and dry runs:
    'offsets reset'.
    """
    if _kafka_only(ctx, bootstrap_server) is not None:
        raise click.UsageError(
            "offsets update writes ZooKeeper's offset nodes: give --zookeeper; the offsets of "
            f"a Kafka group are set with 'offsets reset --group {group} --topic {topic} "
            f"--to-{to} --execute --bootstrap-server ...'",
            ctx,
        )

    async def go() -> tuple[dict[int, int], bool]:
        async with _admin(zookeeper, bootstrap_server, connect_timeout_ms) as admin:
            written = await admin.update_offsets(
                group, topic, "earliest" if to == "earliest" else "latest"
            )
            return written, bool(await admin.member_ids(group))

    written, active = run_async(go)
    if active:
        click.echo(
            f"Warning: group '{group}' has live members; their next commit overwrites these "
            "offsets.",
            err=True,
        )
    if output == "json":
        echo_json(
            {
                "group": group,
                "topic": topic,
                "to": to,
                "offsets": {str(p): o for p, o in written.items()},
                "updated": len(written),
            }
        )
        return
    for partition, offset in written.items():
        click.echo(f"updating partition {partition} with new offset: {offset}")
    click.echo(f"updated the offset for {len(written)} partitions")


# -- reset ------------------------------------------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_STORAGES: dict[str, ResetStorage] = {"zookeeper": "zookeeper", "kafka": "kafka", "dual": "dual"}
_MODES = ("to_earliest", "to_latest", "to_offset", "shift_by", "to_datetime", "by_duration")


def _reset_spec(
    ctx: click.Context,
    group: str,
    values: dict[str, object],
    from_file: Path | None,
) -> ResetSpec:
    """The one mode given, parsed; a usage error for none, several, or a bad value."""
    given = [m for m in _MODES if values[m] not in (None, False)]
    if from_file is not None:
        given.append("from_file")
    if len(given) != 1:
        names = "--to-earliest, --to-latest, --to-offset, --shift-by, --to-datetime, "
        names += "--by-duration, --from-file"
        found = ", ".join("--" + g.replace("_", "-") for g in given) or "none"
        raise click.UsageError(f"give exactly one of {names} (got {found})", ctx)
    mode = given[0]
    if mode == "to_earliest":
        return ToEarliest()
    if mode == "to_latest":
        return ToLatest()
    if mode == "to_offset":
        return ToOffset(int(str(values["to_offset"])))
    if mode == "shift_by":
        return ShiftBy(int(str(values["shift_by"])))
    if mode == "to_datetime":
        try:
            return ToTimestamp(parse_datetime_ms(str(values["to_datetime"])))
        except ValueError as e:
            raise click.BadParameter(str(e), ctx, param_hint="'--to-datetime'") from None
    if mode == "by_duration":
        try:
            duration = parse_duration(str(values["by_duration"]))
        except ValueError as e:
            raise click.BadParameter(str(e), ctx, param_hint="'--by-duration'") from None
        since = dt.datetime.now(dt.UTC) - duration - _EPOCH
        return ToTimestamp(since // dt.timedelta(milliseconds=1))
    assert from_file is not None
    entries = [
        e for e in _parse_any_offsets(from_file, _read_text(from_file), group) if e.group == group
    ]
    if not entries:
        raise CliError(f"{from_file} holds no offsets of group '{group}'", ExitCode.USAGE)
    return FromOffsets({TopicPartition(e.topic, e.partition): e.offset for e in entries})


def _echo_plan(plan: ResetPlan) -> None:
    rows = [
        (p.topic, p.partition, p.current, p.new)  # current None shows as "-"
        for p in plan.partitions
    ]
    headers = ("TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET")
    for line in format_table(headers, rows, (30, 10, 15, 15)):
        click.echo(line)


@offsets.command(
    "reset", short_help="Reset a group's offsets (kafka-consumer-groups --reset-offsets)."
)
@click.option("--group", "-g", required=True, type=NAME, help="The consumer group.")
@click.option(
    "--topic",
    "-t",
    "topics",
    multiple=True,
    metavar="TOPIC[:P,...]",
    help="A topic to reset, all its partitions or those listed (repeatable), e.g. payments:0,2.",
)
@click.option(
    "--all-topics",
    is_flag=True,
    help="Every partition the group has a committed offset for (in --offsets-storage).",
)
@click.option("--to-earliest", is_flag=True, help="To each partition's log start offset.")
@click.option("--to-latest", is_flag=True, help="To each partition's log end offset.")
@click.option("--to-offset", type=click.IntRange(min=0), metavar="N", help="To offset N (clamped).")
@click.option(
    "--shift-by",
    type=int,
    metavar="N",
    help="The committed offset plus N (negative: back), clamped. Every partition needs one.",
)
@click.option(
    "--to-datetime",
    metavar="ISO8601",
    help="To the first offset at or after the time, e.g. 2024-05-01T12:30:00.000 (local "
    "time) or ...Z; the log end where no record is that recent.",
)
@click.option(
    "--by-duration",
    metavar="PnDTnHnM",
    help="As --to-datetime, for now minus the duration, e.g. PT30M or P1DT2H.",
)
@click.option(
    "--from-file",
    type=click.Path(dir_okay=False, readable=True, path_type=Path),
    metavar="CSV",
    help="To the offsets of a topic,partition,offset CSV (as --export writes), or of a "
    "path:offset file (the group's lines). A scope, if given, narrows it.",
)
@click.option("--dry-run", is_flag=True, help="Print the plan and change nothing.")
@click.option("--execute", is_flag=True, help="Write the plan (refused while members are live).")
@click.option(
    "--export",
    is_flag=True,
    help="Print the new offsets as topic,partition,offset CSV (for --from-file or `offsets "
    "import`) instead of the table.",
)
@click.option(
    "--offsets-storage",
    type=click.Choice(["zookeeper", "kafka", "dual"]),
    default="zookeeper",
    show_default=True,
    help="Where the offsets are read and written: ZooKeeper's offset nodes, the group's "
    "Kafka coordinator (offsets.storage=kafka), or both (dual.commit.enabled; the current "
    "offset is the larger).",
)
@cluster_options
@output_option
@click.pass_context
def reset(
    ctx: click.Context,
    group: str,
    topics: tuple[str, ...],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    shift_by: int | None,
    to_datetime: str | None,
    by_duration: str | None,
    from_file: Path | None,
    dry_run: bool,
    execute: bool,
    export: bool,
    offsets_storage: str,
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
    output: str,
) -> None:
    """Reset a group's offsets, as kafka-consumer-groups.sh --reset-offsets.

    \b
    Scope: --topic TOPIC[:P,...] (repeatable) or --all-topics; optional with
      --from-file, whose partitions are reset.
    Mode, exactly one of: --to-earliest, --to-latest, --to-offset N,
      --shift-by N, --to-datetime ISO8601, --by-duration PnDTnHnM, --from-file.
    Action, exactly one of: --dry-run (print the plan, change nothing) or
      --execute (write it; refused, status 1, while the group has live members).

    \b
    The plan's columns:
      TOPIC PARTITION CURRENT-OFFSET NEW-OFFSET
    New offsets are clamped to [log start, log end], with a warning on stderr.

    With --bootstrap-server given alone (no --zookeeper), as kafka-consumer-groups.sh
    --bootstrap-server: the group's Kafka coordinator holds the offsets (classic and
    consumer groups alike), and --execute is refused before anything is written while it
    reports live members (DescribeGroups / ConsumerGroupDescribe).
    """
    if dry_run == execute:
        raise click.UsageError("give exactly one of --dry-run or --execute", ctx)
    if topics and all_topics:
        raise click.UsageError("give --topic or --all-topics, not both", ctx)
    if export and output == "json":
        raise click.UsageError("--export prints CSV: not with --output json", ctx)
    scope: ResetScope | None
    if all_topics:
        scope = AllTopics()
    elif topics:
        try:
            scope = parse_topic_partitions(topics)
        except ValueError as e:
            raise click.BadParameter(str(e), ctx, param_hint="'--topic'") from None
        for topic in scope.topics:
            NAME.convert(topic, None, ctx)
    elif from_file is not None:
        scope = None
    else:
        raise click.UsageError("give --topic or --all-topics (or --from-file)", ctx)
    spec = _reset_spec(
        ctx,
        group,
        {
            "to_earliest": to_earliest,
            "to_latest": to_latest,
            "to_offset": to_offset,
            "shift_by": shift_by,
            "to_datetime": to_datetime,
            "by_duration": by_duration,
        },
        from_file,
    )
    kafka = _kafka_only(ctx, bootstrap_server)
    if kafka is not None and offsets_storage != "kafka":
        if ctx.get_parameter_source("offsets_storage") is ParameterSource.COMMANDLINE:
            raise click.UsageError(
                f"--offsets-storage {offsets_storage} needs --zookeeper (ZooKeeper holds those "
                "offsets); with --bootstrap-server alone the offsets are the Kafka "
                "coordinator's",
                ctx,
            )
        offsets_storage = "kafka"
    storage = _STORAGES[offsets_storage]

    async def go() -> tuple[ResetPlan, list[str]]:
        if kafka is not None:
            async with kafka_admin(kafka) as groups:
                live = [] if execute else await groups.member_ids(group)
                plan = await groups.reset_offsets(group, scope, spec, execute=execute)
                return plan, live
        async with _admin(zookeeper, bootstrap_server, connect_timeout_ms) as admin:
            live = [] if execute else await admin.member_ids(group)
            plan = await admin.reset_offsets(group, scope, spec, storage=storage, execute=execute)
            return plan, live

    plan, live = run_async(go)
    for warning in plan.warnings:
        click.echo(f"Warning: {warning}", err=True)
    if live:
        click.echo(
            f"Warning: group '{group}' has live members ({', '.join(live)}): --execute is "
            "refused until they stop.",
            err=True,
        )
    if output == "json":
        as_json = plan.to_json()
        echo_json({"group": group, "storage": storage, "executed": execute, **as_json})
        return
    if export:
        entries = [OffsetEntry(group, p.topic, p.partition, p.new) for p in plan.partitions]
        click.echo(format_offsets_csv(entries), nl=False)
    else:
        _echo_plan(plan)
    if execute:
        click.echo(
            f"reset {len(plan.partitions)} offsets of group '{group}' in {storage}", err=True
        )
    else:
        click.echo("dry run: nothing was written (--execute writes the plan)", err=True)


# -- migrate ----------------------------------------------------------------------------------

_TARGETS: dict[str, MigrationTarget] = {"kafka": "kafka", "zookeeper": "zookeeper"}


def _echo_migration(plan: MigrationPlan) -> None:
    rows = [(p.topic, p.partition, p.source, p.target, p.new) for p in plan.partitions]
    headers = ("TOPIC", "PARTITION", "SOURCE-OFFSET", "TARGET-OFFSET", "NEW-OFFSET")
    for line in format_table(headers, rows, (30, 10, 15, 15, 15)):
        click.echo(line)


@offsets.command("migrate", short_help="Copy a group's offsets from ZooKeeper to Kafka, or back.")
@click.option("--group", "-g", required=True, type=NAME, help="The consumer group.")
@click.option(
    "--to",
    "to",
    type=click.Choice(["kafka", "zookeeper"]),
    default="kafka",
    show_default=True,
    help="The target: kafka (from /consumers/<group>/offsets to the group's coordinator) or "
    "zookeeper (back).",
)
@click.option("--dry-run", is_flag=True, help="Print what would be set and change nothing.")
@cluster_options
@output_option
def migrate(
    group: str,
    to: str,
    dry_run: bool,
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
    output: str,
) -> None:
    """Copy a group's committed offsets from ZooKeeper to Kafka (or back with --to zookeeper).

    \b
    --to kafka:     /consumers/<group>/offsets/<topic>/<partition> -> the group's
                    Kafka coordinator (OffsetCommit, generation -1, as an admin)
    --to zookeeper: the group's Kafka offsets -> its ZooKeeper offset nodes

    Refused (exit status 1, nothing written) while the target group has live
    members: for Kafka, a group state other than Empty or Dead; for ZooKeeper,
    children of /consumers/<group>/ids. An offset is set only where the target has
    none or a smaller one, so a second run sets nothing; a target offset ahead of
    the source is kept, with a warning. A group without offsets in the source exits
    with status 4.

    \b
    The table's columns:
      TOPIC PARTITION SOURCE-OFFSET TARGET-OFFSET NEW-OFFSET
    NEW-OFFSET is "-" where nothing is set.
    """
    target = _TARGETS[to]

    async def go() -> MigrationPlan:
        async with _admin(zookeeper, bootstrap_server, connect_timeout_ms) as admin:
            bootstrap = bootstrap_server
            if not bootstrap:  # the brokers ZooKeeper knows, as the other offset tools
                bootstrap = ",".join(a for _, a in (await admin.kafka()).brokers())
            async with kafka_admin(bootstrap) as groups:
                return await migrate_offsets(admin, groups, group, to=target, execute=not dry_run)

    plan = run_async(go)
    for warning in plan.warnings:
        click.echo(f"Warning: {warning}", err=True)
    if plan.target_members:
        click.echo(
            f"Warning: group '{group}' has live members in {target} "
            f"({', '.join(plan.target_members)}): the migration is refused until they stop.",
            err=True,
        )
    if output == "json":
        echo_json({**plan.to_json(), "dry_run": dry_run})
        return
    _echo_migration(plan)
    count = len(plan.new_offsets)
    what = f"group '{group}' from {plan.source} to {plan.target}"
    if dry_run:
        click.echo(f"dry run: would set {count} offsets of {what}; nothing was written", err=True)
    elif count:
        click.echo(f"migrated {count} offsets of {what}", err=True)
    else:
        click.echo(
            f"nothing to migrate: {plan.target} already holds every offset of group "
            f"'{group}' that {plan.source} has",
            err=True,
        )
