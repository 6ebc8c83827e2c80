"""A connection's first frames: the handshake, then the SASL exchange if the listener
requires one. Until they are done the connection may send nothing else (a request then is
refused and the connection closed), and the handshake timeout counts for all of them.

A password check (a SCRAM proof, a PLAIN password) waits its turn: a few at once per
address group (``huddle.coordinator.security.throttle``). A failed authentication is logged
with the peer's address and the reason; the client is told one thing whatever was wrong
(SASL_AUTHENTICATION_FAILED, "invalid credentials"), after a delay that grows with its
address group's recent failures, and the connection is closed.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from huddle.coordinator.config import ServerConfig
from huddle.coordinator.connection import Connection
from huddle.coordinator.effects import Peer
from huddle.coordinator.security.listener import FAILED_MESSAGE, ListenerSecurity
from huddle.coordinator.security.sasl import AuthenticationFailed, SaslSession
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    SUPPORTED_VERSIONS,
    Handshake,
    HandshakeResult,
    SaslAuthenticate,
    SaslAuthenticateResult,
)

FAILED = "failed"  # conn.sasl once the exchange failed: the connection only waits to close


class GreetingHost(Protocol):
    @property
    def config(self) -> ServerConfig: ...

    @property
    def node_id(self) -> str: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def greeted(self, conn: Connection) -> None:
        """The connection may send requests now: stop watching it for a stalled handshake."""

    def backlogged(self, conn: Connection) -> None:
        """Frames may wait in ``conn.inbox`` that were not handled yet."""


def handshake(
    host: GreetingHost, security: ListenerSecurity | None, conn: Connection, hello: Handshake
) -> None:
    if conn.greeted:
        conn.fail(ErrorCode.INVALID_REQUEST, "handshake already done", event="bad_frame")
        return
    conn.greeted = True
    if hello.version not in SUPPORTED_VERSIONS:
        speaks = ", ".join(str(v) for v in SUPPORTED_VERSIONS)
        message = f"protocol version {hello.version} is not supported; this server speaks {speaks}"
        _refuse(conn, ErrorCode.UNSUPPORTED_VERSION, message, hello.client_id)
        conn.close(f"unsupported protocol version {hello.version}")
        return
    begun = None if security is None else security.greet(hello.sasl_mechanism)
    if isinstance(begun, tuple):
        code, message = begun
        _refuse(conn, code, message, hello.client_id)
        conn.close(f"{code.name}: {message}")
        return
    conn.handshook(hello.version)
    conn.client_id = hello.client_id
    conn.peer = Peer(conn.conn_id, hello.client_id, conn.host, conn.peer.principal)
    conn.log = conn.log.bind(client_id=hello.client_id)
    conn.sasl = begun
    if begun is None:
        _ready(host, conn)
    conn.send(
        HandshakeResult(
            version=hello.version,
            disconnect_grace_ms=host.config.group.disconnect_grace_ms,
            node_id=host.node_id,
            sasl_mechanisms=list(security.mechanisms) if security is not None else [],
        )
    )
    conn.log.debug("handshake_done", version=hello.version, sasl=hello.sasl_mechanism)


def sasl_step(
    host: GreetingHost, security: ListenerSecurity | None, conn: Connection, frame: SaslAuthenticate
) -> None:
    session = conn.sasl
    if security is None or not isinstance(session, SaslSession) or conn.handshaken:
        conn.fail(
            ErrorCode.ILLEGAL_SASL_STATE,
            "no SASL exchange is under way on this connection",
            event="handshake_failed",
        )
        return
    data = frame.auth_bytes
    if session.checks_password:

        def turn() -> None:  # later, outside the server's pass
            conn.sasl_busy = False
            if conn.closing:
                return  # its turn ends as it is counted out (connection_lost)
            _step(host, security, conn, session, data)
            _resume(host, conn)

        if not security.check_turn(conn.conn_id, conn.host, turn):
            # others of its address group are being checked: it waits, reading on (a
            # client that goes away is seen to) and handling nothing; the handshake
            # timeout still runs
            conn.sasl_busy = True
            return
    _step(host, security, conn, session, data)


def _step(
    host: GreetingHost,
    security: ListenerSecurity,
    conn: Connection,
    session: SaslSession,
    data: bytes,
) -> None:
    if session.costly:
        # PLAIN derives the key again (PBKDF2): off the event loop, in a small pool, so
        # that guesses cannot stall everyone's heartbeats. Nothing else of this
        # connection is handled until it is done.
        conn.sasl_busy = True  # read on (a client that goes away is seen to), handle nothing

        def check() -> tuple[bytes, bool]:
            if conn.closing:  # gone while it waited its turn: no key derived for it
                raise AuthenticationFailed("the connection closed")
            return session.step(data)

        work = host.loop.run_in_executor(security.executor, check)
        work.add_done_callback(lambda done: _stepped(host, security, conn, session, done))
        return
    try:
        answer, complete = session.step(data)
    except AuthenticationFailed as exc:
        _failed(host, security, conn, session, exc)
        return
    _answer(host, security, conn, session, answer, complete)


def _stepped(
    host: GreetingHost,
    security: ListenerSecurity,
    conn: Connection,
    session: SaslSession,
    done: asyncio.Future[tuple[bytes, bool]],
) -> None:
    conn.sasl_busy = False
    if conn.closing or done.cancelled():
        return
    exc = done.exception()
    if isinstance(exc, AuthenticationFailed):
        _failed(host, security, conn, session, exc)
    elif exc is not None:
        _failed(host, security, conn, session, AuthenticationFailed(f"check failed: {exc!r}"))
    else:
        answer, complete = done.result()
        _answer(host, security, conn, session, answer, complete)
    _resume(host, conn)


def _resume(host: GreetingHost, conn: Connection) -> None:
    """After a step answered outside the server's pass: write it now, and handle what the
    client sent meanwhile, unless the connection still waits on the coordinator."""
    conn.flush()
    if not conn.sasl_busy and conn.sasl is not FAILED and not conn.closing:
        conn.release_input()
        host.backlogged(conn)


def _answer(
    host: GreetingHost,
    security: ListenerSecurity,
    conn: Connection,
    session: SaslSession,
    answer: bytes,
    complete: bool,
) -> None:
    if not complete:
        conn.send(SaslAuthenticateResult(auth_bytes=answer))
        return
    # A group that failed lately waits as long for a success as for a failure: else a
    # guesser with many connections would read an answer's silence as "wrong".
    wait = security.penalty(conn.host, host.loop.time())
    if wait <= 0:
        _authenticated(host, security, conn, session, answer)
        return
    conn.sasl_busy = True
    conn.hold_input()

    def later() -> None:
        conn.sasl_busy = False
        if conn.closing:
            return
        _authenticated(host, security, conn, session, answer)
        conn.flush()
        conn.release_input()
        host.backlogged(conn)

    host.loop.call_later(wait, later)


def _authenticated(
    host: GreetingHost,
    security: ListenerSecurity,
    conn: Connection,
    session: SaslSession,
    answer: bytes,
) -> None:
    security.check_ended(conn.conn_id)
    conn.sasl = None
    conn.peer = Peer(conn.conn_id, conn.client_id, conn.host, session.principal)
    conn.log = conn.log.bind(principal=session.principal)
    conn.log.info("authenticated", mechanism=session.mechanism)
    _ready(host, conn)
    conn.send(SaslAuthenticateResult(auth_bytes=answer, complete=True, principal=session.principal))


def in_exchange(conn: Connection) -> bool:
    """Whether a SASL exchange is under way on the connection: being made, or failed and
    its answer held back."""
    return isinstance(conn.sasl, SaslSession) or conn.sasl is FAILED


def held(security: ListenerSecurity | None, conn: Connection) -> bool:
    """Whether the connection waits on the coordinator: a SASL step being checked, or an
    answer held back. The handshake timeout does not run out on it meanwhile; it does on
    a password check still waiting for its turn (a guesser's queue is not kept open)."""
    if conn.sasl is FAILED:
        return True
    return conn.sasl_busy and not (security is not None and security.waiting(conn.conn_id))


def _ready(host: GreetingHost, conn: Connection) -> None:
    conn.handshaken = True
    host.greeted(conn)


def _refuse(conn: Connection, code: ErrorCode, message: str, client_id: str) -> None:
    conn.log.warning(
        "handshake_failed", error_code=code.name, error_message=message, client_id=client_id
    )
    conn.send(HandshakeResult(error_code=code, error_message=message))


def _failed(
    host: GreetingHost,
    security: ListenerSecurity,
    conn: Connection,
    session: SaslSession,
    exc: AuthenticationFailed,
) -> None:
    delay = security.failed(conn.host, host.loop.time())
    conn.log.warning(
        "authentication_failed",
        mechanism=session.mechanism,
        username=exc.username,
        reason=exc.reason,
        delay_ms=round(delay * 1000),
        failures=security.failures(conn.host, host.loop.time()),
    )
    conn.sasl = FAILED  # its check still counts for its group until answered
    conn.inbox.clear()  # what it sent after the failed message is not handled: nothing
    conn.hold_input()  # more is read from it, and it is answered only after the delay

    def answer() -> None:
        if conn.sasl is not FAILED:
            return  # the connection closed meanwhile (and was counted out then)
        security.check_ended(conn.conn_id)
        conn.sasl = None
        message = f"{FAILED_MESSAGE} ({session.mechanism})"
        conn.send(
            SaslAuthenticateResult(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=message
            )
        )
        conn.close("authentication failed")

    host.loop.call_later(delay, answer)
