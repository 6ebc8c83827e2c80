"""A second wire plugs into the server with its own framing, codec and login, and shares
everything else: the admission, the intake, the request path and the close.

The wires here are made-up ones: huddle's framing and codec, but no handshake (every
connection is taken as logged in, as a listener behind a trusted proxy might be); one of
them answers its connections in request order, as Kafka's wire must, and answers one kind
of frame itself."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import msgspec

from huddle.client.connection import connect
from huddle.coordinator.connection import Connection
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.errors import ErrorCode
from huddle.protocol.framing import ClientCodec, FrameReader, ServerCodec
from huddle.protocol.group_messages import (
    JoinGroupResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
)
from huddle.protocol.messages import (
    PROTOCOL_VERSION,
    Call,
    ClientFrame,
    CreateTopicsRequest,
    Handshake,
    HandshakeResult,
    ListTopicsRequest,
    ListTopicsResponse,
    Reply,
    ServerFrame,
    TopicSpec,
)
from tests.helpers import (
    DEADLINE_S,
    fast_server_config,
    join_request,
    raw_member,
    running_server,
    wait_until,
)


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

    in_order = False  # answers are matched by correlation id, as on huddle's own wire
    disconnect_grace_ms = None  # the server's
    listener = "second"

    def overdue(self, conn: Connection, timeout_ms: int) -> tuple[ErrorCode, str] | None:
        return None

    def gone(self, conn: Connection) -> None:
        pass

    def after_answers(self, conn: Connection, then: Callable[[], None]) -> None:
        then()


class InOrderWire(NoLoginWire):
    """A wire whose client reads answers in the order it sent its requests (as Kafka's
    clients do), and which answers a ``Handshake`` itself, as Kafka's wire answers
    ApiVersions."""

    in_order = True

    def take(self, conn: Connection, body: bytes) -> Call | None:
        frame = self._decode(body)
        if type(frame) is Handshake:
            conn.send(HandshakeResult())
            return None
        return super().take(conn, body)


class Pipelined:
    """A raw connection to a wire that sends frames back to back and reads what comes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.codec, self.frames = ClientCodec(), FrameReader()

    @classmethod
    async def open(cls, port: int) -> Pipelined:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def send(self, *frames: ClientFrame) -> None:
        self.writer.write(b"".join(self.codec.encode(frame) for frame in frames))

    async def read(self, count: int) -> list[ServerFrame]:
        """The next ``count`` frames, in the order they arrive."""
        read: list[ServerFrame] = []
        while len(read) < count:
            data = await asyncio.wait_for(self.reader.read(65536), DEADLINE_S)
            assert data, f"closed after {read}"
            read.extend(self.codec.decode(body) for body in self.frames.feed(data))
        return read

    def close(self) -> None:
        self.writer.close()


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


def correlation_ids(frames: list[ServerFrame]) -> list[int | str]:
    return [f.correlation_id if isinstance(f, Reply) else type(f).__name__ for f in frames]


async def test_an_in_order_wire_gets_its_answers_in_request_order() -> None:
    """A JoinGroup the core holds (the group waits for its other member), then a ListTopics
    and a frame the wire answers itself, sent back to back: the answers come in that order,
    the held JoinGroup's first (Kafka's clients fail a connection whose answer does not
    match their oldest request)."""
    async with running_server() as server:
        port = await server.listen(InOrderWire(), "127.0.0.1", 0)
        first, first_id, generation = await raw_member(server.port, "g")  # huddle's wire
        joiner = await Pipelined.open(port)
        joiner.send(Call(correlation_id=1, request=join_request(group_id="g")))
        (required,) = await joiner.read(1)
        assert isinstance(required, Reply)
        assert isinstance(required.response, JoinGroupResponse)
        member_id = required.response.member_id
        joiner.send(
            Call(correlation_id=2, request=join_request(member_id, group_id="g")),
            Call(correlation_id=3, request=ListTopicsRequest()),
            Handshake(version=PROTOCOL_VERSION, client_id="again"),
            Call(correlation_id=4, request=ListTopicsRequest()),
        )
        await wait_until(
            lambda: member_id in server.core.groups["g"].members, what="the second join held"
        )
        # the first member rejoins: the join phase ends, and the held JoinGroup is answered
        await first.send(Call(correlation_id=99, request=join_request(first_id, group_id="g")))
        answers = await joiner.read(4)
        assert correlation_ids(answers) == [2, 3, "HandshakeResult", 4], answers
        joined = answers[0]
        assert isinstance(joined, Reply)
        assert isinstance(joined.response, JoinGroupResponse)
        assert joined.response.error_code == ErrorCode.NONE
        assert joined.response.generation_id == generation + 1
        joiner.close()
        await first.close()


async def test_an_in_order_wire_gets_answers_held_for_the_data_dir_in_order(
    tmp_path: Path,
) -> None:
    """Commits whose answers wait for the data dir, with a frame the wire answers itself
    between them: every answer comes, in request order."""
    async with running_server(fast_server_config(data_dir=str(tmp_path))) as server:
        port = await server.listen(InOrderWire(), "127.0.0.1", 0)
        client = await Pipelined.open(port)
        client.send(
            Call(
                correlation_id=1,
                request=CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]),
            )
        )
        await client.read(1)
        commits = [
            Call(
                correlation_id=10 + offset,
                request=OffsetCommitRequest(
                    group_id="c",
                    topics=[
                        OffsetCommitTopic(
                            name="t", partitions=[OffsetCommitPartition(partition=0, offset=offset)]
                        )
                    ],
                ),
            )
            for offset in range(20)
        ]
        again = Handshake(version=PROTOCOL_VERSION, client_id="again")
        client.send(*commits[:10], again, *commits[10:])
        answers = await client.read(21)
        expected: list[int | str] = [10 + offset for offset in range(10)]
        expected += ["HandshakeResult", *(10 + offset for offset in range(10, 20))]
        assert correlation_ids(answers) == expected, answers
        assert all(
            isinstance(a.response, OffsetCommitResponse) and a.response.error_code == 0
            for a in answers
            if isinstance(a, Reply)
        )
        client.close()
