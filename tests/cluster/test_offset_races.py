"""A cluster node's offset blocks are written from what it holds in memory of each shard it
serves (``huddle.coordinator.cluster.offsets``): these tests race that memory against
writes whose outcome is unknown, a shard lost and taken up again meanwhile, and loads
cut short, against a real etcd. Whatever happens, an acknowledged commit is never lost
and nothing refused comes back after a later acknowledged one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence

import pytest

from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.offsets import kept_offsets
from huddle.coordinator.cluster.serving import ClusterServing
from huddle.coordinator.cluster.shards import shard_of
from huddle.coordinator.cluster.store import EtcdStore, StoreTimeoutError
from huddle.coordinator.core import Coordinator
from huddle.coordinator.storage.records import OffsetRecord
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

    def held(self, *, lands: bool = False) -> tuple[asyncio.Event, asyncio.Event]:
        self.entered, self.release = asyncio.Event(), asyncio.Event()
        self.hold_next, self.lands = True, lands
        return self.entered, self.release

    async def write_fenced_all(
        self,
        epochs: Mapping[bytes, int],
        puts: Mapping[bytes, bytes],
        deletes: Sequence[bytes] = (),
    ) -> list[bytes]:
        if self.hold_next:
            self.hold_next = False
            self.entered.set()
            await asyncio.wait_for(self.release.wait(), WAIT_S)
            if not self.lands:
                raise StoreTimeoutError("etcd did not answer within 3 s")
        return await super().write_fenced_all(epochs, puts, deletes)


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
