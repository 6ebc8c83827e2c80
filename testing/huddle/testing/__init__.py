"""Testing with huddle: a coordinator and members for your own tests.

``pip install huddle`` registers a pytest plugin (``huddle.testing.plugin``) with the
fixtures ``huddle_coordinator`` and ``huddle_members``; the pieces are usable without
pytest too:

* ``CoordinatorProcess``: ``huddle serve`` as a child process on a free loopback port, with
  its ``bootstrap``, its ``log`` (every event, parsed), ``kill()`` and ``restart()``;
* ``MemberSet``: members of groups, each running in its own task, to ``start``, ``stop``
  (it leaves its group) or ``kill`` (its connection just drops) in any order;
* ``wait_settled``: the assertion that a group settles with every partition owned once;
* ``free_port``: a TCP port free on the loopback address, for a process a test starts;

and the errors a test catches: ``CoordinatorError`` (the coordinator did not start, or
stopped by itself), ``NotSettledError`` (``wait_settled``), ``MemberFailedError`` (a member
stopped), ``InvalidArgumentError`` and their base ``HuddleError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from huddle.testing.coordinator import CoordinatorError, CoordinatorProcess
    from huddle.testing.members import MemberSet
    from huddle.testing.settle import NotSettledError, wait_settled

    from huddle.client.events import MemberFailedError
    from huddle.protocol.addresses import free_port
    from huddle.protocol.errors import HuddleError, InvalidArgumentError

__all__ = [
    "CoordinatorError",
    "CoordinatorProcess",
    "HuddleError",
    "InvalidArgumentError",
    "MemberFailedError",
    "MemberSet",
    "NotSettledError",
    "free_port",
    "wait_settled",
]

# Loaded on first use: pytest imports this package at start-up for the plugin, and a test
# session that never asks for huddle's fixtures should not import the member library.
_WHERE = {
    "CoordinatorError": "huddle.testing.coordinator",
    "CoordinatorProcess": "huddle.testing.coordinator",
    "HuddleError": "huddle.protocol.errors",
    "InvalidArgumentError": "huddle.protocol.errors",
    "MemberFailedError": "huddle.client.events",
    "MemberSet": "huddle.testing.members",
    "NotSettledError": "huddle.testing.settle",
    "free_port": "huddle.protocol.addresses",
    "wait_settled": "huddle.testing.settle",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'huddle.testing' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
