"""MkDocs hooks for the docs build (``hooks:`` in ``mkdocs.yml``).

The CLI page (``docs/cli.md``) holds markers ``<!-- aiozkconsumer-help: groups describe -->``;
each is replaced at build time by the exact text ``aiozkconsumer groups describe --help``
prints (80 columns, as a terminal), so the page can never drift from the code. A marker naming
no command, or a command without a marker, is a build warning, which fails
``mkdocs build --strict``. ``tests/unit/test_docs.py`` uses the same functions.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import click
from click.testing import CliRunner

log = logging.getLogger("mkdocs.hooks.aiozkconsumer")

MARKER = re.compile(r"<!--\s*aiozkconsumer-help:\s*(?P<path>[a-z0-9 -]*?)\s*-->")
CLI_PAGE = "cli.md"
WIDTH = 80
_ENV = ("AIOZKCONSUMER_ZOOKEEPER", "AIOZKCONSUMER_BOOTSTRAP_SERVER", "AIOZKCONSUMER_CACHE")


def _root() -> click.Group:
    from aiozkconsumer.cli import cli

    return cli


def command_paths() -> list[tuple[str, ...]]:
    """Every command of ``aiozkconsumer``, the root ``()`` first, groups before their members."""

    def walk(cmd: click.Command, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        yield path
        if isinstance(cmd, click.Group):
            for name in sorted(cmd.commands):
                yield from walk(cmd.commands[name], (*path, name))

    return list(walk(_root(), ()))


def help_text(path: tuple[str, ...]) -> str:
    """What ``aiozkconsumer <path> --help`` prints, at ``WIDTH`` columns."""
    if path not in command_paths():
        raise KeyError(f"no command 'aiozkconsumer {' '.join(path)}'")
    runner = CliRunner(env=dict.fromkeys(_ENV))
    result = runner.invoke(
        _root(),
        [*path, "--help"],
        prog_name="aiozkconsumer",
        terminal_width=WIDTH,
        max_content_width=WIDTH,
    )
    if result.exit_code != 0:
        raise RuntimeError(f"aiozkconsumer {' '.join(path)} --help failed: {result.output}")
    return result.output.rstrip() + "\n"


def render_cli_markers(markdown: str) -> tuple[str, list[tuple[str, ...]], list[str]]:
    """Replace every help marker by a ``text`` code block of the real help.

    Returns:
        The new Markdown, the command paths it covered, and the markers naming no command.
    """
    known = set(command_paths())
    covered: list[tuple[str, ...]] = []
    unknown: list[str] = []

    def replace(match: re.Match[str]) -> str:
        path = tuple(match["path"].split())
        if path not in known:
            unknown.append(match["path"])
            return match[0]
        covered.append(path)
        return f"```text\n$ aiozkconsumer {' '.join((*path, '--help'))}\n{help_text(path)}```"

    return MARKER.sub(replace, markdown), covered, unknown


def on_page_markdown(markdown: str, *, page: Any, config: Any, files: Any) -> str:
    """Fill in the help texts of the CLI page."""
    if not MARKER.search(markdown):
        return markdown
    new, covered, unknown = render_cli_markers(markdown)
    for path in unknown:
        log.warning("%s: help marker names no command: 'aiozkconsumer %s'", page.file.src_uri, path)
    if page.file.src_uri == CLI_PAGE:
        for path in command_paths():
            if path not in covered:
                log.warning("%s: no help marker for 'aiozkconsumer %s'", CLI_PAGE, " ".join(path))
    return new
