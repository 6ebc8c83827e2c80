"""A loopback link to etcd whose bytes can arrive late: the fault that lets a write whose
outcome was unknown land after later writes (TCP segments retransmitted long after the
sender gave up on them)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field


@dataclass
class _Conn:
    held: list[tuple[float, bytes]] = field(default_factory=list)
    held_since: float | None = None
    deliver_until: float | None = None
    delivered: asyncio.Event = field(default_factory=asyncio.Event)


class LateLink:
    """Relays 127.0.0.1:``port`` to ``upstream``. ``delay()``: the bytes the connections
    open then send toward etcd are held (answers still flow, there are none); connections
    made later flow. ``deliver(early_s)``: what was held in its first ``early_s`` reaches
    etcd (the request, not the cancel sent after it), the rest never does."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self.answered_late = 0  # bytes etcd sent on a delayed connection after deliver()
        self._conns: list[_Conn] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> LateLink:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def connections(self) -> int:
        """How many connections were made to the link so far."""
        return len(self._conns)

    def delay(self) -> None:
        for conn in self._conns:
            conn.held_since = time.monotonic()

    def deliver(self, early_s: float) -> None:
        for conn in self._conns:
            if conn.held_since is not None:
                conn.deliver_until = conn.held_since + early_s
                conn.delivered.set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = _Conn()
        self._conns.append(conn)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return

        async def up() -> None:
            while data := await _read(reader):
                if conn.held_since is None:
                    up_writer.write(data)
                    await up_writer.drain()
                else:
                    conn.held.append((time.monotonic(), data))
            await asyncio.Event().wait()  # the sender closed: what is held may still go

        async def down() -> None:
            while data := await _read(up_reader):
                if conn.deliver_until is not None:
                    self.answered_late += len(data)
                with contextlib.suppress(OSError):  # the sender may have closed
                    writer.write(data)
                    await writer.drain()
            await asyncio.Event().wait()

        async def flush() -> None:
            await conn.delivered.wait()
            until = conn.deliver_until
            assert until is not None
            while conn.held and conn.held[0][0] <= until:
                up_writer.write(conn.held.pop(0)[1])
            conn.held.clear()  # later bytes (the cancel, the close) never arrive
            await up_writer.drain()
            await asyncio.Event().wait()  # until closed

        relays = [asyncio.create_task(c) for c in (up(), down(), flush())]
        try:  # until closed: what is held may go whenever
            await asyncio.gather(*relays, return_exceptions=True)
        finally:
            for relay in relays:
                relay.cancel()
            await asyncio.gather(*relays, return_exceptions=True)
            for w in (writer, up_writer):
                with contextlib.suppress(Exception):
                    w.close()
            self._tasks.discard(task)


async def _read(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.read(65536)
    except OSError:  # reset: as closed
        return b""
