"""A consumer-protocol member kept as a record and loaded back is the same member: every
field of ``ConsumerMember`` travels (kept as it is, or converted), its target too."""

from __future__ import annotations

import msgspec

from huddle.coordinator.consumer.group import ConsumerGroup
from huddle.coordinator.consumer.member import ClassicMeta, ConsumerMember, MemberState
from huddle.coordinator.storage.kept_consumer_groups import ConsumerKept
from huddle.coordinator.storage.records import (
    ConsumerGroupRecord,
    ConsumerMemberRecord,
    Record,
)


def test_a_member_with_every_field_set_comes_back_the_same() -> None:
    member = ConsumerMember(
        "m",
        instance_id="i",
        rack_id="r",
        rebalance_timeout_ms=1234,
        subscribed_topic_names=frozenset({"t", "u"}),
        subscribed_topic_regex="x.*",
        server_assignor="range",
        member_epoch=7,
        previous_member_epoch=6,
        state=MemberState.UNREVOKED_PARTITIONS,
        assigned={"t": frozenset({0, 1})},
        pending_revocation={"u": frozenset({2})},
        classic=ClassicMeta(10_000, (("range", b"\x00\x01"), ("cooperative-sticky", b""))),
        topic_ids={"t": "id-t", "u": "id-u"},
    )
    defaults = ConsumerMember("m")
    for field in msgspec.structs.fields(ConsumerMember):  # none left at its default
        if field.name != "member_id":
            assert getattr(member, field.name) != getattr(defaults, field.name), field.name
    group = ConsumerGroup("g")
    group.group_epoch = group.target_epoch = 7
    group.put(member)
    group.target["m"] = {"t": frozenset({0, 1, 3})}
    kept = ConsumerKept()
    kept.enabled = True
    records = kept.changes(group)
    assert [type(r) for r in records] == [ConsumerGroupRecord, ConsumerMemberRecord]
    (loaded,) = _reloaded(records)
    assert loaded.members["m"] == member
    assert loaded.target["m"] == group.target["m"]


def test_an_emptied_group_is_kept_with_its_epochs_until_it_is_gone() -> None:
    """The last member's departure writes that member's deletion and the group's new epoch;
    a restart loads the empty group at that epoch. ``gone`` (a deletion) writes the
    group's deletion, and a restart loads nothing."""
    group = ConsumerGroup("g")
    group.group_epoch = group.target_epoch = 3
    group.subscribed_partitions = {"t": 2}
    group.put(ConsumerMember("m", member_epoch=3, subscribed_topic_names=frozenset({"t"})))
    kept = ConsumerKept()
    kept.enabled = True
    records = kept.changes(group)
    group.remove("m", now=0)  # the group epoch moves to 4
    emptied = kept.changes(group)
    assert [type(r) for r in emptied] == [ConsumerGroupRecord, ConsumerMemberRecord]
    (loaded,) = _reloaded(records + emptied)
    assert (loaded.group_epoch, loaded.target_epoch, loaded.members) == (4, 3, {})
    assert loaded.subscribed_partitions == {"t": 2}
    assert kept.copy() == [ConsumerGroupRecord("g", 4, 3, {"t": 2})]  # what a compaction keeps
    assert _reloaded(records + emptied + kept.gone("g")) == []
    assert kept.size() == 0


def _reloaded(records: list[Record]) -> list[ConsumerGroup]:
    """The groups a restart loads from ``records`` (as the data dir replays them)."""
    again = ConsumerKept()
    for written in records:
        record = msgspec.msgpack.decode(msgspec.msgpack.encode(written), type=Record)
        assert isinstance(record, ConsumerGroupRecord | ConsumerMemberRecord)
        again.apply(record)
    return list(again.loaded_groups())
