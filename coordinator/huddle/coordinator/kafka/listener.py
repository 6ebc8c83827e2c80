"""A Kafka listener on a ``CoordinatorServer``: ``listen_kafka`` opens it beside the
huddle listener, over the same core (``CoordinatorServer.listen``)."""

from __future__ import annotations

import asyncio

from huddle.coordinator.connection import Connection
from huddle.coordinator.consumer_wire import ServerConsumerHost
from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.log_apis import KafkaLog
from huddle.coordinator.kafka.sasl import KafkaSasl
from huddle.coordinator.kafka.wire import KafkaWire
from huddle.coordinator.kafka_log.disk import LogDisk
from huddle.protocol.addresses import format_address, parse_address
from huddle.protocol.messages import Call


class _Host(ServerConsumerHost):
    """What ``KafkaWire`` needs of the server (``wire.KafkaHost``): what the consumer
    service reads of it (the topics, ACLs, classic groups), and these."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._server.loop

    def greeted(self, conn: Connection) -> None:
        self._server.greeted(conn)

    def backlogged(self, conn: Connection) -> None:
        self._server.backlogged(conn)

    def call(self, conn: Connection, call: Call) -> None:
        metrics = self._server.metrics
        if metrics is not None:  # the intake counts the calls ``take`` returns, not these
            metrics.calls[conn.wire.listener] += 1
        self._server.requests.call(conn, call, self._server.now_ms())

    def flush(self) -> None:
        self._server.requests.flush()


async def listen_kafka(
    server: CoordinatorServer, host: str, port: int, advertise: str | None = None
) -> KafkaWire:
    """Listen for Kafka clients on ``host:port`` (0: a free port); ``advertise`` is the
    ``host:port`` clients are told to use (default: the one listened on). The wire
    returned names its address in ``advertised``. TLS, SASL and the ACLs are the huddle
    listener's (``server.security``): the same certificate, users and ACLs. Call it after
    the server's ``start``: with a data dir, the log's files are read back then
    (``DataDirError`` if they cannot be used), and the registry they follow must be
    loaded first."""
    cfg = server.config
    disk = None
    if cfg.data_dir:  # after the server's start: the topic registry is loaded
        disk = await asyncio.to_thread(LogDisk.open, cfg.data_dir, fsync=cfg.fsync)
    kafka_log = KafkaLog(
        server.core.topics.partitions.get,
        topic_ids=server.core.topics.ids.get,
        disk=disk,
        max_partition_bytes=cfg.kafka_log_partition_bytes,
        max_total_bytes=cfg.kafka_log_total_bytes,
    )
    host_ = _Host(server)
    security = server.security
    login = KafkaSasl(host_, security) if security is not None and security.mechanisms else None
    wire = KafkaWire(
        host_,
        (host, port),
        max_response_bytes=cfg.max_response_bytes,
        sasl=login,
        evict_on_close_ms=cfg.kafka_evict_on_close_ms,
        log=kafka_log,
        consumer=server.consumer,  # the server's: huddle's wire serves the same groups
    )
    try:
        wire.port = await server.listen(wire, host, port)
    except BaseException:
        kafka_log.close()
        raise
    server.after_close(kafka_log.close)
    wire.advertised = parse_address(advertise) if advertise else (host, wire.port)
    server.kafka_advertised = format_address(*wire.advertised)
    return wire
