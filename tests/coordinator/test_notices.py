"""huddle's own additions: rebalance notices and the disconnect grace; plus inspection and
shutdown of the core."""

from __future__ import annotations

from huddle.coordinator.state import GroupState
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ErrorResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    RebalanceStarted,
)
from tests.harness import SESSION_MS, Driver

E = ErrorCode
S = GroupState


def test_rebalance_start_is_pushed_to_every_member_that_has_not_rejoined() -> None:
    d = Driver()
    _a, _b, c = d.form(1, 2, 3)
    for conn in (1, 2, 3):
        d.take_notices(conn)
    d.join(3, c, metadata=b"changed")
    expected = [RebalanceStarted(group_id="g", generation_id=3, reason=f"metadata changed: {c}")]
    assert d.take_notices(1) == expected
    assert d.take_notices(2) == expected
    assert d.take_notices(3) == []  # it started the rebalance by rejoining


def test_members_rejoining_on_the_notice_finish_without_waiting_for_heartbeats() -> None:
    d = Driver()
    a, b = d.form(1, 2)
    d.take_notices(1)
    held = d.join(2, b, metadata=b"v2")
    assert any(isinstance(n, RebalanceStarted) for n in d.take_notices(1))
    d.join(1, a)  # at once, at the same instant: no heartbeat interval passed
    assert d.join_response(held).generation_id == 3
    assert d.now == 0


def test_no_notices_when_turned_off() -> None:
    d = Driver(rebalance_notices=False)
    a, b = d.form(1, 2)
    d.join(2, b, metadata=b"v2")
    assert d.take_notices(1) == []
    assert d.heartbeat(1, a, 2) == E.REBALANCE_IN_PROGRESS  # heartbeats still tell


def test_a_connection_with_two_members_of_a_group_gets_one_notice() -> None:
    d = Driver()
    a, ja = d.join_new(1)
    b, _jb = d.join_new(1)  # a second member on the same connection
    ja = d.join(1, a)
    generation = d.join_response(ja).generation_id
    d.sync(1, a, generation, {a: b"A", b: b"B"})
    d.sync(1, b, generation)
    assert d.group().state is S.STABLE
    d.take_notices(1)
    c, _jc = d.join_new(2)
    assert d.take_notices(1) == [
        RebalanceStarted(group_id="g", generation_id=generation, reason=f"new member joined: {c}")
    ]


def test_disconnect_grace_removes_a_dynamic_member_quickly() -> None:
    d = Driver(disconnect_grace_ms=500)
    _a, b = d.form(1, 2)
    d.close(2)
    d.advance(499)
    assert b in d.group().members
    d.advance(1)
    assert b not in d.group().members
    assert d.group().state is S.PREPARING_REBALANCE
    assert d.now < SESSION_MS


def test_the_members_a_closed_connection_leaves_go_in_one_order_whatever_the_hash_seed() -> None:
    """Every member of a closed connection has its grace end at the same instant: they are
    removed in the order of their groups and member ids, not in the order a set of them
    happens to iterate (string hashing differs between processes, and a simulator seed
    must replay the same)."""
    d = Driver(disconnect_grace_ms=500)
    groups = [f"g{i}" for i in range(8)]
    for group in groups:
        d.form(1, 2, group=group)
    d.take_notices(2)
    d.close(1)
    d.advance(500)
    told = [n.group_id for n in d.take_notices(2) if isinstance(n, RebalanceStarted)]
    assert told == groups


def test_reconnecting_within_the_grace_keeps_the_member() -> None:
    d = Driver(disconnect_grace_ms=500)
    _a, b = d.form(1, 2)
    d.close(2)
    d.advance(300)
    d.reconnect(2, 3)
    assert d.heartbeat(3, b, 2) == E.NONE  # same member id, its client's new connection
    d.advance(10_000 - 300 - 1)
    assert b in d.group().members
    assert d.group().state is S.STABLE


def test_grace_disabled_falls_back_to_the_session_timeout() -> None:
    d = Driver(disconnect_grace_ms=-1)
    a, b = d.form(1, 2)
    d.close(2)
    d.advance(SESSION_MS / 2)
    assert d.heartbeat(1, a, 2) == E.NONE
    d.advance(SESSION_MS / 2 - 1)
    assert b in d.group().members
    d.advance(1)
    assert b not in d.group().members


def test_grace_removes_a_pending_member_so_the_rebalance_can_finish() -> None:
    d = Driver(disconnect_grace_ms=500)
    a, b = d.form(1, 2)
    pending = d.join_response(d.join(3)).member_id
    ja, _jb = d.join(1, a), d.join(2, b)
    assert not d.answered(ja)  # the pending member holds the join phase open
    d.close(3)
    d.advance(500)
    assert d.join_response(ja).generation_id == 3
    assert pending not in d.group().pending


def test_a_closed_connection_with_a_held_join_is_removed_after_the_grace() -> None:
    d = Driver(disconnect_grace_ms=500)
    a, b = d.form(1, 2)
    held_b = d.join(2, b, metadata=b"v2")
    ja = d.join(1, a)
    assert d.answered(ja)
    assert d.answered(held_b)
    generation = d.join_response(ja).generation_id
    d.close(2)  # b dies before its SyncGroup
    d.advance(500)
    assert b not in d.group().members
    assert d.join_response(d.join(1, a)).generation_id == generation + 1


def test_describe_and_list_groups() -> None:
    d = Driver()
    a, b = d.form(1, 2, metadata=b"subscription")
    response = d.response(d.send(9, DescribeGroupsRequest(groups=["g", "ghost"])))
    assert isinstance(response, DescribeGroupsResponse)
    g, ghost = response.groups
    assert (g.state, g.generation_id, g.protocol_type, g.protocol_name, g.leader) == (
        "Stable",
        2,
        "consumer",
        "range",
        a,
    )
    assert {(m.member_id, m.client_id, m.metadata, m.assignment) for m in g.members} == {
        (a, "c1", b"subscription", a.encode()),
        (b, "c2", b"subscription", b.encode()),
    }
    assert ghost.error_code == E.GROUP_ID_NOT_FOUND
    listed = d.response(d.send(9, ListGroupsRequest()))
    assert isinstance(listed, ListGroupsResponse)
    assert [(x.group_id, x.state, x.protocol_type) for x in listed.groups] == [
        ("g", "Stable", "consumer")
    ]
    only_empty = d.response(d.send(9, ListGroupsRequest(states=["empty"])))
    assert isinstance(only_empty, ListGroupsResponse)
    assert only_empty.groups == []
    bad = d.response(d.send(9, ListGroupsRequest(states=["Sleepy"])))
    assert isinstance(bad, ListGroupsResponse)
    assert bad.error_code == E.INVALID_REQUEST
    assert "Sleepy" in (bad.error_message or "")


def test_shutdown_answers_every_held_request() -> None:
    d = Driver()
    a, _b = d.form(1, 2)
    held = d.join(1, a)
    d._collect(d.core.shutdown())
    response = d.response(held)
    assert isinstance(response, ErrorResponse)
    assert response.error_code == E.COORDINATOR_NOT_AVAILABLE


def test_pending_id_used_from_a_new_connection_survives_the_old_one_closing() -> None:
    d = Driver(disconnect_grace_ms=500)
    pending = d.join_response(d.join(1)).member_id
    held = d.join(2, pending)  # came back through another connection
    assert d.join_response(held).generation_id == 1
    d.close(1)
    d.advance(1_000)
    assert pending in d.group().members
    assert list(d.core.sessions.by_conn) == [2]
    assert list(d.core.sessions.keys_of(2)) == [("g", pending)]
