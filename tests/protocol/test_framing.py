"""protocol.framing: splitting a byte stream into frames, limits, the codecs."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from huddle.protocol.errors import CorruptMessageError, MessageTooLargeError
from huddle.protocol.framing import HEADER_SIZE, ClientCodec, FrameReader, ServerCodec, frame_header
from huddle.protocol.messages import (
    Call,
    Handshake,
    HandshakeResult,
    HeartbeatResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    RebalanceStarted,
    Reply,
)


def framed(body: bytes) -> bytes:
    return frame_header(len(body)) + body


def test_header_is_four_bytes_big_endian() -> None:
    assert HEADER_SIZE == 4
    assert frame_header(258) == b"\x00\x00\x01\x02"


def test_whole_frame() -> None:
    reader = FrameReader()
    assert reader.feed(framed(b"abc")) == [b"abc"]
    assert not reader.mid_frame


def test_several_frames_in_one_read() -> None:
    reader = FrameReader()
    data = framed(b"one") + framed(b"two") + framed(b"three")
    assert reader.feed(data) == [b"one", b"two", b"three"]
    assert not reader.mid_frame


def test_frame_split_byte_by_byte() -> None:
    reader = FrameReader()
    data = framed(b"hello") + framed(b"world")
    out: list[bytes] = []
    for i in range(len(data)):
        out += reader.feed(data[i : i + 1])
        assert reader.mid_frame == (i + 1 not in (9, 18))
    assert out == [b"hello", b"world"]


def test_partial_header_then_rest() -> None:
    reader = FrameReader()
    data = framed(b"xyz")
    assert reader.feed(data[:2]) == []
    assert reader.mid_frame
    assert reader.feed(data[2:] + data[:5]) == [b"xyz"]
    assert reader.mid_frame  # the next frame has begun
    assert reader.feed(data[5:]) == [b"xyz"]


def test_accepts_memoryview_and_bytearray() -> None:
    reader = FrameReader()
    assert reader.feed(memoryview(framed(b"a"))) == [b"a"]
    assert reader.feed(bytearray(framed(b"b"))) == [b"b"]


def test_frame_at_the_limit_is_accepted() -> None:
    reader = FrameReader(max_frame_bytes=8)
    assert reader.feed(framed(b"12345678")) == [b"12345678"]


def test_frame_over_the_limit_is_refused_from_its_header() -> None:
    reader = FrameReader(max_frame_bytes=8)
    with pytest.raises(MessageTooLargeError, match="9 bytes is over the limit of 8"):
        reader.feed(frame_header(9))


def test_oversize_after_good_frames_in_the_same_read() -> None:
    reader = FrameReader(max_frame_bytes=8)
    with pytest.raises(MessageTooLargeError):
        reader.feed(framed(b"ok") + frame_header(1_000_000))


@pytest.mark.parametrize(
    ("bad", "kind"),
    [(frame_header(1_000_000), MessageTooLargeError), (bytes(4), CorruptMessageError)],
)
def test_split_gives_the_frames_before_a_bad_header_with_its_error(
    bad: bytes, kind: type[Exception]
) -> None:
    reader = FrameReader(max_frame_bytes=8)
    frames, error = reader.split(framed(b"one") + framed(b"two") + bad + framed(b"lost"))
    assert frames == [b"one", b"two"]
    assert isinstance(error, kind)
    assert not reader.mid_frame  # nothing after a bad header is kept
    assert reader.split(framed(b"ok")) == ([b"ok"], None)


def test_zero_length_frame_is_corrupt() -> None:
    reader = FrameReader()
    with pytest.raises(CorruptMessageError, match="empty frame"):
        reader.feed(b"\x00\x00\x00\x00")


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        FrameReader(0)


@given(
    bodies=st.lists(st.binary(min_size=1, max_size=64), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=2_000), max_size=20),
)
def test_any_chunking_gives_the_same_frames(bodies: list[bytes], cuts: list[int]) -> None:
    data = b"".join(framed(b) for b in bodies)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    reader = FrameReader(max_frame_bytes=64)
    out: list[bytes] = []
    for start, stop in itertools.pairwise(points):
        out += reader.feed(data[start:stop])
    assert out == bodies
    assert not reader.mid_frame


def test_codecs_meet_in_the_middle() -> None:
    client, server = ClientCodec(), ServerCodec()
    reader = FrameReader()
    hello = Handshake(version=1, client_id="c")
    call = Call(correlation_id=5, request=ListTopicsRequest(topics=["a"]))
    bodies = reader.feed(client.encode(hello) + client.encode(call))
    assert [server.decode(b) for b in bodies] == [hello, call]
    reply = Reply(correlation_id=5, response=ListTopicsResponse())
    (body,) = reader.feed(server.encode(reply))
    assert client.decode(body) == reply


def test_encode_into_appends_whole_frames_a_reader_splits_again() -> None:
    codec = ServerCodec()
    buffer = bytearray()
    frames = [
        HandshakeResult(),
        Reply(correlation_id=7, response=HeartbeatResponse()),
        RebalanceStarted(group_id="g", generation_id=3, reason="r"),
    ]
    for message in frames:
        codec.encode_into(message, buffer)
    assert bytes(buffer) == b"".join(codec.encode(m) for m in frames)
    client = ClientCodec()
    assert [client.decode(body) for body in FrameReader().feed(buffer)] == frames
