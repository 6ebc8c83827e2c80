"""Requests the Kafka-wire fuzzer found mishandled (issue 26), each read as Kafka reads it:

- an unknown tagged field is skipped (KIP-482), in the header or the body, not a reason
  to close the connection;
- an array length of 2^32 in a 60-byte request closes that connection (kio sized the
  array first: it asked for 34 GB and the process aborted);
- a null where the schema has no null (a Produce's partitions) closes that connection
  after a log line (the exception reached the event loop);
- a CreateTopics or CreatePartitions of more than 10,000 partitions is refused with
  POLICY_VIOLATION, as Kafka's controller refuses it (a Metadata answer listing a
  million partitions held the event loop for seconds);
- a request of more than ``walk.MAX_ITEMS`` array items closes that connection (a
  FindCoordinator of 100,000 keys, 690 kB, held every connection for 4 s).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.typing import EventDict

from huddle.chaos.kafka_frames import encode
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.walk import MAX_ITEMS, uvarint
from huddle.protocol.errors import ErrorCode
from tests.helpers import error_events, wait_until
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka, parse, request


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@pytest.fixture
async def loop_errors() -> AsyncIterator[list[dict[str, Any]]]:
    """What reaches the event loop's exception handler (an exception a protocol let out)."""
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: seen.append(context))
    yield seen
    loop.set_exception_handler(previous)


async def _closed_after_a_bad_request(
    kafka: Listening, logs: list[EventDict], data: bytes, what: str
) -> None:
    async with RawKafka(kafka.port) as bystander, RawKafka(kafka.port) as bad:
        assert (await bystander.call(Api.API_VERSIONS, 0, 1)).error_code == 0
        bad.write(data)
        assert await bad.closed(), f"{what}: the connection stays open"
        await wait_until(lambda: kafka.server.connection_count == 1, what="the bad one to close")
        assert (await bystander.call(Api.API_VERSIONS, 0, 2)).error_code == 0
    refused = [e for e in logs if e["event"] == "kafka_bad_request"]
    assert refused, f"{what}: no kafka_bad_request line"
    assert error_events(logs) == []


def _heartbeat_v4() -> Any:
    return request(Api.HEARTBEAT, 4, group_id="g", generation_id=1, member_id="m")


async def test_unknown_tagged_fields_are_skipped_as_kafka_skips_them(kafka: Listening) -> None:
    encoded = encode(Api.HEARTBEAT, 4, 5, _heartbeat_v4(), "c")
    header_tags, body_tags = (p.offset for p in encoded.prefixes if p.kind == "tags")
    unknown = b"\x01" + uvarint(1000) + uvarint(3) + b"abc"  # one field: tag 1000, 3 bytes
    body = encoded.body
    body = body[:body_tags] + unknown + body[body_tags + 1 :]  # the last one first
    body = body[:header_tags] + unknown + body[header_tags + 1 :]
    async with RawKafka(kafka.port) as conn:
        conn.write(_frame(body))
        correlation_id, answer = await conn.read()
        assert correlation_id == 5
        assert parse(Api.HEARTBEAT, 4, answer).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert (await conn.call(Api.API_VERSIONS, 0, 6)).error_code == 0  # still open


async def test_an_array_length_of_4_billion_closes_that_connection_only(
    kafka: Listening, logs: list[EventDict]
) -> None:
    join = request(
        Api.JOIN_GROUP,
        9,
        group_id="gg",
        session_timeout=10_000,
        rebalance_timeout=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": b""}],
    )
    encoded = encode(Api.JOIN_GROUP, 9, 1, join, "c")
    (protocols,) = (
        p for p in encoded.prefixes if p.kind == "uvarint" and encoded.body[p.offset] == 2
    )  # the array of one protocol: its length is 1 + 1
    body = encoded.body
    body = body[: protocols.offset] + uvarint(2**32 - 1) + body[protocols.offset + 1 :]
    await _closed_after_a_bad_request(kafka, logs, _frame(body), "2^32 protocols")


async def test_a_null_where_none_is_allowed_closes_that_connection_after_a_line(
    kafka: Listening, logs: list[EventDict], loop_errors: list[dict[str, Any]]
) -> None:
    produce = request(
        Api.PRODUCE,
        9,
        acks=1,
        timeout=1_000,
        topic_data=[{"name": "t", "partition_data": []}],
    )
    encoded = encode(Api.PRODUCE, 9, 1, produce, "c")
    partitions = [p for p in encoded.prefixes if p.kind == "uvarint"][-1]  # partition_data
    assert encoded.body[partitions.offset] == 1  # an empty array
    body = encoded.body[: partitions.offset] + b"\x00" + encoded.body[partitions.offset + 1 :]
    await _closed_after_a_bad_request(kafka, logs, _frame(body), "null partition_data")
    assert loop_errors == [], "an exception reached the event loop"


def _created(counts: dict[str, int]) -> dict[str, Any]:
    topics = [
        {"name": n, "num_partitions": c, "replication_factor": 1, "assignments": [], "configs": []}
        for n, c in counts.items()
    ]
    return {"topics": topics, "timeout": 1_000, "validate_only": False}


async def test_more_than_10000_partitions_in_one_request_are_refused_as_kafka_does(
    kafka: Listening,
) -> None:
    async with RawKafka(kafka.port) as conn:
        too_many = await conn.call(Api.CREATE_TOPICS, 7, 1, **_created({"a": 6_000, "b": 5_000}))
        assert [t.error_code for t in too_many.topics] == [ErrorCode.POLICY_VIOLATION] * 2
        assert "a" not in kafka.server.core.topics.partitions
        made = await conn.call(Api.CREATE_TOPICS, 7, 2, **_created({"a": 10_000}))
        assert made.topics[0].error_code == 0
        grown = await conn.call(
            Api.CREATE_PARTITIONS,
            3,
            3,
            topics=[{"name": "a", "count": 20_001, "assignments": None}],
            timeout=1_000,
            validate_only=False,
        )
        assert grown.results[0].error_code == ErrorCode.POLICY_VIOLATION
        assert kafka.server.core.topics.partitions["a"] == 10_000
        grown = await conn.call(
            Api.CREATE_PARTITIONS,
            3,
            4,
            topics=[{"name": "a", "count": 20_000, "assignments": None}],
            timeout=1_000,
            validate_only=False,
        )
        assert grown.results[0].error_code == 0
        assert kafka.server.core.topics.partitions["a"] == 20_000


async def test_more_items_than_a_request_may_hold_close_that_connection_only(
    kafka: Listening, logs: list[EventDict]
) -> None:
    keys = [f"g{i}" for i in range(MAX_ITEMS + 1)]
    find = request(Api.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=keys)
    data = _frame(encode(Api.FIND_COORDINATOR, 4, 1, find, "c").body)
    await _closed_after_a_bad_request(kafka, logs, data, f"{MAX_ITEMS + 1} keys")
    (line,) = [e for e in logs if e["event"] == "kafka_bad_request"]
    assert f"more than {MAX_ITEMS} items" in line["error_message"]


async def test_a_request_of_as_many_items_as_allowed_is_read(kafka: Listening) -> None:
    groups = [f"g{i}" for i in range(MAX_ITEMS)]
    async with RawKafka(kafka.port) as conn:
        described = await conn.call(
            Api.DESCRIBE_GROUPS, 5, 1, groups=groups, include_authorized_operations=False
        )
        assert len(described.groups) == MAX_ITEMS
        assert (await conn.call(Api.API_VERSIONS, 0, 2)).error_code == 0
