"""The benchmarks' lean client: a raw connection and the group members that load a server.

* ``RawConnection`` is an ``asyncio.Protocol`` speaking the huddle framing: requests by
  correlation id, notices to handlers, writes batched per event-loop turn, and a ``sink``
  that takes the raw bytes instead (the heartbeat benchmark's load generator).
* ``RawMember`` is one group member on a ``RawConnection``: the KIP-394 two-step join,
  sync (the leader assigns each member its own id), heartbeats, and rejoining on a
  ``RebalanceStarted`` notice or a ``REBALANCE_IN_PROGRESS`` heartbeat answer.

The client side is lean on purpose (no anyio task per connection, no per-request logging):
thousands of members share one process and the figures are meant to be the server's.
The server processes the members talk to are started by ``bench.processes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import socket
import ssl as ssl_module
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from bench.processes import HOST
from huddle.protocol.errors import ErrorCode, error_name
from huddle.protocol.framing import ClientCodec, FrameReader
from huddle.protocol.messages import (
    PROTOCOL_VERSION,
    Call,
    Handshake,
    HandshakeResult,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    Notice,
    Protocol,
    ProtocolError,
    RebalanceStarted,
    Reply,
    Request,
    Response,
    SaslAuthenticateResult,
    SyncGroupAssignment,
    SyncGroupRequest,
)

E = ErrorCode


# --- one connection -------------------------------------------------------------------


class CallFailedError(Exception):
    """A request was not answered: the connection closed, or the deadline passed."""


class RawConnection(asyncio.Protocol):
    """A client connection. ``call`` matches replies by correlation id; notices go to
    ``notice_handlers``; when ``sink`` is set, received bytes go to it undecoded."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.reader = FrameReader()
        self.codec = ClientCodec()
        self.sink: Callable[[bytes], None] | None = None
        self.notice_handlers: list[Callable[[Notice], None]] = []
        self.protocol_error: ProtocolError | None = None
        self.closed: asyncio.Future[None] = self.loop.create_future()
        self._waiters: dict[int, asyncio.Future[Response]] = {}
        self._hello: asyncio.Future[HandshakeResult] = self.loop.create_future()
        self._ids = itertools.count(1)
        self._out: list[bytes] = []

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is a Transport in behaviour, not by inheritance.
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.sink is not None:
            self.sink(data)
            return
        decode = self.codec.decode
        for body in self.reader.feed(data):
            frame = decode(body)
            if isinstance(frame, Reply):
                waiter = self._waiters.pop(frame.correlation_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(frame.response)
            elif isinstance(frame, HandshakeResult):
                if not self._hello.done():
                    self._hello.set_result(frame)
            elif isinstance(frame, ProtocolError):
                self.protocol_error = frame
            elif isinstance(frame, SaslAuthenticateResult):
                pass  # this raw client does not authenticate
            else:
                for handler in self.notice_handlers:
                    handler(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = CallFailedError(f"connection closed: {exc or self.protocol_error or 'by peer'}")
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(reason)
        self._waiters.clear()
        if not self._hello.done():
            self._hello.cancel()  # a connection without a handshake has nobody waiting
        if not self.closed.done():
            self.closed.set_result(None)

    # sending

    def write(self, data: bytes) -> None:
        """Queue bytes; everything queued in one loop turn goes out in one write."""
        if not self._out:
            self.loop.call_soon(self._flush)
        self._out.append(data)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    async def call(self, request: Request, timeout: float = 60.0) -> Response:
        correlation_id = next(self._ids)
        waiter: asyncio.Future[Response] = self.loop.create_future()
        self._waiters[correlation_id] = waiter
        self.write(self.codec.encode(Call(correlation_id=correlation_id, request=request)))
        try:
            return await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            raise CallFailedError(
                f"no answer to {type(request).__name__} within {timeout} s"
            ) from None
        finally:
            self._waiters.pop(correlation_id, None)

    async def handshake(self, client_id: str, timeout: float = 10.0) -> None:
        self.write(self.codec.encode(Handshake(version=PROTOCOL_VERSION, client_id=client_id)))
        result = await asyncio.wait_for(self._hello, timeout)
        if result.error_code != E.NONE:
            raise CallFailedError(f"handshake refused: {error_name(result.error_code)}")

    async def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.closed), 5.0)


async def open_connection(
    port: int,
    client_id: str = "bench",
    *,
    handshake: bool = True,
    ssl: ssl_module.SSLContext | None = None,
) -> RawConnection:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(RawConnection, HOST, port, ssl=ssl)
    if handshake:
        await conn.handshake(client_id)
    return conn


async def open_connections(
    port: int, count: int, client_id: str = "bench", *, batch: int = 200
) -> list[RawConnection]:
    """``count`` handshaken connections, opened ``batch`` at a time (the accept backlog)."""
    conns: list[RawConnection] = []
    for start in range(0, count, batch):
        n = min(batch, count - start)
        conns += await asyncio.gather(
            *(open_connection(port, f"{client_id}-{start + i}") for i in range(n))
        )
    return conns


async def close_all(conns: Sequence[RawConnection]) -> None:
    await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)


# --- one simulated member -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberSettings:
    group_id: str
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 60_000
    heartbeat_interval_ms: int | None = 3_000  # None: never heartbeat (idle members)
    protocol_name: str = "bench"
    metadata: bytes = b"\x00\x01bench"
    assignment: bytes | None = None  # what the leader gives each member; None: its own id
    max_join_attempts: int = 50


# (member, generation synced, time.perf_counter() when its SyncGroup answer arrived);
# perf_counter, because uvloop's loop.time() ticks in whole milliseconds
SyncedHook = Callable[["RawMember", int, float], None]


class RawMember:
    """One member: ``join_and_sync`` once, then ``run`` (heartbeats and rejoins) until
    cancelled or ``until`` (loop time); ``leave`` to go cleanly."""

    def __init__(
        self,
        conn: RawConnection,
        settings: MemberSettings,
        *,
        on_synced: SyncedHook | None = None,
    ) -> None:
        self.conn = conn
        self.settings = settings
        self.on_synced = on_synced
        self.member_id = ""
        self.generation = -1  # of the last JoinGroup response
        self.synced_generation = -1
        self.leader = ""
        self.assignment = b""
        self.rebalances = 0
        self.heartbeats = 0
        self.errors: dict[str, int] = {}
        self.rejoin = asyncio.Event()
        self.rejoin_from = -1  # the generation the group left, as far as this member knows
        self.left = False
        conn.notice_handlers.append(self._on_notice)

    def _on_notice(self, notice: Notice) -> None:
        if (
            isinstance(notice, RebalanceStarted)
            and notice.group_id == self.settings.group_id
            and notice.generation_id >= self.generation
            and not self.left
        ):
            self.rejoin_from = max(self.rejoin_from, notice.generation_id)
            self.rejoin.set()

    def _error(self, code: int) -> None:
        name = error_name(code)
        self.errors[name] = self.errors.get(name, 0) + 1

    def _join_request(self) -> JoinGroupRequest:
        s = self.settings
        return JoinGroupRequest(
            group_id=s.group_id,
            member_id=self.member_id,
            protocol_type="consumer",
            protocols=[Protocol(name=s.protocol_name, metadata=s.metadata)],
            session_timeout_ms=s.session_timeout_ms,
            rebalance_timeout_ms=s.rebalance_timeout_ms,
        )

    async def join_and_sync(self) -> int:
        """Join (two steps for a new member) and sync; returns the generation synced."""
        s = self.settings
        for _ in range(s.max_join_attempts):
            joined = await self.conn.call(self._join_request())
            assert isinstance(joined, JoinGroupResponse), joined
            code = joined.error_code
            if code == E.MEMBER_ID_REQUIRED:
                self.member_id = joined.member_id
                continue
            if code != E.NONE:
                self._error(code)
                if code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
                    self.member_id = ""
                if code in (E.REBALANCE_IN_PROGRESS, E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
                    continue
                raise CallFailedError(
                    f"JoinGroup failed: {error_name(code)}: {joined.error_message}"
                )
            self.generation = joined.generation_id
            self.leader = joined.leader
            if self.rejoin_from < self.generation:
                self.rejoin.clear()  # a notice about a generation this join already left
            assignments = [
                SyncGroupAssignment(
                    member_id=m.member_id,
                    assignment=m.member_id.encode() if s.assignment is None else s.assignment,
                )
                for m in joined.members
            ]
            synced = await self.conn.call(
                SyncGroupRequest(
                    group_id=s.group_id,
                    generation_id=self.generation,
                    member_id=self.member_id,
                    assignments=assignments,
                )
            )
            code = getattr(synced, "error_code", E.UNKNOWN_SERVER_ERROR)
            if code != E.NONE:
                self._error(code)
                if code == E.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                continue  # REBALANCE_IN_PROGRESS and the like: join again
            self.assignment = getattr(synced, "assignment", b"")
            self.synced_generation = self.generation
            self.rebalances += 1
            if self.on_synced is not None:
                self.on_synced(self, self.generation, time.perf_counter())
            return self.generation
        raise CallFailedError(
            f"no stable generation after {s.max_join_attempts} JoinGroup attempts"
        )

    async def run(self, until: float, max_heartbeats: int = 1_000_000) -> None:
        """Heartbeat every interval (first one at a random phase); rejoin when told to.

        Bounded: returns at loop time ``until`` or after ``max_heartbeats`` heartbeats.
        """
        loop = self.conn.loop
        s = self.settings
        interval = None if s.heartbeat_interval_ms is None else s.heartbeat_interval_ms / 1000
        next_beat = loop.time() + (random.uniform(0, interval) if interval else 0.0)
        while not self.left and loop.time() < until and self.heartbeats < max_heartbeats:
            if not self.rejoin.is_set():
                wake = until if interval is None else min(next_beat, until)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.rejoin.wait(), max(wake - loop.time(), 0.0))
            if self.left:
                return
            if self.rejoin.is_set():
                await self.join_and_sync()
                if interval is not None:
                    next_beat = loop.time() + interval  # as Kafka's client: reset on join
                continue
            if interval is None or loop.time() < next_beat:
                continue
            next_beat = loop.time() + interval
            self.heartbeats += 1
            answer = await self.conn.call(
                HeartbeatRequest(
                    group_id=s.group_id, generation_id=self.generation, member_id=self.member_id
                )
            )
            code = getattr(answer, "error_code", E.UNKNOWN_SERVER_ERROR)
            if code == E.NONE:
                continue
            if code == E.UNKNOWN_MEMBER_ID:
                self._error(code)
                self.member_id = ""
            elif code != E.REBALANCE_IN_PROGRESS:
                self._error(code)
            if not self.left:
                self.rejoin_from = max(self.rejoin_from, self.generation)
                self.rejoin.set()

    async def leave(self) -> None:
        self.left = True
        self.rejoin.set()
        answer = await self.conn.call(
            LeaveGroupRequest(
                group_id=self.settings.group_id, members=[MemberIdentity(member_id=self.member_id)]
            )
        )
        code = getattr(answer, "error_code", E.UNKNOWN_SERVER_ERROR)
        if code != E.NONE:
            raise CallFailedError(f"LeaveGroup failed: {code.name}")
