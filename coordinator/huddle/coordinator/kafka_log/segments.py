"""The log's files in a data dir, and reading them back at a start.

Layout (``<data-dir>/kafka-log/``)::

    format                          the layout's version ("1"); a start refuses another
    <topic>-<partition>/            one directory per partition, as Kafka names them
        00000000000000000000.log    a segment: its batches as appended (base offsets
        00000000000000004096.log    rewritten), one after the other; named by its base
                                    offset, the next one's starts where it ends

A segment file is Kafka's own segment format (v2 batches back to back; Kafka's index
files are not kept: the index is built in memory). The newest segment is the active one,
appended to; it may be empty (its name then keeps the log end). A partition's log start
is its first segment's name.

``recover`` reads a partition's segments back: every batch's framing, CRC32C, offset and
leader epoch (the log writes -1; neither is covered by the CRC) is checked. What a crash
in the middle of a write leaves (a batch cut short, a zero-filled tail) is cut off;
damage further up (a CRC mismatch, an offset that does not follow) is cut off from there
too, with every segment after it, as Kafka's log recovery truncates at the first invalid
batch: the offsets after it are given again to the next appends. Either is logged with
the bytes lost.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog
from crc32c import crc32c

from huddle.coordinator.kafka_log.batches import (
    CRC_START,
    HEADER_SIZE,
    LENGTH_PREFIX,
    NO_PARTITION_EPOCH,
    LogError,
    read_header,
)
from huddle.coordinator.kafka_log.partition import Segment, StoredBatch

log = structlog.get_logger("huddle.kafka_log")

LOG_DIR: Final = "kafka-log"
FORMAT_FILE: Final = "format"
FORMAT_VERSION: Final = 1
SUFFIX: Final = ".log"
_PARTITION_DIR = re.compile(r"([A-Za-z0-9._-]{1,249})-(0|[1-9][0-9]{0,9})")
_SEGMENT_FILE = re.compile(r"([0-9]{20})\.log")


def partition_dir(root: Path, topic: str, partition: int) -> Path:
    return root / f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a partition directory's name; None for anything else."""
    found = _PARTITION_DIR.fullmatch(name)
    return (found.group(1), int(found.group(2))) if found else None


def segment_path(directory: Path, base: int) -> Path:
    return directory / f"{base:020d}{SUFFIX}"


def segment_files(directory: Path) -> list[tuple[int, Path]]:
    """The partition's segment files, oldest first."""
    found = []
    for path in directory.iterdir():
        named = _SEGMENT_FILE.fullmatch(path.name)
        if named is not None:
            found.append((int(named.group(1)), path))
    return sorted(found)


@dataclass(frozen=True, slots=True)
class Scanned:
    batches: list[StoredBatch]
    valid_bytes: int  # the batches up to here are whole, intact and in order
    problem: str | None  # why reading stopped before the end, if it did
    torn: bool  # the problem is only what an interrupted write leaves


def scan(data: bytes, base: int) -> Scanned:
    """The batches of a segment named ``base``, as far as they are intact."""
    batches: list[StoredBatch] = []
    position, expected = 0, base
    view = memoryview(data)
    while position < len(data):
        if not any(view[position:]):
            return Scanned(batches, position, f"a zero-filled tail at byte {position}", True)
        if len(data) - position < HEADER_SIZE or _claimed_end(view, position) > len(data):
            return Scanned(batches, position, f"a batch cut short at byte {position}", True)
        try:
            header = read_header(view, position)
        except LogError as error:
            return Scanned(batches, position, f"{error.message} at byte {position}", False)
        end = position + header.size
        if crc32c(view[position + CRC_START : end]) != header.crc:
            problem = f"a CRC32C mismatch at byte {position}"
            return Scanned(batches, position, problem, end == len(data))
        if header.partition_epoch != NO_PARTITION_EPOCH:  # outside the CRC: the log writes -1
            problem = f"the batch at byte {position} has leader epoch {header.partition_epoch}"
            return Scanned(batches, position, problem, False)
        if header.base_offset != expected:
            problem = (
                f"the batch at byte {position} has offset {header.base_offset}, not {expected}"
            )
            return Scanned(batches, position, problem, False)
        last = expected + header.last_offset_delta
        batches.append(StoredBatch(expected, last, header.max_timestamp, bytes(view[position:end])))
        position, expected = end, last + 1
    return Scanned(batches, position, None, False)


def _claimed_end(view: memoryview, position: int) -> int:
    """Where the batch at ``position`` ends by its length field."""
    return position + LENGTH_PREFIX + int.from_bytes(view[position + 8 : position + 12], "big")


def recover(directory: Path, topic: str, partition: int) -> list[Segment]:
    """The partition's segments as far as they are intact; what is not is cut off the
    files (and later segment files deleted), logged with the bytes lost."""
    files = segment_files(directory)
    segments: list[Segment] = []
    for index, (base, path) in enumerate(files):
        data = path.read_bytes()
        if segments and base != segments[-1].end:
            scanned = Scanned([], 0, f"{path.name} does not start at {segments[-1].end}", False)
        else:
            scanned = scan(data, base)
        kept = scanned.problem is None or scanned.valid_bytes > 0 or not segments
        if kept:
            segment = Segment(base, written_ns=path.stat().st_mtime_ns)
            for batch in scanned.batches:
                segment.add(batch)
            segments.append(segment)
        if scanned.problem is None:
            continue
        later = files[index + 1 :]
        lost = len(data) - scanned.valid_bytes
        lost += sum(later_path.stat().st_size for _, later_path in later)
        if kept:
            os.truncate(path, scanned.valid_bytes)
        else:
            path.unlink()
        for _, later_path in later:
            later_path.unlink()
        (log.warning if scanned.torn and not later else log.error)(
            "kafka_log.truncated",
            topic=topic,
            partition=partition,
            path=str(path),
            problem=scanned.problem,
            torn_tail=scanned.torn and not later,
            dropped_bytes=lost,
            dropped_segments=len(later) + (not kept),
            log_end=segments[-1].end,
        )
        break
    return segments
