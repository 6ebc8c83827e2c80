"""The Kafka listener on the wire: what is advertised, the answers' order, the versions
that change the group protocol, batched requests."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest

from huddle.coordinator.effects import Peer
from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka import metadata_encoding
from huddle.coordinator.kafka.apis import SERVED, Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import CreateTopicsRequest, TopicSpec
from tests.helpers import FAST_GROUP, fast_server_config
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka, parse

_PROTOCOLS = [{"name": "range", "metadata": b"\x00\x01"}]


def _join(version: int, group: str = "g", member_id: str = "") -> dict[str, object]:
    return {
        "group_id": group,
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": _PROTOCOLS,
    }


async def test_api_versions_advertises_exactly_what_is_served(kafka: Listening) -> None:
    async with RawKafka(kafka.port) as conn:
        conn.send(Api.API_VERSIONS, 3, 1, client_software_name="t", client_software_version="1")
        correlation_id, body = await conn.read()
        answer = parse(Api.API_VERSIONS, 3, body)
    assert correlation_id == 1
    assert answer.error_code == 0
    advertised = {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}
    assert advertised == {int(k): v for k, v in SERVED.items()}
    # no tagged field is sent (librdkafka 2.0.2 misreads them): the body ends with an
    # empty tag section straight after the throttle time
    assert body.endswith(b"\x00\x00\x00\x00\x00")
    for absent in (22, 71):  # InitProducerId, telemetry
        assert absent not in advertised


async def test_an_api_versions_of_a_version_not_served_is_answered_in_v0(
    kafka: Listening,
) -> None:
    async with RawKafka(kafka.port) as conn:
        conn.write(_api_versions_v(99, correlation_id=7))
        correlation_id, body = await conn.read()
        answer = parse(Api.API_VERSIONS, 0, body)
        assert correlation_id == 7
        assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION
        # ApiVersions' own range alone, as Kafka's ApiVersionsRequest.getErrorResponse
        assert [(a.api_key, a.min_version, a.max_version) for a in answer.api_keys] == [
            (Api.API_VERSIONS, *SERVED[Api.API_VERSIONS])
        ]
        # the client retries with a version it was told of, on the same connection
        again = await conn.call(Api.API_VERSIONS, 0, 8)
        assert again.error_code == 0


def _api_versions_v(version: int, correlation_id: int) -> bytes:
    body = (
        int(Api.API_VERSIONS).to_bytes(2, "big")
        + version.to_bytes(2, "big")
        + correlation_id.to_bytes(4, "big")
        + b"\x00\x01t\x00"  # client id "t", no tagged fields
    )
    return len(body).to_bytes(4, "big") + body


async def test_answers_leave_in_request_order_behind_a_held_join() -> None:
    """A JoinGroup held by the group's initial delay, with a Metadata, an ApiVersions and
    a FindCoordinator pipelined behind it on the same connection: the core and the wire
    answer those at once, yet they leave after the JoinGroup's answer, in request order."""
    group = replace(FAST_GROUP, initial_rebalance_delay_ms=300)
    async with CoordinatorServer(fast_server_config(group=group)) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        async with RawKafka(wire.port) as conn:
            conn.send(Api.JOIN_GROUP, 1, 11, **_join(1))
            conn.send(Api.METADATA, 1, 12, topics=None)
            conn.send(Api.API_VERSIONS, 0, 13)
            conn.send(Api.FIND_COORDINATOR, 0, 14, key="g")
            order = []
            for _ in range(4):
                correlation_id, body = await conn.read()
                order.append(correlation_id)
                if correlation_id == 11:
                    joined = parse(Api.JOIN_GROUP, 1, body)
    assert order == [11, 12, 13, 14]
    assert joined.error_code == 0
    assert joined.generation_id == 1
    assert joined.member_id == joined.leader


async def test_join_group_v0_to_3_lets_a_new_member_in_with_its_first_join(
    kafka: Listening,
) -> None:
    async with RawKafka(kafka.port) as conn:
        old = await conn.call(Api.JOIN_GROUP, 3, 1, **_join(3, group="old"))
        new = await conn.call(Api.JOIN_GROUP, 4, 2, **_join(4, group="new"))
        again = await conn.call(Api.JOIN_GROUP, 4, 3, **_join(4, "new", new.member_id))
    assert old.error_code == 0
    assert old.member_id.startswith("test-")
    assert [m.member_id for m in old.members] == [old.member_id]
    # v4+: KIP-394's round first, then the member joins with the id it was given
    assert new.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert new.member_id
    assert again.error_code == 0
    assert again.member_id == new.member_id


async def test_find_coordinator_v4_answers_each_key_with_this_listener(kafka: Listening) -> None:
    async with RawKafka(kafka.port) as conn:
        groups = await conn.call(
            Api.FIND_COORDINATOR, 4, 1, key_type=0, coordinator_keys=["a", "b"]
        )
        txn = await conn.call(Api.FIND_COORDINATOR, 4, 2, key_type=1, coordinator_keys=["t"])
    assert [(c.key, c.error_code, c.host, c.port) for c in groups.coordinators] == [
        ("a", 0, "127.0.0.1", kafka.port),
        ("b", 0, "127.0.0.1", kafka.port),
    ]
    (refused,) = txn.coordinators
    assert refused.error_code == ErrorCode.INVALID_REQUEST


async def test_metadata_names_the_registry_s_topics_and_this_listener(kafka: Listening) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=3))
    async with RawKafka(kafka.port) as conn:
        answer = await conn.call(
            Api.METADATA,
            12,
            1,
            topics=[{"name": "t"}, {"name": "absent"}],
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(0, "127.0.0.1", kafka.port)]
    by_name = {t.name: t for t in answer.topics}
    assert [p.partition_index for p in by_name["t"].partitions] == [0, 1, 2]
    assert all(p.leader_id == 0 for p in by_name["t"].partitions)
    assert by_name["t"].topic_id == kafka.server.core.topics.ids["t"]  # the one it was given
    assert by_name["absent"].topic_id is None  # kio reads the zero topic id as None
    # nothing is created by asking for it
    assert by_name["absent"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "absent" not in kafka.server.core.topics.partitions


async def test_offset_fetch_v8_answers_several_groups(kafka: Listening) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=2))
    async with RawKafka(kafka.port) as conn:
        for i, (group, offset) in enumerate((("a", 5), ("b", 9))):
            committed = await conn.call(
                Api.OFFSET_COMMIT,
                2,
                i,
                group_id=group,
                generation_id_or_member_epoch=-1,
                member_id="",
                retention_time=-1,
                topics=[
                    {
                        "name": "t",
                        "partitions": [
                            {
                                "partition_index": 1,
                                "committed_offset": offset,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            )
            assert committed.topics[0].partitions[0].error_code == 0
        fetched = await conn.call(
            Api.OFFSET_FETCH,
            8,
            9,
            groups=[
                {"group_id": "a", "topics": [{"name": "t", "partition_indexes": [1]}]},
                {"group_id": "b", "topics": None},
            ],
            require_stable=False,
        )
    offsets = {
        g.group_id: [
            (t.name, p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions
        ]
        for g in fetched.groups
    }
    assert offsets == {"a": [("t", 1, 5)], "b": [("t", 1, 9)]}


async def test_a_request_over_huddle_s_bounds_is_refused_and_the_connection_kept(
    kafka: Listening,
) -> None:
    async with RawKafka(kafka.port) as conn:
        too_long = await conn.call(
            Api.HEARTBEAT, 0, 1, group_id="g" * 300, generation_id=1, member_id="m"
        )
        fine = await conn.call(Api.API_VERSIONS, 0, 2)
    assert too_long.error_code == ErrorCode.INVALID_REQUEST
    assert fine.error_code == 0


def _create(server: CoordinatorServer, *specs: TopicSpec) -> None:
    out = server.core.handle(Peer(0), 1, CreateTopicsRequest(topics=list(specs)), server.now_ms())
    assert len(out) == 1
    assert out[0][1].response.error_code == 0  # type: ignore[union-attr]


async def test_a_waiting_fetch_keeps_its_turn(kafka: Listening) -> None:
    """A Fetch with nothing to read waits its max_wait_ms; the ApiVersions sent behind it
    is answered after it, in request order."""
    _create(kafka.server, TopicSpec(name="t", partitions=1))
    async with RawKafka(kafka.port) as conn:
        conn.send(
            Api.FETCH,
            4,
            1,
            replica_id=-1,
            max_wait=200,
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            topics=[
                {
                    "topic": "t",
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 4096}
                    ],
                }
            ],
        )
        conn.send(Api.API_VERSIONS, 0, 2)
        first, body = await conn.read()
        second, _ = await conn.read()
    assert (first, second) == (1, 2)
    fetched = parse(Api.FETCH, 4, body)
    (partition,) = fetched.responses[0].partitions
    assert partition.error_code == 0
    assert partition.high_watermark == 0


async def test_answers_released_together_may_pass_the_response_limit_together() -> None:
    """Two Metadata answers of 60% of --max-response-bytes each wait behind a held
    JoinGroup and leave with it in one write: each is within the limit, so both are sent
    (the limit is per answer, not per write)."""
    limit = 64 * 1024
    group = replace(FAST_GROUP, initial_rebalance_delay_ms=300)
    config = fast_server_config(group=group, max_response_bytes=limit)
    async with CoordinatorServer(config) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        specs = [TopicSpec(name=f"{i:03d}" + "t" * 200, partitions=1) for i in range(150)]
        _create(server, *specs)
        async with RawKafka(wire.port) as conn:
            conn.send(Api.JOIN_GROUP, 1, 1, **_join(1))
            conn.send(Api.METADATA, 1, 2, topics=None)
            conn.send(Api.METADATA, 1, 3, topics=None)
            answers = [await conn.read() for _ in range(3)]
    assert [correlation_id for correlation_id, _ in answers] == [1, 2, 3]
    for _, body in answers[1:]:
        assert 0.5 * limit < len(body) < limit
        assert len(parse(Api.METADATA, 1, body).topics) == 150


_NOT_ASKED = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": False}


def _named(name: str) -> dict[str, Any]:
    return {"name": name, "topic_id": uuid.UUID(int=0)}


async def test_a_metadata_answer_over_the_limit_is_not_built_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A registry too large for one Metadata answer is answered as an answer over
    --max-response-bytes is (no topics listed: Metadata has no error of its own) without
    encoding the answer first: a million partitions took 2 s of the event loop that every
    connection shares, to be thrown away."""
    encoded: list[int] = []
    encode = metadata_encoding.encode

    def counting(version: int, values: Any, leaders: Any) -> bytes:
        encoded.append(sum(len(led) for led in leaders))
        return encode(version, values, leaders)

    monkeypatch.setattr(metadata_encoding, "encode", counting)
    config = fast_server_config(max_response_bytes=64 * 1024)
    async with CoordinatorServer(config) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        _create(server, TopicSpec(name="big", partitions=10_000))
        async with RawKafka(wire.port) as conn:
            every = await conn.call(Api.METADATA, 12, 1, topics=None, **_NOT_ASKED)
            named = await conn.call(Api.METADATA, 12, 2, topics=[_named("big")], **_NOT_ASKED)
            _create(server, TopicSpec(name="small", partitions=2))
            small = await conn.call(Api.METADATA, 12, 3, topics=[_named("small")], **_NOT_ASKED)
    assert every.topics == ()
    assert [(t.name, t.error_code) for t in named.topics] == [("big", ErrorCode.MESSAGE_TOO_LARGE)]
    assert len(small.topics[0].partitions) == 2
    assert max(encoded) == 2, "an answer of 10,000 partitions was built"
