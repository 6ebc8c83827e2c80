"""Bad input on the Kafka listener closes the connection that sent it, after a log line;
another client's connection is not disturbed."""

from __future__ import annotations

import struct

import pytest
from structlog.typing import EventDict

from huddle.coordinator.kafka.apis import Api
from huddle.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from tests.helpers import wait_until
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka, request, request_bytes


def _framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _header(api_key: int, version: int, correlation_id: int = 1) -> bytes:
    return struct.pack(">hhi", api_key, version, correlation_id)


_HEARTBEAT = request(Api.HEARTBEAT, 0, group_id="g", generation_id=1, member_id="m")
_GOOD_HEARTBEAT = request_bytes(Api.HEARTBEAT, 0, 1, _HEARTBEAT)

BAD_INPUT = {
    "an unknown API key": (_framed(_header(999, 0) + b"\x00\x00"), "kafka_closed"),
    "a version not served": (_framed(_header(Api.HEARTBEAT, 99) + b"\x00\x00"), "kafka_closed"),
    "a request shorter than its header": (_framed(b"\x00\x0c\x00"), "kafka_bad_request"),
    "a client id that is not UTF-8": (
        _framed(_header(Api.HEARTBEAT, 0) + b"\x00\x02\xff\xfe" + _GOOD_HEARTBEAT[4 + 12 :]),
        "kafka_bad_request",
    ),
    "a truncated request body": (_GOOD_HEARTBEAT[:-3], "kafka_bad_request"),
    "a string longer than the request": (
        _framed(_header(Api.HEARTBEAT, 0) + b"\x00\x01t" + b"\x7f\xff" + b"g"),
        "kafka_bad_request",
    ),
    "a frame over the size limit": (
        struct.pack(">i", DEFAULT_MAX_FRAME_BYTES + 1) + b"\x00" * 16,
        "bad_frame",
    ),
    "a negative frame size": (struct.pack(">i", -5) + b"\x00" * 8, "bad_frame"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
async def test_bad_input_closes_that_connection_only(
    kafka: Listening, logs: list[EventDict], case: str
) -> None:
    data, event = BAD_INPUT[case]
    async with RawKafka(kafka.port) as bystander, RawKafka(kafka.port) as bad:
        before = await bystander.call(Api.API_VERSIONS, 0, 1)
        assert before.error_code == 0
        if case == "a truncated request body":
            bad.write(struct.pack(">i", len(data) - 4) + data[4:])  # its size says it ends here
        else:
            bad.write(data)
        assert await bad.closed(), f"{case}: the connection stays open"
        await wait_until(lambda: kafka.server.connection_count == 1, what="the bad one to close")
        after = await bystander.call(Api.METADATA, 1, 2, topics=None)  # the bystander is served on
        assert after.brokers[0].port == kafka.port
    assert [e for e in logs if e["event"] == event], f"{case}: no {event} line"
    assert not [e for e in logs if e.get("log_level") in ("error", "critical")]
