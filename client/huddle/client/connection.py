"""One client connection to a coordinator (anyio): requests by correlation id, pushed notices.

``connect()`` opens the TCP connection, does the handshake and runs one background reader
in a task group it owns; leaving the ``async with`` block closes the connection and leaves
nothing running. Many requests may be in flight at once; replies come back in any order
and are matched to their callers by correlation id. Notices (``RebalanceStarted``,
``TopicMetadataChanged``, ``ProtocolError``) go to ``Connection.notices``, a bounded
stream: when the application does not drain it, the oldest notice is dropped (and logged)
rather than stalling the reader.

Opening the stream and the handshake (with its SASL exchange and the reasons a connection
closes unanswered) are in ``huddle.client.handshake``; ``ConnectionClosedError``,
``RequestTimeoutError`` and ``check`` are defined in ``huddle.client.connection_errors`` and
importable from here.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar, get_args

import anyio
import anyio.abc
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from huddle.client.checks import require_number, require_type
from huddle.client.connection_errors import ConnectionClosedError, RequestTimeoutError, check
from huddle.client.handshake import HandshakeExchange, open_stream
from huddle.client.security import NO_SECURITY, Security
from huddle.client.unreachable import LOGIN_TIMEOUT_S, ConnectTimeoutError
from huddle.logs import library_logger
from huddle.protocol.addresses import parse_address
from huddle.protocol.errors import (
    ErrorCode,
    HuddleError,
    InvalidArgumentError,
    UnknownServerError,
    UnsupportedVersionError,
    error_name,
    raise_for,
)
from huddle.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from huddle.protocol.messages import (
    MAX_INCARNATION,
    MIN_INCARNATION,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    Call,
    ClientFrame,
    ErrorResponse,
    HandshakeResult,
    Notice,
    ProtocolError,
    Reply,
    Request,
    Response,
    SaslAuthenticateResult,
    ServerFrame,
)

__all__ = [
    "Connection",
    "ConnectionClosedError",
    "RequestTimeoutError",
    "check",
    "connect",
    "parse_bootstrap",
]

log = library_logger("huddle.client.connection")

# The ``type`` tags of every frame this client knows how to read.
SERVER_FRAME_TAGS = frozenset(str(member.__struct_config__.tag) for member in get_args(ServerFrame))

DEFAULT_NOTICE_BUFFER = 256

R = TypeVar("R")


LOADING_WAIT_S = 30.0  # how long a call waits for a loading coordinator without a timeout
LOADING_BACKOFF_S = (0.05, 1.0)  # first and longest pause between tries


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    """``"HOST:PORT"`` (IPv6 as ``"[::1]:9292"``) -> ``(host, port)``; ValueError if malformed."""
    return parse_address(bootstrap, what="bootstrap address")


class _Waiter:
    __slots__ = ("error", "event", "response")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.response: Response | None = None
        self.error: HuddleError | None = None


class Connection:
    """A handshaken connection. Made by ``connect()``; not constructed directly."""

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        opened: HandshakeExchange,
        *,
        bootstrap: str,
        client_id: str,
        notice_buffer: int = DEFAULT_NOTICE_BUFFER,
        notices: bool = True,
        security: Security = NO_SECURITY,
    ) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.principal = opened.principal  # who the coordinator says this client is
        self.client_id = client_id
        self.server_version = opened.server_version
        self.disconnect_grace_ms = opened.disconnect_grace_ms  # as the coordinator announced it
        # the coordinator closed this connection because it is stopping: it removes no
        # member for the close (see ``ProtocolError.stopping``)
        self.coordinator_stopping = False
        self.node_id = opened.node_id  # the node connected to, as it named itself
        self._stream = stream
        self._reader = opened.reader
        self._early = opened.early  # frame bodies read with the handshake's last answer
        self._codec = opened.codec
        self._send_lock = anyio.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, _Waiter] = {}
        self._closed = False
        self._close_reason = ""
        self._close_code: int | None = None
        self._deliver_notices = notices
        send, receive = anyio.create_memory_object_stream[Notice](max(notice_buffer, 1))
        self._notice_send: MemoryObjectSendStream[Notice] = send
        self._notice_oldest: MemoryObjectReceiveStream[Notice] = receive.clone()
        self.notices: MemoryObjectReceiveStream[Notice] = receive
        self.notices_dropped = 0
        self._log = log.bind(bootstrap=bootstrap, client_id=client_id)
        if security.sasl_mechanism is not None:
            self._log = self._log.bind(principal=opened.principal)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def close_reason(self) -> str:
        return self._close_reason

    # --- requests ---------------------------------------------------------------------

    async def request(
        self,
        request: Request,
        *,
        timeout: float | None = None,
    ) -> Response:
        """Send one request and wait for its response (which may be an ``ErrorResponse``).

        Raises ConnectionClosedError if the connection is or becomes closed before the
        answer arrives, TimeoutError after ``timeout`` seconds (None: no limit).
        """
        if self._closed:
            raise self._closed_error()
        correlation_id = next(self._ids)
        waiter = _Waiter()
        self._pending[correlation_id] = waiter
        try:
            with anyio.fail_after(timeout):
                await self._send(Call(correlation_id=correlation_id, request=request))
                await waiter.event.wait()
        except TimeoutError:
            kind = type(request).__name__
            raise RequestTimeoutError(f"no answer to {kind} within {timeout:g} s") from None
        finally:
            self._pending.pop(correlation_id, None)
        if waiter.error is not None:
            raise waiter.error
        assert waiter.response is not None
        return waiter.response

    async def call(
        self,
        request: Request,
        expect: type[R],
        *,
        timeout: float | None = None,
    ) -> R:
        """``request``, then raise for an ErrorResponse or a top-level error code; typed.
        COORDINATOR_LOAD_IN_PROGRESS (the coordinator is replaying its data dir) is retried
        with backoff until ``timeout`` (30 s without one) runs out, as Kafka's clients do."""
        response = await self.request_loaded(request, timeout=timeout)
        if isinstance(response, ErrorResponse):
            raise_for(response.error_code, response.error_message)
        if not isinstance(response, expect):
            kind = type(response).__name__
            raise UnknownServerError(f"expected a {expect.__name__}, got a {kind}")
        return check(response)

    async def request_loaded(self, request: Request, *, timeout: float | None = None) -> Response:
        """``request``, sent again while the answer is COORDINATOR_LOAD_IN_PROGRESS."""
        deadline = anyio.current_time() + (timeout if timeout is not None else LOADING_WAIT_S)
        delay = LOADING_BACKOFF_S[0]
        while True:
            left = deadline - anyio.current_time()
            response = await self.request(request, timeout=max(left, 0.001))
            code = getattr(response, "error_code", None)
            if (
                code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                or anyio.current_time() + delay >= deadline
            ):
                return response
            await anyio.sleep(delay)
            delay = min(delay * 2, LOADING_BACKOFF_S[1])

    async def aclose(self) -> None:
        """Close the connection; pending requests fail with ConnectionClosedError."""
        self._mark_closed("closed by the client")
        with anyio.CancelScope(shield=True):
            await self._stream.aclose()

    # --- internals --------------------------------------------------------------------

    def _closed_error(self) -> ConnectionClosedError:
        return ConnectionClosedError(self._close_reason or "connection closed", self._close_code)

    async def _send(self, frame: ClientFrame) -> None:
        data = self._codec.encode(frame)
        try:
            async with self._send_lock:
                await self._stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self._mark_closed(self._close_reason or f"connection lost: {exc}")
            raise self._closed_error() from exc

    async def _read_loop(self) -> None:
        self._close_code = None
        reason = "the coordinator closed the connection"
        try:
            bodies, self._early = self._early, []
            while not self._closed:
                for body in bodies:
                    frame = self._decode(body)
                    stop = None if frame is None else self._on_frame(frame)
                    if stop is not None:
                        reason = stop
                        return
                try:
                    data = await self._stream.receive()
                except anyio.EndOfStream:
                    break
                bodies = self._reader.feed(data)
        except anyio.ClosedResourceError:
            reason = self._close_reason or "closed by the client"
        except (anyio.BrokenResourceError, OSError) as exc:
            reason = f"connection lost: {exc}"
        except (HuddleError, msgspec.MsgspecError) as exc:
            reason = f"bad frame from the coordinator: {exc}"
        finally:
            self._mark_closed(reason, self._close_code)
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()

    def _decode(self, body: bytes) -> ServerFrame | None:
        """One frame; None for what a newer coordinator may send that this client cannot read.

        A notice of a type this client does not know is logged and skipped. A reply whose
        response cannot be read fails that one call (UnknownServerError). Anything else that
        does not decode is a broken stream: the error closes the connection.
        """
        try:
            return self._codec.decode(body)
        except msgspec.ValidationError as exc:
            tag = self._codec.tag(body)
            if tag is None or tag in SERVER_FRAME_TAGS - {"reply"}:
                raise
            if tag == "reply":
                correlation_id = self._codec.correlation_id(body)
                if correlation_id is None:
                    raise
                waiter = self._pending.pop(correlation_id, None)
                if waiter is not None:
                    waiter.error = UnknownServerError(f"unreadable reply: {exc}")
                    waiter.event.set()
                self._log.warning("reply_unreadable", correlation_id=correlation_id, error=str(exc))
                return None
            self._log.info("notice_unknown", notice_type=tag)
            return None

    def _on_frame(self, frame: ServerFrame) -> str | None:
        """Route one frame; a reason to close the connection, or None to go on."""
        if isinstance(frame, Reply):
            waiter = self._pending.pop(frame.correlation_id, None)
            if waiter is not None:
                waiter.response = frame.response
                waiter.event.set()
        elif isinstance(frame, ProtocolError):
            self._close_code = frame.error_code
            self.coordinator_stopping = frame.stopping
            self._log.warning(
                "protocol_error_received",
                error_code=error_name(frame.error_code),
                error_message=frame.error_message,
            )
            self._notice(frame)
            return f"{frame.error_message} ({error_name(frame.error_code)})"
        elif isinstance(frame, HandshakeResult | SaslAuthenticateResult):
            return f"unexpected {type(frame).__name__} from the coordinator"
        else:
            self._notice(frame)
        return None

    def _notice(self, notice: Notice) -> None:
        if not self._deliver_notices:
            return
        try:
            self._notice_send.send_nowait(notice)
        except anyio.WouldBlock:
            dropped = self._notice_oldest.receive_nowait()
            self.notices_dropped += 1
            self._log.info(
                "notice_dropped",
                notice=type(dropped).__name__,
                dropped_total=self.notices_dropped,
            )
            self._notice_send.send_nowait(notice)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    def _mark_closed(self, reason: str, code: int | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_reason = reason
        self._close_code = code
        for waiter in self._pending.values():  # answered ones left _pending already
            waiter.error = self._closed_error()
            waiter.event.set()
        self._pending.clear()
        self._notice_send.close()
        self._notice_oldest.close()


@asynccontextmanager
async def connect(
    bootstrap: str,
    *,
    client_id: str = "huddle-client",
    timeout: float = 10.0,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    notice_buffer: int = DEFAULT_NOTICE_BUFFER,
    notices: bool = True,
    security: Security = NO_SECURITY,
    incarnation: bytes | None = None,
) -> AsyncIterator[Connection]:
    """Connect to ``bootstrap`` ("HOST:PORT") within ``timeout`` seconds, then handshake
    within ``timeout`` seconds more (a SASL login: at least ``LOGIN_TIMEOUT_S``, as the
    coordinator may hold its answer back after failed logins from this address).

    Raises InvalidArgumentError (a ValueError) for a malformed address or a bad argument,
    CoordinatorUnreachableError (an OSError) when no connection can be made to it
    (refused, unreachable), ConnectTimeoutError (a TimeoutError) when it does not take the
    connection or answer the handshake in time (a coordinator that refuses this client's
    protocol version but speaks an older one this client does is handshaken again with
    that), UnsupportedVersionError
    (or another HuddleError) when the coordinator refuses the handshake. ``notices=False``
    discards pushed notices. With ``security``, the connection is TLS and/or authenticated
    by SASL: TlsError when the TLS handshake fails, SaslAuthenticationFailedError when the
    credentials are refused. ``incarnation`` (16 to 64 random bytes, kept secret) names the
    client instance: a Member sends the same on each of its connections, and only a
    connection presenting it moves the member to itself (docs/coordinator.md).
    """
    host, port = parse_bootstrap(bootstrap)
    require_number("timeout", timeout, positive=True)
    require_number("max_frame_bytes", max_frame_bytes, positive=True, whole=True)
    require_type("security", security, Security, "a Security")
    if incarnation is not None:
        require_type("incarnation", incarnation, bytes, "bytes or None")
        if not MIN_INCARNATION <= len(incarnation) <= MAX_INCARNATION:
            raise InvalidArgumentError(
                f"incarnation must be {MIN_INCARNATION} to {MAX_INCARNATION} bytes, "
                f"not {len(incarnation)}"
            )
    login = security.sasl_mechanism is not None
    limit = max(timeout, LOGIN_TIMEOUT_S) if login else timeout
    version = PROTOCOL_VERSION
    while True:
        stream = await open_stream(bootstrap, host, port, security, timeout)
        opened = HandshakeExchange(
            stream,
            client_id=client_id,
            security=security,
            incarnation=incarnation,
            max_frame_bytes=max_frame_bytes,
            version=version,
        )
        try:
            with anyio.fail_after(limit):
                await opened.run(bootstrap)
            break
        except TimeoutError:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
            raise ConnectTimeoutError(bootstrap, limit, "handshake", login=login) from None
        except UnsupportedVersionError:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
            # an older coordinator: once more, with the newest version both speak
            common = [v for v in opened.refused_for if v in SUPPORTED_VERSIONS and v < version]
            if not common:
                raise
            version = max(common)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
            raise
    conn = Connection(
        stream,
        opened,
        bootstrap=bootstrap,
        client_id=client_id,
        notice_buffer=notice_buffer,
        notices=notices,
        security=security,
    )
    error: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(conn._read_loop, name=f"huddle reader {bootstrap}")
        try:
            yield conn
        except Exception as exc:
            # Re-raised below, outside the task group, so callers see it unwrapped.
            error = exc
        finally:
            await conn.aclose()
            tg.cancel_scope.cancel()
    if error is not None:
        raise error
