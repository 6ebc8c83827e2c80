"""The member's sans-IO core: protocol choice, what it sends, and what each answer means."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from huddle.client.assignors.base import (
    Assignor,
    GroupAssignment,
    MemberAssignment,
    MemberSubscription,
    RebalanceProtocol,
)
from huddle.client.generation import Generation
from huddle.client.heartbeat import HeartbeatTimer
from huddle.client.member_core import MemberConfig, MemberCore, MemberState, Next, choose_protocol
from huddle.protocol.embedded import (
    Assignment,
    TopicPartition,
    decode_subscription,
    encode,
    grouped,
)
from huddle.protocol.errors import ErrorCode, to_code
from huddle.protocol.messages import JoinGroupMember, JoinGroupResponse, SyncGroupResponse

E = ErrorCode
TP = TopicPartition
EAGER, COOPERATIVE = RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE


class Eager(Assignor):
    name = "eager-only"
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (EAGER,)

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> GroupAssignment:
        return {m: MemberAssignment() for m in subscriptions}


class Both(Eager):
    name = "both"
    supported_protocols = (EAGER, COOPERATIVE)


def core(*assignors: Assignor, instance: str | None = None) -> MemberCore:
    return MemberCore(
        MemberConfig(group_id="g", topics=["t"], instance_id=instance), list(assignors)
    )


def joined(c: MemberCore, generation: int = 1, leader: str = "m-1") -> None:
    c.current = Generation(member_id="m-1")  # as after MEMBER_ID_REQUIRED
    step = c.on_join(
        JoinGroupResponse(
            generation_id=generation,
            protocol_type="consumer",
            protocol_name=c.assignors[0].name,
            leader=leader,
            member_id="m-1",
            members=[JoinGroupMember(member_id="m-1")],
        )
    )
    assert step.next is Next.SYNC


def synced(c: MemberCore, *partitions: int) -> Next:
    assignment = encode(Assignment(assigned=grouped(TP("t", p) for p in partitions)))
    return c.on_sync(SyncGroupResponse(assignment=assignment), 0).next


def test_protocol_is_the_highest_all_assignors_support() -> None:
    assert choose_protocol([Both()]) is COOPERATIVE
    assert choose_protocol([Eager(), Both()]) is EAGER  # first rolling bounce: still eager
    assert choose_protocol([Both(), Eager()]) is EAGER

    class CoopOnly(Eager):
        name = "coop-only"
        supported_protocols = (COOPERATIVE,)

    with pytest.raises(ValueError, match="share no rebalance protocol"):
        choose_protocol([Eager(), CoopOnly()])


def test_join_lists_every_assignor_in_preference_order() -> None:
    c = core(Both(), Eager())
    request = c.join_request()
    assert [p.name for p in request.protocols] == ["both", "eager-only"]
    assert decode_subscription(request.protocols[0].metadata).topics == ["t"]
    assert request.protocol_type == "consumer"
    assert request.member_id == ""


def test_kip394_member_id_required_then_join_again() -> None:
    c = core(Both())
    step = c.on_join(JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id="m-7"))
    assert step.next is Next.JOIN
    assert c.join_request().member_id == "m-7"


def test_cooperative_member_reports_owned_and_revokes_only_what_moves() -> None:
    c = core(Both())
    joined(c)
    assert synced(c, 0, 1) is Next.STAY
    assert c.owned == {TP("t", 0), TP("t", 1)}
    assert c.before_join().revoked == frozenset()  # cooperative: keeps everything
    sub = decode_subscription(c.join_request().protocols[0].metadata)
    assert sub.owned == {TP("t", 0), TP("t", 1)}
    assert sub.generation == 1
    joined(c, generation=2)
    assignment = encode(Assignment(assigned=grouped([TP("t", 1), TP("t", 2)])))
    step = c.on_sync(SyncGroupResponse(assignment=assignment), 0)
    assert step.revoked == {TP("t", 0)}
    assert step.assigned == frozenset({TP("t", 2)})  # only what is new
    assert step.next is Next.JOIN  # it gave something up: rejoin so it can move
    assert c.owned == {TP("t", 1), TP("t", 2)}


def test_cooperative_member_with_nothing_revoked_stays_and_is_told_of_empty_assignment() -> None:
    c = core(Both())
    joined(c)
    synced(c, 0)
    joined(c, generation=2)
    step = c.on_sync(
        SyncGroupResponse(assignment=encode(Assignment(assigned=grouped([TP("t", 0)])))), 0
    )
    assert step.revoked == frozenset()
    assert step.assigned == frozenset()  # on_partitions_assigned is always called
    assert step.next is Next.STAY


def test_a_member_told_to_revoke_what_it_claimed_but_no_longer_owns_still_rejoins() -> None:
    # Its join claimed t-5, which it lost before the assignment came: the leader took t-5
    # away and holds it for the follow-up round, which only comes if this member rejoins.
    c = core(Both())
    joined(c)
    synced(c, 0, 5)
    c.join_request()  # claims t-0 and t-5
    c.owned = frozenset({TP("t", 0)})  # as if t-5 had been lost meanwhile
    joined(c, generation=2)
    assignment = Assignment(assigned=grouped([TP("t", 0)]), revoked=grouped([TP("t", 5)]))
    step = c.on_sync(SyncGroupResponse(assignment=encode(assignment)), 0)
    assert step.revoked == frozenset()  # nothing to give up here
    assert step.next is Next.JOIN
    assert c.owned == {TP("t", 0)}


def stale(assigned: list[int], revoked: list[int]) -> SyncGroupResponse:
    """An assignment made for a static member's previous process."""
    assignment = Assignment(
        assigned=grouped(TP("t", p) for p in assigned), revoked=grouped(TP("t", p) for p in revoked)
    )
    return SyncGroupResponse(assignment=encode(assignment))


@pytest.mark.parametrize("assigned", [[], [0]])
def test_a_revocation_of_what_the_member_never_claimed_makes_it_rejoin_once(
    assigned: list[int],
) -> None:
    # A static member's process ended before it rejoined after being told to revoke t-5. Its
    # new process (owning nothing) comes back while the group is Stable and gets, without a
    # rebalance, the assignment stored for the old one. The round that hands t-5 on only
    # comes if someone rejoins: this member does, once for the generation.
    c = core(Both(), instance="i-1")
    first = decode_subscription(c.join_request().protocols[0].metadata)
    assert first.generation == -1  # a new process: no generation yet
    joined(c, generation=6)
    step = c.on_sync(stale(assigned, [5]), 1_000.0)
    assert step.next is Next.JOIN
    assert step.revoked == frozenset()  # nothing of it was this process's
    assert c.owned == {TP("t", p) for p in assigned}
    assert c.before_join().next is Next.JOIN
    again = decode_subscription(c.join_request().protocols[0].metadata)
    # Unlike the join the coordinator stored for it, so even a follower assigned nothing
    # starts a rebalance (an unchanged follower's join is answered with the same generation).
    assert again.generation == 6
    assert again != first
    # No rebalance after all (the same generation, the same stale assignment): it stays.
    joined(c, generation=6)
    assert c.on_sync(stale(assigned, [5]), 1_050.0).next is Next.STAY
    assert c.state is MemberState.STABLE
    # The next generation's leader knows what it claims: nothing revoked, nothing owed.
    c.request_rejoin()
    c.join_request()
    joined(c, generation=7)
    assert c.on_sync(stale([*assigned, 5], []), 1_100.0).next is Next.STAY


def test_a_revocation_of_what_the_assignment_also_gives_asks_nothing() -> None:
    c = core(Both(), instance="i-1")
    joined(c)
    c.join_request()  # claims nothing
    joined(c)
    assert c.on_sync(stale([0], [5]), 0).next is Next.JOIN
    c.join_request()  # claims t-0
    joined(c, generation=2)
    assert c.on_sync(stale([0], [0]), 0).next is Next.STAY
    assert c.owned == {TP("t", 0)}


def test_eager_member_revokes_everything_before_joining() -> None:
    c = core(Eager())
    joined(c)
    synced(c, 0, 1)
    step = c.before_join()
    assert step.revoked == {TP("t", 0), TP("t", 1)}
    assert c.owned == frozenset()
    # the eager-only assignor still hears what was owned, for stickiness
    sub = decode_subscription(c.join_request().protocols[0].metadata)
    assert sub.owned == {TP("t", 0), TP("t", 1)}
    joined(c, generation=2)
    step = c.on_sync(
        SyncGroupResponse(assignment=encode(Assignment(assigned=grouped([TP("t", 1)])))), 0
    )
    assert step.revoked == frozenset()
    assert step.assigned == frozenset({TP("t", 1)})  # the whole new assignment


def test_eager_member_of_a_cooperative_capable_assignor_reports_nothing_owned() -> None:
    c = core(Eager(), Both())  # first bounce of an upgrade: EAGER
    joined(c)
    synced(c, 0)
    c.before_join()
    subs = {p.name: decode_subscription(p.metadata) for p in c.join_request().protocols}
    assert subs["both"].owned == frozenset()  # it revoked: others may take them at once
    assert subs["eager-only"].owned == {TP("t", 0)}


@pytest.mark.parametrize(
    ("code", "keeps_member_id"),
    [(E.UNKNOWN_MEMBER_ID, False), (E.ILLEGAL_GENERATION, True)],
)
def test_falling_out_loses_everything_and_rejoins(code: ErrorCode, keeps_member_id: bool) -> None:
    c = core(Both())
    joined(c)
    synced(c, 0, 1)
    step = c.on_heartbeat(code, c.current)
    assert step.lost == {TP("t", 0), TP("t", 1)}
    assert step.next is Next.JOIN
    assert c.owned == frozenset()
    assert c.generation == -1
    assert (c.member_id == "m-1") is keeps_member_id


def test_fatal_errors_stop_the_member() -> None:
    c = core(Both(), instance="i-1")
    joined(c)
    synced(c, 0)
    step = c.on_heartbeat(E.FENCED_INSTANCE_ID, c.current)
    assert step.next is Next.FAIL
    assert step.lost == {TP("t", 0)}
    assert c.state is MemberState.FAILED


def test_stale_heartbeat_answers_and_notices_change_nothing() -> None:
    c = core(Both())
    joined(c, generation=5)
    synced(c, 0)
    assert c.on_heartbeat(E.ILLEGAL_GENERATION, Generation(4, "m-1", "both")).next is Next.STAY
    assert c.on_rebalance_notice(4).next is Next.STAY
    assert c.owned == {TP("t", 0)}
    assert c.on_rebalance_notice(5).next is Next.JOIN
    assert c.state is MemberState.UNJOINED


def test_answers_about_a_generation_of_the_same_number_before_a_restart_change_nothing() -> None:
    # A coordinator without a data dir restarts and numbers generations from 1 again; the
    # member rejoined with a new id. An answer to a heartbeat or commit sent before is stale.
    c = core(Both())
    joined(c, generation=1)
    synced(c, 0)
    before = c.current
    c.on_heartbeat(E.UNKNOWN_MEMBER_ID, before)
    assert c.member_id == ""
    c.current = Generation(member_id="m-2")
    c.on_join(
        JoinGroupResponse(
            generation_id=1,
            protocol_type="consumer",
            protocol_name="both",
            leader="m-2",
            member_id="m-2",
            members=[JoinGroupMember(member_id="m-2")],
        )
    )
    synced(c, 0)
    assert c.generation == before.id
    assert c.on_heartbeat(E.ILLEGAL_GENERATION, before).next is Next.STAY
    assert c.on_commit_error(E.ILLEGAL_GENERATION, "", before).next is Next.STAY
    assert c.owned == {TP("t", 0)}
    assert c.on_commit_error(E.ILLEGAL_GENERATION, "", c.current).lost == {TP("t", 0)}


def test_rebalance_in_progress_from_a_heartbeat_means_rejoin() -> None:
    c = core(Both())
    joined(c)
    synced(c, 0)
    assert c.on_heartbeat(E.REBALANCE_IN_PROGRESS, c.current).next is Next.JOIN
    assert c.owned == {TP("t", 0)}


def test_only_dynamic_members_leave() -> None:
    dynamic, static = core(Both()), core(Both(), instance="i-1")
    joined(dynamic)
    joined(static)
    request = dynamic.leave_request()
    assert request is not None
    assert request.members[0].member_id == "m-1"
    assert static.leave_request() is None


def test_scheduled_rebalance_delay_is_passed_on() -> None:
    c = core(Both())
    joined(c)
    assignment = encode(Assignment(scheduled_rebalance_delay_ms=2_500))
    assert c.on_sync(SyncGroupResponse(assignment=assignment), 0).rejoin_after_ms == 2_500


def test_heartbeat_timer_session_counts_from_the_send_of_the_last_answered_request() -> None:
    timer = HeartbeatTimer(session_timeout_ms=10_000, heartbeat_interval_ms=1_000)
    assert not timer.expired(1e9)  # no session yet
    timer.sent(100_000)  # milliseconds, as the member core counts
    timer.answered(100_000)
    assert timer.next_heartbeat() == 101_000
    assert not timer.expired(109_999)
    assert timer.expired(110_000)
    timer.answered(99_000)  # an older answer does not move it back
    assert timer.session_deadline() == 110_000
    timer.shorten(100_500)  # e.g. the connection closed: gone sooner
    assert timer.session_deadline() == 100_500
    with pytest.raises(ValueError, match="below the session timeout"):
        HeartbeatTimer(session_timeout_ms=1_000, heartbeat_interval_ms=1_000)


def test_task_lags_are_reported_in_every_subscription() -> None:
    c = core(Both(), Eager())
    request = c.join_request({TP("t", 0): 120, TP("t", 3): 0})
    for protocol in request.protocols:
        assert decode_subscription(protocol.metadata).lags == {TP("t", 0): 120, TP("t", 3): 0}


def test_standby_and_warmup_changes_are_reported_once() -> None:
    c = core(Both())
    joined(c)
    assignment = encode(
        Assignment(
            assigned=grouped([TP("t", 0)]),
            standby=grouped([TP("t", 1)]),
            warmup=grouped([TP("t", 2)]),
        )
    )
    step = c.on_sync(SyncGroupResponse(assignment=assignment), 0)
    assert step.replicas == (frozenset({TP("t", 1)}), frozenset({TP("t", 2)}))
    assert (c.standby, c.warmup) == (frozenset({TP("t", 1)}), frozenset({TP("t", 2)}))
    joined(c, generation=2)
    assert c.on_sync(SyncGroupResponse(assignment=assignment), 0).replicas is None  # unchanged


@pytest.mark.parametrize("number", [E.KAFKA_STORAGE_ERROR.value, E.UNKNOWN_SERVER_ERROR.value, 58])
def test_an_unexpected_heartbeat_error_fails_that_heartbeat_only(number: int) -> None:
    """Kafka's heartbeat thread retries after such an answer; the member keeps its
    generation and partitions (an eager member rejoining would revoke everything)."""
    c = core(Eager())
    joined(c)
    synced(c, 0, 1)
    step = c.on_heartbeat(to_code(number), c.current)
    assert step.next is Next.STAY
    assert (step.lost, step.revoked) == (frozenset(), frozenset())
    assert c.state is MemberState.STABLE
    assert c.owned == {TP("t", 0), TP("t", 1)}
    assert c.generation == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("group_id", "g" * 256),
        ("instance_id", "i" * 250),
        ("instance_id", ""),
        ("client_id", "c" * 256),
    ],
)
def test_ids_over_the_coordinators_bounds_are_refused_at_once(field: str, value: str) -> None:
    """The coordinator would refuse every request; the member says so when it is made."""
    settings: dict[str, Any] = {"group_id": "g", "topics": ["t"], field: value}
    with pytest.raises(ValueError, match=r"characters, over|must be None"):
        MemberConfig(**settings)


def test_a_stable_member_told_its_coordinator_moved_reconnects_without_rejoining() -> None:
    # The group's shard moved to another node, which loaded the group in this generation:
    # the member finds it and goes on heartbeating there, keeping what it owns.
    c = core(Both())
    joined(c)
    synced(c, 0, 1)
    for code in (E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE):
        step = c.on_heartbeat(code, c.current)
        assert step.next is Next.RECONNECT
        assert step.revoked == step.lost == frozenset()
        assert c.state is MemberState.STABLE
        assert c.owned == {TP("t", 0), TP("t", 1)}
        assert c.member_id == "m-1"
    # a sync cut short by a move is done again, with a join
    joined(c, generation=2)
    step = c.on_sync(SyncGroupResponse(error_code=E.NOT_COORDINATOR), 0)
    assert step.next is Next.RECONNECT
    assert c.state is MemberState.UNJOINED
