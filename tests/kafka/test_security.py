"""TLS, mTLS and SASL on the Kafka listener, with huddle's certificate, users and login:
confluent-kafka (librdkafka) over SASL_SSL, and raw requests for Kafka's login rules."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from huddle.coordinator.config import InvalidConfigError
from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.coordinator.security.acls import Operation, ResourceType
from tests.helpers import fast_server_config, wait_until
from tests.kafka.raw import RawKafka
from tests.kafka.test_confluent import PARTITIONS, SETTLE_S, ConfluentConsumer, _shared
from tests.security_setup import Pki, acl, keep, make_pki

PASSWORD = "correct horse"
SASL_FAILED = 58
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_SASL_MECHANISM = 33
UNSUPPORTED_VERSION = 35
GROUP_AUTHORIZATION_FAILED = 30


@dataclass
class Secure:
    server: CoordinatorServer
    port: int  # the Kafka listener's
    pki: Pki


@pytest.fixture
async def secure(tmp_path: Path, logs: object) -> AsyncIterator[Secure]:
    """TLS and SASL (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN) on both listeners; user alice."""
    pki = make_pki(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    await keep(data, {"alice": PASSWORD})
    config = fast_server_config(
        data_dir=str(data),
        tls_cert=pki.server,
        tls_key=pki.server,
        sasl="SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
    )
    async with CoordinatorServer(config) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        yield Secure(server, wire.port, pki)


def _sasl_ssl(secure: Secure, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
    return {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": secure.pki.ca,
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": password,
    }


def _create_topic(port: int, conf: dict[str, Any]) -> None:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", **conf})
    for future in admin.create_topics([NewTopic("t", PARTITIONS)]).values():
        future.result(timeout=SETTLE_S)


async def test_confluent_consumers_form_a_group_over_sasl_ssl_scram_sha_512(
    secure: Secure,
) -> None:
    conf = _sasl_ssl(secure, PASSWORD)
    await asyncio.to_thread(_create_topic, secure.port, conf)

    async def start() -> ConfluentConsumer:
        return await asyncio.to_thread(ConfluentConsumer, secure.port, "g", "range", conf)

    consumers = [await start() for _ in range(3)]
    try:
        await wait_until(lambda: _shared(consumers), wait_s=SETTLE_S, what="3 members share t")
        principals = {c.peer.principal for c in secure.server.connections()}
        assert principals == {"User:alice"}
    finally:
        await asyncio.gather(*(asyncio.to_thread(c.stop) for c in consumers))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
async def test_a_wrong_password_is_refused_with_the_clients_auth_error(
    secure: Secure, mechanism: str
) -> None:
    conf = _sasl_ssl(secure, "wrong", mechanism)
    consumer = await asyncio.to_thread(ConfluentConsumer, secure.port, "g", "range", conf)
    try:
        await wait_until(
            lambda: KafkaError._AUTHENTICATION in consumer.codes,
            wait_s=SETTLE_S,
            what="librdkafka reports an authentication failure",
        )
    finally:
        await asyncio.to_thread(consumer.stop)
    assert not consumer.assignment
    assert any("invalid credentials" in e for e in consumer.errors), consumer.errors


@pytest.fixture
async def sasl_plaintext(tmp_path: Path, logs: object) -> AsyncIterator[int]:
    """SCRAM without TLS (Kafka's SASL_PLAINTEXT): raw requests can see the rules."""
    await keep(tmp_path, {"alice": PASSWORD})
    config = fast_server_config(data_dir=str(tmp_path), sasl="SCRAM-SHA-256")
    async with CoordinatorServer(config) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        yield wire.port


async def test_a_request_before_authentication_closes_the_connection(sasl_plaintext: int) -> None:
    async with RawKafka(sasl_plaintext) as raw:
        versions = await raw.call(Api.API_VERSIONS, 3, 1, client_software_name="t")
        assert versions.error_code == 0  # ApiVersions may come first
        raw.send(Api.LIST_GROUPS, 3, 2)
        assert await raw.closed()
    async with RawKafka(sasl_plaintext) as raw:
        answer = await raw.call(Api.SASL_HANDSHAKE, 1, 1, mechanism="SCRAM-SHA-256")
        assert answer.error_code == 0
        assert list(answer.mechanisms) == ["SCRAM-SHA-256"]
        raw.send(Api.FIND_COORDINATOR, 3, 2, key="g", key_type=0)  # before SaslAuthenticate
        assert await raw.closed()


async def test_a_mechanism_not_enabled_is_answered_then_closed(sasl_plaintext: int) -> None:
    async with RawKafka(sasl_plaintext) as raw:
        answer = await raw.call(Api.SASL_HANDSHAKE, 1, 1, mechanism="PLAIN")
        assert answer.error_code == UNSUPPORTED_SASL_MECHANISM
        assert list(answer.mechanisms) == ["SCRAM-SHA-256"]
        assert await raw.closed()


async def test_sasl_handshake_v0_is_refused(sasl_plaintext: int) -> None:
    async with RawKafka(sasl_plaintext) as raw:
        answer = await raw.call(Api.SASL_HANDSHAKE, 0, 1, mechanism="SCRAM-SHA-256")
        assert answer.error_code == UNSUPPORTED_VERSION
        assert await raw.closed()


async def test_a_bad_scram_message_fails_generically_then_closes(sasl_plaintext: int) -> None:
    async with RawKafka(sasl_plaintext) as raw:
        await raw.call(Api.SASL_HANDSHAKE, 1, 1, mechanism="SCRAM-SHA-256")
        answer = await raw.call(Api.SASL_AUTHENTICATE, 2, 2, auth_bytes=b"not scram")
        assert answer.error_code == SASL_FAILED
        assert answer.error_message == "authentication failed: invalid credentials (SCRAM-SHA-256)"
        assert await raw.closed()


async def test_without_sasl_the_sasl_apis_answer_illegal_state(kafka_plain: int) -> None:
    async with RawKafka(kafka_plain) as raw:
        answer = await raw.call(Api.SASL_HANDSHAKE, 1, 1, mechanism="PLAIN")
        assert answer.error_code == ILLEGAL_SASL_STATE
        answer = await raw.call(Api.SASL_AUTHENTICATE, 1, 2, auth_bytes=b"x")
        assert answer.error_code == ILLEGAL_SASL_STATE


@pytest.fixture
async def kafka_plain(logs: object) -> AsyncIterator[int]:
    async with CoordinatorServer(fast_server_config()) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        yield wire.port


def test_the_kafka_listener_takes_tls_and_sasl_but_plain_only_over_tls() -> None:
    config = fast_server_config(
        data_dir="/d", tls_cert="c", tls_key="k", sasl="PLAIN,SCRAM-SHA-512", kafka_port=0
    )
    assert config.kafka_port == 0
    assert config.sasl == "PLAIN,SCRAM-SHA-512"
    with pytest.raises(InvalidConfigError, match="PLAIN sends passwords in the clear"):
        fast_server_config(data_dir="/d", sasl="PLAIN", kafka_port=0)


async def test_an_mtls_principal_is_checked_by_the_acls(tmp_path: Path, logs: object) -> None:
    pki = make_pki(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    alice = "User:CN=alice,OU=eng,O=acme"
    await keep(
        data,
        {},
        [
            acl(alice, Operation.READ, ResourceType.GROUP, "g"),
            acl(alice, Operation.ALL, ResourceType.TOPIC, "t"),
            acl(alice, Operation.CREATE, ResourceType.CLUSTER, "huddle-cluster"),
        ],
    )
    config = fast_server_config(
        data_dir=str(data),
        tls_cert=pki.server,
        tls_key=pki.server,
        tls_client_ca=pki.ca,
        authorizer=True,
    )
    conf = {
        "security.protocol": "SSL",
        "ssl.ca.location": pki.ca,
        "ssl.certificate.location": pki.alice,
        "ssl.key.location": pki.alice,
    }
    async with CoordinatorServer(config) as server:
        port = (await listen_kafka(server, "127.0.0.1", 0)).port
        await asyncio.to_thread(_create_topic, port, conf)
        alice_s = await asyncio.to_thread(ConfluentConsumer, port, "g", "range", conf)
        try:  # only alice's certificate may READ group g and topic t
            await wait_until(lambda: _shared([alice_s]), wait_s=SETTLE_S, what="alice owns t")
            principals = {c.peer.principal for c in server.connections()}
            assert principals == {alice}
        finally:
            await asyncio.to_thread(alice_s.stop)


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
        answer = await asyncio.wait_for(raw.call(api, version, 1, **fields), 10)
        assert error_of(answer) == expected


async def test_list_groups_lists_only_the_groups_described(no_acls: int) -> None:
    async with RawKafka(no_acls) as raw:
        answer = await raw.call(Api.LIST_GROUPS, 4, 1, states_filter=[])
        assert answer.error_code == 0
        assert list(answer.groups) == []
