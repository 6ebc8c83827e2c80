"""The faults of one run, drawn from its seed before it starts.

A plan is drawn from its own random stream (the seed's), so the faults of a seed are the
same whatever else the run draws, and leaving some of them out (to shrink a failing run)
keeps the others as they were.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from huddle.protocol.errors import InvalidArgumentError

KINDS = (
    "drop",  # a member's connection is reset
    "partition",  # a member and the coordinator cannot reach each other, then heal
    "pause",  # a member process freezes for longer than its session timeout (a zombie)
    "crash",  # a member process dies, and starts again (static members keep their id)
    "slow-callback",  # the next revocation (any member's) outlasts the session timeout
    "coordinator-crash",  # the coordinator dies and starts again with its data dir
    "partition-count",  # the topic's partition count changes
    "false-claim",  # a member rejoins claiming, in its generation, a partition another owns
)
FAULTS_START_MS = 2_000.0  # the group forms first
FAULT_SPACING_MS = 1_000.0  # faults come this far apart on average


@dataclass(frozen=True, slots=True)
class Fault:
    number: int  # its place in the seed's plan
    at: float  # ms of simulated time
    kind: str
    member: int  # which member (unused by coordinator faults)
    duration: float  # ms (partition, pause, crash downtime, callback, coordinator downtime)
    value: int = 0  # the new partition count

    @property
    def ends(self) -> float:
        """When its effect is over: a slow callback may begin until ``duration`` after the
        fault (a revocation begun later is not slowed) and lasts ``duration``."""
        return self.at + (2 * self.duration if self.kind == "slow-callback" else self.duration)

    def describe(self) -> str:
        at = f"{self.at / 1000:8.3f}s #{self.number:<2} {self.kind}"
        match self.kind:
            case "drop":
                return f"{at} member {self.member}"
            case "partition-count":
                return f"{at} -> {self.value} partitions"
            case "coordinator-crash":
                return f"{at} down {self.duration:.0f} ms"
            case "slow-callback":
                return f"{at} next revocation, {self.duration:.0f} ms"
            case _:
                return f"{at} member {self.member}, {self.duration:.0f} ms"


def plan_faults(
    seed: int,
    count: int,
    *,
    members: int,
    partitions: int,
    session_ms: float,
    rebalance_ms: float,
    kinds: tuple[str, ...] = KINDS,
) -> list[Fault]:
    """``count`` faults of the given kinds, in time order."""
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise InvalidArgumentError(
            f"unknown fault kinds {sorted(unknown)}; known: {', '.join(KINDS)}"
        )
    rng = random.Random(f"huddle-sim-faults-{seed}")
    span = count * FAULT_SPACING_MS
    times = sorted(FAULTS_START_MS + rng.random() * span for _ in range(count))
    plan = []
    for number, at in enumerate(times):
        kind = rng.choice(kinds) if kinds else "drop"
        member = rng.randrange(members)
        duration = 0.0
        value = 0
        match kind:
            case "partition":
                duration = rng.uniform(0.2, 2.0) * session_ms
            case "pause":
                duration = rng.uniform(1.05, 2.0) * session_ms
            case "crash":
                duration = rng.uniform(0.0, 2.0) * session_ms
            case "slow-callback":
                duration = rng.uniform(session_ms, 0.9 * rebalance_ms)
            case "coordinator-crash":
                duration = rng.uniform(0.1, 1.5) * session_ms
            case "partition-count":
                value = rng.randint(max(1, partitions // 2), partitions + partitions // 2)
        plan.append(Fault(number, at, kind, member, duration, value))
    return plan
