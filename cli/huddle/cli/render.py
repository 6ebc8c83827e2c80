"""How the admin commands print: aligned tables for people, JSON for programs."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from huddle.logs import printable


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces; trailing spaces trimmed."""
    cells = [
        [printable(str(h)) for h in headers],
        *[[printable(str(c)) for c in row] for row in rows],
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def plural(count: int, noun: str) -> str:
    """``noun`` as ``count`` of it reads: 1 member, 2 members (and 0 members)."""
    return noun if count == 1 else f"{noun}s"


def to_json(value: object) -> str:
    return msgspec.json.encode(value).decode()
