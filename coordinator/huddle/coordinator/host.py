"""``CoordinatorServer``: one listener, its connections, and the parts that serve them.

It binds the listening socket, accepts connections (the ``ConnectionHost`` they talk to),
loads the data dir, and shuts down gracefully. The work is done by its parts, each in
its own module:

- ``listening``: binding a wire's socket, what a failed bind says, a lone server's address;
- ``huddle_wire.HuddleWire``: huddle's msgpack wire (framing, codec, login, decoding);
- ``intake.Intake``: which connection's frames are handled when (slices, round robin,
  backpressure);
- ``requests.RequestPath``: screening, the core, the changes kept, answers flushed;
- ``held.HeldAnswers``: answers released once kept, refused when not, storage failure;
- ``sweeps.Timers``: the core's deadlines, the handshake, stalled-frame and idle sweeps,
  offset retention.

Bad input closes only the connection that sent it, after a ``ProtocolError`` frame saying
why; a request that decodes as msgpack but not as a known request is answered with an
``ErrorResponse`` and the connection stays open. A failure inside the core is logged with
its traceback and answered with ``UNKNOWN_SERVER_ERROR``: the server keeps serving.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from huddle.coordinator import consumer_wire
from huddle.coordinator.admission import Admission
from huddle.coordinator.cluster.keeper import EtcdKeeper
from huddle.coordinator.config import ServerConfig
from huddle.coordinator.connection import Connection
from huddle.coordinator.core import Coordinator, Outgoing
from huddle.coordinator.descriptors import connections_allowed
from huddle.coordinator.held import HeldAnswers
from huddle.coordinator.huddle_wire import HuddleWire
from huddle.coordinator.intake import Intake
from huddle.coordinator.listening import (
    ListenError,
    bind,
    bound_port,
    described_alone,
    listen,
    located_here,
    metrics_listening,
)
from huddle.coordinator.metrics import CoordinatorMetrics
from huddle.coordinator.replay import Slices, collections_paused, replay, serve_loaded
from huddle.coordinator.requests import Gate, RequestPath, joining_cluster
from huddle.coordinator.security.listener import ListenerSecurity
from huddle.coordinator.storage.group_commit import GroupCommit
from huddle.coordinator.storage.journal import Journal
from huddle.coordinator.sweeps import Timers
from huddle.coordinator.wire import Wire
from huddle.protocol.addresses import format_address, parse_address
from huddle.protocol.errors import ErrorCode, UsageError
from huddle.protocol.messages import ProtocolError

if TYPE_CHECKING:
    from huddle.coordinator.cluster.serving import ClusterServing

log = structlog.get_logger("huddle.server")


class CoordinatorServer:
    """Listens on ``config.host:config.port`` and feeds one ``Coordinator`` core.

    ``await start()`` binds (port 0 picks a free port: read ``port`` afterwards);
    ``await close()`` shuts down gracefully: stop accepting, let the core answer every
    request it holds, flush, close. Also usable as ``async with CoordinatorServer(...)``.
    """

    intake: Intake  # made by start(), with the loop
    timers: Timers
    frames_received: Callable[[Connection], None]  # ConnectionHost's: the intake's, per read

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
        self.cluster: ClusterServing | None = None
        self.kafka_advertised = ""  # HOST:PORT of the Kafka listener, once it listens
        self.metrics: CoordinatorMetrics | None = None  # Prometheus, with --metrics-port
        self._metrics_http: Any = None
        if config.metrics_port >= 0:
            self.metrics = metrics = CoordinatorMetrics()
            metrics.core = self.core
            metrics.connections = lambda: len(self._conns)
            self.core.observe_rebalances(metrics)
        self.security: ListenerSecurity | None = None  # TLS, SASL and ACLs, when configured
        if config.tls_cert or config.sasl or config.authorizer:
            self.security = security = ListenerSecurity(config)
            if self.metrics is not None and security.uses_store:
                self.metrics.security_store = lambda: (
                    security.store_healthy,
                    security.store_failures,
                )
        self.admission = admission = Admission(config, self.security)
        self._conns = admission.conns  # by id: the core's conn ids
        self.watch = admission.watch  # ConnectionHost's, as are the next two
        self.partial_frame = admission.partial_frame
        self.greeted = admission.greeted
        self.wire = HuddleWire(self, self.security)
        self.requests = RequestPath(self.core, self._conns, self.metrics)
        # the consumer group protocol (KIP-848): one service for huddle's wire and Kafka's
        self.consumer = consumer_wire.server_service(self)
        self.flush_later = self.requests.flush_later  # ConnectionHost's, called per frame
        if config.cluster:  # no group is served before the node has joined its cluster
            self.requests.gate = joining_cluster
        self.held = HeldAnswers(
            self._conns, backlogged=self.backlogged, flush=self.requests.flush, stop=self._stop
        )
        self._shutdown: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._listeners: list[asyncio.Server] = []  # of other wires (``listen``)
        self._after_close: list[Callable[[], None]] = [self.consumer.close]  # ``after_close``
        self._next_conn_id = 1
        self._slices = Slices()  # the data dir's load, with requests answered in between
        self._stopping = False
        self._closed: asyncio.Event | None = None
        self._all_gone: asyncio.Event | None = None
        self.port = config.port
        self.metrics_port = config.metrics_port
        self.host = config.host

    # --- what tests and operators may read ---------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise UsageError("the server is not started")
        return self._loop

    @property
    def connection_count(self) -> int:
        return len(self._conns)

    def connections(self) -> list[Connection]:
        """The open connections, in the order they were accepted."""
        return list(self._conns.values())

    @property
    def partial_bytes(self) -> int:
        """Bytes of unfinished frames held, over every connection."""
        return self.admission.partial_bytes

    @property
    def max_connections(self) -> int:
        """``--max-connections``, lowered at start to what the open-file limit holds."""
        return self.admission.max_connections

    @property
    def commits(self) -> GroupCommit | None:
        """The data dir's group commit (None without a data dir, or before the load)."""
        return self._commits

    @property
    def loading(self) -> bool:
        """Replaying the data dir: requests get COORDINATOR_LOAD_IN_PROGRESS."""
        return self.requests.loading

    @loading.setter
    def loading(self, value: bool) -> None:
        self.requests.loading = value

    @property
    def refused_loading(self) -> int:
        """Requests answered COORDINATOR_LOAD_IN_PROGRESS while the data dir loaded."""
        return self.requests.refused_loading

    @property
    def gate(self) -> Gate | None:
        """A cluster node's refusal of the groups it does not serve (None: every group)."""
        return self.requests.gate

    @gate.setter
    def gate(self, gate: Gate | None) -> None:
        self.requests.gate = gate

    @property
    def storage_failure(self) -> str | None:
        """Why the server stopped by itself, if it did."""
        return self.held.failure

    # --- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        if self._loop is not None:
            raise UsageError("the server is already started")
        self._loop = loop = asyncio.get_running_loop()
        self.admission.max_connections = connections_allowed(self.config.max_connections)
        self._closed = asyncio.Event()
        self._all_gone = asyncio.Event()
        cfg = self.config
        self.timers = Timers(
            loop, cfg, self.core, self.requests, conns=self._conns, watched=self.admission.watched
        )
        self.intake = Intake(
            loop,
            self.requests,
            self.held,
            slice_s=cfg.input_slice_ms / 1000,
            reschedule=self.timers.reschedule,
            metrics=self.metrics,
        )
        self.frames_received = self.intake.frames_received  # ConnectionHost's, per read
        context = None
        if self.security is not None:
            await self.security.open()  # SecurityStartError: a TLS file or the store
            self.core.authorizer = self.security.authorizer
            context = self.security.context
        try:
            opening = listen(
                loop,
                self._new_connection,
                cfg.host,
                cfg.port,
                context=context,
                handshake_timeout_ms=cfg.handshake_timeout_ms,
            )
            self._server = await bind(opening, cfg.host, cfg.port)
        except ListenError:
            if self.security is not None:
                await self.security.close()
            raise
        self.port = bound_port(self._server) or self.port
        if not self.config.cluster:  # a cluster node's serving names the owners
            self.core.locate = lambda group_id: located_here(self.node_id, self.advertised)
            self.core.describe_cluster = lambda: described_alone(
                self.node_id, self.advertised, self.kafka_advertised
            )
        self.core.set_wall_clock(self.now_ms(), time.time() * 1000)
        with collections_paused():
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
            await self._slices.run(self.core.loading_groups(self.now_ms()))  # restored otherwise
            self.consumer.load_kept(None)  # the consumer-protocol groups, the same way
            self.core.begin_serving(self.now_ms())
            if self.core.changes:  # ids given to topics kept without one: recorded now
                self.requests.send_outside([])
            await serve_loaded(
                self.core, self.requests, self.timers, stopping=lambda: self._stopping
            )
        if self.metrics is not None:
            if self._commits is not None:
                self._commits.on_write = self.metrics.journal_written
            try:
                self._metrics_http, self.metrics_port = metrics_listening(
                    self.metrics, cfg.host, cfg.metrics_port
                )
            except ListenError:
                await self.close()
                raise
            log.info("metrics_listening", host=cfg.host, port=self.metrics_port)
        self.timers.start()
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

    async def _load(self, data_dir: str, fsync: bool) -> None:
        """Replay the data dir into the core; its changes are kept by a group commit."""
        self.journal = journal = await replay(self.core, data_dir, fsync, self._slices, self.now_ms)
        self._commits = GroupCommit(
            journal,
            self.loop,
            release=self.held.kept,
            refuse=self.held.not_kept,
            on_failure=self.held.storage_failed,
            state_size=self.core.kept_size,
            copy_state=self.core.copy_state,
        )
        self.requests.keeper = self._commits

    def _stop(self) -> None:
        """Stopped by a storage failure: no more requests, and a graceful shutdown."""
        self.requests.closed = True
        self._shutdown = self.loop.create_task(self.close())

    async def close(self) -> None:
        """Graceful shutdown; idempotent. Returns once every connection is closed."""
        if self._loop is None or self._closed is None or self._all_gone is None:
            return
        if self._stopping:
            await self._closed.wait()
            return
        self._stopping = True
        self.requests.closed = True
        self.intake.stopped = True
        log.info("server_stopping", connections=len(self._conns))
        for listener in (self._server, *self._listeners):
            if listener is not None:
                listener.close()
        self.timers.stop()
        stuck = False
        keeper = self.requests.keeper
        if keeper is not None:  # what was accepted is kept and answered first
            try:
                await asyncio.wait_for(keeper.drain(), self.config.shutdown_timeout_ms / 1000)
            except TimeoutError:  # a write that does not return: its requests stay unanswered
                stuck = True
                log.error("journal_write_stuck", timeout_ms=self.config.shutdown_timeout_ms)
        try:
            out = self.core.shutdown()
        except Exception:
            log.exception("core_failed", operation="shutdown")
            out = []
        self.requests.dispatch(out)
        # Only a coordinator that keeps its groups (a data dir, or a cluster node whose
        # shards go to another node with them) says its members ride through: without one,
        # the next coordinator knows nobody, and a member must count its partitions lost
        # after half the disconnect grace as for any lost connection.
        kept = self.core.keeps_groups
        for conn in list(self._conns.values()):
            if not conn.closing:
                conn.send(
                    ProtocolError(
                        error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        error_message="the coordinator is shutting down",
                        stopping=kept,  # no member is removed for this close
                    )
                )
            conn.close("server shutdown")  # one waiting for its client to close: now
        self.requests.flush()
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
        for listener in (self._server, *self._listeners):
            if listener is not None:
                await listener.wait_closed()
        for close in self._after_close:
            try:
                close()
            except Exception:
                log.exception("close_failed", operation=getattr(close, "__qualname__", "?"))
        if keeper is not None:
            keeper.close(wait=not stuck)
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
            raise UsageError("the server is not started")
        await self._closed.wait()

    async def __aenter__(self) -> CoordinatorServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- as a node of a cluster (``huddle.coordinator.cluster.running.ClusterHost``) ------

    def now_ms(self) -> float:
        """The core's clock: the loop's, in milliseconds."""
        return self.loop.time() * 1000

    def use_cluster(self, serving: ClusterServing) -> None:
        """Serve as a cluster node: group requests go through ``serving``'s refusal, and
        every change is answered once etcd holds it."""
        self.cluster = serving
        self.requests.gate = serving.refusal
        self.held.clustered = True
        if self.metrics is not None:
            self.metrics.shards = lambda: serving.node.owned_count
            self.metrics.liveness = serving.node.liveness
            self.metrics.restarts = lambda: dict(serving.node.restarts.counts)
        self.requests.keeper = EtcdKeeper(
            self.loop,
            serving.write,
            stamp=serving.stamp,
            release=self.held.kept,
            refuse=self.held.not_kept,
            deadline_s=serving.write_deadline_s,
            give_up=serving.give_up,
        )

    def apply_outside(self, out: list[Outgoing]) -> None:
        """Frames the core produced outside a request (a shard loaded or dropped, a topic
        another node changed): send them, and look at the core's deadlines again."""
        self.requests.dispatch(out)
        self.timers.reschedule()
        self.requests.flush()

    def keep_outside(self) -> None:
        """Changes the core made outside a request (a cluster node dropping the offsets of
        a topic another node deleted) are written now, as a timer's are."""
        self.requests.send_outside([])

    async def write_in_flight(self) -> None:
        """Until the cluster write under way, if any, is done (a shard given up)."""
        keeper = self.requests.keeper
        if isinstance(keeper, EtcdKeeper):
            await keeper.written()

    # --- connections: what a Connection may ask of its ConnectionHost -----------------

    def _new_connection(self, wire: Wire[Connection] | None = None) -> Connection:
        conn_id = self._next_conn_id
        self._next_conn_id += 1
        return Connection(self, conn_id, self.wire if wire is None else wire)

    def after_close(self, close: Callable[[], None]) -> None:
        """Call ``close`` at shutdown once every listener and connection is closed (what a
        listener's wire keeps, such as the Kafka log's files)."""
        self._after_close.append(close)

    async def listen(self, wire: Wire[Connection], host: str, port: int) -> int:
        """Listen on ``host:port`` for another wire too (a Kafka listener, say); return the
        port bound. Its connections share everything but their wire with the others: the
        admission and its limits, the intake, the request path, the held answers, the
        sweeps; ``close`` closes them with the rest. With TLS it is served with the huddle
        listener's context (one certificate, reloaded for both on SIGHUP), and a verified
        client certificate names its connections' principal (``Admission.admit``)."""
        listener = await listen(
            self.loop,
            lambda: self._new_connection(wire),
            host,
            port,
            context=self.security.context if self.security is not None else None,
            handshake_timeout_ms=self.config.handshake_timeout_ms,
        )
        self._listeners.append(listener)
        return int(listener.sockets[0].getsockname()[1])

    def connection_made(self, conn: Connection) -> None:
        self.admission.admit(conn, self.loop.time(), stopping=self._stopping)

    def backlogged(self, conn: Connection) -> None:
        self.intake.backlogged(conn)

    def connection_lost(self, conn: Connection) -> None:
        if not self.admission.forget(conn):
            return  # refused at the door: never registered, the core never saw it
        conn.log.info("connection_closed", reason=conn.close_reason)
        conn.wire.gone(conn)
        if not self._stopping:
            try:
                grace = None if self.config.cluster else conn.wire.disconnect_grace_ms
                out = self.core.connection_closed(conn.conn_id, self.now_ms(), grace)
            except Exception:
                log.exception("core_failed", operation="connection_closed", conn_id=conn.conn_id)
                out = []
            self.requests.send_outside(out)
            self.timers.reschedule()
            self.requests.flush()
        if not self._conns and self._all_gone is not None:
            self._all_gone.set()
