"""Length-prefixed frames: a 4-byte big-endian body length, then a msgpack body.

``FrameReader`` is sans-IO: feed it bytes as they arrive, take whole frame bodies out.
``ServerCodec`` and ``ClientCodec`` hold one typed msgspec encoder/decoder pair each, made
once per connection and reused for every frame.
"""

from __future__ import annotations

import struct
from typing import Final

import msgspec

from huddle.protocol.errors import CorruptMessageError, InvalidArgumentError, MessageTooLargeError
from huddle.protocol.messages import CallId, ClientFrame, Message, ServerFrame, Tagged

HEADER_SIZE = 4
_HEADER = struct.Struct(">I")
_NO_HEADER = bytes(HEADER_SIZE)
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
# What msgspec raises, besides its own errors, for some malformed input.
_UNREADABLE: tuple[type[Exception], ...] = (RecursionError, UnicodeDecodeError)
_NOT_READ: tuple[type[Exception], ...] = (msgspec.MsgspecError, *_UNREADABLE)


def frame_header(length: int) -> bytes:
    return length.to_bytes(HEADER_SIZE, "big")


class FrameReader:
    """Splits a byte stream into frame bodies, refusing frames over ``max_frame_bytes``."""

    __slots__ = ("_buffer", "_max")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 1:
            raise InvalidArgumentError("max_frame_bytes must be positive")
        self._buffer = bytearray()
        self._max = max_frame_bytes

    @property
    def buffered(self) -> int:
        """Bytes of an unfinished frame held."""
        return len(self._buffer)

    @property
    def mid_frame(self) -> bool:
        """True while part of a frame (header or body) is buffered."""
        return bool(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add bytes; return every complete frame body now available, in order.

        Raises MessageTooLargeError when a header announces a frame over the limit (and
        CorruptMessageError for an empty frame); the stream cannot be resynchronised after
        that and the connection should close.
        """
        frames, bad = self.split(data)
        if bad is not None:
            raise bad
        return frames

    def split(
        self, data: bytes | bytearray | memoryview
    ) -> tuple[list[bytes], MessageTooLargeError | CorruptMessageError | None]:
        """As ``feed``, but a bad header does not take the frames before it with it: the
        frames complete before it come back with the error (None: no bad header), so that
        a server answers them before it closes the connection. After a bad header nothing
        is buffered: the rest of the stream cannot be read."""
        buf = self._buffer
        buf += data
        frames: list[bytes] = []
        start = 0
        end = len(buf)
        while end - start >= HEADER_SIZE:
            length = int.from_bytes(buf[start : start + HEADER_SIZE], "big")
            bad: MessageTooLargeError | CorruptMessageError | None = None
            if length > self._max:
                bad = MessageTooLargeError(
                    f"frame of {length} bytes is over the limit of {self._max} bytes"
                )
            elif length == 0:
                bad = CorruptMessageError("empty frame")
            if bad is not None:
                buf.clear()
                return frames, bad
            stop = start + HEADER_SIZE + length
            if stop > end:
                break
            frames.append(bytes(buf[start + HEADER_SIZE : stop]))
            start = stop
        if start:
            del buf[:start]
        return frames, None


class _Codec:
    __slots__ = ("_call_id", "_encoder", "_tagged")

    def __init__(self) -> None:
        self._encoder = msgspec.msgpack.Encoder()
        self._call_id = msgspec.msgpack.Decoder(CallId)
        self._tagged = msgspec.msgpack.Decoder(Tagged)

    def correlation_id(self, body: bytes) -> int | None:
        """The correlation id of a call or reply whose content did not validate, if readable."""
        try:
            return self._call_id.decode(body).correlation_id
        except _NOT_READ:
            return None

    def tag(self, body: bytes) -> str | None:
        """The ``type`` of a frame body that did not validate, if it can be read."""
        try:
            return self._tagged.decode(body).type
        except _NOT_READ:
            return None

    def encode(self, message: Message) -> bytes:
        """One whole frame (header and body) for a message."""
        body = self._encoder.encode(message)
        return frame_header(len(body)) + body

    def encode_into(self, message: Message, buffer: bytearray) -> None:
        """Append one whole frame for a message to ``buffer`` (no intermediate copies)."""
        start = len(buffer)
        buffer += _NO_HEADER
        self._encoder.encode_into(message, buffer, -1)
        _HEADER.pack_into(buffer, start, len(buffer) - start - HEADER_SIZE)


class ServerCodec(_Codec):
    """The coordinator's side: decodes client frames, encodes server frames."""

    __slots__ = ("_decoder",)
    limits_size: Final = False  # one frame per encode: the connection checks its size

    def __init__(self) -> None:
        super().__init__()
        self._decoder: msgspec.msgpack.Decoder[ClientFrame] = msgspec.msgpack.Decoder(ClientFrame)

    def decode(self, body: bytes) -> ClientFrame:
        """Raises msgspec.DecodeError (not msgpack, nested too deeply, a string that is not
        UTF-8) or msgspec.ValidationError (wrong shape)."""
        try:
            return self._decoder.decode(body)
        except _UNREADABLE as exc:
            raise _unreadable(exc) from None


class ClientCodec(_Codec):
    """The member's side: decodes server frames, encodes client frames."""

    __slots__ = ("_decoder",)

    def __init__(self) -> None:
        super().__init__()
        self._decoder: msgspec.msgpack.Decoder[ServerFrame] = msgspec.msgpack.Decoder(ServerFrame)

    def decode(self, body: bytes) -> ServerFrame:
        """Raises as ``ServerCodec.decode`` does."""
        try:
            return self._decoder.decode(body)
        except _UNREADABLE as exc:
            raise _unreadable(exc) from None


def _unreadable(exc: Exception) -> msgspec.DecodeError:
    if isinstance(exc, RecursionError):
        return msgspec.DecodeError("MessagePack data is nested too deeply")
    return msgspec.DecodeError("MessagePack data holds a string that is not valid UTF-8")
