"""Fetches that wait (asyncio): woken when a partition they read grows, or at a deadline.

``StoreWaiter`` hooks into the store's appends; ``fetch`` runs the Fetch handler and, while
it says ``Wait``, waits for one of its partitions to grow (or its topic to change) and
reads again, until ``min_bytes`` are ready or ``max_wait_ms`` from the request's arrival has
passed, when it answers with whatever is there. Kafka's ``DelayedFetch`` does the same.
The wait is the request's own ``max_wait_ms`` (the client's request timeout is above it);
the wire runs each Fetch in a task it cancels when the connection closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from kio.static.protocol import ResponsePayload

from huddle.coordinator.kafka_log import handlers
from huddle.coordinator.kafka_log.shapes import FetchRequest
from huddle.coordinator.kafka_log.store import LogStore, PartitionKey


class StoreWaiter:
    def __init__(self, store: LogStore) -> None:
        self._waiting: dict[PartitionKey, set[asyncio.Future[None]]] = {}
        self.started = 0  # waits begun, ever
        store.append_hooks.append(self._grown)
        store.topic_hooks.append(self._topic_changed)

    def _grown(self, key: PartitionKey) -> None:
        for future in self._waiting.get(key, ()):
            if not future.done():
                future.set_result(None)

    def _topic_changed(self, topic: str) -> None:
        for key in [key for key in self._waiting if key[0] == topic]:
            self._grown(key)

    @property
    def waiting(self) -> int:
        """How many waits are registered (each once per partition it waits on)."""
        return sum(len(futures) for futures in self._waiting.values())

    async def wait(self, keys: Iterable[PartitionKey], deadline: float) -> bool:
        """Wait until one of the partitions grows (True) or the event loop's clock reaches
        ``deadline`` (False)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(keys)
        self.started += 1
        for key in keys:
            self._waiting.setdefault(key, set()).add(future)
        try:
            async with asyncio.timeout_at(deadline):
                await future
        except TimeoutError:
            return False
        finally:
            for key in keys:
                futures = self._waiting.get(key)
                if futures is not None:
                    futures.discard(future)
                    if not futures:
                        del self._waiting[key]
        return True


async def fetch(
    store: LogStore, waiter: StoreWaiter, request: FetchRequest, version: int
) -> ResponsePayload:
    """The Fetch's response, after waiting as its ``max_wait_ms`` and ``min_bytes`` ask."""
    loop = asyncio.get_running_loop()
    answer = handlers.fetch(store, request, version)
    if not isinstance(answer, handlers.Wait):
        return answer
    deadline = loop.time() + answer.max_wait
    while isinstance(answer, handlers.Wait):
        woken = await waiter.wait(answer.keys, deadline)
        final = not woken or loop.time() >= deadline
        answer = handlers.fetch(store, request, version, final=final)
    return answer


async def kept(store: LogStore, answer: ResponsePayload) -> ResponsePayload:
    """A Produce's answer once its batches are on the disk: call it when ``store.unkept``
    after ``handlers.produce`` gave a response (with ``--fsync`` only; never for an
    acks=0 ``NoResponse``). Answers ``answer``, or, if they could not be kept, the same
    with KAFKA_STORAGE_ERROR for each partition that was appended."""
    if store.disk is None or await store.disk.kept():
        return answer
    return handlers.not_kept(answer)
