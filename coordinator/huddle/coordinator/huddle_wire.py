"""huddle's own wire, the first ``Wire``: msgpack frames behind a 4-byte length prefix.

``take`` decodes a frame body (``ServerCodec``) and sorts it: a ``Call`` goes to the core
once the connection is logged in; a ``Handshake`` or ``SaslAuthenticate`` goes to the
login (``huddle.coordinator.handshake``). A frame that cannot be read is answered here:

- msgpack of a wrong shape with a readable correlation id: an ``ErrorResponse``
  (INVALID_REQUEST), and the connection stays open (the first few logged, then one line
  per thousand);
- anything else (not msgpack, no correlation id, before the handshake): a
  ``ProtocolError`` saying why, and the connection is closed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import msgspec

from huddle.coordinator import handshake
from huddle.coordinator.connection import Connection
from huddle.coordinator.handshake import FAILED, HandshakeHost
from huddle.coordinator.security.listener import ListenerSecurity
from huddle.logs import printable
from huddle.protocol.errors import ErrorCode
from huddle.protocol.framing import FrameReader, ServerCodec
from huddle.protocol.messages import (
    Call,
    ClientFrame,
    ErrorResponse,
    Handshake,
    Reply,
    SaslAuthenticate,
)

_REASON_CHARS: Final = 300  # of a decoder's message echoed back and logged
_BAD_REQUESTS_LOGGED: Final = 10  # per connection; then one line per _BAD_REQUESTS_EVERY
_BAD_REQUESTS_EVERY: Final = 1_000


class HuddleWire:
    """huddle's msgpack wire on one listener: a ``Wire[Connection]``."""

    __slots__ = ("_codec", "_decode", "host", "security")

    in_order = False  # huddle's clients match answers to requests by correlation id
    disconnect_grace_ms = None  # the server's --disconnect-grace-ms
    listener = "huddle"

    def __init__(self, host: HandshakeHost, security: ListenerSecurity | None) -> None:
        self.host = host
        self.security = security
        self._codec = ServerCodec()  # one codec serves every connection (it keeps no state)
        # the codec's decoder itself: its decode() only renames the rare errors (read
        # again through it in _unreadable), and a frame costs one Python call less
        self._decode = msgspec.msgpack.Decoder(ClientFrame).decode

    def framing(self, max_frame_bytes: int) -> FrameReader:
        return FrameReader(max_frame_bytes)

    def codec(self) -> ServerCodec:
        return self._codec  # it keeps nothing of a connection: one serves them all

    def take(self, conn: Connection, body: bytes) -> Call | None:
        if conn.sasl is FAILED:
            conn.inbox.clear()  # its failure is answered after a delay: nothing else
            return None
        try:
            frame = self._decode(body)
        except msgspec.ValidationError as exc:
            self._invalid_frame(conn, body, exc)
            return None
        except msgspec.DecodeError as exc:
            conn.fail(
                ErrorCode.CORRUPT_MESSAGE, f"frame body is not msgpack: {exc}", event="bad_frame"
            )
            return None
        except Exception:  # anything else the decoder raises on hostile input
            self._unreadable(conn, body)
            return None
        if type(frame) is Call:
            if conn.handshaken:
                return frame
            _not_logged_in(conn)
        elif type(frame) is Handshake:
            handshake.handshake(self.host, self.security, conn, frame)
        elif type(frame) is SaslAuthenticate:
            handshake.sasl_step(self.host, self.security, conn, frame)
        return None

    def overdue(self, conn: Connection, timeout_ms: int) -> tuple[ErrorCode, str] | None:
        if handshake.held(self.security, conn):
            return None
        return handshake.timed_out(self.security, conn, timeout_ms)

    def after_answers(self, conn: Connection, then: Callable[[], None]) -> None:
        then()  # answers are matched by correlation id: none is waited for

    def gone(self, conn: Connection) -> None:
        if self.security is not None:
            self.security.connection_gone(conn.conn_id)  # its place in the queue, if any
            if handshake.in_exchange(conn):
                conn.sasl = None  # a failure answer still to come is not sent

    def _unreadable(self, conn: Connection, body: bytes) -> None:
        """The decoder raised neither a DecodeError nor a ValidationError (a string that
        is not UTF-8, nesting too deep): read again through the codec, which says which."""
        try:
            self._codec.decode(body)
        except msgspec.DecodeError as exc:
            conn.fail(
                ErrorCode.CORRUPT_MESSAGE, f"frame body is not msgpack: {exc}", event="bad_frame"
            )
        except Exception as exc:
            conn.fail(
                ErrorCode.CORRUPT_MESSAGE,
                f"frame body cannot be read ({type(exc).__name__})",
                event="bad_frame",
            )

    def _invalid_frame(self, conn: Connection, body: bytes, exc: msgspec.ValidationError) -> None:
        reason = printable(str(exc), _REASON_CHARS)  # it may quote what the client sent
        correlation_id = self._codec.correlation_id(body) if conn.handshaken else None
        if correlation_id is None:
            event = "bad_frame" if conn.handshaken else "handshake_failed"
            conn.fail(ErrorCode.INVALID_REQUEST, f"invalid frame: {reason}", event=event)
            return
        conn.bad_requests += 1
        count = conn.bad_requests
        if count <= _BAD_REQUESTS_LOGGED or count % _BAD_REQUESTS_EVERY == 0:
            conn.log.warning(  # the first few, then one line per thousand: a flood of them
                "bad_request",  # must not flood the log
                correlation_id=correlation_id,
                error_message=reason,
                client_id=conn.client_id,
                bad_requests=count,
            )
        conn.send(
            Reply(
                correlation_id=correlation_id,
                response=ErrorResponse(
                    error_code=ErrorCode.INVALID_REQUEST, error_message=f"invalid request: {reason}"
                ),
            )
        )


def _not_logged_in(conn: Connection) -> None:
    """A request before the handshake (and the SASL exchange) is done."""
    if conn.sasl is not None:
        message = "authenticate first: the SASL exchange is not complete"
        conn.fail(ErrorCode.ILLEGAL_SASL_STATE, message, event="handshake_failed")
    else:
        message = "expected a handshake first"
        conn.fail(ErrorCode.INVALID_REQUEST, message, event="handshake_failed")
