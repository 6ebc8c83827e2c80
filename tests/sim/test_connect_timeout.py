"""A simulated member bounds a connection attempt as ``Member`` does (the driver's
``connect_timeout_ms``: a heartbeat's timeout, at most 10 s), not by a constant of its own."""

from __future__ import annotations

from huddle.sim import SimConfig
from huddle.sim.process import MemberProcess
from huddle.sim.world import World


class SilentLink:
    """A connection attempt that is never answered."""

    conn_id = 1

    def close_by_member(self) -> None:
        pass


class SilentNetwork:
    def __init__(self, world: World) -> None:
        self.world = world
        self.attempts: list[float] = []

    def connect(self, member: MemberProcess) -> SilentLink:
        self.attempts.append(self.world.sched.now)
        return SilentLink()


def test_an_attempt_never_answered_is_given_up_after_a_heartbeat_s_timeout() -> None:
    config = SimConfig(members=1, faults=0, static_share=0.0, session_timeout_ms=3_000)
    world = World(0, config)
    net = SilentNetwork(world)
    world.net = net  # type: ignore[assignment]
    while len(net.attempts) < 2 and world.sched.now < 60_000 and world.sched.step():
        pass
    first, second = net.attempts[:2]
    backoff = config.retry_backoff_ms
    assert second - first <= (1_000 + backoff) * 1.01  # timed out, then backed off once
    assert second - first >= 1_000 + backoff - 1
    assert world.members[0].driver.connect_timeout_ms == 1_000  # a third of the session
