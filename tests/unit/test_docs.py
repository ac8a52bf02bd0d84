"""The documentation keeps up with the code.

The site itself is built with ``mkdocs build --strict`` in CI (broken links, unknown
cross-references and a CLI command without its help fail it); these tests check, without
MkDocs, what the pages claim about the code: every configuration key, CLI command, exit
status, exported name and metric is documented, and the build helpers in ``docs/`` work.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

import aiozkconsumer
from aiozkconsumer.cli import ExitCode
from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.metrics import ConsumerMetrics, Meter, prometheus_family

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _load(name: str) -> ModuleType:
    """Import a helper module of ``docs/`` (not a package) by path."""
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", DOCS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


hooks = _load("_hooks")
rst = _load("_griffe_rst")
gen_config = _load("gen_config")


def _page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


# -- configuration ----------------------------------------------------------------------------


def test_configuration_reference_lists_every_key_with_its_default() -> None:
    text = _page("configuration.md")
    for field in dataclasses.fields(ConsumerConfig):
        default = "required" if field.default is dataclasses.MISSING else repr(field.default)
        dotted = field.name.replace("_", ".")  # no original key has an underscore
        assert f"| `{dotted}` | `{field.name}` | `{default}` |" in text, field.name


def test_configuration_reference_is_generated_from_the_docstring() -> None:
    current = _page("configuration.md")
    assert gen_config.render(current) == current, "run: python docs/gen_config.py"


def test_migration_guide_maps_every_key() -> None:
    text = _page("migration.md")
    for field in dataclasses.fields(ConsumerConfig):
        dotted = field.name.replace("_", ".")
        assert f"| `{dotted}` | `{field.name}` |" in text, field.name


# -- command line -----------------------------------------------------------------------------


def test_cli_page_has_a_help_block_for_every_command() -> None:
    paths = hooks.command_paths()
    assert ("groups", "describe") in paths and ("verify-rebalance",) in paths
    rendered, covered, unknown = hooks.render_cli_markers(_page("cli.md"))
    assert unknown == []
    assert sorted(covered) == sorted(paths)
    assert not hooks.MARKER.search(rendered)
    for path in paths:
        assert f"$ aiozkconsumer {' '.join((*path, '--help'))}\nUsage: aiozkconsumer" in rendered


def test_cli_page_has_a_section_for_every_command() -> None:
    text = _page("cli.md")
    for path in hooks.command_paths()[1:]:
        anchor = "-".join(path)
        assert f"{{ #{anchor} }}" in text, anchor


def test_help_text_is_what_the_command_prints() -> None:
    text = hooks.help_text(("offsets", "update"))
    assert text.startswith("Usage: aiozkconsumer offsets update [OPTIONS] {earliest|latest}\n")
    assert "--group NAME" in text
    assert max(len(line) for line in text.splitlines()) <= hooks.WIDTH
    with pytest.raises(KeyError):
        hooks.help_text(("no-such-command",))


def test_cli_page_lists_every_exit_status() -> None:
    text = _page("cli.md")
    for code in ExitCode:
        assert re.search(rf"^\| {int(code)} \| \S", text, re.MULTILINE), code


# -- API and metrics --------------------------------------------------------------------------


def test_api_page_lists_every_exported_name() -> None:
    text = _page("api/aiozkconsumer.md")
    for name in aiozkconsumer.__all__:
        assert f"`{name}`" in text, name


def test_metrics_page_names_every_metric_and_its_prometheus_family() -> None:
    text = _page("metrics.md")
    metrics = ConsumerMetrics("c", "g")
    metrics.messages_per_sec("t")
    metrics.bytes_per_sec("t")
    metrics.zookeeper_commits_per_sec()
    metrics.kafka_commits_per_sec()
    metrics.rebalance_rate_and_time()
    metrics.owned_partitions_count("t", lambda: 0.0)
    metrics.fetch_queue_size("t", 0, lambda: 0.0)
    metrics.record_fetch("h:1", 1.0, 1, 0.0)
    metrics.consumer_lag("t", 0, lambda: 0.0)
    metrics.max_lag()
    metrics.min_fetch_rate()
    names = set()
    for metric in metrics:
        name = metric.metric_name
        names.add(name.name)
        assert f"type={name.type},name={name.name}," in text, name
        family = prometheus_family(name)
        if family is None:  # MinFetchRate: a client-side rate, not exported
            assert f"| `{name.name}` | | — |" in text
            continue
        family += "_total" if isinstance(metric, Meter) else ""
        assert f"`{family}`" in text, family
    assert len(names) == 13


def test_every_page_is_in_the_nav() -> None:
    nav = set(
        re.findall(r"^\s*- (?:[^:\n]+: )?(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    )
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages - nav == set(), "pages missing from the nav in mkdocs.yml"


# -- the docstring converter of the API reference ---------------------------------------------


def test_grouped_raises_items_are_split() -> None:
    text = """Do it.

    Raises:
        InvalidConfigError: ``num_streams`` < 1.
        ConsumerClosedError, ZookeeperNodeExistsError,
        ZookeeperConnectionError: as ``create_message_streams``.
        MessageSizeTooLargeError, CorruptRecordError,
            BrokerNotAvailableError: as
            :meth:`fetch`.

    Returns:
        Something.
    """
    assert (
        rst.split_grouped_raises(text)
        == """Do it.

    Raises:
        InvalidConfigError: ``num_streams`` < 1.
        ConsumerClosedError: as ``create_message_streams``.
        ZookeeperNodeExistsError: as ``create_message_streams``.
        ZookeeperConnectionError: as ``create_message_streams``.
        MessageSizeTooLargeError: as :meth:`fetch`.
        CorruptRecordError: as :meth:`fetch`.
        BrokerNotAvailableError: as :meth:`fetch`.

    Returns:
        Something.
    """
    )


def test_simple_tables_become_markdown_tables() -> None:
    text = """Pick one.

    =======  ======
    storage  store
    =======  ======
    ``zk``   ZooKeeper
    ``kf``   Kafka | dual
    =======  ======

    After."""
    assert (
        rst.convert_simple_tables(text)
        == """Pick one.

    | storage | store |
    |---|---|
    | ``zk`` | ZooKeeper |
    | ``kf`` | Kafka \\| dual |

    After."""
    )


def test_literal_block_markers_lose_a_colon() -> None:
    assert rst.convert_literal_markers("Usage::\n\n    code") == "Usage:\n\n    code"
    assert rst.convert_literal_markers("a: b\n::\n") == "a: b\n\n"


# -- architecture -----------------------------------------------------------------------------

gen_architecture = _load("gen_architecture")


def test_architecture_module_map_is_generated_from_the_code() -> None:
    current = _page("architecture.md")
    assert gen_architecture.render(current) == current, "run: python docs/gen_architecture.py"


def test_architecture_module_map_names_every_module() -> None:
    text = _page("architecture.md")
    for path in gen_architecture.modules():
        assert f"| `{path.name}` |" in text, path
