"""The core's error answers to JoinGroup and SyncGroup, and answering the requests it holds.

The core holds a member's JoinGroup until its join phase ends and its SyncGroup until the
leader's assignment arrives (``Member.join_waiter``, ``Member.sync_waiter``). When the
member goes (removed, fenced by a static rejoin, its group moved to another node, the
coordinator shutting down), ``refuse_held`` or ``answer_held`` answers whatever it holds,
once, and leaves it holding nothing.
"""

from __future__ import annotations

from huddle.coordinator.effects import Effects
from huddle.coordinator.group import Group, Member
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import JoinGroupResponse, Response, SyncGroupResponse

E = ErrorCode


def join_error(code: ErrorCode, message: str, member_id: str) -> JoinGroupResponse:
    return JoinGroupResponse(error_code=code, error_message=message, member_id=member_id)


def sync_error(code: ErrorCode, message: str) -> SyncGroupResponse:
    return SyncGroupResponse(error_code=code, error_message=message)


def inconsistent(member_id: str) -> JoinGroupResponse:
    return join_error(
        E.INCONSISTENT_GROUP_PROTOCOL,
        "protocol type or protocols do not match the group's",
        member_id,
    )


def refuse_held(fx: Effects, group: Group, member: Member, code: ErrorCode, message: str) -> None:
    """Answer the member's held JoinGroup and SyncGroup, if it holds any, with ``code``."""
    if member.join_waiter is None and member.sync_waiter is None:
        return
    answer_held(
        fx, group, member, join_error(code, message, member.member_id), sync_error(code, message)
    )


def answer_held(fx: Effects, group: Group, member: Member, join: Response, sync: Response) -> None:
    """Answer the member's held JoinGroup with ``join`` and its held SyncGroup with
    ``sync`` (each only if held); it holds neither after."""
    if member.join_waiter is not None:
        fx.reply(member.join_waiter, join)
        group.set_join_waiter(member, None)
    if member.sync_waiter is not None:
        fx.reply(member.sync_waiter, sync)
        member.sync_waiter = None


def sync_response(group: Group, member: Member) -> SyncGroupResponse:
    """The member's assignment in the group's current generation."""
    return SyncGroupResponse(
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        assignment=member.assignment,
    )
