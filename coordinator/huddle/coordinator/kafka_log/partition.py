"""One partition's log in memory: its batches, in segments.

A partition's batches have contiguous offsets from its *log start* to its *log end* (the
next offset to assign). They are held in *segments*, runs of batches of at most
``segment_bytes`` (a larger batch makes a segment of its own), as Kafka holds a log: the
newest is the *active* one, appended to, possibly empty; a segment is dropped only whole,
the oldest first. With a data dir each segment is a file
(``huddle.coordinator.kafka_log.segments``), so dropping one is deleting a file and the
log start is the name of the first file: memory and disk hold the same batches.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field

from huddle.protocol.errors import UsageError


@dataclass(frozen=True, slots=True)
class StoredBatch:
    base_offset: int
    last_offset: int
    max_timestamp: int
    data: bytes  # as it arrived, its base offset rewritten


@dataclass(frozen=True, slots=True)
class Read:
    """Whole batches from the one holding the fetch offset, and the partition's bounds."""

    batches: tuple[bytes, ...]
    log_start: int
    high_watermark: int

    @property
    def size(self) -> int:
        return sum(len(batch) for batch in self.batches)


@dataclass(slots=True)
class Segment:
    base: int  # the offset of its first batch (or of the next one, while empty)
    batches: list[StoredBatch] = field(default_factory=list)
    bases: list[int] = field(default_factory=list)
    bytes: int = 0
    # when its first batch was appended, in the store's order (None while empty): the
    # total bound drops the oldest segment of any partition
    sequence: int | None = None
    written_ns: int = 0  # when its file was last written (a segment read back at a start)

    @property
    def end(self) -> int:
        """The offset after its last batch."""
        return self.batches[-1].last_offset + 1 if self.batches else self.base

    def add(self, batch: StoredBatch) -> None:
        self.batches.append(batch)
        self.bases.append(batch.base_offset)
        self.bytes += len(batch.data)


class PartitionLog:
    """One partition's segments; offsets contiguous from ``log_start`` to ``log_end``."""

    def __init__(self, segments: list[Segment] | None = None) -> None:
        self.segments: list[Segment] = segments or [Segment(0)]
        self.bytes = sum(segment.bytes for segment in self.segments)

    @property
    def log_start(self) -> int:
        return self.segments[0].base

    @property
    def log_end(self) -> int:
        return self.segments[-1].end

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    def __len__(self) -> int:
        return sum(len(segment.batches) for segment in self.segments)

    def __iter__(self) -> Iterator[StoredBatch]:
        for segment in self.segments:
            yield from segment.batches

    def first(self) -> StoredBatch | None:
        return next(iter(self), None)

    def needs_roll(self, size: int, segment_bytes: int) -> bool:
        """Whether a batch of ``size`` bytes starts a new segment: the active one holds
        batches already and would grow past ``segment_bytes``."""
        active = self.active
        return bool(active.batches) and active.bytes + size > segment_bytes

    def roll(self) -> Segment:
        """A new, empty active segment from the log end."""
        segment = Segment(self.log_end)
        self.segments.append(segment)
        return segment

    def append(self, batch: StoredBatch) -> None:
        self.active.add(batch)
        self.bytes += len(batch.data)

    def drop_oldest(self) -> Segment:
        """Drop the oldest segment (not the active one: ``roll`` first to drop it)."""
        if len(self.segments) == 1:
            raise UsageError("the active segment is never dropped")
        dropped = self.segments.pop(0)
        self.bytes -= dropped.bytes
        return dropped

    def read(self, offset: int, max_bytes: int, *, at_least_one: bool) -> tuple[bytes, ...]:
        """Whole batches from the one holding ``offset`` while they fit in ``max_bytes``;
        the first even when it does not fit if ``at_least_one``."""
        segments = self.segments
        index = max(bisect_right([s.base for s in segments], offset) - 1, 0)
        found: list[bytes] = []
        size = 0
        for segment in segments[index:]:
            position = 0
            if segment is segments[index]:
                position = max(bisect_right(segment.bases, offset) - 1, 0)
                batches = segment.batches
                if position < len(batches) and batches[position].last_offset < offset:
                    position += 1  # the offset is the log end: nothing to read
            for stored in segment.batches[position:]:
                data = stored.data
                if size + len(data) > max_bytes and not (at_least_one and not found):
                    return tuple(found)
                found.append(data)
                size += len(data)
        return tuple(found)
