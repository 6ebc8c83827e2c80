"""What the harness reads from the members' event files while a run goes on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from huddle.chaos.progress import EventTail

T0 = 1_800_000_000.0


def _append(events: Path, proc: str, at: float, event: str, **fields: Any) -> None:
    record = {"ts": T0 + at, "proc": proc, "event": event, **fields}
    line = json.dumps(record, separators=(",", ":"))  # as chaos.events.EventLog writes
    with open(events / f"{proc}.jsonl", "a", encoding="utf-8") as f:
        f.write(line + "\n")


def _processed(events: Path, proc: str, at: float, partition: int) -> None:
    _append(events, proc, at, "processed", topic="t", partition=partition, offset=0, count=5)


def _assigned(events: Path, proc: str, at: float, *partitions: int) -> None:
    _append(events, proc, at, "assigned", partitions=[["t", p] for p in partitions])


def test_settled_needs_every_member_in_the_latest_generation_all_partitions_and_quiet(
    tmp_path: Path,
) -> None:
    tail = EventTail(tmp_path)
    members = {"member-1", "member-2"}
    _append(tmp_path, "member-1", 0.0, "joined", generation=1)
    _assigned(tmp_path, "member-1", 0.0, 0, 1)
    _processed(tmp_path, "member-1", 0.1, 0)
    _processed(tmp_path, "member-1", 0.1, 1)
    tail.poll()
    assert not tail.settled(members, 2, T0 + 5.0, 1.0), "member-2 has not joined"

    _append(tmp_path, "member-2", 1.0, "joined", generation=2)
    _append(tmp_path, "member-1", 1.0, "joined", generation=2)
    tail.poll()
    assert tail.generation == 2
    assert not tail.settled(members, 2, T0 + 5.0, 1.0), "member-1 owns both: a move is due"

    _append(tmp_path, "member-1", 1.0, "revoked", partitions=[["t", 1]])
    _append(tmp_path, "member-1", 1.1, "joined", generation=3)
    _append(tmp_path, "member-2", 1.1, "joined", generation=3)
    _assigned(tmp_path, "member-2", 1.1, 1)
    tail.poll()
    assert not tail.settled(members, 2, T0 + 1.5, 1.0), "a generation began 0.4 s ago"
    assert not tail.settled(members, 3, T0 + 5.0, 1.0), "partition 2 is nobody's"
    assert tail.settled(members, 2, T0 + 2.1, 1.0)
    assert tail.processed == 10


def test_a_restarted_process_owns_nothing_and_joins_are_compared_by_time(
    tmp_path: Path,
) -> None:
    tail = EventTail(tmp_path)
    _append(tmp_path, "member-1", 0.0, "joined", generation=1)
    _assigned(tmp_path, "member-1", 0.0, 0)
    _append(tmp_path, "member-2", 5.0, "joined", generation=1)  # read after member-1: later
    _processed(tmp_path, "member-1", 0.1, 0)
    tail.poll()
    _append(tmp_path, "member-1", 4.0, "process_started", pid=2)
    _append(tmp_path, "member-1", 4.5, "joined", generation=1)  # an older join, read later
    tail.poll()
    assert tail.last_join_ts == T0 + 5.0
    assert tail.owned["member-1"] == set()
    assert not tail.settled({"member-1", "member-2"}, 1, T0 + 9.0, 1.0), "nobody owns 0"


def test_a_line_being_written_is_read_on_the_next_poll(tmp_path: Path) -> None:
    tail = EventTail(tmp_path)
    record = {"ts": T0, "proc": "member-1", "event": "joined", "generation": 4}
    line = json.dumps(record, separators=(",", ":"))
    path = tmp_path / "member-1.jsonl"
    path.write_text(line[:10], encoding="utf-8")
    tail.poll()
    assert tail.generation is None
    path.write_text(line + "\n", encoding="utf-8")
    tail.poll()
    assert tail.generation == 4
