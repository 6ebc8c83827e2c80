"""The server's listening sockets: one per wire (huddle's listener, the Kafka listener),
with TLS when configured, and what a failed bind says.

``listen`` binds a socket whose connections ``factory`` makes (an ``OSError`` if it cannot);
``bind`` awaits it for huddle's own listener and says why it cannot as a
``ListenError`` (``cannot listen on HOST:PORT: REASON``, the reason as the OS words it), the
error ``huddle serve`` reports and exits with; ``metrics_listening`` serves the Prometheus
metrics so too (``cannot serve metrics on HOST:PORT: REASON``). A server that is no
cluster's node answers where its groups are (``located_here``) and what its cluster is
(``described_alone``) with the address it advertises.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Final

from huddle.coordinator.metrics import CoordinatorMetrics, serve_metrics
from huddle.protocol.errors import HuddleError
from huddle.protocol.messages import (
    ClusterNodeInfo,
    DescribeClusterResponse,
    FindCoordinatorResponse,
)

BACKLOG: Final = 1024  # connections the kernel queues before they are accepted


class ListenError(HuddleError):
    """The server could not bind its listening socket."""


async def listen(
    loop: asyncio.AbstractEventLoop,
    factory: Callable[[], asyncio.Protocol],
    host: str,
    port: int,
    *,
    context: ssl.SSLContext | None,
    handshake_timeout_ms: int,
) -> asyncio.Server:
    """A server listening on ``host:port`` (port 0: a free one), its connections made by
    ``factory``; with ``context``, TLS whose handshake must end within the timeout."""
    return await loop.create_server(
        factory,
        host=host,
        port=port,
        backlog=BACKLOG,
        ssl=context,
        ssl_handshake_timeout=handshake_timeout_ms / 1000 if context else None,
    )


async def bind(opening: Awaitable[asyncio.Server], host: str, port: int) -> asyncio.Server:
    """The server ``opening`` (``listen``) makes, or a ``ListenError`` saying why it cannot
    listen on ``host:port``."""
    try:
        return await opening
    except OSError as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {_reason(exc)}") from exc


def metrics_listening(metrics: CoordinatorMetrics, host: str, port: int) -> tuple[object, int]:
    """``metrics.serve_metrics``: the HTTP server and its port, or a ``ListenError``."""
    try:
        return serve_metrics(metrics, host, port)
    except OSError as exc:
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise ListenError(f"cannot serve metrics on {host}:{port}: {reason}") from exc


def bound_port(server: asyncio.Server) -> int | None:
    """The port ``server`` listens on (None: it has no socket)."""
    sockets = server.sockets
    return int(sockets[0].getsockname()[1]) if sockets else None


def _reason(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror) or not exc.errno:
        return str(exc.strerror or exc).lower()
    return os.strerror(exc.errno).lower()


def located_here(node_id: str, advertised: tuple[str, int]) -> FindCoordinatorResponse:
    """FindCoordinator's answer of a server alone: every group is its own."""
    host, port = advertised
    return FindCoordinatorResponse(node_id=node_id, host=host, port=port)


def described_alone(
    node_id: str, advertised: tuple[str, int], kafka_address: str
) -> DescribeClusterResponse:
    """DescribeCluster's answer of a server alone: itself (and its Kafka listener's
    address, HOST:PORT, if it has one)."""
    host, port = advertised
    me = ClusterNodeInfo(node_id=node_id, host=host, port=port, kafka_address=kafka_address)
    return DescribeClusterResponse(node_id=node_id, nodes=[me])
