"""Shrinking a failing run: the same invariant broken with as few of its faults as can be found.

Faults are left out in halves, then quarters, and so on down to one at a time (delta
debugging); a smaller set is kept whenever its run still breaks the same invariant. Fewer
faults make fewer steps too: each run stops at its first violation.
"""

from __future__ import annotations

from huddle.protocol.errors import InvalidArgumentError
from huddle.sim.world import Outcome, SimConfig, simulate

MAX_RUNS = 200


def shrink(seed: int, config: SimConfig, failed: Outcome, max_runs: int = MAX_RUNS) -> Outcome:
    violation = failed.violation
    if violation is None:
        raise InvalidArgumentError("only a failing run can be shrunk")
    best = failed
    kept = list(failed.kept)
    chunk = max(len(kept) // 2, 1)
    runs = 0
    while kept and runs < max_runs:
        start = 0
        removed = False
        while start < len(kept) and runs < max_runs:
            candidate = kept[:start] + kept[start + chunk :]
            runs += 1
            outcome = simulate(seed, config, keep=candidate)
            broken = outcome.violation
            if broken is not None and broken.invariant == violation.invariant:
                kept, best, removed = candidate, outcome, True
            else:
                start += chunk
        if chunk == 1 and not removed:
            break
        if not removed:
            chunk = max(chunk // 2, 1)
    return best
