"""The writer thread's side of group commit: a queue of encoded frames that one thread writes.

The loop puts each batch's frames (``put``) and goes on. The thread takes everything queued
so far in one write (and one sync), reports it, and takes what queued meanwhile, until the
queue is empty: no round trip through the loop between two writes, so while one sync is
under way the next batch only grows. ``pause`` stops it taking more after the write under
way (a compaction goes next, in order, on the same thread); ``resume`` starts it again.

The thread touches only this queue (under its lock) and the journal's file. It is a daemon
(``WriterThread``): a write stuck in the kernel (a hung disk) must not keep the process from
exiting once the server has given up on it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from huddle.protocol.errors import UsageError

# done(upto, error): every batch up to ``upto`` is written (error None), or a write failed.
Done = Callable[[int, BaseException | None], None]
Write = Callable[[bytearray, int], None]  # (frames, record count): raises OSError
Start = Callable[[Callable[[], None]], object]  # runs a job on the writer thread, in order


class Writer:
    def __init__(self, write: Write, start: Start, done: Done) -> None:
        self._write = write
        self._start = start
        self._done = done
        self._lock = threading.Lock()
        self._frames = bytearray()
        self._count = 0
        self._upto = 0  # the last batch queued
        self._running = False  # a drain is queued or running on the thread
        self._paused = False
        self._stopped = False  # a write failed or the writer was closed: nothing more

    def put(self, frames: bytearray, count: int, batch: int) -> None:
        """Queue batch number ``batch`` (numbers increase)."""
        with self._lock:
            self._frames += frames
            self._count += count
            self._upto = batch
            start = self._wanted()
        if start:
            self._start(self._drain)

    def pause(self) -> None:
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        with self._lock:
            self._paused = False
            start = self._wanted()
        if start:
            self._start(self._drain)

    def stop(self) -> None:
        """Write nothing more (what is queued is dropped)."""
        with self._lock:
            self._stopped = True
            self._frames = bytearray()
            self._count = 0

    def _wanted(self) -> bool:
        """Under the lock: whether a drain must be started now (and mark it started)."""
        if self._running or self._paused or self._stopped or not self._frames:
            return False
        self._running = True
        return True

    def _drain(self) -> None:
        while True:
            with self._lock:
                if self._paused or self._stopped or not self._frames:
                    self._running = False
                    return
                frames, count, upto = self._frames, self._count, self._upto
                self._frames, self._count = bytearray(), 0
            try:
                self._write(frames, count)
            except OSError as exc:
                self.stop()
                with self._lock:
                    self._running = False
                self._done(upto, exc)
                return
            self._done(upto, None)


Job = tuple[Callable[..., Any], tuple[Any, ...], "Future[Any]"]


class WriterThread:
    """One daemon thread that runs the jobs it is given in order (what a one-worker
    ThreadPoolExecutor does, except that the interpreter does not wait for it at exit)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[
            tuple[Callable[..., Any], tuple[Any, ...], Future[Any]] | None
        ]
        self._jobs = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._shut = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._shut:
                raise UsageError("the writer thread is shut down")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._jobs.put((fn, args, future))
        return future

    def shutdown(self, *, wait: bool = True) -> None:
        """No more jobs; with ``wait``, until the ones given are done."""
        with self._lock:
            if self._shut:
                return
            self._shut = True
            thread = self._thread
            self._jobs.put(None)
        if wait and thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, args, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to whoever waits on the future
                future.set_exception(exc)
