"""The ``aiozkconsumer`` command line: the old consumer's tools, a demo and provisioning.

Commands (``aiozkconsumer COMMAND --help`` tells more)::

    consume            the console consumer (kafka-console-consumer.sh --zookeeper)
    groups list        list consumer groups (kafka-consumer-groups.sh --list); with
                       --coordinator kafka, the Kafka-coordinated groups
    groups describe    offsets, lag and owners of a group (--describe); likewise
    groups delete      delete inactive groups or a topic of them (--delete)
    offsets check      the ConsumerOffsetChecker view
    offsets export     write offsets to a file (ExportZkOffsets)
    offsets import     write offsets from a file (ImportZkOffsets)
    offsets update     set offsets to earliest / latest (UpdateOffsetsInZK)
    offsets reset      plan and set offsets (kafka-consumer-groups.sh --reset-offsets)
    verify-rebalance   check partition ownership (VerifyConsumerRebalance)
    demo               a consumer group end to end on a local cluster
    provision          fetch the Kafka/ZooKeeper jars LocalCluster runs

Exit statuses, the same for every command:

    0    success
    1    a check failed or the tool refused (rebalance not valid, group still active, ...)
    2    usage error: bad option or value, malformed input file (nothing was written)
    3    ZooKeeper or the Kafka brokers unreachable, or no broker registered
    4    unknown consumer group or topic
    130  interrupted (Ctrl-C) where a command does not handle it itself

Errors are printed as one ``Error: ...`` line on stderr. The work is done by
:mod:`aiozkconsumer.tools`; this package only parses options and prints.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import click

from . import consume as _consume
from . import demo as _demo
from . import groups as _groups
from . import offsets as _offsets
from . import verify as _verify
from ._common import CliError, ExitCode

__all__ = ["CliError", "ExitCode", "cli", "main"]

_HELP = """Kafka's ZooKeeper-coordinated high-level consumer, on asyncio: the old consumer's
command-line tools, a demo, and provisioning of a local cluster.

ZooKeeper is given with --zookeeper (or $AIOZKCONSUMER_ZOOKEEPER). Brokers are found under
ZooKeeper's /brokers/ids unless --bootstrap-server is given (needed for KRaft clusters).
Kafka-coordinated groups (group.coordinator=kafka) are read with `groups list|describe
--coordinator kafka --bootstrap-server ...`. Read commands take --output json.

\b
Exit statuses:
  0    success
  1    a check failed or the tool refused (e.g. group still active)
  2    usage error: bad option or value, malformed input file
  3    ZooKeeper or the Kafka brokers unreachable, or no broker registered
  4    unknown consumer group or topic
  130  interrupted
"""


@click.group(help=_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="WARNING",
    show_default=True,
    help="Logging level (on stderr).",
)
@click.version_option(package_name="aiozkconsumer", prog_name="aiozkconsumer")
def cli(log_level: str) -> None:
    level = getattr(logging, log_level.upper())
    ours = not logging.getLogger().handlers  # else a host (e.g. pytest) configured logging
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if ours and level > logging.DEBUG:
        # Their connection-failure tracebacks would bury the one-line error the tools print.
        for noisy in ("aiozk", "aiokafka"):
            logging.getLogger(noisy).setLevel(logging.CRITICAL)


@cli.command("provision", short_help="Fetch the Kafka/ZooKeeper jars LocalCluster runs.")
@click.option(
    "--cache-dir",
    help="Cache directory (default: $AIOZKCONSUMER_CACHE or ~/.cache/aiozkconsumer).",
)
def provision(cache_dir: str | None) -> None:
    """Fetch the Kafka 3.9 / ZooKeeper jars for LocalCluster into the cache.

    Resolves the pinned Kafka 3.9 runtime with Maven into the jar cache
    (~/.cache/aiozkconsumer, or $AIOZKCONSUMER_CACHE). Does nothing when cached.
    """
    from ..testing.provision import main as provision_main

    code = provision_main(["--cache-dir", cache_dir] if cache_dir else [])
    if code:
        raise click.exceptions.Exit(code)


cli.add_command(_consume.consume)
cli.add_command(_groups.groups)
cli.add_command(_offsets.offsets)
cli.add_command(_verify.verify_rebalance)
cli.add_command(_demo.demo)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: the arguments without the program name; default ``sys.argv[1:]``.

    Returns:
        The exit status (see the module docstring).
    """
    try:
        cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="aiozkconsumer",
            standalone_mode=True,
        )
    except SystemExit as e:
        if e.code is None:
            return 0
        return e.code if isinstance(e.code, int) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
