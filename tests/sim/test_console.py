"""``huddle sim run`` keeps the simulated members' own log events off the console; ``huddle
sim replay`` shows them in its step log (issue 24, item 14)."""

from __future__ import annotations

import logging
import subprocess
import sys

from huddle.sim import SimConfig, simulate
from huddle.sim.steplog import MEMBER_LOGGERS

MEMBER_EVENTS = ("session_expired_locally", "listener_too_slow")


def huddle(*argv: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it: nothing set up for logging, so a library's warnings
    would reach stderr through Python's last-resort handler."""
    return subprocess.run(
        [sys.executable, "-m", "huddle", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_sim_run_prints_its_summary_and_none_of_the_members_warnings() -> None:
    done = huddle("sim", "run", "--seeds", "3", "--protocol", "cooperative-sticky")
    assert done.returncode == 0, done.stderr
    assert "cooperative-sticky    3 seeds, 0 violations" in done.stdout
    assert "cooperative-sticky: 3/3 seeds, 0 violations" in done.stderr  # its own progress
    for event in MEMBER_EVENTS:
        assert event not in done.stderr
        assert event not in done.stdout
    assert done.stderr.count("\n") == 3, done.stderr  # the progress lines only


def test_sim_replay_shows_the_members_events_in_its_step_log() -> None:
    done = huddle("sim", "replay", "0")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    steps = done.stdout.splitlines()
    expired = [line for line in steps if "logs warning session_expired_locally" in line]
    assert expired, "the seed's session expiries are in the step log"
    assert all(": logs warning" in line and " member " in line for line in expired)
    assert any("logs info member_synced" in line for line in steps)


def test_the_member_loggers_are_as_they_were_after_a_run() -> None:
    before = [
        (log.handlers, log.propagate, log.level) for log in map(logging.getLogger, MEMBER_LOGGERS)
    ]
    lines: list[str] = []
    simulate(0, SimConfig(members=4, partitions=8, faults=6), tracer=lines.append)
    after = [
        (log.handlers, log.propagate, log.level) for log in map(logging.getLogger, MEMBER_LOGGERS)
    ]
    assert after == before
    assert any(" logs " in line for line in lines)
