"""The coordinator's request counters are labelled by listener: a Kafka client's requests
count under ``listener="kafka"``, a huddle member's under ``listener="huddle"``."""

from __future__ import annotations

from huddle.client.connection import connect
from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.protocol.messages import HeartbeatRequest, HeartbeatResponse
from tests.coordinator.test_metrics import scrape, value
from tests.helpers import eventually, fast_server_config
from tests.kafka.raw import RawKafka


async def test_request_counters_are_labelled_by_listener() -> None:
    async with CoordinatorServer(fast_server_config(metrics_port=0)) as server:
        kafka_port = (await listen_kafka(server, "127.0.0.1", 0)).port
        async with RawKafka(kafka_port) as conn:
            joined = await conn.call(
                Api.JOIN_GROUP,
                3,
                1,
                group_id="g",
                session_timeout=10_000,
                rebalance_timeout=10_000,
                member_id="",
                protocol_type="consumer",
                protocols=[{"name": "range", "metadata": b"\x00\x01"}],
            )
            for correlation_id in (2, 3, 4):
                beat = await conn.call(
                    Api.HEARTBEAT,
                    1,
                    correlation_id,
                    group_id="g",
                    generation_id=joined.generation_id,
                    member_id=joined.member_id,
                )
                assert beat.error_code in (0, 27)  # REBALANCE_IN_PROGRESS before a sync
        async with connect(f"127.0.0.1:{server.port}") as huddle:
            nobody = HeartbeatRequest(group_id="h", generation_id=1, member_id="nobody")
            assert isinstance(await huddle.request(nobody), HeartbeatResponse)

        async def counted() -> bool:
            now = await scrape(server.metrics_port)
            return (
                value(now, "huddle_heartbeats_total", listener="kafka") == 3
                and value(now, "huddle_heartbeats_total", listener="huddle") == 1
            )

        await eventually(counted, what="each listener's heartbeats to be counted")
        now = await scrape(server.metrics_port)
        assert value(now, "huddle_requests_total", type="join_group", listener="kafka") == 1
        assert value(now, "huddle_requests_total", type="join_group", listener="huddle") == 0
        assert value(now, "huddle_requests_total", type="heartbeat", listener="kafka") == 3
