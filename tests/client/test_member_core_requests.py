"""The member core builds every group request, the SyncGroup included: what a leader's and
a follower's carry, for the generation they joined."""

from __future__ import annotations

from huddle.client.assignors.range import RangeAssignor
from huddle.client.member_core import MemberConfig, MemberCore, Next
from huddle.protocol.messages import (
    JoinGroupMember,
    JoinGroupResponse,
    SyncGroupAssignment,
)


def joined_core(leader: str) -> MemberCore:
    core = MemberCore(
        MemberConfig(group_id="g", topics=["t"], instance_id="i-1"), [RangeAssignor()]
    )
    core.join_request()
    step = core.on_join(
        JoinGroupResponse(
            generation_id=4,
            protocol_name="range",
            leader=leader,
            member_id="m-1",
            members=[JoinGroupMember(member_id="m-1", metadata=b"")],
        )
    )
    assert step.next is Next.SYNC
    return core


def test_a_leader_s_sync_request_carries_every_assignment_in_its_generation() -> None:
    core = joined_core(leader="m-1")
    assignments = [SyncGroupAssignment(member_id="m-1", assignment=b"x")]
    request = core.sync_request(assignments)
    assert (request.group_id, request.generation_id, request.member_id) == ("g", 4, "m-1")
    assert request.group_instance_id == "i-1"
    assert request.protocol_name == "range"
    assert request.assignments == assignments


def test_a_follower_s_sync_request_carries_no_assignment() -> None:
    request = joined_core(leader="m-2").sync_request()
    assert request.generation_id == 4
    assert request.assignments == []
