"""Shared fixtures: a real coordinator server in-process on port 0, captured log events.

The transport and client suites run twice, on asyncio's own loop and on uvloop (which
``huddle serve`` uses): their transports differ in ways that matter to a Protocol.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path

import pytest
import structlog
from structlog.typing import EventDict

from huddle.coordinator.server import CoordinatorServer
from tests.helpers import fast_server_config, running_server

LoopFactory = Callable[[], asyncio.AbstractEventLoop]

try:
    import uvloop

    UVLOOP: LoopFactory | None = uvloop.new_event_loop
except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
    UVLOOP = None

ON_BOTH_LOOPS = frozenset(
    {
        "test_server.py",
        "test_server_badinput.py",
        "test_connection.py",
        "test_fairness.py",
        "test_security_server.py",
    }
)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, LoopFactory]:
    factories: dict[str, LoopFactory] = {"asyncio": asyncio.new_event_loop}
    if UVLOOP is not None and Path(str(item.path)).name in ON_BOTH_LOOPS:
        factories["uvloop"] = UVLOOP
    return factories


@pytest.fixture
def logs() -> Iterator[list[EventDict]]:
    """Every structlog event logged during the test, as dicts (nothing is rendered)."""
    with structlog.testing.capture_logs() as captured:
        yield captured


@pytest.fixture
async def server(logs: list[EventDict]) -> AsyncIterator[CoordinatorServer]:
    """A coordinator on 127.0.0.1 (port 0) with fast group rules, on the test's loop."""
    async with running_server(fast_server_config()) as running:
        yield running


@pytest.fixture
def bootstrap(server: CoordinatorServer) -> str:
    """``HOST:PORT`` of the ``server`` fixture, for ``huddle.client.connection.connect``."""
    return f"127.0.0.1:{server.port}"
