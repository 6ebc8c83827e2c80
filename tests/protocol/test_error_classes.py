"""Every exception class huddle defines is a ``HuddleError`` named ``...Error``, and every
exception huddle raises is one, as ``huddle.protocol.errors`` promises: a caller catches all
of huddle's errors with one ``except HuddleError``, and a name says it is one. Walks every
module of ``huddle.*`` (its classes, and the ``raise`` statements of its source), so a new
module's exception cannot slip by."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
from types import ModuleType

import huddle
from huddle.protocol.errors import HuddleError


def modules() -> list[ModuleType]:
    found = [huddle]
    for info in pkgutil.walk_packages(huddle.__path__, "huddle."):
        if not info.name.endswith("__main__"):
            found.append(importlib.import_module(info.name))
    return found


def exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in modules():
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_the_walk_finds_huddles_exceptions() -> None:
    found = exception_classes()
    assert len(found) > 50
    assert "huddle.protocol.errors.HuddleError" in found
    assert "huddle.coordinator.security.acls.AclError" in found


def test_every_exception_huddle_defines_is_a_huddle_error() -> None:
    outside = [
        name for name, cls in exception_classes().items() if not issubclass(cls, HuddleError)
    ]
    assert outside == []


def test_every_exception_huddle_defines_is_named_for_an_error() -> None:
    misnamed = [
        name for name, cls in exception_classes().items() if not cls.__name__.endswith("Error")
    ]
    assert misnamed == []


# Raises of exceptions that are not HuddleErrors, each for a reason a caller cannot change:
RAISE_ALLOWED = {
    # a module's __getattr__ must raise AttributeError (PEP 562)
    ("huddle", "AttributeError"),
    ("huddle.testing", "AttributeError"),
    # argparse turns ArgumentTypeError from a type= callback into its usage message
    ("huddle.cli.parsing", "ArgumentTypeError"),
    ("huddle.sim.cli", "ArgumentTypeError"),
    ("huddle.chaos.kafka_workers.options", "ArgumentTypeError"),
    # huddle.logs imports no part of huddle (a contract in pyproject.toml), so no HuddleError:
    # its ValueError is a bad level or format passed to configure_logging by a program (the
    # command checks --log-level and --log-format, and their environment variables, first)
    ("huddle.logs", "ValueError"),
    # an abstract method, and an invariant that cannot fail unless huddle has a bug
    ("huddle.coordinator.storage.batching", "NotImplementedError"),
    ("huddle.client.assignors.high_availability.target", "AssertionError"),
    # the Kafka wire's builder for Produce, Fetch and ListOffsets, which the log answers
    ("huddle.coordinator.kafka.wire", "AssertionError"),
}


def _resolve(module: ModuleType, node: ast.expr) -> object:
    """What ``node`` (a name or a dotted name) is in ``module``; None for anything else (an
    instance kept in ``self``, a caught exception raised again)."""
    if isinstance(node, ast.Name):
        if node.id in vars(module):
            return vars(module)[node.id]
        return getattr(builtins, node.id, None)
    if isinstance(node, ast.Attribute):
        owner = _resolve(module, node.value)
        return getattr(owner, node.attr, None) if isinstance(owner, ModuleType) else None
    return None


def raised_classes() -> list[tuple[str, int, type[BaseException]]]:
    """(module, line, class) of every ``raise C(...)`` or ``raise C`` in huddle's source."""
    found = []
    for module in modules():
        tree = ast.parse(inspect.getsource(module))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            value = _resolve(module, exc)
            if isinstance(value, type) and issubclass(value, BaseException):
                found.append((module.__name__, node.lineno, value))
    return found


def test_the_walk_finds_huddles_raises() -> None:
    raised = {(module, cls.__name__) for module, _, cls in raised_classes()}
    assert ("huddle.coordinator.config", "InvalidConfigError") in raised
    assert ("huddle.cli.parsing", "ArgumentTypeError") in raised
    assert len(raised) > 100


def test_every_exception_huddle_raises_is_a_huddle_error() -> None:
    outside = [
        f"{module}:{line} raises {cls.__name__}"
        for module, line, cls in raised_classes()
        if not issubclass(cls, HuddleError) and (module, cls.__name__) not in RAISE_ALLOWED
    ]
    assert outside == []


def test_every_allowed_raise_is_still_there() -> None:
    raised = {(module, cls.__name__) for module, _, cls in raised_classes()}
    assert RAISE_ALLOWED - raised == set()
