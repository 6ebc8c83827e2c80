"""The rebalance phases: the join phase (its deadline, the initial delay, completion into a
new generation), the sync phase (the leader's assignment, the pending-sync deadline), and
moving a group on when a member goes.
"""

from __future__ import annotations

from huddle.coordinator.answers import sync_error
from huddle.coordinator.effects import Effects, Peer
from huddle.coordinator.group import Group, Member
from huddle.coordinator.sessions import E, S, Sessions, log
from huddle.coordinator.values import Refusal
from huddle.protocol.messages import (
    JoinGroupResponse,
    RebalanceStarted,
    SyncGroupRequest,
    SyncGroupResponse,
)


class Rebalancing(Sessions):
    # --- a kept group loaded -----------------------------------------------------------

    def serve_loaded(self, fx: Effects, group: Group) -> None:
        """``Sessions.serve_loaded``; then, as Kafka's ``onGroupLoaded``, a Stable group with
        more members than ``max_group_size`` (the limit was lowered since it was kept)
        starts a rebalance: in its join phase, the members over the limit are turned away.
        So does one whose record says members were removed after its assignment (their
        partitions belong to nobody). Such a record with no member left shows a group
        that has been Empty since it was loaded (not since it went Stable: its offsets
        expire from now), and is kept so. Members not heard from yet speak through no
        connection: nothing is sent to them."""
        super().serve_loaded(fx, group)
        kept = group.kept
        removed = kept is not None and kept.members_removed
        if group.is_(S.EMPTY) and removed and not group.members:
            group.state_ms = self.wall_ms(fx.now)
            self._keep(group)
            return
        if not group.is_(S.STABLE):  # already rebalancing: it started since the load
            return
        limit = self.config.max_group_size
        if limit and group.size > limit:
            # the text before ':' labels huddle_rebalances_total: no numbers in it
            reason = f"loaded over the size limit: {group.size} members, the limit is {limit}"
            self._prepare_rebalance(fx, group, reason)
        elif removed:
            self._prepare_rebalance(fx, group, "loaded with members removed since its assignment")

    # --- the join phase --------------------------------------------------------------

    def _prepare_rebalance(self, fx: Effects, group: Group, reason: str) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
                if member.sync_waiter is not None:
                    fx.reply(
                        member.sync_waiter,
                        sync_error(E.REBALANCE_IN_PROGRESS, f"a new rebalance began: {reason}"),
                    )
                    member.sync_waiter = None
                    # it could not heartbeat while it waited: its session starts again now
                    # (Kafka's propagateAssignment), or it would be expired before it rejoins
                    self._touch(fx, member)
        self.timers.cancel(group.sync_key)
        group.pending_sync.clear()
        previous = group.state
        delay = self.config.initial_rebalance_delay_ms
        group.initial_delay_active = previous is S.EMPTY and delay > 0
        if group.initial_delay_active:
            group.initial_delay_ms = delay
            group.initial_remaining_ms = max(group.rebalance_timeout_ms - delay, 0)
            group.new_member_added = False
            self.timers.set(group.join_key, fx.now + delay)
        else:
            self.timers.set(group.join_key, fx.now + group.rebalance_timeout_ms)
        group.transition(S.PREPARING_REBALANCE)
        log.info(
            "rebalance_started", group_id=group.group_id, generation=group.generation, reason=reason
        )
        if self.observer is not None:
            self.observer.rebalance_started(group.group_id, reason, fx.now)
        if self.config.rebalance_notices and previous in (S.STABLE, S.COMPLETING_REBALANCE):
            notice = RebalanceStarted(
                group_id=group.group_id, generation_id=group.generation, reason=reason
            )
            for conn_id in {m.conn_id for m in group.members.values() if m.join_waiter is None}:
                fx.notify(conn_id, notice)
        self._try_complete_join(fx, group)

    def _try_complete_join(self, fx: Effects, group: Group) -> None:
        ready = group.is_(S.PREPARING_REBALANCE) and not group.initial_delay_active
        if ready and group.all_joined() and not self.fenced(fx, group):
            self._complete_join(fx, group)

    def _join_deadline(self, fx: Effects, group: Group) -> None:
        if not group.is_(S.PREPARING_REBALANCE):
            return
        if group.initial_delay_active and group.new_member_added and group.initial_remaining_ms:
            group.new_member_added = False
            delay = min(group.initial_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - delay, 0)
            self.timers.set(group.join_key, fx.now + delay)
            log.info("initial_delay_extended", group_id=group.group_id, delay_ms=delay)
            return
        if not self.fenced(fx, group):
            self._complete_join(fx, group)

    def _complete_join(self, fx: Effects, group: Group) -> None:
        self.timers.cancel(group.join_key)
        group.initial_delay_active = False
        for member in [m for m in group.members.values() if m.join_waiter is None]:
            if member.instance_id is None:
                self._drop(fx, group, member, "did not rejoin in time")
        joined = [m for m in group.members.values() if m.join_waiter is not None]
        if group.members and not joined:
            # Only static members that have not rejoined remain: wait for them or their
            # session expiry rather than form a generation of nobody.
            self.timers.set(group.join_key, fx.now + max(group.rebalance_timeout_ms, 1))
            log.warning("join_phase_extended", group_id=group.group_id, members=group.size)
            return
        if group.leader is None or group.members[group.leader].join_waiter is None:
            group.leader = joined[0].member_id if joined else None
        group.next_generation()
        group.topics_version = self.topics_version
        if self.observer is not None:
            self.observer.join_completed(group.group_id, fx.now)
            if group.is_(S.EMPTY):  # nobody rejoined: the rebalance ends here
                self.observer.rebalance_completed(group.group_id, fx.now)
        if group.is_(S.EMPTY):
            group.state_ms = self.wall_ms(fx.now)  # offsets expire from when it emptied
            self._keep(group)
        log.info(
            "generation_started",
            group_id=group.group_id,
            generation=group.generation,
            protocol_name=group.protocol_name,
            leader=group.leader,
            members=group.size,
        )
        if not joined:
            return
        members_list = group.join_members()
        for member in joined:
            waiter = member.join_waiter
            assert waiter is not None
            is_leader = member.member_id == group.leader
            fx.reply(
                waiter,
                JoinGroupResponse(
                    generation_id=group.generation,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=group.leader or "",
                    member_id=member.member_id,
                    members=members_list if is_leader else [],
                    held_ms=int(fx.now - member.join_received_at),
                ),
            )
            group.set_join_waiter(member, None)
            member.is_new = False
            self.timers.set(member.session_key, fx.now + member.session_timeout_ms)
        group.pending_sync = {m.member_id for m in joined}
        self.timers.set(group.sync_key, fx.now + max(group.rebalance_timeout_ms, 1))

    # --- SyncGroup -------------------------------------------------------------------

    def sync(self, fx: Effects, conn: Peer, cid: int, req: SyncGroupRequest) -> None:
        waiter = (conn.conn_id, cid)
        found = self._validate_member_request(
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
        gone = self.follow(member, conn)
        if gone is not None:
            fx.reply(waiter, sync_error(gone.code, gone.message))
            return
        self._touch(fx, member)
        if group.is_(S.PREPARING_REBALANCE):
            fx.reply(waiter, sync_error(E.REBALANCE_IN_PROGRESS, "the group is rebalancing"))
        elif group.is_(S.STABLE):
            self._synced(group, member.member_id)
            fx.reply(waiter, self._sync_response(group, member))
        else:  # CompletingRebalance: hold until the leader's assignment arrives
            if member.sync_waiter is not None:
                fx.reply(
                    member.sync_waiter,
                    sync_error(E.REBALANCE_IN_PROGRESS, "superseded by a newer SyncGroup"),
                )
            member.sync_waiter = waiter
            self._synced(group, member.member_id)
            if member.member_id == group.leader:
                self._store_assignment(fx, group, req)

    def _store_assignment(self, fx: Effects, group: Group, req: SyncGroupRequest) -> None:
        given = {a.member_id: a.assignment for a in req.assignments}
        unknown = sorted(set(given) - set(group.members))
        if unknown:
            log.warning(
                "assignment_for_unknown_members",
                group_id=group.group_id,
                generation=group.generation,
                member_ids=unknown,
            )
        for member in group.members.values():
            member.assignment = given.get(member.member_id, b"")
        for member in group.members.values():
            if member.sync_waiter is not None:
                fx.reply(member.sync_waiter, self._sync_response(group, member))
                member.sync_waiter = None
                self._touch(fx, member)  # its session starts again with the answer
        group.transition(S.STABLE)
        group.state_ms = self.wall_ms(fx.now)
        self._keep(group)
        if self.observer is not None:
            self.observer.rebalance_completed(group.group_id, fx.now)
        log.info(
            "assignment_stored",
            group_id=group.group_id,
            generation=group.generation,
            members=group.size,
        )

    def _synced(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self.timers.cancel(group.sync_key)

    def _sync_deadline(self, fx: Effects, group: Group) -> None:
        if not group.is_(S.COMPLETING_REBALANCE, S.STABLE) or not group.pending_sync:
            return
        late = sorted(group.pending_sync)
        log.warning(
            "sync_timeout", group_id=group.group_id, generation=group.generation, member_ids=late
        )
        for member_id in late:
            member = group.members.get(member_id)
            if member is not None:
                self._drop(fx, group, member, "did not sync in time")
        self._prepare_rebalance(fx, group, f"members did not sync in time: {late}")

    @staticmethod
    def _sync_response(group: Group, member: Member) -> SyncGroupResponse:
        return SyncGroupResponse(
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            assignment=member.assignment,
        )

    # --- removal ---------------------------------------------------------------------

    def _remove_and_update(self, fx: Effects, group: Group, member: Member, reason: str) -> None:
        """Remove a member as LeaveGroup does, and move the group on."""
        self._drop(fx, group, member, reason)
        if group.is_(S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(fx, group, f"member left: {member.member_id} ({reason})")
        elif group.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(fx, group)

    def _drop_pending(self, fx: Effects, group: Group, member_id: str, reason: str) -> None:
        self.drop_pending(group, member_id, reason)
        self._try_complete_join(fx, group)
