"""LeaveGroup: members leave (by member id, or a static member by its instance id, KIP-345)
and the group moves on at once (``Rebalances.remove``) instead of waiting for their
sessions to end. A member id handed out and not used yet (KIP-394) can leave too.
"""

from __future__ import annotations

from huddle.coordinator.effects import Effects, Peer
from huddle.coordinator.rebalance import Rebalances
from huddle.coordinator.sessions import E, S, Sessions
from huddle.protocol.messages import LeaveGroupMemberResult, LeaveGroupRequest, LeaveGroupResponse


class Leaves:
    def __init__(self, sessions: Sessions, rebalances: Rebalances) -> None:
        self.sessions = sessions
        self.rebalances = rebalances

    def leave(self, fx: Effects, conn: Peer, cid: int, req: LeaveGroupRequest) -> None:
        waiter = (conn.conn_id, cid)
        if not req.group_id:  # as Kafka's GroupCoordinatorService, before the group
            refusal = LeaveGroupResponse(
                error_code=E.INVALID_GROUP_ID, error_message="group id must not be empty"
            )
            fx.reply(waiter, refusal)
            return
        if not req.members:
            fx.reply(
                waiter,
                LeaveGroupResponse(error_code=E.INVALID_REQUEST, error_message="no members named"),
            )
            return
        group = self.sessions.groups.get(req.group_id)
        if group is not None and group.is_(S.DEAD):
            fx.reply(waiter, LeaveGroupResponse(error_code=E.COORDINATOR_NOT_AVAILABLE))
            return
        remove = self.rebalances.remove
        results = []
        for ident in req.members:
            code = E.UNKNOWN_MEMBER_ID
            member_id = ident.member_id
            if group is None:
                pass
            elif ident.group_instance_id is not None:
                owner = group.static.get(ident.group_instance_id)
                if owner is not None and ident.member_id and ident.member_id != owner:
                    code = E.FENCED_INSTANCE_ID
                elif owner is not None:
                    member_id = owner
                    remove(fx, group, group.members[owner], ident.reason or "left the group")
                    code = E.NONE
            elif member_id in group.pending:
                self.rebalances.drop_pending(fx, group, member_id, "left the group")
                code = E.NONE
            elif member_id in group.members:
                remove(fx, group, group.members[member_id], ident.reason or "left the group")
                code = E.NONE
            results.append(
                LeaveGroupMemberResult(
                    member_id=member_id, group_instance_id=ident.group_instance_id, error_code=code
                )
            )
        fx.reply(waiter, LeaveGroupResponse(members=results))
        if group is not None:
            self.sessions.collect(group)
