"""The group membership state machine: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, and
the deadlines that drive them (join phase, pending sync, sessions, pending member ids,
disconnect grace). Sans-IO: every entry point takes an ``Effects`` carrying ``now`` and
collects the frames to send into it.

The rules are those of Kafka's classic group coordinator (docs/coordinator.md sections 1
and 3), plus two of huddle's own: rebalance notices and the disconnect grace. They are
spread over a chain of small classes: ``Sessions`` (bookkeeping) <- ``Rebalancing`` (join
and sync phases) <- ``Joining`` (JoinGroup) <- ``Membership`` (the rest, and the entry
point for deadlines and closed connections).
"""

from __future__ import annotations

from collections.abc import Callable

from huddle.coordinator.effects import Effects, Outgoing, Peer
from huddle.coordinator.group import Member
from huddle.coordinator.joining import Joining
from huddle.coordinator.sessions import E, S, uuid_member_id
from huddle.coordinator.values import (
    Deadline,
    DisconnectGraceEnds,
    JoinPhaseEnds,
    PendingMemberExpires,
    Refusal,
    RestartFenceEnds,
    SessionExpires,
    SyncPhaseEnds,
)
from huddle.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    LeaveGroupMemberResult,
    LeaveGroupRequest,
    LeaveGroupResponse,
    Reply,
)

__all__ = ["Membership", "uuid_member_id"]

UNREAD_RECHECK_MS = 100  # a session that ended with input unread is looked at again then


class Membership(Joining):
    # --- Heartbeat -------------------------------------------------------------------

    def heartbeat(self, conn: Peer, cid: int, req: HeartbeatRequest, now: float) -> Outgoing:
        """The hottest request: answered without building an ``Effects``. A heartbeat that
        is in order (known member, same instance id, current generation) takes the short
        path; anything else goes through the full validation for its exact error."""
        group = self.groups.get(req.group_id)
        member = group.members.get(req.member_id) if group is not None else None
        if not (
            member is not None
            and group is not None
            and member.instance_id == req.group_instance_id
            and req.generation_id == group.generation
            and group.state is not S.DEAD
        ):
            # The full validation, for its exact error; it also accepts what the short path
            # does not check for (a static member that does not name its instance id: Kafka
            # checks the instance id only when one is given).
            checked = self._validate_member_request(
                req.group_id, req.member_id, req.group_instance_id, req.generation_id
            )
            if isinstance(checked, Refusal):
                response = HeartbeatResponse(error_code=checked.code, error_message=checked.message)
                return conn.conn_id, Reply(correlation_id=cid, response=response)
            group, member = checked
        if member.conn_id != conn.conn_id:
            gone = self.follow(member, conn)
            if gone is not None:
                response = HeartbeatResponse(error_code=gone.code, error_message=gone.message)
                return conn.conn_id, Reply(correlation_id=cid, response=response)
        self.timers.extend(member.session_key, now + member.session_timeout_ms)
        member.overdue_since = None
        response = _REBALANCING_HEARTBEAT if group.state is S.PREPARING_REBALANCE else _OK_HEARTBEAT
        return conn.conn_id, Reply(correlation_id=cid, response=response)

    # --- LeaveGroup ------------------------------------------------------------------

    def leave(self, fx: Effects, conn: Peer, cid: int, req: LeaveGroupRequest) -> None:
        waiter = (conn.conn_id, cid)
        if not req.members:
            fx.reply(
                waiter,
                LeaveGroupResponse(error_code=E.INVALID_REQUEST, error_message="no members named"),
            )
            return
        group = self.groups.get(req.group_id)
        if group is not None and group.is_(S.DEAD):
            fx.reply(waiter, LeaveGroupResponse(error_code=E.COORDINATOR_NOT_AVAILABLE))
            return
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
                    reason = ident.reason or "left the group"
                    self._remove_and_update(fx, group, group.members[owner], reason)
                    code = E.NONE
            elif member_id in group.pending:
                self._drop_pending(fx, group, member_id, "left the group")
                code = E.NONE
            elif member_id in group.members:
                reason = ident.reason or "left the group"
                self._remove_and_update(fx, group, group.members[member_id], reason)
                code = E.NONE
            results.append(
                LeaveGroupMemberResult(
                    member_id=member_id, group_instance_id=ident.group_instance_id, error_code=code
                )
            )
        fx.reply(waiter, LeaveGroupResponse(members=results))
        if group is not None:
            self.collect(group)

    # --- deadlines -------------------------------------------------------------------

    def expire(
        self, fx: Effects, key: Deadline, unread: Callable[[int], bool] | None = None
    ) -> None:
        """The deadline ``key`` has passed. ``unread``: see ``Coordinator.advance``."""
        if type(key) is RestartFenceEnds:
            self.fence_served()
            return
        group = self.groups.get(key.group_id)
        if group is None:
            return
        match key:
            case JoinPhaseEnds():
                self._join_deadline(fx, group)
            case SyncPhaseEnds():
                self._sync_deadline(fx, group)
            case PendingMemberExpires(member_id=member_id):
                if member_id in group.pending:
                    self._drop_pending(fx, group, member_id, "did not join again in time")
            case SessionExpires(member_id=member_id):
                member = group.members.get(member_id)
                if member is not None and self._unread_grace(fx, member, unread):
                    # Its connection's input is not all read: a heartbeat may be in it.
                    self.timers.set(member.session_key, fx.now + UNREAD_RECHECK_MS)
                elif member is not None:
                    awaiting = member.join_waiter is not None or member.sync_waiter is not None
                    if awaiting and not member.is_new:
                        # It is waiting on us (Kafka's hasSatisfiedHeartbeat): keep it until
                        # the phase it waits on ends.
                        self.timers.set(member.session_key, fx.now + member.session_timeout_ms)
                    else:
                        self._remove_and_update(fx, group, member, "session timeout")
            case DisconnectGraceEnds(member_id=member_id):
                if member_id in group.pending:
                    self._drop_pending(fx, group, member_id, "connection closed")
                elif member_id in group.members:
                    gone = group.members[member_id]
                    self._remove_and_update(fx, group, gone, "connection closed")
        self.collect(group)

    @staticmethod
    def _unread_grace(fx: Effects, member: Member, unread: Callable[[int], bool] | None) -> bool:
        """Whether a session that ended may wait for its connection's unread input: only
        while there is some, and for one more session timeout at most (a connection kept
        busy by other traffic must not keep a silent member alive)."""
        if unread is None or not unread(member.conn_id):
            return False
        if member.overdue_since is None:
            member.overdue_since = fx.now
        return fx.now - member.overdue_since < member.session_timeout_ms

    def connection_closed(self, fx: Effects, conn_id: int) -> None:
        """Members that spoke through ``conn_id`` get the disconnect grace, if enabled;
        static members keep session-timeout semantics."""
        keys = self.by_conn.pop(conn_id, set())
        grace = self.config.disconnect_grace_ms
        if grace < 0:
            return
        for group_id, member_id in keys:
            group = self.groups.get(group_id)
            if group is None:
                continue
            member = group.members.get(member_id)
            if member is not None and member.instance_id is None and member.conn_id == conn_id:
                self.timers.set(member.grace_key, fx.now + grace)
            elif member is None and member_id in group.pending:
                self.timers.set(DisconnectGraceEnds(group_id, member_id), fx.now + grace)


_OK_HEARTBEAT = HeartbeatResponse()
_REBALANCING_HEARTBEAT = HeartbeatResponse(
    error_code=E.REBALANCE_IN_PROGRESS, error_message="the group is rebalancing: join again"
)
