"""The black-box scenarios of Kafka's own coordinator tests, against the pure core."""

from __future__ import annotations

from huddle.coordinator.state import GroupState
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import CreateTopicsRequest, TopicSpec
from tests.harness import REBALANCE_MS, SESSION_MS, Driver

E = ErrorCode
S = GroupState


def test_lone_member_becomes_leader_at_generation_one() -> None:
    d = Driver()
    member_id, cid = d.join_new(1)
    joined = d.join_response(cid)
    assert joined.error_code == E.NONE
    assert joined.generation_id == 1
    assert joined.leader == member_id == joined.member_id
    assert joined.protocol_name == "range"
    assert [m.member_id for m in joined.members] == [member_id]
    assert d.group().state is S.COMPLETING_REBALANCE
    synced = d.sync_response(d.sync(1, member_id, 1, {member_id: b"all"}))
    assert synced.error_code == E.NONE
    assert synced.assignment == b"all"
    assert d.group().state is S.STABLE


def test_empty_member_id_gets_member_id_required_with_a_generated_id() -> None:
    d = Driver()
    first = d.join_response(d.join(1))
    assert first.error_code == E.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("c1-")
    assert d.group().state is S.EMPTY
    assert first.member_id in d.group().pending


def test_session_timeout_outside_bounds_is_rejected() -> None:
    d = Driver()
    for session_ms in (d.config.min_session_timeout_ms - 1, d.config.max_session_timeout_ms + 1):
        response = d.join_response(d.join(1, session_ms=session_ms))
        assert response.error_code == E.INVALID_SESSION_TIMEOUT
        assert str(session_ms) in (response.error_message or "")
    assert "g" not in d.core.groups


def test_a_rebalance_timeout_over_the_bound_is_rejected() -> None:
    """One member cannot hold its group's join phase for ever (2**64 - 1 ms was accepted)."""
    d = Driver(max_rebalance_timeout_ms=60_000)
    for rebalance_ms in (60_001, 2**63 - 1):
        response = d.join_response(d.join(1, rebalance_ms=rebalance_ms))
        assert response.error_code == E.INVALID_SESSION_TIMEOUT
        assert f"rebalance timeout {rebalance_ms} ms" in (response.error_message or "")
    assert "g" not in d.core.groups
    assert d.join_response(d.join(1, rebalance_ms=60_000)).error_code == E.MEMBER_ID_REQUIRED


def test_one_connection_holds_a_bounded_number_of_members() -> None:
    """One connection once kept 20,000 held joins, and so 20,000 groups, alive."""
    d = Driver(max_members_per_connection=2)
    first = d.join_response(d.join(1, group="a"))
    second = d.join_response(d.join(1, group="b"))
    assert (first.error_code, second.error_code) == (E.MEMBER_ID_REQUIRED,) * 2
    refused = d.join_response(d.join(1, group="c"))
    assert refused.error_code == E.INVALID_REQUEST
    assert "holds 2 members" in (refused.error_message or "")
    assert "c" not in d.core.groups
    # the members it has go on; another connection is not affected
    assert d.join_response(d.join(1, first.member_id, group="a")).error_code == E.NONE
    assert d.join_response(d.join(2, group="c")).error_code == E.MEMBER_ID_REQUIRED
    d.leave(1, first.member_id, group="a")
    assert d.join_response(d.join(1, group="c")).error_code == E.MEMBER_ID_REQUIRED


def test_empty_group_id_is_invalid() -> None:
    d = Driver()
    assert d.join_response(d.join(1, group="")).error_code == E.INVALID_GROUP_ID


def test_inconsistent_protocol_type_and_no_common_protocol() -> None:
    d = Driver()
    d.form(1)
    other_type = d.join_response(d.join(2, protocol_type="connect"))
    assert other_type.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    member_id = d.join_response(d.join(3, names=("roundrobin",))).member_id
    no_common = d.join_response(d.join(3, member_id, names=("roundrobin",)))
    assert no_common.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert d.group().state is S.STABLE
    assert len(d.group().members) == 1


def test_empty_protocol_list_is_rejected() -> None:
    d = Driver()
    response = d.join_response(d.join(1, names=(), protocol_type=""))
    assert response.error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_unknown_member_id_on_a_new_group() -> None:
    d = Driver()
    response = d.join_response(d.join(1, "ghost-1"))
    assert response.error_code == E.UNKNOWN_MEMBER_ID
    assert "g" not in d.core.groups


def test_unknown_member_id_on_an_existing_group_does_not_rebalance() -> None:
    d = Driver()
    d.form(1)
    generation = d.group().generation
    assert d.join_response(d.join(2, "ghost-1")).error_code == E.UNKNOWN_MEMBER_ID
    assert d.group().state is S.STABLE
    assert d.group().generation == generation


def test_unchanged_follower_rejoin_does_not_rebalance() -> None:
    d = Driver()
    _leader, follower = d.form(1, 2)
    again = d.join_response(d.join(2, follower))
    assert again.error_code == E.NONE
    assert again.generation_id == 2
    assert again.members == []
    assert d.group().state is S.STABLE


def test_leader_rejoin_rebalances_and_generation_increments() -> None:
    d = Driver()
    leader, follower = d.form(1, 2)
    assert d.group().generation == 2
    held = d.join(1, leader)
    assert not d.answered(held)
    assert d.group().state is S.PREPARING_REBALANCE
    follower_join = d.join(2, follower)
    assert d.join_response(held).generation_id == 3
    assert d.join_response(follower_join).generation_id == 3


def test_follower_with_changed_metadata_rebalances() -> None:
    d = Driver()
    leader, follower = d.form(1, 2)
    held = d.join(2, follower, metadata=b"new topics")
    assert not d.answered(held)
    assert d.group().state is S.PREPARING_REBALANCE
    leader_join = d.join(1, leader)
    members = {m.member_id: m.metadata for m in d.join_response(leader_join).members}
    assert members[follower] == b"new topics"


def test_only_the_leader_gets_the_member_list() -> None:
    d = Driver()
    a, b = d.form(1, 2)
    ja = d.join(1, a, metadata=b"A")
    jb = d.join(2, b, metadata=b"B")
    leader_response = d.join_response(ja)
    assert leader_response.leader == a
    assert {m.member_id: m.metadata for m in leader_response.members} == {a: b"A", b: b"B"}
    assert d.join_response(jb).members == []


def test_protocol_vote_picks_the_most_preferred_common_protocol() -> None:
    d = Driver()
    a, ja = d.join_new(1, names=("roundrobin", "range"))
    d.sync(1, a, 1, {a: b""})
    b, _jb = d.join_new(2, names=("range", "roundrobin"))
    _c, jc = d.join_new(3, names=("range", "sticky"))
    ja = d.join(1, a, names=("roundrobin", "range"))
    d.join(2, b, names=("range", "roundrobin"))
    assert d.join_response(ja).protocol_name == "range"  # "roundrobin" lacks member c
    assert d.join_response(jc).protocol_name == "range"


def test_pending_member_expires_while_the_group_stays_stable() -> None:
    d = Driver()
    (a,) = d.form(1)
    generation = d.group().generation
    pending = d.join_response(d.join(2)).member_id
    assert pending in d.group().pending
    d.advance(SESSION_MS / 2)
    assert d.heartbeat(1, a, generation) == E.NONE
    d.advance(SESSION_MS / 2 + 1)
    assert pending not in d.group().pending
    assert d.group().state is S.STABLE
    assert d.group().generation == generation
    assert d.join_response(d.join(2, pending)).error_code == E.UNKNOWN_MEMBER_ID


def test_pending_member_blocks_join_completion_until_it_joins() -> None:
    d = Driver()
    leader, follower = d.form(1, 2)
    pending = d.join_response(d.join(3)).member_id
    held_leader = d.join(1, leader)
    held_follower = d.join(2, follower)
    assert not d.answered(held_leader)
    late = d.join(3, pending)
    assert d.join_response(held_leader).generation_id == 3
    assert {m.member_id for m in d.join_response(held_leader).members} == {
        leader,
        follower,
        pending,
    }
    assert d.join_response(late).generation_id == 3
    assert d.answered(held_follower)


def test_session_timeout_removes_a_silent_member_and_rebalances() -> None:
    d = Driver()
    a, b = d.form(1, 2)
    d.advance(SESSION_MS / 2)
    assert d.heartbeat(1, a, 2) == E.NONE
    assert b in d.group().members
    d.advance(SESSION_MS / 2 + 1)
    assert b not in d.group().members
    assert d.group().state is S.PREPARING_REBALANCE
    assert d.heartbeat(1, a, 2) == E.REBALANCE_IN_PROGRESS
    assert d.join_response(d.join(1, a)).generation_id == 3


def test_a_session_is_not_ended_while_its_connections_input_waits_to_be_read() -> None:
    """The transport may hold a member's heartbeat unread (its connection's frames are
    handled a slice per loop pass; a thousand members may share one connection): the
    session is looked at again once that input has been read, not ended on the spot."""
    d = Driver()
    a, b = d.form(1, 2)
    assert d.heartbeat(1, a, 2) == E.NONE
    d.advance(SESSION_MS + 1, unread=lambda conn_id: conn_id == 2)
    assert b in d.group().members, "conn 2 had input waiting: b may have heartbeated"
    assert a not in d.group().members, "conn 1 had nothing waiting: a's session ended"
    d.advance(200, unread=lambda conn_id: False)
    assert "g" not in d.core.groups, "b's session ended once its input was read: none left"


def test_a_connection_kept_busy_does_not_keep_a_silent_member_alive() -> None:
    """The grace for unread input lasts one more session timeout at most: a connection
    that always has frames waiting (other members' traffic) must not keep a member that
    sends nothing in its group for ever."""
    d = Driver()
    _a, b = d.form(1, 2)
    d.advance(SESSION_MS + 1, unread=lambda conn_id: conn_id == 2)
    assert b in d.group().members
    d.advance(SESSION_MS, unread=lambda conn_id: True)
    assert "g" not in d.core.groups or b not in d.group().members


def test_session_timeout_during_a_rebalance_lets_the_join_complete() -> None:
    d = Driver()
    a, b = d.form(1, 2)
    held = d.join(1, a)
    d.advance(SESSION_MS + 1)  # b never rejoins and its session runs out
    response = d.join_response(held)
    assert response.generation_id == 3
    assert [m.member_id for m in response.members] == [a]
    assert b not in d.group().members


def test_held_join_keeps_a_member_past_its_session_timeout() -> None:
    d = Driver()
    a, b = d.form(1, 2, rebalance_ms=60_000)
    held_a = d.join(1, a, rebalance_ms=60_000)
    for _ in range(5):  # a waits on the coordinator for 2.5 sessions; b heartbeats
        d.advance(SESSION_MS / 2)
        assert d.heartbeat(2, b, 2) == E.REBALANCE_IN_PROGRESS
    assert a in d.group().members
    assert not d.answered(held_a)
    d.join(2, b, rebalance_ms=60_000)
    assert d.join_response(held_a).generation_id == 3


def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    d = Driver()
    a, b = d.form(1, 2, session_ms=60_000, rebalance_ms=REBALANCE_MS)
    held = d.join(1, a, session_ms=60_000)
    d.advance(REBALANCE_MS - 1)
    assert not d.answered(held)
    d.advance(1)
    assert d.join_response(held).generation_id == 3
    assert b not in d.group().members


def test_rebalance_completes_without_a_static_member_that_did_not_rejoin() -> None:
    d = Driver()
    static_id = d.join_response(d.join(1, instance="s1", session_ms=60_000)).member_id
    d.sync(1, static_id, 1, {static_id: b"s"})
    dyn, dj = d.join_new(2, session_ms=60_000)
    sj = d.join(1, static_id, instance="s1", session_ms=60_000)
    generation = d.sync_all({1: static_id, 2: dyn}, [sj, dj])
    assert d.group().state is S.STABLE
    # A rebalance that only the dynamic member joins:
    held = d.join(2, dyn, metadata=b"changed", session_ms=60_000)
    d.advance(REBALANCE_MS)
    response = d.join_response(held)
    assert response.generation_id == generation + 1
    assert response.leader == dyn  # the static leader did not rejoin: a joined member leads
    assert static_id in d.group().members  # kept: it is expected back
    assert {m.member_id for m in response.members} == {static_id, dyn}


def test_no_member_rejoined_extends_the_join_phase() -> None:
    d = Driver()
    static_id = d.join_response(d.join(1, instance="s1", session_ms=100_000)).member_id
    d.sync(1, static_id, 1, {static_id: b"x"})
    dyn, _dj = d.join_new(2)  # starts a rebalance ...
    d.leave(2, dyn)  # ... and leaves; the static member never rejoins
    g = d.group()
    assert g.state is S.PREPARING_REBALANCE
    d.advance(REBALANCE_MS + 1)
    assert g.state is S.PREPARING_REBALANCE  # extended, not completed with nobody
    assert g.generation == 1
    assert static_id in g.members
    d.advance(100_000)  # the static member's session runs out
    assert "g" not in d.core.groups


def test_sync_not_received_in_time_removes_the_member_and_rebalances() -> None:
    d = Driver()
    a, b = d.form(1, 2, session_ms=60_000)
    ja, jb = d.join(1, a, session_ms=60_000), d.join(2, b, session_ms=60_000)
    generation = d.join_response(ja).generation_id
    leader_sync = d.sync(1, a, generation, {a: b"A", b: b"B"})
    assert d.sync_response(leader_sync).assignment == b"A"
    assert d.group().state is S.STABLE
    d.advance(REBALANCE_MS + 1)  # b never syncs
    assert b not in d.group().members
    assert d.group().state in (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE)
    assert d.join_response(jb).generation_id == generation


def test_leader_fails_during_sync_followers_get_rebalance_in_progress() -> None:
    d = Driver()
    a, b = d.form(1, 2, session_ms=60_000)
    _ja, jb = d.join(1, a, session_ms=60_000), d.join(2, b, session_ms=60_000)
    generation = d.join_response(jb).generation_id
    follower_sync = d.sync(2, b, generation)
    assert not d.answered(follower_sync)
    d.advance(REBALANCE_MS + 1)  # the leader never syncs
    response = d.sync_response(follower_sync)
    assert response.error_code == E.REBALANCE_IN_PROGRESS
    assert a not in d.group().members


def test_leader_leaving_during_sync_answers_followers_with_rebalance_in_progress() -> None:
    d = Driver()
    a, b = d.form(1, 2)
    _ja, jb = d.join(1, a), d.join(2, b)
    generation = d.join_response(jb).generation_id
    follower_sync = d.sync(2, b, generation)
    d.leave(1, a)
    assert d.sync_response(follower_sync).error_code == E.REBALANCE_IN_PROGRESS
    assert d.group().leader == b


def test_sync_from_illegal_generation_or_unknown_member() -> None:
    d = Driver()
    a, _b = d.form(1, 2)
    assert d.sync_response(d.sync(1, a, 1)).error_code == E.ILLEGAL_GENERATION
    assert d.sync_response(d.sync(1, "nobody", 2)).error_code == E.UNKNOWN_MEMBER_ID
    assert d.sync_response(d.sync(1, a, 2, group="other")).error_code == E.UNKNOWN_MEMBER_ID


def test_sync_during_preparing_rebalance_is_refused() -> None:
    d = Driver()
    a, b = d.form(1, 2)
    d.join(1, a, metadata=b"x")
    assert d.sync_response(d.sync(2, b, 2)).error_code == E.REBALANCE_IN_PROGRESS


def test_leader_assignment_leaves_out_members_and_names_strangers() -> None:
    d = Driver()
    a, b = d.form(1, 2)
    ja, _jb = d.join(1, a), d.join(2, b)
    generation = d.join_response(ja).generation_id
    sb = d.sync(2, b, generation)
    sa = d.sync(1, a, generation, {a: b"A", "stranger": b"?"})
    assert d.sync_response(sa).assignment == b"A"
    assert d.sync_response(sb).assignment == b""  # left out: empty assignment


def test_heartbeat_answers_by_state() -> None:
    d = Driver()
    a, b = d.form(1, 2)
    assert d.heartbeat(1, a, 2) == E.NONE
    assert d.heartbeat(1, a, 1) == E.ILLEGAL_GENERATION
    assert d.heartbeat(1, "nobody", 2) == E.UNKNOWN_MEMBER_ID
    assert d.heartbeat(1, a, 2, group="other") == E.UNKNOWN_MEMBER_ID
    ja = d.join(1, a)
    assert d.heartbeat(2, b, 2) == E.REBALANCE_IN_PROGRESS
    jb = d.join(2, b)
    assert d.group().state is S.COMPLETING_REBALANCE
    assert d.heartbeat(2, b, 3) == E.NONE
    assert d.join_response(ja).generation_id == d.join_response(jb).generation_id == 3


def test_heartbeats_keep_the_session_and_silence_ends_it() -> None:
    d = Driver()
    (a,) = d.form(1)
    for _ in range(10):
        d.advance(SESSION_MS - 1)
        assert d.heartbeat(1, a, 1) == E.NONE
    d.advance(SESSION_MS)
    assert "g" not in d.core.groups  # the only member expired: empty, no offsets, forgotten


def test_leave_removes_the_member_and_rebalances() -> None:
    d = Driver()
    a, b = d.form(1, 2)
    result = d.leave(2, b)
    assert [(m.member_id, m.error_code) for m in result.members] == [(b, E.NONE)]
    assert d.group().state is S.PREPARING_REBALANCE
    assert d.join_response(d.join(1, a)).generation_id == 3


def test_leave_of_unknown_member_and_unknown_group() -> None:
    d = Driver()
    d.form(1)
    assert d.leave(1, "nobody").members[0].error_code == E.UNKNOWN_MEMBER_ID
    assert d.leave(1, "nobody", group="other").members[0].error_code == E.UNKNOWN_MEMBER_ID
    assert d.group().state is S.STABLE


def test_batch_leave_removes_several_members_in_one_rebalance() -> None:
    d = Driver()
    a, b, c = d.form(1, 2, 3)
    result = d.leave(1, b, c, "nobody")
    assert [m.error_code for m in result.members] == [E.NONE, E.NONE, E.UNKNOWN_MEMBER_ID]
    assert set(d.group().members) == {a}
    assert d.join_response(d.join(1, a)).generation_id == 4


def test_last_member_leaving_empties_the_group() -> None:
    d = Driver()
    (a,) = d.form(1)
    d.leave(1, a)
    assert "g" not in d.core.groups


def test_leader_leaving_elects_a_new_leader() -> None:
    d = Driver()
    a, b = d.form(1, 2)
    d.leave(1, a)
    response = d.join_response(d.join(2, b))
    assert response.leader == b
    assert [m.member_id for m in response.members] == [b]


def test_initial_rebalance_delay_and_its_extension() -> None:
    d = Driver(initial_rebalance_delay_ms=3_000)
    a, ja = d.join_new(1, rebalance_ms=10_000)
    d.advance(2_000)
    assert not d.answered(ja)
    b, _jb = d.join_new(2, rebalance_ms=10_000)  # arrives during the delay
    d.advance(1_000)  # the first delay ends: a new member came, so it extends by 3 s
    assert not d.answered(ja)
    d.advance(2_999)
    assert not d.answered(ja)
    d.advance(1)
    assert d.join_response(ja).generation_id == 1
    assert {m.member_id for m in d.join_response(ja).members} == {a, b}


def test_initial_delay_extensions_are_capped_by_the_rebalance_timeout() -> None:
    d = Driver(initial_rebalance_delay_ms=3_000)
    _, ja = d.join_new(1, rebalance_ms=7_000)
    for conn in range(2, 12):  # a new member every second
        d.join_new(conn, rebalance_ms=7_000)
        if d.answered(ja):
            break
        d.advance(1_000)
    assert d.answered(ja)
    assert d.now <= 7_000


def test_group_max_size() -> None:
    d = Driver(max_group_size=2)
    _a, _b = d.form(1, 2)
    third = d.join_response(d.join(3))
    assert third.error_code == E.GROUP_MAX_SIZE_REACHED
    assert d.group().size == 2
    assert d.group().state is S.STABLE


def test_group_max_size_turns_away_the_last_to_rejoin() -> None:
    d = Driver(max_group_size=2)
    a, b = d.form(1, 2)
    d.leave(2, b)  # now one member, room for one
    c, jc = d.join_new(3)
    d_id, jd = d.join_new(4)  # the rebalance now holds as many joins as the group may have
    late = d.join_response(d.join(1, a))  # so the last one to rejoin is turned away
    assert late.error_code == E.GROUP_MAX_SIZE_REACHED
    assert a not in d.group().members
    leader = d.join_response(jc).leader
    members = d.join_response(jc if leader == c else jd).members
    assert {m.member_id for m in members} == {c, d_id}


def test_superseded_join_is_answered() -> None:
    d = Driver()
    a, b = d.form(1, 2)
    first = d.join(1, a)
    second = d.join(1, a)
    assert d.join_response(first).error_code == E.REBALANCE_IN_PROGRESS
    d.join(2, b)
    assert d.join_response(second).generation_id == 3


def test_a_member_waiting_for_its_sync_answer_needs_no_heartbeats() -> None:
    """Kafka's hasSatisfiedHeartbeat: members awaiting JoinGroup *or SyncGroup* answers are
    alive; the phase's own deadline (the rebalance timeout) bounds the wait."""
    d = Driver()
    a, b = d.form(1, 2)
    _ja, jb = d.join(1, a), d.join(2, b)
    generation = d.join_response(jb).generation_id
    follower_sync = d.sync(2, b, generation)
    for _ in range(3):  # the leader assigns slowly (1.8 sessions), heartbeating meanwhile
        d.advance(SESSION_MS * 0.6)
        assert d.heartbeat(1, a, generation) == E.NONE
    assert set(d.group().members) == {a, b}
    d.sync(1, a, generation, {a: b"A", b: b"B"})
    assert d.sync_response(follower_sync).assignment == b"B"
    assert d.group().state is S.STABLE


def test_a_held_join_answer_says_how_long_it_was_held() -> None:
    """The coordinator renews a member's session when it answers the JoinGroup, which may
    be long after the request arrived; the answer says how long, so a member can count its
    session from then and not from when the answer reached it (found by huddle.sim: a
    frozen member took a join answer that waited in its socket as a fresh session)."""
    d = Driver()
    first, first_cid = d.join_new(1)
    d.sync_all({1: first}, [first_cid])
    d.advance(1_000)
    _, held = d.join_new(2)  # a new member: the group rebalances
    d.advance(2_500)
    rejoin = d.join(1, first)  # the first member rejoins 2.5 s later and completes the phase
    assert d.join_response(held).held_ms == 2_500
    assert d.join_response(rejoin).held_ms == 0


def test_a_member_answered_after_waiting_on_its_sync_gets_a_fresh_session() -> None:
    """Found by huddle.sim: a follower waited on SyncGroup for a leader that froze; the
    leader's expiry answered it REBALANCE_IN_PROGRESS and, moments later, expired the
    follower too (it cannot heartbeat while it waits, and had no time to rejoin). Kafka
    renews the session of every member whose sync it answers."""
    d = Driver()
    first, second = d.form(1, 2)
    leader = d.group().leader
    follower, conn = (second, 2) if leader == first else (first, 1)
    rejoins = [d.join(1, first), d.join(2, second)]  # a rebalance: both rejoin at once
    generation = d.join_response(rejoins[0]).generation_id
    assert d.join_response(rejoins[1]).generation_id == generation
    d.advance(10)
    waiting = d.sync(conn, follower, generation, {})
    d.advance(SESSION_MS - 10)  # the leader never syncs nor heartbeats: it is expired
    assert leader not in d.group().members
    assert d.sync_response(waiting).error_code == E.REBALANCE_IN_PROGRESS
    d.advance(100)  # the follower is on its way back
    assert follower in d.group().members


def test_requests_on_a_connection_the_member_left_act_for_it_no_more() -> None:
    """A commit held up in the network on the member's old connection arrives after the
    member moved to a new one and committed a later offset there: it must not set the
    offset back, and an old heartbeat must not bind the member to the dead connection."""
    d = Driver()
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))
    (member_id,) = d.form(1)
    generation = d.group().generation
    d.reconnect(1, 2)
    assert d.heartbeat(2, member_id, generation) == E.NONE  # it reconnected: connection 2
    newer = d.commit(2, {("t", 0): 1165}, member_id=member_id, generation=generation)
    assert newer.topics[0].partitions[0].error_code == E.NONE
    older = d.commit(1, {("t", 0): 1105}, member_id=member_id, generation=generation)
    assert older.error_code == E.COORDINATOR_NOT_AVAILABLE
    assert d.group().offsets[("t", 0)][0] == 1165
    assert d.heartbeat(1, member_id, generation) == E.COORDINATOR_NOT_AVAILABLE
    assert d.group().members[member_id].conn_id == 2
    d.reconnect(1, 3)
    assert d.heartbeat(3, member_id, generation) == E.NONE  # a newer one still moves it
    assert d.group().members[member_id].conn_id == 3


def test_a_commit_on_another_connection_does_not_take_the_member_over() -> None:
    """Kafka checks a commit's member id, instance id and generation only, whoever sends
    it: another connection naming the member commits, but the member stays on its own
    connection, heartbeats and commits there, and the other connection's close removes
    nobody."""
    d = Driver()
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))
    a, b = d.form(1, 2)
    generation = d.group().generation
    other = d.commit(5, {("t", 0): 10}, member_id=a, generation=generation)
    assert (other.error_code, other.topics[0].partitions[0].error_code) == (E.NONE, E.NONE)
    assert d.group().members[a].client_id == "c1"  # DescribeGroups still shows its own
    assert d.heartbeat(1, a, generation) == E.NONE
    own = d.commit(1, {("t", 0): 11}, member_id=a, generation=generation)
    assert (own.error_code, own.topics[0].partitions[0].error_code) == (E.NONE, E.NONE)
    assert d.group().offsets[("t", 0)][0] == 11
    d.close(5)
    d.advance(d.config.disconnect_grace_ms + 1)
    assert set(d.group().members) == {a, b}
    assert (d.group().state, d.group().generation) == (S.STABLE, generation)
    assert d.heartbeat(1, a, generation) == E.NONE
    assert d.heartbeat(2, b, generation) == E.NONE
