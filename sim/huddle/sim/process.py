"""A member process as the simulator runs it: its clock (an offset and a drift from the
simulation's), its life (start, crash, restart, pause), and what the checker reads of it.

Each start builds the member library's own core and driver and hands them to
``huddle.sim.runtime.SimRuntime``, which performs the library's runtime (flow, driver,
``Offline``) on simulated time and links, as ``huddle.client.member.Member`` performs it
on anyio; the application on top (``huddle.sim.application``) processes what the member
owns, commits its positions and takes its time in callbacks. Faulty parts for planted bugs
come from ``huddle.sim.planted`` through the world (``World.parts``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from huddle.client.assignors.base import ASSIGNORS, Assignor
from huddle.client.driver import MemberDriver
from huddle.client.events import Event, Rejoin
from huddle.client.heartbeat import LIVENESS
from huddle.client.member_core import MemberConfig, MemberCore, MemberState
from huddle.client.partition_counts import Scope
from huddle.client.subscription import Subscription
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.messages import ServerFrame
from huddle.sim.application import GROUP_ID, Application
from huddle.sim.network import Link
from huddle.sim.runtime import TICK_MS, SimRuntime
from huddle.sim.scheduler import Timer

if TYPE_CHECKING:
    from huddle.sim.world import World


class MemberProcess:
    """One member process; ``start`` (re)starts it, ``crash`` kills it."""

    def __init__(self, world: World, index: int, *, static: bool) -> None:
        self.world = world
        self.index = index
        self.static = static
        rng = world.rng
        skew = world.config.max_drift_ppm / 1e6
        # its clock's reading at 0: a monotonic clock, running since its host booted
        self.offset = rng.uniform(0.0, 3_600_000.0)
        self.drift = rng.uniform(-skew, skew)  # its clock runs this much fast (or slow)
        self.alive = False
        self.epoch = 0
        self.paused = False
        self.deferred: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        # its next JoinGroup lies: it claims a partition another member owns (a fault)
        self.false_claim = False
        self.failure: str | None = None
        self.restarts = 0
        self.token = b""  # its incarnation token, a new one each time it starts

    # --- the process's clock and timers -------------------------------------------------

    def now_ms(self) -> float:
        return self.offset + self.world.sched.now * (1.0 + self.drift)

    def at_local(self, local: float, fn: Callable[..., None], *args: Any) -> Timer:
        # a hair late, so its own clock reads ``local`` or later when it runs (the two
        # conversions round; a deadline seen as not quite due would be scheduled again)
        when = (local - self.offset) / (1.0 + self.drift) + TICK_MS  # to_global, inlined
        return self.world.sched.at(when, self.run, self.epoch, fn, args)

    def to_global(self, local: float) -> float:
        """The simulation's time when this process's clock reads ``local``."""
        return (local - self.offset) / (1.0 + self.drift)

    def after_local(self, delay: float, fn: Callable[..., None], *args: Any) -> Timer:
        local = self.offset + self.world.sched.now * (1.0 + self.drift) + delay  # now_ms()
        when = (local - self.offset) / (1.0 + self.drift) + TICK_MS  # as at_local
        return self.world.sched.at(when, self.run, self.epoch, fn, args)

    def run(self, epoch: int, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        """Everything the process does goes through here: nothing runs after it died, and
        nothing runs while it is paused (it runs, in order, when the pause ends)."""
        if epoch != self.epoch or not self.alive:
            return
        if self.paused:
            self.deferred.append((fn, args))
            return
        world = self.world  # _act, inlined: every step of a member comes through here
        before, world.acting = world.acting, self
        try:
            fn(*args)
        finally:
            world.acting = before
        world.changed(self)

    def _act(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` as this member's code (what it logs is its own, in the step log)."""
        world = self.world
        before, world.acting = world.acting, self
        try:
            fn(*args)
        finally:
            world.acting = before

    # --- life ---------------------------------------------------------------------------

    def start(self) -> None:
        world = self.world
        self.epoch += 1
        self.alive = True
        self.paused = False
        self.deferred = []
        self.token = incarnation_token(world.seed, self.index, self.restarts)
        self._build()

    def _build(self) -> None:
        """The member library and the application of a process that starts."""
        world = self.world
        config = world.config
        self.core = MemberCore(
            MemberConfig(
                group_id=GROUP_ID,
                topics=[world.topic],
                instance_id=f"instance-{self.index}" if self.static else None,
                session_timeout_ms=config.session_timeout_ms,
                heartbeat_interval_ms=config.heartbeat_interval_ms,
                rebalance_timeout_ms=config.rebalance_timeout_ms,
                client_id=f"m{self.index}",
            ),
            [self._assignor()],
            round_check=world.parts.round_check,
        )
        self.driver = MemberDriver(
            self.core,
            Subscription([world.topic], None),
            retry_backoff_ms=config.retry_backoff_ms,
            max_retry_backoff_ms=config.max_retry_backoff_ms,
            liveness=world.parts.liveness or LIVENESS,
        )
        # the runtime performing the library's flow and driver, fresh at each start
        self.runtime = SimRuntime(self, self.core, self.driver)
        self.runtime.connect()
        self.app = Application(self)  # the application on top (it commits every so often)
        self.runtime.poke()

    def _assignor(self) -> Assignor:
        assignor = self._new_assignor()
        rules = self.world.parts.claim_rules
        if rules is not None:  # a planted bug's faulty claim rules
            assignor.claim_rules = rules
        return assignor

    def _new_assignor(self) -> Assignor:
        config = self.world.config
        name = config.protocol
        cls = ASSIGNORS.by_name[name]
        if name == "cooperative-deferred":
            return cls(scheduled_rebalance_max_delay_ms=config.scheduled_delay_ms)  # type: ignore[call-arg]
        if name == "high-availability":
            return cls(  # type: ignore[call-arg]
                acceptable_recovery_lag=config.acceptable_lag,
                probing_rebalance_interval_ms=config.probing_interval_ms,
                max_warmup_replicas=config.max_warmup_replicas,
            )
        return cls()

    def crash(self) -> None:
        """The process dies: its socket closes, everything it was doing stops."""
        if not self.alive:
            return
        self.world.checker.shaken(self)
        self.alive = False
        self.epoch += 1
        self.paused = False
        self.deferred = []
        self._stopped()

    def _stopped(self) -> None:
        """What the process's death stops: its runtime and its application."""
        self.runtime.crashed()
        self.app.revoking = frozenset()
        self.app.owned = set()

    def restart(self) -> None:
        if not self.alive:
            self.restarts += 1
            self.start()

    def pause(self) -> None:
        if self.alive:
            self.paused = True
            self.world.checker.shaken(self)

    def resume(self) -> None:
        if not self.alive or not self.paused:
            return
        self.paused = False
        deferred, self.deferred = self.deferred, []
        for fn, args in deferred:
            if self.alive and not self.paused:
                self._act(fn, *args)
            elif self.alive:
                self.deferred.append((fn, args))
        self.world.changed(self)

    # --- what the application processes -------------------------------------------------

    def processing(self) -> frozenset[TopicPartition]:
        """What the application works on now: what the member library says it owns, and
        what a running revocation callback is finishing (unless the member's own
        zombie-safety deadline has passed)."""
        if not self.alive or self.paused:
            return frozenset()
        now = self.now_ms()
        visible = self.driver.visible(now)
        revoking = self.app.revoking
        if revoking and (visible or not self._zombie(now)):
            return visible | revoking
        return visible

    def _zombie(self, now: float) -> bool:
        return not self.driver.may_process(now)

    def idle(self) -> bool:
        """Between rebalances: the flow waits for an event and no callback runs."""
        if not self.alive:
            return False
        runtime = self.runtime  # the invariants ask after every step: no call more
        return runtime.receiving and runtime.listening is None and not runtime.events

    # --- the flow's host ----------------------------------------------------------------

    def counts_scope(self) -> Scope:
        return (self.runtime.link, self.core.member_id, 0)

    def lags(self) -> Mapping[TopicPartition, int] | None:
        return self.app.lags()

    def post(self, event: Event) -> None:
        """Queue ``event`` for the member's main loop (as its runtime's tasks do)."""
        self.runtime.post(event)

    def claim_falsely(self) -> None:
        """A fault: the member rejoins now, and its subscription claims a partition that
        another member owns, in that member's generation (as a client with a bug, or one
        restored from a copy of another's state, would)."""
        if self.alive:
            self.false_claim = True
            self.post(Rejoin("false claim"))

    # --- what the network calls (``huddle.sim.network.MemberEnd``) ---------------------

    @property
    def link(self) -> Link | None:
        """The process's connection, if it has one."""
        return self.runtime.link

    def link_up(self, link: Link) -> None:
        self.run(self.epoch, self.runtime.link_up, (link,))

    def link_down(self, link: Link, reason: str) -> None:
        self.run(self.epoch, self.runtime.link_down, (link, reason))

    def frame_arrived(self, link: Link, frame: ServerFrame) -> None:
        self.run(self.epoch, self.runtime.frame_arrived, (link, frame))

    # --- for the invariants -------------------------------------------------------------

    @property
    def stable(self) -> bool:
        core = self.core
        return (
            self.alive
            and not self.paused
            and self.runtime.connected
            and core.state is MemberState.STABLE
            and core.rejoin_at_ms is None
            and self.idle()
            and not self._zombie(self.now_ms())
        )


def incarnation_token(seed: int, index: int, restarts: int) -> bytes:
    """The incarnation token a member process presents on each of its connections, as
    huddle's ``Member`` does: 16 bytes, one per process, drawn from the run's seed (not its
    RNG, so the rest of the run draws what it did before members had tokens)."""
    return hashlib.sha256(f"huddle-sim:{seed}:{index}:{restarts}".encode()).digest()[:16]
