"""The member's anyio adapter: it performs the shared member runtime, deciding nothing.

``AnyioRuntime`` runs what ``huddle.client.member.Member`` is made of in one task group: the
main loop (``MemberFlow``'s actions, performed one after another: the only code that
changes the core and calls the listener, so callbacks never overlap and follow KIP-429's
order), the heartbeat task and the notice reader of the current connection, and a watchdog
that declares the member's partitions lost when its session may have run out. Every
decision is the sans-IO layers': the core (``huddle.client.member_core``), the driver
(heartbeat timing, zombie safety, backoff), the flow (the rebalance) and ``Offline`` (what
happens between connections). The simulator (``huddle.sim.process``) performs the very same
objects on simulated time; docs/member.md walks through both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Protocol, TypeVar

import anyio
import anyio.lowlevel
import structlog
from anyio.abc import TaskGroup

from huddle.client.connection import Connection, ConnectionClosedError
from huddle.client.discovery import connect_coordinator
from huddle.client.driver import MemberDriver, WaitUntil
from huddle.client.events import (
    Event,
    ListenerFailedError,
    MemberFailedError,
    NotConnectedError,
    ReconnectError,
    RefusedError,
    SessionExpired,
    failure_of,
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
from huddle.client.listener import Callbacks
from huddle.client.member_core import MemberCore
from huddle.client.metrics import MemberStats
from huddle.client.offline import Offline
from huddle.client.partition_counts import Scope
from huddle.client.security import Security, TlsError
from huddle.client.unreachable import UnreachableWarnings
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import (
    AuthenticationError,
    AuthorizationError,
    CoordinatorNotAvailableError,
    ErrorCode,
    ServerError,
)
from huddle.protocol.messages import (
    JoinGroupRequest,
    Request,
    Response,
    SyncGroupResponse,
)

E = ErrorCode
R = TypeVar("R", bound=Response)


class StatsSink(Protocol):
    """Where a member's numbers are scraped from (its metrics registry's collector)."""

    def add(self, stats: MemberStats) -> None: ...

    def remove(self, stats: MemberStats) -> None: ...


class AnyioRuntime:
    """The tasks, connection and listener calls of one ``Member``."""

    def __init__(
        self,
        driver: MemberDriver,
        listener: Callbacks,
        *,
        bootstrap: str,
        security: Security,
        incarnation: bytes,
        lags: Callable[[], Mapping[TopicPartition, int]] | None,
        stats: MemberStats,
        metrics: StatsSink | None,
        log: structlog.stdlib.BoundLogger,
    ) -> None:
        self.core: MemberCore = driver.core
        self.driver = driver
        self.flow = MemberFlow(driver, self)  # the main loop, shared with huddle.sim
        # what happens between connections (decided there, shared with huddle.sim)
        self.offline = Offline(driver)
        # a flow running between connections holds it (``Offline.busy``): the owed
        # callbacks, or a loss the watchdog handles
        self.offline_lock = anyio.Lock()
        self._listener = listener
        self._lags = lags
        self._bootstrap = bootstrap
        self._security = security
        # the Member's own unforgeable token, sent on each connection it makes: only a
        # connection presenting it moves its member there (never logged nor shown)
        self._incarnation = incarnation
        self.stats = stats
        self.metrics = metrics
        self._log = log
        self.unreachable = UnreachableWarnings(log)  # rate-limited warnings
        self._connects = 0  # connections lost so far: where the next discovery begins
        # the listener callback running, if one is: only closing the member cancels it
        self.callback_scope: anyio.CancelScope | None = None
        send, receive = anyio.create_memory_object_stream[Event](1_000)
        self.events_in, self.events = send, receive
        self.changed = anyio.Event()  # replaced once set: see ``notify``
        self.conn: Connection | None = None
        self.tg: TaskGroup | None = None
        self.failure: MemberFailedError | None = None
        self.join_scope: anyio.CancelScope | None = None
        self.closed = False
        self.close_requested = anyio.Event()

    def owned_now(self) -> frozenset[TopicPartition]:
        """What the member owns as the application must see it now (``Member.assignment``)."""
        try:
            now = loop_ms()
        except RuntimeError:  # not in the event loop: no clock to judge by
            return self.core.owned
        return self.driver.visible(now)

    # --- the member's life (started and ended by ``Member``'s ``async with``) ------------

    async def run_guarded(self) -> None:
        """The main loop; an exception from the application's listener or assignor (or a bug)
        stops the member with MemberFailedError, its cause chained, instead of tearing the
        task group (and the application's code inside ``async with``) down with it. An error
        the coordinator answered that no retry can mend stops it too, its ``code`` set: one
        answering the group's requests (FENCED_INSTANCE_ID, ...; the main loop stops), or one
        refusing the member as it connects (GROUP_AUTHORIZATION_FAILED finding the
        coordinator, SASL_AUTHENTICATION_FAILED: ``RefusedError``, the ServerError chained as the
        cause). Only those carry a code: a ServerError the application's code raised (a
        commit's, let out of a callback) is the application's failure, ``code`` None."""
        try:
            await self._run()
        except Exception as exc:
            self._stopped_by(exc)
        if self.failure is not None:
            await self.wake_on_failure()

    def _stopped_by(self, exc: BaseException) -> None:
        """The member stops with ``exc`` (maybe inside exception groups)."""
        failure = failure_of(exc)
        self._log.error("member_failed", error=repr(failure.__cause__))
        self.failure = failure

    async def wake_on_failure(self) -> None:
        self.closed = True
        self.notify()
        await anyio.lowlevel.checkpoint()  # a wait_stable() waiting raises it first
        assert self.tg is not None
        self.tg.cancel_scope.cancel()  # wake an application waiting on anything else

    # --- the main loop ---------------------------------------------------------------

    async def _run(self) -> None:
        driver = self.driver
        while not driver.closing and self.failure is None:
            try:
                async with self._coordinator() as conn, anyio.create_task_group() as tg:
                    async with self.offline_lock:  # an offline loss being handled ends first
                        if conn.closed:  # lost meanwhile: its end too waited for that loss
                            raise ConnectionClosedError(conn.close_reason or "connection closed")
                        self.conn = conn
                        self.offline.connected(conn.disconnect_grace_ms)  # heartbeat at once
                    self._log.info("member_connected", member_id=self.core.member_id)
                    tg.start_soon(self._until_lost, self._read_notices, conn)
                    tg.start_soon(self._until_lost, self._heartbeats, conn)
                    await self._serve(conn)
                    tg.cancel_scope.cancel()
            except* (
                ConnectionClosedError,
                CoordinatorNotAvailableError,
                OSError,
                TimeoutError,
                ReconnectError,
            ) as group:
                reasons = "; ".join(str(e) or type(e).__name__ for e in group.exceptions)
                self._connects += 1  # the next attempt asks another bootstrap address first
                self._log.info("member_disconnected", reason=reasons)
                self._connection_lost()
            finally:
                self.conn = None
                self.notify()  # a commit waiting (``spoken_first``) goes on, and finds it closed
            # callbacks of a step the lost connection cut off (a listener error fails it);
            # holding the lock, no flow runs offline: the end is handled now
            async with self.offline_lock:
                self.offline.connection_ended()
                self.notify()
                try:
                    await self._perform_flow(self.flow.owed_callbacks(), None)
                    expired = self.offline.owed_ran()
                    if expired is not None:  # the session ran out while they ran
                        flow = self.flow.expired_while_disconnected(expired)
                        await self._perform_flow(flow, None)
                finally:
                    self.offline.loss_ran()
            if not driver.closing and self.failure is None:
                with anyio.move_on_after(driver.reconnect_delay_ms() / 1000):
                    await self.close_requested.wait()
        if driver.closing and self.failure is None:
            await self._perform_flow(self.flow.closed_while_disconnected(), None)
        self.closed = True
        self.notify()

    @asynccontextmanager
    async def _coordinator(self) -> AsyncIterator[Connection]:
        """A connection to the group's coordinator; its refusal of this member (a ServerError
        authenticating it, or finding the coordinator for it) is raised as ``RefusedError``. A
        coordinator not reached (none answered, or TLS failed: that one is fatal) is
        warned of, at most every so often."""
        async with AsyncExitStack() as stack:
            try:
                conn = await stack.enter_async_context(
                    connect_coordinator(
                        self._bootstrap,
                        self.core.config.group_id,
                        client_id=self.core.config.client_id,
                        timeout=self.driver.connect_timeout_ms / 1000,
                        start=self._connects,
                        security=self._security,
                        incarnation=self._incarnation,
                    )
                )
            except (CoordinatorNotAvailableError, TlsError) as exc:
                self.unreachable.failed(anyio.current_time(), self._bootstrap, exc)
                raise
            except (AuthenticationError, AuthorizationError) as exc:
                if isinstance(exc, ServerError):
                    raise RefusedError(exc.message) from exc
                raise
            self.unreachable.reached()
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
        stopping = self.conn is not None and self.conn.coordinator_stopping
        if self.offline.connection_lost(loop_ms(), coordinator_stopping=stopping):
            self.notify()

    async def _serve(self, conn: Connection) -> None:
        """The shared main loop (``MemberFlow.serve``) on this connection. Returns on close."""
        await self._perform_flow(self.flow.serve(), conn)

    async def _perform_flow(self, flow: Flow, conn: Connection | None) -> None:
        """Perform ``flow``'s actions one after another: each action's result is sent in,
        its exception (cancellation too, so the flow's cleanup runs) thrown in."""
        value: object = None
        error: BaseException | None = None
        while True:
            self.notify()  # the flow may have changed the state: heartbeats may be due
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
                self.offline.sending(request)  # sent at once: see spoken_first
                self.notify()
                timeout = None if timeout_ms is None else timeout_ms / 1000
                if expect is None:
                    return await conn.request(request, timeout=timeout)
                if not isinstance(request, JoinGroupRequest):
                    answer = await self.request(
                        conn, request, expect, timeout=timeout, loaded=loaded
                    )
                    if isinstance(answer, SyncGroupResponse) and answer.error_code == E.NONE:
                        self.stats.synced()
                    return answer
                self.stats.joining()
                with anyio.CancelScope() as self.join_scope:  # cancelled when closing
                    try:
                        return await self.request(conn, request, expect, timeout=timeout)
                    finally:
                        self.join_scope = None
                return None
            case Listen(name, partitions):
                # Never cut off half-way (by a lost connection, say): the application would
                # own partitions its callback never finished taking up. A connection lost
                # meanwhile is acted on once it returns (the checkpoint).
                await self._callback(name, self._listener.call(name, partitions))
                if name == "on_partitions_lost":
                    self.stats.lost += 1
                self.stats.assignment_changed(len(self.owned_now()))
            case Replicas(standby, warmup):
                replicas = self._listener.call("on_replicas_assigned", standby, warmup)
                await self._callback("on_replicas_assigned", replicas)
            case Sleep(ms):
                await anyio.sleep(ms / 1000)
            case Receive(deadline_ms):
                if deadline_ms is None:
                    return await self.events.receive()
                with anyio.move_on_at(deadline_ms / 1000):
                    return await self.events.receive()
            case Post(event):
                self.post(event)
            case Failed(code, message):
                self.failure = MemberFailedError(code, message)
                self.notify()
        return None

    async def _callback(self, name: str, call: Awaitable[None]) -> None:
        """Run a listener callback shielded from everything but closing the member past
        its timeout (``_callback_scope``); then act on a cancellation that came meanwhile."""
        with anyio.CancelScope(shield=True), anyio.CancelScope() as self.callback_scope:
            try:
                await call
            except Exception as exc:
                self._log.exception("listener_failed", callback=name)
                raise ListenerFailedError(name) from exc  # MemberFailedError, exc as its cause
            finally:
                self.callback_scope = None
        await anyio.lowlevel.checkpoint()

    # --- the flow's host ----------------------------------------------------------------

    def now_ms(self) -> float:
        return loop_ms()

    def counts_scope(self) -> Scope:
        conn = self.conn
        return (conn, self.core.member_id, conn.notices_dropped if conn is not None else 0)

    def lags(self) -> Mapping[TopicPartition, int] | None:
        return self._lags() if self._lags is not None else None

    # --- the other tasks -------------------------------------------------------------

    async def _heartbeats(self, conn: Connection) -> None:
        driver = self.driver
        while True:
            now = loop_ms()
            action = driver.heartbeat(now)
            if isinstance(action, SessionExpired):  # a callback overran: given up
                self.post(action)
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
                    await self.changed.wait()
                continue
            timeout_s = driver.heartbeat_timeout_ms / 1000
            self.offline.sending(action.request)  # sent at once: see spoken_first
            self.notify()
            response = await conn.request(action.request, timeout=timeout_s)
            answer = driver.heartbeat_response(response, action, loop_ms())
            if answer is not None:
                self.post(answer)

    async def _read_notices(self, conn: Connection) -> None:
        async for notice in conn.notices:
            for event in self.driver.notice(notice):
                self.post(event)
        # The stream ends with the connection: notice that now, not at the next heartbeat.
        raise ConnectionClosedError(conn.close_reason or "the connection closed")

    async def watchdog(self) -> None:
        """Zombie safety: partitions are lost once the session may have expired. The member
        owns nothing from then on, even before the main loop (maybe inside a callback, or
        reconnecting) has run on_partitions_lost."""
        while True:
            now = loop_ms()
            wake = self.driver.watchdog(now)
            if isinstance(wake, SessionExpired):
                self.post(wake)
                if self.offline.session_expired(wake):  # no main loop runs: lost now
                    async with self.offline_lock:
                        if self.offline.lose_offline():
                            flow = self.flow.expired_while_disconnected(wake)
                            try:
                                await self._perform_flow(flow, None)
                            except ListenerFailedError as failed:  # as the main loop's
                                self._stopped_by(failed)
                                await self.wake_on_failure()
                                return
                            finally:
                                self.offline.loss_ran()
                continue
            with anyio.move_on_after((wake - now) / 1000):
                await self.changed.wait()

    # --- plumbing --------------------------------------------------------------------

    def post(self, event: Event) -> None:
        try:
            self.events_in.send_nowait(event)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._log.warning("member_event_dropped", dropped=type(event).__name__)
        self.notify()

    def notify(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    async def spoken_first(self) -> None:
        """An application's commit waits while ``Offline.commit_waits`` (the member's own
        first request on a new connection goes first), a heartbeat's timeout at most.
        Whoever tells ``Offline`` it is ``sending`` sends at once, with no await before
        the connection's send lock is taken, and the lock is first come, first served:
        that request is written first."""
        with anyio.move_on_after(self.driver.heartbeat_timeout_ms / 1000):
            while self.offline.commit_waits:
                await self.changed.wait()

    def require_connection(self) -> Connection:
        if self.conn is None or not self.offline.serving:  # its end may wait on a callback
            raise NotConnectedError("the member is not connected to the coordinator")
        return self.conn

    async def request(
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
        wait = timeout if timeout is not None else self.core.config.session_timeout_ms / 1000
        if loaded:
            response = await conn.request_loaded(request, timeout=wait)
        else:
            response = await conn.request(request, timeout=wait)
        return answer_as(response, expect)


def loop_ms() -> float:
    """The runtime's clock for the core: the event loop's, in milliseconds."""
    return anyio.current_time() * 1000
