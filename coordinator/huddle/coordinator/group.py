"""A group and its members as data: who is in it, what they support, where it stands.

No decisions about requests are made here (the core's parts make them: ``joining``,
``syncing``, ``heartbeats``, ``leaving``, ``rebalance``); this module keeps the
bookkeeping that must stay consistent: protocol support counts, the static instance map,
the number of members awaiting a join response, and legal state transitions.
"""

from __future__ import annotations

from collections import Counter

import structlog

from huddle.coordinator.effects import Waiter
from huddle.coordinator.state import GroupState, check_transition
from huddle.coordinator.storage.records import GroupRecord
from huddle.coordinator.values import (
    DisconnectGraceEnds,
    JoinPhaseEnds,
    SessionExpires,
    SyncPhaseEnds,
)
from huddle.protocol.embedded import (
    CONSUMER_PROTOCOL_TYPE,
    EmbeddedSchemaError,
    subscribed_topics,
)
from huddle.protocol.errors import HuddleError
from huddle.protocol.messages import JoinGroupMember, Protocol

log = structlog.get_logger("huddle.group")

Committed = tuple[int, str | None, int]  # offset, metadata, committed (wall clock ms)


class NoSuchProtocolError(HuddleError, KeyError):
    """A member was asked for its metadata of a protocol it did not join with."""


class NoCommonProtocolError(HuddleError, ValueError):
    """No protocol every member supports (the join screen keeps this from happening)."""


class Member:
    __slots__ = (
        "assignment",
        "client_id",
        "conn_id",
        "grace_key",
        "host",
        "incarnation",
        "instance_id",
        "is_new",
        "join_received_at",
        "join_waiter",
        "member_id",
        "overdue_since",
        "principal",
        "protocol_type",
        "protocols",
        "rebalance_timeout_ms",
        "session_key",
        "session_timeout_ms",
        "sync_waiter",
    )

    def __init__(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        *,
        client_id: str,
        principal: str | None,
        host: str,
        conn_id: int,
        protocol_type: str,
        protocols: list[Protocol],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        incarnation: bytes | None = None,
    ) -> None:
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        # who its client authenticated as (None: loaded from a record that did not say)
        self.principal = principal
        # the digest of the incarnation token its client presented (``Peer.incarnation``)
        # when it joined or rejoined: only a connection of its principal presenting the same
        # moves the member; None: it presented none (a move never sets it)
        self.incarnation = incarnation
        self.host = host
        self.conn_id = conn_id
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.assignment = b""
        self.join_waiter: Waiter | None = None
        self.join_received_at = 0.0  # when the JoinGroup it waits on arrived (ms)
        self.sync_waiter: Waiter | None = None
        self.is_new = True
        self.overdue_since: float | None = None  # its session ended with input unread then
        self.session_key = SessionExpires(group_id, member_id)
        self.grace_key = DisconnectGraceEnds(group_id, member_id)

    @property
    def protocol_names(self) -> list[str]:
        return [p.name for p in self.protocols]

    def metadata_for(self, protocol_name: str) -> bytes:
        for p in self.protocols:
            if p.name == protocol_name:
                return p.metadata
        raise NoSuchProtocolError(protocol_name)

    def same_protocols(self, protocols: list[Protocol]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """This member's first preference among the protocols every member supports."""
        for p in self.protocols:
            if p.name in candidates:
                return p.name
        raise NoCommonProtocolError(
            f"member {self.member_id} supports none of {sorted(candidates)}"
        )


class Group:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.generation = 0
        self.topics_version = 0  # the coordinator's topic changes when this generation formed
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self.pending: dict[str, int] = {}  # member id handed out (KIP-394) -> its conn id
        self.static: dict[str, str] = {}  # group instance id -> member id
        self.pending_sync: set[str] = set()
        # a rebalance began again in the sync phase since the group was last Stable: its
        # members' assignments were cleared, so what each still holds is not known here
        # (a mixed group's upgrade waits for the group to be Stable again)
        self.assignments_cleared = False
        self.support: Counter[str] = Counter()  # protocol name -> members supporting it
        self.awaiting_join = 0  # members holding a JoinGroup
        # (topic, partition) -> (offset, metadata, when committed: wall clock ms, 0 unknown)
        self.offsets: dict[tuple[str, int], Committed] = {}
        # when the group entered its state, wall clock ms (Kafka's currentStateTimestamp;
        # 0: not known): kept when it goes Stable or Empty, offset retention counts from it
        self.state_ms = 0
        self.kept: GroupRecord | None = None  # the record that rebuilds it, if it has one
        # the topics its members subscribe to in this generation (None: not known), and
        # when the first of its offsets may expire (wall ms), for ``coordinator.retention``
        self.subscribed_topics: frozenset[str] | None = None
        self.retention_due_ms = 0
        self.retention_generation = -1  # the generation ``retention_due_ms`` was found in
        # the initial rebalance delay (KIP-134) while it runs:
        self.initial_delay_active = False
        self.initial_delay_ms = 0
        self.initial_remaining_ms = 0
        self.new_member_added = False
        self.join_key = JoinPhaseEnds(group_id)
        self.sync_key = SyncPhaseEnds(group_id)

    # --- state -----------------------------------------------------------------------

    def transition(self, target: GroupState) -> None:
        check_transition(self.group_id, self.state, target)
        source, self.state = self.state, target
        log.info(
            "group_state_changed",
            group_id=self.group_id,
            generation=self.generation,
            source=source.value,
            target=target.value,
        )

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return self.awaiting_join == len(self.members) and not self.pending

    # --- members ---------------------------------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.support.update(member.protocol_names)
        if member.instance_id is not None:
            self.static[member.instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id

    def remove(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        self.support.subtract(member.protocol_names)
        self.pending_sync.discard(member_id)
        if member.join_waiter is not None:
            self.awaiting_join -= 1
        if member.instance_id is not None and self.static.get(member.instance_id) == member_id:
            del self.static[member.instance_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    def update_protocols(self, member: Member, protocols: list[Protocol]) -> None:
        self.support.subtract(member.protocol_names)
        member.protocols = protocols
        self.support.update(member.protocol_names)

    def replace_static(self, old: Member, new_member_id: str) -> Member:
        """A static member restarted: the same instance under a new member id."""
        was_leader = self.leader == old.member_id
        self.remove(old.member_id)
        fresh = Member(
            self.group_id,
            new_member_id,
            old.instance_id,
            client_id=old.client_id,
            principal=old.principal,
            host=old.host,
            conn_id=old.conn_id,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            session_timeout_ms=old.session_timeout_ms,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
        )
        fresh.assignment = old.assignment
        fresh.is_new = False
        self.add(fresh)
        if was_leader:
            self.leader = new_member_id
        return fresh

    def set_join_waiter(self, member: Member, waiter: Waiter | None) -> None:
        if (member.join_waiter is None) != (waiter is None):
            self.awaiting_join += 1 if waiter is not None else -1
        member.join_waiter = waiter

    # --- protocols -------------------------------------------------------------------

    def candidate_protocols(self, excluding: Member | None = None) -> set[str]:
        n = len(self.members) - (1 if excluding is not None else 0)
        if excluding is None:
            return {name for name, count in self.support.items() if count == n and n > 0}
        own = set(excluding.protocol_names)
        return {
            name
            for name, count in self.support.items()
            if count - (1 if name in own else 0) == n and n > 0
        }

    def supports(
        self, protocol_type: str, protocols: list[Protocol], member: Member | None = None
    ) -> bool:
        """May a member with these protocols be (or stay) in the group?"""
        if not protocol_type or not protocols:
            return False
        others = len(self.members) - (1 if member is not None else 0)
        if others == 0:
            return True
        if protocol_type != self.protocol_type:
            return False
        candidates = self.candidate_protocols(excluding=member)
        return any(p.name in candidates for p in protocols)

    def select_protocol(self) -> str:
        """Each member votes for its first preference among the common protocols; most
        votes wins, ties going to the name that sorts first."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise NoCommonProtocolError(
                f"group {self.group_id} has no protocol every member supports"
            )
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return min(votes, key=lambda name: (-votes[name], name))

    def join_members(self) -> list[JoinGroupMember]:
        """The member list the leader's JoinGroup response carries."""
        assert self.protocol_name is not None
        name = self.protocol_name
        return [
            JoinGroupMember(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                metadata=m.metadata_for(name),
            )
            for m in self.members.values()
        ]

    def next_generation(self) -> None:
        self.generation += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.read_subscribed_topics()
            self.transition(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.leader = None
            self.subscribed_topics = self.read_subscribed_topics()
            self.transition(GroupState.EMPTY)

    def read_subscribed_topics(self) -> frozenset[str] | None:
        """The topics the members of a ``consumer`` group subscribe to in the chosen
        protocol, read from their subscriptions when a generation forms or the group is
        loaded (Kafka's ``computeSubscribedTopics``, for offset retention): none for a group
        without members; None (not known) for another protocol type, or a subscription
        that is neither huddle's nor Kafka's consumer protocol's."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        name = self.protocol_name
        if name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                topics.update(subscribed_topics(member.metadata_for(name)))
            except (EmbeddedSchemaError, KeyError) as exc:
                log.warning(
                    "subscriptions_unreadable",
                    group_id=self.group_id,
                    generation=self.generation,
                    member_id=member.member_id,
                    error=str(exc),
                )
                return None
        return frozenset(topics)
