"""A Kafka listener on a ``CoordinatorServer``: ``listen_kafka`` opens it beside the
huddle listener, over the same core (``CoordinatorServer.listen``)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from huddle.coordinator.connection import Connection
from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.sasl import KafkaSasl
from huddle.coordinator.kafka.wire import KafkaWire
from huddle.coordinator.security.acls import Authorizer
from huddle.protocol.addresses import parse_address
from huddle.protocol.messages import Call


class _Host:
    """What ``KafkaWire`` needs of the server (``wire.KafkaHost``)."""

    def __init__(self, server: CoordinatorServer) -> None:
        self._server = server

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._server.loop

    def greeted(self, conn: Connection) -> None:
        self._server.greeted(conn)

    def backlogged(self, conn: Connection) -> None:
        self._server.backlogged(conn)

    def call(self, conn: Connection, call: Call) -> None:
        self._server.requests.call(conn, call, self._server.now_ms())

    def flush(self) -> None:
        self._server.requests.flush()

    @property
    def topic_partitions(self) -> Mapping[str, int]:
        return self._server.core.topics.partitions

    @property
    def authorizer(self) -> Authorizer | None:
        return self._server.core.authorizer


async def listen_kafka(
    server: CoordinatorServer, host: str, port: int, advertise: str | None = None
) -> KafkaWire:
    """Listen for Kafka clients on ``host:port`` (0: a free port); ``advertise`` is the
    ``host:port`` clients are told to use (default: the one listened on). The wire
    returned names its address in ``advertised``. TLS, SASL and the ACLs are the huddle
    listener's (``server.security``): the same certificate, users and ACLs."""
    limit = server.config.max_response_bytes
    host_ = _Host(server)
    security = server.security
    login = KafkaSasl(host_, security) if security is not None and security.mechanisms else None
    wire = KafkaWire(host_, (host, port), max_response_bytes=limit, sasl=login)
    wire.port = await server.listen(wire, host, port)
    wire.advertised = parse_address(advertise) if advertise else (host, wire.port)
    return wire
