"""Griffe extension for the docs build: render the reST bits of our docstrings as Markdown.

The package's docstrings are Google style (STYLE.md), but some use reST idioms that Markdown
would show literally or mangle:

- Sphinx roles (``:class:`~aiozkconsumer.errors.ConsumerError```, ``:meth:`commit```)
  become optional cross-references: a link when the target is documented on the site, plain
  code otherwise (never a broken link, so ``mkdocs build --strict`` stays green).
- A paragraph ending in ``::`` (a reST literal block follows) ends in ``:`` instead.
- reST "simple tables" (columns framed by ``=====  =====`` rules) become Markdown tables;
  their rule lines would otherwise turn the header row into a setext heading.
- A ``Raises:`` item naming several exceptions (``A, B, C: why``, maybe over several lines)
  becomes one item per exception: Google style has one, and griffe would warn (failing a
  strict build) and drop it.

Loaded by ``mkdocs.yml`` (``plugins.mkdocstrings.handlers.python.options.extensions``). It only
changes the text griffe hands to mkdocstrings; the source files are untouched.
"""

from __future__ import annotations

import re
from typing import Any

try:
    from griffe import Extension, Object
except ImportError:  # the pure helpers stay importable (and tested) without the docs extra
    Extension = object  # type: ignore[assignment,misc]
    Object = Any  # type: ignore[assignment,misc]

_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const|type):`(?P<body>[^`]+)`"
)
_TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")
_RULE = re.compile(r"^ *=+( +=+)+ *$")


def _columns(rule: str) -> list[tuple[int, int]]:
    """Character spans of the columns of a simple-table rule line."""
    return [(m.start(), m.end()) for m in re.finditer(r"=+", rule)]


def _cells(line: str, spans: list[tuple[int, int]]) -> list[str]:
    cells = []
    for i, (start, _) in enumerate(spans):
        end = spans[i + 1][0] if i + 1 < len(spans) else len(line)
        cells.append(line[start:end].strip().replace("|", "\\|"))
    return cells


def convert_simple_tables(text: str) -> str:
    """Turn reST simple tables (rule, header, rule, rows, rule) into Markdown tables."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if _RULE.match(lines[i]) and i + 2 < len(lines) and _RULE.match(lines[i + 2]):
            spans = _columns(lines[i])
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            header = _cells(lines[i + 1], spans)
            rows: list[list[str]] = []
            j = i + 3
            while j < len(lines) and not _RULE.match(lines[j]):
                if lines[j].strip():
                    rows.append(_cells(lines[j], spans))
                j += 1
            if j < len(lines):  # a closing rule: it was a table
                out.append(indent + "| " + " | ".join(header) + " |")
                out.append(indent + "|" + "---|" * len(header))
                out.extend(indent + "| " + " | ".join(row) + " |" for row in rows)
                i = j + 1
                continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def convert_literal_markers(text: str) -> str:
    """``Usage::`` -> ``Usage:`` (the indented block after it is a Markdown code block)."""
    text = re.sub(r"(?m)(\S)::[ \t]*$", r"\1:", text)
    return re.sub(r"(?m)^([ \t]*)::[ \t]*$", r"", text)


_SECTION = re.compile(r"^(?P<indent>[ \t]*)Raises:[ \t]*$")
_NAMES_THEN_TEXT = re.compile(
    r"^(?P<names>[\w.]+(?:\s*,\s*[\w.]+)+)\s*:\s*(?P<text>.*)$", re.DOTALL
)


def split_grouped_raises(text: str) -> str:
    """Split ``Raises:`` items naming several exceptions into one ``X: why`` item each.

    Google style has one exception per item; grouped items would otherwise be dropped with a
    griffe warning (which fails a strict build).
    """
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        header = _SECTION.match(lines[i])
        i += 1
        if not header:
            continue
        start = i
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i >= len(lines):
            continue
        item_indent = len(lines[i]) - len(lines[i].lstrip())
        if item_indent <= len(header["indent"]):
            continue
        out.extend(lines[start:i])
        items: list[list[str]] = []
        while i < len(lines):
            line = lines[i]
            indent = len(line) - len(line.lstrip())
            if line.strip() and indent < item_indent:
                break
            if not line.strip():
                if (
                    i + 1 < len(lines)
                    and lines[i + 1].strip()
                    and (len(lines[i + 1]) - len(lines[i + 1].lstrip()) < item_indent)
                ):
                    break
                items.append([""])
            elif indent == item_indent and not (
                items and items[-1][-1].rstrip().endswith(",") and ":" not in " ".join(items[-1])
            ):
                items.append([line])
            else:
                items[-1].append(line)
            i += 1
        pad = " " * item_indent
        for item in items:
            joined = " ".join(part.strip() for part in item).strip()
            grouped = _NAMES_THEN_TEXT.match(joined)
            if grouped and "," in grouped["names"]:
                names = re.split(r"\s*,\s*", grouped["names"])
                out.extend(f"{pad}{name}: {grouped['text']}" for name in names)
            else:
                out.extend(item)
    return "\n".join(out)


class RstToMarkdown(Extension):
    """Rewrite each docstring once the object tree is complete (targets can be resolved)."""

    def on_object(self, *, obj: Object, loader: Any, **kwargs: Any) -> None:
        doc = obj.docstring
        if doc is None:
            return
        collection = loader.modules_collection

        def exists(path: str) -> bool:
            try:
                collection.get_member(path)
            except Exception:  # griffe raises several kinds for a missing member
                return False
            return True

        def resolve(target: str) -> str:
            target = target.lstrip("~.!")
            if "." in target and exists(target):
                return target
            scopes = []
            scope: Any = obj
            while scope is not None:
                scopes.append(scope.path)
                scope = scope.parent
            scopes.append("aiozkconsumer")
            for base in scopes:
                candidate = f"{base}.{target}"
                if exists(candidate):
                    return candidate
            return target

        def role(match: re.Match[str]) -> str:
            body = match["body"].strip()
            titled = _TITLED.match(body)
            if titled:
                title, target = titled["title"], titled["target"]
            else:
                target = body = re.sub(r"\s+", "", body)  # a role may wrap across lines
                shown = body.lstrip("!")
                title = shown[1:].rsplit(".", 1)[-1] if shown.startswith("~") else shown
            identifier = resolve(target)
            return f'<autoref identifier="{identifier}" optional><code>{title}</code></autoref>'

        text = _ROLE.sub(role, split_grouped_raises(doc.value))
        text = convert_simple_tables(text)
        doc.value = convert_literal_markers(text)
