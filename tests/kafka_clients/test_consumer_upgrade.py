"""A rolling upgrade from ``group.protocol=classic`` to ``consumer`` on huddle's Kafka listener:
two classic consumers (kafka-python, or confluent-kafka's classic protocol) share a topic,
a confluent-kafka consumer with ``group.protocol=consumer`` joins their group (which huddle
upgrades to a consumer group online), the three share the partitions, and once a classic
one stops the other two own them all. Whenever the group is balanced, no partition is owned
by two consumers."""

from __future__ import annotations

from typing import Final

import pytest

from huddle.chaos.kafka_workers.options import CONSUMER_PROTOCOL
from tests.kafka_clients.conftest import KafkaGroup, require_client

pytestmark = pytest.mark.e2e

CONSUMER: Final = "confluent-kafka"


@pytest.mark.parametrize("classic", ["kafka-python", "confluent-kafka"])
def test_a_classic_group_takes_a_consumer_protocol_member(
    kafka_group: KafkaGroup, classic: str
) -> None:
    g = kafka_group
    require_client(classic)
    require_client(CONSUMER)
    if g.broker.name != "huddle":
        pytest.skip("mixed groups are checked on huddle only")
    first = g.start("c1", classic)
    g.start("c2", classic)
    g.balanced("c1", "c2")
    g.start("n1", CONSUMER, strategy=CONSUMER_PROTOCOL)
    g.balanced("c1", "c2", "n1")
    assert first.stop() == 0
    g.balanced("c2", "n1")
