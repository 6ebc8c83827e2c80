"""Groups kept at the end of each rebalance and loaded by another coordinator (a cluster's
shard moving between nodes), against the pure core."""

from __future__ import annotations

import hashlib
import zlib
from typing import Any

import msgspec

from huddle.coordinator.state import GroupState
from huddle.coordinator.storage.kept_groups import NO_CONNECTION
from huddle.coordinator.storage.records import (
    HEADER,
    GroupRecord,
    KeptMember,
    OffsetRecord,
    Record,
    decode_frames,
    encode_frames,
)
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    AlterTopicsRequest,
    CreateTopicsRequest,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    TopicSpec,
)
from tests.harness import SESSION_MS, Driver

E = ErrorCode
S = GroupState


def keeping(**overrides: Any) -> Driver:
    """A core that keeps groups, with topic t of one partition (topics are cluster-wide)."""
    d = Driver(**overrides)
    d.core.keep_groups()
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))
    return d


def kept(d: Driver) -> list[Record]:
    return d.core.take_changes()


def test_a_rebalance_ends_with_the_group_recorded() -> None:
    d = keeping()
    a, b = d.form(1, 2)
    records = [r for r in kept(d) if isinstance(r, GroupRecord)]
    assert len(records) == 1
    record = records[0]
    assert (record.group_id, record.generation, record.protocol_name) == (
        "g",
        d.group().generation,
        "range",
    )
    assert record.leader == a
    assert {m.member_id: m.assignment for m in record.members} == {
        a: a.encode(),
        b: b.encode(),
    }


def test_a_single_coordinator_records_no_groups() -> None:
    d = Driver()
    d.form(1, 2)
    assert not [r for r in kept(d) if isinstance(r, GroupRecord)]


def test_a_group_loaded_elsewhere_goes_on_in_its_generation_without_a_rebalance() -> None:
    old = keeping()
    a, b = old.form(1, 2)
    gen = old.group().generation
    assert old.commit(1, {("t", 0): 42}, member_id=a, generation=gen).topics[0].partitions[
        0
    ].error_code == (E.NONE)
    records = [r for r in kept(old) if isinstance(r, GroupRecord | OffsetRecord)]
    new = keeping()
    new.now = 50_000.0
    new.core.load(records, new.now)
    group = new.group()
    assert (group.state, group.generation, group.leader) == (S.STABLE, gen, a)
    # the members find the new coordinator on new connections and carry on
    new.reconnect(1, 7)
    new.reconnect(2, 8)
    assert new.heartbeat(7, a, gen) == E.NONE
    assert new.heartbeat(8, b, gen) == E.NONE
    assert (group.members[a].conn_id, group.members[b].conn_id) == (7, 8)
    assert new.sync_response(new.sync(8, b, gen)).assignment == b.encode()
    assert new.group().generation == gen
    committed = new.commit(7, {("t", 0): 43}, member_id=a, generation=gen)
    assert committed.topics[0].partitions[0].error_code == E.NONE
    fetched = new.response(
        new.send(
            7, OffsetFetchRequest(group_id="g", topics=[OffsetFetchTopic(name="t", partitions=[0])])
        )
    )
    assert isinstance(fetched, OffsetFetchResponse)
    assert fetched.topics[0].partitions[0].offset == 43
    assert next(r for r in kept(new) if isinstance(r, OffsetRecord)).offset == 43


def test_a_loaded_member_moves_only_with_its_own_client() -> None:
    """The member's principal is kept with it: on the node that loads the group, another
    principal using the member's client id (DescribeGroups shows both ids) is checked as
    Kafka checks it and does not take the member over; the member's own client does."""
    old = keeping()
    old.connect_as(1, "app", "User:alice")
    a, b = old.form(1, 2)
    gen = old.group().generation
    new = keeping()
    new.core.load(kept(old), new.now)
    new.connect_as(7, "app", "User:mallory")
    new.connect_as(8, "app", "User:alice")
    assert new.heartbeat(7, a, gen) == E.NONE
    assert new.group().members[a].conn_id == NO_CONNECTION
    assert new.heartbeat(8, a, gen) == E.NONE
    assert new.group().members[a].conn_id == 8
    new.close(7)
    new.advance(new.config.disconnect_grace_ms + 1)
    assert a in new.group().members
    new.close(8)
    new.advance(new.config.disconnect_grace_ms + 1)
    assert set(new.group().members) == {b}  # a's own connection's grace


def without_trailing_member_fields(record: GroupRecord, first: str) -> GroupRecord:
    """The record as a version that kept its members' fields only up to before ``first``
    wrote it, read back."""
    raw = msgspec.msgpack.decode(bytes(encode_frames([record]))[HEADER.size :])
    members_at = 1 + [f.name for f in msgspec.structs.fields(GroupRecord)].index("members")
    names = [f.name for f in msgspec.structs.fields(KeptMember)]
    for member in raw[members_at]:  # after the tag
        del member[names.index(first) :]
    body = msgspec.msgpack.encode(raw)
    frame = HEADER.pack(len(body), zlib.crc32(body)) + body
    (loaded,) = decode_frames(frame).records
    assert isinstance(loaded, GroupRecord)
    return loaded


def test_a_group_kept_before_principals_were_loads_and_its_member_moves_by_client_id() -> None:
    """A record written by a node that did not keep principals still loads; its member is
    moved by the first connection with its client id, whoever that authenticated as."""
    old = keeping()
    (a,) = old.form(1)
    gen = old.group().generation
    (record,) = [r for r in kept(old) if isinstance(r, GroupRecord)]
    loaded = without_trailing_member_fields(record, "principal")
    assert loaded.members[0].principal is None
    new = keeping()
    new.core.load([loaded], new.now)
    assert new.heartbeat(7, a, gen) == E.NONE  # another client id: "c7"
    assert new.group().members[a].conn_id == NO_CONNECTION
    new.connect_as(8, "c1", "User:alice")
    assert new.heartbeat(8, a, gen) == E.NONE
    assert new.group().members[a].conn_id == 8
    assert new.group().members[a].principal == "User:alice"


TOKEN = bytes(range(16))


def test_a_loaded_member_moves_only_with_its_token_which_is_kept_as_a_digest() -> None:
    """The record keeps the token's digest, never the token: on the node that loads the
    group, a connection with the member's client id and principal but not its token does
    not take it over; the member's own client, presenting the token, does."""
    old = keeping()
    old.present(1, TOKEN)
    (a,) = old.form(1)
    gen = old.group().generation
    records = kept(old)
    (record,) = [r for r in records if isinstance(r, GroupRecord)]
    assert record.members[0].incarnation == hashlib.sha256(TOKEN).digest()
    assert TOKEN not in bytes(encode_frames(records))
    new = keeping()
    new.core.load(records, new.now)
    new.connect_as(7, "c1")
    assert new.heartbeat(7, a, gen) == E.NONE
    assert new.group().members[a].conn_id == NO_CONNECTION
    new.connect_as(8, "c1")  # the member's own client: its token too
    new.present(8, TOKEN)
    assert new.heartbeat(8, a, gen) == E.NONE
    assert new.group().members[a].conn_id == 8
    new.close(7)
    new.advance(new.config.disconnect_grace_ms + 1)
    assert a in new.group().members


def test_a_group_kept_before_tokens_were_loads_and_its_member_moves_by_client_id() -> None:
    """A record written by a node that did not keep tokens still loads: its member moves by
    principal and client id without taking the token of the connection that moved it; its
    own client's rejoin gives it that token, which the group's next record keeps."""
    old = keeping()
    old.present(1, TOKEN)
    (a,) = old.form(1)
    gen = old.group().generation
    (record,) = [r for r in kept(old) if isinstance(r, GroupRecord)]
    loaded = without_trailing_member_fields(record, "incarnation")
    assert loaded.members[0].incarnation is None
    assert loaded.members[0].principal == "User:ANONYMOUS"
    new = keeping()
    new.core.load([loaded], new.now)
    new.connect_as(8, "c1")  # the member's own client: its token too
    new.present(8, TOKEN)
    assert new.heartbeat(8, a, gen) == E.NONE
    assert new.group().members[a].conn_id == 8
    new.connect_as(9, "c1")  # no token: the same client to a member without one
    assert new.heartbeat(9, a, gen) == E.NONE
    assert new.group().members[a].conn_id == 9
    new.connect_as(10, "c1")  # its own client again, with its token
    new.present(10, TOKEN)
    kept(new)
    new.sync_all({10: a}, [new.join(10, a)])
    (record,) = [r for r in kept(new) if isinstance(r, GroupRecord)]
    assert record.members[0].incarnation == hashlib.sha256(TOKEN).digest()
    new.connect_as(11, "c1")  # no token: no longer the member's client
    assert new.heartbeat(11, a, new.group().generation) == E.NONE
    assert new.group().members[a].conn_id == 10


def test_a_loaded_member_that_takes_its_token_without_a_rebalance_is_recorded_with_it() -> None:
    """A follower loaded from a record kept before tokens rejoins unchanged (answered in
    the group's generation, no rebalance): it takes its connection's token, and the group
    is recorded again so a restart keeps telling the member by that token."""
    old = keeping()
    a, b = old.form(1, 2)
    gen = old.group().generation
    follower, conn = (b, 2) if old.group().leader == a else (a, 1)
    (record,) = [r for r in kept(old) if isinstance(r, GroupRecord)]
    new = keeping()
    new.core.load([without_trailing_member_fields(record, "incarnation")], new.now)
    kept(new)
    new.reconnect(conn, 8)
    new.present(8, TOKEN)
    assert new.join_response(new.join(8, follower)).error_code == E.NONE
    assert new.group().generation == gen
    (again,) = [r for r in kept(new) if isinstance(r, GroupRecord)]
    digests = {m.member_id: m.incarnation for m in again.members}
    assert digests[follower] == hashlib.sha256(TOKEN).digest()
    assert len([d for d in digests.values() if d is None]) == 1  # the leader: none yet


def test_a_loaded_member_that_never_comes_back_expires_after_its_session() -> None:
    old = keeping()
    a, b = old.form(1, 2)
    gen = old.group().generation
    new = keeping()
    new.core.load(kept(old), new.now)
    assert new.heartbeat(7, a, gen) == E.NONE
    new.advance(SESSION_MS / 2)
    assert new.heartbeat(7, a, gen) == E.NONE
    new.advance(SESSION_MS / 2 + 1)
    assert b not in new.group().members  # b never found the new coordinator
    assert new.group().state is S.PREPARING_REBALANCE


def test_unloading_answers_held_requests_not_coordinator() -> None:
    d = keeping()
    a, _ = d.form(1, 2)
    held = d.join(1, a)
    assert not d.answered(held)  # a rebalance holds the leader's join
    d._collect(d.core.unload(["g"], d.now))
    assert "g" not in d.core.groups
    assert d.core.unload(["g"], d.now) == []  # unloading twice is harmless
    answer = d.join_response(held)
    assert answer.error_code == E.NOT_COORDINATOR
    described = d.response(d.send(3, DescribeGroupsRequest(groups=["g"])))
    assert isinstance(described, DescribeGroupsResponse)
    assert described.groups[0].state == "Dead"


def test_an_emptied_group_is_recorded_without_members() -> None:
    d = keeping()
    a, b = d.form(1, 2)
    kept(d)
    d.leave(1, a, b)
    records = [r for r in kept(d) if isinstance(r, GroupRecord)]
    assert records
    assert records[-1].members == []
    loaded = keeping()
    loaded.core.load(records, 0.0)
    assert loaded.group().state is S.EMPTY


def test_a_group_loaded_over_the_size_limit_rebalances_and_turns_the_last_away() -> None:
    """Kafka's onGroupLoaded: a group kept with more members than the limit (lowered since)
    prepares a rebalance on load; the first members to rejoin, up to the limit, form the
    next generation, the next one is turned away with GROUP_MAX_SIZE_REACHED."""
    old = keeping()
    a, b, c = old.form(1, 2, 3)
    gen = old.group().generation
    new = keeping(max_group_size=2)
    new.now = 50_000.0
    new.core.load(kept(old), new.now)
    assert (new.group().state, new.group().generation) == (S.PREPARING_REBALANCE, gen)
    for conn, member in ((7, a), (8, b), (9, c)):  # they find the new coordinator
        assert new.heartbeat(conn, member, gen) == E.REBALANCE_IN_PROGRESS
    first, second = new.join(7, a), new.join(8, b)
    assert not new.answered(first)  # c may still rejoin
    turned_away = new.join_response(new.join(9, c))
    assert turned_away.error_code == E.GROUP_MAX_SIZE_REACHED
    assert [new.join_response(cid).generation_id for cid in (first, second)] == [gen + 1] * 2
    assert set(new.group().members) == {a, b}
    assert new.sync_all({7: a, 8: b}, [first, second]) == gen + 1
    assert new.group().state is S.STABLE


def test_a_group_loaded_at_the_size_limit_goes_on_without_a_rebalance() -> None:
    old = keeping()
    a, _, _ = old.form(1, 2, 3)
    gen = old.group().generation
    new = keeping(max_group_size=3)
    new.core.load(kept(old), new.now)
    assert (new.group().state, new.group().generation) == (S.STABLE, gen)
    assert new.heartbeat(7, a, gen) == E.NONE


def older_group_record(before: str) -> Any:
    """A group record as versions that did not have the field ``before`` yet wrote it."""
    names = [f.name for f in msgspec.structs.fields(GroupRecord)]
    return msgspec.defstruct(
        "OlderGroupRecord",
        [(f.name, f.type) for f in msgspec.structs.fields(GroupRecord)[: names.index(before)]],
        tag="g",
        array_like=True,
        frozen=True,
    )


def test_group_records_read_across_versions() -> None:
    """A record an older version wrote (in a data dir or in etcd) reads with what it did
    not keep unknown: the time it emptied, the topics its generation formed with, removed
    members; one this version writes reads in an older version, which ignores them."""
    newer = GroupRecord("g", 3, "consumer", None, None, [], 1_700_000_000_000, 42, True)
    first = older_group_record("current_state_ms")("g", 3, "consumer", None, None, [])
    second = older_group_record("topics_digest")("g", 3, "consumer", None, None, [], 17)
    decoded = decode_frames(encode_frames([first, second]))
    assert decoded.records == [
        GroupRecord("g", 3, "consumer", None, None, [], 0, None, False),
        GroupRecord("g", 3, "consumer", None, None, [], 17, None, False),
    ]
    for older in (first, second):
        as_read = msgspec.msgpack.decode(msgspec.msgpack.encode(newer), type=type(older))
        assert as_read == msgspec.structs.replace(
            older, **{f: getattr(newer, f) for f in older.__struct_fields__}
        )


def test_a_static_leader_back_after_a_topic_change_and_a_shard_move_rebalances() -> None:
    """The node that takes a group over compares the topics the group's generation formed
    with (kept in its record) with its own: a static leader away while its topic grew,
    back as a new process, makes the group rebalance there too."""
    old = keeping()
    leader = old.join_response(old.join(1, instance="s1")).member_id
    old.sync(1, leader, 1, {leader: b"t-0"}, instance="s1")
    new = keeping()
    new.send(9, AlterTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]))
    new.core.load(kept(old), new.now)
    assert new.group().state is S.STABLE
    back = new.join_response(new.join(5, instance="s1"))  # s1 back, as a new process
    assert (back.generation_id, back.skip_assignment) == (2, False)  # assigns t-0 and t-1


def test_a_group_never_empty_is_not_loaded_empty_since_it_went_stable() -> None:
    """The only static member of a group's last record is removed while the group
    rebalances with a newcomer: the record is rewritten without members. Found by review:
    it kept the time the group went Stable, a restart before the newcomer synced loaded
    the group Empty "since" then, and the first retention check took every offset of a
    group that was never Empty. (Kafka writes no record then: it loads the group Stable
    with the static member, whose session ends after the load.) It is Empty since it was
    loaded, and kept so."""
    retention = 60_000
    wall = 1_700_000_000_000
    d = Driver(offsets_retention_ms=retention)
    d.core.keep_groups()
    d.core.set_wall_clock(0, wall)
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))
    x = d.join_response(d.join(1, instance="x")).member_id
    d.sync(1, x, 1, {x: b"x"}, instance="x")
    d.commit(1, {("t", 0): 5}, member_id=x, generation=1, instance="x")
    for _ in range(24):  # x works for two minutes, twice the retention
        d.advance(5_000)
        assert d.heartbeat(1, x, 1, instance="x") == E.NONE
    d.join_new(2)  # a newcomer: the group rebalances; x's process has died meanwhile
    d.advance(10_000)  # x's session ends: the generation forms with the newcomer
    assert d.group().state is S.COMPLETING_REBALANCE
    journal: list[Record] = d.core.take_changes()
    again = Driver(offsets_retention_ms=retention)
    again.core.keep_groups()
    again.core.set_wall_clock(0, wall)  # as the server sets it before it starts
    again.core.restore(journal)
    again.core.start(d.now)
    assert again.core.expire_offsets(d.now + 1, wall + d.now + 1) == 0
    assert again.core.expire_offsets(d.now + retention - 1, wall + d.now + retention - 1) == 0
    (record,) = [r for r in again.core.take_changes() if isinstance(r, GroupRecord)]
    assert (record.members, record.current_state_ms) == ([], wall + int(d.now))
    assert again.core.expire_offsets(d.now + retention, wall + d.now + retention) == 1
