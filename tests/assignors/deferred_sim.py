"""A group of members driving ``cooperative-deferred`` by hand, on a fake clock (no tests
here: the ``test_deferred*`` modules share it).

Every member holds its own assignor instance, as a huddle member process does; the
chosen leader's instance assigns, the leader's ``check_cooperative`` vets the round,
and every member's instance gets ``on_assignment`` and keeps what it was assigned as its
owned partitions for the next round.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import huddle.client.assignors.deferred  # noqa: F401 - registers cooperative-deferred
from huddle.client.assignors.base import GroupAssignment, MemberSubscription
from huddle.client.assignors.deferred import DeferredAssignor
from huddle.client.leader import check_cooperative
from huddle.protocol.embedded import TopicPartition


def T(n: int) -> TopicPartition:
    """The seed's Tn: partition n - 1 of topic "T" (the seed's members subscribe to "T")."""
    return TopicPartition("T", n - 1)


def ts(*numbers: int) -> frozenset[TopicPartition]:
    return frozenset(map(T, numbers))


@dataclass
class Member:
    assignor: DeferredAssignor
    topics: frozenset[str]
    instance: str | None = None
    owned: frozenset[TopicPartition] = frozenset()
    generation: int = -1


@dataclass
class Group:
    partitions: dict[str, int]
    settings: dict[str, Any] = field(default_factory=dict)
    clock: list[float] = field(default_factory=lambda: [0.0])
    members: dict[str, Member] = field(default_factory=dict)
    generation: int = 0
    rounds: list[GroupAssignment] = field(default_factory=list)

    def instance(self) -> DeferredAssignor:
        assignor = DeferredAssignor(**self.settings)
        assignor.now_ms = lambda: self.clock[0]
        return assignor

    def join(
        self,
        member_id: str,
        owned: Iterable[TopicPartition] = (),
        *,
        topics: Iterable[str] = ("T",),
        instance: str | None = None,
    ) -> None:
        owned = frozenset(owned)
        self.members[member_id] = Member(
            assignor=self.instance(),
            topics=frozenset(topics),
            instance=instance,
            owned=owned,
            generation=self.generation if owned else -1,
        )

    def leave(self, *member_ids: str) -> None:
        for member_id in member_ids:
            del self.members[member_id]

    def advance(self, ms: float) -> None:
        self.clock[0] += ms

    def subscriptions(self) -> dict[str, MemberSubscription]:
        return {
            member_id: MemberSubscription(
                member_id=member_id,
                topics=m.topics,
                owned=m.owned,
                generation=m.generation,
                group_instance_id=m.instance,
                user_data=m.assignor.subscription_user_data(m.topics, m.owned),
            )
            for member_id, m in self.members.items()
        }

    def rebalance(self, leader: str | None = None) -> GroupAssignment:
        """One round led by ``leader`` (default: the longest-standing member)."""
        subscriptions = self.subscriptions()
        chosen = self.members[leader or next(iter(self.members))]
        result = chosen.assignor.assign(self.partitions, subscriptions)
        assert set(result) == set(subscriptions)
        check_cooperative(subscriptions, result)
        self.generation += 1
        for member_id, assignment in result.items():
            m = self.members[member_id]
            m.assignor.on_assignment(assignment, self.generation)
            m.owned = assignment.partitions
            m.generation = self.generation
        self.rounds.append(result)
        return result

    def settle(self, limit: int = 60) -> int:
        """Rebalance while a round revokes something (its members rejoin at once) or
        schedules a rebalance (the clock runs to it). Returns the number of rounds."""
        for count in range(1, limit + 1):
            result = self.rebalance()
            if any(a.revoked for a in result.values()):
                continue
            delays = [a.scheduled_rebalance_delay_ms for a in result.values()]
            if not any(delays):
                return count
            self.advance(min(d for d in delays if d > 0))
        raise AssertionError(f"no stable assignment after {limit} rounds")

    def owned(self) -> dict[str, frozenset[TopicPartition]]:
        return {member_id: m.owned for member_id, m in self.members.items()}


def delays(result: GroupAssignment) -> set[int]:
    return {a.scheduled_rebalance_delay_ms for a in result.values()}


def revoked(result: GroupAssignment) -> dict[str, frozenset[TopicPartition]]:
    return {member_id: a.revoked for member_id, a in result.items() if a.revoked}


def newly_assigned(
    result: GroupAssignment, before: dict[str, frozenset[TopicPartition]]
) -> dict[str, frozenset[TopicPartition]]:
    """What each member gets that it did not own (the seed's ``assigned:``)."""
    gained = {m: a.partitions - before.get(m, frozenset()) for m, a in result.items()}
    return {m: tps for m, tps in gained.items() if tps}
