"""docs/wire.md names every message type and every field as ``huddle.protocol.messages``
defines them: a table row per type, its fields in the code's order, nested ones as
``name[field, ...]``."""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Annotated, Union, get_args, get_origin, get_type_hints

import msgspec

from huddle.protocol import messages
from huddle.protocol.errors import ErrorCode

WIRE_MD = Path(__file__).resolve().parents[2] / "docs" / "wire.md"
COMMON = ("error_code", "error_message")  # every response has them; the table says so once


def nested_struct(annotation: object) -> type[msgspec.Struct] | None:
    """The Struct a field holds (alone, in a list, or optional), unless it is a message."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated or origin is list:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            kinds = [a for a in get_args(annotation) if a is not type(None)]
            if len(kinds) != 1:
                return None  # a union of messages: Call.request, Reply.response
            annotation = kinds[0]
        else:
            break
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return None if issubclass(annotation, messages.Message) else annotation
    return None


def fields_of(struct: type[msgspec.Struct], skip: tuple[str, ...] = ()) -> str:
    """A Struct's fields as the tables write them: ``a, b[c, d]``."""
    hints = get_type_hints(struct, include_extras=True)
    written = []
    for field in msgspec.structs.fields(struct):
        if field.name in skip:
            continue
        inner = nested_struct(hints[field.name])
        written.append(f"{field.name}[{fields_of(inner)}]" if inner else field.name)
    return ", ".join(written)


def message_types() -> dict[str, type[messages.Message]]:
    found: dict[str, type[messages.Message]] = {}
    todo = list(messages.Message.__subclasses__())
    while todo:
        kind = todo.pop()
        todo.extend(kind.__subclasses__())
        info = msgspec.inspect.type_info(kind)
        assert isinstance(info, msgspec.inspect.StructType)
        assert isinstance(info.tag, str)
        found[info.tag] = kind
    return found


def documented() -> dict[str, str]:
    """Every `type` the tables of docs/wire.md name, with the fields written for it (the
    words in parentheses, which say what a field holds, taken out)."""
    rows: dict[str, str] = {}
    for line in WIRE_MD.read_text().splitlines():
        cells = (
            [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        )
        if len(cells) not in (3, 4) or not cells[0] or set(cells[0]) <= {"-"}:
            continue
        pairs = (
            [(cells[0], cells[2])]
            if len(cells) == 3
            else [(cells[0], cells[1]), (cells[2], cells[3])]
        )
        for name, written in pairs:
            tag = re.fullmatch(r"`([a-z_]+)`", name)
            if tag is not None:
                assert tag.group(1) not in rows, f"{tag.group(1)} is listed twice"
                rows[tag.group(1)] = re.sub(r"\s*\([^)]*\)", "", written).strip()
    return rows


def test_wire_md_lists_every_message_type_with_its_fields_as_named() -> None:
    rows = documented()
    kinds = message_types()
    assert set(rows) == set(kinds)
    for tag, kind in kinds.items():
        skip = COMMON if tag.endswith("_response") else ()
        assert rows[tag] == fields_of(kind, skip), tag


def test_the_check_reads_nested_fields() -> None:
    """The check itself: a nested list of Structs is written with its fields."""
    assert fields_of(messages.OffsetCommitRequest) == (
        "group_id, generation_id, member_id, group_instance_id, "
        "topics[name, partitions[partition, offset, metadata]]"
    )
    assert fields_of(messages.Call) == "correlation_id, request"


def test_every_error_code_is_in_the_coordinator_s_table() -> None:
    """docs/coordinator.md section 2, which the wire protocol's responses refer to, names
    every code as ``huddle.protocol.errors.ErrorCode`` numbers it."""
    table = (WIRE_MD.parent / "coordinator.md").read_text()
    rows = dict(re.findall(r"^\| (-?\d+) \| ([A-Z_]+) \|", table, re.MULTILINE))
    assert rows == {str(code.value): code.name for code in ErrorCode}
