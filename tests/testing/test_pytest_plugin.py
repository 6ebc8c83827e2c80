"""huddle's pytest plugin as a user meets it: installed with huddle (entry point), its
fixtures under pytest-asyncio and under anyio's plugin, faults, and the settle assertion."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.e2e  # each test runs a coordinator process
SCOPE = "asyncio_default_fixture_loop_scope=function"

GROUP_TEST = """
from huddle.client.admin import Admin
from huddle.testing import wait_settled


{marker}
async def test_a_group_settles_and_survives_a_killed_member(huddle_coordinator, huddle_members):
    async with Admin(huddle_coordinator.bootstrap) as admin:
        await admin.create_topic("t", 4)
    async with huddle_members.running() as members:
        a = await members.start("a", group_id="g", topics=["t"])
        b = await members.start("b", group_id="g", topics=["t"])
        await wait_settled([a, b], {{"t": 4}}, within=20)
        await members.kill("a")
        await wait_settled([b], {{"t": 4}}, within=20)
        assert set(members.members) == {{"b"}}
    assert huddle_coordinator.events("member_removed")
"""


def test_the_fixtures_under_pytest_asyncio(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(GROUP_TEST.format(marker=""))
    result = pytester.runpytest("-o", "asyncio_mode=auto", "-o", SCOPE)
    result.assert_outcomes(passed=1)


def test_the_fixtures_under_anyio(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        GROUP_TEST.format(marker="@pytest.mark.anyio").replace(
            "from huddle.client.admin import Admin",
            "import pytest\nfrom huddle.client.admin import Admin",
        )
    )
    pytester.makeconftest(
        """
import pytest

@pytest.fixture
def anyio_backend():
    return "asyncio"
"""
    )
    result = pytester.runpytest("-o", "asyncio_mode=strict", "-o", SCOPE)
    result.assert_outcomes(passed=1)


def test_a_coordinator_killed_and_restarted_keeps_its_topics(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
import pytest
from huddle.client.admin import Admin
from huddle.client import MemberFailedError
from huddle.testing import wait_settled


@pytest.mark.huddle_coordinator(flags=["--max-group-size", "1"])
async def test_faults(huddle_coordinator, huddle_members):
    async with Admin(huddle_coordinator.bootstrap) as admin:
        await admin.create_topic("t", 2)
    huddle_coordinator.kill()
    assert not huddle_coordinator.running
    huddle_coordinator.restart()
    async with Admin(huddle_coordinator.bootstrap) as admin:
        assert await admin.list_topics() == {"t": 2}  # its data dir kept it
    async with huddle_members.running() as members:
        a = await members.start("a", group_id="g", topics=["t"])
        await wait_settled([a], {"t": 2}, within=20)
        b = await members.start("b", group_id="g", topics=["t"])  # the group is full
        with pytest.raises(MemberFailedError, match="GROUP_MAX_SIZE_REACHED"):
            await wait_settled([a, b], {"t": 2}, within=30)  # at once, not in 30 s
"""
    )
    result = pytester.runpytest("-o", "asyncio_mode=auto", "-o", SCOPE)
    result.assert_outcomes(passed=1)


def test_the_plugin_loads_nothing_heavy_when_pytest_starts() -> None:
    import subprocess
    import sys

    script = (
        "import sys, huddle.testing.plugin; "
        "print(sorted(m for m in sys.modules if m.startswith(('huddle.client', 'anyio', "
        "'prometheus_client', 'huddle.coordinator'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


def test_a_coordinator_that_does_not_start_leaves_nothing_behind() -> None:
    from pathlib import Path

    from huddle.testing.coordinator import CoordinatorError, CoordinatorProcess

    coordinator = CoordinatorProcess(["--max-group-size", "-5"])
    data_dir = coordinator.data_dir
    assert data_dir is not None
    assert Path(data_dir).is_dir()
    with pytest.raises(CoordinatorError, match="did not start"), coordinator:
        pass
    assert not Path(data_dir).exists()
