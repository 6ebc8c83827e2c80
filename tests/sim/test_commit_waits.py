"""The simulated application commits as ``Member.commit`` does: on a new connection, after
the member's own first request (``Offline.commit_waits``), never before it."""

from __future__ import annotations

from huddle.protocol.messages import Request
from huddle.sim import SimConfig
from huddle.sim.runtime import Handler
from huddle.sim.world import World


def test_a_commit_asked_before_the_member_spoke_on_its_connection_goes_after() -> None:
    world = World(0, SimConfig(protocol="range", members=1, faults=0, static_share=0.0))
    member = world.members[0]
    while not (member.alive and member.stable and member.app.positions):
        assert world.sched.now < 30_000
        assert world.sched.step()
    sent: list[str] = []
    send = member.runtime.send

    def recorded(request: Request, handler: Handler, timeout_ms: float | None) -> int:
        sent.append(type(request).__name__)
        return send(request, handler, timeout_ms)

    member.runtime.send = recorded  # type: ignore[method-assign]
    offline = member.runtime.offline
    offline.spoken = False  # as on a connection the member has said nothing on yet
    member.app.commit(member.driver.visible(member.now_ms()))
    assert sent == []  # it waits
    while "OffsetCommitRequest" not in sent:
        assert world.sched.now < 30_000
        assert world.sched.step()
    assert sent[0] == "HeartbeatRequest"  # the member's own first request went first
    assert not offline.commit_waits
