"""A cluster keeps a group's offsets of a topic in one etcd key per block of partitions
(``huddle.coordinator.cluster.offsets``), against a real etcd: a commit of a topic's
partitions is one put, commits of other partitions by other members are merged and survive a
failover, a deleted topic's key goes, and offsets kept one key per partition (an older
version's layout) are loaded and moved to the new one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from urllib.parse import quote

import msgspec
import pytest

from huddle.client import Admin
from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.offsets import (
    BLOCK,
    KeptOffsets,
    OffsetBlock,
    block_key,
    kept_offsets,
)
from huddle.coordinator.cluster.serving import ClusterServing
from huddle.coordinator.cluster.shards import shard_of
from huddle.coordinator.cluster.store import EtcdStore
from huddle.coordinator.core import Coordinator
from huddle.coordinator.storage.records import OffsetRecord, offset_deleted
from tests.cluster.test_topic_offsets import node, tp
from tests.etcd import Etcd, etcd

__all__ = ["etcd"]  # the fixture

SHARDS = 2
PREFIX = "/blocks"
GROUP = "g"
SHARD = shard_of(GROUP, SHARDS)


@pytest.fixture
async def store(etcd: Etcd) -> AsyncIterator[EtcdStore]:
    opened = await EtcdStore.connect([etcd.endpoint])
    yield opened
    await opened.close()


async def _nothing() -> None:
    return None


async def _node(store: EtcdStore, node_id: str) -> tuple[ClusterNode, ClusterServing, Coordinator]:
    """A node that serves every shard (the only one alive)."""
    node = ClusterNode(
        store, node_id=node_id, advertise=f"127.0.0.1:{9000 + len(node_id)}", shards=SHARDS,
        prefix=PREFIX,
    )  # fmt: skip
    core = Coordinator()
    serving = ClusterServing(
        core, store, node, now=time.monotonic, dispatch=lambda out: None, drain=_nothing
    )
    await serving.topics.load()
    await node.register()
    await node.reconcile()
    assert sorted(node.owned()) == list(range(SHARDS))
    return node, serving, core


async def _topic(store: EtcdStore, name: str, partitions: int) -> None:
    await store.put(f"{PREFIX}/topics/{name}".encode(), str(partitions).encode())


def _commit(partitions: Iterable[int], offset: int, topic: str = "t") -> list[OffsetRecord]:
    return [OffsetRecord(GROUP, topic, p, offset + p) for p in partitions]


async def _write(serving: ClusterServing, records: list[OffsetRecord]) -> None:
    """Commits (or deletions) the core accepted, kept as its server would."""
    serving.core.load(records, time.monotonic())
    assert await serving.write([serving.stamp(r) for r in records])


def _committed(core: Coordinator) -> dict[tuple[str, int], int]:
    return {tp: kept[0] for tp, kept in core.groups[GROUP].offsets.items()}


def _old_key(topic: str, partition: int) -> bytes:
    return f"{PREFIX}/offsets/{SHARD}/{quote(GROUP, safe='')}/{topic}/{partition}".encode()


async def test_a_commit_of_a_topic_s_partitions_is_one_key(store: EtcdStore) -> None:
    await _topic(store, "t", 10)
    node, serving, _ = await _node(store, "n1")
    await _write(serving, _commit(range(10), 100))
    keys = await store.keys(f"{PREFIX}/offsets/".encode())
    assert keys == [block_key(PREFIX, SHARD, GROUP, "t", 0)]  # ten keys before
    assert keys[0].endswith(b"/t/p0-63")
    kept = await kept_offsets(store, PREFIX)
    assert {p: kept[GROUP, "t", p].offset for p in range(10)} == {p: 100 + p for p in range(10)}
    await node.leave()


async def test_other_members_commits_to_other_partitions_all_survive_a_failover(
    store: EtcdStore,
) -> None:
    """Two members of one group commit their own partitions of one topic, in batches of
    their own and in one batch: each write of the topic's key keeps the other's offsets,
    and the node taking the shard over loads every one."""
    await _topic(store, "t", 10)
    first, serving, _ = await _node(store, "n1")
    await _write(serving, _commit(range(5), 10))  # member a: partitions 0-4
    await _write(serving, _commit(range(5, 10), 20))  # member b: partitions 5-9
    await _write(serving, [*_commit([0], 30), *_commit([9], 40)])  # both, in one batch
    await first.leave()
    second, _, core = await _node(store, "n2")
    expected = {0: 30, 1: 11, 2: 12, 3: 13, 4: 14, 5: 25, 6: 26, 7: 27, 8: 28, 9: 49}
    assert _committed(core) == {("t", p): offset for p, offset in expected.items()}
    await second.leave()


async def test_a_topic_s_partitions_beyond_a_block_go_to_a_key_of_their_own(
    store: EtcdStore,
) -> None:
    await _topic(store, "t", BLOCK + 2)
    node, serving, _ = await _node(store, "n1")
    await _write(serving, _commit([0, BLOCK - 1, BLOCK, BLOCK + 1], 0))
    keys = sorted(await store.keys(f"{PREFIX}/offsets/".encode()))
    assert [k.rsplit(b"/", 1)[1] for k in keys] == [b"p0-63", b"p64-127"]
    assert sorted(p for _, _, p in await kept_offsets(store, PREFIX)) == [0, 63, 64, 65]
    await node.leave()


async def test_a_deleted_topic_s_key_goes_and_other_topics_stay(store: EtcdStore) -> None:
    await _topic(store, "t", 10)
    await _topic(store, "kept", 1)
    node, serving, core = await _node(store, "n1")
    await _write(serving, [*_commit(range(10), 0), *_commit([0], 5, topic="kept")])
    await store.delete(f"{PREFIX}/topics/t".encode())
    await serving.topics.load()  # another node deleted it: its offsets are forgotten
    dropped = [r for r in core.take_changes() if isinstance(r, OffsetRecord)]
    assert len(dropped) == 10
    await _write(serving, dropped)
    keys = await store.keys(f"{PREFIX}/offsets/".encode())
    assert keys == [block_key(PREFIX, SHARD, GROUP, "kept", 0)]
    await node.leave()


async def test_offsets_kept_one_key_per_partition_are_loaded_and_moved_to_one_key(
    store: EtcdStore,
) -> None:
    """An etcd written by an older version (one key per partition): the shard's load serves
    every offset, writes them as the topic's key and deletes the old keys, fenced on the
    loading epoch; a later commit of one partition keeps the others. An old key of a
    topic that is gone is dropped."""
    await _topic(store, "t", 10)
    created = await store.get(f"{PREFIX}/topics/t".encode())
    assert created is not None
    for p in range(10):  # half from before incarnations were kept, half with one
        old = OffsetRecord(GROUP, "t", p, 100 + p, "m", 1_000, created.revision if p % 2 else 0)
        await store.put(_old_key("t", p), msgspec.msgpack.encode(old))
    await store.put(_old_key("gone", 0), msgspec.msgpack.encode(OffsetRecord(GROUP, "gone", 0, 1)))
    node, serving, core = await _node(store, "n1")
    assert _committed(core) == {("t", p): 100 + p for p in range(10)}
    key = block_key(PREFIX, SHARD, GROUP, "t", 0)
    assert await store.keys(f"{PREFIX}/offsets/".encode()) == [key]
    entry = await store.get(key)
    assert entry is not None
    block = msgspec.msgpack.decode(entry.value, type=OffsetBlock)
    assert {(o.partition, o.offset, o.metadata, o.committed_ms) for o in block.offsets} == {
        (p, 100 + p, "m", 1_000) for p in range(10)
    }
    assert {o.incarnation for o in block.offsets} == {created.revision}
    await _write(serving, _commit([0], 500))
    await node.leave()
    again, _, loaded = await _node(store, "n2")
    assert _committed(loaded) == {("t", 0): 500} | {("t", p): 100 + p for p in range(1, 10)}
    await again.leave()


async def test_per_partition_keys_left_beside_a_block_key_are_not_read(
    store: EtcdStore,
) -> None:
    """A migration cut short (the block written, not every old key deleted): the block key
    holds its block alone, so an offset deleted since does not come back."""
    await _topic(store, "t", 10)
    node, serving, _ = await _node(store, "n1")
    await _write(serving, _commit([0, 1], 10))
    await _write(serving, [offset_deleted(GROUP, "t", 1)])  # expired, say
    await node.leave()
    for p in (0, 1):  # what an older version had left
        await store.put(_old_key("t", p), msgspec.msgpack.encode(OffsetRecord(GROUP, "t", p, 3)))
    again, _, core = await _node(store, "n2")
    assert _committed(core) == {("t", 0): 10}
    assert await store.keys(f"{PREFIX}/offsets/".encode()) == [
        block_key(PREFIX, SHARD, GROUP, "t", 0)
    ]
    await again.leave()


@pytest.mark.e2e
async def test_clients_committing_other_partitions_of_a_topic_at_once_lose_none(
    etcd: Etcd,
) -> None:
    """Two clients commit their own halves of a topic's partitions at the same moments, on
    one ``huddle serve --cluster`` node; a node started later loads every last offset."""
    halves = ([0, 1, 2, 3], [4, 5, 6, 7])
    async with node(etcd) as address, Admin(address) as first, Admin(address) as second:
        await first.create_topic("t", 8)
        for offset in range(1, 21):
            await asyncio.gather(
                *(
                    admin.set_offsets(GROUP, {tp("t", p): offset * 10 + p for p in half})
                    for admin, half in zip((first, second), halves, strict=True)
                )
            )
    async with node(etcd) as address, Admin(address) as admin:
        assert await admin.committed_offsets(GROUP) == {tp("t", p): 200 + p for p in range(8)}


def test_a_block_s_write_merges_with_memory_and_an_emptied_block_is_deleted() -> None:
    kept = KeptOffsets("/p")
    key = block_key("/p", 0, GROUP, "t", 0)
    first = kept.changes(0, _commit(range(3), 0))
    assert list(first) == [key]
    second = kept.changes(0, [offset_deleted(GROUP, "t", 1), *_commit([2], 10)])
    value = second[key]
    assert value is not None
    block = msgspec.msgpack.decode(value, type=OffsetBlock)
    assert sorted((o.partition, o.offset) for o in block.offsets) == [(0, 0), (2, 12)]
    assert kept.changes(0, [offset_deleted(GROUP, "t", 0), offset_deleted(GROUP, "t", 2)]) == {
        key: None
    }
    assert kept.block(0, key) is None
    kept.changes(1, _commit([0], 0))
    kept.drop([1])  # a shard no longer served: read again from etcd when taken again
    assert kept.block(1, block_key("/p", 1, GROUP, "t", 0)) is None
