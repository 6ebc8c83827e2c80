"""The consumer group protocol (KIP-848) on the Kafka wire: ConsumerGroupHeartbeat v0-v1.

Members join with epoch 0 and get their assignment as topic ids; a second member's join
moves partitions only after their owner released them; a leave (epoch -1) gives the rest
to the other; stale epochs are fenced; the errors Kafka answers come back; a mixed group
refuses what it cannot serve."""

from __future__ import annotations

import uuid
from typing import Any, NoReturn

import pytest

from huddle.coordinator.consumer import DoubleOwnerError
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.state import GroupState
from huddle.protocol.messages import TopicSpec
from tests.helpers import wait_until
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka
from tests.kafka.test_wire import _create

UNKNOWN_SERVER_ERROR, NONE, UNKNOWN_MEMBER_ID, UNSUPPORTED_VERSION, INVALID_REQUEST = (
    -1,
    0,
    25,
    35,
    42,
)
GROUP_ID_NOT_FOUND, FENCED_MEMBER_EPOCH = 69, 110
INCONSISTENT_GROUP_PROTOCOL = 23


def _beat(member_id: str, epoch: int, **fields: Any) -> dict[str, Any]:
    return {"group_id": "g", "member_id": member_id, "member_epoch": epoch, **fields}


def _join(member_id: str, *topics: str) -> dict[str, Any]:
    return _beat(
        member_id,
        0,
        rebalance_timeout=30_000,
        subscribed_topic_names=list(topics),
        topic_partitions=[],
    )


def _classic_join(group_id: str, instance_id: str | None) -> dict[str, Any]:
    """A classic JoinGroup (v5) of a new member, with the range assignor."""
    return {
        "group_id": group_id,
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": "",
        "group_instance_id": instance_id,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }


def _owned(answer: Any, topic_id: uuid.UUID) -> set[int]:
    assert answer.assignment is not None
    return {
        p
        for t in answer.assignment.topic_partitions
        if t.topic_id == topic_id
        for p in t.partitions
    }


def _owning(topic_id: uuid.UUID, partitions: set[int]) -> list[dict[str, Any]]:
    return [{"topic_id": topic_id, "partitions": sorted(partitions)}]


async def test_two_members_share_a_topic_and_one_leaving_gives_the_other_all(
    kafka: Listening,
) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=4))
    t_id = kafka.server.core.topics.ids["t"]
    async with RawKafka(kafka.port) as conn:
        a = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join("a", "t"))
        assert (a.error_code, a.member_id, a.member_epoch) == (NONE, "a", 1)
        assert a.heartbeat_interval.total_seconds() == 5
        assert _owned(a, t_id) == {0, 1, 2, 3}

        b = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **_join("b", "t"))
        assert (b.error_code, b.member_epoch) == (NONE, 2)
        # b gets nothing a still owns: a must release its share first
        assert _owned(b, t_id) == set()
        a2 = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT,
            1,
            3,
            **_beat("a", 1, topic_partitions=_owning(t_id, {0, 1, 2, 3})),
        )
        kept = _owned(a2, t_id)
        assert len(kept) == 2
        assert a2.member_epoch == 1  # it revokes the others before it moves on
        a3 = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT,
            1,
            4,
            **_beat("a", 1, topic_partitions=_owning(t_id, kept)),
        )
        assert (a3.error_code, a3.member_epoch) == (NONE, 2)
        b2 = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT, 1, 5, **_beat("b", 2, topic_partitions=[])
        )
        assert _owned(b2, t_id) == {0, 1, 2, 3} - kept

        left = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 6, **_beat("a", -1))
        assert (left.error_code, left.member_epoch) == (NONE, -1)
        b3 = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT,
            1,
            7,
            **_beat("b", 2, topic_partitions=_owning(t_id, {0, 1, 2, 3} - kept)),
        )
        assert _owned(b3, t_id) == {0, 1, 2, 3}
        assert b3.member_epoch == 3


async def test_errors_as_kafka_answers_them(kafka: Listening) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=2))
    async with RawKafka(kafka.port) as conn:
        empty_id = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join("", "t"))
        assert empty_id.error_code == INVALID_REQUEST
        nobody = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **_beat("x", 3))
        assert nobody.error_code == GROUP_ID_NOT_FOUND
        await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 3, **_join("a", "t"))
        stranger = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 4, **_beat("x", 1))
        assert stranger.error_code == UNKNOWN_MEMBER_ID
        ahead = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 5, **_beat("a", 7))
        assert ahead.error_code == FENCED_MEMBER_EPOCH


async def test_v0_lets_the_coordinator_choose_the_member_id(kafka: Listening) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=1))
    async with RawKafka(kafka.port) as conn:
        answer = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 0, 1, **_join("", "t"))
    assert (answer.error_code, answer.member_epoch) == (NONE, 1)
    assert answer.member_id


async def test_a_member_that_stops_heartbeating_is_fenced_by_the_timer(
    kafka: Listening,
) -> None:
    core = kafka.wire.consumer.core
    core.config = type(core.config)(session_timeout_ms=200, heartbeat_interval_ms=50)
    _create(kafka.server, TopicSpec(name="t", partitions=1))
    async with RawKafka(kafka.port) as conn:
        await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join("a", "t"))
        await wait_until(lambda: not core.groups["g"].members)
        late = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **_beat("a", 1))
    assert late.error_code == UNKNOWN_MEMBER_ID


async def test_a_mixed_group_refuses_what_it_cannot_serve(kafka: Listening) -> None:
    """A classic JoinGroup to a consumer group is served by it, but needs a ConsumerProtocol
    subscription; a consumer-protocol join to a classic group whose member's metadata is no
    ConsumerProtocol subscription is refused, in a rebalance too, and the classic group goes
    on as it was (tests/kafka/test_consumer_upgrade.py has the upgrade itself,
    test_consumer_upgrade_rebalancing.py that of a rebalancing group)."""
    _create(kafka.server, TopicSpec(name="t", partitions=1))
    async with RawKafka(kafka.port) as conn:
        await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join("a", "t"))
        join = await conn.call(Api.JOIN_GROUP, 5, 2, **_classic_join("g", None))
        assert join.error_code == INCONSISTENT_GROUP_PROTOCOL
        classic = await conn.call(Api.JOIN_GROUP, 5, 3, **_classic_join("c", "static"))
        assert classic.error_code == NONE  # in CompletingRebalance until it syncs
        refused = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT, 1, 4, **{**_join("b", "t"), "group_id": "c"}
        )
        assert refused.error_code == GROUP_ID_NOT_FOUND
        assert "malformed" in refused.error_message
        group = kafka.server.core.groups["c"]
        assert group.is_(GroupState.COMPLETING_REBALANCE)
        assert group.members[classic.member_id].join_waiter is None


STALE_MEMBER_EPOCH = 113


def _commit(member_id: str, epoch: int, offset: int) -> dict[str, Any]:
    return {
        "group_id": "g",
        "generation_id_or_member_epoch": epoch,
        "member_id": member_id,
        "group_instance_id": None,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}
                ],
            }
        ],
    }


def _fetch(member_id: str | None, epoch: int) -> dict[str, Any]:
    return {
        "groups": [
            {
                "group_id": "g",
                "member_id": member_id,
                "member_epoch": epoch,
                "topics": [{"name": "t", "partition_indexes": [0]}],
            }
        ],
        "require_stable": False,
    }


async def test_offsets_of_a_consumer_group_check_the_member_epoch(kafka: Listening) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=1))
    async with RawKafka(kafka.port) as conn:
        joined = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join("a", "t"))
        epoch = joined.member_epoch
        stale = await conn.call(Api.OFFSET_COMMIT, 9, 2, **_commit("a", epoch - 1, 5))
        assert stale.topics[0].partitions[0].error_code == STALE_MEMBER_EPOCH
        stranger = await conn.call(Api.OFFSET_COMMIT, 9, 3, **_commit("x", epoch, 5))
        assert stranger.topics[0].partitions[0].error_code == UNKNOWN_MEMBER_ID
        old_version = await conn.call(Api.OFFSET_COMMIT, 8, 4, **_commit("a", epoch, 5))
        assert old_version.topics[0].partitions[0].error_code == UNSUPPORTED_VERSION
        done = await conn.call(Api.OFFSET_COMMIT, 9, 5, **_commit("a", epoch, 7))
        assert done.topics[0].partitions[0].error_code == NONE

        fetched = await conn.call(Api.OFFSET_FETCH, 9, 6, **_fetch("a", epoch))
        (group,) = fetched.groups
        assert group.error_code == NONE
        assert group.topics[0].partitions[0].committed_offset == 7
        stale_fetch = await conn.call(Api.OFFSET_FETCH, 9, 7, **_fetch("a", epoch + 1))
        assert stale_fetch.groups[0].error_code == STALE_MEMBER_EPOCH
        admin = await conn.call(Api.OFFSET_FETCH, 9, 8, **_fetch(None, -1))
        assert admin.groups[0].topics[0].partitions[0].committed_offset == 7


async def test_consumer_group_describe_answers_members_epochs_and_assignments(
    kafka: Listening,
) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=2))
    t_id = kafka.server.core.topics.ids["t"]
    async with RawKafka(kafka.port) as conn:
        await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join("a", "t"))
        await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **_join("b", "t"))
        answer = await conn.call(
            Api.CONSUMER_GROUP_DESCRIBE,
            1,
            3,
            group_ids=["g", "nobody"],
            include_authorized_operations=False,
        )
    described, missing = answer.groups
    assert (described.error_code, described.group_state) == (NONE, "Reconciling")
    assert (described.group_epoch, described.assignment_epoch) == (2, 2)
    assert described.assignor_name == "uniform"
    a, b = described.members
    assert (a.member_id, a.member_epoch, a.client_id) == ("a", 1, "test")
    assert a.subscribed_topic_names == ("t",)
    assert a.member_type == 1
    # a still owns both (it has not revoked one yet); the target gives each one
    assert [(t.topic_id, t.topic_name, t.partitions) for t in a.assignment.topic_partitions] == [
        (t_id, "t", (0, 1))
    ]
    targets = [
        p for m in (a, b) for t in m.target_assignment.topic_partitions for p in t.partitions
    ]
    assert sorted(targets) == [0, 1]
    assert b.assignment.topic_partitions == ()
    assert missing.error_code == GROUP_ID_NOT_FOUND


async def test_list_groups_lists_consumer_groups_with_their_type(kafka: Listening) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=1))
    async with RawKafka(kafka.port) as conn:
        await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join("a", "t"))
        every = await conn.call(Api.LIST_GROUPS, 5, 2, states_filter=[], types_filter=[])
        consumers = await conn.call(
            Api.LIST_GROUPS, 5, 3, states_filter=["stable"], types_filter=["consumer"]
        )
        classic = await conn.call(Api.LIST_GROUPS, 5, 4, states_filter=[], types_filter=["classic"])
    assert [(g.group_id, g.group_type, g.group_state) for g in every.groups] == [
        ("g", "consumer", "Stable")
    ]
    assert [g.group_id for g in consumers.groups] == ["g"]
    assert classic.groups == ()


async def test_a_regex_subscription_follows_a_topic_created_later(kafka: Listening) -> None:
    _create(kafka.server, TopicSpec(name="other", partitions=1))
    async with RawKafka(kafka.port) as conn:
        joined = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT,
            1,
            1,
            **_beat(
                "a", 0, rebalance_timeout=30_000, subscribed_topic_regex="r.*", topic_partitions=[]
            ),
        )
        assert joined.assignment is not None
        assert joined.assignment.topic_partitions == ()
        _create(kafka.server, TopicSpec(name="r1", partitions=2))
        later = await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT,
            1,
            2,
            **_beat("a", joined.member_epoch, topic_partitions=[]),
        )
    assert _owned(later, kafka.server.core.topics.ids["r1"]) == {0, 1}
    assert later.member_epoch > joined.member_epoch


async def test_a_bug_the_core_detects_is_answered_and_the_connection_goes_on(
    kafka: Listening, monkeypatch: pytest.MonkeyPatch
) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=1))
    core = kafka.wire.consumer.core

    def double_owner(*args: object) -> NoReturn:
        raise DoubleOwnerError("partition t-0 owned by a and b")

    async with RawKafka(kafka.port) as conn:
        with monkeypatch.context() as patch:
            patch.setattr(core, "heartbeat", double_owner)
            failed = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join("a", "t"))
        assert failed.error_code == UNKNOWN_SERVER_ERROR
        joined = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **_join("a", "t"))
    assert (joined.error_code, joined.member_epoch) == (NONE, 1)


async def test_an_emptied_consumer_group_s_id_goes_to_a_classic_group(kafka: Listening) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=1))
    async with RawKafka(kafka.port) as conn:
        await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join("a", "t"))
        await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **_beat("a", -1))
        join = await conn.call(Api.JOIN_GROUP, 5, 3, **_classic_join("g", "static"))
        assert join.error_code == NONE
        synced = await conn.call(
            Api.SYNC_GROUP,
            3,
            5,
            group_id="g",
            generation_id=join.generation_id,
            member_id=join.member_id,
            group_instance_id="static",
            assignments=[{"member_id": join.member_id, "assignment": b""}],
        )
        assert synced.error_code == NONE
        commit = await conn.call(
            Api.OFFSET_COMMIT,
            9,
            4,
            **{**_commit(join.member_id, join.generation_id, 3), "group_instance_id": "static"},
        )
    assert commit.topics[0].partitions[0].error_code == NONE
