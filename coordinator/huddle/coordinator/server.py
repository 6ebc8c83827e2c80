"""The coordinator as a process: ``serve()`` runs a server until it is told to stop.

``serve`` raises the open-file limit (``huddle.coordinator.descriptors``), starts a
``CoordinatorServer`` (``huddle.coordinator.host``), joins the cluster with ``--cluster``
(``huddle.coordinator.cluster.running``), and stops gracefully on SIGTERM or SIGINT
(SIGHUP reloads the TLS certificate; without TLS it reloads nothing and stops nothing).
The names a user starts a coordinator with are all here: ``serve``, ``CoordinatorServer``
and the errors start-up raises.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from huddle.coordinator.config import ServerConfig
from huddle.coordinator.core import Coordinator
from huddle.coordinator.descriptors import FD_RESERVE, connections_allowed, raise_fd_limit
from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.listening import ListenError
from huddle.coordinator.storage.journal import DataDirError
from huddle.protocol.addresses import format_address
from huddle.protocol.errors import HuddleError

if TYPE_CHECKING:
    from huddle.coordinator.cluster.running import ClusterRun
    from huddle.coordinator.kafka.wire import KafkaWire

log = structlog.get_logger("huddle.server")


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
    kafka = await _listen_kafka(server) if config.kafka_port >= 0 else None
    cluster = None
    if config.cluster:
        cluster = await _join_cluster(server, kafka)
    installed: list[signal.Signals] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, _on_signal, stop, signum)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread, or a platform without signal handlers
        installed.append(signum)
    try:
        loop.add_signal_handler(signal.SIGHUP, _reload, server)
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


async def _listen_kafka(server: CoordinatorServer) -> KafkaWire:
    from huddle.coordinator.kafka.listener import listen_kafka

    cfg = server.config
    host = cfg.kafka_host or cfg.host
    try:
        wire = await listen_kafka(server, host, cfg.kafka_port, cfg.kafka_advertise or None)
    except DataDirError:  # the log's files in the data dir
        await server.close()
        raise
    except OSError as exc:
        await server.close()
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise ListenError(
            f"cannot listen for Kafka clients on {host}:{cfg.kafka_port}: {reason}"
        ) from exc
    advertised = format_address(*wire.advertised)
    log.info("kafka_listening", host=host, port=wire.port, advertised=advertised)
    return wire


async def _join_cluster(server: CoordinatorServer, kafka: KafkaWire | None) -> ClusterRun:
    """Join the cluster; a Kafka listener is registered with the node, and names the
    cluster's brokers from then on."""
    try:
        from huddle.coordinator.cluster.kafka_nodes import ClusterKafkaNodes
        from huddle.coordinator.cluster.node import ClusterConfigError
        from huddle.coordinator.cluster.running import ClusterRun
        from huddle.coordinator.cluster.store import StoreUnavailableError
    except ImportError as exc:  # the etcd client is an extra
        await server.close()
        raise ClusterStartError(
            f"--cluster needs the etcd client: pip install 'huddle[cluster]' ({exc})"
        ) from exc

    kafka_advertise = format_address(*kafka.advertised) if kafka is not None else ""
    try:
        run = await ClusterRun.start(server, kafka_advertise)
    except (ClusterConfigError, StoreUnavailableError) as exc:
        await server.close()
        raise ClusterStartError(str(exc)) from exc
    if kafka is not None:
        kafka.nodes = ClusterKafkaNodes(run.node, kafka.advertised)
    return run


class ClusterStartError(HuddleError):
    """A cluster node could not start: etcd unreachable, or a conflicting configuration."""


class StorageFailedError(HuddleError):
    """The server stopped by itself: a change could not be kept in its data dir."""


def _reload(server: CoordinatorServer) -> None:
    """SIGHUP: the TLS certificate is loaded again; without TLS there is nothing to reload,
    and the server serves on (the signal's default action would end the process at once,
    without the graceful stop SIGTERM gets)."""
    security = server.security
    if security is not None and security.tls is not None:
        security.reload_tls()
    else:
        log.info("signal_received", signal="SIGHUP", action="nothing to reload without TLS")


def _on_signal(stop: asyncio.Event, signum: signal.Signals) -> None:
    stop.set()  # first: nothing that follows may keep the server from stopping
    log.info("signal_received", signal=signum.name)


__all__ = [
    "FD_RESERVE",
    "ClusterStartError",
    "CoordinatorServer",
    "ListenError",
    "StorageFailedError",
    "connections_allowed",
    "raise_fd_limit",
    "serve",
]
