"""One client's burst of requests must not starve anyone else (issue 11, item 2).

The attack: a group with 10,000 committed offsets, and one connection that sends hundreds of
"fetch every offset of the group" requests in one write. Before, the server handled every frame
of that read in one go; the loop was blocked for seconds, and a member of another group whose
heartbeats queued up meanwhile was evicted. Now a connection's input is handled one slice
(``input_slice_ms``) per loop pass, and the others get their turn in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest
from structlog.typing import EventDict

from huddle.coordinator.connection import Connection
from huddle.coordinator.intake import Intake
from huddle.coordinator.server import CoordinatorServer
from huddle.coordinator.sweeps import Timers
from huddle.protocol.errors import ErrorCode
from huddle.protocol.framing import ClientCodec, FrameReader
from huddle.protocol.messages import (
    Call,
    CreateTopicsRequest,
    CreateTopicsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    Reply,
    TopicSpec,
)
from tests.helpers import (
    DEADLINE_S,
    RawClient,
    join_request,
    raw_member,
    wait_until,
    within,
)

OFFSETS = 10_000
FETCHES = 150
HEARTBEAT_BOUND_S = 0.5  # a bystander's heartbeat is answered within this, attack or not


async def _group_with_offsets(port: int, group_id: str) -> None:
    admin = await RawClient.open(port)
    await admin.handshake(client_id="admin")
    created = await admin.call(
        CreateTopicsRequest(topics=[TopicSpec(name="wide", partitions=OFFSETS)])
    )
    assert isinstance(created, CreateTopicsResponse), created
    committed = await admin.call(
        OffsetCommitRequest(
            group_id=group_id,
            topics=[
                OffsetCommitTopic(
                    name="wide",
                    partitions=[
                        OffsetCommitPartition(partition=p, offset=p) for p in range(OFFSETS)
                    ],
                )
            ],
        )
    )
    assert isinstance(committed, OffsetCommitResponse), committed
    assert committed.error_code == ErrorCode.NONE, committed
    await admin.close()


def _burst(group_id: str, count: int) -> bytes:
    """``count`` fetches of every offset of ``group_id``, as one write."""
    codec = ClientCodec()
    return b"".join(
        codec.encode(Call(correlation_id=i, request=OffsetFetchRequest(group_id=group_id)))
        for i in range(1, count + 1)
    )


async def _heartbeat_until(
    client: RawClient, member_id: str, generation: int, done: asyncio.Event
) -> list[float]:
    """Heartbeat every 50 ms until ``done``; the round trip of each, in seconds. Every answer
    must be NONE: the member is still in its group."""
    request = HeartbeatRequest(group_id="calm", generation_id=generation, member_id=member_id)
    round_trips = []
    while not done.is_set():
        sent = time.monotonic()
        answer = await client.call(request)
        round_trips.append(time.monotonic() - sent)
        assert isinstance(answer, HeartbeatResponse), answer
        assert answer.error_code == ErrorCode.NONE, answer
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), 0.05)
    return round_trips


@pytest.mark.timing
async def test_a_burst_of_large_requests_does_not_hold_up_another_groups_member(
    server: CoordinatorServer,
) -> None:
    await _group_with_offsets(server.port, "big")
    bystander, member_id, generation = await raw_member(server.port, "calm")
    attacker = await RawClient.open(server.port)
    await attacker.handshake(client_id="attacker")

    done = asyncio.Event()
    beats = asyncio.create_task(_heartbeat_until(bystander, member_id, generation, done))
    await within(wait_until(lambda: bool(server.core.groups["calm"].members)))
    attacker.writer.write(_burst("big", FETCHES))

    replies = 0
    frames = FrameReader()
    deadline = time.monotonic() + 120
    while replies < FETCHES:  # read the answers without decoding them (cheap for the test)
        data = await asyncio.wait_for(attacker.reader.read(1 << 20), deadline - time.monotonic())
        assert data, "the server closed the attacker's connection"
        replies += len(frames.feed(data))
    done.set()
    round_trips = await within(beats)

    assert len(round_trips) >= 3, "the attack ended before the bystander could heartbeat"
    assert max(round_trips) < HEARTBEAT_BOUND_S, (
        f"a heartbeat waited {max(round_trips):.3f} s behind another connection's requests"
    )
    await attacker.close()
    await bystander.close()


async def test_many_bursting_connections_do_not_add_up_to_a_long_pass(
    server: CoordinatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fifty connections each with a burst of large fetches: each gets a slice per pass, but
    one pass serves them for a bounded time in all (it was fifty slices: a bystander's
    heartbeat waited 2.2 s behind a hundred such connections)."""
    served: list[set[int]] = [set()]  # per loop pass: the attackers whose frames were handled
    new_pass, serve = Intake._new_pass, Intake.serve

    def next_pass(self: Intake) -> None:
        served.append(set())
        new_pass(self)

    def counted(self: Intake, conn: Connection) -> int:
        if conn.client_id == "attacker" and conn.inbox:
            served[-1].add(conn.conn_id)
        return serve(self, conn)

    monkeypatch.setattr(Intake, "_new_pass", next_pass)
    monkeypatch.setattr(Intake, "serve", counted)
    await _group_with_offsets(server.port, "big")
    bystander, member_id, generation = await raw_member(server.port, "calm")
    attackers = [await RawClient.open(server.port) for _ in range(50)]
    for attacker in attackers:
        await attacker.handshake(client_id="attacker")

    async def drain(attacker: RawClient, count: int) -> None:
        frames, replies = FrameReader(), 0
        while replies < count:
            data = await asyncio.wait_for(attacker.reader.read(1 << 20), 60)
            assert data, "the server closed an attacker's connection"
            replies += len(frames.feed(data))

    done = asyncio.Event()
    beats = asyncio.create_task(_heartbeat_until(bystander, member_id, generation, done))
    await within(wait_until(lambda: bool(server.core.groups["calm"].members)))
    for attacker in attackers:
        attacker.writer.write(_burst("big", 8))
    await asyncio.gather(*(drain(attacker, 8) for attacker in attackers))
    done.set()
    round_trips = await within(beats)
    assert len(round_trips) >= 3, "the bystander was answered all along"
    # A pass stops serving backlogs once it has spent 20 ms, and each connection's turn
    # takes a slice (5 ms) or a request (about 7 ms): a handful per pass, not all fifty.
    most = max(len(attackers_served) for attackers_served in served)
    assert most <= 10, f"one loop pass handled the frames of {most} bursting connections"
    for client in [*attackers, bystander]:
        await client.close()


async def test_a_client_that_does_not_read_its_answers_is_not_served_past_its_buffer(
    server: CoordinatorServer,
) -> None:
    """While a client leaves its answers unread, the server stops handling its requests (they
    wait, nothing is lost) instead of building hundreds of megabytes of answers; the others
    are served meanwhile. Once it reads, every request is answered."""
    await _group_with_offsets(server.port, "big")
    bystander, member_id, generation = await raw_member(server.port, "calm")
    attacker = await RawClient.open(server.port)
    await attacker.handshake(client_id="attacker")
    conn = next(c for c in server.connections() if c.client_id == "attacker")

    attacker.writer.write(_burst("big", FETCHES))
    await within(wait_until(lambda: conn.write_paused))
    one_answer = 10 * OFFSETS * 4  # generous: one "every offset" answer is ~300 KB
    buffered = len(conn.pending) + (conn.transport.get_write_buffer_size() if conn.transport else 0)
    assert buffered < 4 * 1024 * 1024 + one_answer, f"{buffered} bytes buffered for one client"
    assert conn.inbox, "the requests not yet answered should be waiting, not dropped"

    request = HeartbeatRequest(group_id="calm", generation_id=generation, member_id=member_id)
    for _ in range(3):
        answer = await bystander.call(request)
        assert isinstance(answer, HeartbeatResponse), answer
        assert answer.error_code == ErrorCode.NONE

    replies = 0
    frames = FrameReader()
    deadline = time.monotonic() + 120
    while replies < FETCHES:
        data = await asyncio.wait_for(attacker.reader.read(1 << 20), deadline - time.monotonic())
        assert data, "the server closed the attacker's connection"
        replies += len(frames.feed(data))
    assert replies == FETCHES
    await attacker.close()
    await bystander.close()


async def test_a_client_that_shuts_its_side_gets_every_answer(server: CoordinatorServer) -> None:
    """Requests sent before the client's FIN are answered, however long they take to
    handle (a burst handled over several loop passes included), then the server closes."""
    await _group_with_offsets(server.port, "big")
    client = await RawClient.open(server.port)
    await client.handshake(client_id="half-closer")
    client.writer.write(_burst("big", 40))
    client.writer.write_eof()
    frames = FrameReader()
    replies = 0
    while data := await asyncio.wait_for(client.reader.read(1 << 20), 60):
        replies += len(frames.feed(data))
    assert replies == 40
    await client.close()


async def test_a_stall_between_the_read_and_the_expiry_is_read_past_too(
    server: CoordinatorServer, logs: list[EventDict], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deadline passed, the sockets were read, and then the loop stalled (a slow request
    handled in that same pass) before the sessions were looked at: the heartbeats that
    arrived meanwhile must be read first, or a member that kept heartbeating is evicted."""
    ready, sent_through = threading.Event(), threading.Event()
    answers: list[int] = []

    def bystander() -> None:  # its own thread and loop: it goes on while the server stalls
        async def body() -> None:
            client, member_id, generation = await raw_member(
                server.port, "calm", session_timeout_ms=1_000
            )
            request = HeartbeatRequest(
                group_id="calm", generation_id=generation, member_id=member_id
            )
            ready.set()
            # One heartbeat as the stall begins, one once it has lasted twice the session:
            # both wait in the stalled server's socket buffer.
            assert await asyncio.to_thread(stalled.wait, DEADLINE_S), "no stall came"
            stall_seen = time.monotonic()
            await client.send(Call(correlation_id=1, request=request))
            await wait_until(lambda: time.monotonic() > stall_seen + 2.0, what="a 2 s stall")
            await client.send(Call(correlation_id=2, request=request))
            sent_through.set()
            for _ in range(2):
                reply = await client.read_frame()
                assert isinstance(reply, Reply), reply
                assert isinstance(reply.response, HeartbeatResponse), reply
                answers.append(reply.response.error_code)
            await client.close()

        asyncio.run(body())

    stalled = threading.Event()
    hopped = Timers._hopped

    def stall_then_hopped(self: Timers) -> None:
        if not stalled.is_set() and ready.is_set():

            def block() -> None:  # runs after this read and before the expiry, same pass
                stalled.set()
                sent_through.wait(DEADLINE_S)

            self.loop.call_soon(block)
        hopped(self)

    thread = threading.Thread(target=bystander)
    thread.start()
    try:
        await wait_until(ready.is_set, what="the bystander to join")
        monkeypatch.setattr(Timers, "_hopped", stall_then_hopped)
        other = await RawClient.open(server.port)  # a deadline 100 ms ahead: a pending id
        await other.handshake(client_id="other")
        await other.call(join_request(group_id="other", session_timeout_ms=100))
        await wait_until(sent_through.is_set, what="the stall to be over")
        await wait_until(lambda: "other" not in server.core.groups, what="the pending id to expire")
    finally:
        sent_through.set()
        stalled.set()  # if no stall came, the bystander stops waiting for one
        await asyncio.to_thread(thread.join, DEADLINE_S)
    assert answers, "the bystander heard nothing back"
    assert set(answers) == {ErrorCode.NONE}, answers
    assert not [e for e in logs if e["event"] == "member_removed" and e["group_id"] == "calm"]
    await other.close()
