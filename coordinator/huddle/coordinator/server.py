"""The coordinator's transport: asyncio protocols around one sans-IO ``Coordinator``.

Frames in -> core -> frames out. Each connection owns a ``FrameReader`` and a
``ServerCodec``; the core answers with ``(conn_id, frame)`` pairs, routed here by conn id
(frames for a connection that is gone are dropped). One ``loop.call_at`` timer follows
``core.next_deadline()``.

Bad input closes only the connection that sent it, after a ``ProtocolError`` frame saying
why; a request that decodes as msgpack but not as a known request is answered with an
``ErrorResponse`` and the connection stays open. A failure inside the core is logged with
its traceback and answered with ``UNKNOWN_SERVER_ERROR``: the server keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import resource
import signal
import socket
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

import msgspec
import structlog

from huddle.coordinator import greeting
from huddle.coordinator.cluster.keeper import NO_CALLER, EtcdKeeper, Keeper
from huddle.coordinator.config import ServerConfig
from huddle.coordinator.connection import Connection
from huddle.coordinator.core import Coordinator, Outgoing
from huddle.coordinator.group_commit import COPY_SLICE_S, GroupCommit, Held
from huddle.coordinator.journal import DataDirError, Journal
from huddle.coordinator.metrics import CoordinatorMetrics, serve_metrics
from huddle.coordinator.security.access import nothing_left, screen
from huddle.coordinator.security.listener import ListenerSecurity

if TYPE_CHECKING:
    from huddle.coordinator.cluster.running import ClusterRun
    from huddle.coordinator.cluster.serving import ClusterServing
from huddle.logs import printable
from huddle.protocol.addresses import format_address, parse_address
from huddle.protocol.errors import ErrorCode, HuddleError
from huddle.protocol.messages import (
    AlterTopicsRequest,
    Call,
    ClusterNodeInfo,
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeGroupsRequest,
    ErrorResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    Handshake,
    HeartbeatRequest,
    ProtocolError,
    Reply,
    Request,
    Response,
    SaslAuthenticate,
)

log = structlog.get_logger("huddle.server")

FREEZE_AFTER_LOAD: Final = 100_000  # objects a load left: more are frozen (see below)
SERVE_STEP: Final = 64  # loaded groups whose sessions start between two looks at the time
_TIMER_SLACK_S: Final = 0.001  # arm timers a hair late so they never fire before the deadline
_SWEEP_MIN_S: Final = 0.02
_SWEEP_MAX_S: Final = 1.0
_ADVANCE_RETRY_S: Final = 1.0  # after the core failed in advance(), try again this much later
_PASS_OUTPUT_BYTES: Final = 1024 * 1024  # answers queued for one connection before it yields
_PUMP_PASS_S: Final = 0.02  # input handled per loop pass, at most this long (and one slice)
_SHORT_INBOX: Final = 2  # frames a connection may have handled at once, budget or not
_STALL_S: Final = 0.05  # a pass this long between the read and the expiry: read again
_MAX_HOPS: Final = 4
_HELD_PER_CONNECTION: Final = 1_000
_BUSY_INBOX: Final = 16  # frames read from a connection whose SASL step is checked
_REASON_CHARS: Final = 300  # of a decoder's message echoed back and logged
_BAD_REQUESTS_LOGGED: Final = 10  # per connection; then one line per _BAD_REQUESTS_EVERY
_BAD_REQUESTS_EVERY: Final = 1_000  # answers waiting for the disk before a connection waits


FD_RESERVE: Final = 32  # descriptors kept for all but connections (journal, stdio, refusing)


def raise_fd_limit() -> None:
    """Raise this process's soft limit on open files to its hard limit (a coordinator holds
    one per connection; the common soft limit of 1,024 is below the default
    --max-connections)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError) as exc:  # pragma: no cover - the hard limit is allowed
        log.warning("fd_limit_not_raised", soft=soft, hard=hard, error=str(exc))
        return
    log.info("fd_limit_raised", soft=hard, was=soft)


def connections_allowed(wanted: int) -> int:
    """``wanted``, or fewer if the open-file limit could not hold that many connections (a
    warning says so): past the limit a connection cannot even be refused with a reason."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or wanted + FD_RESERVE <= soft:
        return wanted
    allowed = max(soft - FD_RESERVE, 1)
    log.warning(
        "max_connections_over_fd_limit",
        max_connections=wanted,
        fd_limit=soft,
        allowed=allowed,
        hint="raise the open-file limit (ulimit -n, or the container's nofile ulimit)",
    )
    return allowed


class ListenError(HuddleError):
    """The server could not bind its listening socket."""


def _sweep_interval(config: ServerConfig) -> float:
    shortest = min(config.handshake_timeout_ms, config.stalled_frame_timeout_ms) / 1000
    return min(max(shortest / 4, _SWEEP_MIN_S), _SWEEP_MAX_S)


class CoordinatorServer:
    """Listens on ``config.host:config.port`` and feeds one ``Coordinator`` core.

    ``await start()`` binds (port 0 picks a free port: read ``port`` afterwards);
    ``await close()`` shuts down gracefully: stop accepting, let the core answer every
    request it holds, flush, close. Also usable as ``async with CoordinatorServer(...)``.
    """

    def __init__(self, config: ServerConfig, *, core: Coordinator | None = None) -> None:
        if config.cluster and config.group.disconnect_grace_ms >= 0:
            # A cluster node does not remove members whose connection closed: a member
            # cannot tell a node that dropped it from one that died (whose groups another
            # node serves on, with their sessions), so it counts on its session, as Kafka's.
            config = replace(config, group=replace(config.group, disconnect_grace_ms=-1))
        self.config = config
        self.core = core if core is not None else Coordinator(config.group)
        self.core.topics.max_answer_bytes = config.max_response_bytes  # checked before a change
        self.journal: Journal | None = None  # with a data dir: topics and offsets kept
        self._commits: GroupCommit | None = None  # writes the journal off the loop
        self._keeper: Keeper | None = None  # answers wait for its writes: data dir or etcd
        self.gate: Callable[[Request], ErrorResponse | None] | None = None  # a cluster's
        self.cluster: ClusterServing | None = None
        self.metrics: CoordinatorMetrics | None = None  # Prometheus, with --metrics-port
        self._metrics_http: Any = None
        if config.metrics_port >= 0:
            self.metrics = metrics = CoordinatorMetrics()
            metrics.core = self.core
            metrics.connections = lambda: len(self._conns)
            self.core.membership.observer = metrics
        self.security: ListenerSecurity | None = None  # TLS, SASL and ACLs, when configured
        if config.tls_cert or config.sasl or config.authorizer:
            self.security = security = ListenerSecurity(config)
            if self.metrics is not None and security.uses_store:
                self.metrics.security_store = lambda: (
                    security.store_healthy,
                    security.store_failures,
                )
        if config.cluster:  # no group is served before the node has joined its cluster
            self.gate = _joining_cluster
        self.storage_failure: str | None = None  # why the server stopped by itself
        self._refusing = False  # after a storage failure: no more requests
        self.loading = False  # replaying the data dir: requests get COORDINATOR_LOAD_IN_PROGRESS
        self.refused_loading = 0  # requests answered so meanwhile
        self._shutdown: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._conns: dict[int, Connection] = {}
        self._watch: set[Connection] = set()  # not yet handshaken, or mid-frame
        self._dirty: list[Connection] = []  # connections with frames queued to write
        self._backlog: deque[Connection] = deque()  # connections with frames left to handle
        self._backlog_set: set[Connection] = set()
        self._pump: asyncio.Handle | None = None
        self._slice_s = config.input_slice_ms / 1000
        self.partial_bytes = 0  # of unfinished frames, over every connection
        self._pass_spent = 0.0  # seconds spent on input in this loop pass
        self._idle_sweeper: asyncio.TimerHandle | None = None
        self._next_conn_id = 1
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: float | None = None
        self._expiring = False  # a deadline passed: expiry waits for one read of the sockets
        self._hops = 0
        self._hop_at = 0.0
        self._sweeper: asyncio.TimerHandle | None = None
        self._retention_check: asyncio.TimerHandle | None = None  # offsets of empty groups
        self._retaining: Generator[None, None, int] | None = None  # a check under way
        self._slice_until = 0.0  # of the data dir's load: when to let the loop run
        self._stopping = False
        self._closed: asyncio.Event | None = None
        self._all_gone: asyncio.Event | None = None
        self.port = config.port
        self.metrics_port = config.metrics_port
        self.host = config.host
        self.max_connections = config.max_connections  # lowered to what the fd limit allows

    # --- lifecycle --------------------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the server is not started")
        return self._loop

    @property
    def connection_count(self) -> int:
        return len(self._conns)

    async def start(self) -> None:
        if self._loop is not None:
            raise RuntimeError("the server is already started")
        self._loop = asyncio.get_running_loop()
        self.max_connections = connections_allowed(self.config.max_connections)
        self._closed = asyncio.Event()
        self._all_gone = asyncio.Event()
        cfg = self.config
        context = None
        if self.security is not None:
            await self.security.open()  # SecurityStartError: a TLS file or the store
            self.core.authorizer = self.security.authorizer
            context = self.security.context
        try:
            self._server = await self._loop.create_server(
                self._new_connection,
                host=cfg.host,
                port=cfg.port,
                backlog=1024,
                ssl=context,
                ssl_handshake_timeout=cfg.handshake_timeout_ms / 1000 if context else None,
            )
        except OSError as exc:
            if self.security is not None:
                await self.security.close()
            if isinstance(exc, socket.gaierror) or not exc.errno:
                reason = str(exc.strerror or exc).lower()
            else:
                reason = os.strerror(exc.errno).lower()
            raise ListenError(f"cannot listen on {cfg.host}:{cfg.port}: {reason}") from exc
        sockets = self._server.sockets
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        if not self.config.cluster:  # a cluster node's serving names the owners
            self.core.locate = self._locate_self
            self.core.describe_cluster = self._describe_self
        self.core.membership.wall_offset_ms = time.time() * 1000 - self._now()
        with _collections_paused():
            if cfg.data_dir and self.journal is None:
                # Listening already: requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS (as
                # Kafka answers while it loads a coordinator partition), not a refused
                # connection; FindCoordinator and DescribeCluster are answered (where, not
                # what: Kafka answers them from its metadata whatever it is loading).
                self.loading = True
                try:
                    await self._load(cfg.data_dir, cfg.fsync)
                except BaseException:
                    self._server.close()
                    for conn in list(self._conns.values()):
                        conn.abort("the coordinator could not load its data dir")
                    raise
                finally:
                    self.loading = False
            # the loaded members' sessions start now that they can be heard (a whole session
            # each), and end even if nobody ever asks anything again
            await self._in_slices(self.core.loading_groups(self._now()))  # restored otherwise
            self.core.begin_serving(self._now())
            await self._serve_loaded()
        if self.metrics is not None:
            if self._commits is not None:
                self._commits.on_write = self.metrics.journal_written
            try:
                self._metrics_http, self.metrics_port = serve_metrics(
                    self.metrics, cfg.host, cfg.metrics_port
                )
            except OSError as exc:
                await self.close()
                reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
                raise ListenError(
                    f"cannot serve metrics on {cfg.host}:{cfg.metrics_port}: {reason}"
                ) from exc
            log.info("metrics_listening", host=cfg.host, port=self.metrics_port)
        self._retention_check = self._loop.call_later(_retention_interval(cfg), self._retain)
        self._sweeper = self._loop.call_later(_sweep_interval(cfg), self._sweep)
        self._idle_sweeper = self._loop.call_later(_idle_interval(cfg), self._sweep_idle)
        log.info("server_listening", host=cfg.host, port=self.port)

    @property
    def advertised(self) -> tuple[str, int]:
        """The address clients are told to use: ``--advertise``, or the one listened on
        (an unspecified host such as 0.0.0.0 tells a client to keep the host it asked)."""
        if self.config.advertise:
            return parse_address(self.config.advertise)
        return self.host, self.port

    @property
    def node_id(self) -> str:
        """This node's name: ``--node-id``, or its advertised address."""
        return self.config.node_id or format_address(*self.advertised)

    def _describe_self(self) -> DescribeClusterResponse:
        host, port = self.advertised
        me = ClusterNodeInfo(node_id=self.node_id, host=host, port=port)
        return DescribeClusterResponse(node_id=self.node_id, nodes=[me])

    def _locate_self(self, group_id: str) -> FindCoordinatorResponse:
        host, port = self.advertised
        return FindCoordinatorResponse(node_id=self.node_id, host=host, port=port)

    # --- as a node of a cluster ---------------------------------------------------------

    def now_ms(self) -> float:
        return self._now()

    def use_cluster(self, serving: ClusterServing) -> None:
        """Serve as a cluster node: group requests go through ``serving``'s refusal, and
        every change is answered once etcd holds it."""
        self.cluster = serving
        self.gate = serving.refusal
        if self.metrics is not None:
            self.metrics.shards = lambda: serving.node.owned_count
            self.metrics.liveness = serving.node.liveness
            self.metrics.restarts = lambda: dict(serving.node.restarts.counts)
        self._keeper = EtcdKeeper(
            self.loop,
            serving.write,
            stamp=serving.stamp,
            release=self._kept,
            refuse=self._not_kept,
            deadline_s=serving.write_deadline_s,
            give_up=serving.give_up,
        )

    def apply_outside(self, out: list[Outgoing]) -> None:
        """Frames the core produced outside a request (a shard loaded or dropped, a topic
        another node changed): send them, and look at the core's deadlines again."""
        self._dispatch(out)
        self._reschedule()
        self._flush()

    def keep_outside(self) -> None:
        """Changes the core made outside a request (a cluster node dropping the offsets of
        a topic another node deleted) are written now, as a timer's are."""
        self._send_outside([])

    async def write_in_flight(self) -> None:
        """Until the cluster write under way, if any, is done (a shard given up)."""
        if isinstance(self._keeper, EtcdKeeper):
            await self._keeper.written()

    def _send_outside(self, out: list[Outgoing]) -> None:
        """Frames a timer or a closed connection made the core produce: the changes made
        with them are kept first (a group emptied by session expiry, say), and the frames go
        once they are, behind any answer still waiting on an earlier change."""
        if self.metrics is not None:
            self.metrics.produced(out)
        changes = self.core.take_changes()
        keeper = self._keeper
        if keeper is not None and (changes or keeper.busy):
            keeper.hold(changes, NO_CALLER, None, out)
            keeper.submit_soon()
            return
        self._dispatch(out)

    async def _load(self, data_dir: str, fsync: bool) -> None:
        """Read and check the journal off the loop, then replay it into the core."""
        assert self._loop is not None
        journal = await asyncio.to_thread(Journal.open, data_dir, fsync=fsync)  # DataDirError
        self.core.membership.keep_groups = True  # a restart loads them (``Coordinator.start``)
        started = time.perf_counter()
        try:
            await self._in_slices(self.core.restoring(journal.records))
            await self._in_slices(self.core.loading_groups(self._now()))
        except Exception as exc:
            journal.close()
            raise DataDirError(f"cannot replay {data_dir}: {exc!r}") from exc
        log.info(
            "data_dir_loaded",
            records=len(journal.records),
            groups=self.core.unserved,
            seconds=round(time.perf_counter() - started, 3),
        )
        journal.records = []
        self.journal = journal
        self._commits = GroupCommit(
            journal,
            self._loop,
            release=self._kept,
            refuse=self._not_kept,
            on_failure=self._storage_failed,
            state_size=self.core.kept_size,
            copy_state=self.core.copy_state,
        )
        self._keeper = self._commits

    async def _in_slices(self, steps: Iterator[None]) -> None:
        """Run ``steps`` a few milliseconds at a time, letting the loop answer requests
        (COORDINATOR_LOAD_IN_PROGRESS) in between: a large data dir takes seconds."""
        for _ in steps:
            if time.perf_counter() >= self._slice_until:
                await asyncio.sleep(0)
                self._slice_until = time.perf_counter() + COPY_SLICE_S

    async def _serve_loaded(self) -> None:
        """Start the loaded members' sessions, a slice at a time with requests handled in
        between, each slice at its own time: none starts before the coordinator answers."""
        while self.core.unserved and not self._stopping:
            until = time.perf_counter() + COPY_SLICE_S
            while self.core.unserved and time.perf_counter() < until:
                self._send_outside(self.core.serve_loaded(self._now(), SERVE_STEP))
            self._reschedule()
            self._flush()
            if self.core.unserved:
                await asyncio.sleep(0)
        self._reschedule()

    async def close(self) -> None:
        """Graceful shutdown; idempotent. Returns once every connection is closed."""
        if self._loop is None or self._closed is None or self._all_gone is None:
            return
        if self._stopping:
            await self._closed.wait()
            return
        self._stopping = True
        log.info("server_stopping", connections=len(self._conns))
        if self._server is not None:
            self._server.close()
        for handle in (self._timer, self._sweeper, self._idle_sweeper, self._retention_check):
            if handle is not None:
                handle.cancel()
        self._timer = self._sweeper = self._idle_sweeper = self._retention_check = None
        stuck = False
        if self._keeper is not None:  # what was accepted is kept and answered first
            try:
                await asyncio.wait_for(self._keeper.drain(), self.config.shutdown_timeout_ms / 1000)
            except TimeoutError:  # a write that does not return: its requests stay unanswered
                stuck = True
                log.error("journal_write_stuck", timeout_ms=self.config.shutdown_timeout_ms)
        try:
            out = self.core.shutdown()
        except Exception:
            log.exception("core_failed", operation="shutdown")
            out = []
        self._dispatch(out)
        # Only a coordinator that keeps its groups (a data dir, or a cluster node whose
        # shards go to another node with them) says its members ride through: without one,
        # the next coordinator knows nobody, and a member must count its partitions lost
        # after half the disconnect grace as for any lost connection.
        kept = self.core.membership.keep_groups
        for conn in list(self._conns.values()):
            if not conn.closing:
                conn.send(
                    ProtocolError(
                        error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        error_message="the coordinator is shutting down",
                        stopping=kept,  # no member is removed for this close
                    )
                )
                conn.close("server shutdown")
        self._flush()
        if self._conns:
            self._all_gone.clear()
            timeout = self.config.shutdown_timeout_ms / 1000
            try:
                await asyncio.wait_for(self._all_gone.wait(), timeout)
            except TimeoutError:
                log.warning("shutdown_flush_timeout", connections=len(self._conns))
                for conn in list(self._conns.values()):
                    conn.abort("server shutdown: flush timed out")
                await asyncio.wait_for(self._all_gone.wait(), 1.0)
        if self._server is not None:
            await self._server.wait_closed()
        if self._keeper is not None:
            self._keeper.close(wait=not stuck)
        if self.journal is not None and not stuck:  # a stuck write still holds the file
            self.journal.close()
        if self.security is not None:
            await self.security.close()
        if self._metrics_http is not None:
            http, self._metrics_http = self._metrics_http, None
            await asyncio.to_thread(http.shutdown)
            http.server_close()
        log.info("server_stopped")
        self._closed.set()

    async def wait_closed(self) -> None:
        if self._closed is None:
            raise RuntimeError("the server is not started")
        await self._closed.wait()

    async def __aenter__(self) -> CoordinatorServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- connections: what a Connection may ask of its ConnectionHost -----------------

    def _new_connection(self) -> Connection:
        conn_id = self._next_conn_id
        self._next_conn_id += 1
        return Connection(self, conn_id)

    def connection_made(self, conn: Connection) -> None:
        # Refused at the door: closed at once (not drained), so a flood of refused
        # connections does not hold the file descriptors kept for refusing them.
        if self._stopping:
            conn.fail(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                "the coordinator is shutting down",
                event="connection_refused",
                drain=False,
            )
            return
        limit = self.max_connections
        if len(self._conns) >= limit:
            conn.fail(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"connection limit of {limit} reached",
                event="connection_refused",
                drain=False,
            )
            return
        self._conns[conn.conn_id] = conn
        if self.security is not None and conn.transport is not None:
            principal = self.security.principal_of(conn.transport.get_extra_info("peercert"))
            conn.peer = replace(conn.peer, principal=principal)
        conn.opened_at = conn.last_active = self.loop.time()
        self._watch.add(conn)
        conn.log.info("connection_opened", connections=len(self._conns))

    def watch(self, conn: Connection, watched: bool) -> None:
        if watched:
            self._watch.add(conn)
        else:
            self._watch.discard(conn)

    def flush_later(self, conn: Connection) -> None:
        self._dirty.append(conn)

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
            holders = [c for c in self._watch if c.partial and not c.closing]
            if conn.partial and not conn.closing and conn not in self._watch:
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

    def connection_lost(self, conn: Connection) -> None:
        self._watch.discard(conn)
        self.partial_bytes -= conn.partial
        conn.partial = 0
        if self._conns.pop(conn.conn_id, None) is None:
            return  # refused at the door: never registered, the core never saw it
        conn.log.info("connection_closed", reason=conn.close_reason)
        if self.security is not None:
            self.security.connection_gone(conn.conn_id)  # its place in the queue, if any
            if greeting.in_exchange(conn):
                conn.sasl = None  # a failure answer still to come is not sent
        if not self._stopping:
            try:
                out = self.core.connection_closed(conn.conn_id, self._now())
            except Exception:
                log.exception("core_failed", operation="connection_closed", conn_id=conn.conn_id)
                out = []
            self._send_outside(out)
            self._reschedule()
            self._flush()
        if not self._conns and self._all_gone is not None:
            self._all_gone.set()

    def frames_received(self, conn: Connection) -> None:
        """Frames arrived in ``conn.inbox``: handle them now, up to a slice of time; what is
        left waits in the backlog for the next loop pass, with the connection's reading
        paused, so one connection's burst never holds the loop (and everyone else) up."""
        # Within the pass's budget (or for a short request or two, as a heartbeat is),
        # served now; else it waits its turn with the other connections that have a backlog.
        if self._pass_spent < _PUMP_PASS_S or len(conn.inbox) <= _SHORT_INBOX:
            calls = self._serve(conn)
        else:
            calls = 0
        if self.metrics is not None:
            self.metrics.calls += calls
        if conn.inbox and not conn.closing:
            if conn.sasl_busy:
                # its SASL step is being checked (greeting puts it back in the backlog
                # then); read on meanwhile, to see it go away, unless it keeps sending
                if len(conn.inbox) > _BUSY_INBOX:
                    conn.hold_input()
            elif conn.held >= _HELD_PER_CONNECTION:
                conn.hold_input()  # served again once its held answers went out
            else:
                self.backlogged(conn)
        if calls:
            self._reschedule()
        if self._keeper is not None:
            self._keeper.submit_soon()  # the changes of this pass, in one write
        self._flush()

    def backlogged(self, conn: Connection) -> None:
        """``conn`` has frames waiting that it may not handle yet: take them in turn."""
        conn.hold_input()
        if conn in self._backlog_set:
            return
        self._backlog_set.add(conn)
        self._backlog.append(conn)
        if self._pump is None:
            self._pump = self.loop.call_soon(self._pump_backlog)

    def _pump_backlog(self) -> None:
        """One loop pass's turn for each connection with frames waiting, in arrival order.
        It runs once per loop pass, after the pass's reads: every connection, the quiet ones
        included, gets its turn between two slices of a busy one."""
        self._pump = None
        backlog, members = self._backlog, self._backlog_set
        calls = 0
        for _ in range(len(backlog)):
            if self._pass_spent >= _PUMP_PASS_S:
                break  # the others keep their place: first in the next pass
            conn = backlog.popleft()
            if not conn.closing and not conn.write_paused:
                served = self._serve(conn)
                calls += served
                if self.metrics is not None:
                    self.metrics.calls += served
            if (
                conn.closing
                or conn.write_paused
                or conn.held >= _HELD_PER_CONNECTION
                or conn.sasl_busy
            ):
                # gone; or back once it reads again (resume_writing), once its held
                # answers went out (_after_held), or once its SASL step was checked
                members.discard(conn)
            elif conn.inbox:
                backlog.append(conn)
            else:
                members.discard(conn)
                conn.release_input()
        if calls:
            self._reschedule()
        if self._keeper is not None:
            self._keeper.submit_soon()
        self._flush()
        if backlog and not self._stopping:
            self._pump = self.loop.call_soon(self._pump_backlog)

    def _serve(self, conn: Connection) -> int:
        """Handle frames of ``conn.inbox`` for up to one slice; return how many were calls.
        It stops early while the connection's answers are not being read."""
        inbox = conn.inbox
        if not inbox:
            return 0
        tokens = structlog.contextvars.bind_contextvars(
            conn_id=conn.conn_id, client_id=conn.client_id
        )
        calls = 0
        now = self._now()  # one read, one instant: every frame in it arrived together
        began = time.perf_counter()
        until = began + self._slice_s
        decode = conn.codec.decode
        try:
            while inbox and not conn.closing and not conn.write_paused:
                if conn.sasl is greeting.FAILED:
                    inbox.clear()  # its failure is answered after a delay: nothing else
                    break
                if conn.sasl_busy:
                    break  # its SASL step is being checked: handled once it is
                if conn.held >= _HELD_PER_CONNECTION:
                    break  # its answers wait for the disk: it is served again once they go
                body = inbox.popleft()
                try:
                    frame = decode(body)
                except msgspec.ValidationError as exc:
                    self._invalid_frame(conn, body, exc)
                    if time.perf_counter() >= until:
                        break
                    continue
                except msgspec.DecodeError as exc:
                    conn.fail(
                        ErrorCode.CORRUPT_MESSAGE,
                        f"frame body is not msgpack: {exc}",
                        event="bad_frame",
                    )
                    break
                except Exception as exc:  # anything else the decoder raises on hostile input
                    conn.fail(
                        ErrorCode.CORRUPT_MESSAGE,
                        f"frame body cannot be read ({type(exc).__name__})",
                        event="bad_frame",
                    )
                    break
                if type(frame) is Call:
                    if conn.handshaken:
                        self._call(conn, frame, now)
                        calls += 1
                    else:
                        self._not_greeted(conn)
                        break
                elif type(frame) is Handshake:
                    greeting.handshake(self, self.security, conn, frame)
                elif type(frame) is SaslAuthenticate:
                    greeting.sasl_step(self, self.security, conn, frame)
                if len(conn.pending) >= _PASS_OUTPUT_BYTES or time.perf_counter() >= until:
                    break
        finally:
            structlog.contextvars.reset_contextvars(**tokens)
            self._spend(time.perf_counter() - began)
        if conn.closing:
            inbox.clear()
        elif conn.peer_done and not inbox and not conn.held:
            conn.close("closed by peer")
        return calls

    def _spend(self, seconds: float) -> None:
        """Count time spent on input in this loop pass (reset when the next pass begins)."""
        if self._pass_spent == 0.0:
            self.loop.call_soon(self._new_pass)
        self._pass_spent += seconds or 1e-9

    def _new_pass(self) -> None:
        self._pass_spent = 0.0

    def _invalid_frame(self, conn: Connection, body: bytes, exc: msgspec.ValidationError) -> None:
        reason = printable(str(exc), _REASON_CHARS)  # it may quote what the client sent
        correlation_id = conn.codec.correlation_id(body) if conn.handshaken else None
        if correlation_id is None:
            event = "bad_frame" if conn.handshaken else "handshake_failed"
            conn.fail(ErrorCode.INVALID_REQUEST, f"invalid frame: {reason}", event=event)
            return
        conn.bad_requests += 1
        count = conn.bad_requests
        if count <= _BAD_REQUESTS_LOGGED or count % _BAD_REQUESTS_EVERY == 0:
            conn.log.warning(  # the first few, then one line per thousand: a flood of them
                "bad_request",  # must not flood the log
                correlation_id=correlation_id,
                error_message=reason,
                client_id=conn.client_id,
                bad_requests=count,
            )
        conn.send(
            Reply(
                correlation_id=correlation_id,
                response=ErrorResponse(
                    error_code=ErrorCode.INVALID_REQUEST, error_message=f"invalid request: {reason}"
                ),
            )
        )

    def greeted(self, conn: Connection) -> None:
        if conn.frame_started is None:
            self._watch.discard(conn)

    def _not_greeted(self, conn: Connection) -> None:
        """A request before the handshake (and the SASL exchange) is done."""
        if conn.sasl is not None:
            message = "authenticate first: the SASL exchange is not complete"
            conn.fail(ErrorCode.ILLEGAL_SASL_STATE, message, event="handshake_failed")
        else:
            message = "expected a handshake first"
            conn.fail(ErrorCode.INVALID_REQUEST, message, event="handshake_failed")

    # --- the core ---------------------------------------------------------------------

    def _now(self) -> float:
        return self.loop.time() * 1000

    def _refusal(self, conn: Connection, request: Request) -> Response | None:
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

    def _call(self, conn: Connection, call: Call, now: float) -> None:
        """One request through the core; the caller reschedules the timer afterwards."""
        if self._stopping or self._refusing:
            return
        metrics = self.metrics
        if metrics is not None:
            # one identity check for a heartbeat: heartbeats are the calls (counted per slice
            # in _serve's callers) that are not other requests
            request_type = type(call.request)
            if request_type is not HeartbeatRequest:
                metrics.requests[request_type] += 1
        if self.loading or self.gate is not None:
            refusal = self._refusal(conn, call.request)
            if refusal is not None:
                if metrics is not None:
                    metrics.errors[refusal.error_code] += 1
                conn.send(Reply(correlation_id=call.correlation_id, response=refusal))
                return
        try:
            out = self.core.handle(conn.peer, call.correlation_id, call.request, now)
        except Exception:
            kind = type(call.request).__struct_config__.tag
            conn.log.exception("core_failed", operation="handle", request=kind)
            out = [
                (
                    conn.conn_id,
                    Reply(
                        correlation_id=call.correlation_id,
                        response=ErrorResponse(
                            error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                            error_message=f"the coordinator failed handling a {kind} request",
                        ),
                    ),
                )
            ]
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
        commits = self._keeper
        if commits is not None and (changes or commits.busy):
            commits.hold(changes, conn.conn_id, call, out)  # answered once kept
            conn.held += 1
            return
        if len(out) == 1 and out[0][0] == conn.conn_id:
            conn.send(out[0][1])  # the common case: one answer to the caller
        else:
            self._dispatch(out)

    def _kept(self, held: list[Held]) -> None:
        """A batch is in the data dir: its answers go out."""
        conns = self._conns
        for conn_id, _, out in held:
            conn = conns.get(conn_id)
            if conn is not None:
                conn.held -= 1
            for to, frame in out:  # released together: each as its client reads
                receiver = conns.get(to)
                if receiver is not None:
                    receiver.send_when_read(frame)
        self._after_held(held)
        self._flush()

    def _after_held(self, held: list[Held]) -> None:
        """Connections whose held answers went out may be served again, or closed (a peer
        that shut its side once everything it sent is answered)."""
        conns = self._conns
        for conn_id in {conn_id for conn_id, _, _ in held}:
            conn = conns.get(conn_id)
            if conn is None or conn.closing or conn.held >= _HELD_PER_CONNECTION:
                continue
            if conn.inbox:
                self.backlogged(conn)
            elif conn.peer_done and not conn.held:
                conn.close("closed by peer")
            else:
                conn.release_input()  # its reading was held while its answers waited

    def _not_kept(self, held: list[Held]) -> None:
        """A batch could not be kept: no acknowledgement and no notices. Every answer the
        held requests produced becomes a storage error to whoever it was for: the caller,
        or members whose JoinGroup or SyncGroup the request completed. A request the core
        still holds (a JoinGroup waiting for its phase to end) is answered by the core,
        once: at shutdown."""
        conns = self._conns
        clustered = self.cluster is not None
        for caller, call, out in held:
            held_by = conns.get(caller)
            if held_by is not None:
                held_by.held -= 1
            topics = call is not None and isinstance(call.request, _TOPIC_CHANGES)
            for conn_id, frame in out:
                conn = conns.get(conn_id)
                if conn is not None and type(frame) is Reply:
                    conn.send(_not_kept(frame.correlation_id, clustered=clustered, topics=topics))
        self._after_held(held)
        self._flush()

    def _storage_failed(self) -> None:
        """A change could not be kept: the state in memory is ahead of the data dir. Stop
        (as Kafka stops a broker whose log directories failed) rather than serve it; a
        restart replays what was kept."""
        if self.storage_failure is not None:
            return
        self.storage_failure = "a change could not be written to the data dir"
        log.critical("coordinator_stopping", reason=self.storage_failure)
        self._refusing = True
        self._shutdown = self.loop.create_task(self.close())

    def _flush(self) -> None:
        dirty = self._dirty
        if dirty:
            self._dirty = []
            for conn in dirty:
                conn.flush()

    def _dispatch(self, out: list[Outgoing]) -> None:
        conns = self._conns
        for conn_id, frame in out:
            conn = conns.get(conn_id)
            if conn is not None:
                conn.send(frame)

    def _reschedule(self, not_before: float | None = None) -> None:
        if self._stopping or self._expiring:
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
        if self._stopping:
            return
        self._expiring = True  # _reschedule arms nothing until _expire has run
        self._hops = 0
        self._hop()

    def _hop(self) -> None:
        self._hops += 1
        self.loop.call_soon(self._hopped)

    def _hopped(self) -> None:
        self._hop_at = time.perf_counter()
        self.loop.call_soon(self._expire)

    def _expire(self) -> None:
        if self._stopping:
            return
        if time.perf_counter() - self._hop_at > _STALL_S and self._hops < _MAX_HOPS:
            self._hop()  # the loop stalled since the read: read again first
            return
        self._expiring = False
        self._deadline = None
        now = self._now()
        conns = self._conns

        def unread(conn_id: int) -> bool:
            # Frames wait that will be handled in the next passes (not those of a client
            # that leaves its answers unread: they wait on it).
            conn = conns.get(conn_id)
            return conn is not None and bool(conn.inbox) and not conn.write_paused

        try:
            out = self.core.advance(now, unread)
        except Exception:
            log.exception("core_failed", operation="advance")
            self._reschedule(not_before=now + _ADVANCE_RETRY_S * 1000)
            return
        self._send_outside(out)
        self._reschedule()
        self._flush()

    def _sweep(self) -> None:
        """Close connections that never said hello, or began a frame and never finished it."""
        cfg = self.config
        now = self.loop.time()
        handshake_s = cfg.handshake_timeout_ms / 1000
        stalled_s = cfg.stalled_frame_timeout_ms / 1000
        for conn in list(self._watch):
            if conn.closing:
                self._watch.discard(conn)
            elif (
                not conn.handshaken
                and now - conn.opened_at > handshake_s
                and not greeting.held(self.security, conn)
            ):
                code, message = greeting.timed_out(self.security, conn, cfg.handshake_timeout_ms)
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
        if self._stopping or self._refusing:
            self._retaining = None
            return
        if self._retaining is None:
            self._retaining = self.core.expiring_offsets(self._now(), time.time() * 1000)
        until = time.perf_counter() + COPY_SLICE_S
        try:
            while time.perf_counter() < until:
                next(self._retaining)
        except StopIteration:
            self._retaining = None
        except Exception:
            log.exception("core_failed", operation="expire_offsets")
            self._retaining = None
        self._send_outside([])
        self._flush()
        wait = 0.0 if self._retaining is not None else _retention_interval(self.config)
        self._retention_check = self.loop.call_later(wait, self._retain)

    def _sweep_idle(self) -> None:
        """Close connections that hold no member and have sent nothing for the idle timeout
        (as Kafka's connections.max.idle.ms): idle connections cannot hold every slot."""
        cfg = self.config
        now = self.loop.time()
        idle_s = cfg.idle_timeout_ms / 1000
        holding = self.core.membership.by_conn
        for conn in list(self._conns.values()):
            if (
                conn.handshaken
                and not conn.closing
                and now - conn.last_active > idle_s
                and conn.conn_id not in holding
                and not conn.held
            ):
                conn.log.info("connection_idle", idle_ms=int((now - conn.last_active) * 1000))
                conn.close(f"idle for over {cfg.idle_timeout_ms} ms, holding no member")
        self._idle_sweeper = self.loop.call_later(_idle_interval(cfg), self._sweep_idle)


def _retention_interval(config: ServerConfig) -> float:
    return config.group.offsets_retention_check_interval_ms / 1000


def _idle_interval(config: ServerConfig) -> float:
    return min(max(config.idle_timeout_ms / 1000 / 10, _SWEEP_MIN_S), 10.0)


_ANSWERED_WHILE_LOADING = (FindCoordinatorRequest, DescribeClusterRequest)


def _joining_cluster(request: Request) -> ErrorResponse | None:
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


_TOPIC_CHANGES = (CreateTopicsRequest, AlterTopicsRequest, DeleteTopicsRequest)


def _not_kept(correlation_id: int, *, clustered: bool = False, topics: bool = False) -> Reply:
    if clustered and topics:  # the topic changed meanwhile, or etcd did not answer: retriable
        return Reply(
            correlation_id=correlation_id,
            response=ErrorResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message="the topic change could not be kept in etcd (the topic changed "
                "meanwhile, or etcd did not answer); the node holds etcd's topics again: "
                "make the request again",
            ),
        )
    if clustered:  # the shard is no longer served here: find its coordinator again
        return Reply(
            correlation_id=correlation_id,
            response=ErrorResponse(
                error_code=ErrorCode.NOT_COORDINATOR,
                error_message="the change could not be kept in etcd; find the coordinator again",
            ),
        )
    return Reply(
        correlation_id=correlation_id,
        response=ErrorResponse(
            error_code=ErrorCode.KAFKA_STORAGE_ERROR,
            error_message="the coordinator could not keep this change in its data dir",
        ),
    )


async def serve(
    config: ServerConfig,
    *,
    ready: Callable[[int], None] | None = None,
    stop: asyncio.Event | None = None,
    core: Coordinator | None = None,
) -> None:
    """Run a server until SIGTERM or SIGINT (or until ``stop`` is set), then shut down.

    ``ready`` is called with the bound port once the server listens. Raises ListenError
    when the address cannot be bound.
    """
    loop = asyncio.get_running_loop()
    stop = stop if stop is not None else asyncio.Event()
    raise_fd_limit()
    server = CoordinatorServer(config, core=core)
    await server.start()
    cluster = None
    if config.cluster:
        cluster = await _join_cluster(server)
    installed: list[signal.Signals] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, _on_signal, stop, signum)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread, or a platform without signal handlers
        installed.append(signum)
    if server.security is not None and server.security.tls is not None:
        try:
            loop.add_signal_handler(signal.SIGHUP, server.security.reload_tls)
            installed.append(signal.SIGHUP)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    try:
        if ready is not None:
            ready(server.port)
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(server.wait_closed())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
        if cluster is not None:
            await cluster.stop()
        await server.close()
    if server.storage_failure is not None:
        raise StorageFailedError(server.storage_failure)


async def _join_cluster(server: CoordinatorServer) -> ClusterRun:
    try:
        from huddle.coordinator.cluster.node import ClusterConfigError
        from huddle.coordinator.cluster.running import ClusterRun
        from huddle.coordinator.cluster.store import StoreUnavailableError
    except ImportError as exc:  # the etcd client is an extra
        await server.close()
        raise ClusterStartError(
            f"--cluster needs the etcd client: pip install 'huddle[cluster]' ({exc})"
        ) from exc

    try:
        return await ClusterRun.start(server)
    except (ClusterConfigError, StoreUnavailableError) as exc:
        await server.close()
        raise ClusterStartError(str(exc)) from exc


class ClusterStartError(HuddleError):
    """A cluster node could not start: etcd unreachable, or a conflicting configuration."""


class StorageFailedError(HuddleError):
    """The server stopped by itself: a change could not be kept in its data dir."""


@contextlib.contextmanager
def _collections_paused() -> Iterator[None]:
    """No garbage collection while a data dir loads: the load makes millions of objects
    that live on, and each collection of the older generations meanwhile walks them all
    (13 s of collections, one of 2 s, loading 60,000 groups of 10 members). What a large
    load left is then frozen (``gc.freeze``): collections pass it over, or the first one
    after the load would walk it all. A small one is left to the collector (freezing
    would keep what is cyclic garbage by then for good)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_count()[0] >= FREEZE_AFTER_LOAD:
            gc.freeze()
        if enabled:
            gc.enable()


def _on_signal(stop: asyncio.Event, signum: signal.Signals) -> None:
    stop.set()  # first: nothing that follows may keep the server from stopping
    log.info("signal_received", signal=signum.name)


__all__ = ["ClusterStartError", "CoordinatorServer", "ListenError", "StorageFailedError", "serve"]
