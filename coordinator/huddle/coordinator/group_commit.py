"""Group commit: changes go to the data dir in batches, on one writer thread, off the loop.

The server hands over the records of each request it handled together with the answers that
request produced (``hold``). Records accumulate while a write is in flight; at the end of each
loop pass (``submit``) the next batch — every change made since the last write began — goes
to the journal in one write and, with ``--fsync``, one fsync, on the writer thread. (Without
``--fsync`` the write only copies into the page cache, and is made on the loop: a thread hop
would cost more than it saves; while a compaction runs, writes go to the thread too, in
order behind it.) The
answers of a batch go out only once its write has finished. Answers of requests that changed
nothing but were handled after a change wait behind it too: no answer ever shows a change the
data dir does not hold yet, and the answers of requests handled in order go out in that order.
(Frames that show nothing kept are not held: a malformed request's refusal, answers the
core's timers produce, notices. Clients match answers by correlation id.)

If a write fails, every request of that batch and of the one gathering behind it is answered
KAFKA_STORAGE_ERROR, nothing more is written, and ``on_failure`` stops the node.

Compaction: when the journal is due, the loop copies the state one group at a time, in slices
of a few milliseconds between which other work runs (``Coordinator.copy_state``); the writer
thread then builds the snapshot, adds the records written while the copy was being taken
(records set values, so replaying them over the copy is exact), writes and renames it, in
order with the appends.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import structlog

from huddle.coordinator.effects import Outgoing
from huddle.coordinator.journal import Journal
from huddle.coordinator.records import Record
from huddle.protocol.messages import Call

log = structlog.get_logger("huddle.group_commit")

Held = tuple[int, Call, list[Outgoing]]  # the caller's connection, its call, the answers
StateCopy = Generator[None, None, Callable[[], Iterator[Record]]]
COPY_SLICE_S = 0.004  # the loop copies state for compaction at most this long at a time


class GroupCommit:
    def __init__(
        self,
        journal: Journal,
        loop: asyncio.AbstractEventLoop,
        *,
        release: Callable[[list[Outgoing]], None],
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
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="huddle-journal")
        self._records: list[Record] = []  # the next batch
        self._held: list[Held] = []  # answers waiting for the next batch (or the current one)
        self._writing: list[Held] | None = None  # answers of the batch being written
        self._idle = asyncio.Event()
        self._idle.set()
        self._compacting = False
        self._switch_interval: float | None = None
        self._compaction_done = asyncio.Event()
        self._compaction_done.set()
        self.failed = False
        self._closed = False
        self.batches = 0  # writes done, for tests and benchmarks

    @property
    def busy(self) -> bool:
        """Whether answers must wait: a write in flight or changes not yet written."""
        return self._writing is not None or bool(self._records) or bool(self._held)

    def hold(self, records: list[Record], conn_id: int, call: Call, out: list[Outgoing]) -> None:
        """A handled request: its changes (maybe none) and its answers, to send once kept."""
        if self.failed:
            self._refuse([(conn_id, call, out)])
            return
        self._records.extend(records)
        self._held.append((conn_id, call, out))
        self._idle.clear()

    def submit(self) -> None:
        """End of a loop pass: start writing the next batch unless a write is in flight."""
        if self._writing is not None or self.failed:
            return
        if not self._records:  # answers that only waited for an earlier batch
            held, self._held = self._held, []
            self._release([frame for _, _, out in held for frame in out])
            self._idle.set()
            return
        records, self._records = self._records, []
        self._writing, self._held = self._held, []
        if self._tail is not None:
            self._tail.extend(records)
        if self.journal.fsync or self._compacting:
            future = self._executor.submit(self.journal.append, records)
            future.add_done_callback(self._from_thread)
            return
        # Without fsync a write only copies into the page cache (microseconds): handing it to
        # the thread would cost more than it saves. Still one write per batch.
        try:
            self.journal.append(records)
        except OSError as exc:
            self._written(exc)
        else:
            self._written(None)

    def _from_thread(self, future: Future[None]) -> None:
        self._loop.call_soon_threadsafe(self._written, future.exception())

    def _written(self, error: BaseException | None) -> None:
        held, self._writing = self._writing or [], None
        if error is not None:
            log.error("journal_write_failed", error=str(error), requests=len(held))
            self.failed = True
            pending, self._held, self._records = self._held, [], []
            self._refuse(held + pending)
            self._idle.set()
            self._on_failure()
            return
        self.batches += 1
        self._release([frame for _, _, out in held for frame in out])
        self._maybe_compact()
        self.submit()
        if not self.busy:
            self._idle.set()

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
            future = self._executor.submit(
                self.journal.compact, lambda: itertools.chain(records(), tail)
            )
            future.add_done_callback(lambda _: self._loop.call_soon_threadsafe(self._compacted))
            return
        self._loop.call_soon(self._copy_slice)

    def _compacted(self) -> None:
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
            self._switch_interval = None
        self._compacting = False
        self._compaction_done.set()

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
        self._executor.shutdown(wait=wait)
