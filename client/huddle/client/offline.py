"""What a member does between its connections, sans-IO: when a session that runs out is
lost (at once, after the callbacks a lost connection cut off, or by the main loop), and
when a new connection's main loop may start.

A connection's life, as both runtimes (``huddle.client.member.Member`` and the simulator)
go through it, deciding nothing of their own:

1. ``CONNECTED``: the main loop (``MemberFlow.serve``) runs; a session that runs out is
   an event the watchdog posts and the main loop handles.
2. ``LOST``: the connection is known lost, but its end is under way (a listener callback
   is never cut off: it runs to its end first). A session that runs out now is lost once
   the callbacks the loss cut off have run (``MemberFlow.owed_callbacks``).
3. ``OFFLINE``: the end is handled and no main loop runs: a session that runs out is lost
   at once, by the watchdog (``MemberFlow.expired_while_disconnected``).

Between connections one flow at most runs (``busy``): the owed callbacks and then a loss
deferred meanwhile, or a loss the watchdog handles. A new connection's main loop starts
only once that flow has ended (``may_serve``), and a connection that ends meanwhile (an
attempt that failed, or one lost before its main loop could start) has its end handled
once that flow has ended too (``connection_ended``, then ``loss_ran``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from huddle.client.driver import MemberDriver
from huddle.client.events import SessionExpired
from huddle.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    Request,
    SyncGroupRequest,
)


class Link(Enum):
    CONNECTED = "connected"  # a main loop runs on the connection
    LOST = "lost"  # known lost; its end (a callback running) may be under way
    OFFLINE = "offline"  # no connection, its end handled: the watchdog acts itself


@dataclass
class Offline:
    """The member's state between connections, and the decisions that follow from it."""

    driver: MemberDriver
    link: Link = Link.OFFLINE
    busy: bool = False  # a flow runs outside a connection (owed callbacks, an offline loss)
    expiry: SessionExpired | None = None  # a loss to handle once the owed callbacks ran
    # whether a connection's main loop runs: heartbeats and commits go out on it (``link``
    # is CONNECTED; kept as a field, read on every heartbeat)
    serving: bool = False
    end_waits: bool = False  # a connection ended while a flow ran offline: handled after it
    spoken: bool = False  # the member's own first request is out on this connection

    @property
    def commit_waits(self) -> bool:
        """Whether an application's commit waits before it is sent: on a new connection,
        the member's own first request (a heartbeat, JoinGroup or SyncGroup) goes first.
        A coordinator moves the member to a new connection with those, and refuses a
        commit held up on the old one from then on. A runtime waits a heartbeat's timeout
        at most (a coordinator moves the member with a commit too), and sends each request
        at once once it is told of it (``sending``): the first one asked goes out first."""
        return self.serving and not self.spoken

    def sending(self, request: Request) -> None:
        """The member's ``request`` goes out on the connection now."""
        if isinstance(request, HeartbeatRequest | JoinGroupRequest | SyncGroupRequest):
            self.spoken = True

    @property
    def may_serve(self) -> bool:
        """Whether a new connection's main loop may start now (no flow runs offline)."""
        return not self.busy

    def connected(self, grace_ms: int | None) -> None:
        """A connection's main loop starts (once ``may_serve``); the queued event of a
        session that ran out meanwhile is handled by it now. It heartbeats at once."""
        self.link = Link.CONNECTED
        self.serving = True
        self.spoken = False
        self.expiry = None
        self.driver.connected(grace_ms)

    def connection_lost(self, now: float, *, coordinator_stopping: bool = False) -> bool:
        """The connection is found lost at ``now``; True the first time (the member may
        have been dropped from then on: ``MemberDriver.connection_lost``)."""
        if self.link is not Link.CONNECTED:
            return False
        self.link = Link.LOST
        self.serving = False
        self.driver.connection_lost(now, coordinator_stopping=coordinator_stopping)
        return True

    def connection_ended(self) -> bool:
        """A connection's tasks are over (or an attempt at one failed). True: its end is
        handled now: the callbacks it cut off run next (``MemberFlow.owed_callbacks``),
        then ``owed_ran``. False: a flow runs offline (a loss the watchdog handles): the
        end waits for it, as the connection's main loop would, and ``loss_ran`` hands it
        over once that flow is over."""
        if self.busy:
            self.end_waits = True
            return False
        self._end()
        return True

    def _end(self) -> None:
        self.link = Link.OFFLINE
        self.busy = True
        self.driver.disconnected()

    def owed_ran(self) -> SessionExpired | None:
        """The owed callbacks ran: a session that ran out meanwhile is lost now (the
        runtime runs ``MemberFlow.expired_while_disconnected`` with it, then
        ``loss_ran``); else nothing runs offline any more."""
        expiry, self.expiry = self.expiry, None
        if expiry is None:
            self.busy = False
        return expiry

    def session_expired(self, expired: SessionExpired) -> bool:
        """The watchdog found the session run out (it posts ``expired`` for the main loop
        in any case). True if the runtime must lose what the member owns itself, now:
        no main loop runs and no flow runs offline (it calls ``lose_offline`` to start).
        A connection whose end is under way, or owed callbacks running, lose it after."""
        if self.link is Link.CONNECTED:
            return False
        if self.link is Link.LOST or self.busy:
            self.expiry = expired
            return False
        return True

    def lose_offline(self) -> bool:
        """The watchdog's loss starts (True), unless a connection or another flow came
        first meanwhile (the runtime's wait for its turn may let one in)."""
        if self.link is not Link.OFFLINE or self.busy:
            return False
        self.busy = True
        return True

    def loss_ran(self) -> bool:
        """The loss handled offline (``MemberFlow.expired_while_disconnected``) ended. True
        if a connection's end waited for it (``connection_ended``): it is handled now, as
        ``connection_ended`` handles one (the owed callbacks run next, then ``owed_ran``)."""
        self.busy = False
        if not self.end_waits:
            return False
        self.end_waits = False
        self._end()
        return True
