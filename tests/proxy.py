"""A TCP proxy on 127.0.0.1 that a test can freeze: bytes stop flowing both ways but the
connections stay open, as with a stalled network or a frozen process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup


class FreezableProxy:
    def __init__(self, upstream_port: int, tg: TaskGroup) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self._tg = tg
        self._flowing = anyio.Event()
        self._flowing.set()
        self._open: set[SocketStream] = set()

    def freeze(self) -> None:
        if self._flowing.is_set():
            self._flowing = anyio.Event()

    def thaw(self) -> None:
        self._flowing.set()

    async def sever(self) -> None:
        """Close every connection through the proxy (new ones are still accepted)."""
        for stream in list(self._open):
            await stream.aclose()

    async def _pump(self, source: SocketStream, sink: SocketStream) -> None:
        try:
            async for chunk in source:
                while not self._flowing.is_set():
                    await self._flowing.wait()
                await sink.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            await sink.aclose()

    async def _handle(self, client: SocketStream) -> None:
        upstream = await anyio.connect_tcp("127.0.0.1", self.upstream_port)
        self._open.add(client)
        try:
            async with client, upstream, anyio.create_task_group() as tg:
                tg.start_soon(self._pump, client, upstream)
                tg.start_soon(self._pump, upstream, client)
        finally:
            self._open.discard(client)


@asynccontextmanager
async def freezable_proxy(upstream_port: int) -> AsyncIterator[FreezableProxy]:
    async with anyio.create_task_group() as tg:
        proxy = FreezableProxy(upstream_port, tg)
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        proxy.port = int(listener.extra(SocketAttribute.local_port))
        tg.start_soon(listener.serve, proxy._handle)
        try:
            yield proxy
        finally:
            proxy.thaw()
            tg.cancel_scope.cancel()
