"""One set of process helpers: ``free_port`` and ``wait_settled`` are written once, and the
tests, the benches and the chaos harness use those (issue 25). A copy drifts: one bound the
wildcard address, another polled at its own pace. The walk reads every Python file of the
repository, so a new copy cannot slip by."""

from __future__ import annotations

import ast
import functools
import socket
from pathlib import Path

import huddle.testing

from huddle.protocol import addresses

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = {"build", "docs"}  # and hidden folders (.venv, .git): not huddle's code


@functools.cache
def top_level_functions() -> dict[str, list[str]]:
    """Each function defined at the top level of a module of the repository: where."""
    found: dict[str, list[str]] = {}
    tops = [p for p in ROOT.iterdir() if p.is_dir() and p.name[0] != "." and p.name not in SKIPPED]
    for path in sorted(path for top in tops for path in top.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    return found


def definitions(name: str) -> list[str]:
    return top_level_functions().get(name, [])


def test_free_port_is_defined_once_at_the_lowest_layer() -> None:
    assert definitions("free_port") == ["protocol/huddle/protocol/addresses.py"]


def test_wait_settled_is_defined_once_in_huddle_testing() -> None:
    assert definitions("wait_settled") == ["testing/huddle/testing/settle.py"]


def test_huddle_testing_hands_out_the_one_free_port() -> None:
    assert huddle.testing.free_port is addresses.free_port
    port = huddle.testing.free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))  # free, on the loopback address
