"""Events decided about one stay in a generation are not applied to a later stay in the same
generation (issue 24, item 13), driven through the shared runtime (``MemberFlow``,
``MemberDriver``, ``MemberCore``) with an explicit clock, as ``Member`` and ``huddle.sim``
drive it.

A member whose session ran out while it could not reach the coordinator loses its partitions
at once, offline; the same expiry is also queued for its main loop. If the coordinator still
had it (its own count of the session starts later, or a cluster node took the group over with
fresh sessions), the member's rejoin with an unchanged subscription is answered with the very
generation it held before. The queued expiry then named "the generation the member is in"
and took the fresh assignment away again: ``assigned``, ``lost``, ``assigned`` in one
generation within milliseconds.
"""

from __future__ import annotations

from huddle.client.events import FellOut, HeartbeatAnswer, SessionExpired
from huddle.client.flow import Call, Flow, Listen, MemberFlow, Receive
from huddle.client.member_core import MemberState
from huddle.protocol.embedded import Assignment, encode, grouped
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from tests.builders import tps
from tests.client.test_driver import SESSION_MS, driver
from tests.client.test_flow import Host

E = ErrorCode


def member() -> tuple[MemberFlow, Host]:
    clock = Host()
    return MemberFlow(driver(), clock), clock


def join_and_sync(serve: Flow) -> object:
    """Drive ``serve`` through one JoinGroup (answered: generation 4, follower m-1) and one
    SyncGroup (t-0, t-1); the action after ``on_partitions_assigned``."""
    join = next(serve)
    assert isinstance(join, Call)
    assert isinstance(join.request, JoinGroupRequest)
    sync = serve.send(
        JoinGroupResponse(
            generation_id=4, member_id="m-1", leader="m-0", protocol_name="cooperative-sticky"
        )
    )
    assert isinstance(sync, Call)
    assert isinstance(sync.request, SyncGroupRequest)
    assigned = serve.send(
        SyncGroupResponse(assignment=encode(Assignment(assigned=grouped(tps("t-0 t-1")))))
    )
    assert isinstance(assigned, Listen)
    assert assigned.name == "on_partitions_assigned"
    return serve.send(None)


def lose_offline(f: MemberFlow, clock: Host) -> SessionExpired:
    """The connection is gone and the session runs out meanwhile: the runtime's watchdog
    posts the expiry for the main loop and has the loss handled offline at once."""
    f.driver.disconnected()
    clock.now += SESSION_MS + 1
    expired = f.driver.watchdog(clock.now)
    assert isinstance(expired, SessionExpired)
    offline = f.expired_while_disconnected(expired)
    assert next(offline) == Listen("on_partitions_lost", tps("t-0 t-1"))
    assert list(offline) == []
    assert f.core.owned == frozenset()
    assert f.core.state is MemberState.UNJOINED
    return expired


def test_an_expiry_handled_offline_does_not_take_back_the_same_generation_got_again() -> None:
    f, clock = member()
    f.driver.connected(500)
    serve = f.serve()
    assert isinstance(join_and_sync(serve), Receive)
    generation = f.core.current
    serve.close()  # the connection is lost
    queued = lose_offline(f, clock)
    assert queued.generation == generation

    # back: the coordinator still has m-1 in generation 4 and answers the rejoin with it
    clock.now += 100
    f.driver.connected(500)
    serve = f.serve()
    assert isinstance(join_and_sync(serve), Receive)
    assert f.core.generation == generation.id
    assert f.core.member_id == generation.member_id
    assert f.core.owned == tps("t-0 t-1")

    # the main loop now reads the expiry it was sent while offline: stale, it changes nothing
    clock.now += 2
    after = serve.send(queued)
    assert isinstance(after, Receive), after  # not on_partitions_lost
    assert f.core.owned == tps("t-0 t-1")
    assert f.core.state is MemberState.STABLE
    assert f.driver.visible(clock.now) == tps("t-0 t-1")


def test_refusals_from_a_stay_the_member_left_do_not_end_a_later_stay_in_that_generation() -> None:
    """The same for a heartbeat or a commit refused before the member fell out, answered
    again into the same generation: they were about the stay it has left."""
    f, clock = member()
    f.driver.connected(500)
    serve = f.serve()
    assert isinstance(join_and_sync(serve), Receive)
    before = f.core.current
    serve.close()
    lose_offline(f, clock)
    f.driver.connected(500)
    serve = f.serve()
    assert isinstance(join_and_sync(serve), Receive)
    for stale in (
        HeartbeatAnswer(E.UNKNOWN_MEMBER_ID, before),
        HeartbeatAnswer(E.ILLEGAL_GENERATION, before),
        FellOut(E.ILLEGAL_GENERATION, "refused", before),
    ):
        assert isinstance(serve.send(stale), Receive), stale
        assert f.core.owned == tps("t-0 t-1")
        assert f.core.member_id == "m-1"
    # one about the stay it is in still counts
    now = HeartbeatAnswer(E.ILLEGAL_GENERATION, f.core.current)
    assert serve.send(now) == Listen("on_partitions_lost", tps("t-0 t-1"))
