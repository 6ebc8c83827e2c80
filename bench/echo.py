"""A bare length-prefixed echo server: the yardstick of ``bench.heartbeat``.

It runs on the same kind of event loop as ``huddle serve`` (uvloop, ``asyncio.Protocol``),
splits the byte stream with the same ``FrameReader`` (4-byte big-endian length + body),
rebuilds each frame as header + body as the coordinator's encoder does, and writes every
frame of one ``data_received`` back in one write, as the coordinator flushes once per
event. Everything the coordinator does beyond this (decoding msgpack, the group rules,
encoding a reply, logging context) is what the benchmark's ratio prices.

Run: ``python -m bench.echo --port 9393``; stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
from typing import cast

from huddle.protocol.errors import CorruptMessageError, MessageTooLargeError
from huddle.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameReader, frame_header


class EchoProtocol(asyncio.Protocol):
    __slots__ = ("reader", "transport")

    def __init__(self) -> None:
        self.reader = FrameReader(DEFAULT_MAX_FRAME_BYTES)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        transport = self.transport
        if transport is None:
            return
        try:
            bodies = self.reader.feed(data)
        except (MessageTooLargeError, CorruptMessageError):
            transport.abort()
            return
        if not bodies:
            return
        pending = [frame_header(len(body)) + body for body in bodies]
        transport.write(pending[0] if len(pending) == 1 else b"".join(pending))


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = await loop.create_server(EchoProtocol, host=host, port=port, backlog=1024)
    try:
        await stop.wait()
    finally:
        server.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 2.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    from bench.processes import new_event_loop

    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
