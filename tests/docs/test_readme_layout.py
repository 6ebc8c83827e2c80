"""The README's layout names every module that exists, under its part: a module added
without a line there fails here (issue 25: the layout had fallen behind the code)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tests.docs.readme import README, ROOT

PARTS = ("protocol", "coordinator", "client", "sim", "chaos", "testing", "pipeline", "cli")


def layout() -> str:
    text = README.read_text()
    start = text.index("\n### Layout\n")
    end = text.find("\n#", start + 1)
    return text[start : end if end >= 0 else len(text)]


def paragraphs() -> dict[str, str]:
    """Each part's paragraph of the layout, found by its opening ``**`huddle.<part>`**``."""
    found: dict[str, str] = {}
    for paragraph in layout().split("\n\n"):
        opening = re.match(r"\*\*`huddle\.(\w+)`\*\*", paragraph)
        if opening:
            found[opening.group(1)] = paragraph
    return found


def names(paragraph: str) -> Counter[str]:
    """How often each name is given in backquotes (`huddle.logs` names `huddle` and `logs`,
    `storage/` names `storage`)."""
    counted: Counter[str] = Counter()
    for quoted in re.findall(r"`([^`]+)`", paragraph):
        counted.update(word for word in re.split(r"[./\s]+", quoted) if word)
    return counted


def modules(part: str) -> list[Path]:
    """The modules of a part: under ``<part>/huddle/<part>/``, and for the command's folder
    ``huddle.logs`` beside it."""
    folder = ROOT / part / "huddle" / part
    found = [p for p in folder.rglob("*.py") if p.name not in {"__init__.py", "__main__.py"}]
    if part == "cli":
        found.append(ROOT / "cli" / "huddle" / "logs.py")
    return sorted(found)


def test_the_layout_has_a_paragraph_per_part() -> None:
    assert sorted(paragraphs()) == sorted(PARTS)


@pytest.mark.parametrize("part", PARTS)
def test_every_module_of_a_part_is_named_in_its_paragraph(part: str) -> None:
    given = names(paragraphs()[part])
    folder = ROOT / part / "huddle" / part
    wanted: Counter[str] = Counter(path.stem for path in modules(part))
    # each subpackage (storage/, cluster/, deferred/, ...) is named too, once
    wanted.update(
        {p.parent.name for p in modules(part) if p.parent != folder and p.is_relative_to(folder)}
    )
    # a name two modules share (cluster/store and security/store) is given once for each
    missing = sorted(f"{name} ({count}x)" for name, count in wanted.items() if given[name] < count)
    assert missing == []
    assert modules(part)
