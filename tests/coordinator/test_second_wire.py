"""A second wire plugs into the server with its own framing, codec and login, and shares
everything else: the admission, the intake, the request path and the close.

The wire here is a made-up one: huddle's framing and codec, but no handshake (every
connection is taken as logged in, as a listener behind a trusted proxy might be)."""

from __future__ import annotations

import asyncio

import msgspec

from huddle.client.connection import connect
from huddle.coordinator.connection import Connection
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.errors import ErrorCode
from huddle.protocol.framing import ClientCodec, FrameReader, ServerCodec
from huddle.protocol.messages import (
    Call,
    ClientFrame,
    CreateTopicsRequest,
    ListTopicsRequest,
    ListTopicsResponse,
    Reply,
    TopicSpec,
)
from tests.helpers import fast_server_config, wait_until


class NoLoginWire:
    """A ``Wire[Connection]`` whose connections need no handshake."""

    def __init__(self) -> None:
        self.taken = 0
        self._decode = msgspec.msgpack.Decoder(ClientFrame).decode

    def framing(self, max_frame_bytes: int) -> FrameReader:
        return FrameReader(max_frame_bytes)

    def codec(self) -> ServerCodec:
        return ServerCodec()

    def take(self, conn: Connection, body: bytes) -> Call | None:
        conn.handshaken = True
        frame = self._decode(body)
        if type(frame) is not Call:
            conn.fail(ErrorCode.INVALID_REQUEST, "requests only", event="bad_frame")
            return None
        self.taken += 1
        return frame

    def overdue(self, conn: Connection, timeout_ms: int) -> tuple[ErrorCode, str] | None:
        return None

    def gone(self, conn: Connection) -> None:
        pass


async def test_a_second_wire_is_served_by_the_same_request_path() -> None:
    """A request on the second wire, sent without any handshake, is answered by the same
    core (it sees the topic created through huddle's own wire), and its connection is one
    of the server's."""
    wire = NoLoginWire()
    async with CoordinatorServer(fast_server_config()) as server:
        port = await server.listen(wire, "127.0.0.1", 0)
        assert port != server.port
        async with connect(f"127.0.0.1:{server.port}") as client:
            created = await client.request(
                CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=3)]), timeout=5
            )
            assert created.error_code == ErrorCode.NONE
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        codec, frames = ClientCodec(), FrameReader()
        writer.write(codec.encode(Call(correlation_id=7, request=ListTopicsRequest())))
        bodies: list[bytes] = []
        while not bodies:
            bodies = frames.feed(await asyncio.wait_for(reader.read(65536), 5))
        reply = codec.decode(bodies[0])
        assert isinstance(reply, Reply), reply
        assert reply.correlation_id == 7
        assert isinstance(reply.response, ListTopicsResponse)
        assert [t.name for t in reply.response.topics] == ["t"]
        assert wire.taken == 1
        (conn,) = server.connections()
        assert conn.wire is wire
        writer.close()
        await wait_until(lambda: server.connection_count == 0, what="the connection to close")


async def test_closing_the_server_closes_the_second_wire_too() -> None:
    server = CoordinatorServer(fast_server_config())
    await server.start()
    port = await server.listen(NoLoginWire(), "127.0.0.1", 0)
    await server.close()
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return
    writer.close()
    raise AssertionError("the second wire's listener is still open")
