"""The coordinator's data directory: a journal of records (``coordinator.records``).

``Journal.open(directory)`` takes an exclusive lock (a second coordinator on the same
directory is refused), reads ``journal.bin`` back and cuts off a damaged tail (a crash in
the middle of a write; logged with the bytes dropped). ``append`` writes the records of
one request in one ``write`` before the coordinator answers it: a killed coordinator
process loses nothing it acknowledged. With ``fsync`` every append is also forced to disk,
so a power loss loses nothing either (Kafka's default relies on replication instead; one
coordinator has none). ``compact(state)`` replaces the journal by the records of the
current state (written to a new file, forced to disk, then renamed over the old one) once
the journal has grown well past that state.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Final

import structlog

from coordinator.records import Record, decode_frames, encode_frames

log = structlog.get_logger("huddle.journal")

JOURNAL: Final = "journal.bin"
LOCK: Final = "lock"
COMPACT_MIN_RECORDS: Final = 100_000  # never compact a journal smaller than this
COMPACT_FACTOR: Final = 4  # compact when the journal holds this many times the state


class DataDirError(Exception):
    """The data directory cannot be used: not writable, or in use by another coordinator."""


class Journal:
    def __init__(self, directory: Path, *, fsync: bool = False) -> None:
        self.directory = directory
        self.fsync = fsync
        self.records: list[Record] = []  # what was read back at open; cleared by the caller
        self.written = 0  # records in the journal file
        self._lock: IO[bytes] | None = None
        self._file: IO[bytes] | None = None

    @classmethod
    def open(cls, directory: str | Path, *, fsync: bool = False) -> Journal:
        journal = cls(Path(directory), fsync=fsync)
        try:
            journal._open()
        except DataDirError:
            journal.close()
            raise
        except OSError as exc:
            journal.close()
            reason = exc.strerror or str(exc)
            raise DataDirError(f"cannot use data directory {directory}: {reason}") from None
        return journal

    def _open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.directory / LOCK, "ab")  # noqa: SIM115 - held until close
        try:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirError(
                f"data directory {self.directory} is in use by another coordinator"
            ) from None
        path = self.directory / JOURNAL
        data = path.read_bytes() if path.exists() else b""
        decoded = decode_frames(data)
        if decoded.problem is not None:
            log.warning(
                "journal_truncated",
                path=str(path),
                problem=decoded.problem,
                dropped_bytes=len(data) - decoded.valid_bytes,
                records=len(decoded.records),
            )
        self._file = open(path, "r+b" if path.exists() else "w+b")  # noqa: SIM115
        self._file.truncate(decoded.valid_bytes)
        self._file.seek(decoded.valid_bytes)
        self.records = decoded.records
        self.written = len(decoded.records)
        log.info("journal_opened", path=str(path), records=self.written)

    def append(self, records: Sequence[Record]) -> None:
        """Write ``records`` (raises OSError if they could not be written)."""
        if self._file is None:
            raise OSError("the journal is closed")
        self._file.write(encode_frames(records))
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())
        self.written += len(records)

    def keep(
        self,
        records: Sequence[Record],
        state_size: Callable[[], int],
        state: Callable[[], list[Record]],
    ) -> bool:
        """Append ``records``, then compact if the journal is due; False (logged) if the
        records could not be written: the change must not be acknowledged."""
        try:
            self.append(records)
        except OSError as exc:
            log.error("journal_write_failed", error=str(exc), records=len(records))
            return False
        if self.written >= COMPACT_MIN_RECORDS and self.due(state_size()):
            try:
                self.compact(state)
            except OSError as exc:  # the journal as it was stays in use
                log.error("journal_compaction_failed", error=str(exc))
        return True

    def due(self, state_size: int) -> bool:
        """Whether the journal has grown enough past a state of ``state_size`` records."""
        return self.written >= max(COMPACT_MIN_RECORDS, COMPACT_FACTOR * state_size)

    def compact(self, state: Callable[[], list[Record]]) -> None:
        """Replace the journal by ``state()``; on failure the old journal stays in use."""
        if self._file is None:
            return
        records = state()
        path, tmp = self.directory / JOURNAL, self.directory / (JOURNAL + ".tmp")
        with open(tmp, "wb") as f:
            f.write(encode_frames(records))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self._fsync_directory()
        self._file.close()
        self._file = open(path, "r+b")  # noqa: SIM115
        self._file.seek(0, os.SEEK_END)
        log.info("journal_compacted", before=self.written, after=len(records))
        self.written = len(records)

    def _fsync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        for f in (self._file, self._lock):
            if f is not None and not f.closed:
                f.close()
        self._file = self._lock = None
