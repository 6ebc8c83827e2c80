"""No module reaches into another object's private state: ``other._name`` is read or set
only where ``_name`` belongs to a class of the same module (a factory building its own
class's instance, say). Anything else asks the object through a named method or property
(``Coordinator.keep_groups``, not ``core.membership.keep_groups``). Walks the source of
every part and the benchmarks, so a new reach-in cannot slip by."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("protocol", "client", "coordinator", "chaos", "testing", "pipeline", "sim", "cli")
# names with no public spelling: the standard library's, and confluent-kafka's error codes of
# librdkafka's own (documented as ``KafkaError._PARTITION_EOF`` and the like)
ALLOWED = {"argparse._HelpAction", "argparse._VersionAction", "KafkaError._PARTITION_EOF"}
# reaches into a third-party library's objects where it offers no public way, each in one
# named, documented helper of one module, for the reason given
THIRD_PARTY = {
    # aiokafka 0.14 tells a consumer's member id and generation only through its private
    # group coordinator (its assignors' on_assignment is given neither): ``_membership``
    ("chaos/huddle/chaos/kafka_workers/aiokafka_driver.py", "consumer._coordinator"),
}


def sources() -> list[Path]:
    found = [p for part in PARTS for p in sorted((ROOT / part / "huddle").rglob("*.py"))]
    return found + sorted((ROOT / "bench").glob("*.py"))


def own_private_names(tree: ast.Module) -> set[str]:
    """The private names the module's classes define: methods, class attributes, slots
    and attributes their methods set on ``self``."""
    names: set[str] = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id == "self" and isinstance(node.ctx, ast.Store):
                    names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)  # __slots__
    return {name for name in names if name.startswith("_")}


def reach_ins(tree: ast.Module) -> list[tuple[int, str]]:
    """``(line, expression)`` of each reach into another object's private state."""
    own = own_private_names(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in own:
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and ast.unparse(owner.func) == "super":
            continue
        text = ast.unparse(node)
        if text not in ALLOWED:
            found.append((node.lineno, text))
    return found


def all_reach_ins() -> list[tuple[str, int, str]]:
    return [
        (str(path.relative_to(ROOT)), line, text)
        for path in sources()
        for line, text in reach_ins(ast.parse(path.read_text(), str(path)))
    ]


def test_no_module_reaches_into_another_objects_private_state() -> None:
    found = [
        f"{path}:{line}: {text}"
        for path, line, text in all_reach_ins()
        if (path, text) not in THIRD_PARTY
    ]
    assert found == []


def test_each_allowed_third_party_reach_in_is_made_once_and_still_there() -> None:
    made = Counter((path, text) for path, _, text in all_reach_ins())
    assert {key: made[key] for key in THIRD_PARTY} == dict.fromkeys(THIRD_PARTY, 1)


def test_the_check_tells_a_reach_in_from_a_class_using_its_own_names() -> None:
    source = (
        "class Own:\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "    def _step(self): ...\n"
        "def build(core, own: Own):\n"
        "    own._mine = 2\n"
        "    own._step()\n"
        "    super()._format(own)\n"
        "    core.membership._keep = True\n"
    )
    assert reach_ins(ast.parse(source)) == [(9, "core.membership._keep")]
