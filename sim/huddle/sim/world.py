"""One simulated run: a coordinator, members and faults under one clock, from one seed.

``simulate(seed, config)`` builds the world, runs it until the group has converged after
the last fault (or an invariant breaks, or the liveness bound passes) and returns an
``Outcome``. The same seed, configuration and kept faults give the same run, step for step.
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import structlog

from huddle.client.assignors.base import ASSIGNORS, RebalanceProtocol
from huddle.coordinator.config import GroupConfig
from huddle.coordinator.core import Coordinator
from huddle.coordinator.state import GroupState
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import InvalidArgumentError
from huddle.sim.application import GROUP_ID
from huddle.sim.consumer_host import ConsumerPart
from huddle.sim.faults import KINDS, Fault, plan_faults
from huddle.sim.host import CoordinatorHost
from huddle.sim.invariants import Checker, Violation, ViolationFoundError
from huddle.sim.network import Network
from huddle.sim.planted import member_parts, planting
from huddle.sim.process import MemberProcess
from huddle.sim.scheduler import Scheduler
from huddle.sim.steplog import member_logs

PROTOCOLS = (
    "range",
    "sticky",
    "cooperative-sticky",
    "cooperative-deferred",
    "high-availability",
    "consumer",  # the consumer group protocol (KIP-848): huddle.sim.consumer_world
)
# Fault kinds a protocol's runs leave out by default (a fault its member cannot yet get past,
# docs/simulation.md): none now. The consumer protocol's left out slow callbacks until its
# member heartbeated through its callbacks.
LEFT_OUT: dict[str, frozenset[str]] = {}
Tracer = Callable[[str], None]
MAX_STEPS = 1_000_000  # a run that takes more has stopped making progress in time


@dataclass(frozen=True, slots=True)
class SimConfig:
    protocol: str = "cooperative-sticky"
    members: int = 8
    partitions: int = 32
    faults: int = 20
    kinds: tuple[str, ...] = KINDS
    static_share: float = 0.5  # of the members, drawn per run
    session_timeout_ms: int = 3_000
    heartbeat_interval_ms: int = 1_000
    rebalance_timeout_ms: int = 10_000
    initial_rebalance_delay_ms: int = 300
    retry_backoff_ms: int = 100
    max_retry_backoff_ms: int = 1_000
    callback_ms: float = 20.0  # a callback takes up to this long (slow ones: faults)
    max_drift_ppm: float = 100.0  # member clocks run this much fast or slow at most
    scheduled_delay_ms: int = 3_000  # cooperative-deferred: how long lost partitions wait
    probing_interval_ms: int = 3_000  # high-availability: probing rebalances
    max_warmup_replicas: int = 8  # high-availability: warm-ups at once, group-wide
    acceptable_lag: int = 100  # high-availability: caught up within this many records
    initial_lag: int = 1_000  # a warm-up starts this far behind ...
    catch_up_per_ms: float = 1.0  # ... and catches up this fast
    produce_per_ms: float = 0.1  # a task's log grows this fast: state not kept up falls behind
    plant: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise InvalidArgumentError(
                f"unknown protocol {self.protocol!r}; known: {', '.join(PROTOCOLS)}"
            )
        if self.members < 1 or self.partitions < 1 or self.faults < 0:
            raise InvalidArgumentError(
                "members and partitions must be at least 1, faults at least 0"
            )

    def liveness_bound_ms(self) -> float:
        """How long after the last fault the group must have converged: a dead member's
        session, the join phase's wait (its rebalance timeout), a reconnect backoff, two
        cooperative rounds, cooperative-deferred's delay and KIP-441's probing rounds."""
        bound: float = (
            2 * self.session_timeout_ms
            + self.rebalance_timeout_ms
            + self.max_retry_backoff_ms
            + 2 * self.initial_rebalance_delay_ms
            + 5_000
        )
        if self.protocol == "cooperative-deferred":
            bound += 2 * self.scheduled_delay_ms
        if self.protocol == "high-availability":
            # KIP-441 moves at most max_warmup_replicas tasks per wave; a wave waits for its
            # warm-ups to catch up (state up to a minute behind) and two probing rounds
            waves = math.ceil(1.5 * self.partitions / self.max_warmup_replicas)
            behind = self.initial_lag + 60_000 * self.produce_per_ms
            bound += waves * (behind / self.catch_up_per_ms + 2 * self.probing_interval_ms)
        return bound


def default_kinds(protocol: str) -> tuple[str, ...]:
    """The fault kinds of ``protocol``'s runs unless others are asked for."""
    left_out = LEFT_OUT.get(protocol, frozenset())
    return tuple(kind for kind in KINDS if kind not in left_out)


def config_for(protocol: str, **changes: Any) -> SimConfig:
    """``protocol``'s configuration: the defaults, with its default fault kinds."""
    changes.setdefault("kinds", default_kinds(protocol))
    return SimConfig(protocol=protocol, **changes)


@dataclass
class Outcome:
    seed: int
    protocol: str
    violation: Violation | None
    steps: int
    sim_ms: float
    faults: Counter[str]
    rebalances: int
    converged_after_ms: float | None  # after the last fault ended
    digest: str  # of the run's trace: the same run gives the same digest
    kept: tuple[int, ...]  # the plan's faults this run had
    plan: list[Fault] = field(default_factory=list)


class World:
    def __init__(
        self,
        seed: int,
        config: SimConfig,
        *,
        keep: Sequence[int] | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        self.seed = seed
        self.config = config
        self.tracer = tracer
        self._hash = hashlib.blake2b(digest_size=16)
        self.sched = Scheduler()
        self.rng = random.Random(seed)
        self.group_config = GroupConfig(
            min_session_timeout_ms=100,
            initial_rebalance_delay_ms=config.initial_rebalance_delay_ms,
        )
        assignor = ASSIGNORS.by_name.get(config.protocol)
        protocols = () if assignor is None else assignor.supported_protocols
        self.cooperative = RebalanceProtocol.COOPERATIVE in protocols
        self.checker = self._checker()
        # the members' parts: faulty ones for the bugs planted (the coordinator's are
        # switched on around the run by ``planting``)
        self.parts = member_parts(config.plant)
        self.host = CoordinatorHost(
            self.sched, self.group_config, self.checker, self._consumer_part()
        )
        self.net = Network(self.sched, self.rng, self.host)
        self.topic = "events"
        self.host.create_topic(self.topic, config.partitions)
        self._started()
        self.members = [
            self._process(i, static=self.rng.random() < config.static_share)
            for i in range(config.members)
        ]
        for m in self.members:
            self.sched.after(self.rng.uniform(0.0, 500.0), m.start)
        self.plan = plan_faults(
            seed,
            config.faults,
            members=config.members,
            partitions=config.partitions,
            session_ms=config.session_timeout_ms,
            rebalance_ms=config.rebalance_timeout_ms,
            kinds=config.kinds,
        )
        numbers = range(len(self.plan)) if keep is None else sorted(set(keep))
        self.faults = [self.plan[n] for n in numbers if 0 <= n < len(self.plan)]
        for fault in self.faults:
            self.sched.at(fault.at, self._inject, fault)
        self.injected: Counter[str] = Counter()
        # a member may lose its partitions only this soon after a fault that concerns it
        self.trouble_window_ms = (
            config.session_timeout_ms + config.rebalance_timeout_ms + config.max_retry_backoff_ms
        )
        self.troubled_until = [0.0] * config.members
        self.coordinator_back = 0.0
        # the next revocation begun before the second value takes the first value long
        self.slow_revocation: tuple[float, float] | None = None
        self.quiet_from = max((f.ends for f in self.faults), default=0.0)
        self.quiet_from = max(self.quiet_from, 1_000.0)
        self._dirty: set[MemberProcess] = set(self.members)  # changed since the last check
        self.converged_at: float | None = None
        self.max_steps = MAX_STEPS
        self.acting: MemberProcess | None = None  # the member whose code runs now

    # --- the protocol's parts (``huddle.sim.consumer_world`` has others) ------------

    def _checker(self) -> Checker:
        return Checker(self)

    def _consumer_part(self) -> ConsumerPart | None:
        return None  # the classic protocols' coordinator serves no consumer groups

    def _started(self) -> None:
        """The coordinator is up with its topic, before any member starts."""

    def _process(self, index: int, *, static: bool) -> MemberProcess:
        return MemberProcess(self, index, static=static)

    # --- what members tell the world ------------------------------------------------

    def changed(self, m: MemberProcess) -> None:
        self._dirty.add(m)

    def member_idle(self, m: MemberProcess) -> None:
        self._dirty.add(m)

    def member_failed(self, m: MemberProcess, reason: str) -> None:
        self.checker.fail("member-failed", f"member {m.index} failed: {reason}")

    def callback(self, m: MemberProcess, name: str, partitions: frozenset[TopicPartition]) -> None:
        self.trace(m, name, partitions=_names(partitions))
        self.checker.callback(m, name, partitions)
        if name == "on_partitions_lost" and self.sched.now > self.troubled_until[m.index]:
            self.checker.fail(
                "availability",
                f"member {m.index} lost {_names(partitions)} with no fault on it, its "
                "connection or the coordinator since "
                f"{(self.sched.now - self.trouble_window_ms) / 1000:.3f} s",
            )
        if name == "on_partitions_lost":
            self.checker.lost(m)

    def callback_ms(self, name: str) -> float:
        """How long a callback ``name`` that begins now takes: up to ``callback_ms``, or a
        slow revocation's duration (the first revocation begun while that fault lasts)."""
        duration = self.rng.uniform(0.0, self.config.callback_ms)
        if name == "on_partitions_revoked":
            slow = self.slow_revocation
            if slow is not None and self.sched.now <= slow[1]:
                self.slow_revocation = None
                duration = slow[0]
        return duration

    def gave_up(self, m: MemberProcess) -> None:
        """A callback of ``m`` overran the rebalance timeout: it gives itself up (a fault
        of the application's, as a pause is): it may lose what it owns, and must rejoin
        with a new member id (``lost-with-a-cause``)."""
        until = self.sched.now + self.trouble_window_ms
        self.troubled_until[m.index] = max(self.troubled_until[m.index], until)
        self.checker.gave_up(m)

    def trace(
        self, m: MemberProcess | None, what: str, *, detail: bool = False, **details: object
    ) -> None:
        """A line of the step log; all but ``detail`` lines (traced only when someone
        reads them) go into the run's digest, so tracing does not change it."""
        text = " ".join(f"{k}={v}" for k, v in details.items())
        who = "coordinator" if m is None else f"member {m.index}"
        line = f"{self.sched.now / 1000:9.3f}s {who}: {what} {text}".rstrip()
        if not detail:
            self._hash.update(line.encode())
        if self.tracer is not None:
            self.tracer(line)

    def member_logged(self, line: str) -> None:
        """One of the member library's log events (``huddle.sim.steplog``)."""
        self.trace(self.acting, line, detail=True)

    # --- faults ---------------------------------------------------------------------

    def _inject(self, fault: Fault) -> None:
        self.injected[fault.kind] += 1
        if fault.kind not in ("slow-callback", "partition-count"):
            hit = range(len(self.members)) if fault.kind == "coordinator-crash" else [fault.member]
            for index in hit:
                until = fault.ends + self.trouble_window_ms
                self.troubled_until[index] = max(self.troubled_until[index], until)
        if self.tracer is not None:
            self.tracer(f"{self.sched.now / 1000:9.3f}s fault: {fault.describe()}")
        m = self.members[fault.member]
        sched = self.sched
        match fault.kind:
            case "drop":
                if m.link is not None:
                    m.link.reset("connection reset")
            case "partition":  # what it held weakens every proof of membership until then
                self.net.partition(m.index)
                self.checker.shaken(m)
                sched.after(fault.duration, self._heal, m)
            case "pause":
                m.pause()
                sched.after(fault.duration, m.resume)
            case "crash":
                m.crash()
                sched.after(fault.duration, m.restart)
            case "slow-callback":
                self.slow_revocation = (fault.duration, sched.now + fault.duration)
            case "coordinator-crash":  # a crash while down keeps it down longer
                self.host.crash()
                self.coordinator_back = max(self.coordinator_back, fault.ends)
                sched.at(self.coordinator_back, self._coordinator_back)
            case "partition-count":
                self.host.alter_topic(self.topic, fault.value)
            case "false-claim":
                m.claim_falsely()
        self._dirty.update(self.members)

    def _heal(self, m: MemberProcess) -> None:
        self.net.heal(m.index)
        self.checker.shaken(m)

    def _coordinator_back(self) -> None:
        if not self.host.up and self.sched.now >= self.coordinator_back:
            self.host.start()

    # --- running --------------------------------------------------------------------

    def converged(self) -> bool:
        core = self.host.core
        if core is None:
            return False
        group = core.groups.get(GROUP_ID)
        if group is None or group.state is not GroupState.STABLE:
            return False
        members = self.members
        if not all(m.stable for m in members):
            return False
        if set(group.members) != {m.core.member_id for m in members}:
            return False
        return self.processed_once(core)

    def processed_once(self, core: Coordinator) -> bool:
        """Whether each of the topic's partitions is processed by exactly one member."""
        count = core.topics.partitions.get(self.topic, 0)
        owned = [tp for m in self.members for tp in m.processing()]
        wanted = {TopicPartition(self.topic, p) for p in range(count)}
        return len(owned) == len(wanted) and set(owned) == wanted

    def processed(self, core: Coordinator) -> str:
        """How many of the topic's partitions are processed, for a liveness violation."""
        count = core.topics.partitions.get(self.topic, 0)
        owned = sum(len(m.processing()) for m in self.members)
        return f"{owned} of {count} partitions processed"

    def run(self) -> Outcome:
        sched = self.sched
        checker = self.checker
        bound = self.quiet_from + self.config.liveness_bound_ms()
        violation: Violation | None = None
        with planting(self.config.plant):
            try:
                while sched.step():
                    if self._dirty:
                        checker.check_members(self.members, self._dirty)
                        self._dirty.clear()
                        if sched.now >= self.quiet_from and self.converged():
                            self.converged_at = sched.now
                            break
                    if sched.now > bound or sched.steps > self.max_steps:
                        checker.fail(
                            "liveness",
                            f"not converged {self.config.liveness_bound_ms() / 1000:.1f} s "
                            f"after the last fault ended ({self._why_not()})",
                        )
            except ViolationFoundError as found:
                violation = found.violation
        return Outcome(
            seed=self.seed,
            protocol=self.config.protocol,
            violation=violation,
            steps=sched.steps,
            sim_ms=sched.now,
            faults=self.injected,
            rebalances=checker.rebalances,
            converged_after_ms=(
                None if self.converged_at is None else self.converged_at - self.quiet_from
            ),
            digest=self._hash.hexdigest(),
            kept=tuple(f.number for f in self.faults),
            plan=self.plan,
        )

    def _why_not(self) -> str:
        core = self.host.core
        if core is None:
            return "the coordinator is down"
        group = core.groups.get(GROUP_ID)
        if group is None:
            return "no group"
        unstable = [m.index for m in self.members if not m.stable]
        return (
            f"group {group.state.value} in generation {group.generation}; members not "
            f"stable: {unstable}; {self.processed(core)}"
        )


def simulate(
    seed: int,
    config: SimConfig,
    *,
    keep: Sequence[int] | None = None,
    tracer: Tracer | None = None,
) -> Outcome:
    """Run ``seed`` (only the plan's faults numbered in ``keep``, if given). The
    coordinator's own log events are dropped meanwhile (below errors) and the members' go to
    the trace (``huddle.sim.steplog``): the trace tells the run."""
    from huddle.sim.consumer_world import CONSUMER, ConsumerWorld  # built on World

    with quiet_logs():
        kind = ConsumerWorld if config.protocol == CONSUMER else World
        world = kind(seed, config, keep=keep, tracer=tracer)
        with member_logs(world, traced=tracer is not None):
            return world.run()


@contextmanager
def quiet_logs() -> Iterator[None]:
    before = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    try:
        yield
    finally:
        structlog.configure(**before)


def _names(partitions: frozenset[TopicPartition]) -> str:
    return ",".join(str(tp.partition) for tp in sorted(partitions))
