"""``huddle data check|repair DIR``: a damaged journal stops the start; check says what is
wrong, repair keeps every intact record (after the damage too) and a backup."""

from __future__ import annotations

from pathlib import Path

import pytest

from huddle.cli import main
from huddle.coordinator.journal import JOURNAL, DataDirError, Journal
from huddle.coordinator.records import OffsetRecord, Record, encode_frames

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
