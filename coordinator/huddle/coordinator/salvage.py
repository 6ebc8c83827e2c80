"""Checking and repairing a data dir's journal (``huddle data check|repair DIR``).

A coordinator refuses to start on a damaged journal (damage with intact records after it)
rather than drop records. ``check`` says what is wrong and what a repair would keep;
``repair`` keeps every intact record, before and after the damage, in a new journal and
moves the damaged file aside as a backup. Records set values, so replaying the ones that
survive in their order gives the state they describe (what the damaged frames said is
lost: an offset commit there falls back to the one before it).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from huddle.coordinator.journal import JOURNAL, DataDirError, lock_directory, unlock_directory
from huddle.coordinator.records import Record, decode_frames, encode_frames, next_intact_frame


@dataclass(slots=True)
class Salvage:
    """What reading a journal as far as it can be read finds."""

    size: int
    records: list[Record] = field(default_factory=list)
    damaged: list[tuple[int, int, str]] = field(default_factory=list)
    """(first byte, bytes skipped, why) for each damaged stretch, in file order."""
    torn_tail: int = 0
    """bytes at the end that only a crash during the last write left (a start cuts them)."""

    @property
    def clean(self) -> bool:
        return not self.damaged


def read(data: bytes | bytearray) -> Salvage:
    """Every intact record, skipping damaged stretches to the next intact frame."""
    found = Salvage(size=len(data))
    pos = 0
    while pos < len(data):
        decoded = decode_frames(data[pos:])
        found.records.extend(decoded.records)
        if decoded.problem is None:
            break
        at = pos + decoded.valid_bytes
        resume = next_intact_frame(data, at + 1)
        if decoded.torn_tail and resume is None:
            found.torn_tail = len(data) - at
            break
        end = resume if resume is not None else len(data)
        found.damaged.append((at, end - at, decoded.problem))
        if resume is None:
            break
        pos = resume
    return found


def check(directory: str | Path) -> Salvage:
    path = Path(directory) / JOURNAL
    if not Path(directory).is_dir():
        raise DataDirError(f"no data directory {directory}")
    return read(path.read_bytes() if path.exists() else b"")


def repair(directory: str | Path) -> tuple[Salvage, Path | None]:
    """Rewrite the journal with every intact record; the old file is kept beside it
    (returned; None when there was nothing to repair). Refuses while a coordinator holds
    the directory."""
    folder = Path(directory)
    found = check(folder)
    if found.clean and not found.torn_tail:
        return found, None
    try:
        lock = lock_directory(folder)
    except DataDirError:
        raise DataDirError(f"{folder} is in use by a coordinator: stop it first") from None
    try:
        path = folder / JOURNAL
        backup = folder / f"{JOURNAL}.damaged-{time.strftime('%Y%m%dT%H%M%S')}"
        tmp = folder / f"{JOURNAL}.repair"
        data = encode_frames(found.records)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(path, backup)  # the damaged file stays, under another name
        os.replace(tmp, path)
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return found, backup
    finally:
        unlock_directory(lock)
