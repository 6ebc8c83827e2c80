"""confluent-kafka's consumers (librdkafka) on the Kafka listener: three form a group with
the eager range assignor and with cooperative-sticky, a fourth joins and gets a share, one
leaves cleanly."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError

from huddle.client.admin import Admin
from tests.helpers import wait_until
from tests.kafka.conftest import Listening

PARTITIONS = 6
ALL = frozenset(("t", p) for p in range(PARTITIONS))
SETTLE_S = 30.0


class ConfluentConsumer:
    """A ``confluent_kafka.Consumer`` polling in a thread until stopped (then closed: a
    LeaveGroup)."""

    def __init__(
        self, port: int, group: str, assignor: str, extra: Mapping[str, Any] | None = None
    ) -> None:
        self.assignment: frozenset[tuple[str, int]] = frozenset()
        self.errors: list[str] = []
        self.codes: list[int] = []
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "group.id": group,
                "partition.assignment.strategy": assignor,
                "session.timeout.ms": 6_000,
                "heartbeat.interval.ms": 200,
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "error_cb": self._error,
                **(extra or {}),
            }
        )
        self._consumer.subscribe(["t"])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _error(self, error: KafkaError) -> None:
        self.errors.append(str(error))
        self.codes.append(error.code())

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._consumer.poll(0.1)
                owned = self._consumer.assignment()
                self.assignment = frozenset((tp.topic, tp.partition) for tp in owned)
        finally:
            self._consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(SETTLE_S)
        assert not self._thread.is_alive(), "the consumer did not stop"


def _shared(consumers: Sequence[ConfluentConsumer]) -> bool:
    shares = [c.assignment for c in consumers]
    return all(shares) and sum(map(len, shares)) == PARTITIONS and frozenset().union(*shares) == ALL


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
async def test_consumers_form_a_group_take_in_a_member_and_let_one_go(
    kafka: Listening, assignor: str
) -> None:
    async with Admin(f"127.0.0.1:{kafka.server.port}") as admin:
        await admin.create_topic("t", PARTITIONS)

    async def start() -> ConfluentConsumer:
        return await asyncio.to_thread(ConfluentConsumer, kafka.port, "g", assignor)

    consumers = [await start() for _ in range(3)]
    try:
        await wait_until(lambda: _shared(consumers), wait_s=SETTLE_S, what="3 members share t")
        consumers.append(await start())
        await wait_until(lambda: _shared(consumers), wait_s=SETTLE_S, what="the 4th gets a share")
        await asyncio.to_thread(consumers.pop(0).stop)
        await wait_until(lambda: _shared(consumers), wait_s=SETTLE_S, what="3 own all again")
    finally:
        await asyncio.gather(*(asyncio.to_thread(c.stop) for c in consumers))
    assert not [e for c in consumers for e in c.errors if "UNSUPPORTED" in e.upper()]
