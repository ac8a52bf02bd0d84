"""Tables as ``kafka-consumer-groups.sh`` prints them: left-aligned columns, ``-`` for unknown."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MISSING", "format_table"]

MISSING = "-"
"""What a table shows for an unknown value (``MISSING_COLUMN_VALUE``)."""


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], widths: Sequence[int]
) -> list[str]:
    """Left-aligned columns, each at least its ``widths`` entry and wide enough for its cells.

    ``None`` cells show as ``-``.
    """
    cells = [[MISSING if c is None else str(c) for c in row] for row in rows]
    sizes = [
        max([w, len(h), *(len(r[i]) for r in cells)])
        for i, (h, w) in enumerate(zip(headers, widths, strict=True))
    ]
    return [
        " ".join(c.ljust(n) for c, n in zip(row, sizes, strict=True)).rstrip()
        for row in [list(headers), *cells]
    ]
