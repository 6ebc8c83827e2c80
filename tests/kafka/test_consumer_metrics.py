"""The consumer-protocol (KIP-848) groups' Prometheus metrics (``--metrics-port``): groups
by state, members, group epoch bumps and fenced members, as a group forms over the Kafka
wire, a member is fenced for a stale epoch and another for its session."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from tests.coordinator.test_metrics import scrape, value
from tests.helpers import fast_server_config, wait_until
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka
from tests.kafka.test_consumer_admin import _two_members
from tests.kafka.test_consumer_protocol import _beat

FENCED_MEMBER_EPOCH = 110


@pytest.fixture
async def measured(logs: object) -> AsyncIterator[Listening]:
    async with CoordinatorServer(fast_server_config(metrics_port=0)) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        yield Listening(server, wire)


async def test_consumer_group_metrics_follow_epochs_and_fences(measured: Listening) -> None:
    server, core = measured.server, measured.wire.consumer.core
    port = server.metrics_port
    # sessions long enough for the steps below, short enough to wait for their end
    core.config = type(core.config)(session_timeout_ms=3000, heartbeat_interval_ms=100)
    before = await scrape(port)
    assert value(before, "huddle_consumer_groups", state="Stable") == 0
    assert value(before, "huddle_consumer_group_rebalances_total") == 0
    await _two_members(measured)
    async with RawKafka(measured.port) as conn:
        formed = await scrape(port)
        assert value(formed, "huddle_consumer_groups", state="Reconciling") == 1
        assert value(formed, "huddle_consumer_group_members") == 2
        assert value(formed, "huddle_consumer_group_rebalances_total") == 2  # two joins
        stale = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_beat("b", 7))
        assert stale.error_code == FENCED_MEMBER_EPOCH
        # nobody heartbeats now: both sessions run out
        await wait_until(lambda: not core.groups["g"].members)
    after = await scrape(port)
    assert value(after, "huddle_consumer_members_fenced_total", reason="epoch") == 1
    assert value(after, "huddle_consumer_members_fenced_total", reason="session") == 2
    assert value(after, "huddle_consumer_groups", state="Empty") == 1
    assert value(after, "huddle_consumer_group_members") == 0
    # each member taken out bumped the group epoch once more
    assert value(after, "huddle_consumer_group_rebalances_total") == 4
