"""The simulator's check that a member loses partitions only with a cause (issue 24, item 13):
"assigned, lost, assigned" in one generation within milliseconds, found by seed 77."""

from __future__ import annotations

import re

from huddle.sim import SimConfig, simulate
from huddle.sim.invariants import INVARIANTS


def test_a_member_back_in_its_generation_keeps_what_it_is_assigned_there() -> None:
    """Seed 77, its first fault only: member 0 is partitioned from the coordinator for
    2.6 s. Its session runs out meanwhile and it loses its partitions; the coordinator,
    whose count of the session began later, still has it when the partition heals, so its
    rejoin (an unchanged subscription) is answered with generation 1 again and the same
    partitions. The expiry queued before the rejoin named generation 1 too, and took them
    away a few milliseconds later: ``lost-with-a-cause`` on the code before the fix."""
    lines: list[str] = []
    outcome = simulate(77, SimConfig(), keep=[0], tracer=lines.append)
    assert outcome.violation is None, outcome.violation
    callbacks = [
        (m.group(1), m.group(2))
        for line in lines
        if (m := re.search(r"member 0: (on_partitions_\w+) partitions=([\d,]*)", line))
    ]
    owned = "2,10,18,26"
    assert callbacks[-3:] == [
        ("on_partitions_assigned", owned),
        ("on_partitions_lost", owned),  # the session ran out during the partition
        ("on_partitions_assigned", owned),  # back in generation 1: and it stays so
    ]
    lost_at = next(i for i, line in enumerate(lines) if "member 0: on_partitions_lost" in line)
    joins = [line for line in lines[lost_at:] if re.search(r"member 0: sends.*JoinGroup", line)]
    assert len(joins) == 1  # one rejoin after the loss, not a second one for a stale loss


def test_the_invariant_is_listed() -> None:
    assert "lost-with-a-cause" in INVARIANTS
