"""Checks of what the application passes to the client's constructors, made when it passes
them: a bad argument is an ``InvalidArgumentError`` (also a ``ValueError``; of the wrong
kind, an ``InvalidArgumentTypeError``, also a ``TypeError``), not a failure minutes later
inside a running member."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from huddle.client.assignors.base import Assignor
from huddle.client.checks import MAX_INT32, require_number, require_type
from huddle.client.security import Security
from huddle.protocol.errors import InvalidArgumentError, InvalidArgumentTypeError


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
    metrics_registry: object,
) -> None:
    """``Member``'s arguments that nothing else checks (the bootstrap list, the topics or
    pattern, the ids' lengths and the heartbeat interval are checked where they are used).
    Its timeouts are Kafka's int settings: whole milliseconds that fit 32 bits."""
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
        require_number(name, value, positive=True, whole=True, most=MAX_INT32)
    for name, value in backoffs_ms.items():
        require_number(name, value, positive=False)
    if lags is not None and not callable(lags):
        raise InvalidArgumentTypeError("lags must be a callable returning the lag per task")
    require_type("security", security, Security, "a Security")
    registry = (CollectorRegistry, type(None))
    require_type("metrics_registry", metrics_registry, registry, "a CollectorRegistry or None")


def check_admin(*, timeout: object, security: object) -> None:
    require_number("timeout", timeout, positive=True)
    require_type("security", security, Security, "a Security")
