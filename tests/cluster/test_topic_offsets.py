"""A deleted topic's offsets are gone for good in a cluster, as in Kafka (its
GroupMetadataManager deletes the offsets of deleted partitions) and as with a data dir: a
topic deleted and created again, or shrunk and grown again, starts with none on the
partitions it lost, whichever node loads the shard later."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from huddle.client import Admin
from huddle.coordinator.cluster.offsets import kept_offsets
from huddle.coordinator.cluster.store import EtcdStore
from huddle.coordinator.cluster.topics import TopicState, parse_cuts
from huddle.protocol.embedded import TopicPartition
from tests.etcd import Etcd, etcd
from tests.helpers import eventually, serve_process

__all__ = ["etcd"]  # the fixture

PREFIX = "/incarnations"


@asynccontextmanager
async def node(etcd: Etcd) -> AsyncIterator[str]:
    """One ``huddle serve --cluster`` node serving every shard: its address."""
    flags = ["--cluster", f"etcd://{etcd.host}:{etcd.port}", "--shards", "2"]
    flags += ["--lease-ttl-s", "2", "--cluster-prefix", PREFIX]
    async with serve_process(*flags) as (_, port, _):
        address = f"127.0.0.1:{port}"

        async def ready() -> bool:
            try:
                async with Admin(address) as admin:
                    await admin.committed_offsets("g")
                    await admin.list_topics()
            except Exception:
                return False
            return True

        await eventually(ready, wait_s=30, what="the node serves every shard")
        yield address


async def _kept(etcd: Etcd) -> list[tuple[str, str, int]]:
    """The offsets etcd holds, by group, topic and partition."""
    store = await EtcdStore.connect([etcd.endpoint])
    try:
        return sorted(await kept_offsets(store, PREFIX))
    finally:
        await store.close()


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


@pytest.mark.e2e
async def test_a_topic_deleted_and_created_again_has_none_of_its_old_offsets(
    etcd: Etcd,
) -> None:
    async with node(etcd) as address, Admin(address, timeout=30) as admin:
        await admin.create_topic("t", 2)
        await admin.create_topic("kept", 1)
        await admin.set_offsets("g", {tp("t", 0): 5, tp("t", 1): 7, tp("kept", 0): 3})
        await admin.delete_topic("t")
        await admin.create_topic("t", 2)
        await admin.set_offsets("h", {tp("t", 0): 9})  # the new topic's
        assert await admin.committed_offsets("g") == {tp("kept", 0): 3}
    # the node stopped: a node loads the shards again from etcd
    async with node(etcd) as address, Admin(address, timeout=30) as admin:
        assert await admin.committed_offsets("g") == {tp("kept", 0): 3}
        assert await admin.committed_offsets("h") == {tp("t", 0): 9}
    assert await _kept(etcd) == [("g", "kept", 0), ("h", "t", 0)]  # gone from etcd too


@pytest.mark.e2e
async def test_partitions_a_shrink_cut_off_come_back_with_no_offsets(etcd: Etcd) -> None:
    async with node(etcd) as address, Admin(address, timeout=30) as admin:
        await admin.create_topic("t", 4)
        await admin.set_offsets("g", {tp("t", p): 10 + p for p in range(4)})
        await admin.alter_topic("t", 2)
        await admin.alter_topic("t", 4)
        await admin.set_offsets("g", {tp("t", 3): 33})  # the partition as it is now
        expected = {tp("t", 0): 10, tp("t", 1): 11, tp("t", 3): 33}
        assert await admin.committed_offsets("g") == expected
    async with node(etcd) as address, Admin(address, timeout=30) as admin:
        assert await admin.committed_offsets("g") == expected
    assert await _kept(etcd) == [("g", "t", 0), ("g", "t", 1), ("g", "t", 3)]


def test_a_partition_s_incarnation_changes_only_where_a_shrink_cut() -> None:
    created = TopicState(partitions=4, created=100, revision=100)
    assert [created.incarnation(p) for p in range(4)] == [100] * 4
    # shrunk to 2 at revision 120 (the key's revision before it: 110), grown again
    cut = TopicState(partitions=4, created=100, revision=130, cuts=parse_cuts(b"2@111"))
    assert [cut.incarnation(p) for p in range(4)] == [100, 100, 111, 111]
    # then to 3 (the key at 130), grown again: partition 3 is another once more
    again = TopicState(partitions=4, created=100, revision=150, cuts=parse_cuts(b"2@111 3@131"))
    assert [again.incarnation(p) for p in range(4)] == [100, 100, 111, 131]
    # deleted and created again: a new key, every partition new
    anew = TopicState(partitions=4, created=200, revision=200, cuts=())
    assert all(anew.incarnation(p) == 200 for p in range(4))
