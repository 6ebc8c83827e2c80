"""The server against clients that misbehave: each gets a clear error, everyone else is served.

Every test keeps a well-behaved client connected through the whole episode and checks it is
still answered afterwards, and that nothing was logged at error level (no traceback).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from structlog.typing import EventDict

from huddle.client.connection import Connection, connect
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.errors import ErrorCode
from huddle.protocol.framing import ClientCodec, frame_header
from huddle.protocol.messages import (
    Call,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ErrorResponse,
    Handshake,
    HandshakeResult,
    JoinGroupResponse,
    LeaveGroupRequest,
    ListTopicsRequest,
    ListTopicsResponse,
    MemberIdentity,
    ProtocolError,
    Reply,
    Request,
    ServerFrame,
    TopicMetadataChanged,
    TopicSpec,
)
from tests.helpers import (
    DEADLINE_S,
    RawClient,
    error_events,
    fast_server_config,
    frame,
    join_request,
    packed,
    raw_member,
    running_server,
    wait_until,
    within,
)


@asynccontextmanager
async def well_behaved(server: CoordinatorServer) -> AsyncIterator[Connection]:
    """A client connected before the misbehaviour and checked after it."""
    async with connect(f"127.0.0.1:{server.port}", client_id="good", timeout=10) as conn:
        await assert_answered(conn)
        yield conn
        await assert_answered(conn)
    # A newcomer is served too.
    async with connect(f"127.0.0.1:{server.port}", client_id="newcomer", timeout=10) as fresh:
        await assert_answered(fresh)


async def assert_answered(conn: Connection) -> None:
    response = await conn.request(ListTopicsRequest(), timeout=10)
    assert isinstance(response, ListTopicsResponse), response
    assert response.error_code == ErrorCode.NONE


def assert_clean(logs: list[EventDict], caplog: pytest.LogCaptureFixture) -> None:
    assert error_events(logs) == []
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def single_protocol_error(frames: Sequence[ServerFrame], code: ErrorCode) -> ProtocolError:
    assert len(frames) == 1, frames
    error = frames[0]
    assert isinstance(error, ProtocolError), error
    assert error.error_code == code, error
    assert error.error_message
    return error


@dataclass(frozen=True)
class Refused:
    """Bytes a client sends that the server answers with one ProtocolError, then closes."""

    payload: bytes
    code: ErrorCode
    handshaken: bool = True  # the client handshakes before it sends ``payload``
    says: str | None = None  # the error message, whole
    mentions: str | None = None  # or a part of it
    logged: str | None = None  # an event the server logs about it
    config: Mapping[str, int] = field(default_factory=dict)  # fast_server_config overrides
    wait_s: float = DEADLINE_S  # for the server to close the connection


DEEPLY_NESTED = b"\x81\xa1a" * 100_000 + b"\xc0"  # {"a": {"a": ... }} 100,000 deep
TAG_NOT_UTF8 = b"\x82\xa4type\xa4\xff\xfe\xfd\xfc\xa7version\x01"
VALUE_NOT_UTF8 = b"\x83\xa4type\xa9handshake\xa7version\x01\xa9client_id\xa2\xff\xfe"
# Deep nesting (RecursionError) and invalid UTF-8 (UnicodeDecodeError) escaped the decode
# handling: the connection closed without a ProtocolError and an ERROR traceback holding the
# client's bytes was logged. They are refused as the first frame and after the handshake.
CHOKES_THE_DECODER = {
    f"{name}-{when}": Refused(
        frame(body), ErrorCode.CORRUPT_MESSAGE, handshaken, mentions="MessagePack data"
    )
    for name, body in [
        ("nested-too-deep", DEEPLY_NESTED),
        ("tag-not-utf8", TAG_NOT_UTF8),
        ("value-not-utf8", VALUE_NOT_UTF8),
    ]
    for when, handshaken in [("handshaken", True), ("first-frame", False)]
}
REFUSED = {
    "http-request-is-too-large": Refused(
        b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
        ErrorCode.MESSAGE_TOO_LARGE,
        handshaken=False,
        logged="bad_frame",
    ),
    "body-that-is-not-msgpack": Refused(
        frame(b"\xc1\xc1\xc1 not msgpack"), ErrorCode.CORRUPT_MESSAGE
    ),
    **CHOKES_THE_DECODER,
    "oversized-frame": Refused(
        frame(
            msgspec.msgpack.encode(
                Call(correlation_id=1, request=ListTopicsRequest(topics=["x" * 2_000]))
            )
        ),
        ErrorCode.MESSAGE_TOO_LARGE,
        mentions="1024",
        config={"max_frame_bytes": 1_024},
    ),
    "zero-length-frame": Refused(b"\x00\x00\x00\x00", ErrorCode.CORRUPT_MESSAGE),
    "msgpack-of-the-wrong-shape-without-correlation-id": Refused(
        packed([1, 2, 3]), ErrorCode.INVALID_REQUEST
    ),
    "request-before-handshake": Refused(
        ClientCodec().encode(Call(correlation_id=1, request=ListTopicsRequest())),
        ErrorCode.INVALID_REQUEST,
        handshaken=False,
        says="expected a handshake first",
        logged="handshake_failed",
    ),
    "second-handshake": Refused(
        ClientCodec().encode(Handshake(version=1)), ErrorCode.INVALID_REQUEST
    ),
    "stalled-mid-frame": Refused(
        b"\x00\x00\x00\x40" + b"\x80" * 5,  # 64 bytes announced, 5 sent
        ErrorCode.INVALID_REQUEST,
        mentions="200 ms",
        config={"stalled_frame_timeout_ms": 200},
        wait_s=5,
    ),
    "never-says-hello": Refused(
        b"",
        ErrorCode.INVALID_REQUEST,
        handshaken=False,
        config={"handshake_timeout_ms": 200},
        wait_s=5,
    ),
}


@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
async def test_misbehaviour_gets_one_protocol_error_and_the_connection_closed(
    case: Refused, logs: list[EventDict], caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        running_server(fast_server_config(**case.config)) as server,
        well_behaved(server) as good,
    ):
        raw = await RawClient.open(server.port)
        if case.handshaken:
            await raw.handshake()
        await raw.send_bytes(case.payload)
        error = single_protocol_error(await raw.frames_until_closed(case.wait_s), case.code)
        if case.says is not None:
            assert error.error_message == case.says
        if case.mentions is not None:
            assert case.mentions in error.error_message
        # The good client, idle between frames all along, was left alone.
        await assert_answered(good)
        await raw.close()
    if case.logged is not None:
        assert any(e["event"] == case.logged for e in logs)
    assert_clean(logs, caplog)
    assert max(len(repr(e)) for e in logs) < 2_000, "no client bytes in the logs"


# Frames the server cannot take, but whose correlation id it can read: answered with an
# ErrorResponse (the code, and a part of its message), and the connection goes on.
ANSWERED = {
    "unknown-request-type": (
        {"type": "call", "correlation_id": 7, "request": {"type": "x"}},
        None,
    ),
    "unknown-frame-type-with-a-correlation-id": ({"type": "telepathy", "correlation_id": 3}, None),
    "wrong-field-types": (
        {
            "type": "call",
            "correlation_id": 11,
            "request": {"type": "create_topics", "topics": [{"name": "t", "partitions": "three"}]},
        },
        "partitions",
    ),
}


@pytest.mark.parametrize(("sent", "mentions"), ANSWERED.values(), ids=ANSWERED.keys())
async def test_a_bad_request_with_a_correlation_id_is_answered_and_the_connection_stays_open(
    server: CoordinatorServer,
    logs: list[EventDict],
    caplog: pytest.LogCaptureFixture,
    sent: dict[str, Any],
    mentions: str | None,
) -> None:
    async with well_behaved(server):
        raw = await RawClient.open(server.port)
        await raw.handshake()
        await raw.send_bytes(packed(sent))
        reply = await raw.read_frame()
        assert isinstance(reply, Reply)
        assert reply.correlation_id == sent["correlation_id"]
        assert isinstance(reply.response, ErrorResponse)
        assert reply.response.error_code == ErrorCode.INVALID_REQUEST
        if mentions is not None:
            assert mentions in reply.response.error_message
        # The same connection keeps working.
        assert isinstance(await raw.call(ListTopicsRequest()), ListTopicsResponse)
        await raw.close()
    assert_clean(logs, caplog)


async def test_truncated_frame_then_close(
    server: CoordinatorServer, logs: list[EventDict], caplog: pytest.LogCaptureFixture
) -> None:
    async with well_behaved(server):
        raw = await RawClient.open(server.port)
        await raw.handshake()
        await wait_until(lambda: server.connection_count == 2, what="two connections")
        await raw.send_bytes(b"\x00\x00\x01\x00" + b"\x81" * 10)  # 256 announced, 10 sent
        await raw.close()
        await wait_until(lambda: server.connection_count == 1, what="the raw client to be gone")
    closed = [e for e in logs if e["event"] == "connection_closed" and "mid-frame" in e["reason"]]
    assert closed
    assert_clean(logs, caplog)


async def test_unsupported_version(
    server: CoordinatorServer, logs: list[EventDict], caplog: pytest.LogCaptureFixture
) -> None:
    async with well_behaved(server):
        raw = await RawClient.open(server.port)
        await raw.send(Handshake(version=7, client_id="future"))
        frames = await raw.frames_until_closed()
        assert len(frames) == 1
        result = frames[0]
        assert isinstance(result, HandshakeResult)
        assert result.error_code == ErrorCode.UNSUPPORTED_VERSION
        speaks = "this server speaks 1, 2"
        assert result.error_message == f"protocol version 7 is not supported; {speaks}"
        assert result.supported_versions == [1, 2]
        await raw.close()
    assert_clean(logs, caplog)


async def test_busy_pipelining_client_is_not_taken_for_stalled(
    logs: list[EventDict], caplog: pytest.LogCaptureFixture
) -> None:
    config = fast_server_config(stalled_frame_timeout_ms=200)
    async with running_server(config) as server, well_behaved(server):
        raw = await RawClient.open(server.port)
        await raw.handshake()
        call = frame(msgspec.msgpack.encode(Call(correlation_id=1, request=ListTopicsRequest())))
        head, tail = call[:3], call[3:]
        answered = 0
        loop = asyncio.get_running_loop()
        until = loop.time() + 3 * config.stalled_frame_timeout_ms / 1000
        # Every write ends inside a frame, so the server's buffer is never empty for three
        # stall timeouts; it is making progress all along and must not be closed.
        await raw.send_bytes(head)
        while loop.time() < until:
            await raw.send_bytes(tail + head)
            assert isinstance(await raw.read_frame(), Reply)
            answered += 1
            await wait_until(lambda: raw_is_mid_frame(server), what="a frame begun")
        await raw.send_bytes(tail)
        assert isinstance(await raw.read_frame(), Reply)
        assert answered > 1
        await raw.close()
    assert_clean(logs, caplog)


def raw_is_mid_frame(server: CoordinatorServer) -> bool:
    return any(c.frame_started is not None for c in server.connections())


async def test_flood_of_connections(
    server: CoordinatorServer, logs: list[EventDict], caplog: pytest.LogCaptureFixture
) -> None:
    async def one(i: int) -> None:
        raw = await RawClient.open(server.port)
        await raw.handshake(client_id=f"flood-{i}")
        assert isinstance(await raw.call(ListTopicsRequest()), ListTopicsResponse)
        if i % 2:
            await raw.send_bytes(b"\xff\xff\xff\xff")  # half of them misbehave on the way out
            await raw.frames_until_closed()
        await raw.close()

    async with well_behaved(server):
        await within(asyncio.gather(*(one(i) for i in range(300))), wait_s=60)
        await wait_until(lambda: server.connection_count == 1, what="the flood to drain")
    assert_clean(logs, caplog)


async def test_connection_limit(logs: list[EventDict], caplog: pytest.LogCaptureFixture) -> None:
    config = fast_server_config(max_connections=5)
    async with running_server(config) as server, well_behaved(server):
        others = [await RawClient.open(server.port) for _ in range(4)]
        for raw in others:
            await raw.handshake()
        refused = await RawClient.open(server.port)
        frames = await refused.frames_until_closed()
        error = single_protocol_error(frames, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        assert error.error_message == "connection limit of 5 reached"
        await refused.close()
        # A slot freed is a slot given.
        await others.pop().close()
        await wait_until(lambda: server.connection_count == 4, what="a free slot")
        again = await RawClient.open(server.port)
        await again.handshake()
        others.append(again)
        for raw in others:
            await raw.close()
        await wait_until(lambda: server.connection_count == 1, what="others to be gone")
    assert_clean(logs, caplog)


async def test_client_that_does_not_read_is_dropped(
    logs: list[EventDict], caplog: pytest.LogCaptureFixture
) -> None:
    config = fast_server_config(
        max_write_buffer_bytes=16_384, max_response_bytes=16_384, idle_timeout_ms=1_000
    )
    async with running_server(config) as server:
        async with connect(f"127.0.0.1:{server.port}") as setup:
            topics = [TopicSpec(name=f"topic-{i:04}", partitions=1) for i in range(200)]
            await setup.request(CreateTopicsRequest(topics=topics), timeout=10)
        raw = await RawClient.open(server.port)
        await raw.handshake()
        await wait_until(lambda: server.connection_count == 1, what="only the non-reader")
        call = frame(msgspec.msgpack.encode(Call(correlation_id=1, request=ListTopicsRequest())))
        raw.writer.write(call * 2_000)  # about 10 MB of answers that are never read
        await wait_until(lambda: server.connection_count == 0, what="the non-reader to be dropped")
        raw.writer.close()
    # dropped at once if one pass left more than the limit unread, else once idle
    assert {e["event"] for e in logs} & {"write_buffer_overflow", "connection_idle"}
    assert_clean(logs, caplog)


async def test_a_client_that_does_not_read_is_not_served_and_then_dropped_as_idle(
    logs: list[EventDict], caplog: pytest.LogCaptureFixture
) -> None:
    """What waits for a client that reads nothing stays within the write buffer limit (it
    was 181 MB against 1 MiB: a whole batch of answers was built before the check); its
    requests wait unanswered, and with no progress it is closed as idle."""
    limit = 256 * 1024
    config = fast_server_config(
        max_write_buffer_bytes=limit, max_response_bytes=limit, idle_timeout_ms=500
    )
    async with running_server(config) as server:
        async with connect(f"127.0.0.1:{server.port}") as setup:
            topics = [TopicSpec(name=f"topic-{i:04}", partitions=1) for i in range(1_000)]
            await setup.request(CreateTopicsRequest(topics=topics), timeout=10)
            answer = len(msgspec.msgpack.encode(await setup.request(ListTopicsRequest())))
        raw = await RawClient.open(server.port)
        await raw.handshake()
        conn = next(c for c in server.connections() if c.client_id == "raw")
        call = frame(msgspec.msgpack.encode(Call(correlation_id=1, request=ListTopicsRequest())))
        raw.writer.write(call * 200)  # 200 answers of ~30 KB, never read
        await wait_until(lambda: conn.write_paused, what="the non-reader's buffer to fill")
        transport = conn.transport
        assert transport is not None
        assert transport.get_write_buffer_size() + len(conn.pending) <= limit + answer
        assert conn.inbox, "its other requests wait"
        await wait_until(lambda: conn.closing, what="the non-reader to be closed as idle")
        raw.writer.close()
    assert any(e["event"] == "connection_idle" for e in logs)
    assert_clean(logs, caplog)


async def test_an_answer_over_the_response_limit_is_an_error_and_the_connection_goes_on(
    logs: list[EventDict],
) -> None:
    config = fast_server_config(max_response_bytes=20_000)
    async with running_server(config) as server:
        raw = await RawClient.open(server.port)
        await raw.handshake()
        for start in range(0, 1_000, 100):  # answers within the limit
            topics = [
                TopicSpec(name=f"topic-{i:04}", partitions=1) for i in range(start, start + 100)
            ]
            created = await raw.call(CreateTopicsRequest(topics=topics))
            assert isinstance(created, CreateTopicsResponse), created
        too_large = await raw.call(ListTopicsRequest())
        assert isinstance(too_large, ErrorResponse), too_large
        assert too_large.error_code == ErrorCode.MESSAGE_TOO_LARGE
        assert "over the limit of 20000" in (too_large.error_message or "")
        small = await raw.call(ListTopicsRequest(topics=["topic-0001"]))
        assert isinstance(small, ListTopicsResponse), small
        assert [t.name for t in small.topics] == ["topic-0001"]
        await raw.close()
    assert [e["response"] for e in logs if e["event"] == "response_too_large"] == [
        "ListTopicsResponse"
    ]


async def test_topics_whose_answer_would_be_over_the_limit_are_not_created(
    logs: list[EventDict],
) -> None:
    """MESSAGE_TOO_LARGE before anything is applied: the client that gets it can trust
    that no topic was made (it used to be told so after all of them were)."""
    config = fast_server_config(max_response_bytes=20_000)
    async with running_server(config) as server:
        raw = await RawClient.open(server.port)
        await raw.handshake()
        topics = [TopicSpec(name=f"topic-{i:04}", partitions=1) for i in range(1_000)]
        refused = await raw.call(CreateTopicsRequest(topics=topics))
        assert isinstance(refused, ErrorResponse), refused
        assert refused.error_code == ErrorCode.MESSAGE_TOO_LARGE
        assert "nothing was changed" in (refused.error_message or "")
        listed = await raw.call(ListTopicsRequest())
        assert isinstance(listed, ListTopicsResponse), listed
        assert listed.topics == []
        await raw.close()
    assert not [e for e in logs if e["event"] == "topic_created"]


async def test_describing_one_group_many_times_answers_it_once(server: CoordinatorServer) -> None:
    raw = await RawClient.open(server.port)
    await raw.handshake()
    described = await raw.call(DescribeGroupsRequest(groups=["g"] * 40 + ["h", "g"]))
    assert isinstance(described, DescribeGroupsResponse), described
    assert [g.group_id for g in described.groups] == ["g", "h"]
    await raw.close()


async def test_bad_input_from_many_clients_at_once(
    server: CoordinatorServer, logs: list[EventDict], caplog: pytest.LogCaptureFixture
) -> None:
    payloads = [
        b"\x00\x00\x00\x00",
        b"\x7f\xff\xff\xff",
        frame(b"\xc1"),
        packed({"type": "handshake", "version": "one"}),
        packed("hello"),
    ]

    async def bad(payload: bytes) -> None:
        raw = await RawClient.open(server.port)
        await raw.send_bytes(payload)
        frames = await raw.frames_until_closed()
        assert len(frames) == 1
        assert isinstance(frames[0], ProtocolError)
        await raw.close()

    async with well_behaved(server):
        await within(asyncio.gather(*(bad(p) for p in payloads * 20)), wait_s=60)
    assert_clean(logs, caplog)


async def test_a_huge_client_id_is_refused_at_the_handshake(
    server: CoordinatorServer, logs: list[EventDict]
) -> None:
    raw = await RawClient.open(server.port)
    await raw.send(Handshake(version=1, client_id="c" * 10 * 1024 * 1024))
    error = single_protocol_error(await raw.frames_until_closed(), ErrorCode.INVALID_REQUEST)
    assert "length <= 255" in error.error_message
    assert "client_id" in error.error_message
    assert max(len(str(e)) for e in logs) < 2_000, "the id is not copied into the log"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("group_id", "g" * 256),
        ("member_id", "m" * 513),
        ("group_instance_id", "i" * 250),
        ("protocol_type", "p" * 256),
        ("reason", "r" * 256),
    ],
)
async def test_ids_over_their_bounds_are_invalid_requests(
    server: CoordinatorServer, field: str, value: str
) -> None:
    raw = await RawClient.open(server.port)
    await raw.handshake()
    request = msgspec.structs.replace(join_request(), **{field: value})
    refused = await raw.call(request)
    assert isinstance(refused, ErrorResponse), refused
    assert refused.error_code == ErrorCode.INVALID_REQUEST
    assert f"$.request.{field}" in (refused.error_message or "")
    bound = {"group_id": "g" * 255, "group_instance_id": "i" * 249}  # at the bound: accepted
    if field in bound:
        request = msgspec.structs.replace(join_request(), **{field: bound[field]})
        joined = await raw.call(request)
        assert isinstance(joined, JoinGroupResponse), joined
        assert joined.error_code in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED), joined
    await raw.close()


async def test_idle_connections_holding_no_member_are_closed(logs: list[EventDict]) -> None:
    """Handshaken idle connections could hold every --max-connections slot for ever."""
    async with running_server(fast_server_config(idle_timeout_ms=300)) as server:
        member, _, _ = await raw_member(server.port, "g", session_timeout_ms=10_000)
        assert member is not None
        member_conn = next(c for c in server.connections() if c.client_id == "raw-g")
        for _ in range(2):  # idle twice in a row: the member's connection outlives both
            idle = await RawClient.open(server.port)
            await idle.handshake(client_id="idle")
            assert await idle.frames_until_closed() == []  # closed, without an error frame
            await idle.close()
        assert not member_conn.closing
        assert server.connection_count == 1
    idled = [e for e in logs if e["event"] == "connection_idle"]
    assert len(idled) == 2
    assert all(e["idle_ms"] >= 300 for e in idled)


async def test_a_connection_the_server_just_wrote_to_is_not_idle() -> None:
    """Activity is what the socket reads or writes, as Kafka counts it: an answer written
    after a long request (here its read long ago) starts the idle timeout again, else the
    next sweep closed the connection before the client could send its next request."""
    async with running_server(fast_server_config(idle_timeout_ms=300)) as server:
        raw = await RawClient.open(server.port)
        await raw.handshake(client_id="busy")
        conn = next(c for c in server.connections() if c.client_id == "busy")
        conn.last_active = server.loop.time() - 10  # its last request read long ago
        conn.send(TopicMetadataChanged(topics=[]))
        conn.flush()
        assert server.loop.time() - conn.last_active < 0.3
        await raw.close()


async def test_unfinished_frames_are_bounded_over_all_connections(
    logs: list[EventDict],
) -> None:
    """Stalled partial frames could each hold up to --max-frame-bytes for the stalled-frame
    timeout; the bytes held for them over all connections are bounded, and past the bound
    the connection holding the most is closed, not the one that crossed the line."""
    topics = [TopicSpec(name=f"topic-{i:05}-" + "x" * 60, partitions=1) for i in range(1_000)]
    whole = ClientCodec().encode(Call(correlation_id=7, request=CreateTopicsRequest(topics=topics)))
    assert 50_000 < len(whole) < 100_000
    async with running_server(fast_server_config(max_partial_frame_bytes=120_000)) as server:
        hoarder, victim = await RawClient.open(server.port), await RawClient.open(server.port)
        for client in (hoarder, victim):
            await client.handshake()
        await hoarder.send_bytes(frame_header(1_000_000) + b"\x00" * 100_000)  # never finished
        await wait_until(lambda: server.partial_bytes == 100_004, what="the hoarded bytes")
        await victim.send_bytes(whole[:-1])  # a big frame on its way: over the bound
        error = single_protocol_error(
            await hoarder.frames_until_closed(), ErrorCode.COORDINATOR_NOT_AVAILABLE
        )
        assert "unfinished frames" in error.error_message
        await hoarder.close()
        await victim.send_bytes(whole[-1:])  # the victim finishes its frame and is answered
        reply = await victim.read_frame()
        assert isinstance(reply, Reply), reply
        assert isinstance(reply.response, CreateTopicsResponse), reply
        await wait_until(lambda: server.partial_bytes == 0, what="nothing held")
        await victim.close()
    assert any(e["event"] == "partial_frames_over_limit" for e in logs)


async def test_a_reading_client_gets_an_answer_near_the_buffer_limit(
    logs: list[EventDict],
) -> None:
    """Bytes queued but not yet offered to the socket are not unread bytes: a client that
    reads was dropped for one answer close to --max-write-buffer-bytes."""
    limit = 1024 * 1024
    config = fast_server_config(max_write_buffer_bytes=limit, max_response_bytes=limit)
    async with running_server(config) as server:
        raw = await RawClient.open(server.port)
        await raw.handshake()
        for start in range(0, 4_000, 500):
            topics = [
                TopicSpec(name=f"{i:05}" + "x" * 150, partitions=1)
                for i in range(start, start + 500)
            ]
            created = await raw.call(CreateTopicsRequest(topics=topics))
            assert isinstance(created, CreateTopicsResponse), created
        listed = await raw.call(ListTopicsRequest())
        assert isinstance(listed, ListTopicsResponse), listed
        assert len(listed.topics) == 4_000
        assert 0.7 * limit < len(msgspec.msgpack.encode(listed)) < limit
        await raw.close()
    assert not [e for e in logs if e["event"] == "write_buffer_overflow"]


async def test_a_flood_of_invalid_requests_is_answered_within_slices_and_logged_sparingly(
    server: CoordinatorServer, logs: list[EventDict]
) -> None:
    """Each invalid request is answered, but they are handled a slice at a time like any
    other, and logged once each for the first few and then once per thousand (a flood
    wrote 425 MB of log in 3 s)."""
    raw = await RawClient.open(server.port)
    await raw.handshake()
    bad = packed({"type": "call", "correlation_id": 1, "request": {"type": "heartbeat"}})
    raw.writer.write(bad * 3_000)
    for _ in range(3_000):
        answer = await raw.read_frame()
        assert isinstance(answer, Reply), answer
        assert isinstance(answer.response, ErrorResponse), answer
        assert answer.response.error_code == ErrorCode.INVALID_REQUEST
    logged = [e for e in logs if e["event"] == "bad_request"]
    assert [e["bad_requests"] for e in logged] == [*range(1, 11), 1_000, 2_000, 3_000]
    await raw.close()


@pytest.mark.parametrize(
    "request_",
    [
        ListTopicsRequest(topics=["t"] * 1_001),
        DeleteTopicsRequest(topics=["t"] * 1_001),
        CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)] * 1_001),
        DescribeGroupsRequest(groups=["g"] * 1_001),
        LeaveGroupRequest(group_id="g", members=[MemberIdentity(member_id="m")] * 1_001),
    ],
    ids=["list-topics", "delete-topics", "create-topics", "describe-groups", "leave-group"],
)
async def test_requests_naming_too_many_things_are_refused_before_any_work(
    server: CoordinatorServer, request_: Request
) -> None:
    """Only commits and fetches were bounded: 1.3 million names in one ListTopics or
    DescribeGroups held the loop for seconds, and a CreateTopics whose answer was too large
    was refused after its topics had been made."""
    raw = await RawClient.open(server.port)
    await raw.handshake()
    refused = await raw.call(request_)
    assert isinstance(refused, ErrorResponse), refused
    assert refused.error_code == ErrorCode.INVALID_REQUEST
    assert "length <= 1000" in (refused.error_message or "")
    listed = await raw.call(ListTopicsRequest())
    assert isinstance(listed, ListTopicsResponse)
    assert listed.topics == [], "nothing was made"
    await raw.close()
