"""Scenarios: timed steps the harness applies to a running group.

A scenario is data: a list of ``Step(at=seconds, action=..., target=..., value=...)``.
The built-in ones mirror Kafka's system tests and scale with the run's duration and
member count; a file holds the same thing as JSON::

    {"name": "my-run", "static": false,
     "steps": [{"at": 2, "action": "kill", "target": "member-2"},
               {"at": 4, "action": "start", "target": "member-2"},
               {"at": 5, "action": "net_latency", "value": 200},
               {"at": 6, "action": "net_heal"}]}

Actions: ``start`` (a member by name; restarts it if it ran before), ``kill`` (SIGKILL),
``sigterm``, ``sigstop``, ``sigcont``, ``scale_up`` / ``scale_down`` (``value`` members),
``coordinator_kill``, ``coordinator_start``, ``net_latency`` (``value`` ms), ``net_stall``,
``net_drop``, ``net_partition``, ``net_heal``; and, against a cluster of coordinator
nodes on etcd that the harness then starts, ``owner_kill`` (SIGKILL the node that owns the
group), ``owner_stop`` (SIGSTOP it) and ``owner_cont`` (SIGCONT the node stopped last),
``etcd_stop`` / ``etcd_cont``, ``etcd_kill`` / ``etcd_start`` (etcd frozen; killed and started
again), ``store_freeze`` / ``store_reset`` / ``store_mute`` / ``store_heal`` (the owner's
link to etcd; ``store_mute``: its open connections drop what it sends, one way) and
``client_freeze`` / ``client_heal`` (its link to its clients): see ``huddle.chaos.cluster``.
``target`` may be omitted for ``kill`` and ``sigterm``: the harness then picks a live member
with the run's seeded RNG.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from huddle.protocol.errors import HuddleError

MEMBER_ACTIONS: Final = frozenset({"start", "kill", "sigterm", "sigstop", "sigcont"})
GROUP_ACTIONS: Final = frozenset({"scale_up", "scale_down"})
COORDINATOR_ACTIONS: Final = frozenset({"coordinator_kill", "coordinator_start"})
# a cluster of coordinator nodes on etcd: the node that owns the run's group
CLUSTER_ACTIONS: Final = frozenset(
    {
        "owner_kill",
        "owner_stop",
        "owner_cont",
        "etcd_stop",
        "etcd_cont",
        "etcd_kill",
        "etcd_start",
        "store_freeze",
        "store_reset",
        "store_mute",
        "store_heal",
        "client_freeze",
        "client_heal",
    }
)
NET_ACTIONS: Final = frozenset(
    {"net_latency", "net_stall", "net_drop", "net_partition", "net_heal"}
)
ACTIONS: Final = (
    MEMBER_ACTIONS | GROUP_ACTIONS | COORDINATOR_ACTIONS | NET_ACTIONS | CLUSTER_ACTIONS
)


CLUSTER_LEASE_S: Final = 2.0  # the lease of the harness's cluster nodes


class ScenarioError(HuddleError, ValueError):
    """A scenario that cannot run: unknown name or action, a bad file."""


@dataclass(frozen=True, slots=True)
class Step:
    at: float  # seconds after the members were started
    action: str
    target: str | None = None
    value: float | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ScenarioError(f"unknown action {self.action!r}; known: {sorted(ACTIONS)}")
        if self.at < 0:
            raise ScenarioError(f"step at {self.at} s: time must be >= 0")
        if self.action in {"start", "sigstop", "sigcont"} and not self.target:
            raise ScenarioError(f"{self.action} at {self.at} s needs a target member")


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str = ""
    steps: tuple[Step, ...] = ()
    static: bool = False  # members get instance ids (KIP-345)
    extra: dict[str, Any] = field(default_factory=dict)

    def ordered(self) -> list[Step]:
        return sorted(self.steps, key=lambda s: s.at)

    @property
    def coordinator_faults(self) -> bool:
        """Whether some step kills or starts the coordinator (the harness's own one)."""
        return any(step.action in COORDINATOR_ACTIONS for step in self.steps)

    @property
    def cluster(self) -> bool:
        """Whether the run needs a coordinator cluster (etcd and three nodes)."""
        return any(step.action in CLUSTER_ACTIONS for step in self.steps)

    @property
    def network_faults(self) -> bool:
        """Whether some step needs the fault proxy between members and coordinator."""
        return any(step.action in NET_ACTIONS for step in self.steps)


@dataclass(frozen=True, slots=True)
class Shape:
    """What a built-in scenario is sized by."""

    duration: float
    members: int
    seed: int = 0
    session_timeout_s: float = 3.0


def member(i: int) -> str:
    return f"member-{i}"


def _victim(shape: Shape) -> str:
    return member(min(2, shape.members))


def process_death(s: Shape) -> Scenario:
    d = s.duration
    return Scenario(
        "process-death",
        "SIGKILL one member at 30% of the run, start it again at 60%",
        (Step(0.3 * d, "kill", _victim(s)), Step(0.6 * d, "start", _victim(s))),
    )


BOUNCE_DOWN_S: Final = 0.3  # a bounced member is started again this long after its SIGTERM


def _bounce_steps(s: Shape, *, start: float, down_s: float) -> list[Step]:
    span = 0.6 * s.duration
    pause = span / max(s.members, 1)
    steps = []
    for i in range(1, s.members + 1):
        t = start + (i - 1) * pause
        steps += [Step(t, "sigterm", member(i)), Step(t + down_s, "start", member(i))]
    return steps


def rolling_bounce(s: Shape) -> Scenario:
    return Scenario(
        "rolling-bounce",
        "SIGTERM every member in turn and start it again, with a pause between members",
        tuple(_bounce_steps(s, start=0.2 * s.duration, down_s=BOUNCE_DOWN_S)),
    )


def static_bounce(s: Shape) -> Scenario:
    return Scenario(
        "static-bounce",
        "static members (instance ids) bounced in turn, each back within its session timeout",
        tuple(_bounce_steps(s, start=0.2 * s.duration, down_s=BOUNCE_DOWN_S)),
        static=True,
    )


def scale_up(s: Shape) -> Scenario:
    more = max(s.members // 2, 1)
    return Scenario(
        "scale-up",
        f"add {more} member(s) at 30% of the run and {more} more at 55%",
        (
            Step(0.3 * s.duration, "scale_up", value=more),
            Step(0.55 * s.duration, "scale_up", value=more),
        ),
    )


def scale_down(s: Shape) -> Scenario:
    fewer = max(min(s.members // 2, s.members - 1), 0)
    return Scenario(
        "scale-down",
        f"SIGTERM the {fewer} newest member(s) at 30% of the run",
        (Step(0.3 * s.duration, "scale_down", value=fewer),) if fewer else (),
    )


def zombie(s: Shape) -> Scenario:
    frozen_s = min(2.5 * s.session_timeout_s, 0.5 * s.duration)
    t = 0.25 * s.duration
    return Scenario(
        "zombie",
        "SIGSTOP one member past its session timeout, then SIGCONT it",
        (Step(t, "sigstop", _victim(s)), Step(t + frozen_s, "sigcont", _victim(s))),
    )


def coordinator_restart(s: Shape) -> Scenario:
    t = 0.3 * s.duration
    return Scenario(
        "coordinator-restart",
        "SIGKILL the coordinator at 30% of the run, start it again 1 s later on the same port",
        (Step(t, "coordinator_kill"), Step(t + 1.0, "coordinator_start")),
    )


def coordinator_failover(s: Shape) -> Scenario:
    d = s.duration
    frozen_s = min(max(0.15 * d, CLUSTER_LEASE_S + 2.0), 0.3 * d)
    return Scenario(
        "coordinator-failover",
        "etcd and three coordinator nodes: SIGKILL the node owning the group at 25% of the "
        f"run, then SIGSTOP the new owner at 55% for {frozen_s:.0f} s (past its "
        f"{CLUSTER_LEASE_S:.0f} s lease) and SIGCONT it",
        (
            Step(0.25 * d, "owner_kill"),
            Step(0.55 * d, "owner_stop"),
            Step(0.55 * d + frozen_s, "owner_cont"),
        ),
    )


ETCD_FAULT_GAP_S: Final = 3.0  # from one heal to the next fault (the recovery is measured)
# each fault, its heal (None: it heals itself) and how long it lasts (seconds, from .. to)
ETCD_FAULTS: Final[tuple[tuple[str, str | None, float, float], ...]] = (
    ("etcd_stop", "etcd_cont", 1.5, 2.7),
    ("etcd_kill", "etcd_start", 0.5, 2.0),
    ("owner_stop", "owner_cont", CLUSTER_LEASE_S + 0.5, CLUSTER_LEASE_S + 1.5),  # past its lease
    ("store_freeze", "store_heal", 1.5, 3.5),
    ("store_reset", None, 0.0, 0.0),  # the reset, with calls in flight, is its own heal
    ("store_mute", None, 0.0, 0.0),  # its open connections drop what it sends: it reconnects
    ("client_freeze", "client_heal", 1.5, 3.0),
    ("sigstop", "sigcont", 1.0, 2.0),  # a member
)


ETCD_FAULT_ACTIONS: Final = frozenset(fault for fault, _, _, _ in ETCD_FAULTS)


def etcd_fault_steps(
    seed: int, members: int, gap_s: float, *, count: int | None = None, within_s: float = 0.0
) -> tuple[Step, ...]:
    """Faults of ``ETCD_FAULTS`` in turn, each healed before the next (seeded durations; a
    frozen member picked with the seed), the next ``gap_s`` after a heal: ``count`` of them,
    or as many as end within ``within_s`` (one at least)."""
    rng = random.Random(seed)
    steps: list[Step] = []
    t = 0.5
    for i in itertools.count():
        fault, heal, low, high = ETCD_FAULTS[i % len(ETCD_FAULTS)]
        if count is not None and i >= count:
            break
        if count is None and i > 0 and t + high >= within_s:
            break
        target = member(rng.randint(1, members)) if fault == "sigstop" else None
        steps.append(Step(t, fault, target))
        if heal is not None:
            t = round(t + rng.uniform(low, high), 2)
            steps.append(Step(t, heal, target))
        t += gap_s
    return tuple(steps)


def etcd_faults(s: Shape) -> Scenario:
    """A fault campaign against the cluster and its etcd, one fault at a time, each healed
    and recovered from before the next."""
    steps = etcd_fault_steps(s.seed, s.members, ETCD_FAULT_GAP_S, within_s=s.duration)
    count = sum(1 for step in steps if step.action in ETCD_FAULT_ACTIONS)
    return Scenario(
        "etcd-faults",
        f"{count} faults in a row, each healed, the next {ETCD_FAULT_GAP_S:g} s later: etcd "
        "frozen (SIGSTOP), killed and started again, the group's owner frozen past its lease, "
        "its links to etcd and to its clients blackholed or reset, its connections to etcd "
        "dropping what it sends, a member frozen; every "
        f"shard must be served again within the {CLUSTER_LEASE_S:g} s lease and a few "
        "seconds of each heal",
        steps,
        extra={"shards": 6},
    )


def random_kills(s: Shape) -> Scenario:
    rng = random.Random(s.seed)
    kills = max(int(s.duration // 4), 1)
    steps = []
    for _ in range(kills):
        t = rng.uniform(0.15, 0.75) * s.duration
        victim = member(rng.randint(1, s.members))
        steps += [Step(t, "kill", victim), Step(t + 1.0, "start", victim)]
    return Scenario(
        "random-kills", f"{kills} SIGKILLs of random members (seed {s.seed})", tuple(steps)
    )


def network_faults(s: Shape) -> Scenario:
    d = s.duration
    return Scenario(
        "network-faults",
        "latency, a stall, dropped connections and a partition between members and coordinator",
        (
            Step(0.15 * d, "net_latency", value=200),
            Step(0.3 * d, "net_heal"),
            Step(0.35 * d, "net_stall"),
            Step(0.45 * d, "net_heal"),
            Step(0.5 * d, "net_drop"),
            Step(0.6 * d, "net_partition"),
            Step(0.7 * d, "net_heal"),
        ),
    )


BUILT_IN: Final[dict[str, Callable[[Shape], Scenario]]] = {
    "process-death": process_death,
    "rolling-bounce": rolling_bounce,
    "scale-up": scale_up,
    "scale-down": scale_down,
    "static-bounce": static_bounce,
    "zombie": zombie,
    "coordinator-restart": coordinator_restart,
    "coordinator-failover": coordinator_failover,
    "etcd-faults": etcd_faults,
    "random-kills": random_kills,
    "network-faults": network_faults,
}


def built_in(name: str, shape: Shape) -> Scenario:
    try:
        return BUILT_IN[name](shape)
    except KeyError:
        raise ScenarioError(f"unknown scenario {name!r}; known: {', '.join(BUILT_IN)}") from None


def from_json(text: str, *, default_name: str = "file") -> Scenario:
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ScenarioError(f"not JSON: {exc}") from None
    if isinstance(raw, list):
        raw = {"steps": raw}
    if not isinstance(raw, dict) or not isinstance(raw.get("steps"), list):
        raise ScenarioError('a scenario is {"steps": [...]} or a list of steps')
    steps = []
    for i, item in enumerate(raw["steps"]):
        if not isinstance(item, dict) or "at" not in item or "action" not in item:
            raise ScenarioError(f"step {i}: needs 'at' and 'action'")
        value = item.get("value")
        steps.append(
            Step(
                at=float(item["at"]),
                action=str(item["action"]),
                target=str(item["target"]) if item.get("target") is not None else None,
                value=float(value) if value is not None else None,
            )
        )
    return Scenario(
        name=str(raw.get("name", default_name)),
        description=str(raw.get("description", "")),
        steps=tuple(steps),
        static=bool(raw.get("static", False)),
    )


def load(path: Path) -> Scenario:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"cannot read {path}: {exc}") from None
    return from_json(text, default_name=path.stem)
