"""The log's store (sans-IO): per topic partition, the record batches appended.

Each partition is an append-only run of batches with contiguous offsets from its log start
to its log end (the next offset to assign), held in segments (``partition``). With a
single replica the high watermark is the log end. Memory is bounded per partition and in
total: past either bound the oldest segments go whole (in total: the one whose first batch
was appended first, of any partition), and the partition's log start moves to its first
remaining batch. A segment is ``segment_bytes`` at most (a quarter of the partition bound
by default) unless a single batch is larger, and a batch larger than ``max_batch_bytes``
is refused (Kafka's ``message.max.bytes``): a partition keeps at least its active segment,
so its newest batch.

With a data dir (``disk``, a ``LogDisk``) every batch is in memory and in the partition's
segment files: the store writes each append, roll and drop through to them, and starts
from what ``LogDisk.open`` read back (the bounds applied again, in case they were lowered).

The store follows huddle's topic registry through ``partitions(topic)`` (the partition
count, None for no such topic), asked on every access: a deleted topic's log is forgotten
(its files too), partitions past a lowered count too, and a raised count gives new empty
partitions. A topic deleted and created again between two accesses has another id
(``topic_ids(topic)``, asked on every access too): its log is forgotten then; the server
also calls ``topic_changed`` when the registry changes (which wakes the Fetches waiting on
it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING
from uuid import UUID

import structlog
from kio.schema.errors import ErrorCode

from huddle.coordinator.config import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_PARTITION_BYTES,
    DEFAULT_MAX_TOTAL_BYTES,
)
from huddle.coordinator.kafka_log.batches import Batch, LogError, with_base_offset
from huddle.coordinator.kafka_log.partition import PartitionLog, Read, Segment, StoredBatch
from huddle.protocol.errors import InvalidArgumentError

if TYPE_CHECKING:
    from huddle.coordinator.kafka_log.disk import LogDisk

log = structlog.get_logger("huddle.kafka_log")

PartitionKey = tuple[str, int]
SEGMENTS_PER_PARTITION = 4  # the default segment size is the partition bound over this

__all__ = ["LogStore", "PartitionKey", "PartitionLog", "Read", "StoredBatch"]


class LogStore:
    def __init__(
        self,
        partitions: Callable[[str], int | None],
        *,
        topic_ids: Callable[[str], UUID | None] = lambda topic: None,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES,
        max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
        segment_bytes: int | None = None,
        disk: LogDisk | None = None,
    ) -> None:
        if not 0 < max_batch_bytes <= max_partition_bytes <= max_total_bytes:
            raise InvalidArgumentError(
                "the log's bounds must be 0 < max_batch_bytes <= max_partition_bytes "
                f"<= max_total_bytes, not {max_batch_bytes}, {max_partition_bytes}, "
                f"{max_total_bytes}"
            )
        if segment_bytes is None:
            segment_bytes = max(1, max_partition_bytes // SEGMENTS_PER_PARTITION)
        if not 0 < segment_bytes <= max_partition_bytes:
            raise InvalidArgumentError(
                f"segment_bytes must be in 1..{max_partition_bytes}, not {segment_bytes}"
            )
        self._partitions = partitions
        self._topic_ids = topic_ids
        self._ids: dict[str, UUID] = {}  # each topic's id when last asked
        self.max_batch_bytes = max_batch_bytes
        self.max_partition_bytes = max_partition_bytes
        self.max_total_bytes = max_total_bytes
        self.segment_bytes = segment_bytes
        self.disk = disk
        self._topics: dict[str, dict[int, PartitionLog]] = {}
        self._counts: dict[str, int] = {}  # each topic's partition count when last asked
        self._order: deque[tuple[int, PartitionKey]] = deque()  # segments, oldest first
        self._sequence = 0
        self._segments = 0  # segments holding batches
        self.total_bytes = 0
        # Called with a partition after every append to it, and with a topic after it
        # changed (``topic_changed``: any of its partitions, kept or not): what wakes a
        # waiting Fetch.
        self.append_hooks: list[Callable[[PartitionKey], None]] = []
        self.topic_hooks: list[Callable[[str], None]] = []
        if disk is not None:
            self._restore(disk)

    @property
    def unkept(self) -> bool:
        """Whether an append is not on the disk yet (with ``--fsync`` only): a Produce's
        answer then waits for ``waiting.kept``."""
        return self.disk is not None and self.disk.unkept

    def close(self) -> None:
        """Close the data dir's files, once what was handed over is on the disk."""
        if self.disk is not None:
            self.disk.close()

    def log(self, topic: str, partition: int, *, create: bool = True) -> PartitionLog:
        """The partition's log as the registry has it now; UNKNOWN_TOPIC_OR_PARTITION if
        the registry has no such topic or partition. A partition never appended to is
        kept only once it is (``create``): reading one gives an empty log, not kept (a
        Fetch of a million untouched partitions grew the server by 440 MB, counted by no
        bound)."""
        count = self._sync(topic)
        if count is None:
            raise LogError(ErrorCode.unknown_topic_or_partition, f"no topic {topic!r}")
        if not 0 <= partition < count:
            raise LogError(
                ErrorCode.unknown_topic_or_partition,
                f"topic {topic!r} has no partition {partition} ({count} partitions)",
            )
        logs = self._topics.get(topic)
        found = logs.get(partition) if logs is not None else None
        if found is None:
            found = PartitionLog()
            if create:
                self._topics.setdefault(topic, {})[partition] = found
        return found

    def append(self, topic: str, partition: int, batches: Sequence[Batch]) -> int:
        """Append the batches (already checked by ``split_batches``) with offsets from the
        partition's log end; return the first batch's base offset. With a data dir each
        is written before it is in memory (KAFKA_STORAGE_ERROR if it could not be)."""
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
            if target.needs_roll(len(batch.data), self.segment_bytes):
                self._roll(key, target)
            base = target.log_end
            stored = StoredBatch(
                base_offset=base,
                last_offset=base + batch.record_count - 1,
                max_timestamp=batch.header.max_timestamp,
                data=with_base_offset(batch.data, base),
            )
            active = target.active
            if self.disk is not None:
                self.disk.append(key, active.base, stored.data)
            if active.sequence is None:
                active.sequence = self._sequence
                self._order.append((self._sequence, key))
                self._sequence += 1
                self._segments += 1
            target.append(stored)
            self.total_bytes += len(stored.data)
        self._bound(key, target)
        self._bound_total()
        for hook in self.append_hooks:
            hook(key)
        return first

    def read(
        self, topic: str, partition: int, offset: int, max_bytes: int, *, at_least_one: bool
    ) -> Read:
        """Whole batches from the one holding ``offset`` up to ``max_bytes`` (the first one
        even over it if ``at_least_one``): OFFSET_OUT_OF_RANGE outside [log start, log end]."""
        target = self.log(topic, partition, create=False)
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
        batches = self.log(topic, partition, create=False)
        return next((b for b in batches if b.max_timestamp >= timestamp), None)

    def max_timestamp_batch(self, topic: str, partition: int) -> StoredBatch | None:
        """The first batch with the largest max timestamp, None if the log is empty."""
        found: StoredBatch | None = None
        for batch in self.log(topic, partition, create=False):
            if found is None or batch.max_timestamp > found.max_timestamp:
                found = batch
        return found

    def topic_changed(self, topic: str) -> None:
        """The registry changed ``topic`` (deleted, resized): forget what it no longer has,
        and wake the Fetches waiting on the topic's partitions."""
        self._sync(topic)
        for hook in self.topic_hooks:
            hook(topic)

    def partitions(self) -> list[PartitionKey]:
        """Every partition the store holds a log for."""
        return [(topic, index) for topic, logs in self._topics.items() for index in logs]

    def forget(self, keys: list[PartitionKey]) -> None:
        """Drop the logs of ``keys``; a partition written again starts empty at offset 0.
        The Fetches waiting on them are woken."""
        for topic, index in keys:
            self._forget(topic, [index])
            for hook in self.append_hooks:
                hook((topic, index))

    def _restore(self, disk: LogDisk) -> None:
        """Take the partitions the data dir held: those the registry still has, with the
        bounds applied; the others' files go. Segments count as appended in the order
        their files were last written."""
        recovered, disk.recovered = disk.recovered, {}
        loaded: list[tuple[int, int, PartitionKey, Segment]] = []
        for key, segments in sorted(recovered.items()):
            count = self._partitions(key[0])
            if count is None or key[1] >= count:
                log.info(
                    "kafka_log.forgotten",
                    topic=key[0],
                    partition=key[1],
                    reason="no such partition",
                )
                disk.remove(key)
                continue
            self._counts[key[0]] = count
            target = self._topics.setdefault(key[0], {})[key[1]] = PartitionLog(segments)
            self.total_bytes += target.bytes
            for segment in segments:
                if segment.batches:
                    loaded.append((segment.written_ns, segment.base, key, segment))
        for _, _, key, segment in sorted(loaded):
            segment.sequence = self._sequence
            self._order.append((self._sequence, key))
            self._sequence += 1
            self._segments += 1
        for topic, logs in self._topics.items():
            for index, target in logs.items():
                self._bound((topic, index), target)
        self._bound_total()

    def _sync(self, topic: str) -> int | None:
        """Ask the registry for the topic's partition count; forget the partitions (or the
        whole topic) it no longer has."""
        count = self._partitions(topic)
        topic_id = self._topic_ids(topic)
        known = self._ids.get(topic)
        if known is not None and topic_id is not None and known != topic_id:
            # deleted and created again since: none of its log is the new topic's
            self._forget(topic, list(self._topics.get(topic, {})))
            self._topics.pop(topic, None)
            self._counts.pop(topic, None)
        if topic_id is not None and count is not None:
            self._ids[topic] = topic_id
        else:
            self._ids.pop(topic, None)
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

    def _roll(self, key: PartitionKey, target: PartitionLog) -> None:
        segment = target.roll()
        if self.disk is not None:
            self.disk.roll(key, segment.base)

    def _drop(self, key: PartitionKey, target: PartitionLog) -> None:
        """Drop the partition's oldest segment (an empty active one takes the only one's
        place, keeping the log end)."""
        if len(target.segments) == 1:
            self._roll(key, target)
        dropped = target.drop_oldest()
        self.total_bytes -= dropped.bytes
        if dropped.sequence is not None:
            self._segments -= 1
        if self.disk is not None:
            self.disk.delete(key, dropped.base)

    def _bound(self, key: PartitionKey, target: PartitionLog) -> None:
        while target.bytes > self.max_partition_bytes and len(target.segments) > 1:
            self._drop(key, target)

    def _bound_total(self) -> None:
        while self.total_bytes > self.max_total_bytes and self._order:
            sequence, key = self._order.popleft()
            target = self._topics.get(key[0], {}).get(key[1])
            if target is not None and target.segments[0].sequence == sequence:
                self._drop(key, target)
        if len(self._order) > 2 * self._segments + 1024:  # entries of segments already gone
            kept = [
                (segment.sequence, (topic, index))
                for topic, logs in self._topics.items()
                for index, target in logs.items()
                for segment in target.segments
                if segment.sequence is not None
            ]
            self._order = deque(sorted(kept))

    def _forget(self, topic: str, indexes: list[int]) -> None:
        logs = self._topics.get(topic, {})
        for index in indexes:
            target = logs.pop(index, None)
            if target is not None:
                self._segments -= sum(1 for s in target.segments if s.sequence is not None)
                self.total_bytes -= target.bytes
                log.info("kafka_log.forgotten", topic=topic, partition=index, bytes=target.bytes)
            if self.disk is not None:
                self.disk.remove((topic, index))
