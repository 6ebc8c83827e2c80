"""One client connection of the coordinator's server: an asyncio protocol.

It reads frames (its wire's ``Framing``) and hands whole ones to its ``CoordinatorServer``,
encodes what the server sends it (its wire's ``Codec``) into a write buffer flushed once per
event-loop pass, watches its own flow control and write-buffer limit, and closes with a
``ProtocolError`` saying why when its input cannot be read on.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from functools import partial
from typing import Final, Protocol, cast

import structlog
from structlog.typing import FilteringBoundLogger

from huddle.coordinator.config import ServerConfig
from huddle.coordinator.effects import Peer
from huddle.coordinator.wire import Wire
from huddle.protocol.errors import (
    CorruptMessageError,
    ErrorCode,
    MessageTooLargeError,
    UsageError,
)
from huddle.protocol.framing import HEADER_SIZE
from huddle.protocol.messages import (
    PROTOCOL_VERSION,
    ErrorResponse,
    Message,
    ProtocolError,
    Reply,
    ServerFrame,
    unknown_to,
)

log = structlog.get_logger("huddle.server")

_DEFAULT_HIGH_WATER: Final = 64 * 1024
_CHECK_BUFFER_FROM: Final = 64 * 1024  # queued bytes past which a send offers them to the socket
_OUTBOX_FRAMES: Final = 10_000  # frames waiting for a client to read before it is dropped
_LOG_CLIENT_ID: Final = 1  # Connection.log_keys: the client id is bound
_LOG_PRINCIPAL: Final = 2  # the principal is


class _NoFrames(deque[bytes]):
    """The inbox of every connection with no frame waiting: empty, and never added to (a
    connection takes a deque of its own for the frames it reads)."""

    def _refuse(self, *_: object) -> None:
        raise UsageError("the shared empty inbox takes no frames")

    append = appendleft = extend = extendleft = insert = _refuse


NO_FRAMES: Final[deque[bytes]] = _NoFrames()


class ConnectionHost(Protocol):
    """What a connection needs of the server that accepted it: its settings and loop, and
    four things to tell it. The server implements this; a connection knows nothing else of
    it (and this module does not import the server)."""

    @property
    def config(self) -> ServerConfig: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def connection_made(self, conn: Connection) -> None:
        """The connection is up: register it (or refuse it)."""

    def connection_lost(self, conn: Connection) -> None:
        """The connection is gone."""

    def frames_received(self, conn: Connection) -> None:
        """Whole frame bodies arrived in ``conn.inbox``, in order."""

    def backlogged(self, conn: Connection) -> None:
        """Frames wait in ``conn.inbox`` that were not handled yet."""

    def watch(self, conn: Connection, watched: bool) -> None:
        """Whether the connection is to be watched for a stalled handshake or frame."""

    def partial_frame(self, conn: Connection, change: int) -> bool:
        """The bytes of the connection's unfinished frame changed by ``change``; False if
        the server holds too many such bytes to take this connection's."""

    def flush_later(self, conn: Connection) -> None:
        """The connection has frames queued: flush it at the end of this event."""


class Connection(asyncio.Protocol):
    """One client connection: bytes -> frames -> the server; frames -> bytes."""

    __slots__ = (
        "bad_frame",
        "bad_requests",
        "client_id",
        "close_reason",
        "closing",
        "codec",
        "conn_id",
        "frame_started",
        "greeted",
        "handshaken",
        "held",
        "host",
        "in_flight",
        "inbox",
        "last_active",
        "linger",
        "log_keys",
        "muted",
        "opened_at",
        "outbox",
        "partial",
        "peer",
        "peer_done",
        "peer_port",
        "pending",
        "reader",
        "reading",
        "sasl",
        "sasl_busy",
        "server",
        "transport",
        "version",
        "waits_for_peer",
        "wire",
        "withheld",
        "write_paused",
    )

    def __init__(self, server: ConnectionHost, conn_id: int, wire: Wire[Connection]) -> None:
        self.server = server
        self.conn_id = conn_id
        self.wire = wire  # what its frames are: framing, codec, the core's requests
        self.reader = wire.framing(server.config.max_frame_bytes)
        self.codec = wire.codec()
        self.transport: asyncio.Transport | None = None
        self.client_id = ""
        self.host = ""
        self.peer = Peer(conn_id)
        self.greeted = False  # its handshake arrived
        self.handshaken = False  # it may send requests: handshake (and SASL) done
        # the SASL exchange under way (a SaslSession), "failed" once it failed, or None
        self.sasl: object | None = None
        self.sasl_busy = False  # a SASL step is being checked, or its answer held back
        self.version = PROTOCOL_VERSION  # the protocol version its handshake named
        self.withheld: frozenset[type[Message]] = frozenset()  # types that version lacks
        self.closing = False
        self.close_reason = "closed by peer"
        self.write_paused = False
        self.opened_at = 0.0
        self.frame_started: float | None = None  # loop time the buffered partial frame began
        self.linger: asyncio.TimerHandle | None = None  # aborts a close that does not flush
        self.waits_for_peer = False  # closing, once the peer closes or ``linger`` fires
        self.pending = bytearray()  # encoded frames not yet written
        # whole frame bodies read and not yet handled; between reads that left none, the
        # shared empty one (a deque holds a block of 64 slots, about 600 bytes, from the
        # start: an idle connection holds none)
        self.inbox: deque[bytes] = NO_FRAMES
        # frames waiting for the client to read (None: none, as on most connections; a
        # deque holds a block of 64 slots, about 600 bytes, from the start)
        self.outbox: deque[ServerFrame] | None = None
        self.reading = True  # False while reading is paused (backlog or a full write buffer)
        self.last_active = 0.0  # loop time of the last read
        self.partial = 0  # bytes of an unfinished frame, as counted by the server
        self.peer_done = False  # the peer shut its side with frames still to handle
        # a bad frame header read behind whole frames: those are handled, then it closes
        self.bad_frame: MessageTooLargeError | CorruptMessageError | None = None
        self.held = 0  # answers to its requests waiting for the data dir
        # a wire that answers in request order (``Wire.in_order``): the correlation id of
        # the request being handled, and whether it is answered later (its connection
        # muted: nothing more of it is handled, or read, until it is)
        self.in_flight: int | None = None
        self.muted = False  # also set by a wire whose answers wait, too many (``unmute``)
        self.bad_requests = 0  # requests it sent that could not be read
        self.peer_port = 0  # the peer's port (0: unknown); its address is logged with ``log``
        self.log_keys = 0  # which of the connection's facts ``log`` binds besides (_LOG_*)

    @property
    def log(self) -> FilteringBoundLogger:
        """Its logger: the events carry ``conn_id``, the peer's address once known, and its
        ``client_id`` and ``principal`` once bound (``bind_log``). Bound when something is
        logged (rarely: warnings, a close), not held: a bound logger and its context are
        about 500 bytes, and an idle connection logs nothing."""
        context: dict[str, object] = {"conn_id": self.conn_id}
        if self.peer_port:
            context["peer"] = f"{self.host}:{self.peer_port}"
        keys = self.log_keys
        if keys & _LOG_CLIENT_ID:
            context["client_id"] = self.client_id
        if keys & _LOG_PRINCIPAL:
            context["principal"] = self.peer.principal
        bound: FilteringBoundLogger = log.bind(**context)
        return bound

    def bind_log(self, *, client_id: bool = False, principal: bool = False) -> None:
        """From now on ``log`` binds the connection's ``client_id`` (its handshake was
        accepted) and its ``peer.principal`` (it authenticated)."""
        self.log_keys |= (_LOG_CLIENT_ID if client_id else 0) | (_LOG_PRINCIPAL if principal else 0)

    # --- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is a Transport in behaviour, not by inheritance.
        self.transport = transport = cast(asyncio.Transport, transport)
        peername = transport.get_extra_info("peername")
        if isinstance(peername, tuple) and peername:
            self.host = str(peername[0])
            self.peer_port = int(peername[1]) if len(peername) > 1 else 0
        self.peer = Peer(self.conn_id, "", self.host)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        limit = self.server.config.max_write_buffer_bytes
        if limit < 2 * _DEFAULT_HIGH_WATER:
            transport.set_write_buffer_limits(high=max(limit // 2, 1))
        self.server.connection_made(self)

    def data_received(self, data: bytes) -> None:
        if self.closing or self.bad_frame is not None:
            return
        server = self.server
        reader = self.reader
        self.last_active = server.loop.time()
        bodies, bad = reader.split(data)
        if bad is not None:
            if not bodies and not self.inbox:
                self._fail_bad_frame(bad)
                return
            # the whole frames before it are handled first, then it closes (``input_done``)
            self.bad_frame = bad
            self.hold_input()
        if reader.buffered != self.partial:
            change, self.partial = reader.buffered - self.partial, reader.buffered
            if not server.partial_frame(self, change):
                return
        if bodies:
            if self.inbox is NO_FRAMES:
                self.inbox = deque(bodies)
            else:
                self.inbox.extend(bodies)
            server.frames_received(self)
            if not self.inbox:
                self.inbox = NO_FRAMES
        if self.closing:
            return
        if self.bad_frame is not None:
            if not self.inbox and not self.held:
                self.input_done()
            return
        if self.reader.mid_frame:
            if bodies or self.frame_started is None:
                self.frame_started = server.loop.time()
                server.watch(self, True)
        elif self.frame_started is not None:
            self.frame_started = None
            if self.handshaken:
                server.watch(self, False)

    def eof_received(self) -> bool:
        if self.reader.mid_frame and not self.closing:
            self.log.warning("bad_frame", reason="connection ended in the middle of a frame")
            self.close_reason = "closed by peer mid-frame"
        if (self.inbox or self.held) and not self.closing:
            self.peer_done = True  # answer what it sent first; the server closes after
            return True
        return False  # close our side too

    @property
    def ends_after_input(self) -> bool:
        """It closes once what it sent is handled and no answer is held: the peer shut its
        side, or a bad frame header came behind whole frames."""
        return self.peer_done or self.bad_frame is not None

    def input_done(self) -> None:
        """What it sent is handled and no answer is held: close it if it ends so."""
        if self.bad_frame is not None:
            bad, self.bad_frame = self.bad_frame, None
            self._fail_bad_frame(bad)
        elif self.peer_done:
            self.close("closed by peer")

    def _fail_bad_frame(self, bad: MessageTooLargeError | CorruptMessageError) -> None:
        """A bad frame header: fail the connection once the answers its wire owes for
        the requests before it have left (``Wire.after_answers``)."""
        self.wire.after_answers(self, partial(self.fail, bad.code, bad.message, event="bad_frame"))

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and not self.closing:
            self.close_reason = f"connection lost: {exc}"
        self.closing = True
        self.pending = bytearray()
        self.inbox.clear()
        self.outbox = None
        if self.linger is not None:
            self.linger.cancel()
            self.linger = None
        self.server.connection_lost(self)

    def pause_writing(self) -> None:
        self.write_paused = True
        self.hold_input()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.last_active = self.server.loop.time()  # it reads what it is sent
        if self.outbox:
            self._send_queued()
            if self.write_paused:
                return
        if self.inbox:
            self.server.backlogged(self)  # it resumes reading once they are handled
        else:
            self.release_input()

    def hold_input(self) -> None:
        """Read nothing more from the socket for now."""
        if self.reading and self.transport is not None and not self.closing:
            self.reading = False
            self.transport.pause_reading()

    def release_input(self) -> None:
        """Read on, unless answers are still unread by the peer or frames wait."""
        if self.reading or self.write_paused or self.inbox:
            return
        if self.transport is not None and not self.closing:
            self.reading = True
            self.transport.resume_reading()

    # --- sending and closing ----------------------------------------------------------

    def handshook(self, version: int) -> None:
        """The peer speaks protocol ``version``: frames of newer types are not sent to it."""
        self.version = version
        self.withheld = unknown_to(version)

    def send(self, frame: ServerFrame) -> None:
        """Queue a frame; the server flushes every connection's queue once per event.

        A message type newer than the connection's protocol version is not sent: the peer
        could not read it.
        """
        if self.closing or self.transport is None:
            return
        if self.in_flight is not None:
            self._answering(frame)
        if self.withheld and type(frame) in self.withheld:
            self.log.debug("frame_withheld", frame=type(frame).__name__, version=self.version)
            return
        if self.outbox:  # frames wait for the client to read: in order, behind them
            self._queue(frame)
            return
        self._encode(frame)

    def _encode(self, frame: ServerFrame) -> None:
        pending = self.pending
        if not pending:
            self.server.flush_later(self)
        start = len(pending)
        self.codec.encode_into(frame, pending)
        size = len(pending) - start - HEADER_SIZE
        config = self.server.config
        if size > config.max_response_bytes and not self.codec.limits_size:
            del pending[start:]
            self._too_large(frame, size, config.max_response_bytes)
        if len(pending) > _CHECK_BUFFER_FROM and not self.closing:
            self.flush()  # offered to the socket now: what it cannot take is what is unread

    def send_when_read(self, frame: ServerFrame) -> None:
        """Like ``send``, but while the client has not read what it was sent (answers held
        for the data dir, released together), the frame waits here, unencoded, and goes
        out as the client reads: a reading client is not dropped for answers it was due."""
        if self.write_paused or self.outbox:
            if not self.closing and self.transport is not None:
                if self.in_flight is not None:
                    self._answering(frame)
                self._queue(frame)
            return
        self.send(frame)

    def _answering(self, frame: ServerFrame) -> None:
        """On a wire that answers in request order: once the request in flight is
        answered, the next one may be handled (after this answer, in order)."""
        if type(frame) is not Reply or frame.correlation_id != self.in_flight:
            return
        self.in_flight = None
        if self.muted:
            self.unmute()

    def unmute(self) -> None:
        """It may be served again (it was ``muted``): the frames it sent meanwhile first."""
        self.muted = False
        if self.closing:
            return
        if self.inbox:
            self.server.backlogged(self)
        else:
            self.release_input()

    def _queue(self, frame: ServerFrame) -> None:
        if self.outbox is None:
            self.outbox = deque()
        self.outbox.append(frame)
        if len(self.outbox) > _OUTBOX_FRAMES:
            limit = _OUTBOX_FRAMES
            self.log.warning("write_buffer_overflow", queued_frames=len(self.outbox), limit=limit)
            self.abort(f"over {limit} frames waiting: the client is not reading")

    def _send_queued(self) -> None:
        """Frames that waited for the client to read: as many as it takes now."""
        outbox = self.outbox
        while outbox and not self.write_paused and not self.closing:
            self._encode(outbox.popleft())
        if not outbox:
            self.outbox = None
        self.flush()

    def _too_large(self, frame: ServerFrame, size: int, limit: int) -> None:
        """An answer larger than any client takes: the caller gets an error saying so; a
        notice that large is not sent (logged)."""
        kind = type(frame).__name__
        if type(frame) is not Reply:
            self.log.warning("notice_too_large", frame=kind, size=size, limit=limit)
            return
        kind = type(frame.response).__name__
        self.log.warning("response_too_large", response=kind, size=size, limit=limit)
        self.codec.encode_into(
            Reply(
                correlation_id=frame.correlation_id,
                response=ErrorResponse(
                    error_code=ErrorCode.MESSAGE_TOO_LARGE,
                    error_message=(
                        f"the answer would be {size} bytes, over the limit of {limit} "
                        "(--max-response-bytes); ask for less in one request"
                    ),
                ),
            ),
            self.pending,
        )

    def _check_buffer(self) -> None:
        """Whether what the client has left unread (in the transport's buffer) is over the
        write buffer limit: then the client is not reading, and is dropped."""
        transport = self.transport
        buffered = transport.get_write_buffer_size() if transport is not None else 0
        limit = self.server.config.max_write_buffer_bytes
        if buffered > limit:
            self.log.warning("write_buffer_overflow", buffered_bytes=buffered, limit=limit)
            self.abort(f"write buffer over {limit} bytes: the client is not reading")

    def flush(self) -> None:
        """One write (one syscall) for every frame queued since the last flush."""
        pending, transport = self.pending, self.transport
        if not pending or transport is None:
            return
        self.pending = bytearray()
        transport.write(pending)
        if self.write_paused:
            self._check_buffer()
        else:  # the socket took it: a connection written to is not idle (as Kafka's)
            self.last_active = self.server.loop.time()

    def fail(
        self, code: ErrorCode, message: str, *, event: str, drain: bool = True, **details: object
    ) -> None:
        """Log a warning, tell the client why in a ProtocolError, then close (by default
        reading and dropping what the client still sends, see ``close``)."""
        if self.closing:
            return
        self.log.warning(event, error_code=code.name, error_message=message, **details)
        self.send(ProtocolError(error_code=code, error_message=message))
        self.close(f"{code.name}: {message}", drain=drain)

    def close(self, reason: str, *, drain: bool = False, after_peer_s: float = 0.0) -> None:
        """Close after flushing what is buffered; abort if that takes too long.

        With ``drain`` (the peer is still sending what we will not read), only our side is
        shut, and what arrives meanwhile is read and dropped until the peer closes too:
        closing a socket with unread input resets it, and the reset can overtake the
        ProtocolError that says why.

        With ``after_peer_s``, what was just sent is the peer's last answer and the close
        waits for the peer to close first, at most that long, reading and dropping what it
        sends: a client that reads the answer and the close in one go may report only the
        close (kafka-python does). Closing it again closes it at once."""
        if self.closing and self.waits_for_peer:
            self.waits_for_peer = False
            self._close_transport()
            return
        if self.closing or self.transport is None:
            return
        self.flush()
        self.closing = True
        self.close_reason = reason
        self.inbox.clear()
        if self.partial:  # what it began will not be read: the server no longer holds it
            self.server.partial_frame(self, -self.partial)
            self.partial = 0
        self.server.watch(self, False)
        transport = self.transport
        if after_peer_s > 0:
            self.waits_for_peer = True
            self._read_and_drop()
            self.linger = self.server.loop.call_later(after_peer_s, self.close, reason)
        elif drain and transport.can_write_eof():
            transport.write_eof()
            self._read_and_drop()
            self._abort_later()
        else:
            self._close_transport()

    def _read_and_drop(self) -> None:
        """Read on while closing (``data_received`` drops it all): the peer's close is seen."""
        if not self.reading and self.transport is not None:
            self.reading = True
            self.transport.resume_reading()

    def _close_transport(self) -> None:
        if self.linger is not None:
            self.linger.cancel()
        if self.transport is not None:
            self.transport.close()
            self._abort_later()

    def _abort_later(self) -> None:
        assert self.transport is not None
        linger = self.server.config.shutdown_timeout_ms / 1000
        self.linger = self.server.loop.call_later(linger, self.transport.abort)

    def abort(self, reason: str) -> None:
        if self.transport is None:
            return
        if not self.closing:
            self.closing = True
            self.close_reason = reason
        self.pending = bytearray()
        self.server.watch(self, False)
        self.transport.abort()
