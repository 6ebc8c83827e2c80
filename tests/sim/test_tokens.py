"""Simulated members present incarnation tokens as huddle's ``Member`` does, so the simulator
exercises the rule real members are moved by (docs/coordinator.md section 4): one token per
member process, drawn from the seed, the same on each of its connections."""

from __future__ import annotations

from huddle.coordinator.effects import incarnation_digest
from huddle.sim import SimConfig
from huddle.sim.process import incarnation_token
from huddle.sim.steplog import member_logs
from huddle.sim.world import World, quiet_logs


def run(seed: int, config: SimConfig) -> World:
    """``simulate``, keeping the world to look into."""
    with quiet_logs():
        world = World(seed, config)
        with member_logs(world, traced=False):
            outcome = world.run()
    assert outcome.violation is None, outcome.violation
    return world


def test_each_member_process_has_its_own_token_from_the_seed() -> None:
    tokens = {incarnation_token(seed, i, r) for seed in (1, 2) for i in range(4) for r in range(3)}
    assert len(tokens) == 24
    assert all(len(t) == 16 for t in tokens)
    assert incarnation_token(1, 2, 0) == incarnation_token(1, 2, 0)


def test_the_coordinator_tells_each_simulated_member_by_its_process_token() -> None:
    """After a run with connections reset, members crashed and restarted, every member the
    coordinator holds carries the digest of the token of the process that joined it, and
    moved with it from connection to connection (its client id alone would not move it)."""
    config = SimConfig(members=4, partitions=8, faults=12, kinds=("drop", "crash"))
    world = run(5, config)
    assert world.injected["drop"]
    assert world.injected["crash"]
    assert any(m.restarts for m in world.members)
    core = world.host.core
    assert core is not None
    group = core.groups["sim"]
    assert len(group.members) == len(world.members)
    for process in world.members:
        (member,) = [m for m in group.members.values() if m.client_id == f"m{process.index}"]
        assert member.incarnation == incarnation_digest(process.token)
        assert process.link is not None
        assert member.conn_id == process.link.conn_id
    assert {p.token for p in world.members} == {
        incarnation_token(5, p.index, p.restarts) for p in world.members
    }
