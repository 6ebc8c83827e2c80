"""A member whose callback overran the rebalance timeout (Kafka's max.poll.interval.ms)
gives itself up as Kafka's consumer does (``AbstractCoordinator.handlePollTimeoutExpiry``):
a dynamic member sends LeaveGroup at once (``maybeLeaveGroup``), and either kind drops its
member id (``resetGenerationOnLeaveGroup``) and rejoins with a new one. Before, it kept its
id and sent nothing, so a coordinator that still held it answered its rejoin with the very
generation it had lost: ``assigned``, ``lost``, ``assigned`` in one generation."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from huddle.client import Admin, Member, RebalanceListener, TopicPartition
from huddle.client.assignors.base import ASSIGNORS
from huddle.client.driver import MemberDriver, SendHeartbeat, WaitUntil
from huddle.client.events import Rejoin, SessionExpired
from huddle.client.flow import Call, Listen, MemberFlow, Receive
from huddle.client.member_core import MemberConfig, MemberCore
from huddle.client.subscription import Subscription
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.embedded import Assignment, encode, grouped
from huddle.protocol.messages import (
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    SyncGroupResponse,
)
from huddle.sim import SimConfig
from huddle.sim.steplog import member_logs
from huddle.sim.world import World, quiet_logs
from tests.builders import tps
from tests.client.test_flow import Host
from tests.helpers import settled, wait_until

REBALANCE_MS = 30_000


def assigned_flow(instance_id: str | None = None) -> tuple[MemberFlow, Host, Any]:
    """A range member that joined generation 4 as m-1 (a follower) and runs its
    ``on_partitions_assigned`` for t-0: the flow, its host and its main loop."""
    core = MemberCore(
        MemberConfig(
            group_id="g",
            topics=["t"],
            instance_id=instance_id,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=REBALANCE_MS,
        ),
        [ASSIGNORS.create("range")],
    )
    driver = MemberDriver(core, Subscription(["t"], None))
    host = Host()
    f = MemberFlow(driver, host)
    driver.connected(500)
    serve = f.serve()
    join = next(serve)
    assert isinstance(join, Call)
    assert isinstance(join.request, JoinGroupRequest)
    serve.send(
        JoinGroupResponse(generation_id=4, member_id="m-1", leader="m-0", protocol_name="range")
    )
    assigned = serve.send(
        SyncGroupResponse(assignment=encode(Assignment(assigned=grouped(tps("t-0")))))
    )
    assert assigned == Listen("on_partitions_assigned", tps("t-0"))
    return f, host, serve


def test_a_member_that_gave_itself_up_rejoins_with_a_new_member_id() -> None:
    """The review's case: the callback returns well within the coordinator's session."""
    f, host, serve = assigned_flow()
    host.now += REBALANCE_MS + 1  # the callback runs past the rebalance timeout
    gave_up = f.driver.heartbeat(host.now)
    assert isinstance(gave_up, SessionExpired)
    host.now += 1_000  # the callback returns
    assert isinstance(serve.send(None), Receive)
    assert serve.send(gave_up) == Listen("on_partitions_lost", tps("t-0"))
    rejoin = serve.send(None)
    assert isinstance(rejoin, Call)
    assert isinstance(rejoin.request, JoinGroupRequest)
    # README: "joins with a new member id" (Kafka: LeaveGroup, then a new id)
    assert rejoin.request.member_id == "", "the coordinator still holds m-1: generation 4 again"


@pytest.mark.parametrize("instance_id", [None, "i-1"], ids=["dynamic", "static"])
def test_only_a_dynamic_member_that_gave_itself_up_sends_leave_group(
    instance_id: str | None,
) -> None:
    f, host, serve = assigned_flow(instance_id)
    driver = f.driver
    before = driver.heartbeat(host.now)
    assert isinstance(before, SendHeartbeat)  # heartbeats go on while the callback runs
    host.now += REBALANCE_MS + 1
    assert isinstance(driver.heartbeat(host.now), SessionExpired)
    leave = driver.leave_after_give_up()
    if instance_id is None:
        assert isinstance(leave, LeaveGroupRequest)
        assert [m.member_id for m in leave.members] == ["m-1"]
    else:  # Kafka's maybeLeaveGroup: a static member is removed by its session only
        assert leave is None
    host.now += 5_000  # the callback returns: it left, so it proves nothing any more
    serve.send(None)
    assert driver.heartbeat(host.now) == WaitUntil(None)
    assert driver.visible(host.now) == frozenset()


def test_a_member_whose_revocation_overran_loses_it_before_it_joins() -> None:
    """An eager member's revocation before its JoinGroup overran: the flow goes on to join
    before it reads the queued event, so it handles the loss first, and joins with no
    member id (not the one it left with)."""
    f, host, serve = assigned_flow()
    assert isinstance(serve.send(None), Receive)  # the assigned callback returned in time
    assert serve.send(Rejoin("the application asked")) == Listen(
        "on_partitions_revoked", tps("t-0")
    )
    host.now += REBALANCE_MS + 1
    assert isinstance(f.driver.heartbeat(host.now), SessionExpired)  # queued, not read yet
    join = serve.send(None)  # the revocation returns
    assert isinstance(join, Call)
    assert isinstance(join.request, JoinGroupRequest)
    assert join.request.member_id == ""
    assert f.core.generation < 0


class StuckOnce(RebalanceListener):
    """Its first on_partitions_assigned with partitions waits for ``released``; every
    assignment is noted with the generation and member id it came in."""

    def __init__(self) -> None:
        self.member: Member | None = None
        self.released = anyio.Event()
        self.heard: list[tuple[str, int, str]] = []

    def _note(self, name: str) -> None:
        assert self.member is not None
        self.heard.append((name, self.member.generation, self.member.member_id))

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        self._note("assigned")
        if assigned and not self.released.is_set():
            await self.released.wait()

    async def on_partitions_lost(self, lost: frozenset[TopicPartition]) -> None:
        self._note("lost")


async def test_a_follower_whose_callback_overran_leaves_at_once_and_rejoins_anew(
    server: CoordinatorServer, bootstrap: str
) -> None:
    """The review's run against a real coordinator (range): the follower's
    on_partitions_assigned sleeps past its rebalance timeout in a Stable group. It leaves
    then (the coordinator drops it long before its 10 s session could run out) and, once
    the callback returns, rejoins with a new member id: never assigned again in the
    generation and member id it lost."""
    async with Admin(bootstrap) as admin:
        await admin.create_topic("t", 2)
    settings: dict[str, Any] = {
        "group_id": "g",
        "topics": ["t"],
        "assignors": ["range"],
        "session_timeout_ms": 10_000,
        "heartbeat_interval_ms": 200,
        "rebalance_timeout_ms": 1_000,
    }
    stuck = StuckOnce()
    everything = tps("t-0 t-1")
    async with Member(bootstrap, client_id="a", **settings) as a:
        await wait_until(lambda: settled([a], everything), what="a to own both")
        async with Member(bootstrap, client_id="b", listener=stuck, **settings) as b:
            stuck.member = b
            await wait_until(lambda: bool(stuck.heard and b.member_id), what="b's assignment")
            _, generation, first_id = stuck.heard[0]

            def left() -> bool:
                group = server.core.groups.get("g")
                return group is not None and first_id not in group.members

            await wait_until(left, wait_s=5.0, what="b to leave once its callback overran")
            assert b.assignment == frozenset()  # still in its callback, owning nothing
            await wait_until(lambda: a.assignment == everything, what="a to take both")
            stuck.released.set()
            await wait_until(lambda: settled([a, b], everything), what="the group to settle")
            assert b.member_id != first_id
    assert stuck.heard[1] == ("lost", -1, "")  # given up: no generation, no member id
    again = [(g, m) for name, g, m in stuck.heard[2:] if name == "assigned"]
    assert again
    assert (generation, first_id) not in again
    assert all(g > generation for g, _ in again)


def test_the_simulator_s_member_leaves_and_rejoins_anew_when_a_callback_overruns() -> None:
    """The simulator runs the same flow and driver, and its member process sends the
    LeaveGroup the runtime's heartbeat task sends. Member 0 (range: it revokes everything
    before it joins) rejoins at 3 s, and that revocation outlasts its rebalance timeout;
    the checker's ``lost-with-a-cause`` requires its rejoin after that to carry no member
    id (on the code before, it carried the old one)."""
    lines: list[str] = []
    config = SimConfig(protocol="range", members=3, faults=0, static_share=0.0)
    overrun = config.rebalance_timeout_ms + 2_000.0
    with quiet_logs():
        world = World(5, config, tracer=lines.append)
        member = world.members[0]

        def slow_revocation_then_rejoin() -> None:
            world.slow_revocation = (overrun, world.sched.now + 1_000.0)
            member.post(Rejoin("the application asked"))

        world.sched.at(3_000.0, slow_revocation_then_rejoin)
        world.quiet_from = 3_000.0 + overrun
        with member_logs(world, traced=True):
            outcome = world.run()
    assert outcome.violation is None, outcome.violation
    mine = [line for line in lines if "member 0:" in line]
    gave_up = next(i for i, line in enumerate(mine) if "listener_too_slow" in line)
    after = mine[gave_up:]
    leave = next(i for i, line in enumerate(after) if "LeaveGroupRequest(" in line)
    join = next(i for i, line in enumerate(after) if "JoinGroupRequest(" in line)
    assert leave < join
    assert "member_id=" not in after[join]  # no member id: a new one
    assert outcome.converged_after_ms is not None
