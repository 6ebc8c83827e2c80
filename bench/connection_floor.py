"""What an idle TCP connection costs a server that does nothing with it: the floor under
``bench.memory``'s per-member figure when each member has its own connection.

    python -m bench.connection_floor [--connections 10000] [--runs 2]

A child process serves a bare ``asyncio.Protocol`` (it keeps its transport, nothing else) on
uvloop, as ``huddle serve`` runs, and on asyncio's own loop; this process opens
``--connections`` idle connections to it and reports the growth of the child's VmRSS per
connection: the event loop's transport and handle, the protocol object and the kernel's
accounting that lands in RSS (not the socket buffers).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import statistics
from multiprocessing.connection import Connection

from bench.common import cpu_model
from bench.memory import settled_rss
from bench.processes import new_event_loop, raise_fd_limit


class _Idle(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport


async def _serve(ready: Connection) -> None:
    server = await asyncio.get_running_loop().create_server(_Idle, "127.0.0.1", 0, backlog=4096)
    ready.send(server.sockets[0].getsockname()[1])
    await asyncio.Event().wait()  # until terminated


def _child(loop_kind: str, ready: Connection, connections: int) -> None:
    raise_fd_limit(connections + 256)
    loop = new_event_loop() if loop_kind == "uvloop" else asyncio.new_event_loop()
    loop.run_until_complete(_serve(ready))


def per_connection(loop_kind: str, connections: int) -> float:
    """Bytes of the server's VmRSS per idle connection on ``loop_kind``'s loop."""
    here, there = multiprocessing.get_context("spawn").Pipe()
    child = multiprocessing.get_context("spawn").Process(
        target=_child, args=(loop_kind, there, connections), daemon=True
    )
    child.start()
    try:
        if not here.poll(30):
            raise RuntimeError("the bare server did not start")
        port = here.recv()
        assert child.pid is not None
        # A few connections first, so that what the first accept allocates is in both readings.
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
        before = settled_rss(child.pid)
        socks += [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
        after = settled_rss(child.pid)
        for sock in socks:
            sock.close()
        return (after - before) / connections
    finally:
        child.terminate()
        child.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    raise_fd_limit(args.connections + 256)
    print(f"server VmRSS per idle connection, bare asyncio.Protocol; CPU: {cpu_model()}")
    for kind in ("uvloop", "asyncio"):
        figures = [per_connection(kind, args.connections) for _ in range(args.runs)]
        runs = ", ".join(f"{f:,.0f}" for f in figures)
        print(
            f"  {kind:>7}: median {statistics.median(figures):,.0f} bytes per connection "
            f"({args.connections:,} connections; runs: {runs})",
            flush=True,
        )


if __name__ == "__main__":
    main()
