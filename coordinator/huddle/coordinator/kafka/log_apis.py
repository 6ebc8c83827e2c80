"""Produce, Fetch and ListOffsets on the Kafka listener: the small log
(``huddle.coordinator.kafka_log``) plugged into the wire.

The log's handlers take kio's request and return kio's response; the wire gives each its
slot in the connection's queue like any other answer. A Fetch with nothing to read yet
waits in a task (``kafka_log.waiting``) until a partition it reads grows or its
``max_wait_ms`` passes, and its slot is answered then; the connection's later answers wait
behind it, in order. A Produce with ``acks=0`` has no answer: its slot leaves nothing
(and a refused one closes the connection, as Kafka does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from huddle.coordinator.kafka_log import handlers, waiting
from huddle.coordinator.kafka_log.store import LogStore


class KafkaLog:
    """The log's store and its Fetch waiter, following huddle's topic registry."""

    def __init__(self, partitions: Callable[[str], int | None]) -> None:
        self.store = LogStore(partitions)
        self.waiter = waiting.StoreWaiter(self.store)

    def topic_changed(self, topic: str) -> None:
        self.store.topic_changed(topic)

    def list_offsets(self, request: Any, version: int) -> Any:
        return handlers.list_offsets(self.store, request, version)

    def produce(self, request: Any, version: int) -> Any | handlers.NoResponse:
        return handlers.produce(self.store, request, version)

    def fetch_now(self, request: Any, version: int) -> Any | handlers.Wait:
        return handlers.fetch(self.store, request, version)

    def fetch_later(self, request: Any, version: int) -> asyncio.Future[Any]:
        """The Fetch's answer once it has waited as it asks (a task: cancel it to drop it)."""
        return asyncio.ensure_future(waiting.fetch(self.store, self.waiter, request, version))


NoResponse = handlers.NoResponse
Wait = handlers.Wait
