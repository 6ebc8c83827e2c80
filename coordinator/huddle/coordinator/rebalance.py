"""The rebalance phases: the join phase (its deadline, the initial delay, completion into a
new generation), the sync phase (the leader's assignment, the pending-sync deadline), moving
a group on when a member goes, and serving a kept group (which may need a rebalance).

``Rebalances`` is the part of the core the request rules (``joining``, ``syncing``,
``leaving``) and ``deadlines`` call to move a group between phases; it is given the
``Sessions`` part and keeps no state of its own.
"""

from __future__ import annotations

from huddle.coordinator.answers import sync_error, sync_response
from huddle.coordinator.effects import Effects
from huddle.coordinator.group import Group, Member
from huddle.coordinator.sessions import E, S, Sessions, log
from huddle.coordinator.storage.records import GroupRecord
from huddle.protocol.messages import JoinGroupResponse, RebalanceStarted, SyncGroupRequest


class Rebalances:
    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions
        self.timers = sessions.timers
        self.config = sessions.config

    # --- a kept group loaded -----------------------------------------------------------

    def load_group(self, record: GroupRecord, now: float) -> Group:
        """Serve a kept group: Stable in its generation, every member with a fresh session
        (they find this node and go on heartbeating). Replaces a group of the same id."""
        group = self.sessions.build_group(record, now)
        self.serve_loaded(Effects(now), group)
        return group

    def serve_loaded(self, fx: Effects, group: Group) -> None:
        """``Sessions.start_sessions``; then, as Kafka's ``onGroupLoaded``, a Stable group with
        more members than ``max_group_size`` (the limit was lowered since it was kept)
        starts a rebalance: in its join phase, the members over the limit are turned away.
        So does one whose record says members were removed after its assignment (their
        partitions belong to nobody). Such a record with no member left shows a group
        that has been Empty since it was loaded (not since it went Stable: its offsets
        expire from now), and is kept so. Members not heard from yet speak through no
        connection: nothing is sent to them."""
        sessions = self.sessions
        sessions.start_sessions(fx, group)
        kept = group.kept
        removed = kept is not None and kept.members_removed
        if group.is_(S.EMPTY) and removed and not group.members:
            group.state_ms = sessions.wall_ms(fx.now)
            sessions.keep(group)
            return
        if not group.is_(S.STABLE):  # already rebalancing: it started since the load
            return
        limit = self.config.max_group_size
        if limit and group.size > limit:
            # the text before ':' labels huddle_rebalances_total: no numbers in it
            reason = f"loaded over the size limit: {group.size} members, the limit is {limit}"
            self.prepare_rebalance(fx, group, reason)
        elif removed:
            self.prepare_rebalance(fx, group, "loaded with members removed since its assignment")

    # --- the join phase --------------------------------------------------------------

    def prepare_rebalance(self, fx: Effects, group: Group, reason: str) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            group.assignments_cleared = True
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
                    self.sessions.touch(fx, member)
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
        if self.sessions.observer is not None:
            self.sessions.observer.rebalance_started(group.group_id, reason, fx.now)
        if self.config.rebalance_notices and previous in (S.STABLE, S.COMPLETING_REBALANCE):
            notice = RebalanceStarted(
                group_id=group.group_id, generation_id=group.generation, reason=reason
            )
            for conn_id in {m.conn_id for m in group.members.values() if m.join_waiter is None}:
                fx.notify(conn_id, notice)
        self.try_complete_join(fx, group)

    def try_complete_join(self, fx: Effects, group: Group) -> None:
        ready = group.is_(S.PREPARING_REBALANCE) and not group.initial_delay_active
        if ready and group.all_joined() and not self.sessions.fenced(fx, group):
            self.complete_join(fx, group)

    def join_phase_ends(self, fx: Effects, group: Group) -> None:
        if not group.is_(S.PREPARING_REBALANCE):
            return
        if group.initial_delay_active and group.new_member_added and group.initial_remaining_ms:
            group.new_member_added = False
            delay = min(group.initial_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - delay, 0)
            self.timers.set(group.join_key, fx.now + delay)
            log.info("initial_delay_extended", group_id=group.group_id, delay_ms=delay)
            return
        if not self.sessions.fenced(fx, group):
            self.complete_join(fx, group)

    def complete_join(self, fx: Effects, group: Group) -> None:
        self.timers.cancel(group.join_key)
        group.initial_delay_active = False
        for member in [m for m in group.members.values() if m.join_waiter is None]:
            if member.instance_id is None:
                self.sessions.drop(fx, group, member, "did not rejoin in time")
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
        group.topics_version = self.sessions.topics_version
        if self.sessions.observer is not None:
            self.sessions.observer.join_completed(group.group_id, fx.now)
            if group.is_(S.EMPTY):  # nobody rejoined: the rebalance ends here
                self.sessions.observer.rebalance_completed(group.group_id, fx.now)
        if group.is_(S.EMPTY):
            group.state_ms = self.sessions.wall_ms(fx.now)  # offsets expire from when it emptied
            self.sessions.keep(group)
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

    # --- the sync phase --------------------------------------------------------------

    def store_assignment(self, fx: Effects, group: Group, req: SyncGroupRequest) -> None:
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
                fx.reply(member.sync_waiter, sync_response(group, member))
                member.sync_waiter = None
                self.sessions.touch(fx, member)  # its session starts again with the answer
        group.transition(S.STABLE)
        group.assignments_cleared = False
        group.state_ms = self.sessions.wall_ms(fx.now)
        self.sessions.keep(group)
        if self.sessions.observer is not None:
            self.sessions.observer.rebalance_completed(group.group_id, fx.now)
        log.info(
            "assignment_stored",
            group_id=group.group_id,
            generation=group.generation,
            members=group.size,
        )

    def sync_phase_ends(self, fx: Effects, group: Group) -> None:
        if not group.is_(S.COMPLETING_REBALANCE, S.STABLE) or not group.pending_sync:
            return
        late = sorted(group.pending_sync)
        log.warning(
            "sync_timeout", group_id=group.group_id, generation=group.generation, member_ids=late
        )
        for member_id in late:
            member = group.members.get(member_id)
            if member is not None:
                self.sessions.drop(fx, group, member, "did not sync in time")
        self.prepare_rebalance(fx, group, f"members did not sync in time: {late}")

    # --- removal ---------------------------------------------------------------------

    def remove(self, fx: Effects, group: Group, member: Member, reason: str) -> None:
        """Remove a member as LeaveGroup does, and move the group on."""
        self.sessions.drop(fx, group, member, reason)
        if group.is_(S.STABLE, S.COMPLETING_REBALANCE):
            self.prepare_rebalance(fx, group, f"member left: {member.member_id} ({reason})")
        elif group.is_(S.PREPARING_REBALANCE):
            self.try_complete_join(fx, group)

    def drop_pending(self, fx: Effects, group: Group, member_id: str, reason: str) -> None:
        self.sessions.drop_pending(group, member_id, reason)
        self.try_complete_join(fx, group)
