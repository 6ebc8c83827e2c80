"""Checks of what the application passes to the client's constructors, made when it passes
them: a bad argument is an ``InvalidArgumentError`` (also a ``ValueError``; of the wrong
kind, an ``InvalidArgumentTypeError``, also a ``TypeError``), not a failure minutes later
inside a running member."""

from __future__ import annotations

from collections.abc import Sequence

from huddle.client.assignors.base import Assignor
from huddle.client.security import Security
from huddle.protocol.errors import InvalidArgumentError, InvalidArgumentTypeError


def require_type(name: str, value: object, kind: type | tuple[type, ...], what: str) -> None:
    if not isinstance(value, kind):
        raise InvalidArgumentTypeError(f"{name} must be {what}, not {type(value).__name__}")


def require_number(name: str, value: object, *, positive: bool) -> None:
    """``value`` is a number (not a bool), more than 0 if ``positive``, else at least 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentTypeError(f"{name} must be a number, not {type(value).__name__}")
    if value < 0 or (positive and value == 0):
        least = "more than 0" if positive else "0 or more"
        raise InvalidArgumentError(f"{name} must be {least}, not {value!r}")


def check_member(
    *,
    group_id: object,
    assignors: object,
    instance_id: object,
    client_id: object,
    timeouts_ms: dict[str, object],
    backoffs_ms: dict[str, object],
    lags: object,
    security: object,
) -> None:
    """``Member``'s arguments that nothing else checks (the bootstrap list, the topics or
    pattern, the ids' lengths and the heartbeat interval are checked where they are used)."""
    require_type("group_id", group_id, str, "a str")
    if not group_id:
        raise InvalidArgumentError("group_id must not be empty")
    require_type("instance_id", instance_id, (str, type(None)), "a str or None")
    require_type("client_id", client_id, str, "a str")
    if isinstance(assignors, str) or not isinstance(assignors, Sequence):
        raise InvalidArgumentTypeError(
            f"assignors is a sequence of assignor names or Assignor objects, not {assignors!r}"
        )
    for a in assignors:
        require_type("each assignor", a, (str, Assignor), "a name or an Assignor")
    for name, value in timeouts_ms.items():
        require_number(name, value, positive=True)
    for name, value in backoffs_ms.items():
        require_number(name, value, positive=False)
    if lags is not None and not callable(lags):
        raise InvalidArgumentTypeError("lags must be a callable returning the lag per task")
    require_type("security", security, Security, "a Security")


def check_admin(*, timeout: object, security: object) -> None:
    require_number("timeout", timeout, positive=True)
    require_type("security", security, Security, "a Security")
