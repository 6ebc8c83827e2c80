"""ACLs on the Kafka listener, with Kafka's table: a refusal per API, with Kafka's error
code where each API's answer carries it, and a topic refused beside one allowed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from huddle.coordinator.config import ServerConfig
from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.coordinator.security.acls import Operation, ResourceType
from tests.helpers import fast_server_config
from tests.kafka.raw import RawKafka
from tests.security_setup import acl, keep

GROUP_AUTHORIZATION_FAILED = 30


@pytest.fixture
async def no_acls(tmp_path: Path, logs: object) -> AsyncIterator[int]:
    """The authorizer on, and no ACL: User:ANONYMOUS may do nothing."""
    config = fast_server_config(data_dir=str(tmp_path), authorizer=True)
    async with CoordinatorServer(config) as server:
        yield (await listen_kafka(server, "127.0.0.1", 0)).port


TOPIC_AUTHORIZATION_FAILED = 29
_PARTITION = {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1}
_FETCHED = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}
# Kafka's table: each API, a request naming group g or topic t, where its answer says so.
REFUSALS: list[tuple[Api, int, dict[str, Any], Any, int]] = [
    (
        Api.JOIN_GROUP,
        5,
        {
            "group_id": "g",
            "session_timeout": 6000,
            "rebalance_timeout": 6000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
        lambda r: r.error_code,
        GROUP_AUTHORIZATION_FAILED,
    ),
    (
        Api.SYNC_GROUP,
        3,
        {"group_id": "g", "generation_id": 1, "member_id": "m", "assignments": []},
        lambda r: r.error_code,
        GROUP_AUTHORIZATION_FAILED,
    ),
    (
        Api.HEARTBEAT,
        3,
        {"group_id": "g", "generation_id": 1, "member_id": "m"},
        lambda r: r.error_code,
        GROUP_AUTHORIZATION_FAILED,
    ),
    (
        Api.LEAVE_GROUP,
        3,
        {"group_id": "g", "members": [{"member_id": "m"}]},
        lambda r: r.error_code,
        GROUP_AUTHORIZATION_FAILED,
    ),
    (
        Api.OFFSET_COMMIT,
        7,
        {
            "group_id": "g",
            "generation_id": -1,
            "member_id": "",
            "topics": [{"name": "t", "partitions": [_PARTITION]}],
        },
        lambda r: r.topics[0].partitions[0].error_code,
        GROUP_AUTHORIZATION_FAILED,
    ),
    (
        Api.OFFSET_FETCH,
        7,
        {"group_id": "g", "topics": None},
        lambda r: r.error_code,
        GROUP_AUTHORIZATION_FAILED,
    ),
    (
        Api.FIND_COORDINATOR,
        3,
        {"key": "g", "key_type": 0},
        lambda r: r.error_code,
        GROUP_AUTHORIZATION_FAILED,
    ),
    (
        Api.DESCRIBE_GROUPS,
        5,
        {"groups": ["g"], "include_authorized_operations": False},
        lambda r: r.groups[0].error_code,
        GROUP_AUTHORIZATION_FAILED,
    ),
    (
        Api.DELETE_GROUPS,
        2,
        {"groups_names": ["g"]},
        lambda r: r.results[0].error_code,
        GROUP_AUTHORIZATION_FAILED,
    ),
    (
        Api.METADATA,
        9,
        {
            "topics": [{"name": "t"}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
        lambda r: r.topics[0].error_code,
        TOPIC_AUTHORIZATION_FAILED,
    ),
    (
        Api.CREATE_TOPICS,
        5,
        {
            "topics": [
                {
                    "name": "t",
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout": 1000,
        },
        lambda r: r.topics[0].error_code,
        TOPIC_AUTHORIZATION_FAILED,
    ),
    (
        Api.DELETE_TOPICS,
        5,
        {"topic_names": ["t"], "timeout": 1000},
        lambda r: r.responses[0].error_code,
        TOPIC_AUTHORIZATION_FAILED,
    ),
    (
        Api.CREATE_PARTITIONS,
        2,
        {
            "topics": [{"name": "t", "count": 2, "assignments": None}],
            "timeout": 1000,
            "validate_only": False,
        },
        lambda r: r.results[0].error_code,
        TOPIC_AUTHORIZATION_FAILED,
    ),
    (
        Api.PRODUCE,
        8,
        {
            "acks": 1,
            "timeout": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": None}]}],
        },
        lambda r: r.responses[0].partition_responses[0].error_code,
        TOPIC_AUTHORIZATION_FAILED,
    ),
    (
        Api.FETCH,
        11,
        {
            "max_wait": 30_000,  # refused: answered at once all the same
            "min_bytes": 1,
            "topics": [{"topic": "t", "partitions": [_FETCHED]}],
            "forgotten_topics_data": [],
        },
        lambda r: r.responses[0].partitions[0].error_code,
        TOPIC_AUTHORIZATION_FAILED,
    ),
    (
        Api.LIST_OFFSETS,
        5,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
        lambda r: r.topics[0].partitions[0].error_code,
        TOPIC_AUTHORIZATION_FAILED,
    ),
    (
        Api.CONSUMER_GROUP_HEARTBEAT,
        1,
        {
            "group_id": "g",
            "member_id": "m",
            "member_epoch": 0,
            "rebalance_timeout": 6000,
            "subscribed_topic_names": ["t"],
            "topic_partitions": [],
        },
        lambda r: r.error_code,
        GROUP_AUTHORIZATION_FAILED,
    ),
    (
        Api.CONSUMER_GROUP_DESCRIBE,
        1,
        {"group_ids": ["g"], "include_authorized_operations": False},
        lambda r: r.groups[0].error_code,
        GROUP_AUTHORIZATION_FAILED,
    ),
]


@pytest.mark.parametrize(
    ("api", "version", "fields", "error_of", "expected"),
    REFUSALS,
    ids=[api.name for api, *_ in REFUSALS],
)
async def test_an_acl_refusal_per_api(
    no_acls: int, api: Api, version: int, fields: dict[str, Any], error_of: Any, expected: int
) -> None:
    async with RawKafka(no_acls) as raw:
        answer = await raw.call(api, version, 1, **fields)
        assert error_of(answer) == expected


async def test_list_groups_lists_only_the_groups_described(no_acls: int) -> None:
    async with RawKafka(no_acls) as raw:
        answer = await raw.call(Api.LIST_GROUPS, 4, 1, states_filter=[])
        assert answer.error_code == 0
        assert list(answer.groups) == []


async def _ok_alone(tmp_path: Path) -> ServerConfig:
    """A server with the authorizer on, on which anyone may create topics and read "ok"."""
    anyone = "User:ANONYMOUS"
    await keep(
        tmp_path,
        {},
        [
            acl(anyone, Operation.CREATE, ResourceType.CLUSTER, "huddle-cluster"),
            acl(anyone, Operation.READ, ResourceType.TOPIC, "ok"),
        ],
    )
    return fast_server_config(data_dir=str(tmp_path), authorizer=True)


async def test_a_topic_refused_beside_one_allowed(tmp_path: Path, logs: object) -> None:
    config = await _ok_alone(tmp_path)
    async with CoordinatorServer(config) as server:
        port = (await listen_kafka(server, "127.0.0.1", 0)).port
        async with RawKafka(port) as raw:
            topics: list[dict[str, Any]] = [
                {
                    "name": name,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
                for name in ("ok", "t")
            ]
            created = await raw.call(Api.CREATE_TOPICS, 5, 1, topics=topics, timeout=1000)
            assert [t.error_code for t in created.topics] == [0, 0]
            answer = await raw.call(
                Api.LIST_OFFSETS,
                5,
                2,
                replica_id=-1,
                isolation_level=0,
                topics=[
                    {"name": n, "partitions": [{"partition_index": 0, "timestamp": -1}]}
                    for n in ("ok", "t")
                ],
            )
            codes = {t.name: [p.error_code for p in t.partitions] for t in answer.topics}
            assert codes == {"ok": [0], "t": [TOPIC_AUTHORIZATION_FAILED]}


async def test_a_topic_asked_for_by_id_is_refused_by_id(tmp_path: Path, logs: object) -> None:
    """Metadata v12 and Fetch v13 name topics by id: a refused one is answered with its id
    (Metadata: and no name; ids are not secret, names are), beside one allowed."""
    config = await _ok_alone(tmp_path)
    async with CoordinatorServer(config) as server:
        port = (await listen_kafka(server, "127.0.0.1", 0)).port
        async with RawKafka(port) as raw:
            topics = [
                {"name": n, "num_partitions": 1, "replication_factor": 1} for n in ("ok", "t")
            ]
            created = await raw.call(Api.CREATE_TOPICS, 7, 1, topics=topics, timeout=1000)
            ids = {t.name: t.topic_id for t in created.topics}
            assert ids == server.core.topics.ids
            described = await raw.call(
                Api.METADATA,
                12,
                2,
                topics=[{"topic_id": ids["ok"]}, {"topic_id": ids["t"]}],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
            fetched = await raw.call(
                Api.FETCH,
                13,
                3,
                max_wait=0,
                min_bytes=1,
                max_bytes=1 << 20,
                topics=[{"topic_id": ids[n], "partitions": [_FETCHED]} for n in ("ok", "t")],
                forgotten_topics_data=[],
            )
    assert [(t.name, t.topic_id, t.error_code) for t in described.topics] == [
        ("ok", ids["ok"], 0),
        (None, ids["t"], TOPIC_AUTHORIZATION_FAILED),
    ]
    codes = {t.topic_id: [p.error_code for p in t.partitions] for t in fetched.responses}
    assert codes == {ids["ok"]: [0], ids["t"]: [TOPIC_AUTHORIZATION_FAILED]}


async def test_a_consumer_group_heartbeat_needs_describe_on_its_topics(
    tmp_path: Path, logs: object
) -> None:
    """KIP-848's heartbeat: READ on the group lets it in, but a subscribed topic it may not
    describe refuses the whole request, as Kafka's KafkaApis does."""
    anyone = "User:ANONYMOUS"
    await keep(tmp_path, {}, [acl(anyone, Operation.READ, ResourceType.GROUP, "g")])
    config = fast_server_config(data_dir=str(tmp_path), authorizer=True)
    async with CoordinatorServer(config) as server:
        port = (await listen_kafka(server, "127.0.0.1", 0)).port
        async with RawKafka(port) as raw:
            answer = await raw.call(
                Api.CONSUMER_GROUP_HEARTBEAT,
                1,
                1,
                group_id="g",
                member_id="m",
                member_epoch=0,
                rebalance_timeout=6000,
                subscribed_topic_names=["t"],
                topic_partitions=[],
            )
    assert answer.error_code == TOPIC_AUTHORIZATION_FAILED
