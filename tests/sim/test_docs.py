"""The simulator's documented example runs as written: the README's ``huddle sim run`` finds
the planted bug within the seeds it names and prints the README's replay command, which
replays the violation; docs/simulation.md and BENCHMARKS.md give the same numbers.

If a change moves the seed that first finds the bug, this test says so and what to write:
run the README's ``huddle sim run`` line and copy the ``replay:`` line it prints (and the
seed) into README.md, docs/simulation.md and BENCHMARKS.md section 11."""

from __future__ import annotations

import re
import shlex

import pytest

from huddle.cli import main
from tests.docs.readme import ROOT, examples, flat
from tests.sim.test_sim import PLANTED


def planted_example() -> tuple[str, str]:
    """The README's two commands: the run that finds the planted bug, and the replay."""
    (example,) = [e for e in examples() if "--plant " in e.code and "huddle sim replay" in e.code]
    run, replay = example.commands
    assert run.startswith("huddle sim run ")
    assert replay.startswith("huddle sim replay ")
    return run, replay


def test_the_readme_s_planted_bug_example_runs_as_written(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run, replay = planted_example()
    assert main(shlex.split(run)[1:], {}) == 1  # a violation found
    out = capsys.readouterr().out
    found = re.search(r"^  VIOLATION seed (\d+): exclusive-ownership: ", out, re.MULTILINE)
    assert found is not None, out
    printed = re.search(r"^  replay: (.*)$", out, re.MULTILINE)
    assert printed is not None, out
    assert printed.group(1) == replay, (
        f"the README shows `{replay}`, the run prints `{printed.group(1)}`: put the printed "
        "command (and its seed) in README.md, docs/simulation.md and BENCHMARKS.md"
    )
    assert main(shlex.split(replay)[1:], {}) == 1  # the violation, replayed
    replayed = capsys.readouterr().out.splitlines()
    assert replayed[-1].startswith("VIOLATION exclusive-ownership: ")

    seeds = int(re.search(r"--seeds (\d+)", run).group(1))  # type: ignore[union-attr]
    first = int(found.group(1))
    assert first < seeds
    readme = flat((ROOT / "README.md").read_text())
    assert f"is found within the first {seeds} seeds (seed {first} is the first)" in readme
    simulation = flat((ROOT / "docs" / "simulation.md").read_text())
    assert f"`{replay}`" in simulation
    assert f"session from the receive time {first}," in simulation
    assert f"{seeds} for the session counted from the receive time" in simulation
    benchmarks = flat((ROOT / "BENCHMARKS.md").read_text())
    assert f"| session-from-receive-time | cooperative-sticky | {first} |" in benchmarks
    assert f"{seeds} for the session counted from the receive time" in benchmarks
    assert PLANTED["session-from-receive-time"][1] == seeds  # what make test checks

    # the README says what the replay shows: the fault, and who processes what at once
    (cut,) = re.findall(
        r"^ +[\d.]+s #\d+ +partition member (\d+), (\d+) ms$", "\n".join(replayed), re.M
    )
    violation = re.search(r"exclusive-ownership: (.+ at once) \(", replayed[-1])
    assert violation is not None
    assert (
        f"a network partition cuts member {cut[0]} off from the coordinator ({cut[1]} ms" in readme
    )
    assert f"and {violation.group(1)}." in readme
    assert f"is processed by members {cut[0]} and " in violation.group(1)
    assert "frozen member" not in readme
