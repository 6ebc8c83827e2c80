"""With --fsync: a Produce is answered once its batches are forced to disk, off the loop;
a sync that fails answers KAFKA_STORAGE_ERROR and leaves the log read-only."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from huddle.coordinator.kafka_log import handlers, waiting
from huddle.coordinator.kafka_log.batches import split_batches
from huddle.coordinator.kafka_log.disk import LogDisk
from huddle.coordinator.kafka_log.store import LogStore
from tests.kafka_log.records import batch, partitions, produce_request

T0, T1 = ("t", 0), ("t", 1)


def fsynced(data_dir: Path, registry: dict[str, int]) -> LogStore:
    return LogStore(registry.get, disk=LogDisk.open(data_dir, fsync=True))


def produced(answer: object) -> dict[tuple[str, int], Any]:
    return partitions(answer, "responses", "partition_responses")


async def test_a_produce_is_answered_once_its_batches_are_synced_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = fsynced(tmp_path, {"t": 2})
    assert store.disk is not None
    synced_on: list[str] = []
    real = os.fdatasync

    def recording(fd: int) -> None:
        synced_on.append(threading.current_thread().name)
        real(fd)

    monkeypatch.setattr("os.fdatasync", recording)
    request = produce_request(9, {T0: batch([b"a"]), T1: batch([b"b"])}, acks=-1)
    answer = handlers.produce(store, request, 9)
    assert store.unkept  # appended (readable), not yet on the disk
    assert store.disk.syncs == 0
    kept = await waiting.kept(store, answer)  # type: ignore[arg-type]
    assert kept is answer
    assert not store.unkept
    assert store.disk.syncs == 1  # both partitions in the one pass's sync
    assert len(synced_on) == 2  # each segment file, off the loop (several at once)
    assert all(name.startswith("huddle-kafka-log") for name in synced_on)
    assert await waiting.kept(store, answer) is answer  # nothing more to wait for
    store.close()


async def test_a_failed_sync_answers_storage_errors_and_refuses_later_produces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = fsynced(tmp_path, {"t": 2})

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("os.fdatasync", failing)
    request = produce_request(9, {T0: batch([b"a"]), T1: batch([b"b"])}, acks=-1)
    answer = handlers.produce(store, request, 9)
    assert produced(answer)[T0].error_code == ErrorCode.none
    kept = await waiting.kept(store, answer)  # type: ignore[arg-type]
    for key in (T0, T1):  # one file synced on the writer thread, the other on a helper
        part = produced(kept)[key]
        assert part.error_code == ErrorCode.kafka_storage_error
        assert part.base_offset == -1
        assert part.error_message
    later = handlers.produce(store, produce_request(9, {T1: batch([b"b"])}, acks=-1), 9)
    assert produced(later)[T1].error_code == ErrorCode.kafka_storage_error
    store.close()


async def test_without_fsync_nothing_waits(tmp_path: Path) -> None:
    store = LogStore({"t": 1}.get, disk=LogDisk.open(tmp_path))
    answer = handlers.produce(store, produce_request(3, {T0: batch([b"a"])}), 3)
    assert not store.unkept
    assert await waiting.kept(store, answer) is answer  # type: ignore[arg-type]
    assert store.disk is not None
    assert store.disk.syncs == 0
    store.close()


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_segments_rolled_and_dropped_within_a_pass_are_synced_and_closed(
    tmp_path: Path,
) -> None:
    before = open_descriptors()
    size = len(batch([b"x" * 100]))
    disk = LogDisk.open(tmp_path, fsync=True)
    store = LogStore(
        {"t": 1}.get,
        disk=disk,
        max_batch_bytes=size,
        max_partition_bytes=2 * size,
        segment_bytes=size,
    )
    answers = [
        handlers.produce(store, produce_request(9, {T0: batch([b"%d" % i * 100])}), 9)
        for i in range(5)  # one segment each; the bound keeps two
    ]
    assert store.unkept
    for answer in answers:
        assert await waiting.kept(store, answer) is answer  # type: ignore[arg-type]
    assert disk.syncs == 1  # one pass, one sync
    assert (store.log("t", 0).log_start, store.log("t", 0).log_end) == (3, 5)
    store.close()
    assert open_descriptors() == before
    again = LogStore(
        {"t": 1}.get,
        disk=LogDisk.open(tmp_path, fsync=True),
        max_partition_bytes=2 * size,
        max_batch_bytes=size,
    )
    assert (again.log("t", 0).log_start, again.log("t", 0).log_end) == (3, 5)
    again.close()


def test_a_start_outside_the_loop_syncs_what_it_drops_at_once(tmp_path: Path) -> None:
    size = len(batch([b"x" * 100]))
    store = LogStore({"t": 1}.get, disk=LogDisk.open(tmp_path), segment_bytes=size)
    for index in range(4):
        store.append("t", 0, split_batches(batch([b"%d" % index * 100])))
    store.close()
    disk = LogDisk.open(tmp_path, fsync=True)
    lowered = LogStore({"t": 1}.get, disk=disk, max_batch_bytes=size, max_partition_bytes=size)
    assert lowered.log("t", 0).log_start == 3  # three segment files deleted, synced now
    assert disk.syncs == 3  # each deletion at once: no loop pass gathers them
    assert not lowered.unkept
    lowered.close()
