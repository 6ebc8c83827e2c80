"""The errors of a client connection, and ``check`` for a response's top-level error code.

``ConnectionClosedError`` (a ``ConnectionError``): the connection is closed, with the code
the coordinator gave if it gave one, and a hint when it closed as TLS set up on one side
only does. ``RequestTimeoutError`` (a ``TimeoutError``): no answer within the caller's time;
the connection stays open. Both are ``ClientError``s, so ``HuddleError``s.
"""

from __future__ import annotations

from typing import TypeVar

from huddle.protocol.errors import ClientError, ErrorCode, raise_for

R = TypeVar("R")


class ConnectionClosedError(ClientError, ConnectionError):
    """The connection to the coordinator is closed; ``error_code`` says why, if it said;
    ``tls_hint`` when it closed as it does for TLS set up on one side only."""

    def __init__(
        self, message: str, error_code: int | None = None, *, tls_hint: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.error_code = error_code
        self.tls_hint = tls_hint


class RequestTimeoutError(ClientError, TimeoutError):
    """No answer within the time the caller gave (the connection stays open)."""


def check(response: R) -> R:
    """Return ``response``, or raise the registered HuddleError for its top-level error code."""
    code = getattr(response, "error_code", ErrorCode.NONE)
    if code != ErrorCode.NONE:
        raise_for(code, getattr(response, "error_message", None))
    return response
