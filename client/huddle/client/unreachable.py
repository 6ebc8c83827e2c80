"""When a client cannot reach a coordinator.

No connection could be made to an address (refused, no route, an unknown host): that is
``CoordinatorUnreachableError``, a ``HuddleError`` and an ``OSError`` naming the address
and why, rather than the socket layer's bare ``OSError``. An address that takes no
connection, or does not answer the handshake, in time is ``ConnectTimeoutError`` (a
``TimeoutError``) naming the address, the limit and the phase. A member that cannot reach its
coordinator (that, a TLS handshake that failed, a timeout) says so in a warning,
``coordinator_unreachable``, at most once every ``UNREACHABLE_WARNING_S`` seconds
(``UnreachableWarnings``), with a ``hint`` when the failure looks like TLS set up on one
side only (``tls_hint``; a connection closed unanswered may also be a proxy or port forward
with nothing behind it, and its hint says so).
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Iterator

import structlog

from huddle.protocol.errors import ClientError
from huddle.protocol.messages import MAX_LOGIN_HOLD_S

UNREACHABLE_WARNING_S = 10.0  # a member's coordinator_unreachable warnings, at most one per
# A SASL login's handshake waits at least this for its answers, whatever the caller's
# timeout: the coordinator may hold one back up to MAX_LOGIN_HOLD_S after failed logins from
# this client's address group (another process of this host retrying a stale password).
LOGIN_TIMEOUT_S = MAX_LOGIN_HOLD_S + 3.0

PLAIN_TO_TLS = (
    "TLS mismatch, or nothing behind the address: closed unanswered. A TLS listener does "
    "this to a client without TLS (then give it the coordinator's CA, "
    "Security(ca_file=...)); so does a proxy or port forward with no coordinator behind it"
)
TLS_TO_PLAIN = (
    "TLS mismatch: this client uses TLS and the coordinator answered without it: that "
    "address is a listener without TLS (drop TLS, or use the coordinator's TLS address)"
)
CERT_NOT_TRUSTED = (
    "TLS mismatch: the coordinator's certificate failed verification: it is not signed by "
    "the CA this client trusts (Security(ca_file=...)), names another host "
    "(server_hostname), or expired"
)
CLIENT_CERT_REFUSED = (
    "TLS mismatch: the coordinator refused this client's certificate or requires one "
    "(mTLS): give the client a certificate signed by the coordinator's client CA "
    "(Security(cert_file=...))"
)
# OpenSSL's reasons for a TLS handshake answered by something that does not speak TLS
NOT_TLS_REASONS = frozenset(
    {
        "WRONG_VERSION_NUMBER",
        "UNKNOWN_PROTOCOL",
        "HTTP_REQUEST",
        "PACKET_LENGTH_TOO_LONG",
        "RECORD_LAYER_FAILURE",
    }
)


class CoordinatorUnreachableError(ClientError, OSError):
    """No connection could be made to ``address`` (connection refused, host or network
    unreachable, a name that does not resolve). Also an ``OSError``, whose ``errno`` is the
    socket's (``ECONNREFUSED``...) when it gave one; the socket's error is ``__cause__``."""

    def __init__(self, message: str, address: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.address = address
        self.errno = errno


class ConnectTimeoutError(ClientError, TimeoutError):
    """``address`` did not take the connection (``phase`` "connect": TCP, and TLS if used)
    or did not answer its handshake and SASL login (``phase`` "handshake") within
    ``timeout`` seconds. Also a ``TimeoutError``."""

    def __init__(self, address: str, timeout: float, phase: str, *, login: bool = False) -> None:
        if phase == "connect":
            message = (
                f"{address} did not take the connection within {round(timeout, 2):g} s (connect)"
            )
        else:
            what = "the handshake and SASL login" if login else "the handshake"
            message = f"{address} did not answer {what} within {round(timeout, 2):g} s (handshake)"
        if login:
            message += (
                "; after failed logins from this address the coordinator holds back its "
                f"answer to a login (up to {MAX_LOGIN_HOLD_S:g} s), or makes it wait its turn"
            )
        super().__init__(message)
        self.address = address
        self.timeout = timeout
        self.phase = phase


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


def tls_hint(error: BaseException) -> str | None:
    """What ``error`` (or what it was raised from) suggests about TLS set up on one side
    only: a plain client at a TLS listener or the reverse, a certificate refused by either
    side; None when it suggests nothing of the kind."""
    for cause in _causes(error):
        hint = getattr(cause, "tls_hint", None)  # as ConnectionClosedError says it
        if isinstance(hint, str):
            return hint
        if isinstance(cause, ssl.SSLCertVerificationError):
            return CERT_NOT_TRUSTED
        if isinstance(cause, ssl.SSLError):
            reason = str(cause.reason or "").upper()
            if reason in NOT_TLS_REASONS:
                return TLS_TO_PLAIN
            if "ALERT" in reason and ("CERTIFICATE" in reason or "UNKNOWN_CA" in reason):
                return CLIENT_CERT_REFUSED
    return None


class UnreachableWarnings:
    """A member's ``coordinator_unreachable`` warnings: each failed try to reach its
    coordinator counts, and one in ``every_s`` seconds at most is logged, with ``address``
    (the addresses tried), ``error``, ``attempts`` (the tries that failed since it last
    reached one, this one included) and, when the failure looks like a TLS mismatch,
    ``hint``. Sans-IO: the caller gives the time."""

    def __init__(
        self, log: structlog.stdlib.BoundLogger, every_s: float = UNREACHABLE_WARNING_S
    ) -> None:
        self.log = log
        self.every_s = every_s
        self.attempts = 0
        self._logged_at: float | None = None

    def failed(self, now: float, address: str, error: BaseException) -> None:
        self.attempts += 1
        if self._logged_at is not None and now - self._logged_at < self.every_s:
            return
        self._logged_at = now
        hint = tls_hint(error)
        extra = {} if hint is None else {"hint": hint}
        text = str(error) or type(error).__name__
        self.log.warning(
            "coordinator_unreachable", address=address, error=text, attempts=self.attempts, **extra
        )

    def reached(self) -> None:
        """The member reached its coordinator: the next failure counts from 1 again (and
        is logged once ``every_s`` has passed since the last warning)."""
        self.attempts = 0


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from (or, unless suppressed, raised while handling),
    the members of an exception group each in turn (a host name with several addresses
    fails once per address; so does a bootstrap list)."""
    met: set[int] = set()  # a chain that loops is walked once
    seen: BaseException | None = exc
    while seen is not None and id(seen) not in met:
        met.add(id(seen))
        if isinstance(seen, BaseExceptionGroup):
            for inner in seen.exceptions:
                yield from _causes(inner)
            return
        yield seen
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
