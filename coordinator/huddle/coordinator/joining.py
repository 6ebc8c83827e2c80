"""JoinGroup: new members (KIP-394), known members, static members (KIP-345), group size
and protocol checks. A JoinGroup that starts or joins a rebalance is held until the join
phase ends (``Rebalances.complete_join`` answers it)."""

from __future__ import annotations

from collections.abc import Callable

from huddle.coordinator.answers import inconsistent, join_error, refuse_held
from huddle.coordinator.effects import Effects, Peer, Waiter
from huddle.coordinator.group import Group, Member
from huddle.coordinator.rebalance import Rebalances
from huddle.coordinator.sessions import E, S, Sessions, log, rebalance_timeout
from huddle.coordinator.values import PendingMemberExpires, Refusal
from huddle.protocol.messages import JoinGroupRequest, JoinGroupResponse


class Joins:
    def __init__(self, sessions: Sessions, rebalances: Rebalances) -> None:
        self.sessions = sessions
        self.rebalances = rebalances
        self.groups = sessions.groups
        self.timers = sessions.timers
        self.config = sessions.config
        # Whether a consumer-protocol group with members has this id (the server's consumer
        # service says): its JoinGroup is refused, as Kafka refuses one without online
        # migration, whatever wire it came by.
        self.consumer_group: Callable[[str], bool] = _no_consumer_group

    def join(self, fx: Effects, conn: Peer, cid: int, req: JoinGroupRequest) -> None:
        waiter = (conn.conn_id, cid)
        refusal = self._check_join_request(req) or self._check_connection(conn, req)
        if refusal is not None:
            fx.reply(waiter, join_error(refusal.code, refusal.message, req.member_id))
            return
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                fx.reply(waiter, join_error(E.UNKNOWN_MEMBER_ID, "no such group", req.member_id))
                return
            group = self.groups[req.group_id] = Group(req.group_id)
        if group.is_(S.DEAD):
            fx.reply(waiter, join_error(E.COORDINATOR_NOT_AVAILABLE, "group is dead", ""))
        elif not self._accepts(group, req.member_id):
            fx.reply(
                waiter,
                join_error(
                    E.GROUP_MAX_SIZE_REACHED,
                    f"group has reached its maximum size of {self.config.max_group_size}",
                    req.member_id,
                ),
            )
            member = group.members.get(req.member_id)
            if member is not None:
                self.rebalances.remove(fx, group, member, "turned away: group is full")
        elif not req.member_id:
            self._join_new(fx, group, conn, waiter, req)
        else:
            self._join_known(fx, group, conn, waiter, req)
        self.sessions.collect(group)

    def _check_join_request(self, req: JoinGroupRequest) -> Refusal | None:
        cfg = self.config
        if not req.group_id:
            return Refusal(E.INVALID_GROUP_ID, "group id must not be empty")
        if self.consumer_group(req.group_id):
            return Refusal(
                E.GROUP_ID_NOT_FOUND,
                f"group {req.group_id!r} is a consumer-protocol group with members: a classic "
                "member on huddle's wire cannot join it (mixed groups are served on the Kafka "
                "listener only; huddle's Member joins it with group_protocol='consumer')",
            )
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return Refusal(
                E.INVALID_SESSION_TIMEOUT,
                f"session timeout {req.session_timeout_ms} ms is outside "
                f"[{cfg.min_session_timeout_ms}, {cfg.max_session_timeout_ms}]",
            )
        if req.rebalance_timeout_ms > cfg.max_rebalance_timeout_ms:
            return Refusal(  # as Kafka's code for a timeout out of the broker's range
                E.INVALID_SESSION_TIMEOUT,
                f"rebalance timeout {req.rebalance_timeout_ms} ms is over the most allowed, "
                f"{cfg.max_rebalance_timeout_ms} ms",
            )
        if not req.protocol_type or not req.protocols:
            return Refusal(
                E.INCONSISTENT_GROUP_PROTOCOL, "protocol type and protocols must not be empty"
            )
        names = [p.name for p in req.protocols]
        if len(set(names)) != len(names):
            return Refusal(E.INVALID_REQUEST, f"protocol names repeat: {names}")
        if req.group_instance_id == "":
            return Refusal(E.INVALID_REQUEST, "group instance id must be null or non-empty")
        return None

    def _check_connection(self, conn: Peer, req: JoinGroupRequest) -> Refusal | None:
        """A new member from a connection that holds as many as one may is refused: one
        connection cannot keep thousands of held joins (and so groups) alive."""
        if req.member_id:
            return None  # known (or pending) already: counted
        limit = self.config.max_members_per_connection
        held = len(self.sessions.keys_of(conn.conn_id))
        if held < limit:
            return None
        return Refusal(
            E.INVALID_REQUEST,
            f"this connection holds {held} members and member ids, the most one may; "
            "use another connection",
        )

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
            fx.reply(waiter, inconsistent(""))
            return
        member_id = self.sessions.new_member_id(conn.client_id)
        instance = req.group_instance_id
        if instance is None and req.require_known_member_id:
            # KIP-394: hand out an id and have the member come back with it.
            group.pending[member_id] = conn.conn_id
            self.sessions.bind_key(conn.conn_id, (group.group_id, member_id))
            self.timers.set(
                PendingMemberExpires(group.group_id, member_id), fx.now + req.session_timeout_ms
            )
            log.info("member_id_required", group_id=group.group_id, member_id=member_id)
            fx.reply(
                waiter,
                join_error(E.MEMBER_ID_REQUIRED, "join again with this member id", member_id),
            )
            return
        old_id = None if instance is None else group.static.get(instance)
        if old_id is None:  # a new static member, or a dynamic one let in at once (v0-3)
            self._add_and_rebalance(fx, group, conn, waiter, member_id, req)
        else:
            self._replace_static(fx, group, group.members[old_id], conn, waiter, member_id, req)

    def _join_known(
        self, fx: Effects, group: Group, conn: Peer, waiter: Waiter, req: JoinGroupRequest
    ) -> None:
        member_id = req.member_id
        if member_id in group.pending and req.group_instance_id is None:
            self.sessions.forget_pending(group, member_id)
            self._add_and_rebalance(fx, group, conn, waiter, member_id, req)
            return
        member = self.sessions.identify(group, member_id, req.group_instance_id)
        if isinstance(member, Refusal):
            fx.reply(waiter, join_error(member.code, member.message, member_id))
            return
        if not group.supports(req.protocol_type, req.protocols, member):
            fx.reply(waiter, inconsistent(member_id))
            return
        gone = self.sessions.follow(member, conn)
        if gone is not None:
            fx.reply(waiter, join_error(gone.code, gone.message, member_id))
            return
        token_taken = self.take_token(member, conn)
        self.sessions.touch(fx, member)
        unchanged = member.same_protocols(req.protocols)
        is_leader = member.member_id == group.leader
        if group.is_(S.PREPARING_REBALANCE):
            self._update_and_hold(fx, group, member, waiter, req)
            self.rebalances.try_complete_join(fx, group)
        elif unchanged and (
            group.is_(S.COMPLETING_REBALANCE) or (group.is_(S.STABLE) and not is_leader)
        ):
            # Nothing new: answer with the current generation, no rebalance.
            fx.reply(waiter, self._join_response(group, member))
            if token_taken and group.is_(S.STABLE):
                self.sessions.keep(group)  # its record keeps the token it took
        else:
            reason = "leader rejoined" if is_leader else "metadata changed"
            self._update_and_hold(fx, group, member, waiter, req)
            self.rebalances.prepare_rebalance(fx, group, f"{reason}: {member.member_id}")

    @staticmethod
    def take_token(member: Member, conn: Peer) -> bool:
        """A member without an incarnation token (it joined with none, or was loaded from a
        record kept before tokens were) rejoining on the connection it speaks through takes
        the token that connection presented, if any: from then on only that token moves it.
        Only its rejoin does this: a heartbeat, SyncGroup or commit that moves it by
        principal and client id (``follow``) leaves it without a token, so its own client
        can move it back. Whether it took one."""
        if member.incarnation is not None or conn.incarnation is None:
            return False
        if conn.conn_id != member.conn_id:  # another client's JoinGroup
            return False
        member.incarnation = conn.incarnation
        return True

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
            fx.reply(waiter, inconsistent(member_id))
            return
        member = Member(
            group.group_id,
            member_id,
            req.group_instance_id,
            client_id=conn.client_id,
            principal=conn.principal,
            host=conn.host,
            conn_id=conn.conn_id,
            incarnation=conn.incarnation,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout(req),
        )
        group.add(member)
        group.set_join_waiter(member, waiter)
        member.join_received_at = fx.now
        self.sessions.bind_key(conn.conn_id, (group.group_id, member_id))
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
            self.rebalances.try_complete_join(fx, group)
        else:
            self.rebalances.prepare_rebalance(fx, group, f"new member joined: {member_id}")

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
            fx.reply(waiter, inconsistent(""))
            return
        fenced = f"instance {old.instance_id!r} rejoined as {member_id}"
        refuse_held(fx, group, old, E.FENCED_INSTANCE_ID, fenced)
        self.sessions.forget(old)
        was_pending_sync = old.member_id in group.pending_sync
        member = group.replace_static(old, member_id)
        self.sessions.bind(member, conn)
        member.incarnation = conn.incarnation  # the new process's token, or none
        self.sessions.bind_key(conn.conn_id, (group.group_id, member_id))
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout(req)
        self.sessions.touch(fx, member)
        if was_pending_sync:
            group.pending_sync.add(member_id)
        if group.is_(S.STABLE):
            self.sessions.keep(group)  # the same generation under the new member id
        else:
            self.sessions.keep_static(group, old.member_id, member)
        log.info(
            "static_member_replaced",
            group_id=group.group_id,
            group_instance_id=member.instance_id,
            old_member_id=old.member_id,
            member_id=member_id,
            generation=group.generation,
        )
        # Back in the same generation without a rebalance (KIP-345), unless a topic changed
        # since it formed: a returning leader could not tell (it missed the notice while it
        # was away) and the group would keep an assignment made for other counts.
        if group.is_(S.STABLE) and group.topics_version == self.sessions.topics_version:
            previous = member.protocols
            group.update_protocols(member, req.protocols)
            if group.select_protocol() == group.protocol_name:
                fx.reply(waiter, self._join_response(group, member, skip_assignment=True))
                return
            group.update_protocols(member, previous)
        self._update_and_hold(fx, group, member, waiter, req)
        if group.is_(S.PREPARING_REBALANCE):
            self.rebalances.try_complete_join(fx, group)
        else:
            self.rebalances.prepare_rebalance(
                fx, group, f"static member rejoined: {member.instance_id}"
            )

    def _update_and_hold(
        self, fx: Effects, group: Group, member: Member, waiter: Waiter, req: JoinGroupRequest
    ) -> None:
        group.update_protocols(member, req.protocols)
        member.rebalance_timeout_ms = rebalance_timeout(req)
        member.session_timeout_ms = req.session_timeout_ms
        if member.join_waiter is not None and member.join_waiter != waiter:
            fx.reply(
                member.join_waiter,
                join_error(
                    E.REBALANCE_IN_PROGRESS, "superseded by a newer JoinGroup", member.member_id
                ),
            )
        group.set_join_waiter(member, waiter)
        member.join_received_at = fx.now

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


def _no_consumer_group(group_id: str) -> bool:
    return False
