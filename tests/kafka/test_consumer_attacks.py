"""Unusual and hostile ConsumerGroupHeartbeats on the Kafka wire (KIP-848): what Kafka takes
is taken (long subscriptions and regexes), what it refuses is refused with its error, and
nothing a client sends stops the listener serving the others."""

from __future__ import annotations

import struct
import uuid

from huddle.coordinator.kafka.apis import Api
from huddle.protocol.messages import TopicSpec
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka, request, request_bytes
from tests.kafka.test_consumer_protocol import _beat, _join, _owned
from tests.kafka.test_wire import _create

HB = Api.CONSUMER_GROUP_HEARTBEAT
NONE, INVALID_REQUEST, INVALID_REGULAR_EXPRESSION = 0, 42, 128


async def test_a_subscription_to_thousands_of_topics_is_served(kafka: Listening) -> None:
    """Kafka bounds a subscription only by the request's size: a consumer subscribed to
    3,000 topic names (most not created yet) joins and gets the ones that exist."""
    _create(kafka.server, TopicSpec(name="t", partitions=2))
    t_id = kafka.server.core.topics.ids["t"]
    names = ["t", *(f"later-{i}" for i in range(3_000))]
    async with RawKafka(kafka.port) as conn:
        answer = await conn.call(HB, 1, 1, **_join("m", *names))
    assert (answer.error_code, answer.member_epoch) == (NONE, 1), answer.error_message
    assert _owned(answer, t_id) == {0, 1}


async def test_a_long_regex_is_served_and_an_over_long_one_refused_as_kafka_does(
    kafka: Listening,
) -> None:
    """A pattern of a few hundred characters (an alternation of topic names) is a regex
    like any other; one over the coordinator's bound is INVALID_REGULAR_EXPRESSION, the
    error Kafka answers a pattern it does not take, not a malformed request."""
    _create(kafka.server, TopicSpec(name="orders-7", partitions=1))
    o_id = kafka.server.core.topics.ids["orders-7"]
    alternation = "|".join(f"orders-{i}" for i in range(40))
    assert len(alternation) > 255
    regex_join = {**_join("r", "t"), "subscribed_topic_names": None}
    async with RawKafka(kafka.port) as conn:
        served = await conn.call(HB, 1, 1, **regex_join, subscribed_topic_regex=alternation)
        huge = await conn.call(
            HB, 1, 2, **{**regex_join, "member_id": "h"}, subscribed_topic_regex="a|" * 5_000 + "a"
        )
    assert served.error_code == NONE, served.error_message
    assert _owned(served, o_id) == {0}
    assert huge.error_code == INVALID_REGULAR_EXPRESSION
    assert "at most 4096" in (huge.error_message or "")


async def test_malformed_heartbeats_are_refused_and_the_listener_goes_on(
    kafka: Listening,
) -> None:
    """Epochs below -2 are INVALID_REQUEST (Kafka's "MemberEpoch is invalid."); a null
    member id in v1, where the field is not nullable, ends that connection only (Kafka
    closes a connection whose request does not parse); an owned list naming unknown topic
    ids and impossible partitions is ignored."""
    _create(kafka.server, TopicSpec(name="t", partitions=2))
    async with RawKafka(kafka.port) as conn:
        for correlation, epoch in enumerate((-3, -5, -(2**31)), start=1):
            answer = await conn.call(HB, 1, correlation, **_beat("m", epoch, topic_partitions=[]))
            assert (answer.error_code, answer.error_message) == (
                INVALID_REQUEST,
                "MemberEpoch is invalid.",
            )
        joined = await conn.call(HB, 1, 4, **_join("m", "t"))
        odd = [
            {"topic_id": uuid.uuid4(), "partitions": [-1, 2**31 - 1]},
            {"topic_id": kafka.server.core.topics.ids["t"], "partitions": [-7, 0, 0, 9]},
        ]
        kept = await conn.call(HB, 1, 5, **_beat("m", joined.member_epoch, topic_partitions=odd))
        assert (kept.error_code, kept.member_epoch) == (NONE, joined.member_epoch)
        raw = request_bytes(HB, 1, 6, request(HB, 1, **_join("NULLME", "t")))[4:]
        null_member = raw.replace(b"\x07NULLME", b"\x00", 1)  # compact string: null
        conn.write(struct.pack(">i", len(null_member)) + null_member)
        assert await conn.closed()
    async with RawKafka(kafka.port) as conn:
        again = await conn.call(HB, 1, 1, **_beat("m", joined.member_epoch, topic_partitions=[]))
    assert (again.error_code, again.member_epoch) == (NONE, joined.member_epoch)


async def test_describe_answers_a_revoking_member_s_assigned_partitions_as_kafka(
    kafka: Listening,
) -> None:
    """Kafka's ConsumerGroupDescribe answers a member's assigned partitions: while it
    revokes one for a newcomer, that one is in neither member's ``assignment``."""
    _create(kafka.server, TopicSpec(name="t", partitions=2))
    t_id = kafka.server.core.topics.ids["t"]
    async with RawKafka(kafka.port) as conn:
        a = await conn.call(HB, 1, 1, **_join("a", "t"))
        await conn.call(HB, 1, 2, **_join("b", "t"))
        both = [{"topic_id": t_id, "partitions": [0, 1]}]
        revoking = await conn.call(HB, 1, 3, **_beat("a", a.member_epoch, topic_partitions=both))
        kept = _owned(revoking, t_id)
        assert len(kept) == 1
        answer = await conn.call(
            Api.CONSUMER_GROUP_DESCRIBE, 1, 4, group_ids=["g"], include_authorized_operations=False
        )
    described_a, described_b = answer.groups[0].members
    assert [tuple(t.partitions) for t in described_a.assignment.topic_partitions] == [tuple(kept)]
    assert described_b.assignment.topic_partitions == ()
