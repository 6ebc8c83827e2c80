"""Which connection a member speaks through (docs/coordinator.md section 4), against the
pure core: its client coming back on a newer connection moves it there, whatever that
client's first request is, and a request held up on the connection it left is refused;
another client naming the member is checked as Kafka checks it and never moves it. The
client is told by the incarnation token it presents, else by principal and client id."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import CreateTopicsRequest, SyncGroupResponse, TopicSpec
from tests.harness import Driver

E = ErrorCode


def with_topic() -> Driver:
    d = Driver()
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))
    return d


def follower_of(d: Driver, a: str, b: str) -> tuple[str, int]:
    """The member of ``d.form(1, 2)`` that is not the leader, and its connection (a
    JoinGroup of a leader would start a rebalance)."""
    return (b, 2) if d.group().leader == a else (a, 1)


def offset(d: Driver) -> int:
    return d.group().offsets[("t", 0)][0]


def committed(d: Driver, conn: int, member_id: str, generation: int, value: int) -> int:
    """The error of a commit of ``value`` to t-0 (the request's, else the partition's)."""
    response = d.commit(conn, {("t", 0): value}, member_id=member_id, generation=generation)
    return response.error_code or response.topics[0].partitions[0].error_code


def synced(d: Driver, conn: int, member_id: str, generation: int) -> int:
    response = d.response(d.sync(conn, member_id, generation))
    assert isinstance(response, SyncGroupResponse)
    return response.error_code


def goes_on_on_its_own_connection(d: Driver, member_id: str, conn: int, other: int) -> None:
    """The member's heartbeats and commits on its own connection succeed, and the other
    connection's close removes nobody: the group goes on in its generation."""
    members, gen = set(d.group().members), d.group().generation
    assert d.heartbeat(conn, member_id, gen) == E.NONE
    assert committed(d, conn, member_id, gen, 30) == E.NONE
    d.close(other)
    d.advance(d.config.disconnect_grace_ms + 1)
    assert set(d.group().members) == members
    assert d.group().generation == gen
    assert d.heartbeat(conn, member_id, gen) == E.NONE


# The first request a member's client may send on its new connection, as (name, send):
# each returns the error code it was answered with.
FirstRequest = Callable[[Driver, int, str, int], int]
FIRST_REQUESTS: dict[str, FirstRequest] = {
    "commit": lambda d, conn, m, gen: committed(d, conn, m, gen, 20),
    "heartbeat": lambda d, conn, m, gen: d.heartbeat(conn, m, gen),
    "sync": synced,
    "join": lambda d, conn, m, gen: d.join_response(d.join(conn, m)).error_code,
}


# --- the member's own client on a newer connection ------------------------------------


def test_a_held_up_commit_is_refused_after_the_member_committed_first_on_its_new_connection() -> (
    None
):
    """huddle's Member may commit on a new connection before its first heartbeat there:
    that commit moves the member, so one held up on the connection it left cannot set the
    offset back."""
    d = with_topic()
    (a,) = d.form(1)
    gen = d.group().generation
    d.reconnect(1, 3)
    assert committed(d, 3, a, gen, 20) == E.NONE  # its first request on connection 3
    assert committed(d, 1, a, gen, 10) == E.COORDINATOR_NOT_AVAILABLE  # held up on 1
    assert offset(d) == 20
    assert d.heartbeat(1, a, gen) == E.COORDINATOR_NOT_AVAILABLE
    assert d.heartbeat(3, a, gen) == E.NONE


@pytest.mark.parametrize("first", sorted(FIRST_REQUESTS))
def test_a_member_whose_first_request_on_its_new_connection_is_any_is_not_removed_by_the_grace(
    first: str,
) -> None:
    d = with_topic()
    a, b = d.form(1, 2)
    member, conn = follower_of(d, a, b)
    gen = d.group().generation
    d.close(conn)
    d.reconnect(conn, 3)
    assert FIRST_REQUESTS[first](d, 3, member, gen) == E.NONE
    d.advance(d.config.disconnect_grace_ms + 1)
    assert member in d.group().members
    assert d.group().generation == gen
    assert d.heartbeat(3, member, gen) == E.NONE


# --- another client naming the member -------------------------------------------------


@pytest.mark.parametrize("first", sorted(FIRST_REQUESTS))
def test_a_request_from_another_client_does_not_take_the_member_over(first: str) -> None:
    """Member ids are visible to anyone who may DescribeGroups: another client naming a
    member and its generation is answered as Kafka answers it, and the member goes on on
    its own connection; that client's close removes nobody."""
    d = with_topic()
    a, b = d.form(1, 2)
    follower, conn = follower_of(d, a, b)
    gen = d.group().generation
    assert FIRST_REQUESTS[first](d, 5, follower, gen) == E.NONE  # someone else's connection
    assert d.group().members[follower].client_id == f"c{conn}"  # DescribeGroups shows its own
    goes_on_on_its_own_connection(d, follower, conn, other=5)


def test_another_principal_with_the_members_client_id_does_not_take_it_over() -> None:
    """Client ids are shown by DescribeGroups too: a client is told by its principal and its
    client id together."""
    d = with_topic()
    (a,) = d.form(1)
    gen = d.group().generation
    d.connect_as(5, "c1", "User:mallory")
    assert d.heartbeat(5, a, gen) == E.NONE
    assert committed(d, 5, a, gen, 10) == E.NONE
    assert committed(d, 1, a, gen, 11) == E.NONE
    d.close(5)
    d.advance(d.config.disconnect_grace_ms + 1)
    assert a in d.group().members
    assert offset(d) == 11


def test_a_commit_from_an_older_connection_is_checked_as_kafka_checks_it() -> None:
    """A producer or admin connection opened before the consumer (re)connected commits for
    it as in Kafka (validateOffsetCommit: member id, instance id, generation)."""
    d = Driver()
    d.send(2, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))  # conn 2 first
    (a,) = d.form(5)
    gen = d.group().generation
    assert committed(d, 2, a, gen, 10) == E.NONE
    assert offset(d) == 10
    assert d.heartbeat(2, a, gen) == E.NONE
    assert committed(d, 5, a, gen, 11) == E.NONE  # the member itself goes on


def test_another_clients_requests_keep_the_member_alive_as_in_kafka_but_not_its_connection() -> (
    None
):
    """Kafka renews a member's session on a commit or heartbeat from anyone; the disconnect
    grace still follows the member's own connection: once it closes, another client's
    requests for the member do not keep it in the group."""
    d = with_topic()
    (a,) = d.form(1)
    gen = d.group().generation
    session = d.group().members[a].session_timeout_ms
    for _ in range(3):
        d.advance(session * 2 / 3)
        assert committed(d, 5, a, gen, 10) == E.NONE
    assert a in d.group().members  # renewed by the commits, past its own session
    d.close(1)
    assert d.heartbeat(5, a, gen) == E.NONE
    d.advance(d.config.disconnect_grace_ms + 1)
    assert a not in d.group().members


# --- the incarnation token --------------------------------------------------------------

TOKEN = bytes(range(16))  # the member's client's token
FORGED = bytes(range(1, 17))


@pytest.mark.parametrize("first", sorted(FIRST_REQUESTS))
@pytest.mark.parametrize("token", [None, FORGED], ids=["no-token", "wrong-token"])
def test_without_the_members_token_its_client_id_and_principal_do_not_take_it_over(
    first: str, token: bytes | None
) -> None:
    """Without authentication everyone is anonymous, and client ids are shown by
    DescribeGroups: a connection that has both, and the member's id and generation, is
    answered as Kafka answers it but does not move a member that joined with a token."""
    d = with_topic()
    d.present(1, TOKEN)
    d.present(2, bytes(range(2, 18)))
    a, b = d.form(1, 2)
    follower, conn = follower_of(d, a, b)
    gen = d.group().generation
    d.connect_as(5, f"c{conn}")  # the member's client id, anonymous as it is
    if token is not None:
        d.present(5, token)
    assert FIRST_REQUESTS[first](d, 5, follower, gen) == E.NONE
    assert d.group().members[follower].conn_id == conn
    goes_on_on_its_own_connection(d, follower, conn, other=5)


def test_the_member_moves_with_its_token_whatever_client_id_the_connection_says() -> None:
    """The token, with the principal the member's client authenticated as, tells that client
    back on a new connection; a commit held up on the connection it left is still refused."""
    d = with_topic()
    d.connect_as(1, "c1", "User:alice")
    d.present(1, TOKEN)
    (a,) = d.form(1)
    gen = d.group().generation
    d.connect_as(3, "renamed", "User:alice")
    d.present(3, TOKEN)
    assert d.heartbeat(3, a, gen) == E.NONE
    assert d.group().members[a].conn_id == 3
    assert committed(d, 1, a, gen, 10) == E.COORDINATOR_NOT_AVAILABLE  # held up on 1
    assert committed(d, 3, a, gen, 20) == E.NONE
    d.close(1)
    d.advance(d.config.disconnect_grace_ms + 1)
    assert a in d.group().members
    assert offset(d) == 20


@pytest.mark.parametrize("first", sorted(FIRST_REQUESTS))
def test_the_members_token_from_another_principal_does_not_take_it_over(first: str) -> None:
    """A token is the member's only together with the principal its client authenticated
    as: another principal presenting it (a token leaked, or copied from a member's
    process) is answered as Kafka answers it, and the member goes on where it was."""
    d = with_topic()
    d.connect_as(1, "c1", "User:alice")
    d.present(1, TOKEN)
    d.connect_as(2, "c2", "User:alice")
    d.present(2, bytes(range(2, 18)))
    a, b = d.form(1, 2)
    follower, conn = follower_of(d, a, b)
    gen = d.group().generation
    d.connect_as(5, f"c{conn}", "User:mallory")
    d.present(5, d.tokens[conn])
    assert FIRST_REQUESTS[first](d, 5, follower, gen) == E.NONE
    assert d.group().members[follower].conn_id == conn
    goes_on_on_its_own_connection(d, follower, conn, other=5)


# --- a member without a token ------------------------------------------------------------


def test_a_member_without_a_token_moves_by_principal_and_client_id_and_takes_none() -> None:
    """An older client or a raw tool sends no token: its member is moved as before, by a
    connection with its principal and client id, and a token that connection presents is
    not taken: a connection with the same principal and client id and no token moves it
    on."""
    d = with_topic()
    (a,) = d.form(1)
    gen = d.group().generation
    d.reconnect(1, 3)
    d.present(3, TOKEN)
    assert d.heartbeat(3, a, gen) == E.NONE
    assert d.group().members[a].conn_id == 3
    assert d.group().members[a].incarnation is None
    d.reconnect(1, 4)  # the same client id and principal, no token
    assert d.heartbeat(4, a, gen) == E.NONE
    assert d.group().members[a].conn_id == 4


@pytest.mark.parametrize("first", sorted(set(FIRST_REQUESTS) - {"join"}))
def test_a_member_without_a_token_is_not_pinned_by_a_connection_that_moved_it(
    first: str,
) -> None:
    """Another client that knows a tokenless member's client id and principal (anonymous,
    and DescribeGroups shows client ids) and presents a token of its own moves the member,
    as the rule for members without a token allows, but does not make the member its own:
    the member's client, back on a newer connection, moves it back, the other client's
    older connection is refused, and its close removes nobody. (A JoinGroup so is the
    member's rejoin, which takes the token: ``..._takes_the_one_its_rejoin_presents``.)"""
    d = with_topic()
    a, b = d.form(1, 2)
    follower, conn = follower_of(d, a, b)
    gen = d.group().generation
    d.connect_as(5, f"c{conn}")
    d.present(5, FORGED)
    assert FIRST_REQUESTS[first](d, 5, follower, gen) == E.NONE
    assert d.group().members[follower].conn_id == 5
    d.reconnect(conn, 6)  # the member's own client comes back, no token as before
    assert d.heartbeat(6, follower, gen) == E.NONE
    assert d.group().members[follower].conn_id == 6
    assert d.heartbeat(5, follower, gen) == E.COORDINATOR_NOT_AVAILABLE
    goes_on_on_its_own_connection(d, follower, 6, other=5)


def test_a_member_without_a_token_takes_the_one_its_rejoin_presents() -> None:
    """A member without a token (loaded from a record kept before tokens, say) rejoining on
    the connection it speaks through takes that connection's token: from then on a
    connection with its principal and client id but not the token no longer moves it."""
    d = with_topic()
    a, b = d.form(1, 2)
    follower, conn = follower_of(d, a, b)
    gen = d.group().generation
    d.reconnect(conn, 3)
    d.present(3, TOKEN)
    assert d.join_response(d.join(3, follower)).error_code == E.NONE  # no rebalance
    assert d.group().members[follower].conn_id == 3
    assert d.group().generation == gen
    d.reconnect(conn, 4)  # the same client id and principal, without the token
    assert d.heartbeat(4, follower, gen) == E.NONE
    assert d.group().members[follower].conn_id == 3
    goes_on_on_its_own_connection(d, follower, 3, other=4)
