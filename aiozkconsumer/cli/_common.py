"""What every ``aiozkconsumer`` command shares: exit codes, error translation, common options."""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from ..config import validate_bootstrap_servers, validate_group_id, validate_zookeeper_connect
from ..errors import (
    BrokerNotAvailableError,
    ConsumerError,
    InvalidConfigError,
    NoBrokersError,
    UnknownTopicError,
    ZookeeperConnectionError,
    ZookeeperSessionExpiredError,
)
from ..tools import OffsetsFileError, UnknownGroupError

if TYPE_CHECKING:
    from ..security import KafkaSecurity, ZookeeperSecurity
    from ..tools import GroupAdmin

__all__ = [
    "BOOTSTRAP_SERVERS",
    "GROUP_ID",
    "ZOOKEEPER_CONNECT",
    "CliError",
    "ExitCode",
    "cluster_options",
    "connection_security",
    "group_admin",
    "security_properties",
    "echo_json",
    "exit_code_for",
    "output_option",
    "run_async",
    "NAME",
]

_T = TypeVar("_T")
_F = TypeVar("_F", bound=Callable[..., Any])


class ExitCode(enum.IntEnum):
    """The documented exit statuses of every command."""

    OK = 0
    """Success."""
    FAILED = 1
    """A check failed or the tool refused (rebalance not valid, group still active, ...)."""
    USAGE = 2
    """Bad usage: an unknown option, a bad value, a malformed input file."""
    UNREACHABLE = 3
    """ZooKeeper or the Kafka brokers could not be reached (or none is registered)."""
    UNKNOWN = 4
    """The group or topic does not exist."""
    INTERRUPTED = 130
    """Interrupted with Ctrl-C where the command does not handle it itself."""


class CliError(click.ClickException):
    """An error shown as one ``Error: ...`` line on stderr, with an exit status."""

    def __init__(self, message: str, exit_code: int = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.exit_code = int(exit_code)  # type: ignore[misc]  # a ClassVar in click's stubs


def exit_code_for(error: BaseException) -> int:
    """The exit status an exception from the tools maps to (see :class:`ExitCode`)."""
    if isinstance(error, UnknownGroupError | UnknownTopicError):
        return ExitCode.UNKNOWN
    if isinstance(
        error,
        ZookeeperConnectionError
        | ZookeeperSessionExpiredError
        | NoBrokersError
        | BrokerNotAvailableError,
    ):
        return ExitCode.UNREACHABLE
    if isinstance(error, OffsetsFileError | InvalidConfigError):
        return ExitCode.USAGE
    return ExitCode.FAILED


def run_async(make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run a coroutine in a new event loop; turn the tools' errors into :class:`CliError`."""
    try:
        return asyncio.run(make())
    except ConsumerError as e:
        raise CliError(str(e), exit_code_for(e)) from None
    except KeyboardInterrupt:
        raise CliError("interrupted", ExitCode.INTERRUPTED) from None


def zookeeper_given(ctx: click.Context) -> bool:
    """Whether ``--zookeeper`` was given (on the command line or in its environment
    variable) rather than left at its default: a ``--bootstrap-server`` given alone means a
    cluster without ZooKeeper, as ``kafka-consumer-groups.sh --bootstrap-server``."""
    return ctx.get_parameter_source("zookeeper") in (
        ParameterSource.COMMANDLINE,
        ParameterSource.ENVIRONMENT,
    )


def echo_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout."""
    click.echo(json.dumps(value, indent=2))


def output_option(f: _F) -> _F:
    """``--output text|json``."""
    return click.option(
        "--output",
        "-o",
        "output",
        type=click.Choice(["text", "json"], case_sensitive=False),
        default="text",
        show_default=True,
        help="Output format: a table for people or JSON for programs.",
    )(f)


_KAFKA_SECURITY = "aiozkconsumer.kafka_security"
_ZK_SECURITY = "aiozkconsumer.zookeeper_security"
_SECURITY_PROPS = "aiozkconsumer.security_properties"


def security_properties() -> dict[str, str]:
    """The raw properties of ``--command-config`` and ``--zk-tls-config-file`` (for commands
    that build a whole consumer config from them; empty when neither was given)."""
    ctx = click.get_current_context(silent=True)
    return dict(ctx.meta.get(_SECURITY_PROPS, {})) if ctx is not None else {}


def _read_properties_file(param: click.Parameter, path: str) -> dict[str, str]:
    from ..tools.console import parse_properties

    try:
        with open(path, encoding="utf-8") as f:
            return parse_properties(f.read())
    except (OSError, UnicodeDecodeError) as e:
        raise click.BadParameter(f"cannot read {path}: {e}", param=param) from None


def _security_file(
    ctx: click.Context, param: click.Parameter, value: str | None, *, kafka: bool
) -> None:
    """Read a security properties file into the context: ``--command-config`` (``kafka``:
    Kafka keys, and ZooKeeper keys when it has any) or ``--zk-tls-config-file``."""
    if value is None:
        return
    from ..config import kafka_security_from_properties, zookeeper_security_from_properties

    props = _read_properties_file(param, value)
    ctx.meta.setdefault(_SECURITY_PROPS, {}).update(props)
    try:
        if kafka:
            ctx.meta[_KAFKA_SECURITY] = kafka_security_from_properties(props)
        if not kafka or any(k.startswith("zookeeper.") for k in props):
            ctx.meta[_ZK_SECURITY] = zookeeper_security_from_properties(props)
    except InvalidConfigError as e:
        raise click.BadParameter(f"{value}: {e}", param=param) from None


def _command_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    _security_file(ctx, param, value, kafka=True)


def _zk_tls_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    _security_file(ctx, param, value, kafka=False)


def connection_security() -> tuple[KafkaSecurity, ZookeeperSecurity]:
    """The Kafka and ZooKeeper security the command line was given (plaintext by default).

    From ``--command-config`` (``security.protocol``, ``ssl.*``, ``sasl.*``, and any
    ``zookeeper.*`` security keys) and ``--zk-tls-config-file`` (``zookeeper.ssl.*``,
    ``zookeeper.auth``, ``zookeeper.set.acl``), parsed when the options were read.
    """
    from ..security import KafkaSecurity, ZookeeperSecurity

    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    return meta.get(_KAFKA_SECURITY, KafkaSecurity()), meta.get(_ZK_SECURITY, ZookeeperSecurity())


def group_admin(
    zookeeper: str, bootstrap_server: str | None, connect_timeout_ms: int
) -> GroupAdmin:
    """The group tools over ``--zookeeper``/``--bootstrap-server``, secured as the command
    line says (:func:`connection_security`)."""
    from ..tools import GroupAdmin

    kafka_security, zookeeper_security = connection_security()
    return GroupAdmin(
        zookeeper,
        bootstrap_servers=bootstrap_server,
        connection_timeout_ms=connect_timeout_ms,
        zookeeper_security=zookeeper_security,
        security=kafka_security,
    )


def cluster_options(f: _F) -> _F:
    """``--zookeeper``, ``--bootstrap-server``, ``--connect-timeout-ms``, ``--command-config``
    and ``--zk-tls-config-file`` (the last two read by :func:`connection_security`)."""
    f = click.option(
        "--zk-tls-config-file",
        type=click.Path(exists=True, dir_okay=False),
        callback=_zk_tls_config,
        expose_value=False,
        is_eager=True,
        help="A properties file of ZooKeeper security keys (zookeeper.ssl.client.enable, "
        "zookeeper.ssl.cafile/certfile/keyfile, zookeeper.auth, zookeeper.set.acl), as "
        "Kafka's tools take it.",
    )(f)
    f = click.option(
        "--command-config",
        type=click.Path(exists=True, dir_okay=False),
        callback=_command_config,
        expose_value=False,
        is_eager=True,
        help="A Java-client properties file with the Kafka connection's security "
        "(security.protocol, ssl.*, sasl.*, sasl.jaas.config), as kafka-consumer-groups "
        "takes it.",
    )(f)
    f = click.option(
        "--connect-timeout-ms",
        type=click.IntRange(min=1),
        default=6000,
        show_default=True,
        help="zookeeper.connection.timeout.ms: how long to wait for the ZooKeeper session "
        "before giving up with exit status 3.",
    )(f)
    f = click.option(
        "--bootstrap-server",
        type=BOOTSTRAP_SERVERS,
        metavar="HOST:PORT[,...]",
        envvar="AIOZKCONSUMER_BOOTSTRAP_SERVER",
        help="Kafka brokers to ask for offsets and metadata. Default: the brokers registered "
        "in ZooKeeper under /brokers/ids. Needed for KRaft clusters. "
        "[env: AIOZKCONSUMER_BOOTSTRAP_SERVER]",
    )(f)
    f = click.option(
        "--zookeeper",
        type=ZOOKEEPER_CONNECT,
        metavar="HOST:PORT[,...][/CHROOT]",
        default="localhost:2181",
        show_default=True,
        envvar="AIOZKCONSUMER_ZOOKEEPER",
        help="ZooKeeper connect string of the consumer groups. [env: AIOZKCONSUMER_ZOOKEEPER]",
    )(f)
    return f


def _reason(error: InvalidConfigError) -> str:
    """The message of a config error without its ``key: `` prefix (the option names it)."""
    text = str(error)
    prefix = f"{error.key}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


class _Checked(click.ParamType[str]):
    """A string option checked by one of :mod:`aiozkconsumer.config`'s validators, so the
    command line refuses exactly what ``ConsumerConfig`` refuses (exit status 2, at once)."""

    def __init__(self, name: str, check: Callable[[str], str]) -> None:
        self.name = name
        self._check = check

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return self._check(str(value))
        except InvalidConfigError as e:
            self.fail(_reason(e), param, ctx)


ZOOKEEPER_CONNECT = _Checked("zookeeper_connect", validate_zookeeper_connect)
"""Click type of ``--zookeeper``: ``host:port[,...][/chroot]``, as ``zookeeper.connect``."""

BOOTSTRAP_SERVERS = _Checked("bootstrap_servers", validate_bootstrap_servers)
"""Click type of ``--bootstrap-server``: ``host:port[,host:port...]``, as ``bootstrap.servers``."""

GROUP_ID = _Checked("group_id", validate_group_id)
"""Click type of a ZooKeeper-coordinated group id: ``group.id``'s rule."""

_GROUP_PARAMS = frozenset({"group", "group_ids"})
"""Names of the parameters :data:`NAME` checks as group ids (``--group``)."""


class _ZkName(click.ParamType[str]):
    """A topic name (one ZooKeeper path element) or, for a ``--group`` option, a group id.

    Group ids get ``group.id``'s own rule (:data:`GROUP_ID`), so that a group the command line
    accepts is one a connector could have made; topic names only have to be one path element.
    """

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from ..zk import layout

        if param is not None and param.name in _GROUP_PARAMS:
            return GROUP_ID.convert(value, param, ctx)
        try:
            layout.group_dir(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)
        return str(value)


NAME = _ZkName()
"""Click type of group ids and topic names (see :class:`_ZkName`)."""
