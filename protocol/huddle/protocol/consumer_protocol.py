"""Kafka's consumer protocol: the ConsumerProtocolSubscription a Kafka client puts in its
JoinGroup metadata and the ConsumerProtocolAssignment its leader puts in SyncGroup, every
version (0-3), read and written by hand (this layer depends on no codec).

Both are big-endian and never flexible: an int16 version, then

- a subscription: ``topics`` (an int32 count of int16-length UTF-8 names), ``user_data``
  (int32-length bytes, -1: null), from v1 ``owned_partitions`` (a count of a topic name and
  an int32 count of int32 partitions), from v2 ``generation_id`` (int32; -1: none), from v3
  ``rack_id`` (a nullable string);
- an assignment, the same in every version: ``assigned_partitions`` (as
  ``owned_partitions``), then ``user_data``.

As Kafka's ``ConsumerProtocol`` does, a version above 3 is read as version 3 (a newer
client's extra fields come last and are not read) and a negative one is refused. Bytes that
are not one of these raise ``EmbeddedSchemaError``, which says what was wrong and where.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from huddle.protocol.errors import HuddleError

HIGHEST_VERSION = 3  # of both, as Kafka's ConsumerProtocol{Subscription,Assignment}.json
NO_GENERATION = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Partitions = list[tuple[str, list[int]]]  # per topic, as they travel


class EmbeddedSchemaError(HuddleError, ValueError):
    """Bytes that are not a Subscription or Assignment this member can read."""


class KafkaSubscription(NamedTuple):
    version: int
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: Partitions = []  # noqa: RUF012 - a NamedTuple default, never mutated
    generation_id: int = NO_GENERATION
    rack_id: str | None = None


class KafkaAssignment(NamedTuple):
    version: int
    assigned_partitions: Partitions
    user_data: bytes | None = None


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.at, self.what = data, 0, what

    def fail(self, why: str) -> EmbeddedSchemaError:
        return EmbeddedSchemaError(f"not a Kafka {self.what}: {why} at byte {self.at}")

    def _fixed(self, form: struct.Struct, field: str) -> int:
        if self.at + form.size > len(self.data):
            raise self.fail(f"{field} runs past the end ({len(self.data)} bytes)")
        (value,) = form.unpack_from(self.data, self.at)
        self.at += form.size
        return int(value)

    def i16(self, field: str) -> int:
        return self._fixed(_I16, field)

    def i32(self, field: str) -> int:
        return self._fixed(_I32, field)

    def _raw(self, size: int, field: str) -> bytes:
        if self.at + size > len(self.data):
            raise self.fail(f"{field} of {size} bytes runs past the end ({len(self.data)} bytes)")
        raw = self.data[self.at : self.at + size]
        self.at += size
        return raw

    def string(self, field: str, *, nullable: bool = False) -> str | None:
        size = self.i16(field)
        if size == -1 and nullable:
            return None
        if size < 0:
            raise self.fail(f"{field} has length {size}")
        try:
            return self._raw(size, field).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"{field} is not UTF-8 ({exc.reason})") from None

    def name(self, field: str) -> str:
        value = self.string(field)
        assert value is not None  # not nullable
        return value

    def count(self, field: str, least_size: int) -> int:
        """An array's count: each element takes ``least_size`` bytes at least, so a count
        the bytes left cannot hold is refused before anything is built for it."""
        n = self.i32(field)
        if n < 0 or n * least_size > len(self.data) - self.at:
            raise self.fail(f"{field} counts {n}, more than the bytes left hold")
        return n

    def nullable_bytes(self, field: str) -> bytes | None:
        size = self.i32(field)
        if size == -1:
            return None
        if size < 0:
            raise self.fail(f"{field} has length {size}")
        return self._raw(size, field)

    def partitions(self, field: str) -> Partitions:
        out: Partitions = []
        for _ in range(self.count(field, 6)):
            topic = self.name(f"{field} topic")
            ids = [self.i32(f"{field} partition") for _ in range(self.count(f"{field} ids", 4))]
            out.append((topic, ids))
        return out

    def version(self) -> int:
        version = self.i16("the version")
        if version < 0:
            raise self.fail(f"version {version} is not one")
        return min(version, HIGHEST_VERSION)


def read_topics(data: bytes) -> list[str]:
    """Only a subscription's topics (what the coordinator reads; the rest is not read)."""
    r = _Reader(data, "subscription")
    r.version()
    return [r.name("a topic") for _ in range(r.count("topics", 2))]


def read_subscription(data: bytes) -> KafkaSubscription:
    r = _Reader(data, "subscription")
    version = r.version()
    topics = [r.name("a topic") for _ in range(r.count("topics", 2))]
    user_data = r.nullable_bytes("user data")
    owned = r.partitions("owned partitions") if version >= 1 else []
    generation = r.i32("the generation id") if version >= 2 else NO_GENERATION
    rack = r.string("the rack id", nullable=True) if version >= 3 else None
    return KafkaSubscription(version, topics, user_data, owned, generation, rack)


def read_assignment(data: bytes) -> KafkaAssignment:
    r = _Reader(data, "assignment")
    version = r.version()
    assigned = r.partitions("assigned partitions")
    return KafkaAssignment(version, assigned, r.nullable_bytes("user data"))


def read_sticky_user_data(data: bytes) -> tuple[Partitions, int]:
    """Kafka's StickyAssignor's user data (StickyAssignorUserData): the member's previous
    assignment, then in v1 the generation it had it in (v0: none, -1). Java's client and
    librdkafka write it with no version prefix; kafka-python with an int16 version first:
    as Kafka's reader tries one version after another, each way is tried in turn, and the
    one that reads every byte is taken."""
    failure: EmbeddedSchemaError | None = None
    for start in (0, 2):
        r = _Reader(data, "StickyAssignorUserData")
        r.at = start
        try:
            previous = r.partitions("the previous assignment")
            generation = r.i32("the generation") if r.at < len(data) else NO_GENERATION
        except EmbeddedSchemaError as exc:
            failure = failure or exc
            continue
        if r.at == len(data):
            return previous, generation
        failure = failure or r.fail(f"{len(data) - r.at} bytes are left over")
    assert failure is not None
    raise failure


def write_sticky_user_data(previous: Partitions, generation: int) -> bytes:
    """StickyAssignorUserData v1, as Kafka's StickyAssignor writes it."""
    return _partitions(previous) + _I32.pack(generation)


def _string(value: str | None) -> bytes:
    if value is None:
        return _I16.pack(-1)
    raw = value.encode("utf-8")
    return _I16.pack(len(raw)) + raw


def _bytes(value: bytes | None) -> bytes:
    return _I32.pack(-1) if value is None else _I32.pack(len(value)) + value


def _partitions(partitions: Partitions) -> bytes:
    out = [_I32.pack(len(partitions))]
    for topic, ids in partitions:
        out += [_string(topic), _I32.pack(len(ids)), *(_I32.pack(p) for p in ids)]
    return b"".join(out)


def _checked(version: int) -> int:
    if not 0 <= version <= HIGHEST_VERSION:
        raise EmbeddedSchemaError(f"Kafka's consumer protocol has versions 0-3, not {version}")
    return version


def write_subscription(sub: KafkaSubscription) -> bytes:
    """``sub`` in its version: the fields that version lacks are left out."""
    version = _checked(sub.version)
    out = [_I16.pack(version), _I32.pack(len(sub.topics)), *map(_string, sub.topics)]
    out.append(_bytes(sub.user_data))
    if version >= 1:
        out.append(_partitions(sub.owned_partitions))
    if version >= 2:
        out.append(_I32.pack(sub.generation_id))
    if version >= 3:
        out.append(_string(sub.rack_id))
    return b"".join(out)


def write_assignment(assignment: KafkaAssignment) -> bytes:
    version = _checked(assignment.version)
    return b"".join(
        (
            _I16.pack(version),
            _partitions(assignment.assigned_partitions),
            _bytes(assignment.user_data),
        )
    )
