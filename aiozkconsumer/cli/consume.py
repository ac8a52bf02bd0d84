"""``aiozkconsumer consume``: the console consumer of the old mode (``ConsoleConsumer``, 0.10.2)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import warnings
from pathlib import Path

import click

from ..config import ConsumerConfig
from ..errors import InvalidConfigError, NoBrokersError
from ..subscription import Blacklist, TopicFilter, Whitelist
from ..tools import (
    ConsoleConsumer,
    GroupAdmin,
    MessageFormatter,
    parse_properties,
    random_console_group,
)
from ._common import NAME, CliError, ExitCode, cluster_options, run_async

__all__ = ["consume"]


def _key_values(values: tuple[str, ...], option: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in values:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        result[key.strip()] = value
    return result


def _build_config(
    *,
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
    group: str | None,
    from_beginning: bool,
    timeout_ms: int | None,
    consumer_properties: dict[str, str],
    config_file: Path | None,
) -> tuple[ConsumerConfig, bool]:
    """The consumer config as ``ConsoleConsumer.getOldConsumerProps``; ``(config, group given)``.

    The group id of a config built without one is a placeholder to be replaced.
    """
    props: dict[str, str] = {}
    if config_file is not None:
        try:
            props.update(parse_properties(config_file.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as e:
            raise CliError(f"cannot read {config_file}: {e}", ExitCode.USAGE) from None
    props.update(consumer_properties)
    if group is not None:
        props["group.id"] = group
    group_given = bool(props.get("group.id"))
    if not group_given:
        props["group.id"] = "console-consumer-0"
    reset = props.get("auto.offset.reset")
    if from_beginning:
        if reset is not None and reset != "smallest":
            raise click.UsageError(
                f"Can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}'"
            )
        props["auto.offset.reset"] = "smallest"
    elif reset is None:
        props["auto.offset.reset"] = "largest"
    props["zookeeper.connect"] = zookeeper
    if timeout_ms is not None:
        props["consumer.timeout.ms"] = str(timeout_ms)
    if bootstrap_server:
        props.setdefault("bootstrap.servers", bootstrap_server)
    props.setdefault("zookeeper.connection.timeout.ms", str(connect_timeout_ms))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            config = ConsumerConfig.from_properties(props)
        except InvalidConfigError as e:
            raise CliError(f"invalid consumer configuration: {e}", ExitCode.USAGE) from None
    for w in caught:
        click.echo(f"Warning: {w.message}", err=True)
    return config, group_given


@click.command(
    "consume", short_help="The console consumer (kafka-console-consumer.sh --zookeeper)."
)
@click.option("--topic", help="The topic to consume; read as a whitelist regex, as the original.")
@click.option("--whitelist", help="Consume every topic this regex matches in full.")
@click.option("--blacklist", help="Consume every topic this regex does not match.")
@click.option(
    "--group",
    "-g",
    type=NAME,
    help="The consumer group. Default: group.id from the properties, else a new "
    "console-consumer-<N> group that is deleted from ZooKeeper on exit.",
)
@click.option(
    "--from-beginning",
    is_flag=True,
    help="Start with the earliest record where the group has no offset "
    "(auto.offset.reset=smallest). Refused for a group that already has offsets, unless "
    "--delete-consumer-offsets.",
)
@click.option(
    "--delete-consumer-offsets",
    is_flag=True,
    help="Delete /consumers/<group> (offsets included) before starting.",
)
@click.option(
    "--max-messages",
    type=click.IntRange(min=1),
    help="Exit after this many records. Default: no limit.",
)
@click.option(
    "--timeout-ms",
    type=click.IntRange(min=0),
    help="consumer.timeout.ms: exit when no record arrives for this long. Default: wait forever.",
)
@click.option(
    "--consumer-property",
    "consumer_property",
    multiple=True,
    metavar="KEY=VALUE",
    help="A consumer property, e.g. auto.commit.interval.ms=1000 (repeatable).",
)
@click.option(
    "--consumer.config",
    "consumer_config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A consumer .properties file; --consumer-property values override it.",
)
@click.option(
    "--property",
    "formatter_property",
    multiple=True,
    metavar="KEY=VALUE",
    help="A formatter property (repeatable): print.key, print.timestamp, print.partition, "
    "print.offset, print.value (true/false), key.separator, line.separator.",
)
@cluster_options
def consume(
    topic: str | None,
    whitelist: str | None,
    blacklist: str | None,
    group: str | None,
    from_beginning: bool,
    delete_consumer_offsets: bool,
    max_messages: int | None,
    timeout_ms: int | None,
    consumer_property: tuple[str, ...],
    consumer_config: Path | None,
    formatter_property: tuple[str, ...],
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
) -> None:
    """Print records of topics to stdout (kafka-console-consumer.sh --zookeeper).

    One connector with one stream over the topic filter joins the group and writes each
    record with the DefaultMessageFormatter: the value, and with --property the timestamp,
    partition, offset and key before it. "Processed a total of N messages" goes to stderr
    at the end. SIGINT and SIGTERM shut the connector down cleanly (consumed offsets
    committed, ownership released) and exit with status 0, as do --max-messages and
    --timeout-ms.
    """
    chosen = [
        o
        for o, v in (("--topic", topic), ("--whitelist", whitelist), ("--blacklist", blacklist))
        if v
    ]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --topic, --whitelist, --blacklist")
    regex = topic or whitelist or blacklist or ""
    try:
        topic_filter: TopicFilter = Blacklist(regex) if blacklist else Whitelist(regex)
        formatter = MessageFormatter.from_properties(_key_values(formatter_property, "--property"))
    except InvalidConfigError as e:
        raise click.UsageError(str(e)) from None
    config, group_given = _build_config(
        zookeeper=zookeeper,
        bootstrap_server=bootstrap_server,
        connect_timeout_ms=connect_timeout_ms,
        group=group,
        from_beginning=from_beginning,
        timeout_ms=timeout_ms,
        consumer_properties=_key_values(consumer_property, "--consumer-property"),
        config_file=consumer_config,
    )
    out = sys.stdout.buffer
    consumer = ConsoleConsumer(
        config, topic_filter, out.write, out.flush, formatter=formatter, max_messages=max_messages
    )

    def admin() -> GroupAdmin:
        return GroupAdmin(
            zookeeper, bootstrap_servers=bootstrap_server, connection_timeout_ms=connect_timeout_ms
        )

    async def go() -> None:
        group_id = config.group_id
        async with admin() as adm:
            if not bootstrap_server and not await adm.brokers():
                raise NoBrokersError(
                    "No brokers found in ZK. (A KRaft cluster? Give --bootstrap-server.)"
                )
            if not group_given:
                while await adm.group_exists(group_id := random_console_group()):
                    pass
                consumer.config = config.replace(group_id=group_id)
            if delete_consumer_offsets:
                await adm.delete_group_unchecked(group_id)
            elif from_beginning and await adm.group_has_offsets(group_id):
                raise CliError(
                    f"Found previous offset information for this group {group_id}. Please use "
                    "--delete-consumer-offsets to delete previous offsets metadata"
                )
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, consumer.stop)
                installed.append(sig)
            except (ValueError, RuntimeError, NotImplementedError):
                pass  # not the main thread (e.g. a test runner): no signal handling
        try:
            await consumer.run()
            if consumer.output_closed:
                _silence_stdout()  # else the interpreter's last flush fails once more
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            if not group_given:
                # As the original: do not pollute ZooKeeper with the generated group.
                async with admin() as adm:
                    await adm.delete_group_unchecked(group_id)

    try:
        run_async(go)
    finally:
        click.echo(f"Processed a total of {consumer.count} messages", err=True)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
