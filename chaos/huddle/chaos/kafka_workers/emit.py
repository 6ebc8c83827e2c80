"""What a driver prints: one JSON object per line on stdout, and the partitions it owns.

``Reporter`` keeps the member's owned set, so every ``assigned`` / ``revoked`` / ``lost``
line says both what changed and what the member holds after it, and notes the first record
read from each partition after it was assigned (``consumed``). See the package's docstring
for the events.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable
from typing import IO, Any

Partition = tuple[str, int]


def pairs(partitions: Iterable[Partition]) -> list[list[str | int]]:
    return [[topic, partition] for topic, partition in sorted(partitions)]


class Reporter:
    """Prints a driver's events; callbacks of any thread may call it."""

    def __init__(self, client: str, out: IO[str] | None = None) -> None:
        self.client = client
        self.out = out if out is not None else sys.stdout
        self.owned: set[Partition] = set()
        self._lock = threading.Lock()
        self._joined: tuple[str | None, int | None] | None = None
        self._read: set[Partition] = set()  # partitions with a ``consumed`` line since assigned

    def emit(self, event: str, **fields: Any) -> None:
        line = {
            "event": event,
            "client": self.client,
            "pid": os.getpid(),
            "mono": time.monotonic(),
            "ts": time.time(),
            **fields,
        }
        with self._lock:
            self.out.write(json.dumps(line, separators=(",", ":")) + "\n")
            self.out.flush()

    def started(self, **settings: Any) -> None:
        self.emit("started", **settings)

    def joined(self, member_id: str | None, generation: int | None, **extra: Any) -> None:
        """A ``joined`` line when the member id or generation differs from the last one."""
        if self._joined == (member_id, generation):
            return
        self._joined = (member_id, generation)
        self.emit("joined", member_id=member_id, generation=generation, **extra)

    def assigned(self, partitions: Iterable[Partition]) -> None:
        added = set(partitions)
        self.owned |= added
        self._read -= added
        self.emit("assigned", partitions=pairs(added), owned=pairs(self.owned))

    def revoked(self, partitions: Iterable[Partition]) -> None:
        self._take("revoked", set(partitions))

    def lost(self, partitions: Iterable[Partition]) -> None:
        self._take("lost", set(partitions))

    def _take(self, event: str, taken: set[Partition]) -> None:
        self.owned -= taken
        self.emit(event, partitions=pairs(taken), owned=pairs(self.owned))

    def consumed(self, topic: str, partition: int, offset: int) -> None:
        """The first record read from a partition since it was assigned gets a line."""
        key = (topic, partition)
        if key in self._read:
            return
        self._read.add(key)
        self.emit("consumed", topic=topic, partition=partition, offset=offset)

    def read(self, topic: str, partition: int, offset: int, end: int) -> None:
        """A batch of records read from one partition, offsets ``offset`` up to ``end``
        (exclusive). Here: a ``consumed`` line if it is the first since the assignment
        (``huddle.chaos.kafka_member``'s sink writes every batch)."""
        self.consumed(topic, partition, offset)

    def committed(self, offsets: Iterable[tuple[str, int, int]]) -> None:
        triples = [[t, p, o] for t, p, o in sorted(offsets)]
        if triples:
            self.emit("committed", offsets=triples)

    def commit_failed(self, error: str, offsets: Iterable[tuple[str, int, int]] = ()) -> None:
        """A refused commit; ``offsets``: what it tried to commit (not printed here)."""
        self.emit("committed", offsets=[], error=error)

    def error(self, message: str) -> None:
        self.emit("error", message=message)

    def left(self) -> None:
        self.emit("left", owned=pairs(self.owned))


class StopFlag:
    """Set by SIGTERM or SIGINT (the driver's cue to close its consumer and leave), or when
    ``max_seconds`` have passed."""

    def __init__(self, max_seconds: float) -> None:
        self._event = threading.Event()
        self._deadline = time.monotonic() + max_seconds
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._event.set()

    def set(self) -> None:
        self._event.set()

    def wait(self, seconds: float) -> None:
        """Until stopped or ``seconds`` passed, whichever is first."""
        left = self._deadline - time.monotonic()
        self._event.wait(max(min(seconds, left), 0.0))

    @property
    def stopped(self) -> bool:
        return self._event.is_set() or time.monotonic() >= self._deadline
