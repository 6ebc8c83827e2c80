"""The sticky plan for unequal subscriptions, worked out on per-topic counts.

1. Every member keeps all its valid claims.
2. Topics with the fewest subscribers first, each topic's unowned partitions go to its
   least-loaded subscribers (water-filling: the greedy "next one to the least loaded").
3. While some member holds a partition of a topic that a member with at least two fewer
   partitions subscribes to, counts move from the heaviest such member to the lightest
   such taker (``_settle``). Counts it did not own before (free to move, in bulk) move
   first, for as long as any can. Only then does a claim move, and only if no chain of
   free counts between other members can settle it instead (so that the follow-up round
   of a cooperative rebalance seldom has a claim to revoke, see ``_settle``);
   claims never so many that the giver drops below the next heaviest member (a member
   that gave up a claim then takes no partitions back). This ends; when it does, no
   single move can improve balance (Kafka's notion of balanced).
4. Per topic each member keeps its claims up to its count, and the rest of the topic is
   dealt round-robin to the members below their count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import groupby

from huddle.client.assignors._claims import Ownership
from huddle.client.assignors._layout import Layout
from huddle.client.assignors._plan import Plan, deal
from huddle.client.assignors._settle import Settler


def plan_general(layout: Layout, ownership: Ownership, topics: Sequence[frozenset[str]]) -> Plan:
    """``topics[m]``: the topics member ``m`` subscribes to (others are ignored)."""
    index = {topic: i for i, topic in enumerate(layout.topics)}
    distinct: dict[frozenset[str], list[int]] = {}
    interests = [
        distinct.get(wanted) or distinct.setdefault(wanted, sorted(index[t] for t in wanted))
        for wanted in topics
    ]
    subscribers: list[list[int]] = [[] for _ in layout.topics]
    for member, mine in enumerate(interests):
        for t in mine:
            subscribers[t].append(member)
    topic_of = layout.topic_of()
    owned_counts = [dict(Counter(map(topic_of.__getitem__, pids))) for pids in ownership.owned]
    counts = [dict(held) for held in owned_counts]
    loads = [len(owned) for owned in ownership.owned]
    unowned: list[list[int]] = [[] for _ in layout.topics]
    for t, pids in groupby(ownership.up_for_grabs(), topic_of.__getitem__):
        unowned[t] = list(pids)

    for t in sorted(range(len(layout.topics)), key=lambda t: (len(subscribers[t]), t)):
        if not unowned[t]:
            continue
        takers = subscribers[t]
        extra = water_fill([loads[m] for m in takers], len(unowned[t]))
        for member, more in zip(takers, extra, strict=True):
            if more:
                counts[member][t] = counts[member].get(t, 0) + more
                loads[member] += more
    Settler(loads, counts, owned_counts, interests).run()
    return _materialize(ownership, topic_of, counts, owned_counts, unowned)


def _materialize(
    ownership: Ownership,
    topic_of: list[int],
    counts: list[dict[int, int]],
    owned_counts: list[dict[int, int]],
    unowned: list[list[int]],
) -> Plan:
    """Step 4. Members whose counts are what they own keep their claims, untouched."""
    members = len(counts)
    kept = list(ownership.owned)
    dealt: list[list[int]] = [[] for _ in range(members)]
    released: list[list[int]] = [[] for _ in range(members)]
    takers: dict[int, list[tuple[int, int]]] = {}  # topic -> (member, how many it takes)
    for member in range(members):
        if counts[member] == owned_counts[member]:
            continue
        kept[member] = []
        claims = {t: list(g) for t, g in groupby(ownership.owned[member], topic_of.__getitem__)}
        for t in sorted(counts[member].keys() | claims.keys()):
            mine = claims.get(t, [])
            want = counts[member].get(t, 0)
            keep = min(want, len(mine))
            kept[member].extend(mine[:keep])
            if keep < len(mine):
                released[member].extend(mine[keep:])
                unowned[t].extend(mine[keep:])
            if want > keep:
                takers.setdefault(t, []).append((member, want - keep))
    for t, wanting in takers.items():
        pool = sorted(unowned[t])
        hands = deal(pool, [n for _, n in wanting])
        for (member, _), hand in zip(wanting, hands, strict=True):
            dealt[member].extend(hand)
    return Plan(kept=kept, dealt=dealt, released=released)


def water_fill(loads: Sequence[int], amount: int) -> list[int]:
    """How many of ``amount`` units each position gets when every unit goes to the least
    loaded position (ties: the lowest position)."""
    if not loads:
        return []
    order = sorted(range(len(loads)), key=lambda i: (loads[i], i))
    basin = 0
    basin_load = 0
    for i in order:
        if basin and loads[i] * basin - basin_load > amount:
            break
        basin += 1
        basin_load += loads[i]
    level, rest = divmod(amount + basin_load, basin)
    extra = [0] * len(loads)
    lifted = sorted(order[:basin])
    for rank, i in enumerate(lifted):
        extra[i] = level - loads[i] + (1 if rank < rest else 0)
    return extra
