"""Fencing in the corners: a node stops serving at its lease's deadline even when nothing
asks, a change made while a shard was served before is never written in a later serving,
a load that ends under another lease is not served, a shard hand-off does not wait for an
idle keeper, and changes a timer makes are kept without waiting for another request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import anyio
import msgspec
import pytest

from huddle.coordinator.cluster.keeper import EtcdKeeper, Stamped
from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.offsets import kept_offsets
from huddle.coordinator.cluster.serving import ClusterServing
from huddle.coordinator.cluster.shards import shard_of
from huddle.coordinator.cluster.store import Entry, EtcdStore, Lease
from huddle.coordinator.core import Coordinator
from huddle.coordinator.storage.records import GroupRecord, OffsetRecord, Record
from tests.etcd import Etcd, etcd
from tests.helpers import DEADLINE_S, RawClient, eventually, raw_member, serve_process, wait_until

__all__ = ["etcd"]  # the fixture

SHARDS = 4


class Listener:
    """A node's shard listener that records losses, and can hold a load up."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self.lost: list[tuple[float, list[int], str]] = []
        self.loading = anyio.Event()
        self.hold_load: anyio.Event | None = None

    async def shard_taken(self, shard: int, epoch: int) -> None:
        self.loading.set()
        if self.hold_load is not None:
            await self.hold_load.wait()

    def shards_lost(self, shards: list[int], why: str) -> None:
        self.lost.append((self.node.clock(), shards, why))

    async def shard_releasing(self, shard: int) -> None:
        return None


class Unreachable(EtcdStore):
    """etcd gone silent once ``cut`` is set: calls hang (as to a host that drops packets)."""

    cut = False

    async def refresh(self, lease: Lease) -> int:
        if self.cut:
            await anyio.sleep_forever()
        return await super().refresh(lease)

    async def get_prefix(self, prefix: bytes) -> dict[bytes, Entry]:
        if self.cut:
            await anyio.sleep_forever()
        return await super().get_prefix(prefix)


@pytest.fixture
async def store(etcd: Etcd) -> AsyncIterator[EtcdStore]:
    opened = await EtcdStore.connect([etcd.endpoint])
    yield opened
    await opened.close()


def new_node(store: EtcdStore, ttl_s: int = 2) -> ClusterNode:
    return ClusterNode(
        store, node_id="n1", advertise="127.0.0.1:9001", shards=SHARDS, prefix="/fencing",
        ttl_s=ttl_s,
    )  # fmt: skip


async def test_a_node_stops_serving_at_its_deadline_though_nothing_asks(etcd: Etcd) -> None:
    store = await Unreachable.connect([etcd.endpoint])
    assert isinstance(store, Unreachable)
    try:
        node = new_node(store)
        listener = Listener(node)
        node.listener = listener
        await node.register()
        async with anyio.create_task_group() as tg:
            tg.start_soon(node.run)
            await wait_until(lambda: len(node._owned) == SHARDS, what="every shard served")
            store.cut = True  # keep-alives and reconciles hang from now on
            await wait_until(
                lambda: bool(listener.lost), wait_s=node.ttl_s + DEADLINE_S, what="a fence"
            )
            fenced_at, shards, why = listener.lost[0]
            deadline = node.guard.deadline
            assert deadline is not None
            # nobody called serves() or owned(): the node fenced itself by its own clock,
            # before etcd could let the lease expire (a TTL after the last keep-alive)
            assert fenced_at <= deadline + 200, (fenced_at, deadline)
            assert sorted(shards) == list(range(SHARDS))
            assert "lease" in why
            assert node._owned == {}
            tg.cancel_scope.cancel()
    finally:
        store.cut = False
        await store.close()


async def _serving_node(store: EtcdStore) -> tuple[ClusterNode, ClusterServing, Coordinator]:
    node = new_node(store)
    core = Coordinator()
    serving = ClusterServing(
        core, store, node, now=time.monotonic, dispatch=lambda out: None, drain=_nothing
    )
    await node.register()
    await node.reconcile()
    assert sorted(node.owned()) == list(range(SHARDS))
    return node, serving, core


async def test_a_change_of_an_earlier_serving_is_not_written(store: EtcdStore) -> None:
    node, serving, _ = await _serving_node(store)
    group = "orders"
    shard = shard_of(group, SHARDS)
    record: Record = OffsetRecord(group, "t", 0, 41, None)
    await store.put(b"/fencing/topics/t", b"1")
    await serving.topics.load()
    earlier: Stamped = serving.stamp(record)
    node.depose(shard, "a write timed out")  # the key is still the node's, same epoch
    await node.reconcile()  # taken up again, from what etcd holds
    assert node.serves(shard)
    assert not await serving.write([earlier])  # refused, not written
    assert await kept_offsets(store, "/fencing") == {}
    now: Stamped = serving.stamp(record)
    assert await serving.write([now])
    assert (await kept_offsets(store, "/fencing"))[group, "t", 0].offset == 41
    await node.leave()


async def test_a_load_that_ends_under_another_lease_is_not_served(store: EtcdStore) -> None:
    node = new_node(store)
    listener = Listener(node)
    listener.hold_load = anyio.Event()
    node.listener = listener
    await node.register()
    async with anyio.create_task_group() as tg:
        tg.start_soon(node.reconcile)
        await listener.loading.wait()  # claimed under the first lease, loading
        node.lease = await store.grant(node.ttl_s)  # lost and registered again meanwhile
        node.guard.answered(node.clock(), node.ttl_s)
        listener.hold_load.set()
    assert node.owned() == {}
    assert listener.lost
    assert "lease" in listener.lost[-1][2]


async def test_giving_a_shard_up_waits_for_the_write_under_way_only() -> None:
    started: list[int] = []
    gates: list[asyncio.Event] = [asyncio.Event(), asyncio.Event()]

    async def write(records: list[Stamped]) -> bool:
        started.append(len(records))
        await gates[len(started) - 1].wait()
        return True

    loop = asyncio.get_running_loop()
    keeper = EtcdKeeper(loop, write, stamp=lambda r: (r, 1), release=lambda h: None, refuse=_refuse)
    record = OffsetRecord("g", "t", 0, 1, None)
    keeper.hold([record], 1, None, [])
    keeper.submit()  # the first batch is being written
    keeper.hold([record], 2, None, [])  # traffic goes on: the next batch waits behind it
    waiting = asyncio.ensure_future(keeper.written())
    await wait_until(lambda: started == [1], what="the first batch being written")
    assert not waiting.done()  # it waits for that batch
    gates[0].set()
    await asyncio.wait_for(waiting, DEADLINE_S)  # done, though the keeper is busy again
    assert started == [1, 1]
    assert keeper.busy
    gates[1].set()
    await asyncio.wait_for(keeper.drain(), DEADLINE_S)


def _refuse(held: object) -> None:
    raise AssertionError(f"refused: {held}")


@pytest.mark.e2e
async def test_a_group_emptied_by_session_expiry_is_kept_without_another_request(
    etcd: Etcd, store: EtcdStore
) -> None:
    flags = [
        "--cluster", f"etcd://{etcd.host}:{etcd.port}", "--shards", str(SHARDS),
        "--cluster-prefix", "/expiry", "--lease-ttl-s", "2",
    ]  # fmt: skip
    async with serve_process(*flags) as (_, port, _):
        group = "short-lived"
        key = f"/expiry/groups/{shard_of(group, SHARDS)}/{group}".encode()
        joined: list[tuple[RawClient, str, int]] = []

        async def join() -> bool:  # the node joins the cluster and loads its shards first
            try:
                joined.append(await raw_member(port, group, session_timeout_ms=500))
            except AssertionError:
                return False
            return True

        await eventually(join, what="a member to join through the new node")
        client, _, generation = joined[0]
        kept = msgspec.msgpack.decode((await _value(store, key)), type=GroupRecord)
        assert kept.generation == generation
        assert len(kept.members) == 1
        await client.close()  # gone without a word: its session runs out, nothing else comes

        async def emptied() -> bool:
            entry = await store.get(key)
            if entry is None:  # emptied with no offsets: it went, and its record with it
                return True
            record = msgspec.msgpack.decode(entry.value, type=GroupRecord)
            return record.members == [] and record.generation > generation

        await eventually(emptied, what="the emptied group to be written to etcd")


async def _value(store: EtcdStore, key: bytes) -> bytes:
    entry = await store.get(key)
    assert entry is not None, key
    return entry.value


async def _nothing() -> None:
    return None
