"""``Member`` and the simulator's member process run one member runtime: fed one scripted
coordinator, they take the same actions.

One script answers both: a JoinGroup makes the member a follower of generation 1, its
SyncGroup assigns it two partitions, its heartbeats are answered NONE and then, once,
with an answer of another type (a SyncGroupResponse). Each adapter is run against it (the
library's ``Member`` on anyio with a scripted connection, the simulator's process on its
scheduler with a scripted link) and what it does is written down: connections, the group
requests it sends, the listener callbacks it runs, disconnections. An answer of the wrong
type proves nothing: both drop the connection and connect again (Kafka's client fails a
connection whose answer does not match its request).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from huddle.client import Member, RebalanceListener
from huddle.protocol.embedded import Assignment, TopicPartition, encode, grouped
from huddle.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    Reply,
    Request,
    Response,
    SyncGroupRequest,
    SyncGroupResponse,
)
from huddle.sim import SimConfig
from huddle.sim.process import MemberProcess
from huddle.sim.world import World

TOPIC = "events"
OWNED = frozenset({TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)})
GROUP_REQUESTS = (JoinGroupRequest, SyncGroupRequest, HeartbeatRequest, LeaveGroupRequest)
HEARTBEATS_IN_STEP = 2  # answered NONE after the sync; the next one is out of step
Action = tuple[Any, ...]


class Script:
    """The scripted coordinator, and the log of what the member did."""

    def __init__(self) -> None:
        self.actions: list[Action] = []
        self.synced = False
        self.heartbeats = 0  # answered since the sync
        self.on_done: Callable[[], None] = lambda: None

    def done(self) -> bool:
        return self.actions.count(("connect",)) >= 2 or self.heartbeats > HEARTBEATS_IN_STEP + 2

    def act(self, *action: Any) -> None:
        """Write ``action`` down, until the script is done."""
        if not self.done():
            self.actions.append(action)
            if self.done():
                self.on_done()

    def answer(self, request: Request) -> Response:
        # heartbeats sent while the member syncs go out when its tasks say so: not written
        syncing = isinstance(request, HeartbeatRequest) and not self.synced
        if isinstance(request, GROUP_REQUESTS) and not syncing:
            self.act("send", type(request).__name__)
        match request:
            case JoinGroupRequest():
                name = request.protocols[0].name
                return JoinGroupResponse(
                    generation_id=1, protocol_name=name, leader="leader", member_id="m-1"
                )
            case SyncGroupRequest():
                self.synced = True
                assignment = encode(Assignment(assigned=grouped(OWNED)))
                return SyncGroupResponse(assignment=assignment)
            case HeartbeatRequest() if self.synced:
                self.heartbeats += 1
                if self.done():
                    self.on_done()
                if self.heartbeats == HEARTBEATS_IN_STEP + 1:
                    return SyncGroupResponse()  # out of step: not a heartbeat's answer
                return HeartbeatResponse()
            case HeartbeatRequest():
                return HeartbeatResponse()
            case LeaveGroupRequest():
                return LeaveGroupResponse()
            case _:  # the simulated application's offset fetches and commits
                if type(request).__name__ == "OffsetFetchRequest":
                    return OffsetFetchResponse()
                return OffsetCommitResponse()

    def listened(self, name: str, partitions: frozenset[TopicPartition]) -> None:
        self.act("listen", name, tuple(sorted(partitions)))


# --- the library's Member, on a scripted connection -------------------------------------


class ScriptedConnection:
    disconnect_grace_ms = None
    coordinator_stopping = False
    close_reason = None
    notices_dropped = 0

    def __init__(self, script: Script) -> None:
        self.script = script

    async def request(self, request: Request, *, timeout: float | None = None) -> Response:
        await anyio.lowlevel.checkpoint()  # a reply is another task's turn, as on a socket
        return self.script.answer(request)

    async def request_loaded(self, request: Request, *, timeout: float | None = None) -> Response:
        return await self.request(request, timeout=timeout)

    @property
    def notices(self) -> AsyncIterator[object]:
        return self._no_notices()

    async def _no_notices(self) -> AsyncIterator[object]:
        await anyio.sleep_forever()
        yield None


class Recorder(RebalanceListener):
    def __init__(self, script: Script) -> None:
        self.script = script

    async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.script.listened("on_partitions_assigned", partitions)

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.script.listened("on_partitions_revoked", partitions)

    async def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.script.listened("on_partitions_lost", partitions)


async def library_actions(monkeypatch: pytest.MonkeyPatch) -> list[Action]:
    script = Script()
    member = Member(
        "127.0.0.1:9",
        group_id="sim",
        topics=[TOPIC],
        assignors=["range"],
        heartbeat_interval_ms=50,
        session_timeout_ms=3_000,
        listener=Recorder(script),
    )

    @asynccontextmanager
    async def coordinator() -> AsyncIterator[ScriptedConnection]:
        script.act("connect")
        try:
            yield ScriptedConnection(script)
        finally:
            script.act("disconnect")

    monkeypatch.setattr(member._runtime, "_coordinator", coordinator)
    finished = anyio.Event()
    script.on_done = finished.set
    with anyio.fail_after(10):
        async with member:
            await finished.wait()
    return script.actions


# --- the simulator's member process, on a scripted link ----------------------------------


class ScriptedLink:
    def __init__(self, world: World, member: MemberProcess, script: Script) -> None:
        self.world, self.member, self.script = world, member, script
        self.conn_id = 1
        world.sched.after(1.0, member.link_up, self)

    def send(self, cid: int, request: Request) -> None:
        reply = Reply(correlation_id=cid, response=self.script.answer(request))
        self.world.sched.after(1.0, self.member.frame_arrived, self, reply)

    def close_by_member(self) -> None:
        self.script.act("disconnect")


class ScriptedNetwork:
    def __init__(self, world: World, script: Script) -> None:
        self.world, self.script = world, script

    def connect(self, member: MemberProcess) -> ScriptedLink:
        self.script.act("connect")
        return ScriptedLink(self.world, member, self.script)


def simulator_actions() -> list[Action]:
    script = Script()
    config = SimConfig(
        protocol="range",
        members=1,
        faults=0,
        static_share=0.0,
        heartbeat_interval_ms=50,
        session_timeout_ms=3_000,
        callback_ms=0.0,
    )
    world = World(0, config)
    world.topic = TOPIC
    world.net = ScriptedNetwork(world, script)  # type: ignore[assignment]
    listen: Callable[..., None] = world.callback

    def callback(m: MemberProcess, name: str, partitions: frozenset[TopicPartition]) -> None:
        script.listened(name, partitions)
        listen(m, name, partitions)

    world.callback = callback  # type: ignore[method-assign]
    while not script.done() and world.sched.now < 10_000 and world.sched.step():
        pass
    return script.actions


def test_member_and_the_simulator_take_the_same_actions_on_one_script(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    library = anyio.run(library_actions, monkeypatch)
    simulated = simulator_actions()
    expected = [
        ("connect",),
        ("send", "JoinGroupRequest"),
        ("send", "SyncGroupRequest"),
        ("listen", "on_partitions_assigned", tuple(sorted(OWNED))),
        *[("send", "HeartbeatRequest")] * (HEARTBEATS_IN_STEP + 1),
        # the answer of the wrong type: the connection is dropped and made again
        ("disconnect",),
        ("connect",),
    ]
    assert library == expected
    assert simulated == library
