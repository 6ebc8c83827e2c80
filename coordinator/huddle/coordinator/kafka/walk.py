"""A request walked by its schema, for what kio's reader does not refuse as Kafka does.

Kafka's reader refuses a request whose lengths cannot be right before it allocates
anything ("Tried to allocate a collection of size N, but there are only M bytes
remaining"), and a null where the field is not nullable. kio's native reader sizes an
array by its length prefix first: a length of 2^32 in one frame makes it ask for 34 GB
and the process aborts. It also reads a null array where none is allowed, and refuses an
unknown tagged field (Kafka skips it: KIP-482). So, before kio reads a request:

- ``check`` walks a request whose schema has arrays (the others cannot make kio allocate
  much): each string, bytes and array length within the bytes left (an array item takes
  at least a byte), nulls only where nullable, varints of at most 5 bytes;
- ``without_unknown`` gives a flexible request without its unknown tagged fields, for kio
  to read again when it refused one.

Both refuse a request of more than ``MAX_ITEMS`` array items in all (nested ones counted):
every item costs the listener tens of microseconds on the event loop every connection
shares (read, translated, answered), so a frame of 16 MB naming a million groups or
partitions held every other group's heartbeats for over a minute. Kafka's controller
refuses more than 10,000 partitions per request; twice that lets a Fetch, an OffsetFetch
or an OffsetCommit name every partition of a 10,000-partition topic.

``fields`` describes a kio class's fields by their wire form; the fuzzer writes requests
with it too (``huddle.chaos.kafka_frames``).
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from huddle.protocol.errors import HuddleError

FIXED_SIZES: Final = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float64": 8,
    "bool": 1,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}
_VARINT_BYTES: Final = 5
MAX_ITEMS: Final = 20_000  # array items in one request, nested ones counted
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")


class RequestShapeError(HuddleError, ValueError):
    """The request is not what its schema says: it cannot be read."""


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a kio class, as it is on the wire."""

    name: str
    kafka_type: str | None  # None: a struct or an array of structs
    array: bool
    optional: bool  # nullable (a nullable struct has a marker byte before it)
    entity: Any  # the struct's class, for a struct or an array of them
    tag: int | None
    default: Any


@cache
def fields(cls: Any) -> tuple[Field, ...]:
    hints = typing.get_type_hints(cls)
    found = []
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        inner = _strip_optional(hint)
        array = typing.get_origin(inner) is tuple
        item = _strip_optional(typing.get_args(inner)[0] if array else inner)
        found.append(
            Field(
                field.name,
                field.metadata.get("kafka_type"),
                array,
                inner is not hint,
                item if dataclasses.is_dataclass(item) else None,
                field.metadata.get("tag"),
                field.default,
            )
        )
    return tuple(found)


def _strip_optional(hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return inner
    return hint


@cache
def has_arrays(cls: Any) -> bool:
    return any(f.array or (f.entity is not None and has_arrays(f.entity)) for f in fields(cls))


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def check(cls: Any, body: bytes, offset: int) -> None:
    """Raise ``RequestShapeError`` if the request of ``cls`` in ``body`` from ``offset``
    has a length past its end, or a null where its schema has none."""
    if has_arrays(cls):
        walk = _Walk(body, offset, copy=False)
        walk.entity(cls, bool(cls.__flexible__))


def without_unknown(cls: Any, body: bytes, offset: int) -> bytes:
    """``body`` with the request (or request header) of ``cls`` from ``offset`` rid of
    its unknown tagged fields (a flexible version's). Raises ``RequestShapeError`` if it
    cannot be walked."""
    if not cls.__flexible__:
        raise RequestShapeError("a version that is not flexible has no tagged fields")
    walk = _Walk(body, offset, copy=True)
    walk.out += body[:offset]
    walk.entity(cls, True)
    walk.out += body[walk.position :]
    return bytes(walk.out)


class _Walk:
    def __init__(self, body: bytes, offset: int, *, copy: bool) -> None:
        self.body = body
        self.position = offset
        self.copying = copy
        self.out = bytearray()
        self.items = 0  # array items so far

    def skip(self, size: int) -> None:
        end = self.position + size
        if end > len(self.body):
            raise RequestShapeError(f"a length of {size} runs past the end of the request")
        if self.copying:
            self.out += self.body[self.position : end]
        self.position = end

    def length(self, flexible: bool, legacy: struct.Struct) -> int:
        """A length prefix, copied: the length, -1 for null."""
        start = self.position
        if flexible:
            value = self.uvarint() - 1
        else:
            if start + legacy.size > len(self.body):
                raise RequestShapeError("the request ends inside a length")
            (value,) = legacy.unpack_from(self.body, start)
            self.position += legacy.size
        if self.copying:
            self.out += self.body[start : self.position]
        if value < -1:
            raise RequestShapeError(f"a negative length ({value})")
        return int(value)

    def uvarint(self) -> int:
        value = shift = 0
        for _ in range(_VARINT_BYTES):
            if self.position >= len(self.body):
                raise RequestShapeError("the request ends inside a varint")
            byte = self.body[self.position]
            self.position += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise RequestShapeError("a varint longer than 5 bytes")

    def entity(self, cls: Any, flexible: bool) -> None:
        known = set()
        header = cls.__name__ == "RequestHeader"
        for field in fields(cls):
            if field.tag is not None:
                known.add(field.tag)
            elif header and field.name == "client_id":  # a legacy string in every header
                self.skip(max(self.length(False, _INT16), 0))
            else:
                self.field(field, flexible)
        if flexible:
            self.tags(known)

    def tags(self, known: set[int]) -> None:
        kept = []
        for _ in range(self.uvarint()):
            start = self.position
            tag = self.uvarint()
            size = self.uvarint()
            end = self.position + size
            if end > len(self.body):
                raise RequestShapeError("a tagged field runs past the end of the request")
            self.position = end
            if tag in known:
                kept.append(self.body[start:end])
        if self.copying:
            self.out += uvarint(len(kept)) + b"".join(kept)

    def field(self, field: Field, flexible: bool) -> None:
        if field.array:
            count = self.length(flexible, _INT32)
            if count == -1 and not field.optional:
                raise RequestShapeError(f"{field.name} is null, and not nullable")
            if count > len(self.body) - self.position:  # each item takes a byte at least
                raise RequestShapeError(f"{field.name} claims {count} items in fewer bytes")
            self.items += max(count, 0)
            if self.items > MAX_ITEMS:
                raise RequestShapeError(
                    f"more than {MAX_ITEMS} items in one request (at {field.name}): ask in several"
                )
            for _ in range(count):
                self.item(field, flexible)
            return
        if field.entity is not None and field.optional:
            self.skip(1)
            if self.body[self.position - 1] >= 0x80:  # a negative marker: null
                return
        self.item(field, flexible)

    def item(self, field: Field, flexible: bool) -> None:
        kind = field.kafka_type
        if field.entity is not None:
            self.entity(field.entity, flexible)
        elif kind in ("string", "bytes", "records"):
            size = self.length(flexible, _INT16 if kind == "string" else _INT32)
            if size == -1 and not (field.optional and not field.array):
                raise RequestShapeError(f"{field.name} is null, and not nullable")
            self.skip(max(size, 0))
        elif kind in FIXED_SIZES:
            self.skip(FIXED_SIZES[kind])
        else:  # pragma: no cover - every field of a served request is above
            raise RequestShapeError(f"no size for a {kind} field")
