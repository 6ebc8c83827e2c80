"""A member process as the simulator runs it: the member library's own flow, driver and
core, with the runtime's tasks (connection, heartbeats, watchdog, notices) and an
application on top that processes what it owns, commits its positions and takes its
time in callbacks.

Everything the runtime decides is decided by the same objects it uses
(``MemberFlow``, ``MemberDriver``, ``MemberCore``); this module only performs their actions
on simulated time and links, as ``huddle.client.member.Member`` performs them on anyio.
The process has its own clock: an offset and a drift from the simulation's.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec

from huddle.client.assignors.base import ASSIGNORS, Assignor
from huddle.client.driver import LIVENESS, MemberDriver, SendHeartbeat, WaitUntil
from huddle.client.events import Event, Reconnect, Rejoin, SessionExpired
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
from huddle.client.generation import Generation
from huddle.client.member_core import MemberConfig, MemberCore, MemberState
from huddle.client.offline import Offline
from huddle.client.partition_counts import Scope
from huddle.client.subscription import Subscription
from huddle.protocol.embedded import (
    TopicPartition,
    decode_subscription,
    encode,
    grouped,
)
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    JoinGroupRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    Reply,
    Request,
    Response,
    ServerFrame,
)
from huddle.sim.network import Link
from huddle.sim.scheduler import Timer

if TYPE_CHECKING:
    from huddle.sim.world import World

E = ErrorCode
CONNECT_TIMEOUT_MS = 10_000.0  # as huddle.client.connection.connect's
COMMIT_INTERVAL_MS = 5_000.0  # the application commits this often (Kafka's auto-commit default)
RECORD_MS = 10.0  # a partition gets one record this often: positions move by one
GROUP_ID = "sim"
TICK_MS = 1e-6

Handler = Callable[[Response], None]


class MemberProcess:
    """One member process; ``start`` (re)starts it, ``crash`` kills it."""

    def __init__(self, world: World, index: int, *, static: bool) -> None:
        self.world = world
        self.index = index
        self.static = static
        rng = world.rng
        skew = world.config.max_drift_ppm / 1e6
        # its clock's reading at 0: a monotonic clock, running since its host booted
        self.offset = rng.uniform(0.0, 3_600_000.0)
        self.drift = rng.uniform(-skew, skew)  # its clock runs this much fast (or slow)
        self.alive = False
        self.epoch = 0
        self.paused = False
        self.deferred: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        # its next JoinGroup lies: it claims a partition another member owns (a fault)
        self.false_claim = False
        self.failure: str | None = None
        self.restarts = 0
        self.token = b""  # its incarnation token, a new one each time it starts

    # --- the process's clock and timers -------------------------------------------------

    def now_ms(self) -> float:
        return self.offset + self.world.sched.now * (1.0 + self.drift)

    def _at_local(self, local: float, fn: Callable[..., None], *args: Any) -> Timer:
        # a hair late, so its own clock reads ``local`` or later when it runs (the two
        # conversions round; a deadline seen as not quite due would be scheduled again)
        when = self._global(local) + TICK_MS
        return self.world.sched.at(when, self._run, self.epoch, fn, args)

    def _after_local(self, delay: float, fn: Callable[..., None], *args: Any) -> Timer:
        return self._at_local(self.now_ms() + delay, fn, *args)

    def _run(self, epoch: int, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        """Everything the process does goes through here: nothing runs after it died, and
        nothing runs while it is paused (it runs, in order, when the pause ends)."""
        if epoch != self.epoch or not self.alive:
            return
        if self.paused:
            self.deferred.append((fn, args))
            return
        self._act(fn, *args)
        self.world.changed(self)

    def _act(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` as this member's code (what it logs is its own, in the step log)."""
        world = self.world
        before, world.acting = world.acting, self
        try:
            fn(*args)
        finally:
            world.acting = before

    # --- life ---------------------------------------------------------------------------

    def start(self) -> None:
        world = self.world
        config = world.config
        self.epoch += 1
        self.alive = True
        self.paused = False
        self.deferred = []
        self.token = incarnation_token(world.seed, self.index, self.restarts)
        self.core = MemberCore(
            MemberConfig(
                group_id=GROUP_ID,
                topics=[world.topic],
                instance_id=f"instance-{self.index}" if self.static else None,
                session_timeout_ms=config.session_timeout_ms,
                heartbeat_interval_ms=config.heartbeat_interval_ms,
                rebalance_timeout_ms=config.rebalance_timeout_ms,
                client_id=f"m{self.index}",
            ),
            [self._assignor()],
            round_check=world.parts.round_check,
        )
        self.driver = MemberDriver(
            self.core,
            Subscription([world.topic], None),
            retry_backoff_ms=config.retry_backoff_ms,
            max_retry_backoff_ms=config.max_retry_backoff_ms,
            liveness=world.parts.liveness or LIVENESS,
        )
        self.flow = MemberFlow(self.driver, self)
        self.offline = Offline(self.driver)  # between connections: the library's decisions
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
        # the application
        self.app_owned: set[TopicPartition] = set()
        self.revoking: frozenset[TopicPartition] = frozenset()
        self.listening: tuple[str, Timer] | None = None
        self.positions: dict[TopicPartition, tuple[int, float]] = {}  # base offset, since
        self.committing = False
        self.replicas: frozenset[TopicPartition] = frozenset()  # standby and warm-up
        # local state per task (KIP-441): its lag then, since when, whether it is kept up
        self.state: dict[TopicPartition, tuple[float, float, bool]] = {}
        self._connect()
        self._after_local(COMMIT_INTERVAL_MS, self._commit_tick)
        self._poke()

    def _assignor(self) -> Assignor:
        assignor = self._new_assignor()
        rules = self.world.parts.claim_rules
        if rules is not None:  # a planted bug's faulty claim rules
            assignor.claim_rules = rules
        return assignor

    def _new_assignor(self) -> Assignor:
        config = self.world.config
        name = config.protocol
        cls = ASSIGNORS.by_name[name]
        if name == "cooperative-deferred":
            return cls(scheduled_rebalance_max_delay_ms=config.scheduled_delay_ms)  # type: ignore[call-arg]
        if name == "high-availability":
            return cls(  # type: ignore[call-arg]
                acceptable_recovery_lag=config.acceptable_lag,
                probing_rebalance_interval_ms=config.probing_interval_ms,
                max_warmup_replicas=config.max_warmup_replicas,
            )
        return cls()

    def crash(self) -> None:
        """The process dies: its socket closes, everything it was doing stops."""
        if not self.alive:
            return
        self.world.checker.shaken(self)
        self.alive = False
        self.epoch += 1
        self.paused = False
        self.deferred = []
        if self.link is not None:
            self.link.close_by_member()
            self.link = None
        self.connected = False
        self.gen = None
        self.revoking = frozenset()
        self.app_owned = set()

    def restart(self) -> None:
        if not self.alive:
            self.restarts += 1
            self.start()

    def pause(self) -> None:
        if self.alive:
            self.paused = True
            self.world.checker.shaken(self)

    def resume(self) -> None:
        if not self.alive or not self.paused:
            return
        self.paused = False
        deferred, self.deferred = self.deferred, []
        for fn, args in deferred:
            if self.alive and not self.paused:
                self._act(fn, *args)
            elif self.alive:
                self.deferred.append((fn, args))
        self.world.changed(self)

    # --- what the application processes -------------------------------------------------

    def processing(self) -> frozenset[TopicPartition]:
        """What the application works on now: what the member library says it owns, and
        what a running revocation callback is finishing (unless the member's own
        zombie-safety deadline has passed)."""
        if not self.alive or self.paused:
            return frozenset()
        now = self.now_ms()
        visible = self.driver.visible(now)
        if self.revoking and (visible or not self._zombie(now)):
            return visible | self.revoking
        return visible

    def _zombie(self, now: float) -> bool:
        return not self.driver.may_process(now)

    def idle(self) -> bool:
        """Between rebalances: the flow waits for an event and no callback runs."""
        return self.alive and self.receiving and self.listening is None and not self.events

    # --- the flow's host ----------------------------------------------------------------

    def counts_scope(self) -> Scope:
        return (self.link, self.core.member_id, 0)

    def lags(self) -> Mapping[TopicPartition, int] | None:
        if self.world.config.protocol != "high-availability":
            return None
        self._track()
        now = self.now_ms()
        return {tp: int(self._lag(tp, now)) for tp in self.state}

    def _lag(self, tp: TopicPartition, now: float) -> float:
        """A task's state catches up while the member runs it or keeps a replica of it,
        and falls behind (the log grows) once it stops."""
        lag, since, tracking = self.state[tp]
        config = self.world.config
        if tracking:
            return max(0.0, lag - (now - since) * config.catch_up_per_ms)
        return lag + (now - since) * config.produce_per_ms

    def _track(self) -> None:
        """Which tasks' state the member keeps up now: what it runs and its replicas."""
        if self.world.config.protocol != "high-availability":
            return
        now = self.now_ms()
        kept = self.core.owned | self.replicas
        for tp in kept | self.state.keys():
            if tp in self.state:
                lag = 0.0 if tp in self.core.owned else self._lag(tp, now)
            else:
                lag = 0.0 if tp in self.core.owned else float(self.world.config.initial_lag)
            self.state[tp] = (lag, now, tp in kept)

    # --- the connection (the runtime's _run) --------------------------------------------

    def _connect(self) -> None:
        self.link = self.world.net.connect(self)
        self.connect_timer = self._after_local(CONNECT_TIMEOUT_MS, self._connect_timed_out)

    def _connect_timed_out(self) -> None:
        self.connect_timer = None
        if self.link is not None and not self.connected:
            self._connection_failed("connect timed out")

    def link_up(self, link: Link) -> None:
        self._run(self.epoch, self._link_up, (link,))

    def _link_up(self, link: Link) -> None:
        if link is not self.link:
            return
        self._drop_connect_timer()
        self.connected = True
        self.world.trace(self, "connected", conn=link.conn_id)
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
        self._run(self.epoch, self._link_down, (link, reason))

    def _link_down(self, link: Link, reason: str) -> None:
        if link is self.link:
            self._connection_failed(reason)

    def _connection_failed(self, reason: str) -> None:
        """The runtime's ``except*`` and ``finally`` around one connection."""
        if self.link is None:
            return
        self.world.trace(self, "disconnected", reason=reason)
        self.world.checker.shaken(self)
        self.offline.connection_lost(self.now_ms())
        link, self.link = self.link, None
        link.close_by_member()
        self.connected = False
        self.serve_waiting = False
        if self.offline.busy:
            # a loss handled offline (the runtime's watchdog, not the connection's task)
            # goes on; it reconnects when that ends
            self.calls.clear()
            self._drop_connect_timer()
            self.driver.disconnected()
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
        self.calls.clear()
        self.hb = None
        self.committing = False
        self._drop_connect_timer()
        self.offline.ended()
        # then it reconnects, after a backoff
        self.gen, self.gen_kind = self.flow.owed_callbacks(), "owed"
        self._poke()  # a session that ran out is handled once they have run
        self._resume()

    def _expire_offline(self, expired: SessionExpired) -> None:
        if self.offline.lose_offline():
            self.gen, self.gen_kind = self.flow.expired_while_disconnected(expired), "loss"
            self._resume()

    def _reconnect(self) -> None:
        if self.link is None and self.failure is None:
            self._connect()

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
        self.revoking = frozenset()

    # --- requests -----------------------------------------------------------------------

    def _send(self, request: Request, handler: Handler, timeout_ms: float | None) -> int:
        assert self.link is not None
        self.cid += 1
        cid = self.cid
        timer = None
        if timeout_ms is not None:
            timer = self._after_local(timeout_ms, self._timed_out, cid)
        self.calls[cid] = (handler, timer)
        self.link.send(cid, request)
        if self.world.tracer is not None:
            self.world.trace(self, f"sends #{cid}", detail=True, request=_short(request))
        return cid

    def _timed_out(self, cid: int) -> None:
        call = self.calls.pop(cid, None)
        if call is None:
            return
        if cid == self.flow_call or (self.hb is not None and self.hb[0] == cid):
            # the flow's request or a heartbeat: the runtime drops the connection
            self._connection_failed(f"request {cid} timed out")
        elif self.committing and cid == self._commit_cid:
            self.committing = False

    def frame_arrived(self, link: Link, frame: ServerFrame) -> None:
        self._run(self.epoch, self._frame_arrived, (link, frame))

    def _frame_arrived(self, link: Link, frame: ServerFrame) -> None:
        if link is not self.link:
            return
        if self.world.tracer is not None:
            self.world.trace(self, "receives", detail=True, frame=_short(frame))
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
                self._post(event)
        self._poke()

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
                elif self.gen_kind == "loss":
                    self.offline.loss_ran()
                if self.serve_waiting:
                    self.serve_waiting = False
                    if self.connected:
                        self._serve()
                        value, error = None, None
                        continue
                pending = self.reconnect_timer is not None and self.reconnect_timer.pending
                if self.link is None and self.failure is None and not pending:
                    # the owed callbacks (or a loss while offline) ran: reconnect, after a backoff
                    self.reconnect_timer = self._after_local(
                        self.driver.reconnect_delay_ms(), self._reconnect
                    )
                return
            except (Reconnect, ConnectionError, TimeoutError) as exc:
                self.gen = None
                self._connection_failed(f"{type(exc).__name__}: {exc}")
                return
            except Exception as exc:
                self.gen = None
                if self.gen_kind != "serve":
                    self.offline.loss_ran()
                self._fail(f"{type(exc).__name__}: {exc}")
                return
            value, error = None, None
            self._poke()
            if not self._perform(action):
                return
            if isinstance(action, Receive):  # it took an event already waiting
                value = self.events.popleft()

    def _perform(self, action: Action) -> bool:
        """Start ``action``; True if its result is there at once (the loop goes on)."""
        match action:
            case Call(request, expect, timeout_ms, _):
                if isinstance(request, JoinGroupRequest):
                    self.world.checker.joining(self, request.member_id)
                    if self.false_claim:
                        request = self._lie(request)
                timeout = self.core.config.session_timeout_ms if timeout_ms is None else timeout_ms
                answer = partial(self._flow_answer, expect=expect)
                self.flow_call = self._send(request, answer, timeout)
                return False
            case Listen(name, partitions):
                self._listen(name, partitions)
                return False
            case Replicas(standby, warmup):
                self._track()
                self.replicas = standby | warmup
                self._track()
                return True
            case Sleep(ms):
                self.waiting = self._after_local(ms, self._flow_wakes)
                return False
            case Receive(deadline):
                if self.events:
                    return True
                self.world.member_idle(self)
                self.receiving = True
                if deadline is not None:
                    self.waiting = self._at_local(deadline, self._receive_deadline)
                return False
            case Post(event):
                self.events.append(event)
                return True
            case Failed(code, message):
                self._fail(f"{ErrorCode(code).name}: {message}")
                return True
        return True

    def claim_falsely(self) -> None:
        """A fault: the member rejoins now, and its subscription claims a partition that
        another member owns, in that member's generation (as a client with a bug, or one
        restored from a copy of another's state, would)."""
        if self.alive:
            self.false_claim = True
            self._post(Rejoin("false claim"))

    def _lie(self, request: JoinGroupRequest) -> JoinGroupRequest:
        self.false_claim = False
        mine = self.core.owned_generation if self.core.owned else None
        # Only a current member's claim is copied: the generation of a member the group
        # dropped (or one from before a coordinator restart, when generations began
        # again) is not one a client of this group could hold.
        core = self.world.host.core
        group = core.groups.get(GROUP_ID) if core is not None else None
        current = group.members if group is not None else {}
        victims = sorted(
            (tp, m.core.owned_generation)
            for m in self.world.members
            if m is not self and m.alive and m.core.member_id in current
            for tp in m.core.owned
            if mine is None or m.core.owned_generation == mine
            if tp not in self.core.owned
        )
        if not victims:
            return request
        tp, generation = self.world.rng.choice(victims)
        self.core.joined_claims |= {tp}  # the client believes its own claim
        self.world.trace(
            self, "false claim", partition=f"{tp.topic}-{tp.partition}", generation=generation
        )
        protocols = []
        for protocol in request.protocols:
            sub = decode_subscription(protocol.metadata)
            lie = msgspec.structs.replace(
                sub, owned_partitions=grouped(sub.owned | {tp}), generation=generation
            )
            protocols.append(msgspec.structs.replace(protocol, metadata=encode(lie)))
        return msgspec.structs.replace(request, protocols=protocols)

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
        except Reconnect as exc:
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

    def _post(self, event: Event) -> None:
        self.events.append(event)
        if self.receiving:
            self.receiving = False
            if self.waiting is not None:
                self.waiting.cancel()
                self.waiting = None
            self.world.sched.after(0.0, self._run, self.epoch, self._deliver_event, ())

    def _deliver_event(self) -> None:
        if self.events and self.gen is not None:
            self._resume(self.events.popleft())

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
            self.world.member_failed(self, reason)

    # --- the listener (the application's callbacks) -------------------------------------

    def _listen(self, name: str, partitions: frozenset[TopicPartition]) -> None:
        world = self.world
        world.callback(self, name, partitions)
        duration = world.rng.uniform(0.0, world.config.callback_ms)
        if name == "on_partitions_revoked":
            slow = world.slow_revocation
            if slow is not None and world.sched.now <= slow[1]:
                world.slow_revocation = None
                duration = slow[0]
            self.revoking = partitions
            self._commit(partitions)  # the last positions, before giving them up
            self.app_owned -= partitions
            for tp in partitions:  # if it gets one back, it starts from the committed offset
                self.positions.pop(tp, None)
        elif name == "on_partitions_lost":
            self.app_owned -= partitions
            for tp in partitions:
                self.positions.pop(tp, None)
        else:
            self.app_owned |= partitions
            self._fetch(partitions)
        self._track()
        self.listening = (name, self._after_local(duration, self._listened))

    def _listened(self) -> None:
        self.listening = None
        for tp in self.revoking:
            self.positions.pop(tp, None)
        self.revoking = frozenset()
        if self.cut_off:  # the connection was lost while it ran: acted on now
            self._tear_down()
            return
        self._resume()

    # --- the application's commits ------------------------------------------------------

    _commit_cid = 0

    def _position(self, tp: TopicPartition, now: float) -> int | None:
        kept = self.positions.get(tp)
        if kept is None:
            return None
        base, since = kept
        return base + int((now - since) / RECORD_MS)

    def _commit_tick(self) -> None:
        self._after_local(COMMIT_INTERVAL_MS, self._commit_tick)
        # the application commits from the task that runs its callbacks: not during one
        if not self.committing and self.listening is None:
            self._commit(self.driver.visible(self.now_ms()))

    def _commit(self, partitions: frozenset[TopicPartition]) -> None:
        if not self.offline.serving or not partitions:
            return
        now = self.now_ms()
        chunk: dict[str, list[tuple[int, int]]] = {}
        for tp in sorted(partitions):
            position = self._position(tp, now)
            if position is not None:
                chunk.setdefault(tp.topic, []).append((tp.partition, position))
        if not chunk:
            return
        generation = self.core.current
        if self.driver.commit_refusal(generation, now) is not None:
            return  # Member.commit refuses it (CommitFailedError): nothing is sent
        request = self.driver.commit_request(chunk, None, generation)
        self.committing = True
        self._commit_cid = self._send(
            request,
            partial(self._committed, generation=generation, sent=now),
            self.core.config.session_timeout_ms,
        )

    def _committed(self, response: Response, generation: Generation, sent: float) -> None:
        self.committing = False
        try:
            fell_out = self.driver.commit_response(response, generation, sent)
        except Reconnect:  # out of step: the application's commit fails, nothing else
            return
        if fell_out is not None:
            self._post(fell_out)

    def _fetch(self, partitions: frozenset[TopicPartition]) -> None:
        """Where to start: the committed offsets of newly assigned partitions."""
        if not self.offline.serving or not partitions:
            return
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = OffsetFetchRequest(
            group_id=GROUP_ID,
            topics=[OffsetFetchTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )
        self._send(request, self._fetched, self.core.config.session_timeout_ms)

    def _fetched(self, response: Response) -> None:
        if not isinstance(response, OffsetFetchResponse) or response.error_code != E.NONE:
            return
        now = self.now_ms()
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition)
                if tp in self.app_owned and tp not in self.positions:
                    self.positions[tp] = (max(p.offset, 0), now)

    # --- heartbeats and the watchdog (the runtime's other tasks) ------------------------

    def _poke(self) -> None:
        """Something changed: the heartbeat task and the watchdog look again (the
        runtime's ``_notify``)."""
        if not self.alive or self.paused:
            return
        driver = self.driver
        now = self.now_ms()
        wake = driver.watchdog(now)
        while isinstance(wake, SessionExpired):
            self._post(wake)
            if self.offline.session_expired(wake):  # no main loop runs: lost now
                self._expire_offline(wake)
            wake = driver.watchdog(now)
        timer = self.wd_timer
        if (
            timer is None
            or not timer.pending
            or abs(timer.when - self._global(wake) - TICK_MS) > TICK_MS
        ):
            if timer is not None:
                timer.cancel()
            self.wd_timer = self._at_local(wake, self._poke)
        if not self.offline.serving or self.hb is not None:
            return
        action = driver.heartbeat(now)
        while isinstance(action, SessionExpired):  # a callback overran: given up
            self.world.gave_up(self)
            self._post(action)
            leave = driver.leave_after_give_up()
            if leave is not None:  # once, whatever comes of it (the runtime's heartbeat task)
                self._send(leave, _ignored, LEAVE_TIMEOUT_MS)
            action = driver.heartbeat(now)
        if isinstance(action, WaitUntil):
            timer = self.hb_timer
            if (
                timer is not None
                and timer.pending
                and action.at is not None
                and abs(timer.when - self._global(action.at) - TICK_MS) <= TICK_MS
            ):
                return  # already set for then
            if timer is not None:
                timer.cancel()
                self.hb_timer = None
            if action.at is not None:
                self.hb_timer = self._at_local(action.at, self._poke)
            return
        cid = self._send(action.request, self._heartbeat_answer, driver.heartbeat_timeout_ms)
        self.hb = (cid, action)

    def _global(self, local: float) -> float:
        return (local - self.offset) / (1.0 + self.drift)

    def _heartbeat_answer(self, response: Response) -> None:
        hb, self.hb = self.hb, None
        if hb is None:
            return
        try:
            answer = self.driver.heartbeat_response(response, hb[1], self.now_ms())
        except Reconnect as exc:  # out of step: the heartbeat task drops the connection
            self._connection_failed(str(exc))
            return
        if answer is not None:
            self._post(answer)

    # --- for the invariants -------------------------------------------------------------

    @property
    def stable(self) -> bool:
        core = self.core
        return (
            self.alive
            and not self.paused
            and self.connected
            and core.state is MemberState.STABLE
            and core.rejoin_at_ms is None
            and self.idle()
            and not self._zombie(self.now_ms())
        )


def incarnation_token(seed: int, index: int, restarts: int) -> bytes:
    """The incarnation token a member process presents on each of its connections, as
    huddle's ``Member`` does: 16 bytes, one per process, drawn from the run's seed (not its
    RNG, so the rest of the run draws what it did before members had tokens)."""
    return hashlib.sha256(f"huddle-sim:{seed}:{index}:{restarts}".encode()).digest()[:16]


def _ignored(response: Response) -> None:
    """The answer to a request whose outcome changes nothing."""


def _short(message: object) -> str:
    """A message in one line for the trace: its type and the fields that tell it apart."""
    name = type(message).__name__
    if isinstance(message, Reply):
        return f"#{message.correlation_id} {_short(message.response)}"
    fields = []
    for key in (
        "error_code",
        "generation_id",
        "member_id",
        "leader",
        "group_instance_id",
    ):
        value = getattr(message, key, None)
        if value not in (None, "", 0):
            fields.append(f"{key}={value}")
    return f"{name}({', '.join(fields)})"
