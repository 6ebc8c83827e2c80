"""``huddle serve --kafka-port``: the Kafka listener opens beside huddle's, and only then."""

from __future__ import annotations

import asyncio

import pytest
from structlog.typing import EventDict

from huddle.cli import parse_args
from huddle.cli.admin import render_cluster
from huddle.cli.serve import serve_settings
from huddle.cli.usage import UsageError
from huddle.client import Admin
from huddle.coordinator.config import ServerConfig
from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.coordinator.server import serve
from huddle.protocol.admin_messages import DescribeClusterResponse
from tests.helpers import fast_server_config, wait_until
from tests.kafka.raw import RawKafka


def _settings(*argv: str) -> ServerConfig:
    return serve_settings(parse_args(["serve", *argv]), {}).config


def test_the_kafka_flags_set_the_listener() -> None:
    assert _settings().kafka_port == -1  # no flag: no Kafka listener
    config = _settings("--kafka-port=9092", "--kafka-host=0.0.0.0", "--kafka-advertise=k:19092")
    assert (config.kafka_port, config.kafka_host, config.kafka_advertise) == (
        9092,
        "0.0.0.0",
        "k:19092",
    )


def test_a_cluster_node_takes_a_kafka_listener() -> None:
    settings = _settings("--kafka-port=9092", "--cluster=etcd://127.0.0.1:2379")
    assert (settings.kafka_port, settings.cluster) == (9092, "etcd://127.0.0.1:2379")


def test_the_kafka_eviction_and_log_flags_set_their_settings() -> None:
    default = _settings("--kafka-port=9092")
    assert default.kafka_evict_on_close_ms == -1  # Kafka's rule: the session timeout
    assert (default.consumer_session_timeout_ms, default.consumer_heartbeat_interval_ms) == (
        45_000,
        5_000,
    )
    assert (default.kafka_log_partition_bytes, default.kafka_log_total_bytes) == (
        8 << 20,
        128 << 20,
    )
    config = _settings(
        "--kafka-port=9092",
        "--kafka-evict-on-close-ms=200",
        "--kafka-log-partition-bytes=2000000",
        "--kafka-log-total-bytes=9000000",
        "--consumer-session-timeout-ms=6000",
        "--consumer-heartbeat-interval-ms=500",
    )
    assert config.kafka_evict_on_close_ms == 200
    assert (config.consumer_session_timeout_ms, config.consumer_heartbeat_interval_ms) == (
        6000,
        500,
    )
    assert (config.kafka_log_partition_bytes, config.kafka_log_total_bytes) == (
        2_000_000,
        9_000_000,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--kafka-advertise=k:1"],  # without --kafka-port
        ["--kafka-port=70000"],
        ["--kafka-port=9092", "--kafka-advertise=nope"],
        # a cluster node's Kafka listener on every address: which one to tell clients?
        ["--kafka-port=9092", "--kafka-host=0.0.0.0", "--cluster=etcd://127.0.0.1:2379"],
        ["--kafka-port=9092", "--kafka-evict-on-close-ms=-5"],
        ["--kafka-log-partition-bytes=1000"],  # under one batch's bound
        ["--kafka-log-partition-bytes=9000000", "--kafka-log-total-bytes=8000000"],
        ["--kafka-log-total-bytes=0"],
        ["--consumer-session-timeout-ms=1000", "--consumer-heartbeat-interval-ms=1000"],
        ["--consumer-session-timeout-ms=0"],
    ],
)
def test_bad_kafka_settings_are_refused(argv: list[str]) -> None:
    with pytest.raises(UsageError):
        _settings(*argv)


async def _run(config: ServerConfig) -> tuple[asyncio.Task[None], asyncio.Event, list[int]]:
    stop, ports = asyncio.Event(), list[int]()
    task = asyncio.create_task(serve(config, ready=ports.append, stop=stop))
    await wait_until(lambda: bool(ports) or task.done(), what="the server to listen")
    return task, stop, ports


async def test_serve_opens_the_kafka_listener_with_the_flag(logs: list[EventDict]) -> None:
    task, stop, _ = await _run(fast_server_config(kafka_port=0))
    try:
        (listening,) = [e for e in logs if e["event"] == "kafka_listening"]
        async with RawKafka(listening["port"]) as conn:
            answer = await conn.call(Api.METADATA, 1, 1, topics=None)
        assert answer.brokers[0].port == listening["port"]
    finally:
        stop.set()
        await task


async def test_the_node_names_its_kafka_listener_to_admins(logs: list[EventDict]) -> None:
    """``huddle cluster status`` (DescribeCluster) shows where Kafka clients connect;
    a coordinator without a Kafka listener names none."""
    for kafka_port in (0, -1):
        task, stop, ports = await _run(fast_server_config(kafka_port=kafka_port))
        try:
            async with Admin(f"127.0.0.1:{ports[0]}") as admin:
                (node,) = (await admin.describe_cluster()).nodes
        finally:
            stop.set()
            await task
        if kafka_port < 0:
            assert node.kafka_address == ""
            continue
        (listening,) = [e for e in logs if e["event"] == "kafka_listening"]
        assert node.kafka_address == listening["advertised"]
        assert (
            render_cluster(DescribeClusterResponse(nodes=[node]), {}, shards=False)
            .split("\n")[3]
            .split()[2]
            == listening["advertised"]
        )


async def test_serve_opens_no_kafka_listener_without_the_flag(logs: list[EventDict]) -> None:
    task, stop, ports = await _run(fast_server_config())
    stop.set()
    await task
    assert ports
    assert not [e for e in logs if e["event"] == "kafka_listening"]


async def test_the_log_bound_flags_bound_the_listener_s_log() -> None:
    config = fast_server_config(
        kafka_log_partition_bytes=2_000_000, kafka_log_total_bytes=5_000_000
    )
    async with CoordinatorServer(config) as server:
        store = (await listen_kafka(server, "127.0.0.1", 0)).log.store
        assert (store.max_partition_bytes, store.max_total_bytes) == (2_000_000, 5_000_000)
        assert store.segment_bytes == 500_000  # a quarter of the partition bound
