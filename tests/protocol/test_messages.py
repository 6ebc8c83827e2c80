"""protocol.messages: every message survives the codecs; bad shapes are refused."""

from __future__ import annotations

import types
import typing
import uuid
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from huddle.protocol.errors import ErrorCode
from huddle.protocol.framing import ClientCodec, FrameReader, ServerCodec
from huddle.protocol.messages import (
    Call,
    ClientFrame,
    Handshake,
    HandshakeResult,
    ListTopicsRequest,
    Message,
    Notice,
    Reply,
    Request,
    Response,
    SaslAuthenticate,
    SaslAuthenticateResult,
    ServerFrame,
)


def leaves(cls: type) -> set[type]:
    subclasses: list[type] = cls.__subclasses__()
    found: set[type] = set() if subclasses else {cls}
    for sub in subclasses:
        found |= leaves(sub)
    return found


def message_classes() -> set[type[Message]]:
    return {c for c in leaves(Message) if issubclass(c, Message)}


def members(union: Any) -> set[type]:
    return set(typing.get_args(union))


def by_name(classes: set[type]) -> list[type]:
    return sorted(classes, key=lambda c: c.__name__)


REQUESTS = members(Request)
RESPONSES = members(Response)
NOTICES = members(Notice)


def strategy(tp: Any) -> st.SearchStrategy[Any]:
    """Values of a message field type, Structs built field by field."""
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        fields = {f.name: strategy(f.type) for f in msgspec.structs.fields(tp)}
        return st.builds(tp, **fields)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:  # bounded strings and lists: within the bound
        inner, meta = args
        if inner is str:
            return st.text(max_size=min(12, meta.max_length))
        if inner is bytes:
            least = meta.min_length or 0
            return st.binary(min_size=least, max_size=min(least + 12, meta.max_length))
        return strategy(inner).filter(lambda value: len(value) <= meta.max_length)
    if origin is list:
        return st.lists(strategy(args[0]), max_size=3)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(strategy(a) for a in args))
    simple: dict[Any, st.SearchStrategy[Any]] = {
        type(None): st.none(),
        bool: st.booleans(),
        int: st.integers(min_value=-(2**63), max_value=2**63 - 1),
        float: st.floats(allow_nan=False),  # NaN is not equal to itself
        str: st.text(max_size=12),
        bytes: st.binary(max_size=12),
        ErrorCode: st.sampled_from(ErrorCode),
        uuid.UUID: st.uuids(),
    }
    return simple[tp]


def test_every_message_is_in_a_union() -> None:
    greeting = {Handshake, HandshakeResult, SaslAuthenticate, SaslAuthenticateResult}
    wired = REQUESTS | RESPONSES | NOTICES | greeting | {Call, Reply}
    assert leaves(Message) == wired
    assert members(ClientFrame) == {Handshake, SaslAuthenticate, Call}
    assert members(ServerFrame) == {HandshakeResult, SaslAuthenticateResult, Reply} | NOTICES


def test_tags_are_unique_snake_case() -> None:
    tags = [cls.__struct_config__.tag for cls in message_classes()]
    assert len(set(tags)) == len(tags)
    assert all(isinstance(t, str) and t == t.lower() and " " not in t for t in tags)


def roundtrip_client(frame: ClientFrame) -> ClientFrame:
    (body,) = FrameReader().feed(ClientCodec().encode(frame))
    return ServerCodec().decode(body)


def roundtrip_server(frame: ServerFrame) -> ServerFrame:
    (body,) = FrameReader().feed(ServerCodec().encode(frame))
    return ClientCodec().decode(body)


@pytest.mark.parametrize("cls", by_name(REQUESTS))
@given(data=st.data())
def test_requests_roundtrip(cls: type, data: st.DataObject) -> None:
    request = data.draw(strategy(cls))
    call = Call(correlation_id=data.draw(st.integers(0, 2**31)), request=request)
    assert roundtrip_client(call) == call


@pytest.mark.parametrize("cls", by_name(RESPONSES))
@given(data=st.data())
def test_responses_roundtrip(cls: type, data: st.DataObject) -> None:
    reply = Reply(
        correlation_id=data.draw(st.integers(0, 2**31)), response=data.draw(strategy(cls))
    )
    assert roundtrip_server(reply) == reply


@pytest.mark.parametrize("cls", by_name(NOTICES | {HandshakeResult}))
@given(data=st.data())
def test_notices_and_handshake_results_roundtrip(cls: type, data: st.DataObject) -> None:
    frame = data.draw(strategy(cls))
    assert roundtrip_server(frame) == frame


@given(hello=strategy(Handshake))
def test_handshake_roundtrips(hello: Handshake) -> None:
    assert roundtrip_client(hello) == hello


def test_unknown_request_type_is_a_validation_error() -> None:
    body = msgspec.msgpack.encode({"type": "call", "correlation_id": 4, "request": {"type": "x"}})
    with pytest.raises(msgspec.ValidationError):
        ServerCodec().decode(body)


def test_unknown_frame_type_is_a_validation_error() -> None:
    with pytest.raises(msgspec.ValidationError):
        ServerCodec().decode(msgspec.msgpack.encode({"type": "nope"}))


def test_wrong_field_type_is_a_validation_error() -> None:
    body = msgspec.msgpack.encode({"type": "handshake", "version": "1"})
    with pytest.raises(msgspec.ValidationError, match="version"):
        ServerCodec().decode(body)


def test_not_msgpack_is_a_decode_error() -> None:
    with pytest.raises(msgspec.DecodeError):
        ServerCodec().decode(b"\xc1")


def test_correlation_id_of_an_undecodable_call() -> None:
    codec = ServerCodec()
    bad = {"type": "call", "correlation_id": 42, "request": {"type": "list_topics", "topics": 7}}
    body = msgspec.msgpack.encode(bad)
    with pytest.raises(msgspec.ValidationError):
        codec.decode(body)
    assert codec.correlation_id(body) == 42


@pytest.mark.parametrize(
    "value", [[1, 2], "text", {"type": "call"}, {"correlation_id": "seven"}, 3]
)
def test_no_correlation_id_to_read(value: object) -> None:
    assert ServerCodec().correlation_id(msgspec.msgpack.encode(value)) is None


def test_correlation_id_of_garbage() -> None:
    assert ServerCodec().correlation_id(b"\xc1\xc1") is None


def test_messages_are_frozen() -> None:
    request = ListTopicsRequest()
    with pytest.raises(AttributeError):
        request.topics = ["x"]  # type: ignore[misc]


def test_handshake_result_defaults() -> None:
    result = HandshakeResult()
    assert result.error_code == ErrorCode.NONE
    assert result.version == 2  # 2: the consumer group protocol's messages
    assert result.supported_versions == [1, 2]
