"""Sessions: the part of the coordinator core every membership rule shares. It owns the
groups, which connection each member speaks through, the members' session deadlines and the
disconnect grace, the restart fence, and the records kept of each group; it identifies the
member a request speaks for and forgets members that go. The rules are parts of their own
that are given this one: ``joining`` (JoinGroup), ``syncing`` (SyncGroup), ``heartbeats``,
``leaving`` (LeaveGroup), ``rebalance`` (the phases) and ``deadlines`` (what a deadline
that passed does).
"""

from __future__ import annotations

import hmac
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Protocol

import structlog

from huddle.coordinator.answers import refuse_held
from huddle.coordinator.config import GroupConfig
from huddle.coordinator.effects import Effects, Peer
from huddle.coordinator.group import Group, Member
from huddle.coordinator.state import GroupState
from huddle.coordinator.storage.kept_groups import group_record, loaded_group, static_member_changed
from huddle.coordinator.storage.records import GroupRecord, Record, SessionRecord, group_deleted
from huddle.coordinator.timers import TimerQueue
from huddle.coordinator.topics import topics_digest
from huddle.coordinator.values import (
    Deadline,
    DisconnectGraceEnds,
    PendingMemberExpires,
    Refusal,
    RestartFenceEnds,
)
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import JoinGroupRequest

log = structlog.get_logger("huddle.membership")

E = ErrorCode
S = GroupState
MemberKey = tuple[str, str]  # (group_id, member_id)
# a loaded group's ``topics_version`` when its record does not show today's topics: a
# static member back as a new process then makes it rebalance
TOPICS_NOT_KNOWN = -1


def uuid_member_id(client_id: str) -> str:
    return f"{client_id or 'member'}-{uuid.uuid4()}"


class RebalanceObserver(Protocol):
    """Told of each rebalance's phases, on the core's clock (ms): metrics."""

    def rebalance_started(self, group_id: str, reason: str, now: float) -> None: ...

    def join_completed(self, group_id: str, now: float) -> None: ...

    def rebalance_completed(self, group_id: str, now: float) -> None: ...


class Sessions:
    """Owns the groups, their members' sessions, and which connection each member speaks
    through."""

    def __init__(
        self,
        config: GroupConfig,
        timers: TimerQueue[Deadline],
        new_member_id: Callable[[str], str] = uuid_member_id,
        changes: list[Record] | None = None,
    ) -> None:
        self.config = config
        self.timers = timers
        self.groups: dict[str, Group] = {}
        # conn_id -> the member (or member id handed out) that speaks through it, or the
        # set of them when it holds several (``keys_of``): most connections hold one, and
        # a set of one costs about 200 bytes
        self.by_conn: dict[int, MemberKey | set[MemberKey]] = {}
        self.new_member_id = new_member_id
        self.changes: list[Record] = changes if changes is not None else []
        # the restart fence a journal of an older version asks for (its longest session,
        # see ``huddle.coordinator.storage.records``), until it has been served; 0: none
        self.unserved_fence_ms = 0
        self.fenced_until = float("-inf")  # no generation forms before this (a restart)
        self.topics_version = 0  # topics created, altered or deleted so far
        # every topic's partition count (the core's registry sets it)
        self.topic_counts: Mapping[str, int] = {}
        self._digest = (-1, 0)  # (topics_version, topics_digest then)
        # a data dir or a cluster: record groups after each rebalance and as they empty
        self.keep_groups = False
        self.observer: RebalanceObserver | None = None  # metrics, if the transport wants them
        # wall clock ms minus the core's clock (the transport sets it): what is kept for
        # retention is stamped with the wall clock, which outlives a restart
        self.wall_offset_ms = 0.0

    def topics_digest(self) -> int:
        """``topics.topics_digest`` of the topics as they are (once per change of them)."""
        version, digest = self._digest
        if version != self.topics_version:
            digest = topics_digest(self.topic_counts)
            self._digest = (self.topics_version, digest)
        return digest

    def topics_changed(self) -> None:
        """Topics were created, altered or deleted: a group that formed before no longer
        holds today's topics (see ``Joins`` for a static member's return)."""
        self.topics_version += 1

    def set_wall_clock(self, now: float, wall_ms: float) -> None:
        """The wall clock reads ``wall_ms`` at the core's time ``now``."""
        self.wall_offset_ms = wall_ms - now

    def wall_ms(self, now: float) -> int:
        """The wall clock (ms since the epoch) at the core's time ``now``."""
        return int(now + self.wall_offset_ms)

    def fence(self, now: float) -> None:
        """Start the restart fence of a journal written by an older version, if it asks for
        one: no generation forms for its longest session (``RestartFenceEnds`` then)."""
        if self.unserved_fence_ms > 0:
            self.fenced_until = now + self.unserved_fence_ms
            self.timers.set(RestartFenceEnds(), self.fenced_until)
            log.info("restart_fence", until_ms=self.unserved_fence_ms)

    def fence_served(self) -> None:
        """The fence is over: kept as such, so the next restart has nothing to wait for."""
        if self.unserved_fence_ms > 0:
            self.unserved_fence_ms = 0
            self.changes.append(SessionRecord(0))
            log.info("restart_fence_served")

    def fenced(self, fx: Effects, group: Group) -> bool:
        """Whether the group must not form a generation yet (the restart fence, see
        ``fence``): then its join phase ends when the fence does."""
        if fx.now >= self.fenced_until:
            return False
        self.timers.set(group.join_key, self.fenced_until)
        return True

    def identify(self, group: Group, member_id: str, instance_id: str | None) -> Member | Refusal:
        """The member a request speaks for, or why it speaks for none (fencing first)."""
        if instance_id is not None:
            owner = group.static.get(instance_id)
            if owner is None:
                return Refusal(E.UNKNOWN_MEMBER_ID, f"unknown static member {instance_id!r}")
            if owner != member_id:
                return Refusal(
                    E.FENCED_INSTANCE_ID,
                    f"instance {instance_id!r} now belongs to another member id",
                )
        member = group.members.get(member_id)
        if member is None:
            return Refusal(E.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in the group")
        return member

    def check_member(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> tuple[Group, Member] | Refusal:
        if not group_id:  # as Kafka's GroupCoordinatorService, before the group
            return Refusal(E.INVALID_GROUP_ID, "group id must not be empty")
        group = self.groups.get(group_id)
        if group is None:
            return Refusal(E.UNKNOWN_MEMBER_ID, f"no group {group_id!r}")
        if group.state is S.DEAD:
            return Refusal(E.COORDINATOR_NOT_AVAILABLE, "group is dead")
        member = self.identify(group, member_id, instance_id)
        if isinstance(member, Refusal):
            return member
        if generation != group.generation:
            return Refusal(
                E.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's {group.generation}",
            )
        return group, member

    def follow(self, member: Member, conn: Peer) -> Refusal | None:
        """Why a request for ``member`` that passed Kafka's checks (member id, instance id,
        generation) must not act after all, or None; and which connection the member speaks
        through from now on. A client is told by its principal and the incarnation token it
        presents, or, for a member without a token, by its principal and client id
        (``same_client``). A move never changes the member's token (see ``Joins.take_token``).

        The member's own client on a newer connection (connection ids only grow) came back:
        the member moves there, whatever the request (JoinGroup, SyncGroup, Heartbeat or
        OffsetCommit), and the old connection's disconnect grace no longer applies. The same
        client on an older connection gave that one up: its request is refused (a commit
        held up in the network on it would set an offset back). Another client's request
        acts as in Kafka, but never moves the member (its connection closing removes
        nobody) nor is refused for its connection's age."""
        if conn.conn_id == member.conn_id or not same_client(member, conn):
            return None
        if conn.conn_id < member.conn_id:
            return Refusal(
                E.COORDINATOR_NOT_AVAILABLE,
                f"member {member.member_id} speaks through a newer connection of its client",
            )
        self.bind(member, conn)
        return None

    # --- kept groups (a cluster) -----------------------------------------------------

    def keep(self, group: Group) -> None:
        """The group ended a rebalance (or emptied): record it, for a restart or a node
        taking over."""
        if self.keep_groups:
            # the topics its generation formed with, if they are still the same
            same = bool(group.members) and group.topics_version == self.topics_version
            group.kept = group_record(group, self.topics_digest() if same else None)
            self.changes.append(group.kept)

    def keep_static(self, group: Group, old_id: str, member: Member | None) -> None:
        """A static member rejoined under a new member id (``member``) or was removed
        (None) since the group's last record: that record, so changed (in Stable, ``_keep``
        records the group as it is instead). A record with a member removed says so: its
        partitions belong to nobody, and whoever loads it rebalances the group."""
        if self.keep_groups and group.kept is not None:
            changed = static_member_changed(group.kept, old_id, member)
            if changed is not None:
                group.kept = changed
                self.changes.append(changed)

    def build_group(self, record: GroupRecord, now: float) -> Group:
        """Serve a kept group (``Rebalances.load_group``) up to the sessions: Stable in its
        generation; its loaded members have no session deadline until ``start_sessions``.
        Replaces a group of the same id."""
        old = self.groups.get(record.group_id)
        if old is not None:
            self.unload_group(Effects(now), old.group_id)
        group = loaded_group(record)
        group.kept = record
        group.subscribed_topics = group.read_subscribed_topics()
        same_topics = record.topics_digest is not None and (
            record.topics_digest == self.topics_digest()
        )
        group.topics_version = self.topics_version if same_topics else TOPICS_NOT_KNOWN
        self.groups[group.group_id] = group
        log.info(
            "group_loaded",
            group_id=group.group_id,
            generation=group.generation,
            members=group.size,
        )
        return group

    def start_sessions(self, fx: Effects, group: Group) -> None:
        """A loaded group's members get their sessions now (Kafka's ``onGroupLoaded``),
        those that have none yet (one already heard from has its own)."""
        timers = self.timers
        for member in group.members.values():
            if member.session_key not in timers:
                timers.set(member.session_key, fx.now + member.session_timeout_ms)

    def unload_group(self, fx: Effects, group_id: str) -> None:
        """Stop serving a group (its shard went to another node): forget it without a
        rebalance; requests it holds are answered NOT_COORDINATOR, so members find the
        new coordinator and carry on there."""
        group = self.groups.pop(group_id, None)
        if group is None:
            return
        moved = "the group moved to another coordinator"
        for member in group.members.values():
            refuse_held(fx, group, member, E.NOT_COORDINATOR, moved)
            self.forget(member)
        for member_id in list(group.pending):
            self.forget_pending(group, member_id)
        self.timers.cancel(group.join_key)
        self.timers.cancel(group.sync_key)
        log.info("group_unloaded", group_id=group_id, generation=group.generation)

    # --- forgetting ---------------------------------------------------------------

    def drop(self, fx: Effects, group: Group, member: Member, reason: str) -> None:
        refuse_held(fx, group, member, E.UNKNOWN_MEMBER_ID, f"member removed: {reason}")
        group.remove(member.member_id)
        self.forget(member)
        if member.instance_id is not None:  # a restart must not bring it back
            self.keep_static(group, member.member_id, None)
        log.info(
            "member_removed",
            group_id=group.group_id,
            member_id=member.member_id,
            group_instance_id=member.instance_id,
            generation=group.generation,
            reason=reason,
        )

    def forget(self, member: Member) -> None:
        self.timers.cancel(member.session_key)
        self.timers.cancel(member.grace_key)
        self._unbind_key(member.conn_id, (member.session_key.group_id, member.member_id))

    def drop_pending(self, group: Group, member_id: str, reason: str) -> None:
        """Forget a member id handed out (KIP-394) and not used yet."""
        self.forget_pending(group, member_id)
        log.info(
            "pending_member_removed", group_id=group.group_id, member_id=member_id, reason=reason
        )

    def forget_pending(self, group: Group, member_id: str) -> None:
        conn_id = group.pending.pop(member_id)
        self.timers.cancel(PendingMemberExpires(group.group_id, member_id))
        self.timers.cancel(DisconnectGraceEnds(group.group_id, member_id))
        self._unbind_key(conn_id, (group.group_id, member_id))

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
            if group.kept is not None and self.keep_groups:  # its record goes too
                group.kept = None
                self.changes.append(group_deleted(group.group_id))
            self.timers.cancel(group.join_key)
            self.timers.cancel(group.sync_key)

    # --- connections and sessions ----------------------------------------------------

    def connection_closed(self, fx: Effects, conn_id: int, grace: int | None = None) -> None:
        """Members that spoke through ``conn_id`` get the disconnect grace (``grace``, or
        the configured one when None), if enabled; static members keep session-timeout
        semantics."""
        keys = self.keys_of(conn_id)
        self.by_conn.pop(conn_id, None)
        if grace is None:
            grace = self.config.disconnect_grace_ms
        if grace < 0:
            return
        for group_id, member_id in sorted(keys):  # one order, whatever the hash seed
            group = self.groups.get(group_id)
            if group is None:
                continue
            member = group.members.get(member_id)
            if member is not None and member.instance_id is None and member.conn_id == conn_id:
                self.timers.set(member.grace_key, fx.now + grace)
            elif member is None and member_id in group.pending:
                self.timers.set(DisconnectGraceEnds(group_id, member_id), fx.now + grace)

    def bind(self, member: Member, conn: Peer) -> None:
        if member.conn_id != conn.conn_id:
            key = (member.session_key.group_id, member.member_id)
            self._unbind_key(member.conn_id, key)
            self.bind_key(conn.conn_id, key)
            member.conn_id = conn.conn_id
            self.timers.cancel(member.grace_key)
        member.client_id = conn.client_id
        member.principal = conn.principal
        member.host = conn.host

    def keys_of(self, conn_id: int) -> Collection[MemberKey]:
        """The members (and member ids handed out) that speak through ``conn_id``."""
        held = self.by_conn.get(conn_id)
        if held is None:
            return ()
        return held if isinstance(held, set) else (held,)

    def bind_key(self, conn_id: int, key: MemberKey) -> None:
        held = self.by_conn.get(conn_id)
        if held is None:
            self.by_conn[conn_id] = key
        elif isinstance(held, set):
            held.add(key)
        elif held != key:
            self.by_conn[conn_id] = {held, key}

    def _unbind_key(self, conn_id: int, key: MemberKey) -> None:
        held = self.by_conn.get(conn_id)
        if isinstance(held, set):
            held.discard(key)
            if not held:
                del self.by_conn[conn_id]
        elif held == key:
            del self.by_conn[conn_id]

    def touch(self, fx: Effects, member: Member) -> None:
        """Activity from a member (or a request made for it) pushes its session deadline
        out (never in); which connection it speaks through is ``follow``'s."""
        self.timers.extend(member.session_key, fx.now + member.session_timeout_ms)
        member.overdue_since = None


def same_client(member: Member, conn: Peer) -> bool:
    """Whether ``conn`` is the client the member speaks through: one authenticated as the
    member's principal and presenting its incarnation token (anyone may send its member id,
    generation and client id); for a member whose client presented none (an older client, a
    raw tool), one with its principal and client id. A member loaded from a record kept
    before principals were: any principal."""
    if member.principal not in (None, conn.principal):
        return False
    if member.incarnation is not None:
        return conn.incarnation is not None and hmac.compare_digest(
            conn.incarnation, member.incarnation
        )
    return conn.client_id == member.client_id


def rebalance_timeout(req: JoinGroupRequest) -> int:
    return req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms
