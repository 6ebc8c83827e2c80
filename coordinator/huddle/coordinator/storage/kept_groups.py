"""Groups kept across a change of coordinator, as Kafka keeps its GroupMetadata records.

The coordinator writes each group at the end of each rebalance and as it empties
(``group_record``): its generation, protocol, leader, members with their subscriptions and
assignments, and since when it is in that state; to its data dir's journal, or (a cluster
node) to etcd. A restarted coordinator, or a node that takes the shard over, loads it
(``loaded_group``) as Stable in that generation, each member with a fresh session (Kafka's
GroupMetadataManager loading, then ``onGroupLoaded`` rescheduling each member's heartbeat):
members that find the coordinator again go on heartbeating, with no rebalance and nothing
revoked.
"""

from __future__ import annotations

import msgspec

from huddle.coordinator.group import Group, Member
from huddle.coordinator.state import GroupState
from huddle.coordinator.storage.records import GroupRecord, KeptMember
from huddle.protocol.messages import Protocol

NO_CONNECTION = 0  # connection ids start at 1: a loaded member speaks through none yet


def group_record(group: Group, topics_digest: int | None) -> GroupRecord:
    """The group as it is now (Stable after a rebalance, or just emptied), its generation
    formed with topics of ``topics_digest`` (None: not known)."""
    return GroupRecord(
        group_id=group.group_id,
        generation=group.generation,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        leader=group.leader,
        members=[kept_member(m, m.assignment) for m in group.members.values()],
        current_state_ms=group.state_ms,
        topics_digest=topics_digest,
    )


def kept_member(m: Member, assignment: bytes) -> KeptMember:
    return KeptMember(
        member_id=m.member_id,
        instance_id=m.instance_id,
        client_id=m.client_id,
        host=m.host,
        session_timeout_ms=m.session_timeout_ms,
        rebalance_timeout_ms=m.rebalance_timeout_ms,
        protocols=[(p.name, p.metadata) for p in m.protocols],
        assignment=assignment,
        principal=m.principal,
        incarnation=m.incarnation,
    )


def static_member_changed(
    record: GroupRecord, old_id: str, member: Member | None
) -> GroupRecord | None:
    """The record with a static member's entry taken over by ``member``, the instance
    rejoined under a new member id (KIP-345; it keeps the assignment the record gave the
    old id), or (``member`` None) without the entry, removed since (``members_removed``:
    its partitions belong to nobody until the group rebalances); None if the record does
    not hold ``old_id``. A restart must not load the old id and fence the instance's new
    one as a zombie.

    Kafka writes no record for either change mid-rebalance (``storeGroup`` runs only
    after the leader's SyncGroup, for a static rejoin in Stable and when a group turns
    Empty), so a coordinator loading the group loads the old member id and fences the
    instance's live process, for good. A renamed entry is safe to keep: the generation,
    its members and its assignment are the same, the instance's partitions only change
    hands between two processes of that instance (the old one is fenced either way), as a
    static rejoin in Stable does. A removed entry is not, on its own: so the record says
    so, and the group is rebalanced when loaded (Kafka reaches the same rebalance later:
    it loads the removed member, whose fresh session then ends)."""
    if all(m.member_id != old_id for m in record.members):
        return None
    if member is None:
        members = [m for m in record.members if m.member_id != old_id]
    else:
        # the entry's subscriptions stay those its assignment was made for: the instance's
        # new process rejoining with others after a restart then makes the group rebalance
        members = [
            msgspec.structs.replace(kept_member(member, m.assignment), protocols=m.protocols)
            if m.member_id == old_id
            else m
            for m in record.members
        ]
    leader = record.leader
    if leader == old_id:
        leader = member.member_id if member is not None else None
        leader = leader or next((m.member_id for m in members), None)
    removed = record.members_removed or member is None
    return msgspec.structs.replace(record, members=members, leader=leader, members_removed=removed)


def loaded_group(record: GroupRecord) -> Group:
    """A group rebuilt from its record: Stable in its generation when it has members,
    Empty otherwise. Sessions are the caller's to start."""
    group = Group(record.group_id)
    group.generation = record.generation
    group.protocol_type = record.protocol_type
    group.state_ms = record.current_state_ms
    for kept in record.members:
        member = Member(
            record.group_id,
            kept.member_id,
            kept.instance_id,
            client_id=kept.client_id,
            principal=kept.principal,
            host=kept.host,
            conn_id=NO_CONNECTION,
            incarnation=kept.incarnation,
            protocol_type=record.protocol_type or "",
            protocols=[Protocol(name=name, metadata=metadata) for name, metadata in kept.protocols],
            session_timeout_ms=kept.session_timeout_ms,
            rebalance_timeout_ms=kept.rebalance_timeout_ms,
        )
        member.assignment = kept.assignment
        member.is_new = False
        group.add(member)
    if group.members:
        group.protocol_name = record.protocol_name
        if record.leader in group.members:
            group.leader = record.leader
        group.state = GroupState.STABLE  # not a transition: the group was Stable when kept
    return group
