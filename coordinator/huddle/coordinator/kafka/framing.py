"""Kafka's framing: each request and response is a 4-byte big-endian size, then that many
bytes. The same cut as huddle's own wire (``FrameReader``: a size over the limit, or an
empty frame, closes the connection); a response is framed here."""

from __future__ import annotations

from typing import Final

from huddle.protocol.framing import HEADER_SIZE, FrameReader

SIZE_BYTES: Final = HEADER_SIZE


def reader(max_frame_bytes: int) -> FrameReader:
    """A new connection's framing: requests of at most ``max_frame_bytes``."""
    return FrameReader(max_frame_bytes)


def framed(body: bytes | bytearray) -> bytes:
    """``body`` behind its size."""
    return len(body).to_bytes(SIZE_BYTES, "big") + body
