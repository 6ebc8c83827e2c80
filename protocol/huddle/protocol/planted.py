"""Known bugs that can be planted back, to prove the simulator finds them.

``huddle sim run --plant NAME`` (and the simulator's tests) switch one on for a run; nothing
else does, and with none planted each check costs one lookup in an empty set. Every name is
a safety rule huddle keeps, turned off:

- ``commit-fencing-off``: the coordinator accepts commits from any generation of a member;
- ``tie-handed-out``: two claims on a partition tied in one generation no longer cancel out,
  the first claimant keeps it;
- ``session-from-receive-time``: zombie safety counts a member's session from when a
  heartbeat's answer arrived instead of when the heartbeat was sent;
- ``leader-check-skipped``: the cooperative leader no longer withholds a partition another
  member still owns (the sticky assignors' withholding and the leader's check of the result
  are both skipped), so it moves in one round;
- ``heartbeats-paused-in-callbacks``: a member stops heartbeating while its callbacks run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

BUGS = frozenset(
    {
        "commit-fencing-off",
        "tie-handed-out",
        "session-from-receive-time",
        "leader-check-skipped",
        "heartbeats-paused-in-callbacks",
    }
)
_active: set[str] = set()


def planted(name: str) -> bool:
    """Whether the bug ``name`` is planted right now."""
    return bool(_active) and name in _active


@contextmanager
def planting(names: Iterable[str]) -> Iterator[None]:
    """Plant ``names`` for the duration of the block."""
    wanted = set(names)
    unknown = wanted - BUGS
    if unknown:
        raise ValueError(f"no such planted bug: {sorted(unknown)}; known: {sorted(BUGS)}")
    before = set(_active)
    _active.update(wanted)
    try:
        yield
    finally:
        _active.clear()
        _active.update(before)
