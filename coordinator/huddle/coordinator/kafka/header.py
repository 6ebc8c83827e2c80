"""A Kafka request header: API key, API version, correlation id, client id.

Header v1 (the request's version is not flexible) ends after the client id; header v2 (a
flexible version) adds tagged fields, which are skipped. The client id is a nullable string
with a 2-byte length in both. The first eight bytes are read before anything else, so a
request of an API or version that is not served still has a correlation id to answer or
log.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from huddle.protocol.errors import HuddleError

_FIXED: Final = struct.Struct(">hhi")  # api key, api version, correlation id
_LENGTH: Final = struct.Struct(">h")
MAX_CLIENT_ID: Final = 255  # longer ones are cut: they name a member id and log lines


class RequestReadError(HuddleError, ValueError):
    """The request cannot be read: the connection that sent it is closed."""


@dataclass(frozen=True, slots=True)
class Start:
    """What every request begins with, whatever its version."""

    api_key: int
    version: int
    correlation_id: int


def start(body: bytes) -> Start:
    if len(body) < _FIXED.size:
        raise RequestReadError(f"a request of {len(body)} bytes is shorter than its header")
    api_key, version, correlation_id = _FIXED.unpack_from(body)
    return Start(api_key, version, correlation_id)


def client_id_and_end(body: bytes, flexible: bool) -> tuple[str, int]:
    """The client id (None read as "") and where the request's body begins."""
    offset = _FIXED.size
    if len(body) < offset + _LENGTH.size:
        raise RequestReadError("the request header ends before its client id")
    (length,) = _LENGTH.unpack_from(body, offset)
    offset += _LENGTH.size
    client_id = ""
    if length > 0:
        end = offset + length
        if end > len(body):
            raise RequestReadError("the client id runs past the end of the request")
        try:
            client_id = body[offset:end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RequestReadError("the client id is not UTF-8") from exc
        offset = end
    elif length < -1:
        raise RequestReadError(f"the client id has a negative length ({length})")
    if flexible:
        offset = skip_tagged_fields(body, offset)
    return client_id[:MAX_CLIENT_ID], offset


def skip_tagged_fields(body: bytes, offset: int) -> int:
    count, offset = _uvarint(body, offset)
    for _ in range(count):
        _, offset = _uvarint(body, offset)  # the tag
        size, offset = _uvarint(body, offset)
        offset += size
        if offset > len(body):
            raise RequestReadError("a tagged field of the header runs past the end of the request")
    return offset


def _uvarint(body: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if offset >= len(body):
            raise RequestReadError("the request header ends inside a varint")
        byte = body[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7
        if shift > 28:
            raise RequestReadError("a varint of the request header is longer than 5 bytes")
