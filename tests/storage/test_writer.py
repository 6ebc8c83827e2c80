"""The writer thread's queue: everything queued goes in one write, in order; a pause stops
it taking more after the write under way; a failure stops it for good."""

from __future__ import annotations

import errno
from collections.abc import Callable

from huddle.coordinator.storage.writer import Writer


class ManualExecutor:
    """Runs what it is given when told to, on the test's thread."""

    def __init__(self) -> None:
        self.jobs: list[Callable[[], None]] = []

    def submit(self, fn: Callable[[], None]) -> None:
        self.jobs.append(fn)

    def run(self) -> None:
        while self.jobs:
            self.jobs.pop(0)()


Done = list[tuple[int, BaseException | None]]


def make(write: Callable[[bytearray, int], None]) -> tuple[Writer, ManualExecutor, Done]:
    executor = ManualExecutor()
    done: Done = []
    writer = Writer(write, executor.submit, lambda upto, error: done.append((upto, error)))
    return writer, executor, done


def test_batches_queued_during_a_write_go_in_the_next_write_together() -> None:
    writes: list[tuple[bytes, int]] = []

    def write(frames: bytearray, count: int) -> None:
        writes.append((bytes(frames), count))
        if len(writes) == 1:  # while the first write is under way, two batches queue
            writer.put(bytearray(b"b"), 2, 2)
            writer.put(bytearray(b"c"), 3, 3)

    writer, executor, done = make(write)
    writer.put(bytearray(b"a"), 1, 1)
    assert len(executor.jobs) == 1
    executor.run()
    assert writes == [(b"a", 1), (b"bc", 5)]
    assert done == [(1, None), (3, None)]
    assert executor.jobs == []


def test_a_pause_takes_nothing_more_until_resumed() -> None:
    writes: list[bytes] = []

    def write(frames: bytearray, count: int) -> None:
        writes.append(bytes(frames))
        if len(writes) == 1:  # the loop pauses the writer (a compaction goes next) ...
            writer.pause()
            writer.put(bytearray(b"b"), 1, 2)  # ... and a batch queues behind it

    writer, executor, done = make(write)
    writer.put(bytearray(b"a"), 1, 1)
    executor.run()
    assert writes == [b"a"]  # b waits
    assert done == [(1, None)]
    writer.resume()
    executor.run()
    assert writes == [b"a", b"b"]
    assert done == [(1, None), (2, None)]


def test_a_failed_write_stops_the_writer() -> None:
    writes: list[bytes] = []

    def write(frames: bytearray, count: int) -> None:
        writes.append(bytes(frames))
        raise OSError(errno.EIO, "Input/output error")

    writer, executor, done = make(write)
    writer.put(bytearray(b"a"), 1, 1)
    executor.run()
    writer.put(bytearray(b"b"), 1, 2)
    executor.run()
    assert writes == [b"a"]
    assert [(upto, type(error)) for upto, error in done] == [(1, OSError)]
