"""Heartbeat requests read, and their answers written, by hand: kio is not used for them.

A Kafka member sends a Heartbeat every few seconds, and a heartbeat is the one request a
coordinator answers in bulk; kio's generic reader and writer (its writer is pure Python)
cost several times what the core spends on one. Here, one Heartbeat of any served version
(0-4; v4 flexible, with request header v2) is read in one pass, and its answer is a few
packed integers. The bytes read and written are kio's exactly
(``tests/kafka/test_heartbeat_fast.py`` checks every version against it).

``read`` reads only what it can read plainly: anything else (another API or version, a
tagged field, a null or negative length where Kafka allows none, a string that is not
UTF-8, bytes left over, a name over huddle's bounds) is None, and the request goes the
usual way (``header``, ``schemas``, ``groups``), which keeps its answer for bad input.
What it returns is a ``HeartbeatRequest`` within the bounds huddle's wire holds every
request to, so the wire need not check it again.
"""

from __future__ import annotations

import struct
from typing import Final

from huddle.coordinator.kafka import header, schemas
from huddle.coordinator.kafka.apis import SERVED, Api
from huddle.protocol.errors import ErrorCode, HuddleError
from huddle.protocol.messages import (
    MAX_GROUP_ID,
    MAX_INSTANCE_ID,
    MAX_MEMBER_ID,
    HeartbeatRequest,
)

HEARTBEAT: Final = int(Api.HEARTBEAT)
_LOWEST, _HIGHEST = SERVED[Api.HEARTBEAT]
VERSIONS: Final = range(max(_LOWEST, 0), min(_HIGHEST, 4) + 1)  # served, and read here: 0-4
FLEXIBLE_FROM: Final = 4
INSTANCE_ID_FROM: Final = 3

# api key, version, correlation id, client id length: the start of request headers v1 and v2
_HEAD: Final = struct.Struct(">hhih")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_CORRELATION_AT: Final = 4  # after the API key and version
# The answers, framed (size, correlation id, ...): v0 is the error code alone; v1-3 put the
# throttle time (0) first; v4 adds response header v1's and the body's empty tagged fields.
_V0: Final = struct.Struct(">iih")
_V1: Final = struct.Struct(">iiih")
_V4: Final = struct.Struct(">iiBihB")
_KNOWN: Final = schemas.error_codes()
_UNKNOWN_SERVER_ERROR: Final = int(ErrorCode.UNKNOWN_SERVER_ERROR)

Read = tuple[int, int, str, HeartbeatRequest]
"""What ``read`` returns: the version, the correlation id, the client id (cut to 255
characters, None read as "") and the core's request."""


class Reader:
    """One connection's Heartbeats: a member sends the same request each time but for its
    correlation id, so the last one read is kept, and a request of the same bytes but for
    those four is that one again (``read`` is a function of the bytes alone)."""

    __slots__ = ("_client_id", "_head", "_request", "_size", "_tail", "_version")

    def __init__(self) -> None:
        self._size = 0  # no request is empty: nothing is kept yet
        self._head = self._tail = b""
        self._version = 0
        self._client_id = ""
        self._request: HeartbeatRequest | None = None

    def read(self, body: bytes) -> Read | None:
        """``read(body)``, from the last one when it is the same request."""
        request = self._request
        if (
            len(body) == self._size
            and request is not None
            and body.endswith(self._tail)
            and body.startswith(self._head)
        ):
            (correlation_id,) = _INT32.unpack_from(body, _CORRELATION_AT)
            return self._version, correlation_id, self._client_id, request
        beat = read(body)
        if beat is not None:
            self._version, _, self._client_id, self._request = beat
            self._size = len(body)
            self._head = body[:_CORRELATION_AT]
            self._tail = body[_CORRELATION_AT + _INT32.size :]
        return beat


class _NotPlainError(HuddleError):
    """What ``read`` leaves to the usual path (never raised out of it)."""


def read(body: bytes) -> Read | None:
    """The Heartbeat in a request's ``body`` (its frame without the size), or None when it
    is not one this module reads (see the module's doc)."""
    if len(body) < _HEAD.size:
        return None
    api_key, version, correlation_id, length = _HEAD.unpack_from(body)
    if api_key != HEARTBEAT or version not in VERSIONS:
        return None
    try:
        at = _HEAD.size
        if length > 0:
            end = at + length
            if end > len(body):
                return None
            client_id = body[at:end].decode()[: header.MAX_CLIENT_ID]
            at = end
        elif length < -1:
            return None
        else:
            client_id = ""
        if version >= FLEXIBLE_FROM:
            request, at = _flexible(body, at)
        else:
            request, at = _legacy(body, at, version)
    except (_NotPlainError, IndexError, struct.error, UnicodeDecodeError):
        return None
    if at != len(body):
        return None
    return version, correlation_id, client_id, request


def _legacy(body: bytes, at: int, version: int) -> tuple[HeartbeatRequest, int]:
    """v0-3: strings of a 2-byte length; the instance id (v3) may be null."""
    group_id, at = _string(body, at, MAX_GROUP_ID)
    (generation_id,) = _INT32.unpack_from(body, at)
    member_id, at = _string(body, at + 4, MAX_MEMBER_ID)
    instance_id = None
    if version >= INSTANCE_ID_FROM:
        (length,) = _INT16.unpack_from(body, at)
        if length != -1:
            instance_id, at = _string(body, at, MAX_INSTANCE_ID)
        else:
            at += 2
    request = HeartbeatRequest(
        group_id=group_id,
        generation_id=generation_id,
        member_id=member_id,
        group_instance_id=instance_id,
    )
    return request, at


def _string(body: bytes, at: int, bound: int) -> tuple[str, int]:
    (length,) = _INT16.unpack_from(body, at)
    start = at + 2
    end = start + length
    if length < 0 or end > len(body):
        raise _NotPlainError
    text = body[start:end].decode()
    if len(text) > bound:
        raise _NotPlainError
    return text, end


def _flexible(body: bytes, at: int) -> tuple[HeartbeatRequest, int]:
    """v4: request header v2 (its tagged fields: none), then compact strings (a varint of
    the length plus one; 0 is null, for the instance id only) and no tagged fields."""
    if body[at]:
        raise _NotPlainError  # the header has tagged fields
    group_id, at = _compact(body, at + 1, MAX_GROUP_ID)
    (generation_id,) = _INT32.unpack_from(body, at)
    member_id, at = _compact(body, at + 4, MAX_MEMBER_ID)
    instance_id = None
    if body[at]:
        instance_id, at = _compact(body, at, MAX_INSTANCE_ID)
    else:
        at += 1
    if body[at]:
        raise _NotPlainError  # the request has tagged fields
    request = HeartbeatRequest(
        group_id=group_id,
        generation_id=generation_id,
        member_id=member_id,
        group_instance_id=instance_id,
    )
    return request, at + 1


def _compact(body: bytes, at: int, bound: int) -> tuple[str, int]:
    length = body[at]
    at += 1
    if length & 0x80:  # a varint of two bytes: up to 16,383 (the bounds are far lower)
        high = body[at]
        at += 1
        if high & 0x80:
            raise _NotPlainError
        length = (length & 0x7F) | high << 7
    if length == 0:
        raise _NotPlainError  # null
    end = at + length - 1
    if end > len(body):
        raise _NotPlainError
    text = body[at:end].decode()
    if len(text) > bound:
        raise _NotPlainError
    return text, end


def response(version: int, correlation_id: int, error_code: int) -> bytes:
    """The Heartbeat answer of ``version``, framed, as kio writes it (an error code kio does
    not know is UNKNOWN_SERVER_ERROR, as ``schemas.kafka_error`` makes it)."""
    code = error_code if error_code in _KNOWN else _UNKNOWN_SERVER_ERROR
    if version >= FLEXIBLE_FROM:
        return _V4.pack(_V4.size - 4, correlation_id, 0, 0, code, 0)
    if version:
        return _V1.pack(_V1.size - 4, correlation_id, 0, code)
    return _V0.pack(_V0.size - 4, correlation_id, code)
