"""A cluster node taking a shard over loads its groups through the core, as Kafka's
coordinator does on election (``onGroupLoaded``), against a real etcd."""

from __future__ import annotations

from urllib.parse import quote

import msgspec

from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.serving import ClusterServing
from huddle.coordinator.cluster.shards import shard_of
from huddle.coordinator.cluster.store import EtcdStore
from huddle.coordinator.config import GroupConfig
from huddle.coordinator.core import Coordinator
from huddle.coordinator.records import GroupRecord
from huddle.coordinator.state import GroupState
from tests.etcd import Etcd, etcd
from tests.harness import Driver

__all__ = ["etcd"]  # the fixture

SHARDS = 4
PREFIX = "/loading"


async def test_a_shard_taken_with_a_group_over_the_size_limit_rebalances_it(etcd: Etcd) -> None:
    kept = Driver()
    kept.core.membership.keep_groups = True
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
