"""The transport around the core: routing, timers, failures inside the core, lifecycle."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace

import pytest
from structlog.typing import EventDict

from huddle.client.connection import Connection, ConnectionClosedError, connect
from huddle.coordinator.core import Outgoing, Peer
from huddle.coordinator.server import CoordinatorServer, ListenError, serve
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ErrorResponse,
    JoinGroupResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    RebalanceStarted,
    Request,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)
from tests.helpers import (
    FAST_GROUP,
    error_events,
    eventually,
    fast_server_config,
    join_request,
    running_server,
    wait_until,
    within,
)


async def test_requests_are_answered(bootstrap: str, logs: list[EventDict]) -> None:
    async with connect(bootstrap, client_id="t") as conn:
        assert conn.server_version == 2
        response = await conn.request(ListTopicsRequest(), timeout=5)
        assert isinstance(response, ListTopicsResponse)
    events = [e["event"] for e in logs]
    assert "connection_opened" in events
    await wait_until(lambda: "connection_closed" in [e["event"] for e in logs])
    assert error_events(logs) == []


async def test_listening_is_logged_with_the_bound_port(
    server: CoordinatorServer, logs: list[EventDict]
) -> None:
    listening = [e for e in logs if e["event"] == "server_listening"]
    assert listening == [
        {"event": "server_listening", "host": "127.0.0.1", "port": server.port, "log_level": "info"}
    ]
    assert server.port != 0


async def test_session_expiry_is_driven_by_the_server_timer(bootstrap: str) -> None:
    async with connect(bootstrap) as conn:
        first = await conn.request(join_request(session_timeout_ms=200), timeout=5)
        assert isinstance(first, JoinGroupResponse)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        joined = await conn.request(
            join_request(first.member_id, session_timeout_ms=200), timeout=5
        )
        assert isinstance(joined, JoinGroupResponse)
        assert joined.error_code == ErrorCode.NONE, joined
        synced = await conn.request(
            SyncGroupRequest(
                group_id="g",
                generation_id=joined.generation_id,
                member_id=joined.member_id,
                assignments=[SyncGroupAssignment(member_id=joined.member_id, assignment=b"a")],
            ),
            timeout=5,
        )
        assert isinstance(synced, SyncGroupResponse)
        assert synced.error_code == ErrorCode.NONE

        async def member_gone() -> bool:
            described = await conn.request(DescribeGroupsRequest(groups=["g"]), timeout=5)
            assert isinstance(described, DescribeGroupsResponse)
            return not described.groups[0].members

        # No heartbeats: the session timer (200 ms) removes the member, with no request to
        # wake the core up: only the server's call_at on next_deadline().
        await eventually(member_gone, what="the session to expire")


async def test_rebalance_notice_reaches_the_member(bootstrap: str) -> None:
    async with connect(bootstrap, client_id="a") as a, connect(bootstrap, client_id="b") as b:
        first = await a.request(join_request(), timeout=5)
        assert isinstance(first, JoinGroupResponse)
        joined = await a.request(join_request(first.member_id), timeout=5)
        assert isinstance(joined, JoinGroupResponse)
        assert joined.error_code == ErrorCode.NONE
        await a.request(
            SyncGroupRequest(group_id="g", generation_id=1, member_id=joined.member_id), timeout=5
        )
        b_first = await b.request(join_request(), timeout=5)
        assert isinstance(b_first, JoinGroupResponse)
        held = asyncio.ensure_future(b.request(join_request(b_first.member_id), timeout=10))
        notice = await within(a.notices.receive(), wait_s=5)
        assert isinstance(notice, RebalanceStarted)
        assert notice.group_id == "g"
        assert notice.generation_id == 1
        held.cancel()


async def test_held_requests_are_answered_on_shutdown(logs: list[EventDict]) -> None:
    config = fast_server_config(group=replace(FAST_GROUP, initial_rebalance_delay_ms=60_000))
    async with running_server(config) as server, connect(f"127.0.0.1:{server.port}") as conn:
        first = await conn.request(join_request(), timeout=5)
        assert isinstance(first, JoinGroupResponse)
        held = asyncio.ensure_future(conn.request(join_request(first.member_id), timeout=10))
        await eventually(lambda: _has_members(conn), what="the join to be held")
        assert not held.done()
        await within(server.close())
        response = await within(held)
        assert isinstance(response, ErrorResponse)
        assert response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        with pytest.raises(ConnectionClosedError):
            await conn.request(ListTopicsRequest(), timeout=5)
    events = [e["event"] for e in logs]
    assert events.index("server_stopping") < events.index("server_stopped")


async def _has_members(conn: Connection) -> bool:
    described = await conn.request(DescribeGroupsRequest(groups=["g"]), timeout=5)
    assert isinstance(described, DescribeGroupsResponse)
    return bool(described.groups[0].members)


async def test_a_failure_in_the_core_is_answered_not_fatal(
    server: CoordinatorServer,
    bootstrap: str,
    logs: list[EventDict],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = server.core.handle

    def flaky(peer: Peer, correlation_id: int, request: Request, now: float) -> list[Outgoing]:
        if isinstance(request, DescribeGroupsRequest):
            raise RuntimeError("boom")
        return real(peer, correlation_id, request, now)

    monkeypatch.setattr(server.core, "handle", flaky)
    async with connect(bootstrap) as conn:
        response = await conn.request(DescribeGroupsRequest(groups=["g"]), timeout=5)
        assert isinstance(response, ErrorResponse)
        assert response.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        assert isinstance(await conn.request(ListTopicsRequest(), timeout=5), ListTopicsResponse)
    failures = [e for e in logs if e["event"] == "core_failed"]
    assert len(failures) == 1
    assert failures[0]["exc_info"] is True
    assert failures[0]["request"] == "describe_groups"


async def test_closed_connections_are_reported_to_the_core(
    server: CoordinatorServer, bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[int] = []
    real = server.core.connection_closed

    def record(conn_id: int, now: float, grace_ms: int | None = None) -> list[Outgoing]:
        closed.append(conn_id)
        return real(conn_id, now, grace_ms)

    monkeypatch.setattr(server.core, "connection_closed", record)
    async with connect(bootstrap):
        await wait_until(lambda: server.connection_count == 1)
    await wait_until(lambda: len(closed) == 1, what="the core to hear of the close")
    assert server.connection_count == 0


async def test_frames_for_a_connection_that_is_gone_are_dropped(server: CoordinatorServer) -> None:
    server.requests.dispatch([(424242, RebalanceStarted(group_id="g", generation_id=1))])


async def test_serve_runs_until_stopped() -> None:
    stop = asyncio.Event()
    ports: list[int] = []
    task = asyncio.ensure_future(serve(fast_server_config(), ready=ports.append, stop=stop))
    await wait_until(lambda: bool(ports), what="the server to listen")
    async with connect(f"127.0.0.1:{ports[0]}") as conn:
        assert isinstance(await conn.request(ListTopicsRequest(), timeout=5), ListTopicsResponse)
        stop.set()
        await within(task)
        with pytest.raises(ConnectionClosedError):
            await conn.request(ListTopicsRequest(), timeout=5)


async def test_address_in_use_is_a_listen_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = CoordinatorServer(fast_server_config(port=port))
        with pytest.raises(ListenError, match=f"cannot listen on 127.0.0.1:{port}: address"):
            await server.start()
