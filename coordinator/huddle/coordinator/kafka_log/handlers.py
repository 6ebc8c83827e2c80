"""Produce, Fetch and ListOffsets over the log's store (sans-IO).

Each handler takes the request as kio decoded it for its API version and returns kio's
response class for that version (``kio.schema.<api>.v<N>.response``), ready for kio's
encoder. Versions served: ``PRODUCE_VERSIONS``, ``FETCH_VERSIONS`` (without topic ids:
Fetch 13+ names topics by id) and ``LIST_OFFSETS_VERSIONS``; message format v2 needs
Produce 3+ and Fetch 4+.

Two answers are not responses:

- ``NoResponse``: a Produce with acks=0. The wire sends nothing for it (the client reads
  no response; the connection's later responses keep their order). When a partition was
  refused, ``close`` is set: the wire closes the connection after the responses before
  it are sent, as Kafka does, since that is the only way such a client learns of it.
- ``Wait``: a Fetch with nothing to answer yet (fewer than ``min_bytes`` ready, no error,
  ``max_wait_ms`` above 0). ``waiting.fetch`` waits until one of its partitions grows or
  ``max_wait`` passes, and answers with what is there then (``final=True``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog
from kio.schema.errors import ErrorCode
from kio.static.protocol import ResponsePayload

from huddle.coordinator.kafka_log.batches import LogError, split_batches
from huddle.coordinator.kafka_log.shapes import (
    FETCH,
    LIST_OFFSETS,
    PRODUCE,
    FetchRequest,
    ListOffsetsRequest,
    ProducePartition,
    ProduceRequest,
    build,
    response,
)
from huddle.coordinator.kafka_log.store import LogStore, PartitionKey
from huddle.protocol.errors import InvalidArgumentError

log = structlog.get_logger("huddle.kafka_log")

PRODUCE_VERSIONS = range(3, 10)
FETCH_VERSIONS = range(4, 13)  # by name; 13+ by topic id: ``kafka.by_id``
LIST_OFFSETS_VERSIONS = range(1, 10)

EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3  # ListOffsets v7+
EARLIEST_LOCAL = -4  # v8+: no tiered storage, so the log start
LATEST_TIERED = -5  # v9+: nothing is tiered, so none (-1)
NO_TIMESTAMP = -1
UNKNOWN_OFFSET = -1
NO_THROTTLE = timedelta(0)


@dataclass(frozen=True, slots=True)
class NoResponse:
    """A Produce with acks=0: send nothing; close the connection if ``close``."""

    close: bool


@dataclass(frozen=True, slots=True)
class Wait:
    """A Fetch to answer later: when a partition of ``offsets`` (each with the offset the
    Fetch reads from) grows, or ``max_wait`` seconds after the request arrived."""

    offsets: Mapping[PartitionKey, int]
    max_wait: float
    min_bytes: int
    ready_bytes: int

    @property
    def keys(self) -> frozenset[PartitionKey]:
        return frozenset(self.offsets)


def _check_version(name: str, version: int, served: range) -> None:
    if version not in served:
        raise InvalidArgumentError(f"{name} v{version} is not served (v{served[0]}-{served[-1]})")


def produce(store: LogStore, request: ProduceRequest, version: int) -> ResponsePayload | NoResponse:
    _check_version("Produce", version, PRODUCE_VERSIONS)
    refused = False
    topics = []
    for topic in request.topic_data:
        partitions = []
        for data in topic.partition_data:
            code, base_offset, log_start, message = ErrorCode.none, UNKNOWN_OFFSET, -1, None
            try:
                base_offset, log_start = _append(store, request, version, topic.name, data)
            except LogError as error:
                code, message, refused = error.code, error.message, True
                log.info(
                    "kafka_log.produce_refused",
                    topic=topic.name,
                    partition=data.index,
                    error=code.name,
                    reason=message,
                )
            partitions.append(
                build(
                    PRODUCE,
                    version,
                    "PartitionProduceResponse",
                    index=data.index,
                    error_code=code,
                    base_offset=base_offset,
                    log_append_time=None,
                    log_start_offset=log_start,
                    record_errors=(),
                    error_message=message,
                )
            )
        topics.append(
            build(
                PRODUCE,
                version,
                "TopicProduceResponse",
                name=topic.name,
                partition_responses=tuple(partitions),
            )
        )
    if request.acks == 0:
        return NoResponse(close=refused)
    return response(
        PRODUCE, version, "ProduceResponse", responses=tuple(topics), throttle_time=NO_THROTTLE
    )


def _append(
    store: LogStore, request: ProduceRequest, version: int, topic: str, data: ProducePartition
) -> tuple[int, int]:
    """Append one partition's batches: (base offset, log start) or a LogError."""
    if request.acks not in (-1, 0, 1):
        raise LogError(ErrorCode.invalid_required_acks, f"acks={request.acks} (use -1, 0 or 1)")
    if request.transactional_id is not None:
        raise LogError(ErrorCode.invalid_record, "transactions are not supported")
    # UNKNOWN_TOPIC_OR_PARTITION before the batches (a refused one keeps no partition)
    store.log(topic, data.index, create=False)
    batches = split_batches(data.records or b"", zstd_allowed=version >= 7)
    base_offset = store.append(topic, data.index, batches)
    return base_offset, store.log(topic, data.index).log_start


def list_offsets(store: LogStore, request: ListOffsetsRequest, version: int) -> ResponsePayload:
    _check_version("ListOffsets", version, LIST_OFFSETS_VERSIONS)
    topics = []
    for topic in request.topics:
        partitions = []
        for asked in topic.partitions:
            code, timestamp, offset = ErrorCode.none, NO_TIMESTAMP, UNKNOWN_OFFSET
            try:
                timestamp, offset = _offset(
                    store, topic.name, asked.partition_index, asked.timestamp, version
                )
            except LogError as error:
                code = error.code
            partitions.append(
                build(
                    LIST_OFFSETS,
                    version,
                    "ListOffsetsPartitionResponse",
                    partition_index=asked.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=-1,
                )
            )
        topics.append(
            build(
                LIST_OFFSETS,
                version,
                "ListOffsetsTopicResponse",
                name=topic.name,
                partitions=tuple(partitions),
            )
        )
    return response(
        LIST_OFFSETS,
        version,
        "ListOffsetsResponse",
        topics=tuple(topics),
        throttle_time=NO_THROTTLE,
    )


def _offset(
    store: LogStore, topic: str, partition: int, timestamp: int, version: int
) -> tuple[int, int]:
    """(timestamp, offset) for a ListOffsets partition, as Kafka: the special timestamps
    name the log start or end; any other is a search by time, answered from the batches'
    max timestamps (the first batch with one at or after it: its base offset and its max
    timestamp; none: -1, -1)."""
    target = store.log(topic, partition, create=False)
    if timestamp == EARLIEST or (timestamp == EARLIEST_LOCAL and version >= 8):
        return NO_TIMESTAMP, target.log_start
    if timestamp == LATEST:
        return NO_TIMESTAMP, target.log_end
    if timestamp == LATEST_TIERED and version >= 9:
        return NO_TIMESTAMP, UNKNOWN_OFFSET
    if timestamp == MAX_TIMESTAMP and version >= 7:
        newest = store.max_timestamp_batch(topic, partition)
        if newest is None:
            return NO_TIMESTAMP, UNKNOWN_OFFSET
        return newest.max_timestamp, newest.last_offset
    found = store.offset_for_timestamp(topic, partition, timestamp)
    if found is None:
        return NO_TIMESTAMP, UNKNOWN_OFFSET
    return found.max_timestamp, found.base_offset


def fetch(
    store: LogStore, request: FetchRequest, version: int, *, final: bool = False
) -> ResponsePayload | Wait:
    """Read each partition from its fetch offset, within its ``partition_max_bytes`` and
    the request's ``max_bytes`` (the first batch found is sent even over them, as Kafka
    does, so a consumer always makes progress). Answer now if ``final``, if ``max_wait``
    is 0, if ``min_bytes`` are ready or a partition has an error; else ``Wait``."""
    _check_version("Fetch", version, FETCH_VERSIONS)
    remaining = request.max_bytes
    ready = 0
    failed = False
    waiting: dict[PartitionKey, int] = {}
    topics = []
    for topic in request.topics:
        partitions = []
        for asked in topic.partitions:
            key = (topic.topic, asked.partition)
            try:
                read = store.read(
                    topic.topic,
                    asked.partition,
                    asked.fetch_offset,
                    max(0, min(asked.partition_max_bytes, remaining)),
                    at_least_one=ready == 0,
                )
            except LogError as error:
                failed = True
                partitions.append(_fetched(version, asked.partition, error.code, -1, -1, b""))
                continue
            ready += read.size
            remaining -= read.size
            waiting[key] = asked.fetch_offset
            partitions.append(
                _fetched(
                    version,
                    asked.partition,
                    ErrorCode.none,
                    read.high_watermark,
                    read.log_start,
                    b"".join(read.batches),
                )
            )
        topics.append(
            build(
                FETCH,
                version,
                "FetchableTopicResponse",
                topic=topic.topic,
                partitions=tuple(partitions),
            )
        )
    max_wait = request.max_wait.total_seconds()
    if not (final or failed or max_wait <= 0 or ready >= request.min_bytes or not waiting):
        return Wait(waiting, max_wait, request.min_bytes, ready)
    return response(
        FETCH,
        version,
        "FetchResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,  # no fetch sessions: each Fetch is a full one (KIP-227's "no session")
        responses=tuple(topics),
    )


def _fetched(
    version: int,
    partition: int,
    code: ErrorCode,
    high_watermark: int,
    log_start: int,
    records: bytes,
) -> object:
    return build(
        FETCH,
        version,
        "PartitionData",
        partition_index=partition,
        error_code=code,
        high_watermark=high_watermark,
        last_stable_offset=high_watermark,  # no transactions: everything is stable
        log_start_offset=log_start,
        aborted_transactions=(),
        preferred_read_replica=-1,
        records=records,
    )


def not_kept(answer: ResponsePayload) -> ResponsePayload:
    """A Produce's answer whose batches could not be kept in the data dir: each partition
    that was appended is answered KAFKA_STORAGE_ERROR instead (``waiting.kept``)."""
    produced: Any = answer  # one of kio's ProduceResponse classes
    topics = []
    for topic in produced.responses:
        partitions = []
        for partition in topic.partition_responses:
            if partition.error_code == ErrorCode.none:
                changes: dict[str, object] = {
                    "error_code": ErrorCode.kafka_storage_error,
                    "base_offset": UNKNOWN_OFFSET,
                }
                if "error_message" in {f.name for f in dataclasses.fields(partition)}:
                    changes["error_message"] = "the log could not keep this in its data dir"
                partition = dataclasses.replace(partition, **changes)
            partitions.append(partition)
        topics.append(dataclasses.replace(topic, partition_responses=tuple(partitions)))
    replaced: ResponsePayload = dataclasses.replace(produced, responses=tuple(topics))
    return replaced
