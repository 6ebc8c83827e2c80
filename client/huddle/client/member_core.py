"""The member core: the member's protocol logic, sans-IO: what to send, and what a
response means.

``MemberCore`` keeps the member's state (member id, generation, owned partitions, its
session clock, a scheduled rejoin) and turns each JoinGroup / SyncGroup / Heartbeat / commit
answer into a ``Step``: the callbacks to run, in KIP-429 order, and what to do next; it
builds every group request (``join_request``, ``sync_request``, ``heartbeat_request``,
``leave_request``). It is the only writer of that state. It never awaits, never reads a
clock (it is given ``now_ms`` where time matters, and its assignors read the time it was
given), and never touches a socket. The runtime's decisions around it are
``huddle.client.driver``'s and ``huddle.client.flow``'s; ``huddle.client.member.Member``
and the simulator perform them (docs/member.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from huddle.client.assignors.base import (
    Assignor,
    MemberAssignment,
    MemberSubscription,
    RebalanceProtocol,
)
from huddle.client.generation import NOT_JOINED, Generation
from huddle.client.heartbeat import HeartbeatTimer
from huddle.client.leader import RoundCheck, assign, check_cooperative, decode_members, speaking
from huddle.client.steps import (
    FATAL,
    FELL_OUT,
    REDISCOVER,
    MemberConfig,
    MemberState,
    Next,
    Step,
    check_embedded,
    choose_protocol,
)
from huddle.protocol.embedded import (
    CONSUMER_PROTOCOL_TYPE,
    Subscription,
    TaskLag,
    TopicPartition,
    decode_assignment,
    encode_subscription,
    grouped,
)
from huddle.protocol.errors import ErrorCode, HuddleError, InvalidArgumentError, to_code
from huddle.protocol.messages import (
    NO_GENERATION,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    Protocol,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)

E = ErrorCode
PROTOCOL_TYPE = CONSUMER_PROTOCOL_TYPE
# the core's vocabulary (``huddle.client.steps``), importable from here as before
__all__ = [
    "FATAL",
    "FELL_OUT",
    "PROTOCOL_TYPE",
    "REDISCOVER",
    "MemberConfig",
    "MemberCore",
    "MemberState",
    "Next",
    "Step",
    "choose_protocol",
]


class ProtocolNotOfferedError(HuddleError, ValueError):
    """The coordinator chose a protocol (an assignor) this member did not offer."""


@dataclass
class MemberCore:
    config: MemberConfig
    assignors: Sequence[Assignor]
    current: Generation = NOT_JOINED  # the generation the member is in, or only its id
    leader: str = ""
    state: MemberState = MemberState.UNJOINED
    owned: frozenset[TopicPartition] = frozenset()
    owned_generation: int = NO_GENERATION
    previous: frozenset[TopicPartition] = frozenset()  # owned before an eager revocation
    standby: frozenset[TopicPartition] = frozenset()  # KIP-441 replicas to keep warm
    warmup: frozenset[TopicPartition] = frozenset()
    join_members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False
    rebalance_protocol: RebalanceProtocol = RebalanceProtocol.EAGER
    now_ms: float = 0.0  # the latest time the core was given
    rejoin_at_ms: float | None = None  # a scheduled rebalance (Design II) is due then
    session: HeartbeatTimer = field(init=False)
    joined_topics: frozenset[str] | None = None  # the subscription the last JoinGroup sent
    joined_claims: frozenset[TopicPartition] = frozenset()  # what it claimed to own then
    # (member id, generation) it last rejoined in for a revocation of what it never claimed
    rejoined_unclaimed: tuple[str, int] | None = None
    joins: int = 0  # JoinGroup answers that gave it a generation (each a stay of its own)
    round_check: RoundCheck = check_cooperative  # a leader's vetting of a cooperative round

    def __post_init__(self) -> None:
        self.rebalance_protocol = choose_protocol(self.assignors)
        check_embedded(self.config.embedded, self.assignors)
        names = [a.name for a in self.assignors]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"assignors repeat: {names}")
        self.session = HeartbeatTimer(
            self.config.session_timeout_ms,
            self.config.heartbeat_interval_ms,
            self.config.rebalance_timeout_ms,
        )
        for a in self.assignors:  # assignors that keep time read the time the core is given
            a.now_ms = self._clock

    def _clock(self) -> float:
        return self.now_ms

    @property
    def member_id(self) -> str:
        return self.current.member_id

    @property
    def generation(self) -> int:
        return self.current.id

    @property
    def protocol_name(self) -> str | None:
        return self.current.protocol

    def tick(self, now_ms: float) -> None:
        """The time is ``now_ms`` (never goes back)."""
        self.now_ms = max(self.now_ms, now_ms)

    @property
    def heartbeats_due(self) -> bool:
        """Whether the member must heartbeat: it holds a generation and has no JoinGroup
        under way (the coordinator keeps a member alive while its join is held). A member
        that is to rejoin heartbeats until its JoinGroup goes out, so its session lives
        while its revocation callback runs; one waiting on its SyncGroup heartbeats in the
        new generation, as Kafka's consumer does, so the proof of its membership stays
        fresh however long the leader takes (the coordinator renews its session then too,
        but the member could not know it until the answer came)."""
        return self.current.joined and self.state in (
            MemberState.STABLE,
            MemberState.UNJOINED,
            MemberState.SYNCING,
        )

    @property
    def cooperative(self) -> bool:
        return self.rebalance_protocol is RebalanceProtocol.COOPERATIVE

    @property
    def is_leader(self) -> bool:
        return self.state in (MemberState.SYNCING, MemberState.STABLE) and (
            self.leader == self.member_id
        )

    def assignor(self, name: str | None) -> Assignor:
        for a in self.assignors:
            if a.name == name:
                return a
        raise ProtocolNotOfferedError(
            f"the group chose protocol {name!r}, which this member does not have"
        )

    # --- joining ---------------------------------------------------------------------

    def subscribe(self, topics: Sequence[str]) -> bool:
        """From now on the member subscribes to ``topics``; True if that changed anything
        (the member must rejoin: at once if stable, else after the rebalance under way)."""
        wanted = sorted(set(topics))
        if wanted == sorted(set(self.config.topics)):
            return False
        self.config.topics = wanted
        return True

    def before_join(self, gone: frozenset[str] = frozenset()) -> Step:
        """Eager members give everything up before they join. Cooperative ones keep what
        they own, except partitions of topics they no longer subscribe to or that were
        deleted (``gone``): those are revoked before the join (KIP-429)."""
        self.rejoin_at_ms = None  # this is the rebalance that was scheduled, if one was
        if self.cooperative:
            wanted = set(self.config.topics)
            dropped = frozenset(
                tp for tp in self.owned if tp.topic not in wanted or tp.topic in gone
            )
            self.owned -= dropped
            return Step(revoked=dropped, next=Next.JOIN)
        if not self.owned:
            return Step(next=Next.JOIN)
        revoked = self.owned
        self.previous, self.owned = self.owned, frozenset()
        return Step(revoked=revoked, next=Next.JOIN)

    def join_request(self, lags: Mapping[TopicPartition, int] | None = None) -> JoinGroupRequest:
        """``lags``: the lag of the member's local state per task (KIP-441), if it keeps any."""
        topics = sorted(set(self.config.topics))
        self.joined_topics = frozenset(topics)
        self.joined_claims = self.owned
        task_lags = [
            TaskLag(tp.topic, tp.partition, lag) for tp, lag in sorted((lags or {}).items())
        ]
        protocols = []
        for a in self.assignors:
            cooperative_capable = RebalanceProtocol.COOPERATIVE in a.supported_protocols
            # What the member still owns for assignors that may move partitions safely only
            # once revoked; what it owned before revoking for eager-only (sticky) ones.
            owned = self.owned if cooperative_capable else (self.owned or self.previous)
            # The generation it last synced, even with nothing owned, as Kafka's
            # subscription carries it: a follower's rejoin after a sync then differs from
            # the join stored for it, and the coordinator rebalances (no rebalance follows
            # an unchanged follower's join in a Stable group).
            subscription = Subscription(
                topics=topics,
                owned_partitions=grouped(owned),
                generation=self.owned_generation,
                user_data=a.subscription_user_data(frozenset(topics), owned),
                task_lags=task_lags,
            )
            metadata = encode_subscription(subscription, self.config.embedded)
            protocols.append(Protocol(name=a.name, metadata=metadata))
        self.state = MemberState.JOINING
        return JoinGroupRequest(
            group_id=self.config.group_id,
            member_id=self.member_id,
            group_instance_id=self.config.instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=protocols,
            session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.rebalance_timeout_ms,
        )

    def on_join(self, response: JoinGroupResponse) -> Step:
        code = response.error_code
        if code == E.NONE:
            self.joins += 1
            self.current = Generation(
                response.generation_id, response.member_id, response.protocol_name, self.joins
            )
            self.leader = response.leader
            self.skip_assignment = response.skip_assignment
            self.join_members = [
                (m.member_id, m.group_instance_id, m.metadata) for m in response.members
            ]
            self.state = MemberState.SYNCING
            return Step(next=Next.SYNC)
        if code == E.MEMBER_ID_REQUIRED:
            self.current = Generation(member_id=response.member_id)
            self.state = MemberState.UNJOINED
            return Step(next=Next.JOIN)
        if code == E.REBALANCE_IN_PROGRESS:
            self.state = MemberState.UNJOINED
            return Step(next=Next.JOIN)
        return self._on_error(to_code(code), response.error_message or "")

    # --- syncing ---------------------------------------------------------------------

    def sync_request(self, assignments: Sequence[SyncGroupAssignment] = ()) -> SyncGroupRequest:
        """The SyncGroup of the joined generation (a leader's carries every assignment)."""
        return SyncGroupRequest(
            group_id=self.config.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.config.instance_id,
            protocol_type=None,
            protocol_name=self.protocol_name,
            assignments=list(assignments),
        )

    def on_sync(self, response: SyncGroupResponse, now_ms: float) -> Step:
        self.tick(now_ms)
        code = response.error_code
        if code == E.REBALANCE_IN_PROGRESS:
            self.state = MemberState.UNJOINED
            return Step(next=Next.JOIN)
        if code != E.NONE:
            return self._on_error(to_code(code), response.error_message or "")
        assignment = decode_assignment(response.assignment, self.joined_claims)
        assigned = assignment.partitions
        wanted = frozenset(self.config.topics)
        if any(tp.topic not in wanted for tp in assigned):
            # Made for a subscription this member has changed since it joined: apply
            # nothing and rejoin with the current one (Kafka's onJoinComplete does so).
            self.state = MemberState.UNJOINED
            return Step(next=Next.JOIN)
        revoked = self.owned - assigned
        added = assigned - self.owned
        received = MemberAssignment(
            partitions=assigned,
            revoked=assignment.revoked_partitions,
            scheduled_rebalance_delay_ms=assignment.scheduled_rebalance_delay_ms,
            user_data=assignment.user_data,
            standby=assignment.standby_partitions,
            warmup=assignment.warmup_partitions,
        )
        self.owned = assigned
        self.previous = frozenset()
        self.owned_generation = self.generation
        replicas = (assignment.standby_partitions, assignment.warmup_partitions)
        changed = replicas != (self.standby, self.warmup)
        self.standby, self.warmup = replicas
        self.state = MemberState.STABLE
        # A cooperative member that gave something up rejoins so it can go to its new owner;
        # so does one told to give up what its join claimed but it no longer owns (lost
        # meanwhile, or a claim it had no right to: the leader holds those partitions for
        # the follow-up round). A revocation of what it never claimed (an assignment stored
        # for a static member's previous process, which ended before it rejoined) still
        # needs that round: the member rejoins for it once per generation, since a rejoin
        # that brings no rebalance gets the same assignment back. One whose subscription
        # changed while it joined rejoins with the new one.
        joined = self.joined_topics
        resubscribe = joined is not None and joined != frozenset(self.config.topics)
        told = (assignment.revoked_partitions & self.joined_claims) - assigned
        unclaimed = assignment.revoked_partitions - self.joined_claims - assigned
        here = (self.member_id, self.generation)
        owed = bool(unclaimed) and self.rejoined_unclaimed != here
        if owed and self.cooperative:
            self.rejoined_unclaimed = here
        gave_up = revoked or told or owed
        follow_up = Next.JOIN if (gave_up and self.cooperative) or resubscribe else Next.STAY
        if follow_up is Next.JOIN:
            self.state = MemberState.UNJOINED
        delay = assignment.scheduled_rebalance_delay_ms
        self.rejoin_at_ms = self.now_ms + delay if delay > 0 else None
        return Step(
            revoked=revoked if self.cooperative else frozenset(),
            assigned=added if self.cooperative else assigned,
            next=follow_up,
            rejoin_after_ms=assignment.scheduled_rebalance_delay_ms,
            replicas=replicas if changed else None,
            assignment=(received, self.generation),
        )

    def assignment_received(self, step: Step) -> None:
        """Hand a synced assignment to the assignor (its ``on_assignment``). The runtime
        calls this once ``on_partitions_revoked`` has run and before
        ``on_partitions_assigned``, the order KIP-429 gives."""
        if step.assignment is not None:
            received, generation = step.assignment
            self.assignor(self.protocol_name).on_assignment(received, generation)

    # --- heartbeats, commits, leaving ------------------------------------------------

    def heartbeat_request(self) -> HeartbeatRequest:
        return HeartbeatRequest(
            group_id=self.config.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.config.instance_id,
        )

    def on_heartbeat(self, code: ErrorCode, generation: Generation) -> Step:
        """``generation`` is the one the heartbeat carried: an answer about another
        generation than the member's current one is stale and changes nothing."""
        if generation != self.current or self.state is MemberState.FAILED:
            return Step()
        if code == E.NONE:
            return Step()
        if code == E.REBALANCE_IN_PROGRESS:
            if self.state is MemberState.STABLE:
                self.state = MemberState.UNJOINED
                return Step(next=Next.JOIN)
            return Step()
        if code in FATAL or code in FELL_OUT or code in REDISCOVER:
            return self._on_error(code, "")
        # Anything else (a storage error, a code newer than this client) fails this heartbeat
        # only, as in Kafka's heartbeat thread: the member stays and heartbeats again.
        return Step(error=code, message="the heartbeat was refused")

    # --- the leader's assignment ------------------------------------------------------

    def subscriptions(self) -> dict[str, MemberSubscription]:
        """The leader's view of the group it must assign (from its JoinGroup answer)."""
        return decode_members(self.join_members)

    def assign(
        self,
        subscriptions: Mapping[str, MemberSubscription],
        partitions_per_topic: Mapping[str, int],
        now_ms: float,
    ) -> list[SyncGroupAssignment]:
        """The leader runs the group's assignor: each member's encoded assignment."""
        self.tick(now_ms)
        assignor = self.assignor(self.protocol_name)
        speaks = speaking(self.join_members)
        encoded = assign(assignor, partitions_per_topic, subscriptions, self.round_check, speaks)
        return [SyncGroupAssignment(member_id=m, assignment=a) for m, a in encoded.items()]

    # --- deadlines -------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When ``on_deadline`` has something to do (ms, the clock ``now_ms`` is on)."""
        deadlines = [self.session.session_deadline()]
        if self.state is MemberState.STABLE:
            deadlines.append(self.rejoin_at_ms)
        due = [d for d in deadlines if d is not None]
        return min(due) if due else None

    def on_deadline(self, now_ms: float) -> Step | None:
        """Act on what is due at ``now_ms``: the session may have expired (zombie safety:
        everything owned is lost), or a scheduled rebalance is due (rejoin)."""
        self.tick(now_ms)
        if self.session.expired(now_ms):
            self.session.reset()
            if self.owned or self.state is MemberState.STABLE:
                return self.lose_all(E.NONE, "no answer from the coordinator in a session")
            return None
        due = self.rejoin_at_ms
        if self.state is MemberState.STABLE and due is not None and now_ms >= due:
            self.rejoin_at_ms = None
            self.state = MemberState.UNJOINED
            return Step(next=Next.JOIN)
        return None

    def request_rejoin(self) -> bool:
        """The application or the runtime wants a rebalance; True if a rejoin follows."""
        if self.state is not MemberState.STABLE:
            return False
        self.state = MemberState.UNJOINED
        return True

    def join_abandoned(self) -> None:
        """The JoinGroup in flight was given up (the member is closing)."""
        if self.state is MemberState.JOINING:
            self.state = MemberState.UNJOINED

    def leaving(self) -> frozenset[TopicPartition]:
        """The member leaves: what it owned, to revoke; it owns nothing after this."""
        revoked, self.owned = self.owned, frozenset()
        self.standby = self.warmup = frozenset()
        return revoked

    def on_rebalance_notice(self, generation: int) -> Step:
        """The coordinator says the group left ``generation``: rejoin now if that is ours."""
        if generation == self.generation and self.state is MemberState.STABLE:
            self.state = MemberState.UNJOINED
            return Step(next=Next.JOIN)
        return Step()

    def on_commit_error(self, code: ErrorCode, message: str, generation: Generation) -> Step:
        """A commit made in ``generation`` was refused with ``code``."""
        if generation != self.current:
            return Step()  # about a generation the member has already left
        if code in FELL_OUT or code in FATAL:
            return self._on_error(code, message)
        return Step(error=code, message=message)

    def leave_request(self, reason: str = "the member closed") -> LeaveGroupRequest | None:
        """Dynamic members leave on close; static ones do not (they are expected back)."""
        if self.config.instance_id is not None or not self.member_id:
            return None
        return LeaveGroupRequest(
            group_id=self.config.group_id,
            members=[MemberIdentity(member_id=self.member_id, reason=reason)],
        )

    def lose_all(
        self, reason: ErrorCode = E.NONE, message: str = "", *, keep_member_id: bool = True
    ) -> Step:
        """The member has (or may have) fallen out of the group: everything it owns is lost.
        It rejoins with its member id, unless ``keep_member_id`` is False (it left)."""
        lost, self.owned = self.owned, frozenset()
        self.standby = self.warmup = frozenset()
        self.previous = frozenset()
        self.owned_generation = NO_GENERATION
        self.current = self.current.left() if keep_member_id else NOT_JOINED
        self.state = MemberState.UNJOINED
        self.rejoin_at_ms = None
        self.session.reset()
        return Step(lost=lost, next=Next.JOIN, error=reason, message=message)

    def on_disconnected(self) -> None:
        """The connection went away. A stable member is still in the group as far as it
        knows: it reconnects and heartbeats with the same member id and generation (the
        answer tells whether it is still in). A join or sync cut off midway starts over."""
        if self.state in (MemberState.JOINING, MemberState.SYNCING):
            self.state = MemberState.UNJOINED

    # --- errors ----------------------------------------------------------------------

    def _on_error(self, code: ErrorCode, message: str) -> Step:
        if code in FATAL:
            lost, self.owned = self.owned, frozenset()
            self.state = MemberState.FAILED
            return Step(lost=lost, next=Next.FAIL, error=code, message=message)
        if code == E.UNKNOWN_MEMBER_ID:
            self.current = NOT_JOINED  # the coordinator does not know this id: a new one
            return self.lose_all(code, message)
        if code == E.ILLEGAL_GENERATION:
            return self.lose_all(code, message)
        if code in REDISCOVER:
            # The group moved to another coordinator (or this one is loading): find it.
            # A Stable member goes on there in its generation, heartbeating, as Kafka's
            # consumer does; a join or sync under way must be done again.
            if self.state is not MemberState.STABLE:
                self.state = MemberState.UNJOINED
            return Step(next=Next.RECONNECT, error=code, message=message)
        self.state = MemberState.UNJOINED
        return Step(next=Next.RETRY, error=code, message=message)
