"""Heartbeats read and answered by hand (``heartbeat_fast``): for every version, what is read
is what kio reads and the usual path makes of it, the answer is kio's bytes, and whatever
the hand-written reader does not read plainly goes the usual way, answered as before."""

from __future__ import annotations

import io
import struct
from typing import Any, cast

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_writer
from kio.static.primitive import i16, i32
from structlog.typing import EventDict

from huddle.coordinator.kafka import groups, header, heartbeat_fast, schemas
from huddle.coordinator.kafka.answers import KafkaCodec, Slot
from huddle.coordinator.kafka.apis import SERVED, Api
from huddle.coordinator.kafka.translate import Context
from huddle.coordinator.kafka.walk import uvarint
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    MAX_GROUP_ID,
    ErrorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    Reply,
    Request,
)
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka, parse

VERSIONS = list(heartbeat_fast.VERSIONS)
_CHECK = msgspec.msgpack.Decoder(Request).decode  # as the wire checks a core request


def heartbeat_body(
    version: int,
    correlation_id: int,
    client_id: str | None,
    group_id: str,
    generation_id: int,
    member_id: str,
    instance_id: str | None,
) -> bytes:
    """A Heartbeat request (header and body, no size) as kio writes it."""
    cls = load_request_schema(Api.HEARTBEAT, version)
    head = cls.__header_schema__(
        request_api_key=i16(Api.HEARTBEAT),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    fields: dict[str, Any] = {
        "group_id": group_id,
        "generation_id": generation_id,
        "member_id": member_id,
    }
    if version >= heartbeat_fast.INSTANCE_ID_FROM:
        fields["group_instance_id"] = instance_id
    out = io.BytesIO()
    entity_writer(cls.__header_schema__)(out, head)
    entity_writer(cls)(out, schemas.build(cls, fields))
    return out.getvalue()


def by_kio(body: bytes) -> heartbeat_fast.Read:
    """What the usual path makes of ``body``: the header read, kio's decoding, the
    translation (``groups.heartbeat``); raises where that path refuses it."""
    start = header.start(body)
    flexible = schemas.flexible(start.api_key, start.version)
    client_id, offset = header.client_id_and_end(body, flexible)
    decoded = schemas.decode(start.api_key, start.version, body, offset)
    (request,) = groups.heartbeat(decoded, start.version, cast(Context, None)).calls
    assert isinstance(request, HeartbeatRequest)
    return start.version, start.correlation_id, client_id, request


def _same_as_kio(body: bytes) -> heartbeat_fast.Read | None:
    """The reader's answer for ``body``: None, or exactly the usual path's, and a request
    the wire's bounds check (``KafkaWire._checked``) lets through."""
    fast = heartbeat_fast.read(body)
    if fast is not None:
        assert fast == by_kio(body)
        request = fast[3]
        assert _CHECK(msgspec.msgpack.encode(request)) == request
    return fast


_text = st.text(max_size=300)
_int32 = st.integers(-(2**31), 2**31 - 1)
_heartbeats = st.builds(
    heartbeat_body,
    version=st.sampled_from(VERSIONS),
    correlation_id=_int32,
    client_id=st.none() | _text,
    group_id=_text,
    generation_id=_int32,
    member_id=st.text(max_size=600),
    instance_id=st.none() | _text,
)


def test_every_version_served_is_read_here() -> None:
    assert (VERSIONS[0], VERSIONS[-1]) == SERVED[Api.HEARTBEAT] == (0, 4)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_is_read_as_kio_reads_it(version: int) -> None:
    body = heartbeat_body(version, 7, "client-1", "group", 3, "member-1", "instance")
    beat = _same_as_kio(body)
    assert beat is not None
    assert beat[:3] == (version, 7, "client-1")
    request = beat[3]
    assert (request.group_id, request.generation_id, request.member_id) == ("group", 3, "member-1")
    expected = "instance" if version >= heartbeat_fast.INSTANCE_ID_FROM else None
    assert request.group_instance_id == expected


@settings(max_examples=400, deadline=None)
@given(_heartbeats)
@example(heartbeat_body(4, 1, None, "g" * 200, -1, "", None))  # a two-byte varint
@example(heartbeat_body(3, 1, "c" * 300, "", 0, "m", ""))  # a client id that is cut
def test_any_heartbeat_is_read_as_kio_reads_it_or_left_to_it(body: bytes) -> None:
    beat = _same_as_kio(body)
    if beat is None:  # only over huddle's bounds: those are refused by the usual path
        with pytest.raises(msgspec.ValidationError):
            _CHECK(msgspec.msgpack.encode(by_kio(body)[3]))


@settings(max_examples=600, deadline=None)
@given(_heartbeats, st.data())
def test_damaged_heartbeats_are_read_as_kio_reads_them_or_left_to_it(
    body: bytes, data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(body)))
    kind = data.draw(st.sampled_from(["truncate", "replace", "insert", "append"]))
    if kind == "truncate":
        damaged = body[:cut]
    elif kind == "replace":
        damaged = body[:cut] + bytes([data.draw(st.integers(0, 255))]) + body[cut + 1 :]
    elif kind == "insert":
        damaged = body[:cut] + data.draw(st.binary(min_size=1, max_size=4)) + body[cut:]
    else:
        damaged = body + data.draw(st.binary(min_size=1, max_size=4))
    _same_as_kio(damaged)  # None, or what the usual path makes of it


def _tagged(body: bytes, at: int) -> bytes:
    """``body`` with one unknown tagged field (tag 1000) in the tag section at ``at``."""
    return body[:at] + b"\x01" + uvarint(1000) + uvarint(3) + b"abc" + body[at + 1 :]


def test_what_is_not_plain_is_left_to_the_usual_path() -> None:
    v4 = heartbeat_body(4, 1, "c", "g", 1, "m", None)
    v0 = heartbeat_body(0, 1, "c", "g", 1, "m", None)
    header_tags = 8 + 2 + 1  # after the client id "c"
    unread = {
        "a tagged field in the header": _tagged(v4, header_tags),
        "a tagged field in the body": _tagged(v4, len(v4) - 1),
        "bytes left over": v0 + b"\x00",
        "a null group id": v0[:11] + b"\xff\xff" + v0[14:],
        "another API": struct.pack(">h", Api.JOIN_GROUP) + v0[2:],
        "a version not served": v0[:2] + struct.pack(">h", 5) + v0[4:],
        "a group id over huddle's bound": heartbeat_body(0, 1, "c", "g" * 256, 1, "m", None),
    }
    for what, body in unread.items():
        assert heartbeat_fast.read(body) is None, what
    # the tagged fields are skipped by the usual path (as Kafka skips them)
    assert by_kio(unread["a tagged field in the body"])[3].group_id == "g"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_connections_reader_gives_what_read_gives(version: int) -> None:
    reader = heartbeat_fast.Reader()
    first = heartbeat_body(version, 1, "c", "g", 1, "m", "i")
    again = heartbeat_body(version, 2, "c", "g", 1, "m", "i")  # another correlation id
    other = heartbeat_body(version, 3, "c", "g", 2, "m", "i")  # another generation
    for body in (first, again, other, again, b"\x00\x0c", again):
        assert reader.read(body) == heartbeat_fast.read(body)
    beat = heartbeat_fast.read(first)
    assert beat is not None
    assert reader.read(again) == (version, 2, "c", beat[3])


_codes = st.sampled_from([int(c) for c in ErrorCode]) | st.integers(-(2**15), 2**15 - 1)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VERSIONS), _int32, _codes)
def test_the_answer_is_kios_bytes(version: int, correlation_id: int, code: int) -> None:
    cls = schemas.response_class(Api.HEARTBEAT, version)
    kio = schemas.encode(
        Api.HEARTBEAT, version, correlation_id, schemas.build(cls, {"error_code": code})
    )
    assert heartbeat_fast.response(version, correlation_id, code) == kio


def _answered(codec: KafkaCodec, version: int, response: Any) -> bytes:
    call_id = codec.open_one(Slot(Api.HEARTBEAT, version, 9, groups.error_only, 1))
    out = bytearray()
    codec.encode_into(Reply(correlation_id=call_id, response=response), out)
    return bytes(out)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_codec_answers_a_heartbeat_by_hand_within_its_limit(version: int) -> None:
    fenced = HeartbeatResponse(error_code=ErrorCode.FENCED_INSTANCE_ID)
    expected = heartbeat_fast.response(version, 9, ErrorCode.FENCED_INSTANCE_ID)
    assert _answered(KafkaCodec(1 << 20), version, fenced) == expected
    refused = ErrorResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message="no")
    answer = _answered(KafkaCodec(1 << 20), version, refused)
    assert parse(Api.HEARTBEAT, version, answer[8:]).error_code == 30
    # a limit below the answer's size: MESSAGE_TOO_LARGE, as any other answer over it
    too_small = _answered(KafkaCodec(4), version, fenced)
    assert parse(Api.HEARTBEAT, version, too_small[8:]).error_code == ErrorCode.MESSAGE_TOO_LARGE


# --- on the wire ----------------------------------------------------------------------


def _framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def test_heartbeats_of_every_version_are_answered_without_kio(
    kafka: Listening, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with RawKafka(kafka.port) as conn:
        assert (await conn.call(Api.API_VERSIONS, 0, 1)).error_code == 0  # logged in
        monkeypatch.setattr(schemas, "decode", _no_kio)
        monkeypatch.setattr(schemas, "encode", _no_kio)
        for version in VERSIONS:  # pipelined: answered in order
            conn.write(_framed(heartbeat_body(version, 10 + version, "c", "g", 1, "m", None)))
        for version in VERSIONS:
            correlation_id, answer = await conn.read()
            assert correlation_id == 10 + version
            assert parse(Api.HEARTBEAT, version, answer).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def _no_kio(*args: object) -> object:
    raise AssertionError("kio was used")


async def test_a_heartbeat_over_the_bounds_is_still_refused_as_invalid(kafka: Listening) -> None:
    async with RawKafka(kafka.port) as conn:
        assert (await conn.call(Api.API_VERSIONS, 0, 1)).error_code == 0
        long_group = "g" * (MAX_GROUP_ID + 1)
        conn.write(_framed(heartbeat_body(4, 2, "c", long_group, 1, "m", None)))
        correlation_id, answer = await conn.read()
        assert correlation_id == 2
        assert parse(Api.HEARTBEAT, 4, answer).error_code == ErrorCode.INVALID_REQUEST


_V0 = heartbeat_body(0, 2, "c", "g", 1, "m", None)
_V4 = heartbeat_body(4, 2, "c", "g", 1, "m", None)
BAD_AFTER_LOGIN = {
    "a truncated heartbeat": _V4[:-2],
    "a group id longer than the request": _V0[:11] + b"\x7f\xff" + _V0[13:],
    "a member id that is not UTF-8": _V0[:-3] + b"\x00\x01\xff",
    "a compact string longer than the request": _V4[:12] + b"\x7f" + _V4[13:],
}


@pytest.mark.parametrize("case", list(BAD_AFTER_LOGIN))
async def test_a_bad_heartbeat_after_login_closes_that_connection_as_before(
    kafka: Listening, logs: list[EventDict], case: str
) -> None:
    assert heartbeat_fast.read(BAD_AFTER_LOGIN[case]) is None
    async with RawKafka(kafka.port) as conn:
        assert (await conn.call(Api.API_VERSIONS, 0, 1)).error_code == 0
        conn.write(_framed(BAD_AFTER_LOGIN[case]))
        assert await conn.closed()
    bad = [e for e in logs if e["event"] == "kafka_bad_request"]
    assert [(e["api_key"], e["correlation_id"]) for e in bad] == [(Api.HEARTBEAT, 2)]
