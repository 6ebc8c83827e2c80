"""Reusable pieces for tests that talk to a real server: a raw client, a server, members,
waiting.

``RawClient`` speaks bytes over asyncio streams so tests can send what a well-behaved
client never would. ``running_server`` runs a ``CoordinatorServer`` on 127.0.0.1, port 0,
with a fast group configuration, on the test's own event loop.
"""

from __future__ import annotations

import asyncio
import json
import signal
import ssl as ssl_module
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import replace
from typing import Any

import msgspec
from huddle.testing.settle import settled as settled  # the tests take it from here
from structlog.typing import EventDict

from huddle.client.listener import RebalanceListener
from huddle.client.member import Member
from huddle.coordinator.config import GroupConfig, ServerConfig
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ErrorCode
from huddle.protocol.framing import ClientCodec, FrameReader, frame_header
from huddle.protocol.messages import (
    PROTOCOL_VERSION,
    Call,
    Handshake,
    HandshakeResult,
    JoinGroupRequest,
    JoinGroupResponse,
    Message,
    Protocol,
    Reply,
    Request,
    Response,
    ServerFrame,
    SyncGroupRequest,
    SyncGroupResponse,
)

FAST_GROUP = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100)
DEADLINE_S = 10.0  # generous upper bound for anything a test waits on
MEMBER_SESSION_MS = 2_000  # the members of ``member()``: a death is noticed within 2 s


def fast_server_config(**overrides: Any) -> ServerConfig:
    """127.0.0.1, port 0, the fast group rules, then ``overrides``."""
    base = ServerConfig(host="127.0.0.1", port=0, group=FAST_GROUP, shutdown_timeout_ms=2_000)
    return replace(base, **overrides)


@asynccontextmanager
async def running_server(config: ServerConfig | None = None) -> AsyncIterator[CoordinatorServer]:
    server = CoordinatorServer(config if config is not None else fast_server_config())
    await server.start()
    try:
        yield server
    finally:
        await server.close()


async def wait_until(
    predicate: Callable[[], bool], *, wait_s: float = DEADLINE_S, what: str = "condition"
) -> None:
    """Poll ``predicate`` on the event loop until it holds; AssertionError at the deadline."""
    deadline = time.monotonic() + wait_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {wait_s} s waiting for {what}")
        await asyncio.sleep(0.005)


async def within(awaitable: Awaitable[Any], wait_s: float = DEADLINE_S) -> Any:
    return await asyncio.wait_for(awaitable, wait_s)


def frame(body: bytes) -> bytes:
    """A whole frame (header + body) around raw body bytes."""
    return frame_header(len(body)) + body


def packed(value: object) -> bytes:
    """Any value as a msgpack frame: lets tests send messages of the wrong shape."""
    return frame(msgspec.msgpack.encode(value))


def error_events(logs: list[EventDict]) -> list[EventDict]:
    """Captured structlog events at error level or above, or carrying a traceback."""
    return [
        e
        for e in logs
        if e.get("log_level") in ("error", "critical", "exception") or e.get("exc_info")
    ]


class RawClient:
    """A byte-level client: send anything, read decoded server frames, observe closing."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._frames = FrameReader()
        self._codec = ClientCodec()
        self._queue: list[ServerFrame] = []
        self._correlation_ids = iter(range(1, 1 << 62))

    @classmethod
    async def open(
        cls, port: int, host: str = "127.0.0.1", ssl: ssl_module.SSLContext | None = None
    ) -> RawClient:
        reader, writer = await within(asyncio.open_connection(host, port, ssl=ssl))
        return cls(reader, writer)

    async def send_bytes(self, data: bytes) -> None:
        self.writer.write(data)
        await within(self.writer.drain())

    async def send(self, message: Message) -> None:
        await self.send_bytes(self._codec.encode(message))

    async def handshake(
        self,
        version: int = PROTOCOL_VERSION,
        client_id: str = "raw",
        incarnation: bytes | None = None,
    ) -> None:
        await self.send(Handshake(version=version, client_id=client_id, incarnation=incarnation))
        result = await self.read_frame()
        assert isinstance(result, HandshakeResult), result
        assert result.error_code == 0, result

    async def call(self, request: Request) -> Response:
        correlation_id = next(self._correlation_ids)
        await self.send(Call(correlation_id=correlation_id, request=request))
        reply = await self.read_frame()
        assert isinstance(reply, Reply), reply
        assert reply.correlation_id == correlation_id
        return reply.response

    async def read_frame(self, wait_s: float = DEADLINE_S) -> ServerFrame | None:
        """The next frame, or None once the server has closed the connection."""
        deadline = time.monotonic() + wait_s
        while not self._queue:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no frame from the server within {wait_s} s")
            try:
                data = await asyncio.wait_for(self.reader.read(65_536), remaining)
            except (ConnectionResetError, ssl_module.SSLError):
                return None
            if not data:
                return None
            for body in self._frames.feed(data):
                self._queue.append(self._codec.decode(body))
        return self._queue.pop(0)

    async def frames_until_closed(self, wait_s: float = DEADLINE_S) -> list[ServerFrame]:
        """Every frame the server sends until it closes the connection (within ``wait_s``)."""
        frames: list[ServerFrame] = []
        deadline = time.monotonic() + wait_s
        while True:
            frame_ = await self.read_frame(max(deadline - time.monotonic(), 0.001))
            if frame_ is None:
                return frames
            frames.append(frame_)

    async def close(self) -> None:
        self.writer.close()
        with suppress(ConnectionError, OSError):
            await within(self.writer.wait_closed())


def member(bootstrap: str, **options: Any) -> Member:
    """A member of group ``g`` on topic ``t``: cooperative-sticky, a 2 s session, a
    heartbeat every 200 ms; ``options`` change any of it."""
    settings: dict[str, Any] = {
        "group_id": "g",
        "topics": ["t"],
        "assignors": ["cooperative-sticky"],
        "session_timeout_ms": MEMBER_SESSION_MS,
        "heartbeat_interval_ms": 200,
        "rebalance_timeout_ms": 5_000,
    }
    return Member(bootstrap, **{**settings, **options})


def partitions(n: int, topic: str = "t") -> frozenset[TopicPartition]:
    """Partitions 0 to n - 1 of ``topic``."""
    return frozenset(TopicPartition(topic, p) for p in range(n))


async def eventually(
    check: Callable[[], Awaitable[bool]], *, wait_s: float = DEADLINE_S, what: str = "condition"
) -> None:
    """Like ``wait_until`` for a condition that needs to ask the server."""
    deadline = time.monotonic() + wait_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {wait_s} s waiting for {what}")
        await asyncio.sleep(0.01)


def join_request(
    member_id: str = "",
    *,
    group_id: str = "g",
    session_timeout_ms: int = 10_000,
    rebalance_timeout_ms: int = 10_000,
) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group_id,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[Protocol(name="range", metadata=b"m")],
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
    )


async def raw_member(
    port: int,
    group_id: str,
    *,
    session_timeout_ms: int = 6_000,
    incarnation: bytes | None = None,
) -> tuple[RawClient, str, int]:
    """A one-member group joined and synced over a ``RawClient`` (client id ``raw-GROUP``,
    presenting ``incarnation``): (client, member id, generation). The member is the leader
    and assigns itself nothing."""
    client = await RawClient.open(port)
    await client.handshake(client_id=f"raw-{group_id}", incarnation=incarnation)
    request = join_request(group_id=group_id, session_timeout_ms=session_timeout_ms)
    joined = await client.call(request)
    assert isinstance(joined, JoinGroupResponse), joined
    if joined.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        joined = await client.call(msgspec.structs.replace(request, member_id=joined.member_id))
        assert isinstance(joined, JoinGroupResponse), joined
    assert joined.error_code == ErrorCode.NONE, joined
    synced = await client.call(
        SyncGroupRequest(
            group_id=group_id, generation_id=joined.generation_id, member_id=joined.member_id
        )
    )
    assert isinstance(synced, SyncGroupResponse), synced
    assert synced.error_code == ErrorCode.NONE, synced
    return client, joined.member_id, joined.generation_id


LOG_TAIL = 60  # the server's last log lines a failing test shows


def log_line(line: bytes) -> dict[str, Any]:
    """A line of a server's stderr as a log event: its JSON event, or anything else (a
    traceback, a warning Python printed) as ``{"event": "stderr", "line": ...}``."""
    text = line.decode(errors="replace").rstrip("\r\n")
    try:
        event = json.loads(text)
    except ValueError:
        event = None
    if isinstance(event, dict) and "event" in event:
        return event
    return {"event": "stderr", "line": text}


def log_tail(events: list[dict[str, Any]], ended: str) -> str:
    """The last ``LOG_TAIL`` lines of a server's log, as it wrote them, and how it ended."""
    shown = events[-LOG_TAIL:]
    lines = [e["line"] if e["event"] == "stderr" else json.dumps(e) for e in shown]
    head = f"the server {ended}; its last {len(shown)} of {len(events)} log lines:"
    return "\n".join([head, *lines])


@asynccontextmanager
async def serve_process(
    *flags: str, preexec_fn: Callable[[], None] | None = None
) -> AsyncIterator[tuple[asyncio.subprocess.Process, int, list[dict[str, Any]]]]:
    """``huddle serve`` (uvloop, as users run it) on a free port, with fast group rules and
    ``flags``: (process, port, its log events, read as they come; a line that is not JSON
    is an event ``stderr``). When the block fails, or the server ended by itself, the
    server's last log lines are shown with the failure (and on stderr)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "huddle",
        "serve",
        "--port",
        "0",
        "--log-format",
        "json",
        "--min-session-timeout-ms",
        "100",
        "--initial-rebalance-delay-ms",
        "0",
        *flags,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=preexec_fn,
    )
    assert process.stderr is not None
    events: list[dict[str, Any]] = []
    listening: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def read_log() -> None:
        assert process.stderr is not None
        async for line in process.stderr:
            event = log_line(line)
            events.append(event)
            if event["event"] == "server_listening" and not listening.done():
                listening.set_result(int(event["port"]))
        if not listening.done():
            listening.set_exception(AssertionError("the server ended before it listened"))

    reader = asyncio.create_task(read_log())
    failure: BaseException | None = None
    try:
        port = await asyncio.wait_for(asyncio.shield(listening), DEADLINE_S)
        yield process, port, events
    except BaseException as exc:
        failure = exc
        raise
    finally:
        ended_by_itself = process.returncode is not None
        if not ended_by_itself:
            process.send_signal(signal.SIGCONT)
            process.terminate()
            await asyncio.wait_for(process.wait(), DEADLINE_S)
        await asyncio.wait_for(reader, DEADLINE_S)
        if failure is not None or ended_by_itself:
            how = "ended by itself" if ended_by_itself else "was stopped by the test"
            tail = log_tail(events, f"{how} (exit code {process.returncode})")
            print(tail, file=sys.stderr)
            if failure is not None:
                failure.add_note(tail)


class Recorder(RebalanceListener):
    """Every callback, in order, with when it happened."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, frozenset[TopicPartition], float]] = []

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        self.calls.append(("revoked", revoked, time.monotonic()))

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        self.calls.append(("assigned", assigned, time.monotonic()))

    async def on_partitions_lost(self, lost: frozenset[TopicPartition]) -> None:
        self.calls.append(("lost", lost, time.monotonic()))

    def names(self) -> list[tuple[str, list[int]]]:
        return [(name, sorted(tp.partition for tp in ps)) for name, ps, _ in self.calls]

    def clear(self) -> None:
        self.calls.clear()
