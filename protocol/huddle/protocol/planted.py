"""The coordinator's one planted-bug switch left (``commit-fencing-off``), until the
coordinator takes its commit fencing as a part, as the member library takes its own
(``huddle.sim.planted`` holds the planted bugs and the faulty parts, and switches this on
while a run plants it). Nothing but ``huddle.coordinator.offsets`` consults it."""

from __future__ import annotations

_active: set[str] = set()


def planted(name: str) -> bool:
    """Whether the coordinator's bug ``name`` is planted right now."""
    return bool(_active) and name in _active
