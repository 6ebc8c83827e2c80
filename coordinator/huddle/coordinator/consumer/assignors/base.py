"""What a server-side assignor is given and returns (Kafka's ConsumerGroupPartitionAssignor),
and the registry of names.

An assignor sees each member's subscription, already resolved to topic names, and what the
previous target assignment gave it; it returns the new target assignment of every member.
It does not see who owns what right now: the reconciliation (``reconcile``) makes sure a
partition moves only once its owner has given it up, whatever the target says.

Beyond Kafka's spec, a ``GroupSpec`` carries ``now`` and ``departed``: members that left
recently, with what their target gave them. An assignor that wants to hold a departed
member's partitions for its return (the deferred policy) or to move partitions a few at a
time (paced movement) reads them, and asks to be run again at ``AssignorResult.recheck_at``;
Kafka's two assignors ignore both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol

from huddle.coordinator.consumer.messages import Assignment
from huddle.protocol.errors import HuddleError


class MemberSpec(NamedTuple):
    member_id: str
    topics: frozenset[str]  # subscribed, resolved to the topics that exist
    previous: Assignment  # what the previous target assignment gave this member
    instance_id: str | None = None
    rack_id: str | None = None


class Departure(NamedTuple):
    """A member that left (or was fenced) at ``at``, and what its target gave it then."""

    member_id: str
    instance_id: str | None
    previous: Assignment
    at: float


class GroupSpec(NamedTuple):
    members: Mapping[str, MemberSpec]
    partitions: Mapping[str, int]  # every subscribed topic -> its partition count
    homogeneous: bool  # every member subscribes to the same topics
    now: float = 0.0
    departed: Mapping[str, Departure] = {}


class AssignorResult(NamedTuple):
    assignments: dict[str, Assignment]  # every member of the spec -> its target
    recheck_at: float | None = None  # run again at this time (a held partition's deadline)


class ServerAssignor(Protocol):
    @property
    def name(self) -> str: ...

    def assign(self, spec: GroupSpec) -> AssignorResult: ...


class AssignorError(HuddleError, ValueError):
    """The spec cannot be assigned (Kafka's PartitionAssignorException)."""


def is_homogeneous(members: Mapping[str, MemberSpec]) -> bool:
    subscriptions = {spec.topics for spec in members.values()}
    return len(subscriptions) <= 1


def spec_of(
    members: Mapping[str, MemberSpec],
    partitions: Mapping[str, int],
    now: float = 0.0,
    departed: Mapping[str, Departure] | None = None,
) -> GroupSpec:
    return GroupSpec(members, partitions, is_homogeneous(members), now, departed or {})
