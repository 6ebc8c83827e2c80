"""A fault-injecting TCP proxy between members and the coordinator, on 127.0.0.1.

Runs as tasks in the harness's own event loop. Faults: ``latency`` (every chunk is held
this long, both ways), ``stall`` (bytes stop flowing, connections stay open: a blackholed
link), ``drop`` (close every open connection, with a reset if asked; new ones are accepted),
``partition`` (drop, and refuse new connections until healed), ``abandon`` (every open
connection frozen for good and never closed, as a link that died without a reset, both ways
or, ``one_way``, toward the upstream only; new ones flow), ``heal`` (undo all of it but
``abandon``).
The upstream may change (a restarted coordinator keeps its port, so it usually does not).
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import structlog
from anyio.abc import SocketAttribute, SocketStream

log = structlog.get_logger("huddle.chaos.proxy")
_CLOSED = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.latency_s = 0.0
        self.partitioned = False
        self._flowing = anyio.Event()
        self._flowing.set()
        self._open: set[SocketStream] = set()
        self._clients: set[SocketStream] = set()  # of the open ones: the clients' ends
        self._abandoned: set[SocketStream] = set()
        self._muted: set[SocketStream] = set()  # clients whose bytes never reach upstream

    @property
    def stalled(self) -> bool:
        return not self._flowing.is_set()

    @property
    def connections(self) -> int:
        return len(self._open)

    # --- faults ----------------------------------------------------------------------

    def set_latency(self, ms: float) -> None:
        self.latency_s = max(ms, 0) / 1000

    def stall(self) -> None:
        if self._flowing.is_set():
            self._flowing = anyio.Event()

    async def drop(self, *, reset: bool = False) -> int:
        """Close every open connection (``reset``: with a TCP reset, as a peer that crashed
        or a middlebox that gave up); returns how many."""
        streams = list(self._open)
        for stream in streams:
            if reset:
                with contextlib.suppress(OSError, AttributeError):  # closed meanwhile
                    raw = stream.extra(SocketAttribute.raw_socket)
                    raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await stream.aclose()
        return len(streams)

    def abandon(self, *, one_way: bool = False) -> int:
        """Freeze every open connection for good (bytes never flow on it again, it is never
        closed; ``one_way``: only the client's bytes, as a link dropping packets one way);
        new connections flow. Returns how many streams it froze."""
        if one_way:
            self._muted |= self._clients
            return len(self._clients)
        self._abandoned |= self._open
        return len(self._open)

    async def partition(self) -> int:
        self.partitioned = True
        return await self.drop()

    def heal(self) -> None:
        self.partitioned = False
        self.latency_s = 0.0
        self._flowing.set()

    # --- relaying --------------------------------------------------------------------

    async def _pump(self, source: SocketStream, sink: SocketStream) -> None:
        try:
            async for chunk in source:
                if source in self._abandoned or sink in self._abandoned or source in self._muted:
                    await anyio.sleep_forever()  # until the proxy stops
                while not self._flowing.is_set():
                    await self._flowing.wait()
                if self.latency_s > 0:
                    await anyio.sleep(self.latency_s)
                await sink.send(chunk)
        except _CLOSED:
            pass
        finally:
            await sink.aclose()
            await source.aclose()

    async def handle(self, client: SocketStream) -> None:
        """Relay one connection; whatever goes wrong ends this connection, not the proxy."""
        try:
            await self._relay(client)
        except Exception as exc:
            log.info("proxy_connection_failed", error=repr(exc))
        finally:
            await client.aclose()

    async def _relay(self, client: SocketStream) -> None:
        if self.partitioned:
            return
        try:
            upstream = await anyio.connect_tcp(*self.upstream)
        except OSError:
            return  # the coordinator is down: so is the connection
        if self.partitioned:  # partitioned while connecting
            await upstream.aclose()
            return
        self._open.add(client)
        self._open.add(upstream)
        self._clients.add(client)
        try:
            async with upstream, anyio.create_task_group() as tg:
                tg.start_soon(self._pump, client, upstream)
                tg.start_soon(self._pump, upstream, client)
        finally:
            self._open -= {client, upstream}
            self._clients.discard(client)
            self._abandoned -= {client, upstream}
            self._muted.discard(client)


@asynccontextmanager
async def fault_proxy(upstream_host: str, upstream_port: int) -> AsyncIterator[FaultProxy]:
    """Run a proxy on a free 127.0.0.1 port until the block is left."""
    proxy = FaultProxy(upstream_host, upstream_port)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    proxy.port = int(listener.extra(SocketAttribute.local_port))
    log.info("proxy_listening", port=proxy.port, upstream=f"{upstream_host}:{upstream_port}")
    async with listener, anyio.create_task_group() as tg:  # closed after its tasks ended
        tg.start_soon(listener.serve, proxy.handle)
        try:
            yield proxy
        finally:
            proxy.heal()
            tg.cancel_scope.cancel()
