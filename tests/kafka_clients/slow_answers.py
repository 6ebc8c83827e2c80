"""A proxy in front of a Kafka listener that holds back the answers to chosen APIs: a slow
link for one kind of request, to put a client's requests in flight when its own timers run
out. Each connection's answers still leave in order (an answer held holds those behind it).

``SlowAnswers(upstream_port, port, {api_key: seconds})`` listens on 127.0.0.1:``port`` while
inside its block, in an event loop of its own thread; the listener is to advertise ``port``
(``--kafka-advertise``), so that every connection of the client passes through it.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import Mapping
from typing import Final

HOST: Final = "127.0.0.1"
_SIZE: Final = struct.Struct(">i")
_HEADER: Final = struct.Struct(">hhi")  # api key, version, correlation id
START_S: Final = 10.0


class SlowAnswers:
    def __init__(self, upstream_port: int, port: int, delays: Mapping[int, float]) -> None:
        self.upstream_port = upstream_port
        self.port = port
        self.delays = dict(delays)
        self.held = 0  # answers held back so far
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def __enter__(self) -> SlowAnswers:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        started.result(timeout=START_S)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=START_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=START_S)
        self._loop.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._accept, HOST, self.port)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        this = asyncio.current_task()
        if this is not None:
            self._track(this)
        try:
            server_r, server_w = await asyncio.open_connection(HOST, self.upstream_port)
        except OSError:
            client_w.close()
            return
        apis: dict[int, int] = {}  # correlation id -> api key, of requests not yet answered
        self._track(asyncio.create_task(self._answers(server_r, client_w, apis)))
        try:
            while True:
                frame = await _frame(client_r)
                api_key, _, correlation_id = _HEADER.unpack_from(frame, _SIZE.size)
                apis[correlation_id] = api_key
                server_w.write(frame)
                await server_w.drain()
        except (asyncio.IncompleteReadError, ConnectionError, struct.error):
            pass
        finally:
            server_w.close()
            client_w.close()

    async def _answers(
        self, server_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, apis: dict[int, int]
    ) -> None:
        try:
            while True:
                frame = await _frame(server_r)
                (correlation_id,) = _SIZE.unpack_from(frame, _SIZE.size)
                delay = self.delays.get(apis.pop(correlation_id, -1), 0.0)
                if delay:
                    self.held += 1
                    await asyncio.sleep(delay)  # the slow link itself
                client_w.write(frame)
                await client_w.drain()
        except (asyncio.IncompleteReadError, ConnectionError, struct.error):
            pass
        finally:
            client_w.close()


async def _frame(reader: asyncio.StreamReader) -> bytes:
    size = await reader.readexactly(_SIZE.size)
    return size + await reader.readexactly(_SIZE.unpack(size)[0])
