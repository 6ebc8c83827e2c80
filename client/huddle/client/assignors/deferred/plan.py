"""The sticky plan with held partitions left out and returned ones counted as claims.

Held (lost) partitions are taken out of the round: nobody plans for them, and the
balance is worked out on the rest. A partition going back to a returning member (a
gift) is planned as if that member already owned it, so it keeps it where balance
allows; if the plan moves it on, nobody really owns it, so it is handed over at once.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from huddle.client.assignors._claims import NOBODY, Ownership
from huddle.client.assignors._equal import plan_equal
from huddle.client.assignors._general import plan_general
from huddle.client.assignors._layout import Layout
from huddle.client.assignors._plan import Plan
from huddle.client.assignors.base import MemberSubscription


@dataclass(slots=True)
class Targets:
    """Per member (by number), as pids."""

    assigned: list[list[int]]
    """what it gets this round: its kept claims, gifts and free partitions dealt to it."""
    moves: list[list[int]]
    """partitions it really owns that balance wants elsewhere (revoked if paced in)."""
    stray: list[list[int]]
    """partitions it owns on topics it no longer subscribes to: always revoked."""


def plan_round(
    layout: Layout,
    ownership: Ownership,
    members: Sequence[MemberSubscription],
    held: Collection[int],
    gifts: Mapping[int, int],
) -> Targets:
    real = ownership.owner
    planning = Ownership(
        owner=list(real),
        owned=[list(pids) for pids in ownership.owned],
        stray=ownership.stray,
        objects=ownership.objects,
        intact=ownership.intact,
    )
    phantom = len(members)  # owns the held partitions, takes no part in the plan
    for pid in held:
        planning.owner[pid] = phantom
    for pid, number in gifts.items():
        planning.owner[pid] = number
        planning.owned[number].append(pid)
    for number in set(gifts.values()):
        planning.owned[number].sort()
    plan = _plan(layout, planning, members, layout.total - len(held))
    assigned: list[list[int]] = []
    moves: list[list[int]] = []
    for number in range(len(members)):
        dealt = [pid for pid in plan.dealt[number] if real[pid] == NOBODY]  # none claims it
        assigned.append(plan.kept[number] + dealt)
        moves.append([pid for pid in plan.released[number] if real[pid] == number])
    return Targets(assigned=assigned, moves=moves, stray=ownership.stray)


def _plan(
    layout: Layout, ownership: Ownership, members: Sequence[MemberSubscription], total: int
) -> Plan:
    in_play = frozenset(layout.topics)
    wanted = [sub.topics & in_play for sub in members]
    if all(topics == wanted[0] for topics in wanted):
        return plan_equal(total, ownership)
    return plan_general(layout, ownership, wanted)
