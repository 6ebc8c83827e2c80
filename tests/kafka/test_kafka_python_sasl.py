"""kafka-python over SASL_SSL (SCRAM-SHA-256, huddle's TLS certificate): alice's consumer
owns the topic's partitions and reads what her producer wrote; with a wrong password
kafka-python is told Kafka's authentication error (and gives up bootstrapping), never a
bare disconnect, and is given nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaTimeoutError
from structlog.typing import EventDict

from tests.helpers import wait_until
from tests.kafka.consumers import PythonConsumer
from tests.kafka.test_confluent import PARTITIONS, SETTLE_S
from tests.kafka.test_security import PASSWORD, Secure, _create_topic, _sasl_ssl, secure

__all__ = ["secure"]  # the fixture, shared with test_security

ALL = frozenset(("t", p) for p in range(PARTITIONS))
RECORDS = 12


def _sasl(secure: Secure, password: str) -> dict[str, Any]:
    """kafka-python's settings to log in as alice with ``password`` over TLS."""
    return {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": secure.pki.ca,
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "alice",
        "sasl_plain_password": password,
    }


def _produce(secure: Secure) -> None:
    producer = KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{secure.port}",
        acks=1,
        enable_idempotence=False,
        linger_ms=0,
        **_sasl(secure, PASSWORD),
    )
    try:
        for i in range(RECORDS):
            producer.send("t", value=b"m%d" % i, partition=i % PARTITIONS)
        producer.flush(timeout=SETTLE_S)
    finally:
        producer.close(timeout=SETTLE_S)


def _bootstrap_with_a_wrong_password(secure: Secure) -> None:
    KafkaConsumer(
        "t",
        bootstrap_servers=f"127.0.0.1:{secure.port}",
        group_id="g2",
        bootstrap_timeout_ms=3_000,
        **_sasl(secure, "wrong"),
    )


async def test_kafka_python_joins_and_reads_over_sasl_ssl_and_a_wrong_password_is_refused(
    secure: Secure, caplog: pytest.LogCaptureFixture, logs: list[EventDict]
) -> None:
    await asyncio.to_thread(_create_topic, secure.port, _sasl_ssl(secure, PASSWORD))
    await asyncio.to_thread(_produce, secure)
    alice = await asyncio.to_thread(
        PythonConsumer,
        secure.port,
        "g",
        "t",
        auto_offset_reset="earliest",
        **_sasl(secure, PASSWORD),
    )
    try:
        await wait_until(
            lambda: alice.assignment == ALL and len(alice.records) == RECORDS,
            wait_s=SETTLE_S,
            what="alice owns t and has read every record",
        )
        assert alice.failure is None, alice.failure
        assert {c.peer.principal for c in secure.server.connections()} == {"User:alice"}
    finally:
        await asyncio.to_thread(alice.stop)
    assert sorted(value for _, _, _, value in alice.records) == sorted(
        b"m%d" % i for i in range(RECORDS)
    )

    caplog.clear()
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        await asyncio.to_thread(_bootstrap_with_a_wrong_password, secure)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("kafka")]
    refusal = "[Error 58] SaslAuthenticationFailedError"
    refused = [m for m in said if refusal in m]
    assert refused, said
    assert all("invalid credentials (SCRAM-SHA-256)" in m for m in refused)
    assert not [m for m in said if "socket disconnected" in m], said
    failed = [e for e in logs if e["event"] == "authentication_failed"]
    assert failed
    assert {(e["username"], e["mechanism"]) for e in failed} == {("alice", "SCRAM-SHA-256")}
