"""The request path every wire shares: screen, core, effects, answers in order.

A wire turns a frame into a ``Call`` (``huddle.coordinator.wire``); ``RequestPath.call``
takes it from there, the same for every wire:

1. screen: refused by the ACLs, while the data dir loads, or by a cluster node that does
   not serve the group (``refusal``), answered at once without the core;
2. core: ``Coordinator.handle`` (a failure inside it is logged and answered with
   UNKNOWN_SERVER_ERROR: the server keeps serving), or for a request type served beside
   the core (``beside``: the consumer group protocol's heartbeat, whichever wire it came
   by) its handler, which screens it itself;
3. effects: the changes the core made (``take_changes``) go to the keeper (the data dir's
   group commit, or etcd) and the answers are held until they are kept
   (``huddle.coordinator.held``); without changes the answers are queued at once;
4. flush: each connection's queued frames are written once per loop pass, in order
   (``flush``).

Frames the core makes outside a request (a timer, a closed connection) go the same way:
``send_outside``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import structlog

from huddle.coordinator.cluster.keeper import NO_CALLER, Keeper
from huddle.coordinator.connection import Connection
from huddle.coordinator.core import Coordinator, Outgoing
from huddle.coordinator.metrics import CoordinatorMetrics
from huddle.coordinator.security.access import nothing_left, screen
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    AlterTopicsRequest,
    Call,
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeGroupsRequest,
    ErrorResponse,
    FindCoordinatorRequest,
    HeartbeatRequest,
    Reply,
    Request,
    Response,
)

log = structlog.get_logger("huddle.server")

Gate = Callable[[Request], ErrorResponse | None]
_ANSWERED_WHILE_LOADING = (FindCoordinatorRequest, DescribeClusterRequest)


class RequestPath:
    """Requests of every connection, whatever its wire, through the screening and the core;
    answers queued on their connections and flushed once per loop pass."""

    def __init__(
        self,
        core: Coordinator,
        conns: Mapping[int, Connection],
        metrics: CoordinatorMetrics | None,
    ) -> None:
        self.core = core
        self.conns = conns  # the server's connections by id (the core's conn ids)
        self.metrics = metrics
        self.keeper: Keeper | None = None  # answers wait for its writes: data dir or etcd
        self.gate: Gate | None = None  # a cluster node's: does it serve the group
        self.loading = False  # replaying the data dir: requests get COORDINATOR_LOAD_IN_PROGRESS
        self.refused_loading = 0  # requests answered so meanwhile
        self.closed = False  # stopping, or stopped by a storage failure: no more requests
        self.dirty: list[Connection] = []  # connections with frames queued to write
        # request types served beside the core (the consumer group protocol's): the handler
        # screens them itself and returns its frames, which go as the core's do (held until
        # the changes it made, the core's ``take_changes``, are kept)
        # (or None: the core serves this one; a classic request to a consumer group is the
        # consumer service's, ``mixed_groups``)
        self.beside: dict[type[Request], Callable[[Connection, Call], list[Outgoing] | None]] = {}

    # --- one request ------------------------------------------------------------------

    def call(self, conn: Connection, call: Call, now: float) -> None:
        """One request through the core; the caller reschedules the timer afterwards."""
        if self.closed:
            return
        metrics = self.metrics
        if metrics is not None:
            # one identity check for a heartbeat: heartbeats are the calls (counted per slice
            # by the intake) that are not other requests
            request_type = type(call.request)
            if request_type is not HeartbeatRequest:
                metrics.requests[conn.wire.listener, request_type] += 1
        handler = self.beside.get(type(call.request)) if self.beside else None
        # it screens the request itself; None: not its to serve, the core serves it
        out = None if handler is None else handler(conn, call)
        if out is None:
            if self.loading or self.gate is not None:
                refusal = self.refusal(conn, call.request)
                if refusal is not None:
                    if metrics is not None:
                        metrics.errors[refusal.error_code] += 1
                    conn.send(Reply(correlation_id=call.correlation_id, response=refusal))
                    return
            out = self._handle(conn, call, now)
        if metrics is not None:  # inline: an answer's error code, a notice's type
            if len(out) == 1:
                frame = out[0][1]
                if type(frame) is Reply:
                    if frame.response.error_code:
                        metrics.errors[frame.response.error_code] += 1
                else:
                    metrics.notices[type(frame).__name__] += 1
            else:
                metrics.produced(out)
        changes = self.core.take_changes()
        keeper = self.keeper
        if keeper is not None and (changes or keeper.busy):
            keeper.hold(changes, conn.conn_id, call, out)  # answered once kept
            conn.held += 1
            return
        if len(out) == 1 and out[0][0] == conn.conn_id:
            conn.send(out[0][1])  # the common case: one answer to the caller
        else:
            self.dispatch(out)

    def _handle(self, conn: Connection, call: Call, now: float) -> list[Outgoing]:
        """The core's frames for the request (a failure inside it is logged and answered
        UNKNOWN_SERVER_ERROR)."""
        try:
            return self.core.handle(conn.peer, call.correlation_id, call.request, now)
        except Exception:
            kind = type(call.request).__struct_config__.tag
            conn.log.exception("core_failed", operation="handle", request=kind)
            refusal = ErrorResponse(
                error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                error_message=f"the coordinator failed handling a {kind} request",
            )
            return [(conn.conn_id, Reply(correlation_id=call.correlation_id, response=refusal))]

    def refusal(self, conn: Connection, request: Request) -> Response | None:
        """Why the request is not handled here now, checked in Kafka's order: may the
        principal make it (each group it names: one it may not use is refused, never
        located), then is the coordinator loading, then does this node serve the groups
        left (a cluster). None: the core handles it (and screens it again, putting the
        refused groups back into its answer)."""
        routed: Request | None = request
        auth = self.core.authorizer
        if auth is not None:
            screened = screen(auth, conn.peer, request)
            if screened.refusal is not None:
                return screened.refusal
            routed = screened.request
            if routed is None or nothing_left(routed):
                return None
        if self.loading and type(request) not in _ANSWERED_WHILE_LOADING:
            self.refused_loading += 1
            return ErrorResponse(
                error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                error_message="the coordinator is loading its data dir",
            )
        if self.gate is not None and routed is not None:
            return self.gate(routed)
        return None

    # --- frames out -------------------------------------------------------------------

    def send_outside(self, out: list[Outgoing]) -> None:
        """Frames a timer or a closed connection made the core produce: the changes made
        with them are kept first (a group emptied by session expiry, say), and the frames go
        once they are, behind any answer still waiting on an earlier change."""
        if self.metrics is not None:
            self.metrics.produced(out)
        changes = self.core.take_changes()
        keeper = self.keeper
        if keeper is not None and (changes or keeper.busy):
            keeper.hold(changes, NO_CALLER, None, out)
            keeper.submit_soon()
            return
        self.dispatch(out)

    def dispatch(self, out: list[Outgoing]) -> None:
        """Queue each frame on its connection (frames for a connection gone are dropped)."""
        conns = self.conns
        for conn_id, frame in out:
            conn = conns.get(conn_id)
            if conn is not None:
                conn.send(frame)

    def flush_later(self, conn: Connection) -> None:
        self.dirty.append(conn)

    def flush(self) -> None:
        """Write what every connection queued in this pass: one write each."""
        dirty = self.dirty
        if dirty:
            self.dirty = []
            for conn in dirty:
                conn.flush()


def joining_cluster(request: Request) -> ErrorResponse | None:
    """The gate of a cluster node that has not joined its cluster yet: it serves no group."""
    if type(request) in (CreateTopicsRequest, AlterTopicsRequest, DeleteTopicsRequest):
        return ErrorResponse(
            error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
            error_message="the node is joining its cluster",
        )
    if type(request) is not FindCoordinatorRequest and (
        hasattr(request, "group_id")
        or type(request) in (DescribeGroupsRequest, DeleteGroupsRequest)
    ):
        return ErrorResponse(
            error_code=ErrorCode.NOT_COORDINATOR,
            error_message="the node is joining its cluster and serves no group yet",
        )
    return None
