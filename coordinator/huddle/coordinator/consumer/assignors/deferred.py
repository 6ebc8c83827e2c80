"""``deferred``: huddle's Design II as a server assignor: a departed member's partitions are
held for its return.

When a member leaves or is fenced, the partitions its target gave it go to nobody for
``hold_ms`` (Kafka Connect's ``scheduled.rebalance.max.delay.ms``), in case it comes back:

- a static member comes back by its instance id (under a new member id): it is given what
  it had;
- a dynamic member comes back as a member new to the group (no previous target): the held
  partitions go to the new members, so a restarted process picks up its own work without
  moving anybody else's.

When the hold runs out, ``uniform`` spreads what is left over everyone. The assignor asks to
run again then (``recheck_at``). Everything else is ``uniform``: sticky and balanced. The
group must remember departures at least ``hold_ms`` (``departure_memory_ms``).
"""

from __future__ import annotations

from huddle.coordinator.consumer.assignors.base import (
    AssignorResult,
    Departure,
    GroupSpec,
    MemberSpec,
)
from huddle.coordinator.consumer.assignors.uniform import UniformAssignor
from huddle.coordinator.consumer.messages import Assignment


class DeferredAssignor:
    def __init__(self, hold_ms: float = 300_000, inner: UniformAssignor | None = None) -> None:
        self.hold_ms = hold_ms
        self.inner = inner or UniformAssignor()

    @property
    def name(self) -> str:
        return "deferred"

    def assign(self, spec: GroupSpec) -> AssignorResult:
        holding = [
            d
            for d in sorted(spec.departed.values(), key=lambda d: (d.at, d.member_id))
            if d.at + self.hold_ms > spec.now and d.previous
        ]
        if not holding or not spec.members:
            return self.inner.assign(spec)
        claimed = {
            (topic, p)
            for member in spec.members.values()
            for topic, ps in member.previous.items()
            for p in ps
        }
        members = dict(spec.members)
        returning = {d.instance_id for d in holding if d.instance_id is not None}
        by_instance = {
            m.instance_id: m
            for m in members.values()
            if m.instance_id is not None and m.instance_id in returning
        }
        newcomers = [m for m in sorted(members) if not members[m].previous and m not in by_instance]
        held: set[tuple[str, int]] = set()
        recheck: float | None = None
        turn = 0
        for departure in holding:
            free = _unclaimed(departure, claimed)
            if not free:
                continue
            claimed |= _pairs(free)
            back = None if departure.instance_id is None else by_instance.get(departure.instance_id)
            if back is not None and not back.previous:
                members[back.member_id] = _with_previous(members[back.member_id], free)
            elif newcomers and departure.instance_id is None:
                taker = newcomers[turn % len(newcomers)]
                turn += 1
                members[taker] = _with_previous(members[taker], free)
            else:
                held |= _pairs(free)
                deadline = departure.at + self.hold_ms
                recheck = deadline if recheck is None else min(recheck, deadline)
        widened = GroupSpec(members, spec.partitions, spec.homogeneous, spec.now, spec.departed)
        result = self.inner.assign(widened).assignments
        if held:
            result = {m: _without(a, held) for m, a in result.items()}
        return AssignorResult(result, recheck)


def _pairs(assignment: Assignment) -> set[tuple[str, int]]:
    return {(topic, p) for topic, ps in assignment.items() for p in ps}


def _unclaimed(departure: Departure, claimed: set[tuple[str, int]]) -> Assignment:
    left: dict[str, frozenset[int]] = {}
    for topic, ps in departure.previous.items():
        free = frozenset(p for p in ps if (topic, p) not in claimed)
        if free:
            left[topic] = free
    return left


def _with_previous(member: MemberSpec, more: Assignment) -> MemberSpec:
    """The member as if its previous target had also given it ``more``."""
    merged = dict(member.previous)
    for topic, ps in more.items():
        merged[topic] = merged.get(topic, frozenset()) | ps
    return MemberSpec(member.member_id, member.topics, merged, member.instance_id, member.rack_id)


def _without(assignment: Assignment, held: set[tuple[str, int]]) -> Assignment:
    if not any((topic, p) in held for topic, ps in assignment.items() for p in ps):
        return assignment
    kept = {t: frozenset(p for p in ps if (t, p) not in held) for t, ps in assignment.items()}
    return {t: ps for t, ps in kept.items() if ps}
