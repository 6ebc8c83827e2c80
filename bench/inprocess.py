"""The coordinator's server paths measured in one process, without sockets.

A ``CoordinatorServer`` runs on this process's loop (uvloop) and its connections are given
transports that write into a list: what is timed is the server's own work per frame (the
framing, the wire, the intake, the core, the encoding), with no system call and no client
sharing the CPU. On a machine shared with other work the socket benchmarks
(``bench.heartbeat``, ``bench.rebalance``) swing with the load; these figures are the
server's CPU alone, so before/after runs of two checkouts compare (run each with its own
``PYTHONPATH``, alternating).

* ``heartbeat``: 16 members, one per connection and group; each read carries ``--batch``
  heartbeats (1: one heartbeat per read, as a member that heartbeats alone sends it).
  Figure: server CPU (``process_time``) per heartbeat answered.
* ``rebalance``: a group of ``--members`` members, one connection each; a new member joins
  and every member rejoins on the notice and syncs (the leader assigns each member its
  own id). Figure: CPU time spent inside the server's ``data_received`` (everything the
  server does but its timers) until every member holds its SyncGroup answer; the new
  member then leaves.

Run: ``python -m bench.inprocess heartbeat`` or ``python -m bench.inprocess rebalance``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time
from typing import cast

from bench.common import cpu_model, quiet_logs
from bench.processes import new_event_loop
from huddle.coordinator.config import GroupConfig, ServerConfig
from huddle.coordinator.connection import Connection
from huddle.coordinator.host import CoordinatorServer
from huddle.protocol.errors import ErrorCode
from huddle.protocol.framing import ClientCodec, FrameReader
from huddle.protocol.messages import (
    PROTOCOL_VERSION,
    Call,
    Handshake,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    Message,
    Protocol,
    RebalanceStarted,
    Reply,
    Request,
    ServerFrame,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)

CODEC = ClientCodec()


class ListTransport:
    """A transport that keeps what is written (or only counts it)."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.keep = True

    def write(self, data: bytes | bytearray) -> None:
        if self.keep:
            self.chunks.append(bytes(data))

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 40_000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


_CONN_IDS = itertools.count(1)


def connection(server: CoordinatorServer, transport: ListTransport) -> Connection:
    """A connection of ``server`` on ``transport``, as its listener makes one."""
    conn = Connection(server, next(_CONN_IDS), server.wire)
    conn.connection_made(cast(asyncio.Transport, transport))
    return conn


class Client:
    """One connection's client side: requests in, the server's frames out."""

    def __init__(self, server: CoordinatorServer, name: str) -> None:
        self.transport = ListTransport()
        self.conn = connection(server, self.transport)
        self.reader = FrameReader()
        self.name = name
        self.member_id = ""
        self.ids = 0
        self.spent = 0.0  # CPU seconds inside the server's data_received

    def send(self, message: Message) -> None:
        self.feed(CODEC.encode(message))

    def call(self, request: Request) -> None:
        self.ids += 1
        self.send(Call(correlation_id=self.ids, request=request))

    def feed(self, data: bytes) -> None:
        began = time.process_time()  # CPU time: steady on a machine shared with others
        self.conn.data_received(data)
        self.spent += time.process_time() - began

    def frames(self) -> list[ServerFrame]:
        chunks, self.transport.chunks = self.transport.chunks, []
        return [CODEC.decode(body) for chunk in chunks for body in self.reader.feed(chunk)]

    def join_request(self, group_id: str) -> JoinGroupRequest:
        return JoinGroupRequest(
            group_id=group_id,
            member_id=self.member_id,
            protocol_type="consumer",
            protocols=[Protocol(name="bench", metadata=b"\x00\x01bench")],
            session_timeout_ms=45_000,
            rebalance_timeout_ms=60_000,
        )


async def next_pass() -> None:
    """Let the server's callbacks of this loop pass (its timers, its backlog) run."""
    for _ in range(3):
        await asyncio.sleep(0)


async def settle(clients: list[Client], group_id: str) -> None:
    """Answer the server as members do until every client holds a SyncGroup answer of a
    new generation: rejoin on a notice, sync on a join answer (the leader assigns)."""
    synced: set[str] = set()
    while len(synced) < len(clients):
        await next_pass()
        moved = False
        for client in clients:
            for frame in client.frames():
                moved = True
                if isinstance(frame, RebalanceStarted):
                    client.call(client.join_request(group_id))
                elif isinstance(frame, Reply) and isinstance(frame.response, JoinGroupResponse):
                    _joined(client, frame.response, group_id)
                elif isinstance(frame, Reply) and isinstance(frame.response, SyncGroupResponse):
                    if frame.response.error_code == ErrorCode.NONE:
                        synced.add(client.name)
                    else:
                        client.call(client.join_request(group_id))
        if not moved:
            await asyncio.sleep(0.001)  # a timer of the server's (a join phase) is due


def _joined(client: Client, answer: JoinGroupResponse, group_id: str) -> None:
    if answer.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        client.member_id = answer.member_id
        client.call(client.join_request(group_id))
        return
    if answer.error_code != ErrorCode.NONE:
        raise RuntimeError(f"{client.name}: JoinGroup answered {answer.error_code}")
    assignments = [
        SyncGroupAssignment(member_id=m.member_id, assignment=m.member_id.encode())
        for m in answer.members
    ]
    client.call(
        SyncGroupRequest(
            group_id=group_id,
            generation_id=answer.generation_id,
            member_id=client.member_id,
            assignments=assignments,
        )
    )


async def started(members: int) -> CoordinatorServer:
    config = ServerConfig(
        port=0,
        max_connections=members + 100,
        group=GroupConfig(initial_rebalance_delay_ms=0),
    )
    server = CoordinatorServer(config)
    await server.start()
    return server


async def stop(server: CoordinatorServer, clients: list[Client]) -> None:
    for client in clients:
        client.conn.connection_lost(None)
    await server.close()


async def heartbeat(args: argparse.Namespace) -> list[float]:
    server = await started(16)
    clients = [Client(server, f"hb-{i}") for i in range(16)]
    blocks = []
    for client in clients:
        client.send(Handshake(version=PROTOCOL_VERSION, client_id=client.name))
        client.frames()
        client.call(client.join_request(client.name))
        await settle([client], client.name)  # one group per member: joined and synced
        beat = HeartbeatRequest(group_id=client.name, generation_id=1, member_id=client.member_id)
        blocks.append(CODEC.encode(Call(correlation_id=1, request=beat)) * args.batch)
        client.transport.keep = False
    figures = []
    try:
        for _ in range(args.runs):
            answered = 0
            began = time.process_time()
            for _ in range(args.reads):
                for client, block in zip(clients, blocks, strict=True):
                    client.feed(block)
                    answered += args.batch
                await asyncio.sleep(0)
            figures.append((time.process_time() - began) / answered * 1e9)
    finally:
        await stop(server, clients)
    print(
        f"heartbeat: {args.batch} per read, server CPU per heartbeat: "
        f"median {statistics.median(figures):,.0f} ns (runs: {_runs(figures, '{:,.0f}')})"
    )
    return figures


async def rebalance(args: argparse.Namespace) -> list[float]:
    server = await started(args.members + args.runs)
    group_id = "inprocess"
    clients = [Client(server, f"m-{i}") for i in range(args.members)]
    for client in clients:
        client.send(Handshake(version=PROTOCOL_VERSION, client_id=client.name))
        client.frames()
    for client in clients:
        client.call(client.join_request(group_id))
    await settle(clients, group_id)
    figures = []
    everyone = list(clients)
    try:
        for run in range(args.runs):
            newcomer = Client(server, f"new-{run}")
            everyone.append(newcomer)
            newcomer.send(Handshake(version=PROTOCOL_VERSION, client_id=newcomer.name))
            newcomer.frames()
            for client in clients:
                client.spent = 0.0
            newcomer.call(newcomer.join_request(group_id))
            await settle([*clients, newcomer], group_id)
            figures.append(sum(c.spent for c in (*clients, newcomer)) * 1000)
            newcomer.call(
                LeaveGroupRequest(
                    group_id=group_id, members=[MemberIdentity(member_id=newcomer.member_id)]
                )
            )
            newcomer.frames()
            await settle(clients, group_id)
    finally:
        await stop(server, everyone)
    print(
        f"rebalance: one member joins {args.members}, server CPU per join: "
        f"median {statistics.median(figures):.1f} ms (runs: {_runs(figures, '{:.1f}')})"
    )
    return figures


def _runs(figures: list[float], spec: str) -> str:
    return ", ".join(spec.format(f) for f in figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="path", required=True)
    beat = sub.add_parser("heartbeat", help="server CPU per heartbeat")
    beat.add_argument("--batch", type=int, default=64, help="heartbeats per read")
    beat.add_argument("--reads", type=int, default=200, help="reads per connection per run")
    beat.add_argument("--runs", type=int, default=7)
    join = sub.add_parser("rebalance", help="server time per join of a large group")
    join.add_argument("--members", type=int, default=1000)
    join.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    quiet_logs()
    print(f"CPU: {cpu_model()}")
    run = heartbeat if args.path == "heartbeat" else rebalance
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(run(args))


if __name__ == "__main__":
    main()
