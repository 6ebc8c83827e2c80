"""The consumer-protocol member's runtime as the simulator performs it: the heartbeat loop of
``huddle.client.consumer_member`` (``Member(group_protocol="consumer")``) around the
library's sans-IO ``ConsumerCore``, on simulated time and links.

As the anyio member does, it sends one heartbeat at a time (the core's request), hands each
answer to the core, and performs the ``Reconcile`` it returns: ``on_partitions_lost``, then
``on_partitions_revoked`` (the partitions given up when it returns), then
``on_partitions_assigned`` (taken when it returns), one callback at a time. While they run
it heartbeats at the interval to keep its session alive (the core's ``keeps_alive``), one
heartbeat at a time: the answers start no callback, and what they bring (a new target, a
fence) is acted on once the callbacks are done and the heartbeat out is answered
(``callbacks_done``). It heartbeats again at once when the answer asked for it, after the
retry backoff when asked to retry, on a pushed ``ConsumerAssignmentChanged`` for it, and
otherwise at the heartbeat interval the coordinator set.

Where the anyio member gives up, the simulated one goes on, as a Kafka consumer does (and
docs/simulation.md says so): a lost connection (reset, refused, a heartbeat unanswered
within ``REQUEST_TIMEOUT_MS``) is opened again after a backoff, and the next heartbeat is a
full one; a restarted static member answered UNRELEASED_INSTANCE_ID (its killed process
never left) joins again after the backoff, until the coordinator has let the old one go.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from huddle.client.consumer_core import REJOIN_CODES, Reconcile
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ErrorCode, HuddleError
from huddle.protocol.messages import (
    ConsumerAssignmentChanged,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    ConsumerTopicPartitions,
    ErrorResponse,
    Reply,
    Response,
    ServerFrame,
)
from huddle.sim.network import Link
from huddle.sim.scheduler import Timer
from huddle.sim.steplog import short

if TYPE_CHECKING:
    from huddle.sim.consumer_process import ConsumerProcess

REQUEST_TIMEOUT_MS = 10_000.0  # as long as the anyio member waits for an answer
# a callback, the partitions it is about, and what the core is told once it returned
Step = tuple[str, frozenset[TopicPartition], Callable[[frozenset[TopicPartition]], None]]


class ConsumerRuntime:
    """One start of a consumer-protocol member process."""

    def __init__(self, process: ConsumerProcess) -> None:
        self.process = process
        self.world = process.world
        self.core = process.consumer
        self.link: Link | None = None
        self.connected = False
        self.cid = 0
        self.in_flight: tuple[int, Timer] | None = None  # the heartbeat sent, its timeout
        self.waiting: Timer | None = None  # until the next heartbeat (interval, backoff)
        self.connecting: Timer | None = None  # a connect's timeout, or a reconnect's backoff
        self.woken = False  # a notice for it arrived since its last heartbeat was sent
        self.steps: deque[Step] = deque()  # the callbacks an answer asks, in order
        self.then: Reconcile | None = None  # the answer they come from
        self.listening: str | None = None  # the callback running
        self.settled = False  # its last answer asked nothing more of it
        self.fenced = False  # answered FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID, not back
        self.failures = 0  # connections lost in a row (the backoff grows)
        self.false_claim = False  # a fault: its next heartbeat claims another's partition

    # --- the connection -----------------------------------------------------------------

    def connect(self) -> None:
        self.connecting = None
        self.link = self.world.net.connect(self.process)
        self.connecting = self.process.after_local(REQUEST_TIMEOUT_MS, self._connect_timed_out)

    def _connect_timed_out(self) -> None:
        self.connecting = None
        if self.link is not None and not self.connected:
            self._lost("connect timed out")

    def link_up(self, link: Link) -> None:
        if link is not self.link:
            return
        if self.connecting is not None:
            self.connecting.cancel()
            self.connecting = None
        self.connected = True
        self.failures = 0
        self.world.trace(self.process, "connected", conn=link.conn_id)
        self.beat()

    def link_down(self, link: Link, reason: str) -> None:
        if link is self.link:
            self._lost(reason)

    def _lost(self, reason: str) -> None:
        """The connection is gone: opened again after a backoff; the heartbeat sent on it is
        forgotten and the next one is full (the coordinator may have missed an answer)."""
        link = self.link
        if link is None:
            return
        self.world.trace(self.process, "disconnected", reason=reason)
        self.world.checker.shaken(self.process)
        self.link = None
        self.connected = False
        link.close_by_member()
        for timer in (self.waiting, self.connecting):
            if timer is not None:
                timer.cancel()
        self.waiting = None
        if self.in_flight is not None:
            self.in_flight[1].cancel()
            self.in_flight = None
        self.core.full = True
        if self.core.busy and not self.steps:  # the callbacks were done: it goes on
            self._next_step()
        self.settled = False
        self.failures += 1
        config = self.world.config
        backoff = min(
            config.retry_backoff_ms * 2 ** (self.failures - 1), config.max_retry_backoff_ms
        )
        self.connecting = self.process.after_local(backoff, self.connect)

    def crashed(self) -> None:
        if self.link is not None:
            self.link.close_by_member()
            self.link = None
        self.connected = False

    # --- heartbeats ---------------------------------------------------------------------

    def beat(self) -> None:
        """Send the core's heartbeat, unless one is out, no connection, or callbacks run
        and the member is not in the group (fenced meanwhile)."""
        link = self.link
        if not self.connected or link is None or self.in_flight is not None:
            return
        if self.core.busy and not self.core.keeps_alive():
            return
        if self.waiting is not None:
            self.waiting.cancel()
            self.waiting = None
        self.woken = False
        request = self.core.request()
        if self.false_claim and self.core.epoch > 0:  # a join names nothing it owns
            self.false_claim = False
            request = self._claiming(request)
        self.cid += 1
        cid = self.cid
        timer = self.process.after_local(REQUEST_TIMEOUT_MS, self._timed_out, cid)
        self.in_flight = (cid, timer)
        link.send(cid, request)
        if self.world.tracer is not None:
            self.world.trace(self.process, f"sends #{cid}", detail=True, request=short(request))

    def _claiming(self, request: ConsumerHeartbeatRequest) -> ConsumerHeartbeatRequest:
        """A full heartbeat whose owned partitions also name one that another member
        processes now (what a client with a bug would send)."""
        mine = self.process.processing()
        theirs = sorted(
            {tp for m in self.world.members if m is not self.process for tp in m.processing()}
            - mine
        )
        if not theirs:
            return request
        claim = self.world.rng.choice(theirs)
        self.world.trace(self.process, "claims falsely", partition=claim.partition)
        self.core.full = True
        full = self.core.request()
        extra = ConsumerTopicPartitions(topic=claim.topic, partitions=[claim.partition])
        return msgspec.structs.replace(full, owned=[*(full.owned or ()), extra])

    def _timed_out(self, cid: int) -> None:
        if self.in_flight is not None and self.in_flight[0] == cid:
            self._lost(f"heartbeat {cid} timed out")

    def frame_arrived(self, link: Link, frame: ServerFrame) -> None:
        if link is not self.link:
            return
        if self.world.tracer is not None:
            self.world.trace(self.process, "receives", detail=True, frame=short(frame))
        if isinstance(frame, Reply):
            flight = self.in_flight
            if flight is None or flight[0] != frame.correlation_id:
                return
            flight[1].cancel()
            self.in_flight = None
            self._answered(frame.response)
        elif (
            isinstance(frame, ConsumerAssignmentChanged) and frame.member_id == self.core.member_id
        ):
            self.woken = True
            if self.waiting is not None and not self.core.busy:  # between heartbeats: now
                self.beat()

    def _answered(self, response: Response) -> None:
        if not isinstance(response, ConsumerHeartbeatResponse | ErrorResponse):
            self.fail(f"the coordinator answered {type(response).__name__}")
            return
        code = response.error_code
        if code == ErrorCode.UNRELEASED_INSTANCE_ID and self.core.epoch == 0:
            self._wait(self.world.config.retry_backoff_ms)  # its killed process's place
            return
        try:
            step = self.core.answered(response)
        except HuddleError as exc:
            self.fail(f"{type(exc).__name__}: {exc}")
            return
        if code in REJOIN_CODES:
            self.fenced = True
        elif code == ErrorCode.NONE:
            self.fenced = False
        core = self.core
        if core.busy:  # a heartbeat sent while callbacks ran: it kept the session alive
            if self.steps:
                if not step.find:  # another coordinator: found once the callbacks are done
                    self._keep_alive()
            else:  # they were done meanwhile
                self._next_step()
            return
        self._queue(step)
        self.then = step
        self._next_step()

    def _queue(self, step: Reconcile) -> None:
        core = self.core
        if step.lost:
            self.steps.append(("on_partitions_lost", step.lost, lambda _: core.lost()))
        if step.revoke:
            self.steps.append(("on_partitions_revoked", step.revoke, core.revoked))
        if step.revoke or step.assign:  # as the cooperative order: assigned follows
            self.steps.append(("on_partitions_assigned", step.assign, core.assigned))
        if self.steps:
            core.callbacks_begin()

    def _keep_alive(self) -> None:
        """The next heartbeat while callbacks run: after the interval."""
        if self.core.keeps_alive() and self.in_flight is None:
            self._wait(self.core.heartbeat_interval_ms)

    # --- the listener -------------------------------------------------------------------

    def _next_step(self) -> None:
        if self.steps:
            name, partitions, _ = self.steps[0]
            self.listening = name
            self.world.callback(self.process, name, partitions)
            duration = self.process.callback(name, partitions)
            self.process.after_local(duration, self._listened)
            if self.waiting is None:
                self._keep_alive()
            return
        if self.core.busy:
            if self.in_flight is not None:  # answered first: one heartbeat at a time
                return
            self._queue(self.core.callbacks_done())  # what was answered meanwhile
            if self.steps:
                self._next_step()
                return
        step, self.then = self.then, None
        if step is None:
            return
        self.settled = not (step.again or step.retry or step.find)
        if step.again or self.woken:
            self.beat()
        elif step.retry or step.find:  # one coordinator: asked again after the backoff
            self._wait(self.world.config.retry_backoff_ms)
        else:
            self._wait(self.core.heartbeat_interval_ms)

    def _listened(self) -> None:
        name, partitions, done = self.steps.popleft()
        self.listening = None
        self.process.callback_done(name, partitions)
        done(partitions)
        if self.core.abandoned:  # fenced meanwhile: no callback on what it no longer has
            self.steps.clear()
        self._next_step()

    def _wait(self, ms: float) -> None:
        if self.waiting is not None:
            self.waiting.cancel()
        self.waiting = self.process.after_local(ms, self._waited)

    def _waited(self) -> None:
        self.waiting = None
        self.beat()

    def fail(self, reason: str) -> None:
        self.process.failure = reason
        self.world.member_failed(self.process, reason)
