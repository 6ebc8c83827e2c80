"""What the Kafka listener must do with a stream of bytes, read from the bytes alone.

``expect(stream)`` cuts the stream into frames as the listener does (a 4-byte big-endian
size, then the body; a size of 0 or over the limit ends the connection) and reads each
request as Kafka reads it: the header (v1 or v2) by kio's reader, the body as the listener
decodes it (``schemas.decode``: lengths and nulls checked as Kafka checks them, unknown
tagged fields skipped, then kio's reader of that API and version):

- a request that reads, of an API and version served, is answered: a response of its
  API and version with its correlation id, in request order (a Produce with acks=0 is
  not answered, and may end the connection if it was refused, as Kafka does);
- an ApiVersions of a version not served is answered in v0 (UNSUPPORTED_VERSION);
- anything else (too short for a header, an API or version not served, a request that
  does not read, a bad size) ends the connection, and nothing after it is answered.

``Expectation.check(frames)`` then holds what came back to that: each response read by
kio's reader of its API and version, with nothing left over. (The body is read by the
listener's own decoding, so a request both wrongly refuse goes unnoticed here: the
tests of ``huddle.coordinator.kafka.walk`` hold that decoding to Kafka's rules.)
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from huddle.coordinator.kafka import header, schemas, walk
from huddle.coordinator.kafka.apis import Api, served
from huddle.protocol.framing import DEFAULT_MAX_FRAME_BYTES

_FIXED: Final = struct.Struct(">hhi")
_SIZE: Final = struct.Struct(">I")
MAX_WAIT_MS: Final = 1_800_000  # what a request may legitimately be held, at most


@dataclass(frozen=True, slots=True)
class Answer:
    api_key: int
    version: int
    correlation_id: int


@dataclass
class Expectation:
    answers: list[Answer] = field(default_factory=list)  # in order
    closes: str | None = None  # why the listener must close the connection, if it must
    close_kind: str = ""  # the same, in a word or two (a report counts them)
    may_close: bool = False  # a refused acks=0 Produce may end it after the answers before
    wait_ms: int = 0  # how long answers may legitimately be held (JoinGroup, Fetch)
    ended_mid_frame: bool = False  # the stream ends inside a frame

    def check(
        self, responses: list[bytes], closed: bool, *, gave_up: bool = False
    ) -> tuple[list[str], list[Any]]:
        """What is wrong with ``responses`` (frame bodies, in order), received before the
        connection ``closed`` (or was left open after the last one expected; or this side
        ``gave_up`` waiting for answers that may rightly be held); and the responses that
        read, as kio read them."""
        problems, read = [], []
        if len(responses) > len(self.answers):
            problems.append(f"{len(responses)} responses to {len(self.answers)} requests")
        for body, answer in zip(responses, self.answers, strict=False):
            response = parse_response(body, answer)
            if isinstance(response, str):
                problems.append(response)
            else:
                read.append(response)
        ended = gave_up or (closed and (self.closes or self.may_close))
        if len(responses) < len(self.answers) and not ended:
            problems.append(
                f"{len(responses)} of {len(self.answers)} answers, "
                + ("then closed" if closed else "then nothing")
                + " (no request to end the connection)"
            )
        if self.closes and not (closed or gave_up):
            problems.append(f"left open after {self.closes}")
        return problems, read


@cache
def _header_reader(cls: Any) -> Any:
    return entity_reader(cls)


def _read_header(api_key: int, version: int, body: bytes) -> tuple[bytes, int]:
    """``body`` (without unknown tagged fields in its header) and where its header ends."""
    cls: Any = load_request_schema(api_key, version).__header_schema__
    try:
        _, size = _header_reader(cls)(body, 0)
    except KeyError:  # an unknown tag: skipped, as Kafka does
        body = walk.without_unknown(cls, body, 0)
        _, size = _header_reader(cls)(body, 0)
    return body, size


@cache
def _response_reader(api_key: int, version: int) -> tuple[Any, bool]:
    cls = load_response_schema(api_key, version)
    # response header v1 (tagged fields) for flexible versions, but ApiVersions' (v0)
    return entity_reader(cls), bool(cls.__flexible__) and api_key != Api.API_VERSIONS


def parse_response(body: bytes, answer: Answer) -> Any:
    """The response in ``body`` (kio's class of ``answer``'s API and version), or a ``str``
    that says what is wrong with it."""
    what = f"{Api(answer.api_key).name} v{answer.version} #{answer.correlation_id}"
    if len(body) < 4:
        return f"{what}: a response of {len(body)} bytes"
    (correlation_id,) = struct.unpack_from(">i", body)
    if correlation_id != answer.correlation_id:
        return f"{what}: answered with correlation id {correlation_id} (out of order)"
    reader, tagged = _response_reader(answer.api_key, answer.version)
    offset = 4
    try:
        if tagged:
            offset = header.skip_tagged_fields(body, offset)  # read as a request's are
        response, size = reader(body, offset)
    except Exception as exc:
        return f"{what}: the response does not read: {exc!r}"
    if offset + size != len(body):
        return f"{what}: {len(body) - offset - size} bytes left over in the response"
    return response


def expect(stream: bytes, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> Expectation:
    """What the listener must answer to ``stream``, sent on one connection."""
    out = Expectation()
    offset = 0
    while offset < len(stream):
        if len(stream) - offset < _SIZE.size:
            out.ended_mid_frame = True
            out.close_kind, out.closes = "mid-frame", "a stream ending inside a frame's size"
            break
        (size,) = _SIZE.unpack_from(stream, offset)
        if size == 0 or size > max_frame_bytes:
            out.close_kind, out.closes = "frame-size", f"a frame size of {size}"
            break
        end = offset + _SIZE.size + size
        if end > len(stream):
            out.ended_mid_frame = True
            out.close_kind, out.closes = "mid-frame", "a stream ending inside a frame"
            break
        refusal = _one(out, stream[offset + _SIZE.size : end])
        if refusal is not None:
            out.close_kind, out.closes = refusal
            break
        offset = end
    return out


def _one(out: Expectation, body: bytes) -> tuple[str, str] | None:
    """Add what ``body`` must be answered to ``out``; or why it ends the connection (in a
    word, then in full)."""
    if len(body) < _FIXED.size:
        return "too-short", f"a request of {len(body)} bytes"
    api_key, version, correlation_id = _FIXED.unpack_from(body)
    if not served(api_key, version):
        if api_key == Api.API_VERSIONS:
            out.answers.append(Answer(api_key, 0, correlation_id))
            return None
        return "not-served", f"API {api_key} v{version}, not served"
    try:
        body, header_size = _read_header(api_key, version, body)
        request = schemas.decode(api_key, version, body, header_size)
    except Exception as exc:
        name = Api(api_key).name
        return f"unreadable:{name}", f"{name} v{version} that does not read ({exc!r})"
    if api_key == Api.PRODUCE and request.acks == 0:
        out.may_close = True  # no answer; refused, it ends the connection
        return None
    out.answers.append(Answer(api_key, version, correlation_id))
    out.wait_ms += _held_ms(api_key, request)
    return None


def _held_ms(api_key: int, request: Any) -> int:
    """How long the listener may rightly hold this request's answer (Kafka's rules)."""
    if api_key == Api.FETCH:
        return _ms(request.max_wait)
    if api_key == Api.JOIN_GROUP:  # until the group's members rejoin, or its timeouts pass
        rebalance = getattr(request, "rebalance_timeout", request.session_timeout)
        return max(_ms(rebalance), _ms(request.session_timeout))
    return 0


def _ms(value: datetime.timedelta) -> int:
    return min(max(round(value.total_seconds() * 1000), 0), MAX_WAIT_MS)
