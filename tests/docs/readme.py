"""The README's examples: its fenced ``sh`` and ``python`` blocks, in order, each with the
marker the README gives it in an HTML comment on the line before (``<!-- example: ... -->``:
``skip: why``, ``run by tests/...``, ``synopsis``, ``pytest``, ``needs FILE ...``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_MARKER = re.compile(r"<!-- example: (.*?) -->")


@dataclass(frozen=True)
class Example:
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    marker: str  # "" when the README gives none: it runs as written

    @property
    def commands(self) -> list[str]:
        """A shell block's commands, one per line (continuation lines joined)."""
        joined = re.sub(r"\\\n\s*", " ", self.code)
        return [line.strip() for line in joined.splitlines() if line.strip()]


def examples(path: Path = README) -> list[Example]:
    found = []
    lines = path.read_text().splitlines()
    at = 0
    while at < len(lines):
        fence = re.fullmatch(r"```(sh|python)", lines[at])
        if fence is None:
            at += 1
            continue
        end = lines.index("```", at + 1)
        before = _MARKER.fullmatch(lines[at - 1].strip()) if at else None
        code = "\n".join(lines[at + 1 : end]) + "\n"
        found.append(Example(at + 1, fence.group(1), code, before.group(1) if before else ""))
        at = end + 1
    return found


def flat(text: str) -> str:
    """Text with its line breaks and runs of spaces made single spaces (prose wraps)."""
    return " ".join(text.split())
