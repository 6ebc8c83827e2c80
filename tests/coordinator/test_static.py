"""Static membership (KIP-345) against the pure core."""

from __future__ import annotations

from huddle.client.assignors import CooperativeStickyAssignor
from huddle.client.member_core import MemberConfig, MemberCore, Next
from huddle.coordinator.state import GroupState
from huddle.protocol.embedded import Assignment, TopicPartition, encode, grouped
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import CreateTopicsRequest, MemberIdentity, TopicSpec
from tests.harness import Driver

E = ErrorCode
S = GroupState
LONG = 60_000


def stable_static_pair(d: Driver) -> tuple[str, str, int]:
    """Static members s1 (conn 1, leader) and s2 (conn 2), synced: (id1, id2, generation)."""
    id1 = d.join_response(d.join(1, instance="s1", session_ms=LONG)).member_id
    d.sync(1, id1, 1, {id1: b"one"})
    j2 = d.join(2, instance="s2", session_ms=LONG)
    j1 = d.join(1, id1, instance="s1", session_ms=LONG)
    id2 = d.join_response(j2).member_id
    generation = d.join_response(j1).generation_id
    d.sync(1, id1, generation, {id1: b"one", id2: b"two"}, instance="s1")
    d.sync(2, id2, generation, instance="s2")
    assert d.group().state is S.STABLE
    d.take_notices(1)
    d.take_notices(2)
    return id1, id2, generation


def test_static_member_joins_without_member_id_required() -> None:
    d = Driver()
    response = d.join_response(d.join(1, instance="s1"))
    assert response.error_code == E.NONE
    assert response.generation_id == 1
    assert d.group().static == {"s1": response.member_id}


def test_static_follower_restart_keeps_generation_and_assignment() -> None:
    d = Driver()
    _id1, id2, generation = stable_static_pair(d)
    restarted = d.join_response(d.join(3, instance="s2", session_ms=LONG))
    assert restarted.error_code == E.NONE
    assert restarted.member_id != id2
    assert restarted.generation_id == generation
    assert d.group().state is S.STABLE
    synced = d.sync_response(d.sync(3, restarted.member_id, generation, instance="s2"))
    assert synced.assignment == b"two"
    assert d.take_notices(1) == []  # the other member saw no rebalance


def test_static_leader_restart_skips_assignment_and_keeps_generation() -> None:
    d = Driver()
    _id1, id2, generation = stable_static_pair(d)
    restarted = d.join_response(d.join(3, instance="s1", session_ms=LONG))
    assert restarted.generation_id == generation
    assert restarted.leader == restarted.member_id
    assert restarted.skip_assignment
    assert {m.member_id for m in restarted.members} == {restarted.member_id, id2}
    synced = d.sync_response(d.sync(3, restarted.member_id, generation, instance="s1"))
    assert synced.assignment == b"one"
    assert d.group().state is S.STABLE


def test_a_static_restart_after_a_topic_changed_rebalances() -> None:
    """Found by huddle.sim: a static leader restarted while a topic's partition count
    changed; it took its generation back without an assignment, having missed the change
    notice (sent while its JoinGroup was on the way), and the group kept an assignment made
    for the old count. A static member comes back without a rebalance only if no topic
    changed since the generation formed."""
    d = Driver()
    _id1, _id2, generation = stable_static_pair(d)
    d.send(5, CreateTopicsRequest(topics=[TopicSpec(name="orders", partitions=3)]))
    restarted = d.join(3, instance="s1", session_ms=LONG)
    assert not d.answered(restarted)  # held: the group rebalances
    assert d.group().state is S.PREPARING_REBALANCE
    assert [type(n).__name__ for n in d.take_notices(2)] == [
        "TopicMetadataChanged",
        "RebalanceStarted",
    ]
    assert generation == d.group().generation


def test_a_restarted_follower_told_to_revoke_what_it_never_owned_starts_the_next_round() -> None:
    """Found by huddle.sim: a static follower's process ended before it rejoined after
    being told to revoke t-1, and its new process took the generation back without a
    rebalance, with the assignment stored for the old one (nothing assigned, t-1 revoked).
    Nobody else rejoins for t-1, so the new process does; its subscription now carries the
    generation it synced, as Kafka's does, so it is not the one stored at its restart and
    the coordinator starts the round that hands t-1 on (an unchanged follower's join in a
    Stable group is only answered with the same generation and assignment)."""
    d = Driver()
    cooperative = ("cooperative-sticky",)
    leader = d.join_response(d.join(1, instance="s1", names=cooperative, session_ms=LONG))
    d.sync(1, leader.member_id, leader.generation_id, instance="s1")
    old = MemberCore(MemberConfig("g", ["t"], instance_id="s2"), [CooperativeStickyAssignor()])
    held = d.send(2, old.join_request())
    rejoin = d.join(1, leader.member_id, instance="s1", names=cooperative, session_ms=LONG)
    generation = d.join_response(rejoin).generation_id
    id2 = d.join_response(held).member_id
    moved = Assignment(revoked=grouped([TopicPartition("t", 1)]))
    assignments = {leader.member_id: b"", id2: encode(moved)}
    d.sync(1, leader.member_id, generation, assignments, instance="s1")
    # the old process ends here, in its revocation callback; a new one comes back
    new = MemberCore(MemberConfig("g", ["t"], instance_id="s2"), [CooperativeStickyAssignor()])
    back = d.join_response(d.send(3, new.join_request()))
    assert back.generation_id == generation  # KIP-345: no rebalance
    assert new.on_join(back).next is Next.SYNC
    synced = d.sync_response(d.sync(3, back.member_id, generation, instance="s2"))
    assert new.on_sync(synced, d.now).next is Next.JOIN
    new.before_join()
    follow_up = d.send(3, new.join_request())
    assert not d.answered(follow_up)  # held: the group rebalances
    assert d.group().state is S.PREPARING_REBALANCE


def test_old_static_member_id_is_fenced_after_restart() -> None:
    d = Driver()
    _id1, id2, generation = stable_static_pair(d)
    d.join(3, instance="s2", session_ms=LONG)
    assert d.heartbeat(2, id2, generation, instance="s2") == E.FENCED_INSTANCE_ID
    fenced_sync = d.sync_response(d.sync(2, id2, generation, instance="s2"))
    assert fenced_sync.error_code == E.FENCED_INSTANCE_ID
    fenced_join = d.join_response(d.join(2, id2, instance="s2", session_ms=LONG))
    assert fenced_join.error_code == E.FENCED_INSTANCE_ID
    commit = d.commit(2, {}, member_id=id2, generation=generation, instance="s2")
    assert commit.error_code == E.FENCED_INSTANCE_ID


def test_duplicate_static_instance_fences_the_held_join_of_the_older() -> None:
    d = Driver()
    _id1, id2, _generation = stable_static_pair(d)
    held = d.join(2, id2, instance="s2", metadata=b"new", session_ms=LONG)  # a rebalance
    assert not d.answered(held)
    d.join(3, instance="s2", session_ms=LONG)  # a second process with the same instance id
    assert d.join_response(held).error_code == E.FENCED_INSTANCE_ID


def test_static_restart_with_changed_protocol_rebalances() -> None:
    d = Driver()
    _id1, _id2, generation = stable_static_pair(d)
    held = d.join(3, instance="s2", names=("roundrobin", "range"), session_ms=LONG)
    # the group still picks range (s1 supports only range): no rebalance needed
    assert d.join_response(held).generation_id == generation
    d2 = Driver()
    a1, _a2, gen2 = stable_static_pair(d2)
    # change s1's preference too: a vote flip needs a rebalance
    d2.join(1, a1, instance="s1", names=("roundrobin", "range"), session_ms=LONG)
    restart = d2.join(3, instance="s2", names=("roundrobin", "range"), session_ms=LONG)
    assert d2.join_response(restart).generation_id == gen2 + 1
    assert d2.join_response(restart).protocol_name == "roundrobin"


def test_static_members_do_not_get_the_disconnect_grace() -> None:
    d = Driver(disconnect_grace_ms=500)
    id1, id2, generation = stable_static_pair(d)
    d.close(2)
    d.advance(10_000)
    assert id2 in d.group().members
    assert d.heartbeat(1, id1, generation, instance="s1") == E.NONE
    d.advance(LONG - 10_000 + 1)  # s2 has been silent for a whole session
    assert id2 not in d.group().members
    assert id1 in d.group().members


def test_leave_by_instance_id_removes_a_static_member() -> None:
    d = Driver()
    _id1, id2, _generation = stable_static_pair(d)
    result = d.leave(9, MemberIdentity(group_instance_id="s2"))  # admin: no member id
    assert [(m.member_id, m.error_code) for m in result.members] == [(id2, E.NONE)]
    assert id2 not in d.group().members
    assert d.group().state is S.PREPARING_REBALANCE


def test_leave_with_fenced_instance_id() -> None:
    d = Driver()
    _id1, id2, _generation = stable_static_pair(d)
    result = d.leave(2, MemberIdentity(member_id="stale-id", group_instance_id="s2"))
    assert result.members[0].error_code == E.FENCED_INSTANCE_ID
    assert id2 in d.group().members
    unknown = d.leave(2, MemberIdentity(group_instance_id="nope"))
    assert unknown.members[0].error_code == E.UNKNOWN_MEMBER_ID


def test_unknown_static_member_with_member_id_is_rejected() -> None:
    d = Driver()
    stable_static_pair(d)
    response = d.join_response(d.join(3, "made-up", instance="s9", session_ms=LONG))
    assert response.error_code == E.UNKNOWN_MEMBER_ID


def test_a_static_members_heartbeat_without_its_instance_id_renews_its_session() -> None:
    """Kafka checks the instance id only when the request names one (validateMember)."""
    d = Driver()
    id1, id2, generation = stable_static_pair(d)
    for _ in range(3):  # three half-sessions: the session lives only if these renew it
        d.advance(LONG / 2)
        assert d.heartbeat(1, id1, generation) == E.NONE
        assert d.heartbeat(2, id2, generation, instance="s2") == E.NONE
    assert set(d.group().members) == {id1, id2}
    assert d.heartbeat(1, id1, generation, instance="s2") == E.FENCED_INSTANCE_ID
