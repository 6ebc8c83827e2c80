"""Group commit: changes go to the data dir in batches, on one writer thread, off the loop.

The server hands over the records of each request it handled together with the answers that
request produced (``hold``). At the end of each loop pass (``submit``, once every read of
the pass is handled) the records gathered become one batch: encoded on the loop and queued
for the writer thread (``huddle.coordinator.storage.writer``), which writes everything queued in one
write and, with ``--fsync``, one fdatasync, then takes what queued meanwhile. (Without
``--fsync`` a write only copies into the page cache and is made on the loop, one per pass: a
thread hop would cost more than it saves; while a compaction runs or the thread still has
writes, batches go to the thread, in order.) The answers of a batch go out only once it is
written. Answers of requests that changed nothing but were handled after a change wait
behind it too: no answer ever shows a change the data dir does not hold yet, and the answers
of requests handled in order go out in that order. (Frames that show nothing kept are not
held: a malformed request's refusal, answers the core's timers produce, notices. Clients
match answers by correlation id.)

If a write fails, every request waiting for a batch not yet written is answered
KAFKA_STORAGE_ERROR (if the core answered it; one the core still holds, a JoinGroup waiting
for its phase to end, is answered by the core), nothing more is written, and ``on_failure``
stops the node.

Compaction: when the journal is due, the loop copies the state one group at a time, in slices
of a few milliseconds between which other work runs (``Coordinator.copy_state``); the writer
thread then builds the snapshot, adds the records written while the copy was being taken
(records set values, so replaying them over the copy is exact), writes and renames it. The
writer takes no new batch meanwhile; batches queued behind the compaction go to the new
journal (a batch the snapshot already covers is written again: replaying it sets the same
values).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import sys
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator

import structlog

from huddle.coordinator.effects import Outgoing
from huddle.coordinator.storage.batching import EndOfPass
from huddle.coordinator.storage.journal import Journal
from huddle.coordinator.storage.records import Record, encode_frames
from huddle.coordinator.storage.writer import Writer, WriterThread
from huddle.protocol.messages import Call

log = structlog.get_logger("huddle.group_commit")

Held = tuple[int, Call | None, list[Outgoing]]  # the caller's connection, its call, the answers
StateCopy = Generator[None, None, Callable[[], Iterator[Record]]]
COPY_SLICE_S = 0.004  # the loop copies state for compaction at most this long at a time


class GroupCommit(EndOfPass):
    def __init__(
        self,
        journal: Journal,
        loop: asyncio.AbstractEventLoop,
        *,
        release: Callable[[list[Held]], None],
        refuse: Callable[[list[Held]], None],
        on_failure: Callable[[], None],
        state_size: Callable[[], int],
        copy_state: Callable[[], StateCopy],
    ) -> None:
        self.journal = journal
        self._loop = loop
        self._release = release
        self._refuse = refuse
        self._on_failure = on_failure
        self._state_size = state_size
        self._copy_state = copy_state
        self._copying: StateCopy | None = None
        self._tail: list[Record] | None = None  # records written while the copy is taken
        self._executor = WriterThread("huddle-journal")
        self._writer = Writer(journal.write, self._executor.submit, self._from_thread)
        self._records: list[Record] = []  # the next batch
        self._held: list[Held] = []  # answers waiting for the next batch
        self._batch = 0  # the number of the last batch handed to the writer thread
        # batches handed to the writer thread, oldest first, with the answers waiting for them
        self._in_flight: deque[tuple[int, list[Held]]] = deque()
        self._idle = asyncio.Event()
        self._idle.set()
        self._compacting = False
        self._switch_interval: float | None = None
        self._gc_was_enabled = False
        self._compaction_done = asyncio.Event()
        self._compaction_done.set()
        self.failed = False
        self._closed = False
        self._submit_due = False  # a submit is scheduled for the end of this loop pass
        self.batches = 0  # writes done, for tests and benchmarks
        self.on_write: Callable[[float], None] | None = None  # seconds a batch took (metrics)
        self._began: dict[int, float] = {}  # batch handed to the thread -> when

    @property
    def busy(self) -> bool:
        """Whether answers must wait: a write in flight or changes not yet written."""
        return bool(self._in_flight) or bool(self._records) or bool(self._held)

    def waiting(self) -> int:
        """How many handled requests wait for a write before they are answered."""
        return len(self._held) + sum(len(held) for _, held in self._in_flight)

    def hold(
        self, records: list[Record], conn_id: int, call: Call | None, out: list[Outgoing]
    ) -> None:
        """A handled request: its changes (maybe none) and its answers, to send once kept."""
        if self.failed:
            self._refuse([(conn_id, call, out)])
            return
        self._records.extend(records)
        self._held.append((conn_id, call, out))
        self._idle.clear()

    def submit(self) -> None:
        """End of a loop pass: the changes gathered go to the writer as one batch."""
        if self.failed:
            return
        held, self._held = self._held, []
        if not self._records:  # answers that only wait for earlier batches, if any
            if self._in_flight:
                self._in_flight[-1][1].extend(held)
            else:
                self._release(held)
            self._settle()
            return
        records, self._records = self._records, []
        if self._tail is not None:
            self._tail.extend(records)
        if self.journal.fsync or self._compacting or self._in_flight:
            self._batch += 1
            self._in_flight.append((self._batch, held))
            if self.on_write is not None:
                self._began[self._batch] = time.perf_counter()
            self._writer.put(encode_frames(records), len(records), self._batch)
            return
        # Without fsync a write only copies into the page cache (microseconds): handing it to
        # the thread would cost more than it saves. Still one write per batch.
        began = time.perf_counter()
        try:
            self.journal.append(records)
        except OSError as exc:
            self._fail(exc, held)
            return
        if self.on_write is not None:
            self.on_write(time.perf_counter() - began)
        self._kept(held)

    def _from_thread(self, upto: int, error: BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            self._loop.call_soon_threadsafe(self._written, upto, error)

    def _written(self, upto: int, error: BaseException | None) -> None:
        """On the loop: every batch up to ``upto`` is written, or a write failed."""
        if self.failed:
            return
        if error is not None:
            self._fail(error, [])
            return
        held: list[Held] = []
        now = time.perf_counter()
        while self._in_flight and self._in_flight[0][0] <= upto:
            batch, waiting = self._in_flight.popleft()
            held += waiting
            began = self._began.pop(batch, None)
            if began is not None and self.on_write is not None:
                self.on_write(now - began)
        self._kept(held)

    def _kept(self, held: list[Held]) -> None:
        self.batches += 1
        self._release(held)
        self._maybe_compact()
        self._settle()

    def _fail(self, error: BaseException, held: list[Held]) -> None:
        self._writer.stop()
        for _, waiting in self._in_flight:
            held += waiting
        self._in_flight.clear()
        held += self._held
        self._held, self._records = [], []
        log.error("journal_write_failed", error=str(error), requests=len(held))
        self.failed = True
        self._refuse(held)
        self._idle.set()
        self._on_failure()

    def _settle(self) -> None:
        if not self.busy:
            self._idle.set()

    def compact_if_due(self) -> bool:
        """Start compacting the journal if it is due, as each write does; whether a
        compaction is running."""
        self._maybe_compact()
        return self._compacting

    def _maybe_compact(self) -> None:
        journal = self.journal
        if self._compacting or not journal.compaction_may_be_due():
            return
        size = self._state_size()
        if not journal.due(size):
            journal.postpone_compaction(size)
            return
        self._compacting = True
        self._compaction_done.clear()
        self._tail = []
        # The copy is a million young objects until the snapshot is written: a collection of
        # the youngest generation would walk them all (15 ms and more, on the loop). Nothing
        # the compaction makes is cyclic; collections resume once it is done.
        self._gc_was_enabled = gc.isenabled()
        gc.disable()
        self._copying = self._copy_state()
        self._loop.call_soon(self._copy_slice)

    def _copy_slice(self) -> None:
        """Copy state for a few milliseconds; when done, hand the compaction to the writer."""
        assert self._copying is not None
        if self.failed or self._closed:  # abandoned: the journal stays as it is, whole
            self._copying = self._tail = None
            self._compacted()
            return
        until = time.perf_counter() + COPY_SLICE_S
        try:
            while True:  # at least one group a slice
                next(self._copying)
                if time.perf_counter() >= until:
                    break
        except StopIteration as done:
            records: Callable[[], Iterator[Record]] = done.value
            tail, self._tail, self._copying = self._tail or [], None, None
            # The writer thread builds a million records in Python: let it hand the
            # interpreter back to the loop every millisecond instead of every five.
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(self._switch_interval, 0.001))
            self._writer.pause()  # the writes queued from now on go after the compaction
            future = self._executor.submit(
                self.journal.compact, lambda: itertools.chain(records(), tail)
            )
            future.add_done_callback(self._compaction_finished)
            return
        self._loop.call_soon(self._copy_slice)

    def _compaction_finished(self, _: object) -> None:
        """On the writer thread."""
        try:
            self._loop.call_soon_threadsafe(self._compacted)
        except RuntimeError:  # the loop is closed: put the interpreter's settings back here
            self._restore_interpreter()

    def _restore_interpreter(self) -> None:
        if self._gc_was_enabled:
            gc.enable()
            self._gc_was_enabled = False
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
            self._switch_interval = None

    def _compacted(self) -> None:
        self._restore_interpreter()
        self._compacting = False
        self._compaction_done.set()
        if not self._closed:
            self._writer.resume()

    async def compacted(self) -> None:
        """Until no compaction is running."""
        await self._compaction_done.wait()

    async def drain(self) -> None:
        """Until every held answer is released or refused (for shutdown)."""
        self.submit()
        await self._idle.wait()

    def close(self, *, wait: bool = True) -> None:
        """Stop the writer thread after what it was given (a compaction it was handed
        included); a compaction still copying the state is abandoned. ``wait=False``: do
        not wait for a write that is stuck (the process is giving up on it)."""
        self._closed = True
        if not wait:
            self._writer.stop()
        self._executor.shutdown(wait=wait)
