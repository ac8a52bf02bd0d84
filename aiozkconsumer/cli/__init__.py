"""The ``aiozkconsumer`` command line.

Subcommands:

- ``demo``: the end-to-end demonstration on a local (or given) cluster.
- ``provision``: fetch the Kafka/ZooKeeper jars the local cluster runs (Maven, cached).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``aiozkconsumer`` command."""
    from . import demo

    parser = argparse.ArgumentParser(
        prog="aiozkconsumer",
        description="Kafka's ZooKeeper-coordinated high-level consumer, on asyncio.",
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default: %(default)s)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo.add_parser(sub)
    p = sub.add_parser(
        "provision",
        help="fetch the Kafka 3.9 / ZooKeeper jars for LocalCluster into the cache",
        description="Resolve the pinned Kafka 3.9 runtime with Maven into the jar cache "
        "(~/.cache/aiozkconsumer, or $AIOZKCONSUMER_CACHE). Does nothing when cached.",
    )
    p.add_argument(
        "--cache-dir",
        help="cache directory (default: $AIOZKCONSUMER_CACHE or ~/.cache/aiozkconsumer)",
    )
    p.set_defaults(func=_provision)
    return parser


def _provision(args: argparse.Namespace) -> int:
    from ..testing.provision import main as provision_main

    return provision_main(["--cache-dir", args.cache_dir] if args.cache_dir else [])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
