"""Hand-made v2 record batches (written by kio.records) and requests for the log's tests."""

from __future__ import annotations

import datetime
import io
import struct
from collections.abc import Mapping, Sequence
from typing import Any, cast

from kio.index import load_payload_module
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch, Record, RecordBatch
from kio.records.writers import write_batch
from kio.static.constants import EntityType
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from huddle.coordinator.kafka_log.shapes import (
    FETCH,
    LIST_OFFSETS,
    PRODUCE,
    FetchRequest,
    ListOffsetsRequest,
    ProduceRequest,
    make,
)
from huddle.coordinator.kafka_log.store import LogStore, PartitionKey

BASE_TIME_MS = 1_780_000_000_000  # a millisecond in 2026
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def batch(
    values: Sequence[bytes] = (b"a",),
    *,
    timestamp_ms: int = BASE_TIME_MS,
    producer_id: int = -1,
    attributes: int = 0,
) -> bytes:
    """A v2 batch of ``values``, one record each, one millisecond apart from
    ``timestamp_ms``; the base offset 0 as a producer sends it."""
    records = tuple(
        Record(
            attributes=i8(0),
            timestamp=_micros(timestamp_ms + index),
            offset=i64(index),
            key=None,
            value=value,
            headers=(),
        )
        for index, value in enumerate(values)
    )
    new = NewRecordBatch(
        producer_id=i64(producer_id),
        producer_epoch=i16(-1 if producer_id == -1 else 0),
        base_sequence=i32(-1 if producer_id == -1 else 0),
        attributes=i16(attributes),
        records=records,
    )
    buffer = io.BytesIO()
    write_batch(buffer, new)
    return buffer.getvalue()


def _micros(ms: int) -> TZAwareMicros:
    # kio writes int(seconds * 1000): 0.4 ms more keeps float rounding off the millisecond
    moment = EPOCH + datetime.timedelta(microseconds=ms * 1000 + 400)
    return TZAwareMicros.parse(moment)


def read_batches(data: bytes) -> list[RecordBatch]:
    """Every batch in ``data``, read by kio (which checks each CRC32C)."""
    found = []
    position = 0
    while position < len(data):
        parsed, size = read_batch(data, position)
        found.append(parsed)
        position += size
    return found


def values(data: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in ``data``."""
    return [(r.offset, r.value) for b in read_batches(data) for r in b.records]


def with_magic(data: bytes, magic: int) -> bytes:
    return data[:16] + struct.pack(">b", magic) + data[17:]


def store_of(registry: dict[str, int], **bounds: int) -> LogStore:
    """A store that follows ``registry`` (topic -> partition count) as it changes."""
    options: dict[str, Any] = dict(bounds)  # max_*_bytes, segment_bytes
    return LogStore(registry.get, **options)


def _by_topic(keyed: Mapping[PartitionKey, Any]) -> dict[str, list[tuple[int, Any]]]:
    topics: dict[str, list[tuple[int, Any]]] = {}
    for (topic, partition), value in keyed.items():
        topics.setdefault(topic, []).append((partition, value))
    return topics


def produce_request(
    version: int,
    records: Mapping[PartitionKey, bytes],
    *,
    acks: int = 1,
    transactional_id: str | None = None,
) -> ProduceRequest:
    module = load_payload_module(PRODUCE, version, EntityType.request)
    topics = tuple(
        make(
            module,
            "TopicProduceData",
            name=topic,
            partition_data=tuple(
                make(module, "PartitionProduceData", index=p, records=data) for p, data in parts
            ),
        )
        for topic, parts in _by_topic(records).items()
    )
    return cast(
        ProduceRequest,
        make(
            module,
            "ProduceRequest",
            transactional_id=transactional_id,
            acks=acks,
            timeout=datetime.timedelta(seconds=30),
            topic_data=topics,
        ),
    )


def fetch_request(
    version: int,
    offsets: Mapping[PartitionKey, int],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 1024 * 1024,
) -> FetchRequest:
    module = load_payload_module(FETCH, version, EntityType.request)
    topics = tuple(
        make(
            module,
            "FetchTopic",
            topic=topic,
            partitions=tuple(
                make(
                    module,
                    "FetchPartition",
                    partition=p,
                    fetch_offset=offset,
                    partition_max_bytes=partition_max_bytes,
                )
                for p, offset in parts
            ),
        )
        for topic, parts in _by_topic(offsets).items()
    )
    return cast(
        FetchRequest,
        make(
            module,
            "FetchRequest",
            max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            topics=topics,
            forgotten_topics_data=(),
        ),
    )


def list_offsets_request(
    version: int, timestamps: Mapping[PartitionKey, int]
) -> ListOffsetsRequest:
    module = load_payload_module(LIST_OFFSETS, version, EntityType.request)
    topics = tuple(
        make(
            module,
            "ListOffsetsTopic",
            name=topic,
            partitions=tuple(
                make(module, "ListOffsetsPartition", partition_index=p, timestamp=timestamp)
                for p, timestamp in parts
            ),
        )
        for topic, parts in _by_topic(timestamps).items()
    )
    return cast(
        ListOffsetsRequest,
        make(module, "ListOffsetsRequest", replica_id=-1, isolation_level=0, topics=topics),
    )


def partitions(response: object, topics: str, partitions_field: str) -> dict[PartitionKey, Any]:
    """A response's per-partition answers, by (topic, partition)."""
    found: dict[PartitionKey, Any] = {}
    for topic in getattr(response, topics):
        name = getattr(topic, "name", None) or getattr(topic, "topic", None)
        for part in getattr(topic, partitions_field):
            index = getattr(part, "index", None)
            found[(str(name), index if index is not None else part.partition_index)] = part
    return found
