"""A coordinator restarted on its data dir loads its groups from the journal, as Kafka's
coordinator loads its GroupMetadata records: Stable in their generation, every member with
a fresh session, and no fence for sessions granted before. The core, with an explicit
clock; ``test_restart_serve.py`` restarts ``huddle serve``."""

from __future__ import annotations

from huddle.coordinator.state import GroupState
from huddle.coordinator.storage.records import (
    GroupRecord,
    OffsetRecord,
    Record,
    SessionRecord,
    TopicRecord,
)
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    AlterTopicsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    MemberIdentity,
    TopicSpec,
)
from tests.harness import SESSION_MS, Driver
from tests.storage.test_journal import _fetch

E = ErrorCode
S = GroupState
THIRTY_MINUTES = 1_800_000


def data_dir_core() -> Driver:
    """A core as a server with a data dir runs it: it keeps its groups."""
    d = Driver(max_session_timeout_ms=THIRTY_MINUTES)
    d.core.keep_groups()
    return d


def restart(journal: list[Record], at: float) -> Driver:
    """A new coordinator process: the journal replayed, serving from ``at``."""
    d = data_dir_core()
    d.core.restore(journal)
    d.now = at
    d.core.start(at)
    return d


def test_a_restart_loads_each_group_stable_in_its_generation_and_members_carry_on() -> None:
    d = data_dir_core()
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]))
    a, b = d.form(1, 2)
    gen = d.group().generation
    assert d.commit(1, {("t", 0): 42}, member_id=a, generation=gen).topics[0].partitions[
        0
    ].error_code == (E.NONE)
    journal = d.core.take_changes()

    again = restart(journal, at=50_000.0)
    group = again.group()
    assert (group.state, group.generation, group.leader) == (S.STABLE, gen, a)
    # the members come back on new connections: same generation, no rebalance
    assert again.heartbeat(7, a, gen) == E.NONE
    assert again.heartbeat(8, b, gen) == E.NONE
    assert again.sync_response(again.sync(8, b, gen)).assignment == b.encode()
    assert again.commit(7, {("t", 1): 7}, member_id=a, generation=gen).topics[0].partitions[
        0
    ].error_code == (E.NONE)
    assert _fetch(again) == {("t", 0): 42, ("t", 1): 7}
    assert again.group().generation == gen
    assert again.take_notices(7) == again.take_notices(8) == []  # no rebalance notice


def test_a_loaded_member_that_does_not_come_back_goes_after_a_fresh_session() -> None:
    d = data_dir_core()
    a, b = d.form(1, 2)
    gen = d.group().generation
    again = restart(d.core.take_changes(), at=50_000.0)
    again.advance(SESSION_MS - 1)
    assert again.heartbeat(7, a, gen) == E.NONE
    assert set(again.group().members) == {a, b}  # b's session started with the restart
    again.advance(1)
    assert set(again.group().members) == {a}
    assert again.group().state is S.PREPARING_REBALANCE


def test_a_restart_forms_a_generation_at_once_whatever_sessions_were_granted_before() -> None:
    """Found by probing: a member that once had a 30-minute session kept every group of a
    restarted coordinator from forming a generation for 30 minutes."""
    d = data_dir_core()
    slow, cid = d.join_new(1, group="slow", session_ms=THIRTY_MINUTES)
    d.sync_all({1: slow}, [cid])
    d.leave(1, slow, group="slow")
    again = restart(d.core.take_changes(), at=50_000.0)
    _, held = again.join_new(2)
    assert again.join_response(held).generation_id == 1  # at once
    assert again.join_response(held).error_code == E.NONE


def test_a_journal_of_an_older_version_keeps_its_fence_until_served_once() -> None:
    """A journal with no group records (an older huddle kept none) forgot its groups: a
    member of them may count its session alive for the longest session granted, so no
    generation forms before then. Once served, the fence is kept as served: the next
    restart has nothing to wait for. A restart before it was served waits again."""
    old_journal: list[Record] = [SessionRecord(7_000), TopicRecord("t", 1)]
    again = restart(old_journal, at=50_000.0)
    _, held = again.join_new(2)
    again.advance(6_999)
    assert not again.answered(held)  # an old session may still be alive
    interrupted = restart([*old_journal, *again.core.take_changes()], at=90_000.0)
    _, waiting = interrupted.join_new(3)
    assert not interrupted.answered(waiting)  # restarted before the fence was served
    again.advance(1)
    assert again.join_response(held).generation_id == 1
    served = again.core.take_changes()
    assert SessionRecord(0) in served
    third = restart([*old_journal, *served], at=200_000.0)
    _, cid = third.join_new(4)
    assert third.join_response(cid).generation_id == 1  # nothing to wait for
    assert SessionRecord(7_000) not in third.core.snapshot()


def test_a_group_emptied_without_offsets_leaves_nothing_to_load() -> None:
    d = data_dir_core()
    (a,) = d.form(1)
    d.leave(1, a)
    assert "g" not in d.core.groups
    journal = d.core.take_changes()
    assert [r.generation for r in journal if isinstance(r, GroupRecord)][-1] == -1  # deleted
    again = restart(journal, at=10.0)
    assert "g" not in again.core.groups


def test_a_compacted_journal_loads_the_groups_as_their_last_record_says() -> None:
    """A compaction mid-rebalance keeps the group as its last rebalance left it, not a
    member that joined since and was never in a generation."""
    d = data_dir_core()
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))
    (a,) = d.form(1)
    gen = d.group().generation
    d.commit(1, {("t", 0): 5}, member_id=a, generation=gen)
    d.join_new(2)  # a newcomer: the group rebalances
    assert d.group().state is S.PREPARING_REBALANCE
    snapshot = d.core.snapshot()
    assert d.core.kept_size() == len(snapshot)
    assert [r for r in snapshot if isinstance(r, OffsetRecord)] == [
        OffsetRecord("g", "t", 0, 5, None, 0)
    ]
    again = restart(snapshot, at=1_000.0)
    group = again.group()
    assert (group.state, group.generation, list(group.members)) == (S.STABLE, gen, [a])
    assert _fetch(again) == {("t", 0): 5}


def static_pair(d: Driver) -> tuple[str, str, int]:
    """Static members s1 (conn 1, leader) and s2 (conn 2), Stable: (id1, id2, generation)."""
    id1 = d.join_response(d.join(1, instance="s1")).member_id
    d.sync(1, id1, 1, {id1: b"one"}, instance="s1")
    j2 = d.join(2, instance="s2")
    j1 = d.join(1, id1, instance="s1")
    id2 = d.join_response(j2).member_id
    generation = d.join_response(j1).generation_id
    d.sync(1, id1, generation, {id1: b"one", id2: b"two"}, instance="s1")
    d.sync(2, id2, generation, instance="s2")
    assert d.group().state is S.STABLE
    return id1, id2, generation


def test_a_static_member_that_came_back_mid_rebalance_is_not_fenced_after_a_restart() -> None:
    """Found by huddle.sim: a static member restarted (a new member id for its instance)
    while the group rebalanced; the coordinator restarted before the rebalance ended and
    loaded the instance under its old member id, fencing the live one for good."""
    d = data_dir_core()
    _, id2, generation = static_pair(d)
    d.join_new(3)  # a newcomer: the group rebalances
    d.join(4, instance="s2")  # s2's process restarted meanwhile: its join is held
    back = d.group().static["s2"]
    assert back != id2
    assert d.group().state is S.PREPARING_REBALANCE
    again = restart(d.core.take_changes(), at=50_000.0)
    assert again.group().static["s2"] == back
    # its own client (conn 4's) comes back: the member is its, on its new connection
    assert again.heartbeat(4, back, generation, instance="s2") == E.NONE
    assert again.group().members[back].conn_id == 4


def test_a_static_member_removed_mid_rebalance_stays_removed_after_a_restart() -> None:
    d = data_dir_core()
    _, id2, generation = static_pair(d)
    d.leave(1, MemberIdentity(member_id="", group_instance_id="s2"))  # an admin removes s2
    d.join(4, instance="s2")  # and it comes back, a new member: its join is held
    fresh = d.group().static["s2"]
    assert fresh != id2
    again = restart(d.core.take_changes(), at=50_000.0)
    assert "s2" not in again.group().static
    # its new id is unknown to the restarted coordinator: it joins again (not fenced)
    assert again.heartbeat(5, fresh, generation, instance="s2") == E.UNKNOWN_MEMBER_ID
    assert again.heartbeat(6, id2, generation, instance="s2") == E.UNKNOWN_MEMBER_ID


def test_a_static_leader_back_after_a_topic_change_and_a_restart_rebalances() -> None:
    """Without a restart, a static leader that comes back after its topics changed makes the
    group rebalance (it missed the notice while away). Found by review: after a restart
    it did not (the loaded group counted as formed with today's topics), and the new
    partitions went to nobody."""

    def scenario(with_restart: bool) -> GroupState:
        d = data_dir_core()
        d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))
        static_pair(d)
        d.close(1)  # s1 (the leader) is away
        d.send(9, AlterTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]))
        if with_restart:
            d = restart(d.core.take_changes(), at=50_000.0)
        d.join(5, instance="s1")  # s1 back, as a new process
        return d.group().state

    assert scenario(with_restart=False) is S.PREPARING_REBALANCE
    assert scenario(with_restart=True) is S.PREPARING_REBALANCE


def test_a_static_leader_back_after_a_restart_with_the_same_topics_keeps_the_generation() -> None:
    """What the loaded group is compared with is the topics themselves, not how many
    changes this process counted: the restarted one replays a compacted journal (one topic
    record, where the old one counted three changes), and nothing changed."""
    d = data_dir_core()
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="u", partitions=1)]))
    d.send(9, DeleteTopicsRequest(topics=["u"]))
    _, _, generation = static_pair(d)
    again = restart(d.core.snapshot(), at=50_000.0)
    back = again.join_response(again.join(5, instance="s1"))  # s1 back, as a new process
    assert (back.error_code, back.generation_id, back.skip_assignment) == (
        E.NONE,
        generation,
        True,
    )
    assert again.group().state is S.STABLE


def test_a_static_member_removed_from_a_stable_group_is_not_orphaned_by_a_restart() -> None:
    """A static member's session ends while the group is Stable: the kept record is
    rewritten without it (same generation) and the group starts a rebalance. Found by
    review: a restart before the others rejoined (a crash right after the write, or
    rebalance notices off) loaded the group Stable in that generation without the member:
    its partitions belonged to nobody and nothing ever started the rebalance. The record
    now says a member was removed, and the loaded group rebalances."""
    d = data_dir_core()
    id1, _, generation = static_pair(d)  # s1 leads; s2 is assigned b"two"
    for _ in range(2):  # s1 works on; s2's process has died
        d.advance(4_000)
        assert d.heartbeat(1, id1, generation, instance="s1") == E.NONE
    d.advance(3_000)  # s2's session ends
    assert "s2" not in d.group().static
    assert d.group().state is S.PREPARING_REBALANCE
    again = restart(d.core.take_changes(), at=d.now)
    for _ in range(30):  # s1 heartbeats on for two minutes after the restart
        again.advance(4_000)
        code = again.heartbeat(1, id1, generation, instance="s1")
        if code != E.NONE:
            break
    assert code == E.REBALANCE_IN_PROGRESS  # s2's partitions are handed out again
    held = again.join(1, id1, instance="s1")
    assert again.join_response(held).generation_id == generation + 1


def test_a_rebalance_under_way_at_a_restart_starts_again_from_the_kept_generation() -> None:
    """As the README says: a member whose SyncGroup was held is answered
    COORDINATOR_NOT_AVAILABLE by the stopping coordinator, rejoins with its member id and is
    taken back in the kept generation with its assignment (nothing lost); a member that
    joined during the unfinished rebalance is not known there, and joins again as new."""
    d = data_dir_core()
    a, b = d.form(1, 2)
    gen = d.group().generation
    newcomer, _ = d.join_new(3)
    d.join(1, a)
    assert d.join_response(d.join(2, b)).generation_id == gen + 1
    held = d.sync(2, b, gen + 1)  # the leader has not assigned yet
    assert not d.answered(held)
    d.shutdown()
    assert d.replies[held].error_code == E.COORDINATOR_NOT_AVAILABLE
    again = restart(d.core.take_changes(), at=50_000.0)
    again.reconnect(2, 8)  # b's client, back on a new connection
    back = again.join_response(again.join(8, b))
    assert (back.error_code, back.generation_id) == (E.NONE, gen)
    assert again.sync_response(again.sync(8, b, gen)).assignment == b.encode()
    assert again.join_response(again.join(9, newcomer)).error_code == E.UNKNOWN_MEMBER_ID


def test_group_records_an_older_version_served_past_are_not_loaded() -> None:
    """Downgrade, then upgrade again: the older version ignored the group records and
    served the groups on (new member ids for the static members that came back), then
    the newer one loaded the stale records and fenced the live static member as a zombie,
    for good. The older version's ``SessionRecord`` after them (it writes one when it
    grants a session longer than any it knew of; this version writes one only at the head
    of a snapshot) tells: the groups are loaded forgotten, with its fence."""
    d = data_dir_core()
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))
    _, id2, generation = static_pair(d)
    newer = d.core.take_changes()
    by_the_older_version: list[Record] = [SessionRecord(10_000), OffsetRecord("g", "t", 0, 7)]
    again = restart([*newer, *by_the_older_version], at=50_000.0)
    group = again.group()
    assert (group.state, group.members) == (S.EMPTY, {})
    # s2's live process (another member id by now) is told to join again, not fenced
    assert again.heartbeat(2, "s2-under-the-older-version", generation, instance="s2") == (
        E.UNKNOWN_MEMBER_ID
    )
    assert again.heartbeat(2, id2, generation, instance="s2") == E.UNKNOWN_MEMBER_ID
    _, held = again.join_new(3)
    again.advance(9_999)
    assert not again.answered(held)  # a session the older version granted may still run
    again.advance(1)
    assert again.join_response(held).error_code == E.NONE
    assert _fetch(again) == {("t", 0): 7}


def test_a_static_member_renamed_mid_rebalance_with_a_new_subscription_rebalances() -> None:
    """The kept record takes a static member's new member id mid-rebalance, but keeps the
    subscription its assignment was made for: its old process had rejoined with a new
    one before the new process replaced it, and a record with the new subscription and the
    old assignment would have taken the new process back in that generation, its new
    topics assigned to nobody."""
    d = data_dir_core()
    _, id2, _ = static_pair(d)
    d.join_new(3)  # a newcomer: the group rebalances
    d.join(2, id2, instance="s2", metadata=b"new")  # s2 rejoins with a new subscription
    d.join(4, instance="s2", metadata=b"new")  # then its process restarts: a new member id
    back = d.group().static["s2"]
    again = restart(d.core.take_changes(), at=50_000.0)
    assert again.group().static["s2"] == back
    again.reconnect(4, 8)
    again.join(8, back, instance="s2", metadata=b"new")
    assert again.group().state is S.PREPARING_REBALANCE
