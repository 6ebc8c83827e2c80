"""Step 3 of the general sticky plan: move counts from heavier to lighter members.

Members with the same subscription form a class. Each class keeps its members in a heap
by load, and the classes sit in a heap by the load of their lightest member, so the
lightest possible taker for a giver is found by visiting classes from the lightest up,
not every subscriber of every topic. Loads change all the time, so the heaps are lazy:
an entry is stale once its item has been pushed again, and is dropped when seen.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass


class _Heap:
    """Items (ints) by ``key``, smallest first, ties by item."""

    __slots__ = ("entries", "key", "version")

    def __init__(self, key: Callable[[int], int], items: Iterable[int] = ()) -> None:
        self.key = key
        self.version: dict[int, int] = {}
        self.entries: list[tuple[int, int, int]] = []
        for item in items:
            self.push(item)

    def push(self, item: int) -> None:
        version = self.version.get(item, 0) + 1
        self.version[item] = version
        heapq.heappush(self.entries, (self.key(item), item, version))

    def top(self) -> int | None:
        entries = self.entries
        while entries:
            _, item, version = entries[0]
            if self.version[item] == version:
                return item
            heapq.heappop(entries)
        return None

    def pop(self) -> int | None:
        item = self.top()
        if item is not None:
            heapq.heappop(self.entries)
            self.version[item] += 1  # out of the heap until pushed again
        return item


@dataclass(frozen=True, slots=True)
class _Move:
    giver: int
    taker: int
    topic: int
    amount: int


class Settler:
    """Moves counts until no member holds a partition of a topic that a member with at
    least two fewer partitions subscribes to."""

    def __init__(
        self,
        loads: list[int],
        counts: list[dict[int, int]],
        owned: Sequence[dict[int, int]],
        interests: Sequence[Sequence[int]],
    ) -> None:
        """``counts[m]``: topic -> partitions member ``m`` holds (no zero entries);
        ``owned[m]``: topic -> how many of them it owns by right; ``interests[m]``: its
        topics. ``loads`` and ``counts`` are changed in place."""
        self.loads = loads
        self.counts = counts
        self.owned = owned
        ids: dict[tuple[int, ...], int] = {}
        self.class_of = [ids.setdefault(tuple(topics), len(ids)) for topics in interests]
        self.class_topics = [frozenset(topics) for topics in ids]
        self.lightest_in = [_Heap(loads.__getitem__) for _ in ids]
        for member, cls in enumerate(self.class_of):
            self.lightest_in[cls].push(member)
        self.classes = _Heap(self._class_load, range(len(ids)))
        self.heaviest = _Heap(lambda m: -loads[m], range(len(loads)))
        self.free = [
            {t for t, n in held.items() if n > mine.get(t, 0)}
            for held, mine in zip(counts, owned, strict=True)
        ]

    def run(self) -> None:
        while (move := self._find()) is not None:
            self._apply(move)

    def _class_load(self, cls: int) -> int:
        lightest = self.lightest_in[cls].top()
        assert lightest is not None  # classes never lose members
        return self.loads[lightest]

    def _find(self) -> _Move | None:
        """A move from the heaviest member that has one."""
        lightest = self.classes.top()
        if lightest is None:
            return None
        low = self._class_load(lightest)
        passed: list[int] = []
        try:
            while (giver := self.heaviest.pop()) is not None:
                passed.append(giver)
                load = self.loads[giver]
                if load - 2 < low:
                    return None
                found = self._taker(giver)
                if found is None:
                    continue
                taker, topic = found
                held = self.counts[giver][topic]
                free = held - self.owned[giver].get(topic, 0)
                amount = min(free if free > 0 else held, (load - self.loads[taker]) // 2)
                if free <= 0:
                    # Never below the next heaviest: a member giving up claims takes none back.
                    # (Members passed over before this one are at least as heavy.)
                    after = self.heaviest.top()
                    rival = self.loads[after] if after is not None else 0
                    if len(passed) > 1:
                        rival = load
                    amount = min(amount, max(1, load - rival))
                return _Move(giver, taker, topic, amount)
            return None
        finally:
            for member in passed:
                self.heaviest.push(member)

    def _taker(self, giver: int) -> tuple[int, int] | None:
        """(taker, topic): the lightest member at least two lighter that subscribes to a
        topic the giver holds; a topic the giver did not own before goes first."""
        held = self.counts[giver]
        if not held:
            return None
        limit = self.loads[giver] - 2
        free = self.free[giver]
        fallback: tuple[int, int] | None = None
        passed: list[int] = []
        try:
            while (cls := self.classes.pop()) is not None:
                passed.append(cls)
                taker = self.lightest_in[cls].top()
                assert taker is not None
                if self.loads[taker] > limit:
                    break
                if taker == giver:  # so no one in its class is lighter
                    continue
                topics = self.class_topics[cls]
                if free and not topics.isdisjoint(free):
                    return taker, min(topics & free)
                if fallback is None and not topics.isdisjoint(held.keys()):
                    fallback = (taker, cls)
                    if not free:
                        break
        finally:
            for cls in passed:
                self.classes.push(cls)
        if fallback is None:
            return None
        taker, cls = fallback
        topics = self.class_topics[cls]
        return taker, min(t for t in held if t in topics)

    def _apply(self, move: _Move) -> None:
        giver, taker, topic = move.giver, move.taker, move.topic
        left = self.counts[giver][topic] - move.amount
        if left:
            self.counts[giver][topic] = left
        else:
            del self.counts[giver][topic]
        if left <= self.owned[giver].get(topic, 0):
            self.free[giver].discard(topic)
        now = self.counts[taker].get(topic, 0) + move.amount
        self.counts[taker][topic] = now
        if now > self.owned[taker].get(topic, 0):
            self.free[taker].add(topic)
        self.loads[giver] -= move.amount
        self.loads[taker] += move.amount
        for member in (giver, taker):
            self.heaviest.push(member)
            self.lightest_in[self.class_of[member]].push(member)
            self.classes.push(self.class_of[member])
