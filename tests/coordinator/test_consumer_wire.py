"""The consumer group protocol (KIP-848) on huddle's own wire: ``consumer_heartbeat``
reaches the server's one consumer service (the Kafka listener's groups too), and a member
whose next heartbeat would be answered differently is pushed ``consumer_assignment_changed``
at once, without heartbeating."""

from __future__ import annotations

import uuid

import msgspec

from huddle.client.connection import connect
from huddle.coordinator.consumer_wire import HuddleConsumer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.consumer_protocol import KafkaSubscription, write_subscription
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    ConsumerAssignmentChanged,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    ConsumerTopicPartitions,
    CreateTopicsRequest,
    CreateTopicsResponse,
    ErrorResponse,
    JoinGroupResponse,
    Protocol,
    TopicSpec,
)
from tests.helpers import fast_server_config, join_request, running_server, wait_until, within
from tests.kafka.raw import RawKafka


def _join(member_id: str, *topics: str) -> ConsumerHeartbeatRequest:
    return ConsumerHeartbeatRequest(
        group_id="g",
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=list(topics),
        owned=[],
    )


def _beat(member_id: str, epoch: int, owned: set[int]) -> ConsumerHeartbeatRequest:
    return ConsumerHeartbeatRequest(
        group_id="g",
        member_id=member_id,
        member_epoch=epoch,
        owned=[ConsumerTopicPartitions(topic="t", partitions=sorted(owned))],
    )


def _partitions(answer: ConsumerHeartbeatResponse) -> set[int]:
    assert answer.assignment is not None
    return {p for t in answer.assignment if t.topic == "t" for p in t.partitions}


async def test_a_member_is_told_to_revoke_and_the_joiner_to_take_without_heartbeating(
    server: CoordinatorServer, bootstrap: str
) -> None:
    async with connect(bootstrap) as a_conn, connect(bootstrap) as b_conn:
        created = await a_conn.call(
            CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=4)]), CreateTopicsResponse
        )
        assert created.topics[0].error_code == ErrorCode.NONE
        a = await a_conn.call(_join("a", "t"), ConsumerHeartbeatResponse)
        assert (a.member_id, a.member_epoch, _partitions(a)) == ("a", 1, {0, 1, 2, 3})
        b = await b_conn.call(_join("b", "t"), ConsumerHeartbeatResponse)
        assert _partitions(b) == set()  # a still owns them all
        # a is told, without a heartbeat of its own: it must give up two
        told = await within(a_conn.notices.receive())
        assert told == ConsumerAssignmentChanged(group_id="g", member_id="a", target_epoch=2)
        a2 = await a_conn.call(_beat("a", 1, {0, 1, 2, 3}), ConsumerHeartbeatResponse)
        kept = _partitions(a2)
        assert len(kept) == 2
        a3 = await a_conn.call(_beat("a", a2.member_epoch, kept), ConsumerHeartbeatResponse)
        assert a3.member_epoch == 2
        # the released two wait for b: it is told at once
        told_b = await within(b_conn.notices.receive())
        assert told_b.member_id == "b"
        b2 = await b_conn.call(_beat("b", b.member_epoch, set()), ConsumerHeartbeatResponse)
        assert _partitions(b2) == {0, 1, 2, 3} - kept


async def test_huddle_and_kafka_members_share_one_group(server: CoordinatorServer) -> None:
    wire = await listen_kafka(server, "127.0.0.1", 0)
    assert wire.consumer.service is server.consumer
    async with connect(f"127.0.0.1:{server.port}") as conn, RawKafka(wire.port) as kafka:
        await conn.call(
            CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]), CreateTopicsResponse
        )
        a = await conn.call(_join("a", "t"), ConsumerHeartbeatResponse)
        assert a.member_epoch == 1
        k = await kafka.call(
            Api.CONSUMER_GROUP_HEARTBEAT,
            1,
            1,
            group_id="g",
            member_id=str(uuid.uuid4()),
            member_epoch=0,
            rebalance_timeout=30_000,
            subscribed_topic_names=["t"],
            topic_partitions=[],
        )
        assert (k.error_code, k.member_epoch) == (0, 2)  # the huddle member's group, epoch 2
        assert set(server.consumer.core.groups["g"].members) == {"a", k.member_id}


async def test_a_version_1_peer_is_answered_unsupported_version(
    server: CoordinatorServer, bootstrap: str
) -> None:
    async with connect(bootstrap) as conn:
        await wait_until(lambda: server.connection_count == 1, what="the server to see the client")
        (peer,) = server.connections()
        peer.handshook(1)
        answer = await conn.request(_join("a", "t"), timeout=5)
        assert isinstance(answer, ErrorResponse)
        assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert "g" not in server.consumer.core.groups


async def test_a_classic_join_on_huddle_s_wire_is_refused_a_consumer_group_s_id(
    server: CoordinatorServer, bootstrap: str
) -> None:
    """As on the Kafka listener: a consumer-protocol group with members keeps its id from
    classic members; once it is empty, a classic JoinGroup takes the id."""
    async with connect(bootstrap) as conn:
        await conn.call(
            CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]), CreateTopicsResponse
        )
        await conn.call(_join("a", "t"), ConsumerHeartbeatResponse)
        refused = await conn.request(join_request(), timeout=5)
        assert isinstance(refused, JoinGroupResponse)
        assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert "served on the Kafka listener only" in (refused.error_message or "")
        left = await conn.call(_beat("a", -1, set()), ConsumerHeartbeatResponse)
        assert left.error_code == ErrorCode.NONE
        joined = await conn.request(join_request(), timeout=5)
        assert isinstance(joined, JoinGroupResponse)
        assert joined.error_code in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED)
        assert "g" not in server.consumer.core.groups


async def test_a_classic_group_on_huddle_s_wire_is_not_upgraded(
    server: CoordinatorServer, bootstrap: str
) -> None:
    """Mixed groups are served on the Kafka listener only: a classic group with a member on
    huddle's wire is not upgraded by a consumer-protocol member (GROUP_ID_NOT_FOUND, saying
    why), even with a ConsumerProtocol subscription (``embedded="kafka"``), and goes on."""
    subscription = write_subscription(KafkaSubscription(0, ["t"]))
    request = msgspec.structs.replace(
        join_request(), protocols=[Protocol(name="range", metadata=subscription)]
    )
    async with connect(bootstrap) as conn:
        await conn.call(
            CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]), CreateTopicsResponse
        )
        joined = await conn.request(request, timeout=5)
        assert isinstance(joined, JoinGroupResponse)
        if joined.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            request = msgspec.structs.replace(request, member_id=joined.member_id)
            joined = await conn.request(request, timeout=5)
            assert isinstance(joined, JoinGroupResponse)
        assert joined.error_code == ErrorCode.NONE
        refused = await conn.request(_join("a", "t"), timeout=5)
        assert isinstance(refused, ConsumerHeartbeatResponse)
        assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert refused.error_message is not None
        assert "huddle's own wire" in refused.error_message
        assert "g" not in server.consumer.core.groups
        assert set(server.core.groups["g"].members) == {joined.member_id}


async def test_a_stray_heartbeat_with_a_member_s_id_does_not_stop_that_member_s_notices(
    server: CoordinatorServer, bootstrap: str
) -> None:
    """Another connection heartbeats with a's member id at a wrong epoch (a stale process,
    a hostile client): it is refused, and a, which it did not move, is still told of the
    next change at once."""
    async with connect(bootstrap) as a_conn, connect(bootstrap) as stray:
        await a_conn.call(
            CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]), CreateTopicsResponse
        )
        await a_conn.call(_join("a", "t"), ConsumerHeartbeatResponse)
        refused = await stray.request(_beat("a", 99, set()), timeout=5)
        assert isinstance(refused, ConsumerHeartbeatResponse)
        assert refused.error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert "a" in server.consumer.core.groups["g"].members
        async with connect(bootstrap) as b_conn:
            await b_conn.call(_join("b", "t"), ConsumerHeartbeatResponse)
            told = await within(a_conn.notices.receive(), 5)
            assert told == ConsumerAssignmentChanged(group_id="g", member_id="a", target_epoch=2)


async def test_nothing_is_kept_of_a_member_whose_session_ran_out() -> None:
    """Members that died (their connection gone, their session run out) leave nothing behind
    in the server's tables of who heartbeats where: a server outlives any number of them."""
    config = fast_server_config(consumer_session_timeout_ms=300, consumer_heartbeat_interval_ms=100)
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with connect(bootstrap) as conn:
            await conn.call(
                CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]),
                CreateTopicsResponse,
            )
            for n in range(20):
                await conn.call(_join(f"m{n}", "t"), ConsumerHeartbeatResponse)
        group = server.consumer.core.groups["g"]
        await wait_until(lambda: not group.members, what="every session to run out")
        wire = getattr(server.requests.beside[ConsumerHeartbeatRequest], "__self__", None)
        assert isinstance(wire, HuddleConsumer)
        assert (wire.members, server.consumer.clients) == ({}, {})
