"""A topic deleted and created again under its name, with its partition count, between two
ConsumerGroupHeartbeats (KIP-848 on the Kafka wire): the group epoch moves, the member is
told to give up the old topic id's partitions (its owned partitions of the deleted id still
count as owned until it stops naming them), and then is given the new id's."""

from __future__ import annotations

from typing import Any

from huddle.coordinator.effects import Peer
from huddle.coordinator.kafka.apis import Api
from huddle.protocol.messages import DeleteTopicsRequest, TopicSpec
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka
from tests.kafka.test_consumer_protocol import _beat, _join, _owning
from tests.kafka.test_wire import _create


def _assigned(answer: Any) -> dict[Any, set[int]] | None:
    if answer.assignment is None:
        return None
    return {t.topic_id: set(t.partitions) for t in answer.assignment.topic_partitions}


async def test_a_member_gives_up_the_old_topic_id_and_is_given_the_new_one(
    kafka: Listening,
) -> None:
    server = kafka.server
    _create(server, TopicSpec(name="t", partitions=2))
    old = server.core.topics.ids["t"]
    async with RawKafka(kafka.port) as conn:
        joined = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join("a", "t"))
        assert _assigned(joined) == {old: {0, 1}}
        epoch = joined.member_epoch

        server.core.handle(Peer(0), 2, DeleteTopicsRequest(topics=["t"]), server.now_ms())
        _create(server, TopicSpec(name="t", partitions=2))
        new = server.core.topics.ids["t"]
        assert new != old

        # ConsumerGroupDescribe shows what the member was given: the old id, until it heartbeats
        (before,) = (await _describe(conn, 10)).groups
        assert _assigned(before.members[0]) == {old: {0, 1}}

        owning_old = _beat("a", epoch, topic_partitions=_owning(old, {0, 1}))
        told = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 3, **owning_old)
        assert (told.error_code, told.member_epoch) == (0, epoch)
        assert _assigned(told) == {}  # give the old topic's partitions up first
        # it still names the old id's partitions: they are not released yet
        still = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 4, **owning_old)
        assert (still.member_epoch, _assigned(still)) == (epoch, None)

        released = _beat("a", epoch, topic_partitions=[])
        given = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 5, **released)
        assert given.member_epoch == epoch + 1  # the group epoch moved once
        assert _assigned(given) == {new: {0, 1}}
        (after,) = (await _describe(conn, 11)).groups
        assert (after.group_epoch, after.group_state) == (epoch + 1, "Stable")
        assert _assigned(after.members[0]) == {new: {0, 1}}


async def _describe(conn: RawKafka, correlation_id: int) -> Any:
    return await conn.call(
        Api.CONSUMER_GROUP_DESCRIBE,
        1,
        correlation_id,
        group_ids=["g"],
        include_authorized_operations=False,
    )
