"""Fetches that wait: woken by an append to a partition they read, or answered at their
deadline with what is there."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from huddle.coordinator.kafka_log import waiting
from huddle.coordinator.kafka_log.batches import split_batches
from huddle.coordinator.kafka_log.store import LogStore
from huddle.coordinator.kafka_log.waiting import StoreWaiter
from tests.helpers import wait_until
from tests.kafka_log.records import batch, fetch_request, partitions, store_of, values

T0 = ("t", 0)


async def until_waiting(waiter: StoreWaiter, count: int = 1, started: int = 1) -> None:
    """Until ``started`` waits have begun and ``count`` are registered."""
    await wait_until(
        lambda: waiter.waiting >= count and waiter.started >= started, what="a waiting fetch"
    )


def append(store: LogStore, *records: bytes, partition: int = 0) -> None:
    store.append("t", partition, split_batches(batch(records)))


async def test_a_waiting_fetch_is_woken_by_an_append() -> None:
    store = store_of({"t": 2})
    waiter = StoreWaiter(store)
    loop = asyncio.get_running_loop()
    started = loop.time()
    request = fetch_request(12, {T0: 0, ("t", 1): 0}, max_wait_ms=30_000)
    task = asyncio.create_task(waiting.fetch(store, waiter, request, 12))
    await until_waiting(waiter, 2)  # one wait, on both partitions
    append(store, b"hello", partition=1)
    async with asyncio.timeout(5):
        answer = await task
    assert loop.time() - started < 5  # not the 30 s max_wait
    found = partitions(answer, "responses", "partitions")
    assert values(found[("t", 1)].records) == [(0, b"hello")]
    assert found[T0].records == b""
    assert waiter.waiting == 0


async def test_a_waiting_fetch_answers_empty_at_max_wait() -> None:
    store = store_of({"t": 1})
    waiter = StoreWaiter(store)
    loop = asyncio.get_running_loop()
    started = loop.time()
    request = fetch_request(12, {T0: 0}, max_wait_ms=50)
    async with asyncio.timeout(5):
        answer = await waiting.fetch(store, waiter, request, 12)
    assert loop.time() - started >= 0.05
    found = partitions(answer, "responses", "partitions")[T0]
    assert (found.error_code, found.records, found.high_watermark) == (ErrorCode.none, b"", 0)
    assert waiter.waiting == 0


async def test_a_small_append_short_of_min_bytes_keeps_the_fetch_waiting() -> None:
    store = store_of({"t": 1})
    waiter = StoreWaiter(store)
    request = fetch_request(12, {T0: 0}, max_wait_ms=30_000, min_bytes=200)
    task = asyncio.create_task(waiting.fetch(store, waiter, request, 12))
    await until_waiting(waiter)
    append(store, b"small")  # about 70 bytes: woken, reads, waits again
    await until_waiting(waiter, started=2)
    assert not task.done()
    append(store, b"x" * 200)
    async with asyncio.timeout(5):
        answer = await task
    found = partitions(answer, "responses", "partitions")[T0]
    assert values(found.records) == [(0, b"small"), (1, b"x" * 200)]


async def test_a_deleted_topic_ends_the_wait_with_its_error() -> None:
    registry = {"t": 1}
    store = store_of(registry)
    waiter = StoreWaiter(store)
    request = fetch_request(12, {T0: 0}, max_wait_ms=30_000)
    task = asyncio.create_task(waiting.fetch(store, waiter, request, 12))
    await until_waiting(waiter)
    del registry["t"]
    store.topic_changed("t")
    async with asyncio.timeout(5):
        answer = await task
    found = partitions(answer, "responses", "partitions")[T0]
    assert found.error_code == ErrorCode.unknown_topic_or_partition


async def test_a_fetch_with_data_or_no_wait_answers_at_once() -> None:
    store = store_of({"t": 1})
    waiter = StoreWaiter(store)
    append(store, b"a")
    for request in (
        fetch_request(12, {T0: 0}, max_wait_ms=30_000),
        fetch_request(12, {T0: 1}, max_wait_ms=0),
    ):
        async with asyncio.timeout(5):
            await waiting.fetch(store, waiter, request, 12)
    assert waiter.waiting == 0


async def test_wait_says_whether_it_was_woken() -> None:
    store = store_of({"t": 1})
    waiter = StoreWaiter(store)
    loop = asyncio.get_running_loop()
    assert not await waiter.wait([T0], loop.time())  # a deadline already past
    woken = asyncio.create_task(waiter.wait([T0], loop.time() + 30))
    await until_waiting(waiter)
    append(store, b"a")
    async with asyncio.timeout(5):
        assert await woken


async def test_a_cancelled_fetch_leaves_no_wait_behind() -> None:
    store = store_of({"t": 1})
    waiter = StoreWaiter(store)
    request = fetch_request(12, {T0: 0}, max_wait_ms=30_000)
    task = asyncio.create_task(waiting.fetch(store, waiter, request, 12))
    await until_waiting(waiter)
    task.cancel()  # the connection closed
    with pytest.raises(asyncio.CancelledError):
        await task
    assert waiter.waiting == 0
    append(store, b"a")  # nothing left to wake
