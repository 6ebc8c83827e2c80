"""The Kafka listener of a cluster node, with the cluster's brokers given by hand: Metadata
names every live broker and one leader per partition, FindCoordinator the group's owner,
and Produce/Fetch/ListOffsets on a partition another node leads get NOT_LEADER_OR_FOLLOWER.
The same over etcd with real clients: ``tests/cluster/test_kafka_failover.py``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from huddle.coordinator.cluster.kafka_nodes import ClusterKafkaNodes, broker_id
from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka import leaders
from huddle.coordinator.kafka.apis import Api
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    ErrorResponse,
    FindCoordinatorResponse,
    Request,
    TopicSpec,
)
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka
from tests.kafka.test_wire import _create as create
from tests.kafka_log.records import batch

NOT_LEADER = 6
PARTITIONS = 12


class _Node:
    """What ``ClusterKafkaNodes`` reads of a cluster node."""

    def __init__(self, node_id: str, kafka_addresses: dict[str, str]) -> None:
        self.node_id = node_id
        self.kafka_addresses = kafka_addresses


def _clustered(kafka: Listening, others: dict[str, int]) -> _Node:
    """This listener as node "a" of a cluster whose other nodes listen on ``others``."""
    addresses = {"a": f"127.0.0.1:{kafka.port}"}
    addresses |= {name: f"127.0.0.1:{port}" for name, port in others.items()}
    node = _Node("a", addresses)
    kafka.wire.nodes = ClusterKafkaNodes(node, ("127.0.0.1", kafka.port))
    return node


def _create_topic(server: CoordinatorServer, partitions: int) -> None:
    create(server, TopicSpec(name="t", partitions=partitions))


async def _metadata(port: int) -> Any:
    async with RawKafka(port) as conn:
        return await conn.call(
            Api.METADATA,
            12,
            1,
            topics=[{"name": "t"}],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )


def test_a_node_id_that_is_a_number_is_the_broker_id_and_others_are_hashed_alike() -> None:
    assert broker_id("3") == 3
    assert broker_id("node-a") == broker_id("node-a")
    assert 0 <= broker_id("node-a") < 2**31
    assert broker_id("node-a") != broker_id("node-b")


def test_leaders_move_only_from_a_broker_that_died() -> None:
    three = leaders.table("t", 1000, (1, 2, 3))
    two = leaders.table("t", 1000, (1, 3))
    assert set(three) == {1, 2, 3}
    assert all(after == before for before, after in zip(three, two, strict=True) if before != 2)
    assert leaders.table("t", 5, (7,)) == (7,) * 5


async def test_metadata_names_the_controller_before_its_own_registration_is_read(
    kafka: Listening,
) -> None:
    """A node that has read the other nodes but not yet itself still names itself among the
    brokers, since it names itself the controller: a client (kafka-python's admin) asked
    for a controller it was not told of fails with UnknownBrokerIdError."""
    _create_topic(kafka.server, PARTITIONS)
    node = _clustered(kafka, {"b": 19092})
    del node.kafka_addresses["a"]  # its own registration not read yet
    answer = await _metadata(kafka.port)
    assert answer.controller_id == broker_id("a")
    assert broker_id("a") in {b.node_id for b in answer.brokers}


async def test_metadata_names_every_live_broker_and_one_leader_per_partition(
    kafka: Listening,
) -> None:
    _create_topic(kafka.server, PARTITIONS)
    _clustered(kafka, {"b": 19092, "7": 19093})
    answer = await _metadata(kafka.port)
    me = broker_id("a")
    assert sorted((b.node_id, b.host, b.port) for b in answer.brokers) == sorted(
        [
            (me, "127.0.0.1", kafka.port),
            (broker_id("b"), "127.0.0.1", 19092),
            (7, "127.0.0.1", 19093),
        ]
    )
    assert answer.controller_id == me
    (topic,) = answer.topics
    led = [p.leader_id for p in topic.partitions]
    assert led == list(leaders.table("t", PARTITIONS, tuple(sorted((me, broker_id("b"), 7)))))
    assert len(set(led)) == 3  # 12 partitions over 3 brokers: each leads some
    assert all(list(p.replica_nodes) == [p.leader_id] for p in topic.partitions)


async def test_find_coordinator_names_the_kafka_listener_of_the_group_s_owner(
    kafka: Listening,
) -> None:
    _clustered(kafka, {"b": 19092})
    owners = {"on-b": "b", "on-c": "c"}  # c is a node without a Kafka listener

    def locate(group_id: str) -> FindCoordinatorResponse:
        if group_id in owners:
            return FindCoordinatorResponse(node_id=owners[group_id], host="127.0.0.1", port=1)
        return FindCoordinatorResponse(
            error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="nobody yet"
        )

    kafka.server.core.locate = locate
    async with RawKafka(kafka.port) as conn:
        batched = await conn.call(
            Api.FIND_COORDINATOR, 4, 1, key_type=0, coordinator_keys=["on-b", "on-c", "nobody"]
        )
        single = await conn.call(Api.FIND_COORDINATOR, 1, 2, key="on-b", key_type=0)
    found = [(c.key, c.error_code, c.node_id, c.port) for c in batched.coordinators]
    assert found == [
        ("on-b", 0, broker_id("b"), 19092),
        ("on-c", ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1),
        ("nobody", ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1),
    ]
    assert (single.error_code, single.node_id, single.port) == (0, broker_id("b"), 19092)


@pytest.mark.parametrize(
    ("code", "version"),
    [(ErrorCode.NOT_COORDINATOR, 3), (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, 3)],
)
async def test_a_group_this_node_does_not_serve_is_refused_as_kafka_clients_expect(
    kafka: Listening, code: ErrorCode, version: int
) -> None:
    """The cluster's refusal (another node owns the shard, or it is loading here) reaches
    Kafka's clients with Kafka's codes, which make them look for the coordinator again."""

    def gate(request: Request) -> ErrorResponse | None:
        return ErrorResponse(error_code=code, error_message="elsewhere")

    kafka.server.requests.gate = gate
    async with RawKafka(kafka.port) as conn:
        heartbeat = await conn.call(
            Api.HEARTBEAT, version, 1, group_id="g", generation_id=1, member_id="m"
        )
        fetched = await conn.call(
            Api.OFFSET_FETCH, 7, 2, group_id="g", topics=None, require_stable=False
        )
    assert heartbeat.error_code == code
    assert fetched.error_code == code


def _fetch(offset: int = 0) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait": 30_000,  # a partition refused is answered at once all the same
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {"partition": p, "fetch_offset": offset, "partition_max_bytes": 4096}
                    for p in range(PARTITIONS)
                ],
            }
        ],
    }


def _produce() -> dict[str, Any]:
    return {
        "acks": 1,
        "timeout": 1000,
        "topic_data": [
            {
                "name": "t",
                "partition_data": [{"index": p, "records": batch()} for p in range(PARTITIONS)],
            }
        ],
    }


def _codes(partitions: Sequence[Any], index: str) -> dict[int, int]:
    return {getattr(p, index): p.error_code for p in partitions}


async def test_only_the_leader_of_a_partition_keeps_and_serves_its_records(
    kafka: Listening,
) -> None:
    _create_topic(kafka.server, PARTITIONS)
    _clustered(kafka, {"b": 19092})
    ids = tuple(sorted((broker_id("a"), broker_id("b"))))
    mine = {
        p for p in range(PARTITIONS) if leaders.table("t", PARTITIONS, ids)[p] == broker_id("a")
    }
    assert 0 < len(mine) < PARTITIONS
    expected = {p: 0 if p in mine else NOT_LEADER for p in range(PARTITIONS)}
    async with RawKafka(kafka.port) as conn:
        produced = await conn.call(Api.PRODUCE, 8, 1, **_produce())
        fetched = await conn.call(Api.FETCH, 11, 2, **_fetch(), forgotten_topics_data=[])
        listed = await conn.call(
            Api.LIST_OFFSETS,
            5,
            3,
            replica_id=-1,
            isolation_level=0,
            topics=[
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": p, "timestamp": -1, "current_leader_epoch": -1}
                        for p in range(PARTITIONS)
                    ],
                }
            ],
        )
    (produced_topic,) = produced.responses  # one entry per topic, however it was split
    assert _codes(produced_topic.partition_responses, "index") == expected
    (fetched_topic,) = fetched.responses
    assert _codes(fetched_topic.partitions, "partition_index") == expected
    assert {p.partition_index: p.high_watermark for p in fetched_topic.partitions} == {
        p: 1 if p in mine else -1 for p in range(PARTITIONS)
    }
    (listed_topic,) = listed.topics
    assert _codes(listed_topic.partitions, "partition_index") == expected


async def test_a_partition_whose_leadership_moved_away_is_forgotten(kafka: Listening) -> None:
    """When another node takes a partition over, this node drops its records: if it leads
    the partition again later, it starts empty (docs/kafka.md, "In a cluster")."""
    _create_topic(kafka.server, PARTITIONS)
    node = _clustered(kafka, {})
    async with RawKafka(kafka.port) as conn:
        produced = await conn.call(Api.PRODUCE, 8, 1, **_produce())
        assert all(
            p.error_code == 0 for p in produced.responses[0].partition_responses
        )  # alone, it leads them all
        node.kafka_addresses = {**node.kafka_addresses, "b": "127.0.0.1:19092"}
        ids = tuple(sorted((broker_id("a"), broker_id("b"))))
        moved = {
            p for p in range(PARTITIONS) if leaders.table("t", PARTITIONS, ids)[p] != broker_id("a")
        }
        await conn.call(Api.FETCH, 11, 2, **_fetch(), forgotten_topics_data=[])
        node.kafka_addresses = {"a": node.kafka_addresses["a"]}  # b died: all back here
        fetched = await conn.call(Api.FETCH, 11, 3, **_fetch(), forgotten_topics_data=[])
    ends = {p.partition_index: p.high_watermark for p in fetched.responses[0].partitions}
    assert moved
    assert ends == {p: 0 if p in moved else 1 for p in range(PARTITIONS)}


async def test_an_acks_0_produce_to_a_partition_led_elsewhere_closes_the_connection(
    kafka: Listening,
) -> None:
    """Its client reads no answer: the closed connection makes it read Metadata again, as
    Kafka closes it."""
    _create_topic(kafka.server, PARTITIONS)
    _clustered(kafka, {"b": 19092})
    async with RawKafka(kafka.port) as conn:
        conn.send(Api.PRODUCE, 8, 1, **{**_produce(), "acks": 0})
        assert await conn.closed()
