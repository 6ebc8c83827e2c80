"""TLS, mTLS and SASL on the Kafka listener, with huddle's certificate, users and login:
confluent-kafka (librdkafka), aiokafka, kcat and kafkajs over SASL_SSL, and raw requests
for Kafka's login rules."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaConnectionError
from aiokafka.helpers import create_ssl_context
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from structlog.typing import EventDict

from huddle.chaos.kafka_workers import launch
from huddle.chaos.kafka_workers.options import DriverOptions
from huddle.chaos.kafka_workers.running import Drivers, partitions_of
from huddle.cli import main
from huddle.coordinator.config import InvalidConfigError
from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.coordinator.security.acls import Operation, ResourceType
from tests.helpers import fast_server_config, wait_until
from tests.kafka.raw import RawKafka
from tests.kafka.test_confluent import PARTITIONS, SETTLE_S, ConfluentConsumer, _shared
from tests.kafka_clients.conftest import require_client
from tests.security.test_tls_reload import der, old_and_new, write_pair
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
    """TLS and SASL (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN) on both listeners; user alice,
    added with ``huddle users add``."""
    pki = make_pki(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "pw").write_text(f"{PASSWORD}\n")
    add_alice = ["users", "add", "alice", "--password-file", str(tmp_path / "pw")]
    assert await asyncio.to_thread(main, [*add_alice, "--data-dir", str(data)], {}) == 0
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
    secure: Secure, mechanism: str, logs: list[EventDict]
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
    failed = [e for e in logs if e["event"] == "authentication_failed"]
    assert failed, "the log says why"
    assert {(e["username"], e["mechanism"]) for e in failed} == {("alice", mechanism)}
    reasons = {e["reason"] for e in failed}
    if mechanism == "PLAIN":
        assert reasons == {"wrong password"}
    else:  # scramp's words for a proof no password of alice's makes
        assert "proof" in str(reasons).lower()


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
        versions = await raw.call(
            Api.API_VERSIONS, 3, 1, client_software_name="t", client_software_version="1"
        )
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
        assert raw.reader is not None
        assert not raw.reader.at_eof(), "the close came with the answer"
        assert await raw.closed()


async def test_sasl_handshake_v0_is_refused(sasl_plaintext: int) -> None:
    async with RawKafka(sasl_plaintext) as raw:
        answer = await raw.call(Api.SASL_HANDSHAKE, 0, 1, mechanism="SCRAM-SHA-256")
        assert answer.error_code == UNSUPPORTED_VERSION
        assert raw.reader is not None
        assert not raw.reader.at_eof(), "the close came with the answer"
        assert await raw.closed()


async def test_a_bad_scram_message_fails_generically_then_closes(sasl_plaintext: int) -> None:
    async with RawKafka(sasl_plaintext) as raw:
        await raw.call(Api.SASL_HANDSHAKE, 1, 1, mechanism="SCRAM-SHA-256")
        answer = await raw.call(Api.SASL_AUTHENTICATE, 2, 2, auth_bytes=b"not scram")
        assert answer.error_code == SASL_FAILED
        assert answer.error_message == "authentication failed: invalid credentials (SCRAM-SHA-256)"
        assert await raw.closed()


async def test_a_refused_login_over_tls_is_answered_and_not_closed_behind_the_answer(
    secure: Secure,
) -> None:
    """A wrong SCRAM proof over TLS: the SASL_AUTHENTICATION_FAILED answer arrives without
    the close behind it (kafka-python, reading both in one go, reported only "socket
    disconnected"); the connection ends once the client closes."""
    trust = ssl.create_default_context(cafile=secure.pki.ca)
    reader, writer = await asyncio.open_connection("127.0.0.1", secure.port, ssl=trust)
    raw = RawKafka(secure.port)
    raw.reader, raw.writer = reader, writer
    try:
        await raw.call(Api.SASL_HANDSHAKE, 1, 1, mechanism="SCRAM-SHA-256")
        first = await raw.call(Api.SASL_AUTHENTICATE, 2, 2, auth_bytes=b"n,,n=alice,r=nonce")
        fields = dict(p.split("=", 1) for p in first.auth_bytes.decode().split(","))
        proof = base64.b64encode(bytes(32)).decode()
        final = f"c=biws,r={fields['r']},p={proof}".encode()
        answer = await raw.call(Api.SASL_AUTHENTICATE, 2, 3, auth_bytes=final)
        assert answer.error_code == SASL_FAILED
        assert answer.error_message == "authentication failed: invalid credentials (SCRAM-SHA-256)"
        assert not reader.at_eof(), "the close came with the answer"
    finally:
        writer.close()
    await wait_until(lambda: not secure.server.connections(), wait_s=SETTLE_S, what="the close")


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


async def _kafka_served(port: int, trust: ssl.SSLContext) -> bytes:
    """The certificate a new TLS connection to the Kafka listener is served (DER), once an
    ApiVersions is answered over it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trust)
    raw = RawKafka(port)
    raw.reader, raw.writer = reader, writer
    try:
        versions = await raw.call(
            Api.API_VERSIONS, 3, 1, client_software_name="t", client_software_version="1"
        )
        assert versions.error_code == 0
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        assert isinstance(der, bytes)
        return der
    finally:
        writer.close()


async def test_a_certificate_reload_serves_the_kafka_listener_too(
    tmp_path: Path, logs: object
) -> None:
    pairs = old_and_new(tmp_path)
    config = fast_server_config(tls_cert=str(pairs.cert), tls_key=str(pairs.key))
    async with CoordinatorServer(config) as server:
        assert server.security is not None
        port = (await listen_kafka(server, "127.0.0.1", 0)).port
        assert await _kafka_served(port, pairs.trust) == der(pairs.old)
        write_pair(pairs.new, pairs.cert, pairs.key)
        server.security.reload_tls()  # what SIGHUP does
        assert await _kafka_served(port, pairs.trust) == der(pairs.new)


def _aiokafka(secure: Secure, password: str) -> Any:
    return AIOKafkaConsumer(
        "t",
        bootstrap_servers=f"127.0.0.1:{secure.port}",
        group_id="g",
        enable_auto_commit=False,
        heartbeat_interval_ms=200,
        session_timeout_ms=6_000,
        security_protocol="SASL_SSL",
        ssl_context=create_ssl_context(cafile=secure.pki.ca),
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="alice",
        sasl_plain_password=password,
    )


async def test_aiokafka_joins_over_sasl_ssl_scram_sha_256_and_a_wrong_password_fails(
    secure: Secure, caplog: pytest.LogCaptureFixture
) -> None:
    await asyncio.to_thread(_create_topic, secure.port, _sasl_ssl(secure, PASSWORD))
    consumer = _aiokafka(secure, PASSWORD)
    await consumer.start()
    try:
        await wait_until(
            lambda: len(consumer.assignment()) == PARTITIONS, wait_s=SETTLE_S, what="t owned"
        )
    finally:
        await consumer.stop()
    refused = _aiokafka(secure, "wrong")
    with pytest.raises(KafkaConnectionError, match="Unable to bootstrap"):
        await refused.start()  # aiokafka logs why: SASL_AUTHENTICATION_FAILED
    await refused.stop()
    said = [r.getMessage() for r in caplog.records if r.name.startswith("aiokafka")]
    assert any("[Error 58] SaslAuthenticationFailed: authentication failed" in m for m in said)


def _driver_options(
    secure: Secure, client: str, group: str, mechanism: str, password: Path
) -> DriverOptions:
    """A driver of ``client`` (``huddle.chaos.kafka_workers``) logging in as alice over TLS."""
    return DriverOptions(
        bootstrap=f"127.0.0.1:{secure.port}",
        group=group,
        topic="t",
        strategy=launch.CLIENTS[client].eager,
        commit=False,
        max_seconds=120.0,
        tls_ca=secure.pki.ca,
        sasl_mechanism=mechanism,
        sasl_username="alice",
        sasl_password_file=str(password),
    )


async def _refusal(drivers: Drivers, name: str) -> str:
    """The first error line of driver ``name`` that says the credentials were refused."""
    driver = drivers.all[name]

    def said() -> str | None:
        for event in driver.of("error"):
            if "invalid credentials" in event["message"]:
                return str(event["message"])
        return None

    return await asyncio.to_thread(drivers.wait, said, SETTLE_S, f"{name} is refused")


# kcat (Debian's librdkafka 2.0.2) logs in with PLAIN: its SCRAM is refused, as below
@pytest.mark.parametrize(("client", "mechanism"), [("kcat", "PLAIN"), ("kafkajs", "SCRAM-SHA-256")])
async def test_kcat_and_kafkajs_join_over_sasl_ssl_and_a_wrong_password_is_refused(
    secure: Secure, client: str, mechanism: str, tmp_path: Path, logs: list[EventDict]
) -> None:
    """alice's consumer owns the topic's partitions; with a wrong password, the client
    reports the listener's refusal and is given nothing."""
    require_client(client)
    await asyncio.to_thread(_create_topic, secure.port, _sasl_ssl(secure, PASSWORD))
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.write_text(f"{PASSWORD}\n")
    wrong.write_text("not alice's\n")
    everything = partitions_of("t", PARTITIONS)
    drivers = Drivers(tmp_path / "drivers")
    try:
        alice = drivers.start(
            "alice", client, _driver_options(secure, client, "g", mechanism, right)
        )
        await asyncio.to_thread(
            drivers.wait, lambda: alice.owned == everything, SETTLE_S, "alice owns t"
        )
        assert {c.peer.principal for c in secure.server.connections()} == {"User:alice"}

        drivers.start("refused", client, _driver_options(secure, client, "g2", mechanism, wrong))
        said = await _refusal(drivers, "refused")
        assert f"authentication failed: invalid credentials ({mechanism})" in said
        assert not drivers.all["refused"].of("assigned")
    finally:
        await asyncio.to_thread(drivers.close)  # off the loop: the listener answers the leave
    assert alice.of("left")
    assert not [e for e in alice.of("error") if "timed out" in e["message"]]
    failed = [e for e in logs if e["event"] == "authentication_failed"]
    assert {(e["username"], e["mechanism"]) for e in failed} == {("alice", mechanism)}


async def test_kcat_s_scram_is_refused_as_kafka_4_refuses_it(
    secure: Secure, tmp_path: Path, logs: list[EventDict]
) -> None:
    """librdkafka before 2.6.1 (kcat on Debian is 2.0.2) writes the client nonce twice in
    its SCRAM client-final-message; RFC 5802 and Kafka 4 (CVE-2024-56128) refuse it, and so
    does huddle, with the right password too (docs/kafka.md, "Security")."""
    require_client("kcat")
    right = tmp_path / "right"
    right.write_text(f"{PASSWORD}\n")
    drivers = Drivers(tmp_path / "drivers")
    try:
        drivers.start("kcat", "kcat", _driver_options(secure, "kcat", "g", "SCRAM-SHA-512", right))
        said = await _refusal(drivers, "kcat")
    finally:
        await asyncio.to_thread(drivers.close)
    assert "authentication failed: invalid credentials (SCRAM-SHA-512)" in said
    reasons = {e["reason"] for e in logs if e["event"] == "authentication_failed"}
    assert reasons == {"SCRAM: Server nonce doesn't match.: other-error"}
