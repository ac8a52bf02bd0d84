"""The documentation keeps up with the code."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from aiozkconsumer.config import ConsumerConfig

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_configuration_reference_lists_every_key_with_its_default() -> None:
    text = (DOCS / "configuration.md").read_text()
    for field in dataclasses.fields(ConsumerConfig):
        default = "required" if field.default is dataclasses.MISSING else repr(field.default)
        dotted = field.name.replace("_", ".")  # no original key has an underscore
        assert f"| `{dotted}` | `{field.name}` | `{default}` |" in text, field.name
