"""Kafka's schemas, through kio: the only module of the listener that touches kio.

kio generates one frozen dataclass per API, version and direction from Kafka's own JSON
message definitions, with native readers (``entity_reader``) and writers. Here:

- ``request_class``/``response_class``: the classes of one API version;
- ``decode``: a request body of that version -> its dataclass;
- ``build``: a response of that version from a mapping of values named as kio names the
  fields. The mapping may hold more than the version has (a field of later versions is
  left out) and nested lists of mappings; error codes are plain numbers, durations
  milliseconds. So one translation serves every version of an API;
- ``encode``: a response, behind its header (v0, or v1 for flexible versions; ApiVersions'
  is always v0) and its size.

A tagged field is written only when it differs from its default (kio's writer does so):
librdkafka 2.0.2 misreads the tagged fields of an ApiVersions v3 answer.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KafkaErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta, i64Timedelta

from huddle.coordinator.kafka import walk
from huddle.coordinator.kafka.framing import SIZE_BYTES

API_VERSIONS_KEY: Final = 18
_CORRELATION: Final = struct.Struct(">i")
ZERO_UUID: Final = uuid.UUID(int=0)

Convert = Callable[[Any], Any]


@cache
def request_class(api_key: int, version: int) -> Any:
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> Any:
    return load_response_schema(api_key, version)


def flexible(api_key: int, version: int) -> bool:
    return bool(request_class(api_key, version).__flexible__)


@cache
def _reader(cls: Any) -> Callable[[bytes, int], tuple[Any, int]]:
    return entity_reader(cls)


def decode(api_key: int, version: int, body: bytes, offset: int) -> Any:
    """The request in ``body`` from ``offset``. Raises ``ValueError`` (and kio's errors,
    which the caller takes as unreadable too) when it cannot be read: first as Kafka
    checks it (``walk.check``: lengths, nulls), then by kio. Unknown tagged fields are
    skipped, as Kafka skips them (kio refuses them)."""
    cls = request_class(api_key, version)
    walk.check(cls, body, offset)
    try:
        request, _ = _reader(cls)(body, offset)
    except KeyError:  # kio's "Unknown tagged field tag"
        request, _ = _reader(cls)(walk.without_unknown(cls, body, offset), offset)
    return request


def encode(api_key: int, version: int, correlation_id: int, response: Any) -> bytes:
    """``response`` with its header, framed."""
    buffer = io.BytesIO()
    buffer.write(bytes(SIZE_BYTES))
    buffer.write(_CORRELATION.pack(correlation_id))
    if response.__flexible__ and api_key != API_VERSIONS_KEY:
        buffer.write(b"\x00")  # response header v1: no tagged fields
    entity_writer(type(response))(buffer, response)
    data = buffer.getbuffer()
    data[:SIZE_BYTES] = (len(data) - SIZE_BYTES).to_bytes(SIZE_BYTES, "big")
    return bytes(data)


def framed(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """A response already encoded (``body``) with its header, framed, as ``encode``."""
    header = _CORRELATION.pack(correlation_id)
    if response_class(api_key, version).__flexible__ and api_key != API_VERSIONS_KEY:
        header += b"\x00"
    return (len(header) + len(body)).to_bytes(SIZE_BYTES, "big") + header + body


def entity_bytes(entity: Any) -> bytes:
    """kio's encoding of ``entity`` (a response, or a part of one)."""
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def build(cls: Any, values: Mapping[str, Any]) -> Any:
    """An instance of ``cls`` from the values its version has (see the module's doc)."""
    kwargs: dict[str, Any] = {}
    for name, convert, zero in _plan(cls):
        if name in values:
            value = values[name]
            kwargs[name] = value if convert is None else convert(value)
        elif zero is not dataclasses.MISSING:
            kwargs[name] = zero
    return cls(**kwargs)


@cache
def error_codes() -> frozenset[int]:
    """The error codes kio knows: ``kafka_error`` makes any other UNKNOWN_SERVER_ERROR."""
    return frozenset(int(code) for code in KafkaErrorCode)


def kafka_error(code: int) -> KafkaErrorCode:
    try:
        return KafkaErrorCode(code)
    except ValueError:
        return KafkaErrorCode.unknown_server_error


@cache
def _plan(cls: Any) -> tuple[tuple[str, Convert | None, Any], ...]:
    """For each field: its name, how a plain value becomes its type, and the value given
    when the mapping has none (``MISSING``: kio's default, or none: a required field)."""
    hints = typing.get_type_hints(cls)
    plan = []
    for field in dataclasses.fields(cls):
        if field.name.startswith("_"):
            continue
        hint = hints[field.name]
        required = field.default is dataclasses.MISSING and (
            field.default_factory is dataclasses.MISSING
        )
        convert, zero = _converter(hint)
        plan.append((field.name, convert, zero if required else dataclasses.MISSING))
    return tuple(plan)


def _converter(hint: Any) -> tuple[Convert | None, Any]:
    """How a plain value becomes ``hint``'s type, and the value a missing one takes."""
    args = typing.get_args(hint)
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        (inner,) = [a for a in args if a is not type(None)]
        convert, _ = _converter(inner)
        if convert is None:
            return None, None
        inner_convert = convert
        return (lambda v: None if v is None else inner_convert(v)), None
    if typing.get_origin(hint) is tuple:
        item = args[0]
        if dataclasses.is_dataclass(item):
            return (lambda v: tuple(build(item, x) for x in v)), ()
        return tuple, ()
    if dataclasses.is_dataclass(hint):
        return (lambda v: build(hint, v)), dataclasses.MISSING
    if hint is KafkaErrorCode:
        return kafka_error, KafkaErrorCode.none
    if hint is i32Timedelta or hint is i64Timedelta:
        return _milliseconds, datetime.timedelta(0)
    if hint is str:
        return (lambda v: "" if v is None else v), ""
    if hint is uuid.UUID:
        return (lambda v: ZERO_UUID if v is None else v), ZERO_UUID
    return None, dataclasses.MISSING


def _milliseconds(value: int | datetime.timedelta) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=value)


def milliseconds(value: datetime.timedelta) -> int:
    """A duration kio read (a timeout), in milliseconds."""
    return round(value.total_seconds() * 1000)
