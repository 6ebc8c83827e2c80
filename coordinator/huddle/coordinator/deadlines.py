"""What a deadline that passed does: the join phase or the sync phase ends, a member id
handed out goes unused, a session ends, a closed connection's disconnect grace ends, the
restart fence is over. ``Coordinator.advance`` hands each deadline due to ``expire``.
"""

from __future__ import annotations

from collections.abc import Callable

from huddle.coordinator.effects import Effects
from huddle.coordinator.group import Member
from huddle.coordinator.rebalance import Rebalances
from huddle.coordinator.sessions import Sessions
from huddle.coordinator.values import (
    Deadline,
    DisconnectGraceEnds,
    JoinPhaseEnds,
    PendingMemberExpires,
    RestartFenceEnds,
    SessionExpires,
    SyncPhaseEnds,
)

UNREAD_RECHECK_MS = 100  # a session that ended with input unread is looked at again then


class Deadlines:
    def __init__(self, sessions: Sessions, rebalances: Rebalances) -> None:
        self.sessions = sessions
        self.rebalances = rebalances
        self.timers = sessions.timers

    def expire(
        self, fx: Effects, key: Deadline, unread: Callable[[int], bool] | None = None
    ) -> None:
        """The deadline ``key`` has passed. ``unread``: see ``Coordinator.advance``."""
        sessions, rebalances = self.sessions, self.rebalances
        if type(key) is RestartFenceEnds:
            sessions.fence_served()
            return
        group = sessions.groups.get(key.group_id)
        if group is None:
            return
        match key:
            case JoinPhaseEnds():
                rebalances.join_phase_ends(fx, group)
            case SyncPhaseEnds():
                rebalances.sync_phase_ends(fx, group)
            case PendingMemberExpires(member_id=member_id):
                if member_id in group.pending:
                    rebalances.drop_pending(fx, group, member_id, "did not join again in time")
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
                        rebalances.remove(fx, group, member, "session timeout")
            case DisconnectGraceEnds(member_id=member_id):
                if member_id in group.pending:
                    rebalances.drop_pending(fx, group, member_id, "connection closed")
                elif member_id in group.members:
                    gone = group.members[member_id]
                    rebalances.remove(fx, group, gone, "connection closed")
        sessions.collect(group)

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
