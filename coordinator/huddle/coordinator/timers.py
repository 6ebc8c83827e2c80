"""Deadlines keyed by name, for a core that is given the time rather than reading it.

Moving a deadline later (every heartbeat does) costs a dict write, not a heap push: the heap
keeps the earliest time each key was armed at, and an entry that comes due early is re-armed
at the key's current deadline. The heap therefore holds about one entry per live key.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class TimerQueue(Generic[K]):
    __slots__ = ("_armed", "_due", "_heap", "_seq")

    def __init__(self) -> None:
        self._due: dict[K, float] = {}  # key -> the deadline that counts
        self._armed: dict[K, float] = {}  # key -> the earliest heap entry's time
        self._heap: list[tuple[float, int, K]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, key: K) -> bool:
        return key in self._due

    def deadline(self, key: K) -> float | None:
        return self._due.get(key)

    def set(self, key: K, deadline: float) -> None:
        self._due[key] = deadline
        armed = self._armed.get(key)
        if armed is None or deadline < armed:
            self._armed[key] = deadline
            heapq.heappush(self._heap, (deadline, next(self._seq), key))

    def extend(self, key: K, deadline: float) -> None:
        """Move a deadline out to ``deadline``; never earlier. The cheap path of ``set``."""
        due = self._due.get(key)
        if due is None or deadline > due:
            self._due[key] = deadline
            armed = self._armed.get(key)
            if armed is None or deadline < armed:
                self._armed[key] = deadline
                heapq.heappush(self._heap, (deadline, next(self._seq), key))

    def cancel(self, key: K) -> None:
        self._due.pop(key, None)

    def next_deadline(self) -> float | None:
        """The earliest time at which ``pop_due`` may return something."""
        heap = self._heap
        while heap:
            when, _, key = heap[0]
            if self._armed.get(key) != when or key not in self._due:
                heapq.heappop(heap)
                if self._armed.get(key) == when:
                    del self._armed[key]
                continue
            return when
        return None

    def pop_next(self, now: float) -> K | None:
        """Remove and return the key with the earliest deadline at or before ``now``.

        One at a time on purpose: acting on a key may move another key's deadline, and a key
        moved past ``now`` must then not fire.
        """
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, _, key = heapq.heappop(heap)
            if self._armed.get(key) != when:
                continue  # a stale entry: an earlier one for this key was pushed later
            del self._armed[key]
            due = self._due.get(key)
            if due is None:
                continue  # cancelled
            if due > when:  # moved later since it was armed: re-arm at the real deadline
                self._armed[key] = due
                heapq.heappush(heap, (due, next(self._seq), key))
                continue
            del self._due[key]
            return key
        return None

    def pop_due(self, now: float) -> list[K]:
        """Remove and return every key due at or before ``now``, earliest deadline first."""
        fired: list[K] = []
        while (key := self.pop_next(now)) is not None:
            fired.append(key)
        return fired
