"""What a client raises when no connection could be made to an address (refused, no route,
an unknown host): ``CoordinatorUnreachableError``, a ``HuddleError`` and an ``OSError``
naming the address and why, rather than the socket layer's bare ``OSError``."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

from huddle.protocol.errors import ClientError


class CoordinatorUnreachableError(ClientError, OSError):
    """No connection could be made to ``address`` (connection refused, host or network
    unreachable, a name that does not resolve). Also an ``OSError``, whose ``errno`` is the
    socket's (``ECONNREFUSED``...) when it gave one; the socket's error is ``__cause__``."""

    def __init__(self, message: str, address: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.address = address
        self.errno = errno


def cannot_connect(address: str, exc: OSError) -> CoordinatorUnreachableError:
    """The error for ``exc`` raised connecting to ``address``: ``cannot connect to
    127.0.0.1:9292: connection refused`` rather than ``All connection attempts failed``
    (the caller chains ``exc``)."""
    reasons: list[str] = []
    errno: int | None = None
    for cause in _causes(exc):
        if isinstance(cause, socket.gaierror):
            reason = str(cause.strerror or cause)
        elif isinstance(cause, OSError) and cause.errno:
            reason = os.strerror(cause.errno)
            errno = errno or cause.errno
        else:
            continue
        if reason.lower() not in reasons:
            reasons.append(reason.lower())
    why = "; ".join(reasons) or str(exc) or type(exc).__name__
    return CoordinatorUnreachableError(f"cannot connect to {address}: {why}", address, errno)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from, the members of an exception group each in turn
    (a host name with several addresses fails once per address)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, BaseExceptionGroup):
            for inner in seen.exceptions:
                yield from _causes(inner)
            return
        yield seen
        seen = seen.__cause__
