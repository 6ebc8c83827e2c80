"""The group membership state machine: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, and
the deadlines that drive them (join phase, pending sync, sessions, pending member ids,
disconnect grace). Sans-IO: every entry point takes an ``Effects`` carrying ``now`` and
collects the frames to send into it.

The rules are those of Kafka's classic group coordinator (shared/REFERENCE.md sections 1
and 3), plus two of huddle's own: rebalance notices and the disconnect grace.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable

import structlog

from coordinator.config import GroupConfig
from coordinator.effects import Effects, Peer, Waiter
from coordinator.group import Group, Member
from coordinator.state import GroupState
from coordinator.timers import TimerQueue
from protocol.errors import ErrorCode
from protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMemberResult,
    LeaveGroupRequest,
    LeaveGroupResponse,
    RebalanceStarted,
    SyncGroupRequest,
    SyncGroupResponse,
)

log = structlog.get_logger("huddle.membership")

E = ErrorCode
S = GroupState
MemberKey = tuple[str, str]  # (group_id, member_id)
Problem = tuple[ErrorCode, str]  # an error code and its message


def uuid_member_id(client_id: str) -> str:
    return f"{client_id or 'member'}-{uuid.uuid4()}"


class Membership:
    """Owns the groups, their deadlines, and which connection each member speaks through."""

    def __init__(
        self,
        config: GroupConfig,
        timers: TimerQueue,
        new_member_id: Callable[[str], str] = uuid_member_id,
    ) -> None:
        self.config = config
        self.timers = timers
        self.groups: dict[str, Group] = {}
        self.by_conn: dict[int, set[MemberKey]] = {}
        self._new_member_id = new_member_id

    # --- JoinGroup -------------------------------------------------------------------

    def join(self, fx: Effects, conn: Peer, cid: int, req: JoinGroupRequest) -> None:
        waiter = (conn.conn_id, cid)
        error = self._check_join_request(req)
        if error is not None:
            fx.reply(waiter, _join_error(error[0], error[1], req.member_id))
            return
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                fx.reply(waiter, _join_error(E.UNKNOWN_MEMBER_ID, "no such group", req.member_id))
                return
            group = self.groups[req.group_id] = Group(req.group_id)
        if group.is_(S.DEAD):
            fx.reply(waiter, _join_error(E.COORDINATOR_NOT_AVAILABLE, "group is dead", ""))
        elif not self._accepts(group, req.member_id):
            fx.reply(
                waiter,
                _join_error(
                    E.GROUP_MAX_SIZE_REACHED,
                    f"group has reached its maximum size of {self.config.max_group_size}",
                    req.member_id,
                ),
            )
            member = group.members.get(req.member_id)
            if member is not None:
                self._remove_and_update(fx, group, member, "turned away: group is full")
        elif not req.member_id:
            self._join_new(fx, group, conn, waiter, req)
        else:
            self._join_known(fx, group, conn, waiter, req)
        self.collect(group)

    def _check_join_request(self, req: JoinGroupRequest) -> Problem | None:
        cfg = self.config
        if not req.group_id:
            return E.INVALID_GROUP_ID, "group id must not be empty"
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return (
                E.INVALID_SESSION_TIMEOUT,
                f"session timeout {req.session_timeout_ms} ms is outside "
                f"[{cfg.min_session_timeout_ms}, {cfg.max_session_timeout_ms}]",
            )
        if not req.protocol_type or not req.protocols:
            return E.INCONSISTENT_GROUP_PROTOCOL, "protocol type and protocols must not be empty"
        names = [p.name for p in req.protocols]
        if len(set(names)) != len(names):
            return E.INVALID_REQUEST, f"protocol names repeat: {names}"
        if req.group_instance_id == "":
            return E.INVALID_REQUEST, "group instance id must be null or non-empty"
        return None

    def _accepts(self, group: Group, member_id: str) -> bool:
        limit = self.config.max_group_size
        if limit == 0 or group.is_(S.EMPTY, S.DEAD):
            return True
        member = group.members.get(member_id)
        if group.is_(S.PREPARING_REBALANCE):
            return (member is not None and member.join_waiter is not None) or (
                group.awaiting_join < limit
            )
        if member is not None:
            return True
        if member_id in group.pending:
            return group.size < limit
        return group.size + len(group.pending) < limit

    def _join_new(
        self, fx: Effects, group: Group, conn: Peer, waiter: Waiter, req: JoinGroupRequest
    ) -> None:
        if not group.supports(req.protocol_type, req.protocols):
            fx.reply(waiter, _inconsistent(""))
            return
        member_id = self._new_member_id(conn.client_id)
        instance = req.group_instance_id
        if instance is None:
            # KIP-394: hand out an id and have the member come back with it.
            group.pending.add(member_id)
            self._bind_key(conn.conn_id, (group.group_id, member_id))
            self.timers.set(("pending", group.group_id, member_id), fx.now + req.session_timeout_ms)
            log.info("member_id_required", group_id=group.group_id, member_id=member_id)
            fx.reply(
                waiter,
                _join_error(E.MEMBER_ID_REQUIRED, "join again with this member id", member_id),
            )
            return
        old_id = group.static.get(instance)
        if old_id is None:
            self._add_and_rebalance(fx, group, conn, waiter, member_id, req)
        else:
            self._replace_static(fx, group, group.members[old_id], conn, waiter, member_id, req)

    def _join_known(
        self, fx: Effects, group: Group, conn: Peer, waiter: Waiter, req: JoinGroupRequest
    ) -> None:
        member_id = req.member_id
        if member_id in group.pending and req.group_instance_id is None:
            group.pending.discard(member_id)
            self.timers.cancel(("pending", group.group_id, member_id))
            self.timers.cancel(("grace", group.group_id, member_id))
            self._unbind_key(conn.conn_id, (group.group_id, member_id))
            self._add_and_rebalance(fx, group, conn, waiter, member_id, req)
            return
        member = self.identify(group, member_id, req.group_instance_id)
        if not isinstance(member, Member):
            fx.reply(waiter, _join_error(member[0], member[1], member_id))
            return
        if not group.supports(req.protocol_type, req.protocols, member):
            fx.reply(waiter, _inconsistent(member_id))
            return
        self._bind(member, conn)
        self._touch(fx, member)
        unchanged = member.same_protocols(req.protocols)
        is_leader = member.member_id == group.leader
        if group.is_(S.PREPARING_REBALANCE):
            self._update_and_hold(fx, group, member, waiter, req)
            self._try_complete_join(fx, group)
        elif unchanged and (
            group.is_(S.COMPLETING_REBALANCE) or (group.is_(S.STABLE) and not is_leader)
        ):
            # Nothing new: answer with the current generation, no rebalance.
            fx.reply(waiter, self._join_response(group, member))
        else:
            reason = "leader rejoined" if is_leader else "metadata changed"
            self._update_and_hold(fx, group, member, waiter, req)
            self._prepare_rebalance(fx, group, f"{reason}: {member.member_id}")

    def identify(self, group: Group, member_id: str, instance_id: str | None) -> Member | Problem:
        """The member a request speaks for, or why it speaks for none (fencing first)."""
        if instance_id is not None:
            owner = group.static.get(instance_id)
            if owner is None:
                return E.UNKNOWN_MEMBER_ID, f"unknown static member {instance_id!r}"
            if owner != member_id:
                return (
                    E.FENCED_INSTANCE_ID,
                    f"instance {instance_id!r} now belongs to another member id",
                )
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in the group"
        return member

    def _add_and_rebalance(
        self,
        fx: Effects,
        group: Group,
        conn: Peer,
        waiter: Waiter,
        member_id: str,
        req: JoinGroupRequest,
    ) -> None:
        if not group.supports(req.protocol_type, req.protocols):
            fx.reply(waiter, _inconsistent(member_id))
            return
        member = Member(
            group.group_id,
            member_id,
            req.group_instance_id,
            client_id=conn.client_id,
            host=conn.host,
            conn_id=conn.conn_id,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=_rebalance_timeout(req),
        )
        group.add(member)
        group.set_join_waiter(member, waiter)
        self._bind_key(conn.conn_id, (group.group_id, member_id))
        self.timers.set(member.session_key, fx.now + self.config.new_member_join_timeout_ms)
        log.info(
            "member_added",
            group_id=group.group_id,
            member_id=member_id,
            group_instance_id=member.instance_id,
            generation=group.generation,
        )
        if group.is_(S.PREPARING_REBALANCE):
            group.new_member_added = True
            self._try_complete_join(fx, group)
        else:
            self._prepare_rebalance(fx, group, f"new member joined: {member_id}")

    def _replace_static(
        self,
        fx: Effects,
        group: Group,
        old: Member,
        conn: Peer,
        waiter: Waiter,
        member_id: str,
        req: JoinGroupRequest,
    ) -> None:
        """KIP-345: a static member came back with no member id. Fence the old id and,
        in Stable, keep the generation when the chosen protocol would not change."""
        if not group.supports(req.protocol_type, req.protocols, old):
            fx.reply(waiter, _inconsistent(""))
            return
        fenced = f"instance {old.instance_id!r} rejoined as {member_id}"
        if old.join_waiter is not None:
            fx.reply(old.join_waiter, _join_error(E.FENCED_INSTANCE_ID, fenced, old.member_id))
            group.set_join_waiter(old, None)
        if old.sync_waiter is not None:
            fx.reply(old.sync_waiter, _sync_error(E.FENCED_INSTANCE_ID, fenced))
            old.sync_waiter = None
        self._forget(old)
        was_pending_sync = old.member_id in group.pending_sync
        member = group.replace_static(old, member_id)
        self._bind(member, conn)
        self._bind_key(conn.conn_id, (group.group_id, member_id))
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = _rebalance_timeout(req)
        self._touch(fx, member)
        if was_pending_sync:
            group.pending_sync.add(member_id)
        log.info(
            "static_member_replaced",
            group_id=group.group_id,
            group_instance_id=member.instance_id,
            old_member_id=old.member_id,
            member_id=member_id,
            generation=group.generation,
        )
        if group.is_(S.STABLE):
            previous = member.protocols
            group.update_protocols(member, req.protocols)
            if group.select_protocol() == group.protocol_name:
                fx.reply(waiter, self._join_response(group, member, skip_assignment=True))
                return
            group.update_protocols(member, previous)
        self._update_and_hold(fx, group, member, waiter, req)
        if group.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(fx, group)
        else:
            self._prepare_rebalance(fx, group, f"static member rejoined: {member.instance_id}")

    def _update_and_hold(
        self, fx: Effects, group: Group, member: Member, waiter: Waiter, req: JoinGroupRequest
    ) -> None:
        group.update_protocols(member, req.protocols)
        member.rebalance_timeout_ms = _rebalance_timeout(req)
        member.session_timeout_ms = req.session_timeout_ms
        if member.join_waiter is not None and member.join_waiter != waiter:
            fx.reply(
                member.join_waiter,
                _join_error(
                    E.REBALANCE_IN_PROGRESS, "superseded by a newer JoinGroup", member.member_id
                ),
            )
        group.set_join_waiter(member, waiter)

    def _join_response(
        self, group: Group, member: Member, *, skip_assignment: bool = False
    ) -> JoinGroupResponse:
        is_leader = member.member_id == group.leader
        return JoinGroupResponse(
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader or "",
            member_id=member.member_id,
            members=group.join_members() if is_leader else [],
            skip_assignment=skip_assignment and is_leader,
        )

    # --- the join phase --------------------------------------------------------------

    def _prepare_rebalance(self, fx: Effects, group: Group, reason: str) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
                if member.sync_waiter is not None:
                    fx.reply(
                        member.sync_waiter,
                        _sync_error(E.REBALANCE_IN_PROGRESS, f"a new rebalance began: {reason}"),
                    )
                    member.sync_waiter = None
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
        if self.config.rebalance_notices and previous in (S.STABLE, S.COMPLETING_REBALANCE):
            notice = RebalanceStarted(
                group_id=group.group_id, generation_id=group.generation, reason=reason
            )
            for conn_id in {m.conn_id for m in group.members.values() if m.join_waiter is None}:
                fx.notify(conn_id, notice)
        self._try_complete_join(fx, group)

    def _try_complete_join(self, fx: Effects, group: Group) -> None:
        ready = group.is_(S.PREPARING_REBALANCE) and not group.initial_delay_active
        if ready and group.all_joined():
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
        group, member, error = self._validate_member_request(
            req.group_id, req.member_id, req.group_instance_id, req.generation_id
        )
        if error is not None:
            fx.reply(waiter, _sync_error(*error))
            return
        assert group is not None
        assert member is not None
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol_name
        ):
            fx.reply(
                waiter,
                _sync_error(
                    E.INCONSISTENT_GROUP_PROTOCOL,
                    f"group uses {group.protocol_type}/{group.protocol_name}",
                ),
            )
            return
        self._bind(member, conn)
        self._touch(fx, member)
        if group.is_(S.PREPARING_REBALANCE):
            fx.reply(waiter, _sync_error(E.REBALANCE_IN_PROGRESS, "the group is rebalancing"))
        elif group.is_(S.STABLE):
            self._synced(group, member.member_id)
            fx.reply(waiter, self._sync_response(group, member))
        else:  # CompletingRebalance: hold until the leader's assignment arrives
            if member.sync_waiter is not None:
                fx.reply(
                    member.sync_waiter,
                    _sync_error(E.REBALANCE_IN_PROGRESS, "superseded by a newer SyncGroup"),
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
        group.transition(S.STABLE)
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

    # --- Heartbeat -------------------------------------------------------------------

    def heartbeat(self, fx: Effects, conn: Peer, cid: int, req: HeartbeatRequest) -> None:
        group, member, error = self._validate_member_request(
            req.group_id, req.member_id, req.group_instance_id, req.generation_id
        )
        if error is not None:
            response = HeartbeatResponse(error_code=error[0], error_message=error[1])
        else:
            assert group is not None
            assert member is not None
            if member.conn_id != conn.conn_id:
                self._bind(member, conn)
            self._touch(fx, member)
            if group.state is S.PREPARING_REBALANCE:
                response = _REBALANCING_HEARTBEAT
            else:
                response = _OK_HEARTBEAT
        fx.reply((conn.conn_id, cid), response)

    def _validate_member_request(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> tuple[Group | None, Member | None, Problem | None]:
        group = self.groups.get(group_id)
        if group is None:
            return None, None, (E.UNKNOWN_MEMBER_ID, f"no group {group_id!r}")
        if group.state is S.DEAD:
            return None, None, (E.COORDINATOR_NOT_AVAILABLE, "group is dead")
        member = self.identify(group, member_id, instance_id)
        if not isinstance(member, Member):
            return None, None, member
        if generation != group.generation:
            return (
                None,
                None,
                (
                    E.ILLEGAL_GENERATION,
                    f"generation {generation} is not the group's {group.generation}",
                ),
            )
        return group, member, None

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

    # --- removal ---------------------------------------------------------------------

    def _remove_and_update(self, fx: Effects, group: Group, member: Member, reason: str) -> None:
        """Remove a member as LeaveGroup does, and move the group on."""
        self._drop(fx, group, member, reason)
        if group.is_(S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(fx, group, f"member left: {member.member_id} ({reason})")
        elif group.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(fx, group)

    def _drop(self, fx: Effects, group: Group, member: Member, reason: str) -> None:
        gone = f"member removed: {reason}"
        if member.join_waiter is not None:
            fx.reply(member.join_waiter, _join_error(E.UNKNOWN_MEMBER_ID, gone, member.member_id))
        if member.sync_waiter is not None:
            fx.reply(member.sync_waiter, _sync_error(E.UNKNOWN_MEMBER_ID, gone))
            member.sync_waiter = None
        group.remove(member.member_id)
        self._forget(member)
        log.info(
            "member_removed",
            group_id=group.group_id,
            member_id=member.member_id,
            group_instance_id=member.instance_id,
            generation=group.generation,
            reason=reason,
        )

    def _forget(self, member: Member) -> None:
        self.timers.cancel(member.session_key)
        self.timers.cancel(member.grace_key)
        self._unbind_key(member.conn_id, (member.session_key[1], member.member_id))

    def _drop_pending(self, fx: Effects, group: Group, member_id: str, reason: str) -> None:
        group.pending.discard(member_id)
        self.timers.cancel(("pending", group.group_id, member_id))
        self.timers.cancel(("grace", group.group_id, member_id))
        log.info(
            "pending_member_removed", group_id=group.group_id, member_id=member_id, reason=reason
        )
        self._try_complete_join(fx, group)

    def collect(self, group: Group) -> None:
        """Forget a group with nothing left in it: no members, pending ids or offsets."""
        if (
            group.is_(S.EMPTY)
            and not group.members
            and not group.pending
            and not group.offsets
            and self.groups.get(group.group_id) is group
        ):
            group.transition(S.DEAD)
            del self.groups[group.group_id]
            self.timers.cancel(group.join_key)
            self.timers.cancel(group.sync_key)

    # --- deadlines -------------------------------------------------------------------

    def expire(self, fx: Effects, key: Hashable) -> None:
        """A deadline named ``key`` has passed."""
        assert isinstance(key, tuple)
        kind, group_id = key[0], key[1]
        group = self.groups.get(group_id)
        if group is None:
            return
        if kind == "join":
            self._join_deadline(fx, group)
        elif kind == "sync":
            self._sync_deadline(fx, group)
        elif kind == "pending":
            if key[2] in group.pending:
                self._drop_pending(fx, group, key[2], "did not join again in time")
        elif kind == "session":
            member = group.members.get(key[2])
            if member is not None:
                if member.join_waiter is not None and not member.is_new:
                    # It is waiting on us: keep it until the join phase ends.
                    self.timers.set(member.session_key, fx.now + member.session_timeout_ms)
                else:
                    self._remove_and_update(fx, group, member, "session timeout")
        elif kind == "grace":
            member_id = key[2]
            if member_id in group.pending:
                self._drop_pending(fx, group, member_id, "connection closed")
            elif member_id in group.members:
                self._remove_and_update(fx, group, group.members[member_id], "connection closed")
        self.collect(group)

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
                self.timers.set(("grace", group_id, member_id), fx.now + grace)

    # --- connections and sessions ----------------------------------------------------

    def _bind(self, member: Member, conn: Peer) -> None:
        if member.conn_id != conn.conn_id:
            key = (member.session_key[1], member.member_id)
            self._unbind_key(member.conn_id, key)
            self._bind_key(conn.conn_id, key)
            member.conn_id = conn.conn_id
            self.timers.cancel(member.grace_key)
        member.client_id = conn.client_id
        member.host = conn.host

    def _bind_key(self, conn_id: int, key: MemberKey) -> None:
        self.by_conn.setdefault(conn_id, set()).add(key)

    def _unbind_key(self, conn_id: int, key: MemberKey) -> None:
        keys = self.by_conn.get(conn_id)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.by_conn[conn_id]

    def _touch(self, fx: Effects, member: Member) -> None:
        """Activity from a member pushes its session deadline out (never in)."""
        deadline = fx.now + member.session_timeout_ms
        current = self.timers.deadline(member.session_key)
        if current is None or deadline > current:
            self.timers.set(member.session_key, deadline)

    def touch(self, fx: Effects, member: Member, conn: Peer) -> None:
        self._bind(member, conn)
        self._touch(fx, member)


def _rebalance_timeout(req: JoinGroupRequest) -> int:
    return req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms


def _join_error(code: ErrorCode, message: str, member_id: str) -> JoinGroupResponse:
    return JoinGroupResponse(error_code=code, error_message=message, member_id=member_id)


def _inconsistent(member_id: str) -> JoinGroupResponse:
    return _join_error(
        E.INCONSISTENT_GROUP_PROTOCOL,
        "protocol type or protocols do not match the group's",
        member_id,
    )


def _sync_error(code: ErrorCode, message: str) -> SyncGroupResponse:
    return SyncGroupResponse(error_code=code, error_message=message)


_OK_HEARTBEAT = HeartbeatResponse()
_REBALANCING_HEARTBEAT = HeartbeatResponse(
    error_code=E.REBALANCE_IN_PROGRESS, error_message="the group is rebalancing: join again"
)
