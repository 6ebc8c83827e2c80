"""The coordinator core's parts that a core is given: the commit fence (the seam through
which the simulator plants ``commit-fencing-off``; production cores use the default)."""

from __future__ import annotations

from huddle.coordinator.core import Coordinator
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import CreateTopicsRequest, TopicSpec
from huddle.sim.faulty_offsets import commits_from_any_generation, planted_commit_fence
from tests.harness import Driver

E = ErrorCode


def stale_commit(d: Driver) -> int:
    """A member of generation 1 commits after generation 2 formed: its code."""
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=4)]))
    a, _b = d.form(1, 2)
    return d.commit(1, {("t", 0): 1}, member_id=a, generation=1).error_code


def test_a_core_fences_commits_by_generation_unless_given_another_fence() -> None:
    assert stale_commit(Driver()) == E.ILLEGAL_GENERATION
    d = Driver()
    d.core = Coordinator(d.config, commit_fence=commits_from_any_generation)
    assert stale_commit(d) == E.NONE  # the planted bug, through the seam


def test_the_simulators_fence_fences_while_nothing_is_planted() -> None:
    d = Driver()
    d.core = Coordinator(d.config, commit_fence=planted_commit_fence)
    assert stale_commit(d) == E.ILLEGAL_GENERATION
