"""Deleting a group in a coordinator cluster removes its offsets and metadata from etcd:
no node that takes the shard over brings them back."""

from __future__ import annotations

import pytest

from huddle.client.admin import Admin
from huddle.client.connection import connect
from huddle.coordinator.cluster.store import EtcdStore
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    ErrorCode,
    NotCoordinatorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from huddle.protocol.messages import DeleteGroupsRequest, DeleteGroupsResponse, ErrorResponse
from tests.cluster.test_failover import PREFIX, cluster, owner_of
from tests.etcd import Etcd, etcd
from tests.helpers import eventually

__all__ = ["etcd"]  # the fixture


@pytest.mark.e2e
async def test_a_deleted_group_leaves_nothing_in_etcd(etcd: Etcd) -> None:
    async with cluster(etcd, 2) as nodes:
        bootstrap = ",".join(f"127.0.0.1:{port}" for _, port, _ in nodes)

        moving = (  # a node joining, a shard moving, a topic not yet seen by every node
            CoordinatorNotAvailableError,
            NotCoordinatorError,
            CoordinatorLoadInProgressError,
            UnknownTopicOrPartitionError,
        )

        async def created() -> bool:  # refused while the nodes are still joining
            try:
                async with Admin(bootstrap) as admin:
                    await admin.create_topic("t", 2)
            except TopicAlreadyExistsError:
                return True
            except moving:
                return False
            return True

        async def ready() -> bool:  # and while the group's shard moves
            try:
                async with Admin(bootstrap) as admin:
                    await admin.set_offsets("doomed", {TopicPartition("t", 0): 4})
                    await admin.set_offsets("kept", {TopicPartition("t", 1): 8})
            except moving:
                return False
            return True

        await eventually(created, what="the cluster to take the topic")
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

            async def read_back() -> bool:  # a shard may still move: its next owner answers
                try:
                    async with Admin(bootstrap) as admin:
                        doomed = await admin.committed_offsets("doomed")
                        kept = await admin.committed_offsets("kept")
                except moving:
                    return False
                assert doomed == {}
                assert kept == {TopicPartition("t", 1): 8}
                return True

            await eventually(read_back, what="the offsets left to be read back")
            assert await keys_of("doomed") == []
            assert await keys_of("kept")

            # asked of a node that does not own its shard (or is still joining): find the
            # coordinator, as Kafka answers
            async def refused_elsewhere() -> bool:
                owner = await owner_of(bootstrap, "kept")
                other = next(port for _, port, _ in nodes if port != owner)
                async with connect(f"127.0.0.1:{other}", notices=False) as conn:
                    answer = await conn.request(DeleteGroupsRequest(groups=["kept"]))
                if isinstance(answer, DeleteGroupsResponse):  # it owned the shard by then
                    assert answer.results[0].error_code != ErrorCode.GROUP_ID_NOT_FOUND
                    return False
                return isinstance(answer, ErrorResponse) and answer.error_code in (
                    ErrorCode.NOT_COORDINATOR,
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                )

            await eventually(refused_elsewhere, what="a node without the shard to refuse")
        finally:
            await store.close()
