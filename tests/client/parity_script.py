"""A scripted coordinator for both member adapters, and what each did against it: the
library's ``Member`` on anyio with a scripted connection, the simulator's member process on
its scheduler with a scripted link (``tests/client/test_member_runtime_parity.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import pytest

from huddle.client import Member, RebalanceListener
from huddle.client.connection_errors import ConnectionClosedError
from huddle.client.driver import MemberDriver
from huddle.protocol.embedded import Assignment, TopicPartition, encode, grouped
from huddle.protocol.errors import HuddleError
from huddle.protocol.messages import (
    FetchedOffset,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopicResult,
    Reply,
    Request,
    Response,
    ServerFrame,
    SyncGroupRequest,
    SyncGroupResponse,
)
from huddle.sim import SimConfig
from huddle.sim.application import Application
from huddle.sim.process import MemberProcess
from huddle.sim.world import World

TOPIC = "events"
OWNED = frozenset({TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)})
ASSIGNED = ("listen", "on_partitions_assigned", tuple(sorted(OWNED)))
Action = tuple[Any, ...]
Until = Callable[[], bool]


class Scenario:
    """A scripted coordinator, and the log of what the member did."""

    # the requests written down (heartbeats only once the member has synced: those sent
    # while it syncs go out when its tasks say so)
    recorded: ClassVar[tuple[type[Request], ...]] = (
        JoinGroupRequest,
        SyncGroupRequest,
        LeaveGroupRequest,
    )
    session_timeout_ms: ClassVar[int] = 3_000
    rebalance_timeout_ms: ClassVar[int] = 10_000
    commits: ClassVar[int] = 0  # the library's application commits this often, when stable
    ends_written: ClassVar[bool] = True

    def __init__(self) -> None:
        self.actions: list[Action] = []
        self.generation = 0
        self.synced = 0  # SyncGroups answered
        self.heartbeats = 0  # answered since the last SyncGroup
        self.attempts = 0  # connection attempts
        self.ends = 0  # connection attempts and connections that ended
        self.up = 0  # connections the script let up
        self.finished = False
        self.on_act: Callable[[], None] = lambda: None  # the adapter's: something happened
        self.push: Callable[[ServerFrame], None] = lambda frame: None  # a notice, on the link

    def done(self) -> bool:
        return self.seen("done", "on_partitions_assigned") >= 2

    def act(self, *action: Any) -> None:
        """Write ``action`` down, until the script is done."""
        if self.finished:
            return
        self.actions.append(action)
        self.finished = self.done()
        self.on_act()

    def seen(self, *action: Any) -> int:
        return self.actions.count(action)

    def ended(self) -> None:
        """A connection attempt, or a connection, ended (each adapter notices it at its own
        time where nothing it does tells when: those scenarios leave it out)."""
        self.ends += 1
        if self.ends_written:
            self.act("disconnect")

    # --- what the coordinator answers ---------------------------------------------------

    def answer(self, request: Request) -> Response | None:
        """The answer to ``request``; None: the connection drops instead."""
        if isinstance(request, self.recorded) and (
            self.synced or not isinstance(request, HeartbeatRequest)
        ):
            member = getattr(request, "member_id", None)
            detail = (member,) if isinstance(request, JoinGroupRequest) else ()
            self.act("send", type(request).__name__, *detail)
        match request:
            case JoinGroupRequest():
                self.generation += 1
                return JoinGroupResponse(
                    generation_id=self.generation,
                    protocol_name=request.protocols[0].name,
                    leader="leader",
                    member_id=request.member_id or f"m-{self.generation}",
                )
            case SyncGroupRequest():
                self.synced += 1
                self.heartbeats = 0
                return SyncGroupResponse(assignment=encode(Assignment(assigned=grouped(OWNED))))
            case HeartbeatRequest() if self.synced:
                self.heartbeats += 1
                return self.heartbeat()
            case HeartbeatRequest():
                return HeartbeatResponse()
            case LeaveGroupRequest():
                return LeaveGroupResponse()
            case OffsetCommitRequest():
                return self.commit()
            case OffsetFetchRequest(topics=topics):
                return OffsetFetchResponse(
                    topics=[
                        OffsetFetchTopicResult(
                            name=t.name,
                            partitions=[FetchedOffset(partition=p) for p in t.partitions],
                        )
                        for t in topics or []
                    ]
                )
        raise AssertionError(f"not scripted: {request!r}")

    def heartbeat(self) -> Response | None:
        return HeartbeatResponse()

    def commit(self) -> Response:
        return OffsetCommitResponse()

    # --- where the script waits for the member ------------------------------------------

    def connect_fails(self) -> Until | None:
        """This connection attempt fails once the returned condition holds; None: it
        succeeds."""
        return None

    def connect_waits(self) -> Until | None:
        """This connection is made once the returned condition holds (then ``lost_at_once``
        says whether it is lost at once); None: at once."""
        return None

    def lost_at_once(self) -> bool:
        return False

    def callback_until(self, name: str) -> Until | None:
        """The library's callback ``name`` returns once this holds (None: at once)."""
        return None

    def callback_ms(self, name: str) -> float:
        """How long the simulator's callback ``name`` takes (it waits on its clock)."""
        return 0.0


# --- the library's Member, on a scripted connection -------------------------------------


class Waits:
    """The library's side waits for the script's conditions."""

    def __init__(self, script: Scenario) -> None:
        self.changed = anyio.Event()
        script.on_act = self.wake

    def wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    async def until(self, condition: Until) -> None:
        while not condition():
            await self.changed.wait()


class ScriptedConnection:
    disconnect_grace_ms = None
    coordinator_stopping = False
    close_reason = None
    notices_dropped = 0

    def __init__(self, script: Scenario) -> None:
        self.script = script
        self.closed = False
        self._push, self._notices = anyio.create_memory_object_stream[ServerFrame](10)
        script.push = self._push.send_nowait

    async def request(self, request: Request, *, timeout: float | None = None) -> Response:
        await anyio.lowlevel.checkpoint()  # a reply is another task's turn, as on a socket
        if self.closed:
            raise ConnectionClosedError("lost")
        response = self.script.answer(request)
        if response is None:
            self._push.close()
            raise ConnectionClosedError("dropped by the script")
        return response

    async def request_loaded(self, request: Request, *, timeout: float | None = None) -> Response:
        return await self.request(request, timeout=timeout)

    @property
    def notices(self) -> AsyncIterator[ServerFrame]:
        return self._notices


class Recorder(RebalanceListener):
    def __init__(self, script: Scenario, waits: Waits) -> None:
        self.script, self.waits = script, waits

    async def _called(self, name: str, partitions: frozenset[TopicPartition]) -> None:
        self.script.act("listen", name, tuple(sorted(partitions)))
        until = self.script.callback_until(name)
        if until is not None:
            await self.waits.until(until)
        self.script.act("done", name)

    async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        await self._called("on_partitions_assigned", partitions)

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        await self._called("on_partitions_revoked", partitions)

    async def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        await self._called("on_partitions_lost", partitions)


def recording_connections(driver: MemberDriver, script: Scenario) -> None:
    """``driver`` writes down when it is told a connection is served, and gone."""
    connected, disconnected = driver.connected, driver.disconnected

    def served(grace_ms: int | None) -> None:
        script.act("driver", "connected")
        connected(grace_ms)

    def gone() -> None:
        script.act("driver", "disconnected")
        disconnected()

    driver.connected = served  # type: ignore[method-assign]
    driver.disconnected = gone  # type: ignore[method-assign]


async def library_actions(
    scenario: type[Scenario], monkeypatch: pytest.MonkeyPatch
) -> list[Action]:
    script = scenario()
    waits = Waits(script)
    member = Member(
        "127.0.0.1:9",
        group_id="sim",
        topics=[TOPIC],
        assignors=["range"],
        heartbeat_interval_ms=50,
        session_timeout_ms=scenario.session_timeout_ms,
        rebalance_timeout_ms=scenario.rebalance_timeout_ms,
        listener=Recorder(script, waits),
    )
    recording_connections(member._driver, script)

    @asynccontextmanager
    async def coordinator() -> AsyncIterator[ScriptedConnection]:
        script.attempts += 1
        script.act("connect")
        try:
            fails, made = script.connect_fails(), script.connect_waits()
            if fails is not None:
                await waits.until(fails)
                raise OSError("refused by the script")
            if made is not None:
                await waits.until(made)
            conn = ScriptedConnection(script)
            conn.closed = script.lost_at_once()
            script.up += 1
            script.on_act()
            yield conn
        finally:
            script.ended()

    monkeypatch.setattr(member._runtime, "_coordinator", coordinator)
    with anyio.fail_after(10):
        async with member:
            for _ in range(scenario.commits):
                await member.wait_stable()
                with suppress(HuddleError):  # refused: the member acts on it itself
                    await member.commit(dict.fromkeys(OWNED, 5))
            await waits.until(lambda: script.finished)
    return script.actions


# --- the simulator's member process, on a scripted link ----------------------------------


class ScriptedLink:
    def __init__(self, world: World, member: MemberProcess, script: Scenario) -> None:
        self.world, self.member, self.script = world, member, script
        self.conn_id = script.attempts
        fails, made = script.connect_fails(), script.connect_waits()
        if fails is not None:
            self._once(fails, self._refused)
        elif made is not None:
            self._once(made, self._made)
        else:
            self._made()

    def _once(self, condition: Until, then: Callable[[], None]) -> None:
        on_act = self.script.on_act

        def check() -> None:
            on_act()
            if condition():
                self.script.on_act = on_act
                then()

        self.script.on_act = check

    def _refused(self) -> None:
        self.world.sched.after(1.0, self.member.link_down, self, "refused by the script")

    def _made(self) -> None:
        self.world.sched.after(1.0, self.member.link_up, self)
        self.script.push = self.push
        if self.script.lost_at_once():
            self.world.sched.after(2.0, self.member.link_down, self, "lost at once")
        self.script.up += 1
        self.script.on_act()

    def push(self, frame: ServerFrame) -> None:
        self.world.sched.after(1.0, self.member.frame_arrived, self, frame)

    def send(self, cid: int, request: Request) -> None:
        response = self.script.answer(request)
        if response is None:
            self.world.sched.after(1.0, self.member.link_down, self, "dropped by the script")
            return
        self.push(Reply(correlation_id=cid, response=response))

    def close_by_member(self) -> None:
        self.script.ended()


class ScriptedNetwork:
    def __init__(self, world: World, script: Scenario) -> None:
        self.world, self.script = world, script

    def connect(self, member: MemberProcess) -> ScriptedLink:
        self.script.attempts += 1
        self.script.act("connect")
        return ScriptedLink(self.world, member, self.script)


def simulator_actions(scenario: type[Scenario], monkeypatch: pytest.MonkeyPatch) -> list[Action]:
    script = scenario()
    config = SimConfig(
        protocol="range",
        members=1,
        faults=0,
        static_share=0.0,
        heartbeat_interval_ms=50,
        session_timeout_ms=scenario.session_timeout_ms,
        rebalance_timeout_ms=scenario.rebalance_timeout_ms,
        callback_ms=0.0,
    )
    start = MemberProcess.start
    callback = Application.callback
    callback_done = Application.callback_done

    def started(m: MemberProcess) -> None:
        start(m)
        recording_connections(m.driver, script)

    running: list[str] = []  # the callback running (they never overlap)

    def called(app: Application, name: str, partitions: frozenset[TopicPartition]) -> float:
        running.append(name)
        script.act("listen", name, tuple(sorted(partitions)))
        return callback(app, name, partitions) + script.callback_ms(name)

    def done(app: Application) -> None:
        script.act("done", running.pop())
        callback_done(app)

    with monkeypatch.context() as patch:
        patch.setattr(MemberProcess, "start", started)
        patch.setattr(Application, "callback", called)
        patch.setattr(Application, "callback_done", done)
        world = World(0, config)
        world.topic = TOPIC
        world.net = ScriptedNetwork(world, script)  # type: ignore[assignment]
        world.troubled_until = [float("inf")]  # the script is the fault: losses are expected
        while not script.finished and world.sched.now < 60_000 and world.sched.step():
            pass
    return script.actions


def both(scenario: type[Scenario], monkeypatch: pytest.MonkeyPatch) -> list[Action]:
    """What the library's Member did, checked to be what the simulator's process did."""
    library = anyio.run(library_actions, scenario, monkeypatch)
    simulated = simulator_actions(scenario, monkeypatch)
    assert simulated == library
    return library
