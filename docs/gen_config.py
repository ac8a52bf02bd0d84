"""Generate the table of ``docs/configuration.md`` from ``ConsumerConfig``'s docstring.

``python docs/gen_config.py`` rewrites the table in place (the prose around it is kept);
``python docs/gen_config.py --check`` exits with status 1 if the page is out of date.
``tests/unit/test_docs.py`` runs the check, so the page cannot drift from the code: after changing
a key, its default or its ``Attributes:`` entry, run this script.

Each row is ``| dotted key | attribute | repr(default) or required | the docstring entry |``,
the entry's lines joined with single spaces.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parent / "configuration.md"
HEADER = "| key | attribute | default | unit, validation and meaning |\n|---|---|---|---|\n"


def attribute_docs() -> dict[str, str]:
    """``{attribute: its Attributes: entry as one line}`` from ``ConsumerConfig.__doc__``."""
    from aiozkconsumer.config import ConsumerConfig

    doc = inspect.cleandoc(ConsumerConfig.__doc__ or "")
    section = doc.split("\nAttributes:\n", 1)[1]
    section = re.split(r"\n\S", section, maxsplit=1)[0]  # up to the next section
    entries: dict[str, str] = {}
    name = None
    for line in section.splitlines():
        match = re.match(r"^    (\w+): (.*)$", line)
        if match:
            name = match[1]
            entries[name] = match[2].strip()
        elif name is not None and line.strip():
            entries[name] += " " + line.strip()
    return entries


def table() -> str:
    """The table, header included, one row per ``ConsumerConfig`` field in field order."""
    from aiozkconsumer.config import ConsumerConfig

    docs = attribute_docs()
    rows = []
    for field in dataclasses.fields(ConsumerConfig):
        default = "required" if field.default is dataclasses.MISSING else repr(field.default)
        dotted = field.name.replace("_", ".")  # no original key has an underscore
        meaning = docs[field.name].replace("|", "\\|")
        rows.append(f"| `{dotted}` | `{field.name}` | `{default}` | {meaning} |\n")
    return HEADER + "".join(rows)


def render(page: str) -> str:
    """``page`` with its table replaced by a freshly generated one."""
    start = page.index(HEADER)
    end = start + len(HEADER)
    lines = page[end:].splitlines(keepends=True)
    while lines and lines[0].startswith("| "):
        end += len(lines.pop(0))
    return page[:start] + table() + page[end:]


def main(argv: list[str]) -> int:
    current = PAGE.read_text(encoding="utf-8")
    fresh = render(current)
    if "--check" in argv:
        if fresh != current:
            print(f"{PAGE} is out of date: run python docs/gen_config.py", file=sys.stderr)  # noqa: T201
            return 1
        return 0
    PAGE.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
