"""Answers the Kafka listener gives as Kafka's broker gives them, for requests a client
rarely sends but may: each test names the place in Apache Kafka's source it follows."""

from __future__ import annotations

from typing import Any

from huddle.coordinator.kafka.apis import Api
from huddle.protocol.errors import ErrorCode
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka

_PROTOCOLS = [{"name": "range", "metadata": b"\x00\x01"}]


async def _stable_member(conn: RawKafka, group: str) -> Any:
    """One member, alone in ``group``, synced: the JoinGroup's answer."""
    joined = await conn.call(
        Api.JOIN_GROUP,
        3,
        1,
        group_id=group,
        session_timeout=10_000,
        rebalance_timeout=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=_PROTOCOLS,
    )
    synced = await conn.call(
        Api.SYNC_GROUP,
        3,
        2,
        group_id=group,
        generation_id=joined.generation_id,
        member_id=joined.member_id,
        group_instance_id=None,
        assignments=[{"member_id": joined.member_id, "assignment": b"\x00\x01"}],
    )
    assert synced.error_code == ErrorCode.NONE
    return joined


async def test_sync_group_v5_without_protocol_type_or_name_is_inconsistent(
    kafka: Listening,
) -> None:
    """KafkaApis.handleSyncGroupRequest: from v5 the protocol type and name are mandatory
    (SyncGroupRequest.areMandatoryProtocolTypeAndNamePresent)."""
    async with RawKafka(kafka.port) as conn:
        joined = await _stable_member(conn, "g")
        answers = []
        for cid, (kind, name) in enumerate(((None, "range"), ("consumer", None)), start=3):
            answers.append(
                await conn.call(
                    Api.SYNC_GROUP,
                    5,
                    cid,
                    group_id="g",
                    generation_id=joined.generation_id,
                    member_id=joined.member_id,
                    group_instance_id=None,
                    protocol_type=kind,
                    protocol_name=name,
                    assignments=[],
                )
            )
        named = await conn.call(
            Api.SYNC_GROUP,
            5,
            9,
            group_id="g",
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[],
        )
    assert [a.error_code for a in answers] == [ErrorCode.INCONSISTENT_GROUP_PROTOCOL] * 2
    assert [a.assignment for a in answers] == [b"", b""]
    # named in full, the member gets its assignment as before
    assert named.error_code == ErrorCode.NONE
    assert named.assignment == b"\x00\x01"


async def test_api_versions_v3_with_a_software_name_kafka_refuses_is_invalid(
    kafka: Listening,
) -> None:
    """KafkaApis.handleApiVersionsRequest: a v3+ request whose client software name or
    version breaks ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN is INVALID_REQUEST,
    with no ranges; the names real clients send are fine."""
    async with RawKafka(kafka.port) as conn:
        refused = [
            await conn.call(
                Api.API_VERSIONS,
                3,
                cid,
                client_software_name=name,
                client_software_version=version,
            )
            for cid, (name, version) in enumerate(
                (("bad name", "1.0"), ("kafka-python", "3.0+local"), ("", "1"), ("-x", "1"))
            )
        ]
        fine = [
            await conn.call(
                Api.API_VERSIONS,
                version,
                10 + version,
                client_software_name="confluent-kafka-python",
                client_software_version="2.16.1-rdkafka-2.16.0",
            )
            for version in (3, 4)
        ]
    assert [(a.error_code, a.api_keys) for a in refused] == [(ErrorCode.INVALID_REQUEST, ())] * 4
    assert [a.error_code for a in fine] == [ErrorCode.NONE] * 2
    assert all(a.api_keys for a in fine)
