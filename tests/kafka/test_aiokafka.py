"""aiokafka's consumers on the Kafka listener (on the test's own event loop): two form a
group and share a topic; a commit, then a new consumer reads on from it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from huddle.client.admin import Admin
from tests.helpers import wait_until
from tests.kafka.conftest import Listening

PARTITIONS = 4
ALL = {("t", p) for p in range(PARTITIONS)}
SETTLE_S = 30.0


@pytest.fixture
async def topic(kafka: Listening) -> None:
    async with Admin(f"127.0.0.1:{kafka.server.port}") as admin:
        await admin.create_topic("t", PARTITIONS)


def _consumer(kafka: Listening, group: str) -> Any:
    return AIOKafkaConsumer(
        "t",
        bootstrap_servers=f"127.0.0.1:{kafka.port}",
        group_id=group,
        enable_auto_commit=False,
        heartbeat_interval_ms=200,
        session_timeout_ms=6_000,
        fetch_max_wait_ms=100,
        auto_offset_reset="earliest",
    )


def _owned(consumers: Sequence[Any]) -> bool:
    shares = [{(tp.topic, tp.partition) for tp in c.assignment()} for c in consumers]
    return all(shares) and sum(map(len, shares)) == PARTITIONS and set().union(*shares) == ALL


@pytest.mark.usefixtures("topic")
async def test_two_consumers_share_the_topic(kafka: Listening) -> None:
    consumers = [_consumer(kafka, "g") for _ in range(2)]
    for c in consumers:
        await c.start()
    try:
        await wait_until(lambda: _owned(consumers), wait_s=SETTLE_S, what="2 members share t")
    finally:
        for c in consumers:
            await c.stop()


@pytest.mark.usefixtures("topic")
async def test_a_new_consumer_reads_on_from_the_commit(kafka: Listening) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{kafka.port}", acks=1)
    await producer.start()
    try:
        for i in range(10):
            await producer.send_and_wait("t", b"v%d" % i, partition=1)
    finally:
        await producer.stop()
    first = _consumer(kafka, "resume")
    await first.start()
    try:
        await wait_until(lambda: _owned([first]), wait_s=SETTLE_S, what="the first owns t")
        await first.commit({TopicPartition("t", 1): 7})
    finally:
        await first.stop()
    second = _consumer(kafka, "resume")
    await second.start()
    read: list[tuple[int, int, bytes]] = []
    try:
        await wait_until(lambda: _owned([second]), wait_s=SETTLE_S, what="the second owns t")
        assert await second.committed(TopicPartition("t", 1)) == 7
        async with asyncio.timeout(SETTLE_S):
            while len(read) < 3:
                batches = await second.getmany(timeout_ms=1_000)
                read.extend((r.partition, r.offset, r.value) for rs in batches.values() for r in rs)
    finally:
        await second.stop()
    assert read == [(1, 7, b"v7"), (1, 8, b"v8"), (1, 9, b"v9")]
