"""A coordinator with a Kafka listener, on the test's loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.coordinator.kafka.wire import KafkaWire
from tests.helpers import fast_server_config


@dataclass
class Listening:
    server: CoordinatorServer
    wire: KafkaWire

    @property
    def port(self) -> int:
        return self.wire.port


@pytest.fixture
async def kafka(logs: object) -> AsyncIterator[Listening]:
    """The fast group rules; the Kafka listener on a free port."""
    async with CoordinatorServer(fast_server_config()) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        yield Listening(server, wire)
