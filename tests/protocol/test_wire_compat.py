"""A newer coordinator and an older client (and the reverse) get along: unknown fields, codes,
notice types and response types do not break a connection; the coordinator sends a message
type only to peers whose protocol version knows it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from structlog.typing import EventDict

from huddle.client.connection import connect
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol import messages
from huddle.protocol.errors import (
    ErrorCode,
    HuddleError,
    NotCoordinatorError,
    ServerError,
    UnknownServerError,
    error_name,
    raise_for,
    to_code,
)
from huddle.protocol.framing import ClientCodec, frame_header
from huddle.protocol.messages import (
    PROTOCOL_VERSION,
    Call,
    ListTopicsRequest,
    ListTopicsResponse,
    RebalanceStarted,
    TopicMetadataChanged,
    known_in,
)
from tests.client.test_connection import Peer, fake_coordinator
from tests.helpers import wait_until, within

FIXTURE = Path(__file__).parent / "fixtures" / "newer_coordinator.jsonl"


def newer_frames() -> list[dict[str, Any]]:
    """What a version-2 coordinator sends, one frame a line (JSON for readability)."""
    return [json.loads(line) for line in FIXTURE.read_text().splitlines() if line]


def raw(frame: dict[str, Any]) -> bytes:
    body = msgspec.msgpack.encode(frame)
    return frame_header(len(body)) + body


def test_error_codes_are_integers_on_the_wire_and_known_ones_become_error_codes() -> None:
    assert to_code(27) is ErrorCode.REBALANCE_IN_PROGRESS
    assert to_code(87) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert ErrorCode.of(87) is None
    assert error_name(87) == "UNKNOWN_CODE_87"
    with pytest.raises(UnknownServerError) as caught:
        raise_for(87, "what a newer coordinator says")
    assert caught.value.error_code == 87
    assert "87" in str(caught.value)
    with pytest.raises(NotCoordinatorError) as known:
        raise_for(16)
    assert known.value.error_code == 16
    assert known.value.retriable


def test_the_codec_reads_a_newer_coordinators_known_frames_and_names_unknown_ones() -> None:
    codec = ClientCodec()
    frames = [raw(f) for f in newer_frames()]
    hello = codec.decode(frames[0][4:])
    assert isinstance(hello, messages.HandshakeResult)
    assert (hello.version, hello.disconnect_grace_ms) == (2, 500)  # new fields ignored
    with pytest.raises(msgspec.ValidationError):
        codec.decode(frames[1][4:])
    assert codec.tag(frames[1][4:]) == "group_tombstoned"
    reply = codec.decode(frames[2][4:])
    assert isinstance(reply, messages.Reply)
    assert reply.response.error_code == 87  # not a decoding failure
    assert codec.correlation_id(frames[3][4:]) == 2
    notice = codec.decode(frames[4][4:])
    assert notice == RebalanceStarted(group_id="g", generation_id=3, reason="member joined")


async def newer_coordinator(peer: Peer) -> None:
    """A scripted version-2 coordinator: it answers the handshake and three calls with the
    fixture's frames, pushing its unknown notice before the first reply."""
    hello, unknown_notice, unknown_code, unknown_response, notice, good = newer_frames()

    async def answer(frame: dict[str, Any]) -> None:
        call = await peer.receive()
        assert isinstance(call, Call)
        peer.writer.write(raw({**frame, "correlation_id": call.correlation_id}))

    assert isinstance(await peer.receive(), messages.Handshake)
    peer.writer.write(raw(hello) + raw(unknown_notice))
    await answer(unknown_code)
    await answer(unknown_response)
    peer.writer.write(raw(notice))
    await answer(good)
    await peer.writer.drain()
    await peer.receive()  # until the client closes


async def test_an_older_client_keeps_its_connection_to_a_newer_coordinator(
    logs: list[EventDict],
) -> None:
    async with fake_coordinator(newer_coordinator) as address, connect(address) as conn:
        assert conn.server_version == 2
        with pytest.raises(UnknownServerError) as caught:
            await conn.call(ListTopicsRequest(), ListTopicsResponse, timeout=5)
        assert caught.value.error_code == 87
        assert not conn.closed
        with pytest.raises(UnknownServerError, match="unreadable reply"):
            await conn.call(ListTopicsRequest(), ListTopicsResponse, timeout=5)
        assert not conn.closed
        assert await within(conn.notices.receive()) == RebalanceStarted(
            group_id="g", generation_id=3, reason="member joined"
        )
        listed = await conn.call(ListTopicsRequest(), ListTopicsResponse, timeout=5)
        assert [(t.name, t.partitions) for t in listed.topics] == [("t", 2)]
        assert not conn.closed
    skipped = [e for e in logs if e["event"] == "notice_unknown"]
    assert [e["notice_type"] for e in skipped] == ["group_tombstoned"]


def test_every_current_message_type_is_known_in_version_1() -> None:
    assert known_in(1, RebalanceStarted)
    assert known_in(1, TopicMetadataChanged)


async def test_the_coordinator_withholds_a_message_type_newer_than_the_peers_version(
    server: CoordinatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as if a version after the client's brought it
    monkeypatch.setattr(messages, "INTRODUCED_IN", {TopicMetadataChanged: PROTOCOL_VERSION + 1})
    async with connect(f"127.0.0.1:{server.port}") as conn:
        await wait_until(lambda: server.connection_count == 1, what="the server to see the client")
        (peer,) = server.connections()
        newer = TopicMetadataChanged(topics=[])
        older = RebalanceStarted(group_id="g", generation_id=1, reason="test")
        peer.send(newer)  # a peer of the current version could not read it: not sent
        peer.send(older)
        peer.flush()
        assert await within(conn.notices.receive()) == older  # the first notice to arrive
        peer.handshook(PROTOCOL_VERSION + 1)
        peer.send(newer)
        peer.flush()
        assert await within(conn.notices.receive()) == newer
        assert not conn.closed


def test_server_errors_and_client_errors_share_one_root() -> None:
    assert issubclass(UnknownServerError, ServerError)
    assert issubclass(ServerError, HuddleError)


async def test_a_newer_client_handshakes_again_with_an_older_coordinator_s_version() -> None:
    seen: list[int] = []

    async def older_coordinator(peer: Peer) -> None:
        hello = await peer.receive()
        assert isinstance(hello, messages.Handshake)
        seen.append(hello.version)
        if hello.version != 1:  # it speaks version 1 only, and says so
            await peer.send(
                messages.HandshakeResult(
                    error_code=ErrorCode.UNSUPPORTED_VERSION,
                    error_message=f"unsupported protocol version {hello.version}",
                    version=1,
                    supported_versions=[1],
                )
            )
            return
        await peer.send(messages.HandshakeResult(version=1, supported_versions=[1]))
        await peer.receive()  # until the client closes

    async with fake_coordinator(older_coordinator) as address, connect(address) as conn:
        assert not conn.closed
    assert seen == [PROTOCOL_VERSION, 1]
