"""The log's store (sans-IO): per topic partition, the record batches appended, in memory.

Each partition is an append-only run of batches with contiguous offsets from its log start
to its log end (the next offset to assign). With a single replica the high watermark is the
log end. Memory is bounded per partition and in total: past either bound the oldest batches
go (in total: the oldest appended anywhere), and the partition's log start moves to its
first remaining batch. A batch larger than ``max_batch_bytes`` is refused (Kafka's
``message.max.bytes``), so a partition always keeps at least its newest batch.

The store follows huddle's topic registry through ``partitions(topic)`` (the partition
count, None for no such topic), asked on every access: a deleted topic's log is forgotten,
partitions past a lowered count too, and a raised count gives new empty partitions. A topic
deleted and created again between two accesses keeps its log unless the server calls
``topic_changed`` when the registry changes (which also wakes the Fetches waiting on it).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import structlog
from kio.schema.errors import ErrorCode

from huddle.coordinator.kafka_log.batches import Batch, LogError, with_base_offset

log = structlog.get_logger("huddle.kafka_log")

PartitionKey = tuple[str, int]
MiB = 1024 * 1024
DEFAULT_MAX_BATCH_BYTES = 1 * MiB + 12  # Kafka's message.max.bytes
DEFAULT_MAX_PARTITION_BYTES = 8 * MiB
DEFAULT_MAX_TOTAL_BYTES = 128 * MiB


@dataclass(frozen=True, slots=True)
class StoredBatch:
    base_offset: int
    last_offset: int
    max_timestamp: int
    data: bytes
    sequence: int  # the store's append order, for dropping the oldest across partitions


@dataclass(frozen=True, slots=True)
class Read:
    """Whole batches from the one holding the fetch offset, and the partition's bounds."""

    batches: tuple[bytes, ...]
    log_start: int
    high_watermark: int

    @property
    def size(self) -> int:
        return sum(len(batch) for batch in self.batches)


class PartitionLog:
    """One partition's batches; offsets contiguous from ``log_start`` to ``log_end``."""

    def __init__(self) -> None:
        self._batches: list[StoredBatch] = []
        self._bases: list[int] = []
        self._head = 0  # batches before it are dropped (compacted away now and then)
        self.log_start = 0
        self.log_end = 0
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._batches) - self._head

    def __iter__(self) -> Iterator[StoredBatch]:
        for index in range(self._head, len(self._batches)):
            yield self._batches[index]

    def first(self) -> StoredBatch | None:
        return self._batches[self._head] if len(self) else None

    def append(self, batch: Batch, sequence: int) -> StoredBatch:
        base = self.log_end
        stored = StoredBatch(
            base_offset=base,
            last_offset=base + batch.record_count - 1,
            max_timestamp=batch.header.max_timestamp,
            data=with_base_offset(batch.data, base),
            sequence=sequence,
        )
        self._batches.append(stored)
        self._bases.append(base)
        self.log_end = stored.last_offset + 1
        self.bytes += len(stored.data)
        return stored

    def drop_oldest(self) -> StoredBatch:
        dropped = self._batches[self._head]
        self._head += 1
        self.bytes -= len(dropped.data)
        first = self.first()
        self.log_start = first.base_offset if first is not None else self.log_end
        if self._head > 64 and self._head * 2 > len(self._batches):
            del self._batches[: self._head], self._bases[: self._head]
            self._head = 0
        return dropped

    def read(self, offset: int, max_bytes: int, *, at_least_one: bool) -> tuple[bytes, ...]:
        """Whole batches from the one holding ``offset`` while they fit in ``max_bytes``;
        the first even when it does not fit if ``at_least_one``."""
        index = max(bisect_right(self._bases, offset, lo=self._head) - 1, self._head)
        if index < len(self._batches) and self._batches[index].last_offset < offset:
            index += 1  # the offset is the log end: nothing to read
        found: list[bytes] = []
        size = 0
        for position in range(index, len(self._batches)):
            data = self._batches[position].data
            if size + len(data) > max_bytes and not (at_least_one and not found):
                break
            found.append(data)
            size += len(data)
        return tuple(found)


class LogStore:
    def __init__(
        self,
        partitions: Callable[[str], int | None],
        *,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES,
        max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
    ) -> None:
        if not 0 < max_batch_bytes <= max_partition_bytes <= max_total_bytes:
            raise ValueError(
                "the log's bounds must be 0 < max_batch_bytes <= max_partition_bytes "
                f"<= max_total_bytes, not {max_batch_bytes}, {max_partition_bytes}, "
                f"{max_total_bytes}"
            )
        self._partitions = partitions
        self.max_batch_bytes = max_batch_bytes
        self.max_partition_bytes = max_partition_bytes
        self.max_total_bytes = max_total_bytes
        self._topics: dict[str, dict[int, PartitionLog]] = {}
        self._counts: dict[str, int] = {}  # each topic's partition count when last asked
        self._order: deque[tuple[int, PartitionKey]] = deque()  # appends, oldest first
        self._sequence = 0
        self._live = 0  # batches kept
        self.total_bytes = 0
        # Called with a partition after every append to it, and after its topic changed
        # (``topic_changed``): what wakes a waiting Fetch.
        self.append_hooks: list[Callable[[PartitionKey], None]] = []

    def log(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log as the registry has it now; UNKNOWN_TOPIC_OR_PARTITION if
        the registry has no such topic or partition."""
        count = self._sync(topic)
        if count is None:
            raise LogError(ErrorCode.unknown_topic_or_partition, f"no topic {topic!r}")
        if not 0 <= partition < count:
            raise LogError(
                ErrorCode.unknown_topic_or_partition,
                f"topic {topic!r} has no partition {partition} ({count} partitions)",
            )
        logs = self._topics.setdefault(topic, {})
        found = logs.get(partition)
        if found is None:
            found = logs[partition] = PartitionLog()
        return found

    def append(self, topic: str, partition: int, batches: Sequence[Batch]) -> int:
        """Append the batches (already checked by ``split_batches``) with offsets from the
        partition's log end; return the first batch's base offset."""
        for batch in batches:
            if len(batch.data) > self.max_batch_bytes:
                raise LogError(
                    ErrorCode.message_too_large,
                    f"a record batch of {len(batch.data)} bytes is over the log's "
                    f"{self.max_batch_bytes}",
                )
        target = self.log(topic, partition)
        key = (topic, partition)
        first = target.log_end
        for batch in batches:
            stored = target.append(batch, self._sequence)
            self._order.append((self._sequence, key))
            self._sequence += 1
            self._live += 1
            self.total_bytes += len(stored.data)
        while target.bytes > self.max_partition_bytes:
            self._drop(target)
        self._bound_total()
        for hook in self.append_hooks:
            hook(key)
        return first

    def read(
        self, topic: str, partition: int, offset: int, max_bytes: int, *, at_least_one: bool
    ) -> Read:
        """Whole batches from the one holding ``offset`` up to ``max_bytes`` (the first one
        even over it if ``at_least_one``): OFFSET_OUT_OF_RANGE outside [log start, log end]."""
        target = self.log(topic, partition)
        if not target.log_start <= offset <= target.log_end:
            raise LogError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} is outside [{target.log_start}, {target.log_end}]",
            )
        found = target.read(offset, max_bytes, at_least_one=at_least_one)
        return Read(found, target.log_start, target.log_end)

    def offset_for_timestamp(
        self, topic: str, partition: int, timestamp: int
    ) -> StoredBatch | None:
        """The first batch whose max timestamp is at or after ``timestamp`` (its base offset
        is the answer: the batch may hold earlier records, it is never decompressed)."""
        return next((b for b in self.log(topic, partition) if b.max_timestamp >= timestamp), None)

    def max_timestamp_batch(self, topic: str, partition: int) -> StoredBatch | None:
        """The first batch with the largest max timestamp, None if the log is empty."""
        found: StoredBatch | None = None
        for batch in self.log(topic, partition):
            if found is None or batch.max_timestamp > found.max_timestamp:
                found = batch
        return found

    def topic_changed(self, topic: str) -> None:
        """The registry changed ``topic`` (deleted, resized): forget what it no longer has,
        and wake the Fetches waiting on the topic's partitions."""
        keys = [(topic, index) for index in self._topics.get(topic, {})]
        self._sync(topic)
        for key in keys:
            for hook in self.append_hooks:
                hook(key)

    def _sync(self, topic: str) -> int | None:
        """Ask the registry for the topic's partition count; forget the partitions (or the
        whole topic) it no longer has."""
        count = self._partitions(topic)
        before = self._counts.get(topic)
        if before is not None and (count is None or count < before):
            logs = self._topics.get(topic, {})
            self._forget(topic, [index for index in logs if count is None or index >= count])
        if count is None:
            self._topics.pop(topic, None)
            self._counts.pop(topic, None)
        else:
            self._counts[topic] = count
        return count

    def _drop(self, target: PartitionLog) -> None:
        dropped = target.drop_oldest()
        self._live -= 1
        self.total_bytes -= len(dropped.data)

    def _bound_total(self) -> None:
        while self.total_bytes > self.max_total_bytes and self._order:
            sequence, (topic, partition) = self._order.popleft()
            target = self._topics.get(topic, {}).get(partition)
            first = target.first() if target is not None else None
            if target is not None and first is not None and first.sequence == sequence:
                self._drop(target)
        if len(self._order) > 2 * self._live + 1024:  # entries of batches already gone
            kept = [
                (batch.sequence, (topic, index))
                for topic, logs in self._topics.items()
                for index, target in logs.items()
                for batch in target
            ]
            self._order = deque(sorted(kept))

    def _forget(self, topic: str, indexes: list[int]) -> None:
        logs = self._topics.get(topic, {})
        for index in indexes:
            target = logs.pop(index, None)
            if target is not None:
                self._live -= len(target)
                self.total_bytes -= target.bytes
                log.info("kafka_log.forgotten", topic=topic, partition=index, bytes=target.bytes)
