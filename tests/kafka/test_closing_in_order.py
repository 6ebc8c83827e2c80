"""A connection the Kafka listener closes still gets, first, the answers it is owed for
the requests it sent before the one that closed it: Kafka reads a connection's requests
one at a time, so every earlier answer has left before the closing request is even read."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest
from structlog.typing import EventDict

from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from tests.helpers import FAST_GROUP, fast_server_config, wait_until
from tests.kafka.raw import RawKafka, parse, request, request_bytes
from tests.kafka_log.records import batch, produce_request

_JOIN = {
    "group_id": "g",
    "session_timeout": 10_000,
    "rebalance_timeout": 10_000,
    "member_id": "",
    "protocol_type": "consumer",
    "protocols": [{"name": "range", "metadata": b"\x00\x01"}],
}


async def test_an_acks_0_produce_refused_behind_a_held_join_closes_after_the_join_s_answer() -> (
    None
):
    """A JoinGroup held by the group's initial delay, then a Produce with acks=0 to a topic
    that does not exist, then an ApiVersions, pipelined: the JoinGroup is answered, then
    the connection closed (the Produce has no answer; the ApiVersions is not read)."""
    refused = produce_request(9, {("no-such-topic", 0): batch()}, acks=0)
    await _join_answered_then_closed(request_bytes(Api.PRODUCE, 9, 2, refused))


async def _join_answered_then_closed(middle: bytes) -> None:
    """A held JoinGroup, ``middle``, an ApiVersions, pipelined: the JoinGroup's answer
    arrives (its member in the group), then the connection closes."""
    group = replace(FAST_GROUP, initial_rebalance_delay_ms=300)
    async with CoordinatorServer(fast_server_config(group=group)) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        async with RawKafka(wire.port) as conn:
            join = request_bytes(Api.JOIN_GROUP, 3, 1, request(Api.JOIN_GROUP, 3, **_JOIN))
            after = request_bytes(Api.API_VERSIONS, 0, 3, request(Api.API_VERSIONS, 0))
            conn.write(join + middle + after)
            correlation_id, body = await conn.read()
            assert correlation_id == 1
            joined = parse(Api.JOIN_GROUP, 3, body)
            assert joined.error_code == 0
            assert joined.member_id == joined.leader
            assert await conn.closed()


def _framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


_HEARTBEAT = request_bytes(
    Api.HEARTBEAT, 0, 2, request(Api.HEARTBEAT, 0, group_id="g", generation_id=1, member_id="m")
)
BAD_BEHIND = {
    "a version not served": (_framed(struct.pack(">hhi", Api.HEARTBEAT, 99, 2)), "kafka_closed"),
    "an unknown API key": (_framed(struct.pack(">hhi", 999, 0, 2)), "kafka_closed"),
    "a request shorter than its header": (_framed(b"\x00\x0c\x00"), "kafka_bad_request"),
    "a truncated request body": (
        struct.pack(">i", len(_HEARTBEAT) - 7) + _HEARTBEAT[4:-3],
        "kafka_bad_request",
    ),
    # a bad frame header: the connection's shared framing reads it, and closes through
    # the wire (``Wire.after_answers``)
    "an oversized frame": (struct.pack(">i", 2**31 - 1), "bad_frame"),
    "a negative frame size": (struct.pack(">i", -5), "bad_frame"),
}


@pytest.mark.parametrize("case", list(BAD_BEHIND))
async def test_bad_input_behind_a_held_join_closes_after_the_join_s_answer(
    logs: list[EventDict], case: str
) -> None:
    """A JoinGroup held by the group's initial delay, then bad input, then an ApiVersions,
    pipelined: the JoinGroup is answered (its member is in the group), then the connection
    is closed after a log line; the ApiVersions is not read."""
    bad, event = BAD_BEHIND[case]
    await _join_answered_then_closed(bad)
    assert [e for e in logs if e["event"] == event], f"{case}: no {event} line"


async def test_a_bad_frame_header_read_alone_behind_a_held_join_closes_after_its_answer(
    logs: list[EventDict],
) -> None:
    """A JoinGroup held by the group's initial delay, then, in a later read once the
    member is in the group, an oversized frame header: the JoinGroup is still answered,
    then the connection is closed (``bad_frame``)."""
    group = replace(FAST_GROUP, initial_rebalance_delay_ms=1_000)
    async with CoordinatorServer(fast_server_config(group=group)) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        async with RawKafka(wire.port) as conn:
            conn.send(Api.JOIN_GROUP, 3, 1, **_JOIN)
            await wait_until(
                lambda: any(e["event"] == "member_added" for e in logs), what="the join is held"
            )
            conn.write(struct.pack(">i", 2**31 - 1))
            correlation_id, body = await conn.read()
            assert correlation_id == 1
            assert parse(Api.JOIN_GROUP, 3, body).error_code == 0
            assert await conn.closed()
    assert [e for e in logs if e["event"] == "bad_frame"]
