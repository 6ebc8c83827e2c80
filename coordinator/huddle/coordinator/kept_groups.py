"""Groups kept across a change of coordinator, as Kafka keeps its GroupMetadata records.

In a cluster, the node owning a group's shard writes the group at the end of each rebalance
(``group_record``): its generation, protocol, leader and members with their subscriptions
and assignments. A node that takes the shard over loads it (``loaded_group``) as Stable in
that generation, each member with a fresh session: members that find the new coordinator
go on heartbeating, with no rebalance and nothing revoked.
"""

from __future__ import annotations

from huddle.coordinator.group import Group, Member
from huddle.coordinator.records import GroupRecord, KeptMember
from huddle.coordinator.state import GroupState
from huddle.protocol.messages import Protocol

NO_CONNECTION = 0  # connection ids start at 1: a loaded member speaks through none yet


def group_record(group: Group) -> GroupRecord:
    """The group as it is now (Stable after a rebalance, or just emptied)."""
    members = [
        KeptMember(
            member_id=m.member_id,
            instance_id=m.instance_id,
            client_id=m.client_id,
            host=m.host,
            session_timeout_ms=m.session_timeout_ms,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            protocols=[(p.name, p.metadata) for p in m.protocols],
            assignment=m.assignment,
            principal=m.principal,
        )
        for m in group.members.values()
    ]
    return GroupRecord(
        group_id=group.group_id,
        generation=group.generation,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        leader=group.leader,
        members=members,
    )


def loaded_group(record: GroupRecord) -> Group:
    """A group rebuilt from its record: Stable in its generation when it has members,
    Empty otherwise. Sessions are the caller's to start."""
    group = Group(record.group_id)
    group.generation = record.generation
    group.protocol_type = record.protocol_type
    for kept in record.members:
        member = Member(
            record.group_id,
            kept.member_id,
            kept.instance_id,
            client_id=kept.client_id,
            principal=kept.principal,
            host=kept.host,
            conn_id=NO_CONNECTION,
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
