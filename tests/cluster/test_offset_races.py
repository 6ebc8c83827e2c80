"""A cluster node's offset blocks are written from what it holds in memory of each shard it
serves (``huddle.coordinator.cluster.offsets``): these tests race that memory against
writes whose outcome is unknown, a shard lost and taken up again meanwhile, and loads
cut short, against a real etcd. Whatever happens, an acknowledged commit is never lost
and nothing refused comes back after a later acknowledged one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence

import msgspec
import pytest

from huddle.coordinator.cluster.fenced import MAX_TXN_OPS
from huddle.coordinator.cluster.keeper import EtcdKeeper, Held
from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.offsets import (
    KeptOffset,
    OffsetBlock,
    block_key,
    kept_offsets,
)
from huddle.coordinator.cluster.serving import ClusterServing
from huddle.coordinator.cluster.shards import shard_of
from huddle.coordinator.cluster.store import EtcdStore, Lease, StoreTimeoutError
from huddle.coordinator.core import Coordinator
from huddle.coordinator.storage.records import OffsetRecord, Record
from tests.etcd import Etcd, etcd

__all__ = ["etcd"]  # the fixture

SHARDS = 2
PREFIX = "/races"
GROUP = "g"
SHARD = shard_of(GROUP, SHARDS)
WAIT_S = 10.0


class HeldStore(EtcdStore):
    """An etcd store whose next fenced write (``held``) waits until the test lets it go,
    then fails as a passed deadline does, having written nothing (its outcome is unknown
    to the caller), or (``lands``) is made then."""

    hold_next = False
    lands = False
    skip = 0  # fenced writes made before the one held
    late: asyncio.Task[list[bytes]] | None = None  # a held write cancelled, made on release
    fail_writes_after = -1  # write_if calls (a load's) made before one fails; -1: none
    failed_lands = False  # whether that one is made before it fails

    def held(self, *, lands: bool = False, skip: int = 0) -> tuple[asyncio.Event, asyncio.Event]:
        self.entered, self.release = asyncio.Event(), asyncio.Event()
        self.hold_next, self.lands, self.skip = True, lands, skip
        return self.entered, self.release

    async def write_fenced_all(
        self,
        epochs: Mapping[bytes, int],
        puts: Mapping[bytes, bytes],
        deletes: Sequence[bytes] = (),
    ) -> list[bytes]:
        if self.hold_next and self.skip:
            self.skip -= 1
        elif self.hold_next:
            self.hold_next = False
            self.entered.set()
            try:
                await asyncio.wait_for(self.release.wait(), WAIT_S)
            except asyncio.CancelledError:  # its bytes are on their way all the same
                self.late = asyncio.get_running_loop().create_task(
                    self._late(epochs, puts, deletes)
                )
                raise
            if not self.lands:
                raise StoreTimeoutError("etcd did not answer within 3 s")
        return await super().write_fenced_all(epochs, puts, deletes)

    async def _late(
        self, epochs: Mapping[bytes, int], puts: Mapping[bytes, bytes], deletes: Sequence[bytes]
    ) -> list[bytes]:
        await asyncio.wait_for(self.release.wait(), WAIT_S)
        return await super().write_fenced_all(epochs, puts, deletes)

    async def write_if(
        self,
        revisions: Mapping[bytes, int],
        puts: Mapping[bytes, bytes],
        deletes: Sequence[bytes] = (),
        *,
        lease: Lease | None = None,
    ) -> int | None:
        if self.fail_writes_after == 0 and lease is None:  # not an epoch's renewal
            self.fail_writes_after = -1
            if self.failed_lands:
                await super().write_if(revisions, puts, deletes)
            raise StoreTimeoutError("etcd did not answer within 3 s")
        if self.fail_writes_after > 0 and lease is None:
            self.fail_writes_after -= 1
        return await super().write_if(revisions, puts, deletes, lease=lease)


@pytest.fixture
async def store(etcd: Etcd) -> AsyncIterator[HeldStore]:
    opened = await HeldStore.connect([etcd.endpoint])
    assert isinstance(opened, HeldStore)
    yield opened
    await opened.close()


async def _nothing() -> None:
    return None


async def _node(store: EtcdStore, node_id: str) -> tuple[ClusterNode, ClusterServing]:
    """A node serving every shard (the only one alive), a topic ``t`` of 10 partitions."""
    await store.put(f"{PREFIX}/topics/t".encode(), b"10")
    node = ClusterNode(
        store, node_id=node_id, advertise="127.0.0.1:9001", shards=SHARDS, prefix=PREFIX
    )
    serving = ClusterServing(
        Coordinator(), store, node, now=time.monotonic, dispatch=lambda out: None, drain=_nothing
    )
    await serving.topics.load()
    await node.register()
    await node.reconcile()
    assert sorted(node.owned()) == list(range(SHARDS))
    return node, serving


def _committed(serving: ClusterServing, partitions: dict[int, int]) -> list[OffsetRecord]:
    """Commits the core accepted (as a member's OffsetCommit), stamped as the server does."""
    records = [OffsetRecord(GROUP, "t", p, offset) for p, offset in partitions.items()]
    serving.core.load(records, time.monotonic())
    return records


async def _kept(store: EtcdStore) -> dict[int, int]:
    return {p: r.offset for (_, _, p), r in (await kept_offsets(store, PREFIX)).items()}


@pytest.mark.parametrize("lands", [False, True], ids=["unknown-outcome", "refused"])
async def test_a_write_ending_after_its_shard_was_taken_up_again_is_not_acknowledged(
    store: HeldStore, lands: bool
) -> None:
    """A batch's write hangs; meanwhile the node stops serving the shard (its lease's
    deadline passed, say) and takes it up again, loading etcd's blocks under a new epoch.
    The write then fails (outcome unknown): the batch was made under the serving that ended,
    so it is not made again under the new one's epoch, nor acknowledged. Before, the writer
    renewed the new serving's epoch and wrote the old serving's block (acknowledged), which
    the new serving did not hold: its next commit of another partition undid it. The same
    write reaching etcd late is refused (the epoch it was fenced on was left): the new
    serving, which holds what etcd holds, goes on (before, it was deposed for it)."""
    node, serving = await _node(store, "n1")
    assert await serving.write([serving.stamp(r) for r in _committed(serving, {0: 10})])
    entered, release = store.held(lands=lands)
    stamped = [serving.stamp(r) for r in _committed(serving, {0: 20})]
    batch = asyncio.create_task(serving.write(stamped))
    await asyncio.wait_for(entered.wait(), WAIT_S)
    node.depose(SHARD, "its lease's deadline passed (the test)")
    await node.reconcile()  # taken up again, under a renewed epoch, from etcd
    assert node.serves(SHARD)
    release.set()
    acknowledged = await asyncio.wait_for(batch, WAIT_S)
    assert not acknowledged  # its serving ended: refused (NOT_COORDINATOR), made again
    assert node.serves(SHARD)  # the new serving goes on
    # another member commits another partition of the same block on the new serving
    assert await serving.write([serving.stamp(r) for r in _committed(serving, {1: 5})])
    assert await _kept(store) == {0: 10, 1: 5}  # the same as the node serves
    await node.leave()


async def test_a_large_write_failing_after_its_shard_was_taken_up_again_is_not_acknowledged(
    store: HeldStore,
) -> None:
    """The same with a commit of more blocks than a transaction holds (written in turn):
    the first transaction lands, the second hangs while the shard is taken up again (loaded
    with the first's blocks), then fails. It is not made again under the new serving's
    epoch (before, it was, and acknowledged: the new serving's next commit to the block
    undid it)."""
    topics = [f"u{i}" for i in range(MAX_TXN_OPS + 1)]
    for topic in topics:
        await store.put(f"{PREFIX}/topics/{topic}".encode(), b"2")
    node, serving = await _node(store, "n1")
    last = topics[-1]

    def commit(offset: int) -> list[OffsetRecord]:
        records = [OffsetRecord(GROUP, topic, 0, offset) for topic in topics]
        serving.core.load(records, time.monotonic())
        return records

    assert await serving.write([serving.stamp(r) for r in commit(10)])
    entered, release = store.held(skip=1)
    batch = asyncio.create_task(serving.write([serving.stamp(r) for r in commit(20)]))
    await asyncio.wait_for(entered.wait(), WAIT_S)
    node.depose(SHARD, "its lease's deadline passed (the test)")
    await node.reconcile()
    assert node.serves(SHARD)
    release.set()
    assert not await asyncio.wait_for(batch, WAIT_S)
    assert node.serves(SHARD)
    other = OffsetRecord(GROUP, last, 1, 7)  # the same block as the held write's
    serving.core.load([other], time.monotonic())
    assert await serving.write([serving.stamp(other)])
    kept = await kept_offsets(store, PREFIX)
    served = serving.core.groups[GROUP].offsets
    assert kept[GROUP, last, 0].offset == served[last, 0][0] == 10  # as the new serving
    await node.leave()


async def test_a_batch_given_up_mid_write_lands_late_and_changes_nothing(store: HeldStore) -> None:
    """The keeper gives a batch up (its write outlived the keeper's deadline: cancelled mid-
    way), and its transaction reaches etcd only after the node took the shard up again and
    acknowledged nothing yet: it is refused (the epoch was renewed), the batch was answered
    NOT_COORDINATOR, and the new serving's next commit of the block keeps what it holds."""
    node, serving = await _node(store, "n1")
    released: list[Held] = []
    refused: list[Held] = []
    keeper = EtcdKeeper(
        asyncio.get_running_loop(),
        serving.write,
        stamp=serving.stamp,
        release=released.extend,
        refuse=refused.extend,
        deadline_s=0.5,
        give_up=serving.give_up,
    )
    keeper.hold(list[Record](_committed(serving, {0: 10})), 1, None, [])
    await asyncio.wait_for(keeper.drain(), WAIT_S)
    entered, release = store.held()
    keeper.hold(list[Record](_committed(serving, {0: 20})), 2, None, [])
    keeper.submit()
    await asyncio.wait_for(entered.wait(), WAIT_S)
    await asyncio.wait_for(keeper.drain(), WAIT_S)  # given up at its deadline
    assert [conn for conn, _, _ in refused] == [2]
    assert not node.serves(SHARD)
    await node.reconcile()
    assert node.serves(SHARD)
    release.set()
    assert store.late is not None
    assert await asyncio.wait_for(store.late, WAIT_S)  # refused: its owner key moved on
    keeper.hold(list[Record](_committed(serving, {1: 5})), 3, None, [])
    await asyncio.wait_for(keeper.drain(), WAIT_S)
    assert [conn for conn, _, _ in released] == [1, 3]
    assert await _kept(store) == {0: 10, 1: 5}
    await node.leave()


def _old_key(topic: str, partition: int) -> bytes:
    """An offset's key as versions before blocks kept it (one key per partition)."""
    return f"{PREFIX}/offsets/{SHARD}/{GROUP}/{topic}/{partition}".encode()


@pytest.mark.parametrize("lands", [False, True], ids=["lost", "landed"])
async def test_a_migration_cut_short_loses_no_offset_and_is_finished_by_the_next_load(
    store: HeldStore, lands: bool
) -> None:
    """A shard kept one key per partition (an older version's) for two topics of 64
    partitions: its load moves them to blocks in two transactions (130 operations). The
    second one's outcome is unknown (it did not land, or landed unanswered): the load fails,
    the shard is not served; taken up again, it is loaded with every offset, as blocks."""
    for topic in ("a", "b"):
        await store.put(f"{PREFIX}/topics/{topic}".encode(), b"64")
        for p in range(64):
            old = OffsetRecord(GROUP, topic, p, 1000 + p, "m", 1)
            await store.put(_old_key(topic, p), msgspec.msgpack.encode(old))
    store.fail_writes_after, store.failed_lands = 1, lands
    await store.put(f"{PREFIX}/topics/t".encode(), b"10")
    node = ClusterNode(
        store, node_id="n1", advertise="127.0.0.1:9001", shards=SHARDS, prefix=PREFIX
    )
    serving = ClusterServing(
        Coordinator(), store, node, now=time.monotonic, dispatch=lambda out: None, drain=_nothing
    )
    await serving.topics.load()
    await node.register()
    await node.reconcile()
    assert not node.serves(SHARD)  # its load failed
    assert store.fail_writes_after == -1
    await node.reconcile()  # taken up again: under a renewed epoch, loaded from etcd
    assert node.serves(SHARD)
    expected = {(t, p): 1000 + p for t in ("a", "b") for p in range(64)}
    committed = serving.core.groups[GROUP].offsets
    assert {tp: kept[0] for tp, kept in committed.items()} == expected
    keys = sorted(await store.keys(f"{PREFIX}/offsets/".encode()))
    assert keys == sorted(block_key(PREFIX, SHARD, GROUP, t, 0) for t in ("a", "b"))
    for key in keys:
        entry = await store.get(key)
        assert entry is not None
        assert len(msgspec.msgpack.decode(entry.value, type=OffsetBlock).offsets) == 64
    await node.leave()


def test_a_node_of_the_older_layout_cannot_read_a_block_and_fails_its_load() -> None:
    """What a node of the older version does with a block key: its load decodes every key
    of a shard's offsets as one offset, and a block is not one (an error, the shard not
    served), never an offset read wrong (served without the block's offsets)."""
    block = OffsetBlock(GROUP, "t", [KeptOffset(p, 10 + p, "m", 1, 5) for p in range(3)])
    older = msgspec.msgpack.Decoder(OffsetRecord)
    with pytest.raises(msgspec.DecodeError):
        older.decode(msgspec.msgpack.encode(block))
