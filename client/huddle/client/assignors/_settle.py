"""Step 3 of the general sticky plan: move counts from heavier to lighter members.

A member's *free* counts of a topic are those beyond what it owns of it by right:
partitions nobody owned, or claims that moved already. Free counts move first, straight
to a member at least two lighter that reads their topic, until none can. What is out of
balance then is a claim: its holder is at least two above a member reading its topic.
Before that claim moves, a chain of members may settle it instead, each passing a free
count to the next (which reads its topic), so that only the two ends change load: the
light reader gets heavier, or the holder lighter.

The cooperative protocol needs that. A claim that moves is revoked, and handed over in
a follow-up round, where the partitions withheld now are unowned and placed again
greedily. Where that first guess differs from the plan of the round before, moving
single counts between two members could only restore balance by moving a claim: one
more revocation, one more round, possibly again (Kafka's sticky assignor, which moves
single partitions, has the same weakness: KAFKA-8767). A chain restores it with
partitions that are free anyway.

Members with the same subscription form a class. Each class keeps its members in a heap
by load, and the classes sit in a heap by the load of their lightest member, so the
lightest possible taker for a giver is found by visiting classes from the lightest up,
not every subscriber of every topic. Loads change all the time, so the heaps are lazy:
an entry is stale once its item has been pushed again, and is dropped when seen.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain


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
        topics, ascending. ``loads`` and ``counts`` are changed in place."""
        self.loads = loads
        self.counts = counts
        self.owned = owned
        self.interests = interests
        ids: dict[tuple[int, ...], int] = {}
        self.class_of = [ids.setdefault(tuple(topics), len(ids)) for topics in interests]
        self.class_topics = [frozenset(topics) for topics in ids]
        self.reads = [self.class_topics[cls] for cls in self.class_of]  # member -> its topics
        self.lightest_in = [_Heap(loads.__getitem__) for _ in ids]
        for member, cls in enumerate(self.class_of):
            self.lightest_in[cls].push(member)
        self.classes = _Heap(self._class_load, range(len(ids)))
        self.heaviest = _Heap(lambda m: -loads[m], range(len(loads)))
        self.free = [
            {t for t, n in held.items() if n > mine.get(t, 0)}
            for held, mine in zip(counts, owned, strict=True)
        ]
        # Members holding free counts (an entry of one that holds none is dropped).
        self.heaviest_free = _Heap(
            lambda m: -loads[m], (m for m, free in enumerate(self.free) if free)
        )
        # Needed only once a claim is out of balance (``_reroute``), so made then: topic ->
        # the members reading it, topic -> the members holding free counts of it, member ->
        # the topics it holds one of its claims of.
        self.tracked = False
        self.readers: list[list[int]] = []
        self.holders: list[set[int]] = []
        self.claims: list[set[int]] = []

    def run(self) -> None:
        while True:
            while (move := self._find(claims=False)) is not None:
                self._apply(move)
            move = self._find(claims=True)
            if move is None:
                return
            if not self._reroute(move):
                self._apply(move)

    def _class_load(self, cls: int) -> int:
        lightest = self.lightest_in[cls].top()
        assert lightest is not None  # classes never lose members
        return self.loads[lightest]

    def _find(self, *, claims: bool) -> _Move | None:
        """A move from the heaviest member that has one; ``claims``: one of a claim too
        (the only kind left once free counts have settled)."""
        lightest = self.classes.top()
        if lightest is None:
            return None
        low = self._class_load(lightest)
        givers = self.heaviest if claims else self.heaviest_free
        passed: list[int] = []
        try:
            while (giver := givers.pop()) is not None:
                if not (claims or self.free[giver]):
                    continue  # pushed again once it holds free counts
                passed.append(giver)
                load = self.loads[giver]
                if load - 2 < low:
                    return None
                found = self._taker(giver, claims=claims)
                if found is None:
                    continue
                taker, topic = found
                held = self.counts[giver][topic]
                free = held - self.owned[giver].get(topic, 0)
                amount = min(free if free > 0 else held, (load - self.loads[taker]) // 2)
                if free <= 0:
                    # Never below the next heaviest: a member giving up claims takes none back.
                    # (Members passed over before this one are at least as heavy.)
                    after = givers.top()
                    rival = self.loads[after] if after is not None else 0
                    if len(passed) > 1:
                        rival = load
                    amount = min(amount, max(1, load - rival))
                return _Move(giver, taker, topic, amount)
            return None
        finally:
            for member in passed:
                givers.push(member)

    def _taker(self, giver: int, *, claims: bool) -> tuple[int, int] | None:
        """(taker, topic): the lightest member at least two lighter that subscribes to a
        topic the giver holds; a topic the giver did not own before goes first, and
        without ``claims`` only such a topic."""
        held = self.counts[giver]
        free = self.free[giver]
        if not held or not (free or claims):
            return None
        limit = self.loads[giver] - 2
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
                if claims and fallback is None and not topics.isdisjoint(held.keys()):
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
        self._hand(move.giver, move.taker, move.topic, move.amount)
        self._carry(move.giver, move.taker, move.amount)

    def _hand(self, giver: int, taker: int, topic: int, amount: int) -> None:
        """``amount`` counts of ``topic`` from giver to taker; loads are ``_carry``'s."""
        counts = self.counts
        left = counts[giver][topic] - amount
        if left:
            counts[giver][topic] = left
        else:
            del counts[giver][topic]
        counts[taker][topic] = counts[taker].get(topic, 0) + amount
        tracked = self.tracked
        for member in (giver, taker):
            held = counts[member].get(topic, 0)
            mine = self.owned[member].get(topic, 0)
            if held > mine:
                if not self.free[member]:
                    self.heaviest_free.push(member)
                self.free[member].add(topic)
                if tracked:
                    self.holders[topic].add(member)
            else:
                self.free[member].discard(topic)
                if tracked:
                    self.holders[topic].discard(member)
            if tracked:
                if held and mine:
                    self.claims[member].add(topic)
                else:
                    self.claims[member].discard(topic)

    def _carry(self, giver: int, taker: int, amount: int) -> None:
        """The loads that go with ``_hand``."""
        self.loads[giver] -= amount
        self.loads[taker] += amount
        for member in (giver, taker):
            self.heaviest.push(member)
            if self.free[member]:
                self.heaviest_free.push(member)
            self.lightest_in[self.class_of[member]].push(member)
            self.classes.push(self.class_of[member])

    def _reroute(self, move: _Move) -> bool:
        """Settle ``move`` (a claim of the giver's, of a topic the taker reads, the taker at
        least two lighter) with a chain of free counts instead, if there is one: to the
        taker from a member at least two heavier, else from the giver to a member at
        least two lighter; balance improves. Where the giver is exactly two above the
        taker, a chain may also join two members one apart, which swap loads, if that
        lowers the strain (``_Strain``). False if there is no such chain.

        ``run`` ends: a swap leaves the sum of squared loads as it is and lowers the
        strain, and every other step (a chain, a move) lowers that sum."""
        if not self.tracked:
            self._track()
        loads = self.loads
        giver, taker = move.giver, move.taker
        swap = loads[giver] - loads[taker] == 2
        reach = 1 if swap else 2  # how far apart the two ends must be
        links: list[tuple[int, int, int]] = []
        heaviest = self.heaviest_free.top()  # a bound: it may hold no free counts by now
        if heaviest is not None and loads[heaviest] >= loads[taker] + reach:
            links = self._chain_to(taker, swap)
        lightest = self.classes.top()
        low = loads[giver] if lightest is None else self._class_load(lightest)
        if not links and low <= loads[giver] - reach:
            links = self._chain_from(giver, swap)
        if not links:
            return False
        first, last = links[0][0], links[-1][1]
        amount = max(1, (loads[first] - loads[last]) // 2)
        for before, _, topic in links:
            amount = min(amount, self.counts[before][topic] - self.owned[before].get(topic, 0))
        for before, after, topic in links:
            self._hand(before, after, topic, amount)
        self._carry(first, last, amount)
        return True

    def _track(self) -> None:
        self.tracked = True
        topics = 1 + max((t for mine in self.interests for t in mine), default=-1)
        self.readers = [[] for _ in range(topics)]
        for member, mine in enumerate(self.interests):
            for t in mine:
                self.readers[t].append(member)
        self.holders = [set() for _ in range(topics)]
        for member, free in enumerate(self.free):
            for t in free:
                self.holders[t].add(member)
        self.claims = [
            {t for t, n in mine.items() if n and held.get(t)}
            for held, mine in zip(self.counts, self.owned, strict=True)
        ]

    def _gave_up(self, member: int, topic: int) -> bool:
        """Whether ``member`` gave up every claim it had of ``topic``. A chain takes it
        no partition of that topic: it would hold a claim of it again, and a swap's
        change in strain counts only the claims the ends hold already."""
        return bool(self.owned[member].get(topic)) and topic not in self.counts[member]

    def _chain_from(self, giver: int, swap: bool) -> list[tuple[int, int, int]]:
        """(from, to, topic) links of free counts from ``giver`` to the first member found
        (nearest first) at least two lighter, or with ``swap`` one lighter whose swap
        with the giver lowers the strain."""
        loads, readers, free = self.loads, self.readers, self.free
        top = loads[giver]
        strain: _Strain | None = None
        came_from: dict[int, tuple[int, int]] = {giver: (giver, -1)}
        seen: set[int] = set()
        queue = deque([giver])
        while queue:
            member = queue.popleft()
            for topic in sorted(free[member] - seen):
                seen.add(topic)
                for reader in readers[topic]:
                    if reader in came_from or self._gave_up(reader, topic):
                        continue
                    came_from[reader] = (member, topic)
                    load = loads[reader]
                    found = load < top - 1
                    if swap and load == top - 1:
                        strain = strain or _Strain(self, top)
                        found = strain.eases(giver, reader)
                    if found:
                        links = []
                        while reader != giver:
                            member, topic = came_from[reader]
                            links.append((member, reader, topic))
                            reader = member
                        links.reverse()
                        return links
                    if free[reader]:
                        queue.append(reader)
        return []

    def _chain_to(self, taker: int, swap: bool) -> list[tuple[int, int, int]]:
        """(from, to, topic) links of free counts to ``taker`` from the first member found
        (nearest first) at least two heavier, or with ``swap`` one heavier whose swap with
        the taker lowers the strain."""
        loads, holders = self.loads, self.holders
        bottom = loads[taker]
        strain: _Strain | None = None
        goes_to: dict[int, tuple[int, int]] = {taker: (taker, -1)}
        seen: set[int] = set()
        queue = deque([taker])
        while queue:
            member = queue.popleft()
            for topic in self.interests[member]:
                if topic in seen or not holders[topic] or self._gave_up(member, topic):
                    continue
                seen.add(topic)
                for holder in holders[topic]:
                    if holder in goes_to:
                        continue
                    goes_to[holder] = (member, topic)
                    load = loads[holder]
                    found = load > bottom + 1
                    if swap and load == bottom + 1:
                        strain = strain or _Strain(self, load)
                        found = strain.eases(holder, taker)
                    if found:
                        links = []
                        while holder != taker:
                            after, topic = goes_to[holder]
                            links.append((holder, after, topic))
                            holder = after
                        return links
                    queue.append(holder)
        return []


class _Strain:
    """The *strain* of an assignment: the sum, over every claim a member holds and every
    other member reading its topic, of how far the holder is more than one partition
    above that reader. Here: how a swap changes it, where a member at ``load`` gets one
    lighter and one at ``load - 1`` one heavier. Only terms of pairs with one of the two
    change, and none between the two (the holder is never more than one above the reader
    in either). The change is ``of(the one getting heavier) - of(the one getting
    lighter)``, where ``of(member)`` counts, before the swap, the readers at ``load - 2``
    or lighter of the topics of its claims, less the claimants above ``load`` of the
    topics it reads."""

    __slots__ = ("above", "below", "claims", "known", "reads")

    def __init__(self, settler: Settler, load: int) -> None:
        loads, claims = settler.loads, settler.claims
        light = [settler.interests[m] for m, held in enumerate(loads) if held <= load - 2]
        heavy = [claims[m] for m, held in enumerate(loads) if held > load and claims[m]]
        self.below = Counter(chain.from_iterable(light))  # topic -> readers that light
        self.above = Counter(chain.from_iterable(heavy))  # topic -> claimants that heavy
        self.claims = claims
        self.reads = settler.reads
        self.known: dict[int, int] = {}  # member -> of(member)

    def eases(self, lighter: int, heavier: int) -> bool:
        """Whether ``lighter`` one lighter and ``heavier`` one heavier lowers the strain."""
        return self.of(heavier) < self.of(lighter)

    def of(self, member: int) -> int:
        known = self.known.get(member)
        if known is None:
            below, above = self.below, self.above
            known = self.known[member] = sum(
                map(below.__getitem__, self.claims[member] & below.keys())
            ) - sum(map(above.__getitem__, self.reads[member] & above.keys()))
        return known
