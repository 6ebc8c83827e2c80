"""The member library is quiet unless asked: its events go to ``logging`` under ``huddle.*``
names, never to stdout; unconfigured, only warnings and errors reach stderr."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import textwrap

import pytest

from huddle.logs import library_logger
from tests.helpers import DEADLINE_S, serve_process

SCRIPT = textwrap.dedent(
    """
    import json, logging, sys
    import anyio
    from huddle.client.admin import Admin
    from huddle.client.member import Member

    if sys.argv[2] == "configured":
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")

    async def main() -> None:
        bootstrap = sys.argv[1]
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", 4)
        async with Member(bootstrap, group_id="g", topics=["t"]) as a, Member(
            bootstrap, group_id="g", topics=["t"]
        ) as b:
            # b may be stable in the round where a revokes its half, before a rejoins for
            # the follow-up that hands it over: wait for both rounds, with a deadline
            with anyio.fail_after(20):
                while len(a.assignment) + len(b.assignment) < 4:
                    await a.wait_stable()
                    await b.wait_stable()
                    await anyio.sleep(0.05)
            owned = len(a.assignment) + len(b.assignment)
        print(json.dumps({"owned": owned}))

    anyio.run(main)
    """
)


async def run_script(bootstrap: str, mode: str) -> tuple[str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SCRIPT,
        bootstrap,
        mode,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 3 * DEADLINE_S)
    assert process.returncode == 0, err.decode()
    return out.decode(), err.decode()


@pytest.mark.e2e
async def test_a_script_with_two_members_prints_only_its_own_output() -> None:
    async with serve_process() as (_, port, _events):
        out, err = await run_script(f"127.0.0.1:{port}", "unconfigured")
    assert out.splitlines() == [json.dumps({"owned": 4})]  # nothing of huddle's on stdout
    assert "member_connected" not in err  # info events stay quiet, unasked


@pytest.mark.e2e
async def test_an_application_that_configures_logging_gets_the_events() -> None:
    async with serve_process() as (_, port, _events):
        out, err = await run_script(f"127.0.0.1:{port}", "configured")
    assert out.splitlines() == [json.dumps({"owned": 4})]
    lines = err.splitlines()
    assert any(line.startswith("huddle.member member_connected group_id='g'") for line in lines)


def test_warnings_reach_stderr_without_any_configuration(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # as if nothing were set up: no handler anywhere, so logging's last resort prints
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(logging.getLogger("huddle"), "handlers", [])
    log = library_logger("huddle.test").bind(group_id="g")
    log.info("quiet_event")
    log.warning("loud_event", reason="x")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "quiet_event" not in captured.err
    assert "loud_event group_id='g' reason='x'" in captured.err


def test_an_event_below_the_level_is_dropped_before_it_is_rendered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a member logs on every heartbeat error and rejoin: at a level logging drops, the
    # event must cost one check, not a timestamp and a rendering (the simulator runs
    # millions of them)
    from huddle import logs

    rendered: list[str] = []

    def spy(logger: object, method: str, event: dict[str, object]) -> dict[str, object]:
        rendered.append(str(event["event"]))
        return event

    processors = [*logs._LIBRARY_PROCESSORS[:-1], spy, logs._LIBRARY_PROCESSORS[-1]]
    monkeypatch.setattr(logs, "_LIBRARY_PROCESSORS", processors)
    monkeypatch.setattr(logging.getLogger("huddle.test.level"), "level", logging.WARNING)
    log = library_logger("huddle.test.level").bind(group_id="g")
    log.info("below")
    log.debug("below too")
    log.warning("at")
    assert rendered == ["at"]
