"""The member runtime as the simulator performs it: connection, requests, main loop,
heartbeats and watchdog of one member process, on simulated time and links.

``SimRuntime`` is to a simulated member what ``huddle.client.anyio_runtime.AnyioRuntime``
is to ``Member``: it performs the actions of the library's own flow (``MemberFlow``),
driver (``MemberDriver``) and between-connections decisions (``Offline``), and decides
nothing itself. Where ``Member`` runs tasks and holds a lock, it runs timers and callbacks
on the process's scheduler: one connection at a time, a flow at a time (``gen``), and the
heartbeat task and watchdog looked at again whenever something changed (``poke``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from huddle.client.driver import MemberDriver, SendHeartbeat, WaitUntil
from huddle.client.events import Event, ReconnectError, SessionExpired
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
from huddle.client.member_core import MemberCore
from huddle.client.offline import Offline
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    JoinGroupRequest,
    Reply,
    Request,
    Response,
    ServerFrame,
)
from huddle.sim.false_claim import false_claim
from huddle.sim.network import Link
from huddle.sim.scheduler import Timer
from huddle.sim.steplog import short

if TYPE_CHECKING:
    from huddle.sim.process import MemberProcess

TICK_MS = 1e-6

Handler = Callable[[Response], None]


class SimRuntime:
    """One start of a member process: its runtime's state, fresh each time it starts."""

    def __init__(self, process: MemberProcess, core: MemberCore, driver: MemberDriver) -> None:
        self.process = process
        self.world = process.world
        self.core = core
        self.driver = driver
        self.flow = MemberFlow(driver, process)
        self.offline = Offline(driver)  # between connections: the library's decisions
        self.gen: Flow | None = None
        self.gen_kind = ""  # which flow ``gen`` is: "serve", "owed" or "loss" (offline)
        self.serve_waiting = False  # connected while a flow ran offline: serves after it
        self.cut_off = False  # the connection was lost during a callback: ended after it
        self.reconnect_timer: Timer | None = None
        self.events: deque[Event] = deque()
        self.receiving = False
        self.link: Link | None = None
        self.connected = False
        self.waiting: Timer | None = None  # the flow's pending sleep, deadline or timeout
        self.flow_call: int | None = None  # the correlation id the flow waits on
        self.calls: dict[int, tuple[Handler, Timer | None]] = {}
        self.cid = 0
        self.hb: tuple[int, SendHeartbeat] | None = None
        self.hb_timer: Timer | None = None
        self.wd_timer: Timer | None = None
        self.connect_timer: Timer | None = None
        self.listening: tuple[str, Timer] | None = None  # a callback running, until when

    def crashed(self) -> None:
        """The process died: its socket closes, its flow stops."""
        if self.link is not None:
            self.link.close_by_member()
            self.link = None
        self.connected = False
        self.gen = None

    # --- the connection (the runtime's _run) --------------------------------------------

    def connect(self) -> None:
        self.link = self.world.net.connect(self.process)
        self.connect_timer = self.process.after_local(
            self.driver.connect_timeout_ms, self._connect_timed_out
        )

    def _connect_timed_out(self) -> None:
        self.connect_timer = None
        if self.link is not None and not self.connected:
            self._connection_failed("connect timed out")

    def link_up(self, link: Link) -> None:
        if link is not self.link:
            return
        self._drop_connect_timer()
        self.connected = True
        self.world.trace(self.process, "connected", conn=link.conn_id)
        if not self.offline.may_serve:  # a flow running offline ends first (the runtime's lock)
            self.serve_waiting = True
            return
        self._serve()
        self._resume()

    def _serve(self) -> None:
        """The connection's main loop starts (the runtime's ``_run`` once it has the lock)."""
        self.offline.connected(self.world.group_config.disconnect_grace_ms)
        self.gen, self.gen_kind = self.flow.serve(), "serve"

    def link_down(self, link: Link, reason: str) -> None:
        if link is self.link:
            self._connection_failed(reason)

    def _connection_failed(self, reason: str) -> None:
        """The runtime's ``except*`` and ``finally`` around one connection."""
        if self.link is None:
            return
        self.world.trace(self.process, "disconnected", reason=reason)
        self.world.checker.shaken(self.process)
        self.offline.connection_lost(self.process.now_ms())
        link, self.link = self.link, None
        link.close_by_member()
        self.connected = False
        self.serve_waiting = False
        if self.offline.busy:
            # no main loop ran on it: a loss handled offline (the runtime's watchdog, not
            # the connection's task) goes on
            self._end_connection()
            return
        if self.listening is not None:
            # a callback is never cut off: the connection's end waits for it to return
            self.cut_off = True
            self.calls.clear()
            self.hb = None
            if self.hb_timer is not None:
                self.hb_timer.cancel()
                self.hb_timer = None
            self._drop_connect_timer()
            return
        self._tear_down()

    def _drop_connect_timer(self) -> None:
        if self.connect_timer is not None:
            self.connect_timer.cancel()
            self.connect_timer = None

    def _tear_down(self) -> None:
        """The flow on a lost connection ends; owed callbacks run, then it reconnects."""
        self.cut_off = False
        gen, self.gen = self.gen, None
        self._stop_waiting()
        if gen is not None:
            gen.close()  # cancelled: the flow's cleanup runs
        self.hb = None
        self.process.app.committing = False
        self._end_connection()

    def _end_connection(self) -> None:
        """The connection's end: handled now (the callbacks it cut off run, then it
        reconnects after a backoff), or once the flow running offline is over
        (``Offline.connection_ended``, then ``loss_ran``)."""
        self.calls.clear()
        self._drop_connect_timer()
        if self.offline.connection_ended():
            self.gen, self.gen_kind = self.flow.owed_callbacks(), "owed"
            self.poke()  # a session that ran out is handled once they have run
            self._resume()

    def _expire_offline(self, expired: SessionExpired) -> None:
        if self.offline.lose_offline():
            self.gen, self.gen_kind = self.flow.expired_while_disconnected(expired), "loss"
            self._resume()

    def _reconnect(self) -> None:
        if self.link is None and self.process.failure is None:
            self.connect()

    def _stop_waiting(self) -> None:
        for timer in (self.waiting, self.hb_timer):
            if timer is not None:
                timer.cancel()
        self.waiting = self.hb_timer = None
        self.flow_call = None
        self.receiving = False
        if self.listening is not None:
            self.listening[1].cancel()
            self.listening = None
        self.process.app.revoking = frozenset()

    # --- requests -----------------------------------------------------------------------

    def send(self, request: Request, handler: Handler, timeout_ms: float | None) -> int:
        assert self.link is not None
        self.offline.sending(request)  # sent at once (an application's commit may wait)
        self.cid += 1
        cid = self.cid
        timer = None
        if timeout_ms is not None:
            timer = self.process.after_local(timeout_ms, self._timed_out, cid)
        self.calls[cid] = (handler, timer)
        self.link.send(cid, request)
        if self.world.tracer is not None:
            self.world.trace(self.process, f"sends #{cid}", detail=True, request=short(request))
        return cid

    def _timed_out(self, cid: int) -> None:
        call = self.calls.pop(cid, None)
        if call is None:
            return
        if cid == self.flow_call or (self.hb is not None and self.hb[0] == cid):
            # the flow's request or a heartbeat: the runtime drops the connection
            self._connection_failed(f"request {cid} timed out")
        else:
            self.process.app.commit_timed_out(cid)

    def frame_arrived(self, link: Link, frame: ServerFrame) -> None:
        if link is not self.link:
            return
        if self.world.tracer is not None:
            self.world.trace(self.process, "receives", detail=True, frame=short(frame))
        if isinstance(frame, Reply):
            call = self.calls.pop(frame.correlation_id, None)
            if call is None:
                return
            handler, timer = call
            if timer is not None:
                timer.cancel()
            handler(frame.response)
        else:
            for event in self.driver.notice(frame):
                self.post(event)
        self.poke()

    # --- the main loop (performing MemberFlow's actions) --------------------------------

    def _resume(self, value: object = None, error: BaseException | None = None) -> None:
        while True:
            gen = self.gen
            if gen is None:
                return
            try:
                action = gen.send(value) if error is None else gen.throw(error)
            except StopIteration:
                self.gen = None
                if self.gen_kind == "owed":
                    expiry = self.offline.owed_ran()
                    if expiry is not None:  # the session ran out while they ran
                        self.gen = self.flow.expired_while_disconnected(expiry)
                        self.gen_kind = "loss"
                        value, error = None, None
                        continue
                elif self.gen_kind == "loss" and self.offline.loss_ran():
                    # a connection's end waited for it: the callbacks it owes run now
                    self.gen, self.gen_kind = self.flow.owed_callbacks(), "owed"
                    value, error = None, None
                    continue
                if self.serve_waiting:
                    self.serve_waiting = False
                    if self.connected:
                        self._serve()
                        value, error = None, None
                        continue
                pending = self.reconnect_timer is not None and self.reconnect_timer.pending
                if self.link is None and self.process.failure is None and not pending:
                    # the owed callbacks (or a loss while offline) ran: reconnect, after a backoff
                    self.reconnect_timer = self.process.after_local(
                        self.driver.reconnect_delay_ms(), self._reconnect
                    )
                return
            except (ReconnectError, ConnectionError, TimeoutError) as exc:
                self.gen = None
                self._connection_failed(f"{type(exc).__name__}: {exc}")
                return
            except Exception as exc:
                self.gen = None
                if self.gen_kind != "serve":
                    self.offline.loss_ran()
                self.fail(f"{type(exc).__name__}: {exc}")
                return
            value, error = None, None
            self.poke()
            if not self._perform(action):
                return
            if isinstance(action, Receive):  # it took an event already waiting
                value = self.events.popleft()

    def _perform(self, action: Action) -> bool:
        """Start ``action``; True if its result is there at once (the loop goes on)."""
        match action:
            case Call(request, expect, timeout_ms, _):
                if isinstance(request, JoinGroupRequest):
                    self.world.checker.joining(self.process, request.member_id)
                    if self.process.false_claim:
                        self.process.false_claim = False
                        request = false_claim(self.process, request)
                timeout = self.core.config.session_timeout_ms if timeout_ms is None else timeout_ms
                answer = partial(self._flow_answer, expect=expect)
                self.flow_call = self.send(request, answer, timeout)
                return False
            case Listen(name, partitions):
                self._listen(name, partitions)
                return False
            case Replicas(standby, warmup):
                self.process.app.replicas_assigned(standby, warmup)
                return True
            case Sleep(ms):
                self.waiting = self.process.after_local(ms, self._flow_wakes)
                return False
            case Receive(deadline):
                if self.events:
                    return True
                self.world.member_idle(self.process)
                self.receiving = True
                if deadline is not None:
                    self.waiting = self.process.at_local(deadline, self._receive_deadline)
                return False
            case Post(event):
                self.events.append(event)
                return True
            case Failed(code, message):
                self.fail(f"{ErrorCode(code).name}: {message}")
                return True
        return True

    def _flow_answer(self, response: Response, expect: type[Response] | None) -> None:
        self.flow_call = None
        if self.waiting is not None:
            self.waiting.cancel()
            self.waiting = None
        if expect is None:
            self._resume(response)
            return
        try:
            value = answer_as(response, expect)
        except ReconnectError as exc:
            self._resume(error=exc)
            return
        self._resume(value)

    def _flow_wakes(self) -> None:
        self.waiting = None
        self._resume()

    def _receive_deadline(self) -> None:
        self.waiting = None
        if self.receiving:
            self.receiving = False
            self._resume(None)

    def post(self, event: Event) -> None:
        self.events.append(event)
        if self.receiving:
            self.receiving = False
            if self.waiting is not None:
                self.waiting.cancel()
                self.waiting = None
            self.world.sched.after(
                0.0, self.process.run, self.process.epoch, self._deliver_event, ()
            )

    def _deliver_event(self) -> None:
        if self.events and self.gen is not None:
            self._resume(self.events.popleft())

    def fail(self, reason: str) -> None:
        if self.process.failure is None:
            self.process.failure = reason
            self.world.member_failed(self.process, reason)

    # --- the listener (the application's callbacks) -------------------------------------

    def _listen(self, name: str, partitions: frozenset[TopicPartition]) -> None:
        self.world.callback(self.process, name, partitions)
        duration = self.process.app.callback(name, partitions)
        self.listening = (name, self.process.after_local(duration, self._listened))

    def _listened(self) -> None:
        self.listening = None
        self.process.app.callback_done()
        if self.cut_off:  # the connection was lost while it ran: acted on now
            self._tear_down()
            return
        self._resume()

    # --- heartbeats and the watchdog (the runtime's other tasks) ------------------------

    def poke(self) -> None:
        """Something changed: the heartbeat task and the watchdog look again (the
        runtime's ``_notify``)."""
        process = self.process
        if not process.alive or process.paused:
            return
        driver = self.driver
        now = process.now_ms()
        wake = driver.watchdog(now)
        while isinstance(wake, SessionExpired):
            self.post(wake)
            if self.offline.session_expired(wake):  # no main loop runs: lost now
                self._expire_offline(wake)
            wake = driver.watchdog(now)
        timer = self.wd_timer
        if (
            timer is None
            or timer.fn is None  # not pending
            or abs(timer.when - process.to_global(wake) - TICK_MS) > TICK_MS
        ):
            if timer is not None:
                timer.cancel()
            self.wd_timer = process.at_local(wake, self.poke)
        if self.hb is not None or not self.offline.serving:
            return
        action = driver.heartbeat(now)
        while isinstance(action, SessionExpired):  # a callback overran: given up
            self.world.gave_up(self.process)
            self.post(action)
            leave = driver.leave_after_give_up()
            if leave is not None:  # once, whatever comes of it (the runtime's heartbeat task)
                self.send(leave, _ignored, LEAVE_TIMEOUT_MS)
            action = driver.heartbeat(now)
        if isinstance(action, WaitUntil):
            timer = self.hb_timer
            if (
                timer is not None
                and timer.fn is not None  # pending
                and action.at is not None
                and abs(timer.when - process.to_global(action.at) - TICK_MS) <= TICK_MS
            ):
                return  # already set for then
            if timer is not None:
                timer.cancel()
                self.hb_timer = None
            if action.at is not None:
                self.hb_timer = process.at_local(action.at, self.poke)
            return
        cid = self.send(action.request, self._heartbeat_answer, driver.heartbeat_timeout_ms)
        self.hb = (cid, action)

    def _heartbeat_answer(self, response: Response) -> None:
        hb, self.hb = self.hb, None
        if hb is None:
            return
        try:
            answer = self.driver.heartbeat_response(response, hb[1], self.process.now_ms())
        except ReconnectError as exc:  # out of step: the heartbeat task drops the connection
            self._connection_failed(str(exc))
            return
        if answer is not None:
            self.post(answer)


def _ignored(response: Response) -> None:
    """The answer to a request whose outcome changes nothing."""
