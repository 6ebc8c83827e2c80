"""The log kept in a data dir: read back at a start, damage cut off, segment files dropped
with the bounds, a deleted topic's files removed."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from structlog.typing import EventDict

from huddle.coordinator.kafka_log.batches import LogError, split_batches
from huddle.coordinator.kafka_log.disk import LogDisk
from huddle.coordinator.kafka_log.segments import FORMAT_FILE, LOG_DIR, segment_files
from huddle.coordinator.kafka_log.store import LogStore
from huddle.coordinator.storage.journal import DataDirError
from tests.kafka_log.records import batch, values

UNLIMITED = 1 << 40
SIZE = len(batch([b"x" * 100]))  # one batch of one 100-byte record


def open_store(data_dir: Path, registry: dict[str, int], **bounds: int) -> LogStore:
    options: dict[str, Any] = dict(bounds)  # max_*_bytes, segment_bytes
    return LogStore(registry.get, disk=LogDisk.open(data_dir), **options)


def append(store: LogStore, partition: int, value: bytes, topic: str = "t") -> int:
    return store.append(topic, partition, split_batches(batch([value])))


def everything(store: LogStore, partition: int, topic: str = "t") -> tuple[int, int, bytes]:
    target = store.log(topic, partition)
    read = store.read(topic, partition, target.log_start, UNLIMITED, at_least_one=True)
    return read.log_start, read.high_watermark, b"".join(read.batches)


def files(data_dir: Path, topic: str = "t", partition: int = 0) -> list[str]:
    directory = data_dir / LOG_DIR / f"{topic}-{partition}"
    return [path.name for _, path in segment_files(directory)] if directory.exists() else []


def test_a_restart_keeps_the_batches_and_the_log_start_and_end(tmp_path: Path) -> None:
    registry = {"t": 2}
    bounds = {"max_batch_bytes": SIZE, "max_partition_bytes": 5 * SIZE, "segment_bytes": 2 * SIZE}
    store = open_store(tmp_path, registry, **bounds)
    for index in range(7):  # segments 0-1, 2-3, 4-5, 6: the first is dropped by the bound
        append(store, 0, b"%d" % index + b"x" * 99)
    append(store, 1, b"y" * 100)
    before = [everything(store, partition) for partition in (0, 1)]
    assert before[0][:2] == (2, 7)
    store.close()

    again = open_store(tmp_path, registry, **bounds)
    assert [everything(again, partition) for partition in (0, 1)] == before
    assert [v for v, _ in values(before[0][2])] == [2, 3, 4, 5, 6]
    assert again.total_bytes == 6 * SIZE
    assert append(again, 0, b"next") == 7  # offsets go on from the log end
    after = everything(again, 0)
    assert after[:2] == (4, 8)  # over the bound again: segment 2-3 went
    again.close()
    assert everything(open_store(tmp_path, registry, **bounds), 0) == after


def test_a_partition_emptied_by_the_total_bound_keeps_its_log_end(tmp_path: Path) -> None:
    registry = {"t": 2}
    bounds = {"max_batch_bytes": SIZE, "max_partition_bytes": SIZE, "max_total_bytes": SIZE}
    store = open_store(tmp_path, registry, **bounds)
    append(store, 0, b"a" * 100)
    append(store, 0, b"b" * 100)
    append(store, 1, b"c" * 100)  # partition 0's last batch goes: it is empty, at offset 2
    assert everything(store, 0) == (2, 2, b"")
    assert files(tmp_path) == [f"{2:020d}.log"]  # an empty active segment keeps the end
    store.close()
    assert everything(open_store(tmp_path, registry, **bounds), 0) == (2, 2, b"")


def test_the_bounds_drop_whole_segment_files(tmp_path: Path) -> None:
    bounds = {"max_batch_bytes": SIZE, "max_partition_bytes": 6 * SIZE, "segment_bytes": 2 * SIZE}
    store = open_store(tmp_path, {"t": 1}, **bounds)
    for index in range(13):
        append(store, 0, b"%02d" % index + b"x" * 98)
        target = store.log("t", 0)
        on_disk = files(tmp_path)
        assert on_disk == [f"{s.base:020d}.log" for s in target.segments]
        assert on_disk[0] == f"{target.log_start:020d}.log"
        assert target.bytes <= 6 * SIZE
    assert files(tmp_path) == [f"{base:020d}.log" for base in (8, 10, 12)]
    sizes = [path.stat().st_size for _, path in segment_files(tmp_path / LOG_DIR / "t-0")]
    assert sizes == [2 * SIZE, 2 * SIZE, SIZE]


def test_a_restart_with_lower_bounds_drops_old_segments(tmp_path: Path) -> None:
    store = open_store(tmp_path, {"t": 1}, segment_bytes=2 * SIZE)
    for index in range(6):
        append(store, 0, b"%d" % index + b"x" * 99)
    store.close()
    bounds = {"max_batch_bytes": SIZE, "max_partition_bytes": 3 * SIZE, "segment_bytes": 2 * SIZE}
    again = open_store(tmp_path, {"t": 1}, **bounds)
    assert everything(again, 0)[:2] == (4, 6)
    assert files(tmp_path) == [f"{4:020d}.log"]


def test_a_torn_tail_is_cut_off_and_logged(tmp_path: Path, logs: list[EventDict]) -> None:
    store = open_store(tmp_path, {"t": 1})
    append(store, 0, b"a" * 100)
    append(store, 0, b"b" * 100)
    before = everything(store, 0)
    store.close()
    segment = tmp_path / LOG_DIR / "t-0" / f"{0:020d}.log"
    with segment.open("ab") as file:  # a crash in the middle of the third batch's write
        file.write(batch([b"c" * 100])[:40])

    again = open_store(tmp_path, {"t": 1})
    assert everything(again, 0) == before
    assert segment.stat().st_size == 2 * SIZE
    (event,) = [e for e in logs if e["event"] == "kafka_log.truncated"]
    assert event["torn_tail"] is True
    assert event["dropped_bytes"] == 40
    assert event["log_level"] == "warning"
    assert append(again, 0, b"c") == 2


def test_a_zero_filled_tail_is_a_torn_tail(tmp_path: Path, logs: list[EventDict]) -> None:
    store = open_store(tmp_path, {"t": 1})
    append(store, 0, b"a")
    store.close()
    segment = tmp_path / LOG_DIR / "t-0" / f"{0:020d}.log"
    with segment.open("ab") as file:  # the file grew, its data never landed
        file.write(bytes(4096))
    assert everything(open_store(tmp_path, {"t": 1}), 0)[:2] == (0, 1)
    (event,) = [e for e in logs if e["event"] == "kafka_log.truncated"]
    assert (event["torn_tail"], event["dropped_bytes"]) == (True, 4096)


def test_a_bad_crc_in_the_middle_cuts_the_log_from_there(
    tmp_path: Path, logs: list[EventDict]
) -> None:
    """As Kafka's log recovery: the log ends before the first invalid batch; the segments
    after it go, and their offsets are given again to the next appends."""
    bounds = {"segment_bytes": 2 * SIZE}
    store = open_store(tmp_path, {"t": 1}, **bounds)
    for index in range(6):  # segments 0-1, 2-3, 4-5
        append(store, 0, b"%d" % index + b"x" * 99)
    store.close()
    second = tmp_path / LOG_DIR / "t-0" / f"{2:020d}.log"
    data = bytearray(second.read_bytes())
    data[SIZE + 70] ^= 0xFF  # a record of offset 3, the second segment's second batch
    second.write_bytes(bytes(data))

    again = open_store(tmp_path, {"t": 1}, **bounds)
    start, end, kept = everything(again, 0)
    assert (start, end) == (0, 3)
    assert [v for v, _ in values(kept)] == [0, 1, 2]
    assert files(tmp_path) == [f"{0:020d}.log", f"{2:020d}.log"]
    (event,) = [e for e in logs if e["event"] == "kafka_log.truncated"]
    assert "CRC32C" in event["problem"]
    assert (event["torn_tail"], event["log_level"]) == (False, "error")
    assert event["dropped_bytes"] == 3 * SIZE  # the damaged batch and the last segment
    assert event["dropped_segments"] == 1
    assert append(again, 0, b"again") == 3


def test_a_deleted_topics_files_go_and_a_new_topic_of_its_name_starts_empty(
    tmp_path: Path,
) -> None:
    registry = {"t": 2, "u": 1}
    store = open_store(tmp_path, registry)
    append(store, 0, b"a")
    append(store, 1, b"b")
    append(store, 0, b"c", topic="u")
    del registry["t"]
    store.topic_changed("t")  # the server says so when the registry deletes it
    assert not (tmp_path / LOG_DIR / "t-0").exists()
    assert not (tmp_path / LOG_DIR / "t-1").exists()
    registry["t"] = 1  # created again: a fresh log
    assert everything(store, 0) == (0, 0, b"")
    assert append(store, 0, b"new") == 0
    store.close()
    again = open_store(tmp_path, registry)
    assert [v for _, v in values(everything(again, 0)[2])] == [b"new"]
    assert [v for _, v in values(everything(again, 0, topic="u")[2])] == [b"c"]


def test_partitions_the_registry_lost_while_stopped_are_removed_at_the_start(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path, {"t": 2, "gone": 1})
    append(store, 0, b"a")
    append(store, 1, b"b")
    append(store, 0, b"c", topic="gone")
    store.close()
    again = open_store(tmp_path, {"t": 1})  # a crash before the files followed the registry
    assert sorted(p.name for p in (tmp_path / LOG_DIR).iterdir()) == [FORMAT_FILE, "t-0"]
    assert everything(again, 0)[:2] == (0, 1)


def test_a_second_open_and_an_unknown_format_are_refused(tmp_path: Path) -> None:
    disk = LogDisk.open(tmp_path)
    with pytest.raises(DataDirError, match="in use"):
        LogDisk.open(tmp_path)
    disk.close()
    (tmp_path / LOG_DIR / FORMAT_FILE).write_text("2\n")
    with pytest.raises(DataDirError, match="format '2'"):
        LogDisk.open(tmp_path)


def test_a_failed_write_refuses_the_append_and_later_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path, {"t": 1})
    append(store, 0, b"a")

    def no_space(*_: object) -> int:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr("os.pwrite", no_space)
        with pytest.raises(LogError) as refused:
            append(store, 0, b"b")
    assert refused.value.code == ErrorCode.kafka_storage_error
    assert everything(store, 0)[:2] == (0, 1)  # nothing in memory that is not on disk
    with pytest.raises(LogError) as again:
        append(store, 0, b"c")
    assert again.value.code == ErrorCode.kafka_storage_error
    store.close()
    assert everything(open_store(tmp_path, {"t": 1}), 0)[:2] == (0, 1)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.integers(0, 2), st.integers(1, 3), st.integers(1, 300)),
            st.just("restart"),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_what_a_restart_reads_back_is_what_was_there(
    steps: list[tuple[int, int, int] | str],
) -> None:
    """Whatever is appended and dropped, a restart serves the same batches, log starts and
    log ends, and each partition's files are its segments."""
    bounds = {"max_batch_bytes": 2000, "max_partition_bytes": 3000, "max_total_bytes": 6000}
    registry = {"t": 3}
    with tempfile.TemporaryDirectory() as directory:
        data_dir = Path(directory)
        store = open_store(data_dir, registry, **bounds)
        for step in steps:
            if isinstance(step, tuple):
                partition, count, size = step
                store.append("t", partition, split_batches(batch([b"v" * size] * count)))
                continue
            before = [everything(store, partition) for partition in range(3)]
            store.close()
            store = open_store(data_dir, registry, **bounds)
            assert [everything(store, partition) for partition in range(3)] == before
            for partition in range(3):
                on_disk = files(data_dir, partition=partition)
                segments = store.log("t", partition).segments
                assert on_disk in ([], [f"{s.base:020d}.log" for s in segments])
        assert store.total_bytes <= 6000
        store.close()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 300), min_size=1, max_size=12),
    st.integers(0, 1 << 30),
    st.sampled_from(["flip", "cut", "zeros"]),
)
def test_damage_anywhere_leaves_an_intact_prefix(sizes: list[int], pick: int, damage: str) -> None:
    """Whatever byte is damaged or wherever a file is cut, a start keeps the batches before
    the damage, unchanged, and a second start finds nothing more to cut."""
    bounds = {"segment_bytes": 600}
    registry = {"t": 1}
    with tempfile.TemporaryDirectory() as directory:
        data_dir = Path(directory)
        store = open_store(data_dir, registry, **bounds)
        for size in sizes:
            append(store, 0, b"v" * size)
        start, _, before = everything(store, 0)
        store.close()
        paths = [path for _, path in segment_files(data_dir / LOG_DIR / "t-0")]
        path = paths[pick % len(paths)]
        data = bytearray(path.read_bytes())
        if data:
            at = pick % len(data)
            if damage == "flip":
                data[at] ^= 0x01
            elif damage == "cut":
                del data[at:]
            else:
                data[at:] = bytes(len(data) - at)
            path.write_bytes(bytes(data))

        once = open_store(data_dir, registry, **bounds)
        after = everything(once, 0)
        once.close()
        assert after[0] == start
        assert before.startswith(after[2])
        assert after[1] == start + len(values(after[2]))  # one record a batch
        twice = open_store(data_dir, registry, **bounds)
        assert everything(twice, 0) == after
        twice.close()
