"""Topics in a coordinator cluster: a change made through one node reaches every node (an
etcd watch), and each node tells its members."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import pytest

from huddle.client import Admin
from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.serving import ClusterServing
from huddle.coordinator.cluster.store import EtcdStore
from huddle.coordinator.core import Coordinator, Peer
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import CoordinatorNotAvailableError
from huddle.protocol.messages import CreateTopicsRequest, TopicSpec
from tests.cluster.test_failover import cluster, owner_of, static_member
from tests.etcd import Etcd, etcd
from tests.helpers import Recorder, eventually, wait_until

__all__ = ["etcd"]  # the fixture


@pytest.mark.e2e
async def test_a_topic_changed_through_one_node_reaches_the_members_of_another(
    etcd: Etcd,
) -> None:
    async with cluster(etcd, 2) as nodes, AsyncExitStack() as stack:
        ports = [port for _, port, _ in nodes]
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
        owner = await owner_of(bootstrap, "resized")
        other = next(f"127.0.0.1:{p}" for p in ports if p != owner)

        async def created() -> bool:  # refused while that node is still joining
            async with Admin(other) as admin:
                try:
                    await admin.create_topic("t", 2)
                except CoordinatorNotAvailableError:
                    return False
            return True

        await eventually(created, what="the other node creates t")
        member = await stack.enter_async_context(
            static_member(f"127.0.0.1:{owner}", "resized", "resized-0", Recorder())
        )
        await wait_until(lambda: len(member.assignment) == 2, what="the member owns t-0, t-1")
        async with Admin(other) as admin:
            await admin.alter_topic("t", 4)
        # the owner heard of it by its watch and pushed TopicMetadataChanged: the leader
        # rebalances for the new partitions
        await wait_until(
            lambda: member.assignment == frozenset(TopicPartition("t", p) for p in range(4)),
            what="the member owns the new partitions",
        )

        async def listed_everywhere() -> bool:
            for port in ports:
                async with Admin(f"127.0.0.1:{port}") as admin:
                    if await admin.list_topics() != {"t": 4}:
                        return False
            return True

        await eventually(listed_everywhere, what="every node lists t with 4 partitions")


async def test_a_topic_change_etcd_does_not_keep_is_undone_in_memory(etcd: Etcd) -> None:
    """The node applied a topic creation, then etcd refused the write: it answers the
    creation COORDINATOR_NOT_AVAILABLE (not kept) and takes etcd's topics back, so this node
    does not list a topic no other node has."""

    class Refusing(EtcdStore):
        async def write_if(self, *args: Any, **kwargs: Any) -> int | None:
            raise ConnectionError("etcd refused the write")

    store = await Refusing.connect([etcd.endpoint])
    try:
        core = Coordinator()
        node = ClusterNode(store, node_id="n", advertise="127.0.0.1:1", shards=4, prefix="/t")
        sent: list[object] = []
        serving = ClusterServing(
            core, store, node, now=lambda: 0.0, dispatch=sent.extend, drain=_nothing
        )
        request = CreateTopicsRequest(topics=[TopicSpec(name="orders", partitions=3)])
        core.handle(Peer(1, "admin", "127.0.0.1"), 1, request, 0.0)
        assert core.topics.partitions == {"orders": 3}
        assert not await serving.write([serving.stamp(r) for r in core.take_changes()])
        assert core.topics.partitions == {}
    finally:
        await store.close()


async def _nothing() -> None:
    return None
