"""The chaos <-> pipeline contract: event Structs, their JSON lines, the Spark schema."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import msgspec
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType

from huddle.chaos import events as ev
from huddle.chaos.eventfiles import KNOWN, problems
from huddle.chaos.progress import EventTail
from huddle.pipeline.schema import EVENT_SCHEMA, CoordinatorLine, event_schema


def test_every_field_of_every_event_is_a_column_of_a_compatible_type() -> None:
    columns = {f.name: f.dataType for f in EVENT_SCHEMA.fields}
    python_to_spark = {float: DoubleType(), int: LongType(), bool: BooleanType(), str: StringType()}
    structs: list[type[msgspec.Struct]] = [*ev.EVENT_TYPES, CoordinatorLine]
    for struct in structs:
        for field in msgspec.structs.fields(struct):
            kinds = [k for k in typing.get_args(field.type) if k is not type(None)]
            plain = kinds[0] if len(kinds) == 1 else field.type
            expected = python_to_spark.get(plain) if isinstance(plain, type) else None
            assert field.name in columns, (struct.__name__, field.name)
            assert columns[field.name] in (expected, StringType()), (struct.__name__, field.name)
    assert [f.name for f in EVENT_SCHEMA.fields][:4] == ["ts", "timestamp", "proc", "event"]


def test_a_field_added_to_an_event_becomes_a_column() -> None:
    class Paused(ev.Event, tag="paused", kw_only=True):
        member_id: str
        paused_ms: int
        why: list[str]

    schema = {f.name: f.dataType for f in event_schema([*ev.EVENT_TYPES, Paused]).fields}
    assert schema["paused_ms"] == LongType()
    assert schema["why"] == StringType()  # a list: its raw JSON text
    assert "paused_ms" not in {f.name for f in EVENT_SCHEMA.fields}


def test_a_field_whose_type_differs_between_events_is_raw_json_text() -> None:
    columns = {f.name: f.dataType for f in EVENT_SCHEMA.fields}
    assert columns["partitions"] == StringType()  # a count in run_started, pairs in assigned
    assert columns["leader"] == StringType()  # a flag in joined, a member id in the coordinator
    assert columns["generation"] == LongType()
    assert columns["accepted"] == BooleanType()


def test_event_lines_round_trip_through_the_structs(tmp_path: Path) -> None:
    path = tmp_path / "events" / "member-1.jsonl"
    written: list[ev.Event] = [
        ev.Joined(member_id="m1", generation=3, leader=True),
        ev.Assigned(member_id="m1", generation=3, partitions=[("t", 0), ("t", 2)]),
        ev.Processed(member_id="m1", generation=3, topic="t", partition=2, offset=10, count=5),
        ev.Committed(
            member_id="m1", generation=3, topic="t", partition=2, offset=15, accepted=True
        ),
    ]
    with ev.EventLog(path, "member-1") as log:
        for event in written:
            log.write(event)
    lines = path.read_text().splitlines()
    read = [ev.decode_event(line) for line in lines]
    assert [type(e) for e in read] == [type(e) for e in written]
    assert all(e.proc == "member-1" and e.ts > 0 for e in read)
    assert read[1] == written[1]
    raw = json.loads(lines[1])
    assert raw["event"] == "assigned"
    assert raw["partitions"] == [["t", 0], ["t", 2]]  # what the pipeline parses


def test_the_progress_reader_still_reads_processed_lines(tmp_path: Path) -> None:
    path = tmp_path / "events" / "member-1.jsonl"
    with ev.EventLog(path, "member-1") as log:
        log.write(
            ev.Processed(member_id="m", generation=1, topic="t", partition=4, offset=0, count=7)
        )
    tail = EventTail(path.parent)
    tail.poll()
    assert (tail.processed, tail.partitions) == (7, {4})


def test_the_event_file_checker_knows_every_event_and_checks_its_fields() -> None:
    good = json.loads(
        msgspec.json.encode(ev.Joined(ts=1.5, proc="m", member_id="x", generation=2, leader=False))
    )
    assert problems([good], "m") == []
    assert {ev.tag_of(t) for t in ev.EVENT_TYPES} == KNOWN
    bad = {**good, "generation": "two"}
    del bad["leader"]
    (problem,) = problems([bad], "m")
    assert problem.startswith("line 1: joined: ")
    assert problems([{**good, "event": "teleported"}], "m") == [
        "line 1: unknown event 'teleported'"
    ]


def test_restore_events_carry_their_offsets_and_old_restored_lines_still_read() -> None:
    """``restore_started`` says up to which offset a task's state is rebuilt, from where,
    and how many records (the pipeline's restore figures and its restore check); a
    ``restored`` line written before it carried those still reads (None)."""
    started = ev.RestoreStarted(
        member_id="m", generation=2, topic="t", partition=1, offset=40, from_offset=10, records=30
    )
    assert ev.decode_event(msgspec.json.encode(started)) == started
    old = (
        b'{"event":"restored","ts":1.0,"proc":"member-1","member_id":"m","topic":"t","partition":1}'
    )
    restored = ev.decode_event(old)
    assert isinstance(restored, ev.Restored)
    assert (restored.offset, restored.records) == (None, None)
    columns = {f.name: f.dataType for f in EVENT_SCHEMA.fields}
    assert (columns["from_offset"], columns["records"]) == (LongType(), LongType())
