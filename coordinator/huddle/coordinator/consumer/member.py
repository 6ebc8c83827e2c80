"""A consumer-protocol member as the coordinator knows it (Kafka's ConsumerGroupMember).

A member has its own epoch: the target assignment epoch it has reconciled to. Its state
says what it waits for:

- ``STABLE``: it has everything the target gives it (at its epoch).
- ``UNREVOKED_PARTITIONS``: it must first give up ``pending_revocation``; it stays at its
  epoch until a heartbeat's owned partitions no longer name any of them.
- ``UNRELEASED_PARTITIONS``: it is at the target epoch, but some partitions the target gives
  it are still owned by another member; it gets each as soon as it is released.

``assigned`` is what the member may own now; ``pending_revocation`` what it owned and must
give up. Both count as owned by it: nobody else is given them meanwhile. ``topic_ids`` says
which topic of a name those partitions are of (name -> topic id, when they were given): a
topic deleted and created again under the same name has another id, and the partitions of
the old one are revoked (``reconcile``). A name not in it is taken as the topic there is now.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import Enum

import msgspec

from huddle.coordinator.consumer.messages import EMPTY, STATIC_LEAVE_EPOCH, Assignment


class MemberState(Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ClassicMeta(msgspec.Struct, frozen=True):
    """A classic member's (JoinGroup's) side of its membership in a consumer-protocol group
    (Kafka's ClassicMemberMetadata): its session timeout and the protocols it joined with
    (name, metadata), the first of which names the protocol its answers carry."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


class ConsumerMember(msgspec.Struct, frozen=True):
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = EMPTY
    pending_revocation: Assignment = EMPTY
    classic: ClassicMeta | None = None  # a classic member's (see ``consumer.classic``)
    topic_ids: Mapping[str, str] = msgspec.field(default_factory=dict)

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def has_left_for_now(self) -> bool:
        """A static member that left with epoch -2: it keeps its partitions (nobody else is
        given them) until its instance id comes back or its session runs out."""
        return self.member_epoch == STATIC_LEAVE_EPOCH

    def same_subscription(self, other: ConsumerMember) -> bool:
        return (
            self.subscribed_topic_names == other.subscribed_topic_names
            and self.subscribed_topic_regex == other.subscribed_topic_regex
        )

    def at_epoch(self, epoch: int, **changes: object) -> ConsumerMember:
        """This member moved to ``epoch`` (its previous epoch remembered, as Kafka's
        ``updateMemberEpoch``), with other fields changed too."""
        return msgspec.structs.replace(
            self, member_epoch=epoch, previous_member_epoch=self.member_epoch, **changes
        )


def partitions_of(assignment: Assignment) -> Iterator[tuple[str, int]]:
    for topic, partitions in assignment.items():
        for partition in partitions:
            yield topic, partition


def count(assignment: Assignment) -> int:
    return sum(len(partitions) for partitions in assignment.values())


def is_subset(owned: Assignment | None, of: Assignment) -> bool:
    """Whether every partition of ``owned`` is in ``of`` (``None``: not known, so no)."""
    if owned is None:
        return False
    for topic, partitions in owned.items():
        if partitions and not partitions <= of.get(topic, frozenset()):
            return False
    return True


def intersects(owned: Assignment | None, other: Assignment) -> bool:
    """Whether ``owned`` names any partition of ``other`` (``None``: not known, so yes)."""
    if owned is None:
        return True
    return any(
        not partitions.isdisjoint(other.get(topic, frozenset()))
        for topic, partitions in owned.items()
    )
