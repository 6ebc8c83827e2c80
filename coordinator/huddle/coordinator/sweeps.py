"""The server's timers: the core's deadlines, and the sweeps over its connections.

- ``reschedule``: one ``loop.call_at`` timer follows ``core.next_deadline()``. When it
  fires, what waits on the sockets is read first (two hops through the ready queue: one
  poll in between, on asyncio's loop and uvloop's alike), then ``core.advance`` runs: a
  heartbeat sent during a stall is not taken for a missed one.
- ``_sweep``: connections that never logged in within the handshake timeout (their wire
  says why: ``Wire.overdue``), or began a frame and never finished it, are closed.
- ``_sweep_idle``: connections that hold no member and neither sent nor were sent anything
  for the idle timeout are closed (Kafka's connections.max.idle.ms).
- ``_retain``: offset retention, a few milliseconds at a time, group by group.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator, Mapping
from typing import Final

import structlog

from huddle.coordinator.config import ServerConfig
from huddle.coordinator.connection import Connection
from huddle.coordinator.core import Coordinator
from huddle.coordinator.requests import RequestPath
from huddle.coordinator.storage.group_commit import COPY_SLICE_S
from huddle.protocol.errors import ErrorCode

log = structlog.get_logger("huddle.server")

_TIMER_SLACK_S: Final = 0.001  # arm timers a hair late so they never fire before the deadline
_SWEEP_MIN_S: Final = 0.02
_SWEEP_MAX_S: Final = 1.0
_ADVANCE_RETRY_S: Final = 1.0  # after the core failed in advance(), try again this much later
_STALL_S: Final = 0.05  # a pass this long between the read and the expiry: read again
_MAX_HOPS: Final = 4


class Timers:
    """The core's deadline timer and the periodic sweeps, armed by ``start``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        config: ServerConfig,
        core: Coordinator,
        path: RequestPath,
        *,
        conns: Mapping[int, Connection],
        watched: set[Connection],
    ) -> None:
        self.loop = loop
        self.config = config
        self.core = core
        self.path = path
        self.conns = conns
        self.watched = watched  # not yet logged in, or mid-frame: the server's set
        self.stopped = False
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: float | None = None
        self._expiring = False  # a deadline passed: expiry waits for one read of the sockets
        self._hops = 0
        self._hop_at = 0.0
        self._sweeper: asyncio.TimerHandle | None = None
        self._idle_sweeper: asyncio.TimerHandle | None = None
        self._retention_check: asyncio.TimerHandle | None = None  # offsets of empty groups
        self._retaining: Generator[None, None, int] | None = None  # a check under way

    def start(self) -> None:
        """Arm the periodic sweeps and the retention check."""
        cfg, loop = self.config, self.loop
        self._retention_check = loop.call_later(_retention_interval(cfg), self._retain)
        self._sweeper = loop.call_later(_sweep_interval(cfg), self._sweep)
        self._idle_sweeper = loop.call_later(_idle_interval(cfg), self._sweep_idle)

    def stop(self) -> None:
        """Cancel every timer; none is armed again."""
        self.stopped = True
        for handle in (self._timer, self._sweeper, self._idle_sweeper, self._retention_check):
            if handle is not None:
                handle.cancel()
        self._timer = self._sweeper = self._idle_sweeper = self._retention_check = None

    # --- the core's deadlines ---------------------------------------------------------

    def reschedule(self, not_before: float | None = None) -> None:
        """Follow the core's next deadline (not before ``not_before``, if given)."""
        if self.stopped or self._expiring:
            return
        try:
            deadline = self.core.next_deadline()
        except Exception:
            log.exception("core_failed", operation="next_deadline")
            deadline = None
        if deadline is not None and not_before is not None:
            deadline = max(deadline, not_before)
        if deadline == self._deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._deadline = deadline
        if deadline is None:
            self._timer = None
        else:
            self._timer = self.loop.call_at(deadline / 1000 + _TIMER_SLACK_S, self._on_timer)

    def _on_timer(self) -> None:
        """A deadline passed. Read what waits on the sockets before acting on it: after a
        stall (a paused process, a slow disk, a long request) the heartbeats sent meanwhile
        sit in the kernel's buffers, and an event loop runs its due timers before it polls.
        Two hops through the ready queue put one poll in between on asyncio's loop and on
        uvloop's alike."""
        self._timer = None
        if self.stopped:
            return
        self._expiring = True  # reschedule arms nothing until _expire has run
        self._hops = 0
        self._hop()

    def _hop(self) -> None:
        self._hops += 1
        self.loop.call_soon(self._hopped)

    def _hopped(self) -> None:
        self._hop_at = time.perf_counter()
        self.loop.call_soon(self._expire)

    def _expire(self) -> None:
        if self.stopped:
            return
        if time.perf_counter() - self._hop_at > _STALL_S and self._hops < _MAX_HOPS:
            self._hop()  # the loop stalled since the read: read again first
            return
        self._expiring = False
        self._deadline = None
        now = self.loop.time() * 1000
        conns = self.conns

        def unread(conn_id: int) -> bool:
            # Frames wait that will be handled in the next passes (not those of a client
            # that leaves its answers unread: they wait on it; nor those behind a request
            # still in flight on a wire that answers in order: they wait on the core).
            conn = conns.get(conn_id)
            return (
                conn is not None and bool(conn.inbox) and not conn.write_paused and not conn.muted
            )

        try:
            out = self.core.advance(now, unread)
        except Exception:
            log.exception("core_failed", operation="advance")
            self.reschedule(not_before=now + _ADVANCE_RETRY_S * 1000)
            return
        self.path.send_outside(out)
        self.reschedule()
        self.path.flush()

    # --- sweeps -----------------------------------------------------------------------

    def _sweep(self) -> None:
        """Close connections that never logged in, or began a frame and never finished it."""
        cfg = self.config
        now = self.loop.time()
        handshake_s = cfg.handshake_timeout_ms / 1000
        stalled_s = cfg.stalled_frame_timeout_ms / 1000
        for conn in list(self.watched):
            if conn.closing:
                self.watched.discard(conn)
            elif (
                not conn.handshaken
                and now - conn.opened_at > handshake_s
                and (overdue := conn.wire.overdue(conn, cfg.handshake_timeout_ms)) is not None
            ):
                code, message = overdue  # else it waits on the coordinator (a SASL check)
                conn.fail(code, message, event="handshake_failed")
            elif conn.frame_started is not None and now - conn.frame_started > stalled_s:
                conn.fail(
                    ErrorCode.INVALID_REQUEST,
                    f"frame not completed within {cfg.stalled_frame_timeout_ms} ms",
                    event="bad_frame",
                )
        self._sweeper = self.loop.call_later(_sweep_interval(cfg), self._sweep)

    def _retain(self) -> None:
        """Offset retention: expired offsets go (kept as deletions, so a restart does not
        bring them back). The check runs a few milliseconds at a time, a group at a time,
        with other work in between, until it has been through every group."""
        self._retention_check = None
        if self.stopped or self.path.closed:
            self._retaining = None
            return
        if self._retaining is None:
            self._retaining = self.core.expiring_offsets(
                self.loop.time() * 1000, time.time() * 1000
            )
        until = time.perf_counter() + COPY_SLICE_S
        try:
            while time.perf_counter() < until:
                next(self._retaining)
        except StopIteration:
            self._retaining = None
        except Exception:
            log.exception("core_failed", operation="expire_offsets")
            self._retaining = None
        self.path.send_outside([])
        self.path.flush()
        wait = 0.0 if self._retaining is not None else _retention_interval(self.config)
        self._retention_check = self.loop.call_later(wait, self._retain)

    def _sweep_idle(self) -> None:
        """Close connections that hold no member and have neither sent nor been sent anything
        for the idle timeout (as Kafka's connections.max.idle.ms): idle connections cannot
        hold every slot."""
        cfg = self.config
        now = self.loop.time()
        idle_s = cfg.idle_timeout_ms / 1000
        core = self.core
        for conn in list(self.conns.values()):
            if (
                conn.handshaken
                and not conn.closing
                and now - conn.last_active > idle_s
                and not core.holds_members(conn.conn_id)
                and not conn.held
            ):
                conn.log.info("connection_idle", idle_ms=int((now - conn.last_active) * 1000))
                conn.close(f"idle for over {cfg.idle_timeout_ms} ms, holding no member")
        self._idle_sweeper = self.loop.call_later(_idle_interval(cfg), self._sweep_idle)


def _sweep_interval(config: ServerConfig) -> float:
    shortest = min(config.handshake_timeout_ms, config.stalled_frame_timeout_ms) / 1000
    return min(max(shortest / 4, _SWEEP_MIN_S), _SWEEP_MAX_S)


def _retention_interval(config: ServerConfig) -> float:
    return config.group.offsets_retention_check_interval_ms / 1000


def _idle_interval(config: ServerConfig) -> float:
    return min(max(config.idle_timeout_ms / 1000 / 10, _SWEEP_MIN_S), 10.0)
