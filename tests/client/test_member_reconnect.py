"""A member that reconnects speaks for itself first on its new connection: its own heartbeat
(or JoinGroup) reaches the coordinator before an application's commit, so that the member
moves to the new connection before anything else acts for it there."""

from __future__ import annotations

from dataclasses import replace

import anyio
import pytest

from huddle.chaos.proxy import fault_proxy
from huddle.client import Admin, Member, TopicPartition
from huddle.client.connection import Connection
from huddle.coordinator.effects import Outgoing, Peer
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    Request,
    SyncGroupRequest,
)
from tests.helpers import FAST_GROUP, fast_server_config, running_server, wait_until

Naming = HeartbeatRequest | JoinGroupRequest | SyncGroupRequest | OffsetCommitRequest
HELD_UP_S = 0.3  # the first heartbeat on the new connection waits this long


async def test_a_reconnected_member_heartbeats_before_the_applications_first_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a grace long enough that the member counts its session alive through the reconnect
    group = replace(FAST_GROUP, disconnect_grace_ms=3_000)
    async with running_server(fast_server_config(group=group)) as server:
        await commit_after_a_reconnect(server, monkeypatch)


async def commit_after_a_reconnect(
    server: CoordinatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, Naming]] = []  # (connection, request) of requests naming a member
    handle = server.core.handle

    def spy(peer: Peer, cid: int, request: Request, now: float) -> list[Outgoing]:
        if isinstance(request, Naming):
            seen.append((peer.conn_id, request))
        return handle(peer, cid, request, now)

    monkeypatch.setattr(server.core, "handle", spy)
    direct = f"127.0.0.1:{server.port}"
    async with Admin(direct) as admin:
        await admin.create_topic("t", 1)
    async with fault_proxy("127.0.0.1", server.port) as proxy:
        m = Member(
            f"127.0.0.1:{proxy.port}",
            group_id="g",
            topics=["t"],
            session_timeout_ms=3_000,
            heartbeat_interval_ms=200,
        )
        heartbeats = m._runtime._heartbeats
        connections = 0

        async def slow_to_heartbeat_after_a_reconnect(conn: Connection) -> None:
            """The application gets to commit before the heartbeat task has run."""
            nonlocal connections
            connections += 1
            if connections > 1:
                await anyio.sleep(HELD_UP_S)
            await heartbeats(conn)

        monkeypatch.setattr(m._runtime, "_heartbeats", slow_to_heartbeat_after_a_reconnect)
        async with m:
            await m.wait_stable(timeout=10)
            await proxy.drop()  # the coordinator's socket is gone; the member reconnects
            await wait_until(lambda: not m.connected, wait_s=5)
            await wait_until(lambda: m.connected, wait_s=5)
            await m.commit({TopicPartition("t", 0): 7})
            assert await m.committed([TopicPartition("t", 0)]) == {TopicPartition("t", 0): 7}
            mine = [(conn, r) for conn, r in seen if r.member_id == m.member_id]
            newest = max(conn for conn, _ in mine)
            first = next(r for conn, r in mine if conn == newest)
            assert isinstance(first, HeartbeatRequest)
