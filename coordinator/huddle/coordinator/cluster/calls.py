"""Calls to etcd with a deadline, and its connections: made (the first endpoint that
answers) and closed (within a deadline, whatever their watches are doing)."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aetcd
import aetcd.rpc
import structlog

from huddle.protocol.errors import HuddleError

log = structlog.get_logger("huddle.cluster")
T = TypeVar("T")
UNREACHABLE = (aetcd.exceptions.ConnectionFailedError, aetcd.exceptions.ConnectionTimeoutError)
# gRPC tries to connect again from 0.1 s after a failure, backing off to 1 s at most (its
# default grows to 120 s: a store back after a long absence would wait minutes for it); and
# each connection has TCP connections of its own (by default gRPC shares them between
# channels to one address: a new connection would reuse the dead one)
GRPC_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
    "grpc.use_local_subchannel_pool": 1,
}


class StoreUnavailableError(HuddleError):
    """No endpoint of the store answered."""


class StoreTimeoutError(StoreUnavailableError):
    """A call to the store got no answer within its deadline."""


class CallTimeoutError(HuddleError, TimeoutError):
    """``bounded``'s call got no answer within its deadline (a ``TimeoutError``, as callers
    catch it; the store turns it into ``StoreTimeoutError``)."""


class CallCancelledError(StoreUnavailableError):
    """gRPC cancelled a call by itself (its connection was closed under it)."""


class StoreRequestTooLargeError(HuddleError):
    """etcd refused a request larger than it takes (its ``--max-request-bytes``): nothing of
    it was applied, and the connection is sound."""


def too_large(exc: BaseException) -> bool:
    """Whether aetcd's error is etcd refusing a request for its size: etcd's own refusal
    ("etcdserver: request is too large", over ``--max-request-bytes``) or gRPC's, before
    etcd sees it ("received message larger than max", over that and 512 KiB more)."""
    cause = exc.__cause__
    if not isinstance(cause, aetcd.rpc.AioRpcError):
        return False
    details, code = str(cause.details() or ""), cause.code()
    status = aetcd.rpc.StatusCode
    return (code == status.INVALID_ARGUMENT and "request is too large" in details) or (
        code == status.RESOURCE_EXHAUSTED and "received message larger than max" in details
    )


async def bounded(call: Callable[[], Awaitable[T]], deadline_s: float) -> T:
    """``call()`` in a task of its own, within ``deadline_s`` (TimeoutError past it, the call
    cancelled). A cancellation of the caller reaches the caller as it was sent: gRPC ends a
    call it is made to cancel with a bare ``CancelledError``, which an anyio cancel scope
    would not take for its own and let through as if its host were cancelled. A call that
    gRPC cancelled by itself raises ``CallCancelledError``."""

    async def run() -> T:
        return await call()

    task = asyncio.get_running_loop().create_task(run())
    try:
        done, _ = await asyncio.wait([task], timeout=deadline_s)
    except BaseException:  # the caller is cancelled: so is the call, and that is all
        task.cancel()
        task.add_done_callback(retrieved)
        raise
    if not done:
        task.cancel()
        task.add_done_callback(retrieved)
        raise CallTimeoutError(f"no answer within {deadline_s:g} s")
    if task.cancelled():
        raise CallCancelledError("the call to etcd was cancelled by its connection")
    return task.result()


def retrieved(task: asyncio.Task[Any]) -> None:
    """An abandoned call's outcome, read so that asyncio does not report it unread."""
    if not task.cancelled():
        task.exception()


async def first_answering(
    endpoints: Sequence[tuple[str, int]], timeout_s: float
) -> tuple[Any, tuple[str, int]]:
    failures = []
    for host, port in endpoints:
        client = aetcd.Client(
            host=host, port=port, timeout=max(1, math.ceil(timeout_s)), options=GRPC_OPTIONS
        )

        async def answers(client: Any = client) -> None:
            await client.connect()
            await client.get(b"/")

        try:
            await bounded(answers, timeout_s)
        except Exception as exc:  # every failure means: try the next one
            failures.append(f"{host}:{port}: {type(exc).__name__}")
            await close_client(client, timeout_s)
            continue
        log.info("store_connected", endpoint=f"{host}:{port}")
        return client, (host, port)
    raise StoreUnavailableError("no etcd endpoint answered: " + "; ".join(failures))


async def close_client(client: Any, timeout_s: float, wait_s: float = 0.0) -> None:
    """Close an aetcd client, within a deadline whatever its watches are doing (after
    ``wait_s``: the calls under way on it have that long to end by themselves)."""
    if wait_s:
        await asyncio.sleep(wait_s)
    try:
        await bounded(client.close, timeout_s)
        return
    except Exception:
        pass
    channel = getattr(client, "channel", None)  # its watcher was stuck: the channel alone
    if channel is not None:
        with contextlib.suppress(Exception):
            await bounded(channel.close, timeout_s)
