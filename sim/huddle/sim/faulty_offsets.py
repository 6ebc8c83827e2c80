"""The coordinator's faulty parts the simulator plants (``huddle sim run --plant``).

The core is given its commit fence (``huddle.coordinator.offsets.CommitFence``); the
simulator's coordinator gets ``planted_commit_fence``, which lets every commit through while
``commit-fencing-off`` is planted and fences as the core does otherwise. The switch it reads
is set by ``huddle.sim.planted.planting`` for the duration of a run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from huddle.coordinator.group import Group
from huddle.coordinator.offsets import fence_by_generation
from huddle.coordinator.values import Refusal

_active: set[str] = set()  # the coordinator's bugs planted right now (``planting`` sets it)


def planted(name: str) -> bool:
    """Whether the coordinator's bug ``name`` is planted right now."""
    return bool(_active) and name in _active


@contextmanager
def planted_during(names: Iterable[str]) -> Iterator[None]:
    """The coordinator's bugs ``names`` planted for the duration of the block, on top of
    those planted already (``huddle.sim.planted.planting``)."""
    before = set(_active)
    _active.update(names)
    try:
        yield
    finally:
        _active.clear()
        _active.update(before)


def commits_from_any_generation(group: Group, generation: int) -> Refusal | None:
    """``commit-fencing-off``: a member's commit is accepted whatever its generation."""
    return None


def planted_commit_fence(group: Group, generation: int) -> Refusal | None:
    """The fence the simulator's coordinator uses: faulty while ``commit-fencing-off`` is
    planted (a run plants its bugs after the coordinator is built, and a restarted one is
    built again meanwhile), else the core's own."""
    if planted("commit-fencing-off"):
        return commits_from_any_generation(group, generation)
    return fence_by_generation(group, generation)
