"""The whole member core under an explicit clock, no runtime: two members with the
cooperative-deferred assignor (Design II), a scripted coordinator, time advanced by hand.

Member B dies; the leader A holds B's partitions while the scheduled-rebalance delay runs,
rejoins when ``next_deadline()`` says, and only then takes them over. Nothing reads a clock:
the assignor counts the delay on the time the core was given.
"""

from __future__ import annotations

from huddle.client.assignors.deferred import DeferredAssignor
from huddle.client.generation import Generation
from huddle.client.member_core import MemberConfig, MemberCore, MemberState, Next
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.messages import (
    JoinGroupMember,
    JoinGroupResponse,
    SyncGroupAssignment,
    SyncGroupResponse,
)

DELAY_MS = 30_000
PARTITIONS = {"t": 4}
ALL = frozenset(TopicPartition("t", p) for p in range(4))


def member(member_id: str) -> MemberCore:
    config = MemberConfig(group_id="g", topics=["t"], session_timeout_ms=10_000)
    assignor = DeferredAssignor(scheduled_rebalance_max_delay_ms=DELAY_MS)
    return MemberCore(config, [assignor], current=Generation(member_id=member_id))


def rebalance(cores: list[MemberCore], generation: int, now_ms: float) -> None:
    """One rebalance as the coordinator runs it: everyone joins, the first is the leader,
    the leader assigns, everyone syncs; all at ``now_ms``."""
    requests = [c.join_request() for c in cores]
    leader = cores[0].member_id
    members = [
        JoinGroupMember(member_id=c.member_id, metadata=r.protocols[0].metadata)
        for c, r in zip(cores, requests, strict=True)
    ]
    for c in cores:
        step = c.on_join(
            JoinGroupResponse(
                generation_id=generation,
                protocol_type="consumer",
                protocol_name="cooperative-deferred",
                leader=leader,
                member_id=c.member_id,
                members=members if c.member_id == leader else [],
            )
        )
        assert step.next is Next.SYNC
    lead = cores[0]
    assignments: list[SyncGroupAssignment] = lead.assign(lead.subscriptions(), PARTITIONS, now_ms)
    by_member = {a.member_id: a.assignment for a in assignments}
    for c in cores:
        c.assignment_received(
            c.on_sync(SyncGroupResponse(assignment=by_member[c.member_id]), now_ms)
        )


def test_the_deferred_delay_runs_on_the_cores_clock_and_ends_with_a_rejoin() -> None:
    a, b = member("a"), member("b")
    rebalance([a, b], generation=1, now_ms=0)
    rebalance([a, b], generation=2, now_ms=10)  # cooperative follow-up: moves settle
    assert a.owned | b.owned == ALL
    assert not a.owned & b.owned
    held = b.owned
    assert held

    # b dies at t = 1 s; the coordinator starts a rebalance without it
    a.request_rejoin()
    rebalance([a], generation=3, now_ms=1_000)
    assert a.owned == ALL - held  # b's partitions are held, not handed out
    assert a.state is MemberState.STABLE
    deadline = a.next_deadline()
    assert deadline is not None
    assert deadline == 1_000 + DELAY_MS  # when the held partitions' delay runs out

    assert a.on_deadline(deadline - 1) is None  # not yet
    assert a.state is MemberState.STABLE
    step = a.on_deadline(deadline)
    assert step is not None
    assert step.next is Next.JOIN  # the scheduled rebalance
    assert a.state.name == "UNJOINED"  # (the line above narrowed a.state for mypy)

    rebalance([a], generation=4, now_ms=deadline)
    assert a.owned == ALL  # the delay ran out on this clock: the lost partitions are a's
    assert a.rejoin_at_ms is None


def test_a_member_that_comes_back_within_the_delay_gets_its_partitions_back() -> None:
    a, b = member("a"), member("b")
    rebalance([a, b], generation=1, now_ms=0)
    rebalance([a, b], generation=2, now_ms=10)
    held = b.owned
    a.request_rejoin()
    rebalance([a], generation=3, now_ms=1_000)
    back = member("b2")  # b restarted: new to the group, owning nothing
    a.request_rejoin()
    rebalance([a, back], generation=4, now_ms=5_000)  # well within the delay
    assert back.owned == held
    assert a.owned == ALL - held


def test_the_session_clock_is_the_cores_and_expiry_loses_everything() -> None:
    a = member("a")
    rebalance([a], generation=1, now_ms=0)
    a.session.sent(0)
    a.session.answered(0)
    assert a.next_deadline() == 10_000  # the session timeout, counted from the send
    assert a.on_deadline(9_999) is None
    step = a.on_deadline(10_000)
    assert step is not None
    assert step.lost == ALL
    assert a.owned == frozenset()
    assert a.state is MemberState.UNJOINED
