"""Every public huddle exception survives ``pickle`` and ``copy`` (a worker process hands
one to its parent, a test framework copies one): the same type, message and attributes."""

from __future__ import annotations

import copy
import errno
import importlib
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from huddle.client import (
    CommitFailedError,
    ConnectionClosedError,
    ConnectTimeoutError,
    CoordinatorUnreachableError,
    MemberFailedError,
)
from huddle.protocol.errors import ErrorCode, HuddleError, ServerError, UnknownServerError

# where the exceptions a user meets are exported (and the modules of those raised by name)
MODULES = (
    "huddle.client",
    "huddle.protocol.errors",
    "huddle.testing",
    "huddle.client.security",
    "huddle.client.leader",
    "huddle.protocol.embedded",
)


def exported() -> list[type[HuddleError]]:
    found: dict[str, type[HuddleError]] = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for attribute in getattr(module, "__all__", None) or dir(module):
            value = getattr(module, attribute)
            if isinstance(value, type) and issubclass(value, HuddleError):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[name] for name in sorted(found)]


# the classes made with more than a message; any other is made with one
MADE: dict[type[HuddleError], Callable[[], HuddleError]] = {
    CoordinatorUnreachableError: lambda: CoordinatorUnreachableError(
        "cannot connect to h:1: connection refused", "h:1", errno.ECONNREFUSED
    ),
    ConnectTimeoutError: lambda: ConnectTimeoutError("h:1", 0.3, "handshake", login=True),
    ConnectionClosedError: lambda: ConnectionClosedError("closed", 16, tls_hint="a hint"),
    MemberFailedError: lambda: MemberFailedError(ErrorCode.FENCED_INSTANCE_ID, "fenced"),
    CommitFailedError: lambda: CommitFailedError(ErrorCode.ILLEGAL_GENERATION, "gone"),
    UnknownServerError: lambda: UnknownServerError("unknown error code 87", error_code=87),
}


def made(cls: type[HuddleError]) -> HuddleError:
    return MADE.get(cls, lambda: cls("what went wrong"))()


def observed(error: BaseException) -> dict[str, Any]:
    seen: dict[str, Any] = {
        "type": type(error),
        "str": str(error),
        "args": error.args,
        "attributes": vars(error),
    }
    if isinstance(error, OSError):
        seen["os"] = (error.errno, error.strerror, error.filename, error.filename2)
    return seen


def pickled(protocol: int) -> Callable[[HuddleError], HuddleError]:
    def trip(error: HuddleError) -> HuddleError:
        back: HuddleError = pickle.loads(pickle.dumps(error, protocol))
        return back

    return trip


ROUND_TRIPS: dict[str, Callable[[HuddleError], HuddleError]] = {
    "pickle protocol 2": pickled(2),
    "pickle protocol 5": pickled(5),
    "copy.copy": copy.copy,
    "copy.deepcopy": copy.deepcopy,
}


@pytest.mark.parametrize("trip", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
@pytest.mark.parametrize("cls", exported(), ids=lambda cls: cls.__name__)
def test_an_exception_comes_back_the_same(
    cls: type[HuddleError], trip: Callable[[HuddleError], HuddleError]
) -> None:
    error = made(cls)
    assert observed(trip(error)) == observed(error)


def test_the_list_holds_the_exceptions_a_user_meets() -> None:
    names = {cls.__name__ for cls in exported()}
    assert {
        "CoordinatorUnreachableError",
        "MemberFailedError",
        "NotSettledError",
        "CoordinatorError",
        "TlsError",
        "SaslAuthenticationFailedError",
    } <= names


def test_what_the_reviewer_saw_comes_back_right() -> None:
    unreachable = pickle.loads(pickle.dumps(made(CoordinatorUnreachableError)))
    assert isinstance(unreachable, CoordinatorUnreachableError)
    assert (unreachable.address, unreachable.errno) == ("h:1", errno.ECONNREFUSED)
    moved = pickle.loads(pickle.dumps(error_of(ErrorCode.NOT_COORDINATOR, "moved")))
    assert str(moved) == "NOT_COORDINATOR (16): moved"
    unknown = pickle.loads(pickle.dumps(made(UnknownServerError)))
    assert unknown.error_code == 87
    assert str(unknown) == "UNKNOWN_CODE_87 (87): unknown error code 87"


def error_of(code: ErrorCode, message: str) -> ServerError:
    from huddle.protocol.errors import error_class

    return error_class(code)(message)
