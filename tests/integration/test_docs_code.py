"""The harness that runs the Python blocks of README.md and docs/*.md can fail.

The blocks themselves are collected from the pages (``pytest README.md docs``; see
``tests/_docs_code.py``). Here: every block is either run or listed with its reason, and the
README's check catches a snippet that reads only one of the two streams it creates.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _docs_code import (
    NOT_RUN,
    DocsCheckError,
    DocsRun,
    block_globals,
    fences,
    first_line,
    nested_fences,
    page_key,
    pages,
    run_block,
)
from pytest_markdown_docs.definitions import FenceTestDefinition

README = Path(__file__).resolve().parents[2] / "README.md"
EVERY_STREAM = """\
            for stream in streams["payments"]:             # a stream nobody reads holds its
                tg.create_task(read(stream))               # partitions back
"""
ONE_STREAM = """\
            tg.create_task(read(streams["payments"][0]))
"""


def test_every_block_not_run_is_listed_with_its_reason_and_no_reason_is_stale() -> None:
    not_run = set()
    for path in pages():
        text = path.read_text("utf-8")
        run_lines = set()
        for line, options, source in fences(text):
            if "notest" in options:
                not_run.add((page_key(path), first_line(source)))
            else:
                run_lines.add(line)
        not_run.update(
            (page_key(path), first) for line, first in nested_fences(text) if line not in run_lines
        )
    assert not_run - NOT_RUN.keys() == set(), "give these blocks a reason in NOT_RUN"
    assert NOT_RUN.keys() - not_run == set(), "these blocks are gone or run now: drop them"
    # The Schema Registry page's 8 blocks need a registry (test_schema_registry.py makes the
    # same calls against a real one); every other page keeps to 12.
    others = [key for key in NOT_RUN if key[0] != "docs/schema-registry.md"]
    assert len(others) <= 12, "keep the blocks that are not run few"


def _readme_block() -> FenceTestDefinition:
    [(line, options, source)] = list(fences(README.read_text("utf-8")))
    assert options == ["fixture:payments"]
    return FenceTestDefinition(source, ["payments"], line, README, None)


@pytest.mark.integration
def test_readme_block_reading_one_of_its_two_streams_fails_the_check(
    payments: DocsRun, _function_scoped_runner: asyncio.Runner
) -> None:
    block = _readme_block()
    assert EVERY_STREAM in block.source, "the README's snippet changed: update this test"
    one_stream = FenceTestDefinition(
        block.source.replace(EVERY_STREAM, ONE_STREAM), [], block.start_line, README, None
    )
    payments.deadline_s = 8.0  # half the partitions never move: no need to wait longer
    with pytest.raises(DocsCheckError, match="does it read every stream it creates"):
        run_block(one_stream, block_globals(payments), payments, _function_scoped_runner)
    assert payments.hung and not payments.completed
    # What it did read: the partitions of the stream it reads, to their end.
    assert sorted(payments.consumed.values()).count(5) == 2, payments.consumed
