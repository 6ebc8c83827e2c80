"""A consumer-protocol group's state (Kafka's ConsumerGroup), sans-IO.

- ``group_epoch`` moves whenever the group's membership or subscriptions change (a join, a
  leave, a fence, a changed subscription, a subscribed topic's partition count or id: a
  topic deleted and created again).
- ``target_epoch`` is the group epoch the target assignment (``target``) was computed at;
  when the group epoch is ahead, the next heartbeat computes a new target.
- Each member has its own epoch and state (``member``): reconciling toward the target.
- ``owners`` says who owns each partition now, from every member's ``assigned`` and
  ``pending_revocation``. ``put`` refuses a member that claims a partition another member
  owns: that would be two owners at once, the one thing this protocol must never allow.
"""

from __future__ import annotations

from collections import Counter
from enum import Enum

from msgspec.structs import replace

from huddle.coordinator.consumer.assignors.base import Departure
from huddle.coordinator.consumer.member import ConsumerMember, MemberState, partitions_of
from huddle.coordinator.consumer.messages import Assignment
from huddle.protocol.errors import HuddleError


class GroupPhase(Enum):
    """Kafka's ConsumerGroupState."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


class DoubleOwnerError(HuddleError, RuntimeError):
    """A member was about to be given a partition another member still owns."""


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.target_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> its target assignment
        self.owners: dict[str, dict[int, str]] = {}  # topic -> partition -> member id
        # subscribed topic -> its partition count, when the target was last worked out
        self.subscribed_partitions: dict[str, int] = {}
        self.subscribed_ids: dict[str, str] = {}  # and its topic id (a topic with one)
        self.resolved: dict[str, frozenset[str]] = {}  # regex -> the topics it matches
        self.topics_version: int | None = None
        self.departed: dict[str, Departure] = {}  # for assignors that hold partitions
        self.recheck_at: float | None = None  # an assignor asked to be run again then

    # -- reading

    @property
    def phase(self) -> GroupPhase:
        if not self.members:
            return GroupPhase.EMPTY
        if self.group_epoch != self.target_epoch:
            return GroupPhase.ASSIGNING
        for member in self.members.values():
            if not member.is_reconciled_to(self.target_epoch):
                return GroupPhase.RECONCILING
        return GroupPhase.STABLE

    def owner_of(self, topic: str, partition: int) -> str | None:
        owners = self.owners.get(topic)
        return None if owners is None else owners.get(partition)

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        member_id = self.static.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def subscribed_topics(self, member: ConsumerMember) -> frozenset[str]:
        """The topics a member subscribes to: its names and what its regex matches (only
        names that exist count for the assignors; see ``target``)."""
        if member.subscribed_topic_regex:
            matched = self.resolved.get(member.subscribed_topic_regex, frozenset())
            return member.subscribed_topic_names | matched
        return member.subscribed_topic_names

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for (ties: the name first in order), or the
        coordinator's default when none asks."""
        asked = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        if not asked:
            return default
        return min(asked, key=lambda name: (-asked[name], name))

    # -- changing

    def put(self, member: ConsumerMember) -> None:
        """Add or replace a member, keeping ``owners`` and ``static`` in step."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self._claim(member, undo=old)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static[member.instance_id] = member.member_id

    def remove(self, member_id: str, now: float) -> ConsumerMember | None:
        """Take a member out: its partitions are free at once, its target is dropped, and
        the group epoch moves (so the next heartbeat works out a new target)."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._release(member)
        if member.instance_id is not None and self.static.get(member.instance_id) == member_id:
            del self.static[member.instance_id]
        previous = self.target.pop(member_id, {})
        self.departed[member_id] = Departure(member_id, member.instance_id, previous, now)
        self.group_epoch += 1
        return member

    def replace_static(self, old: ConsumerMember, new_member_id: str) -> ConsumerMember:
        """A static member's instance comes back under a new member id: the new member takes
        the old one's place, its assignment and its target, at epoch 0; no epoch moves."""
        self.members.pop(old.member_id)
        self._release(old)
        target = self.target.pop(old.member_id, None)
        if target is not None:
            self.target[new_member_id] = target
        member = replace(
            old,
            member_id=new_member_id,
            member_epoch=0,
            previous_member_epoch=0,
            state=MemberState.STABLE,
            pending_revocation={},
        )
        self.put(member)
        return member

    def _release(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic, partition in partitions_of(assignment):
                owners = self.owners.get(topic)
                if owners is not None and owners.get(partition) == member.member_id:
                    del owners[partition]

    def _claim(self, member: ConsumerMember, undo: ConsumerMember | None) -> None:
        me = member.member_id
        for assignment in (member.assigned, member.pending_revocation):
            for topic, partitions in assignment.items():
                owners = self.owners.setdefault(topic, {})
                for partition in partitions:
                    held = owners.get(partition)
                    if held is not None and held != me:
                        self._release(member)
                        if undo is not None:
                            self._claim(undo, None)
                        raise DoubleOwnerError(
                            f"group {self.group_id!r}: {topic}-{partition} is owned by "
                            f"{held!r}, cannot be given to {me!r}"
                        )
                    owners[partition] = me
