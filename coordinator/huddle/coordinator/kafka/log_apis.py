"""Produce, Fetch and ListOffsets on the Kafka listener: the small log
(``huddle.coordinator.kafka_log``) plugged into the wire.

The log's handlers take kio's request and return kio's response; the wire gives each its
slot in the connection's queue like any other answer. A Fetch with nothing to read yet
waits in a task (``kafka_log.waiting``) until a partition it reads grows or its
``max_wait_ms`` passes, and its slot is answered then; the connection's later answers wait
behind it, in order. A Produce with ``acks=0`` has no answer: its slot leaves nothing
(and a refused one closes the connection, as Kafka does). With ``--data-dir`` the log is
kept there too (``kafka_log.disk``); with ``--fsync`` a Produce is answered, in its slot,
once its batches are on the disk (``produce_kept``). ``finished`` puts into the log's answer
what was taken out of the request before the log (the topics the ACLs refused, the
partitions another node leads) and, for a Fetch by id (``by_id``), names its topics by id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from uuid import UUID

from huddle.coordinator.config import DEFAULT_MAX_PARTITION_BYTES, DEFAULT_MAX_TOTAL_BYTES
from huddle.coordinator.kafka import by_id, leadership, log_access
from huddle.coordinator.kafka_log import handlers, waiting
from huddle.coordinator.kafka_log.disk import LogDisk
from huddle.coordinator.kafka_log.store import LogStore, PartitionKey


class KafkaLog:
    """The log's store and its Fetch waiter, following huddle's topic registry (each
    topic's partitions and id: a topic made again starts with an empty log); kept in
    ``disk`` too when given (open it once the registry is loaded: the store removes the
    partitions the registry lacks)."""

    def __init__(
        self,
        partitions: Callable[[str], int | None],
        *,
        topic_ids: Callable[[str], UUID | None] = lambda topic: None,
        disk: LogDisk | None = None,
        max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES,
        max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
    ) -> None:
        self.store = LogStore(
            partitions,
            topic_ids=topic_ids,
            disk=disk,
            max_partition_bytes=max_partition_bytes,
            max_total_bytes=max_total_bytes,
        )
        self.waiter = waiting.StoreWaiter(self.store)

    def close(self) -> None:
        """Close the data dir's files (once no more Produce comes)."""
        self.store.close()

    def topic_changed(self, topic: str) -> None:
        self.store.topic_changed(topic)

    def partitions(self) -> list[PartitionKey]:
        """The partitions the log holds records (or an offset) for."""
        return self.store.partitions()

    def forget(self, keys: list[PartitionKey]) -> None:
        """Drop what the log holds of ``keys`` (another node leads them now)."""
        self.store.forget(keys)

    def list_offsets(self, request: Any, version: int) -> Any:
        return handlers.list_offsets(self.store, request, version)

    def produce(self, request: Any, version: int) -> Any | handlers.NoResponse:
        return handlers.produce(self.store, request, version)

    def produce_kept(self, answer: Any) -> asyncio.Future[Any] | None:
        """A Produce's ``answer`` once its batches are on the disk (a task: cancel it to
        drop it), or None when it can be sent now (no ``--fsync``, or nothing unkept)."""
        if not self.store.unkept:
            return None
        return asyncio.ensure_future(waiting.kept(self.store, answer))

    def fetch_now(self, request: Any, version: int) -> Any | handlers.Wait:
        return handlers.fetch(self.store, request, version)

    def fetch_later(self, request: Any, version: int) -> asyncio.Future[Any]:
        """The Fetch's answer once it has waited as it asks (a task: cancel it to drop it)."""
        return asyncio.ensure_future(waiting.fetch(self.store, self.waiter, request, version))


def finished(
    api_key: int,
    version: int,
    answer: Any,
    refused: log_access.Refused,
    not_led: log_access.Refused,
    named: by_id.FetchById | None = None,
) -> Any:
    """The log's answer with the topics the ACLs refused and the partitions another node
    leads answered too (a Fetch by id: then by id, ``named``)."""
    answer = log_access.put_back(api_key, version, answer, refused)
    answer = leadership.put_back(api_key, version, answer, not_led)
    return answer if named is None else named.answer(answer)


NoResponse = handlers.NoResponse
Wait = handlers.Wait
