"""A bad frame header (over the size limit, or an empty frame) read in the same chunk as
whole frames before it: on either wire, those frames are served first, then the connection
is closed (the stream cannot be read past a bad header)."""

from __future__ import annotations

from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.protocol.errors import ErrorCode
from huddle.protocol.framing import ClientCodec, frame_header
from huddle.protocol.messages import (
    Call,
    ListTopicsRequest,
    ListTopicsResponse,
    ProtocolError,
    Reply,
)
from tests.helpers import RawClient, fast_server_config, running_server
from tests.kafka.raw import RawKafka, parse, request, request_bytes

OVER: bytes = frame_header(1 << 30)  # over any frame limit


async def test_the_huddle_wire_answers_the_frames_before_a_bad_header_then_closes() -> None:
    async with running_server(fast_server_config()) as server:
        raw = await RawClient.open(server.port)
        await raw.handshake()
        codec = ClientCodec()
        calls = b"".join(
            codec.encode(Call(correlation_id=i, request=ListTopicsRequest())) for i in (1, 2)
        )
        await raw.send_bytes(calls + OVER)
        frames = await raw.frames_until_closed()
        await raw.close()
    answered = [f for f in frames if isinstance(f, Reply)]
    assert [r.correlation_id for r in answered] == [1, 2]
    assert all(isinstance(r.response, ListTopicsResponse) for r in answered)
    assert isinstance(frames[-1], ProtocolError)  # then why it closes
    assert frames[-1].error_code == ErrorCode.MESSAGE_TOO_LARGE


async def test_the_kafka_wire_answers_the_frames_before_a_bad_header_then_closes() -> None:
    async with CoordinatorServer(fast_server_config()) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        async with RawKafka(wire.port) as conn:
            versions = request_bytes(Api.API_VERSIONS, 0, 1, request(Api.API_VERSIONS, 0))
            metadata = request_bytes(Api.METADATA, 1, 2, request(Api.METADATA, 1, topics=None))
            conn.write(versions + metadata + bytes(4))  # an empty frame
            first, body = await conn.read()
            assert first == 1
            assert parse(Api.API_VERSIONS, 0, body).error_code == 0
            second, body = await conn.read()
            assert second == 2
            assert parse(Api.METADATA, 1, body).brokers
            assert await conn.closed()
