"""kafka-python's consumers on the Kafka listener: they form a group on a topic created
through huddle's registry, a member joins and gets a share, a member leaves cleanly, and
a new consumer resumes from a commit; with the eager range assignor and with the
cooperative-sticky one (KIP-429's two rounds)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from structlog.typing import EventDict

from huddle.client.admin import Admin
from huddle.coordinator.effects import Peer
from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.protocol.messages import DescribeGroupsRequest, DescribeGroupsResponse, Reply
from tests.helpers import fast_server_config, wait_until
from tests.kafka.conftest import Listening
from tests.kafka.consumers import Partition, PythonConsumer

PARTITIONS = 6
ALL = frozenset(("t", p) for p in range(PARTITIONS))
ASSIGNORS = {"range": RangePartitionAssignor, "cooperative-sticky": CooperativeStickyAssignor}
SETTLE_S = 30.0


@pytest.fixture
async def topic(kafka: Listening) -> None:
    """Topic ``t`` with 6 partitions, created through huddle's own wire."""
    async with Admin(f"127.0.0.1:{kafka.server.port}") as admin:
        await admin.create_topic("t", PARTITIONS)


async def _start(kafka: Listening, group: str, **config: Any) -> PythonConsumer:
    return await asyncio.to_thread(PythonConsumer, kafka.port, group, "t", **config)


def _shared(consumers: Sequence[PythonConsumer]) -> bool:
    """Every consumer owns a share, no partition twice, every partition once."""
    shares = [c.assignment for c in consumers]
    for c in consumers:
        assert c.failure is None, c.failure
    return (
        all(shares)
        and sum(len(s) for s in shares) == PARTITIONS
        and frozenset().union(*shares) == ALL
    )


def _protocol(kafka: Listening, group: str) -> str:
    """The group's protocol, as the core describes it."""
    out = kafka.server.core.handle(Peer(0), 1, DescribeGroupsRequest(groups=[group]), 0)
    reply = out[0][1]
    assert isinstance(reply, Reply)
    assert isinstance(reply.response, DescribeGroupsResponse)
    return reply.response.groups[0].protocol_name


async def _stop(*consumers: PythonConsumer) -> None:
    await asyncio.gather(*(asyncio.to_thread(c.stop) for c in consumers))


@pytest.mark.parametrize("assignor", list(ASSIGNORS))
@pytest.mark.usefixtures("topic")
async def test_consumers_form_a_group_take_in_a_member_and_let_one_go(
    kafka: Listening, logs: list[EventDict], assignor: str
) -> None:
    strategy = {"partition_assignment_strategy": [ASSIGNORS[assignor]]}
    consumers = [await _start(kafka, "g", **strategy) for _ in range(3)]
    try:
        await wait_until(lambda: _shared(consumers), wait_s=SETTLE_S, what="3 members share t")
        assert _protocol(kafka, "g") == assignor
        # the core reads the Kafka subscriptions (offset retention knows the group's topics)
        assert not [e for e in logs if e["event"] == "subscriptions_unreadable"]
        consumers.append(await _start(kafka, "g", **strategy))
        await wait_until(lambda: _shared(consumers), wait_s=SETTLE_S, what="the 4th gets a share")
        leaving = consumers.pop(0)
        await _stop(leaving)  # close(): a LeaveGroup
        await wait_until(lambda: _shared(consumers), wait_s=SETTLE_S, what="3 own all again")
    finally:
        await _stop(*consumers)


def _produce(port: int, partition: Partition, count: int, pad: int = 0) -> None:
    producer = KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{port}", acks=1, enable_idempotence=False, linger_ms=0
    )
    try:
        for i in range(count):
            value = b"m%d" % i + bytes(pad)
            producer.send(partition[0], value=value, partition=partition[1])
        producer.flush(timeout=10)
    finally:
        producer.close(timeout=10)


@pytest.mark.usefixtures("topic")
async def test_a_new_consumer_resumes_from_the_commit(kafka: Listening) -> None:
    """Records produced through the listener; the first consumer commits offset 42 of one
    partition and leaves; the next one in the group reads that partition from 42 on."""
    partition: Partition = ("t", 2)
    await asyncio.to_thread(_produce, kafka.port, partition, 50)
    first = await _start(kafka, "resume")
    try:
        await wait_until(lambda: _shared([first]), wait_s=SETTLE_S, what="the first owns t")
        await asyncio.to_thread(first.commit, partition, 42)
    finally:
        await _stop(first)
    second = await _start(kafka, "resume")
    try:
        await wait_until(
            lambda: len(second.records) >= 8, wait_s=SETTLE_S, what="the second reads on"
        )
        committed, _ = await asyncio.to_thread(second.position, partition)
    finally:
        await _stop(second)
    assert committed == 42
    read = [(p, offset, value) for _, p, offset, value in second.records]
    assert read == [(2, i, b"m%d" % i) for i in range(42, 50)]


async def test_a_fetch_asking_for_more_than_a_response_may_hold_is_clamped() -> None:
    """A consumer's Fetch asks for up to 50 MiB; the listener's answers are limited to
    --max-response-bytes: the Fetch gets what fits (the records arrive), never an answer
    over the limit."""
    limit = 256 * 1024
    async with CoordinatorServer(fast_server_config(max_response_bytes=limit)) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        async with Admin(f"127.0.0.1:{server.port}") as admin:
            await admin.create_topic("t", 1)
        await asyncio.to_thread(_produce, wire.port, ("t", 0), 40, 20_000)
        consumer = await asyncio.to_thread(
            PythonConsumer, wire.port, "big", "t", auto_offset_reset="earliest"
        )
        try:
            await wait_until(lambda: len(consumer.records) >= 40, wait_s=SETTLE_S, what="all 40")
        finally:
            await _stop(consumer)
    assert [offset for _, _, offset, _ in consumer.records] == list(range(40))
