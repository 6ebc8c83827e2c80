"""Every exception class huddle defines is a ``HuddleError`` named ``...Error``, as
``huddle.protocol.errors`` promises: a caller catches all of huddle's errors with one
``except HuddleError``, and a name says it is one. Walks every module of ``huddle.*``, so a
new module's exception cannot slip by."""

from __future__ import annotations

import importlib
import pkgutil

import huddle
from huddle.protocol.errors import HuddleError


def exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(huddle.__path__, "huddle."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
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
