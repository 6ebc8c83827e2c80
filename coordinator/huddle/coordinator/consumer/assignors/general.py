"""``uniform`` when members subscribe to different topics (Kafka's heterogeneous path).

1. Each member keeps what its previous target gave it, of the topics it still subscribes
   to and that still exist (a partition two members claim stays with the first by id).
2. Every partition nobody keeps goes to the least loaded of its topic's subscribers, the
   topics with the fewest subscribers first.
3. Then, while some member holds two partitions more than a member that could take one of
   them (it subscribes to that topic), one moves: partitions given out in step 2 before
   kept ones, so what moves is what balance requires.

The result is balanced in Kafka's sense: no partition could move to a subscriber of its topic
and leave the two members' counts closer.
"""

from __future__ import annotations

import bisect
import heapq

from huddle.coordinator.consumer.assignors.base import GroupSpec
from huddle.coordinator.consumer.assignors.kept import kept_partitions, partition_counts
from huddle.coordinator.consumer.messages import Assignment


def assign_general(spec: GroupSpec) -> dict[str, Assignment]:
    order = sorted(spec.members)
    subscribers: dict[str, list[str]] = {}
    for member_id in order:
        for topic in spec.members[member_id].topics:
            subscribers.setdefault(topic, []).append(member_id)
    counts = partition_counts(spec, frozenset(subscribers))
    kept, taken = kept_partitions(spec, counts)
    held: dict[str, dict[str, frozenset[int]]] = {m: dict(kept[m]) for m in order}
    fresh: dict[str, dict[str, set[int]]] = {m: {} for m in order}  # given out this round
    load = {m: sum(len(ps) for ps in kept[m].values()) for m in order}

    for topic in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        size = counts[topic]
        if len(taken[topic]) == size:
            continue
        free = sorted(set(range(size)).difference(taken[topic]))
        heap = [(load[m], m) for m in subscribers[topic]]
        heapq.heapify(heap)
        for partition in free:
            count, member_id = heapq.heappop(heap)
            fresh[member_id].setdefault(topic, set()).add(partition)
            load[member_id] = count + 1
            heapq.heappush(heap, (count + 1, member_id))

    topics_of = {m: spec.members[m].topics for m in order}
    _balance(order, topics_of, held, fresh, load)
    result: dict[str, Assignment] = {}
    for member_id in order:
        added = fresh[member_id]
        if not added and held[member_id] == kept[member_id]:
            result[member_id] = kept[member_id]
            continue
        mine = dict(held[member_id])
        for topic, partitions in added.items():
            had = mine.get(topic)
            mine[topic] = frozenset(partitions) if had is None else had | partitions
        result[member_id] = {t: ps for t, ps in mine.items() if ps}
    return result


def _balance(
    order: list[str],
    topics_of: dict[str, frozenset[str]],
    held: dict[str, dict[str, frozenset[int]]],
    fresh: dict[str, dict[str, set[int]]],
    load: dict[str, int],
) -> None:
    """Move partitions from the heaviest members to lighter subscribers until none can.

    Passes repeat until one moves nothing; each move lowers the sum of squared loads (the
    receiver has at least two fewer than the giver), so this ends. A giver looks for its
    receiver among all members in (load, member id) order, kept in buckets by load, and
    takes the first that subscribes to a topic it holds.
    """
    holding = {m: {t for t, ps in held[m].items() if ps} | set(fresh[m]) for m in order}
    buckets = _Buckets(order, load)
    moved = True
    while moved:
        moved = False
        done: set[str] = set()
        heaviest = [(-load[m], m) for m in order]
        heapq.heapify(heaviest)
        while heaviest:
            negative, heavy = heapq.heappop(heaviest)
            if -negative != load[heavy] or heavy in done:
                continue
            found = buckets.receiver(heavy, load[heavy] - 2, topics_of, holding[heavy])
            if found is None:
                done.add(heavy)
                continue
            light, topic = found
            new = fresh[heavy].get(topic)
            if new:  # what it was given this round moves first: nobody revokes it
                partition = max(new)
                new.discard(partition)
            else:
                partition = max(held[heavy][topic])
                held[heavy][topic] = held[heavy][topic] - {partition}
            if not new and not held[heavy].get(topic):
                holding[heavy].discard(topic)
            fresh[light].setdefault(topic, set()).add(partition)
            holding[light].add(topic)
            buckets.move(heavy, load[heavy], load[heavy] - 1)
            buckets.move(light, load[light], load[light] + 1)
            load[heavy] -= 1
            load[light] += 1
            moved = True
            heapq.heappush(heaviest, (-load[heavy], heavy))
            heapq.heappush(heaviest, (-load[light], light))


class _Buckets:
    """Members by load, each bucket sorted by member id."""

    def __init__(self, order: list[str], load: dict[str, int]) -> None:
        self.by_load: dict[int, list[str]] = {}
        for member_id in order:  # already in id order
            self.by_load.setdefault(load[member_id], []).append(member_id)

    def move(self, member_id: str, before: int, after: int) -> None:
        bucket = self.by_load[before]
        bucket.remove(member_id)
        if not bucket:
            del self.by_load[before]
        bisect.insort(self.by_load.setdefault(after, []), member_id)

    def receiver(
        self,
        giver: str,
        at_most: int,
        topics_of: dict[str, frozenset[str]],
        holding: set[str],
    ) -> tuple[str, str] | None:
        """The first member by (load, id), with load at most ``at_most``, that subscribes to
        a topic the giver holds; and the first such topic by name."""
        for count in sorted(c for c in self.by_load if c <= at_most):
            for member_id in self.by_load[count]:
                if member_id != giver and not topics_of[member_id].isdisjoint(holding):
                    return member_id, min(topics_of[member_id] & holding)
        return None
