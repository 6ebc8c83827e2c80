"""``Member(group_protocol="consumer")`` and a topic deleted and created again under its name
with its partition count between two heartbeats: the coordinator notices the new topic id,
the member revokes the old topic's partitions, then is assigned the new topic's (the same
names and numbers: to huddle's member, which names partitions by topic name, that is a
revocation followed by an assignment)."""

from __future__ import annotations

from huddle.client.connection import connect
from huddle.client.member import Member
from huddle.coordinator.effects import Peer
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    TopicSpec,
)
from tests.client.test_consumer_member import Recorder
from tests.helpers import fast_server_config, running_server, wait_until

T = frozenset(TopicPartition("t", p) for p in range(2))


async def test_the_member_revokes_the_old_topic_and_is_assigned_the_new_one() -> None:
    config = fast_server_config(
        consumer_session_timeout_ms=10_000,
        consumer_heartbeat_interval_ms=100,  # the new topic is seen at the next heartbeat
    )
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with connect(bootstrap) as conn:
            spec = TopicSpec(name="t", partitions=2)
            await conn.call(CreateTopicsRequest(topics=[spec]), CreateTopicsResponse)
        recorder = Recorder()
        member = Member(
            bootstrap, group_id="g", topics=["t"], listener=recorder, group_protocol="consumer"
        )
        async with member as m:
            await wait_until(lambda: m.assignment == T, what="it owns t")
            service = server.consumer
            epoch = service.epoch("g")
            old = server.core.topics.ids["t"]
            # deleted and created again at once: no heartbeat can come between
            now = server.now_ms()
            server.core.handle(Peer(0), 1, DeleteTopicsRequest(topics=["t"]), now)
            server.core.handle(Peer(0), 2, CreateTopicsRequest(topics=[spec]), now)
            assert server.core.topics.ids["t"] != old

            await wait_until(lambda: service.epoch("g") > epoch, what="the group epoch moved")
            await wait_until(
                lambda: len(recorder.assigned) == 2 and m.assignment == T,
                what="t assigned again",
            )
            assert recorder.revoked == [T]  # the old topic's, before the new one's
            assert recorder.lost == []
            assert service.epoch("g") == epoch + 1
