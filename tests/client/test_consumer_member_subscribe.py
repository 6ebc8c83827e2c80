"""``Member(group_protocol="consumer")``'s subscription: ``subscribe()`` changes it (the
next heartbeat, sent at once, carries it; the member revokes the dropped topic's partitions
and takes the new one's), and a pattern is matched by the coordinator, following topics
created after the member joined."""

from __future__ import annotations

import re

import pytest

from huddle.client.connection import connect
from huddle.client.member import Member
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import InvalidArgumentError
from huddle.protocol.messages import CreateTopicsRequest, CreateTopicsResponse, TopicSpec
from tests.client.test_consumer_member import LONG_INTERVAL_MS, Recorder
from tests.helpers import fast_server_config, running_server, wait_until


async def _create(bootstrap: str, *names: str) -> None:
    async with connect(bootstrap) as conn:
        topics = [TopicSpec(name=name, partitions=2) for name in names]
        await conn.call(CreateTopicsRequest(topics=topics), CreateTopicsResponse)


def _of(*topics: str) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t, p) for t in topics for p in range(2))


async def test_subscribe_moves_the_member_to_the_new_topics_at_once() -> None:
    config = fast_server_config(
        consumer_session_timeout_ms=2 * LONG_INTERVAL_MS,
        consumer_heartbeat_interval_ms=LONG_INTERVAL_MS,  # no wait here is one
    )
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _create(bootstrap, "t", "u")
        recorder = Recorder()
        member = Member(
            bootstrap, group_id="g", topics=["t"], listener=recorder, group_protocol="consumer"
        )
        async with member as m:
            await wait_until(lambda: m.assignment == _of("t"), what="it owns t")
            await m.subscribe(["u"])
            assert m.subscription == ["u"]
            await wait_until(lambda: m.assignment == _of("u"), wait_s=5, what="it owns u")
            assert frozenset().union(*recorder.revoked) == _of("t")
            assert recorder.lost == []


async def test_a_pattern_is_matched_by_the_coordinator_and_follows_new_topics() -> None:
    config = fast_server_config(
        consumer_session_timeout_ms=10_000,
        consumer_heartbeat_interval_ms=100,  # a new topic is seen at the next heartbeat
    )
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _create(bootstrap, "orders-eu", "payments")
        member = Member(
            bootstrap, group_id="g", pattern=re.compile("orders-.*"), group_protocol="consumer"
        )
        async with member as m:
            await wait_until(lambda: m.assignment == _of("orders-eu"), what="orders-eu")
            await _create(bootstrap, "orders-us")
            await wait_until(
                lambda: m.assignment == _of("orders-eu", "orders-us"), what="orders-us too"
            )
            assert m.subscription == ["orders-eu", "orders-us"]


@pytest.mark.parametrize(
    "subscription",
    [{}, {"topics": ["t"], "pattern": "t.*"}, {"topics": []}, {"pattern": ""}, {"topics": "t"}],
)
def test_a_subscription_is_topics_or_a_pattern(subscription: dict[str, object]) -> None:
    with pytest.raises(InvalidArgumentError):
        Member("127.0.0.1:1", group_id="g", group_protocol="consumer", **subscription)  # type: ignore[arg-type]
