"""The Spark schema of a run's event logs, derived from the event Structs (not written by hand).

The chaos processes write ``huddle.chaos.events`` Structs as JSON lines; the coordinator's
own lines are its structlog events, of which ``CoordinatorLine`` names what the pipeline
reads. Every field of every one of them becomes a column. A field's type maps once: float to
double, int to long, bool to boolean, str to string (``None`` allowed: nullable anyway).
A field whose type is anything else (a list, a dict), or that differs between events (e.g.
``partitions``: a count in ``run_started``, ``[[topic, partition], ...]`` in ``assigned``),
is read as a string holding its raw JSON text, parsed where it is needed.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
import msgspec.inspect as mi
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from huddle.chaos.events import EVENT_TYPES


class CoordinatorLine(msgspec.Struct, kw_only=True):
    """What the pipeline reads of the coordinator's structlog lines (``generation_started``,
    ``rebalance_started``, ``assignment_stored``, ...)."""

    timestamp: str  # ISO-8601 UTC; chaos lines carry ``ts`` instead
    event: str
    group_id: str | None = None
    member_id: str | None = None
    generation: int | None = None
    leader: str | None = None  # a member id
    members: int | None = None
    reason: str | None = None
    protocol: str | None = None


FIRST = ("ts", "timestamp", "proc", "event")  # the columns every reader expects first


def _spark_type(info: mi.Type) -> DataType:
    if isinstance(info, mi.UnionType):
        kinds = [t for t in info.types if not isinstance(t, mi.NoneType)]
        return _spark_type(kinds[0]) if len(kinds) == 1 else StringType()
    if isinstance(info, mi.BoolType):
        return BooleanType()
    if isinstance(info, mi.IntType):
        return LongType()
    if isinstance(info, mi.FloatType):
        return DoubleType()
    return StringType()  # str, and raw JSON text for everything else


def event_schema(structs: Iterable[type[msgspec.Struct]]) -> StructType:
    """The union of the Structs' fields (and their tags' ``event``), one column each."""
    columns: dict[str, DataType] = {"event": StringType()}
    for struct in structs:
        info = mi.type_info(struct)
        assert isinstance(info, mi.StructType)
        for field in info.fields:
            kind = _spark_type(field.type)
            seen = columns.setdefault(field.name, kind)
            if seen != kind:
                columns[field.name] = StringType()  # differs between events: raw JSON
    order = [n for n in FIRST if n in columns] + [n for n in columns if n not in FIRST]
    return StructType([StructField(name, columns[name]) for name in order])


EVENT_SCHEMA = event_schema([*EVENT_TYPES, CoordinatorLine])
