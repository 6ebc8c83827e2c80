"""The member runtime: a thin anyio shell around ``MemberCore``.

One task group owns everything the member runs: the main loop (the only code that changes
the core and calls the listener, so callbacks never overlap and follow KIP-429's order),
the heartbeat task and the notice reader of the current connection, and a watchdog that
declares the member's partitions lost when its session may have run out. Leaving the
``async with`` revokes what the member owns, sends LeaveGroup (dynamic members only) and
returns with nothing left running.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Self, TypeVar

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup
from prometheus_client import CollectorRegistry

import huddle.client.assignors  # noqa: F401 - registers the built-in assignors
from huddle.client.arguments import check_member
from huddle.client.assignors.base import ASSIGNORS, Assignor
from huddle.client.checks import (
    checked_offsets,
    checked_partitions,
    require_number,
    require_type,
)
from huddle.client.connection import Connection, ConnectionClosedError
from huddle.client.discovery import bootstrap_addresses, connect_coordinator
from huddle.client.driver import MemberDriver, WaitUntil
from huddle.client.events import (
    CommitFailedError,
    Event,
    ListenerFailed,
    MemberFailedError,
    NotConnectedError,
    Reconnect,
    Refused,
    Rejoin,
    SessionExpired,
    StableTimeoutError,
)
from huddle.client.flow import (
    LEAVE_TIMEOUT_MS,
    Action,
    Call,
    Failed,
    Flow,
    Listen,
    MemberFlow,
    Post,
    Receive,
    Replicas,
    Sleep,
    answer_as,
)
from huddle.client.listener import Callbacks, ListenerLike, RebalanceListener
from huddle.client.member_core import MemberConfig, MemberCore, MemberState
from huddle.client.metrics import MemberStats, collector_for
from huddle.client.offline import Offline
from huddle.client.partition_counts import Scope
from huddle.client.security import NO_SECURITY, Security, TlsError
from huddle.client.subscription import Subscription
from huddle.client.unreachable import UnreachableWarnings
from huddle.logs import library_logger
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import (
    AuthenticationError,
    AuthorizationError,
    CoordinatorNotAvailableError,
    ErrorCode,
    ServerError,
    UsageError,
    raise_for,
)
from huddle.protocol.messages import (
    JoinGroupRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    Request,
    Response,
    SyncGroupRequest,
    SyncGroupResponse,
)

log = library_logger("huddle.member")
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
        listener: ListenerLike | None = None,
        client_id: str = "huddle-member",
        retry_backoff_ms: int = 100,
        max_retry_backoff_ms: int = 1_000,
        lags: Callable[[], Mapping[TopicPartition, int]] | None = None,
        security: Security = NO_SECURITY,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        # every bad argument is an InvalidArgumentError (a ValueError), raised here and now
        check_member(
            group_id=group_id,
            assignors=assignors,
            instance_id=instance_id,
            client_id=client_id,
            timeouts_ms={
                "session_timeout_ms": session_timeout_ms,
                "heartbeat_interval_ms": heartbeat_interval_ms,
                "rebalance_timeout_ms": rebalance_timeout_ms,
            },
            backoffs_ms={
                "retry_backoff_ms": retry_backoff_ms,
                "max_retry_backoff_ms": max_retry_backoff_ms,
            },
            lags=lags,
            security=security,
            metrics_registry=metrics_registry,
        )
        self._subscription = Subscription(topics, pattern)
        resolved = [ASSIGNORS.create(a) if isinstance(a, str) else a for a in assignors]
        bootstrap_addresses(bootstrap)
        self._bootstrap = bootstrap
        self._security = security
        # this Member's own unforgeable token, sent on each connection it makes: only a
        # connection presenting it moves its member there (never logged nor shown)
        self._incarnation = secrets.token_bytes(16)
        # Prometheus: this member's numbers, read from metrics_registry when it is scraped
        self._stats = MemberStats(group_id, client_id, lambda: len(self.assignment))
        self._metrics = None if metrics_registry is None else collector_for(metrics_registry)
        self._connects = 0  # connections lost so far: where the next discovery begins
        # a flow running between connections holds it (``Offline.busy``): the owed
        # callbacks, or a loss the watchdog handles
        self._offline_lock = anyio.Lock()
        # the listener callback running, if one is: only closing the member cancels it
        self._callback_scope: anyio.CancelScope | None = None
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
        # every decision around the core (heartbeats, zombie safety, backoff) is the driver's
        self._driver = MemberDriver(
            self._core,
            self._subscription,
            retry_backoff_ms=retry_backoff_ms,
            max_retry_backoff_ms=max_retry_backoff_ms,
        )
        self._flow = MemberFlow(self._driver, self)  # the main loop, shared with huddle.sim
        # what happens between connections (decided there, shared with huddle.sim)
        self._offline = Offline(self._driver)
        self._listener = Callbacks(listener if listener is not None else RebalanceListener())
        self._lags = lags
        send, receive = anyio.create_memory_object_stream[Event](1_000)
        self._events_in, self._events = send, receive
        self._changed = anyio.Event()
        self._conn: Connection | None = None
        # set once the member's own first request (a heartbeat, a join) is on its way on
        # the connection: an application's commit waits for it (``_spoken_first``)
        self._spoken = anyio.Event()
        self._tg: TaskGroup | None = None
        self._failure: MemberFailedError | None = None
        self._join_scope: anyio.CancelScope | None = None
        self._closed = False
        self._close_requested = anyio.Event()
        self._log = log.bind(group_id=group_id, client_id=client_id)
        self._unreachable = UnreachableWarnings(self._log)  # rate-limited warnings

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
        return self._driver.visible(now)

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

    @property
    def failure(self) -> MemberFailedError | None:
        """Why the member stopped, if it failed (what ``wait_stable()`` raises)."""
        return self._failure

    def _stable(self) -> bool:
        return (
            self._core.state is MemberState.STABLE
            and self._conn is not None
            and self._events.statistics().current_buffer_used == 0
            and self._core.rejoin_at_ms is None
        )

    async def wait_stable(self, timeout: float | None = None) -> None:
        """Until the member is joined and synced with no follow-up rebalance pending;
        ``StableTimeoutError`` (a ``TimeoutError``) after ``timeout`` seconds (None: no
        limit), saying what it saw. Raises the member's ``MemberFailedError`` once it
        failed, and a ``UsageError`` once it is closed (it will never be stable again)."""
        if timeout is not None:
            require_number("timeout", timeout, positive=False)
        with anyio.move_on_after(timeout):
            while True:
                if self._failure is not None:
                    raise self._failure
                if self._closed:
                    raise UsageError("the member is closed: it will not be stable again")
                if self._stable():
                    return
                await self._changed.wait()
        raise StableTimeoutError(
            f"the member was not stable (joined, synced, no rebalance pending) within "
            f"{timeout:g} s: {self._unstable()}"
        )

    def _unstable(self) -> str:
        """What keeps the member from being stable, as ``wait_stable`` says it."""
        core = self._core
        seen = [
            f"state {core.state.value}",
            f"generation {core.generation}",
            f"{len(core.owned)} partitions owned",
            "connected" if self._conn is not None else "not connected to the coordinator",
        ]
        if core.rejoin_at_ms is not None:
            seen.append("a rejoin pending")
        if self._events.statistics().current_buffer_used:
            seen.append("events not handled yet")
        return ", ".join(seen)

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
        rejoin = self._driver.resubscribe(list(topics), reason)
        if rejoin is not None:
            self._post(rejoin)

    async def commit(
        self, offsets: Mapping[TopicPartition, int], *, metadata: str | None = None
    ) -> None:
        """Commit offsets in the member's current generation. Raises CommitFailedError if
        the member is no longer in that generation (its partitions are then lost, unless it
        rejoined a later generation meanwhile: a refusal about a stay it has left changes
        nothing else), and the registered HuddleError for other refusals (e.g.
        REBALANCE_IN_PROGRESS).

        More than ``REQUEST_PARTITIONS`` offsets go in several requests, one after another
        (a coordinator bounds the partitions one request may name). Offsets are whole
        numbers from 0 to 2**63 - 1 keyed by ``TopicPartition`` (else
        ``InvalidArgumentError``)."""
        items = checked_offsets(offsets)
        if metadata is not None:
            require_type("metadata", metadata, str, "a str or None")
        conn = self._require_connection()
        await self._spoken_first()
        generation = self._core.current
        refused = self._driver.commit_refusal(generation, _now_ms())
        if refused is not None:
            raise CommitFailedError(E.ILLEGAL_GENERATION, refused)
        for chunk in _by_topic(items, REQUEST_PARTITIONS):
            request = self._driver.commit_request(chunk, metadata, generation)
            sent = _now_ms()
            response = await self._request(conn, request, OffsetCommitResponse, loaded=True)
            message = response.error_message or ""
            fell_out = self._driver.commit_answered(response.error_code, message, generation, sent)
            if fell_out is not None:
                self._post(fell_out)
                raise CommitFailedError(fell_out.code, message)
            if response.error_code != E.NONE:
                raise_for(response.error_code, response.error_message)
            for topic in response.topics:
                for p in topic.partitions:
                    if p.error_code != E.NONE:
                        raise_for(p.error_code, f"{topic.name}-{p.partition}")

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The committed offset of each partition, None where nothing is committed (in
        requests of at most ``REQUEST_PARTITIONS`` partitions)."""
        wanted = [(tp, None) for tp in checked_partitions(partitions)]
        conn = self._require_connection()
        found: dict[TopicPartition, int | None] = {}
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
            raise UsageError("a Member can be entered only once")
        self._tg = anyio.create_task_group()
        if self._metrics is not None:
            self._metrics.add(self._stats)
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
        self._driver.close()
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
            if self._metrics is not None:  # its series go with it, whatever happens next
                self._metrics.remove(self._stats)
            self._tg.cancel_scope.cancel()
            if self._callback_scope is not None:  # a callback still running is given up
                self._callback_scope.cancel()
            if cancelled:
                absorbed = bool(await self._tg.__aexit__(exc_type, exc, tb))
            else:
                await self._tg.__aexit__(None, None, None)
            self._events_in.close()
            self._events.close()
            self._closed = True  # even if closing timed out: nothing runs any more
            self._notify()
        failure = self._failure
        if failure is not None and (exc is None or absorbed):
            raise failure
        return absorbed or None

    async def _run_guarded(self) -> None:
        """The main loop; an exception from the application's listener or assignor (or a bug)
        stops the member with MemberFailedError, its cause chained, instead of tearing the
        task group (and the application's code inside ``async with``) down with it. An error
        the coordinator answered that no retry can mend stops it too, its ``code`` set: one
        answering the group's requests (FENCED_INSTANCE_ID, ...; the main loop stops), or one
        refusing the member as it connects (GROUP_AUTHORIZATION_FAILED finding the
        coordinator, SASL_AUTHENTICATION_FAILED: ``Refused``, the ServerError chained as the
        cause). Only those carry a code: a ServerError the application's code raised (a
        commit's, let out of a callback) is the application's failure, ``code`` None."""
        try:
            await self._run()
        except Exception as exc:
            self._stopped_by(exc)
        if self._failure is not None:
            await self._wake_on_failure()

    def _stopped_by(self, exc: BaseException) -> None:
        """The member stops with ``exc`` (maybe inside exception groups)."""
        error = _first_error(exc)
        wrapped = error.__cause__ if isinstance(error, Refused | ListenerFailed) else None
        cause = wrapped or error
        if isinstance(error, Refused) and isinstance(cause, ServerError):
            failure = MemberFailedError(cause.code, cause.message)
        else:
            failure = MemberFailedError(None, f"{type(cause).__name__}: {cause}")
        failure.__cause__ = cause
        self._log.error("member_failed", error=repr(cause))
        self._failure = failure

    async def _wake_on_failure(self) -> None:
        self._closed = True
        self._notify()
        await anyio.lowlevel.checkpoint()  # a wait_stable() waiting raises it first
        assert self._tg is not None
        self._tg.cancel_scope.cancel()  # wake an application waiting on anything else

    # --- the main loop ---------------------------------------------------------------

    async def _run(self) -> None:
        driver = self._driver
        while not driver.closing and self._failure is None:
            try:
                async with self._coordinator() as conn, anyio.create_task_group() as tg:
                    async with self._offline_lock:  # an offline loss being handled ends first
                        self._spoken = anyio.Event()
                        self._conn = conn
                        self._offline.connected(conn.disconnect_grace_ms)  # heartbeat at once
                    self._log.info("member_connected", member_id=self._core.member_id)
                    tg.start_soon(self._until_lost, self._read_notices, conn)
                    tg.start_soon(self._until_lost, self._heartbeats, conn)
                    await self._serve(conn)
                    tg.cancel_scope.cancel()
            except* (
                ConnectionClosedError,
                CoordinatorNotAvailableError,
                OSError,
                TimeoutError,
                Reconnect,
            ) as group:
                reasons = "; ".join(str(e) or type(e).__name__ for e in group.exceptions)
                self._connects += 1  # the next attempt asks another bootstrap address first
                self._log.info("member_disconnected", reason=reasons)
                self._connection_lost()
            finally:
                self._conn = None
                self._spoken.set()  # a commit waiting for it goes on, and finds it closed
            # callbacks of a step the lost connection cut off (a listener error fails it)
            async with self._offline_lock:
                self._offline.ended()
                self._notify()
                try:
                    await self._perform_flow(self._flow.owed_callbacks(), None)
                    expired = self._offline.owed_ran()
                    if expired is not None:  # the session ran out while they ran
                        flow = self._flow.expired_while_disconnected(expired)
                        await self._perform_flow(flow, None)
                finally:
                    self._offline.loss_ran()
            if not driver.closing and self._failure is None:
                with anyio.move_on_after(driver.reconnect_delay_ms() / 1000):
                    await self._close_requested.wait()
        if driver.closing and self._failure is None:
            await self._perform_flow(self._flow.closed_while_disconnected(), None)
        self._closed = True
        self._notify()

    @asynccontextmanager
    async def _coordinator(self) -> AsyncIterator[Connection]:
        """A connection to the group's coordinator; its refusal of this member (a ServerError
        authenticating it, or finding the coordinator for it) is raised as ``Refused``. A
        coordinator not reached (none answered, or TLS failed: that one is fatal) is
        warned of, at most every so often."""
        async with AsyncExitStack() as stack:
            try:
                conn = await stack.enter_async_context(
                    connect_coordinator(
                        self._bootstrap,
                        self._core.config.group_id,
                        client_id=self._core.config.client_id,
                        timeout=min(10.0, self._driver.heartbeat_timeout_ms / 1000),
                        start=self._connects,
                        security=self._security,
                        incarnation=self._incarnation,
                    )
                )
            except (CoordinatorNotAvailableError, TlsError) as exc:
                self._unreachable.failed(anyio.current_time(), self._bootstrap, exc)
                raise
            except (AuthenticationError, AuthorizationError) as exc:
                if isinstance(exc, ServerError):
                    raise Refused(exc.message) from exc
                raise
            self._unreachable.reached()
            yield conn

    async def _until_lost(
        self, work: Callable[[Connection], Awaitable[None]], conn: Connection
    ) -> None:
        """One of a connection's tasks: its failure means the connection is lost, which
        counts from now, though a listener callback running may hold the rest up."""
        try:
            await work(conn)
        except Exception:
            self._connection_lost()
            raise

    def _connection_lost(self) -> None:
        stopping = self._conn is not None and self._conn.coordinator_stopping
        if self._offline.connection_lost(_now_ms(), coordinator_stopping=stopping):
            self._notify()

    async def _serve(self, conn: Connection) -> None:
        """The shared main loop (``MemberFlow.serve``) on this connection. Returns on close."""
        await self._perform_flow(self._flow.serve(), conn)

    async def _perform_flow(self, flow: Flow, conn: Connection | None) -> None:
        """Perform ``flow``'s actions one after another: each action's result is sent in,
        its exception (cancellation too, so the flow's cleanup runs) thrown in."""
        value: object = None
        error: BaseException | None = None
        while True:
            self._notify()  # the flow may have changed the state: heartbeats may be due
            try:
                action = flow.send(value) if error is None else flow.throw(error)
            except StopIteration:
                return
            value, error = None, None
            try:
                value = await self._perform(action, conn)
            except BaseException as exc:
                error = exc

    async def _perform(self, action: Action, conn: Connection | None) -> object:
        match action:
            case Call(request, expect, timeout_ms, loaded):
                if conn is None:
                    raise NotConnectedError("the member is not connected to the coordinator")
                if isinstance(request, JoinGroupRequest | SyncGroupRequest):
                    self._spoken.set()  # sent before any commit waiting: see _spoken_first
                timeout = None if timeout_ms is None else timeout_ms / 1000
                if expect is None:
                    return await conn.request(request, timeout=timeout)
                if not isinstance(request, JoinGroupRequest):
                    answer = await self._request(
                        conn, request, expect, timeout=timeout, loaded=loaded
                    )
                    if isinstance(answer, SyncGroupResponse) and answer.error_code == E.NONE:
                        self._stats.synced()
                    return answer
                self._stats.joining()
                with anyio.CancelScope() as self._join_scope:  # cancelled when closing
                    try:
                        return await self._request(conn, request, expect, timeout=timeout)
                    finally:
                        self._join_scope = None
                return None
            case Listen(name, partitions):
                # Never cut off half-way (by a lost connection, say): the application would
                # own partitions its callback never finished taking up. A connection lost
                # meanwhile is acted on once it returns (the checkpoint).
                await self._callback(name, self._listener.call(name, partitions))
                if name == "on_partitions_lost":
                    self._stats.lost += 1
                self._stats.assignment_changed(len(self.assignment))
            case Replicas(standby, warmup):
                replicas = self._listener.call("on_replicas_assigned", standby, warmup)
                await self._callback("on_replicas_assigned", replicas)
            case Sleep(ms):
                await anyio.sleep(ms / 1000)
            case Receive(deadline_ms):
                if deadline_ms is None:
                    return await self._events.receive()
                with anyio.move_on_at(deadline_ms / 1000):
                    return await self._events.receive()
            case Post(event):
                self._post(event)
            case Failed(code, message):
                self._failure = MemberFailedError(code, message)
                self._notify()
        return None

    async def _callback(self, name: str, call: Awaitable[None]) -> None:
        """Run a listener callback shielded from everything but closing the member past
        its timeout (``_callback_scope``); then act on a cancellation that came meanwhile."""
        with anyio.CancelScope(shield=True), anyio.CancelScope() as self._callback_scope:
            try:
                await call
            except Exception as exc:
                self._log.exception("listener_failed", callback=name)
                raise ListenerFailed(name) from exc  # MemberFailedError, exc as its cause
            finally:
                self._callback_scope = None
        await anyio.lowlevel.checkpoint()

    # --- the flow's host ----------------------------------------------------------------

    def now_ms(self) -> float:
        return _now_ms()

    def counts_scope(self) -> Scope:
        conn = self._conn
        return (conn, self._core.member_id, conn.notices_dropped if conn is not None else 0)

    def lags(self) -> Mapping[TopicPartition, int] | None:
        return self._lags() if self._lags is not None else None

    # --- the other tasks -------------------------------------------------------------

    async def _heartbeats(self, conn: Connection) -> None:
        driver = self._driver
        while True:
            now = _now_ms()
            action = driver.heartbeat(now)
            if isinstance(action, SessionExpired):  # a callback overran: given up
                self._post(action)
                leave = driver.leave_after_give_up()
                if leave is not None:  # once, whatever comes of it (Kafka's maybeLeaveGroup)
                    try:
                        await conn.request(leave, timeout=LEAVE_TIMEOUT_MS / 1000)
                        self._log.info("member_left", member_id=leave.members[0].member_id)
                    except TimeoutError as exc:
                        self._log.warning("leave_failed", error=str(exc) or "timed out")
                continue
            if isinstance(action, WaitUntil):
                with anyio.move_on_after(None if action.at is None else (action.at - now) / 1000):
                    await self._changed.wait()
                continue
            timeout_s = driver.heartbeat_timeout_ms / 1000
            self._spoken.set()  # sent before any commit waiting: see _spoken_first
            response = await conn.request(action.request, timeout=timeout_s)
            answer = driver.heartbeat_response(response, action, _now_ms())
            if answer is not None:
                self._post(answer)

    async def _read_notices(self, conn: Connection) -> None:
        async for notice in conn.notices:
            for event in self._driver.notice(notice):
                self._post(event)
        # The stream ends with the connection: notice that now, not at the next heartbeat.
        raise ConnectionClosedError(conn.close_reason or "the connection closed")

    async def _watchdog(self) -> None:
        """Zombie safety: partitions are lost once the session may have expired. The member
        owns nothing from then on, even before the main loop (maybe inside a callback, or
        reconnecting) has run on_partitions_lost."""
        while True:
            now = _now_ms()
            wake = self._driver.watchdog(now)
            if isinstance(wake, SessionExpired):
                self._post(wake)
                if self._offline.session_expired(wake):  # no main loop runs: lost now
                    async with self._offline_lock:
                        if self._offline.lose_offline():
                            flow = self._flow.expired_while_disconnected(wake)
                            try:
                                await self._perform_flow(flow, None)
                            except ListenerFailed as failed:  # as the main loop's
                                self._stopped_by(failed)
                                await self._wake_on_failure()
                                return
                            finally:
                                self._offline.loss_ran()
                continue
            with anyio.move_on_after((wake - now) / 1000):
                await self._changed.wait()

    # --- plumbing --------------------------------------------------------------------

    def _post(self, event: Event) -> None:
        try:
            self._events_in.send_nowait(event)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._log.warning("member_event_dropped", dropped=type(event).__name__)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _spoken_first(self) -> None:
        """On a new connection, the member's own first heartbeat (or JoinGroup, SyncGroup)
        goes before an application's commit: a coordinator moves the member to a new
        connection with those, and refuses a commit held up on the old one from then on.
        Whoever sets ``_spoken`` sends at once, with no await before the connection's
        send lock is taken, and the lock is first come, first served: that request is
        written first. Bounded by a heartbeat's timeout (the coordinator moves the member
        with a commit too)."""
        if not self._spoken.is_set():
            with anyio.move_on_after(self._driver.heartbeat_timeout_ms / 1000):
                await self._spoken.wait()

    def _require_connection(self) -> Connection:
        if self._conn is None or not self._offline.serving:  # its end may wait on a callback
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
        return answer_as(response, expect)


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
