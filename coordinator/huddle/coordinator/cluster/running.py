"""Running a coordinator server as a node of a cluster: ``huddle serve --cluster``.

The node's loops and the topics watch run supervised (``huddle.coordinator.supervisor``),
every etcd call within ``STORE_DEADLINE_S`` (a keep-alive within two thirds of the TTL).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Protocol

import structlog

from huddle.coordinator.cluster.node import ClusterNode, watch_stall_s
from huddle.coordinator.cluster.serving import ClusterServing
from huddle.coordinator.cluster.store import EtcdStore, parse_endpoints
from huddle.coordinator.config import ServerConfig
from huddle.coordinator.core import Coordinator, Outgoing
from huddle.coordinator.supervisor import Beat, supervise
from huddle.protocol.addresses import format_address

log = structlog.get_logger("huddle.cluster")

WATCH_RETRY_S = 1.0
# every etcd call's deadline: etcd electing a new leader (a member died) holds calls for one
# to three seconds, and a write answered then is still worth having
STORE_DEADLINE_S = 3.0


class ClusterHost(Protocol):
    """What a cluster node needs of the server it runs in (``CoordinatorServer`` is one;
    this package does not import the server: the server starts the node)."""

    @property
    def config(self) -> ServerConfig: ...

    @property
    def core(self) -> Coordinator: ...

    @property
    def node_id(self) -> str: ...

    @property
    def advertised(self) -> tuple[str, int]: ...

    def now_ms(self) -> float:
        """The core's clock."""

    def use_cluster(self, serving: ClusterServing) -> None:
        """Serve as this node: refuse the groups it does not serve, keep changes in etcd."""

    def apply_outside(self, out: list[Outgoing]) -> None:
        """Send frames the core made outside a request; look at its deadlines again."""

    def keep_outside(self) -> None:
        """Keep changes the core made outside a request."""

    def write_in_flight(self) -> Awaitable[None]:
        """Until the etcd write under way, if any, is done."""


class ClusterRun:
    """A server's life as a cluster node: registered, keeping its lease and shards, and
    following the cluster's topics, until ``stop``."""

    def __init__(self, store: EtcdStore, node: ClusterNode, serving: ClusterServing) -> None:
        self.store = store
        self.node = node
        self.serving = serving
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def start(cls, server: ClusterHost, kafka_advertise: str = "") -> ClusterRun:
        """Connect to etcd, register the node (with its Kafka listener's advertised
        address, if it has one) and begin serving. Raises StoreUnavailableError (no etcd
        endpoint answers) or ClusterConfigError (the cluster's configuration or another
        node conflicts with this one)."""
        cfg = server.config
        store = await EtcdStore.connect(parse_endpoints(cfg.cluster), timeout_s=STORE_DEADLINE_S)
        try:
            node = ClusterNode(
                store,
                node_id=server.node_id,
                advertise=format_address(*server.advertised),
                shards=cfg.shards,
                prefix=cfg.cluster_prefix,
                ttl_s=cfg.lease_ttl_s,
                kafka_advertise=kafka_advertise,
            )
            serving = ClusterServing(
                server.core,
                store,
                node,
                now=server.now_ms,
                dispatch=server.apply_outside,
                drain=server.write_in_flight,
                keep=server.keep_outside,
            )
            server.use_cluster(serving)
            await node.register()
            await serving.topics.load()
        except BaseException:
            await store.close()
            raise
        run = cls(store, node, serving)
        topics = supervise(
            "topics watch",
            run._follow_topics,
            stall_s=watch_stall_s(store),
            fields={"node": node.node_id},
            restarts=node.restarts,
        )
        run._tasks = [
            asyncio.create_task(node.run(), name="huddle cluster node"),
            asyncio.create_task(topics, name="huddle topics watch"),
        ]
        for task in run._tasks:
            task.add_done_callback(run._ended)
        log.info("cluster_node_started", node=node.node_id, shards=cfg.shards)
        return run

    def _ended(self, task: asyncio.Task[None]) -> None:
        """Supervisors end only when stopped: anything else is a bug, said loudly."""
        if not task.cancelled():
            log.error("cluster_task_ended", task=task.get_name(), error=repr(task.exception()))

    async def _follow_topics(self, beat: Beat) -> None:
        """The topics watch, each delivered change a beat; started again (after a failure,
        or by its supervisor) from the last revision it delivered or read, never from the
        start: an old change replayed would drop offsets committed since."""
        topics = self.serving.topics
        while True:
            beat()
            try:
                await topics.watch(alive=beat)
            except Exception as exc:
                log.warning("topics_watch_failed", error=type(exc).__name__)
            await asyncio.sleep(WATCH_RETRY_S)
            beat()
            with contextlib.suppress(Exception):  # read what the watch missed, then go on
                await topics.load()

    async def stop(self) -> None:
        """Stop serving, give the shards up at once, and leave etcd."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.node.leave(), self.node.ttl_s)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.store.close(), self.node.ttl_s)
        log.info("cluster_node_stopped", node=self.node.node_id)
