"""The server's connections as a set: who is let in, who is watched, what they hold back.

- ``admit``: a connection is refused at the door (told why, closed at once) while the
  server stops or once ``max_connections`` are open; else it is registered by its id
  (the core's conn id) and watched until it has logged in.
- ``watched``: connections not logged in yet, or in the middle of a frame; the sweeps
  (``huddle.coordinator.sweeps``) close those that stall.
- ``partial_frame``: the bytes of unfinished frames over every connection stay within
  ``--max-partial-frame-bytes``: past it, the connection holding the most is closed.
"""

from __future__ import annotations

from dataclasses import replace

from huddle.coordinator.config import ServerConfig
from huddle.coordinator.connection import Connection
from huddle.coordinator.security.listener import ListenerSecurity
from huddle.protocol.errors import ErrorCode


class Admission:
    """The open connections by id, the watched ones, and their unfinished frames' bytes."""

    def __init__(self, config: ServerConfig, security: ListenerSecurity | None) -> None:
        self.config = config
        self.security = security
        self.conns: dict[int, Connection] = {}
        self.watched: set[Connection] = set()  # not yet logged in, or mid-frame
        self.partial_bytes = 0  # of unfinished frames, over every connection
        self.max_connections = config.max_connections  # lowered to what the fd limit allows

    def admit(self, conn: Connection, now: float, *, stopping: bool) -> None:
        """Register ``conn``, or refuse it at the door: closed at once (not drained), so a
        flood of refused connections does not hold the file descriptors kept for refusing
        them."""
        if stopping:
            conn.fail(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                "the coordinator is shutting down",
                event="connection_refused",
                drain=False,
            )
            return
        limit = self.max_connections
        if len(self.conns) >= limit:
            conn.fail(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"connection limit of {limit} reached",
                event="connection_refused",
                drain=False,
            )
            return
        self.conns[conn.conn_id] = conn
        if self.security is not None and conn.transport is not None:
            principal = self.security.principal_of(conn.transport.get_extra_info("peercert"))
            conn.peer = replace(conn.peer, principal=principal)
        conn.opened_at = conn.last_active = now
        self.watched.add(conn)
        conn.log.info("connection_opened", connections=len(self.conns))

    def forget(self, conn: Connection) -> bool:
        """``conn`` is gone; False if it was refused at the door (never registered)."""
        self.watched.discard(conn)
        self.partial_bytes -= conn.partial
        conn.partial = 0
        return self.conns.pop(conn.conn_id, None) is not None

    def watch(self, conn: Connection, watched: bool) -> None:
        if watched:
            self.watched.add(conn)
        else:
            self.watched.discard(conn)

    def greeted(self, conn: Connection) -> None:
        """Logged in: no longer watched for a stalled handshake."""
        if conn.frame_started is None:
            self.watched.discard(conn)

    def partial_frame(self, conn: Connection, change: int) -> bool:
        """Keep the bytes of unfinished frames over all connections within the limit: past
        it, the connection holding the most of them is closed (told why), not whichever
        one happened to cross the line: a big frame of a client that sends it whole
        outlives those of clients that hold many bytes back."""
        self.partial_bytes += change
        limit = self.config.max_partial_frame_bytes
        if change <= 0:
            return True
        while self.partial_bytes > limit:
            holders = [c for c in self.watched if c.partial and not c.closing]
            if conn.partial and not conn.closing and conn not in self.watched:
                holders.append(conn)  # it is watched from the end of this read on
            if not holders:
                return True
            largest = max(holders, key=lambda c: c.partial)
            largest.fail(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"the coordinator holds {self.partial_bytes} bytes of unfinished frames, over "
                f"its limit of {limit}, and this connection the most of them "
                f"({largest.partial}); send frames whole, or later",
                event="partial_frames_over_limit",
            )
            if largest is conn:
                return False
        return True
