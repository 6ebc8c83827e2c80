"""The member runtime's decisions, sans-IO: when to heartbeat, what a heartbeat answer or a
notice means, when the member must count itself a zombie, how long to wait before
reconnecting, and what the application may process right now.

``MemberCore`` decides what the protocol answers mean; this decides what the runtime does
around it, given the time. ``huddle.client.member.Member`` runs it on anyio tasks and real
sockets; ``huddle.sim`` runs the very same object under a simulated clock and network.
Neither holds a decision of its own: they only wait, send and call the listener.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from huddle.client.events import (
    Event,
    FellOut,
    HeartbeatAnswer,
    RebalanceNotice,
    ReconnectError,
    Rejoin,
    SessionExpired,
)
from huddle.client.generation import Generation, offset_commit
from huddle.client.heartbeat import LIVENESS, HeartbeatTimer, Liveness
from huddle.client.member_core import MemberCore, MemberState, Next, Step
from huddle.client.partition_counts import PartitionCounts
from huddle.client.subscription import Subscription
from huddle.logs import library_logger
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ErrorCode, error_name, to_code
from huddle.protocol.messages import (
    ErrorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetCommitResponse,
    RebalanceStarted,
    Response,
    TopicMetadataChanged,
)

log = library_logger("huddle.member")
E = ErrorCode
MAX_CLOCK_DRIFT = 1e-3  # how far a member's and the coordinator's clock rates may differ
CONNECT_TIMEOUT_MS = 10_000.0  # a connection attempt's bound, however long the session


@dataclass(frozen=True, slots=True)
class SendHeartbeat:
    """Send ``request`` now; hand its answer to ``heartbeat_answered`` with ``generation``."""

    request: HeartbeatRequest
    generation: Generation
    sent_at: float
    # False while the member holds a new generation but has not sent its SyncGroup (a
    # leader computing the assignment): the coordinator answers NONE then, yet drops the
    # member if its SyncGroup is not in by the rebalance timeout after the join phase
    # ended, so such an answer proves the session but not that the group is steady.
    steady: bool = True


@dataclass(frozen=True, slots=True)
class WaitUntil:
    """Nothing to do before ``at`` (ms), or before something changes (``at`` is None)."""

    at: float | None


@dataclass
class MemberDriver:
    core: MemberCore
    subscription: Subscription
    retry_backoff_ms: float = 100.0
    max_retry_backoff_ms: float = 5_000.0
    zombie: bool = False  # the session expired locally: owns nothing until that is handled
    listener_since: float | None = None  # when the running callbacks began (ms)
    join_in_flight: bool = False
    sync_out: bool = True  # its SyncGroup for the generation it joined has been sent
    closing: bool = False
    gave_up: Generation | None = None  # the stay a callback overran in, until it is lost
    grace_ms: int | None = None  # the coordinator's disconnect grace (its hello)
    backoff_ms: float = field(init=False)
    counts: PartitionCounts = field(default_factory=PartitionCounts)
    metadata: dict[str, int] = field(default_factory=dict)  # counts the leader assigned with
    group_topics: set[str] = field(default_factory=set)
    _overdue_logged: bool = False
    cut_off_at: float | None = None  # disconnected: may have been dropped from then on
    liveness: Liveness = LIVENESS

    def __post_init__(self) -> None:
        self.backoff_ms = self.retry_backoff_ms
        self._log = log.bind(group_id=self.core.config.group_id)

    @property
    def timer(self) -> HeartbeatTimer:
        return self.core.session

    # --- what the application may process -------------------------------------------

    def visible(self, now: float) -> frozenset[TopicPartition]:
        """The partitions the member owns at ``now`` as the application must see them:
        nothing once its session may have expired or a callback overran, even before
        ``on_partitions_lost`` has run."""
        return self.core.owned if self.may_process(now) else frozenset()

    def may_process(self, now: float) -> bool:
        """Whether the member may still work on what it owns (or is revoking) at ``now``."""
        if self.zombie or self.timer.expired(now) or self.listener_overdue(now):
            return False
        cut_off = self.cut_off_at
        return cut_off is None or now < cut_off

    # --- callbacks ------------------------------------------------------------------

    def callbacks_began(self, now: float) -> bool:
        """Callbacks start at ``now``; True for the outermost (it ends the timing)."""
        if self.listener_since is not None:
            return False
        self.listener_since = now
        self._overdue_logged = False
        return True

    def callbacks_ended(self, outer: bool) -> None:
        if outer:
            self.listener_since = None

    def listener_overdue(self, now: float) -> bool:
        """A callback has run longer than the rebalance timeout (Kafka's
        max.poll.interval.ms): the member owns nothing and stops heartbeating."""
        since = self.listener_since
        return since is not None and now - since > self.core.config.rebalance_timeout_ms

    def give_up(self, now: float) -> SessionExpired | None:
        """Once per overrun callback, the member gives itself up, as Kafka's consumer does
        when its poll timeout expires (``AbstractCoordinator.handlePollTimeoutExpiry``): it
        owns nothing from now on, a dynamic member leaves the group at once
        (``leave_after_give_up``) so the group goes on without it, and once the callback
        returns it loses what it owned (``on_partitions_lost``) and joins with a new member
        id, static or dynamic (``resetGenerationOnLeaveGroup``)."""
        if self._overdue_logged:
            return None
        self._overdue_logged = True
        self.zombie = True
        self.gave_up = self.core.current
        since = self.listener_since if self.listener_since is not None else now
        self._log.warning(
            "listener_too_slow", waited_ms=int(now - since), member_id=self.core.member_id
        )
        return SessionExpired(self.core.current)

    @property
    def given_up(self) -> Generation | None:
        """The stay the member gave itself up in, while it still holds it (the loss is
        not handled yet)."""
        gave_up = self.gave_up
        return gave_up if gave_up is not None and gave_up == self.core.current else None

    def leave_after_give_up(self) -> LeaveGroupRequest | None:
        """The LeaveGroup a member that has just given itself up sends, once, whatever
        comes of it (Kafka's ``maybeLeaveGroup``): only a dynamic member that is in a
        generation; a static member is removed by its session timeout only."""
        gave_up = self.given_up
        if gave_up is None or not gave_up.joined:
            return None
        return self.core.leave_request("a callback overran the rebalance timeout")

    # --- heartbeats -----------------------------------------------------------------

    def heartbeat(self, now: float) -> SendHeartbeat | WaitUntil | SessionExpired:
        """What the heartbeat task does at ``now``: send one, wait, or (a callback overran)
        give the member up, which posts ``SessionExpired`` once."""
        if self.listener_overdue(now):
            gave_up = self.give_up(now)
            return gave_up if gave_up is not None else WaitUntil(None)
        core = self.core
        if not core.heartbeats_due or self.given_up is not None:  # no more: it left
            return WaitUntil(None)
        if self.listener_since is not None and self.liveness.paused_in_callbacks():
            return WaitUntil(None)
        due = self.timer.next_heartbeat()
        if now < due:
            return WaitUntil(due)
        self.timer.sent(now)
        steady = self.sync_out
        return SendHeartbeat(core.heartbeat_request(), core.current, now, steady)

    @property
    def heartbeat_timeout_ms(self) -> float:
        """How long a heartbeat may wait for its answer: a third of the session. A
        coordinator silent that long is taken as gone (frozen, or cut off): the member
        drops the connection and finds the coordinator again, keeping its member id and
        generation, while its session still has two thirds to run (a group that moved to
        another node of a cluster is served there by then)."""
        return self.timer.session_ms / 3

    @property
    def connect_timeout_ms(self) -> float:
        """How long finding the coordinator and connecting to it may take: a heartbeat's
        timeout, at most 10 s (a member whose session is short tries again sooner)."""
        return min(CONNECT_TIMEOUT_MS, self.heartbeat_timeout_ms)

    def heartbeat_response(
        self, response: Response, sent: SendHeartbeat, received_at: float
    ) -> HeartbeatAnswer | None:
        """A heartbeat sent as ``sent`` was answered with ``response`` at ``received_at``.
        An answer of another type than a heartbeat's (or an error answer) proves nothing:
        the connection is out of step, and the member drops it and finds the coordinator
        again (``ReconnectError``, raised), as Kafka's client fails a connection whose answer
        does not match its request and its heartbeat's failure marks the coordinator
        unknown."""
        if not isinstance(response, HeartbeatResponse | ErrorResponse):
            raise ReconnectError(f"a heartbeat answered with {type(response).__name__}")
        return self.heartbeat_answered(response.error_code, sent, received_at)

    def heartbeat_answered(
        self, code: int, sent: SendHeartbeat, received_at: float
    ) -> HeartbeatAnswer | None:
        """A heartbeat sent as ``sent`` was answered with ``code`` at ``received_at``: the
        session counts from when it was *sent* (the coordinator renewed it on receipt,
        which is later). Anything but NONE becomes an event for the main loop."""
        if code in (E.NONE, E.REBALANCE_IN_PROGRESS):
            self.cut_off_at = None
            proof = self.liveness.session_proof(sent.sent_at, received_at)
            if code == E.NONE and sent.steady:
                self.timer.steady(proof)
            else:  # a member until the join (or sync) phase ends: that bound stays
                self.timer.answered(proof)
        else:
            self._log.info("heartbeat_error", error_code=code, error=error_name(code))
        if code != E.NONE:
            return HeartbeatAnswer(to_code(code), sent.generation)
        return None

    # --- zombie safety --------------------------------------------------------------

    def watchdog(self, now: float) -> float | SessionExpired:
        """The watchdog at ``now``: when to look again (ms), or ``SessionExpired`` if the
        session may have expired, after which the member owns nothing."""
        deadline = self.timer.session_deadline()
        if deadline is None or self.join_in_flight:
            return now + self.timer.interval_ms
        if now < deadline:
            return deadline
        self.zombie = True
        self.timer.reset()
        return SessionExpired(self.core.current)

    # --- events for the main loop ---------------------------------------------------

    def on_event(self, event: Event) -> Step | None:
        core = self.core
        match event:
            case HeartbeatAnswer(code, generation):
                return core.on_heartbeat(code, generation)
            case RebalanceNotice(generation):
                return core.on_rebalance_notice(generation)
            case FellOut(code, message, generation):
                return core.on_commit_error(code, message, generation)
            case SessionExpired(generation):
                if generation != core.current:
                    # about a stay it has left (another generation, or the same one that a
                    # later JoinGroup answered again): that join proved its membership anew
                    # (a stale event once cost a fresh assignment, even in one generation)
                    return None
                self.zombie = False  # what it owned is lost just below
                gave_up, self.gave_up = self.gave_up == generation, None
                if gave_up:  # it left the group (a callback overran): a new member id
                    return core.lose_all(
                        E.NONE, "a callback overran the rebalance timeout", keep_member_id=False
                    )
                if core.owned or core.state is MemberState.STABLE:
                    self._log.warning(
                        "session_expired_locally",
                        member_id=core.member_id,
                        generation=core.generation,
                    )
                    return core.lose_all(E.NONE, "no answer from the coordinator in a session")
                return None
            case Rejoin(reason):
                if self.closing or core.state is not MemberState.STABLE:
                    return None
                self._log.info("rejoin_requested", reason=reason, member_id=core.member_id)
                core.request_rejoin()
                return None
        return None

    def step_done(self, step: Step) -> None:
        """The step's callbacks have run (and any retry backoff passed)."""
        if step.lost:
            self.timer.reset()

    def retry_delay_ms(self, step: Step) -> float | None:
        """How long to wait before going on after ``step``, if it asks for a retry."""
        return self.retry_backoff_ms if step.next is Next.RETRY else None

    def synced(self, sent_at: float) -> None:
        """A SyncGroup sent at ``sent_at`` was answered with an assignment: the member is
        in its new generation from then on, even if its session had run out before."""
        self.timer.steady(sent_at)
        self.zombie = False
        self.cut_off_at = None

    def joined(self, sent_at: float, held_ms: int) -> None:
        """A JoinGroup sent at ``sent_at`` was answered with a generation after the
        coordinator held it ``held_ms``: the coordinator renewed the session when it
        answered, no earlier than ``held_ms`` after the send (less a drift allowance: the
        two clocks need not run at one rate). Not the time the answer came in: it may have
        waited in a frozen process's socket for longer than the session."""
        self.timer.steady(sent_at + held_ms * (1.0 - MAX_CLOCK_DRIFT))
        self.cut_off_at = None
        self.sync_out = False

    def close(self) -> None:
        """The application closes the member: the main loop leaves the group next."""
        self.closing = True

    def join_started(self) -> None:
        """A JoinGroup is on its way: the coordinator keeps the member alive while it holds
        the join, so the watchdog does not count the session down meanwhile."""
        self.join_in_flight = True

    def join_ended(self) -> None:
        """The JoinGroup in flight was answered, or given up."""
        self.join_in_flight = False

    def leading(self, topics: set[str], counts: dict[str, int]) -> None:
        """The member leads the generation it joined: its group subscribes to ``topics``,
        and it assigns with ``counts`` (empty: it runs no assignment, a static leader back
        in the same generation). A change of those counts makes it rebalance."""
        self.group_topics = topics
        self.metadata = counts

    def sync_sent(self) -> None:
        """Its SyncGroup is out: heartbeats sent after it reach the coordinator after it
        (one connection, in order), when the member is no longer waited on, so an answer
        of NONE shows the group steady again."""
        self.sync_out = True

    # --- commits ------------------------------------------------------------------

    def commit_refusal(self, generation: Generation, now: float) -> str | None:
        """Why the member may not commit in ``generation`` at ``now``, if it may not. As
        Kafka's consumer, only a member of a generation commits: one that holds none (it
        fell out, or has not joined yet) or whose session may have run out owns nothing,
        and a coordinator would take its commit as an admin's for a group that emptied."""
        if generation.id < 0:
            return "the member is not part of an active generation of its group"
        if not self.may_process(now):
            return "the member's session may have expired: it owns nothing to commit"
        return None

    def commit_request(
        self, chunk: dict[str, list[tuple[int, int]]], metadata: str | None, generation: Generation
    ) -> OffsetCommitRequest:
        """An OffsetCommit of ``chunk`` (topic -> [(partition, offset)]) in ``generation``."""
        core = self.core
        return offset_commit(
            core.config.group_id,
            generation.id,
            generation.member_id,
            core.config.instance_id,
            chunk,
            metadata,
        )

    def commit_response(
        self, response: Response, generation: Generation, sent_at: float
    ) -> FellOut | None:
        """``commit_answered`` for an answer as it came: an error answer carries its code;
        one of another type is out of step (``ReconnectError``, raised, as for a heartbeat)."""
        if not isinstance(response, OffsetCommitResponse | ErrorResponse):
            raise ReconnectError(f"a commit answered with {type(response).__name__}")
        message = response.error_message or ""
        return self.commit_answered(response.error_code, message, generation, sent_at)

    def commit_answered(
        self, code: int, message: str, generation: Generation, sent_at: float
    ) -> FellOut | None:
        """A commit made in ``generation`` and sent at ``sent_at`` was answered ``code``: an
        accepted one proves membership since it was sent; a refusal for being out of the
        generation is an event for the main loop (the member has fallen out)."""
        if code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
            return FellOut(to_code(code), message, generation)
        if code == E.NONE:
            self.timer.answered(sent_at)
            self.cut_off_at = None
        return None

    # --- notices --------------------------------------------------------------------

    def resubscribe(self, topics: list[str], reason: str) -> Rejoin | None:
        if self.core.subscribe(topics):
            self._log.info("subscription_changed", topics=sorted(topics), reason=reason)
            return Rejoin(reason)
        return None

    def notice(self, notice: object) -> list[Event]:
        """What a notice from the coordinator means for the main loop: a rebalance of its
        group began (``RebalanceNotice``), or topics changed (``topics_changed``); anything
        else, nothing."""
        match notice:
            case RebalanceStarted(group_id=group_id, generation_id=generation):
                if group_id == self.core.config.group_id:
                    return [RebalanceNotice(generation)]
            case TopicMetadataChanged():
                return list(self.topics_changed(notice))
        return []

    def topics_changed(self, notice: TopicMetadataChanged) -> list[Rejoin]:
        """A topic was created, altered or deleted: the kept counts follow; a pattern may
        match other topics now; a leader whose group's counts changed rebalances."""
        counts = {t.name: t.partitions if t.error_code == E.NONE else 0 for t in notice.topics}
        self.counts.changed(counts)
        self.subscription.changed(counts)
        events: list[Rejoin] = []
        if self.subscription.pattern is not None:
            rejoin = self.resubscribe(self.subscription.current(), "topics matching changed")
            if rejoin is not None:
                events.append(rejoin)
        if self.core.is_leader:
            changed = [
                t.name
                for t in notice.topics
                if t.name in self.group_topics and t.partitions != self.metadata.get(t.name, 0)
            ]
            if changed:
                events.append(Rejoin(f"partition counts changed: {sorted(changed)}"))
        return events

    # --- connections ----------------------------------------------------------------

    def connected(self, grace_ms: int | None) -> None:
        """A connection is up: heartbeat at once (still a member?)."""
        self.grace_ms = grace_ms
        self.timer.sent(float("-inf"))
        self.backoff_ms = self.retry_backoff_ms

    def connection_lost(self, now: float, *, coordinator_stopping: bool = False) -> None:
        """A dynamic member whose connection is gone is removed by the coordinator after
        its disconnect grace: its partitions must count as lost well before then unless it
        is back. Static members keep session-timeout semantics, and so does a dynamic one
        whose coordinator said it was stopping as it closed the connection: it removes
        nobody for that, and the coordinator after it gives every member a fresh session."""
        grace = self.grace_ms
        if coordinator_stopping:
            return
        if self.core.config.instance_id is None and grace is not None and grace >= 0:
            self.timer.shorten(now + grace / 2)
            # The coordinator may have seen the connection end right after it last proved
            # the membership, long before the member noticed (a frozen process notices when
            # it wakes): until it proves it again, it works on nothing past that plus the
            # grace. It need not give anything up for that: back in time, it goes on.
            proof = self.timer.last_ok_sent
            if proof is not None:
                self.cut_off_at = proof + grace

    def disconnected(self) -> None:
        """The connection is gone, however it ended."""
        self.join_in_flight = False
        if self.core.state is MemberState.SYNCING:
            # its SyncGroup, if sent, may be lost with the connection: until it joins and
            # syncs again, an answer of NONE does not show the group steady
            self.sync_out = False
        self.core.on_disconnected()

    def reconnect_delay_ms(self) -> float:
        """How long to wait before connecting again; each failure in a row doubles it."""
        delay = self.backoff_ms
        self.backoff_ms = min(self.backoff_ms * 2, self.max_retry_backoff_ms)
        return delay
