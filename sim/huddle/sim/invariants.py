"""The properties every step of a run must keep (docs/simulation.md lists them).

``Checker`` is told what happens (the coordinator's state after each call, commits as the
coordinator answers them, callbacks as members make them) and looks at the members after
each step that changed anything. Time passing alone cannot break a property: a member's
deadlines only ever take partitions away from what it may process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from huddle.client.generation import Generation
from huddle.coordinator.core import Coordinator
from huddle.coordinator.state import GroupState
from huddle.protocol.embedded import (
    EmbeddedSchemaError,
    TopicPartition,
    decode_assignment,
    decode_subscription,
)
from huddle.protocol.errors import ErrorCode, HuddleError
from huddle.protocol.messages import OffsetCommitRequest, OffsetCommitResponse
from huddle.sim.application import GROUP_ID
from huddle.sim.process import MemberProcess

if TYPE_CHECKING:
    from huddle.sim.world import World

INVARIANTS = (
    "exclusive-ownership",
    "generations",
    "stable-groups",
    "commits",
    "cooperative-rounds",
    "liveness",
    "callbacks",
    "availability",
    "lost-with-a-cause",
    "member-failed",
    # the consumer protocol's own (huddle.sim.consumer_checks)
    "ownership",
    "fenced-owns-nothing",
    "epochs",
)


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    detail: str
    at_ms: float
    step: int


class ViolationFoundError(HuddleError):
    def __init__(self, violation: Violation) -> None:
        super().__init__(f"{violation.invariant}: {violation.detail}")
        self.violation = violation


@dataclass(slots=True)
class Stay:
    """A member's current stay in the group, from its last JoinGroup: the generation it was
    assigned partitions in (if it was), whether anything that may end a stay has happened to
    it since it joined (its connection lost, a pause, a restart), and the generation it gave
    itself up in, if a callback of it overran the rebalance timeout."""

    assigned: Generation | None = None
    shaken: bool = False
    gave_up: Generation | None = None


class Checker:
    def __init__(self, world: World) -> None:
        self.world = world
        self.generation = 0  # the group's highest generation in its current life
        self.before = 0  # the highest generation of the lives before (a restart loads on)
        # A group deleted when it empties (no offsets) starts again at generation 0: a
        # new life. Member ids the coordinator handed out in the current life:
        self.group: object | None = None
        self.life = 0
        self.life_ids: set[str] = set()
        self.rounds_checked: set[tuple[int, int]] = set()  # (life, generation)
        self.rebalances = 0
        self.processing: dict[int, frozenset[TopicPartition]] = {}  # member -> as last seen
        self.holders: dict[TopicPartition, set[int]] = {}  # partition -> members, as last seen
        self.stays: dict[int, Stay] = {}  # member -> its stay since its last JoinGroup

    def fail(self, invariant: str, detail: str) -> None:
        sched = self.world.sched
        raise ViolationFoundError(Violation(invariant, detail, sched.now, sched.steps))

    # --- after each step ------------------------------------------------------------

    def check_members(self, members: list[MemberProcess], changed: set[MemberProcess]) -> None:
        """After a step that changed the members in ``changed``. What each member
        processes is kept from the last step that changed it: time passing only takes
        partitions away, so a kept set may be too large, never too small; a conflict is
        confirmed on fresh sets before it counts."""
        self._exclusive(members, changed)
        for m in changed:
            if m.alive and m.idle() and m.app.owned != m.core.owned:
                self.fail(
                    "callbacks",
                    f"member {m.index}: its callbacks told it owns {_names(m.app.owned)}, the "
                    f"library says {_names(m.core.owned)}",
                )
        host = self.world.host
        core = host.core
        if core is None:
            return
        group = core.groups.get(GROUP_ID)
        if group is None:
            return  # deleted: every generation members hold is from a past life
        life_ids = self.life_ids
        for m in changed:
            if not m.alive:
                continue
            current = m.core.current  # its generation and member id, read once
            if current.id <= 0 or current.member_id not in life_ids:
                continue  # no generation, or one from a past life of the group
            if current.id > group.generation and not self._unfinished(m, group.generation):
                self.fail(
                    "generations",
                    f"member {m.index} is in generation {current.id}; the group is "
                    f"at generation {group.generation}",
                )

    def _unfinished(self, m: MemberProcess, loaded: int) -> bool:
        """Whether ``m`` holds a generation that formed before the coordinator restarted
        and never finished: the restart loaded the group as its last finished rebalance
        left it (as Kafka, which keeps a group when its assignment is stored, not when a
        generation forms), and no member may own anything in a generation past that."""
        return m.core.generation <= self.before and m.core.owned_generation <= loaded

    def _seen(self, m: MemberProcess, now: frozenset[TopicPartition]) -> frozenset[TopicPartition]:
        """Note what ``m`` processes now; what it gained since it was last seen."""
        before = self.processing.get(m.index, frozenset())
        if now == before:
            return frozenset()
        self.processing[m.index] = now
        for tp in before - now:
            self.holders[tp].discard(m.index)
        gained = now - before
        for tp in gained:
            self.holders.setdefault(tp, set()).add(m.index)
        return gained

    def _exclusive(self, members: list[MemberProcess], changed: set[MemberProcess]) -> None:
        """Exclusive ownership, after a step that changed the members in ``changed``."""
        for m in changed:
            gained = self._seen(m, m.processing())
            for tp in sorted(gained) if gained else ():
                holders = self.holders[tp]
                if len(holders) > 1:
                    for other in sorted(holders - {m.index}):
                        self._confirm_conflict(tp, members[other], m)

    def _counted(self, a: MemberProcess, b: MemberProcess) -> bool:
        """Whether two members processing one partition at once is a violation."""
        return True

    def _confirm_conflict(self, tp: TopicPartition, a: MemberProcess, b: MemberProcess) -> None:
        now_a = a.processing()
        now_b = b.processing()
        self._seen(a, now_a)
        self._seen(b, now_b)
        if tp in now_a and tp in now_b and self._counted(a, b):
            self.fail(
                "exclusive-ownership",
                f"{tp.topic}-{tp.partition} is processed by members {a.index} and "
                f"{b.index} at once",
            )

    # --- the coordinator --------------------------------------------------------------

    def coordinator_changed(self, core: Coordinator) -> None:
        group = core.groups.get(GROUP_ID)
        if group is None:
            return
        if group is not self.group:
            # A new incarnation, or the group was deleted and made again: a new life.
            self.group = group
            self.life += 1
            self.before, self.generation = max(self.before, self.generation), 0
            self.life_ids = set()
        self.life_ids.update(group.members)
        if group.generation < self.generation:
            self.fail(
                "generations",
                f"the group went from generation {self.generation} back to {group.generation}",
            )
        if group.generation > self.generation:
            self.rebalances += group.generation - self.generation
            self.generation = group.generation
        if group.state is not GroupState.STABLE:
            return
        if group.leader not in group.members:
            self.fail("stable-groups", f"the Stable group's leader {group.leader} is no member")
        for member_id, member in group.members.items():
            if not member.assignment:
                self.fail(
                    "stable-groups",
                    f"{member_id} has no assignment in Stable generation {group.generation}",
                )
        key = (self.life, group.generation)
        if self.world.cooperative and key not in self.rounds_checked:
            self.rounds_checked.add(key)
            self._check_round(core)

    def _check_round(self, core: Coordinator) -> None:
        """No partition revoked from one member is assigned to another in the same round:
        a partition another member claims goes to nobody, unless the receiver claims it
        too in a strictly higher generation (it keeps it; the stale claimant revokes). A
        group a restart loaded is checked as the round it was kept from: its record must
        hold the subscriptions that round's assignment was made for (a follower rejoining
        with the recorded one is answered that generation with no rebalance)."""
        group = core.groups[GROUP_ID]
        name = group.protocol_name
        claims: dict[TopicPartition, list[tuple[str, int]]] = {}
        assigned: dict[str, frozenset[TopicPartition]] = {}
        for member_id, member in group.members.items():
            try:
                sub = decode_subscription(member.metadata_for(name)) if name else None
                assignment = decode_assignment(member.assignment)
            except EmbeddedSchemaError as exc:
                self.fail("stable-groups", f"{member_id}'s metadata is unreadable: {exc}")
                return
            if sub is not None:
                for tp in sub.owned:
                    claims.setdefault(tp, []).append((member_id, sub.generation))
            assigned[member_id] = assignment.partitions
        for member_id, partitions in assigned.items():
            for tp in sorted(partitions):
                held = claims.get(tp, ())
                mine = [g for m, g in held if m == member_id]
                others = [m for m, g in held if m != member_id and not (mine and g < mine[0])]
                if others:
                    self.fail(
                        "cooperative-rounds",
                        f"generation {group.generation} assigns {tp.topic}-{tp.partition} to "
                        f"{member_id} while {', '.join(others)} still own it",
                    )

    def commit_handled(
        self,
        core: Coordinator,
        request: OffsetCommitRequest,
        response: OffsetCommitResponse,
        before: dict[tuple[str, int], int],
        refusal: str | None,
    ) -> None:
        if response.error_code != ErrorCode.NONE:
            return
        if refusal is not None:
            self.fail("commits", f"accepted {refusal}")
        offsets = {(t.name, p.partition): p.offset for t in request.topics for p in t.partitions}
        for topic in response.topics:
            for p in topic.partitions:
                key = (topic.name, p.partition)
                went_back = key in before and key in offsets and offsets[key] < before[key]
                if p.error_code == ErrorCode.NONE and went_back:
                    self.fail(
                        "commits",
                        f"{topic.name}-{p.partition}'s committed offset went back from "
                        f"{before[key]} to {offsets[key]} ({request.member_id}, "
                        f"generation {request.generation_id})",
                    )

    # --- stays in a generation -------------------------------------------------------

    def joining(self, m: MemberProcess, member_id: str) -> None:
        """``m`` sends a JoinGroup as ``member_id``: a new stay begins. A member that gave
        itself up in the stay before (a callback overran) left the group, or must count
        itself out of it if static: it rejoins with no member id (Kafka's
        ``resetGenerationOnLeaveGroup``), never with the one it gave up, which a coordinator
        that still holds it would answer with the very generation it lost."""
        stay = self.stays.get(m.index)
        gave_up = stay.gave_up if stay is not None else None
        if gave_up is not None and gave_up.member_id and member_id == gave_up.member_id:
            self.fail(
                "lost-with-a-cause",
                f"member {m.index} gave itself up in generation {gave_up.id} (a callback "
                f"overran) and rejoins with the member id it gave up, {member_id}",
            )
        self.stays[m.index] = Stay()

    def gave_up(self, m: MemberProcess) -> None:
        """A callback of ``m`` overran the rebalance timeout: it gives its stay up."""
        self.stays.setdefault(m.index, Stay()).gave_up = m.core.current

    def shaken(self, m: MemberProcess) -> None:
        """Something happened to ``m`` that may cost it its place in the group."""
        self.stays.setdefault(m.index, Stay()).shaken = True

    def lost(self, m: MemberProcess) -> None:
        """``on_partitions_lost`` begins: the member fell out of the group, or may have. A
        member assigned partitions in a generation loses them only if something may have
        ended that stay since it joined: something happened to the member (``shaken``), it
        gave the stay up (a callback overran), or the coordinator no longer holds it in that
        generation, Stable. Otherwise the loss was decided about an earlier stay and applied
        to this one (issue 24, item 13)."""
        stay = self.stays.get(m.index)
        if stay is None or stay.assigned is None or stay.shaken or stay.gave_up is not None:
            return
        core = self.world.host.core
        group = core.groups.get(GROUP_ID) if core is not None else None
        generation = stay.assigned
        if (
            group is None
            or group.state is not GroupState.STABLE
            or group.generation != generation.id
            or generation.member_id not in group.members
        ):
            return
        self.fail(
            "lost-with-a-cause",
            f"member {m.index} lost its partitions in generation {generation.id}, which it "
            "was assigned them in, with nothing happened to it since it joined and the "
            "coordinator still holding it there",
        )

    # --- callbacks (KIP-429's order) --------------------------------------------------

    def callback(self, m: MemberProcess, name: str, partitions: frozenset[TopicPartition]) -> None:
        owned = m.app.owned
        if not self._released(m, name, partitions, owned) and name == "on_partitions_assigned":
            self.stays.setdefault(m.index, Stay()).assigned = m.core.current
            if m.core.cooperative and partitions & owned:
                self.fail(
                    "callbacks",
                    f"member {m.index}: on_partitions_assigned for {_names(partitions & owned)}, "
                    "which it already owns",
                )
            if not m.core.cooperative and owned:
                self.fail(
                    "callbacks",
                    f"member {m.index}: on_partitions_assigned while it still owns "
                    f"{_names(frozenset(owned))} (eager members revoke everything first)",
                )

    def _released(
        self,
        m: MemberProcess,
        name: str,
        partitions: frozenset[TopicPartition],
        owned: set[TopicPartition],
    ) -> bool:
        """Whether ``name`` gives partitions up; if so, they must be ``owned`` ones."""
        if name not in ("on_partitions_revoked", "on_partitions_lost"):
            return False
        if not partitions <= owned:
            self.fail(
                "callbacks",
                f"member {m.index}: {name} for {_names(partitions - owned)}, which its "
                "callbacks never assigned",
            )
        return True


def _names(partitions: frozenset[TopicPartition] | set[TopicPartition]) -> str:
    shown = sorted(partitions)[:8]
    text = ", ".join(f"{tp.topic}-{tp.partition}" for tp in shown)
    return f"[{text}{', ...' if len(partitions) > len(shown) else ''}]"
