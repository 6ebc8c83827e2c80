"""Record batch headers: what the log reads, refuses, and rewrites."""

from __future__ import annotations

import pickle
import struct

import pytest
from crc32c import crc32c
from kio.schema.errors import ErrorCode

from huddle.coordinator.kafka_log.batches import (
    LogError,
    crc_valid,
    read_header,
    split_batches,
    with_base_offset,
)
from tests.kafka_log.records import BASE_TIME_MS, batch, read_batches, values, with_magic


def test_the_header_says_what_the_batch_holds() -> None:
    data = batch([b"x", b"y", b"z"], timestamp_ms=BASE_TIME_MS)
    header = read_header(data)
    assert header.magic == 2
    assert header.size == len(data)
    assert header.record_count == 3
    assert header.last_offset_delta == 2
    assert header.base_offset == 0
    assert header.max_timestamp == BASE_TIME_MS + 2
    assert header.producer_id == -1
    assert header.compression == 0


def test_a_rewritten_base_offset_keeps_the_crc_valid() -> None:
    data = batch([b"x", b"y"])
    moved = with_base_offset(data, 1_000_000_007)
    assert read_header(moved).base_offset == 1_000_000_007
    assert crc_valid(moved)
    assert crc32c(moved[21:]) == read_header(moved).crc
    # kio's reader checks the CRC32C too, and sees the offsets moved
    assert values(moved) == [(1_000_000_007, b"x"), (1_000_000_008, b"y")]


def test_a_changed_byte_fails_the_crc() -> None:
    data = bytearray(batch([b"x"]))
    data[-1] ^= 0xFF
    assert not crc_valid(bytes(data))
    with pytest.raises(LogError) as refused:
        split_batches(bytes(data))
    assert refused.value.code == ErrorCode.corrupt_message


def test_records_split_into_their_batches() -> None:
    first, second = batch([b"a", b"b"]), batch([b"c"])
    split = split_batches(first + second)
    assert [b.data for b in split] == [first, second]
    assert [b.record_count for b in split] == [2, 1]


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_formats_are_refused(magic: int) -> None:
    with pytest.raises(LogError) as refused:
        split_batches(with_magic(batch(), magic))
    assert refused.value.code == ErrorCode.unsupported_for_message_format
    assert f"v{magic}" in refused.value.message


@pytest.mark.parametrize(
    ("producer_id", "attributes"),
    [(4000, 0), (4000, 0x10), (-1, 0x10)],
    ids=["idempotent", "transactional", "transactional-flag"],
)
def test_idempotent_and_transactional_batches_are_refused(
    producer_id: int, attributes: int
) -> None:
    data = batch(producer_id=producer_id, attributes=attributes)
    with pytest.raises(LogError) as refused:
        split_batches(data)
    assert refused.value.code == ErrorCode.invalid_record
    assert "idempotent and transactional" in refused.value.message


def test_control_batches_are_refused() -> None:
    with pytest.raises(LogError) as refused:
        split_batches(batch(attributes=0x20))
    assert refused.value.code == ErrorCode.invalid_record
    assert "control" in refused.value.message


def test_compressed_batches_are_kept_without_decompressing() -> None:
    # The compression bits say gzip; the records are not gzip data, and need not be.
    gzip_flagged = batch([b"not gzip"], attributes=1)
    assert [b.data for b in split_batches(gzip_flagged)] == [gzip_flagged]


def test_zstd_needs_produce_v7() -> None:
    zstd = batch(attributes=4)
    with pytest.raises(LogError) as refused:
        split_batches(zstd, zstd_allowed=False)
    assert refused.value.code == ErrorCode.unsupported_compression_type
    assert split_batches(zstd, zstd_allowed=True)


@pytest.mark.parametrize("cut", [1, 16, 30, 60])
def test_a_truncated_batch_is_corrupt(cut: int) -> None:
    data = batch([b"x"]) + batch([b"y"])
    with pytest.raises(LogError) as refused:
        split_batches(data[:-cut])
    assert refused.value.code == ErrorCode.corrupt_message


def test_no_batch_at_all_is_refused() -> None:
    with pytest.raises(LogError) as refused:
        split_batches(b"")
    assert refused.value.code == ErrorCode.invalid_record


def test_a_kept_batch_is_read_back_by_kio() -> None:
    data = batch([b"one", b"two"])
    (parsed,) = read_batches(with_base_offset(data, 5))
    assert parsed.base_offset == 5
    assert parsed.partition_leader_epoch == -1
    assert [r.value for r in parsed.records] == [b"one", b"two"]


def test_a_record_count_that_disagrees_with_the_last_offset_delta_is_corrupt() -> None:
    data = bytearray(batch([b"x", b"y"]))
    struct.pack_into(">i", data, 23, 5)  # last offset delta 5 for 2 records
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))  # a valid CRC all the same
    with pytest.raises(LogError) as refused:
        split_batches(bytes(data))
    assert refused.value.code == ErrorCode.corrupt_message


def test_a_refusal_survives_pickling_with_its_code() -> None:
    refused = LogError(ErrorCode.invalid_record, "no")
    copy = pickle.loads(pickle.dumps(refused))
    assert (copy.code, copy.message) == (ErrorCode.invalid_record, "no")
