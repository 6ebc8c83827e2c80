"""A client that pipelines requests behind an answer not made yet (a Fetch that waits, a
held JoinGroup) is read no further once its answers waiting in the queue reach
--max-response-bytes, once ``MAX_WAITING`` requests wait, or once ``MAX_WAITS`` Fetches
wait: the server holds a bounded queue per connection (before, 300 requests of 42 bytes,
each a 1 MB Fetch, held 280 MB; 50 connections of 1,500 waiting Fetches each, closed by
their clients, held 51,200 tasks until the idle timeout), and every answer still leaves,
in request order, once the head is answered."""

from __future__ import annotations

from huddle.coordinator.connection import Connection
from huddle.coordinator.effects import Peer
from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.answers import MAX_WAITING, KafkaCodec
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.coordinator.kafka.wire import MAX_WAITS
from huddle.coordinator.kafka_log.store import PartitionKey
from huddle.protocol.messages import CreateTopicsRequest, TopicSpec
from tests.helpers import fast_server_config, wait_until
from tests.kafka.raw import RawKafka, parse, request_bytes
from tests.kafka_log.records import batch, fetch_request, produce_request

_LIMIT = 256 * 1024  # --max-response-bytes
_VALUE = b"v" * 60_000  # one record: each Fetch of partition 0 answers about 60 kB


def _fetch(correlation_id: int, key: PartitionKey, *, max_wait_ms: int) -> bytes:
    request = fetch_request(11, {key: 0}, max_wait_ms=max_wait_ms)
    return request_bytes(Api.FETCH, 11, correlation_id, request)


def _produce(correlation_id: int, key: PartitionKey) -> bytes:
    request = produce_request(7, {key: batch([_VALUE])})
    return request_bytes(Api.PRODUCE, 7, correlation_id, request)


async def _server_side(server: CoordinatorServer, raw: RawKafka) -> Connection:
    """The server's end of ``raw``'s connection."""
    assert raw.writer is not None
    address = raw.writer.get_extra_info("sockname")

    def found() -> list[Connection]:
        return [
            c
            for c in server.connections()
            if c.transport is not None and c.transport.get_extra_info("peername") == address
        ]

    await wait_until(lambda: bool(found()), what="the server to accept the connection")
    (conn,) = found()
    return conn


def _codec(conn: Connection) -> KafkaCodec:
    assert isinstance(conn.codec, KafkaCodec)
    return conn.codec


async def _pipelined_behind_a_waiting_fetch(count: int, *, to_read: PartitionKey) -> None:
    config = fast_server_config(max_response_bytes=_LIMIT)
    async with CoordinatorServer(config) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        topics = CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)])
        server.core.handle(Peer(0), 1, topics, server.now_ms())
        async with RawKafka(wire.port) as producer, RawKafka(wire.port) as client:
            producer.write(_produce(1, ("t", 0)))
            assert parse(Api.PRODUCE, 7, (await producer.read())[1]).responses[0]
            # the head waits for partition 1 to grow; the others behind it answer at once
            client.write(_fetch(0, ("t", 1), max_wait_ms=60_000))
            client.write(b"".join(_fetch(i, to_read, max_wait_ms=0) for i in range(1, count)))
            conn = await _server_side(server, client)
            codec = _codec(conn)
            await wait_until(lambda: codec.full, what="the connection's queue to fill")
            assert conn.muted, "the server reads on behind a full queue"
            assert codec.waiting <= MAX_WAITING
            assert codec.answered_bytes < 2 * _LIMIT
            # the head is answered: everything else follows, in order, nothing lost
            producer.write(_produce(2, ("t", 1)))
            order = []
            for _ in range(count):
                correlation_id, body = await client.read()
                order.append(correlation_id)
                fetched = parse(Api.FETCH, 11, body)
                assert fetched.error_code == 0
                assert fetched.responses[0].partitions[0].error_code == 0
            assert order == list(range(count))
            assert codec.waiting == 0
            assert not conn.muted


async def test_answers_behind_a_waiting_fetch_are_bounded_in_bytes(logs: object) -> None:
    await _pipelined_behind_a_waiting_fetch(40, to_read=("t", 0))


async def test_requests_behind_a_waiting_fetch_are_bounded_in_number(logs: object) -> None:
    # each of these answers is small (an empty partition 0 of another offset)
    await _pipelined_behind_a_waiting_fetch(MAX_WAITING + 200, to_read=("t", 1))


async def test_fetches_waiting_on_one_connection_are_bounded(logs: object) -> None:
    async with CoordinatorServer(fast_server_config()) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        topics = CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)])
        server.core.handle(Peer(0), 1, topics, server.now_ms())
        count = MAX_WAITS + 10
        async with RawKafka(wire.port) as client, RawKafka(wire.port) as producer:
            client.write(b"".join(_fetch(i, ("t", 0), max_wait_ms=60_000) for i in range(count)))
            conn = await _server_side(server, client)
            waiter = wire.log.waiter
            await wait_until(
                lambda: waiter.started >= MAX_WAITS and conn.muted, what="the waits to fill"
            )
            assert waiter.started == MAX_WAITS
            producer.write(_produce(1, ("t", 0)))  # every wait ends; the rest find data
            order = []
            for _ in range(count):
                correlation_id, body = await client.read()
                order.append(correlation_id)
                (partition,) = parse(Api.FETCH, 11, body).responses[0].partitions
                assert partition.high_watermark == 1
            assert order == list(range(count))
            assert waiter.started == MAX_WAITS
