"""The log kept in a data dir: its segment files written as the store changes, and, with
``--fsync``, forced to disk before a Produce is answered.

``LogDisk.open(data_dir)`` (run it off the loop, after the journal has locked the data
dir) locks ``<data-dir>/kafka-log`` too, checks its format version and reads every
partition back (``segments.recover``); ``LogStore(..., disk=disk)`` takes what was read.
From then on the store calls ``roll``, ``append``, ``delete`` and ``remove`` as its
segments change: each is done on the loop at once (a write copies into the page cache,
microseconds, as the journal's writes without ``--fsync``), so a killed process loses
nothing a Produce was answered for.

With ``fsync`` the files and directories changed during a loop pass are forced to disk at
the end of the pass on a writer thread (``fdatasync`` of each file written, ``fsync`` of
each directory that gained or lost a file, several at once: ``syncs``), off the loop, as
the journal's group commit
does; ``kept()`` waits until everything appended before it is on the disk. A Produce is
answered after that (``waiting.kept``): a power loss loses nothing it acknowledged.

A failed write or sync leaves the log read-only: the append is refused, and every later
one, with KAFKA_STORAGE_ERROR (as Kafka takes a failed log dir offline); Fetches go on
from memory. The groups' journal is not affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import structlog
from kio.schema.errors import ErrorCode

from huddle.coordinator.kafka_log import segments
from huddle.coordinator.kafka_log.batches import LogError
from huddle.coordinator.kafka_log.partition import Segment
from huddle.coordinator.kafka_log.syncs import Syncs
from huddle.coordinator.storage.batching import EndOfPass
from huddle.coordinator.storage.journal import DataDirError, opening
from huddle.coordinator.storage.writer import WriterThread

log = structlog.get_logger("huddle.kafka_log")

PartitionKey = tuple[str, int]


@dataclass(slots=True)
class _Active:
    """A partition's active segment file: its name, its descriptor, its size."""

    base: int
    fd: int
    end: int


class LogDisk(EndOfPass):
    def __init__(self, root: Path, *, fsync: bool) -> None:
        self.root = root
        self.fsync = fsync
        self.recovered: dict[PartitionKey, list[Segment]] = {}  # read at open; for the store
        self.failed = False
        self._lock_fd: int | None = None
        self._active: dict[PartitionKey, _Active] = {}
        # with fsync: what the pass changed, to force to disk at its end
        self._dirty_files: set[int] = set()  # active segments' descriptors
        self._closed_files: list[int] = []  # copies of descriptors closed since written
        self._dirty_dirs: set[Path] = set()
        self._closed = False
        self._pass = 0  # the number of the last pass handed to the sync thread
        self._kept = 0  # every pass up to this one is on the disk
        self._waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self._thread: WriterThread | None = None  # hands each pass's syncs to ``_syncs``
        self._syncs = Syncs()
        self.syncs = 0  # passes forced to disk, for tests and benchmarks

    @classmethod
    def open(cls, data_dir: str | Path, *, fsync: bool = False) -> LogDisk:
        """Lock and read ``<data_dir>/kafka-log`` (made if missing); DataDirError if it
        cannot be used."""
        disk = cls(Path(data_dir) / segments.LOG_DIR, fsync=fsync)
        with opening(f"the log in {disk.root}", disk.close):
            disk._open()
        return disk

    def _open(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirError(f"{self.root} is in use by another coordinator") from None
        version_file = self.root / segments.FORMAT_FILE
        if version_file.exists():
            found = version_file.read_text().strip()
            if found != str(segments.FORMAT_VERSION):
                raise DataDirError(
                    f"{self.root} is in format {found!r}; this version reads format "
                    f"{segments.FORMAT_VERSION} only"
                )
        else:
            version_file.write_text(f"{segments.FORMAT_VERSION}\n")
        for path in sorted(self.root.iterdir()):
            key = segments.parse_partition_dir(path.name)
            if key is None or not path.is_dir():
                if path.name != segments.FORMAT_FILE:
                    log.warning("kafka_log.unknown_file", path=str(path))
                continue
            kept = segments.recover(path, *key)
            if kept:
                self.recovered[key] = kept
        batches = sum(len(s.batches) for found in self.recovered.values() for s in found)
        log.info(
            "kafka_log.opened", path=str(self.root), partitions=len(self.recovered), batches=batches
        )

    # What the store calls as its segments change (on the loop).

    def roll(self, key: PartitionKey, base: int) -> None:
        """A new active segment (an empty file) from ``base``."""
        self._guard()
        try:
            self._open_segment(key, base)
        except OSError as exc:
            self._failed(exc)

    def append(self, key: PartitionKey, base: int, data: bytes) -> None:
        """Append a batch to the partition's active segment, named ``base``."""
        self._guard()
        try:
            active = self._active.get(key)
            if active is None or active.base != base:
                active = self._open_segment(key, base)
            try:
                written = 0
                while written < len(data):
                    written += os.pwrite(
                        active.fd, memoryview(data)[written:], active.end + written
                    )
            except OSError:
                os.ftruncate(active.fd, active.end)  # if this fails too, the next start cuts it
                raise
        except OSError as exc:
            self._failed(exc)
        active.end += len(data)
        if self.fsync:
            self._dirty_files.add(active.fd)
            self._schedule()

    def delete(self, key: PartitionKey, base: int) -> None:
        """Delete a segment that is no longer the active one."""
        directory = segments.partition_dir(self.root, *key)
        try:
            segments.segment_path(directory, base).unlink(missing_ok=True)
        except OSError as exc:
            log.error("kafka_log.delete_failed", topic=key[0], partition=key[1], error=str(exc))
        self._dirty_dir(directory)

    def remove(self, key: PartitionKey) -> None:
        """Remove the partition's directory (its topic was deleted or shrunk)."""
        self._close_active(key)
        directory = segments.partition_dir(self.root, *key)
        try:
            shutil.rmtree(directory, ignore_errors=False)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.error("kafka_log.remove_failed", path=str(directory), error=str(exc))
        self._dirty_dir(self.root)

    def _guard(self) -> None:
        if self.failed:
            raise LogError(ErrorCode.kafka_storage_error, "the log's data dir failed a write")

    def _failed(self, error: OSError) -> NoReturn:
        self.failed = True
        log.error("kafka_log.write_failed", path=str(self.root), error=str(error))
        raise LogError(ErrorCode.kafka_storage_error, f"the log could not be written: {error}")

    def _open_segment(self, key: PartitionKey, base: int) -> _Active:
        directory = segments.partition_dir(self.root, *key)
        if not directory.exists():
            directory.mkdir()
            self._dirty_dir(self.root)
        self._close_active(key)
        path = segments.segment_path(directory, base)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
        active = self._active[key] = _Active(base, fd, os.fstat(fd).st_size)
        self._dirty_dir(directory)
        return active

    def _close_active(self, key: PartitionKey) -> None:
        active = self._active.pop(key, None)
        if active is None:
            return
        if active.fd in self._dirty_files:  # its last writes go to disk with the pass
            self._dirty_files.discard(active.fd)
            self._closed_files.append(os.dup(active.fd))
        os.close(active.fd)

    # Forcing each pass's changes to disk (with fsync).

    @property
    def unkept(self) -> bool:
        """Whether something appended is not on the disk yet (only ever with fsync)."""
        return self._submit_due or self._kept < self._pass

    async def kept(self) -> bool:
        """Once everything appended so far is on the disk: True, or False if it could
        not be put there (the log is then read-only)."""
        if self.failed:
            return False
        if not self.unkept:
            return True
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append((self._pass + (1 if self._submit_due else 0), future))
        return await future

    def _dirty_dir(self, directory: Path) -> None:
        if self.fsync:
            self._dirty_dirs.add(directory)
            self._schedule()

    def _schedule(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # not serving yet (the store taking what was read back)
            self._sync_now()
            return
        self.submit_soon()

    def _take(self) -> tuple[list[int], list[Path]] | None:
        """What to force to disk (descriptors of its own), and the pass it closes."""
        if self._closed or not (self._dirty_files or self._closed_files or self._dirty_dirs):
            return None
        files = [os.dup(fd) for fd in self._dirty_files] + self._closed_files
        directories = list(self._dirty_dirs)
        self._dirty_files, self._closed_files, self._dirty_dirs = set(), [], set()
        self._pass += 1
        return files, directories

    def _sync_now(self) -> None:
        """Force what is pending to disk on this thread (at a start, or at the close)."""
        taken = self._take()
        if taken is None:
            return
        try:
            self._syncs.run(*taken)
        except OSError as exc:
            self._synced(self._pass, exc)
        else:
            self._synced(self._pass, None)

    def submit(self) -> None:
        """End of a loop pass: force what it changed to disk, on the writer thread."""
        taken = self._take()
        if taken is None:
            return
        if self._thread is None:
            self._thread = WriterThread("huddle-kafka-log")
        done = self._done_callback(self._pass)
        self._thread.submit(self._syncs.run, *taken).add_done_callback(done)

    def _done_callback(self, number: int) -> Callable[[Future[None]], None]:
        loop = self._loop

        def done(future: Future[None]) -> None:
            error = future.exception()
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(self._synced, number, error)

        return done

    def _synced(self, number: int, error: BaseException | None) -> None:
        if error is not None and not self.failed:
            self.failed = True
            log.error("kafka_log.sync_failed", path=str(self.root), error=str(error))
        if error is None:
            self.syncs += 1
            self._kept = max(self._kept, number)
        waiting, self._waiters = self._waiters, []
        for due, future in waiting:
            if future.done():
                continue
            if self.failed:
                future.set_result(False)
            elif due <= self._kept:
                future.set_result(True)
            else:
                self._waiters.append((due, future))

    def close(self) -> None:
        """Close the files, after the syncs handed over (call once no more appends come)."""
        if self._thread is not None:
            self._thread.shutdown(wait=True)
        if self.fsync and not self.failed:
            self._sync_now()  # what the last pass changed
        self._syncs.close()
        self._closed = True
        for key in list(self._active):
            os.close(self._active.pop(key).fd)
        for fd in self._closed_files:
            os.close(fd)
        self._closed_files = []
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
