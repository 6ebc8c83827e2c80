"""client.connection against scripted fake coordinators and the real server."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from structlog.typing import EventDict

from huddle.client.connection import ConnectionClosedError, check, connect, parse_bootstrap
from huddle.client.unreachable import CoordinatorUnreachableError
from huddle.protocol.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
    HuddleError,
    TopicAlreadyExistsError,
    UnsupportedVersionError,
)
from huddle.protocol.framing import FrameReader, ServerCodec
from huddle.protocol.messages import (
    Call,
    ClientFrame,
    CreateTopicsResponse,
    Handshake,
    HandshakeResult,
    ListTopicsRequest,
    ListTopicsResponse,
    ProtocolError,
    RebalanceStarted,
    Reply,
    ServerFrame,
    TopicMetadata,
)
from tests.helpers import within


class Peer:
    """The fake coordinator's view of one client connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.codec = ServerCodec()
        self.frames = FrameReader()
        self.queue: list[ClientFrame] = []

    async def receive(self) -> ClientFrame | None:
        while not self.queue:
            data = await self.reader.read(65_536)
            if not data:
                return None
            self.queue.extend(self.codec.decode(body) for body in self.frames.feed(data))
        return self.queue.pop(0)

    async def send(self, *frames: ServerFrame) -> None:
        for frame in frames:
            self.writer.write(self.codec.encode(frame))
        await self.writer.drain()

    async def accept_handshake(self) -> Handshake:
        hello = await self.receive()
        assert isinstance(hello, Handshake)
        await self.send(HandshakeResult(version=hello.version))
        return hello


Script = Callable[[Peer], Awaitable[None]]


@asynccontextmanager
async def fake_coordinator(script: Script) -> AsyncIterator[str]:
    """A one-script server on 127.0.0.1; yields its bootstrap address."""

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await script(Peer(reader, writer))
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


# --- addresses ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9292", ("127.0.0.1", 9292)),
        ("localhost:1", ("localhost", 1)),
        ("[::1]:9292", ("::1", 9292)),
        (" coordinator.internal:65535 ", ("coordinator.internal", 65535)),
    ],
)
def test_parse_bootstrap(text: str, expected: tuple[str, int]) -> None:
    assert parse_bootstrap(text) == expected


@pytest.mark.parametrize(
    "text", ["", "localhost", ":9292", "host:", "host:port", "host:0", "host:70000", "::1:9292"]
)
def test_parse_bootstrap_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"bootstrap address|port"):
        parse_bootstrap(text)


# --- requests -------------------------------------------------------------------------------


async def test_many_requests_in_flight_answered_in_any_order() -> None:
    async def reverse(peer: Peer) -> None:
        await peer.accept_handshake()
        calls = []
        for _ in range(20):
            call = await peer.receive()
            assert isinstance(call, Call)
            calls.append(call)
        for call in reversed(calls):
            topics = [TopicMetadata(name=str(call.correlation_id))]
            await peer.send(
                Reply(
                    correlation_id=call.correlation_id, response=ListTopicsResponse(topics=topics)
                )
            )
        await peer.receive()

    async with fake_coordinator(reverse) as address, connect(address) as conn:
        responses = await within(
            asyncio.gather(*(conn.request(ListTopicsRequest(), timeout=5) for _ in range(20)))
        )
    names = [r.topics[0].name for r in responses if isinstance(r, ListTopicsResponse)]
    assert sorted(names, key=int) == [str(i) for i in range(1, 21)]
    # Every caller got the answer to its own request: correlation ids were issued in order.
    assert names == [str(i) for i in range(1, 21)]


async def test_request_timeout() -> None:
    async def silent(peer: Peer) -> None:
        await peer.accept_handshake()
        while await peer.receive() is not None:
            pass

    async with fake_coordinator(silent) as address, connect(address) as conn:
        with pytest.raises(TimeoutError):
            await conn.request(ListTopicsRequest(), timeout=0.05)
        assert not conn.closed


async def test_pending_requests_fail_when_the_coordinator_goes_away() -> None:
    async def hang_up(peer: Peer) -> None:
        await peer.accept_handshake()
        await peer.receive()  # one request, then EOF without an answer

    async with fake_coordinator(hang_up) as address, connect(address) as conn:
        with pytest.raises(ConnectionClosedError, match="closed the connection"):
            await conn.request(ListTopicsRequest(), timeout=5)
        assert conn.closed
        with pytest.raises(ConnectionClosedError):
            await conn.request(ListTopicsRequest(), timeout=5)


async def test_protocol_error_closes_with_its_code() -> None:
    async def scold(peer: Peer) -> None:
        await peer.accept_handshake()
        await peer.receive()
        await peer.send(
            ProtocolError(error_code=ErrorCode.INVALID_REQUEST, error_message="go away")
        )

    async with fake_coordinator(scold) as address, connect(address) as conn:
        with pytest.raises(ConnectionClosedError, match="go away") as caught:
            await conn.request(ListTopicsRequest(), timeout=5)
        assert caught.value.error_code == ErrorCode.INVALID_REQUEST
        notice = await within(conn.notices.receive())
        assert isinstance(notice, ProtocolError)


async def test_unsupported_version_raises_with_the_server_message() -> None:
    async def old(peer: Peer) -> None:
        await peer.receive()
        await peer.send(
            HandshakeResult(
                error_code=ErrorCode.UNSUPPORTED_VERSION,
                error_message="protocol version 1 is not supported; this server speaks 2",
                version=2,
                supported_versions=[2],
            )
        )

    async with fake_coordinator(old) as address:
        with pytest.raises(UnsupportedVersionError, match="this server speaks 2"):
            async with connect(address):
                pass


async def test_refused_at_the_door() -> None:
    async def full(peer: Peer) -> None:
        await peer.send(
            ProtocolError(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message="connection limit of 1 reached",
            )
        )

    async with fake_coordinator(full) as address:
        with pytest.raises(CoordinatorNotAvailableError, match="limit") as caught:
            async with connect(address):
                pass
        assert caught.value.retriable


async def test_unreachable_coordinator() -> None:
    with pytest.raises(OSError, match="connection refused") as caught:
        async with connect("127.0.0.1:1", timeout=5):
            pass
    assert isinstance(caught.value, CoordinatorUnreachableError)
    assert isinstance(caught.value, HuddleError)
    assert str(caught.value) == "cannot connect to 127.0.0.1:1: connection refused"
    assert caught.value.errno == errno.ECONNREFUSED
    assert caught.value.address == "127.0.0.1:1"


async def test_handshake_timeout() -> None:
    async def mute(peer: Peer) -> None:
        await peer.receive()
        await peer.receive()

    async with fake_coordinator(mute) as address:
        with pytest.raises(TimeoutError):
            async with connect(address, timeout=0.1):
                pass


# --- notices ----------------------------------------------------------------------------------


async def test_notices_are_bounded_and_drop_the_oldest(logs: list[EventDict]) -> None:
    async def chatty(peer: Peer) -> None:
        await peer.accept_handshake()
        for generation in range(10):
            await peer.send(RebalanceStarted(group_id="g", generation_id=generation))
        call = await peer.receive()
        assert isinstance(call, Call)
        await peer.send(Reply(correlation_id=call.correlation_id, response=ListTopicsResponse()))
        await peer.receive()

    async with fake_coordinator(chatty) as address, connect(address, notice_buffer=3) as conn:
        # The reply comes after every notice, so all ten have been through the reader.
        await conn.request(ListTopicsRequest(), timeout=5)
        kept = [conn.notices.receive_nowait() for _ in range(3)]
        assert [n.generation_id for n in kept if isinstance(n, RebalanceStarted)] == [7, 8, 9]
        assert conn.notices_dropped == 7
    assert len([e for e in logs if e["event"] == "notice_dropped"]) == 7


async def test_notice_stream_ends_with_the_connection() -> None:
    async def one_notice(peer: Peer) -> None:
        await peer.accept_handshake()
        await peer.send(RebalanceStarted(group_id="g", generation_id=1))

    async with fake_coordinator(one_notice) as address, connect(address) as conn:
        received = [n async for n in conn.notices]
        assert len(received) == 1


# --- structure ----------------------------------------------------------------------------


async def test_nothing_left_running_after_exit() -> None:
    async def serve_one(peer: Peer) -> None:
        await peer.accept_handshake()
        await peer.receive()

    def readers() -> list[asyncio.Task[object]]:
        return [t for t in asyncio.all_tasks() if t.get_name().startswith("huddle reader")]

    async with fake_coordinator(serve_one) as address:
        async with connect(address):
            assert len(readers()) == 1
        # The task group has already waited for the reader: no polling needed.
        assert readers() == []


async def test_errors_in_the_body_are_not_wrapped(bootstrap: str) -> None:
    with pytest.raises(KeyError):
        async with connect(bootstrap):
            raise KeyError("mine")


async def test_call_raises_the_registered_error(bootstrap: str) -> None:
    from huddle.protocol.messages import CreateTopicsRequest, TopicSpec

    async with connect(bootstrap) as conn:
        request = CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)])
        created = await conn.call(request, CreateTopicsResponse, timeout=5)
        assert created.topics[0].error_code == ErrorCode.NONE
        again = await conn.call(request, CreateTopicsResponse, timeout=5)
        with pytest.raises(TopicAlreadyExistsError):
            check(again.topics[0])


def test_check_passes_success_through() -> None:
    response = ListTopicsResponse()
    assert check(response) is response
    with pytest.raises(CoordinatorNotAvailableError, match="later"):
        check(
            ListTopicsResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="later"
            )
        )
