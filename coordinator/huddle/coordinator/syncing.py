"""SyncGroup: a member asks for its assignment in the generation it joined. In Stable it is
answered at once; while the group completes its rebalance the request is held until the
leader's SyncGroup brings the assignment (``Rebalances.store_assignment``), which answers
every held one.
"""

from __future__ import annotations

from huddle.coordinator.answers import sync_error, sync_response
from huddle.coordinator.effects import Effects, Peer
from huddle.coordinator.group import Group
from huddle.coordinator.rebalance import Rebalances
from huddle.coordinator.sessions import E, S, Sessions
from huddle.coordinator.values import Refusal
from huddle.protocol.messages import SyncGroupRequest


class Syncs:
    def __init__(self, sessions: Sessions, rebalances: Rebalances) -> None:
        self.sessions = sessions
        self.rebalances = rebalances
        self.timers = sessions.timers

    def sync(self, fx: Effects, conn: Peer, cid: int, req: SyncGroupRequest) -> None:
        waiter = (conn.conn_id, cid)
        found = self.sessions.check_member(
            req.group_id, req.member_id, req.group_instance_id, req.generation_id
        )
        if isinstance(found, Refusal):
            fx.reply(waiter, sync_error(found.code, found.message))
            return
        group, member = found
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol_name
        ):
            fx.reply(
                waiter,
                sync_error(
                    E.INCONSISTENT_GROUP_PROTOCOL,
                    f"group uses {group.protocol_type}/{group.protocol_name}",
                ),
            )
            return
        gone = self.sessions.follow(member, conn)
        if gone is not None:
            fx.reply(waiter, sync_error(gone.code, gone.message))
            return
        self.sessions.touch(fx, member)
        if group.is_(S.PREPARING_REBALANCE):
            fx.reply(waiter, sync_error(E.REBALANCE_IN_PROGRESS, "the group is rebalancing"))
        elif group.is_(S.STABLE):
            self.synced(group, member.member_id)
            fx.reply(waiter, sync_response(group, member))
        else:  # CompletingRebalance: hold until the leader's assignment arrives
            if member.sync_waiter is not None:
                fx.reply(
                    member.sync_waiter,
                    sync_error(E.REBALANCE_IN_PROGRESS, "superseded by a newer SyncGroup"),
                )
            member.sync_waiter = waiter
            self.synced(group, member.member_id)
            if member.member_id == group.leader:
                self.rebalances.store_assignment(fx, group, req)

    def synced(self, group: Group, member_id: str) -> None:
        """The member has its SyncGroup in: the sync phase waits for it no longer."""
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self.timers.cancel(group.sync_key)
