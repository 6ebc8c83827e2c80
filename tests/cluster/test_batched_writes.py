"""A pass's commits for many groups, in several shards, go to etcd in as few transactions as
etcd takes (each fenced on every shard it holds); one whose shard another node took fails the
whole batch (every answer refused, the other shards' changes written all the same), and the
commits made again are kept: nothing acknowledged is lost, nothing refused is half-kept."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest

from huddle.coordinator.cluster.fenced import MAX_TXN_BYTES, MAX_TXN_OPS, chunks, pack
from huddle.coordinator.cluster.keeper import EtcdKeeper, Held
from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.offsets import kept_offsets
from huddle.coordinator.cluster.serving import ClusterServing
from huddle.coordinator.cluster.shards import shard_of
from huddle.coordinator.cluster.store import EtcdStore, StoreTimeoutError
from huddle.coordinator.core import Coordinator
from huddle.coordinator.storage.records import OffsetRecord
from tests.etcd import Etcd, etcd

__all__ = ["etcd"]  # the fixture

T = TypeVar("T")
SHARDS = 4
PREFIX = "/batched"
PARTITIONS = 10


class _Counted:
    """An etcd client whose transactions are counted (every other call goes through)."""

    def __init__(self, client: Any, store: CountingStore) -> None:
        self._client = client
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def transaction(self, **kwargs: Any) -> Any:
        self._store.transactions += 1
        return self._client.transaction(**kwargs)


class CountingStore(EtcdStore):
    """Counts the transactions sent to etcd; ``lose_answers`` of them land, but their
    answer is lost (the caller sees a deadline pass)."""

    transactions = 0
    lose_answers = 0

    async def _call(
        self, client: Any, op: Callable[[Any], Awaitable[T]], timeout_s: float | None
    ) -> T:
        answer = await super()._call(client, lambda c: op(_Counted(c, self)), timeout_s)
        if self.lose_answers and isinstance(answer, tuple):  # a transaction's (ok, responses)
            self.lose_answers -= 1
            raise StoreTimeoutError("etcd did not answer within 3 s")
        return answer


@pytest.fixture
async def store(etcd: Etcd) -> AsyncIterator[CountingStore]:
    opened = await CountingStore.connect([etcd.endpoint])
    assert isinstance(opened, CountingStore)
    yield opened
    await opened.close()


async def _nothing() -> None:
    return None


async def _serving(store: EtcdStore) -> tuple[ClusterNode, ClusterServing]:
    node = ClusterNode(
        store, node_id="n1", advertise="127.0.0.1:9001", shards=SHARDS, prefix=PREFIX
    )
    serving = ClusterServing(
        Coordinator(), store, node, now=time.monotonic, dispatch=lambda out: None, drain=_nothing
    )
    await store.put(f"{PREFIX}/topics/t".encode(), str(PARTITIONS).encode())
    await serving.topics.load()
    await node.register()
    await node.reconcile()
    assert sorted(node.owned()) == list(range(SHARDS))
    return node, serving


def _groups_in_shards(count: int) -> list[str]:
    """``count`` groups, each in a shard of its own."""
    found: dict[int, str] = {}
    for i in range(1000):
        found.setdefault(shard_of(f"g{i}", SHARDS), f"g{i}")
        if len(found) == count:
            return list(found.values())
    raise AssertionError("not enough shards")


def _commit(group: str, offset: int) -> list[OffsetRecord]:
    return [OffsetRecord(group, "t", p, offset) for p in range(PARTITIONS)]


async def _kept(store: EtcdStore, group: str) -> list[int | None]:
    kept = await kept_offsets(store, PREFIX)
    return [
        None if (found := kept.get((group, "t", partition))) is None else found.offset
        for partition in range(PARTITIONS)
    ]


def test_shards_are_packed_whole_into_transactions_of_at_most_the_limit() -> None:
    assert pack({0: 60, 1: 30, 2: 50, 3: 250, 4: 50}) == [[0, 1], [3], [2, 4]]
    assert pack({5: MAX_TXN_OPS}) == [[5]]
    assert pack({}) == []


def test_shards_are_packed_by_bytes_too_and_a_large_shard_is_cut_by_bytes() -> None:
    weights = {0: 600_000, 1: 600_000, 2: MAX_TXN_BYTES + 1}
    assert pack({0: 1, 1: 1, 2: 1}, weights=weights) == [[0], [2], [1]]
    changes: dict[bytes, bytes | None] = {b"a": b"x" * 10, b"b": b"y" * 10, b"c": None}
    assert chunks(changes, limit=2, max_bytes=15) == [
        {b"a": b"x" * 10},
        {b"b": b"y" * 10, b"c": None},
    ]
    assert chunks(changes, limit=2) == [{b"a": b"x" * 10, b"b": b"y" * 10}, {b"c": None}]


async def test_a_pass_larger_than_etcd_takes_in_one_request_is_written_in_several(
    store: CountingStore,
) -> None:
    """Commits with the most metadata a commit may carry (4 KiB a partition), of a topic's
    64 partitions for 8 groups: over 2 MB, more than etcd takes in one request (1.5 MiB)."""
    node, serving = await _serving(store)
    await store.put(f"{PREFIX}/topics/wide".encode(), b"64")
    await serving.topics.load()
    groups = [f"wide-{i}" for i in range(8)]
    metadata = "m" * 4096
    records = [
        serving.stamp(OffsetRecord(g, "wide", p, 9, metadata)) for g in groups for p in range(64)
    ]
    assert await serving.write(records)
    kept = await kept_offsets(store, PREFIX)
    assert sum(1 for g, _, _ in kept if g in groups) == 8 * 64
    assert sorted(node.owned()) == list(range(SHARDS))
    await node.leave()


async def test_commits_of_groups_in_several_shards_go_in_one_transaction(
    store: CountingStore,
) -> None:
    node, serving = await _serving(store)
    groups = _groups_in_shards(3)
    records = [serving.stamp(r) for g in groups for r in _commit(g, 7)]
    store.transactions = 0
    assert await serving.write(records)
    assert store.transactions == 1  # one per shard before
    for group in groups:
        assert await _kept(store, group) == [7] * PARTITIONS
    assert sorted(node.owned()) == list(range(SHARDS))
    await node.leave()


async def test_a_shard_with_more_changes_than_a_transaction_holds_is_written_in_turn(
    store: CountingStore,
) -> None:
    node, serving = await _serving(store)
    (big, small) = _groups_in_shards(2)
    many = [OffsetRecord(big, f"u{i}", 0, 3) for i in range(MAX_TXN_OPS * 2 + 1)]
    for i in range(len(many)):
        await store.put(f"{PREFIX}/topics/u{i}".encode(), b"1")
    await serving.topics.load()
    records = [serving.stamp(r) for r in [*many, *_commit(small, 5)]]
    store.transactions = 0
    assert await serving.write(records)
    assert store.transactions == 4  # the large shard's three in turn, the small one's
    assert await _kept(store, small) == [5] * PARTITIONS
    kept = await store.get_prefix(f"{PREFIX}/offsets/{shard_of(big, SHARDS)}/".encode())
    assert len(kept) == len(many)
    await node.leave()


async def test_a_batch_with_a_shard_another_node_took_is_refused_and_nothing_is_lost(
    store: CountingStore,
) -> None:
    node, serving = await _serving(store)
    groups = _groups_in_shards(3)
    taken = shard_of(groups[1], SHARDS)
    released: list[Held] = []
    refused: list[Held] = []
    keeper = EtcdKeeper(
        asyncio.get_running_loop(),
        serving.write,
        stamp=serving.stamp,
        release=released.extend,
        refuse=refused.extend,
        deadline_s=serving.write_deadline_s,
        give_up=serving.give_up,
    )
    for offset in (1, 2):  # a first batch kept, to see what a refused one leaves
        for i, group in enumerate(groups):
            keeper.hold(list(_commit(group, offset)), i, None, [])
        if offset == 2:  # another node takes a shard: its owner key's revision moves on
            owner = f"{PREFIX}/shards/{taken}".encode()
            await store.put(owner, b"n2")
        store.transactions = 0
        await keeper.drain()
    assert [conn for conn, _, _ in released] == [0, 1, 2]  # the first batch
    assert [conn for conn, _, _ in refused] == [0, 1, 2]  # every answer of the second
    assert store.transactions == 2  # refused for the taken shard; the others again, without it
    assert not node.serves(taken)
    assert await _kept(store, groups[1]) == [1] * PARTITIONS  # as acknowledged: nothing half-kept
    for group in (groups[0], groups[2]):  # written, though not acknowledged: made again below
        assert await _kept(store, group) == [2] * PARTITIONS
    assert sorted(node.owned()) == sorted(set(range(SHARDS)) - {taken})
    # the clients commit again, once the taken shard is theirs again (here: given back)
    await store.put(f"{PREFIX}/shards/{taken}".encode(), b"n1")
    await node.reconcile()
    assert node.serves(taken)
    for i, group in enumerate(groups):
        keeper.hold(list(_commit(group, 2)), i, None, [])
    await keeper.drain()
    assert [conn for conn, _, _ in released] == [0, 1, 2, 0, 1, 2]
    for group in groups:
        assert await _kept(store, group) == [2] * PARTITIONS
    await node.leave()


async def test_a_batch_whose_answer_is_lost_renews_every_shard_in_it_and_is_kept(
    store: CountingStore,
) -> None:
    node, serving = await _serving(store)
    groups = _groups_in_shards(3)
    shards = [shard_of(g, SHARDS) for g in groups]
    epochs = [node.epoch(s) for s in shards]
    records = [serving.stamp(r) for g in groups for r in _commit(g, 9)]
    store.lose_answers = 1
    assert await serving.write(records)
    for shard, epoch in zip(shards, epochs, strict=True):
        renewed = node.epoch(shard)
        assert renewed is not None
        assert epoch is not None
        assert renewed > epoch
    for group in groups:
        assert await _kept(store, group) == [9] * PARTITIONS
    assert serving.loads == SHARDS  # served all along, loaded nowhere again
    await node.leave()
