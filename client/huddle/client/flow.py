"""The member's main loop, sans-IO: a generator that says what to do and is told what came of it.

``MemberFlow.serve`` runs one connection's life: rebalance whenever needed (JoinGroup, the
leader's assignment, SyncGroup), run the listener's callbacks in KIP-429's order, act on
events between rebalances, and leave on close. It never awaits: it yields an action
(``Call`` a request, ``Listen`` to call the listener, ``Sleep``, ``Receive`` the next event,
``Post`` an event, ``Failed``) and is resumed with the action's result, or has the action's
exception thrown in. The member runtime (``huddle.client.member``) performs the actions on
anyio and a real connection; the simulator (``huddle.sim``) performs them under a
simulated clock and network. Both run this very code.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from huddle.client.driver import MemberDriver
from huddle.client.events import Event, ReconnectError, Rejoin, SessionExpired
from huddle.client.leader import subscribed_topics
from huddle.client.member_core import MemberState, Next, Step
from huddle.client.partition_counts import Scope
from huddle.logs import library_logger
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    MAX_ITEMS,
    ErrorResponse,
    JoinGroupResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    Request,
    Response,
    SyncGroupAssignment,
    SyncGroupResponse,
)

log = library_logger("huddle.member")
E = ErrorCode
R = TypeVar("R", bound=Response)
LEAVE_TIMEOUT_MS = 5_000


@dataclass(frozen=True, slots=True)
class Call:
    """Send ``request``; resume with the answer as ``expect`` (an error answer becomes one
    carrying its code), or the raw answer if ``expect`` is None. ``timeout_ms`` None: the
    session timeout. ``loaded``: COORDINATOR_LOAD_IN_PROGRESS is retried within it. A
    JoinGroup resumes with None if the member closes while it waits."""

    request: Request
    expect: type[Response] | None
    timeout_ms: float | None = None
    loaded: bool = False


@dataclass(frozen=True, slots=True)
class Listen:
    """Call the listener's ``name`` with ``partitions``."""

    name: str
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class Replicas:
    """Call the listener's ``on_replicas_assigned``."""

    standby: frozenset[TopicPartition]
    warmup: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class Sleep:
    ms: float


@dataclass(frozen=True, slots=True)
class Receive:
    """Resume with the next event, or None once ``deadline_ms`` (if any) has passed."""

    deadline_ms: float | None


@dataclass(frozen=True, slots=True)
class Post:
    """Queue ``event`` for this loop (it is received later, in order)."""

    event: Event


@dataclass(frozen=True, slots=True)
class Failed:
    """The member stops with a fatal error (the flow raises ``ReconnectError`` right after)."""

    code: ErrorCode
    message: str


Action = Call | Listen | Replicas | Sleep | Receive | Post | Failed
Flow = Generator[Action, Any, None]


def answer_as(response: Response, expect: type[R]) -> R:
    """``response`` as the type expected: an ErrorResponse becomes one carrying its code; an
    answer of another type means the connection is out of step (``ReconnectError``)."""
    if isinstance(response, ErrorResponse):
        failed: R = expect(  # every response type carries these two fields
            error_code=response.error_code,
            error_message=response.error_message,
        )
        return failed
    if not isinstance(response, expect):
        raise ReconnectError(f"expected {expect.__name__}, got {type(response).__name__}")
    return response


class Host(Protocol):
    """What the flow asks of whoever runs it, without an action."""

    def now_ms(self) -> float:
        """The runtime's monotonic clock, in milliseconds."""

    def counts_scope(self) -> Scope:
        """What kept partition counts are valid for (see ``PartitionCounts``)."""

    def lags(self) -> Mapping[TopicPartition, int] | None:
        """The lag of the member's local state per task (KIP-441), if it keeps any."""


class MemberFlow:
    def __init__(self, driver: MemberDriver, host: Host) -> None:
        self.driver = driver
        self.core = driver.core
        self.host = host
        # a step whose callbacks a lost connection cut off, and those that had begun
        self.owed: tuple[Step, set[str]] | None = None
        self._log = log.bind(group_id=driver.core.config.group_id)

    # --- one connection ---------------------------------------------------------------

    def serve(self) -> Flow:
        """Rebalance whenever needed; between rebalances, act on events. Returns on close."""
        core, driver = self.core, self.driver
        yield from self._refresh_pattern()
        yield from self._recheck_counts()
        while True:
            if driver.closing:
                yield from self._leave()
                return
            if core.state is MemberState.UNJOINED:
                yield from self._rebalance()
                continue
            event = yield Receive(core.rejoin_at_ms)
            if event is None:  # the scheduled rebalance is due
                event = core.on_deadline(self.host.now_ms()) or Rejoin("a deadline passed")
            step = event if isinstance(event, Step) else driver.on_event(event)
            if step is not None:
                yield from self.apply(step)

    def owed_callbacks(self) -> Flow:
        """The callbacks of a step that a lost connection cut off and that had not begun
        (the member already acts on that step: the application must hear of all of it,
        in order, before anything else happens)."""
        owed, self.owed = self.owed, None
        if owed is not None:
            step, begun = owed
            yield from self._callbacks(step, begun)
            self.driver.step_done(step)

    def expired_while_disconnected(self, expired: SessionExpired) -> Flow:
        """The session ran out while the member had no connection: what it owned is lost
        now (``on_partitions_lost``), not once it is connected again. The same event,
        queued for the main loop, is stale by then and changes nothing, even if the member
        has rejoined into the very generation it names (``Generation.join`` tells them
        apart)."""
        step = self.driver.on_event(expired)
        if step is not None:
            yield from self._callbacks(step)
            self.driver.step_done(step)

    def given_up_lost(self) -> Flow:
        """A member whose callback overran gave itself up meanwhile (``give_up``; a dynamic
        one left the group), and the event saying so waits in its queue: before it joins
        or leaves, that stay is lost (``on_partitions_lost``) and its member id dropped,
        so it neither rejoins with the id it left with nor revokes what it gave up. The
        queued event changes nothing after that (its stay is gone)."""
        gave_up = self.driver.given_up
        if gave_up is not None:
            step = self.driver.on_event(SessionExpired(gave_up))
            if step is not None:
                yield from self.apply(step)

    def closed_while_disconnected(self) -> Flow:
        """Closing while disconnected: what it owned can no longer be handed over cleanly."""
        if self.core.owned:
            yield from self.apply(self.core.lose_all())

    def _rebalance(self) -> Flow:
        core, driver = self.core, self.driver
        yield from self._refresh_pattern()
        yield from self.given_up_lost()
        yield from self.apply(core.before_join(driver.subscription.gone()))
        config = core.config
        while core.state is MemberState.UNJOINED and not driver.closing:
            yield from self.given_up_lost()  # a revocation above may have overrun
            request = core.join_request(self.host.lags())
            driver.join_started()
            sent = self.host.now_ms()
            try:
                timeout = config.rebalance_timeout_ms + config.session_timeout_ms
                response = yield Call(request, JoinGroupResponse, timeout)
            finally:
                driver.join_ended()
            if response is None:  # the member is closing
                core.join_abandoned()
                return
            step = core.on_join(response)
            if step.next is Next.SYNC:
                driver.joined(sent, response.held_ms)
                yield from self._sync()
                return
            yield from self.apply(step)

    def _sync(self) -> Flow:
        core, driver = self.core, self.driver
        assignments: list[SyncGroupAssignment] = []
        if core.leader == core.member_id and core.skip_assignment:
            # A static leader back in the same generation (KIP-345) runs no assignment: it
            # does not know the counts the group was assigned with, so any change of its
            # topics' counts makes it rebalance (it would have ignored them).
            driver.leading(subscribed_topics(core.subscriptions()), {})
        elif core.leader == core.member_id:
            subscriptions = core.subscriptions()
            topics = subscribed_topics(subscriptions)
            counts = yield from self._partition_counts(topics)
            driver.leading(topics, counts)
            assignments = core.assign(subscriptions, counts, self.host.now_ms())
            self._log.info(
                "assignment_computed",
                generation=core.generation,
                protocol_name=core.protocol_name,
                members=len(subscriptions),
            )
        request = core.sync_request(assignments)
        sent = self.host.now_ms()
        driver.sync_sent()
        # a follower's SyncGroup waits for the leader's assignment, as long as the sync
        # phase may last (the rebalance timeout), not one session
        config = core.config
        timeout = config.rebalance_timeout_ms + config.session_timeout_ms
        response = yield Call(request, SyncGroupResponse, timeout)
        if response.error_code == E.NONE:
            driver.synced(sent)
        step = core.on_sync(response, self.host.now_ms())
        if response.error_code == E.NONE:
            self._log.info(
                "member_synced",
                member_id=core.member_id,
                generation=core.generation,
                assigned=len(core.owned),
                revoked=len(step.revoked),
                leader=core.leader,
            )
        yield from self.apply(step)

    # --- steps and callbacks ----------------------------------------------------------

    def apply(self, step: Step) -> Flow:
        """Run the step's callbacks, then do what it says next."""
        yield from self._callbacks(step)
        match step.next:
            case Next.FAIL:
                self._log.error("member_failed", error_code=step.error.name, error=step.message)
                yield Failed(step.error, step.message)
                raise ReconnectError(f"{step.error.name}: {step.message}")
            case Next.RECONNECT:
                raise ReconnectError(f"{step.error.name}: {step.message}")
            case Next.RETRY:
                self._log.info("member_retrying", error_code=step.error.name, error=step.message)
        delay = self.driver.retry_delay_ms(step)
        if delay is not None:
            yield Sleep(delay)
        self.driver.step_done(step)

    def _callbacks(self, step: Step, begun: set[str] | None = None) -> Flow:
        """One bound for the whole step, as Kafka's for one poll: lost, revoked, the
        assignor's on_assignment, assigned, replicas (KIP-429's order). Until they have
        all run, the step is ``owed`` (``begun``: those that have started)."""
        done = set() if begun is None else begun
        self.owed = (step, done)
        outer = self.driver.callbacks_began(self.host.now_ms())
        try:
            for name, partitions in (
                ("on_partitions_lost", step.lost),
                ("on_partitions_revoked", step.revoked),
            ):
                if partitions and name not in done:
                    done.add(name)
                    yield from self.listen(name, partitions)
            if "on_assignment" not in done:
                done.add("on_assignment")
                self.core.assignment_received(step)
            if step.assigned is not None and "on_partitions_assigned" not in done:
                done.add("on_partitions_assigned")
                yield from self.listen("on_partitions_assigned", step.assigned)
            if step.replicas is not None and "on_replicas_assigned" not in done:
                done.add("on_replicas_assigned")
                standby, warmup = step.replicas
                self._log.info(
                    "listener_called",
                    callback="on_replicas_assigned",
                    standby=len(standby),
                    warmup=len(warmup),
                )
                yield Replicas(standby, warmup)
            self.owed = None
        finally:
            self.driver.callbacks_ended(outer)

    def listen(self, name: str, partitions: frozenset[TopicPartition]) -> Flow:
        self._log.info(
            "listener_called",
            callback=name,
            partitions=len(partitions),
            generation=self.core.generation,
        )
        outer = self.driver.callbacks_began(self.host.now_ms())
        try:
            yield Listen(name, partitions)
        finally:
            self.driver.callbacks_ended(outer)

    # --- leaving, topics --------------------------------------------------------------

    def _leave(self) -> Flow:
        core = self.core
        yield from self.given_up_lost()
        revoked = core.leaving()
        if revoked:
            yield from self.listen("on_partitions_revoked", revoked)
        request = core.leave_request()
        if request is not None:
            try:
                yield Call(request, None, LEAVE_TIMEOUT_MS)
                self._log.info("member_left", member_id=core.member_id)
            except (ConnectionError, TimeoutError) as exc:
                self._log.warning("leave_failed", error=str(exc))

    def _refresh_pattern(self) -> Flow:
        """With a pattern: match it against every topic the coordinator has now (on each
        connection and before each join: notices missed while away are made up for)."""
        subscription = self.driver.subscription
        if subscription.pattern is None:
            return
        listed = yield Call(ListTopicsRequest(topics=None), ListTopicsResponse, loaded=True)
        if listed.error_code == E.NONE:
            subscription.listed(t.name for t in listed.topics if t.error_code == E.NONE)
            rejoin = self.driver.resubscribe(
                subscription.current(), "topics matching the pattern changed"
            )
            if rejoin is not None:
                yield Post(rejoin)

    def _recheck_counts(self) -> Flow:
        """A leader that was away may have missed a topic's ``TopicMetadataChanged``: it
        asks for the counts of its group's topics on each connection and rebalances if they
        are not the ones it assigned with (Kafka's leader compares metadata snapshots)."""
        driver = self.driver
        if not self.core.is_leader or not driver.group_topics:
            return
        assigned_with = dict(driver.metadata)
        counts = yield from self._partition_counts(driver.group_topics)
        changed = sorted(
            t for t in driver.group_topics if counts.get(t, 0) != assigned_with.get(t, 0)
        )
        if changed:
            yield Post(Rejoin(f"partition counts changed while away: {changed}"))

    def _partition_counts(self, topics: set[str]) -> Generator[Action, Any, dict[str, int]]:
        if not topics:
            return {}
        # a notice dropped on this connection may have been a topic change: fetch again
        scope = self.host.counts_scope()
        now_s = self.host.now_ms() / 1000
        kept = self.driver.counts.get(topics, now_s, scope)
        if kept is not None:
            return kept
        names = sorted(topics)
        counts: dict[str, int] = {}
        for start in range(0, len(names), MAX_ITEMS):  # a request names so many at most
            response = yield Call(
                ListTopicsRequest(topics=names[start : start + MAX_ITEMS]), ListTopicsResponse
            )
            counts.update((t.name, t.partitions) for t in response.topics if t.error_code == E.NONE)
        self.driver.counts.store(topics, counts, now_s, scope)
        return counts
