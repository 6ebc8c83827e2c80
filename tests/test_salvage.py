"""``huddle data check|repair DIR``: a damaged journal stops the start; check says what is
wrong, repair keeps every intact record (after the damage too) and a backup."""

from __future__ import annotations

from pathlib import Path

import pytest

from huddle.cli import main
from huddle.coordinator.core import Coordinator
from huddle.coordinator.journal import JOURNAL, DataDirError, Journal
from huddle.coordinator.records import GroupRecord, KeptMember, OffsetRecord, Record, encode_frames

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


def test_a_repair_keeps_the_group_records_and_a_restart_loads_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The journal keeps groups too: check counts them among the intact records, repair
    keeps them (before and after the damage), and the restarted core loads the group."""
    member = KeptMember("m-1", None, "c", "h", 10_000, 30_000, [("range", b"s")], b"a")
    stable = GroupRecord("g", 4, "consumer", "range", "m-1", [member], 1_700_000_000_000)
    records: list[Record] = [stable, *RECORDS, GroupRecord("h", 2, "consumer", None, None, [])]
    frames = [encode_frames([r]) for r in records]
    data = bytearray(b"".join(frames))
    data[sum(map(len, frames[:5]))] ^= 0x40  # an offset record's length: damage
    (tmp_path / JOURNAL).write_bytes(bytes(data))
    assert main(["data", "check", str(tmp_path)]) == 1
    assert f"{len(records) - 1} intact records" in capsys.readouterr().out
    assert main(["data", "repair", str(tmp_path)]) == 0
    journal = Journal.open(tmp_path)
    journal.close()
    assert journal.records[0] == stable
    assert journal.records[-1] == records[-1]
    core = Coordinator()
    core.restore(journal.records)
    core.start(0.0)
    assert (core.groups["g"].generation, list(core.groups["g"].members)) == (4, ["m-1"])
    assert core.groups["g"].state_ms == 1_700_000_000_000
