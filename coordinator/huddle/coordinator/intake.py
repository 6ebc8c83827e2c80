"""Intake and fairness: which connection's frames are handled when, for every wire.

Frames read are handled at once, up to a slice of time (``--input-slice-ms``) per
connection and ``_PUMP_PASS_S`` per loop pass (a short inbox, as a heartbeat's, is
handled whatever the budget). What is left waits in a round robin (``backlogged``), with
the connection's reading paused: once per loop pass, after the pass's reads, every
connection with frames waiting gets a turn, in arrival order, so one connection's burst
never holds everyone else up (backpressure: a client that sends faster than it is served
is read no further until it is).

A connection is served no further while its answers are not read (its write buffer is
full), while an authentication step of it is being checked, while ``HeldAnswers.limit``
of its answers wait for the data dir, on a wire that answers in request order
(``Wire.in_order``) while the request it sent last is not answered yet (muted), or while
too many of its answers wait behind one not made yet (muted by its wire: a Kafka
connection's, ``KafkaCodec.full``).

Each frame goes to its connection's wire (``Wire.take``) and the request that comes back
to the ``RequestPath``: direct calls, one frame after the other.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Final

import structlog

from huddle.coordinator.connection import Connection
from huddle.coordinator.held import HeldAnswers
from huddle.coordinator.metrics import CoordinatorMetrics
from huddle.coordinator.requests import RequestPath

_PASS_OUTPUT_BYTES: Final = 1024 * 1024  # answers queued for one connection before it yields
_PUMP_PASS_S: Final = 0.02  # input handled per loop pass, at most this long (and one slice)
_SHORT_INBOX: Final = 2  # frames a connection may have handled at once, budget or not
_BUSY_INBOX: Final = 16  # frames read from a connection whose SASL step is checked


def _bound_variables() -> tuple[ContextVar[Any], ContextVar[Any]]:
    """structlog's own context variables behind ``bind_contextvars(conn_id=...,
    client_id=...)`` (a token names its variable): the events logged while a connection's
    frames are handled carry its ``conn_id`` and ``client_id`` (``merge_contextvars``).
    Set directly, they cost two ``ContextVar.set`` per slice, where ``bind_contextvars``
    builds a name and a dict per call (about 2 µs: a heartbeat's whole budget)."""
    tokens = structlog.contextvars.bind_contextvars(conn_id=None, client_id=None)
    structlog.contextvars.reset_contextvars(**tokens)
    return tokens["conn_id"].var, tokens["client_id"].var


_CONN_ID, _CLIENT_ID = _bound_variables()


class Intake:
    """Serves connections' frames in slices, in turn."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        path: RequestPath,
        held: HeldAnswers,
        *,
        slice_s: float,
        reschedule: Callable[[], None],
        metrics: CoordinatorMetrics | None,
    ) -> None:
        self.loop = loop
        self.path = path
        self.held = held
        self.slice_s = slice_s
        self._reschedule = reschedule  # the core's deadline may have moved
        self.metrics = metrics
        self.stopped = False
        self.pass_spent = 0.0  # seconds spent on input in this loop pass
        self._backlog: deque[Connection] = deque()  # connections with frames left to handle
        self._waiting: set[Connection] = set()  # the same, for lookups
        self._pump: asyncio.Handle | None = None

    def waits(self, conn: Connection) -> bool:
        """Whether ``conn`` waits its turn in the round robin."""
        return conn in self._waiting

    def frames_received(self, conn: Connection) -> None:
        """Frames arrived in ``conn.inbox``: handle them now, up to a slice of time; what is
        left waits in the backlog for the next loop pass, with the connection's reading
        paused, so one connection's burst never holds the loop (and everyone else) up."""
        # Within the pass's budget (or for a short request or two, as a heartbeat is),
        # served now; else it waits its turn with the other connections that have a backlog.
        if self.pass_spent < _PUMP_PASS_S or len(conn.inbox) <= _SHORT_INBOX:
            calls = self.serve(conn)
        else:
            calls = 0
        if self.metrics is not None:
            self.metrics.calls[conn.wire.listener] += calls
        if conn.inbox and not conn.closing:
            if conn.sasl_busy:
                # its SASL step is being checked (the login puts it back in the backlog
                # then); read on meanwhile, to see it go away, unless it keeps sending
                if len(conn.inbox) > _BUSY_INBOX:
                    conn.hold_input()
            elif conn.held >= self.held.limit or conn.muted:
                conn.hold_input()  # served again once its held answers went out
            else:
                self.backlogged(conn)
        if calls:
            self._reschedule()
        path = self.path
        if path.keeper is not None:
            path.keeper.submit_soon()  # the changes of this pass, in one write
        path.flush()

    def backlogged(self, conn: Connection) -> None:
        """``conn`` has frames waiting that it may not handle yet: take them in turn."""
        conn.hold_input()
        if conn in self._waiting:
            return
        self._waiting.add(conn)
        self._backlog.append(conn)
        if self._pump is None:
            self._pump = self.loop.call_soon(self._pump_backlog)

    def _pump_backlog(self) -> None:
        """One loop pass's turn for each connection with frames waiting, in arrival order.
        It runs once per loop pass, after the pass's reads: every connection, the quiet ones
        included, gets its turn between two slices of a busy one."""
        self._pump = None
        backlog, members = self._backlog, self._waiting
        limit = self.held.limit
        calls = 0
        for _ in range(len(backlog)):
            if self.pass_spent >= _PUMP_PASS_S:
                break  # the others keep their place: first in the next pass
            conn = backlog.popleft()
            if not conn.closing and not conn.write_paused:
                served = self.serve(conn)
                calls += served
                if self.metrics is not None:
                    self.metrics.calls[conn.wire.listener] += served
            if (
                conn.closing
                or conn.write_paused
                or conn.held >= limit
                or conn.sasl_busy
                or conn.muted
            ):
                # gone; or back once it reads again (resume_writing), once its held
                # answers went out (HeldAnswers), once its SASL step was checked, or once
                # its request in flight is answered (Connection._answering)
                members.discard(conn)
            elif conn.inbox:
                backlog.append(conn)
            else:
                members.discard(conn)
                conn.release_input()
        if calls:
            self._reschedule()
        path = self.path
        if path.keeper is not None:
            path.keeper.submit_soon()
        path.flush()
        if backlog and not self.stopped:
            self._pump = self.loop.call_soon(self._pump_backlog)

    def serve(self, conn: Connection) -> int:
        """Handle frames of ``conn.inbox`` for up to one slice; return how many were calls.
        It stops early while the connection's answers are not being read."""
        inbox = conn.inbox
        if not inbox or conn.muted:
            return 0
        conn_token = _CONN_ID.set(conn.conn_id)  # bind_contextvars(conn_id=..., client_id=...)
        client_token = _CLIENT_ID.set(conn.client_id)
        calls = 0
        now = self.loop.time() * 1000  # one read, one instant: every frame arrived together
        began = time.perf_counter()
        until = began + self.slice_s
        take = conn.wire.take
        call = self.path.call
        limit = self.held.limit
        in_order = conn.wire.in_order
        try:
            while inbox and not conn.closing and not conn.write_paused and not conn.muted:
                if conn.sasl_busy:
                    break  # its SASL step is being checked: handled once it is
                if conn.held >= limit:
                    break  # its answers wait for the disk: it is served again once they go
                request = take(conn, inbox.popleft())
                if request is not None:
                    if in_order:
                        conn.in_flight = request.correlation_id
                    call(conn, request, now)
                    calls += 1
                    if in_order and conn.in_flight is not None:
                        conn.muted = True  # answered later: the next request waits for it
                        break
                if len(conn.pending) >= _PASS_OUTPUT_BYTES or time.perf_counter() >= until:
                    break
        finally:
            _CLIENT_ID.reset(client_token)
            _CONN_ID.reset(conn_token)
            self._spend(time.perf_counter() - began)
        if conn.closing:
            inbox.clear()
        elif conn.ends_after_input and not inbox and not conn.held:
            conn.input_done()
        return calls

    def _spend(self, seconds: float) -> None:
        """Count time spent on input in this loop pass (reset when the next pass begins)."""
        if self.pass_spent == 0.0:
            self.loop.call_soon(self._new_pass)
        self.pass_spent += seconds or 1e-9

    def _new_pass(self) -> None:
        self.pass_spent = 0.0

    def stop(self) -> None:
        self.stopped = True
