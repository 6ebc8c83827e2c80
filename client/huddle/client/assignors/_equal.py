"""The sticky plan when every member subscribes to the same topics (Kafka's fast path).

With P partitions and N members every member ends with ``P // N`` or one more, and
``P % N`` members get the one more. Walking the members in order, each keeps its valid
claims up to its quota: one more than ``P // N`` while such places are left and it claims
that many, otherwise ``P // N``. That keeps as many claims as any balanced assignment
can. Everything not kept (unowned, contested or stray partitions and released claims)
is dealt round-robin, sorted by (topic, partition), to the members below their quota.
"""

from __future__ import annotations

from huddle.client.assignors._claims import Ownership
from huddle.client.assignors._plan import Plan, deal


def plan_equal(total: int, ownership: Ownership) -> Plan:
    members = len(ownership.owned)
    quota, extra = divmod(total, members)
    kept: list[list[int]] = []
    released: list[list[int]] = []
    for claims in ownership.owned:
        cap = quota
        if len(claims) > quota and extra > 0:
            cap += 1
            extra -= 1
        kept.append(claims[:cap])
        released.append(claims[cap:])
    # Members releasing a claim were capped at their full quota, so they take nothing here;
    # and when one was capped at P // N, no places for one more were left (extra == 0).
    needs = []
    for hand in kept:
        need = quota - len(hand)
        if need >= 0 and extra > 0:
            need += 1
            extra -= 1
        needs.append(max(need, 0))
    pool = ownership.up_for_grabs()
    for lost in released:
        pool.extend(lost)
    pool.sort()
    dealt = deal(pool, needs)
    return Plan(kept=kept, dealt=dealt, released=released)
