"""Consumer-protocol groups (KIP-848) kept in the data dir: after a restart on the same data
dir (and after a compaction), the members' heartbeats at their epochs are accepted and they
keep their partitions, with no epoch moved; a group that emptied is kept with its epochs; a
topic created again before the restart is noticed after it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.coordinator.storage.records import ConsumerGroupRecord, ConsumerMemberRecord
from huddle.protocol.messages import TopicSpec
from tests.helpers import fast_server_config, wait_until
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka
from tests.kafka.test_consumer_protocol import _beat, _commit, _fetch, _join, _owned, _owning
from tests.kafka.test_wire import _create

NONE, UNKNOWN_MEMBER_ID, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND = 0, 25, 68, 69
ALL = {0, 1, 2, 3}


@asynccontextmanager
async def _serving(data_dir: Path, **group: Any) -> AsyncIterator[Listening]:
    """A server on ``data_dir`` with the Kafka listener (``group``: group config changes)."""
    config = fast_server_config(data_dir=str(data_dir))
    config = replace(config, group=replace(config.group, **group))
    async with CoordinatorServer(config) as server:
        yield Listening(server, await listen_kafka(server, "127.0.0.1", 0))


def _full(member_id: str, epoch: int, t_id: uuid.UUID, owned: set[int]) -> dict[str, Any]:
    """A full heartbeat (as a member sends after finding the coordinator again)."""
    return _beat(
        member_id,
        epoch,
        rebalance_timeout=30_000,
        subscribed_topic_names=["t"],
        topic_partitions=_owning(t_id, owned),
    )


async def _form(kafka: Listening) -> tuple[uuid.UUID, set[int]]:
    """Members a and b share topic t (4 partitions), reconciled at epoch 2: (t's id, a's)."""
    _create(kafka.server, TopicSpec(name="t", partitions=4))
    t_id = kafka.server.core.topics.ids["t"]
    async with RawKafka(kafka.port) as conn:
        await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join("a", "t"))
        await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **_join("b", "t"))
        a = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT, 1, 3, **_beat("a", 1, topic_partitions=_owning(t_id, ALL))
        )
        mine = _owned(a, t_id)
        a = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT,
            1,
            4,
            **_beat("a", 1, topic_partitions=_owning(t_id, mine)),
        )
        assert (a.error_code, a.member_epoch) == (NONE, 2)
        b = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT, 1, 5, **_beat("b", 2, topic_partitions=[])
        )
        assert (b.error_code, b.member_epoch, _owned(b, t_id)) == (NONE, 2, ALL - mine)
    return t_id, mine


async def _carry_on(kafka: Listening, t_id: uuid.UUID, mine: set[int]) -> None:
    """Both members heartbeat at epoch 2 and keep their partitions; no epoch moves."""
    async with RawKafka(kafka.port) as conn:
        a = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_full("a", 2, t_id, mine))
        b = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **_full("b", 2, t_id, ALL - mine))
    assert (a.error_code, a.member_epoch, _owned(a, t_id)) == (NONE, 2, mine)
    assert (b.error_code, b.member_epoch, _owned(b, t_id)) == (NONE, 2, ALL - mine)
    group = kafka.wire.consumer.core.groups["g"]
    assert (group.group_epoch, group.target_epoch) == (2, 2)


async def test_members_carry_on_at_their_epochs_after_a_restart(tmp_path: Path) -> None:
    async with _serving(tmp_path) as kafka:
        t_id, mine = await _form(kafka)
    async with _serving(tmp_path) as kafka:
        await _carry_on(kafka, t_id, mine)
    async with _serving(tmp_path) as kafka:  # and again: what the restart served was kept
        await _carry_on(kafka, t_id, mine)


async def test_a_compacted_data_dir_keeps_the_consumer_group(tmp_path: Path) -> None:
    async with _serving(tmp_path) as kafka:
        t_id, mine = await _form(kafka)
    async with _serving(tmp_path) as kafka:
        journal = kafka.server.journal
        assert journal is not None
        assert journal.compact(kafka.server.core.snapshot)
        kept = [
            r
            for r in kafka.server.core.snapshot()
            if isinstance(r, ConsumerGroupRecord | ConsumerMemberRecord)
        ]
        assert len(kept) == 3  # the group, a and b
    async with _serving(tmp_path) as kafka:
        await _carry_on(kafka, t_id, mine)


async def test_a_group_that_emptied_is_kept_across_a_restart(tmp_path: Path) -> None:
    """An emptied consumer group is kept with its epochs (as Kafka keeps an empty consumer
    group until it is deleted): after a restart a member fenced meanwhile is told
    UNKNOWN_MEMBER_ID (it rejoins; GROUP_ID_NOT_FOUND would be fatal for librdkafka), and
    it rejoins at the group epoch where it was (4: the leaves moved it), never back at 1."""
    async with _serving(tmp_path) as kafka:
        t_id, mine = await _form(kafka)
    async with _serving(tmp_path) as kafka:  # kept, then emptied
        await _carry_on(kafka, t_id, mine)
        async with RawKafka(kafka.port) as conn:
            for i, member in enumerate(("a", "b")):
                left = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, i, **_beat(member, -1))
                assert left.error_code == NONE
        assert kafka.wire.consumer.core.groups["g"].group_epoch == 4
    async with _serving(tmp_path) as kafka:
        group = kafka.wire.consumer.core.groups["g"]
        assert (group.group_epoch, group.target_epoch, group.members) == (4, 2, {})
        async with RawKafka(kafka.port) as conn:
            late = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_full("a", 2, t_id, mine))
            assert late.error_code == UNKNOWN_MEMBER_ID
            again = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **_join("a", "t"))
        assert (again.error_code, again.member_epoch, _owned(again, t_id)) == (NONE, 4, ALL)
    async with _serving(tmp_path) as kafka:  # and what it rejoined at is kept
        assert kafka.wire.consumer.core.groups["g"].members["a"].member_epoch == 4


async def test_a_deleted_consumer_group_stays_deleted_after_a_restart(tmp_path: Path) -> None:
    """DeleteGroups on the Kafka listener: refused NON_EMPTY_GROUP while the group has
    members; once it is empty it goes with its committed offsets, and a restart does not
    bring either back: a member of it is told GROUP_ID_NOT_FOUND, and a join makes the
    group anew at epoch 1."""
    async with _serving(tmp_path) as kafka:
        t_id, mine = await _form(kafka)
        async with RawKafka(kafka.port) as conn:
            done = await conn.call(Api.OFFSET_COMMIT, 9, 1, **_commit("a", 2, 7))
            assert done.topics[0].partitions[0].error_code == NONE
            busy = await conn.call(Api.DELETE_GROUPS, 2, 2, groups_names=["g"])
            assert [r.error_code for r in busy.results] == [NON_EMPTY_GROUP]
            for i, member in enumerate(("a", "b"), 3):
                left = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, i, **_beat(member, -1))
                assert left.error_code == NONE
            deleted = await conn.call(Api.DELETE_GROUPS, 2, 5, groups_names=["g"])
            assert [r.error_code for r in deleted.results] == [NONE]
    async with _serving(tmp_path) as kafka:
        assert "g" not in kafka.wire.consumer.core.groups
        async with RawKafka(kafka.port) as conn:
            fetched = await conn.call(Api.OFFSET_FETCH, 9, 1, **_fetch(None, -1))
            late = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **_full("a", 2, t_id, mine))
            anew = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 3, **_join("a", "t"))
        assert fetched.groups[0].topics[0].partitions[0].committed_offset == -1
        assert late.error_code == GROUP_ID_NOT_FOUND
        assert (anew.error_code, anew.member_epoch) == (NONE, 1)


async def test_an_empty_group_whose_offsets_expired_goes_and_stays_gone(tmp_path: Path) -> None:
    """Offset retention: once the group is empty, its offset expires the retention after its
    commit, and the group goes with it (Kafka 4.0's cleanup of an empty consumer group with
    no offset left); the deletion is kept, so a restart does not bring the group back."""
    quick = {"offsets_retention_ms": 200, "offsets_retention_check_interval_ms": 20}
    async with _serving(tmp_path, **quick) as kafka:
        await _form(kafka)
        async with RawKafka(kafka.port) as conn:
            done = await conn.call(Api.OFFSET_COMMIT, 9, 1, **_commit("a", 2, 7))
            assert done.topics[0].partitions[0].error_code == NONE
            assert "g" in kafka.wire.consumer.core.groups  # members: kept, offsets and all
            for i, member in enumerate(("a", "b"), 2):
                await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, i, **_beat(member, -1))
        groups = kafka.wire.consumer.core.groups
        await wait_until(lambda: "g" not in groups, what="the empty group to expire")
        assert "g" not in kafka.server.core.groups  # its offsets went first
    async with _serving(tmp_path) as kafka:
        assert "g" not in kafka.wire.consumer.core.groups


async def test_a_fenced_member_stays_fenced_after_a_restart(tmp_path: Path) -> None:
    """A member that left is written out: after a restart its old epoch is not accepted,
    and the member left behind owns everything at the group's next epoch."""
    async with _serving(tmp_path) as kafka:
        t_id, mine = await _form(kafka)
        async with RawKafka(kafka.port) as conn:
            left = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_beat("a", -1))
            assert left.error_code == NONE
    async with _serving(tmp_path) as kafka:
        async with RawKafka(kafka.port) as conn:
            a = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_full("a", 2, t_id, mine))
            b = await conn.call(
                Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **_full("b", 2, t_id, ALL - mine)
            )
        assert a.error_code != NONE
        assert (b.error_code, b.member_epoch, _owned(b, t_id)) == (NONE, 3, ALL)


async def test_a_static_member_back_under_a_new_id_is_kept_so(tmp_path: Path) -> None:
    """A static member that left for now (-2) and came back as a new process (a new member
    id): a restart serves the new id at its epoch, and the old id is unknown."""
    async with _serving(tmp_path) as kafka:
        _create(kafka.server, TopicSpec(name="t", partitions=2))
        t_id = kafka.server.core.topics.ids["t"]
        async with RawKafka(kafka.port) as conn:
            old = await conn.call(
                Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **{**_join("old", "t"), "instance_id": "i"}
            )
            assert (old.error_code, old.member_epoch) == (NONE, 1)
            away = _beat("old", -2, instance_id="i")
            assert (await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **away)).error_code == NONE
            new = await conn.call(
                Api.CONSUMER_GROUP_HEARTBEAT, 1, 3, **{**_join("new", "t"), "instance_id": "i"}
            )
            assert (new.error_code, _owned(new, t_id)) == (NONE, {0, 1})
            epoch = new.member_epoch
    async with _serving(tmp_path) as kafka:
        async with RawKafka(kafka.port) as conn:
            back = {
                **_full("new", epoch, t_id, {0, 1}),
                "instance_id": "i",
                "subscribed_topic_names": ["t"],
            }
            again = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **back)
        assert (again.error_code, again.member_epoch, _owned(again, t_id)) == (NONE, epoch, {0, 1})
        assert list(kafka.wire.consumer.core.groups["g"].members) == ["new"]


async def test_a_topic_created_again_before_a_restart_is_noticed_after_it(
    tmp_path: Path,
) -> None:
    """t is deleted and created again (4 partitions again) with no heartbeat between, then
    the server restarts: the group's records keep t's old id, so the first heartbeat after
    the restart moves the group epoch and the member gives up the old topic's partitions
    before it is given the new one's."""
    async with _serving(tmp_path) as kafka:
        t_id, mine = await _form(kafka)
        async with RawKafka(kafka.port) as conn:
            gone = await conn.call(
                Api.DELETE_TOPICS, 6, 1, topics=[{"name": None, "topic_id": t_id}], timeout=5_000
            )
            assert gone.responses[0].error_code == NONE
            made = await conn.call(
                Api.CREATE_TOPICS,
                7,
                2,
                topics=[{"name": "t", "num_partitions": 4, "replication_factor": 1}],
                timeout=5_000,
            )
            new_id = made.topics[0].topic_id
            assert new_id != t_id
    async with _serving(tmp_path) as kafka:
        assert kafka.server.core.topics.ids["t"] == new_id
        async with RawKafka(kafka.port) as conn:
            told = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_full("a", 2, t_id, mine))
            assert (told.error_code, told.member_epoch, _owned(told, t_id)) == (NONE, 2, set())
            assert _owned(told, new_id) == set()  # the old partitions go first
            given = await conn.call(
                Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **_full("a", 2, t_id, set())
            )
        assert (given.error_code, given.member_epoch, _owned(given, new_id)) == (NONE, 3, mine)
        assert kafka.wire.consumer.core.groups["g"].group_epoch == 3
