"""Shared fixtures: a real coordinator server in-process on port 0, captured log events.

The transport and client suites run twice, on asyncio's own loop and on uvloop (which
``huddle serve`` uses): their transports differ in ways that matter to a Protocol.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path

import pytest
import structlog
from hypothesis import settings
from structlog.typing import EventDict

from huddle.coordinator.server import CoordinatorServer
from tests.helpers import fast_server_config, running_server

# Hypothesis's per-example deadline (200 ms) measures the machine, not the code: on two
# cores shared with the suite's other workers an example now and then takes longer, and the
# test fails as flaky. Every property still runs all its examples.
settings.register_profile("huddle", deadline=None)
settings.load_profile("huddle")

LoopFactory = Callable[[], asyncio.AbstractEventLoop]

try:
    import uvloop

    UVLOOP: LoopFactory | None = uvloop.new_event_loop
except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
    UVLOOP = None

ON_BOTH_LOOPS = frozenset(  # paths under tests/
    {
        "coordinator/test_server.py",
        "coordinator/test_server_badinput.py",
        "client/test_connection.py",
        "coordinator/test_fairness.py",
        "security/test_server.py",
        "security/test_tls_reload.py",
    }
)
TESTS = Path(__file__).resolve().parent


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, LoopFactory]:
    factories: dict[str, LoopFactory] = {"asyncio": asyncio.new_event_loop}
    path = Path(item.path)
    where = path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else None
    if UVLOOP is not None and where in ON_BOTH_LOOPS:
        factories["uvloop"] = UVLOOP
    return factories


class _LibraryEvents(logging.Handler):
    """The member library's events (through ``logging``, see ``huddle.logs``), into the
    same list as structlog's captured ones, shaped as ``capture_logs`` shapes them."""

    def __init__(self, into: list[EventDict]) -> None:
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, dict):
            event = {k: v for k, v in record.msg.items() if k not in ("timestamp", "logger")}
            event["log_level"] = event.pop("level", record.levelname.lower())
            self.into.append(event)


@pytest.fixture
def logs() -> Iterator[list[EventDict]]:
    """Every event logged during the test, as dicts (nothing is rendered): structlog's, and
    the member library's (which go through ``logging``)."""
    library = logging.getLogger("huddle")
    level = library.level
    with structlog.testing.capture_logs() as captured:
        handler = _LibraryEvents(captured)
        library.addHandler(handler)
        library.setLevel(logging.DEBUG)
        try:
            yield captured
        finally:
            library.removeHandler(handler)
            library.setLevel(level)


@pytest.fixture
async def server(logs: list[EventDict]) -> AsyncIterator[CoordinatorServer]:
    """A coordinator on 127.0.0.1 (port 0) with fast group rules, on the test's loop."""
    async with running_server(fast_server_config()) as running:
        yield running


@pytest.fixture
def bootstrap(server: CoordinatorServer) -> str:
    """``HOST:PORT`` of the ``server`` fixture, for ``huddle.client.connection.connect``."""
    return f"127.0.0.1:{server.port}"
