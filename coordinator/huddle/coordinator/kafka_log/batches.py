"""Kafka record batches (message format v2), read as far as a log needs and no further.

A v2 batch starts with a fixed 61-byte header (big-endian)::

     0 base offset        int64    the offset of its first record; the log assigns it
     8 batch length       int32    the bytes after this field
    12 partition epoch    int32    the leader epoch; not covered by the CRC
    16 magic              int8     2 (0 and 1 are the older message sets)
    17 crc                uint32   CRC32C of everything from attributes to the end
    21 attributes         int16    compression (bits 0-2), timestamp type (3),
                                   transactional (4), control (5)
    23 last offset delta  int32    the last record's offset minus the base offset
    27 base timestamp     int64
    35 max timestamp      int64
    43 producer id        int64    -1 unless the producer is idempotent or transactional
    51 producer epoch     int16
    53 base sequence      int32
    57 record count       int32
    61 records...                  compressed as a whole when bits 0-2 say so

The log keeps batches as they arrive and never decompresses them: it checks the header and
the CRC, and on append rewrites the base offset (bytes 0-8) and the partition epoch, both
outside the bytes the CRC covers, so the batch stays valid for every reader.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c
from kio.schema.errors import ErrorCode

from huddle.protocol.errors import HuddleError

HEADER_SIZE = 61
LENGTH_PREFIX = 12  # base offset and batch length: not counted in the batch length
MAGIC = 2
CRC_START = 21  # the CRC covers attributes to the end of the batch
NO_PRODUCER_ID = -1
NO_PARTITION_EPOCH = -1  # the log keeps no leader epochs: clients then skip epoch checks
ZSTD = 4  # the compression codec that needs Produce v7+
_COMPRESSION_MASK = 0x07
_TRANSACTIONAL = 0x10
_CONTROL = 0x20

_PREFIX = struct.Struct(">qii")  # base offset, batch length, partition epoch
_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")


class LogError(HuddleError):
    """What the log refuses (a batch, an offset, a partition): the Kafka error code to
    answer and why."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """The whole batch's size in bytes, length prefix included."""
        return LENGTH_PREFIX + self.batch_length

    @property
    def compression(self) -> int:
        return self.attributes & _COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL)


def read_header(data: bytes | memoryview, position: int = 0) -> BatchHeader:
    """The header of the v2 batch at ``position``; a LogError for anything else.

    Checks the framing only (magic, lengths, that the whole batch is there), not the CRC
    (``crc_valid``) nor what the log accepts (``check_appendable``)."""
    available = len(data) - position
    if available < _PREFIX.size + 1:
        raise LogError(ErrorCode.corrupt_message, "a record batch is truncated")
    _, batch_length, _ = _PREFIX.unpack_from(data, position)
    magic = data[position + 16]
    if magic != MAGIC:
        raise LogError(
            ErrorCode.unsupported_for_message_format,
            f"message format v{magic} is not served: only record batches v2 (Kafka 0.11+)",
        )
    if batch_length < HEADER_SIZE - LENGTH_PREFIX:
        raise LogError(ErrorCode.corrupt_message, f"batch length {batch_length} is too short")
    if available < LENGTH_PREFIX + batch_length:
        raise LogError(ErrorCode.corrupt_message, "a record batch is truncated")
    return BatchHeader(*_HEADER.unpack_from(data, position))


def crc_valid(batch: bytes | memoryview) -> bool:
    """Whether the batch's CRC32C matches the bytes it covers."""
    header = read_header(batch)
    end = header.size
    return crc32c(memoryview(batch)[CRC_START:end]) == header.crc


def check_appendable(header: BatchHeader, *, zstd_allowed: bool) -> None:
    """Refuse what the log does not keep: a LogError with the Kafka code to answer.

    Idempotent and transactional producers need producer ids and sequence state the log
    does not keep (InitProducerId is not served); control batches are a broker's own
    (Kafka refuses them from clients too)."""
    if header.is_control:
        raise LogError(ErrorCode.invalid_record, "clients may not write control batches")
    if header.is_transactional or header.producer_id != NO_PRODUCER_ID:
        raise LogError(
            ErrorCode.invalid_record,
            "idempotent and transactional producers are not supported "
            "(set enable.idempotence=false; no transactional.id)",
        )
    if header.compression > ZSTD:
        raise LogError(ErrorCode.corrupt_message, f"unknown compression {header.compression}")
    if header.compression == ZSTD and not zstd_allowed:
        raise LogError(ErrorCode.unsupported_compression_type, "zstd needs Produce v7 or later")
    if header.record_count <= 0:
        raise LogError(ErrorCode.invalid_record, "a record batch holds no records")
    if header.last_offset_delta != header.record_count - 1:
        raise LogError(
            ErrorCode.corrupt_message,
            f"last offset delta {header.last_offset_delta} does not match "
            f"{header.record_count} records",
        )


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch as it arrived (``data``) and its header."""

    header: BatchHeader
    data: bytes

    @property
    def record_count(self) -> int:
        return self.header.last_offset_delta + 1


def split_batches(records: bytes | memoryview, *, zstd_allowed: bool = True) -> list[Batch]:
    """A Produce partition's records, split into batches the log may append.

    All or nothing: the first batch that is malformed, fails its CRC, or is refused raises
    a LogError and none is kept. No batch at all is refused too (Kafka: a Produce needs
    at least one per partition). Kafka's Produce v3+ allows exactly one batch per
    partition; the log takes several, in order."""
    view = memoryview(records)
    batches: list[Batch] = []
    position = 0
    while position < len(view):
        header = read_header(view, position)
        data = bytes(view[position : position + header.size])
        if crc32c(data[CRC_START:]) != header.crc:
            raise LogError(ErrorCode.corrupt_message, "a record batch fails its CRC32C")
        check_appendable(header, zstd_allowed=zstd_allowed)
        batches.append(Batch(header, data))
        position += header.size
    if not batches:
        raise LogError(ErrorCode.invalid_record, "a produce holds no record batch")
    return batches


def with_base_offset(batch: bytes, base_offset: int) -> bytes:
    """The batch with its base offset set (and its partition epoch cleared): the bytes the
    CRC covers are untouched, so it still verifies."""
    rewritten = bytearray(batch)
    _BASE_OFFSET.pack_into(rewritten, 0, base_offset)
    _EPOCH.pack_into(rewritten, 12, NO_PARTITION_EPOCH)
    return bytes(rewritten)
