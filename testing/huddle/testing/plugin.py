"""huddle's pytest plugin, registered by ``pip install huddle`` (entry point ``pytest11``).

Fixtures:

* ``huddle_coordinator``: a ``CoordinatorProcess`` (``huddle serve`` on a free loopback
  port, with a temporary data dir), started for the test and stopped after it. Settings
  through the marker: ``@pytest.mark.huddle_coordinator(flags=["--max-group-size", "3"],
  data_dir=False)``.
* ``huddle_members``: a ``MemberSet`` on that coordinator; ``async with
  huddle_members.running() as members`` starts, stops and kills members, each in its own
  task.

Both are plain (synchronous) fixtures: they work under pytest-asyncio and under anyio's
pytest plugin alike. ``huddle.testing.wait_settled`` is the assertion that a group settles.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # imported when a test asks for a fixture, not when pytest starts
    from huddle.testing.coordinator import CoordinatorProcess
    from huddle.testing.members import MemberSet


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "huddle_coordinator(flags=[...], data_dir=True): settings of the huddle_coordinator "
        "fixture (huddle serve flags; data_dir=False: no data dir)",
    )


@pytest.fixture
def huddle_coordinator(request: pytest.FixtureRequest) -> Iterator[CoordinatorProcess]:
    """``huddle serve`` for this test: ``.bootstrap``, ``.log``, ``.kill()``, ``.restart()``."""
    from huddle.testing.coordinator import CoordinatorProcess

    marker = request.node.get_closest_marker("huddle_coordinator")
    options = dict(marker.kwargs) if marker is not None else {}
    coordinator = CoordinatorProcess(
        options.get("flags", ()), keep_data=bool(options.get("data_dir", True))
    )
    with coordinator:
        yield coordinator


@pytest.fixture
def huddle_members(huddle_coordinator: CoordinatorProcess) -> MemberSet:
    """Members of ``huddle_coordinator``'s groups: ``async with huddle_members.running()``."""
    from huddle.testing.members import MemberSet

    return MemberSet(huddle_coordinator.bootstrap)
