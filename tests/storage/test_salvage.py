"""``huddle data check|repair DIR``: a damaged journal stops the start; check says what is
wrong, repair keeps every intact record (after the damage too) and a backup."""

from __future__ import annotations

from pathlib import Path

import pytest

from huddle.cli import main
from huddle.coordinator.core import Coordinator
from huddle.coordinator.state import GroupState
from huddle.coordinator.storage.journal import JOURNAL, DataDirError, Journal
from huddle.coordinator.storage.records import (
    GroupRecord,
    KeptMember,
    OffsetRecord,
    Record,
    SessionRecord,
    encode_frames,
)
from huddle.coordinator.storage.salvage import repair
from huddle.protocol.errors import ErrorCode
from tests.harness import SESSION_MS
from tests.storage.test_restart import data_dir_core

E = ErrorCode

RECORDS: list[Record] = [OffsetRecord("g", "t", i, 100 + i) for i in range(12)]


def damaged_journal(directory: Path) -> bytes:
    """The 12 records with record 5's length claiming more than the file holds."""
    frames = [encode_frames([r]) for r in RECORDS]
    data = bytearray(b"".join(frames))
    data[sum(map(len, frames[:5]))] ^= 0x40  # the length's top byte
    (directory / JOURNAL).write_bytes(bytes(data))
    return bytes(data)


def test_check_and_repair_keep_every_intact_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = damaged_journal(tmp_path)
    with pytest.raises(DataDirError, match="huddle data repair"):
        Journal.open(tmp_path)
    assert main(["data", "check", str(tmp_path)]) == 1
    report = capsys.readouterr().out
    assert "11 intact records" in report
    assert "damaged" in report
    assert (tmp_path / JOURNAL).read_bytes() == original  # check changes nothing
    assert main(["data", "repair", str(tmp_path)]) == 0
    assert "kept 11 records" in capsys.readouterr().out
    backups = list(tmp_path.glob(f"{JOURNAL}.damaged-*"))
    assert [b.read_bytes() for b in backups] == [original]
    journal = Journal.open(tmp_path)
    assert journal.records == RECORDS[:5] + RECORDS[6:]  # only the damaged record is gone
    journal.close()
    assert main(["data", "check", str(tmp_path)]) == 0
    assert "intact" in capsys.readouterr().out


def test_repair_refuses_while_a_coordinator_holds_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = Journal.open(tmp_path)
    journal.append(RECORDS)
    journal.close()
    running = Journal.open(tmp_path)  # holds the lock, as a running coordinator does
    try:
        damaged_journal(tmp_path)
        assert main(["data", "repair", str(tmp_path)]) == 2
        assert "in use by a coordinator" in capsys.readouterr().err
    finally:
        running.close()
    assert main(["data", "check", str(tmp_path / "missing")]) == 2


def test_a_repair_keeps_the_group_records_and_a_restart_loads_them_forgotten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The journal keeps groups too: check counts them among the intact records, and
    repair keeps them (before and after the damage). The damage may have held a newer
    record of a group, so the restarted core loads them forgotten: Empty since the start,
    offsets kept, and no generation before the longest kept session has run out."""
    member = KeptMember("m-1", None, "c", "h", 10_000, 30_000, [("range", b"s")], b"a")
    stable = GroupRecord("g", 4, "consumer", "range", "m-1", [member], 1_700_000_000_000)
    records: list[Record] = [stable, *RECORDS, GroupRecord("h", 2, "consumer", None, None, [])]
    frames = [encode_frames([r]) for r in records]
    data = bytearray(b"".join(frames))
    data[sum(map(len, frames[:5]))] ^= 0x40  # an offset record's length: damage
    (tmp_path / JOURNAL).write_bytes(bytes(data))
    assert main(["data", "check", str(tmp_path)]) == 1
    report = capsys.readouterr().out
    assert f"{len(records) - 1} intact records" in report
    assert "2 groups" in report
    assert main(["data", "repair", str(tmp_path)]) == 0
    journal = Journal.open(tmp_path)
    journal.close()
    assert journal.records[0] == stable
    assert journal.records[-2:] == [records[-1], SessionRecord(10_000)]
    core = Coordinator()
    core.set_wall_clock(0, 1_800_000_000_000)
    core.restore(journal.records)
    core.start(0.0)
    group = core.groups["g"]
    assert (group.state, group.generation, group.members) == (GroupState.EMPTY, 4, {})
    assert group.state_ms == 1_800_000_000_000  # a whole retention from the start
    assert len(group.offsets) == len(RECORDS) - 1
    assert core.sessions.fenced_until == 10_000


def test_a_repair_that_drops_a_newer_group_record_does_not_fence_its_live_static_member(
    tmp_path: Path,
) -> None:
    """Found by review: the damaged record was the group's newer one (its static member
    back as a new process, a new member id); the repair kept the older one, and the
    restarted coordinator loaded the instance under its old member id, fencing the live
    process as a zombie (FENCED_INSTANCE_ID: fatal to it)."""
    d = data_dir_core()
    id1 = d.join_response(d.join(1, instance="s1")).member_id
    d.sync(1, id1, 1, {id1: b"one"}, instance="s1")
    older = d.core.take_changes()
    back = d.join_response(d.join(2, instance="s1"))  # a new process: kept in Stable
    newer = d.core.take_changes()
    after: list[Record] = [OffsetRecord("g", "t", 0, 1)]
    frames = [encode_frames(older), encode_frames(newer), encode_frames(after)]
    data = bytearray(b"".join(frames))
    data[len(frames[0])] ^= 0x40  # the newer group record's length
    (tmp_path / JOURNAL).write_bytes(bytes(data))
    found, _ = repair(tmp_path)
    assert found.damaged
    assert found.forgotten_groups == 1
    journal = Journal.open(tmp_path)
    journal.close()
    again = data_dir_core()
    again.core.restore(journal.records)
    again.core.start(again.now)
    code = again.heartbeat(2, back.member_id, back.generation_id, instance="s1")
    assert code == E.UNKNOWN_MEMBER_ID  # not FENCED_INSTANCE_ID: it joins again
    rejoined = again.join(2, instance="s1")
    again.advance(SESSION_MS)  # the fence: its old process's session could still run
    assert again.join_response(rejoined).error_code == E.NONE
