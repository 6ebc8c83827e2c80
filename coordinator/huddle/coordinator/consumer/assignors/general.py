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

import heapq

from huddle.coordinator.consumer.assignors.base import AssignorError, GroupSpec
from huddle.coordinator.consumer.messages import Assignment


def assign_general(spec: GroupSpec) -> dict[str, Assignment]:
    order = sorted(spec.members)
    subscribers: dict[str, list[str]] = {}
    for member_id in order:
        for topic in spec.members[member_id].topics:
            if topic not in spec.partitions:
                raise AssignorError(f"members subscribe to {topic!r} which has no metadata")
            subscribers.setdefault(topic, []).append(member_id)

    held: dict[str, dict[str, set[int]]] = {m: {} for m in order}
    fresh: dict[str, dict[str, set[int]]] = {m: {} for m in order}  # given out this round
    load = dict.fromkeys(order, 0)
    owner: dict[str, dict[int, str]] = {topic: {} for topic in subscribers}
    for member_id in order:
        member = spec.members[member_id]
        for topic, partitions in member.previous.items():
            if topic not in member.topics:
                continue
            size = spec.partitions[topic]
            owners = owner[topic]
            mine = held[member_id].setdefault(topic, set())
            for partition in partitions:
                if partition < size and partition not in owners:
                    owners[partition] = member_id
                    mine.add(partition)
            load[member_id] += len(mine)

    for topic in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        owners = owner[topic]
        free = [p for p in range(spec.partitions[topic]) if p not in owners]
        if not free:
            continue
        heap = [(load[m], m) for m in subscribers[topic]]
        heapq.heapify(heap)
        for partition in free:
            count, member_id = heapq.heappop(heap)
            owners[partition] = member_id
            held[member_id].setdefault(topic, set()).add(partition)
            fresh[member_id].setdefault(topic, set()).add(partition)
            load[member_id] = count + 1
            heapq.heappush(heap, (count + 1, member_id))

    _balance(order, subscribers, held, fresh, load)
    return {
        member_id: {topic: frozenset(ps) for topic, ps in held[member_id].items() if ps}
        for member_id in order
    }


def _balance(
    order: list[str],
    subscribers: dict[str, list[str]],
    held: dict[str, dict[str, set[int]]],
    fresh: dict[str, dict[str, set[int]]],
    load: dict[str, int],
) -> None:
    """Move partitions from the heaviest members to lighter subscribers until none can.

    Passes repeat until one moves nothing; each move lowers the sum of squared loads (the
    receiver has at least two fewer than the giver), so this ends.
    """
    while _balance_pass(order, subscribers, held, fresh, load):
        pass


def _balance_pass(
    order: list[str],
    subscribers: dict[str, list[str]],
    held: dict[str, dict[str, set[int]]],
    fresh: dict[str, dict[str, set[int]]],
    load: dict[str, int],
) -> bool:
    moved = False
    giving = list(order)
    while giving:
        heavy = max(giving, key=lambda m: (load[m], m))
        best: tuple[int, str, str] | None = None  # (load, member, topic)
        for topic, partitions in held[heavy].items():
            if not partitions:
                continue
            for other in subscribers[topic]:
                if other != heavy and (best is None or (load[other], other) < best[:2]):
                    best = (load[other], other, topic)
        if best is None or best[0] > load[heavy] - 2:
            giving.remove(heavy)
            continue
        _, light, topic = best
        new = fresh[heavy].get(topic)
        partition = max(new) if new else max(held[heavy][topic])
        if new:
            new.discard(partition)
        held[heavy][topic].discard(partition)
        held[light].setdefault(topic, set()).add(partition)
        fresh[light].setdefault(topic, set()).add(partition)
        load[heavy] -= 1
        load[light] += 1
        moved = True
    return moved
