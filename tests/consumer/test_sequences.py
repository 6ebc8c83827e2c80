"""Awkward ConsumerGroupHeartbeat sequences in the sans-IO core, each answered as Kafka 4.0's
GroupMetadataManager and CurrentAssignmentBuilder answer it, and none giving a partition to
a member before its previous owner released it or was fenced."""

from __future__ import annotations

from huddle.coordinator.consumer import ConsumerCoordinator, GroupPhase, MemberState, TopicView
from huddle.protocol.errors import ErrorCode
from tests.consumer.helpers import GROUP, TOPICS, Client, beat, flat, join

E = ErrorCode
ALL = {"a": frozenset(range(6)), "b": frozenset(range(3))}


def _two_members(c: ConsumerCoordinator) -> None:
    """m1 owns everything at epoch 1; m2 has joined at epoch 2 and waits for its share."""
    assert c.heartbeat(join("m1"), 0, TOPICS).member_epoch == 1
    assert c.heartbeat(join("m2"), 10, TOPICS).assignment == {}


def test_a_stale_epoch_after_a_fence_is_an_unknown_member() -> None:
    """A fenced member is gone from the group: its next heartbeat, at whatever epoch, is
    UNKNOWN_MEMBER_ID (it rejoins with epoch 0), never an answer that hands it partitions."""
    c = ConsumerCoordinator()
    _two_members(c)
    c.expire(46_000)  # neither heartbeated since joining: both sessions end
    for epoch in (1, 2, 7):
        assert c.heartbeat(beat("m1", epoch, ALL), 46_010, TOPICS).error is E.UNKNOWN_MEMBER_ID
    assert c.groups[GROUP].members == {}


def test_a_partial_revocation_holds_the_partitions_still_named() -> None:
    """m1 must give up a:5 and b:0-2. Acknowledging part of it (still naming b:2) keeps
    m1 at its epoch and gives m2 nothing; naming none of them moves m1 on and frees them."""
    c = ConsumerCoordinator()
    _two_members(c)
    c.heartbeat(beat("m1", 1, ALL), 20, TOPICS)
    partial = {"a": frozenset(range(5)), "b": frozenset({2})}
    answer = c.heartbeat(beat("m1", 1, partial), 30, TOPICS)
    assert (answer.error, answer.member_epoch) == (E.NONE, 1)
    assert c.groups[GROUP].members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    assert c.heartbeat(beat("m2", 2, {}), 40, TOPICS).assignment is None
    assert c.heartbeat(beat("m1", 1, {"a": frozenset(range(5))}), 50, TOPICS).member_epoch == 2
    assert flat(c.heartbeat(beat("m2", 2, {}), 60, TOPICS).assignment) == {
        ("a", 5),
        ("b", 0),
        ("b", 1),
        ("b", 2),
    }


def test_owned_partitions_never_given_change_nothing() -> None:
    """A member that says it owns partitions it was never given (another member's, or of a
    topic nobody subscribes to) is not given them, and the real owner keeps them."""
    c = ConsumerCoordinator()
    _two_members(c)
    c.heartbeat(beat("m1", 1, ALL), 20, TOPICS)
    c.heartbeat(beat("m1", 1, {"a": frozenset(range(5))}), 30, TOPICS)
    c.heartbeat(beat("m2", 2, {}), 40, TOPICS)
    claims = {"a": frozenset(range(6)), "zz": frozenset({0})}
    answer = c.heartbeat(beat("m2", 2, claims), 50, TOPICS)
    assert (answer.error, answer.assignment) == (E.NONE, None)
    group = c.groups[GROUP]
    assert flat(group.members["m2"].assigned) == {("a", 5), ("b", 0), ("b", 1), ("b", 2)}
    assert all(group.owner_of("a", p) == "m1" for p in range(5))


def test_a_leave_during_a_pending_revocation_frees_everything_at_once() -> None:
    c = ConsumerCoordinator()
    _two_members(c)
    c.heartbeat(beat("m1", 1, ALL), 20, TOPICS)  # m1 now revoking
    left = c.heartbeat(beat("m1", -1, None), 30, TOPICS)
    assert (left.error, left.member_epoch) == (E.NONE, -1)
    answer = c.heartbeat(beat("m2", 2, {}), 40, TOPICS)
    assert answer.member_epoch == 3
    assert flat(answer.assignment) == flat(ALL)


def test_a_static_member_s_temporary_leave_during_revocation_then_its_return() -> None:
    """A static member that leaves with -2 while revoking gives up what it was revoking
    (Kafka clears its partitions pending revocation) and keeps the rest; its instance,
    back under another member id, takes its place at the group's epoch with those."""
    c = ConsumerCoordinator()
    assert c.heartbeat(join("s1", instance_id="i1"), 0, TOPICS).member_epoch == 1
    c.heartbeat(join("m2"), 10, TOPICS)
    kept = flat(c.heartbeat(beat("s1", 1, ALL, instance_id="i1"), 20, TOPICS).assignment)
    assert c.heartbeat(beat("s1", -2, None, instance_id="i1"), 30, TOPICS).member_epoch == -2
    freed = flat(c.heartbeat(beat("m2", 2, {}), 40, TOPICS).assignment)
    assert freed == flat(ALL) - kept
    back = c.heartbeat(join("s1-again", instance_id="i1"), 50, TOPICS)
    assert (back.error, back.member_epoch, flat(back.assignment)) == (E.NONE, 2, kept)
    old = c.heartbeat(beat("s1", 1, {}, instance_id="i1"), 60, TOPICS)
    assert old.error is E.FENCED_INSTANCE_ID
    assert c.groups[GROUP].group_epoch == 2  # nobody else moved


def test_a_subscription_change_mid_revocation_reconciles_to_the_newest_target() -> None:
    """m1 is revoking toward one target when m2 changes its subscription to b only: the
    newest target is what m1 and m2 end at, and no partition has two owners meanwhile."""
    c = ConsumerCoordinator()
    _two_members(c)
    c.heartbeat(beat("m1", 1, ALL), 20, TOPICS)
    change = join("m2", ("b",))
    resubscribe = beat("m2", 2, {})
    resubscribe = type(resubscribe)(
        GROUP, "m2", 2, subscribed_topic_names=change.subscribed_topic_names, owned={}
    )
    # m2 holds nothing the new target takes: it is at the new epoch at once
    assert c.heartbeat(resubscribe, 30, TOPICS).member_epoch == 3
    assert c.groups[GROUP].group_epoch == 3
    still = c.heartbeat(beat("m1", 1, ALL), 40, TOPICS)  # has not revoked yet: waits
    assert (still.member_epoch, still.assignment) == (1, None)
    assert c.groups[GROUP].owner_of("b", 0) == "m1"
    m1 = c.heartbeat(beat("m1", 1, {"a": frozenset(range(5))}), 50, TOPICS)
    assert (m1.member_epoch, flat(m1.assignment)) == (3, {("a", p) for p in range(6)})
    m2 = c.heartbeat(beat("m2", 2, {}), 60, TOPICS)
    assert (m2.member_epoch, flat(m2.assignment)) == (3, {("b", p) for p in range(3)})


def test_a_topic_deleted_and_grown_while_partitions_are_pending() -> None:
    """b is deleted while m1 revokes b's partitions for m2, and a grows to 8 partitions:
    nobody is given b again, no partition is ever held by both clients, and the group
    settles with a's 8 partitions shared."""
    c = ConsumerCoordinator()
    m1, m2 = Client("m1"), Client("m2")
    m1.heartbeat(c, 0)
    m2.heartbeat(c, 10)
    m1.heartbeat(c, 20)  # m1 told to revoke a:5 and b:0-2
    changed = TopicView({"a": 8}, version=1)
    for now in range(30, 200, 10):
        for client in (m2, m1):
            assert client.heartbeat(c, now, changed).error is E.NONE
            assert flat(m1.owned).isdisjoint(flat(m2.owned))
    assert "b" not in {t for a in c.groups[GROUP].target.values() for t in a}
    assert flat(m1.owned) | flat(m2.owned) == {("a", p) for p in range(8)}
    assert c.groups[GROUP].phase is GroupPhase.STABLE
