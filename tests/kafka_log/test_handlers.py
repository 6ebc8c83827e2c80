"""Produce, Fetch and ListOffsets through the handlers, in every version served."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from huddle.coordinator.kafka_log import handlers
from huddle.coordinator.kafka_log.handlers import (
    FETCH_VERSIONS,
    LIST_OFFSETS_VERSIONS,
    PRODUCE_VERSIONS,
    NoResponse,
    Wait,
)
from huddle.coordinator.kafka_log.store import LogStore, PartitionKey
from tests.kafka_log.records import (
    BASE_TIME_MS,
    batch,
    fetch_request,
    list_offsets_request,
    partitions,
    produce_request,
    store_of,
    values,
    with_magic,
)

T0 = ("t", 0)


def produce(
    store: LogStore, records: dict[PartitionKey, bytes], version: int = 9, **options: Any
) -> dict[PartitionKey, Any]:
    answer = handlers.produce(store, produce_request(version, records, **options), version)
    assert not isinstance(answer, NoResponse)
    return partitions(answer, "responses", "partition_responses")


def fetch(
    store: LogStore, offsets: dict[PartitionKey, int], version: int = 12, **options: Any
) -> dict[PartitionKey, Any]:
    answer = handlers.fetch(store, fetch_request(version, offsets, **options), version)
    assert not isinstance(answer, Wait)
    return partitions(answer, "responses", "partitions")


def list_offsets(
    store: LogStore, timestamps: dict[PartitionKey, int], version: int = 9
) -> dict[PartitionKey, Any]:
    answer = handlers.list_offsets(store, list_offsets_request(version, timestamps), version)
    return partitions(answer, "topics", "partitions")


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_appends_and_answers_the_base_offset(version: int) -> None:
    store = store_of({"t": 2})
    first = produce(store, {T0: batch([b"a", b"b"]), ("t", 1): batch([b"c"])}, version)
    second = produce(store, {T0: batch([b"d"])}, version)
    assert first[T0].error_code == ErrorCode.none
    assert (first[T0].base_offset, first[("t", 1)].base_offset) == (0, 0)
    assert second[T0].base_offset == 2
    assert second[T0].log_append_time is None  # CreateTime: -1 on the wire
    if version >= 5:
        assert second[T0].log_start_offset == 0
    fetched = fetch(store, {T0: 0})[T0]
    assert values(fetched.records) == [(0, b"a"), (1, b"b"), (2, b"d")]


def test_produce_answers_each_partition_on_its_own() -> None:
    store = store_of({"t": 1})
    answer = produce(store, {T0: batch([b"ok"]), ("gone", 0): batch(), ("t", 5): batch()})
    assert answer[T0].error_code == ErrorCode.none
    assert answer[("gone", 0)].error_code == ErrorCode.unknown_topic_or_partition
    assert answer[("t", 5)].error_code == ErrorCode.unknown_topic_or_partition
    assert answer[("gone", 0)].base_offset == -1


@pytest.mark.parametrize("version", [3, 7, 8, 9])
def test_an_idempotent_producer_is_refused_clearly(version: int) -> None:
    store = store_of({"t": 1})
    answer = produce(store, {T0: batch(producer_id=17)}, version)[T0]
    assert answer.error_code == ErrorCode.invalid_record
    if version >= 8:  # the message reaches the client from v8
        assert "idempotent" in answer.error_message
    assert store.log("t", 0).log_end == 0


def test_transactions_are_refused() -> None:
    store = store_of({"t": 1})
    answer = produce(store, {T0: batch()}, transactional_id="tx")[T0]
    assert answer.error_code == ErrorCode.invalid_record
    assert "transactions" in answer.error_message


def test_old_message_formats_are_refused() -> None:
    store = store_of({"t": 1})
    answer = produce(store, {T0: with_magic(batch(), 1)})[T0]
    assert answer.error_code == ErrorCode.unsupported_for_message_format


def test_a_refused_produce_keeps_no_partition() -> None:
    store = store_of({"t": 1000})
    refused = produce(store, {("t", p): with_magic(batch(), 1) for p in range(1000)})
    assert {a.error_code for a in refused.values()} == {ErrorCode.unsupported_for_message_format}
    assert store.partitions() == []


def test_invalid_acks_are_refused() -> None:
    store = store_of({"t": 1})
    assert produce(store, {T0: batch()}, acks=2)[T0].error_code == ErrorCode.invalid_required_acks
    assert store.log("t", 0).log_end == 0


def test_acks_0_gets_no_response_and_a_close_when_refused() -> None:
    store = store_of({"t": 1})
    kept = handlers.produce(store, produce_request(9, {T0: batch()}, acks=0), 9)
    assert kept == NoResponse(close=False)
    assert store.log("t", 0).log_end == 1
    refused = handlers.produce(store, produce_request(9, {("x", 0): batch()}, acks=0), 9)
    assert refused == NoResponse(close=True)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_from_the_middle_in_every_version(version: int) -> None:
    store = store_of({"t": 1})
    for records in ([b"a", b"b"], [b"c", b"d"], [b"e"]):
        produce(store, {T0: batch(records)})
    answer = fetch(store, {T0: 3}, version)[T0]
    assert answer.error_code == ErrorCode.none
    assert answer.high_watermark == 5
    assert answer.last_stable_offset == 5
    assert values(answer.records) == [(2, b"c"), (3, b"d"), (4, b"e")]
    if version >= 5:
        assert answer.log_start_offset == 0


@pytest.mark.parametrize("version", [4, 12])
def test_fetch_errors_per_partition(version: int) -> None:
    store = store_of({"t": 1})
    produce(store, {T0: batch([b"a"])})
    answer = fetch(store, {T0: 7, ("nope", 0): 0}, version)
    assert answer[T0].error_code == ErrorCode.offset_out_of_range
    assert answer[T0].high_watermark == -1
    assert answer[T0].records == b""
    assert answer[("nope", 0)].error_code == ErrorCode.unknown_topic_or_partition


def test_fetch_gives_the_first_batch_over_the_limits_and_no_more() -> None:
    store = store_of({"t": 2})
    produce(store, {T0: batch([b"x" * 500]), ("t", 1): batch([b"y" * 500])})
    answer = fetch(store, {T0: 0, ("t", 1): 0}, max_bytes=100, partition_max_bytes=100)
    assert values(answer[T0].records) == [(0, b"x" * 500)]
    assert answer[("t", 1)].records == b""  # over what is left; the next Fetch gets it
    assert answer[("t", 1)].high_watermark == 1


def test_fetch_waits_only_when_asked_and_short_of_min_bytes() -> None:
    store = store_of({"t": 1})
    request = fetch_request(12, {T0: 0}, max_wait_ms=500, min_bytes=1)
    wait = handlers.fetch(store, request, 12)
    assert isinstance(wait, Wait)
    assert wait.offsets == {T0: 0}
    assert wait.keys == {T0}
    assert wait.max_wait == 0.5
    assert not isinstance(handlers.fetch(store, request, 12, final=True), Wait)
    no_wait = fetch_request(12, {T0: 0}, max_wait_ms=0)
    assert not isinstance(handlers.fetch(store, no_wait, 12), Wait)
    produce(store, {T0: batch([b"a"])})
    assert not isinstance(handlers.fetch(store, request, 12), Wait)  # min_bytes are there
    big = fetch_request(12, {T0: 0}, max_wait_ms=500, min_bytes=1 << 20)
    assert isinstance(handlers.fetch(store, big, 12), Wait)
    error = fetch_request(12, {T0: 0, ("nope", 0): 0}, max_wait_ms=500, min_bytes=1 << 20)
    assert not isinstance(handlers.fetch(store, error, 12), Wait)  # an error answers now


@pytest.mark.parametrize("version", LIST_OFFSETS_VERSIONS)
def test_list_offsets_earliest_and_latest(version: int) -> None:
    size = len(batch([b"x"]))
    store = store_of({"t": 1}, max_batch_bytes=size, max_partition_bytes=2 * size)
    assert (list_offsets(store, {T0: -2}, version)[T0].offset) == 0
    for _ in range(3):
        produce(store, {T0: batch([b"x"])})
    answer = list_offsets(store, {T0: -2, ("t", 1): -1}, version)
    assert answer[T0].error_code == ErrorCode.none
    assert answer[T0].offset == 1  # the oldest batch was dropped
    assert answer[T0].timestamp == -1
    assert answer[("t", 1)].error_code == ErrorCode.unknown_topic_or_partition
    assert list_offsets(store, {T0: -1}, version)[T0].offset == 3


@pytest.mark.parametrize("version", [1, 7, 9])
def test_list_offsets_by_timestamp(version: int) -> None:
    store = store_of({"t": 1})
    produce(store, {T0: batch([b"a", b"b"], timestamp_ms=BASE_TIME_MS)})
    produce(store, {T0: batch([b"c"], timestamp_ms=BASE_TIME_MS + 1000)})
    found = list_offsets(store, {T0: BASE_TIME_MS + 500}, version)[T0]
    assert (found.offset, found.timestamp) == (2, BASE_TIME_MS + 1000)
    assert list_offsets(store, {T0: BASE_TIME_MS + 5000}, version)[T0].offset == -1
    newest = list_offsets(store, {T0: -3}, version)[T0]
    if version >= 7:
        assert (newest.offset, newest.timestamp) == (2, BASE_TIME_MS + 1000)


def test_list_offsets_of_tiered_storage_without_it() -> None:
    store = store_of({"t": 1})
    produce(store, {T0: batch([b"a"])})
    assert list_offsets(store, {T0: -4})[T0].offset == 0  # earliest local: the log start
    assert list_offsets(store, {T0: -5})[T0].offset == -1  # latest tiered: nothing tiered


def test_versions_not_served_are_a_programming_error() -> None:
    store = store_of({"t": 1})
    with pytest.raises(ValueError, match="Fetch v13 is not served"):
        handlers.fetch(store, fetch_request(12, {T0: 0}), 13)
