"""A topic deleted and created again under its name, with the same partition count, between
two heartbeats: the consumer group notices it by the topic's id (sans-IO, explicit clock).

The group epoch moves, every member revokes the old topic's partitions (even those the new
target gives it again), and only then is given the new topic's; a new-topic partition goes
to nobody while any member still owns the old topic's partition of that number.
"""

from __future__ import annotations

from huddle.coordinator.consumer import ConsumerCoordinator, GroupPhase, MemberState, TopicView
from huddle.coordinator.storage.kept_consumer_groups import ConsumerKept, ConsumerRecord
from huddle.coordinator.storage.records import decode_frames, encode_frames
from huddle.protocol.errors import ErrorCode as E
from tests.consumer.helpers import GROUP, Client, flat

OLD = TopicView({"t": 4}, version=1, ids={"t": "id-old"})
NEW = TopicView({"t": 4}, version=2, ids={"t": "id-new"})  # deleted, created again
ALL = {("t", p) for p in range(4)}


def _stable(c: ConsumerCoordinator, clients: list[Client], now: float, view: TopicView) -> float:
    for _ in range(10):
        for client in clients:
            assert client.heartbeat(c, now, view).error is E.NONE
            now += 10
        if c.groups[GROUP].phase is GroupPhase.STABLE:
            return now
    raise AssertionError("the group did not settle")


def test_a_member_revokes_the_old_topic_before_it_is_given_the_new_one() -> None:
    c = ConsumerCoordinator()
    m1 = Client("m1", topics=("t",))
    now = _stable(c, [m1], 0, OLD)
    group = c.groups[GROUP]
    epoch = group.group_epoch
    assert flat(m1.owned) == ALL

    told = m1.heartbeat(c, now, NEW)
    assert group.group_epoch == epoch + 1  # the subscription's topic changed
    # the target gives m1 t-0..3 again, but of the new topic: the old ones go first
    assert flat(told.assignment) == set()
    assert told.member_epoch == epoch
    assert group.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    assert group.members["m1"].topic_ids == {"t": "id-old"}

    given = m1.heartbeat(c, now + 10, NEW)  # it owns nothing now
    assert given.member_epoch == epoch + 1
    assert flat(given.assignment) == ALL
    assert group.members["m1"].topic_ids == {"t": "id-new"}
    assert group.phase is GroupPhase.STABLE


def test_a_new_topic_partition_waits_for_the_old_one_of_its_number_to_be_released() -> None:
    """m1 owns all of the old t; t is created again as m2 joins: m2's half of the new t is
    held back until m1 has revoked the old t, and no partition is ever owned twice."""
    c = ConsumerCoordinator()
    m1, m2 = Client("m1", topics=("t",)), Client("m2", topics=("t",))
    now = _stable(c, [m1], 0, OLD)
    group = c.groups[GROUP]

    m2.heartbeat(c, now, NEW)
    assert flat(m2.owned) == set()
    assert group.members["m2"].state is MemberState.UNRELEASED_PARTITIONS
    m1.heartbeat(c, now + 10, NEW)  # told to revoke every old partition
    assert flat(m1.owned) == set()
    m2.heartbeat(c, now + 20, NEW)  # m1 has not said it revoked yet
    assert flat(m2.owned) == set()
    now = _stable(c, [m1, m2], now + 30, NEW)
    assert flat(m1.owned).isdisjoint(flat(m2.owned))
    assert flat(m1.owned) | flat(m2.owned) == ALL
    assert {m.topic_ids["t"] for m in group.members.values()} == {"id-new"}


def test_a_topic_created_again_while_the_coordinator_was_down_is_noticed_on_load() -> None:
    """The group's records keep the topics' ids: a server that loads them notices that t
    is another topic now, at the first heartbeat."""
    c = ConsumerCoordinator()
    m1 = Client("m1", topics=("t",))
    now = _stable(c, [m1], 0, OLD)
    kept = ConsumerKept()
    kept.enabled = True
    written = encode_frames(kept.changes(c.groups[GROUP]))

    restarted = ConsumerKept()
    for record in decode_frames(written).records:
        assert isinstance(record, ConsumerRecord)
        restarted.apply(record)
    (group,) = restarted.loaded_groups()
    c2 = ConsumerCoordinator()
    c2.load(group, now)
    epoch = group.group_epoch
    after = TopicView({"t": 4}, version=0, ids={"t": "id-new"})  # a fresh registry's count
    assert flat(m1.heartbeat(c2, now + 10, after).assignment) == set()
    assert group.group_epoch == epoch + 1
    assert flat(m1.heartbeat(c2, now + 20, after).assignment) == ALL


def test_a_topic_without_an_id_then_with_one_moves_nothing() -> None:
    """A group kept before topic ids were (or a topic restored without one) sees an id
    for the first time: that is no change, and nothing is revoked."""
    c = ConsumerCoordinator()
    m1 = Client("m1", topics=("t",))
    now = _stable(c, [m1], 0, TopicView({"t": 4}, version=1))
    epoch = c.groups[GROUP].group_epoch
    answer = m1.heartbeat(c, now, OLD)
    assert (answer.member_epoch, answer.assignment) == (epoch, None)
    assert c.groups[GROUP].group_epoch == epoch
