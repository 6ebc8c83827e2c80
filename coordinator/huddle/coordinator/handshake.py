"""A connection's first frames: the handshake, then the SASL exchange if the listener
requires one. Until they are done the connection may send nothing else (a request then is
refused and the connection closed), and the handshake timeout counts for all of them.

A password check (a SCRAM proof, a PLAIN password) waits its turn: a few at once per
address group (``huddle.coordinator.security.throttle``). A check that succeeds gives its
turn back at once; one that fails keeps it until its answer's time, whether or not the
client stays to read the answer. A failed authentication is logged with the peer's address
and the reason; the client is told one thing whatever was wrong (SASL_AUTHENTICATION_FAILED,
"invalid credentials"), after a delay that grows with its address group's recent failures,
and the connection is closed.

The SASL exchange (``exchange_step``) serves every wire: huddle's sends its steps in
``SaslAuthenticate`` frames and is answered through ``HuddleReplies``; the Kafka listener's
SaslAuthenticate requests go through the same steps (``huddle.coordinator.kafka.sasl``).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Final, Protocol

from huddle.coordinator.config import ServerConfig
from huddle.coordinator.connection import Connection
from huddle.coordinator.effects import Peer, incarnation_digest
from huddle.coordinator.security.acls import ANONYMOUS
from huddle.coordinator.security.listener import FAILED_MESSAGE, ListenerSecurity
from huddle.coordinator.security.sasl import AuthenticationFailedError, SaslSession
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    SUPPORTED_VERSIONS,
    Handshake,
    HandshakeResult,
    SaslAuthenticate,
    SaslAuthenticateResult,
)

FAILED = "failed"  # conn.sasl once the exchange failed: the connection only waits to close


class SaslHost(Protocol):
    """What a SASL exchange needs of the server, whichever wire it comes by."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def greeted(self, conn: Connection) -> None:
        """The connection may send requests now: stop watching it for a stalled handshake."""

    def backlogged(self, conn: Connection) -> None:
        """Frames may wait in ``conn.inbox`` that were not handled yet."""


class HandshakeHost(SaslHost, Protocol):
    @property
    def config(self) -> ServerConfig: ...

    @property
    def node_id(self) -> str: ...


class SaslReplies(Protocol):
    """How a wire answers the steps of an exchange: huddle's wire sends
    ``SaslAuthenticateResult`` frames, Kafka's answers its SaslAuthenticate request."""

    def challenge(self, conn: Connection, data: bytes) -> None:
        """The exchange goes on: ``data`` is the server's next message."""

    def authenticated(self, conn: Connection, data: bytes, principal: str) -> None:
        """The exchange succeeded as ``principal``; ``data`` is the server's last message."""

    def refused(self, conn: Connection, mechanism: str) -> None:
        """The exchange failed: the client is told SASL_AUTHENTICATION_FAILED and one
        message whatever was wrong (the reason is in the log); the connection closes."""

    @property
    def close_wait_s(self) -> float:
        """How long the close after a refusal waits for the client to close first (0: it
        closes at once, behind the answer)."""


class HuddleReplies:
    """huddle's own wire: ``SaslAuthenticateResult`` frames."""

    def challenge(self, conn: Connection, data: bytes) -> None:
        conn.send(SaslAuthenticateResult(auth_bytes=data))

    def authenticated(self, conn: Connection, data: bytes, principal: str) -> None:
        conn.send(SaslAuthenticateResult(auth_bytes=data, complete=True, principal=principal))

    close_wait_s = 0.0

    def refused(self, conn: Connection, mechanism: str) -> None:
        conn.send(
            SaslAuthenticateResult(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                error_message=f"{FAILED_MESSAGE} ({mechanism})",
            )
        )


HUDDLE_REPLIES: Final = HuddleReplies()


def handshake(
    host: HandshakeHost, security: ListenerSecurity | None, conn: Connection, hello: Handshake
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
    digest = incarnation_digest(hello.incarnation)  # the token itself is kept nowhere
    conn.peer = Peer(conn.conn_id, hello.client_id, conn.host, conn.peer.principal, digest)
    conn.bind_log(client_id=True)
    conn.sasl = begun
    if begun is None:
        _ready(host, conn)
    conn.send(
        HandshakeResult(
            version=hello.version,
            disconnect_grace_ms=host.config.group.disconnect_grace_ms,
            node_id=host.node_id,
            sasl_mechanisms=list(security.mechanisms) if security is not None else [],
            principal="" if conn.peer.principal == ANONYMOUS else conn.peer.principal,
        )
    )
    conn.log.debug("handshake_done", version=hello.version, sasl=hello.sasl_mechanism)


def sasl_step(
    host: SaslHost,
    security: ListenerSecurity | None,
    conn: Connection,
    frame: SaslAuthenticate,
) -> None:
    """A ``SaslAuthenticate`` frame of huddle's wire."""
    exchange_step(host, security, conn, frame.auth_bytes, HUDDLE_REPLIES)


def exchange_step(
    host: SaslHost,
    security: ListenerSecurity | None,
    conn: Connection,
    data: bytes,
    replies: SaslReplies,
) -> None:
    """One client message of the exchange under way on ``conn`` (``conn.sasl``), from
    any wire: checked in its turn (a password check), answered through ``replies``."""
    session = conn.sasl
    if security is None or not isinstance(session, SaslSession) or conn.handshaken:
        conn.fail(
            ErrorCode.ILLEGAL_SASL_STATE,
            "no SASL exchange is under way on this connection",
            event="handshake_failed",
        )
        return
    if session.checks_password:

        def turn() -> None:  # later, outside the server's pass
            conn.sasl_busy = False
            if conn.closing:  # gone while it waited: no check made, the turn goes on
                security.check_ended(conn.conn_id)
                return
            _step(host, security, conn, session, data, replies)
            _resume(host, conn)

        if not security.check_turn(conn.conn_id, conn.host, turn):
            # others of its address group are being checked: it waits, reading on (a
            # client that goes away is seen to) and handling nothing; the handshake
            # timeout still runs
            conn.sasl_busy = True
            return
    _step(host, security, conn, session, data, replies)


def _step(
    host: SaslHost,
    security: ListenerSecurity,
    conn: Connection,
    session: SaslSession,
    data: bytes,
    replies: SaslReplies,
) -> None:
    if session.costly:
        # PLAIN derives the key again (PBKDF2): off the event loop, in a small pool, so
        # that guesses cannot stall everyone's heartbeats. Nothing else of this
        # connection is handled until it is done.
        conn.sasl_busy = True  # read on (a client that goes away is seen to), handle nothing

        def check() -> tuple[bytes, bool] | None:
            if conn.closing:  # gone while it waited in the pool: no key derived for it
                return None
            return session.step(data)

        try:
            work = host.loop.run_in_executor(security.executor, check)
        except RuntimeError:  # the pool is shut: the coordinator is stopping
            security.check_ended(conn.conn_id)
            conn.sasl_busy = False
            return
        work.add_done_callback(lambda done: _stepped(host, security, conn, session, done, replies))
        return
    try:
        answer, complete = session.step(data)
    except AuthenticationFailedError as exc:
        _failed(host, security, conn, session, exc, replies)
        return
    except Exception as exc:  # a fault in the check: a failure, never a turn kept for ever
        fault = AuthenticationFailedError(f"check failed: {exc!r}")
        _failed(host, security, conn, session, fault, replies)
        return
    _answer(host, security, conn, session, answer, complete, replies)


def _stepped(
    host: SaslHost,
    security: ListenerSecurity,
    conn: Connection,
    session: SaslSession,
    done: asyncio.Future[tuple[bytes, bool] | None],
    replies: SaslReplies,
) -> None:
    """A PLAIN check is done. One made counts as every check does, even if its client has
    gone meanwhile: a failure keeps its turn until its answer's time (a guesser closing
    each connection once its password is sent gets no more checks)."""
    conn.sasl_busy = False
    exc = None if done.cancelled() else done.exception()
    if done.cancelled() or (exc is None and done.result() is None):
        security.check_ended(conn.conn_id)  # no check made
        return
    if isinstance(exc, AuthenticationFailedError):
        _failed(host, security, conn, session, exc, replies)
    elif exc is not None:
        fault = AuthenticationFailedError(f"check failed: {exc!r}")
        _failed(host, security, conn, session, fault, replies)
    else:
        result = done.result()
        assert result is not None
        if conn.closing:
            security.check_ended(conn.conn_id)  # a success nobody is there to take
            return
        _answer(host, security, conn, session, *result, replies)
    if not conn.closing:
        _resume(host, conn)


def _resume(host: SaslHost, conn: Connection) -> None:
    """After a step answered outside the server's pass: write it now, and handle what the
    client sent meanwhile, unless the connection still waits on the coordinator."""
    conn.flush()
    if not conn.sasl_busy and conn.sasl is not FAILED and not conn.closing:
        conn.release_input()
        host.backlogged(conn)


def _answer(
    host: SaslHost,
    security: ListenerSecurity,
    conn: Connection,
    session: SaslSession,
    answer: bytes,
    complete: bool,
    replies: SaslReplies,
) -> None:
    if not complete:
        replies.challenge(conn, answer)
        return
    # The check succeeded: its turn goes to the next check of its group now. Its answer
    # waits as long as a failure's would while the group failed lately (a guesser cannot
    # read an answer's silence as "wrong"), holding up nobody else.
    security.check_ended(conn.conn_id)
    wait = security.penalty(conn.host, host.loop.time())
    if wait <= 0:
        _authenticated(host, conn, session, answer, replies)
        return
    conn.sasl_busy = True
    conn.hold_input()

    def later() -> None:
        conn.sasl_busy = False
        if conn.closing:
            return
        _authenticated(host, conn, session, answer, replies)
        conn.flush()
        conn.release_input()
        host.backlogged(conn)

    host.loop.call_later(wait, later)


def _authenticated(
    host: SaslHost, conn: Connection, session: SaslSession, answer: bytes, replies: SaslReplies
) -> None:
    conn.sasl = None
    conn.peer = replace(conn.peer, principal=session.principal)
    conn.bind_log(principal=True)
    conn.log.info("authenticated", mechanism=session.mechanism)
    _ready(host, conn)
    replies.authenticated(conn, answer, session.principal)


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


def timed_out(
    security: ListenerSecurity | None, conn: Connection, timeout_ms: int
) -> tuple[ErrorCode, str]:
    """What a connection not greeted within the handshake timeout is told: that its
    password check waited its turn all that time, if it did (COORDINATOR_NOT_AVAILABLE:
    it may try again later), else that it said no hello in time."""
    if security is not None and security.waiting(conn.conn_id):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, (
            f"authentication attempts from {security.group_of(conn.host)} are being "
            f"throttled (recent failures, or many at once): this one waited {timeout_ms} ms "
            "for its turn and was not checked; try again later"
        )
    return ErrorCode.INVALID_REQUEST, f"no handshake within {timeout_ms} ms"


def _ready(host: SaslHost, conn: Connection) -> None:
    conn.handshaken = True
    host.greeted(conn)


def _refuse(conn: Connection, code: ErrorCode, message: str, client_id: str) -> None:
    conn.log.warning(
        "handshake_failed", error_code=code.name, error_message=message, client_id=client_id
    )
    conn.send(HandshakeResult(error_code=code, error_message=message))


def _failed(
    host: SaslHost,
    security: ListenerSecurity,
    conn: Connection,
    session: SaslSession,
    exc: AuthenticationFailedError,
    replies: SaslReplies,
) -> None:
    delay = security.failed(conn.host, host.loop.time())
    security.check_failed(conn.conn_id, delay)  # its turn, until its answer's time
    conn.log.warning(
        "authentication_failed",
        mechanism=session.mechanism,
        username=exc.username,
        reason=exc.reason,
        delay_ms=round(delay * 1000),
        failures=security.failures(conn.host, host.loop.time()),
    )
    if conn.closing:
        return  # nobody to answer
    conn.sasl = FAILED
    conn.inbox.clear()  # what it sent after the failed message is not handled: nothing
    conn.hold_input()  # more is read from it, and it is answered only after the delay

    def answer() -> None:
        if conn.sasl is not FAILED:
            return  # the connection closed meanwhile
        conn.sasl = None
        replies.refused(conn, session.mechanism)
        conn.close("authentication failed", after_peer_s=replies.close_wait_s)

    host.loop.call_later(delay, answer)
