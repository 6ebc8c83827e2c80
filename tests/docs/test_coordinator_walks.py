"""docs/coordinator.md walks a request from the socket to the core and through the core's
parts, naming the functions it passes through: every ``Class.name`` the walks (and the
tables of the server's and the core's modules before them) mention exists under that name,
so a rename cannot leave the walks pointing at nothing."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "coordinator.md"
FIRST = "## The server and its wires"
# where the walks' names live, besides the modules the walks name themselves
MODULES = ("huddle.coordinator.cluster.keeper", "huddle.protocol.framing")
# ``name.attr`` spans that are values or paths, not a class's member
NOT_MEMBERS = {"conn", "fx", "group", "cluster", "huddle", "storage", "tests"}


def walks() -> str:
    text = DOC.read_text()
    return text[text.index(FIRST) :]


def module_names(text: str) -> list[str]:
    named = set(re.findall(r"`([a-z_]+)\.py`", text))
    named |= set(re.findall(r"^\| `([a-z_]+)`", text, flags=re.MULTILINE))
    return sorted(named)


def namespace(text: str) -> dict[str, object]:
    found: dict[str, object] = {}
    for name in module_names(text):
        module = importlib.import_module(f"huddle.coordinator.{name}")
        found[name] = module
        for key, value in vars(module).items():
            found.setdefault(key, value)
    for dotted in MODULES:
        found.update(vars(importlib.import_module(dotted)))
    return found


def has_member(owner: object, name: str) -> bool:
    if hasattr(owner, name) or name in getattr(owner, "__annotations__", {}):
        return True
    # an attribute its __init__ sets
    return inspect.isclass(owner) and f"self.{name}" in inspect.getsource(owner)


def references(text: str) -> list[tuple[str, str]]:
    spans = re.findall(r"`([A-Za-z_]\w*)\.([A-Za-z_]\w*)", text)
    return sorted(
        {(owner, name) for owner, name in spans if owner not in NOT_MEMBERS and name != "py"}
    )


def test_every_module_the_walks_name_exists() -> None:
    names = module_names(walks())
    assert {"core", "sessions", "joining", "intake", "requests", "held"} <= set(names)
    for name in names:
        importlib.import_module(f"huddle.coordinator.{name}")


@pytest.mark.parametrize(("owner", "name"), references(walks()))
def test_every_function_the_walks_name_exists(owner: str, name: str) -> None:
    found = namespace(walks())
    assert owner in found, f"{owner} is not a name of the coordinator's modules"
    assert has_member(found[owner], name), f"{owner} has no {name}"
