"""Heartbeat: a member says it is alive. The hottest request the coordinator serves: it is
answered without building an ``Effects``, and a heartbeat that is in order takes a short
path. While the group rebalances the answer is REBALANCE_IN_PROGRESS: join again.
"""

from __future__ import annotations

from huddle.coordinator.effects import Outgoing, Peer
from huddle.coordinator.sessions import E, S, Sessions
from huddle.coordinator.values import Refusal
from huddle.protocol.messages import HeartbeatRequest, HeartbeatResponse, Reply


class Heartbeats:
    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions
        self.groups = sessions.groups
        self.timers = sessions.timers

    def heartbeat(self, conn: Peer, cid: int, req: HeartbeatRequest, now: float) -> Outgoing:
        """A heartbeat that is in order (known member, same instance id, current generation)
        takes the short path; anything else goes through the full validation for its exact
        error."""
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
            checked = self.sessions.check_member(
                req.group_id, req.member_id, req.group_instance_id, req.generation_id
            )
            if isinstance(checked, Refusal):
                response = HeartbeatResponse(error_code=checked.code, error_message=checked.message)
                return conn.conn_id, Reply(correlation_id=cid, response=response)
            group, member = checked
        if member.conn_id != conn.conn_id:
            gone = self.sessions.follow(member, conn)
            if gone is not None:
                response = HeartbeatResponse(error_code=gone.code, error_message=gone.message)
                return conn.conn_id, Reply(correlation_id=cid, response=response)
        self.timers.extend(member.session_key, now + member.session_timeout_ms)
        member.overdue_since = None
        response = _REBALANCING_HEARTBEAT if group.state is S.PREPARING_REBALANCE else _OK_HEARTBEAT
        return conn.conn_id, Reply(correlation_id=cid, response=response)


_OK_HEARTBEAT = HeartbeatResponse()
_REBALANCING_HEARTBEAT = HeartbeatResponse(
    error_code=E.REBALANCE_IN_PROGRESS, error_message="the group is rebalancing: join again"
)
