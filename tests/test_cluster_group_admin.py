"""Deleting a group in a coordinator cluster removes its offsets and metadata from etcd:
no node that takes the shard over brings them back."""

from __future__ import annotations

from huddle.client.admin import Admin
from huddle.client.connection import connect
from huddle.coordinator.cluster.store import EtcdStore
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import CoordinatorNotAvailableError, ErrorCode
from huddle.protocol.messages import DeleteGroupsRequest, ErrorResponse
from tests.etcd import Etcd, etcd
from tests.helpers import eventually
from tests.test_cluster_failover import PREFIX, cluster, owner_of

__all__ = ["etcd"]  # the fixture


async def test_a_deleted_group_leaves_nothing_in_etcd(etcd: Etcd) -> None:
    async with cluster(etcd, 2) as nodes:
        bootstrap = ",".join(f"127.0.0.1:{port}" for _, port, _ in nodes)

        async def ready() -> bool:  # refused while the nodes are still joining
            try:
                async with Admin(bootstrap) as admin:
                    await admin.create_topic("t", 2)
                    await admin.set_offsets("doomed", {TopicPartition("t", 0): 4})
                    await admin.set_offsets("kept", {TopicPartition("t", 1): 8})
            except CoordinatorNotAvailableError:
                return False
            return True

        await eventually(ready, what="the cluster to take commits")
        store = await EtcdStore.connect([etcd.endpoint])
        try:

            async def keys_of(group: str) -> list[bytes]:
                found = await store.keys(PREFIX.encode() + b"/")
                return [
                    k for k in found if f"/{group}/".encode() in k or k.endswith(group.encode())
                ]

            assert await keys_of("doomed")
            async with Admin(bootstrap) as admin:
                await admin.delete_group("doomed")
                assert await admin.committed_offsets("doomed") == {}
                assert await admin.committed_offsets("kept") == {TopicPartition("t", 1): 8}
            assert await keys_of("doomed") == []
            assert await keys_of("kept")
            # asked of a node that does not own its shard: find the coordinator, as Kafka
            owner = await owner_of(bootstrap, "kept")
            other = next(port for _, port, _ in nodes if port != owner)
            async with connect(f"127.0.0.1:{other}", notices=False) as conn:
                refused = await conn.request(DeleteGroupsRequest(groups=["kept"]))
            assert isinstance(refused, ErrorResponse)
            assert refused.error_code == ErrorCode.NOT_COORDINATOR
        finally:
            await store.close()
