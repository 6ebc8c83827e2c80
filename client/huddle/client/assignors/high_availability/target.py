"""The balanced target: where every task's active would be if warmth did not matter.

Balanced means, as KIP-441 defines it for subtopologies (a topic here): for every topic,
the members that subscribe to it hold numbers of its tasks that differ by at most the
balance factor, and so do the members' totals. An assignment that is already balanced is
its own target, unchanged. Otherwise each topic's tasks are spread evenly over its members
(the extra tasks of a topic going to the members with the fewest tasks so far, so totals
stay even too), and which tasks move is chosen here, with warmth in mind: members below
their count take, warmest first, the unowned tasks and the tasks of members above theirs,
so a move goes where a member is already caught up (or closest to it) whenever possible.
"""

from __future__ import annotations

from collections import Counter

from huddle.client.assignors.high_availability.view import View


def balanced_target(view: View, balance_factor: int = 1) -> list[int]:
    """pid -> the member that should run it."""
    topics = len(view.layout.topics)
    held = [[0] * view.members for _ in range(topics)]
    for pid, owner in enumerate(view.owner):
        if owner >= 0:
            held[view.topic_of[pid]][owner] += 1
    target = list(view.owner)
    if _balanced(view, held, balance_factor):
        return target
    counts = _even_counts(view, held)
    for topic in range(topics):
        _fill_bucket(view, topic, view.topic_of, counts[topic], target)
    return target


def _sizes(view: View) -> list[int]:
    sizes = [0] * len(view.layout.topics)
    for topic in view.topic_of:
        sizes[topic] += 1
    return sizes


def _balanced(view: View, held: list[list[int]], factor: int) -> bool:
    """Every task owned, and within ``factor`` per topic and in total."""
    if any(owner < 0 for owner in view.owner):
        return False
    totals = [0] * view.members
    for topic, counts in enumerate(held):
        members = [m for m in range(view.members) if topic in view.interests[m]]
        if any(counts[m] for m in range(view.members) if m not in members):
            return False
        spread = [counts[m] for m in members]
        if spread and max(spread) - min(spread) > factor:
            return False
        for m in members:
            totals[m] += counts[m]
    if len(set(view.interests)) > 1:
        return True  # unequal subscriptions: totals cannot always be even, topics decide
    return max(totals) - min(totals) <= factor


def _even_counts(view: View, held: list[list[int]]) -> list[list[int]]:
    """topic -> member -> how many of its tasks: even per topic, the extras to the members
    with the fewest tasks so far (then to those holding more of the topic now)."""
    totals = [0] * view.members
    counts: list[list[int]] = []
    for topic, size in enumerate(_sizes(view)):
        members = [m for m in range(view.members) if topic in view.interests[m]]
        mine = [0] * view.members
        if members:
            base, extra = divmod(size, len(members))
            for m in members:
                mine[m] = base
            for m in sorted(members, key=lambda m: (totals[m], -held[topic][m], m))[:extra]:
                mine[m] += 1
            for m in members:
                totals[m] += mine[m]
        counts.append(mine)
    return counts


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
