"""The handlers' requests and responses are kio's own: they go through kio's encoder and
decoder unchanged, as the Kafka wire will send and read them."""

from __future__ import annotations

import datetime
import io

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v4.response import FetchResponse
from kio.schema.produce.v3.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.produce.v3.response import ProduceResponse
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64
from kio.static.protocol import Entity, ResponsePayload

from huddle.coordinator.kafka_log import handlers
from huddle.coordinator.kafka_log.batches import split_batches
from tests.kafka_log.records import batch, fetch_request, read_batches, store_of


def encoded(entity: Entity) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def through_the_wire(response: ResponsePayload) -> Entity:
    data = encoded(response)
    decoded, size = entity_reader(type(response))(data, 0)
    assert size == len(data)
    return decoded


def test_a_produce_and_a_fetch_round_trip_through_kio() -> None:
    store = store_of({"t": 1})
    produced = ProduceRequest(
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(
            TopicProduceData(
                name=TopicName("t"),
                partition_data=(
                    PartitionProduceData(index=i32(0), records=Records(batch([b"a", b"b"]))),
                ),
            ),
        ),
    )
    decoded, _ = entity_reader(ProduceRequest)(encoded(produced), 0)
    assert decoded == produced
    answer = handlers.produce(store, decoded, 3)
    assert isinstance(answer, ProduceResponse)
    assert through_the_wire(answer) == answer
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none

    asked = FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(0)),
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        isolation_level=i8(0),
        topics=(
            FetchTopic(
                topic=TopicName("t"),
                partitions=(
                    FetchPartition(
                        partition=i32(0), fetch_offset=i64(1), partition_max_bytes=i32(1 << 20)
                    ),
                ),
            ),
        ),
    )
    decoded_fetch, _ = entity_reader(FetchRequest)(encoded(asked), 0)
    fetched = handlers.fetch(store, decoded_fetch, 4)
    assert isinstance(fetched, FetchResponse)
    back = through_the_wire(fetched)
    assert back == fetched
    assert isinstance(back, FetchResponse)
    records = back.responses[0].partitions[0].records
    assert records is not None
    (kept,) = read_batches(records)  # kio checks the CRC32C after the offset rewrite
    assert [(r.offset, r.value) for r in kept.records] == [(0, b"a"), (1, b"b")]


def test_a_flexible_fetch_response_round_trips() -> None:
    store = store_of({"t": 1})
    store.append("t", 0, split_batches(batch([b"x"])))
    fetched = handlers.fetch(store, fetch_request(12, {("t", 0): 0}), 12)
    assert not isinstance(fetched, handlers.Wait)
    assert through_the_wire(fetched) == fetched
