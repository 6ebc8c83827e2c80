"""kafka-python's ``kafka.protocol``, the second codec the listener's (kio's) is checked
against: its message classes by API key, values for every field of a version (no field
left at its default), and the same values read back from either codec.

kafka-python generates its classes from Kafka's JSON message definitions with its own
reader and writer; its client parses every answer with them (``kafka.protocol.parser``).
Field names differ only where kio reads a duration (``session_timeout`` for
``session_timeout_ms``) or kafka-python renamed one (``authorized_operations``, a set of
bits); fields are paired by position, which both keep as the definition has them.
"""

from __future__ import annotations

import datetime
import enum
import io
import uuid
import warnings
from collections.abc import Iterator
from typing import Any, Final

with warnings.catch_warnings():  # kafka-python 3.0.12 reads its schemas with importlib
    # calls Python 3.11 deprecates: a warning per message class, not ours to fix
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.producer
    import kafka.protocol.sasl  # noqa: F401  (each defines its classes on import)
    from kafka.protocol.api_message import ApiMessage

from huddle.coordinator.kafka.walk import fields as kio_fields

# error codes Kafka defines (kio turns an unknown one into UNKNOWN_SERVER_ERROR)
_ERRORS: Final = (3, 15, 16, 22, 25, 27, 29, 30, 41, 79)


def _subclasses(cls: Any) -> Iterator[Any]:
    sub: Any
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _classes() -> tuple[dict[int, Any], dict[int, Any]]:
    requests: dict[int, Any] = {}
    responses: dict[int, Any] = {}
    for cls in _subclasses(ApiMessage):
        if getattr(cls, "_class_version", None) is None and "_json" in vars(cls):
            (requests if cls.is_request() else responses)[cls.API_KEY] = cls
    return requests, responses


REQUESTS, RESPONSES = _classes()


def versions(api_key: int) -> tuple[int, int] | None:
    """The versions kafka-python defines of an API (its request and its response)."""
    cls = REQUESTS.get(api_key)
    if cls is None or api_key not in RESPONSES:
        return None
    low, high = cls._struct._versions  # the definition's, before kafka-python widens it
    return int(low), int(high)


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def next(self) -> int:
        self.n += 1
        return self.n


def values(struct: Any, version: int, counter: _Counter | None = None) -> dict[str, Any]:
    """A value for every field ``struct`` (kafka-python's) has in ``version``, each one
    unlike its default: two items in each array, strings that are not ASCII, numbers
    past 16 bits where the field is wider, true booleans, tagged fields set."""
    counter = counter or _Counter()
    return {f.name: _value(f, version, counter) for f in _in_version(struct, version)}


def _in_version(struct: Any, version: int) -> list[Any]:
    return [f for f in struct._fields if f.for_version_q(version)]


def _value(field: Any, version: int, counter: _Counter) -> Any:
    if field.is_struct_array():
        return [values(field, version, counter) for _ in range(2)]
    if field.is_struct():
        return values(field, version, counter)
    if field.is_array():
        return [_simple(field.array_of._type_str, field.name, counter.next()) for _ in range(2)]
    return _simple(field._type_str, field.name, counter.next())


def _simple(kind: str, name: str, n: int) -> Any:
    if name.endswith("error_code"):
        return _ERRORS[n % len(_ERRORS)]
    simple: dict[str, Any] = {
        "int8": n % 100 + 1,
        "int16": 1000 + n,
        "uint16": 60000 + n,
        "int32": 100_000 + n,
        "int64": 2**40 + n,
        "float64": 1.5 + n,
        "bool": True,
        "uuid": uuid.UUID(int=0x1234_0000 + n),
        "string": f"s{n}-ü",
        "bytes": bytes([n % 256, 0, 255]) * 3,
        "records": bytes([n % 256, 1, 2]) * 5,
        "bitfield": {3, 5},
    }
    return simple[kind]


def kafka_python(cls: Any, version: int, vals: dict[str, Any]) -> Any:
    """kafka-python's message of ``version`` holding ``vals``."""
    return cls[version](**_objects(cls._struct, vals))


def _objects(struct: Any, vals: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in vals.items():
        field = struct.fields[name]
        if field.is_struct_array():
            out[name] = [field.data_class(**_objects(field, v)) for v in value]
        elif field.is_struct():
            out[name] = field.data_class(**_objects(field, value))
        else:
            out[name] = value
    return out


def plain_kafka_python(struct: Any, version: int, obj: Any) -> dict[str, Any]:
    """What kafka-python read, as ``values`` gives it."""
    out: dict[str, Any] = {}
    for field in _in_version(struct, version):
        value = getattr(obj, field.name)
        if value is not None and field.is_struct_array():
            value = [plain_kafka_python(field, version, item) for item in value]
        elif value is not None and field.is_struct():
            value = plain_kafka_python(field, version, value)
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, memoryview | bytearray):
            value = bytes(value)
        out[field.name] = value
    return out


def plain_kio(entity: Any, struct: Any, version: int) -> dict[str, Any]:
    """What kio read, as ``values`` gives it (kafka-python's names, paired by position)."""
    kind: Any = type(entity)
    ours = kio_fields(kind)
    theirs = _in_version(struct, version)
    assert len(ours) == len(theirs), (type(entity), [f.name for f in ours])
    out: dict[str, Any] = {}
    for mine, field in zip(ours, theirs, strict=True):
        assert _same_name(mine.name, field.name), (mine.name, field.name)
        value = getattr(entity, mine.name)
        if value is not None and field.is_struct_array():
            value = [plain_kio(item, field, version) for item in value]
        elif field.tag is not None and field.is_struct() and value == type(value)():
            value = None  # a tagged struct left out: kio reads its default, kafka-python None
        elif value is not None and field.is_struct():
            value = plain_kio(value, field, version)
        else:
            value = _plain_value(value, field._type_str)
        out[field.name] = value
    return out


def to_kio(cls: Any, struct: Any, version: int, vals: dict[str, Any]) -> dict[str, Any]:
    """``vals`` named and typed as ``schemas.build`` takes them for kio's ``cls``."""
    out: dict[str, Any] = {}
    for mine, field in zip(kio_fields(cls), _in_version(struct, version), strict=True):
        value = vals[field.name]
        if field.is_struct_array():
            value = [to_kio(mine.entity, field, version, v) for v in value]
        elif field.is_struct():
            value = to_kio(mine.entity, field, version, value)
        elif field._type_str == "bitfield":
            value = sum(1 << bit for bit in value)
        elif mine.kafka_type == "datetime_i64":  # kio reads a timestamp as a datetime
            value = datetime.datetime.fromtimestamp(value / 1000, datetime.UTC)
        out[mine.name] = value
    return out


def _same_name(kio_name: str, kafka_python_name: str) -> bool:
    return kafka_python_name in (kio_name, f"{kio_name}_ms") or (
        kafka_python_name == "authorized_operations" and kio_name.endswith(kafka_python_name)
    )


def _plain_value(value: Any, kind: str) -> Any:
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, enum.Enum):
        return value.value
    if kind == "bitfield":
        return {bit for bit in range(32) if value >> bit & 1}
    if isinstance(value, tuple):
        return list(value)
    return value


def request_frame(cls: Any, version: int, vals: dict[str, Any], correlation_id: int) -> bytes:
    """The request kafka-python's client writes: header, body, size first."""
    message = kafka_python(cls, version, vals)
    message.with_header(correlation_id=correlation_id, client_id="cross-check")
    return bytes(message.encode(header=True, framed=True))


def parse_response(cls: Any, version: int, frame: bytes) -> tuple[int, Any]:
    """As kafka-python's client reads an answer (``kafka.protocol.parser``): the header,
    then the body, which must use every byte."""
    buffer = io.BytesIO(frame[4:])
    header = cls[version].parse_header(buffer)
    rest = memoryview(buffer.read())
    flexible = cls.flexible_version_q(version)
    read = cls._struct.compiled_decode_from(
        version, compact=flexible, tagged=flexible, data_class=cls[None]
    )
    response, end = read(rest, 0)
    assert end == len(rest), f"{len(rest) - end} bytes of the answer left unread"
    return header.correlation_id, response
