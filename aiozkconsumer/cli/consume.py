"""``aiozkconsumer consume``: the console consumer of the old mode (``ConsoleConsumer``, 0.10.2).

With ``--partition``/``--offset`` it reads one partition without a group instead (through
``SimpleConsumer``); ``--output json`` and kcat's ``--format`` strings are the other ways to
print a record besides the original's ``DefaultMessageFormatter``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import time
import warnings
from collections.abc import Awaitable, Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import click

from ..cluster import bootstrap_from_brokers
from ..config import ConsumerConfig
from ..errors import BrokerNotAvailableError, InvalidConfigError, NoBrokersError
from ..records import TopicPartition
from ..security import KafkaSecurity, ZookeeperSecurity
from ..simple_consumer import SimpleConsumer
from ..subscription import Blacklist, TopicFilter, Whitelist
from ..tools import GroupAdmin, KafkaGroupAdmin, parse_properties, random_console_group
from ..tools.console import (
    KCAT_TOKENS,
    ConsoleConsumer,
    DecodedJsonFormatter,
    FdSink,
    JsonFormatter,
    KcatFormatter,
    MessageFormatter,
    OffsetSpec,
    OutputSink,
    PartitionConsoleConsumer,
    RecordFormatter,
    StreamSink,
    parse_offset_spec,
)

if TYPE_CHECKING:
    from ..schema_registry import SchemaRegistryDecoder

from ._common import (
    NAME,
    CliError,
    ExitCode,
    cluster_options,
    run_async,
    security_properties,
    zookeeper_given,
)

__all__ = ["consume"]

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


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
    isolation_level: str | None = None,
    kafka_coordinated: bool = False,
) -> tuple[ConsumerConfig, bool]:
    """The consumer config as ``ConsoleConsumer.getOldConsumerProps``; ``(config, group given)``.

    The group id of a config built without one is a placeholder to be replaced.
    """
    # --command-config / --zk-tls-config-file first; a consumer config file and
    # --consumer-property override them.
    props: dict[str, str] = {
        k: v
        for k, v in security_properties().items()
        if k.startswith(("security.", "ssl.", "sasl.", "zookeeper.ssl.", "zookeeper.auth"))
        or k in ("zookeeper.set.acl", "reconnect.backoff.max.ms")
    }
    if config_file is not None:
        try:
            props.update(parse_properties(config_file.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as e:
            raise CliError(f"cannot read {config_file}: {e}", ExitCode.USAGE) from None
    props.update(consumer_properties)
    if isolation_level is not None:
        props["isolation.level"] = isolation_level
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
    if kafka_coordinated:  # --bootstrap-server alone: a cluster without ZooKeeper
        props.setdefault("group.coordinator", "kafka")
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


def _formatter(output: str, fmt: str | None, properties: tuple[str, ...]) -> RecordFormatter:
    """The record formatter the output options ask for."""
    if fmt is not None and output == "json":
        raise click.UsageError("--format and --output json exclude each other")
    if properties and (fmt is not None or output == "json"):
        raise click.UsageError(
            "--property sets the default output; it does not apply to --format or --output json"
        )
    try:
        if fmt is not None:
            return KcatFormatter(fmt)
        if output == "json":
            return JsonFormatter()
        return MessageFormatter.from_properties(_key_values(properties, "--property"))
    except InvalidConfigError as e:
        raise click.UsageError(str(e)) from None


def _value_decoding(
    value_format: str | None, url: str | None, properties: tuple[str, ...]
) -> SchemaRegistryDecoder | None:
    """The Schema Registry decoder ``--value-format`` asks for, or ``None``."""
    if value_format is None:
        if url is not None or properties:
            raise click.UsageError("--schema-registry needs --value-format")
        return None
    if url is None:
        raise click.UsageError("--value-format needs --schema-registry URL")
    try:
        from ..schema_registry import SchemaRegistryClient, SchemaRegistryDecoder
    except ImportError as e:  # pragma: no cover - the extra is missing
        raise CliError(
            f"--value-format needs the schema-registry extra "
            f"(pip install 'aiozkconsumer[schema-registry]'): {e}",
            ExitCode.USAGE,
        ) from None
    settings = {**_key_values(properties, "--schema-registry-property"), "url": url}
    try:
        registry = SchemaRegistryClient.from_properties(settings)
    except InvalidConfigError as e:
        raise click.UsageError(f"--schema-registry: {e}") from None
    return SchemaRegistryDecoder(registry, value_format)


def _stdout_sink(*, handoff: bool) -> OutputSink:
    """stdout as a sink: its file descriptor when it has one (exact accounting)."""
    stream = sys.stdout
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # e.g. a test runner's captured stdout
        out = stream.buffer
        return StreamSink(out.write, out.flush)
    stream.flush()
    return FdSink(fd, handoff=handoff)


async def _reach_kafka(
    connect: Callable[[], Awaitable[object]], where: str, timeout_ms: int
) -> None:
    """Connect to the brokers within ``socket.timeout.ms``, or fail with exit status 3."""
    started = time.monotonic()
    try:
        with anyio.fail_after(timeout_ms / 1000):
            await connect()
    except NoBrokersError:
        raise
    except TimeoutError:
        raise CliError(
            f"could not reach any Kafka broker at {where}: no answer within "
            f"socket.timeout.ms={timeout_ms}",
            ExitCode.UNREACHABLE,
        ) from None
    except BrokerNotAvailableError:
        # Refused or reset before the timeout: say so, and after how long, not the timeout.
        raise CliError(
            f"could not reach any Kafka broker at {where}: refused or closed the connection "
            f"(after {time.monotonic() - started:.1f} s, not a timeout)",
            ExitCode.UNREACHABLE,
        ) from None


_Admin = GroupAdmin | KafkaGroupAdmin
"""The cluster side of the console consumer: ZooKeeper's groups, or (``--bootstrap-server``
alone) the Kafka coordinators'."""


async def _bootstrap(adm: _Admin, bootstrap_server: str | None) -> tuple[str, str]:
    """``(bootstrap.servers, how to name them in an error)``: given, or read from ZooKeeper."""
    if bootstrap_server:
        return bootstrap_server, f"{bootstrap_server} (--bootstrap-server)"
    if isinstance(adm, KafkaGroupAdmin):  # made only with a bootstrap address
        raise NoBrokersError("no --bootstrap-server given")
    brokers = await adm.brokers()
    if not brokers:
        raise await adm.no_brokers_error("--bootstrap-server")
    # The endpoints of the client's security.protocol (a SASL_SSL listener, say).
    servers = bootstrap_from_brokers(brokers, adm.cluster.security.security_protocol)
    return servers, f"{servers} (the brokers registered in ZooKeeper)"


def _warn(message: str) -> None:
    click.echo(f"Warning: {message}", err=True)


class _Stoppable:
    """SIGINT and SIGTERM call ``stop`` while in the block (where the loop allows it)."""

    def __init__(self, stop: Callable[[], None]) -> None:
        self.stop = stop
        self.installed: list[signal.Signals] = []

    def __enter__(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.stop)
                self.installed.append(sig)
            except (ValueError, RuntimeError, NotImplementedError):
                pass  # not the main thread (e.g. a test runner): no signal handling

    def __exit__(self, *exc: object) -> None:
        loop = asyncio.get_running_loop()
        for sig in self.installed:
            loop.remove_signal_handler(sig)


_FORMAT_HELP = "\n".join(f"  %{token}  {what}" for token, what in KCAT_TOKENS.items())


_HELP = f"""Print records of topics to stdout (kafka-console-consumer.sh --zookeeper).

One connector with one stream over the topic filter joins the group and writes each record
with the DefaultMessageFormatter: the value, and with --property the timestamp, partition,
offset, headers and key before it. --output json writes one JSON object a line instead (key
and value as UTF-8 text, or base64 with "key_encoding": "base64"), and --format a kcat format
string. "Processed a total of N messages" goes to stderr at the end. SIGINT and SIGTERM shut
the connector down cleanly (consumed offsets committed, ownership released) and exit with
status 0, as do --max-messages, --timeout-ms, --exit-at-end and a reader that goes away
('| head -3'): only the records written are committed.

With --partition (and --offset) one partition of --topic is read from an offset with a
SimpleConsumer: no group, nothing registered in ZooKeeper, nothing committed.

--isolation-level read_committed prints only the records of committed transactions (and
those written outside transactions), up to the last stable offset, as the Java console
consumer with --isolation-level; the default, read_uncommitted, prints every record.

Brokers that refuse the connection or do not answer within socket.timeout.ms, or none
registered, give exit status 3. A --topic that does not exist is waited for, with one warning.

\b
--format tokens (kcat's; nothing is added after a record: end with \\n):
{_FORMAT_HELP}
  \\n \\r \\t \\xHH  newline, carriage return, tab, the byte of hex HH
Example: --format '%t [%p] at offset %o: key %k: %s\\n'
"""


@click.command(
    "consume",
    help=_HELP,
    short_help="The console consumer (kafka-console-consumer.sh --zookeeper).",
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
    "--delete-consumer-offsets. With --partition: start at the earliest offset.",
)
@click.option(
    "--delete-consumer-offsets",
    is_flag=True,
    help="Delete /consumers/<group> (offsets included) before starting.",
)
@click.option(
    "--partition",
    type=click.IntRange(min=0),
    help="Read only this partition of --topic, without a group: nothing is registered in "
    "ZooKeeper and nothing is committed.",
)
@click.option(
    "--offset",
    metavar="OFFSET",
    help="With --partition: where to start: earliest, latest, an offset, or -N (N records "
    "before the log end). Default: latest, or earliest with --from-beginning.",
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
    "--exit-at-end",
    is_flag=True,
    help="Exit once every partition read (with a group: every partition this member owns) "
    "reached its log end offset as of the start (kcat -e).",
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
    help="A property of the default output (repeatable): print.key, print.timestamp, "
    "print.partition, print.offset, print.headers, print.value (true/false), key.separator, "
    "line.separator, headers.separator, null.literal.",
)
@click.option(
    "--output",
    "-o",
    type=click.Choice(["text", "json"], case_sensitive=False),
    default="text",
    show_default=True,
    help="text: the DefaultMessageFormatter (see --property); json: one JSON object a line.",
)
@click.option(
    "--format",
    "fmt",
    metavar="FORMAT",
    help="Print each record through a kcat -f format string (tokens below).",
)
@click.option(
    "--isolation-level",
    "isolation_level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    help="isolation.level: read_committed leaves out the records of aborted transactions and "
    "reads up to the last stable offset (transactions still open are waited for). Default: "
    "isolation.level from the properties, else read_uncommitted.",
)
@click.option(
    "--sync-pipe/--no-sync-pipe",
    default=True,
    show_default=True,
    help="When stdout is a pipe and the group's offsets are committed: hand the reader one "
    "record at a time and count a record consumed only once the reader took it, so "
    "'| head -3' commits exactly 3. --no-sync-pipe is faster but commits what a reader that "
    "exits left unread in the pipe.",
)
@click.option(
    "--value-format",
    "value_format",
    type=click.Choice(["avro", "protobuf", "json-schema"]),
    help="Decode each value from the Confluent Schema Registry wire format with its schema "
    "from --schema-registry and print one JSON object a line, the decoded value as JSON "
    "(needs the schema-registry extra). A value that does not decode ends the run with an "
    "error naming its topic, partition and offset.",
)
@click.option(
    "--schema-registry",
    "schema_registry",
    metavar="URL",
    help="The Schema Registry's URL, for --value-format.",
)
@click.option(
    "--schema-registry-property",
    "schema_registry_property",
    multiple=True,
    metavar="KEY=VALUE",
    help="A registry client property (repeatable): basic.auth.user.info, "
    "basic.auth.credentials.source, ssl.ca.location, ssl.certificate.location, "
    "ssl.key.location.",
)
@cluster_options
@click.pass_context
def consume(
    ctx: click.Context,
    topic: str | None,
    whitelist: str | None,
    blacklist: str | None,
    group: str | None,
    from_beginning: bool,
    delete_consumer_offsets: bool,
    partition: int | None,
    offset: str | None,
    max_messages: int | None,
    timeout_ms: int | None,
    exit_at_end: bool,
    consumer_property: tuple[str, ...],
    consumer_config: Path | None,
    formatter_property: tuple[str, ...],
    output: str,
    fmt: str | None,
    isolation_level: str | None,
    sync_pipe: bool,
    value_format: str | None,
    schema_registry: str | None,
    schema_registry_property: tuple[str, ...],
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
) -> None:
    """Print records of topics to stdout (see ``_HELP``)."""
    chosen = [
        o
        for o, v in (("--topic", topic), ("--whitelist", whitelist), ("--blacklist", blacklist))
        if v
    ]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --topic, --whitelist, --blacklist")
    formatter = _formatter(output.lower(), fmt, formatter_property)
    decoding = _value_decoding(value_format, schema_registry, schema_registry_property)
    if decoding is not None:
        if fmt is not None or formatter_property:
            raise click.UsageError(
                "--value-format prints JSON: --format and --property do not apply"
            )
        formatter = DecodedJsonFormatter(value_format=decoding.format)
    if partition is not None or offset is not None:
        _consume_partition(
            topic=topic,
            partition=partition,
            offset=offset,
            group=group,
            from_beginning=from_beginning,
            delete_consumer_offsets=delete_consumer_offsets,
            formatter=formatter,
            max_messages=max_messages,
            timeout_ms=timeout_ms,
            exit_at_end=exit_at_end,
            decoding=decoding,
            config=_build_config(
                zookeeper=zookeeper,
                bootstrap_server=bootstrap_server,
                connect_timeout_ms=connect_timeout_ms,
                group=None,
                from_beginning=False,
                timeout_ms=None,
                consumer_properties=_key_values(consumer_property, "--consumer-property"),
                config_file=consumer_config,
                isolation_level=isolation_level,
            )[0],
            zookeeper=zookeeper,
            bootstrap_server=bootstrap_server,
            connect_timeout_ms=connect_timeout_ms,
        )
        return
    regex = topic or whitelist or blacklist or ""
    try:
        topic_filter: TopicFilter = Blacklist(regex) if blacklist else Whitelist(regex)
    except InvalidConfigError as e:
        raise click.UsageError(str(e)) from None
    kafka_only = bool(bootstrap_server) and not zookeeper_given(ctx)
    config, group_given = _build_config(
        zookeeper=zookeeper,
        bootstrap_server=bootstrap_server,
        connect_timeout_ms=connect_timeout_ms,
        group=group,
        from_beginning=from_beginning,
        timeout_ms=timeout_ms,
        consumer_properties=_key_values(consumer_property, "--consumer-property"),
        config_file=consumer_config,
        isolation_level=isolation_level,
        kafka_coordinated=kafka_only,
    )
    if kafka_only and not config.kafka_coordinated:
        raise click.UsageError(
            "group.coordinator=zookeeper needs --zookeeper: with --bootstrap-server alone the "
            "group is a Kafka coordinator's (group.coordinator=kafka)",
            ctx,
        )
    # Handing records over one by one only matters where offsets are kept: a generated
    # group is deleted on exit.
    handoff = sync_pipe and group_given and config.auto_commit_enable
    end_cache: dict[TopicPartition, int] = {}
    admin_for_ends: list[_Admin] = []

    async def end_offsets(tps: Collection[TopicPartition]) -> Mapping[TopicPartition, int]:
        missing = [tp for tp in tps if tp not in end_cache]
        if missing:
            # Under read_committed, where --exit-at-end stops is the last stable offset
            # (records past it are not readable until their transaction ends).
            end_cache.update(
                await admin_for_ends[0].list_offsets(
                    missing, "latest", isolation_level=config.isolation_level
                )
            )
        return end_cache

    consumer = ConsoleConsumer(
        config,
        topic_filter,
        sink=_stdout_sink(handoff=handoff),
        formatter=formatter,
        max_messages=max_messages,
        exit_at_end=exit_at_end,
        end_offsets=end_offsets if exit_at_end else None,
    )
    if decoding is not None:
        consumer.decode = decoding.decode_message

    def admin() -> _Admin:
        if config.kafka_coordinated and bootstrap_server:
            return KafkaGroupAdmin(
                bootstrap_server,
                request_timeout_ms=config.socket_timeout_ms,
                security=KafkaSecurity.from_config(config),
            )
        return GroupAdmin(
            zookeeper,
            bootstrap_servers=bootstrap_server,
            connection_timeout_ms=connect_timeout_ms,
            request_timeout_ms=config.socket_timeout_ms,
            zookeeper_security=ZookeeperSecurity.from_config(config),
            security=KafkaSecurity.from_config(config),
        )

    async def prepare(adm: _Admin) -> None:
        _, where = await _bootstrap(adm, bootstrap_server)
        await _reach_kafka(adm.kafka, where, config.socket_timeout_ms)
        topics = await adm.all_topics() if blacklist is None or exit_at_end else []
        if blacklist is None:
            if topic is not None and _TOPIC_NAME.fullmatch(topic):
                if topic not in topics:
                    _warn(f"topic '{topic}' does not exist; waiting for it to be created")
            elif not any(topic_filter.is_topic_allowed(t, False) for t in topics):
                option = "--topic" if topic is not None else "--whitelist"
                _warn(f"no topic matches {option} '{regex}'; waiting for one to be created")
        if exit_at_end:
            # The log end offsets as of the start, before anything is read.
            allowed = [
                t
                for t in topics
                if topic_filter.is_topic_allowed(t, config.exclude_internal_topics)
            ]
            parts = await adm.partitions_for(allowed)
            await end_offsets([TopicPartition(t, p) for t, ps in parts.items() for p in ps])
        group_id = config.group_id
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

    started = False  # "Processed ..." is not printed after an error before the start

    async def go() -> None:
        nonlocal started
        async with contextlib.AsyncExitStack() as stack:
            adm = admin()
            await stack.enter_async_context(adm)
            admin_for_ends.append(adm)
            await prepare(adm)
            if not exit_at_end:  # else kept open: partitions acquired later need their ends
                await stack.aclose()
            group_id = consumer.config.group_id
            if decoding is not None:
                stack.push_async_callback(decoding.registry.close)
            try:
                started = True
                with _Stoppable(consumer.stop):
                    await consumer.run()
                if consumer.output_closed:
                    _silence_stdout()  # else the interpreter's last flush fails once more
            finally:
                if not group_given:
                    # As the original: do not pollute ZooKeeper with the generated group.
                    async with admin() as cleanup:
                        await cleanup.delete_group_unchecked(group_id)

    try:
        run_async(go)
    finally:
        if started:
            click.echo(f"Processed a total of {consumer.count} messages", err=True)


def _consume_partition(
    *,
    topic: str | None,
    partition: int | None,
    offset: str | None,
    group: str | None,
    from_beginning: bool,
    delete_consumer_offsets: bool,
    formatter: RecordFormatter,
    max_messages: int | None,
    timeout_ms: int | None,
    exit_at_end: bool,
    decoding: SchemaRegistryDecoder | None,
    config: ConsumerConfig,
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
) -> None:
    """``consume --partition``: one partition from an offset through a SimpleConsumer."""
    if partition is None:
        raise click.UsageError("--offset needs --partition")
    if topic is None:
        raise click.UsageError("--partition reads one topic: give it with --topic")
    NAME.convert(topic, None, None)
    if group is not None or delete_consumer_offsets:
        raise click.UsageError(
            "--partition reads without a group: --group and --delete-consumer-offsets do not apply"
        )
    if from_beginning and offset is not None:
        raise click.UsageError("--from-beginning and --offset cannot be given together")
    start: OffsetSpec = "earliest" if from_beginning else "latest"
    if offset is not None:
        try:
            start = parse_offset_spec(offset)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--offset") from None
    tp = TopicPartition(topic, partition)
    reader: PartitionConsoleConsumer | None = None

    async def go() -> None:
        nonlocal reader
        servers = bootstrap_server
        where = f"{bootstrap_server} (--bootstrap-server)"
        if not servers:
            # Only reads /brokers/ids: the partition is read without any group.
            async with GroupAdmin(
                zookeeper,
                connection_timeout_ms=connect_timeout_ms,
                zookeeper_security=ZookeeperSecurity.from_config(config),
                security=KafkaSecurity.from_config(config),
            ) as adm:
                servers, where = await _bootstrap(adm, None)
        simple = SimpleConsumer(
            servers,
            client_id=config.client_id or "aiozkconsumer-console",
            socket_timeout_ms=config.socket_timeout_ms,
            fetch_max_wait_ms=config.fetch_wait_max_ms,
            fetch_min_bytes=config.fetch_min_bytes,
            isolation_level=config.isolation_level,
            security=KafkaSecurity.from_config(config),
        )
        try:
            await _reach_kafka(simple.start, where, config.socket_timeout_ms)
            reader = PartitionConsoleConsumer(
                simple,
                tp,
                start,
                _stdout_sink(handoff=False),
                formatter=formatter,
                max_messages=max_messages,
                timeout_ms=timeout_ms,
                exit_at_end=exit_at_end,
                fetch_max_bytes=config.fetch_message_max_bytes,
            )
            if decoding is not None:
                reader.decode = decoding.decode_message
            with _Stoppable(reader.stop):
                await reader.run()
            if reader.output_closed:
                _silence_stdout()
        finally:
            with anyio.CancelScope(shield=True):
                await simple.close()
                if decoding is not None:
                    await decoding.registry.close()

    try:
        run_async(go)
    finally:
        if reader is not None and reader.start_offset is not None:  # else: one error line
            click.echo(f"Processed a total of {reader.count} messages", err=True)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
