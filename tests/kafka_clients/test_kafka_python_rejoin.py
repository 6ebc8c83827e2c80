"""kafka-python 3.0's stranded rejoin (see ``huddle.chaos.kafka_workers.kafka_python_driver``
and docs/kafka.md, "Client notes"), made certain rather than 1 run in 25-40: a consumer
starts on a topic its metadata does not show yet, so its first generation assigns nothing
and the topic's partitions, once known, make it rejoin as the leader; its SyncGroup answers
are slow (longer than the driver's poll), so ``poll`` gives up while the rejoin's SyncGroup
is in flight. Every answer the listener gives is right: the consumer still owns nothing
unless the driver notices the join it left unread and asks it to rejoin.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import pytest

from huddle.chaos.kafka_workers import brokers
from huddle.chaos.kafka_workers.kafka_python_driver import POLL_MS, STRANDED
from huddle.chaos.kafka_workers.options import RANGE, DriverOptions
from huddle.chaos.kafka_workers.running import Drivers, partitions_of
from huddle.coordinator.kafka.apis import Api
from huddle.protocol.addresses import free_port
from tests.kafka_clients.conftest import HUDDLE_FLAGS, PARTITIONS, WAIT_S, require_client
from tests.kafka_clients.slow_answers import HOST, SlowAnswers

pytestmark = pytest.mark.e2e

SLOW_S: Final = 2.5 * POLL_MS / 1000
# SyncGroup: longer than a poll; Metadata: the topic shows after the first generation formed
DELAYS: Final[Mapping[int, float]] = {Api.SYNC_GROUP: SLOW_S, Api.METADATA: SLOW_S}


def test_a_leader_rejoin_left_unread_by_kafka_python_is_rescued(tmp_path: Path) -> None:
    require_client("kafka-python")
    if not brokers.huddle_has_kafka_listener():
        pytest.skip("this huddle serve has no Kafka listener (--kafka-port) yet")
    proxy_port = free_port()
    advertise = ("--kafka-advertise", f"{HOST}:{proxy_port}")
    topic = f"stranded-{os.getpid()}"
    with (
        brokers.huddle(tmp_path, *HUDDLE_FLAGS, *advertise) as broker,
        SlowAnswers(broker.port, proxy_port, DELAYS) as proxy,
        Drivers(tmp_path / "drivers") as drivers,
    ):
        brokers.create_topic(broker.bootstrap, topic, PARTITIONS)
        options = DriverOptions(
            bootstrap=f"{HOST}:{proxy_port}",
            group=f"{topic}-group",
            topic=topic,
            strategy=RANGE,
            commit=False,
            max_seconds=120.0,
        )
        k1 = drivers.start("k1", "kafka-python", options)
        wanted = partitions_of(topic, PARTITIONS)
        drivers.wait(lambda: k1.owned == wanted, WAIT_S, f"k1 owns all {PARTITIONS} partitions")
        assert proxy.held > 0
        # the path was taken: the rejoin was left unread, and the driver asked for another
        assert STRANDED in [e["message"] for e in k1.of("error")], drivers.summary()
