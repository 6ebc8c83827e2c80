"""``python -m bench.sim --trace-digests N``: the check that a change to the simulator keeps
every run as it was. Its digest must be the same for the same seeds, and tell apart any
difference in what a run did."""

from __future__ import annotations

import pytest

from bench.sim import trace_digest
from huddle.sim import SimConfig, runtime
from huddle.sim.world import simulate


def test_the_same_seeds_give_the_same_digest_and_one_more_seed_another() -> None:
    assert trace_digest("range", 2) == trace_digest("range", 2)
    assert trace_digest("range", 2) != trace_digest("range", 3)
    assert trace_digest("range", 2) != trace_digest("sticky", 2)


def test_it_reads_the_detail_lines_a_run_s_own_digest_leaves_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a run's own digest skips detail lines (requests, answers, member logs); the trace
    # digest reads them: a change that shows only there still changes it
    before = trace_digest("range", 1)
    run_before = simulate(0, SimConfig(protocol="range")).digest
    monkeypatch.setattr(runtime, "short", lambda message: type(message).__name__)
    assert simulate(0, SimConfig(protocol="range")).digest == run_before
    assert trace_digest("range", 1) != before
