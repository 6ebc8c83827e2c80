"""The log's store: offsets, reads, bounds, and following the topic registry."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from huddle.coordinator.kafka_log.batches import LogError, split_batches
from huddle.coordinator.kafka_log.store import LogStore, PartitionKey
from tests.kafka_log.records import batch, read_batches, store_of, values

UNLIMITED = 1 << 40


def append(store: LogStore, topic: str, partition: int, *records: bytes) -> int:
    return store.append(topic, partition, split_batches(batch(records)))


def test_appends_get_contiguous_offsets_and_the_batches_keep_valid_crcs() -> None:
    store = store_of({"t": 2})
    assert append(store, "t", 0, b"a", b"b") == 0
    assert append(store, "t", 0, b"c") == 2
    assert append(store, "t", 1, b"d") == 0  # each partition counts its own
    read = store.read("t", 0, 0, UNLIMITED, at_least_one=True)
    assert (read.log_start, read.high_watermark) == (0, 3)
    assert values(b"".join(read.batches)) == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_a_read_from_the_middle_starts_with_the_batch_holding_the_offset() -> None:
    store = store_of({"t": 1})
    append(store, "t", 0, b"a", b"b")
    append(store, "t", 0, b"c", b"d", b"e")
    append(store, "t", 0, b"f")
    read = store.read("t", 0, 3, UNLIMITED, at_least_one=True)
    # offset 3 is inside the second batch (2-4): it comes whole, the consumer skips 2
    assert [v for v, _ in values(b"".join(read.batches))] == [2, 3, 4, 5]
    at_end = store.read("t", 0, 6, UNLIMITED, at_least_one=True)
    assert at_end.batches == ()
    assert at_end.high_watermark == 6


def test_reads_stop_at_the_byte_limit_but_give_the_first_batch_anyway() -> None:
    store = store_of({"t": 1})
    for value in (b"a", b"b", b"c"):
        append(store, "t", 0, value * 100)
    size = len(store.read("t", 0, 0, UNLIMITED, at_least_one=True).batches[0])
    assert len(store.read("t", 0, 0, 2 * size, at_least_one=True).batches) == 2
    assert len(store.read("t", 0, 0, 1, at_least_one=True).batches) == 1
    assert store.read("t", 0, 0, 1, at_least_one=False).batches == ()


@pytest.mark.parametrize("offset", [-1, 4, 100])
def test_offsets_outside_the_log_are_out_of_range(offset: int) -> None:
    store = store_of({"t": 1})
    append(store, "t", 0, b"a", b"b", b"c")
    with pytest.raises(LogError) as refused:
        store.read("t", 0, offset, UNLIMITED, at_least_one=True)
    assert refused.value.code == ErrorCode.offset_out_of_range


def test_the_partition_bound_drops_the_oldest_and_moves_the_log_start() -> None:
    size = len(batch([b"x" * 100]))
    store = store_of({"t": 1}, max_batch_bytes=size, max_partition_bytes=3 * size)
    for index in range(5):
        append(store, "t", 0, b"%d" % index + b"x" * 99)
    read = store.read("t", 0, 2, UNLIMITED, at_least_one=True)
    assert (read.log_start, read.high_watermark) == (2, 5)
    assert [v for v, _ in values(b"".join(read.batches))] == [2, 3, 4]
    assert store.total_bytes == 3 * size
    with pytest.raises(LogError) as refused:
        store.read("t", 0, 1, UNLIMITED, at_least_one=True)
    assert refused.value.code == ErrorCode.offset_out_of_range


def test_the_total_bound_drops_the_oldest_batch_of_any_partition() -> None:
    size = len(batch([b"x"]))
    store = store_of(
        {"t": 2}, max_batch_bytes=size, max_partition_bytes=3 * size, max_total_bytes=3 * size
    )
    append(store, "t", 0, b"1")  # the oldest: dropped first
    append(store, "t", 1, b"2")
    append(store, "t", 0, b"3")
    append(store, "t", 1, b"4")
    assert store.log("t", 0).log_start == 1
    assert store.log("t", 1).log_start == 0
    append(store, "t", 0, b"5")
    assert store.log("t", 1).log_start == 1
    assert store.total_bytes == 3 * size


def test_a_batch_over_the_batch_bound_is_too_large() -> None:
    store = store_of({"t": 1}, max_batch_bytes=100)
    with pytest.raises(LogError) as refused:
        append(store, "t", 0, b"x" * 200)
    assert refused.value.code == ErrorCode.message_too_large
    assert store.log("t", 0).log_end == 0


def test_bounds_must_nest() -> None:
    with pytest.raises(ValueError, match="bounds"):
        LogStore(lambda _: 1, max_batch_bytes=10, max_partition_bytes=5)


def test_unknown_topics_and_partitions() -> None:
    store = store_of({"t": 2})
    for topic, partition in [("nope", 0), ("t", 2), ("t", -1)]:
        with pytest.raises(LogError) as refused:
            store.log(topic, partition)
        assert refused.value.code == ErrorCode.unknown_topic_or_partition


def test_the_store_follows_the_registry() -> None:
    registry = {"t": 2}
    store = store_of(registry)
    append(store, "t", 0, b"a")
    append(store, "t", 1, b"b")
    registry["t"] = 1  # lowered: partition 1 is forgotten
    with pytest.raises(LogError):
        store.log("t", 1)
    registry["t"] = 3  # raised again: new, empty partitions
    assert store.log("t", 1).log_end == 0
    assert store.log("t", 2).log_end == 0
    assert store.log("t", 0).log_end == 1
    del registry["t"]  # deleted: its log is forgotten
    with pytest.raises(LogError):
        store.log("t", 0)
    assert store.total_bytes == 0
    registry["t"] = 1  # created again: empty
    assert store.log("t", 0).log_end == 0


def test_topic_changed_forgets_a_deleted_topic_at_once_and_wakes_its_readers() -> None:
    registry = {"t": 1}
    store = store_of(registry)
    woken: list[PartitionKey | str] = []
    store.append_hooks.append(woken.append)
    store.topic_hooks.append(woken.append)
    append(store, "t", 0, b"a")
    del registry["t"]
    store.topic_changed("t")  # the server says so when the registry deletes it
    assert woken == [("t", 0), "t"]  # the append, then the change
    assert store.total_bytes == 0
    registry["t"] = 1  # created again before the log is read: empty
    assert store.log("t", 0).log_end == 0


def test_a_topic_made_again_between_two_reads_starts_empty_by_its_new_id() -> None:
    """Deleted and created again with the same partitions, and nobody told the log (a
    cluster node hears of it by etcd's watch): its new id says it is another topic."""
    registry = {"t": 2}
    ids = {"t": uuid.uuid4()}
    store = LogStore(registry.get, topic_ids=ids.get)
    append(store, "t", 0, b"a", b"b")
    append(store, "t", 1, b"c")
    assert store.log("t", 0).log_end == 2
    ids["t"] = uuid.uuid4()  # deleted and made again since the last access
    assert store.log("t", 0).log_end == 0
    assert store.log("t", 1).log_end == 0
    assert store.total_bytes == 0
    assert append(store, "t", 0, b"d") == 0
    assert store.log("t", 0).log_end == 1  # the same id: kept


def test_timestamps_are_found_by_batch() -> None:
    store = store_of({"t": 1})
    store.append("t", 0, split_batches(batch([b"a", b"b"], timestamp_ms=1000)))  # 1000-1001
    store.append("t", 0, split_batches(batch([b"c"], timestamp_ms=5000)))
    store.append("t", 0, split_batches(batch([b"d"], timestamp_ms=3000)))
    found = store.offset_for_timestamp("t", 0, 1001)
    assert found is not None
    assert (found.base_offset, found.max_timestamp) == (0, 1001)
    found = store.offset_for_timestamp("t", 0, 1002)
    assert found is not None
    assert found.base_offset == 2
    assert store.offset_for_timestamp("t", 0, 6000) is None
    newest = store.max_timestamp_batch("t", 0)
    assert newest is not None
    assert (newest.last_offset, newest.max_timestamp) == (2, 5000)


@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 4), st.integers(1, 300)),
        min_size=1,
        max_size=40,
    ),
    st.integers(0, 1 << 30),
    st.integers(1, 5000),
)
def test_offsets_stay_contiguous_and_reads_start_at_the_offsets_batch(
    appends: list[tuple[int, int, int]], pick: int, max_bytes: int
) -> None:
    """Whatever is appended and dropped, each partition's batches cover [log start, log
    end) without a gap, and a read from any offset in it starts with the batch holding it."""
    store = store_of({"t": 3}, max_batch_bytes=2000, max_partition_bytes=3000, max_total_bytes=6000)
    for partition, count, size in appends:
        append(store, "t", partition, *[b"v" * size] * count)
    for partition in range(3):
        target = store.log("t", partition)
        everything = store.read("t", partition, target.log_start, 1 << 30, at_least_one=True)
        offsets = [r.offset for b in read_batches(b"".join(everything.batches)) for r in b.records]
        assert offsets == list(range(target.log_start, target.log_end))
        assert (
            store.read("t", partition, target.log_end, max_bytes, at_least_one=True).batches == ()
        )
        if target.log_end == target.log_start:
            continue
        offset = target.log_start + pick % (target.log_end - target.log_start)
        read = store.read("t", partition, offset, max_bytes, at_least_one=True)
        first = read_batches(read.batches[0])[0]
        assert first.base_offset <= offset <= first.base_offset + first.last_offset_delta
        assert read.size <= max_bytes or len(read.batches) == 1
    assert store.total_bytes <= 6000


def test_reading_a_partition_never_written_keeps_nothing() -> None:
    """A Fetch or ListOffsets of a partition never appended to reads an empty log without
    keeping one: a Fetch of a million untouched partitions grew the server by 440 MB that
    no bound counted."""
    store = store_of({"t": 10_000})
    for index in range(10_000):
        read = store.read("t", index, 0, 1024, at_least_one=True)
        assert (read.log_start, read.high_watermark) == (0, 0)
        assert store.offset_for_timestamp("t", index, 0) is None
        assert store.max_timestamp_batch("t", index) is None
    assert store.partitions() == []
    append(store, "t", 3, b"a")
    assert store.partitions() == [("t", 3)]
    assert store.read("t", 3, 0, 1024, at_least_one=True).high_watermark == 1
