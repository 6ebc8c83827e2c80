"""From the balanced target to what runs where this round: actives, standbys, warm-ups.

An active only goes to its target when the target is caught up on it (or the task is
stateless). Otherwise it stays with its owner, or without one goes to the least loaded
caught-up member, or when nobody is caught up to the member with the least lag; the
target gets a warm-up instead (at most ``max_warmups`` in the round), and a later probing
rebalance moves the active once the warm-up has caught up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from huddle.client.assignors.high_availability.view import View


@dataclass(slots=True)
class Placement:
    active: list[int]
    """pid -> the member running it once handed over."""
    standby: list[set[int]]
    """member -> pids it keeps as standbys."""
    warmup: list[set[int]] = field(default_factory=list)
    """member -> pids it warms up, to take them over later."""
    warming: bool = False
    """Some move waits for a replica to catch up: schedule a probing rebalance."""


def place(view: View, target: list[int], standbys: int, max_warmups: int) -> Placement:
    active, pending = _actives(view, target)
    standby = _standbys(view, active, standbys)
    warmup: list[set[int]] = [set() for _ in range(view.members)]
    warming = False
    budget = max_warmups
    for pid in sorted(pending, key=lambda pid: (view.rank(target[pid], pid), pid)):
        member = target[pid]
        if pid in standby[member]:
            warming = True  # its standby warms it up already
        elif budget:
            warmup[member].add(pid)
            budget -= 1
            warming = True
    return Placement(active=active, standby=standby, warmup=warmup, warming=warming)


def _actives(view: View, target: list[int]) -> tuple[list[int], list[int]]:
    """pid -> active member, and the pids whose active is not at its target."""
    total = view.layout.total
    active = [-1] * total
    loads = [0] * view.members
    pending: list[int] = []
    homeless: list[int] = []
    for pid in range(total):
        member = target[pid]
        if view.rank(member, pid) == 0:
            active[pid] = member
        elif view.owner[pid] >= 0:
            active[pid] = view.owner[pid]
            pending.append(pid)
        else:
            homeless.append(pid)
            continue
        loads[active[pid]] += 1
    for pid in homeless:
        member = target[pid]
        candidates = [m for m in range(view.members) if view.eligible(m, pid)]
        caught_up = [m for m in candidates if view.caught_up(m, pid)]
        if caught_up:
            chosen = min(caught_up, key=lambda m: (loads[m], m))
        else:
            chosen = min(
                candidates,
                key=lambda m: (view.rank(m, pid), m != member, loads[m], m),
            )
        active[pid] = chosen
        loads[chosen] += 1
        if chosen != member:
            pending.append(pid)
    return active, pending


def _standbys(view: View, active: list[int], per_task: int) -> list[set[int]]:
    """``per_task`` standbys for every task (as many as there are other members that
    subscribe to it), on distinct members other than its active: the most caught up first
    (everyone within the acceptable lag ties), then the member with the fewest standbys.
    Asking for standbys says the tasks keep state: a fresh group, where nobody has any yet
    and so nobody reports a lag, gets them too."""
    standby: list[set[int]] = [set() for _ in range(view.members)]
    if per_task <= 0:
        return standby
    loads = [0] * view.members
    # Tasks taken in turns across their actives (each member's first task, then each one's
    # second, ...): a member never keeps a standby of its own tasks, so going through one
    # member's tasks in a row would pile the standbys up on the others.
    seen: dict[int, int] = {}
    turns: list[tuple[int, int, int]] = []
    for pid in range(view.layout.total):
        turn = seen.get(active[pid], 0)
        seen[active[pid]] = turn + 1
        turns.append((turn, active[pid], pid))
    for _, _, pid in sorted(turns):
        candidates = [m for m in range(view.members) if m != active[pid] and view.eligible(m, pid)]
        candidates.sort(key=lambda m: (view.rank(m, pid), loads[m], m))
        for m in candidates[:per_task]:
            standby[m].add(pid)
            loads[m] += 1
    return standby
