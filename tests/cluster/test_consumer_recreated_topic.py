"""A topic deleted and created again under its name, with its partition count, through
another node of a three-node cluster on one real etcd: the node serving the consumer
group learns the new topic id from etcd, and huddle's ``Member(group_protocol="consumer")``
members revoke the old topic's partitions and are assigned the new one's."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from huddle.client import Admin, Member
from tests.client.test_consumer_member import Recorder
from tests.cluster.test_failover import GROUP, PARTITIONS, cluster, owner_of
from tests.etcd import Etcd, etcd
from tests.helpers import settled, wait_until

__all__ = ["etcd"]  # the fixture


@pytest.mark.e2e
async def test_members_give_up_a_topic_created_again_on_another_node(etcd: Etcd) -> None:
    async with cluster(etcd, 3) as nodes, AsyncExitStack() as stack:
        ports = [port for _, port, _ in nodes]
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports)
        owner = await owner_of(bootstrap, GROUP)
        elsewhere = f"127.0.0.1:{next(p for p in ports if p != owner)}"
        async with Admin(elsewhere) as admin:
            await admin.create_topic("t", len(PARTITIONS))
        listeners = [Recorder() for _ in range(2)]
        members = [
            await stack.enter_async_context(
                Member(
                    bootstrap,
                    group_id=GROUP,
                    topics=["t"],
                    listener=listener,
                    group_protocol="consumer",
                )
            )
            for listener in listeners
        ]
        await wait_until(lambda: settled(members, PARTITIONS), what="the group settles")
        before = [len(listener.assigned) for listener in listeners]
        async with Admin(elsewhere) as admin:
            await admin.delete_topic("t")
            await admin.create_topic("t", len(PARTITIONS))

        def given_again() -> bool:
            return all(
                listener.revoked and len(listener.assigned) > count
                for listener, count in zip(listeners, before, strict=True)
            ) and settled(members, PARTITIONS)

        await wait_until(given_again, what="every member revoked t and was given it again")
        revoked = frozenset().union(*(r for listener in listeners for r in listener.revoked))
        assert revoked == PARTITIONS
        assert all(listener.lost == [] for listener in listeners)
