"""Fuzz a running coordinator: fuzzed frames over many connections, each answer checked,
and a bystander member of another group that must not notice.

Each connection sends (usually) a handshake, a batch of ``FrameFuzzer`` frames and a valid
probe request, all in one write, then shuts its side and reads everything the coordinator
sends until it closes. What the protocol promises, checked for every connection:

- every frame the coordinator sends can be read;
- the probe is answered, unless the coordinator closed the connection, and then its last
  frame is the ProtocolError that says why (a wrong length header can make the probe part
  of an unfinished frame: then the close needs no reason);
- the coordinator answers within the deadline (no connection hangs).

The bystander heartbeats throughout; every heartbeat must be answered NONE. Whoever runs the
coordinator checks its log for errors (``FuzzReport.violations`` holds what this side saw).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from huddle.chaos.fuzz import FrameFuzzer
from huddle.protocol.errors import ErrorCode, HuddleError, error_name
from huddle.protocol.framing import ClientCodec, FrameReader
from huddle.protocol.messages import (
    PROTOCOL_VERSION,
    Call,
    ErrorResponse,
    Handshake,
    HandshakeResult,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    ListTopicsRequest,
    Protocol,
    ProtocolError,
    Reply,
    Request,
    Response,
    ServerFrame,
    SyncGroupRequest,
)

HOST: Final = "127.0.0.1"
PROBE_ID: Final = 2**62  # the probe's correlation id: no fuzzed frame uses it
BYSTANDER_GROUP: Final = "fuzz-bystander"
SOFT_CONNECTIONS: Final = 0.7  # connections whose frames are all answerable (not fatal)


@dataclass
class FuzzReport:
    frames: int = 0  # fuzzed frames sent
    connections: int = 0
    replies: int = 0  # calls answered (with a response or an ErrorResponse)
    mutations: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)  # what the coordinator answered
    violations: list[str] = field(default_factory=list)
    heartbeats: int = 0
    heartbeat_max_ms: float = 0.0
    seconds: float = 0.0

    @property
    def failure_kinds(self) -> list[str]:
        """The distinct refusals seen: ProtocolErrors and ErrorResponses, by code."""
        return sorted(k for k in self.answers if k.startswith(("protocol_error", "error_response")))


class BystanderClosedError(HuddleError, ConnectionError):
    """The coordinator closed the well-behaved bystander's connection (a violation)."""


class _Bystander:
    """A one-member group on its own connection, heartbeating every ``interval_s``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.codec, self.frames = ClientCodec(), FrameReader()
        self.ids = iter(range(1, 2**62))

    async def call(self, request: Request) -> Response:
        correlation_id = next(self.ids)
        self.writer.write(self.codec.encode(Call(correlation_id=correlation_id, request=request)))
        while True:
            data = await self.reader.read(65_536)
            if not data:
                raise BystanderClosedError("the coordinator closed the bystander's connection")
            for body in self.frames.feed(data):
                frame = self.codec.decode(body)
                if isinstance(frame, Reply) and frame.correlation_id == correlation_id:
                    return frame.response
                if isinstance(frame, HandshakeResult):
                    continue

    async def join(self) -> HeartbeatRequest:
        self.writer.write(
            self.codec.encode(Handshake(version=PROTOCOL_VERSION, client_id="fuzz-bystander"))
        )
        request = JoinGroupRequest(
            group_id=BYSTANDER_GROUP,
            protocol_type="consumer",
            protocols=[Protocol(name="range")],
            session_timeout_ms=30_000,
        )
        joined = await self.call(request)
        assert isinstance(joined, JoinGroupResponse), joined
        if joined.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            request = JoinGroupRequest(
                group_id=BYSTANDER_GROUP,
                member_id=joined.member_id,
                protocol_type="consumer",
                protocols=[Protocol(name="range")],
                session_timeout_ms=30_000,
            )
            joined = await self.call(request)
            assert isinstance(joined, JoinGroupResponse), joined
        await self.call(
            SyncGroupRequest(
                group_id=BYSTANDER_GROUP,
                generation_id=joined.generation_id,
                member_id=joined.member_id,
            )
        )
        return HeartbeatRequest(
            group_id=BYSTANDER_GROUP,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
        )


async def _heartbeat(port: int, report: FuzzReport, done: asyncio.Event, interval_s: float) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    bystander = _Bystander(reader, writer)
    try:
        beat = await bystander.join()
        while not done.is_set():
            sent = time.perf_counter()
            answer = await bystander.call(beat)
            report.heartbeat_max_ms = max(
                report.heartbeat_max_ms, (time.perf_counter() - sent) * 1000
            )
            report.heartbeats += 1
            if not isinstance(answer, HeartbeatResponse) or answer.error_code != ErrorCode.NONE:
                report.violations.append(f"the bystander's heartbeat was answered {answer!r}")
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), interval_s)
    except (ConnectionError, AssertionError) as exc:
        report.violations.append(f"the bystander failed: {exc}")
    finally:
        writer.close()


def _kind(frame: ServerFrame) -> str:
    if isinstance(frame, ProtocolError):
        return f"protocol_error:{error_name(frame.error_code)}"
    if isinstance(frame, Reply):
        if isinstance(frame.response, ErrorResponse):
            return f"error_response:{error_name(frame.response.error_code)}"
        return f"reply:{type(frame.response).__name__}"
    return type(frame).__name__


async def _one_connection(
    port: int, fuzzer: FrameFuzzer, count: int, report: FuzzReport, deadline_s: float
) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    soft = fuzzer.rng.random() < SOFT_CONNECTIONS
    batch = [fuzzer.next(soft=soft) for _ in range(count)]
    handshake = fuzzer.rng.random() < 0.97
    probe = fuzzer.call(ListTopicsRequest(topics=["fuzz-t"]), PROBE_ID)
    writer.write(
        (fuzzer.handshake() if handshake else b"") + b"".join(f.data for f in batch) + probe
    )
    with contextlib.suppress(OSError):
        writer.write_eof()
    report.frames += count
    report.connections += 1
    report.mutations.update(f.mutation for f in batch)
    realigned = any("bad-length" in f.mutation for f in batch)
    codec, frames = ClientCodec(), FrameReader(1 << 30)
    received: list[ServerFrame] = []
    probed = False
    try:
        async with asyncio.timeout(deadline_s):
            while True:
                try:
                    data = await reader.read(1 << 20)
                except ConnectionResetError:
                    data = b""
                if not data:
                    break
                for body in frames.feed(data):
                    try:
                        frame = codec.decode(body)
                    except Exception as exc:
                        report.violations.append(f"an unreadable frame from the coordinator: {exc}")
                        return
                    received.append(frame)
                    report.answers[_kind(frame)] += 1
                    if isinstance(frame, Reply) and frame.correlation_id != PROBE_ID:
                        report.replies += 1
                    if isinstance(frame, Reply) and frame.correlation_id == PROBE_ID:
                        probed = True
    except TimeoutError:
        report.violations.append(
            f"no end to the answers within {deadline_s} s (mutations: "
            f"{sorted({f.mutation for f in batch})})"
        )
        return
    finally:
        writer.close()
    if probed:
        return
    if received and isinstance(received[-1], ProtocolError):
        return
    if realigned:
        report.answers["closed:unfinished-frame-after-a-wrong-length"] += 1
        return
    report.violations.append(
        f"closed without answering the probe or saying why; received {[_kind(f) for f in received]}"
        f", mutations {[f.mutation for f in batch]}"
    )


async def fuzz(
    port: int,
    *,
    frames: int,
    seed: int = 1,
    per_connection: int = 20,
    concurrency: int = 8,
    deadline_s: float = 20.0,
    heartbeat_interval_s: float = 0.05,
) -> FuzzReport:
    """Send about ``frames`` fuzzed frames to the coordinator at 127.0.0.1:``port``."""
    report = FuzzReport()
    started = time.perf_counter()
    done = asyncio.Event()
    beats = asyncio.create_task(_heartbeat(port, report, done, heartbeat_interval_s))
    connections = max(frames // per_connection, 1)
    fuzzers = [FrameFuzzer(seed * 1_000 + worker) for worker in range(concurrency)]

    async def worker(index: int) -> None:
        for _ in range(index, connections, concurrency):
            await _one_connection(port, fuzzers[index], per_connection, report, deadline_s)

    try:
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    finally:
        done.set()
        await beats
    report.seconds = time.perf_counter() - started
    return report
