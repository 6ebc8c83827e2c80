"""The coordinator's data directory: a journal of records (``huddle.coordinator.storage.records``).

``Journal.open(directory)`` takes an exclusive lock on the directory itself (a second
coordinator on the same directory is refused, whatever was deleted inside it), removes what
a compaction or repair killed halfway left behind, and reads ``journal.bin`` back. A torn
tail (what a crash in the middle of a write leaves) is cut off and logged; damage with
intact records after it is not something a crash does, and the coordinator refuses to start
rather than drop them.

``append`` writes a batch of records with ``os.pwrite`` before the coordinator answers the
requests that made them (``huddle.coordinator.storage.group_commit`` runs it on a writer thread):
a killed coordinator process loses nothing it acknowledged. With ``fsync``
every append is also forced to disk, so a power loss loses nothing either (Kafka's default
relies on replication instead; one coordinator has none). A failed append is cut back off
the file, so nothing half-written stays between records.

``compact(state)`` replaces the journal by the records ``state()`` builds (written to a new
file, forced to disk, renamed over the old one) once the journal has grown well past
that state, in records or in bytes (a group record of a thousand members is some 376 KB:
a group that rebalances now and then would grow the journal by gigabytes before it held
enough records); a compaction that fails is logged, leaves the journal as it was and is not
tried again until the journal has doubled.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final

import structlog

from huddle.coordinator.storage.records import Record, decode_frames, encode_frames
from huddle.protocol.errors import HuddleError

log = structlog.get_logger("huddle.journal")

JOURNAL: Final = "journal.bin"
COMPACT_MIN_RECORDS: Final = 100_000  # never compact a journal smaller than this
COMPACT_MIN_BYTES: Final = 64 << 20  # nor one of fewer bytes than this
COMPACT_FACTOR: Final = 4  # compact when the journal holds this many times the state


class JournalClosedError(HuddleError, OSError):
    """A write to a journal already closed. Also an ``OSError``, as every other failed
    write is (the writer reports them alike)."""


class DataDirError(HuddleError):
    """The data directory cannot be used: not writable, damaged, or in use by another
    coordinator."""


@contextlib.contextmanager
def opening(what: str, close: Callable[[], None]) -> Iterator[None]:
    """Opening (part of) a data dir: if it fails, ``close`` what was opened, and an
    OSError becomes a DataDirError that names ``what``."""
    try:
        yield
    except DataDirError:
        close()
        raise
    except OSError as exc:
        close()
        reason = exc.strerror or str(exc)
        raise DataDirError(f"cannot use {what}: {reason}") from None


LEGACY_LOCK: Final = "lock"  # what coordinators before the directory lock locked


def lock_directory(directory: Path) -> int:
    """An exclusive lock on the directory itself (its open descriptor, returned): no file
    inside it can be deleted to break it. DataDirError if another process holds it. The
    ``lock`` file older coordinators lock is held too, so an older and a newer coordinator
    cannot share a directory during an upgrade either."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataDirError(f"data directory {directory} is in use by another coordinator") from None
    try:  # always: an older coordinator started later takes this file's lock
        held = os.open(directory / LEGACY_LOCK, os.O_RDWR | os.O_CREAT, 0o640)
    except OSError:
        os.close(fd)
        raise
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(held)
        os.close(fd)
        raise DataDirError(
            f"data directory {directory} is in use by another (older) coordinator"
        ) from None
    _legacy_locks[fd] = held
    return fd


_legacy_locks: dict[int, int] = {}  # directory lock fd -> the legacy lock file's fd


def unlock_directory(fd: int) -> None:
    held = _legacy_locks.pop(fd, None)
    if held is not None:
        os.close(held)
    os.close(fd)


class Journal:
    def __init__(self, directory: Path, *, fsync: bool = False) -> None:
        self.directory = directory
        self.fsync = fsync
        self.records: list[Record] = []  # what was read back at open; cleared by the caller
        self.written = 0  # records in the journal file
        self._lock_fd: int | None = None
        self._fd: int | None = None
        self._end = 0  # bytes of whole records in the file
        self._compact_at = COMPACT_MIN_RECORDS  # no compaction before this many records
        self._compact_at_bytes = COMPACT_MIN_BYTES  # nor before the file is this large
        self._record_bytes: float | None = None  # a state record's size at the last compaction
        self.broken = False  # an append failed: nothing more is written, not even a compaction

    @property
    def path(self) -> Path:
        return self.directory / JOURNAL

    @classmethod
    def open(cls, directory: str | Path, *, fsync: bool = False) -> Journal:
        journal = cls(Path(directory), fsync=fsync)
        with opening(f"data directory {directory}", journal.close):
            journal._open()
        return journal

    def _open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = lock_directory(self.directory)
        for stale in (JOURNAL + ".tmp", JOURNAL + ".repair"):  # a compaction or repair killed
            if (self.directory / stale).exists():
                (self.directory / stale).unlink()
                log.warning("journal_leftover_removed", path=str(self.directory / stale))
        path = self.path
        data = path.read_bytes() if path.exists() else b""
        decoded = decode_frames(data)
        if decoded.problem is not None and not decoded.torn_tail:
            raise DataDirError(
                f"{path} is damaged ({decoded.problem}) and intact records follow; "
                f"`huddle data repair {self.directory}` keeps every intact record (the "
                "damaged file stays beside it), `huddle data check` says what it would keep"
            )
        if decoded.problem is not None:
            log.warning(
                "journal_truncated",
                path=str(path),
                problem=decoded.problem,
                dropped_bytes=len(data) - decoded.valid_bytes,
                records=len(decoded.records),
            )
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
        os.ftruncate(self._fd, decoded.valid_bytes)
        self._end = decoded.valid_bytes
        self.records = decoded.records
        self.written = len(decoded.records)
        # The state it holds is not known yet: ask at the first write past the minimum (a
        # threshold derived from what was read would grow with every restart, and a
        # coordinator restarted often would never compact).
        self._compact_at = COMPACT_MIN_RECORDS
        self._compact_at_bytes = COMPACT_MIN_BYTES
        log.info("journal_opened", path=str(path), records=self.written)

    def append(self, records: Sequence[Record]) -> None:
        """Write ``records`` (raises OSError if they could not be written, after cutting
        whatever part was written back off the file)."""
        self.write(encode_frames(records), len(records))

    def write(self, frames: bytes | bytearray, count: int) -> None:
        """Write ``count`` records already encoded as ``frames`` (``encode_frames``); with
        ``fsync``, return once they are on the disk. Needs no Python objects but the
        buffer, so a writer thread hardly needs the interpreter."""
        fd = self._fd
        if fd is None:
            raise JournalClosedError("the journal is closed")
        data = memoryview(frames)
        try:
            written = 0
            while written < len(data):
                written += os.pwrite(fd, data[written:], self._end + written)
            if self.fsync:
                _sync_data(fd)
        except OSError:
            self.broken = True
            try:
                os.ftruncate(fd, self._end)
            except OSError as exc:  # the next open cuts it off as a torn tail
                log.error("journal_cut_back_failed", error=str(exc))
            raise
        self._end += len(data)
        self.written += count

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
        if self.compaction_may_be_due():
            size = state_size()
            if self.due(size):
                self.compact(state)
            else:
                self.postpone_compaction(size)
        return True

    def compaction_may_be_due(self) -> bool:
        """Whether it is time to ask how large the state is (cheap)."""
        return self.written >= self._compact_at or self._end >= self._compact_at_bytes

    def postpone_compaction(self, state_size: int) -> None:
        """Not before the journal is COMPACT_FACTOR times a state of this size, in records
        or in bytes."""
        self._compact_at = max(COMPACT_MIN_RECORDS, COMPACT_FACTOR * state_size)
        self._compact_at_bytes = max(COMPACT_MIN_BYTES, COMPACT_FACTOR * self._bytes(state_size))

    def due(self, state_size: int) -> bool:
        """Whether the journal has grown enough past a state of ``state_size`` records: in
        records, or in bytes (``_bytes``)."""
        if self.written >= max(COMPACT_MIN_RECORDS, COMPACT_FACTOR * state_size):
            return True
        return self._end >= max(COMPACT_MIN_BYTES, COMPACT_FACTOR * self._bytes(state_size))

    def _bytes(self, state_size: int) -> int:
        """How many bytes a state of ``state_size`` records takes, as far as the journal
        can tell without building it: that many records of the size the state's records
        had at the last compaction. Not known before a first compaction (0: a journal of
        COMPACT_MIN_BYTES is compacted once after a start, which measures it); the
        journal's own records are no measure, as a journal swollen by rewrites of one
        large record would put its compaction off by as much."""
        if self._record_bytes is None:
            return 0
        return int(self._record_bytes * state_size)

    def compact(self, state: Callable[[], Iterable[Record]]) -> bool:
        """Replace the journal by ``state()``. On failure (logged) the journal stays as it
        was and the next try waits until it has doubled."""
        if self._fd is None or self.broken:
            return False
        count = 0

        def counted() -> Iterator[Record]:
            nonlocal count
            for record in state():
                count += 1
                yield record

        data = encode_frames(counted())
        tmp = self.directory / (JOURNAL + ".tmp")
        new_fd: int | None = None
        try:
            new_fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o640)
            written = 0
            while written < len(data):
                written += os.pwrite(new_fd, memoryview(data)[written:], written)
            os.fsync(new_fd)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.error("journal_compaction_failed", error=str(exc), records=self.written)
            if new_fd is not None:
                os.close(new_fd)
            tmp.unlink(missing_ok=True)
            self._compact_at = 2 * self.written
            self._compact_at_bytes = 2 * self._end
            return False
        old, self._fd = self._fd, new_fd
        os.close(old)
        self._fsync_directory()
        log.info("journal_compacted", before=self.written, after=count)
        self._end = len(data)
        self.written = count
        self._compact_at = max(COMPACT_MIN_RECORDS, 2 * self.written)
        self._compact_at_bytes = max(COMPACT_MIN_BYTES, 2 * self._end)
        self._record_bytes = len(data) / max(count, 1)
        return True

    def _fsync_directory(self) -> None:
        try:
            fd = os.open(self.directory, os.O_RDONLY)
        except OSError as exc:
            log.warning("journal_directory_sync_failed", error=str(exc))
            return
        try:
            os.fsync(fd)
        except OSError as exc:
            log.warning("journal_directory_sync_failed", error=str(exc))
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        if self._lock_fd is not None:
            unlock_directory(self._lock_fd)
        self._fd = self._lock_fd = None


def _sync_data(fd: int) -> None:
    """The data written to ``fd`` and what it takes to read it back (the file's new size)
    onto the disk: ``fdatasync`` where there is one (it skips timestamps, which a journal
    does not need: about 40% quicker on an ext4 virtual disk), else ``fsync``."""
    getattr(os, "fdatasync", os.fsync)(fd)
