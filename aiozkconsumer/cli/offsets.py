"""``aiozkconsumer offsets``: check, export, import and update a group's offsets in ZooKeeper.

The old tools ``ConsumerOffsetChecker``, ``ExportZkOffsets``, ``ImportZkOffsets`` and
``UpdateOffsetsInZK`` (0.10.2). Export and import use the original's file format, one
``/consumers/<group>/offsets/<topic>/<partition>:<offset>`` per line, so files move between
these commands and the original tools.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..tools import (
    GroupAdmin,
    GroupDescription,
    OffsetEntry,
    OffsetsFileError,
    format_offsets_file,
    parse_offsets_file,
)
from ._common import (
    NAME,
    CliError,
    ExitCode,
    cluster_options,
    echo_json,
    output_option,
    run_async,
)
from .groups import format_table

__all__ = ["offsets"]


def _admin(zookeeper: str, bootstrap_server: str | None, connect_timeout_ms: int) -> GroupAdmin:
    return GroupAdmin(
        zookeeper, bootstrap_servers=bootstrap_server, connection_timeout_ms=connect_timeout_ms
    )


@click.group(short_help="Check, export, import and update offsets in ZooKeeper.")
def offsets() -> None:
    """Check, export, import and update consumer offsets stored in ZooKeeper."""


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
def check(
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
    """
    topics = [t.strip() for t in topic_list.split(",") if t.strip()] if topic_list else None
    for t in topics or ():
        NAME.convert(t, None, None)

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

    description, brokers = run_async(go)
    if output == "json":
        echo_json(
            {
                "group": group,
                "partitions": [
                    {
                        "group": group,
                        "topic": p.topic,
                        "pid": p.partition,
                        "offset": p.offset,
                        "log_size": p.log_end_offset,
                        "lag": p.lag,
                        "owner": p.owner,
                    }
                    for p in description.partitions
                ],
                **({"brokers": {str(i): addr for i, addr in brokers}} if broker_info else {}),
            }
        )
        return
    rows = [
        (
            group,
            p.topic,
            p.partition,
            "unknown" if p.offset is None else p.offset,
            "unknown" if p.log_end_offset is None else p.log_end_offset,
            "unknown" if p.lag is None else p.lag,
            p.owner or "none",
        )
        for p in description.partitions
    ]
    headers = ("Group", "Topic", "Pid", "Offset", "logSize", "Lag", "Owner")
    for line in format_table(headers, rows, (15, 30, 3, 15, 15, 15, 0)):
        click.echo(line)
    if broker_info:
        click.echo("BROKER INFO")
        for broker_id, address in brokers:
            click.echo(f"{broker_id} -> {address}")


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
def export(
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

    The summary goes to stderr (text) or stdout (json); with --output-file - the
    offsets themselves go to stdout.
    """

    async def go() -> list[OffsetEntry]:
        async with _admin(zookeeper, bootstrap_server, connect_timeout_ms) as admin:
            return await admin.export_offsets(group_ids or None)

    entries = run_async(go)
    text = format_offsets_file(entries)
    if str(output_file) == "-":
        click.echo(text, nl=False)
    else:
        try:
            output_file.write_text(text, encoding="utf-8")
        except OSError as e:
            raise CliError(f"cannot write {output_file}: {e.strerror}", ExitCode.USAGE) from None
    groups = sorted({e.group for e in entries})
    if output == "json":
        if str(output_file) != "-":
            echo_json(
                {
                    "file": str(output_file),
                    "groups": groups,
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
    click.echo(
        f"exported {len(entries)} offsets of {len(groups)} groups to {output_file}", err=True
    )


@offsets.command("import")
@click.option(
    "--input-file",
    "-f",
    required=True,
    type=click.Path(dir_okay=False, readable=True, allow_dash=True, path_type=Path),
    help="An offsets file as `offsets export` (or ExportZkOffsets) writes it ('-': stdin).",
)
@cluster_options
@output_option
def import_(
    input_file: Path,
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
    output: str,
) -> None:
    """Write the offsets of a file into ZooKeeper (ImportZkOffsets).

    The whole file is checked first: a malformed line stops the import before anything is
    written, naming its line number (exit status 2). As the original, live members are not
    checked for: stop the group first, or its next commit overwrites what was imported.
    """
    try:
        if str(input_file) == "-":
            text = sys.stdin.read()
        else:
            text = input_file.read_text(encoding="utf-8")
    except OSError as e:
        raise CliError(f"cannot read {input_file}: {e.strerror}", ExitCode.USAGE) from None
    except UnicodeDecodeError as e:
        raise CliError(f"cannot read {input_file}: not UTF-8 text ({e})", ExitCode.USAGE) from None
    try:
        entries = parse_offsets_file(text.splitlines())
    except OffsetsFileError as e:
        raise CliError(f"{input_file}, {e}", ExitCode.USAGE) from None

    async def go() -> tuple[int, list[str]]:
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


@offsets.command(
    "update", short_help="Set offsets to the earliest or latest ones (UpdateOffsetsInZK)."
)
@click.argument("to", type=click.Choice(["earliest", "latest"]))
@click.option("--group", "-g", required=True, type=NAME, help="The consumer group.")
@click.option("--topic", "-t", required=True, type=NAME, help="The topic.")
@cluster_options
@output_option
def update(
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
    """

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
