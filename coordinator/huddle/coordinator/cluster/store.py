"""The cluster's store: etcd v3, through ``aetcd`` (gRPC).

Only the few primitives a cluster needs, typed: leases, claiming a key under a lease (its
revision is the claim's *epoch*), writes fenced on an epoch, and reading a prefix. A fenced
write is one etcd transaction that compares the owner key's revision with the writer's
epoch: a deposed owner's write changes nothing.

``aetcd`` was chosen over etcd's JSON gateway through an HTTP client after trying both
against etcd 3.4 under uvloop: both did leases, expiry and revision-compared transactions,
and a put took 0.5 ms with ``aetcd`` against 1.2 ms through the gateway (median of 50).

Every call has a deadline (``timeout_s``; a lease keep-alive two thirds of its TTL),
kept with ``asyncio.timeout``: gRPC ends a call it cancels with a bare ``CancelledError``,
which an anyio cancel scope does not take for its own and lets through as if the caller
were cancelled. A call that outlives its deadline, or finds the endpoint unreachable, marks
the connection suspect: the next call opens a new one (to the next endpoint that answers, or
the same one again), so a link that died without a reset (its packets dropped, a half-open
TCP connection) is left behind instead of timing every call out for ever. A watch that hears
nothing for ``idle_s`` is made again from the revision after the last one it delivered: a
stream on a dead link never ends by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import aetcd
import structlog

from huddle.coordinator.supervisor import progress

log = structlog.get_logger("huddle.cluster")
T = TypeVar("T")
_UNREACHABLE = (aetcd.exceptions.ConnectionFailedError, aetcd.exceptions.ConnectionTimeoutError)
# gRPC tries to connect again from 0.1 s after a failure, backing off to 1 s at most (its
# default grows to 120 s: a store back after a long absence would wait minutes for it); and
# each connection has TCP connections of its own (by default gRPC shares them between
# channels to one address: a new connection would reuse the dead one)
GRPC_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
    "grpc.use_local_subchannel_pool": 1,
}
WATCH_IDLE_S = 3.0  # a watch silent this long is made again


class StoreUnavailable(Exception):
    """No endpoint of the store answered."""


class StoreTimeout(StoreUnavailable):
    """A call to the store got no answer within its deadline."""


class CallCancelled(StoreUnavailable):
    """gRPC cancelled a call by itself (its connection was closed under it)."""


@dataclass(frozen=True, slots=True)
class Lease:
    id: int
    ttl_s: int


@dataclass(frozen=True, slots=True)
class Change:
    key: bytes
    value: bytes | None  # None: deleted
    revision: int = 0  # the store's revision of the change


@dataclass(frozen=True, slots=True)
class Entry:
    value: bytes
    revision: int  # its last change: for an owner key, the owner's epoch
    lease: int


def parse_endpoints(spec: str) -> list[tuple[str, int]]:
    """``etcd://h1:2379,h2:2379`` (the scheme may be left out) -> [(h1, 2379), (h2, 2379)]."""
    text = spec.removeprefix("etcd://")
    endpoints = []
    for part in text.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"not an etcd endpoint (host:port): {part.strip()!r} in {spec!r}")
        endpoints.append((host.strip("[]"), int(port)))
    return endpoints


class EtcdStore:
    """A connection to one etcd endpoint at a time: when it stops answering, the next
    endpoint that answers takes over and the call is made again there (a claim or a fenced
    write made twice changes nothing the second time: the compare fails, or the same
    values are written again). ``timeout_s`` is every call's deadline."""

    def __init__(
        self,
        client: Any,
        endpoint: tuple[str, int],
        endpoints: Sequence[tuple[str, int]] = (),
        timeout_s: float = 3,
    ) -> None:
        self._client = client
        self.endpoint = endpoint
        self.endpoints = list(endpoints) or [endpoint]
        self.timeout_s = timeout_s
        self._switching = asyncio.Lock()
        self._suspect: Any = None  # the connection to replace before the next call
        self._retired: dict[Any, asyncio.Task[None]] = {}  # replaced connections, closing
        self.reconnects = 0

    @classmethod
    async def connect(cls, endpoints: Sequence[tuple[str, int]], timeout_s: float = 3) -> EtcdStore:
        """The first endpoint that answers."""
        client, endpoint = await _first_answering(endpoints, timeout_s)
        return cls(client, endpoint, endpoints, timeout_s)

    async def close(self) -> None:
        for client, task in list(self._retired.items()):
            task.cancel()
            await _close(client, self.timeout_s)
        await _close(self._client, self.timeout_s)

    async def _on(self, op: Callable[[Any], Awaitable[T]], timeout_s: float | None = None) -> T:
        """``op`` on the current endpoint, within its deadline; on another one if that one
        stops answering."""
        client = await self._current()
        try:
            return await self._call(client, op, timeout_s)
        except (*_UNREACHABLE, StoreTimeout):
            if len(self.endpoints) < 2 or self._suspect is not client:
                raise
            return await self._call(await self._current(), op, timeout_s)

    async def _call(
        self, client: Any, op: Callable[[Any], Awaitable[T]], timeout_s: float | None
    ) -> T:
        deadline = self.timeout_s if timeout_s is None else timeout_s
        try:
            try:
                return await bounded(lambda: op(client), deadline)
            finally:
                progress()  # answered or not, the calling loop goes on (its supervisor is told)
        except TimeoutError:
            if deadline >= self.timeout_s:  # not merely impatient: the link may be dead
                self._suspect = client
            raise StoreTimeout(f"etcd did not answer within {deadline:g} s") from None
        except (*_UNREACHABLE, CallCancelled):
            self._suspect = client  # unreachable, or its connection closed under the call
            raise

    @property
    def longest_call_s(self) -> float:
        """The longest one call can take: a new connection first (each endpoint tried
        within the deadline), the call itself, and, with several endpoints, both again."""
        n = len(self.endpoints)
        return self.timeout_s * (n + 2) * (2 if n > 1 else 1)

    async def _current(self) -> Any:
        """The connection to use: a new one first if this one is suspect."""
        failed = self._suspect
        if failed is None or failed is not self._client:
            return self._client
        try:
            await bounded(lambda: self._switch(failed), self.timeout_s * (len(self.endpoints) + 1))
        except TimeoutError:
            raise StoreTimeout("no etcd endpoint answered a new connection in time") from None
        return self._client

    async def _switch(self, failed: Any) -> None:
        async with self._switching:
            if self._client is not failed:
                return  # another call switched already
            i = self.endpoints.index(self.endpoint) if self.endpoint in self.endpoints else 0
            others = self.endpoints[i + 1 :] + self.endpoints[: i + 1]  # this one last
            client, endpoint = await _first_answering(others, self.timeout_s)
            if endpoint != self.endpoint:
                log.warning(
                    "store_endpoint_switched",
                    old=f"{self.endpoint[0]}:{self.endpoint[1]}",
                    new=f"{endpoint[0]}:{endpoint[1]}",
                )
            else:
                log.info("store_reconnected", endpoint=f"{endpoint[0]}:{endpoint[1]}")
            self._client, self.endpoint, self._suspect = client, endpoint, None
            self.reconnects += 1
        # closed once the calls under way on it had their time (a close cancels them)
        closing = asyncio.get_running_loop().create_task(
            _close(failed, self.timeout_s, wait_s=self.timeout_s)
        )
        self._retired[failed] = closing
        closing.add_done_callback(lambda _: self._retired.pop(failed, None))

    # --- leases -------------------------------------------------------------------

    async def grant(self, ttl_s: int) -> Lease:
        lease = await self._on(lambda c: c.lease(ttl_s))
        return Lease(int(lease.id), int(lease.ttl))

    async def refresh(self, lease: Lease) -> int:
        """Keep ``lease`` alive; its TTL left in seconds (0 or less: it has expired). The
        deadline is two thirds of the TTL: an answer later than that cannot keep a node
        serving (``LeaseGuard``), an earlier one, even slow, can."""
        deadline = min(self.timeout_s, lease.ttl_s * 2 / 3)
        reply = await self._on(lambda c: c.refresh_lease(lease.id), deadline)
        return int(reply.TTL)

    async def revoke(self, lease: Lease) -> None:
        await self._on(lambda c: c.revoke_lease(lease.id))

    # --- keys ---------------------------------------------------------------------

    async def claim(self, key: bytes, value: bytes, lease: Lease) -> int | None:
        """Create ``key`` under ``lease`` unless it exists: its revision (the epoch), or
        None if someone holds it."""

        def op(c: Any) -> Any:
            tx = c.transactions
            return c.transaction(
                compare=[tx.create(key) == 0],
                success=[tx.put(key, value, lease=lease.id)],
                failure=[],
            )

        ok, responses = await self._on(op)
        if not ok:
            return None
        return int(responses[0].response_put.header.revision)

    async def create(self, key: bytes, value: bytes) -> bool:
        """Create ``key`` (with no lease) unless it exists; whether this call created it."""

        def op(c: Any) -> Any:
            tx = c.transactions
            return c.transaction(
                compare=[tx.create(key) == 0], success=[tx.put(key, value)], failure=[]
            )

        ok, _ = await self._on(op)
        return bool(ok)

    async def write_fenced(
        self,
        owner_key: bytes,
        epoch: int,
        puts: Mapping[bytes, bytes],
        deletes: Sequence[bytes] = (),
    ) -> bool:
        """Apply ``puts`` and ``deletes`` at once, only if ``owner_key`` still has revision
        ``epoch``; False (and nothing written) if it does not."""

        def op(c: Any) -> Any:
            tx = c.transactions
            ops = [tx.put(k, v) for k, v in puts.items()] + [tx.delete(k) for k in deletes]
            return c.transaction(compare=[tx.mod(owner_key) == epoch], success=ops, failure=[])

        ok, _ = await self._on(op)
        return bool(ok)

    async def get(self, key: bytes) -> Entry | None:
        got = await self._on(lambda c: c.get(key))
        if got is None:
            return None
        return Entry(bytes(got.value), int(got.mod_revision), int(got.lease))

    async def get_prefix(self, prefix: bytes) -> dict[bytes, Entry]:
        return (await self.read_prefix(prefix))[0]

    async def read_prefix(self, prefix: bytes) -> tuple[dict[bytes, Entry], int]:
        """Every key under ``prefix``, and the store's revision they were read at (a
        watch from the next revision misses nothing)."""
        found = await self._on(lambda c: c.get_prefix(prefix))
        entries = {
            bytes(kv.key): Entry(bytes(kv.value), int(kv.mod_revision), int(kv.lease))
            for kv in found
        }
        return entries, int(found.header.revision)

    async def keys(self, prefix: bytes) -> list[bytes]:
        found = await self._on(lambda c: c.get_prefix(prefix, keys_only=True))
        return [bytes(kv.key) for kv in found]

    async def put(self, key: bytes, value: bytes) -> None:
        await self._on(lambda c: c.put(key, value))

    async def delete(self, key: bytes) -> None:
        await self._on(lambda c: c.delete(key))

    async def watch_prefix(
        self,
        prefix: bytes,
        from_revision: int,
        *,
        idle_s: float = WATCH_IDLE_S,
        alive: Callable[[], None] | None = None,
    ) -> AsyncIterator[Change]:
        """Changes under ``prefix`` from ``from_revision`` on, as they happen. A watch that
        delivers nothing for ``idle_s`` is made again from where it was (on a new connection
        if it cannot be): one on a dead link would wait for ever. ``alive`` is called each
        time the watch is made (a quiet watch is not a stuck one)."""
        revision = from_revision
        while True:
            watch = await self._on(partial(_watch_from, prefix=prefix, revision=revision))
            if alive is not None:
                alive()
            events = aiter(watch)
            try:
                while True:
                    try:
                        async with asyncio.timeout(idle_s):
                            event = await anext(events)
                    except TimeoutError:
                        break  # quiet, or dead: made again
                    except StopAsyncIteration:
                        return
                    kv = event.kv
                    revision = int(kv.mod_revision) + 1
                    deleted = event.kind == "DELETE"
                    yield Change(bytes(kv.key), None if deleted else bytes(kv.value), revision - 1)
            finally:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(self.timeout_s):
                        await watch.cancel()


def _watch_from(client: Any, *, prefix: bytes, revision: int) -> Any:
    return client.watch_prefix(prefix, start_revision=revision)


async def bounded(call: Callable[[], Awaitable[T]], deadline_s: float) -> T:
    """``call()`` in a task of its own, within ``deadline_s`` (TimeoutError past it, the call
    cancelled). A cancellation of the caller reaches the caller as it was sent: gRPC ends a
    call it is made to cancel with a bare ``CancelledError``, which an anyio cancel scope
    would not take for its own and let through as if its host were cancelled. A call that
    gRPC cancelled by itself raises ``CallCancelled``."""

    async def run() -> T:
        return await call()

    task = asyncio.get_running_loop().create_task(run())
    try:
        done, _ = await asyncio.wait([task], timeout=deadline_s)
    except BaseException:  # the caller is cancelled: so is the call, and that is all
        task.cancel()
        task.add_done_callback(_retrieved)
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_retrieved)
        raise TimeoutError(f"no answer within {deadline_s:g} s")
    if task.cancelled():
        raise CallCancelled("the call to etcd was cancelled by its connection")
    return task.result()


def _retrieved(task: asyncio.Task[Any]) -> None:
    """An abandoned call's outcome, read so that asyncio does not report it unread."""
    if not task.cancelled():
        task.exception()


async def _first_answering(
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
            await _close(client, timeout_s)
            continue
        log.info("store_connected", endpoint=f"{host}:{port}")
        return client, (host, port)
    raise StoreUnavailable("no etcd endpoint answered: " + "; ".join(failures))


async def _close(client: Any, timeout_s: float, wait_s: float = 0.0) -> None:
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
