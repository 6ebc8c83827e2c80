"""Members against the real coordinator on loopback: the scenarios users script."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace

import anyio
import anyio.abc
import pytest
from huddle.testing import wait_settled

import huddle.client.flow as flow_module
import huddle.client.member as member_module
from huddle.chaos.proxy import fault_proxy
from huddle.cli.admin import render_group
from huddle.client import (
    Admin,
    CommitFailedError,
    Member,
    MemberFailedError,
    RebalanceListener,
    StableTimeoutError,
    TopicPartition,
)
from huddle.client.assignors.base import MemberAssignment
from huddle.client.assignors.high_availability import HighAvailabilityAssignor
from huddle.client.assignors.sticky import CooperativeStickyAssignor
from huddle.client.describe import compact
from huddle.client.running import MemberTask
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.errors import HuddleError
from tests.helpers import (
    FAST_GROUP,
    MEMBER_SESSION_MS,
    Recorder,
    fast_server_config,
    member,
    partitions,
    running_server,
    wait_until,
)

TP = TopicPartition
COOP = ["cooperative-sticky"]


@asynccontextmanager
async def topic(bootstrap: str, count: int, name: str = "t") -> AsyncIterator[None]:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(name, count)
    yield


async def test_members_join_and_share_the_partitions(bootstrap: str) -> None:
    async with topic(bootstrap, 6), AsyncExitStack() as stack:
        members = [await stack.enter_async_context(member(bootstrap)) for _ in range(3)]
        await wait_settled(members, {"t": 6})
        assert sorted(len(m.assignment) for m in members) == [2, 2, 2]
        assert sum(m.is_leader for m in members) == 1
        assert {m.protocol for m in members} == {"cooperative-sticky"}
        assert {m.rebalance_protocol for m in members} == {"cooperative"}
        async with Admin(bootstrap) as admin:
            view = await admin.describe("g")
        assert view.state == "Stable"
        assert view.protocol == "cooperative-sticky"
        assert {tp for mv in view.members for tp in mv.owned} == partitions(6)
        assert {mv.member_id: frozenset(mv.owned) for mv in view.members} == {
            m.member_id: m.assignment for m in members
        }
        shown = render_group(view)  # what `huddle groups describe g` prints
        assert "cooperative-sticky" in shown
        for m in members:
            assert compact(m.assignment) in shown


async def test_cooperative_callback_order_is_kip429s(bootstrap: str) -> None:
    a_calls, b_calls = Recorder(), Recorder()
    async with topic(bootstrap, 4), member(bootstrap, listener=a_calls) as a:
        await wait_settled([a], {"t": 4})
        assert a_calls.names() == [("assigned", [0, 1, 2, 3])]
        async with member(bootstrap, listener=b_calls) as b:
            await wait_settled([a, b], {"t": 4})
            moved = sorted(tp.partition for tp in b.assignment)
            kept = sorted(tp.partition for tp in a.assignment)
            assert len(moved) == len(kept) == 2
            # a: revoked exactly what moves, then assigned nothing new (in this round and in
            # the follow-up round: on_partitions_assigned is called every time); it kept
            # processing the rest all along (never revoked).
            assert a_calls.names() == [
                ("assigned", [0, 1, 2, 3]),
                ("revoked", moved),
                ("assigned", []),
                ("assigned", []),
            ]
            # b: first round its share is withheld (a still owned it), then it arrives.
            assert b_calls.names() == [("assigned", []), ("assigned", moved)]
            # the hand-over happened only after a gave them up
            revoked_at = a_calls.calls[1][2]
            arrived_at = b_calls.calls[1][2]
            assert revoked_at <= arrived_at


async def test_the_assignor_hears_of_its_assignment_between_revoked_and_assigned(
    bootstrap: str,
) -> None:
    """KIP-429: on_partitions_revoked, then the assignor's on_assignment, then
    on_partitions_assigned."""

    class Told(CooperativeStickyAssignor):
        def __init__(self, calls: Recorder) -> None:
            super().__init__()
            self.calls = calls

        def on_assignment(self, assignment: MemberAssignment, generation: int) -> None:
            self.calls.calls.append(("on_assignment", assignment.partitions, time.monotonic()))

    a_calls = Recorder()
    async with (
        topic(bootstrap, 4),
        member(bootstrap, listener=a_calls, assignors=[Told(a_calls)]) as a,
    ):
        await wait_settled([a], {"t": 4})
        async with member(bootstrap) as b:
            await wait_settled([a, b], {"t": 4})
            kept = sorted(tp.partition for tp in a.assignment)
            moved = sorted(set(range(4)) - set(kept))
            assert a_calls.names()[:4] == [
                ("on_assignment", [0, 1, 2, 3]),
                ("assigned", [0, 1, 2, 3]),
                ("revoked", moved),
                ("on_assignment", kept),
            ]
            assert a_calls.names()[4] == ("assigned", [])


class SlowRevocation(Recorder):
    """The first revocation lasts until the coordinator renewed the member's session more
    than a session timeout after the callback began: a member that stopped heartbeating
    during it would have been removed by then (the wait fails at its deadline)."""

    def __init__(self, server: CoordinatorServer) -> None:
        super().__init__()
        self.server = server
        self.member_id = ""
        self.slowed = False

    def renewed_after(self, began_ms: float) -> bool:
        group = self.server.core.groups.get("g")
        member = group.members.get(self.member_id) if group is not None else None
        if member is None:
            return False
        deadline = self.server.core.timers.deadline(member.session_key)
        return deadline is not None and deadline > began_ms + 2 * MEMBER_SESSION_MS

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        await super().on_partitions_revoked(revoked)
        if self.slowed:
            return
        self.slowed = True
        began_ms = asyncio.get_running_loop().time() * 1000  # the coordinator's clock
        await wait_until(lambda: self.renewed_after(began_ms), what="a renewal a session on")


@pytest.mark.parametrize("assignors", [COOP, ["range"]], ids=["cooperative", "eager"])
async def test_a_revocation_longer_than_the_session_keeps_the_membership(
    server: CoordinatorServer, bootstrap: str, assignors: list[str]
) -> None:
    """The member heartbeats while on_partitions_revoked runs, as Kafka's does; the callback
    is bounded by the rebalance timeout (Kafka's max.poll.interval.ms), not the session."""
    slow = SlowRevocation(server)
    async with (
        topic(bootstrap, 4),
        member(bootstrap, listener=slow, assignors=assignors) as a,
    ):
        await wait_settled([a], {"t": 4})
        slow.member_id = first_id = a.member_id
        async with member(bootstrap, assignors=assignors) as b:
            await wait_settled([a, b], {"t": 4})
            assert slow.slowed
            assert a.member_id == first_id
            assert "lost" not in [name for name, _ in slow.names()]
            assert len(a.assignment) == len(b.assignment) == 2


async def test_a_revocation_longer_than_the_rebalance_timeout_gives_the_membership_up(
    server: CoordinatorServer, bootstrap: str
) -> None:
    """Past the rebalance timeout the member stops heartbeating: the group goes on without
    it, and once the callback returns it finds it fell out (lost) and joins anew."""
    released = anyio.Event()

    class Stuck(Recorder):
        async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
            await super().on_partitions_revoked(revoked)
            await released.wait()

    stuck = Stuck()
    settings = {"session_timeout_ms": 1_000, "rebalance_timeout_ms": 1_500}
    async with (
        topic(bootstrap, 4),
        member(bootstrap, listener=stuck, **settings) as a,
    ):
        await wait_settled([a], {"t": 4})
        first_id = a.member_id
        async with member(bootstrap) as b:

            def removed() -> bool:
                group = server.core.groups.get("g")
                return group is not None and first_id not in group.members

            await wait_until(removed, what="the group to go on without the stuck member")
            await wait_until(lambda: b.assignment == partitions(4), what="b to take all")
            assert a.assignment == frozenset()  # still in its callback, but owns nothing
            released.set()
            await wait_settled([a, b], {"t": 4})
            assert a.member_id != first_id
            assert "lost" in [name for name, _ in stuck.names()]


async def test_eager_callback_order(bootstrap: str) -> None:
    a_calls, b_calls = Recorder(), Recorder()
    async with (
        topic(bootstrap, 4),
        member(bootstrap, listener=a_calls, assignors=["range"]) as a,
    ):
        await wait_settled([a], {"t": 4})
        async with member(bootstrap, listener=b_calls, assignors=["range"]) as b:
            await wait_settled([a, b], {"t": 4})
            assert a_calls.names()[:2] == [("assigned", [0, 1, 2, 3]), ("revoked", [0, 1, 2, 3])]
            assert a_calls.names()[2][0] == "assigned"
            assert len(a_calls.names()[2][1]) == 2
            assert b_calls.names() == [("assigned", sorted(tp.partition for tp in b.assignment))]
            assert a.rebalance_protocol == "eager"


async def test_clean_leave_hands_partitions_over(bootstrap: str) -> None:
    leaver_calls = Recorder()
    async with topic(bootstrap, 4), member(bootstrap) as stayer:
        async with member(bootstrap, listener=leaver_calls) as leaver:
            await wait_settled([stayer, leaver], {"t": 4})
            gone = leaver.assignment
        assert leaver_calls.calls[-1][:2] == ("revoked", gone)  # given up on close
        assert all(name != "lost" for name, _, _ in leaver_calls.calls)
        await wait_settled([stayer], {"t": 4})


async def test_a_cancelled_member_is_replaced_within_the_disconnect_grace(
    bootstrap: str,
) -> None:
    async with topic(bootstrap, 4), member(bootstrap) as stayer:
        async with anyio.create_task_group() as tg:
            ready = anyio.Event()

            async def doomed() -> None:
                async with member(bootstrap, session_timeout_ms=30_000) as m:
                    await wait_settled([stayer, m], {"t": 4})
                    ready.set()
                    await anyio.sleep_forever()

            tg.start_soon(doomed)
            await ready.wait()
            started = time.monotonic()
            tg.cancel_scope.cancel()  # killed: no LeaveGroup, the socket just closes
        await wait_settled([stayer], {"t": 4})
        assert time.monotonic() - started < 5  # the grace, not the 30 s session


async def test_without_the_grace_a_cancelled_member_leaves_by_session_timeout() -> None:
    config = fast_server_config(group=replace(FAST_GROUP, disconnect_grace_ms=-1))
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with topic(bootstrap, 4), member(bootstrap) as stayer:
            async with anyio.create_task_group() as tg:
                ready = anyio.Event()

                async def doomed() -> None:
                    async with member(bootstrap) as m:
                        await wait_settled([stayer, m], {"t": 4})
                        ready.set()
                        await anyio.sleep_forever()

                tg.start_soon(doomed)
                await ready.wait()
                started = time.monotonic()
                tg.cancel_scope.cancel()
            await wait_settled([stayer], {"t": 4})
            assert time.monotonic() - started >= MEMBER_SESSION_MS / 1000 * 0.9


async def test_static_bounce_keeps_generation_and_assignment(bootstrap: str) -> None:
    other_calls = Recorder()
    async with topic(bootstrap, 4), member(bootstrap, listener=other_calls) as other:
        async with member(bootstrap, instance_id="static-1", session_timeout_ms=10_000) as s:
            await wait_settled([other, s], {"t": 4})
            generation, kept = s.generation, s.assignment
        other_calls.clear()
        async with member(bootstrap, instance_id="static-1", session_timeout_ms=10_000) as back:
            await wait_settled([other, back], {"t": 4})
            assert back.generation == generation
            assert back.assignment == kept
            assert other_calls.calls == []  # nobody else noticed


async def test_the_leader_leaving_hands_leadership_on(bootstrap: str) -> None:
    async with topic(bootstrap, 6), AsyncExitStack() as stack:
        members = [await stack.enter_async_context(member(bootstrap)) for _ in range(2)]
        leader_cm = member(bootstrap)
        async with leader_cm as third:
            await wait_settled([*members, third], {"t": 6})
            leaders = [m for m in (*members, third) if m.is_leader]
            assert len(leaders) == 1
        # whoever led, once the third member leaves, the other two settle with one leader
        await wait_settled(members, {"t": 6})
        assert sum(m.is_leader for m in members) == 1


async def test_a_partition_count_change_reaches_the_members(bootstrap: str) -> None:
    async with topic(bootstrap, 2), AsyncExitStack() as stack:
        members = [await stack.enter_async_context(member(bootstrap)) for _ in range(2)]
        await wait_settled(members, {"t": 2})
        async with Admin(bootstrap) as admin:
            await admin.alter_topic("t", 6)
        await wait_settled(members, {"t": 6})


async def test_eager_to_cooperative_upgrade_by_two_rolling_bounces(bootstrap: str) -> None:
    everything = {"t": 6}
    plan = [["range"], ["range", "cooperative-sticky"], ["cooperative-sticky"]]
    async with topic(bootstrap, 6), anyio.create_task_group() as tg:
        running = [
            await MemberTask(member(bootstrap, assignors=plan[0])).start(tg) for _ in range(3)
        ]
        members = [r.member for r in running]
        await wait_settled(members, everything)
        for bounce, assignors in enumerate(plan[1:], start=1):
            for i in range(len(running)):
                await running[i].stop()
                running[i] = await MemberTask(member(bootstrap, assignors=assignors)).start(tg)
                members[i] = running[i].member
                await wait_settled(members, everything)
            if bounce == 1:
                # everyone still lists range first and range is eager-only: still eager
                assert {m.protocol for m in members} == {"range"}
                assert {m.rebalance_protocol for m in members} == {"eager"}
        assert {m.protocol for m in members} == {"cooperative-sticky"}
        assert {m.rebalance_protocol for m in members} == {"cooperative"}
        for r in running:
            await r.stop()


async def test_a_zombie_loses_its_partitions_before_anyone_else_gets_them(
    server: CoordinatorServer,
) -> None:
    direct = f"127.0.0.1:{server.port}"
    zombie_calls, other_calls = Recorder(), Recorder()
    async with topic(direct, 4), fault_proxy("127.0.0.1", server.port) as proxy:
        async with (
            member(direct, listener=other_calls) as other,
            member(f"127.0.0.1:{proxy.port}", listener=zombie_calls) as zombie,
        ):
            await wait_settled([other, zombie], {"t": 4})
            held = zombie.assignment
            generation = zombie.generation
            frozen_at = time.monotonic()
            proxy.stall()  # heartbeats stall; the connection stays open
            await wait_until(lambda: any(c[0] == "lost" for c in zombie_calls.calls), wait_s=10)
            await wait_settled([other], {"t": 4})
            lost_at = next(t for name, _, t in zombie_calls.calls if name == "lost")
            handed_at = next(
                t
                for name, ps, t in other_calls.calls
                if name == "assigned" and ps & held and t > frozen_at
            )
            assert lost_at <= handed_at  # zombie safety
            assert zombie.assignment == frozenset()
            proxy.heal()
            with pytest.raises((CommitFailedError, HuddleError)):
                await zombie.commit({next(iter(held)): 99})
            assert generation < other.generation
        committed = await _committed(direct, held)
        assert 99 not in committed.values()


async def _committed(
    bootstrap: str, tps: frozenset[TopicPartition]
) -> dict[TopicPartition, int | None]:
    async with member(bootstrap, group_id="observer") as observer:
        await observer.wait_stable(10)
        return await observer.committed(tps)


async def test_a_dropped_connection_is_rejoined_with_the_same_member_id(
    server: CoordinatorServer,
) -> None:
    direct = f"127.0.0.1:{server.port}"
    follower_calls = Recorder()
    async with (
        topic(direct, 4),
        fault_proxy("127.0.0.1", server.port) as proxy,
        member(direct) as leader,
    ):
        await wait_settled([leader], {"t": 4})
        async with member(f"127.0.0.1:{proxy.port}", listener=follower_calls) as follower:
            await wait_settled([leader, follower], {"t": 4})
            member_id, generation, owned = (
                follower.member_id,
                follower.generation,
                follower.assignment,
            )
            follower_calls.clear()
            await proxy.drop()  # the coordinator's socket is gone; the member reconnects
            await wait_until(lambda: not follower.connected, wait_s=5)
            await wait_until(lambda: follower.connected, wait_s=5)
            await wait_settled([leader, follower], {"t": 4})
            assert follower.member_id == member_id
            assert follower.generation == generation  # back within the grace: no rebalance
            assert follower.assignment == owned
            assert all(name != "lost" for name, _, _ in follower_calls.calls)


async def test_commits_are_fenced_and_fetched(bootstrap: str) -> None:
    async with topic(bootstrap, 2), member(bootstrap) as m:
        await wait_settled([m], {"t": 2})
        await m.commit({TP("t", 0): 10, TP("t", 1): 20})
        assert await m.committed([TP("t", 0), TP("t", 1)]) == {TP("t", 0): 10, TP("t", 1): 20}


async def test_commits_and_fetches_larger_than_one_request_are_split(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The coordinator bounds the partitions one request may name; a member commits and
    fetches any number of partitions, in requests within that bound."""
    monkeypatch.setattr(member_module, "REQUEST_PARTITIONS", 3)
    config = fast_server_config(group=replace(FAST_GROUP, max_request_partitions=4))
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with topic(bootstrap, 10), topic(bootstrap, 2, "u"), member(bootstrap) as m:
            await wait_settled([m], {"t": 10})
            offsets = {TP("t", p): 100 + p for p in range(10)} | {TP("u", 1): 5}
            await m.commit(offsets)
            wanted = [*offsets, TP("u", 0), TP("t", 0)]
            assert await m.committed(wanted) == offsets | {TP("u", 0): None}


async def test_a_member_subscribed_to_more_topics_than_one_request_names_gets_them_all(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request names at most MAX_ITEMS topics: the member asks in as many as it takes."""
    monkeypatch.setattr(flow_module, "MAX_ITEMS", 2)
    names = [f"t{i}" for i in range(5)]
    async with Admin(bootstrap) as admin:
        for name in names:
            await admin.create_topic(name, 1)
    async with member(bootstrap, topics=names) as m:
        await wait_settled([m], dict.fromkeys(names, 1))


async def test_revoked_partitions_are_committed_before_the_rejoin(bootstrap: str) -> None:
    order: list[str] = []

    class CommitOnRevoke(RebalanceListener):
        def __init__(self) -> None:
            self.member: Member | None = None

        async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
            assert self.member is not None
            await self.member.commit({tp: 7 for tp in revoked})
            order.append("committed")

    listener = CommitOnRevoke()
    async with topic(bootstrap, 4), member(bootstrap, listener=listener) as a:
        listener.member = a
        await wait_settled([a], {"t": 4})
        async with member(bootstrap) as b:
            await wait_settled([a, b], {"t": 4})
            assert order == ["committed"]
            got = await b.committed(sorted(b.assignment))
            assert set(got.values()) == {7}


async def test_a_fatal_error_stops_the_member(bootstrap: str) -> None:
    async with topic(bootstrap, 2), member(bootstrap, assignors=["range"]) as first:
        await wait_settled([first], {"t": 2})
        with pytest.raises(MemberFailedError, match="INCONSISTENT_GROUP_PROTOCOL"):
            async with member(bootstrap, assignors=["roundrobin"]) as odd:
                await odd.wait_stable(10)


async def test_a_member_that_cannot_reach_the_coordinator_closes_promptly() -> None:
    with anyio.fail_after(3):  # not the 5 s maximum backoff, nor a session timeout
        async with member("127.0.0.1:1", max_retry_backoff_ms=5_000) as lonely:
            with pytest.raises(TimeoutError):
                await lonely.wait_stable(timeout=0.5)
            assert not lonely.connected


async def test_wait_stable_running_out_is_a_huddle_error_that_says_what_it_saw() -> None:
    async with member("127.0.0.1:1", max_retry_backoff_ms=200) as lonely:
        with pytest.raises(TimeoutError) as caught:  # what code written for it catches
            await lonely.wait_stable(timeout=0.3)
    error = caught.value
    assert isinstance(error, StableTimeoutError)
    assert isinstance(error, HuddleError)
    assert str(error) == (
        "the member was not stable (joined, synced, no rebalance pending) within 0.3 s: "
        "state unjoined, generation -1, 0 partitions owned, not connected to the coordinator"
    )


async def test_assignment_is_empty_once_the_session_may_have_expired() -> None:
    """A frozen process that wakes up sees nothing to process, even before its watchdog
    has called on_partitions_lost: zombie safety at the moment the application looks."""
    m = member("127.0.0.1:1")
    m._core.owned = partitions(2)
    m._timer.answered(anyio.current_time() * 1000 - MEMBER_SESSION_MS - 1)  # the core counts in ms
    assert m.assignment == frozenset()
    m._timer.answered(anyio.current_time() * 1000)
    assert m.assignment == partitions(2)


async def test_a_member_cut_off_owns_nothing_once_its_session_expired(
    server: CoordinatorServer, bootstrap: str
) -> None:
    """Zombie safety while it reconnects: once the other member has its partitions, the
    cut-off member lists none (its session clock had run out, and stays run out until
    on_partitions_lost has run), never the same partitions as the other."""
    async with (
        topic(bootstrap, 4),
        fault_proxy("127.0.0.1", server.port) as proxy,
        member(bootstrap) as b,
        member(f"127.0.0.1:{proxy.port}") as a,
    ):
        await wait_settled([a, b], {"t": 4})
        assert a.assignment
        await proxy.partition()
        await wait_until(lambda: b.assignment == partitions(4), what="b to take all")
        assert a.assignment == frozenset()
        proxy.heal()
        await wait_settled([a, b], {"t": 4})


async def test_a_stuck_replicas_callback_is_bounded_like_the_others(
    server: CoordinatorServer, bootstrap: str
) -> None:
    released = anyio.Event()

    class StuckOnReplicas(RebalanceListener):
        async def on_replicas_assigned(
            self, standby: frozenset[TopicPartition], warmup: frozenset[TopicPartition]
        ) -> None:
            if standby:
                await released.wait()

    def ha() -> list[HighAvailabilityAssignor]:
        return [HighAvailabilityAssignor(num_standby_replicas=1)]

    settings = {"session_timeout_ms": 1_000, "rebalance_timeout_ms": 1_500}
    async with (
        topic(bootstrap, 2),
        member(bootstrap, listener=StuckOnReplicas(), assignors=ha(), **settings) as a,
    ):
        await wait_settled([a], {"t": 2})
        first_id = a.member_id
        async with member(bootstrap, assignors=ha()) as b:

            def removed() -> bool:
                group = server.core.groups.get("g")
                return group is not None and first_id not in group.members

            await wait_until(removed, what="the group to go on without the stuck member")
            assert a.assignment == frozenset()
            released.set()
            await wait_settled([a, b], {"t": 2})
            assert a.member_id != first_id


async def test_the_callbacks_of_one_step_share_one_rebalance_timeout() -> None:
    """Revoked, assigned and replicas callbacks of one rebalance run on one clock (Kafka
    bounds one poll by max.poll.interval.ms): a later callback does not restart it."""
    m = member("127.0.0.1:1", rebalance_timeout_ms=1_000)  # never started: no I/O
    driver = m._driver
    outer = driver.callbacks_began(5_000.0)
    started = driver.listener_since
    assert outer
    assert started == 5_000.0
    inner = driver.callbacks_began(5_500.0)  # the next callback of the same step
    assert not inner
    assert driver.listener_since == started
    assert not driver.listener_overdue(started + 999)
    assert driver.listener_overdue(started + 1_001)
    driver.callbacks_ended(inner)
    assert driver.listener_since == started
    driver.callbacks_ended(outer)
    assert driver.listener_since is None
