"""The balanced target: where every task's active would be if warmth did not matter.

How many tasks each member should hold comes from the sticky plan (``_sticky``): balanced
first, then as many owned tasks kept as balance allows. Which tasks move is chosen here,
with warmth in mind: members below their share take, warmest first, the unowned tasks and
the tasks of members above their share, so a move goes where a member is already caught up
(or closest to it) whenever possible. An assignment that is already balanced is its own
target, unchanged.

With equal subscriptions only a member's total counts; otherwise the plan's counts per
topic are kept, since a member can only take tasks of the topics it subscribes to.
"""

from __future__ import annotations

from collections import Counter

from huddle.client.assignors._ha_view import View
from huddle.client.assignors._sticky import _plan


def balanced_target(view: View) -> list[int]:
    """pid -> the member that should run it."""
    plan = _plan(view.layout, view.ownership, view.subs)
    in_play = frozenset(range(len(view.layout.topics)))
    equal = len({interests & in_play for interests in view.interests}) <= 1
    bucket_of = [0] * view.layout.total if equal else view.topic_of
    target = list(view.owner)
    buckets = sorted(set(bucket_of))
    for bucket in buckets:
        counts = [
            sum(1 for pid in kept + dealt if bucket_of[pid] == bucket)
            for kept, dealt in zip(plan.kept, plan.dealt, strict=True)
        ]
        _fill_bucket(view, bucket, bucket_of, counts, target)
    return target


def _fill_bucket(
    view: View, bucket: int, bucket_of: list[int], counts: list[int], target: list[int]
) -> None:
    pids = [pid for pid, b in enumerate(bucket_of) if b == bucket]
    held = Counter(view.owner[pid] for pid in pids if view.owner[pid] >= 0)
    surplus = [max(held[m] - counts[m], 0) for m in range(view.members)]
    need = [max(counts[m] - held[m], 0) for m in range(view.members)]
    takers = [m for m in range(view.members) if need[m]]
    movable = [pid for pid in pids if view.owner[pid] < 0 or surplus[view.owner[pid]]]
    pairs = sorted(
        (view.rank(m, pid), view.owner[pid] >= 0, pid, m)
        for pid in movable
        for m in takers
        if view.eligible(m, pid)
    )
    taken = [False] * view.layout.total
    for _, owned, pid, m in pairs:
        if taken[pid] or not need[m]:
            continue
        if owned:
            giver = view.owner[pid]
            if not surplus[giver]:
                continue
            surplus[giver] -= 1
        taken[pid] = True
        target[pid] = m
        need[m] -= 1
    stranded = [view.tasks[pid] for pid in pids if target[pid] < 0]
    if stranded:  # the plan's counts always cover every task of the bucket
        raise AssertionError(f"no member takes {stranded}")
