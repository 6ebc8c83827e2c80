"""A cluster node taking a shard over loads its groups through the core, as Kafka's
coordinator does on election (``onGroupLoaded``), against a real etcd."""

from __future__ import annotations

from urllib.parse import quote

import msgspec
import pytest

from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.serving import ClusterServing
from huddle.coordinator.cluster.shards import shard_of
from huddle.coordinator.cluster.store import EtcdStore
from huddle.coordinator.config import GroupConfig
from huddle.coordinator.core import Coordinator
from huddle.coordinator.state import GroupState
from huddle.coordinator.storage.records import GroupRecord
from tests.etcd import Etcd, etcd
from tests.harness import Driver
from tests.helpers import eventually, serve_process

__all__ = ["etcd"]  # the fixture

SHARDS = 4
PREFIX = "/loading"


async def test_a_shard_taken_with_a_group_over_the_size_limit_rebalances_it(etcd: Etcd) -> None:
    kept = Driver()
    kept.core.keep_groups()
    kept.form(1, 2, 3)
    (record,) = [r for r in kept.core.take_changes() if isinstance(r, GroupRecord)]
    shard = shard_of("g", SHARDS)
    store = await EtcdStore.connect([etcd.endpoint])
    try:
        key = f"{PREFIX}/groups/{shard}/{quote('g', safe='')}".encode()
        await store.put(key, msgspec.msgpack.encode(record))
        node = ClusterNode(
            store, node_id="n1", advertise="127.0.0.1:9001", shards=SHARDS, prefix=PREFIX
        )
        core = Coordinator(GroupConfig(initial_rebalance_delay_ms=0, max_group_size=2))
        serving = ClusterServing(
            core, store, node, now=lambda: 0.0, dispatch=lambda out: None, drain=_nothing
        )
        await serving.shard_taken(shard, 1)
        group = core.groups["g"]
        assert (group.state, group.generation, group.size) == (
            GroupState.PREPARING_REBALANCE,
            record.generation,
            3,
        )
    finally:
        await store.close()


async def _nothing() -> None:
    return None


@pytest.mark.e2e
async def test_a_loaded_member_that_never_comes_back_is_removed_after_its_session(
    etcd: Etcd,
) -> None:
    """A node that takes a shard over arms the loaded members' sessions at once: a member
    that never finds the new node is removed after its session, though nobody asks anything
    (the group empties and, with no offsets, its record goes from etcd)."""
    kept = Driver(min_session_timeout_ms=100)
    kept.core.keep_groups()
    kept.form(1, session_ms=600)
    (record,) = [r for r in kept.core.take_changes() if isinstance(r, GroupRecord)]
    prefix = "/orphans"
    key = f"{prefix}/groups/{shard_of('g', SHARDS)}/g".encode()
    store = await EtcdStore.connect([etcd.endpoint])
    try:
        await store.put(f"{prefix}/config/shards".encode(), str(SHARDS).encode())
        await store.put(key, msgspec.msgpack.encode(record))
        flags = [
            "--cluster", f"etcd://{etcd.host}:{etcd.port}", "--shards", str(SHARDS),
            "--cluster-prefix", prefix, "--lease-ttl-s", "2", "--min-session-timeout-ms", "100",
        ]  # fmt: skip
        async with serve_process(*flags):

            async def gone() -> bool:
                return await store.get(key) is None

            await eventually(gone, what="the orphaned member removed and its group gone")
    finally:
        await store.close()
