"""The member runtime: a thin anyio shell around ``MemberCore``.

One task group owns everything the member runs: the main loop (the only code that changes
the core and calls the listener, so callbacks never overlap and follow KIP-429's order),
the heartbeat task and the notice reader of the current connection, and a watchdog that
declares the member's partitions lost when its session may have run out. Leaving the
``async with`` revokes what the member owns, sends LeaveGroup (dynamic members only) and
returns with nothing left running.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Self, TypeVar

import anyio
import anyio.lowlevel
import structlog
from anyio.abc import TaskGroup

import huddle.client.assignors  # noqa: F401 - registers the built-in assignors
from huddle.client.assignors.base import ASSIGNORS, Assignor
from huddle.client.connection import Connection, ConnectionClosedError, connect
from huddle.client.events import (
    CommitFailedError,
    Event,
    FellOut,
    HeartbeatAnswer,
    MemberFailedError,
    NotConnectedError,
    RebalanceNotice,
    Reconnect,
    Rejoin,
    SessionExpired,
)
from huddle.client.leader import subscribed_topics
from huddle.client.listener import RebalanceListener
from huddle.client.machine import MemberConfig, MemberCore, MemberState, Next, Step
from huddle.client.partition_counts import PartitionCounts
from huddle.client.subscription import Subscription
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ErrorCode, error_name, raise_for, to_code
from huddle.protocol.messages import (
    MAX_ITEMS,
    ErrorResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    RebalanceStarted,
    Request,
    Response,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicMetadataChanged,
)

log = structlog.get_logger("huddle.member")
E = ErrorCode
R = TypeVar("R", bound=Response)
V = TypeVar("V")
REQUEST_PARTITIONS = 10_000  # partitions per offset commit or fetch request, at most


class Member:
    """A group member. Use as ``async with Member(...) as member:``."""

    def __init__(
        self,
        bootstrap: str,
        *,
        group_id: str,
        topics: Sequence[str] | None = None,
        pattern: str | re.Pattern[str] | None = None,
        assignors: Sequence[str | Assignor] = ("cooperative-sticky",),
        instance_id: str | None = None,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 1_000,
        rebalance_timeout_ms: int = 30_000,
        listener: RebalanceListener | None = None,
        client_id: str = "huddle-member",
        retry_backoff_ms: int = 100,
        max_retry_backoff_ms: int = 5_000,
        lags: Callable[[], Mapping[TopicPartition, int]] | None = None,
    ) -> None:
        if not group_id:
            raise ValueError("group_id must not be empty")
        self._subscription = Subscription(topics, pattern)  # ValueError, TypeError
        resolved = [ASSIGNORS.create(a) if isinstance(a, str) else a for a in assignors]
        self._bootstrap = bootstrap
        self._core = MemberCore(
            MemberConfig(
                group_id=group_id,
                topics=self._subscription.current(),
                instance_id=instance_id,
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                client_id=client_id,
            ),
            resolved,
        )
        self._timer = self._core.session  # the core's session clock, in milliseconds
        self._listener = listener or RebalanceListener()
        self._lags = lags
        self._backoff_s = retry_backoff_ms / 1000
        self._max_backoff_s = max_retry_backoff_ms / 1000
        send, receive = anyio.create_memory_object_stream[Event](1_000)
        self._events_in, self._events = send, receive
        self._changed = anyio.Event()
        self._conn: Connection | None = None
        self._tg: TaskGroup | None = None
        self._closing = False
        self._failure: MemberFailedError | None = None
        self._listener_since: float | None = None  # when the running callback began (ms)
        self._zombie = False  # the session expired locally: owns nothing until that is handled
        self._overdue_logged = False
        self._join_in_flight = False
        self._join_scope: anyio.CancelScope | None = None
        self._closed = False
        self._close_requested = anyio.Event()
        self._grace_ms: int | None = None
        self._metadata: dict[str, int] = {}  # the partition counts the leader assigned with
        self._counts = PartitionCounts()  # kept between rebalances, updated by notices
        self._group_topics: set[str] = set()
        self._log = log.bind(group_id=group_id, client_id=client_id)

    # --- what the application sees --------------------------------------------------

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this member owns right now.

        Empty as soon as the member's session may have expired, even before
        ``on_partitions_lost`` has run: a process that was frozen (SIGSTOP, a long GC
        pause) and wakes up must not process anything before it finds out it was dropped.
        """
        try:
            now = _now_ms()
        except RuntimeError:  # not in the event loop: no clock to judge by
            return self._core.owned
        if self._zombie or self._timer.expired(now) or self._listener_overdue(now):
            return frozenset()
        return self._core.owned

    @property
    def standby(self) -> frozenset[TopicPartition]:
        """Tasks whose state this member keeps warm as a standby (KIP-441)."""
        return self._core.standby

    @property
    def warmup(self) -> frozenset[TopicPartition]:
        """Tasks this member is catching up on before it may take them over (KIP-441)."""
        return self._core.warmup

    @property
    def member_id(self) -> str:
        return self._core.member_id

    @property
    def generation(self) -> int:
        return self._core.generation

    @property
    def is_leader(self) -> bool:
        return self._core.is_leader

    @property
    def state(self) -> MemberState:
        return self._core.state

    @property
    def connected(self) -> bool:
        """Whether the member has a live connection to the coordinator right now."""
        return self._conn is not None

    @property
    def protocol(self) -> str | None:
        """The embedded protocol (assignor) the group chose."""
        return self._core.protocol_name

    @property
    def rebalance_protocol(self) -> str:
        return self._core.rebalance_protocol.name.lower()

    def _stable(self) -> bool:
        return (
            self._core.state is MemberState.STABLE
            and self._conn is not None
            and self._events.statistics().current_buffer_used == 0
            and self._core.rejoin_at_ms is None
        )

    async def wait_stable(self, timeout: float | None = None) -> None:
        """Until the member is joined and synced with no follow-up rebalance pending."""
        with anyio.fail_after(timeout):
            while True:
                if self._failure is not None:
                    raise self._failure
                if self._stable():
                    return
                await self._changed.wait()

    @property
    def subscription(self) -> list[str]:
        """The topics the member subscribes to now (with a pattern: those it matches)."""
        return list(self._core.config.topics)

    async def subscribe(self, topics: Sequence[str]) -> None:
        """Subscribe to ``topics`` instead (a pattern given before is dropped). The member
        rejoins with the new subscription; partitions of topics it drops are revoked
        through the listener before it joins."""
        self._resubscribe(self._subscription.use(topics), "the subscription changed")
        await anyio.lowlevel.checkpoint()

    def _resubscribe(self, topics: Sequence[str], reason: str) -> None:
        if self._core.subscribe(topics):
            self._log.info("subscription_changed", topics=sorted(topics), reason=reason)
            self._post(Rejoin(reason))

    async def commit(
        self, offsets: Mapping[TopicPartition, int], *, metadata: str | None = None
    ) -> None:
        """Commit offsets in the member's current generation. Raises CommitFailedError if
        the member is no longer in that generation (its partitions are then lost), and
        the registered HuddleError for other refusals (e.g. REBALANCE_IN_PROGRESS).

        More than ``REQUEST_PARTITIONS`` offsets go in several requests, one after another
        (a coordinator bounds the partitions one request may name)."""
        conn = self._require_connection()
        core = self._core
        generation = core.current
        for chunk in _by_topic(list(offsets.items()), REQUEST_PARTITIONS):
            request = OffsetCommitRequest(
                group_id=core.config.group_id,
                generation_id=generation.id,
                member_id=core.member_id,
                group_instance_id=core.config.instance_id,
                topics=[
                    OffsetCommitTopic(
                        name=topic,
                        partitions=[
                            OffsetCommitPartition(partition=p, offset=offset, metadata=metadata)
                            for p, offset in partitions
                        ],
                    )
                    for topic, partitions in chunk.items()
                ],
            )
            sent = _now_ms()
            response = await self._request(conn, request, OffsetCommitResponse, loaded=True)
            if response.error_code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
                message = response.error_message or ""
                code = to_code(response.error_code)
                self._post(FellOut(code, message, generation))
                raise CommitFailedError(code, message)
            if response.error_code != E.NONE:
                raise_for(response.error_code, response.error_message)
            self._timer.answered(sent)
            for topic in response.topics:
                for p in topic.partitions:
                    if p.error_code != E.NONE:
                        raise_for(p.error_code, f"{topic.name}-{p.partition}")

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The committed offset of each partition, None where nothing is committed (in
        requests of at most ``REQUEST_PARTITIONS`` partitions)."""
        conn = self._require_connection()
        found: dict[TopicPartition, int | None] = {}
        wanted = [(tp, None) for tp in dict.fromkeys(partitions)]
        for chunk in _by_topic(wanted, REQUEST_PARTITIONS):
            request = OffsetFetchRequest(
                group_id=self._core.config.group_id,
                topics=[
                    OffsetFetchTopic(name=t, partitions=[p for p, _ in ps])
                    for t, ps in chunk.items()
                ],
            )
            response = await self._request(conn, request, OffsetFetchResponse, loaded=True)
            raise_for(response.error_code, response.error_message)
            for t in response.topics:
                for p in t.partitions:
                    found[TopicPartition(t.name, p.partition)] = p.offset if p.offset >= 0 else None
        return found

    # --- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tg is not None:
            raise RuntimeError("a Member can be entered only once")
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._run_guarded)
        self._tg.start_soon(self._watchdog)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        self._closing = True
        self._close_requested.set()
        if self._join_scope is not None:
            self._join_scope.cancel()  # a held JoinGroup would keep us waiting
        self._post(Rejoin("closing"))
        self._notify()
        # The body was cancelled by this member's own task group when the member failed
        # (see _run_guarded): the task group absorbs that, and the failure is raised instead.
        cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
        absorbed = False
        try:
            with anyio.move_on_after(self._core.config.session_timeout_ms / 1000) as scope:
                while self._core.state is not MemberState.FAILED and not self._closed:
                    await self._changed.wait()
            if scope.cancelled_caught:
                self._log.warning("close_timed_out")
        finally:
            self._tg.cancel_scope.cancel()
            if cancelled:
                absorbed = bool(await self._tg.__aexit__(exc_type, exc, tb))
            else:
                await self._tg.__aexit__(None, None, None)
            self._events_in.close()
            self._events.close()
        failure = self._failure
        if failure is not None and failure.__cause__ is not None and (exc is None or absorbed):
            raise failure
        return absorbed or None

    async def _run_guarded(self) -> None:
        """The main loop; an exception from the application's listener or assignor (or a bug)
        stops the member with MemberFailedError, its cause chained, instead of tearing the
        task group (and the application's code inside ``async with``) down with it."""
        try:
            await self._run()
        except Exception as exc:
            cause = _first_error(exc)
            failure = MemberFailedError(None, f"{type(cause).__name__}: {cause}")
            failure.__cause__ = cause
            self._log.error("member_failed", error=repr(cause))
            self._failure = failure
            self._closed = True
            self._notify()
            await anyio.lowlevel.checkpoint()  # a wait_stable() waiting raises it first
            assert self._tg is not None
            self._tg.cancel_scope.cancel()  # wake an application waiting on anything else

    # --- the main loop ---------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self._backoff_s
        while not self._closing and self._failure is None:
            try:
                async with (
                    connect(self._bootstrap, client_id=self._core.config.client_id) as conn,
                    anyio.create_task_group() as tg,
                ):
                    self._conn = conn
                    self._grace_ms = conn.disconnect_grace_ms
                    self._timer.sent(float("-inf"))  # heartbeat at once: still a member?
                    backoff = self._backoff_s
                    self._log.info("member_connected", member_id=self._core.member_id)
                    tg.start_soon(self._read_notices, conn)
                    tg.start_soon(self._heartbeats, conn)
                    await self._serve(conn)
                    tg.cancel_scope.cancel()
            except* (ConnectionClosedError, OSError, TimeoutError, Reconnect) as group:
                reasons = "; ".join(str(e) or type(e).__name__ for e in group.exceptions)
                self._log.info("member_disconnected", reason=reasons)
                self._on_connection_lost()
            finally:
                self._conn = None
                self._join_in_flight = False
                self._core.on_disconnected()
                self._notify()
            if not self._closing and self._failure is None:
                with anyio.move_on_after(backoff):
                    await self._close_requested.wait()
                backoff = min(backoff * 2, self._max_backoff_s)
        if self._closing and self._failure is None and self._core.owned:
            # Closing while disconnected: what it owned can no longer be handed over cleanly.
            await self._callbacks(self._core.lose_all())
        self._closed = True
        self._notify()

    async def _refresh_pattern(self, conn: Connection) -> None:
        """With a pattern: match it against every topic the coordinator has now (on each
        connection and before each join: notices missed while away are made up for)."""
        if self._subscription.pattern is None:
            return
        listed = await self._request(
            conn, ListTopicsRequest(topics=None), ListTopicsResponse, loaded=True
        )
        if listed.error_code == E.NONE:
            self._subscription.listed(t.name for t in listed.topics if t.error_code == E.NONE)
            self._resubscribe(self._subscription.current(), "topics matching the pattern changed")

    async def _serve(self, conn: Connection) -> None:
        """Rebalance whenever needed; between rebalances, act on events. Returns on close."""
        core = self._core
        await self._refresh_pattern(conn)
        while True:
            if self._closing:
                await self._leave(conn)
                return
            if core.state is MemberState.UNJOINED:
                await self._rebalance(conn)
                continue
            self._notify()
            event = await self._next_event()
            step = event if isinstance(event, Step) else self._on_event(event)
            if step is not None:
                await self._apply(step)

    async def _next_event(self) -> Event | Step:
        """The next event for the core, or what the core did at a deadline it gave."""
        due = self._core.rejoin_at_ms
        if due is None:
            return await self._events.receive()
        with anyio.move_on_at(due / 1000):
            return await self._events.receive()
        step = self._core.on_deadline(_now_ms())
        return step if step is not None else Rejoin("a deadline passed")

    def _on_event(self, event: Event) -> Step | None:
        core = self._core
        match event:
            case HeartbeatAnswer(code, generation):
                return core.on_heartbeat(code, generation)
            case RebalanceNotice(generation):
                return core.on_rebalance_notice(generation)
            case FellOut(code, message, generation):
                return core.on_commit_error(code, message, generation)
            case SessionExpired():
                self._zombie = False  # what it owned is lost just below
                if core.owned or core.state is MemberState.STABLE:
                    self._log.warning(
                        "session_expired_locally",
                        member_id=core.member_id,
                        generation=core.generation,
                    )
                    return core.lose_all(E.NONE, "no answer from the coordinator in a session")
                return None
            case Rejoin(reason):
                if self._closing or core.state is not MemberState.STABLE:
                    return None
                self._log.info("rejoin_requested", reason=reason, member_id=core.member_id)
                core.request_rejoin()
                return None
        return None

    async def _rebalance(self, conn: Connection) -> None:
        core = self._core
        await self._refresh_pattern(conn)
        await self._apply(core.before_join(self._subscription.gone()))
        while core.state is MemberState.UNJOINED and not self._closing:
            request = core.join_request(self._lags() if self._lags is not None else None)
            self._join_in_flight = True
            timeout = (core.config.rebalance_timeout_ms + core.config.session_timeout_ms) / 1000
            response: JoinGroupResponse | None = None
            try:
                with anyio.CancelScope() as self._join_scope:
                    response = await self._request(
                        conn, request, JoinGroupResponse, timeout=timeout
                    )
            finally:
                self._join_in_flight = False
                self._join_scope = None
            if response is None:  # cancelled: the member is closing
                core.join_abandoned()
                return
            step = core.on_join(response)
            if step.next is Next.SYNC:
                self._timer.answered(_now_ms())
                await self._sync(conn)
                return
            await self._apply(step)

    async def _sync(self, conn: Connection) -> None:
        core = self._core
        assignments: list[SyncGroupAssignment] = []
        if core.leader == core.member_id and not core.skip_assignment:
            subscriptions = core.subscriptions()
            self._group_topics = subscribed_topics(subscriptions)
            self._metadata = await self._partition_counts(conn, self._group_topics)
            assignments = core.assign(subscriptions, self._metadata, _now_ms())
            self._log.info(
                "assignment_computed",
                generation=core.generation,
                protocol_name=core.protocol_name,
                members=len(subscriptions),
            )
        request = SyncGroupRequest(
            group_id=core.config.group_id,
            generation_id=core.generation,
            member_id=core.member_id,
            group_instance_id=core.config.instance_id,
            protocol_type=None,
            protocol_name=core.protocol_name,
            assignments=assignments,
        )
        sent = _now_ms()
        response = await self._request(conn, request, SyncGroupResponse)
        if response.error_code == E.NONE:
            self._timer.answered(sent)
        step = core.on_sync(response, _now_ms())
        if response.error_code == E.NONE:
            self._log.info(
                "member_synced",
                member_id=core.member_id,
                generation=core.generation,
                assigned=len(core.owned),
                revoked=len(step.revoked),
                leader=core.leader,
            )
        await self._apply(step)

    async def _apply(self, step: Step) -> None:
        await self._callbacks(step)
        match step.next:
            case Next.FAIL:
                self._failure = MemberFailedError(step.error, step.message)
                self._log.error("member_failed", error_code=step.error.name, error=step.message)
                self._notify()
                raise Reconnect(str(self._failure))
            case Next.RECONNECT:
                raise Reconnect(f"{step.error.name}: {step.message}")
            case Next.RETRY:
                self._log.info("member_retrying", error_code=step.error.name, error=step.message)
                await anyio.sleep(self._backoff_s)
            case _:
                pass
        if step.lost:
            self._timer.reset()

    async def _callbacks(self, step: Step) -> None:
        listener = self._listener
        self._notify()  # the step changed the state: heartbeats may be due while these run
        with self._timed():  # one bound for the whole step, as Kafka's for one poll
            for name, partitions in (
                ("on_partitions_lost", step.lost),
                ("on_partitions_revoked", step.revoked),
            ):
                if partitions:
                    await self._call_listener(name, partitions)
            self._core.assignment_received(step)  # the assignor's on_assignment, in between
            if step.assigned is not None:
                await self._call_listener("on_partitions_assigned", step.assigned)
            if step.replicas is not None:
                standby, warmup = step.replicas
                self._log.info(
                    "listener_called",
                    callback="on_replicas_assigned",
                    standby=len(standby),
                    warmup=len(warmup),
                )
                try:
                    await listener.on_replicas_assigned(standby, warmup)
                except Exception:
                    self._log.exception("listener_failed", callback="on_replicas_assigned")
                    raise  # the member stops: MemberFailedError, this as its cause

    async def _call_listener(self, name: str, partitions: frozenset[TopicPartition]) -> None:
        self._log.info(
            "listener_called", callback=name, partitions=len(partitions), generation=self.generation
        )
        with self._timed():
            try:
                await getattr(self._listener, name)(partitions)
            except Exception:
                self._log.exception("listener_failed", callback=name)
                raise  # the member stops: MemberFailedError, this as its cause

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        """Callbacks run on one clock, started by the outermost: together they may take
        the rebalance timeout (``_listener_overdue``)."""
        outer = self._listener_since is None
        if outer:
            self._listener_since = _now_ms()
            self._overdue_logged = False
        try:
            yield
        finally:
            if outer:
                self._listener_since = None
                self._notify()

    def _listener_overdue(self, now: float) -> bool:
        """A callback has run longer than the rebalance timeout (Kafka's
        max.poll.interval.ms): the member owns nothing and stops heartbeating."""
        since = self._listener_since
        return since is not None and now - since > self._core.config.rebalance_timeout_ms

    def _give_up(self, now: float) -> None:
        """Once per overrun callback: the group goes on without this member; it handles
        the loss (on_partitions_lost, a new member id) when the callback returns."""
        if self._overdue_logged:
            return
        self._overdue_logged = True
        self._zombie = True
        self._post(SessionExpired())
        since = self._listener_since if self._listener_since is not None else now
        self._log.warning("listener_too_slow", waited_ms=int(now - since), member_id=self.member_id)

    async def _leave(self, conn: Connection) -> None:
        core = self._core
        revoked = core.leaving()
        if revoked:
            await self._call_listener("on_partitions_revoked", revoked)
        request = core.leave_request()
        if request is not None:
            try:
                await conn.request(request, timeout=5)
                self._log.info("member_left", member_id=core.member_id)
            except (ConnectionClosedError, TimeoutError) as exc:
                self._log.warning("leave_failed", error=str(exc))

    # --- the other tasks -------------------------------------------------------------

    async def _heartbeats(self, conn: Connection) -> None:
        core, timer = self._core, self._timer
        while True:
            now = _now_ms()
            if self._listener_overdue(now):
                self._give_up(now)
                await self._changed.wait()
                continue
            if not core.heartbeats_due:
                await self._changed.wait()
                continue
            due = timer.next_heartbeat()
            if now < due:
                with anyio.move_on_after((due - now) / 1000):
                    await self._changed.wait()
                continue
            generation = core.current
            timer.sent(now)
            timeout_s = timer.session_ms / 1000
            response = await conn.request(core.heartbeat_request(), timeout=timeout_s)
            code = response.error_code if isinstance(response, HeartbeatResponse) else E.NONE
            if isinstance(response, ErrorResponse):
                code = response.error_code
            if code in (E.NONE, E.REBALANCE_IN_PROGRESS):
                timer.answered(now)
            else:
                self._log.info("heartbeat_error", error_code=code, error=error_name(code))
            if code != E.NONE:
                self._post(HeartbeatAnswer(to_code(code), generation))

    async def _read_notices(self, conn: Connection) -> None:
        group_id = self._core.config.group_id
        async for notice in conn.notices:
            if isinstance(notice, RebalanceStarted) and notice.group_id == group_id:
                self._post(RebalanceNotice(notice.generation_id))
            elif isinstance(notice, TopicMetadataChanged):
                counts = {
                    t.name: t.partitions if t.error_code == E.NONE else 0 for t in notice.topics
                }
                self._counts.changed(counts)
                self._subscription.changed(counts)
                if self._subscription.pattern is not None:
                    self._resubscribe(self._subscription.current(), "topics matching changed")
                if not self._core.is_leader:
                    continue
                changed = [
                    t.name
                    for t in notice.topics
                    if t.name in self._group_topics
                    and t.partitions != self._metadata.get(t.name, 0)
                ]
                if changed:
                    self._post(Rejoin(f"partition counts changed: {sorted(changed)}"))
        # The stream ends with the connection: notice that now, not at the next heartbeat.
        raise ConnectionClosedError(conn.close_reason or "the connection closed")

    async def _watchdog(self) -> None:
        """Zombie safety: partitions are lost once the session may have expired."""
        while True:
            deadline = self._timer.session_deadline()
            if deadline is None or self._join_in_flight:
                with anyio.move_on_after(self._timer.interval_ms / 1000):
                    await self._changed.wait()
                continue
            now = _now_ms()
            if now < deadline:
                with anyio.move_on_after((deadline - now) / 1000):
                    await self._changed.wait()
                continue
            # Owns nothing from now on, even before the main loop (maybe inside a callback,
            # or reconnecting) has run on_partitions_lost.
            self._zombie = True
            self._timer.reset()
            self._post(SessionExpired())

    def _on_connection_lost(self) -> None:
        """A dynamic member whose connection is gone is removed by the coordinator after
        its disconnect grace: its partitions must count as lost well before then unless it
        is back. Static members keep session-timeout semantics."""
        grace_ms = self._grace_ms
        if self._core.config.instance_id is None and grace_ms is not None and grace_ms >= 0:
            self._timer.shorten(_now_ms() + grace_ms / 2)

    # --- plumbing --------------------------------------------------------------------

    def _post(self, event: Event) -> None:
        try:
            self._events_in.send_nowait(event)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._log.warning("member_event_dropped", event=type(event).__name__)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _require_connection(self) -> Connection:
        if self._conn is None:
            raise NotConnectedError("the member is not connected to the coordinator")
        return self._conn

    async def _request(
        self,
        conn: Connection,
        request: Request,
        expect: type[R],
        *,
        timeout: float | None = None,
        loaded: bool = False,
    ) -> R:
        """Send a request; an ErrorResponse becomes the expected type carrying its code.
        With ``loaded``, COORDINATOR_LOAD_IN_PROGRESS is retried within the timeout."""
        wait = timeout if timeout is not None else self._core.config.session_timeout_ms / 1000
        if loaded:
            response = await conn.request_loaded(request, timeout=wait)
        else:
            response = await conn.request(request, timeout=wait)
        if isinstance(response, ErrorResponse):
            failed: R = expect(  # every response type carries these two fields
                error_code=response.error_code,
                error_message=response.error_message,
            )
            return failed
        if not isinstance(response, expect):
            raise Reconnect(f"expected {expect.__name__}, got {type(response).__name__}")
        return response

    async def _partition_counts(self, conn: Connection, topics: set[str]) -> dict[str, int]:
        if not topics:
            return {}
        # a notice dropped on this connection may have been a topic change: fetch again
        scope = (conn, self._core.member_id, conn.notices_dropped)
        now = anyio.current_time()
        kept = self._counts.get(topics, now, scope)
        if kept is not None:
            return kept
        names = sorted(topics)
        counts: dict[str, int] = {}
        for start in range(0, len(names), MAX_ITEMS):  # a request names so many at most
            response = await self._request(
                conn, ListTopicsRequest(topics=names[start : start + MAX_ITEMS]), ListTopicsResponse
            )
            counts.update((t.name, t.partitions) for t in response.topics if t.error_code == E.NONE)
        self._counts.store(topics, counts, now, scope)
        return counts


def _first_error(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups, or ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _now_ms() -> float:
    """The runtime's clock for the core: the event loop's, in milliseconds."""
    return anyio.current_time() * 1000


def _by_topic(
    items: list[tuple[TopicPartition, V]], size: int
) -> Iterator[dict[str, list[tuple[int, V]]]]:
    """``items`` grouped by topic, in chunks of at most ``size`` partitions."""
    for start in range(0, max(len(items), 1), size):  # nothing: one empty request
        chunk: dict[str, list[tuple[int, V]]] = {}
        for tp, value in items[start : start + size]:
            chunk.setdefault(tp.topic, []).append((tp.partition, value))
        yield chunk
