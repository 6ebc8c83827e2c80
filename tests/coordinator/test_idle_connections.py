"""What an idle connection costs the server (BENCHMARKS.md section 3), and that the events
logged for a connection still say whose connection it is."""

from __future__ import annotations

import gc
import logging
import tracemalloc
from collections.abc import AsyncIterator

import pytest
import structlog
from structlog.typing import EventDict

from bench import memory
from bench.inprocess import ListTransport, connection
from huddle.coordinator.host import CoordinatorServer
from huddle.protocol.framing import ClientCodec
from huddle.protocol.messages import PROTOCOL_VERSION, Handshake, JoinGroupRequest, Protocol
from tests.helpers import RawClient, running_server, wait_until

CONNECTIONS = 300


@pytest.fixture
async def quiet_server() -> AsyncIterator[CoordinatorServer]:
    """A server whose info and debug events are filtered out (as ``huddle serve
    --log-level warning``), so that no event is kept while memory is counted."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        async with running_server() as server:
            yield server
    finally:
        structlog.reset_defaults()


async def test_an_idle_handshaken_connection_holds_under_a_kilobyte(
    quiet_server: CoordinatorServer,
) -> None:
    """Python heap per connection that said hello and went quiet: no deque of its own for
    frames in or out, no bound logger, one codec shared by all (3.6 KB before)."""
    hello = ClientCodec().encode(Handshake(version=PROTOCOL_VERSION, client_id="idle"))
    conns = []
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(CONNECTIONS):
            transport = ListTransport()
            transport.keep = False  # what the server writes is dropped
            conn = connection(quiet_server, transport)
            conn.data_received(hello)
            conns.append(conn)
        gc.collect()
        per_connection = (tracemalloc.get_traced_memory()[0] - before) / CONNECTIONS
    finally:
        tracemalloc.stop()
    assert all(c.handshaken for c in conns)
    assert per_connection < 1024, f"{per_connection:.0f} bytes per idle connection"
    for conn in conns:
        conn.connection_lost(None)


async def test_a_connections_events_name_it_its_peer_and_its_client(
    server: CoordinatorServer, logs: list[EventDict]
) -> None:
    raw = await RawClient.open(server.port)
    await raw.handshake(client_id="named")
    raw.writer.close()
    await wait_until(lambda: any(e["event"] == "connection_closed" for e in logs))
    (closed,) = [e for e in logs if e["event"] == "connection_closed"]
    assert closed["client_id"] == "named"
    assert closed["peer"].startswith("127.0.0.1:")
    assert isinstance(closed["conn_id"], int)
    assert "principal" not in closed  # bound once a SASL login names one


async def test_events_logged_while_a_request_is_handled_carry_its_connection() -> None:
    """The core's events name the connection whose request they come from: ``conn_id`` and
    ``client_id`` are bound in structlog's context while its frames are handled."""
    capture = structlog.testing.LogCapture()
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, capture])
    try:
        async with running_server() as server:
            raw = await RawClient.open(server.port)
            await raw.handshake(client_id="joiner")
            await raw.call(
                JoinGroupRequest(
                    group_id="g",
                    protocol_type="consumer",
                    protocols=[Protocol(name="range", metadata=b"")],
                    session_timeout_ms=10_000,
                    rebalance_timeout_ms=10_000,
                )
            )
            raw.writer.close()
    finally:
        structlog.reset_defaults()
    (required,) = [e for e in capture.entries if e["event"] == "member_id_required"]
    assert required["client_id"] == "joiner"
    assert isinstance(required["conn_id"], int)
    assert structlog.contextvars.get_contextvars() == {}  # nothing left bound after


def test_a_member_on_a_connection_of_its_own_costs_the_core_no_set() -> None:
    """The core's heap per idle member, one connection each (64-byte subscription and
    assignment): the member a connection holds is kept as one key, not a set of one
    (1,441 bytes per member before, 1,225 after)."""
    per_member = memory.measure(1_000, 1)
    assert per_member < 1_330, f"{per_member:.0f} bytes per member"
