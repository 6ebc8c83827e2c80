"""Checking and repairing a data dir's journal (``huddle data check|repair DIR``).

A coordinator refuses to start on a damaged journal (damage with intact records after it)
rather than drop records. ``check`` says what is wrong and what a repair would keep;
``repair`` keeps every intact record, before and after the damage, in a new journal and
moves the damaged file aside as a backup. Records set values, so replaying the ones that
survive in their order gives the state they describe (what the damaged frames said is
lost: an offset commit there falls back to the one before it).

Not so for a group: a newer record of it may have been in the damaged stretch, and loading
the one before (an older generation, older member ids) would fence a live static member
that rejoined since as a zombie, for good. So a repair that skipped damage ends the
journal with a ``SessionRecord`` of the longest session any kept member had: a start then
loads the groups as forgotten (``huddle.coordinator.loading``: Empty since the start, their
offsets kept, the members rejoin as new ones), and no generation forms until every member
that may still count itself in has timed out, as for a journal of a version that kept no
groups.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from huddle.coordinator.storage.journal import (
    JOURNAL,
    DataDirError,
    lock_directory,
    unlock_directory,
)
from huddle.coordinator.storage.records import (
    DELETED,
    GroupRecord,
    Record,
    SessionRecord,
    decode_frames,
    encode_frames,
    next_intact_frame,
)


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

    @property
    def forgotten_groups(self) -> int:
        """How many groups a repair leaves to be loaded as forgotten (see above)."""
        if self.clean:
            return 0
        last = {r.group_id: r for r in self.records if isinstance(r, GroupRecord)}
        return sum(1 for r in last.values() if r.generation != DELETED)

    def repaired(self) -> list[Record]:
        """The records a repair writes: the intact ones, then, after damage with groups
        kept, the fence that makes a start forget them."""
        if not self.forgotten_groups:
            return self.records
        unserved = 0  # the fence the journal asks for already: its last SessionRecord's
        longest = 1  # at least: a SessionRecord of 0 says a fence was served
        for record in self.records:
            if isinstance(record, SessionRecord):
                unserved = record.longest_ms
            elif isinstance(record, GroupRecord):
                longest = max([longest, *(m.session_timeout_ms for m in record.members)])
        return [*self.records, SessionRecord(max(unserved, longest))]


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
        data = encode_frames(found.repaired())
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
