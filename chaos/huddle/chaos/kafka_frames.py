"""Valid Kafka requests for the fuzzer, and where their length prefixes lie.

``KafkaSeeds(rng)`` makes a random but well-formed request of any (API, version) the Kafka
listener serves, as an instance of kio's generated request class
(``kio.schema.<api>.v<N>.request``): each field drawn from values that mean something to
the listener (this connection's groups, the run's topics, Kafka's own special values,
consumer-protocol metadata, a v2 record batch written by ``kio.records``), now and then an
odd one (the type's extremes, an empty or long string, a null).

``encode`` writes a request behind its header (v1, or v2 for a flexible version) exactly
as kio's ``entity_writer`` does, and notes each place the mutations aim at: every length
prefix of a string, bytes or array (``Prefix``), and every tagged-field section.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import random
import struct
import uuid
from dataclasses import dataclass
from typing import Any, Final

from kio.index import load_request_schema
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from huddle.coordinator.kafka.apis import SERVED
from huddle.coordinator.kafka.walk import Field, fields, uvarint
from huddle.protocol.errors import InvalidArgumentTypeError

SERVED_VERSIONS: Final = tuple(
    (int(api), version) for api, (low, high) in SERVED.items() for version in range(low, high + 1)
)
TOPICS: Final = ("fuzz-t", "fuzz-u", "fuzz-t", "", "t.x_1", "x" * 250)
ODD: Final = 0.06  # the chance of an odd value in a field
_INT_BITS: Final = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_FIXED: Final = {
    "int8": ">b",
    "int16": ">h",
    "int32": ">i",
    "int64": ">q",
    "uint8": ">B",
    "uint16": ">H",
    "uint32": ">I",
    "uint64": ">Q",
    "float64": ">d",
    "bool": ">?",
}
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True, slots=True)
class Prefix:
    """A length prefix in an encoded request: at ``offset``, ``width`` bytes; ``kind`` is
    ``int16``/``int32`` (legacy string, bytes or array lengths), ``uvarint`` (compact ones:
    the length plus one, 0 for null) or ``tags`` (a tagged-field count)."""

    offset: int
    width: int
    kind: str


@dataclass(frozen=True, slots=True)
class Encoded:
    body: bytes  # header and request, without the frame's size
    header_end: int
    prefixes: tuple[Prefix, ...]
    flexible: bool


# --- encoding, as kio's entity_writer does, noting the prefixes ----------------------------


class _Writer:
    def __init__(self) -> None:
        self.out = io.BytesIO()
        self.prefixes: list[Prefix] = []

    def length(self, value: int, flexible: bool, legacy: str) -> None:
        """A length prefix: ``value`` (-1: null) as kio writes it."""
        offset = self.out.tell()
        if flexible:
            data = uvarint(value + 1)
            self.prefixes.append(Prefix(offset, len(data), "uvarint"))
        else:
            data = struct.pack(_FIXED[legacy], value)
            self.prefixes.append(Prefix(offset, len(data), legacy))
        self.out.write(data)

    def entity(self, cls: Any, value: Any, *, header: bool = False) -> None:
        flexible = bool(cls.__flexible__)
        tagged = []
        for field in fields(cls):
            if field.tag is not None:
                tagged.append(field)
                continue
            # the header's client id is a legacy string in every header version
            legacy_string = header and field.name == "client_id"
            self.field(field, getattr(value, field.name), flexible and not legacy_string)
        if flexible:
            self.tags(cls, value, tagged)

    def tags(self, cls: Any, value: Any, tagged: list[Field]) -> None:
        written = []
        for field in sorted(tagged, key=lambda f: f.tag or 0):
            item = getattr(value, field.name)
            if item == field.default:
                continue
            inner = _Writer()
            inner.field(dataclasses.replace(field, optional=False), item, True)
            written.append(uvarint(field.tag or 0) + uvarint(len(inner.out.getvalue())))
            written.append(inner.out.getvalue())
        count = uvarint(len(written) // 2)
        self.prefixes.append(Prefix(self.out.tell(), len(count), "tags"))
        self.out.write(count + b"".join(written))

    def field(self, field: Field, value: Any, flexible: bool) -> None:
        if field.array:
            self.length(-1 if value is None else len(value), flexible, "int32")
            for item in value or ():
                self.item(field, item, flexible)
            return
        if field.entity is not None and field.optional:
            self.out.write(struct.pack(">b", -1 if value is None else 1))
            if value is None:
                return
        self.item(field, value, flexible)

    def item(self, field: Field, value: Any, flexible: bool) -> None:
        if field.entity is not None:
            self.entity(field.entity, value)
            return
        kind = field.kafka_type or ""
        if kind in ("string", "bytes", "records"):
            data = value.encode() if isinstance(value, str) else value
            legacy = "int16" if kind == "string" else "int32"
            self.length(-1 if data is None else len(data), flexible, legacy)
            self.out.write(data or b"")
        elif kind in _FIXED:
            self.out.write(struct.pack(_FIXED[kind], value))
        elif kind in ("timedelta_i32", "timedelta_i64"):
            millis = round(value.total_seconds() * 1000)
            self.out.write(struct.pack(">i" if kind == "timedelta_i32" else ">q", millis))
        elif kind == "uuid":
            self.out.write((value or uuid.UUID(int=0)).bytes)
        elif kind == "error_code":
            self.out.write(struct.pack(">h", value.value))
        else:  # pragma: no cover - no request of a served API has another type
            raise InvalidArgumentTypeError(f"no writer for {kind} ({field.name})")


def encode(
    api_key: int, version: int, correlation_id: int, request: Any, client_id: str
) -> Encoded:
    """``request`` behind its header, as a Kafka client writes it (without the size)."""
    cls = load_request_schema(api_key, version)
    header_cls = cls.__header_schema__
    header = header_cls(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    writer = _Writer()
    writer.entity(header_cls, header, header=True)
    header_end = writer.out.tell()
    writer.entity(cls, request)
    return Encoded(
        writer.out.getvalue(), header_end, tuple(writer.prefixes), bool(cls.__flexible__)
    )


# --- values ----------------------------------------------------------------------------


def subscription(topics: tuple[str, ...]) -> bytes:
    """A ConsumerProtocolSubscription v0: the topics, no user data."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)


def _assignment(topic: str, partitions: tuple[int, ...]) -> bytes:
    """A ConsumerProtocolAssignment v0: one topic's partitions, no user data."""
    body = struct.pack(">hih", 0, 1, len(topic)) + topic.encode()
    body += struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", p) for p in partitions)
    return body + struct.pack(">i", -1)


def record_batch(rng: random.Random) -> bytes:
    """A v2 record batch as a producer sends it (base offset 0), written by kio."""
    base_ms = 1_780_000_000_000 + rng.randrange(1_000_000)
    idempotent = rng.random() < 0.1
    records = tuple(
        Record(
            attributes=i8(0),
            timestamp=TZAwareMicros.parse(_EPOCH + datetime.timedelta(milliseconds=base_ms + i)),
            offset=i64(i),
            key=rng.choice((None, b"k", b"")),
            value=rng.randbytes(rng.choice((0, 1, 16, 300))),
            headers=(),
        )
        for i in range(rng.choice((1, 1, 2, 5)))
    )
    batch = NewRecordBatch(
        producer_id=i64(7 if idempotent else -1),
        producer_epoch=i16(0 if idempotent else -1),
        base_sequence=i32(0 if idempotent else -1),
        attributes=i16(rng.choice((0, 0, 0, 0x10, 0x20))),  # transactional / control bits
        records=records,
    )
    out = io.BytesIO()
    write_batch(out, batch)
    return out.getvalue()


Pool = tuple[Any, ...]
_MS: Final = datetime.timedelta
# Values that mean something to the listener, by field name; then odd ones.
_NAMED: Final[dict[str, Pool]] = {
    "protocol_type": ("consumer", "consumer", "", "connect"),
    "mechanism": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", ""),
    "auth_bytes": (b"\x00fuzz\x00secret", b"n,,n=fuzz,r=fuzznonce", b""),
    "protocol_name": (None, "range", "cooperative-sticky"),
    "member_id": ("", "", "m-1", "fuzz-member-0"),
    "group_instance_id": (None, None, None, "static-1"),
    "reason": (None, "fuzz"),
    "client_software_name": ("huddle-fuzz", "kafka-python", "", "bad name!"),
    "client_software_version": ("1.0", "2.0.2", ""),
    "states_filter": ("Stable", "Empty", "PreparingRebalance", "Nope"),
    "types_filter": ("classic", "consumer", "nope"),
    "transactional_id": (None, None, None, None, "txn"),
    "committed_metadata": (None, "", "meta"),
    "cluster_id": (None, None, "cluster"),
    "rack_id": ("", "rack-1"),
    "value": ("1", None, "compact", "-1"),
    "session_timeout": (_MS(seconds=6), _MS(seconds=10), _MS(seconds=30), _MS(0)),
    "rebalance_timeout": (_MS(milliseconds=-1), _MS(milliseconds=100), _MS(milliseconds=400)),
    "max_wait": (_MS(0), _MS(0), _MS(milliseconds=10), _MS(milliseconds=200)),
    "timeout": (_MS(0), _MS(milliseconds=100), _MS(seconds=30), _MS(milliseconds=-1)),
    "retention_time": (_MS(milliseconds=-1), _MS(seconds=1), _MS(days=7)),
    "acks": (1, 1, -1, 0, 2),
    "replication_factor": (-1, 1, 1, 3),
    "num_partitions": (-1, 1, 3, 6, 0, 100_000),
    "count": (1, 4, 8, 0, -1, 1_000_000),
    "index": (0, 1, 2, 5, -1),
    "partition": (0, 1, 2, 5, -1),
    "partition_index": (0, 1, 2, 5, -1),
    "partition_indexes": (0, 1, 2),
    "fetch_offset": (0, 0, 1, 10, -1),
    "committed_offset": (0, 1, 10, -1),
    "log_start_offset": (-1, 0),
    "timestamp": (-1, -2, -3, -4, -5, 0, 1_780_000_000_000),
    "isolation_level": (0, 1, 2),
    "key_type": (0, 0, 1, 2),
    "min_bytes": (0, 1, 1, 100_000),
    "max_bytes": (1_048_576, 52_428_800, 0, 1, 2**31 - 1),
    "partition_max_bytes": (1_048_576, 0, 100, 2**31 - 1),
    "generation_id": (-1, 0, 1, 5),
    "generation_id_or_member_epoch": (-1, 0, 1),
    "member_epoch": (-1, 0),
    "session_id": (0, 0, 1),
    "session_epoch": (-1, 0),
    "replica_id": (-1, -1, 0, 1),
    "broker_ids": (0, 1),
    "current_leader_epoch": (-1, 0),
    "last_fetched_epoch": (-1, 0),
    "committed_leader_epoch": (-1, 0),
}
_GROUP_FIELDS: Final = frozenset({"group_id", "groups", "groups_names", "key", "coordinator_keys"})
_TOPIC_FIELDS: Final = frozenset({"topic", "topic_names"})


class KafkaSeeds:
    """Random well-formed requests of every served (API, version), from one RNG."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        # The groups requests name: a connection's own (and "", refused at once), so a
        # JoinGroup waits only for members this connection made, within what it asked for
        # (a group shared with another connection could rightly hold it for that one's
        # rebalance timeout: up to 30 minutes).
        self.groups: tuple[str, ...] = ("fuzz-a",)
        self._batches = [record_batch(rng) for _ in range(12)]

    def request(self, api_key: int, version: int) -> Any:
        return self._entity(load_request_schema(api_key, version))

    def _entity(self, cls: Any) -> Any:
        values = {}
        for field in fields(cls):
            if field.tag is not None and self.rng.random() < 0.5:
                continue  # a tagged field left at its default: not written
            values[field.name] = self._field(cls, field)
        return cls(**values)

    def _field(self, cls: Any, field: Field) -> Any:
        rng = self.rng
        if field.optional and rng.random() < (0.5 if field.name == "topics" else 0.1):
            return None
        if field.array:
            count = rng.choice((0, 1, 1, 1, 2, 3))
            return tuple(self._item(cls, field) for _ in range(count))
        return self._item(cls, field)

    def _item(self, cls: Any, field: Field) -> Any:
        if field.entity is not None:
            return self._entity(field.entity)
        rng = self.rng
        name, kind = field.name, field.kafka_type or ""
        if name in _GROUP_FIELDS:  # odd ones too are the connection's own (see ``groups``)
            return rng.choice((*self.groups, *self.groups, ""))
        if rng.random() < ODD:
            return self._odd(kind, field.optional)
        if name in _TOPIC_FIELDS or (name == "name" and "Topic" in cls.__name__):
            return rng.choice(TOPICS)
        if name == "name" and "Protocol" in cls.__name__:
            return rng.choice(("range", "cooperative-sticky", "roundrobin", ""))
        if name == "name":  # a topic's config
            return rng.choice(("cleanup.policy", "retention.ms", "nope"))
        if name == "metadata":
            return subscription(rng.choice(((), ("fuzz-t",), ("fuzz-t", "fuzz-u"))))
        if name == "assignment":
            return rng.choice((b"", _assignment("fuzz-t", (0, 1)), _assignment("fuzz-u", ())))
        if name == "records":
            return self._records()
        if name == "topic_id":
            return uuid.UUID(int=0) if rng.random() < 0.8 else uuid.UUID(int=rng.getrandbits(128))
        pool = _NAMED.get(name)
        if pool is not None:
            return rng.choice(pool)
        return self._plain(kind)

    def _records(self) -> bytes | None:
        rng = self.rng
        choice = rng.random()
        if choice < 0.75:
            return rng.choice(self._batches)
        if choice < 0.85:
            return rng.choice(self._batches) + rng.choice(self._batches)
        return rng.choice((None, b"", rng.randbytes(40)))

    def _plain(self, kind: str) -> Any:
        rng = self.rng
        if kind in _INT_BITS or kind.startswith("uint"):
            return rng.choice((0, 1, 2))
        if kind == "bool":
            return rng.random() < 0.5
        if kind == "string":
            return rng.choice(("fuzz", ""))
        if kind == "bytes":
            return rng.randbytes(rng.choice((0, 8)))
        if kind == "uuid":
            return uuid.UUID(int=0)
        raise InvalidArgumentTypeError(f"no plain value for {kind}")  # pragma: no cover

    def _odd(self, kind: str, optional: bool) -> Any:
        rng = self.rng
        if kind in _INT_BITS:
            bits = _INT_BITS[kind]
            return rng.choice((-1, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1))
        if kind in ("timedelta_i32", "timedelta_i64"):
            return _MS(milliseconds=rng.choice((-1, -(2**31), 2**31 - 1)))
        if kind in ("string", "bytes", "records"):
            choices: list[Any] = ["", "\u00fc\u4e2d", "\x00", "x" * rng.choice((256, 5_000))]
            if optional:
                choices.append(None)
            value = rng.choice(choices)
            return value.encode() if kind != "string" and value is not None else value
        if kind == "bool":
            return True
        if kind == "uuid":
            return uuid.UUID(int=2**128 - 1)
        return self._plain(kind)
